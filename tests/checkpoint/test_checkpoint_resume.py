"""Exact resume: training split by save_states / load_states in a fresh process gives
bitwise the same parameters, buffers, optimizer states and losses as the uninterrupted
run (eager and graph mode, SGD with momentum and Adam with a schedule, dropout and
batch normalization, loading before or after compile)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from test_checkpoint_helpers import (
    CLASSES,
    MODELS,
    batches,
    build,
    final_state,
    resumed,
    train_steps,
    uninterrupted,
)

from singa import checkpoint as ck
from singa import device

N, M = 4, 5
HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [
    # model, optimizer, graph mode, load before compile
    ("mlp", "sgd", False, False),
    ("mlp", "sgd", True, False),
    ("mlp", "adam", False, True),
    ("mlp", "adam", True, True),
    ("cnn", "adam", True, False),
    ("cnn", "sgd", False, True),
]


def assert_bitwise(a, b):
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, k


@pytest.mark.parametrize("model_name, opt_name, graph, load_first", CASES)
def test_resume_in_a_fresh_process_is_bitwise_exact(tmp_path, model_name, opt_name, graph, load_first):
    ckpt, out = str(tmp_path / "ckpt.zip"), str(tmp_path / "resumed.npz")
    ref = uninterrupted(model_name, opt_name, graph, ckpt, N, M)
    assert ck.read(ckpt).optimizer["class"] == {"sgd": "SGD", "adam": "Adam"}[opt_name]
    code = (
        f"import sys; sys.path.insert(0, {HERE!r}); "
        "from test_checkpoint_helpers import resumed_main; resumed_main(sys.argv[1:])"
    )
    args = [model_name, opt_name, str(int(graph)), str(int(load_first)), ckpt, out, str(N), str(M)]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out, allow_pickle=False) as z:
        got = {k: z[k] for k in z.files}
    assert_bitwise(ref, got)


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_rewinding_a_model_whose_graph_is_traced(tmp_path, opt_name):
    """Loading into a model that kept training in graph mode: the traced graph is kept
    (values copied in place, slots looked up at replay) and replays the same steps."""
    ckpt = str(tmp_path / "ckpt.zip")
    device.get_default_device().set_rand_seed(0)
    m, tx, ty = build("cnn", opt_name)
    data = batches(N + M, MODELS["cnn"][1], CLASSES)
    m.compile([tx], is_train=True, use_graph=True)
    train_steps(m, tx, ty, data[:N])
    m.save_states(ckpt)
    first = final_state(m, train_steps(m, tx, ty, data[N:]))
    graphs = dict(m._graphs)
    assert len(graphs) == 1
    m.load_states(ckpt)
    again = final_state(m, train_steps(m, tx, ty, data[N:]))
    assert_bitwise(first, again)
    assert dict(m._graphs) == graphs  # replayed, not retraced


def test_resume_in_the_same_process_after_more_training(tmp_path):
    """Loading rewinds a model that kept training (in place, graph traces kept)."""
    ckpt = str(tmp_path / "ckpt.zip")
    ref = uninterrupted("mlp", "adam", True, ckpt, N, M)
    again = resumed("mlp", "adam", True, False, ckpt, N, M)
    assert_bitwise(ref, again)
