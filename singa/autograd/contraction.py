"""Einstein summation (ONNX Einsum, numpy's ``einsum``).

The equation's ``...`` is expanded into explicit letters from the operands' ranks
and, without ``->``, the output holds the broadcast axes and then the letters that
appear once, in alphabetical order (numpy's and ONNX's rule). The gradient of each
operand is an einsum of dy with the other operands; operands with a repeated letter
(a diagonal, as in ``ii->i``) are computed but not differentiated.

Example::

    y = autograd.einsum("bij,bjk->bik", a, b)      # batched matrix product
"""

from __future__ import annotations

import string

import numpy as np

from singa.autograd.engine import Operation
from singa.device import array_module
from singa.tensor import Tensor

__all__ = ["einsum"]


def expand_equation(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' subscripts and the output's, with ``...`` replaced by letters
    unused in ``equation`` (the same letters for the same trailing broadcast axes)."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"einsum: equation {equation!r} has {len(terms)} operands, got {len(ranks)}")
    spare = [c for c in string.ascii_letters if c not in eq]
    n_ell = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t] or [0])
    ell = "".join(spare[:n_ell])
    out_terms = []
    for t, r in zip(terms, ranks):
        n = r - len(t.replace("...", "")) if "..." in t else 0
        t = t.replace("...", ell[len(ell) - n :] if n else "")
        if len(t) != r:
            raise ValueError(f"einsum: subscripts {t!r} do not match an operand of rank {r}")
        out_terms.append(t)
    if "->" in eq:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(out_terms)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    return out_terms, out


class Einsum(Operation):
    """y = einsum(equation, *xs) with explicit subscripts (see :func:`expand_equation`)."""

    def __init__(self, terms: list[str], out: str):
        super().__init__()
        self.terms = list(terms)
        self.out = out

    @property
    def equation(self) -> str:
        """The explicit equation ``a,b->c``."""
        return ",".join(self.terms) + "->" + self.out

    def forward(self, *xs):
        if self.requires_grad:
            self.cache = xs
        # optimize: contract through tensordot (BLAS) instead of one C loop nest
        y = array_module(xs[0]).einsum(self.equation, *xs, optimize=len(xs) > 1)
        return np.asarray(y, dtype=np.result_type(*xs)) if np.ndim(y) == 0 else y

    def backward(self, dy):
        xs = self.cache
        xp = array_module(dy)
        grads = []
        for i, (x, t) in enumerate(zip(xs, self.terms)):
            if not self.needs_grad[i] or len(set(t)) != len(t):
                grads.append(None)
                continue
            others = [(xs[j], self.terms[j]) for j in range(len(xs)) if j != i]
            known = set(self.out).union(*(set(u) for _, u in others))
            kept = "".join(c for c in t if c in known)
            eq = ",".join([self.out] + [u for _, u in others]) + "->" + kept
            g = xp.einsum(eq, dy, *(a for a, _ in others), optimize=bool(others))
            if kept != t:  # letters summed away within x alone: broadcast back
                shape = [x.shape[k] if c in known else 1 for k, c in enumerate(t)]
                g = xp.broadcast_to(g.reshape(shape), x.shape)
            grads.append(xp.ascontiguousarray(g, dtype=x.dtype))
        return tuple(grads) if len(grads) > 1 else grads[0]


def einsum(equation: str, *xs: Tensor) -> Tensor:
    """Einstein summation of the tensors ``xs`` by ``equation`` (numpy's and ONNX's
    convention, ``...`` for broadcast axes, implicit output without ``->``)."""
    terms, out = expand_equation(str(equation), [x.ndim() for x in xs])
    sizes: dict = {}
    for x, t in zip(xs, terms):
        for c, s in zip(t, x.shape):
            if sizes.setdefault(c, s) != s:
                raise ValueError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {s} in {equation!r}")
    if any(c not in sizes for c in out):
        raise ValueError(f"einsum: output subscripts {out!r} name letters no operand has")
    return Einsum(terms, out)(*xs)[0]
