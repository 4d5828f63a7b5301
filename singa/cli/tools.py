"""``singa-train evaluate`` and ``singa-train export``: rebuild the model saved in a
checkpoint (from the run state singa-train stores in it, or from ``--model`` and
``--data``), load it, then evaluate it or export it to ONNX."""

from __future__ import annotations

import time
from typing import Any

import click
import numpy as np

from singa import data as sdata
from singa import sonnx
from singa.checkpoint import CheckpointError
from singa.cli import lm_tools
from singa.cli.common import (
    check_writable,
    create_model,
    evaluate,
    load_data,
    make_device,
    placeholder,
    read_run_state,
)
from singa.cli.errors import CliError
from singa.cli.lm import text_run_meta
from singa.cli.lora import export_lora, restore_lora
from singa.cli.regression import evaluate_regression, target_scale
from singa.cli.user_options import stored_data_options

__all__ = ["evaluate_checkpoint", "export_checkpoint", "load_checkpoint_model"]


def _info_from(run: dict | None, data_name: str | None) -> sdata.DatasetInfo:
    """The dataset description: the checkpoint's (classes, channels, image size) when
    it has one and ``data_name`` does not override it, else the registry's."""
    stored = (run or {}).get("dataset") or {}
    if data_name is not None and sdata.parse_data_spec(data_name) is not None:
        data_name = None  # your own data: the model is the checkpoint's, whatever the data
    if data_name is None and stored:
        known = stored.get("name") in sdata.available_datasets() and stored.get("name") != "synthetic"
        base = sdata.dataset_info(stored["name"]) if known else None
        if stored.get("class_names"):  # user data: the class names kept in the checkpoint
            return sdata.DatasetInfo(
                stored["name"],
                int(stored["num_classes"]),
                int(stored["num_channels"]),
                tuple(int(v) for v in stored["image_size"]),
                tuple(str(c) for c in stored["class_names"]),
                base.splits if base else ("train", "val"),
            )
        return sdata.DatasetInfo(
            stored["name"],
            int(stored["num_classes"]),
            int(stored["num_channels"]),
            tuple(int(v) for v in stored["image_size"]),
            base.class_names if base else tuple(str(i) for i in range(int(stored["num_classes"]))),
            base.splits if base else ("train", "test"),
        )
    if data_name is None:
        raise CliError("the checkpoint holds no singa-train run state: give --model and --data")
    return sdata.dataset_info(data_name)


def load_checkpoint_model(path: str, model_name: str | None, data_name: str | None, dev: Any) -> tuple:
    """(model in evaluation mode with the checkpoint's states, its run state or None,
    the dataset description, the model name)."""
    try:
        run = read_run_state(path)
    except CheckpointError as e:
        raise CliError(f"cannot read the checkpoint {path}: {str(e).splitlines()[0]}", details=str(e)) from e
    cfg = (run or {}).get("config") or {}
    name = model_name or cfg.get("model")
    if name is None:
        raise CliError(f"{path} holds no singa-train run state: give --model (and --data)")
    info = _info_from(run, data_name)
    dev.set_rand_seed(0)
    model_args = cfg.get("model_args") or () if name == cfg.get("model") else ()
    model = create_model(name, info, model_args)
    try:
        model.compile(
            [placeholder(1, info, dev)],
            is_train=False,
            use_graph=False,
            precision=cfg.get("precision", "float32"),
        )
    except ValueError as e:
        raise CliError(f"{name} does not fit {info.name}: {e}") from e
    model = restore_lora(model, cfg)  # a --lora run's states include its adapters
    try:
        model.load_states(path)
    except CheckpointError as e:
        lines = str(e).splitlines()
        first = lines[1].strip() if len(lines) > 1 else lines[0]
        more = f" (+{len(lines) - 2} more)" if len(lines) > 2 else ""
        raise CliError(
            f"checkpoint {path} does not match {name} on {info.name}: {first}{more}", details=str(e)
        ) from e
    model.eval()
    return model, run, info, name


def evaluate_checkpoint(
    path: str,
    model_name: str | None,
    data_name: str | None,
    device: str,
    data_dir: str | None,
    download: bool,
    split: str,
    batch_size: int,
) -> dict:
    """Loss and accuracy of a checkpoint's model on a split of its dataset (a text run's:
    loss and perplexity on its text, :mod:`singa.cli.lm_tools`)."""
    dev = make_device(device)
    if text_run_meta(path) is not None:
        return lm_tools.evaluate_lm(path, dev, split, batch_size)
    model, run, info, name = load_checkpoint_model(path, model_name, data_name, dev)
    other = data_name is not None and data_name != info.name and sdata.parse_data_spec(data_name) is not None
    opts = stored_data_options(run, info, whole=other)
    ds = load_data(data_name or info.name, data_dir, download, False, opts)
    if ds.info.num_classes != info.num_classes or ds.info.sample_shape != info.sample_shape:
        raise CliError(
            f"{ds.info.name} ({ds.info.num_classes} classes, {ds.info.sample_shape}) does not fit the "
            f"checkpoint's model ({info.num_classes} classes, {info.sample_shape})"
        )
    norm = (run or {}).get("normalization")
    if norm and (data_name is None or data_name == info.name or other):
        mean = np.asarray(norm["mean"], np.float32)
        std = np.asarray(norm["std"], np.float32)
    else:
        mean, std = sdata.channel_mean_std(ds.x_train)
    x, y = (ds.x_train, ds.y_train) if split == "train" or other else (ds.x_test, ds.y_test)
    scale = target_scale(run)
    if scale is not None:  # a regression: MSE and MAE in the target's units
        y = x.y if y is None else y
        x = sdata.ArrayDataset(x.x, ((np.asarray(y, np.float64) - scale.mean) / scale.std).astype(np.float32))
    loader = sdata.DataLoader(x, y if scale is None else None, batch_size, mean=mean, std=std)
    t0 = time.perf_counter()
    if scale is not None:
        mse, mae, n = evaluate_regression(scale, model, loader, dev)
        scores = {"loss": mse / scale.std**2, "mse": mse, "mae": mae}
    else:
        loss, acc, n = evaluate(model, loader, dev)
        scores = {"loss": loss, "accuracy": acc}
    return {
        "model": name,
        "data": ds.info.name,
        "split": "all" if other else ds.info.splits[0] if split == "train" else ds.info.test_split,
        "samples": n,
        **scores,
        "time_s": time.perf_counter() - t0,
        "checkpoint": path,
    }


def export_checkpoint(
    path: str,
    onnx_path: str | None,
    model_name: str | None,
    data_name: str | None,
    device: str,
    opset: int | None,
    lora: dict | None = None,
) -> dict:
    """Write a checkpoint's model to an ONNX file (``lora``: the options of
    :func:`singa.cli.lora.export_lora`, e.g. ``merge``)."""
    onnx_path = check_writable(onnx_path, "ONNX file") if onnx_path is not None else None
    dev = make_device(device)
    if text_run_meta(path) is not None:
        if onnx_path is None:
            raise CliError("a text run's checkpoint exports to ONNX only: give --onnx PATH")
        return lm_tools.export_lm(path, onnx_path, dev, opset)
    model, run, info, name = load_checkpoint_model(path, model_name, data_name, dev)
    model = export_lora(model, run, path, lora or {}, click.echo)
    result = {"model": name, "onnx": onnx_path, "input": "Nx" + "x".join(map(str, info.sample_shape))}
    if onnx_path is None:
        return result
    x = placeholder(1, info, dev)
    try:
        sonnx.export_model(model, onnx_path, [x], opset=opset)
    except OSError as e:
        raise CliError(f"cannot write the ONNX file {onnx_path}: {e.strerror or e}") from e
    return result
