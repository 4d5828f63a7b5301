"""Hostile files are refused at once, in bounded memory, before any state changes:
special files, zip bombs (nested or not), too many members, lying central
directories, huge shapes, truncation; and concurrent writers never tear a file."""

import os
import signal
import time
import tracemalloc

import hostile_checkpoints as hostile
import numpy as np
import pytest
from test_checkpoint_helpers import CHILD_LIMIT_S, Net, fake_grads, fork_frozen, states_of, wait_child

from singa import checkpoint as ck
from singa import opt

#: what each hostile file is refused for
EXPECTED = {
    "nested_zip_bomb": "more than the limit|nested compression",
    "flat_zip_bomb": "more than the limit",
    "dev_zero": "not a regular file .*character device",
    "fifo": "not a regular file .*FIFO",
    "many_members": "declares 2000 members, more than the 16 expected",
    "many_arrays": "lists 2000 arrays, more than the .* expected",
    "lying_member_count": "lying central directory",
    "lying_directory_size": "lying central directory",
    "lying_member_size": "zip bomb",
    "huge_shape": "does not match|header says",
    "truncated": "truncated or incomplete",
}
SIZES = {"nested_zip_bomb": {"inflated": 96 << 20}, "flat_zip_bomb": {"inflated": 96 << 20}}
SIZES.update(many_members={"count": 2000}, many_arrays={"count": 2000})


def _model():
    m = Net()
    m.optimizer = opt.SGD(0.1, momentum=0.9)
    fake_grads(m, m.optimizer)
    return m


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    p = tmp_path_factory.mktemp("good") / "good.zip"
    ck.save_model(_model(), p, {"epoch": 1})
    return p.read_bytes()


def test_the_corpus_is_covered():
    assert set(EXPECTED) == set(hostile.CORPUS)


@pytest.mark.parametrize("name", sorted(hostile.CORPUS))
def test_hostile_file_is_refused_in_bounded_memory_and_changes_nothing(tmp_path, good, name):
    if name == "dev_zero" and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    if name == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs")
    path = hostile.CORPUS[name](str(tmp_path), good, **SIZES.get(name, {}))
    model = _model()
    before = states_of(model)
    old = signal.signal(signal.SIGALRM, signal.default_int_handler) if hasattr(signal, "SIGALRM") else None
    if old is not None:
        signal.alarm(300)  # a FIFO that blocks would hang the suite: fail instead (a hang guard)
    tracemalloc.start()
    try:
        with pytest.raises(ck.CheckpointError, match=EXPECTED[name]) as e:
            ck.load_model(model, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        if old is not None:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    assert os.path.basename(path) in str(e.value)
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB allocated to refuse {name}"
    after = states_of(model)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    if name != "many_arrays":  # without a model, 2000 empty arrays are a valid checkpoint
        with pytest.raises(ck.CheckpointError):
            ck.read(path, verify=True)


def test_model_mismatch_is_found_before_any_array_data_is_read(tmp_path, good, monkeypatch):
    """A strict load compares names, shapes and dtypes from the headers first."""
    from singa.checkpoint.fileformat.zip_members import NpzReader

    def no_data(self, check_crc):
        raise AssertionError("array data read before the model was checked")

    monkeypatch.setattr(NpzReader, "arrays", no_data)
    p = tmp_path / "good.zip"
    p.write_bytes(good)

    class Other(Net):
        def __init__(self):
            super().__init__()
            del self.heads

    with pytest.raises(ck.CheckpointError, match="unexpected: heads.h.W"):
        ck.load_layer(Other(), p)


def test_compressed_tensor_dict_is_not_part_of_format_1(tmp_path, good):
    parts = hostile.members(good)
    p = tmp_path / "deflated_npz.zip"
    p.write_bytes(hostile.zip_bytes(parts, method=__import__("zipfile").ZIP_DEFLATED))
    with pytest.raises(ck.CheckpointError, match="tensor_dict.npz is compressed"):
        ck.load_model(_model(), p)


def test_compressed_checkpoints_still_load(tmp_path):
    """compress=True deflates the .npy members inside a stored npz: allowed."""
    src = _model()
    p = tmp_path / "c.zip"
    ck.save_model(src, p, {"big": np.zeros(1 << 20, np.float32)}, compress=True)
    assert p.stat().st_size < 100_000
    dst = _model()
    assert ck.load_model(dst, p)["big"].shape == (1 << 20,)
    assert all(np.array_equal(a, b) for a, b in zip(states_of(src).values(), states_of(dst).values()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_concurrent_writers_last_one_wins_never_a_torn_file(tmp_path):
    """Several processes saving to one path: the file is always one whole save (each
    save renames a complete temporary file over it), and in the end the last rename's."""
    path = tmp_path / "shared.zip"
    ck.save_layer(Net(seed=0), path, {"writer": -1, "i": 0})
    writers, saves = 3, 8
    pids = []
    for w in range(writers):
        pid = fork_frozen()
        if pid == 0:
            try:
                for i in range(saves):
                    ck.save_layer(Net(seed=w), path, {"writer": w, "i": i})
            finally:
                os._exit(0)
        pids.append(pid)
    reads, started = 0, time.monotonic()
    while pids:
        aux = ck.load_layer(Net(seed=9), path)  # whole, checksums verified, or it raises
        assert aux["writer"] in range(-1, writers)
        reads += 1
        pids = [p for p in pids if wait_child(p, limit_s=None) is None]
        if pids and time.monotonic() - started > CHILD_LIMIT_S:
            wait_child(pids[0], limit_s=0)  # a hung writer: killed, and the test fails
    dst = Net(seed=9)
    aux = ck.load_layer(dst, path)
    assert aux["writer"] in range(writers) and aux["i"] == saves - 1
    want = states_of(Net(seed=aux["writer"]))
    assert all(np.array_equal(want[k], v) for k, v in states_of(dst).items())
    assert os.listdir(tmp_path) == ["shared.zip"] and reads >= 1
