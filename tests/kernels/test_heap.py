"""singa.kernels.heap: a step's freed large arrays are reused instead of faulted in again."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

from singa.kernels import heap


def _faults_of_fresh_arrays(n: int, count: int, nbytes: int) -> int:
    """Minor page faults of ``n`` rounds of ``count`` arrays of ``nbytes`` each, filled
    and freed together (as a step's temporaries)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        arrays = [np.empty(nbytes // 8) for _ in range(count)]
        for a in arrays:
            a.fill(1.0)  # touch every page
        del arrays, a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_freed_arrays_are_reused_without_page_faults():
    if not heap.keep_freed_memory():
        pytest.skip("needs glibc's malloc")
    _faults_of_fresh_arrays(2, 6, 8 << 20)  # the heap grows once
    pages = 10 * 6 * (8 << 20) // resource.getpagesize()
    # with glibc's own thresholds the freed memory goes back to the system and is
    # faulted in again: 30,580 of these 122,880 pages (SINGA_KEEP_FREED_MEMORY=0)
    assert _faults_of_fresh_arrays(10, 6, 8 << 20) < pages // 20


def test_the_environment_turns_it_off(monkeypatch):
    monkeypatch.setattr(heap, "_done", [])
    monkeypatch.setenv("SINGA_KEEP_FREED_MEMORY", "0")
    called = []
    monkeypatch.setattr(heap, "_mallopt", lambda: called.append(True))
    assert heap.keep_freed_memory() is False and called == []
    assert heap.keep_freed_memory() is False  # decided once per process


def test_a_model_call_keeps_freed_memory(monkeypatch):
    from singa import layer, model, opt, tensor

    calls = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append(True) or True)

    class Net(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(2)

        def forward(self, x):
            return self.fc(x)

    m = Net()
    m.set_optimizer(opt.SGD(0.1))
    x = tensor.Tensor(data=np.ones((3, 4), np.float32))
    m.compile([x], is_train=False, use_graph=False)
    m(x)
    assert calls


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_mallopt_is_found_only_in_glibc():
    fn = heap._mallopt()
    import platform

    assert (fn is not None) == (platform.libc_ver()[0] == "glibc")
