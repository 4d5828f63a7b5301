"""An audit of the replay rule (singa.sonnx.replay.replayable) over ONNX's node cases:
every case the rule accepts, with float inputs, is evaluated node by node and through a
trace (sonnx.prepare's replay, and SONNXModel's graph mode) on its own inputs, on new
ones and on its own again; the two must agree each time. A handler computing an output
outside the recorded operators shows up here as a frozen value."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from singa import sonnx
from singa.sonnx import backend, replay
from singa.tensor import Tensor


@functools.lru_cache(maxsize=1)
def _accepted_cases() -> list:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in collect_testcases() if c.kind == "node"]
    supported = set(backend.supported_ops())
    out = []
    for case in cases:
        m = case.model
        if any(n.domain not in ("", "ai.onnx") for n in m.graph.node):
            continue
        if not {n.op_type for n in m.graph.node} <= supported:
            continue
        ins = list(case.data_sets[0][0])
        if ins and all(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in ins):
            out.append((case.name, m, ins))
    return out


def _input_sets(ins: list) -> list:
    """The case's inputs, new ones, the case's again. The new ones leave the sign of
    each value (a BatchNorm variance stays positive)."""
    rng = np.random.default_rng(0)
    new = [(a * (1 + 0.3 * rng.random(a.shape))).astype(a.dtype) for a in ins]
    return [ins, new, ins]


def _agree(want: list, got: list) -> bool:
    return all(
        np.shape(w) == np.shape(o) and np.allclose(w, o, rtol=1e-5, atol=1e-6, equal_nan=True)
        for w, o in zip(want, got, strict=True)
    )


def test_prepared_replays_follow_new_inputs():
    checked, differ = 0, []
    for name, m, ins in _accepted_cases():
        if not replay.replayable(m, [i.name for i in m.graph.initializer]):
            continue
        eager, traced = sonnx.prepare(m, use_graph=False), sonnx.prepare(m, fold_batchnorm=False)
        checked += 1
        if not all(_agree(eager.run(list(xs)), traced.run(list(xs))) for xs in _input_sets(ins)):
            differ.append(name)
    assert checked > 150 and differ == []


def _outputs(model, xs) -> list:
    return [o.to_numpy() for o in model(*[Tensor(data=a, dtype=a.dtype) for a in xs])]


def test_sonnx_model_graph_mode_follows_new_inputs():
    checked, differ = 0, []
    for name, m, ins in _accepted_cases():
        ints = [i.name for i in m.graph.initializer if i.data_type in (6, 7)]  # int32 / int64
        if not replay.replayable(m, ints):
            continue
        eager, traced = sonnx.SONNXModel(m), sonnx.SONNXModel(m)
        eager.eval()
        traced.compile([Tensor(data=a, dtype=a.dtype) for a in ins], is_train=False, use_graph=True)
        assert traced.graph_mode
        checked += 1
        if not all(_agree(_outputs(eager, xs), _outputs(traced, xs)) for xs in _input_sets(ins)):
            differ.append(name)
    assert checked > 25 and differ == []


@pytest.mark.parametrize("rule", ["accepted", "refused"])
def test_the_rule_decides_graph_mode(rule):
    name, m, ins = next(
        c for c in _accepted_cases() if c[0] == ("test_relu" if rule == "accepted" else "test_hardmax_axis_1")
    )
    model = sonnx.SONNXModel(m)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model.compile([Tensor(data=a, dtype=a.dtype) for a in ins], is_train=False, use_graph=True)
    assert model.graph_mode == (rule == "accepted")
    assert any("graph mode stays off" in str(w.message) for w in seen) == (rule == "refused")
