"""Epoch metrics and evaluation losses for :meth:`singa.model.Model.fit` and
:meth:`~singa.model.Model.evaluate`.

A :class:`Metric` keeps float64 running sums over every sample it is shown, so its
:meth:`~Metric.result` is the metric of the whole epoch (not a mean of batch means).
Metrics are chosen by name (``"accuracy"``, ``"top5_accuracy"`` or any
``"topK_accuracy"``, ``"mae"``, ``"mse"``) or as :class:`Metric` objects.

Example::

    from singa import metrics
    acc = metrics.get("accuracy")
    for logits, labels in batches:
        acc.update(logits, labels)
    acc.result()         # correct / seen over every batch
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from singa.kernels.classification import count_correct
from singa.kernels.jit import takes_floats

__all__ = [
    "Metric",
    "Mean",
    "Accuracy",
    "TopKAccuracy",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "get",
    "default_metrics",
    "softmax_cross_entropy",
    "squared_error",
    "default_loss",
]


class Metric:
    """A metric summed in float64 over every sample shown: ``total / count``.

    Subclasses define :meth:`batch_sum` (the batch's sum of per-sample values and how
    many samples it holds). ``name`` is the key in the logs (``val_`` prefixed on
    validation data)."""

    name = "metric"

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """The sum of the metric over the batch's samples, and their number."""
        raise NotImplementedError(f"{type(self).__name__}.batch_sum")

    def update(self, out: Any, y: Any) -> None:
        """Add one batch: ``out`` the model's output, ``y`` the targets."""
        out = out if type(out) is np.ndarray else np.asarray(out)
        total, count = self.batch_sum(out, y if type(y) is np.ndarray else np.asarray(y))
        self.total += float(total)
        self.count += int(count)

    def result(self) -> float:
        """The metric over every sample shown (nan before any)."""
        return self.total / self.count if self.count else math.nan

    def reset(self) -> None:
        """Forget every sample shown."""
        self.total, self.count = 0.0, 0

    def get_state(self) -> list:
        """The running sums as JSON values ``[total, count]`` (for resuming and for adding
        the sums of data-parallel ranks)."""
        return [self.total, self.count]

    def set_state(self, state: Sequence) -> None:
        """The inverse of :meth:`get_state`."""
        self.total, self.count = float(state[0]), int(state[1])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Mean(Metric):
    """The mean of values given with their weight (``update(value, n)``): e.g. the
    loss, each batch's mean loss weighted by its number of samples."""

    def __init__(self, name: str = "loss"):
        super().__init__()
        self.name = name

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """``out`` is a batch's mean value, ``y`` its number of samples."""
        n = int(y)
        return float(np.asarray(out, dtype=np.float64).reshape(-1)[0]) * n, n

    def update(self, out: Any, y: Any) -> None:
        """Add one batch's mean ``out`` (a number) weighted by its size ``y``."""
        if isinstance(out, float | int):
            self.total += float(out) * int(y)
            self.count += int(y)
        else:
            super().update(out, y)


def _check_classes(out: np.ndarray, y: np.ndarray, what: str) -> np.ndarray:
    if out.ndim != 2:
        raise ValueError(f"{what} needs outputs of shape (N, classes), got {out.shape}")
    labels = y.reshape(-1)
    if labels.shape[0] != out.shape[0]:
        raise ValueError(f"{what}: {out.shape[0]} outputs but {labels.shape[0]} labels")
    return labels if np.issubdtype(labels.dtype, np.integer) else labels.astype(np.int64)


class Accuracy(Metric):
    """The fraction of samples whose largest output is at the label's index (labels
    as class indices (N,), or one-hot (N, classes))."""

    name = "accuracy"

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """Correct predictions in the batch, and its size."""
        if y.ndim == 1 and y.dtype.kind in "iu" and out.ndim == 2 and len(y) == len(out) and out.shape[1]:
            # the common case, checked in a few attribute reads: fit's step pays for this
            # call on every batch (a compiled loop: see singa.kernels.classification)
            if takes_floats(out):
                return count_correct(out, y), len(y)
            return np.count_nonzero(out.argmax(axis=1) == y), len(y)
        if y.ndim == 2 and y.shape == out.shape:
            y = y.argmax(axis=1)
        labels = _check_classes(out, y, "accuracy")
        return int((out.argmax(axis=1) == labels).sum()), len(labels)


class TopKAccuracy(Metric):
    """The fraction of samples whose label is among the ``k`` largest outputs (ties
    counted as numpy's stable sort orders them)."""

    def __init__(self, k: int = 5):
        super().__init__()
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"TopKAccuracy: k must be an int >= 1, got {k!r}")
        self.k = k
        self.name = f"top{k}_accuracy"

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """Samples with the label in the top k, and the batch size."""
        labels = _check_classes(out, y, self.name)
        k = min(self.k, out.shape[1])
        top = np.argsort(-out, axis=1, kind="stable")[:, :k]
        return int((top == labels[:, None]).any(axis=1).sum()), len(labels)


def _diff(out: np.ndarray, y: np.ndarray, what: str) -> np.ndarray:
    if out.size != y.size:
        raise ValueError(f"{what}: outputs {out.shape} and targets {y.shape} differ in size")
    return out.astype(np.float64).reshape(len(out), -1) - y.astype(np.float64).reshape(len(out), -1)


class MeanAbsoluteError(Metric):
    """The mean of ``|out - y|`` over every element of every sample."""

    name = "mae"

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """The sum of per-sample mean absolute errors, and the batch size."""
        return float(np.abs(_diff(out, y, self.name)).mean(axis=1).sum()), len(out)


class MeanSquaredError(Metric):
    """The mean of ``(out - y) ** 2`` over every element of every sample."""

    name = "mse"

    def batch_sum(self, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """The sum of per-sample mean squared errors, and the batch size."""
        return float(np.square(_diff(out, y, self.name)).mean(axis=1).sum()), len(out)


_NAMES: dict[str, Callable[[], Metric]] = {
    "accuracy": Accuracy,
    "acc": Accuracy,
    "mae": MeanAbsoluteError,
    "mean_absolute_error": MeanAbsoluteError,
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
}


def get(metric: str | Metric) -> Metric:
    """A fresh :class:`Metric` for a name (``accuracy``, ``topK_accuracy``, ``mae``,
    ``mse``), or the given Metric object itself."""
    if isinstance(metric, Metric):
        return metric
    if not isinstance(metric, str):
        raise TypeError(f"metrics: expected a name or a Metric, got {metric!r}")
    key = metric.lower()
    m = re.fullmatch(r"top_?(\d+)(_accuracy|_acc)?", key)
    if m:
        return TopKAccuracy(int(m.group(1)))
    if key not in _NAMES:
        raise ValueError(f"unknown metric {metric!r}; known: accuracy, topK_accuracy (e.g. top5), mae, mse")
    return _NAMES[key]()


def _is_labels(y: np.ndarray) -> bool:
    return np.issubdtype(y.dtype, np.integer)


def default_metrics(y: np.ndarray) -> list[Metric]:
    """The metrics shown when none are asked for: accuracy for integer class labels,
    mean absolute error for real-valued targets."""
    return [Accuracy()] if _is_labels(np.asarray(y)) else [MeanAbsoluteError()]


def softmax_cross_entropy(out: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample softmax cross-entropy of logits ``out`` (N, classes) against class
    labels ``y`` (N,), in float64."""
    logits = np.asarray(out, dtype=np.float64)
    labels = _check_classes(logits, np.asarray(y), "softmax_cross_entropy")
    m = logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=1)) + m[:, 0]
    return lse - logits[np.arange(len(labels)), labels]


def squared_error(out: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample mean squared error, in float64 (SINGA's ``MSELoss`` is half of it per
    element summed; this is the plain mean)."""
    return np.square(_diff(np.asarray(out), np.asarray(y), "squared_error")).mean(axis=1)


def default_loss(y: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The loss :meth:`~singa.model.Model.evaluate` reports when given none: softmax
    cross-entropy for integer class labels, mean squared error otherwise."""
    return softmax_cross_entropy if _is_labels(np.asarray(y)) else squared_error
