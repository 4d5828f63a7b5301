"""The :class:`Tensor` class and the functions that make tensors; users import them
from :mod:`singa.tensor`, which also holds SINGA's module-level functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from singa import device as _device

float16 = np.float16
float32 = np.float32
float64 = np.float64
int32 = np.int32
int64 = np.int64

_ops: Any = None  # the operator module; singa.autograd binds itself here (bind_operators)


def bind_operators(module: Any) -> None:
    """Let Tensor's arithmetic, indexing and reshaping methods record ``module``'s
    operators (``singa.autograd`` passes itself when it is imported, so this floor
    never imports the one above it)."""
    global _ops
    _ops = module


def _autograd() -> Any:
    if _ops is None:
        raise RuntimeError("Tensor operators need singa.autograd: import singa first")
    return _ops


class Tensor:
    """An array on a device that autograd can differentiate through.

    Args:
        shape: the shape when ``data`` is not given (filled with zeros); an int ``n``
            means ``(n,)``.
        device: a :class:`~singa.device.Device`; the default CPU device when None.
        dtype: element type; ``data`` is copied and cast to it.
        data: a numpy/cupy array, a Python list or a number.
        requires_grad: autograd computes this tensor's gradient.
        stores_grad: ``autograd.backward`` yields this tensor's gradient
            (requires ``requires_grad``).
        creator: the Operation that produced this tensor (set by autograd).
        name: an optional label.
    """

    __slots__ = ("data", "device", "requires_grad", "stores_grad", "creator", "name", "_index")
    __hash__ = object.__hash__  # hashable by identity, although == is elementwise

    def __init__(
        self,
        shape: tuple = (),
        device: _device.Device | None = None,
        dtype: Any = float32,
        data: Any = None,
        requires_grad: bool = True,
        stores_grad: bool = False,
        creator: Any = None,
        name: str | None = None,
    ):
        if stores_grad and not requires_grad:
            raise ValueError("Tensor: stores_grad=True requires requires_grad=True")
        dev = device if device is not None else _device.get_default_device()
        xp = dev.xp
        if data is None:
            arr = xp.zeros(_shape(shape), dtype=dtype)
        else:
            if isinstance(data, Tensor):
                data = data.data
            if xp is np and hasattr(data, "get") and not isinstance(data, np.ndarray):
                data = data.get()  # a cupy array coming to the host
            arr = xp.array(data, dtype=dtype)
        self.data = arr
        self.device = dev
        self.requires_grad = requires_grad
        self.stores_grad = stores_grad
        self.creator = creator
        self.name = name
        self._index = 0

    @classmethod
    def wrap(
        cls,
        arr: Any,
        dev: _device.Device,
        requires_grad: bool = False,
        creator: Any = None,
        index: int = 0,
    ) -> Tensor:
        """A tensor on ``dev`` around ``arr`` as it is: no copy, no conversion, no checks
        (the operators' fast path). ``arr`` must be an array of ``dev``'s module
        (numpy, or cupy on a GPU). ``creator`` and ``index`` name the operation that
        made it and which of its outputs it is, for backward; a user wants
        ``Tensor(data=arr, device=dev)``, which checks and converts."""
        t = object.__new__(cls)
        t.data = arr
        t.device = dev
        t.requires_grad = requires_grad
        t.stores_grad = False
        t.creator = creator
        t.name = None
        t._index = index
        return t

    # ----- shape and type -------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """The shape as a tuple of ints."""
        return self.data.shape

    @property
    def dtype(self) -> Any:
        """The numpy dtype of the elements."""
        return self.data.dtype

    def ndim(self) -> int:
        """Number of dimensions."""
        return self.data.ndim

    def size(self) -> int:
        """Number of elements."""
        return int(self.data.size)

    def __len__(self) -> int:
        return self.data.shape[0]

    def is_empty(self) -> bool:
        """True when the tensor has no elements."""
        return self.data.size == 0

    # ----- copying in and out -----------------------------------------------------------
    def copy_from_numpy(self, np_array: Any, offset: int = 0) -> Tensor:
        """Copy a numpy array into this tensor's existing buffer, cast to its dtype.

        The array must have this tensor's shape (or, as in SINGA, the same number of
        elements). Values are converted, never reinterpreted. Returns self.
        """
        src = np.asarray(np_array)
        if offset:
            raise ValueError("copy_from_numpy: offset is not supported")
        if src.shape != self.shape:
            if src.size != self.data.size:
                raise ValueError(
                    f"copy_from_numpy: array of shape {src.shape} ({src.size} elements) does not "
                    f"fit tensor of shape {self.shape} ({self.data.size} elements)"
                )
            src = src.reshape(self.shape)
        if self.device.xp is np:
            np.copyto(self.data, src, casting="unsafe")
        else:
            self.data[...] = self.device.xp.asarray(src.astype(self.dtype, copy=False))
        return self

    def copy_from(self, t: Any) -> Tensor:
        """Copy the values of a Tensor or array (same number of elements) into this one."""
        if isinstance(t, Tensor):
            t = t.data
        if self.device.xp is not np and isinstance(t, np.ndarray):
            return self.copy_from_numpy(t)
        if self.device.xp is np and not isinstance(t, np.ndarray):
            return self.copy_from_numpy(t.get() if hasattr(t, "get") else t)
        src = self.device.xp.asarray(t)
        if src.size != self.data.size:
            raise ValueError(
                f"copy_from: source of shape {src.shape} does not fit tensor of shape {self.shape}"
            )
        self.data[...] = src.reshape(self.shape)
        return self

    def copy_data(self, t: Tensor) -> Tensor:
        """Copy the values of tensor ``t`` into this tensor (SINGA's name). Returns self."""
        return self.copy_from(t)

    def to_numpy(self) -> np.ndarray:
        """A numpy copy of the values (always on the host)."""
        if self.device.xp is np:
            return self.data.copy()
        return self.device.xp.asnumpy(self.data)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.to_numpy()
        return arr if dtype is None else arr.astype(dtype)

    def clone(self) -> Tensor:
        """A new tensor with a copy of the data and the same flags (no creator)."""
        t = Tensor.wrap(self.data.copy(), self.device, self.requires_grad)
        t.stores_grad = self.stores_grad
        t.name = self.name
        return t

    def as_type(self, dtype: Any) -> Tensor:
        """A new tensor with the values converted to ``dtype`` (not differentiated).

        ``dtype`` is a numpy dtype or SINGA's names ``'int'`` (int32) and ``'float'`` (float32).
        """
        return Tensor.wrap(self.data.astype(singa_dtype(dtype)), self.device, self.requires_grad)

    def to_device(self, dev: _device.Device) -> Tensor:
        """Move the data to ``dev`` in place. Returns self."""
        if dev is self.device:
            return self
        host = self.to_numpy()
        self.data = host if dev.xp is np else dev.xp.asarray(host)
        self.device = dev
        return self

    def to_host(self) -> Tensor:
        """Move the data to the CPU in place. Returns self."""
        return self.to_device(_device.get_default_device())

    # ----- fills (in place; each returns self) -----------------------------------------
    def set_value(self, x: Any) -> Tensor:
        """Fill every element with ``x``."""
        self.data[...] = x
        return self

    def gaussian(self, mean: float, std: float) -> Tensor:
        """Fill with samples of N(mean, std^2) from the device's generator."""
        z = self.device.rng.standard_normal(self.shape, dtype=_float_for_rng(self.dtype))
        self.data[...] = z * std + mean
        return self

    def uniform(self, low: float, high: float) -> Tensor:
        """Fill with samples of U[low, high) from the device's generator."""
        u = self.device.rng.random(self.shape, dtype=_float_for_rng(self.dtype))
        self.data[...] = u * (high - low) + low
        return self

    def bernoulli(self, p: float) -> Tensor:
        """Fill with 1 (probability ``p``) or 0."""
        u = self.device.rng.random(self.shape, dtype=_float_for_rng(self.dtype))
        self.data[...] = u < p
        return self

    # ----- differentiable views and arithmetic (recorded by autograd) -----------------
    def reshape(self, *shape: Any) -> Tensor:
        """A tensor with the same data in a new shape (differentiable)."""
        if len(shape) == 1 and isinstance(shape[0], list | tuple):
            shape = tuple(shape[0])
        return _autograd().reshape(self, shape)

    def transpose(self, axes: Any = None) -> Tensor:
        """Permute the axes (reverse them when ``axes`` is None); differentiable."""
        return _autograd().transpose(self, axes)

    def __getitem__(self, key: Any) -> Tensor:
        """``self[key]``, differentiable. As in SINGA, an integer keeps its axis with
        size 1: ``t[0]`` of a (3, 4) tensor is (1, 4), like ``t[0:1]`` (numpy and
        PyTorch drop the axis; use ``reshape`` or ``autograd.squeeze`` for that).
        Slices with steps, None, Ellipsis and integer/boolean arrays follow numpy
        (:func:`singa.autograd.getitem`)."""
        return _autograd().getitem(self, key)

    def _lift(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return other
        dtype = self.dtype
        if dtype.kind != "f" and isinstance(other, float | np.floating):
            dtype = float32  # as in SINGA: an int tensor with a Python float gives float32
        return Tensor.wrap(self.device.xp.asarray(other, dtype=dtype), self.device)

    def __add__(self, o: Any) -> Tensor:
        return _autograd().add(self, self._lift(o))

    def __radd__(self, o: Any) -> Tensor:
        return _autograd().add(self._lift(o), self)

    def __sub__(self, o: Any) -> Tensor:
        return _autograd().sub(self, self._lift(o))

    def __rsub__(self, o: Any) -> Tensor:
        return _autograd().sub(self._lift(o), self)

    def __mul__(self, o: Any) -> Tensor:
        return _autograd().mul(self, self._lift(o))

    def __rmul__(self, o: Any) -> Tensor:
        return _autograd().mul(self._lift(o), self)

    def __truediv__(self, o: Any) -> Tensor:
        return _autograd().div(self, self._lift(o))

    def __rtruediv__(self, o: Any) -> Tensor:
        return _autograd().div(self._lift(o), self)

    def __matmul__(self, o: Any) -> Tensor:
        return _autograd().matmul(self, self._lift(o))

    def __rmatmul__(self, o: Any) -> Tensor:
        return _autograd().matmul(self._lift(o), self)

    def __pow__(self, o: Any) -> Tensor:
        return _autograd().pow(self, self._lift(o))

    def __rpow__(self, o: Any) -> Tensor:
        return _autograd().pow(self._lift(o), self)

    def __neg__(self) -> Tensor:
        return _autograd().neg(self)

    # Comparisons give boolean tensors and are not differentiated.
    def _compare(self, o: Any, fn: Any) -> Tensor:
        other = o.data if isinstance(o, Tensor) else o
        return Tensor.wrap(fn(self.data, other), self.device)

    def __lt__(self, o: Any) -> Tensor:
        return self._compare(o, self.device.xp.less)

    def __le__(self, o: Any) -> Tensor:
        return self._compare(o, self.device.xp.less_equal)

    def __gt__(self, o: Any) -> Tensor:
        return self._compare(o, self.device.xp.greater)

    def __ge__(self, o: Any) -> Tensor:
        return self._compare(o, self.device.xp.greater_equal)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._compare(o, self.device.xp.equal)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._compare(o, self.device.xp.not_equal)

    def __bool__(self) -> bool:
        """Always True, as SINGA's Tensor (which has no truth value of its own): SINGA
        code writes ``if labels:`` for "a tensor was given". Read a value with
        ``t.item()`` or ``float(t)``; compare with ``(t > 0).to_numpy().all()``."""
        return True

    def __float__(self) -> float:
        return float(self.data.reshape(()))

    def __repr__(self) -> str:
        flags = f", creator={type(self.creator).__name__}" if self.creator is not None else ""
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device}{flags})"

    # ----- SINGA's remaining Tensor methods ---------------------------------------------
    # Raw (not recorded) helpers SINGA's Tensor has; the in-place operators update the
    # buffer itself, so shallow copies made by copy() see the change, as in SINGA.
    def T(self) -> Tensor:
        """The transpose, all axes reversed (a method, as SINGA's ``t.T()``; differentiable)."""
        return _autograd().transpose(self, None)

    def item(self) -> Any:
        """The single element as a Python number; raises for more than one element."""
        if self.data.size != 1:
            raise ValueError(f"item(): the tensor has {self.data.size} elements, not 1")
        return self.data.reshape(()).item()

    def memsize(self) -> int:
        """Bytes held by this tensor's elements."""
        return int(self.data.nbytes)

    def is_transpose(self) -> bool:
        """True when the data is a strided (e.g. transposed) view rather than C-ordered."""
        return not self.data.flags.c_contiguous

    def contiguous(self) -> Tensor:
        """A tensor with the same values in a C-ordered buffer of its own."""
        return Tensor.wrap(self.device.xp.ascontiguousarray(self.data).copy(), self.device)

    def copy(self) -> Tensor:
        """A shallow copy: a new Tensor sharing this one's buffer (SINGA's ``copy``)."""
        return Tensor.wrap(self.data, self.device, self.requires_grad)

    def deepcopy(self) -> Tensor:
        """A copy with its own buffer (the same as :meth:`clone`)."""
        return self.clone()

    def repeat(self, repeats: Any, axis: int | None = None) -> Tensor:
        """Repeat elements as :func:`numpy.repeat` (flattened when ``axis`` is None)."""
        if axis is None and not isinstance(repeats, int | np.integer):
            raise ValueError(f"repeat: with axis=None, repeats must be an int, got {repeats!r}")
        if np.any(np.asarray(repeats) < 0):
            raise ValueError(f"repeat: repeats must not be negative, got {repeats!r}")
        return Tensor.wrap(self.device.xp.repeat(self.data, repeats, axis=axis), self.device)

    def l1(self) -> float:
        """The mean absolute value (SINGA's L1: the 1-norm divided by the size)."""
        return float(self.device.xp.abs(self.data).sum() / max(self.data.size, 1))

    def l2(self) -> float:
        """The 2-norm divided by the size (SINGA's L2)."""
        return float(self.device.xp.linalg.norm(self.data.reshape(-1)) / max(self.data.size, 1))

    def reset_like(self, t: Tensor) -> Tensor:
        """Reallocate as zeros with ``t``'s shape, dtype and device. Returns self."""
        self.data = t.device.xp.zeros(t.shape, dtype=t.dtype)
        self.device = t.device
        return self

    def to_type(self, dtype: Any) -> Tensor:
        """Convert the values to ``dtype`` in place (``'int'``/``'float'`` accepted). Returns self."""
        self.data = self.data.astype(singa_dtype(dtype))
        return self

    def _update_in_place(self, other: Any, ufunc_name: str, op_name: str) -> Tensor:
        """``self op= other``: in place on the buffer for data tensors (SINGA); a
        recorded, out-of-place operation when either side is an autograd result."""
        if self.creator is not None or getattr(other, "creator", None) is not None:
            return getattr(_autograd(), op_name)(self, self._lift(other))
        operand = other.data if isinstance(other, Tensor) else other
        getattr(self.device.xp, ufunc_name)(self.data, operand, out=self.data, casting="unsafe")
        return self

    def __iadd__(self, o: Any) -> Tensor:
        return self._update_in_place(o, "add", "add")

    def __isub__(self, o: Any) -> Tensor:
        return self._update_in_place(o, "subtract", "sub")

    def __imul__(self, o: Any) -> Tensor:
        return self._update_in_place(o, "multiply", "mul")

    def __itruediv__(self, o: Any) -> Tensor:
        return self._update_in_place(o, "true_divide", "div")

    def __floordiv__(self, o: Any) -> Tensor:
        other = o.data if isinstance(o, Tensor) else o
        return Tensor.wrap(self.device.xp.floor_divide(self.data, other), self.device)

    def _broadcast_update(self, v: Tensor, ufunc_name: str, as_column: bool) -> None:
        if self.ndim() != 2:
            raise ValueError(f"expected a 2-d tensor, got shape {self.shape}")
        vec = v.data.reshape((-1, 1) if as_column else (1, -1))
        getattr(self.device.xp, ufunc_name)(self.data, vec, out=self.data, casting="unsafe")

    def add_column(self, v: Tensor) -> None:
        """Add vector ``v`` to every column in place (SINGA's deprecated form of broadcasting)."""
        self._broadcast_update(v, "add", True)

    def add_row(self, v: Tensor) -> None:
        """Add vector ``v`` to every row in place."""
        self._broadcast_update(v, "add", False)

    def mult_column(self, v: Tensor) -> None:
        """Multiply every column by vector ``v`` in place."""
        self._broadcast_update(v, "multiply", True)

    def mult_row(self, v: Tensor) -> None:
        """Multiply every row by vector ``v`` in place."""
        self._broadcast_update(v, "multiply", False)

    def div_column(self, v: Tensor) -> None:
        """Divide every column by vector ``v`` in place."""
        self._broadcast_update(v, "true_divide", True)

    def div_row(self, v: Tensor) -> None:
        """Divide every row by vector ``v`` in place."""
        self._broadcast_update(v, "true_divide", False)

    # ----- end of SINGA's remaining Tensor methods --------------------------------------


PlaceHolder = Tensor


def _shape(shape: Any) -> tuple:
    """A shape as a tuple: a single int ``n`` means ``(n,)`` (as in SINGA)."""
    if isinstance(shape, int | np.integer):
        return (int(shape),)
    return tuple(shape)


def singa_dtype(dtype: Any) -> Any:
    """A numpy dtype from a numpy dtype or SINGA's names ``'int'`` and ``'float'``."""
    names = {"int": int32, "float": float32}
    if isinstance(dtype, str) and dtype in names:
        return names[dtype]
    try:
        return np.dtype(dtype).type
    except TypeError as e:
        raise TypeError(f"not a data type: {dtype!r} (use a numpy dtype, 'int' or 'float')") from e


def _float_for_rng(dtype: Any) -> Any:
    """Generators draw float32 or float64; other dtypes are cast after drawing."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def from_numpy(np_array: Any, dev: _device.Device | None = None) -> Tensor:
    """A tensor holding a copy of ``np_array`` with its dtype. As in SINGA it requires
    a gradient (so operators on it record their ``creator``) but stores none, so
    ``autograd.backward`` never computes or yields one for it."""
    arr = np.asarray(np_array)
    return Tensor(arr.shape, dev, arr.dtype, data=arr)


def to_numpy(t: Tensor) -> np.ndarray:
    """A numpy copy of a tensor's values."""
    return t.to_numpy()


def zeros(shape: tuple, dev: _device.Device | None = None, dtype: Any = float32) -> Tensor:
    """A tensor of zeros. Like ``Tensor(shape)``, and as SINGA's ``zeros``, ``ones``,
    ``random`` and their ``_like`` forms, it requires a gradient and stores none (set
    ``stores_grad = True`` to make it a parameter)."""
    return Tensor(_shape(shape), dev, dtype)


def ones(shape: tuple, dev: _device.Device | None = None, dtype: Any = float32) -> Tensor:
    """A tensor of ones."""
    return zeros(shape, dev, dtype).set_value(1)


def zeros_like(t: Tensor) -> Tensor:
    """Zeros with ``t``'s shape, dtype and device."""
    return zeros(t.shape, t.device, t.dtype)


def ones_like(t: Tensor) -> Tensor:
    """Ones with ``t``'s shape, dtype and device."""
    return ones(t.shape, t.device, t.dtype)


def random(shape: tuple, dev: _device.Device | None = None, dtype: Any = float32) -> Tensor:
    """Samples of U[0, 1) from the device's generator."""
    return zeros(shape, dev, dtype).uniform(0.0, 1.0)
