"""bfloat16 values in imported graphs: nodes computing on bfloat16 inputs run in float32
and round their float32 results back to bfloat16 (onnxruntime's way; bfloat16 has no
arithmetic of its own in numpy). Conversions and data movement read bfloat16 as is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from singa.sonnx.context import NodeContext
from singa.tensor import Tensor

#: op types that read bfloat16 values as they are (conversions and data movement)
BFLOAT16_AS_IS = frozenset({"Cast", "CastLike", "BitCast", "Identity", "Shape", "Size"})


def bfloat16_arithmetic(ctx: NodeContext, xs: list) -> bool:
    """A node computing on bfloat16 inputs (other than a conversion)."""
    return ctx.op_type not in BFLOAT16_AS_IS and any(
        isinstance(x, Tensor) and x.dtype.name == "bfloat16" for x in xs
    )


def in_float32(ctx: NodeContext, fn: Callable, xs: list) -> Any:
    """Run a node on bfloat16 inputs in float32 and round its float32 results back to
    bfloat16, as onnxruntime's CPU kernels do (bfloat16 has no arithmetic of its own).
    Computed directly: no gradient reaches the bfloat16 inputs."""
    bf16 = next(x.dtype for x in xs if isinstance(x, Tensor) and x.dtype.name == "bfloat16")
    wide = [
        ctx.wrap(x.data.astype(np.float32)) if isinstance(x, Tensor) and x.dtype == bf16 else x for x in xs
    ]
    ys = fn(ctx, wide)
    single = isinstance(ys, Tensor)
    ys = [ys] if single else list(ys)
    ys = [ctx.wrap(y.data.astype(bf16)) if isinstance(y, Tensor) and y.dtype == np.float32 else y for y in ys]
    return ys[0] if single else ys
