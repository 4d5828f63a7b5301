"""Optimizer get_states / set_states: round trip, JSON-ness, validation."""

import json

import numpy as np
import pytest

from singa import opt
from singa.tensor import Tensor


def params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "fc1.W": Tensor(data=rng.standard_normal((3, 4)), requires_grad=True, stores_grad=True),
        "fc1.b": Tensor(data=rng.standard_normal(4), requires_grad=True, stores_grad=True),
    }


def train(o, names, steps, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        for t in names.values():
            o.update(t, rng.standard_normal(t.shape).astype(np.float32))
        o.step()
    return rng


MAKERS = [
    lambda: opt.SGD(0.1, momentum=0.9),
    lambda: opt.Adam(opt.ExponentialDecay(0.01, 3, 0.5), amsgrad=True),
    lambda: opt.AdamW(0.01),
    lambda: opt.RMSProp(0.01, momentum=0.5, centered=True),
    lambda: opt.AdaGrad(0.1, lr_decay=0.1),
]


@pytest.mark.parametrize("make", MAKERS)
def test_round_trip_resumes_bitwise(make):
    # run A: 6 steps straight; run B: 3 steps, save, restore into fresh objects, 3 more
    names_a = params()
    oa = make()
    train(oa, names_a, 6)

    names_b = params()
    ob = make()
    rng = train(ob, names_b, 3)
    states = ob.get_states(names_b)
    json.dumps({k: v for k, v in states.items() if k != "slots"})  # everything else is JSON
    assert states["step"] == 3 and states["param_steps"] == {"fc1.W": 3, "fc1.b": 3}
    assert all(isinstance(v, np.ndarray) for v in states["slots"].values()) and states["slots"]
    values = {n: t.to_numpy() for n, t in names_b.items()}

    names_c = params(seed=5)
    for n, t in names_c.items():
        t.copy_from_numpy(values[n])
    oc = make()
    oc.set_states(states, names_c)
    # the restored slots are the optimizer's own arrays, not the dict's
    for arr in states["slots"].values():
        arr += 100.0
    for _ in range(3):
        for t in names_c.values():
            oc.update(t, rng.standard_normal(t.shape).astype(np.float32))
        oc.step()
    for n in names_a:
        np.testing.assert_array_equal(names_a[n].to_numpy(), names_c[n].to_numpy())
    assert oc.steps == 6


def test_slot_names_and_copies():
    names = params()
    o = opt.Adam(0.01, amsgrad=True)
    train(o, names, 1)
    states = o.get_states(names)
    assert sorted(states["slots"]) == sorted(f"{n}/{s}" for n in names for s in ("m", "v", "max_v"))
    states["slots"]["fc1.W/m"][...] = 7.0
    assert not np.any(o.get_states(names)["slots"]["fc1.W/m"] == 7.0)


def test_numeric_lr_is_restored():
    names = params()
    o = opt.SGD(0.1)
    o.lr = 0.02
    o2 = opt.SGD(0.1)
    o2.set_states(o.get_states(names), names)
    assert o2.lr == 0.02


def test_validation_lists_every_problem_and_changes_nothing():
    names = params()
    o = opt.SGD(0.1, momentum=0.9)
    train(o, names, 2)
    good = o.get_states(names)
    bad = dict(good)
    bad["slots"] = dict(good["slots"])
    bad["slots"]["fc1.W/momentum"] = np.zeros((4, 3), np.float32)
    bad["slots"]["fc2.W/momentum"] = np.zeros((4, 3), np.float32)
    bad["slots"]["fc1.b/velocity"] = np.zeros(4, np.float32)
    bad["param_steps"] = {"fc1.W": 2, "other": 1}
    bad["step"] = -1
    target = opt.SGD(0.1, momentum=0.9)
    train(target, names, 1)
    before = target.get_states(names)
    with pytest.raises(ValueError) as e:
        target.set_states(bad, names)
    msg = str(e.value)
    for part in ("fc1.W/momentum: expected (3, 4)", "fc2.W/momentum", "velocity", "unknown parameter: other",
                 "missing parameter: fc1.b", "step must be"):  # fmt: skip
        assert part in msg, part
    after = target.get_states(names)
    assert after["step"] == before["step"]
    for k in before["slots"]:
        np.testing.assert_array_equal(after["slots"][k], before["slots"][k])


def test_type_mismatch_and_dtype_mismatch():
    names = params()
    o = opt.Adam(0.01)
    train(o, names, 1)
    with pytest.raises(ValueError, match="'Adam' does not match 'SGD'"):
        opt.SGD(0.1).set_states(o.get_states(names), names)
    states = o.get_states(names)
    states["slots"]["fc1.b/m"] = states["slots"]["fc1.b/m"].astype(np.float64)
    with pytest.raises(ValueError, match="fc1.b/m: expected"):
        opt.Adam(0.01).set_states(states, names)
    with pytest.raises(ValueError, match="expected a dict"):
        opt.Adam(0.01).set_states([1, 2], names)
