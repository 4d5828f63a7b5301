"""``Model.summary()``: a table of every layer with its output shape and parameters,
like Keras's ``summary`` and torchinfo.

The shapes come from one forward pass on a zero sample (batch 1) in evaluation mode
without recording gradients; the states' values are restored afterwards (as
``compile`` does, a model whose parameters did not exist yet draws their initial
values from the device generator).

MACs (multiply-accumulates) per sample are counted for Linear and Conv2d layers:
the elements of one output channel times the weight's size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from singa import tensor
from singa.autograd.engine import no_grad
from singa.layer.base import Layer
from singa.layer.conv import Conv2d
from singa.layer.linear import Linear
from singa.model.batches import model_device

__all__ = ["summary", "layer_rows"]


def _sample_shapes(model: Any, input_shape: Any) -> list[tuple]:
    if input_shape is None:
        if model.input_shapes is None:
            raise ValueError(
                f"{type(model).__name__}.summary: give input_shape (one sample's shape, e.g. (1, 28, 28)) "
                "or compile the model first"
            )
        return [tuple(s) for s in model.input_shapes]
    if isinstance(input_shape, list) and all(isinstance(s, tuple | list) for s in input_shape):
        shapes = [tuple(s) for s in input_shape]
    else:
        shapes = [tuple(input_shape)]
    for s in shapes:
        if not all(isinstance(d, int | np.integer) and d > 0 for d in s):
            raise ValueError(f"summary: a sample shape must be positive ints, got {s!r}")
    return shapes


def _shape_of(out: Any) -> Any:
    if isinstance(out, tensor.Tensor):
        return ("None", *out.shape[1:])
    if isinstance(out, tuple | list):
        return [_shape_of(o) for o in out]
    return None


@contextlib.contextmanager
def _capturing(layers: dict[str, Layer], shapes: dict[int, Any]) -> Iterator[None]:
    """Record each layer's last output shape while the block runs."""

    def wrap(layer: Layer) -> Callable:
        inner = type(layer).forward.__get__(layer)

        def forward(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            shapes[id(layer)] = _shape_of(out)
            return out

        return forward

    wrapped = [layer for layer in layers.values() if "forward" not in vars(layer)]
    for layer in wrapped:
        object.__setattr__(layer, "forward", wrap(layer))
    try:
        yield
    finally:
        for layer in wrapped:
            vars(layer).pop("forward", None)


def _run_once(model: Any, shapes: list[tuple], dtype: Any) -> tuple[dict[int, Any], Any]:
    dev = model_device(model)
    xs = [tensor.Tensor((1, *s), dev, dtype or tensor.float32, requires_grad=False) for s in shapes]
    for x in xs:
        x.set_value(0.0)
    before = {n: t.data.copy() for n, t in model.get_states().items()}
    prev_mode, prev_graph = model.training, model.graph_mode
    captured: dict[int, Any] = {}
    model.eval()
    model.graph_mode = False
    try:
        with no_grad():
            model.ensure_initialized(*xs)
            with _capturing(model.sublayers(), captured):
                out = model.forward(*xs)
    finally:
        model.graph_mode = prev_graph
        model.train(prev_mode)
    states = model.get_states()
    for n, arr in before.items():
        if n in states:
            states[n].data[...] = arr
    model.name_states()
    return captured, _shape_of(out)


def _owner(name: str, layer_names: list[str]) -> str:
    """The innermost layer holding state ``name`` ("" for the model itself)."""
    best = ""
    for ln in layer_names:
        if name.startswith(ln + ".") and len(ln) > len(best):
            best = ln
    return best


def _macs(layer: Layer, out_shape: Any) -> int:
    if not isinstance(layer, Linear | Conv2d) or not isinstance(out_shape, tuple):
        return 0
    w = getattr(layer, "W", None)
    if w is None or len(out_shape) < 2:
        return 0
    per_channel = int(np.prod(out_shape[1:])) // int(
        out_shape[-1] if isinstance(layer, Linear) else out_shape[1]
    )
    if isinstance(layer, Conv2d):
        per_channel = int(np.prod(out_shape[2:]))
    return per_channel * int(w.size())


def _trainable(t: Any) -> bool:
    return bool(t.stores_grad and t.requires_grad)  # frozen: no requires_grad


def _trainable_label(ts: list) -> str:
    flags = [_trainable(t) for t in ts]
    if not flags:
        return "-"
    if all(flags):
        return "yes"
    return "no" if not any(flags) else "partly"


def _totals(states: list, rows: list[dict], out_shape: Any) -> dict:
    params = sum(t.size() for t in states)
    trainable = sum(t.size() for t in states if _trainable(t))
    return {
        "params": params,
        "trainable": trainable,
        "non_trainable": params - trainable,
        "trainable_fraction": trainable / params if params else 0.0,
        "bytes": sum(int(t.data.nbytes) for t in states),
        "macs": sum(r["macs"] for r in rows),
        "output_shape": out_shape,
    }


def layer_rows(model: Any, input_shape: Any = None, dtype: Any = None) -> tuple[list[dict], dict]:
    """The table's rows (``name``, ``type``, ``output_shape``, ``params``,
    ``trainable``, ``macs``) and totals (``params``, ``trainable``, ``non_trainable``,
    ``trainable_fraction`` (of every state value, e.g. LoRA's share), ``bytes``,
    ``macs``, ``output_shape``)."""
    shapes = _sample_shapes(model, input_shape)
    captured, out_shape = _run_once(model, shapes, dtype)
    layers = model.sublayers()
    names = list(layers)
    own: dict[str, list] = {n: [] for n in ["", *names]}
    for sname, t in model.get_states().items():
        own[_owner(sname, names)].append(t)
    rows = []
    for name, layer in layers.items():
        shape = captured.get(id(layer))
        rows.append(
            {
                "name": name,
                "type": type(layer).__name__,
                "output_shape": shape,
                "params": sum(t.size() for t in own[name]),
                "trainable": _trainable_label(own[name]),
                "macs": _macs(layer, shape),
            }
        )
    totals = _totals(list(model.get_states().values()), rows, out_shape)
    return [r for r in rows if r["params"] or r["output_shape"] is not None], totals


def _fmt_shape(shape: Any) -> str:
    if shape is None:
        return "-"
    if isinstance(shape, list):
        return ", ".join(_fmt_shape(s) for s in shape)
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _si(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:g}"


def _liner(widths: list[int]) -> Callable[[tuple], str]:
    def line(cells: tuple) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return line


def summary(
    model: Any, input_shape: Any = None, print_fn: Callable[[str], Any] | None = print, dtype: Any = None
) -> str:
    """The summary table of ``model`` as text (printed through ``print_fn`` unless None)."""
    rows, totals = layer_rows(model, input_shape, dtype)
    head = ("Layer (type)", "Output shape", "Param #", "Trainable", "MACs")
    body = [
        (
            f"{r['name']} ({r['type']})",
            _fmt_shape(r["output_shape"]),
            f"{r['params']:,}",
            r["trainable"],
            _si(r["macs"]) if r["macs"] else "-",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    line = _liner(widths)
    rule = "=" * len(line(head))
    lines = [f'Model: "{type(model).__name__}"', rule, line(head), rule, *(line(b) for b in body), rule]
    lines += [
        f"Total params: {totals['params']:,}",
        f"Trainable params: {totals['trainable']:,}",
        f"Non-trainable params: {totals['non_trainable']:,}",
        f"Trainable fraction: {100 * totals['trainable_fraction']:.2f}%",
        f"Parameter size: {totals['bytes'] / 2**20:.2f} MiB ({totals['bytes']:,} bytes)",
        f"MACs per sample: {_si(totals['macs'])} ({totals['macs']:,})",
        f"Output shape: {_fmt_shape(totals['output_shape'])}",
    ]
    text = "\n".join(lines)
    if print_fn is not None:
        print_fn(text)
    return text
