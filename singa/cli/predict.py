"""``singa-train predict CHECKPOINT INPUT... [--top-k 5] [--json]``: the classes a
checkpoint's model gives to images, folders of images and npz files.

Images are decoded as in training (the checkpoint's channels and image size) and
normalised with the training split's statistics kept in the checkpoint; an npz
contributes its ``x`` (else ``x_test``, ``x_val``, ``x_train``) samples, named
``FILE[i]``, as does a CSV file (its rows: the feature columns, with or without the
training's target column, whose value is ignored). Each input is printed with its top-k
class names (the checkpoint's) and probabilities; a regression's (``--task regression``)
with its predicted value in the target's units. ``--json`` prints one JSON record per
line instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import click
import numpy as np

from singa import data, tensor
from singa.cli.common import make_device
from singa.cli.errors import CliError, reported
from singa.cli.regression import target_scale
from singa.data.csv_dataset import read_csv_table

__all__ = ["predict", "predict_records", "list_inputs"]

#: npz arrays predict reads, in order of preference
NPZ_KEYS = ("x", "x_test", "x_val", "x_train")


def _folder_images(folder: str) -> list[str]:
    out = []
    for here, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(
            os.path.join(here, n)
            for n in sorted(names)
            if not n.startswith(".") and n.lower().endswith(data.IMG_EXTENSIONS)
        )
    return out


def list_inputs(inputs: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(kind, path)`` for every input: folders expanded into their images (sorted,
    recursively), ``.npz`` files kept whole, anything else taken as an image."""
    items: list[tuple[str, str]] = []
    for p in inputs:
        if os.path.isdir(p):
            found = _folder_images(p)
            if not found:
                raise CliError(f"no images in the folder {p} (extensions: {' '.join(data.IMG_EXTENSIONS)})")
            items.extend(("image", f) for f in found)
        elif p.lower().endswith((".npz", ".csv")):
            items.append((p.lower().rsplit(".", 1)[1], p))
        else:
            items.append(("image", p))
    return items


def _npz_samples(path: str) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as z:
            key = next((k for k in NPZ_KEYS if k in z.files), None)
            if key is None:
                raise CliError(f"{path}: has none of the arrays {', '.join(NPZ_KEYS)}")
            return data.as_samples(z[key], path, key)
    except (ValueError, OSError, EOFError) as e:
        raise CliError(f"{path}: not a readable npz file without pickle ({e})") from e


def _csv_samples(path: str, width: int, cfg: dict, info: Any) -> np.ndarray:
    """The feature rows of a CSV file: ``width`` columns, or those and the target column."""
    try:
        names, rows, line0 = read_csv_table(path)
        if len(names) == width + 1:  # the training's layout: the target column is dropped
            names_ = tuple(info.class_names) or None
            return data.CSVDataset(path, cfg.get("target"), cfg.get("task", "classification"), names_).x
        if len(names) != width:
            raise CliError(f"{path}: {len(names)} columns, the model takes {width} features")
        x = np.empty((len(rows), width), np.float32)
        for r, row in enumerate(rows):
            for c, cell in enumerate(row):
                try:
                    x[r, c] = float(cell)
                except ValueError:
                    raise CliError(
                        f"{path}: row {line0 + r}, column {names[c]!r}: {cell!r} is not a number"
                    ) from None
        return x
    except (OSError, ValueError) as e:
        raise CliError(str(e).splitlines()[0]) from e


def _samples(items: list[tuple[str, str]], info: Any, cfg: dict) -> Iterator[tuple[str, np.ndarray]]:
    """(name, float32 sample of the model's shape in [0, 1]) for every input."""
    shape = tuple(info.sample_shape)
    is_image = len(shape) == 3 and shape[0] in (1, 3)
    size: Any = shape[1:]  # an image's (H, W)
    for kind, path in items:
        if kind in ("npz", "csv"):
            if kind == "csv" and len(shape) != 1:
                raise CliError(f"{path}: the model takes samples of shape {shape}, not table rows")
            x = _npz_samples(path) if kind == "npz" else _csv_samples(path, shape[0], cfg, info)
            if x.shape[1:] != shape:
                raise CliError(f"{path}: samples of shape {x.shape[1:]}, the model takes {shape}")
            for i, sample in enumerate(x):
                yield f"{path}[{i}]", sample
            continue
        if not is_image:
            raise CliError(f"{path}: the model takes samples of shape {shape}, not images (give an npz)")
        arr = data.read_image(path, "L" if shape[0] == 1 else "RGB", size)
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        yield path, arr.astype(np.float32) / np.float32(255)


def _batches(it: Iterator, size: int) -> Iterator[tuple[list[str], np.ndarray]]:
    names: list[str] = []
    xs: list[np.ndarray] = []
    for name, x in it:
        names.append(name)
        xs.append(x)
        if len(xs) == size:
            yield names, np.stack(xs)
            names, xs = [], []
    if xs:
        yield names, np.stack(xs)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def predict_records(
    checkpoint_path: str, inputs: tuple[str, ...], top_k: int, device: str, batch_size: int
) -> Iterator[dict]:
    """One record per input: ``{"input", "predictions": [{"class", "index", "probability"}]}``
    (a regression: ``{"input", "prediction": value}``, in the target's units)."""
    from singa.cli.tools import load_checkpoint_model

    items = list_inputs(inputs)
    dev = make_device(device)
    model, run, info, _name = load_checkpoint_model(checkpoint_path, None, None, dev)
    norm = (run or {}).get("normalization")
    if not norm:
        raise CliError(f"{checkpoint_path} holds no singa-train run state (its normalisation and classes)")
    mean, std = np.asarray(norm["mean"], np.float32), np.asarray(norm["std"], np.float32)
    names = info.class_names
    k = min(top_k, info.num_classes)
    scale = target_scale(run)
    for batch_names, xb in _batches(_samples(items, info, run.get("config") or {}), batch_size):
        (xn,) = list(data.DataLoader(xb, batch_size=len(xb), mean=mean, std=std))
        out = model(tensor.from_numpy(xn, dev)).to_numpy()
        if scale is not None:
            for name, v in zip(batch_names, scale.unscale(out)):
                yield {"input": name, "prediction": float(v[0]) if v.size == 1 else v.tolist()}
            continue
        probs = _softmax(out.astype(np.float64))
        for name, p in zip(batch_names, probs):
            top = np.argsort(-p, kind="stable")[:k]
            yield {
                "input": name,
                "predictions": [
                    {
                        "class": names[i] if i < len(names) else str(i),
                        "index": int(i),
                        "probability": float(p[i]),
                    }
                    for i in top
                ],
            }


@click.command("predict", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint_path", metavar="CHECKPOINT", type=click.Path(exists=True, dir_okay=False))
@click.argument("inputs", metavar="INPUT...", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True, help="Classes per input.")
@click.option("--json", "as_json", is_flag=True, help="One JSON record per input and line.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--device", type=click.Choice(["cpu", "gpu"], case_sensitive=False), default="cpu", show_default=True
)
@click.option("-v", "--verbose", is_flag=True, help="Print more details.")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure.")
def predict(
    checkpoint_path: str,
    inputs: tuple[str, ...],
    top_k: int,
    as_json: bool,
    batch_size: int,
    device: str,
    verbose: bool,
    debug: bool,
) -> None:
    """Print the top-k classes and probabilities the model saved in CHECKPOINT gives to
    each INPUT (image files, folders of images, npz and CSV files); a regression's
    predicted value."""
    with reported(debug, verbose):
        for rec in predict_records(checkpoint_path, inputs, top_k, device.lower(), batch_size):
            if as_json:
                click.echo(json.dumps(rec))
            elif "prediction" in rec:  # a regression
                click.echo(f"{rec['input']}: {rec['prediction']:.6g}")
            else:
                top = ", ".join(f"{p['class']} {100 * p['probability']:.1f}%" for p in rec["predictions"])
                click.echo(f"{rec['input']}: {top}")
