"""Model.freeze / unfreeze: frozen parameters get no gradient, no update and no
optimizer state, in eager and graph mode; load_states(strict=False) for fine-tuning."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import LayerMLP

from singa import opt, tensor


def _model(graph: bool):
    m = LayerMLP()
    m.set_optimizer(opt.SGD(0.1, momentum=0.9))
    x = tensor.Tensor((4, 6))
    m.compile([x], is_train=True, use_graph=graph)
    return m


def _steps(m, n=3):
    rng = np.random.default_rng(1)
    for _ in range(n):
        x = tensor.from_numpy(rng.normal(size=(4, 6)).astype(np.float32))
        y = tensor.from_numpy(rng.integers(0, 3, size=4).astype(np.int32))
        m(x, y)


@pytest.mark.parametrize("graph", [False, True])
def test_frozen_parameters_do_not_change_and_have_no_optimizer_state(graph):
    m = _model(graph)
    names = list(m.get_params())
    first = names[0].split(".")[0]
    frozen = m.freeze(first)
    assert frozen and all(n.startswith(first + ".") for n in frozen)
    assert m.frozen() == frozen
    before = {n: t.to_numpy().copy() for n, t in m.get_params().items()}
    _steps(m)
    after = {n: t.to_numpy() for n, t in m.get_params().items()}
    for n in names:
        if n in frozen:
            np.testing.assert_array_equal(after[n], before[n])
        else:
            assert not np.array_equal(after[n], before[n]), n
    slots = m.optimizer.get_states(m.get_params())["slots"]
    assert slots and not any(k.split("/")[0] in frozen for k in slots)
    assert m.unfreeze() == names and m.frozen() == []
    _steps(m, 1)
    assert not np.array_equal(m.get_params()[frozen[0]].to_numpy(), before[frozen[0]])


def test_glob_patterns_and_errors():
    m = _model(False)
    names = list(m.get_params())
    assert m.freeze("*.b") == [n for n in names if n.endswith(".b")]
    m.unfreeze()
    with pytest.raises(ValueError, match="no parameter matches 'nothere'"):
        m.freeze("*.W", "nothere")
    assert m.frozen() == []  # nothing changed
    with pytest.raises(ValueError, match="no parameters yet"):
        LayerMLP().freeze("*")


def test_load_states_not_strict_loads_what_matches(tmp_path):
    src = _model(False)
    _steps(src)
    src.save_states(str(tmp_path / "a.zip"))
    dst = _model(False)
    before = {n: t.to_numpy().copy() for n, t in dst.get_states().items()}
    aux = dst.load_states(str(tmp_path / "a.zip"), strict=False)
    assert not aux.report.missing and not aux.report.mismatched
    for n, t in dst.get_states().items():
        np.testing.assert_array_equal(t.to_numpy(), src.get_states()[n].to_numpy())
    assert before  # states existed before the load
