"""GRU, and SINGA's ``CudnnRNN`` layer computed by this package's RNN kernels on any device.

GRU (gates stacked in PyTorch's order reset, update, new; the new gate's hidden
projection is reset before it is added, as PyTorch and ONNX's ``linear_before_reset``)::

    r = sigmoid(x_t @ Wx_r + Bx_r + h @ Wh_r + Bh_r)
    z = sigmoid(x_t @ Wx_z + Bx_z + h @ Wh_z + Bh_z)
    n = tanh(x_t @ Wx_n + Bx_n + r * (h @ Wh_n + Bh_n))
    h_t = (1 - z) * n + z * h

Example::

    gru = layer.GRU(8, 16, num_layers=2, batch_first=True)
    y, h_n = gru(x)                    # x: (batch, seq, 8)

    rnn = layer.CudnnRNN(16, rnn_mode="lstm", return_sequences=False)
    y = rnn(x)                         # (batch, 16): the last step's output
"""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import autograd
from singa.layer.base import Layer
from singa.layer.rnn import LSTM, RNN, RNN_Base
from singa.tensor import Tensor

__all__ = ["GRU", "CudnnRNN"]


class GRU(RNN_Base):
    """Gated recurrent unit (see the module docstring for the equations).

    ``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0, bidirectional=False)``; parameters per layer and direction k:
    ``Wx[k]`` (in_k, 3H), ``Wh[k]`` (H, 3H), ``Bx[k]`` and ``Bh[k]`` (3H,).

    Call ``gru(x, h0=None)``; returns ``(y, h_n)`` with the shapes of :class:`RNN`.
    """

    _gates = 3

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        name: str | None = None,
    ):
        super().__init__(
            input_size, hidden_size, num_layers, "tanh", bias, batch_first, dropout, bidirectional, name
        )
        self.Bx: list[Tensor] = self.bias_vectors(3 * self.hidden_size)
        self.Bh: list[Tensor] = self.bias_vectors(3 * self.hidden_size)

    def _biases(self, k: int) -> list[Tensor]:
        return [self.Bx[k]] if self.bias else []

    def _step(self, pre: Tensor, h: Tensor, k: int) -> Tensor:
        """One time step: ``pre`` is x_t's projection (with Bx), ``h`` the previous state."""
        hp = autograd.matmul(h, self.Wh[k])
        if self.bias:
            hp = autograd.add_bias(hp, self.Bh[k], axis=0)
        xr, xz, xn = autograd.split(pre, 1, 3)
        hr, hz, hn = autograd.split(hp, 1, 3)
        r = autograd.sigmoid(autograd.add(xr, hr))
        z = autograd.sigmoid(autograd.add(xz, hz))
        n = autograd.tanh(autograd.add(xn, autograd.mul(r, hn)))
        return autograd.add(n, autograd.mul(z, autograd.sub(h, n)))

    def _steps_of(self, xs: Any) -> tuple[list | Tensor, int, int, bool]:
        """The input as (steps or a (seq, batch, in) tensor, steps, batch, list form?)."""
        if isinstance(xs, list | tuple):
            steps = list(xs)
            if not steps:
                raise ValueError("GRU: the input sequence is empty")
            batch = steps[0].shape[0]
            if any(tuple(x.shape) != (batch, self.input_size) for x in steps):
                raise ValueError(f"GRU: every step must have shape {(batch, self.input_size)}")
            return steps, len(steps), batch, True
        if xs.ndim() != 3 or xs.shape[2] != self.input_size or 0 in xs.shape[:2]:
            layout = "(batch, seq, input_size)" if self.batch_first else "(seq, batch, input_size)"
            raise ValueError(
                f"GRU: expected a non-empty {layout} input with input_size {self.input_size}, got {xs.shape}"
            )
        inp = autograd.transpose(xs, (1, 0, 2)) if self.batch_first else xs
        return inp, inp.shape[0], inp.shape[1], False

    def _direction(self, inp: Any, k: int, n_steps: int, batch: int, h: Tensor | None, reverse: bool) -> list:
        pre = self._project(inp, k, n_steps, batch)
        if h is None:
            xp = pre[0].device.xp
            h = Tensor.wrap(xp.zeros((pre[0].shape[0], self.hidden_size), pre[0].dtype), pre[0].device)
        out: list = [None] * n_steps
        for t in range(n_steps - 1, -1, -1) if reverse else range(n_steps):
            h = self._step(pre[t], h, k)
            out[t] = h
        return out

    def forward(self, xs: Any, h0: Tensor | None = None) -> tuple:
        """Run the GRU; returns ``(y, h_n)``."""
        inp, n_steps, batch, list_form = self._steps_of(xs)
        hs0, h_2d = self._init_states(h0, batch, "h0")
        two_d = self.num_layers * self.num_directions == 1 and (h_2d or (list_form and h0 is None))
        h_last: list[Tensor] = []
        for layer in range(self.num_layers):
            per_dir = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                per_dir.append(self._direction(inp, k, n_steps, batch, hs0[k], reverse=d == 1))
                h_last.append(per_dir[-1][0 if d == 1 else -1])
            out = per_dir[0] if len(per_dir) == 1 else [autograd.cat([a, b], 1) for a, b in zip(*per_dir)]
            if layer < self.num_layers - 1 and self.dropout > 0:
                out = [autograd.dropout(o, self.dropout, training=self.training) for o in out]
            inp = out
        h_n = self._stack_states(h_last, two_d, batch)
        if list_form:
            return out, h_n
        width = out[0].shape[1]
        rows = [autograd.reshape(o, (1, -1, width)) for o in out]
        y = rows[0] if n_steps == 1 else autograd.cat(rows, 0)
        return (autograd.transpose(y, (1, 0, 2)) if self.batch_first else y), h_n


_MODES = {"lstm": "lstm", "gru": "gru", "vanilla": "tanh", "tanh": "tanh", "relu": "relu"}


class CudnnRNN(Layer):
    """SINGA's ``CudnnRNN`` API, computed by :class:`LSTM`, :class:`GRU` or :class:`RNN`.

    ``CudnnRNN(hidden_size, activation="tanh", num_layers=1, bias=True, batch_first=True,
    dropout=0, bidirectional=False, rnn_mode="lstm", use_mask=False, return_sequences=True)``
    with ``rnn_mode`` one of "lstm", "gru", "vanilla"/"tanh", "relu". The input size is
    taken from the first input. Call ``rnn(x, hx=None, cx=None, seq_lengths=None)``:

    - x: (batch, seq, in) (``batch_first``) or (seq, batch, in);
    - returns the outputs of every step, (batch, seq, D*H) or (seq, batch, D*H) with D
      the number of directions, when ``return_sequences``; else the last step's
      output, (batch, D*H);
    - with ``use_mask``, ``seq_lengths`` (an int tensor of shape (batch,)) gives each
      sequence's true length: steps past it are zero in the returned sequence, and the
      "last" step is the step at its length. Masking needs a single direction.

    Differs from SINGA: the weights are the inner layer's (``rnn.Wx.0``, ...) instead of
    one flat cuDNN-packed ``W``, and it runs on any device.
    """

    def __init__(
        self,
        hidden_size: int,
        activation: str = "tanh",
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        rnn_mode: str = "lstm",
        use_mask: bool = False,
        return_sequences: bool = True,
        name: str | None = None,
    ):
        super().__init__(name)
        if rnn_mode not in _MODES:
            raise ValueError(f"CudnnRNN: rnn_mode must be one of {sorted(_MODES)}, got {rnn_mode!r}")
        if int(hidden_size) < 1 or int(num_layers) < 1 or not 0 <= dropout < 1:
            raise ValueError(
                f"CudnnRNN: need hidden_size >= 1, num_layers >= 1 and 0 <= dropout < 1, "
                f"got {hidden_size}, {num_layers}, {dropout}"
            )
        self.hidden_size = int(hidden_size)
        self.activation = activation
        self.num_layers = int(num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)  # truthiness, as SINGA (a string counts as True)
        self.rnn_mode = rnn_mode
        self.use_mask = bool(use_mask)
        self.return_sequences = bool(return_sequences)
        if self.use_mask and self.bidirectional:
            raise ValueError("CudnnRNN: use_mask needs a single direction (bidirectional=False)")
        self.rnn: RNN_Base | None = None

    def initialize(
        self, x: Tensor, hx: Tensor | None = None, cx: Tensor | None = None, seq_lengths: Any = None
    ) -> None:
        """Create the inner recurrent layer for ``x``'s input size, device and dtype."""
        if x.ndim() != 3:
            raise ValueError(f"CudnnRNN: expected a 3-d input, got shape {x.shape}")
        args = (x.shape[2], self.hidden_size)
        kw = dict(
            num_layers=self.num_layers, bias=self.bias, dropout=self.dropout, bidirectional=self.bidirectional
        )
        mode = _MODES[self.rnn_mode]
        if mode == "lstm":
            self.rnn = LSTM(*args, **kw)
        elif mode == "gru":
            self.rnn = GRU(*args, **kw)
        else:
            self.rnn = RNN(*args, nonlinearity=mode, **kw)
        self.rnn.training = self.training
        self.rnn.initialize(x)

    def forward(
        self, x: Tensor, hx: Tensor | None = None, cx: Tensor | None = None, seq_lengths: Any = None
    ) -> Tensor:
        """Run the recurrence; see the class docstring for shapes."""
        if self.use_mask and seq_lengths is None:
            raise ValueError("CudnnRNN: use_mask=True needs seq_lengths")
        seq = autograd.transpose(x, (1, 0, 2)) if self.batch_first else x
        if isinstance(self.rnn, LSTM):
            y = self.rnn(seq, None if hx is None and cx is None else (hx, cx))[0]
        else:
            y = self.rnn(seq, hx)[0]
        if self.use_mask:
            return self._masked(y, seq_lengths)
        if not self.return_sequences:
            return autograd.reshape(autograd.gather(y, 0, [y.shape[0] - 1]), (-1, y.shape[2]))
        return autograd.transpose(y, (1, 0, 2)) if self.batch_first else y

    def _masked(self, y: Tensor, seq_lengths: Any) -> Tensor:
        """Zero the steps past each length; the last valid step when not returning sequences."""
        lengths = np.asarray(
            seq_lengths.to_numpy() if isinstance(seq_lengths, Tensor) else seq_lengths
        ).reshape(-1)
        n_steps, batch = y.shape[0], y.shape[1]
        if lengths.shape != (batch,) or lengths.min() < 1 or lengths.max() > n_steps:
            raise ValueError(
                f"CudnnRNN: seq_lengths must be {batch} lengths in [1, {n_steps}], got {lengths}"
            )
        steps = np.arange(n_steps)[:, None]
        pick = (steps == lengths[None, :] - 1) if not self.return_sequences else (steps < lengths[None, :])
        mask = Tensor.wrap(y.device.xp.asarray(pick[:, :, None].astype(y.dtype)), y.device)
        masked = autograd.mul(y, mask)
        if not self.return_sequences:
            return autograd.reshape(autograd.reduce_sum(masked, [0], 0), (-1, y.shape[2]))
        return autograd.transpose(masked, (1, 0, 2)) if self.batch_first else masked
