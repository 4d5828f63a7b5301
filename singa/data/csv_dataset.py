"""A table of numbers in a CSV file as a dataset: feature columns and one target column.

The first row is a header when any of its cells is not a number (column names), else
the columns are named by their position. Every feature must be a number: a cell that is
not, or an empty one (also ``NA``, ``NaN``, ``null``), raises :class:`DataFormatError`
naming the file, the row (1-based, as an editor shows it) and the column. The target is
a class label (any text; classes sorted, numerically when they are all numbers) or,
for ``task="regression"``, a number.

Example::

    from singa import data
    ds = data.CSVDataset("iris.csv", target="species")
    ds.class_names            # ('setosa', 'versicolor', 'virginica')
    x, y = ds.x, ds.y         # float32 (N, F), int32 (N,)
"""

from __future__ import annotations

import csv
import math
import os
from typing import Any

import numpy as np

from singa.data.dataset import ArrayDataset
from singa.data.idx import DataFormatError

__all__ = ["CSVDataset", "read_csv_table"]

_MISSING = ("", "na", "n/a", "nan", "null", "none", "?")


def _number(cell: str) -> float | None:
    try:
        v = float(cell)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def read_csv_table(path: str | os.PathLike) -> tuple[list[str], list[list[str]], int]:
    """(column names, rows of cells, file line of the first data row) of a CSV file."""
    path = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [r for r in csv.reader(f)]
    except UnicodeDecodeError as e:
        raise DataFormatError(f"{path}: not a text CSV file ({e.reason})") from None
    nonblank = [(i, r) for i, r in enumerate(rows, 1) if any(c.strip() for c in r)]
    if not nonblank:
        raise DataFormatError(f"{path}: the CSV file is empty")
    first_line, first = nonblank[0]
    header = any(_number(c.strip()) is None for c in first)
    names = [c.strip() or f"column {k + 1}" for k, c in enumerate(first)] if header else None
    body = nonblank[1:] if header else nonblank
    if not body:
        raise DataFormatError(f"{path}: the CSV file has a header but no data rows")
    width = len(first)
    for line, r in body:
        if len(r) != width:
            raise DataFormatError(f"{path}: row {line} has {len(r)} cells, the first row has {width}")
    if names is None:
        names = [str(k) for k in range(width)]
    return names, [r for _, r in body], body[0][0]


def _column_index(names: list[str], target: str | int | None, path: str) -> int:
    if target is None:
        return len(names) - 1
    if isinstance(target, int):
        if not -len(names) <= target < len(names):
            raise DataFormatError(f"{path}: no column {target} (the file has {len(names)})")
        return target % len(names)
    if target in names:
        return names.index(target)
    if str(target).lstrip("-").isdigit():
        return _column_index(names, int(target), path)
    raise DataFormatError(f"{path}: no column named {target!r}; columns: {', '.join(names)}")


def _features(rows: list[list[str]], cols: list[int], names: list[str], path: str, line0: int) -> np.ndarray:
    x = np.empty((len(rows), len(cols)), np.float64)
    for r, row in enumerate(rows):
        for k, c in enumerate(cols):
            cell = row[c].strip()
            v = _number(cell)
            if v is None:
                what = "missing value" if cell.lower() in _MISSING else f"{cell!r} is not a number"
                raise DataFormatError(f"{path}: row {line0 + r}, column {names[c]!r}: {what}")
            x[r, k] = v
    return x


def _class_labels(
    cells: list[str], name: str, path: str, line0: int, given: Any = None
) -> tuple[np.ndarray, tuple[str, ...]]:
    for r, cell in enumerate(cells):
        if cell.lower() in _MISSING:
            raise DataFormatError(f"{path}: row {line0 + r}, column {name!r}: missing label")
        if given is not None and cell not in given:
            raise DataFormatError(f"{path}: row {line0 + r}, column {name!r}: unknown class {cell!r}")
    distinct = set(cells)
    numeric = all(_number(c) is not None for c in distinct)
    classes = (
        list(given)
        if given is not None
        else sorted(distinct, key=(lambda c: (_number(c), c)) if numeric else None)
    )
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index[c] for c in cells], np.int32), tuple(classes)


class CSVDataset(ArrayDataset):
    """The rows of a CSV file as ``(features float32 (F,), target)`` samples.

    Args:
        path: the CSV file.
        target: the label column, by name or position (default: the last column).
        task: "classification" (labels mapped to 0..K-1 in sorted order of their
            distinct values; names in ``class_names``) or "regression" (float32 targets).
        class_names: impose these classes, in this order (labels not among them are an
            error), e.g. a trained model's.

    Attributes:
        x (N, F) float32, y (N,) int32 or float32, feature_names, target_name,
        class_names (None for regression).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | int | None = None,
        task: str = "classification",
        class_names: Any = None,
    ):
        if task not in ("classification", "regression"):
            raise ValueError(f"CSVDataset: task must be 'classification' or 'regression', got {task!r}")
        self.path = os.fspath(path)
        names, rows, line0 = read_csv_table(self.path)
        t = _column_index(names, target, self.path)
        if len(names) < 2:
            raise DataFormatError(f"{self.path}: needs at least one feature column besides the target")
        cols = [c for c in range(len(names)) if c != t]
        x = _features(rows, cols, names, self.path, line0)
        cells = [row[t].strip() for row in rows]
        if task == "regression":
            class_names = None
            y: np.ndarray = _features(rows, [t], names, self.path, line0)[:, 0].astype(np.float32)
        else:
            y, class_names = _class_labels(cells, names[t], self.path, line0, class_names)
        super().__init__(x.astype(np.float32), y, class_names)
        self.task = task
        self.feature_names = tuple(names[c] for c in cols)
        self.target_name = names[t]

    def __repr__(self) -> str:
        kind = f"{len(self.class_names)} classes" if self.class_names else "regression"
        return f"CSVDataset({self.path!r}, {len(self)} rows, {self.x.shape[1]} features, {kind})"
