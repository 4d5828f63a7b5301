"""SINGA's Device method names: seeds, sync, time profiling, device-level graphs; singa_wrap flags."""

import importlib.util

import numpy as np
import pytest

from singa import autograd, device, layer, model, opt, singa_wrap, tensor


@pytest.fixture
def dev():
    d = device.get_default_device()
    yield d
    d.SetVerbosity(0)
    d.SetSkipIteration(5)
    d.ResetGraph()


def test_set_rand_seed_repeats_draws(dev):
    dev.SetRandSeed(3)
    a = tensor.zeros((5,)).gaussian(0, 1).to_numpy()
    dev.SetRandSeed(3)
    np.testing.assert_array_equal(tensor.zeros((5,)).gaussian(0, 1).to_numpy(), a)
    dev.Sync()  # a no-op on the CPU, but callable


class _Mlp(model.Model):
    def __init__(self):
        super().__init__()
        self.l1, self.relu, self.l2 = layer.Linear(6), layer.ReLU(), layer.Linear(3)

    def forward(self, x):
        return self.l2(self.relu(self.l1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def _train(steps, use_graph):
    m = _Mlp()
    m.set_optimizer(opt.SGD(0.1))
    x = tensor.from_numpy(np.random.default_rng(0).random((4, 5)).astype(np.float32))
    y = tensor.from_numpy(np.eye(3, dtype=np.float32)[[0, 1, 2, 0]])
    m.compile([x], is_train=True, use_graph=use_graph)
    for _ in range(steps):
        m(x, y)


@pytest.mark.parametrize("use_graph", [False, True])
def test_profiling_counts_each_operator_after_the_skipped_iterations(dev, use_graph, capsys, monkeypatch):
    import itertools
    import types

    from singa import device_profiler

    ticks = itertools.count()  # a clock that advances one "second" per reading: each kernel takes 1 s
    monkeypatch.setattr(
        device_profiler, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks)))
    )
    dev.SetVerbosity(2)
    dev.SetSkipIteration(2)
    _train(5, use_graph)
    prof = dev.profiler
    assert prof.counted_iterations == 3
    assert prof.calls[("forward", "MatMul")] == 2 * 3  # two Linear layers, three counted steps
    assert prof.calls[("backward", "ReLU")] == 3
    for phase in ("forward", "backward"):  # every counted kernel call was timed, once
        assert prof.phase_seconds(phase) == sum(n for (p, _), n in prof.calls.items() if p == phase) > 0
    dev.PrintTimeProfiling()
    out = capsys.readouterr().out
    assert "over 3 iteration(s)" in out and "MatMul" in out and "backward" in out


def test_verbosity_one_reports_totals_only_and_zero_turns_profiling_off(dev, capsys):
    dev.SetVerbosity(1)
    dev.SetSkipIteration(0)
    _train(2, False)
    report = dev.time_profile()
    assert "forward" in report and "MatMul" not in report
    dev.SetVerbosity(0)
    assert dev.profiler is None and dev.time_profile() == ""
    dev.PrintTimeProfiling()
    assert "off" in capsys.readouterr().out
    with pytest.raises(ValueError):
        dev.SetVerbosity(-1)
    with pytest.raises(ValueError):
        dev.SetSkipIteration(-2)


def test_profile_before_enough_iterations_says_so(dev):
    dev.SetVerbosity(2)
    _train(1, False)
    assert "no iteration counted" in dev.time_profile()


def test_device_graph_buffers_kernels_and_reruns_them(dev):
    a = tensor.from_numpy(np.ones((2, 2), np.float32))
    assert not dev.graph_enabled()
    dev.EnableGraph(True)
    assert dev.graph_enabled()
    c = autograd.add(autograd.mul(a, a), a)
    with pytest.raises(RuntimeError, match="EnableGraph\\(False\\)"):
        dev.RunGraph()
    dev.EnableGraph(False)
    np.testing.assert_array_equal(c.to_numpy(), 2)
    a.data[...] = 3
    dev.RunGraph(True)
    np.testing.assert_array_equal(c.to_numpy(), 12)  # 3 * 3 + 3, recomputed into c's buffer
    dev.ResetGraph()
    a.data[...] = 1
    dev.RunGraph()  # nothing buffered any more
    np.testing.assert_array_equal(c.to_numpy(), 12)


def test_singa_wrap_flags_are_truthful():
    assert singa_wrap.USE_CUDA == (device.get_num_gpus() > 0)
    assert singa_wrap.USE_DIST == (importlib.util.find_spec("mpi4py") is not None)
    assert singa_wrap.USE_DNNL is False and singa_wrap.USE_PYTHON3 is True
    # no kernels or C++ look-alikes: the one callable is the distributed id holder, a
    # Python class of singa.parallel that SINGA's scripts import from here
    callables = [n for n in singa_wrap.__all__ if callable(getattr(singa_wrap, n))]
    assert callables == ["NcclIdHolder"]
    assert singa_wrap.NcclIdHolder.__module__ == "singa.parallel.nccl"


def test_gpu_listing_helpers_agree_with_the_gpu_count():
    n = device.get_num_gpus()
    assert device.get_gpu_ids() == list(range(n))
    assert device.create_cuda_gpus(0) == [] and device.create_cuda_gpus_on([]) == []
    assert device.default_device is device.get_default_device()
    if n == 0:
        with pytest.raises(RuntimeError):
            device.create_cuda_gpus(1)
    else:  # pragma: no cover - needs a GPU
        free, total = device.get_gpu_mem_size(0)
        assert 0 < free <= total
        assert "GPU 0" in device.device_query(0)
        assert device.create_cuda_gpus_on([0]) == [device.create_cuda_gpu()]


def test_device_id_is_an_int_and_callable_as_singas_method():
    dev = device.get_default_device()
    assert dev.id == -1 and dev.id() == -1 and isinstance(dev.id(), int)
    assert not dev.is_gpu and f"{dev.id}" == "-1"


def test_an_unseeded_device_starts_from_the_default_seed_as_singa_and_pytorch_do():
    from singa.device import DEFAULT_SEED, Device

    a, b = Device(np), Device(np)
    assert np.array_equal(a.rng.standard_normal(8), b.rng.standard_normal(8))
    unseeded = Device(np).rng.standard_normal(8)
    assert np.array_equal(unseeded, Device(np, seed=DEFAULT_SEED).rng.standard_normal(8))
    assert not np.array_equal(unseeded, Device(np, seed=DEFAULT_SEED + 1).rng.standard_normal(8))


def test_set_rand_seed_none_draws_a_fresh_seed():
    from singa.device import Device

    a, b = Device(np), Device(np)
    a.set_rand_seed(None)
    b.set_rand_seed(None)
    assert not np.array_equal(a.rng.standard_normal(8), b.rng.standard_normal(8))
