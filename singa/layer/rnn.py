"""Recurrent layers RNN and LSTM, built from autograd operators (numpy or cupy).

Both take the input either as one tensor of shape (seq, batch, input_size) (or
(batch, seq, input_size) with ``batch_first``) or, as SINGA's autograd examples do, as a
list of per-step tensors of shape (batch, input_size).

Parameters, one entry per layer and direction in the lists (index ``layer *
num_directions + direction``; direction 1 is the reverse pass of a bidirectional
layer), named ``Wx.0``, ``Wh.0``, ... by :meth:`Layer.get_params`:

- ``Wx[k]``: (in_k, G * hidden_size), with in_k = input_size for layer 0 and
  num_directions * hidden_size above;
- ``Wh[k]``: (hidden_size, G * hidden_size);
- RNN: ``b[k]`` (hidden_size,); LSTM: ``Bx[k]`` and ``Bh[k]`` (4 * hidden_size,)
  (both added, as in SINGA and PyTorch);

with G = 1 for RNN and 4 for LSTM, whose gates are stacked in SINGA's order
input, forget, output, cell (i, f, o, g). All are initialised U(-1/sqrt(hidden_size),
1/sqrt(hidden_size)), as in PyTorch.
"""

from __future__ import annotations

import math
from typing import Any

from singa import autograd
from singa.layer._util import adopt, new_param
from singa.layer.base import Layer
from singa.tensor import Tensor

__all__ = ["RNN_Base", "RNN", "LSTM"]


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to ``target`` (numpy rules)."""
    return len(shape) == len(target) and all(a in (1, b) for a, b in zip(shape, target))


class RNN_Base(Layer):
    """Shared machinery of :class:`RNN` and :class:`LSTM` (see the module docstring)."""

    _gates = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        name: str | None = None,
    ):
        super().__init__(name)
        cls = type(self).__name__
        if int(input_size) < 1 or int(hidden_size) < 1 or int(num_layers) < 1:
            raise ValueError(
                f"{cls}: input_size, hidden_size and num_layers must be positive, "
                f"got {input_size}, {hidden_size}, {num_layers}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{cls}: dropout must be in [0, 1), got {dropout}")
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.nonlinearity = nonlinearity
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.num_directions = 2 if bidirectional else 1
        hs, g = self.hidden_size, self._gates
        bound = 1.0 / math.sqrt(hs)
        self.Wx: list[Tensor] = []
        self.Wh: list[Tensor] = []
        for layer in range(self.num_layers):
            n_in = self.input_size if layer == 0 else hs * self.num_directions
            for _ in range(self.num_directions):
                self.Wx.append(new_param((n_in, g * hs)).uniform(-bound, bound))
                self.Wh.append(new_param((hs, g * hs)).uniform(-bound, bound))

    def bias_vectors(self, width: int) -> list[Tensor]:
        """One bias vector of ``width`` per layer and direction, uniform in
        (-1/sqrt(hidden_size), 1/sqrt(hidden_size)) as SINGA and PyTorch draw them; an
        empty list when the layer has no bias (``bias=False``)."""
        if not self.bias:
            return []
        bound = 1.0 / math.sqrt(self.hidden_size)
        return [
            new_param((width,)).uniform(-bound, bound) for _ in range(self.num_layers * self.num_directions)
        ]

    def _biases(self, k: int) -> list[Tensor]:
        raise NotImplementedError

    def _all_params(self) -> list[Tensor]:
        return list(self.get_params().values())

    def initialize(self, xs: Any, *args: Any) -> None:
        """Move the parameters to the first input's device and float dtype."""
        first = xs[0] if isinstance(xs, list | tuple) else xs
        adopt(self._all_params(), first)

    # ----- the recurrence ------------------------------------------------------------
    def _project(self, inp: Any, k: int, n_steps: int, batch: int) -> list[Tensor]:
        """x_t @ Wx[k] + biases for every step t, as a list of (batch, G*H) tensors."""
        biases = self._biases(k)
        if isinstance(inp, list):
            out = []
            for x_t in inp:
                y = autograd.matmul(x_t, self.Wx[k])
                for b in biases:
                    y = autograd.add_bias(y, b, axis=0)
                out.append(y)
            return out
        # reshape targets leave the batch as -1 (nothing recorded is tied to the batch
        # size, so SINGA's to_onnx([x], [y]) exports a dynamic batch); the steps are
        # split along a (steps, batch, G*H) view, in pieces of one step
        x2 = autograd.reshape(inp, (-1, inp.shape[2]))
        y = autograd.matmul(x2, self.Wx[k])
        for b in biases:
            y = autograd.add_bias(y, b, axis=0)
        if n_steps == 1:
            return [y]
        width = y.shape[1]
        steps = autograd.split(autograd.reshape(y, (n_steps, -1, width)), 0, n_steps)
        return [autograd.reshape(p, (-1, width)) for p in steps]

    def _cell(self, pre: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError

    def _init_states(self, s0: Tensor | None, batch: int, what: str) -> tuple[list, bool]:
        """Split an initial state into one (batch, H) tensor per layer and direction.
        Returns the list (None entries for zeros) and whether the state was 2-D."""
        n = self.num_layers * self.num_directions
        hs = self.hidden_size
        if s0 is None:
            return [None] * n, False
        if s0.ndim() == 2 and n == 1 and tuple(s0.shape) == (batch, hs):
            return [s0], True
        if s0.ndim() == 2 and n == 1 and _broadcasts_to(tuple(s0.shape), (batch, hs)):
            # (batch, 1) or (1, H): broadcast over the other axis, as SINGA's cells do
            return [autograd.expand(s0, (batch, hs))], True
        if s0.ndim() == 2 and n == 1 and batch == 1 and s0.shape[1] == hs:
            # a batch of one against a (B, H) state: the steps broadcast to B rows, as
            # SINGA's cells do (its char-rnn samples one character with the training state)
            return [s0], True
        if tuple(s0.shape) != (n, batch, hs):
            raise ValueError(
                f"{type(self).__name__}: {what} must have shape {(n, batch, hs)}"
                + (f" or {(batch, hs)} (or broadcast to it)" if n == 1 else "")
                + f", got {s0.shape}"
            )
        if n == 1:
            return [autograd.reshape(s0, (-1, hs))], False
        return [autograd.reshape(p, (-1, hs)) for p in autograd.split(s0, 0, n)], False

    def _stack_states(self, states: list[Tensor], two_d: bool, batch: int) -> Tensor:
        if two_d:
            return states[0]
        if len(states) == 1:
            return autograd.reshape(states[0], (1, -1, self.hidden_size))
        return autograd.cat([autograd.reshape(s, (1, -1, self.hidden_size)) for s in states], 0)

    def _run(self, xs: Any, h0: Tensor | None, c0: Tensor | None) -> tuple:
        """Every layer and direction over the whole sequence: (y, h_n, c_n)."""
        seq_mode = isinstance(xs, list | tuple)
        inp, n_steps, batch = self._sequence(xs) if seq_mode else self._tensor_input(xs)
        hs0, h_2d = self._init_states(h0, batch, "h0")
        cs0, _ = self._init_states(c0, batch, "c0")
        two_d = self.num_layers * self.num_directions == 1 and (h_2d or (seq_mode and h0 is None))
        h_last, c_last = [], []
        out: list[Tensor] = []
        for layer in range(self.num_layers):
            per_dir = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                steps, h, c = self._direction(inp, k, d == 1, n_steps, batch, hs0[k], cs0[k])
                per_dir.append(steps)
                h_last.append(h)
                c_last.append(c)
            out = [autograd.cat([a, b], 1) for a, b in zip(*per_dir)] if len(per_dir) == 2 else per_dir[0]
            inp = self._next_input(out, layer == self.num_layers - 1, seq_mode, n_steps)
        if seq_mode:
            y: Any = out
        else:
            y = autograd.transpose(inp, (1, 0, 2)) if self.batch_first else inp
        h_n = self._stack_states(h_last, two_d, batch)
        c_n = self._stack_states(c_last, two_d, batch) if self._gates == 4 else None
        return y, h_n, c_n

    def _sequence(self, xs: list | tuple) -> tuple[list, int, int]:
        """SINGA's list form, checked: (steps, n_steps, batch)."""
        cls = type(self).__name__
        inp = list(xs)
        if not inp:
            raise ValueError(f"{cls}: the input sequence is empty")
        n_steps, batch = len(inp), inp[0].shape[0]
        for x_t in inp:
            if tuple(x_t.shape) != (batch, self.input_size):
                raise ValueError(
                    f"{cls}: every step must have shape {(batch, self.input_size)}, got {x_t.shape}"
                )
        return inp, n_steps, batch

    def _tensor_input(self, xs: Tensor) -> tuple[Tensor, int, int]:
        """One (seq, batch, input) tensor (batch first if ``batch_first``), checked and
        made sequence first: (input, n_steps, batch)."""
        cls = type(self).__name__
        if xs.ndim() != 3 or xs.shape[2] != self.input_size:
            layout = "(batch, seq, input_size)" if self.batch_first else "(seq, batch, input_size)"
            raise ValueError(
                f"{cls}: expected input {layout} with input_size {self.input_size}, got {xs.shape}"
            )
        inp = autograd.transpose(xs, (1, 0, 2)) if self.batch_first else xs
        n_steps, batch = inp.shape[0], inp.shape[1]
        if n_steps == 0:
            raise ValueError(f"{cls}: the input sequence is empty")
        return inp, n_steps, batch

    def _direction(
        self, inp: Any, k: int, reverse: bool, n_steps: int, batch: int, h: Any, c: Any
    ) -> tuple[list, Any, Any]:
        """Layer-direction ``k`` over the sequence (backwards when ``reverse``) from
        states ``h``, ``c`` (None: zeros): (its output per step, last h, last c)."""
        pre = self._project(inp, k, n_steps, batch)
        steps: list = [None] * n_steps
        for t in range(n_steps - 1, -1, -1) if reverse else range(n_steps):
            p = pre[t] if h is None else autograd.add(pre[t], autograd.matmul(h, self.Wh[k]))
            h, c = self._cell(p, c)
            steps[t] = h
        return steps, h, c

    def _next_input(self, out: list, last: bool, seq_mode: bool, n_steps: int) -> Any:
        """A layer's per-step outputs as the next layer's input (a list, or a
        (seq, batch, width) tensor), with dropout between layers in training."""
        drop = not last and self.dropout > 0
        if seq_mode:
            return [autograd.dropout(o, self.dropout, training=self.training) for o in out] if drop else out
        width = out[0].shape[1]
        if n_steps == 1:
            inp = autograd.reshape(out[0], (1, -1, width))
        else:
            inp = autograd.cat([autograd.reshape(o, (1, -1, width)) for o in out], 0)
        return autograd.dropout(inp, self.dropout, training=self.training) if drop else inp


class RNN(RNN_Base):
    """Elman RNN: ``h_t = act(x_t @ Wx + b + h_{t-1} @ Wh)`` with act tanh or relu.

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
    batch_first=False, dropout=0, bidirectional=False)`` (SINGA's signature; ``dropout``
    applies between layers in training mode).

    Call ``rnn(x, h0=None)``; returns ``(y, h_n)``:

    - x a tensor (seq, batch, input) (batch first if ``batch_first``): y a tensor
      (seq, batch, num_directions * hidden) (batch first likewise) and h_n of shape
      (num_layers * num_directions, batch, hidden);
    - x a list of (batch, input) tensors (SINGA's form): y a list of (batch,
      num_directions * hidden) tensors; h_n is (batch, hidden) for one layer and
      direction, else as above.

    ``h0`` has h_n's shape (None means zeros); a (batch, hidden) ``h0`` gives a
    (batch, hidden) h_n. For one layer and direction a 2-D state may also broadcast to
    (batch, hidden), e.g. (batch, 1) or (1, hidden), as SINGA's cells allow.
    """

    _gates = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        name: str | None = None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(
            input_size, hidden_size, num_layers, nonlinearity, bias, batch_first, dropout, bidirectional, name
        )
        self.b: list[Tensor] = self.bias_vectors(self.hidden_size)

    def _biases(self, k: int) -> list[Tensor]:
        return [self.b[k]] if self.bias else []

    def _cell(self, pre: Tensor, c: Tensor | None) -> tuple[Tensor, None]:
        return (autograd.tanh(pre) if self.nonlinearity == "tanh" else autograd.relu(pre)), None

    def forward(self, xs: Any, h0: Tensor | None = None) -> tuple:
        """Run the RNN; returns ``(y, h_n)``."""
        y, h, _ = self._run(xs, h0, None)
        return y, h


class LSTM(RNN_Base):
    """Long short-term memory (gates i, f, o, g in SINGA's order)::

        i, f, o = sigmoid(...), g = tanh(...)   from x_t @ Wx + Bx + h_{t-1} @ Wh + Bh
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    ``LSTM(input_size, hidden_size, nonlinearity="tanh", num_layers=1, bias=True,
    batch_first=False, dropout=0, bidirectional=False)`` (SINGA's signature and argument
    order; only "tanh" is supported).

    Call ``lstm(x, (h0, c0))`` or ``lstm(x)`` (zero states); returns ``(y, h_n, c_n)``
    with the shapes described for :class:`RNN` (c_n like h_n).
    """

    _gates = 4

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: str = "tanh",
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        name: str | None = None,
    ):
        if nonlinearity != "tanh":
            raise ValueError(f"LSTM: only nonlinearity='tanh' is supported, got {nonlinearity!r}")
        super().__init__(
            input_size, hidden_size, num_layers, nonlinearity, bias, batch_first, dropout, bidirectional, name
        )
        self.Bx: list[Tensor] = self.bias_vectors(4 * self.hidden_size)
        self.Bh: list[Tensor] = self.bias_vectors(4 * self.hidden_size)

    def _biases(self, k: int) -> list[Tensor]:
        return [self.Bx[k], self.Bh[k]] if self.bias else []

    def _cell(self, pre: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor]:
        i, f, o, g = autograd.split(pre, 1, 4)
        i, o, g = autograd.sigmoid(i), autograd.sigmoid(o), autograd.tanh(g)
        ig = autograd.mul(i, g)
        c = ig if c is None else autograd.add(autograd.mul(autograd.sigmoid(f), c), ig)
        return autograd.mul(o, autograd.tanh(c)), c

    def forward(self, xs: Any, h0_c0: tuple | None = None) -> tuple:
        """Run the LSTM; returns ``(y, h_n, c_n)``."""
        if h0_c0 is None:
            h0 = c0 = None
        else:
            h0, c0 = h0_c0
        y, h, c = self._run(xs, h0, c0)
        return y, h, c
