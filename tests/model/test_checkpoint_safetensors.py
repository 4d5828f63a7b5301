"""save_weights / load_weights: safetensors files of a model's states, read by the
safetensors package itself, validated like load_states (nothing changed on failure),
and files written from a PyTorch state_dict where names and layouts agree."""

import numpy as np
import pytest
from model_helpers import MLP, LayerMLP
from safetensors.numpy import load_file, save_file

from singa import checkpoint as ck
from singa import opt
from singa.tensor import Tensor


def compiled(model, din=6):
    model.set_optimizer(opt.SGD(0.1))
    model.compile([Tensor((4, din))], is_train=True, use_graph=False)
    return model


def states(m):
    return {k: v.to_numpy().copy() for k, v in m.get_states().items()}


def test_round_trip_and_the_file_opens_with_safetensors(tmp_path):
    a, b = compiled(MLP(seed=0)), compiled(MLP(seed=1))
    p = str(tmp_path / "m.safetensors")
    ck.save_weights(a, p, metadata={"note": "x"})
    got = load_file(p)
    assert set(got) == set(a.get_states())
    for k, v in states(a).items():
        np.testing.assert_array_equal(got[k], v)
    report = ck.load_weights(b, p)
    assert not report
    for k, v in states(a).items():
        np.testing.assert_array_equal(b.get_states()[k].to_numpy(), v)


def test_mismatch_changes_nothing_and_names_every_problem(tmp_path):
    p = str(tmp_path / "m.safetensors")
    save_file({"w0": np.zeros((6, 9), np.float32), "extra": np.zeros(2, np.float32)}, p)
    m = compiled(MLP())
    before = states(m)
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_weights(m, p)
    msg = str(e.value)
    assert "mismatched: w0" in msg and "unexpected: extra" in msg and "missing: b0" in msg
    for k, v in before.items():
        np.testing.assert_array_equal(m.get_states()[k].to_numpy(), v)


def test_dtype_mismatch_is_an_error(tmp_path):
    m = compiled(MLP())
    p = str(tmp_path / "m.safetensors")
    save_file({k: v.astype(np.float16) for k, v in states(m).items()}, p)
    with pytest.raises(ck.CheckpointError, match="float16"):
        ck.load_weights(m, p)


def test_non_strict_loads_what_matches(tmp_path):
    a, b = compiled(MLP(seed=0)), compiled(MLP(seed=1))
    p = str(tmp_path / "m.safetensors")
    sa = states(a)
    save_file({"w0": sa["w0"], "junk": np.ones(3, np.float32)}, p)
    with pytest.warns(ck.CheckpointWarning):
        report = ck.load_weights(b, p, strict=False)
    assert report.unexpected and report.missing
    np.testing.assert_array_equal(b.get_states()["w0"].to_numpy(), sa["w0"])


def test_damaged_file_is_a_clear_error(tmp_path):
    m = compiled(MLP())
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\xff" * 40)
    with pytest.raises(ck.CheckpointError, match="not a valid safetensors file"):
        ck.load_weights(m, str(p))


def test_lazy_model_is_filled_when_created(tmp_path):
    a = compiled(LayerMLP(), din=5)
    p = str(tmp_path / "m.safetensors")
    ck.save_weights(a, p)
    b = LayerMLP()
    ck.load_weights(b, p)  # parameters do not exist yet
    compiled(b, din=5)
    for k, v in states(a).items():
        np.testing.assert_array_equal(b.get_states()[k].to_numpy(), v)


def _torch_file(tmp_path, transpose):
    """A safetensors file as PyTorch writes it for an nn.Linear(5, 10) -> ReLU ->
    nn.Linear(10, 3) named like LayerMLP, without torch (numpy twin of the layout)."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((10, 5)).astype(np.float32), rng.standard_normal((3, 10)).astype(np.float32)
    sd = {
        "linear1.W": w1,
        "linear1.b": np.zeros(10, np.float32),
        "linear2.W": w2,
        "linear2.b": np.ones(3, np.float32),
    }
    if transpose:
        sd = {k: v.T.copy() if v.ndim == 2 else v for k, v in sd.items()}
    p = str(tmp_path / "t.safetensors")
    save_file(sd, p)
    return p, sd


def test_pytorch_layout_error_says_transpose(tmp_path):
    p, _ = _torch_file(tmp_path, transpose=False)  # (out, in) as PyTorch keeps it
    m = compiled(LayerMLP(), din=5)
    with pytest.raises(ck.CheckpointError, match=r"\(out, in\).*weight.T"):
        ck.load_weights(m, p)
    p, sd = _torch_file(tmp_path, transpose=True)
    ck.load_weights(m, p)
    np.testing.assert_array_equal(m.get_states()["linear1.W"].to_numpy(), sd["linear1.W"])


def test_a_file_written_by_pytorch(tmp_path):
    try:
        import torch
        from safetensors.torch import save_file as torch_save
    except Exception:
        pytest.skip("torch is not available")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
    sd = net.state_dict()
    p = str(tmp_path / "torch.safetensors")
    torch_save({k: v.contiguous() for k, v in sd.items()}, p)
    m = compiled(LayerMLP(), din=5)
    with pytest.raises(ck.CheckpointError, match="PyTorch's state_dict names"):
        ck.load_weights(m, p)
    names = {"0.weight": "linear1.W", "0.bias": "linear1.b", "2.weight": "linear2.W", "2.bias": "linear2.b"}
    renamed = {names[k]: (v.T if v.ndim == 2 else v).contiguous() for k, v in sd.items()}
    torch_save(renamed, p)
    ck.load_weights(m, p)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    m.eval()
    ours = m.forward(Tensor(data=x)).to_numpy()
    ref = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
