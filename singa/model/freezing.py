"""Freezing parameters by name: :meth:`Model.freeze` and :meth:`Model.unfreeze`.

A frozen parameter keeps ``stores_grad`` (it stays among ``get_params()``, as SINGA's
``Embedding.from_pretrained(freeze=True)`` leaves it) but loses ``requires_grad``:
autograd computes no gradient for it, so the optimizer never updates it and never
creates state (momentum, Adam moments) for it.

Patterns are shell globs (``fnmatch``, case-sensitive) on dotted parameter names; a
pattern also matches every parameter below a layer of that name (``features`` is
``features`` or ``features.*``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

from singa.tensor import Tensor

__all__ = ["matching", "set_trainable"]


def _matches(name: str, pattern: str) -> bool:
    return fnmatchcase(name, pattern) or fnmatchcase(name, pattern + ".*")


def matching(params: Mapping[str, Tensor], patterns: Iterable[str], what: str) -> list[str]:
    """The names in ``params`` matching any of ``patterns`` (in ``params``' order); a
    pattern that matches nothing raises ``ValueError`` naming it (``what`` is the caller)."""
    patterns = [str(p) for p in patterns]
    if not params:
        raise ValueError(f"{what}: the model has no parameters yet (compile it, or call it once, first)")
    unused = [p for p in patterns if not any(_matches(n, p) for n in params)]
    if unused:
        names = ", ".join(list(params)[:12]) + (", ..." if len(params) > 12 else "")
        raise ValueError(f"{what}: no parameter matches {', '.join(map(repr, unused))} (parameters: {names})")
    return [n for n in params if any(_matches(n, p) for p in patterns)]


def set_trainable(params: Mapping[str, Tensor], names: Iterable[str], trainable: bool) -> None:
    """Give the parameters ``names`` gradients (``trainable``) or none."""
    for n in names:
        params[n].requires_grad = bool(trainable)
