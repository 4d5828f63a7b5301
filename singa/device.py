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

_CUPY_HINT = "install the GPU extra with `pip install '.[gpu]'` from the source tree (it provides cupy)"


def _import_cupy():
    try:
        import cupy
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise RuntimeError(f"a CUDA GPU device needs cupy, which is not installed: {_CUPY_HINT}") from e
    return cupy


#: the seed a device's random generator starts from when none is given
DEFAULT_SEED = 0


class DeviceId(int):
    """A device ordinal (-1 for the CPU) that is an int (``dev.id >= 0``) and can also be
    called, as SINGA's ``dev.id()`` method."""

    def __call__(self) -> int:
        return int(self)


class Device:
    """A place for tensors: the CPU (numpy) or one CUDA GPU (cupy).

    Attributes:
        xp: the array module of this device (``numpy`` or ``cupy``).
        id: -1 for the CPU, the CUDA device ordinal for a GPU.
        recorder: the graph recorder tracing on this device, or None.
    """

    def __init__(self, xp: Any, id: int = -1, seed: int | None = None):
        """A device on array module ``xp``; its random generator starts from ``seed``,
        or from :data:`DEFAULT_SEED` when none is given (as SINGA's devices and
        PyTorch's generator do: an unseeded program gives the same numbers every run;
        ``set_rand_seed(None)`` draws a fresh seed)."""
        self.xp = xp
        self.id = DeviceId(id)
        self.recorder = None
        self.profiler = None
        self.verbosity = 0
        self.skip_iterations = 5
        self._graph_nodes: list | None = None
        self._graph_recording = False
        self.set_rand_seed(DEFAULT_SEED if seed is None else seed)

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

    # ----- SINGA's method names ----------------------------------------------------------
    def SetRandSeed(self, seed: int) -> None:
        """SINGA's name for :meth:`set_rand_seed`."""
        self.set_rand_seed(seed)

    def Sync(self) -> None:
        """SINGA's name for :meth:`synchronize`."""
        self.synchronize()

    def SetVerbosity(self, verbosity: int) -> None:
        """Time profiling: 0 off, 1 forward/backward time per iteration, 2 also per operator.

        Starting (or changing) profiling clears the statistics gathered so far.
        """
        from singa.device_profiler import OperatorProfiler

        if verbosity < 0:
            raise ValueError(f"verbosity must be 0, 1 or 2, got {verbosity}")
        self.verbosity = int(verbosity)
        self.profiler = OperatorProfiler(self, self.verbosity, self.skip_iterations) if verbosity else None

    def SetSkipIteration(self, skip_iteration: int) -> None:
        """Leave the first ``skip_iteration`` iterations out of the time profile (default 5)."""
        if skip_iteration < 0:
            raise ValueError(f"skip_iteration must not be negative, got {skip_iteration}")
        self.skip_iterations = int(skip_iteration)
        if self.profiler is not None:
            self.profiler.skip_iterations = self.skip_iterations

    def time_profile(self) -> str:
        """The time profile as text ('' when profiling is off; see :meth:`SetVerbosity`)."""
        return "" if self.profiler is None else self.profiler.report()

    def PrintTimeProfiling(self) -> None:
        """Print the per-iteration and per-operator times gathered since ``SetVerbosity``."""
        if self.profiler is None:
            print("Time profiling is off: call SetVerbosity(1) or SetVerbosity(2) first")
        else:
            print(self.profiler.report())

    def EnableGraph(self, enable: bool) -> None:
        """Buffer the kernels run on this device into a graph (True) or stop buffering (False).

        Kernels still run as they are buffered; :meth:`RunGraph` runs the buffered graph
        again on the same buffers (inputs changed in place give new results), and
        :meth:`ResetGraph` forgets it. Unavailable while a Model traces its own graph.
        """
        if enable and not self._graph_recording:
            if self.recorder is not None:
                raise RuntimeError("EnableGraph: another graph is being recorded on this device")
            self._graph_nodes = []
            self.recorder = _KernelLog(self._graph_nodes)
            self._graph_recording = True
        elif not enable and self._graph_recording:
            self.recorder = None
            self._graph_recording = False

    def graph_enabled(self) -> bool:
        """True while kernels are being buffered (between ``EnableGraph(True)`` and ``(False)``)."""
        return self._graph_recording

    def RunGraph(self, sequential: bool = False) -> None:
        """Run the buffered kernels again, in order, on the buffers they were recorded with.

        ``sequential`` is accepted for SINGA's signature; kernels always run in recorded order.
        """
        if self._graph_recording:
            raise RuntimeError("RunGraph: call EnableGraph(False) before running the graph")
        for fn, ins, outs in self._graph_nodes or ():
            results = fn(*ins)
            if not isinstance(results, tuple):
                results = (results,)
            for out, res in zip(outs, results):
                if res is not out:
                    out[...] = res

    def ResetGraph(self) -> None:
        """Stop buffering and forget the buffered graph."""
        self.EnableGraph(False)
        self._graph_nodes = None

    def __repr__(self) -> str:
        return "Device(cpu)" if not self.is_gpu else f"Device(cuda:{self.id})"


class _KernelLog:
    """A device recorder that keeps each kernel as ``(fn, in_arrays, out_arrays)``."""

    def __init__(self, nodes: list):
        self.nodes = nodes

    def record(self, fn: Any, ins: Any, outs: Any, op: Any = None, **_: Any) -> None:
        """Keep one kernel call (see the recorder protocol in :mod:`singa.autograd.engine`)."""
        self.nodes.append((fn, list(ins), tuple(outs)))


_default_device = Device(np, -1)
default_device = _default_device  # SINGA's module attribute
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


def get_gpu_ids() -> list[int]:
    """The ordinals of the CUDA GPUs cupy sees (empty without cupy or a GPU)."""
    return list(range(get_num_gpus()))


def get_gpu_mem_size(device_id: int) -> tuple[int, int]:
    """``(free, total)`` bytes of memory of GPU ``device_id``."""
    cupy = _import_cupy()
    with cupy.cuda.Device(device_id):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def device_query(device_id: int, verbose: bool = False) -> str:
    """A description of GPU ``device_id``: name, memory and compute capability (every
    property cupy reports when ``verbose``)."""
    cupy = _import_cupy()
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    if verbose:
        return "\n".join(f"{k}: {v}" for k, v in sorted(props.items()))
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return (
        f"GPU {device_id}: {name}, {props['totalGlobalMem'] / 2**30:.1f} GiB, "
        f"compute capability {props['major']}.{props['minor']}"
    )


def create_cuda_gpus(num: int) -> list[Device]:
    """The first ``num`` CUDA GPUs."""
    return [create_cuda_gpu_on(i) for i in range(num)]


def create_cuda_gpus_on(device_ids: list[int]) -> list[Device]:
    """The CUDA GPUs with the given ordinals."""
    return [create_cuda_gpu_on(i) for i in device_ids]


def create_cuda_gpu() -> Device:
    """The first CUDA GPU; raises RuntimeError saying what is missing if there is none."""
    return create_cuda_gpu_on(0)


def array_module(a: Any) -> Any:
    """The array module (numpy or cupy) that ``a`` belongs to: numpy for numpy arrays and
    scalars, cupy for anything else (imported only then)."""
    if isinstance(a, np.ndarray | np.generic):
        return np
    import cupy

    return cupy


def device_of(array: Any) -> Device:
    """The device an array lives on (numpy -> CPU, cupy -> its GPU)."""
    if isinstance(array, np.ndarray | np.generic):
        return _default_device
    dev = getattr(array, "device", None)
    return create_cuda_gpu_on(int(getattr(dev, "id", 0)))
