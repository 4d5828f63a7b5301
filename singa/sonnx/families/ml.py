"""ONNX's ``ai.onnx.ml`` domain (classic machine learning): Binarizer,
ArrayFeatureExtractor, LabelEncoder and TreeEnsemble, computed when the node runs (no gradient:
in training mode a tensor that needs one raises UnsupportedOperator), as onnxruntime
computes them; ArrayFeatureExtractor is a Gather, differentiable.

Operators of another domain than the default are in ``DOMAIN_IMPORT`` (their op types
may repeat default ones); ``IMPORT`` (the default domain) is empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from singa import autograd
from singa.autograd import indexing as ix
from singa.autograd import shaping as sh
from singa.sonnx.context import NodeContext, builds, inference_only
from singa.tensor import Tensor

DOMAIN = "ai.onnx.ml"


@builds()
def handle_binarizer(ctx: NodeContext, xs: list) -> Tensor:
    """Binarizer(threshold): 1 where x > threshold, else 0, in x's dtype."""
    inference_only(ctx, xs, "ai.onnx.ml's Binarizer, LabelEncoder and TreeEnsemble")
    x = xs[0].to_numpy()
    return ctx.const((x > float(ctx.attr("threshold", 0.0))).astype(x.dtype))


@builds(ix.Gather, sh.Reshape)
def handle_array_feature_extractor(ctx: NodeContext, xs: list) -> Tensor:
    """ArrayFeatureExtractor(X, Y): the entries of X's last axis at the indices Y
    (flattened); a 1-D X gives one row (onnxruntime's shape). A Gather, so gradients
    reach X."""
    x, idx = xs[0], np.asarray(ctx.static(xs[1])).reshape(-1).astype(np.int64)
    n = x.shape[-1]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(
            f"ONNX run: ArrayFeatureExtractor node {ctx.name!r}: indices {idx.tolist()} out of range "
            f"for a last axis of {n}"
        )
    y = autograd.gather(x, x.ndim() - 1, ctx.const(idx))
    return autograd.reshape(y, (1, len(idx))) if x.ndim() == 1 else y


def _table(ctx: NodeContext, kind: str) -> Any:
    """LabelEncoder's keys or values: from ``<kind>_tensor``, else the typed lists."""
    t = ctx.attr(f"{kind}_tensor")
    if t is not None:
        return numpy_helper.to_array(t)
    for suffix, dt in (("strings", object), ("int64s", np.int64), ("floats", np.float32)):
        v = ctx.attr(f"{kind}_{suffix}")
        if v is not None:
            return np.array(list(v), dtype=dt)
    raise ValueError(f"ONNX run: LabelEncoder node {ctx.name!r}: no {kind} given")


_DEFAULTS = {"O": ("default_string", "_Unused"), "i": ("default_int64", -1), "f": ("default_float", -0.0)}


@builds()
def handle_label_encoder(ctx: NodeContext, xs: list) -> Tensor:
    """LabelEncoder: each input element mapped by the keys to the values (strings,
    integers, floats or tensors of them); elements without a key take the default."""
    keys, values = _table(ctx, "keys"), _table(ctx, "values")
    if len(keys) != len(values):
        raise ValueError(f"ONNX run: LabelEncoder node {ctx.name!r}: {len(keys)} keys, {len(values)} values")
    default_t = ctx.attr("default_tensor")
    if default_t is not None:
        default = numpy_helper.to_array(default_t).reshape(-1)[0]
    else:
        name, fallback = _DEFAULTS[values.dtype.kind]
        default = ctx.attr(name, fallback)
    table = dict(zip(keys.tolist(), values.tolist()))
    x = np.asarray(ctx.static(xs[0]))
    found = [table.get(k, default) for k in x.reshape(-1).tolist()]
    out = np.empty(x.shape, dtype=values.dtype)
    out.reshape(-1)[:] = found
    return ctx.const(out)


_COMPARE = {
    0: np.less_equal,
    1: np.less,
    2: np.greater_equal,
    3: np.greater,
    4: np.equal,
    5: np.not_equal,
}


class _Trees:
    """The node arrays of a TreeEnsemble node, read once per run."""

    def __init__(self, ctx: NodeContext):
        def arr(name: str, default: Any = None) -> Any:
            v = ctx.attr(name, default)
            return numpy_helper.to_array(v) if hasattr(v, "dims") else (None if v is None else np.asarray(v))

        self.splits, self.features = arr("nodes_splits"), arr("nodes_featureids")
        self.modes = arr("nodes_modes")
        self.true_ids, self.false_ids = arr("nodes_truenodeids"), arr("nodes_falsenodeids")
        self.true_leaf, self.false_leaf = arr("nodes_trueleafs"), arr("nodes_falseleafs")
        self.missing_true = arr("nodes_missing_value_tracks_true", np.zeros(len(self.modes), np.int64))
        self.sets = self._sets(arr("membership_values"))

    def _sets(self, values: Any) -> dict[int, set]:
        """The member sets of the MEMBER nodes (NaN-separated, in node order)."""
        members = [i for i, m in enumerate(self.modes) if m == 6]
        if not members:
            return {}
        chunks, cur = [], []
        for v in [] if values is None else values.tolist():
            if np.isnan(v):
                chunks.append(set(cur))
                cur = []
            else:
                cur.append(v)
        if len(chunks) != len(members):
            raise ValueError(f"TreeEnsemble: {len(members)} set membership nodes, {len(chunks)} sets")
        return dict(zip(members, chunks))

    def goes_true(self, i: int, v: float) -> bool:
        if np.isnan(v) and self.missing_true[i]:
            return True
        mode = int(self.modes[i])
        return v in self.sets[i] if mode == 6 else bool(_COMPARE[mode](v, self.splits[i]))

    def leaf(self, root: int, row: np.ndarray) -> int:
        """The leaf index a sample reaches from ``root``."""
        i = root
        if self.true_leaf[i] and self.false_leaf[i] and self.true_ids[i] == self.false_ids[i]:
            return int(self.true_ids[i])  # a tree that is one leaf
        while True:
            right = self.goes_true(i, float(row[int(self.features[i])]))
            nxt, is_leaf = (
                (self.true_ids[i], self.true_leaf[i]) if right else (self.false_ids[i], self.false_leaf[i])
            )
            if is_leaf:
                return int(nxt)
            i = int(nxt)


_AGGREGATE = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


@builds()
def handle_tree_ensemble(ctx: NodeContext, xs: list) -> Tensor:
    """TreeEnsemble (ai.onnx.ml opset 5): each sample walks every tree (comparisons LEQ,
    LT, GTE, GT, EQ, NEQ and set membership; NaN follows the true branch where asked) to
    a leaf, whose weight adds to its target; targets aggregate by sum, average, min or max.
    ``post_transform`` NONE only."""
    if int(ctx.attr("post_transform", 0)) != 0:
        raise ctx.unsupported(f"post_transform {int(ctx.attr('post_transform'))} (NONE only)")
    how = _AGGREGATE.get(int(ctx.attr("aggregate_function", 1)))
    if how is None:
        raise ctx.unsupported(f"aggregate_function {int(ctx.attr('aggregate_function'))}")
    inference_only(ctx, xs, "ai.onnx.ml's Binarizer, LabelEncoder and TreeEnsemble")
    x = np.asarray(ctx.static(xs[0]))
    trees = _Trees(ctx)
    weights = numpy_helper.to_array(ctx.attr("leaf_weights"))
    targets = np.asarray(ctx.attr("leaf_targetids"), np.int64)
    n_targets = int(ctx.attr("n_targets"))
    top = float(np.finfo(x.dtype).max)  # a target no leaf reaches keeps it (ONNX's reference)
    start = {"MIN": top, "MAX": -top}.get(how, 0.0)
    out = np.full((x.shape[0], n_targets), start)
    combine = {"MIN": np.minimum, "MAX": np.maximum}.get(how, np.add)
    roots = list(ctx.attr("tree_roots"))
    for r, row in enumerate(x):
        for root in roots:
            leaf = trees.leaf(int(root), row)
            t = targets[leaf]
            out[r, t] = combine(out[r, t], weights[leaf])
    if how == "AVERAGE":
        out /= len(roots)
    return ctx.const(out.astype(x.dtype))


EXPORT: dict = {}
IMPORT: dict = {}
DOMAIN_IMPORT = {
    "ArrayFeatureExtractor": handle_array_feature_extractor,
    "Binarizer": handle_binarizer,
    "LabelEncoder": handle_label_encoder,
    "TreeEnsemble": handle_tree_ensemble,
}
