"""singa.utils (padding arithmetic, odd pads, graph walk, progress bar) and singa.snapshot."""

import os

import numpy as np
import pytest

from singa import autograd, snapshot, tensor, utils
from singa.tensor import Tensor


def test_output_and_padding_shapes_follow_onnx_auto_pad():
    assert utils.get_output_shape("SAME_UPPER", [32, 31], [3, 3], [2, 2]) == [16, 16]
    assert utils.get_output_shape("VALID", [32, 31], [3, 3], [2, 2]) == [15, 15]
    pads, odd = utils.get_padding_shape("SAME_UPPER", [32, 31], [3, 3], [2, 2])
    # axis 0: (16-1)*2+3-32 = 1 -> odd pixel at the end; axis 1: (16-1)*2+3-31 = 2 -> 1 each side
    assert pads == [0, 0, 1, 1] and odd == [0, 1, 0, 0]
    assert utils.get_padding_shape("SAME_LOWER", [32], [3], [2])[1] == [1, 0]
    with pytest.raises(ValueError, match="auto_pad"):
        utils.get_output_shape("NOTSET", [4], [3], [1])


def test_odd_padding_forward_and_backward_are_inverse():
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    y = utils.handle_odd_pad_fwd(x, (1, 0, 0, 1))
    assert y.shape == (2, 1, 4, 5)
    assert (y[:, :, 0] == 0).all() and (y[:, :, :, -1] == 0).all()
    np.testing.assert_array_equal(utils.handle_odd_pad_bwd(y, (1, 0, 0, 1)), x)
    p = utils.handle_odd_pad_fwd(x, (0, 1, 1, 0), is_pool=True)  # border copies for pooling
    np.testing.assert_array_equal(p[:, :, -1, 1:], x[:, :, -1])
    np.testing.assert_array_equal(p[:, :, :-1, 0], x[:, :, :, 0])


def test_force_unicode():
    assert utils.force_unicode(b"caf\xc3\xa9") == "café" and utils.force_unicode("x") == "x"


def test_update_progress_draws_a_bar(capsys):
    text = utils.update_progress(0.5, "loss 1.0")
    assert text == "[..........          ] 50.0% loss 1.0"
    assert capsys.readouterr().out.startswith(text)
    assert "Done." in utils.update_progress(1.2, "") and "Halt." in utils.update_progress(-1, "")
    assert "error" in utils.update_progress("half", "")


def test_post_order_walk_lists_operations_after_their_inputs(monkeypatch):
    monkeypatch.setattr(autograd, "training", True)
    w = Tensor(data=np.ones((2, 2)), requires_grad=True, stores_grad=True, name="w")
    x = tensor.from_numpy(np.ones((3, 2), np.float32))
    x.name = "x"
    h = autograd.relu(autograd.matmul(x, w))
    y = autograd.add(h, h)
    nodes, weights, inputs = utils.post_order_recursive(y.creator, y)
    kinds = [type(op).__name__ for op in nodes.values()]
    assert kinds == ["MatMul", "ReLU", "Add"]
    assert list(weights) == ["w"] and list(inputs) == ["x"]


def test_snapshot_round_trip_without_pickle(tmp_path):
    prefix = str(tmp_path / "params")
    with snapshot.Snapshot(prefix, True) as sn:
        sn.write("l1.W", tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)))
        sn.write("step", np.array([3], np.int32))
        with pytest.raises(ValueError, match="already written"):
            sn.write("step", np.array([4]))
        with pytest.raises(TypeError, match="numeric"):
            sn.write("bad", np.array([object()]))
    assert os.path.isfile(prefix + ".npz")
    got = snapshot.Snapshot(prefix, False).read()
    assert sorted(got) == ["l1.W", "step"]
    np.testing.assert_array_equal(got["l1.W"].to_numpy(), np.arange(6).reshape(2, 3))
    assert got["step"].dtype == np.int32
    with np.load(prefix + ".npz", allow_pickle=False) as z:  # plain npy members
        assert sorted(z.files) == ["l1.W", "step"]


def test_snapshot_written_when_released_and_errors(tmp_path):
    prefix = str(tmp_path / "p")
    sn = snapshot.Snapshot(prefix, True)
    sn.write("a", np.zeros(2))
    del sn  # SINGA's programs rely on the object going away
    assert list(snapshot.Snapshot(prefix, False).read()) == ["a"]
    with pytest.raises(FileNotFoundError):
        snapshot.Snapshot(str(tmp_path / "missing"), False)
    with pytest.raises(RuntimeError, match="reading"):
        snapshot.Snapshot(prefix, False).write("b", np.zeros(1))
    with pytest.raises(RuntimeError, match="writing"):
        snapshot.Snapshot(str(tmp_path / "w"), True).read()


def test_a_failed_snapshot_block_keeps_the_previous_file(tmp_path):
    prefix = str(tmp_path / "p")
    with snapshot.Snapshot(prefix, True) as sn:
        sn.write("a", np.ones(2))
    with pytest.raises(KeyError), snapshot.Snapshot(prefix, True) as sn:
        sn.write("b", np.ones(2))
        raise KeyError("interrupted")
    assert list(snapshot.Snapshot(prefix, False).read()) == ["a"]
    assert [f for f in os.listdir(tmp_path) if f.startswith(".snapshot-")] == []
