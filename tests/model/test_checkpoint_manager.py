"""CheckpointManager: numbered files, the index, retention (last N, best M), restore of
the newest valid checkpoint, stray files of killed saves, asynchronous saving (a
consistent snapshot, one save in flight, errors surfaced), a loader's position."""

import json
import os
import threading

import numpy as np
import pytest
from model_helpers import MLP, batches

from singa import checkpoint as ck
from singa import opt
from singa.checkpoint import background
from singa.checkpoint.fileformat.atomic import host_tag
from singa.checkpoint.states import model_saving
from singa.data import ArrayDataset, DataLoader
from singa.tensor import Tensor


def make(seed=0):
    m = MLP(seed=seed)
    m.set_optimizer(opt.SGD(0.1, momentum=0.9))
    x = Tensor((4, 6))
    m.compile([x], is_train=True, use_graph=False)
    return m


def step(m, i):
    x, y = batches(1, (4, 6), 3, seed=100 + i)[0]
    m(Tensor(data=x), Tensor(data=y.astype(np.int32), requires_grad=False))


def states(m):
    return {k: v.to_numpy().copy() for k, v in m.get_states().items()}


def files(d):
    return sorted(os.listdir(d))


def test_keep_last_and_index(tmp_path):
    m = make()
    mgr = ck.CheckpointManager(tmp_path, keep_last=2)
    for s in (10, 20, 30):
        step(m, s)
        mgr.save(s, m, metrics={"loss": 1.0 / s})
    assert mgr.all() == [20, 30] and mgr.latest() == 30
    assert files(tmp_path) == ["checkpoints.json", "ckpt-000000020.zip", "ckpt-000000030.zip"]
    doc = json.loads((tmp_path / "checkpoints.json").read_text())
    assert [c["step"] for c in doc["checkpoints"]] == [20, 30]
    assert doc["checkpoints"][1]["metrics"] == {"loss": pytest.approx(1 / 30)}
    assert ck.CheckpointManager(tmp_path).all() == [20, 30]  # a new manager reads the index


def test_keep_best_by_monitor(tmp_path):
    m = make()
    mgr = ck.CheckpointManager(tmp_path, keep_last=1, keep_best=2, monitor="acc", mode="max")
    for s, acc in [(1, 0.5), (2, 0.9), (3, 0.7), (4, 0.8), (5, 0.1)]:
        mgr.save(s, m, metrics={"acc": acc})
    assert mgr.all() == [2, 4, 5]  # the newest, and the two best
    assert mgr.best() == 2
    mgr.save(6, m, metrics={"acc": float("nan")})  # never "best", kept as the newest
    assert mgr.all() == [2, 4, 6] and mgr.best() == 2


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="keep_best needs a monitor"):
        ck.CheckpointManager("x", keep_best=1)
    with pytest.raises(ValueError, match="mode"):
        ck.CheckpointManager("x", mode="up")
    with pytest.raises(ValueError, match="keep nothing"):
        ck.CheckpointManager("x", keep_last=0)


def test_save_refuses_bad_step_and_metric_before_writing(tmp_path):
    m = make()
    mgr = ck.CheckpointManager(tmp_path)
    with pytest.raises(ValueError, match="step"):
        mgr.save(-1, m)
    with pytest.raises(TypeError, match="metric 'x'"):
        mgr.save(1, m, metrics={"x": "high"})
    assert files(tmp_path) == []


def test_restore_is_exact_and_restores_the_optimizer(tmp_path):
    m = make()
    mgr = ck.CheckpointManager(tmp_path, keep_last=3)
    for i in range(3):
        step(m, i)
    mgr.save(3, m, aux_states={"note": "hi"})
    saved = states(m)
    step(m, 3)
    after_ref = states(m)
    for i in range(4, 6):
        step(m, i)
    r = mgr.restore(m)
    assert r.step == 3 and r.aux_states == {"note": "hi"} and r.skipped == []
    for k, v in saved.items():
        np.testing.assert_array_equal(m.get_states()[k].to_numpy(), v)
    step(m, 3)  # the same step again: momentum restored too, so bitwise the same
    for k, v in after_ref.items():
        np.testing.assert_array_equal(m.get_states()[k].to_numpy(), v)


def test_damaged_newest_is_skipped_with_a_warning(tmp_path):
    m = make()
    mgr = ck.CheckpointManager(tmp_path, keep_last=3)
    mgr.save(1, m)
    good = states(m)
    step(m, 0)
    path = mgr.save(2, m)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    step(m, 1)
    with pytest.warns(ck.CheckpointWarning, match="damaged"):
        r = mgr.restore(m)
    assert r.step == 1 and len(r.skipped) == 1 and "ckpt-000000002.zip" in r.skipped[0]
    for k, v in good.items():
        np.testing.assert_array_equal(m.get_states()[k].to_numpy(), v)
    with pytest.raises(ck.CheckpointError):  # asked for by step: an error, not a skip
        mgr.restore(m, step=2)


def test_restore_of_another_model_changes_nothing(tmp_path):
    mgr = ck.CheckpointManager(tmp_path)
    mgr.save(5, make())
    other = MLP(din=7)
    other.set_optimizer(opt.SGD(0.1))
    other.compile([Tensor((4, 7))], is_train=True, use_graph=False)
    before = states(other)
    with pytest.raises(ck.CheckpointError, match="nothing was changed"):
        mgr.restore(other)
    for k, v in before.items():
        np.testing.assert_array_equal(other.get_states()[k].to_numpy(), v)


def test_empty_folder_restores_nothing(tmp_path):
    assert ck.CheckpointManager(tmp_path / "new").restore(make()) is None


def test_stray_files_of_a_crashed_run(tmp_path):
    m = make()
    mgr = ck.CheckpointManager(tmp_path, keep_last=2)
    mgr.save(1, m)
    mgr.save(2, m)
    # a killed save's temporary (a dead process id), an index that lost the newest
    # file (killed between the file and the index), and a damaged index
    dead = 2**22 + 12345
    stray = tmp_path / f".ckpt-000000003.zip.singa-tmp.{host_tag()}.{dead}.abcdef"
    stray.write_bytes(b"partial")
    os.replace(mgr.path(2), tmp_path / "keep.zip")
    ck.CheckpointManager(tmp_path, keep_last=2).save(2, m)  # index now lists 1, 2
    os.replace(tmp_path / "keep.zip", tmp_path / "ckpt-000000003.zip")
    (tmp_path / "checkpoints.json").write_text("{not json")
    mgr2 = ck.CheckpointManager(tmp_path, keep_last=2)
    assert not stray.exists()
    assert mgr2.all() == [1, 2, 3] and any("damaged" in p for p in mgr2.problems)
    mgr2.save(4, m)
    assert files(tmp_path) == ["checkpoints.json", "ckpt-000000003.zip", "ckpt-000000004.zip"]


def test_loader_position_is_saved_and_restored(tmp_path):
    ds = ArrayDataset(np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20))
    loader = DataLoader(ds, batch_size=4, shuffle=True, seed=3)
    it = iter(loader)
    next(it), next(it)
    m = make()
    mgr = ck.CheckpointManager(tmp_path)
    mgr.save(2, m, aux_states={"loader": loader})
    rest = [b[1].tolist() for b in it]
    fresh = DataLoader(ds, batch_size=4, shuffle=True, seed=3)
    r = mgr.restore(m, stateful={"loader": fresh})
    assert r.aux_states["loader"]["batch"] == 2
    assert [b[1].tolist() for b in fresh] == rest
    wrong = DataLoader(ds, batch_size=5, shuffle=True, seed=3)
    with pytest.raises(ck.CheckpointError, match="loader"):
        mgr.restore(m, stateful={"loader": wrong})


class _Gate:
    """Blocks the background write until released, to observe what runs meanwhile."""

    def __init__(self, monkeypatch):
        self.started, self.release = threading.Event(), threading.Event()
        real = model_saving.write_snapshot

        def slow(path, snap, *, compress=False):
            self.started.set()
            assert self.release.wait(30)
            return real(path, snap, compress=compress)

        monkeypatch.setattr(model_saving, "write_snapshot", slow)


def test_async_snapshot_is_taken_at_the_call(tmp_path, monkeypatch):
    gate = _Gate(monkeypatch)
    m = make()
    mgr = ck.CheckpointManager(tmp_path, async_save=True)
    step(m, 0)
    at_save = states(m)
    slots_at_save = m.optimizer.get_states(m.get_params())["slots"]
    mgr.save(1, m)
    assert gate.started.wait(30)
    step(m, 1)  # training goes on while the file is written
    assert mgr.all() == []  # not durable yet
    gate.release.set()
    mgr.wait()
    assert mgr.all() == [1]
    got = ck.read_arrays(mgr.path(1))
    for k, v in at_save.items():
        np.testing.assert_array_equal(got[k], v)
    assert slots_at_save  # the momentum slots as they were at the call, not after step 1
    for k, v in slots_at_save.items():
        np.testing.assert_array_equal(got["optimizer/" + k], v)


def test_async_one_save_in_flight(tmp_path, monkeypatch):
    gate = _Gate(monkeypatch)
    m = make()
    mgr = ck.CheckpointManager(tmp_path, async_save=True)
    mgr.save(1, m)
    assert gate.started.wait(30)
    done = threading.Event()

    def second():
        mgr.save(2, m)
        done.set()

    t = threading.Thread(target=second)
    t.start()
    assert not done.wait(0.3)  # blocked behind the first save
    gate.release.set()
    t.join(30)
    mgr.wait()
    assert done.is_set() and mgr.all() == [1, 2]


def test_async_error_surfaces_at_the_next_call(tmp_path, monkeypatch):
    m = make()
    mgr = ck.CheckpointManager(tmp_path, async_save=True)

    def boom(path, snap, *, compress=False):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_saving, "write_snapshot", boom)
    mgr.save(1, m)
    with pytest.raises(OSError, match="No space"):
        mgr.save(2, m)
    monkeypatch.undo()
    mgr.save(3, m)
    mgr.wait()
    assert mgr.all() == [3]


def test_async_error_nobody_collected_is_printed_at_exit(capsys):
    w = background.BackgroundWriter()

    def boom():
        raise OSError("disk gone")

    w.submit(boom, "of step 7")
    w.report_at_exit()
    assert "of step 7 failed: disk gone" in capsys.readouterr().err


def test_process_exit_waits_for_the_background_write(tmp_path):
    """The script returns while its save is still being written (slowed down); the
    interpreter waits for the write, so the checkpoint is there and whole."""
    import subprocess
    import sys

    code = (
        "import time, numpy as np\n"
        "from singa import checkpoint as ck, layer, model, opt, tensor\n"
        "from singa.checkpoint.states import model_saving\n"
        "real = model_saving.write_snapshot\n"
        "def slow(*a, **k):\n"
        "    time.sleep(1.0)\n"
        "    return real(*a, **k)\n"
        "model_saving.write_snapshot = slow\n"
        "class M(model.Model):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.fc = layer.Linear(2)\n"
        "    def forward(self, x): return self.fc(x)\n"
        "m = M(); m.set_optimizer(opt.SGD(0.1))\n"
        "m.compile([tensor.from_numpy(np.ones((2, 3), np.float32))], is_train=False)\n"
        f"ck.CheckpointManager({str(tmp_path)!r}, async_save=True).save(7, m)\n"
        "print('returned', flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "returned"
    assert ck.newest_valid(tmp_path)[0] == 7
