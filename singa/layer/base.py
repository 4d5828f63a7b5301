"""The Layer base class: lazy parameter creation, state naming, training mode.

A layer creates its parameters on the first call, from the input's shape
(``Linear(10)`` needs no input size), unless the sizes were given up front.
Sublayers and tensors are found by walking the layer's attributes, including inside
lists, tuples and dicts, and named by their dotted path (``block1.layers.1.W``).
Once created, each tensor also carries that name in ``Tensor.name`` (as in SINGA):
a layer names the tensors below it after its first call (from the outermost layer
holding it: each layer remembers the first layer attribute it was assigned to), and
a :class:`~singa.model.Model` renames them after ``compile`` and after any call that
created tensors (so ``m.linear1.W.name == "linear1.W"``).

Tensors held by a layer are its state: those with ``stores_grad`` are parameters
(:meth:`Layer.get_params`), the others buffers such as BatchNorm's running
statistics (:meth:`Layer.get_states` lists both). Keep any other tensor in an
attribute whose name starts with ``_``: such attributes are not walked.

Example::

    class MLP(Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = Linear(100)
            self.fc2 = Linear(10)

        def forward(self, x):
            return self.fc2(autograd.relu(self.fc1(x)))
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from singa.tensor import Tensor


@dataclass
class LoadResult:
    """What ``set_states(..., strict=False)`` skipped: names of the layer's states with
    no value given, names given that the layer does not have, and entries whose shape or
    dtype differ (``name: expected ..., found ...``)."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    #: layers (``path (Type)``, or the class name for the layer itself) that would own
    #: some unexpected names but have not created their parameters yet
    uninitialized: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.mismatched)

    def describe(self) -> str:
        """One line per problem, for error messages."""
        parts = [f"missing: {n}" for n in self.missing]
        parts += [f"unexpected: {n}" for n in self.unexpected]
        parts += [f"mismatched: {m}" for m in self.mismatched]
        parts += [
            f"{u} has no parameters yet: call it once on an input or give the input sizes"
            for u in self.uninitialized
        ]
        return "; ".join(parts)


def _check_types(where: str, own: dict[str, Tensor], given: Any) -> None:
    """TypeError unless ``given`` maps string names to arrays (for the names in ``own``)."""
    if not isinstance(given, Mapping):
        raise TypeError(f"{where}: expected a dict of name -> array, got a {type(given).__name__}")
    bad_keys = [repr(k) for k in given if not isinstance(k, str)]
    if bad_keys:
        raise TypeError(f"{where}: names must be strings, got {', '.join(bad_keys)}")
    bad = [f"{n!r} is a {type(given[n]).__name__}" for n in own if n in given and not _is_array(given[n])]
    if bad:
        raise TypeError(f"{where}: values must be Tensors or numpy/cupy arrays: {', '.join(bad)}")


def _is_array(v: Any) -> bool:
    """A Tensor, a numpy array or scalar, or a cupy array."""
    return isinstance(v, Tensor | np.ndarray | np.generic) or type(v).__module__.partition(".")[0] == "cupy"


def _adopt(parent: Layer, path: str, value: Any) -> None:
    """Remember, in each layer found in ``value`` (inside lists, tuples and dicts too),
    the first layer and attribute path it was assigned to (by weak reference, so a
    sublayer neither keeps its parent alive nor drags it into a copy)."""
    if isinstance(value, Layer):
        if value is not parent and "_owner" not in value.__dict__:
            value.__dict__["_owner"] = (weakref.ref(parent), path)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if isinstance(v, Layer | list | tuple | dict):
                _adopt(parent, f"{path}.{i}", v)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, Layer | list | tuple | dict):
                _adopt(parent, f"{path}.{k}", v)


#: how many layers have run their ``initialize`` (a Model renames its tensors when
#: this changes during one of its calls)
initializations = 0


class Layer:
    """Base class of layers and models.

    Subclasses implement ``forward(*inputs)`` and, when parameters depend on the input
    shape, ``initialize(*inputs)``, which runs once before the first ``forward``
    (through :meth:`ensure_initialized`, the only caller of ``initialize``).
    """

    def __init__(self, name: str | None = None):
        self.name = name
        self.training = True
        self._initialized = False
        self._initialize_hook: Callable[..., None] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if not name.startswith("_"):
            _adopt(self, name, value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # As in SINGA, ``initialize`` also runs when a program calls ``forward`` directly
        # on a layer that has not been called yet, and an explicit ``initialize(x)`` call
        # counts as the first call (it is not repeated by the next ``layer(x)``).
        super().__init_subclass__(**kwargs)
        if "forward" in vars(cls):
            cls.forward = _initializing_forward(vars(cls)["forward"])
        if "initialize" in vars(cls):
            cls.initialize = _marking_initialize(vars(cls)["initialize"])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.initialized:
            return self.forward(*args, **kwargs)
        self.ensure_initialized(*args, **kwargs)
        out = self.forward(*args, **kwargs)
        self.name_states()
        return out

    # ----- lazy parameter creation ---------------------------------------------------------
    def initialize(self, *args: Any, **kwargs: Any) -> None:
        """Create the parameters from the first inputs (default: nothing to create)."""

    def ensure_initialized(self, *args: Any, **kwargs: Any) -> None:
        """Run :meth:`initialize` on these inputs unless it has run already. A load hook
        (:meth:`set_initialize_hook`) is removed and called as ``hook(create, *args,
        **kwargs)`` instead, where ``create()`` runs ``initialize``."""
        global initializations
        if self.initialized:
            return
        hook, self._initialize_hook = getattr(self, "_initialize_hook", None), None
        if hook is None:
            self.initialize(*args, **kwargs)
        else:
            hook(lambda: self.initialize(*args, **kwargs), *args, **kwargs)
        self._initialized = True
        initializations += 1

    @property
    def initialized(self) -> bool:
        """Whether the first call (and so :meth:`initialize`) has run. A layer whose
        subclass skipped ``Layer.__init__`` counts as initialized."""
        return getattr(self, "_initialized", True)

    @property
    def awaiting_first_call(self) -> bool:
        """True for a layer that has not run its first call and creates (or adapts) its
        parameters then, i.e. overrides :meth:`initialize`."""
        return not self.initialized and type(self).initialize is not Layer.initialize

    def set_initialize_hook(self, hook: Callable[..., None] | None) -> None:
        """The load hook: checkpoint loading before the first call installs one to check
        and copy held values right after the parameters are created (``None`` removes
        it). See :meth:`ensure_initialized`."""
        self._initialize_hook = hook

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the layer's output."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    # ----- walking the attributes ----------------------------------------------------
    def _walk(self) -> Iterator[tuple[str, Any]]:
        """Yield (dotted name, object) for every sublayer and tensor reachable from this
        layer's public attributes, each object once (the first path wins), in depth-first
        order. One generator over an explicit stack instead of nested generators: an item
        no longer passes up through a generator frame per level (a ResNet-20's walk took
        2.8 ms, half of an asynchronous checkpoint save's blocking time), and a caller
        that needs only the first tensor still stops early."""
        seen: set[int] = {id(self)}
        stack = _public_attrs("", self)
        while stack:
            prefix, obj = stack.pop()
            if isinstance(obj, _NODES):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                yield prefix, obj
                if isinstance(obj, Layer):
                    stack += _public_attrs(prefix + ".", obj)
            elif isinstance(obj, _SEQUENCES):
                stack += [(f"{prefix}.{i}", v) for i, v in enumerate(obj)][::-1]
            elif isinstance(obj, dict):
                stack += [(f"{prefix}.{k}", v) for k, v in obj.items()][::-1]

    def name_states(self) -> None:
        """Set ``Tensor.name`` of every tensor below this layer to its dotted path from
        the outermost layer holding this one (``linear1.W``)."""
        prefix = self._path()
        for n, o in self._walk():
            if isinstance(o, Tensor):
                o.name = f"{prefix}.{n}" if prefix else n

    def _path(self) -> str:
        """The dotted path of this layer from the outermost layer that holds it (each
        layer remembers the first attribute of a layer it was assigned to)."""
        parts: list[str] = []
        node, seen = self, {id(self)}
        while True:
            owner = node.__dict__.get("_owner")
            parent = None if owner is None else owner[0]()
            if owner is None or parent is None or id(parent) in seen:
                return ".".join(reversed(parts))
            node = parent
            seen.add(id(node))
            parts.append(owner[1])

    def sublayers(self) -> dict[str, Layer]:
        """Every layer below this one, by dotted name."""
        return {n: o for n, o in self._walk() if isinstance(o, Layer)}

    def get_params(self) -> dict[str, Tensor]:
        """Trainable parameters (tensors with ``stores_grad``) by dotted name."""
        return {n: o for n, o in self._walk() if isinstance(o, Tensor) and o.stores_grad}

    def get_states(self) -> dict[str, Tensor]:
        """Parameters and buffers (e.g. ``bn1.running_mean``) by dotted name."""
        return {n: o for n, o in self._walk() if isinstance(o, Tensor)}

    def set_params(self, params: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Copy values into the parameters; see :meth:`set_states`."""
        return self._load("set_params", self.get_params(), params, strict)

    def set_states(self, states: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Copy values (Tensors, numpy or cupy arrays) into the parameters and buffers,
        in place.

        Every key, shape and dtype is checked first. With ``strict=True`` any missing,
        unexpected or mismatched entry raises one ValueError listing them all and
        nothing is changed; with ``strict=False`` the matching entries are loaded and
        the rest are returned in a :class:`LoadResult`. A value that is not an array
        (a list, a float) raises TypeError naming its key, whatever ``strict`` is (as
        PyTorch's ``load_state_dict``, which requires tensors; convert with
        ``np.asarray`` first). A layer that creates its parameters on its first call
        has none before it: the error says so (call it once, or give its input sizes).
        """
        return self._load("set_states", self.get_states(), states, strict)

    def _load(
        self, method: str, own: dict[str, Tensor], given: Mapping[str, Any], strict: bool
    ) -> LoadResult:
        where = f"{type(self).__name__}.{method}"
        _check_types(where, own, given)
        result = LoadResult(
            missing=[n for n in own if n not in given],
            unexpected=[n for n in given if n not in own],
        )
        if result.unexpected:
            result.uninitialized = self._uninitialized_owners(result.unexpected)
        ok = []
        for name, t in own.items():
            if name not in given:
                continue
            v = given[name]
            shape = tuple(v.shape)
            dtype = np.dtype(v.dtype)
            if shape != t.shape or dtype != t.dtype:
                result.mismatched.append(f"{name}: expected {t.shape} {t.dtype}, found {shape} {dtype}")
            else:
                ok.append((t, v))
        if strict and result:
            raise ValueError(f"{where}: {result.describe()}")
        for t, v in ok:
            t.copy_from(v)
        return result

    def _uninitialized_owners(self, names: list[str]) -> list[str]:
        """The not-yet-initialized layers (deepest first match) owning any of ``names``."""

        def empty_lazy(layer: Layer) -> bool:  # sized layers (Linear(4, 5)) have theirs already
            return layer.awaiting_first_call and not layer.get_states()

        lazy = {p: s for p, s in self.sublayers().items() if empty_lazy(s)}
        if empty_lazy(self):
            lazy[""] = self
        owners: list[str] = []
        for n in names:
            best = max((p for p in lazy if p == "" or n.startswith(p + ".")), key=len, default=None)
            if best is None:
                continue
            label = type(self).__name__ if best == "" else f"{best} ({type(lazy[best]).__name__})"
            if label not in owners:
                owners.append(label)
        return owners

    # ----- SINGA's helpers for layer authors -------------------------------------------
    def register_layers(self, *layers: Any) -> None:
        """Make sublayers kept outside attributes part of this layer (SINGA's API).

        Give layers (named ``<ClassName>_<position>``, as SINGA names them) or one dict
        of name -> layer. A layer already reachable from an attribute keeps that name.
        """
        if len(layers) == 1 and isinstance(layers[0], Mapping):
            items = list(layers[0].items())
        else:
            items = [(f"{type(v).__name__}_{i}", v) for i, v in enumerate(layers)]
        bad = [repr(n) for n, v in items if not isinstance(v, Layer)]
        if bad:
            raise TypeError(f"register_layers: not layers: {', '.join(bad)}")
        for name, _ in items:
            if not name.isidentifier():
                raise ValueError(f"register_layers: {name!r} is not a valid attribute name")
        for name, sub in items:
            setattr(self, name, sub)

    def device_check(self, *inputs: Tensor) -> None:
        """Move every tensor to the first one's device, in place."""
        if inputs:
            for t in inputs[1:]:
                if t.device is not inputs[0].device:
                    t.to_device(inputs[0].device)

    def dtype_check(self, *inputs: Tensor) -> None:
        """Convert every tensor to the first one's dtype, in place."""
        if inputs:
            for t in inputs[1:]:
                if t.dtype != inputs[0].dtype:
                    t.to_type(inputs[0].dtype)

    # ----- modes ----------------------------------------------------------------------
    def train(self, mode: bool = True) -> Layer:
        """Set training mode (Dropout drops, BatchNorm uses batch statistics) on this
        layer and every sublayer. Returns self."""
        self.training = mode
        for sub in self.sublayers().values():
            sub.training = mode
        return self

    def eval(self) -> Layer:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _initializing_forward(forward: Callable) -> Callable:
    """``forward`` that first initializes a layer not yet initialized."""

    @functools.wraps(forward)
    def wrapper(self: Layer, *args: Any, **kwargs: Any) -> Any:
        if not self.initialized:
            self.ensure_initialized(*args, **kwargs)
        return forward(self, *args, **kwargs)

    return wrapper


def _marking_initialize(initialize: Callable) -> Callable:
    """``initialize`` that records that the layer has been initialized; called directly
    while a load hook waits, it goes through :meth:`Layer.ensure_initialized` so the
    hook still runs."""

    @functools.wraps(initialize)
    def wrapper(self: Layer, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_initialize_hook", None) is not None:
            return self.ensure_initialized(*args, **kwargs)
        result = initialize(self, *args, **kwargs)
        self._initialized = True
        return result

    return wrapper


def _public_attrs(prefix: str, layer: Layer) -> list[tuple[str, Any]]:
    """(prefix + name, value) of ``layer``'s public attributes, last first (a stack that
    pops them in order)."""
    return [(prefix + k, v) for k, v in vars(layer).items() if not k.startswith("_")][::-1]


_NODES = (Tensor, Layer)  # what a walk yields (a tuple built once, not a union per item)
_SEQUENCES = (list, tuple)
