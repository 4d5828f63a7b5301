"""ONNX's ``ai.onnx.ml`` domain (classic machine learning): Binarizer,
ArrayFeatureExtractor and LabelEncoder, computed when the node runs (no gradient), as
onnxruntime computes them.

Operators of another domain than the default are in ``DOMAIN_IMPORT`` (their op types
may repeat default ones); ``IMPORT`` (the default domain) is empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor

DOMAIN = "ai.onnx.ml"


@builds()
def handle_binarizer(ctx: NodeContext, xs: list) -> Tensor:
    """Binarizer(threshold): 1 where x > threshold, else 0, in x's dtype."""
    x = xs[0].to_numpy()
    return ctx.const((x > float(ctx.attr("threshold", 0.0))).astype(x.dtype))


@builds()
def handle_array_feature_extractor(ctx: NodeContext, xs: list) -> Tensor:
    """ArrayFeatureExtractor(X, Y): the entries of X's last axis at the indices Y
    (flattened); a 1-D X gives one row (onnxruntime's shape)."""
    x, idx = xs[0].to_numpy(), np.asarray(ctx.static(xs[1])).reshape(-1).astype(np.int64)
    n = x.shape[-1]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(
            f"ONNX run: ArrayFeatureExtractor node {ctx.name!r}: indices {idx.tolist()} out of range "
            f"for a last axis of {n}"
        )
    y = x[..., idx]
    return ctx.const(y.reshape(1, -1) if x.ndim == 1 else y)


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


EXPORT: dict = {}
IMPORT: dict = {}
DOMAIN_IMPORT = {
    "ArrayFeatureExtractor": handle_array_feature_extractor,
    "Binarizer": handle_binarizer,
    "LabelEncoder": handle_label_encoder,
}
