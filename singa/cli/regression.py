"""``singa-train --task regression`` (a ``csv:FILE`` whose target column is a number):
standardised targets, the mean-squared-error loss, and MSE/MAE in the target's units.

The features are standardised as for classification. The target is standardised too
(``(y - mean) / std`` of the training split), so one learning rate fits any target's
scale; the model learns the standardised target with :class:`singa.layer.MeanSquareError`
(the zoo's ``criterion``; a model of your own must have a ``criterion`` attribute, or
train with ``Model.fit`` in Python). The target's mean and std are kept in the checkpoint
(``target_normalization``): every reported MSE and MAE and every prediction is in the
target's own units, the loss (``train_loss``, ``val_loss``) is the MSE of the
standardised target (the reported MSE divided by std squared).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from singa import data, layer, metrics, tensor
from singa.cli.errors import CliError

__all__ = [
    "TargetScale",
    "Unstandardised",
    "prepare_targets",
    "use_mse",
    "evaluate_regression",
    "epoch_metrics",
    "format_regression",
    "target_scale",
]


class TargetScale:
    """The training split's target mean and std (``y = mean + std * out``)."""

    def __init__(self, mean: float, std: float):
        self.mean = float(mean)
        self.std = float(std)

    def to_json(self) -> dict:
        """As stored in the checkpoint's run state."""
        return {"mean": self.mean, "std": self.std}

    def unscale(self, out: np.ndarray) -> np.ndarray:
        """Model outputs (standardised) in the target's units, float64."""
        return np.asarray(out, np.float64) * self.std + self.mean


def target_scale(run: dict | None) -> TargetScale | None:
    """The target scale kept in a checkpoint's run state (None: a classifier)."""
    t = (run or {}).get("target_normalization")
    return TargetScale(t["mean"], t["std"]) if isinstance(t, dict) else None


def prepare_targets(ds: Any) -> TargetScale | None:
    """For regression user data: standardise both splits' targets in place (as (N, 1)
    float32, the model's output shape); returns the scale (None for classification)."""
    if getattr(ds, "task", "classification") != "regression":
        return None
    y = np.asarray(ds.x_train.y, np.float64)
    std = float(y.std())
    scale = TargetScale(float(y.mean()), std if std > 0 else 1.0)
    for attr in ("x_train", "x_test"):
        part = getattr(ds, attr)
        yt = ((np.asarray(part.y, np.float64) - scale.mean) / scale.std).astype(np.float32)
        setattr(ds, attr, data.ArrayDataset(part.x, yt.reshape(-1, 1)))
    return scale


def use_mse(model: Any, spec: str) -> None:
    """Train ``model`` with the mean squared error (its ``criterion``)."""
    if not hasattr(model, "criterion"):
        raise CliError(
            f"--task regression: {spec} has no 'criterion' attribute to set to the mean squared "
            "error (zoo models have one); add one its train_one_batch uses, or train in Python"
        )
    model.criterion = layer.MeanSquareError()


class Unstandardised(metrics.Metric):
    """``base`` computed on outputs and targets taken back to the target's units."""

    def __init__(self, base: metrics.Metric, scale: TargetScale):
        super().__init__()
        self.base = base
        self.scale = scale
        self.name = base.name

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """The base metric's batch sum in the target's units."""
        return self.base.batch_sum(self.scale.unscale(out), self.scale.unscale(y))


def evaluate_regression(
    scale: TargetScale, model: Any, loader: Any, dev: Any, stop: Any = None, max_batches: int | None = None
) -> tuple[float, float, int]:
    """``(mse, mae, n)`` of ``model`` on ``loader`` in the target's units (evaluation
    mode; the previous mode restored). ``stop()`` True raises
    :class:`singa.cli.common.EvalStopped`, as :func:`singa.cli.common.evaluate` does."""
    from singa.cli.common import EvalStopped

    prev = model.training
    model.eval()
    mse, mae = metrics.MeanSquaredError(), metrics.MeanAbsoluteError()
    try:
        for xb, yb in itertools.islice(loader, max_batches):
            if stop is not None and stop():
                raise EvalStopped
            out = scale.unscale(model(tensor.from_numpy(xb, dev)).to_numpy())
            y = scale.unscale(yb)
            mse.update(out, y)
            mae.update(out, y)
    finally:
        model.train(prev)
    return mse.result(), mae.result(), mse.count


def _finite(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def epoch_metrics(scale: TargetScale, loss_sum: float, mae_sum: float, seen: int, val: dict) -> dict:
    """The regression fields of an epoch record: train/val MSE and MAE (target units)."""
    train_loss = loss_sum / seen if seen else None
    return {
        "train_mse": _finite(train_loss * scale.std**2) if train_loss is not None else None,
        "train_mae": mae_sum / seen if seen else None,
        "val_mse": _finite(val.get("val_mse")),
        "val_mae": _finite(val.get("val_mae")),
    }


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}"


def format_regression(rec: dict, split: str) -> list[str]:
    """The train and held-out parts of a regression epoch's line."""
    return [
        f"train loss {_num(rec.get('train_loss'))} mse {_num(rec.get('train_mse'))} "
        f"mae {_num(rec.get('train_mae'))}",
        f"{split} loss {_num(rec.get('val_loss'))} mse {_num(rec.get('val_mse'))} "
        f"mae {_num(rec.get('val_mae'))}",
    ]
