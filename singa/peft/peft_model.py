"""PeftModel: a base model with a PEFT method injected (SINGA's ``PeftModel`` and
``get_peft_model``).

The base model is changed in place (its targeted layers become LoRA layers) and the
wrapper hands every call to it: ``peft_model(x, y)`` runs the base model's
``train_one_batch`` (with its graph mode and precision), ``compile``,
``set_optimizer``, ``train``/``eval``, ``get_params``/``get_states``, checkpoints and
any other attribute (``peft_model.dimension``) are the base model's. State names are
the base model's own (``linear1.base_layer.W``, ``linear1.lora_A``).
"""

from __future__ import annotations

from typing import Any

from singa.layer import base as layer_base
from singa.layer.base import Layer
from singa.model.model import Model
from singa.peft import adapters as _adapters
from singa.peft.config import PeftConfig
from singa.peft.registry import PeftRegistry
from singa.tensor import Tensor

__all__ = ["PeftModel", "get_peft_model"]


def _count(tensors: Any) -> int:
    return sum(t.size() for t in tensors)


class PeftModel(Model):
    """A base model with the adapters of ``peft_config`` injected.

    Args:
        base_model: the model to adapt (changed in place).
        peft_config: a :class:`~singa.peft.PeftConfig` (e.g. ``LinearLoraConfig``).

    Attributes:
        peft_config, peft_type: the configuration and its method's name.
        tuner: the method's tuner (``tuner.targeted_layers`` lists the adapted layers).
    """

    def __init__(self, base_model: Layer, peft_config: PeftConfig):
        if not isinstance(base_model, Layer):
            raise TypeError(
                f"PeftModel: base_model must be a Model or Layer, not {type(base_model).__name__}"
            )
        if not isinstance(peft_config, PeftConfig):
            raise TypeError(f"PeftModel: peft_config must be a PeftConfig, got {type(peft_config).__name__}")
        tuner = PeftRegistry.get_tuner(peft_config.peft_type)(peft_config)
        super().__init__()
        self._base = tuner.inject(base_model)
        self.peft_config = peft_config
        self.peft_type = peft_config.peft_type
        self.tuner = tuner
        self._base.name_states()
        self._refresh()

    @property
    def base_model(self) -> Layer:
        """The adapted model (the same object that was given)."""
        return self._base

    @property
    def optimizer(self) -> Any:
        """The base model's optimizer."""
        return getattr(self.__dict__.get("_base"), "optimizer", None)

    @optimizer.setter
    def optimizer(self, value: Any) -> None:
        base = self.__dict__.get("_base")
        if base is not None:  # Model.__init__ sets None before the base is attached
            base.optimizer = value

    def __getattr__(self, name: str) -> Any:
        # only reached for names PeftModel does not have: the base model's attributes
        base = self.__dict__.get("_base")
        if base is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(base, name)

    def _refresh(self) -> None:
        """The base model's weights or its computation changed: drop its traces."""
        if isinstance(self._base, Model):
            self._base.reset_graph()

    # ----- delegations ------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The base model's call (``train_one_batch`` or ``forward``). A base model
        that creates its parameters lazily must be compiled (or called in evaluation
        mode) before it trains: the new base parameters are frozen once they exist."""
        if self._base.training and not self._ready():
            raise RuntimeError(
                "PeftModel: the base model has not created its parameters yet; "
                "compile it (peft_model.compile([x])) before training"
            )
        made = layer_base.initializations
        try:
            return self._base(*args, **kwargs)
        finally:
            if made != layer_base.initializations:
                self._after_creation()

    def _ready(self) -> bool:
        """Whether every layer of the base model has its parameters (remembered once true)."""
        if not self.__dict__.get("_created", False):
            layers = [self._base, *self._base.sublayers().values()]
            self._created = not any(s.awaiting_first_call for s in layers)
        return self._created

    def _after_creation(self) -> None:
        """Freeze the base parameters created by a first call, name the tensors."""
        self.tuner.freeze_new_parameters(self._base)
        self._base.name_states()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The base model's ``forward``."""
        return self._base.forward(*args, **kwargs)

    def train_one_batch(self, *args: Any, **kwargs: Any) -> Any:
        """The base model's ``train_one_batch``."""
        return self._base.train_one_batch(*args, **kwargs)

    def set_optimizer(self, optimizer: Any) -> None:
        """Attach the optimizer to the base model (it updates only the trainable
        tensors: the adapters and any ``modules_to_save``)."""
        self._base.set_optimizer(optimizer)

    def compile(self, inputs: list, is_train: bool = True, use_graph: bool = False, sequential: bool = False,
                precision: str | None = None) -> None:  # fmt: skip
        """The base model's ``compile`` (creates adapters of layers not called yet)."""
        self._base.compile(inputs, is_train, use_graph, sequential, precision)
        self._after_creation()

    def train(self, mode: bool = True) -> PeftModel:
        """Training mode for the base model (and this wrapper). Returns self."""
        self.training = mode
        self._base.train(mode)
        return self

    def eval(self) -> PeftModel:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def graph(self, mode: bool = True, sequential: bool = False, fold_batchnorm: bool | None = None) -> None:
        """The base model's graph mode."""
        self._base.graph(mode, sequential, fold_batchnorm)

    def reset_graph(self) -> None:
        """Drop the base model's traces."""
        if isinstance(self._base, Model):
            self._base.reset_graph()

    def name_states(self) -> None:
        """Name the tensors after their paths in the base model."""
        self._base.name_states()

    def summary(self, input_shape: Any = None, *, print_fn: Any = print, dtype: Any = None) -> str:
        """The base model's summary table (its frozen weights count as non-trainable;
        the totals give the trainable fraction)."""
        return self._base.summary(input_shape, print_fn=print_fn, dtype=dtype)

    def sublayers(self) -> dict[str, Layer]:
        """The base model's sublayers."""
        return self._base.sublayers()

    def get_params(self) -> dict[str, Tensor]:
        """The trainable tensors (adapters, ``modules_to_save``) by name, as SINGA's
        PeftModel lists them (the base model's own ``get_params()`` also lists the
        frozen weights, which keep ``stores_grad``; see :func:`singa.peft.set_frozen`)."""
        return {n: t for n, t in self._base.get_params().items() if t.requires_grad}

    def get_states(self) -> dict[str, Tensor]:
        """Every tensor of the base model (frozen weights too) by name."""
        return self._base.get_states()

    def set_params(self, params: Any, strict: bool = True) -> Any:
        """Copy values into the trainable tensors (those of :meth:`get_params`);
        with ``strict`` every name, shape and dtype is checked first (ValueError,
        nothing changed)."""
        own = self.get_params()
        if strict and isinstance(params, dict):
            problems = [f"missing: {n}" for n in own if n not in params]
            problems += [f"unexpected: {n}" for n in params if n not in own]
            problems += [
                f"mismatched: {n}: expected {own[n].shape} {own[n].dtype}, found {tuple(v.shape)} {v.dtype}"
                for n, v in params.items()
                if n in own and (tuple(v.shape) != own[n].shape or v.dtype != own[n].dtype)
            ]
            if problems:
                raise ValueError("PeftModel.set_params: " + "; ".join(problems))
        given = {n: v for n, v in params.items() if n in own} if isinstance(params, dict) else params
        result = self._base.set_states(given, strict=False)
        self._refresh()
        return result

    def set_states(self, states: Any, strict: bool = True) -> Any:
        """The base model's ``set_states``."""
        result = self._base.set_states(states, strict)
        self._refresh()
        return result

    def save_states(self, fpath: str, aux_states: dict | None = None, *, compress: bool = False) -> None:
        """A full checkpoint of the base model with its adapters (see
        :meth:`save_adapters` for the adapters alone)."""
        self._base.save_states(fpath, aux_states, compress=compress)

    def load_states(self, fpath: str, strict: bool = True) -> dict:
        """Load a full checkpoint written by :meth:`save_states`."""
        try:
            return self._base.load_states(fpath, strict)
        finally:
            self._refresh()

    # ----- PEFT --------------------------------------------------------------------------------------
    def merge_weights(self, mode: bool = True) -> None:
        """Merge the adapters into the base weights (``mode=True``: the model then
        runs as the plain model) or take them out again (``mode=False``)."""
        self.tuner.merge_weights(self._base, mode)
        self._refresh()

    def merge_and_unload(self) -> Layer:
        """Merge the adapters and put the base layers back: returns the base model as
        a plain model (same class, same state names as before ``get_peft_model``,
        base weights trainable again) holding the merged weights. This wrapper holds
        no adapters afterwards."""
        self.tuner.unload(self._base, merge=True)
        self._refresh()
        return self._base

    def unload(self) -> Layer:
        """Put the base layers back without merging (the original model)."""
        self.tuner.unload(self._base, merge=False)
        self._refresh()
        return self._base

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """(trainable values, all parameter values including the frozen ones), as
        peft counts them."""
        return _count(self.get_params().values()), _count(self._base.get_params().values())

    def trainable_fraction(self) -> float:
        """The fraction of parameter values that train (0 for a model without any)."""
        trainable, total = self.get_nb_trainable_parameters()
        return trainable / total if total else 0.0

    def print_trainable_parameters(self) -> None:
        """Print peft's line: ``trainable params: N || all params: M || trainable%: P``."""
        trainable, total = self.get_nb_trainable_parameters()
        pct = 100 * self.trainable_fraction()
        print(f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: {pct:.4f}")

    def save_adapters(self, path: Any, *, compress: bool = False) -> _adapters.SavedAdapters:
        """Save only the adapters (and ``modules_to_save``) with the configuration,
        atomically, in the checkpoint zip format; returns what was written (path,
        size in bytes, tensor and value counts). See :mod:`singa.peft.adapters`."""
        return _adapters.save_adapters(self.tuner, self._base, path, compress=compress)

    def load_adapters(self, path: Any) -> None:
        """Load adapters written by :meth:`save_adapters` (validated first: a file
        for another configuration or other layers changes nothing)."""
        _adapters.load_adapters(self.tuner, self._base, path)
        self._refresh()

    @classmethod
    def from_adapters(cls, base_model: Layer, path: Any) -> PeftModel:
        """Inject the configuration saved in an adapter file into ``base_model``
        (whose layers must have their weights) and load the adapters."""
        config = _adapters.read_config(path)
        peft_model = cls(base_model, config)
        try:
            peft_model.load_adapters(path)
        except Exception:
            peft_model.unload()
            raise
        return peft_model

    def __repr__(self) -> str:
        return f"PeftModel({type(self._base).__name__}, {self.peft_config!r})"


def get_peft_model(base_model: Layer, peft_config: PeftConfig) -> PeftModel:
    """``PeftModel(base_model, peft_config)``: the base model with the adapters of
    ``peft_config`` injected (in place)."""
    return PeftModel(base_model, peft_config)
