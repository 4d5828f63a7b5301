"""Crash safety (SIGKILL during saves) and fuzzing of the loader."""

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_checkpoint_helpers import Net, assert_states_equal, fork_frozen, states_of, wait_child

from singa import checkpoint as ck
from singa.checkpoint.fileformat.atomic import _TMP_TAG
from singa.layer.base import Layer
from singa.tensor import Tensor


class Big(Layer):
    """About ``mb`` MB of float32 parameters in a few arrays."""

    def __init__(self, mb=16, parts=4):
        super().__init__()
        n = int(mb * 1e6 / 4 / parts)
        self.ws = [Tensor((n,), requires_grad=True, stores_grad=True) for _ in range(parts)]
        self.small = Tensor((3, 3), requires_grad=False)


def fill(model, i):
    for t in model.get_states().values():
        t.data[...] = i


def check_consistent(path, mb=1):
    """The file loads, and its arrays all hold the value of its aux 'i'."""
    info = ck.read(path, verify=True)
    i = info.aux_values["i"]
    for k, a in ck.read_arrays(path).items():
        assert (a == i).all(), (k, i)
    model = Big(mb=mb)
    assert ck.load_layer(model, path)["i"] == i
    return i


def temporaries(folder):
    return [n for n in os.listdir(folder) if _TMP_TAG in n]


def _saver_loop(path, start, kill_at):  # runs in a forked child, never returns
    """Save again and again, and SIGKILL this process at its ``kill_at``-th kill point:
    the start of each array's write, each fsync, the rename, the folder's fsync."""
    from singa.checkpoint.fileformat import atomic, npz_writing

    count = [0]

    def counted(fn):
        def at_kill_point(*args, **kwargs):
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)

        return at_kill_point

    npz_writing.write_npy = counted(npz_writing.write_npy)
    os.fsync = counted(os.fsync)
    os.replace = counted(os.replace)
    atomic._fsync_folder = counted(atomic._fsync_folder)
    try:
        model = Big(mb=1)
        i = start
        while True:
            fill(model, i)
            ck.save_layer(model, path, {"i": i})
            i += 1
    finally:
        os._exit(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_during_saves_never_leaves_a_broken_file(tmp_path):
    """A process killed at any kill point of a save (counted, not timed) leaves the
    previous checkpoint or the new one, whole; the next save removes its temporary."""
    path = str(tmp_path / "ckpt.zip")
    model = Big(mb=1)
    fill(model, 0)
    ck.save_layer(model, path, {"i": 0})
    seen, leftovers = {0}, 0
    kill_points = 2 * 9  # two saves: 5 arrays, the file's fsync, the rename, the folder's (2 fsyncs)
    for kill_at in range(1, kill_points + 1):
        pid = fork_frozen()
        if pid == 0:
            _saver_loop(path, 1000 * kill_at, kill_at)
        status = wait_child(pid)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        seen.add(check_consistent(path))
        leftovers += len(temporaries(tmp_path)) > 0
    assert leftovers >= kill_points // 3, "kills in the middle of a save leave a temporary file"
    assert len(seen) >= kill_points // 9, "kills after a complete save keep the new file"
    # the next successful save removes the temporaries of the killed processes
    fill(model, 5)
    ck.save_layer(model, path, {"i": 5})
    assert temporaries(tmp_path) == [] and os.listdir(tmp_path) == ["ckpt.zip"]
    assert check_consistent(path) == 5


_SUBPROCESS_SAVER = """
import sys
sys.path.insert(0, {tests!r})
from test_checkpoint_robustness import Big, fill
from singa import checkpoint as ck
model, i = Big(), {start}
print("ready", flush=True)
while True:
    fill(model, i)
    ck.save_layer(model, {path!r}, {{"i": i}})
    i += 1
"""


@pytest.mark.slow
def test_sigkill_of_fresh_interpreters_during_saves(tmp_path):
    path = str(tmp_path / "ckpt.zip")
    model = Big()
    fill(model, 0)
    ck.save_layer(model, path, {"i": 0})
    rng = random.Random(1)
    tests = os.path.dirname(os.path.abspath(__file__))
    for k in range(30):
        code = _SUBPROCESS_SAVER.format(tests=tests, start=1000 * (k + 1), path=path)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        check_consistent(path, mb=16)
    ck.save_layer(model, path, {"i": 0})
    assert os.listdir(tmp_path) == ["ckpt.zip"]


# ----- fuzzing -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    src = Net(seed=1)
    aux = {"epoch": 3, "cfg": {"a": [1, 2]}, "ema": np.arange(4, dtype=np.float32)}
    files = {}
    for name, compress in (("stored", False), ("deflated", True)):
        p = folder / f"{name}.zip"
        ck.save_layer(src, p, aux, compress=compress)
        files[name] = p.read_bytes()
    return folder, files, states_of(src)


#: seconds after which a load is taken to hang (no test checks speed)
HANG_GUARD_S = 300


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _load_mutated(folder, data, expected):
    """Load mutated bytes: a CheckpointError, or exactly the original contents."""
    p = folder / "mutant.zip"
    p.write_bytes(bytes(data))
    model = Net(seed=7)
    before = states_of(model)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_GUARD_S)  # a hang, not a speed check
    try:
        aux = ck.load_layer(model, p)
    except ck.CheckpointError as e:
        assert str(p) in str(e)
        assert_states_equal(before, states_of(model))  # nothing changed
        return False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert_states_equal(expected, states_of(model))
    assert aux["epoch"] == 3 and aux["cfg"] == {"a": [1, 2]} and aux["ema"].tolist() == [0, 1, 2, 3]
    return True


_fuzz = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@_fuzz
@given(kind=st.sampled_from(["stored", "deflated"]), frac=st.floats(0.0, 1.0, exclude_max=True))
def test_fuzz_truncations(fuzz_files, kind, frac):
    folder, files, expected = fuzz_files
    data = files[kind]
    assert not _load_mutated(folder, data[: int(len(data) * frac)], expected)


@_fuzz
@given(
    kind=st.sampled_from(["stored", "deflated"]),
    flips=st.lists(
        st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=6
    ),
)
def test_fuzz_byte_flips(fuzz_files, kind, flips):
    folder, files, expected = fuzz_files
    data = bytearray(files[kind])
    for pos, x in flips:
        data[int(pos * len(data))] ^= x
    _load_mutated(folder, data, expected)


@_fuzz
@given(
    kind=st.sampled_from(["stored", "deflated"]),
    start=st.floats(0.0, 1.0, exclude_max=True),
    junk=st.binary(min_size=1, max_size=64),
)
def test_fuzz_overwritten_ranges(fuzz_files, kind, start, junk):
    folder, files, expected = fuzz_files
    data = bytearray(files[kind])
    i = int(start * len(data))
    data[i : i + len(junk)] = junk
    _load_mutated(folder, data, expected)


def test_fuzz_baseline_loads(fuzz_files):
    folder, files, expected = fuzz_files
    for data in files.values():
        assert _load_mutated(folder, data, expected)
