"""In-place reuse of dead buffers in scheduled replays (singa.model._inplace)."""

import sys

import numpy as np
from model_helpers import SmallCNN

import singa.autograd
from singa import device, opt
from singa.autograd import engine
from singa.autograd.activation import ReLU
from singa.autograd.dropout import Dropout
from singa.autograd.elementwise import Add
from singa.autograd.linalg import AddBias
from singa.kernels import buffers, im2col
from singa.model import _inplace
from singa.tensor import Tensor


def generated(body: str, **ns):
    """A function compiled like the replay code, whose helpers get its locals."""
    exec(f"def f(v=None, w=None):\n{body}\n", ns)
    return ns["f"]


def _owns(a):
    n = sys.getrefcount(a)  # as the helpers do: before ``a`` is pushed again
    return buffers.owns(a, n)


def test_owns_sees_other_holders():
    check = generated("    return owns(v)", owns=_owns)
    # (results are stored before asserting: pytest's assert keeps its operands alive)
    held = np.ones(8)
    results = [check(np.ones(4)), check(held), check(np.ones(8)[2:]), check(held[2:])]
    assert results == [True, False, True, False]  # held here / only view / base held here
    local = generated("    a = np.ones(4)\n    return owns(a)", np=np, owns=_owns)()
    viewed = generated("    a = np.ones(4)\n    b = a[1:]\n    return owns(a)", np=np, owns=_owns)()
    frozen = generated(
        "    a = np.ones(4)\n    a.flags.writeable = False\n    return owns(a)", np=np, owns=_owns
    )()
    assert (local, viewed, frozen) == (True, False, False)


def test_pooled_buffers_count_as_private_while_in_use():
    buffers.clear_scratch()
    ns = {"im2col": im2col, "buffers": buffers, "np": np, "owns": _owns}
    plain = generated("    a = buffers.scratch(np, (5, 7), np.float32)\n    return owns(a)", **ns)
    ok_plain = plain()
    assert ok_plain
    view = generated("    a = im2col.pooled_like(np.empty((2, 3, 4, 5)), (2, 3, 4, 5), np, nhwc=True)\n"
                     "    return owns(a)", **ns)  # fmt: skip
    ok_view = view()
    assert ok_view
    assert not buffers.owns(np.ones(3), buffers.HELPER_REFS + 1)  # one extra holder, not the pool


def test_add_into_reuses_only_a_private_buffer():
    f = generated("    return add_into(v, w)", add_into=_inplace.add_into)
    b = np.full(3, 2.0)
    np.testing.assert_array_equal(f(np.ones(3), b), [3.0, 3.0, 3.0])
    a = np.ones(3)
    out = f(a, b)
    assert out is not a and np.array_equal(a, np.ones(3))  # ``a`` was still held here
    mixed = f(np.ones(3, np.float32), b)
    assert mixed.dtype == np.float64  # would change dtype: not in place
    body = "    a = np.ones(3)\n    {}r = add_into(a, w)\n    return r is a"
    private = generated(body.format(""), np=np, add_into=_inplace.add_into)(w=b)
    aliased = generated(body.format("c = a\n    "), np=np, add_into=_inplace.add_into)(w=b)
    assert (private, aliased) == (True, False)


def test_relu_variants_are_checked_against_the_operator():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    op = ReLU()
    op.requires_grad = True
    y = op.forward(x)
    ((variant, k),) = _inplace.find_variants(op, False, [x], (y,))
    assert k == 0 and op.cache is y  # the check leaves the operator as it was
    dy = np.ones_like(x)
    assert _inplace.find_variants(op, True, [dy], (op.backward(dy),))


def test_a_wrong_variant_is_rejected(monkeypatch):
    def wrong(op, x):
        x *= 2
        return x

    monkeypatch.setattr(ReLU, "forward_inplace", ((wrong, 0),))
    op = ReLU()
    x = np.array([1.0, -1.0])
    assert _inplace.find_variants(op, False, [x], (op.forward(x),)) == []
    np.testing.assert_array_equal(x, [1.0, -1.0])  # the check ran on a copy


def test_inplace_call_writes_into_private_inputs_only():
    op = ReLU()
    x0 = np.array([1.0, -2.0])
    ((variant, k),) = _inplace.find_variants(op, False, [x0], (op.forward(x0),))
    call = _inplace.inplace_call(variant, op, op.forward, k, 1)
    shared = generated("    return c(v)", c=call)
    x = np.array([1.0, -2.0])
    y = shared(x)
    assert y is not x and np.array_equal(x, [1.0, -2.0]) and np.array_equal(y, [1.0, 0.0])
    body = "    a = np.array([1.0, -2.0])\n    {}r = c(a)\n    return r is a, r"
    same, r = generated(body.format(""), np=np, c=call)()
    assert same and np.array_equal(r, [1.0, 0.0])  # only the local held it: written in place
    same, r = generated(body.format("keep = a[:1]\n    "), np=np, c=call)()
    assert not same and np.array_equal(r, [1.0, 0.0])  # a view of it is alive: new array


def _step_peak(m, tx, ty) -> int:
    """The peak of memory allocated during one step, above what was held before it."""
    import gc
    import tracemalloc

    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        m(tx, ty)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
        gc.enable()


def test_scheduled_cnn_peak_memory_is_lower():
    peaks = {}
    for seq in (True, False):
        device.get_default_device().set_rand_seed(0)
        m = SmallCNN()
        m.set_optimizer(opt.SGD(0.1, momentum=0.9))
        tx = Tensor((32, 1, 16, 16))
        ty = Tensor((32,), dtype=np.int32, requires_grad=False)
        m.compile([tx], use_graph=True, sequential=seq)
        for _ in range(3):
            m(tx, ty)
        # tracemalloc counts every thread's allocations: the least of three steps leaves out
        # a background thread of an earlier test (a log writer, a prefetcher) that allocated
        # during one of them
        peaks[seq] = min(_step_peak(m, tx, ty) for _ in range(3))
    assert peaks[False] < 0.75 * peaks[True], peaks


# ----- declarations: every declared variant is found, none is lost by a rename -------------
def _operation_classes() -> set:
    found, todo = set(), [engine.Operation]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found and sub.__module__.startswith("singa."):
                found.add(sub)
                todo.append(sub)
    return found


def _traced(op, xs, dys=None):
    """Run ``op`` forward (and backward) as a trace would see it: (ins, outs) per direction."""
    op.requires_grad = True
    op.needs_grad = (True,) * len(xs)
    y = op.forward(*xs)
    fwd = (list(xs), (y,))
    dy = np.ones_like(y) if dys is None else dys
    dxs = op.backward(dy)
    dxs = dxs if isinstance(dxs, tuple) else (dxs,)
    return fwd, ([dy], dxs)


def _samples() -> dict:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    drop = Dropout(0.5, training=True, device=device.get_default_device())
    return {
        ReLU: (ReLU(), [a]),
        Dropout: (drop, [a]),
        AddBias: (AddBias(axis=0), [a, rng.standard_normal(4)]),
        Add: (Add(), [a, b]),
    }


def test_every_declared_inplace_variant_is_found_by_the_replay_check():
    """The variants are referenced, not named: a renamed method fails at import, a
    declaration dropped or a variant broken fails here."""
    assert singa.autograd.__name__  # every family is imported
    declaring = {c for c in _operation_classes() if c.forward_inplace or c.backward_inplace}
    samples = _samples()
    assert declaring == set(samples), "update _samples() for the operators that declare variants"
    for cls, (op, xs) in samples.items():
        (fins, fouts), (bins, bouts) = _traced(op, xs)
        fwd = _inplace.find_variants(op, False, fins, fouts[:1])
        bwd = _inplace.find_variants(op, True, bins, bouts) if len(bouts) == 1 else []
        assert fwd == list(cls.forward_inplace), cls
        if len(bouts) == 1:
            assert bwd == list(cls.backward_inplace), cls
        for variant, k in cls.forward_inplace + cls.backward_inplace:
            assert callable(variant) and isinstance(k, int), cls


def test_optimizer_updates_are_recorded_as_donating_and_replays_donate():
    class Rec:
        def __init__(self):
            self.calls = []

        def record(self, fn, ins, outs, **kw):
            self.calls.append(fn)

    p = Tensor((3,), requires_grad=True, stores_grad=True)
    p.set_value(1.0)
    sgd = opt.SGD(0.1, momentum=0.9)
    dev = p.device
    dev.recorder = rec = Rec()
    try:
        sgd.update(p, np.ones(3, np.float32))
    finally:
        dev.recorder = None
    (fn,) = rec.calls
    assert isinstance(fn, engine.DonatingUpdate)  # what graph replay looks for (test_graph: d<k>(...) calls)
