"""A traced call's outputs as a template and a list of Tensors: the graph replays arrays,
and the template rebuilds the call's structure (Tensors inside tuples, lists, dicts and
named tuples; other values kept as they were) around the replayed ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from singa.tensor import Tensor

__all__ = ["flatten_outputs", "rebuild_outputs"]


def flatten_outputs(obj: Any, leaves: list) -> Any:
    """A template of ``obj`` (Tensors inside tuples, lists and dicts) whose Tensors are
    appended to ``leaves`` and replaced by their index."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("T", len(leaves) - 1)
    if isinstance(obj, tuple | list):
        return ("S", type(obj), [flatten_outputs(o, leaves) for o in obj])
    if isinstance(obj, dict):
        return ("D", type(obj), {k: flatten_outputs(v, leaves) for k, v in obj.items()})
    return ("C", obj)


def rebuild_outputs(tpl: Any, values: Sequence[Any]) -> Any:
    """Inverse of :func:`flatten_outputs` with new leaves."""
    tag = tpl[0]
    if tag == "T":
        return values[tpl[1]]
    if tag == "S":
        items = [rebuild_outputs(t, values) for t in tpl[2]]
        return tpl[1](items) if tpl[1] in (list, tuple) else tpl[1](*items)
    if tag == "D":
        return tpl[1]((k, rebuild_outputs(t, values)) for k, t in tpl[2].items())
    return tpl[1]
