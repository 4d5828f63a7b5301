"""Pieces shared by ``singa-train``'s commands: devices, data, models, output paths,
optimizers and evaluation."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np

from singa import checkpoint, data, device, opt, tensor
from singa.cli.config import TrainConfig
from singa.cli.errors import CliError

__all__ = [
    "RUN_STATE_KEY",
    "EvalStopped",
    "create_model",
    "placeholder",
    "make_device",
    "load_data",
    "check_writable",
    "make_optimizer",
    "evaluate",
    "count_params",
    "read_run_state",
]

#: the aux_states key under which singa-train stores its run state in checkpoints
RUN_STATE_KEY = "singa_train"


class EvalStopped(Exception):
    """:func:`evaluate` was asked to stop."""


def make_device(name: str) -> device.Device:
    """The CPU, or the first CUDA GPU (a :class:`CliError` says what is missing)."""
    if name == "cpu":
        return device.get_default_device()
    if device.get_num_gpus() == 0:
        try:
            import cupy  # noqa: F401
        except ImportError:
            raise CliError("--device gpu needs cupy, which is not installed: pip install '.[gpu]'") from None
        raise CliError("--device gpu: cupy is installed but sees no CUDA GPU")
    return device.create_cuda_gpu()


def load_data(
    name: str, data_dir: str | None, download: bool, progress: bool, options: dict | None = None
) -> Any:
    """Load a dataset, or the user data of a spec (``imagefolder:DIR``, ``npz:FILE``,
    ``csv:FILE``; ``options`` are :func:`singa.data.load_user_data`'s); a missing one is a
    one-line :class:`CliError` with the full explanation (where singa looked, how to get
    the files) as its details."""
    if data.parse_data_spec(name) is not None:
        try:
            return data.load_user_data(name, **(options or {}))
        except (OSError, ValueError) as e:
            raise CliError(str(e).splitlines()[0], details=str(e)) from e
    try:
        return data.load(name, data_dir=data_dir, download=download, progress=progress)
    except data.DatasetNotFoundError as e:
        where = f" or in --data-dir {data_dir}" if data_dir else ""
        dl = "the download failed" if download else "downloading is off (--no-download)"
        raise CliError(
            f"dataset {name!r} not found: no files in the cache folder {data.cache_dir()}{where}, and {dl}",
            details=str(e),
        ) from e
    except (data.ChecksumError, data.DataFormatError, data.DownloadError) as e:
        raise CliError(f"dataset {name!r}: {str(e).splitlines()[0]}", details=str(e)) from e


def check_writable(path: str, what: str) -> str:
    """Make sure ``path`` can be written (creating its folder); returns it expanded."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise CliError(f"cannot write the {what} {path}: it is a folder")
    parent = p.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(
            f"cannot write the {what} {path}: cannot create the folder {parent} ({e.strerror})"
        ) from e
    if not parent.is_dir():
        raise CliError(f"cannot write the {what} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"cannot write the {what} {path}: the folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise CliError(f"cannot write the {what} {path}: permission denied")
    return str(p)


def make_optimizer(cfg: TrainConfig, steps_per_epoch: int) -> opt.Optimizer:
    """The optimizer of ``cfg`` with its learning-rate schedule over the run
    (``epochs * steps_per_epoch`` steps; ``--max-steps`` does not change the schedule)."""
    lr = cfg.effective_lr
    total = max(1, cfg.epochs * steps_per_epoch)
    decay = max(1, total - cfg.warmup)
    if cfg.scheduler == "constant":
        sched: Any = opt.Constant(lr, warmup_steps=cfg.warmup) if cfg.warmup else lr
    elif cfg.scheduler == "cosine":
        sched = opt.CosineDecay(lr, decay_steps=decay, warmup_steps=cfg.warmup)
    elif cfg.scheduler == "step":
        sched = opt.StepDecay(lr, step_size=max(1, decay // 3), gamma=0.1, warmup_steps=cfg.warmup)
    elif cfg.scheduler == "exponential":
        sched = opt.ExponentialDecay(lr, decay_steps=decay, decay_rate=0.01, warmup_steps=cfg.warmup)
    else:  # pragma: no cover - click validates the choice
        raise CliError(f"unknown scheduler {cfg.scheduler!r}")
    wd = cfg.effective_weight_decay
    mom = cfg.effective_momentum
    name = cfg.optimizer
    if name == "sgd":
        return opt.SGD(sched, momentum=mom, weight_decay=wd)
    if name == "adam":
        return opt.Adam(sched, weight_decay=wd)
    if name == "adamw":
        return opt.AdamW(sched, weight_decay=wd)
    if name == "rmsprop":
        return opt.RMSProp(sched, momentum=mom, weight_decay=wd)
    if name == "adagrad":
        return opt.AdaGrad(sched, weight_decay=wd)
    raise CliError(f"unknown optimizer {name!r}")  # pragma: no cover - click validates the choice


def count_params(model: Any) -> int:
    """Number of trainable parameter values (frozen ones, without ``requires_grad``, not counted)."""
    return sum(t.size() for t in model.get_params().values() if t.requires_grad)


def create_model(name: str, info: data.DatasetInfo, model_args: Any = ()) -> Any:
    """The model ``name`` (a zoo name or a ``file.py:Name`` / ``module:Name`` spec) for
    the dataset's classes, channels and image size, with ``--model-arg`` settings."""
    from singa.cli.model_spec import build_model

    return build_model(name, info, model_args)


def placeholder(batch: int, info: data.DatasetInfo, dev: device.Device) -> tensor.Tensor:
    """A zero batch of the dataset's sample shape (for ``Model.compile``)."""
    return tensor.Tensor((batch, *info.sample_shape), dev, tensor.float32, requires_grad=False)


def evaluate(
    model: Any, loader: data.DataLoader, dev: device.Device, stop: Any = None, max_batches: int | None = None
) -> tuple[float, float, int]:
    """Mean softmax cross-entropy and accuracy of ``model`` on ``loader`` (in
    evaluation mode; the previous mode is restored), on its first ``max_batches``
    batches if given. ``stop()`` returning True ends the loop early by raising
    :class:`EvalStopped`."""
    prev = model.training
    model.eval()
    loss_sum = 0.0
    correct = 0
    n = 0
    try:
        for xb, yb in itertools.islice(loader, max_batches):
            if stop is not None and stop():
                raise EvalStopped
            out = model(tensor.from_numpy(xb, dev))
            logits = out.to_numpy().astype(np.float64)
            m = logits.max(axis=1, keepdims=True)
            lse = np.log(np.exp(logits - m).sum(axis=1)) + m[:, 0]
            loss_sum += float((lse - logits[np.arange(len(yb)), yb]).sum())
            correct += int((logits.argmax(axis=1) == yb).sum())
            n += len(yb)
    finally:
        model.train(prev)
    if n == 0:
        return float("nan"), float("nan"), 0
    return loss_sum / n, correct / n, n


def read_run_state(path: str) -> dict | None:
    """The singa-train run state stored in a checkpoint (None if it holds none);
    reads only the file's JSON parts (the arrays are checked when loading)."""
    info = checkpoint.read(path)
    run = info.aux_values.get(RUN_STATE_KEY)
    return run if isinstance(run, dict) else None
