"""The Model API: a :class:`~singa.layer.Layer` that trains itself one batch at a time
and can run in graph mode.

Subclass :class:`Model`, define ``forward`` and ``train_one_batch``, attach an
optimizer, compile on placeholders, and call the model::

    class MLP(model.Model):
        def __init__(self):
            super().__init__()
            self.linear1 = layer.Linear(100)
            self.relu = layer.ReLU()
            self.linear2 = layer.Linear(10)
            self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

        def forward(self, x):
            return self.linear2(self.relu(self.linear1(x)))

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = self.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    m = MLP()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    m.compile([tx], is_train=True, use_graph=True, sequential=False)
    for x, y in batches:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        out, loss = m(tx, ty)      # train_one_batch (training mode)
    m.eval()
    logits = m(tx)                 # forward (evaluation mode)

In graph mode the first call for each signature is traced and later calls replay it
(see :mod:`singa.model.graph` for what is recorded and the limits of tracing). An
evaluation call replays the forward with eval-only fusions (:mod:`singa.model.inference`):
bitwise equal to eager evaluation by default, and with ``fold_batchnorm=True``
(:meth:`Model.graph`) BatchNorm folded into the preceding weights, close to eager
evaluation to float32 rounding but not bitwise.
"""

from __future__ import annotations

import functools
from collections import Counter, OrderedDict
from typing import Any

import singa.autograd as _ag
from singa import checkpoint
from singa.autograd.engine import no_grad
from singa.kernels import buffers, heap, workers
from singa.layer import base as _layer_base
from singa.layer.base import Layer
from singa.model import freezing as _freezing
from singa.model import inference as _inference
from singa.model import precision as _precision
from singa.model import training_fusion as _training_fusion
from singa.model.graph import Graph, Recorder
from singa.model.outputs import flatten_outputs, rebuild_outputs
from singa.tensor import Tensor

__all__ = ["Model"]

#: traces kept per model (least recently used ones are dropped first)
MAX_GRAPHS = 16


class Model(Layer):
    """Base class of trainable models (SINGA's ``singa.model.Model``).

    Attributes:
        optimizer: set by :meth:`set_optimizer`; ``train_one_batch`` usually calls it.
        graph_mode: whether calls are traced and replayed.
        sequential: whether replays keep the recorded kernel order.
        precision: "float32" (default), "mixed" or "float16"; set by :meth:`compile`
            (see :mod:`singa.model.precision`).
        fold_batchnorm: whether evaluation replays fold BatchNorm into the preceding
            convolution or linear weights (set by :meth:`graph`; default False).
    """

    def __init__(self, name: str | None = None):
        super().__init__(name)
        self.optimizer = None
        self.graph_mode = False
        self.sequential = False
        self._graphs: OrderedDict = OrderedDict()
        self.precision = "float32"
        self.fold_batchnorm = False
        self._states_version = 0  # advanced whenever the model's states may have changed
        self.stop_training = False  # a fit callback sets it to end the run after the batch
        self.input_shapes: list | None = None  # one sample's shape per input, set by compile

    # ----- what subclasses define ---------------------------------------------------------
    def forward(self, *inputs: Any) -> Any:
        """The model's output for a batch."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def train_one_batch(self, *inputs: Any) -> Any:
        """One training step (forward, loss, ``self.optimizer(loss)``); returns what
        the caller of ``model(...)`` receives, e.g. ``(out, loss)``."""
        raise NotImplementedError(f"{type(self).__name__}.train_one_batch")

    def set_optimizer(self, optimizer: Any) -> None:
        """Attach the optimizer that ``train_one_batch`` uses (``self.optimizer``)."""
        _precision.attach_scaler(self, optimizer)
        self.optimizer = optimizer
        self._graphs.clear()
        if self.initialized:  # compiled (or called) already: its states exist
            self._share_rank0_states()

    # ----- configuration ---------------------------------------------------------------------
    def compile(
        self,
        inputs: list,
        is_train: bool = True,
        use_graph: bool = False,
        sequential: bool = False,
        precision: str | None = None,
    ) -> None:
        """Create every parameter by running ``forward`` once on ``inputs`` (Tensors of
        the batch shape; their values do not matter), then set training mode and graph
        mode. This forward runs in evaluation mode without recording, and the values of
        the states that existed before are restored, so no parameter or running
        statistic changes (random initialisers of new parameters do draw from the
        device generator).

        ``precision`` ("float32", "mixed" or "float16"; None keeps the current one)
        chooses the precision policy: "mixed" computes in float16 on float32 master
        weights with dynamic loss scaling (see :mod:`singa.model.precision`)."""
        if precision is not None:
            _precision.get_policy(precision)  # validate before anything changes
        if isinstance(inputs, Tensor):
            inputs = [inputs]
        if not isinstance(inputs, list | tuple) or not all(isinstance(t, Tensor) for t in inputs):
            raise ValueError(
                f"{type(self).__name__}.compile: inputs must be a list of Tensors, got {inputs!r}"
            )
        before = {n: t.data.copy() for n, t in self.get_states().items()}
        self.train(False)
        prev = (self.graph_mode, self.sequential)
        self.graph_mode = False
        try:
            with no_grad():
                self.ensure_initialized(*inputs)
                self.forward(*inputs)
        finally:
            self.graph_mode, self.sequential = prev
        states = self.get_states()
        for n, arr in before.items():
            if n in states:
                states[n].data[...] = arr
        self.name_states()
        self.input_shapes = [tuple(t.shape[1:]) for t in inputs]
        if precision is not None:
            _precision.set_precision(self, precision)
        self._share_rank0_states()
        self.train(is_train)
        self.graph(use_graph, sequential)

    def _share_rank0_states(self) -> None:
        """Data-parallel training: every rank starts from rank 0's states."""
        from singa.opt.dist import DistOpt

        if isinstance(self.optimizer, DistOpt):
            self.optimizer.broadcast_params(self.get_states())

    def train(self, mode: bool = True) -> Model:
        """Training mode: calling the model runs ``train_one_batch``. As in SINGA this
        also sets ``autograd.training`` to ``mode`` (so operators keep what backward
        needs only in training mode). Training mode drops the evaluation graphs that
        hold folded weights (training changes the parameters). Returns self."""
        super().train(mode)
        _ag.training = bool(mode)
        if mode:
            self._states_changed()
        return self

    def eval(self) -> Model:
        """Evaluation mode: calling the model runs ``forward`` and ``autograd.training``
        is False (operators still record their graph, for ``sonnx.to_onnx``, but keep
        no backward caches). Returns self."""
        return self.train(False)

    def graph(self, mode: bool = True, sequential: bool = False, fold_batchnorm: bool | None = None) -> None:
        """Turn graph mode on or off; ``sequential`` chooses recorded-order replay.

        ``fold_batchnorm`` (None keeps the current setting, initially False): whether
        evaluation replays fold each BatchNorm into the convolution or linear layer
        before it and run 3x3 and 5x5 convolutions as Winograd convolutions (see
        :mod:`singa.model.inference`). Folded results match eager evaluation to
        float32 rounding, not bitwise; the folded weights are rebuilt
        after ``train()``, an optimizer step (its ``steps``), ``set_states``/``set_params`` and
        ``load_states``. After changing a parameter's values any other way
        (``copy_from``, writing into ``tensor.data``) call :meth:`reset_graph`."""
        self.graph_mode = bool(mode)
        self.sequential = bool(sequential)
        if fold_batchnorm is not None:
            self.fold_batchnorm = bool(fold_batchnorm)

    def freeze(self, *patterns: str) -> list[str]:
        """Stop training the parameters whose dotted names match any glob in ``patterns``
        (``"features.*"``, ``"conv1"``: a layer's name covers its parameters): they get
        no gradient, no update and no optimizer state. Returns the names frozen; a
        pattern matching no parameter raises ``ValueError`` (nothing changes). Call it
        after ``compile`` (lazy layers create their parameters then)."""
        params = self.get_params()
        names = _freezing.matching(params, patterns or ("*",), "freeze")
        _freezing.set_trainable(params, names, False)
        self._graphs.clear()
        return names

    def unfreeze(self, *patterns: str) -> list[str]:
        """Train again the parameters matching ``patterns`` (default: all); returns their names."""
        params = self.get_params()
        names = _freezing.matching(params, patterns or ("*",), "unfreeze")
        _freezing.set_trainable(params, names, True)
        self._graphs.clear()
        return names

    def frozen(self) -> list[str]:
        """The names of the parameters that get no gradient."""
        return [n for n, t in self.get_params().items() if not t.requires_grad]

    def reset_graph(self) -> None:
        """Drop every cached trace (the next call traces again)."""
        self._graphs.clear()

    def set_states(self, states: Any, strict: bool = True) -> Any:
        """See :meth:`singa.layer.Layer.set_states`; evaluation graphs holding folded
        weights are rebuilt on their next call."""
        result = super().set_states(states, strict)
        self._states_changed()
        return result

    def set_params(self, params: Any, strict: bool = True) -> Any:
        """See :meth:`singa.layer.Layer.set_params`; evaluation graphs holding folded
        weights are rebuilt on their next call."""
        result = super().set_params(params, strict)
        self._states_changed()
        return result

    def _states_changed(self) -> None:
        """The states may have new values: forget the graphs built from their old ones."""
        self._states_version += 1
        for key in [k for k, (g, _) in self._graphs.items() if getattr(g, "folded", False)]:
            del self._graphs[key]

    def _stamp(self) -> tuple:
        """What a folded evaluation graph was built from: the states' version and the
        optimizer's step."""
        return (self._states_version, id(self.optimizer), getattr(self.optimizer, "steps", None))

    # ----- calling -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``train_one_batch(*args)`` in training mode (keeping what backward needs
        whatever ``autograd.training`` was), ``forward(*args)`` in evaluation mode
        (recording the graph without backward caches). In graph mode the call is traced
        or replayed. Tensors created by the call get their dotted names."""
        training = self.training
        made = _layer_base.initializations
        if not training:
            self.ensure_initialized(*args, **kwargs)
        fn = self.train_one_batch if training else self.forward
        if self.precision != "float32":
            fn = functools.partial(_precision.call, self, fn)
        prev = _ag.training
        _ag.training = training
        heap.keep_freed_memory()  # a step's freed temporaries serve the next step
        try:
            with workers.blas_for_workers():
                if self.graph_mode:
                    return self._call_graph(fn, training, args, kwargs)
                return fn(*args, **kwargs)
        finally:
            _ag.training = prev
            if made != _layer_base.initializations:
                self.name_states()

    def _signature(self, training: bool, args: tuple, kwargs: dict) -> tuple | None:
        """The trace cache key, or None when the arguments cannot be keyed."""
        parts: list = [training, self.sequential, id(self.optimizer), not training and self.fold_batchnorm]
        seen: dict[int, int] = {}
        for v in list(args) + [kwargs[k] for k in sorted(kwargs)]:
            if isinstance(v, Tensor):
                first = seen.setdefault(id(v.data), len(seen))
                parts.append(("T", v.shape, v.dtype.str, v.device.id, v.requires_grad, first))
            else:
                try:
                    hash(v)
                except TypeError:
                    return None
                parts.append(("V", type(v).__name__, v))
        parts.append(tuple(sorted(kwargs)))
        return tuple(parts)

    def _call_graph(self, fn: Any, training: bool, args: tuple, kwargs: dict) -> Any:
        tensors = [v for v in list(args) + [kwargs[k] for k in sorted(kwargs)] if isinstance(v, Tensor)]
        if not tensors:
            return fn(*args, **kwargs)  # nothing to trace: eager
        key = self._signature(training, args, kwargs)
        dev = tensors[0].device
        if key is None or dev.recorder is not None or any(t.device is not dev for t in tensors):
            return fn(*args, **kwargs)  # not traceable (or already being recorded): eager
        if dev.profiler is not None:
            return fn(*args, **kwargs)  # time profiling times each operator: eager
        entry = self._graphs.get(key)
        if entry is not None:
            graph, checks = entry
            if all(t.data is a for t, a in checks) and (not graph.folded or graph.stamp == self._stamp()):
                self._graphs.move_to_end(key)
                outs = graph(_distinct_arrays(tensors))
                return rebuild_outputs(graph.out_template, [Tensor.wrap(a, dev) for a in outs])
            del self._graphs[key]
        return self._trace(fn, key, dev, tensors, args, kwargs)

    def _trace(self, fn: Any, key: tuple, dev: Any, tensors: list, args: tuple, kwargs: dict) -> Any:
        arrays = _distinct_arrays(tensors)
        rec = Recorder(dev, arrays, inplace=not self.sequential)
        dev.recorder = rec
        try:
            result = fn(*args, **kwargs)
        finally:
            dev.recorder = None
        leaves: list = []
        template = flatten_outputs(result, leaves)
        outs = [t.data for t in leaves]
        training = key[0]
        if training or self.precision != "float32":
            fuses = training and not self.sequential and self.precision == "float32"
            fusions = _training_fusion.fuse(rec, [rec.slot(a) for a in outs]) if fuses else Counter()
            graph = Graph(rec, template, outs, self.sequential)
            graph.folded = False
            graph.fusions = fusions
        else:
            graph = _inference.build_graph(rec, template, outs, self.sequential, self.fold_batchnorm)
            graph.stamp = self._stamp()
        del rec
        _release_trace_buffers()
        checks = [(t, t.data) for t in self.get_states().values()]
        self._graphs[key] = (graph, checks)
        while len(self._graphs) > MAX_GRAPHS:
            self._graphs.popitem(last=False)
        return result

    # ----- training loops (singa.model.fit) and summary (singa.model.summary) ----------------
    def fit(self, x: Any, y: Any = None, **kwargs: Any) -> Any:
        """Train on ``x`` (a numpy array with targets ``y``, a DataLoader, or any
        iterable of ``(x, y)`` batches) through this model's ``train_one_batch``;
        returns a :class:`singa.callbacks.History`. Keras's keywords: ``batch_size=32,
        epochs=1, validation_data=None, validation_split=0.0, shuffle=True, seed=None,
        callbacks=(), initial_epoch=0, steps_per_epoch=None, verbose=1``, plus
        ``accumulate=k`` (one update from k batches' gradients), ``metrics=[...]``,
        ``loss=`` (the validation loss), ``use_graph=True`` (for a model compiled here,
        on the first batch) and ``time_budget=seconds`` (see :mod:`singa.model.fit`)."""
        from singa.model import fit as _fit

        return _fit.fit(self, x, y, **kwargs)

    def evaluate(self, x: Any, y: Any = None, **kwargs: Any) -> dict:
        """``{"loss": ..., <metric>: ...}`` over the data in evaluation mode, summed in
        float64 over every sample (keywords ``batch_size``, ``steps``, ``metrics``,
        ``loss``, ``callbacks``; see :func:`singa.model.fit.evaluate`)."""
        from singa.model import fit as _fit

        return _fit.evaluate(self, x, y, **kwargs)

    def predict(self, x: Any, **kwargs: Any) -> Any:
        """The outputs for ``x`` as one numpy array, computed batch by batch in
        evaluation mode (the mode found is restored); keywords ``batch_size``, ``steps``."""
        from singa.model import fit as _fit

        return _fit.predict(self, x, **kwargs)

    def summary(self, input_shape: Any = None, *, print_fn: Any = print, dtype: Any = None) -> str:
        """Print and return a table of every layer (dotted name, type, output shape,
        parameters, trainable) with totals, parameter bytes and multiply-accumulates
        per sample; ``input_shape`` is one sample's shape (or a list of them), needed
        unless the model has run (see :mod:`singa.model.summary`)."""
        from singa.model import summary as _summary

        return _summary.summary(self, input_shape, print_fn=print_fn, dtype=dtype)

    # ----- delegations ---------------------------------------------------------------------------
    def save_states(self, fpath: str, aux_states: dict | None = None, *, compress: bool = False) -> None:
        """Save a checkpoint (see :func:`singa.checkpoint.save_model`): the model's
        states, its optimizer's, the device's random state and ``aux_states``, in one zip
        written atomically. ``compress`` deflates the arrays (smaller, slower)."""
        checkpoint.save_model(self, fpath, aux_states, compress=compress)

    def load_states(self, fpath: str, strict: bool = True) -> dict:
        """Load a checkpoint in place; returns its aux_states dict
        (see :func:`singa.checkpoint.load_model`)."""
        try:
            return checkpoint.load_model(self, fpath, strict=strict)
        finally:
            self._states_changed()


def _release_trace_buffers() -> None:
    """A trace keeps every intermediate array alive until it is compiled, so the
    operators' buffer pool (:func:`singa.kernels.buffers.scratch`) had to grow to
    cover all of them at once; forget those buffers (arrays in use stay valid) so
    replays start from a pool sized by their own needs, as eager steps do."""
    buffers.clear_scratch()


def _distinct_arrays(tensors: list) -> list:
    """The tensors' arrays, each once, in order (a graph's input buffers)."""
    arrays, ids = [], set()
    for t in tensors:
        if id(t.data) not in ids:
            ids.add(id(t.data))
            arrays.append(t.data)
    return arrays
