"""Finding the layers a configuration targets (dotted names and globs) and putting a
new layer in a layer's place (through attributes, lists, tuples and dicts)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any

from singa.layer.base import Layer

__all__ = ["is_glob", "match_layers", "find_layer", "replace_layer"]

_GLOB_CHARS = set("*?[")


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has glob characters (``*``, ``?``, ``[``)."""
    return bool(_GLOB_CHARS & set(pattern))


def _visible_layers(root: Layer, hidden: Callable[[Layer], bool]) -> dict[str, Layer]:
    """Sublayers of ``root`` by dotted name, without those inside a hidden layer."""
    subs = root.sublayers()
    inside = [p for p, s in subs.items() if hidden(s)]
    return {p: s for p, s in subs.items() if not any(p.startswith(h + ".") for h in inside)}


def match_layers(
    root: Layer,
    patterns: Sequence[str],
    supported: Callable[[Layer], bool],
    hidden: Callable[[Layer], bool] = lambda layer: False,
    what: str = "target_layers",
) -> dict[str, Layer]:
    """The layers below ``root`` named by ``patterns`` (exact dotted names or globs),
    in model order. A glob keeps only supported layers; an exact name of an
    unsupported layer, or a pattern matching no layer, raises ValueError listing
    every such problem (nothing is changed)."""
    layers = _visible_layers(root, hidden)
    found: dict[str, Layer] = {}
    problems: list[str] = []
    for pat in patterns:
        if is_glob(pat):
            hits = [p for p in layers if fnmatch.fnmatchcase(p, pat)]
            ok = [p for p in hits if supported(layers[p])]
            if not ok:
                kinds = sorted({type(layers[p]).__name__ for p in hits})
                seen = f" (it matches only {', '.join(kinds)})" if kinds else ""
                problems.append(f"{pat!r} matches no supported layer{seen}")
            found.update((p, layers[p]) for p in ok)
        elif pat not in layers:
            problems.append(f"{pat!r} is not a layer of the model")
        elif not supported(layers[pat]):
            problems.append(f"{pat!r} is a {type(layers[pat]).__name__}, which cannot be adapted")
        else:
            found[pat] = layers[pat]
    if problems:
        names = ", ".join(list(layers)[:12]) + (", ..." if len(layers) > 12 else "")
        raise ValueError(f"{what}: " + "; ".join(problems) + f" (layers: {names or 'none'})")
    return {p: found[p] for p in layers if p in found}


def _child(obj: Any, key: str) -> Any:
    if isinstance(obj, Layer):
        return vars(obj)[key]
    if isinstance(obj, list | tuple):
        return obj[int(key)]
    for k, v in obj.items():
        if str(k) == key:
            return v
    raise KeyError(key)


def _with_child(obj: Any, key: str, value: Any) -> Any:
    """``obj`` with its child ``key`` replaced: the same object when it can change in
    place, a new tuple otherwise."""
    if isinstance(obj, Layer):
        setattr(obj, key, value)
        return obj
    if isinstance(obj, list):
        obj[int(key)] = value
        return obj
    if isinstance(obj, tuple):
        items = list(obj)
        items[int(key)] = value
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    real = next(k for k in obj if str(k) == key)
    obj[real] = value
    return obj


def find_layer(root: Layer, path: str) -> Any:
    """The object at dotted ``path`` below ``root`` (KeyError when there is none)."""
    obj: Any = root
    for part in path.split("."):
        obj = _child(obj, part)
    return obj


def replace_layer(root: Layer, path: str, new: Layer) -> None:
    """Put ``new`` where the layer at dotted ``path`` below ``root`` is."""
    parts = path.split(".")
    chain = [root]
    for p in parts[:-1]:
        chain.append(_child(chain[-1], p))
    value: Any = new
    for obj, key in reversed(list(zip(chain, parts))):
        updated = _with_child(obj, key, value)
        if updated is obj:
            return
        value = updated
