"""Devices: where a tensor's memory lives and which array module computes on it.

A :class:`Device` carries its array module ``xp`` (``numpy`` on the CPU, ``cupy`` on
a CUDA GPU), so every operator is written once against ``xp``. It also owns a random
generator (``set_rand_seed`` makes every random fill and dropout mask on it
reproducible) and, while a :class:`~singa.model.graph.Graph` is being traced, the
recorder that captures every kernel run on it.

Example::

    from singa import device
    dev = device.get_default_device()
    dev.set_rand_seed(0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

_CUPY_HINT = "install the GPU extra with `pip install singa[gpu]` (it provides cupy)"


def _import_cupy():
    try:
        import cupy
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise RuntimeError(f"a CUDA GPU device needs cupy, which is not installed: {_CUPY_HINT}") from e
    return cupy


class Device:
    """A place for tensors: the CPU (numpy) or one CUDA GPU (cupy).

    Attributes:
        xp: the array module of this device (``numpy`` or ``cupy``).
        id: -1 for the CPU, the CUDA device ordinal for a GPU.
        recorder: the graph recorder tracing on this device, or None.
    """

    def __init__(self, xp: Any, id: int = -1, seed: int | None = None):
        self.xp = xp
        self.id = id
        self.recorder = None
        self.set_rand_seed(seed)

    @property
    def is_gpu(self) -> bool:
        """True for a CUDA GPU device."""
        return self.id >= 0

    def set_rand_seed(self, seed: int | None) -> None:
        """Reseed this device's random generator (None draws a fresh seed)."""
        if self.is_gpu:
            with self.xp.cuda.Device(self.id):
                self.rng = self.xp.random.default_rng(seed)
        else:
            self.rng = np.random.default_rng(seed)
        self.seed = seed

    def get_rng_state(self) -> dict:
        """The random generator's state as a JSON-serialisable dict."""
        if self.is_gpu:
            # cupy does not expose its bit generator state; the seed is what we can keep.
            return {"device": "gpu", "seed": self.seed}
        return {"device": "cpu", "state": self.rng.bit_generator.state}

    def set_rng_state(self, state: dict) -> None:
        """Restore a state returned by :meth:`get_rng_state`."""
        if not isinstance(state, dict) or "device" not in state:
            raise ValueError(f"not a random generator state: {state!r}")
        if self.is_gpu or state["device"] != "cpu":
            self.set_rand_seed(state.get("seed"))
        else:
            self.rng.bit_generator.state = state["state"]

    def synchronize(self) -> None:
        """Wait for all queued kernels (a no-op on the CPU)."""
        if self.is_gpu:
            self.xp.cuda.Device(self.id).synchronize()

    def __repr__(self) -> str:
        return "Device(cpu)" if not self.is_gpu else f"Device(cuda:{self.id})"


_default_device = Device(np, -1)
_gpus: dict[int, Device] = {}


def get_default_device() -> Device:
    """The CPU device every tensor uses when none is given."""
    return _default_device


def create_cpu_device() -> Device:
    """The CPU device (the same object as :func:`get_default_device`)."""
    return _default_device


def get_num_gpus() -> int:
    """Number of CUDA GPUs visible to cupy (0 when cupy or a GPU is missing)."""
    try:
        import cupy
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def create_cuda_gpu_on(device_id: int) -> Device:
    """The CUDA GPU device with ordinal ``device_id`` (one Device object per GPU)."""
    cupy = _import_cupy()
    n = get_num_gpus()
    if device_id < 0 or device_id >= n:
        raise RuntimeError(f"no CUDA GPU with id {device_id}: cupy sees {n} GPU(s)")
    if device_id not in _gpus:
        _gpus[device_id] = Device(cupy, device_id)
    return _gpus[device_id]


def create_cuda_gpu() -> Device:
    """The first CUDA GPU; raises RuntimeError saying what is missing if there is none."""
    return create_cuda_gpu_on(0)


def device_of(array: Any) -> Device:
    """The device an array lives on (numpy -> CPU, cupy -> its GPU)."""
    if isinstance(array, np.ndarray | np.generic):
        return _default_device
    dev = getattr(array, "device", None)
    return create_cuda_gpu_on(int(getattr(dev, "id", 0)))
