"""Checkpoints: round trips, the documented layout, Apache SINGA compatibility, read()."""

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from test_checkpoint_helpers import Leaf, Net, assert_states_equal, fake_grads, states_of

import singa
from singa import checkpoint as ck
from singa import device, opt
from singa.tensor import Tensor


def inner_npz(path):
    with zipfile.ZipFile(path) as z:
        return z.read("tensor_dict.npz")


def test_layout_matches_apache_singa_and_is_documented(tmp_path):
    net = Net()
    p = tmp_path / "ckpt.zip"
    ck.save_layer(net, p, {"epoch": 3, "best": Tensor(data=np.ones(2, np.float32))})
    with zipfile.ZipFile(p) as z:
        assert z.namelist() == ["tensor_dict.npz", "states_attr.json", "extra_states.json", "metadata.json"]
        assert z.testzip() is None
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())  # uncompressed by default
        attrs = json.loads(z.read("states_attr.json"))
        meta = json.loads(z.read("metadata.json"))
        extra = json.loads(z.read("extra_states.json"))
    # states_attr.json: SINGA's keys and state types (0 model, 1 aux)
    assert attrs["a.W"] == {"state_type": 0, "shape": [2, 3], "dtype": "float32"}
    assert attrs["best"] == {"state_type": 1, "shape": [2], "dtype": "float32", "aux_type": "tensor"}
    assert extra["aux"] == {"epoch": 3} and extra["optimizer"] is None and extra["rng"] is None
    # tensor_dict.npz is a plain npz, readable without pickle
    with np.load(io.BytesIO(inner_npz(p)), allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(attrs)
        np.testing.assert_array_equal(npz["a.W"], net.a.W.to_numpy())
    # metadata: format version, library version, creation time, SHA-256 of each .npy member
    assert meta["format"] == "singa-checkpoint" and meta["format_version"] == ck.FORMAT_VERSION == 1
    assert meta["singa_version"] == singa.__version__ and meta["created"].endswith("+00:00")
    with zipfile.ZipFile(io.BytesIO(inner_npz(p))) as npz_zip:
        for key, digest in meta["arrays"].items():
            assert hashlib.sha256(npz_zip.read(key + ".npy")).hexdigest() == digest
    with zipfile.ZipFile(p) as z:
        assert meta["members"]["states_attr.json"] == hashlib.sha256(z.read("states_attr.json")).hexdigest()


def test_round_trip_of_states_in_place(tmp_path):
    src, dst = Net(seed=0), Net(seed=10)
    p = tmp_path / "c.zip"
    ck.save_layer(src, p)
    arrays = {k: t.data for k, t in dst.get_states().items()}
    aux = ck.load_layer(dst, p)
    assert aux == {} and not aux.report
    assert_states_equal(states_of(src), states_of(dst))
    assert all(t.data is arrays[k] for k, t in dst.get_states().items())  # copied in place


def test_aux_states_come_back_with_their_types(tmp_path):
    net = Net()
    aux_in = {
        "t": Tensor(data=np.arange(6, dtype=np.float64).reshape(2, 3), dtype=np.float64),
        "arr": np.arange(5, dtype=np.int16),
        "fortran": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        "scalar": np.float16(1.5),
        "flag": np.bool_(True),
        "epoch": 7,
        "lr": 0.1,
        "nan": float("nan"),
        "name": "run-1 ünïcode",
        "ok": True,
        "none": None,
        "config": {"layers": [1, 2, {"x": [0.5, None]}], "opt": "sgd"},
        "empty": np.zeros((0, 3), np.float32),
        "zero_d": np.array(3.25),
        "complex": np.array([1 + 2j], np.complex64),
    }
    p = tmp_path / "aux.zip"
    ck.save_layer(net, p, aux_in)
    out = ck.load_layer(Net(), p)
    assert set(out) == set(aux_in)
    assert isinstance(out["t"], Tensor) and out["t"].dtype == np.float64
    np.testing.assert_array_equal(out["t"].to_numpy(), aux_in["t"].to_numpy())
    for k in ("arr", "fortran", "empty", "zero_d", "complex"):
        assert (
            type(out[k]) is np.ndarray and out[k].dtype == aux_in[k].dtype and out[k].shape == aux_in[k].shape
        )
        np.testing.assert_array_equal(out[k], aux_in[k])
    assert type(out["scalar"]) is np.float16 and out["scalar"] == np.float16(1.5)
    assert type(out["flag"]) is np.bool_ and out["flag"]
    for k in ("epoch", "lr", "name", "ok", "none", "config"):
        assert out[k] == aux_in[k] and type(out[k]) is type(aux_in[k])
    assert np.isnan(out["nan"])


@pytest.mark.parametrize(
    "value, msg",
    [
        ((1, 2), "tuple is not a JSON value"),
        ({1: "a"}, "not a string"),
        ({"a": {1, 2}}, "set is not a JSON value"),
        ([np.float64(1.0)], "float64 is not a JSON value"),
        ({"t": Tensor((2,))}, "only as top-level values"),
        (np.array(["a", "b"]), "cannot be stored"),
        (np.array([object()]), "cannot be stored"),
    ],
)
def test_aux_values_that_would_not_come_back_unchanged_are_refused(tmp_path, value, msg):
    p = tmp_path / "bad.zip"
    with pytest.raises(TypeError, match=msg):
        ck.save_layer(Net(), p, {"x": value})
    assert not p.exists() and os.listdir(tmp_path) == []


def test_aux_key_clashing_with_a_state_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'a.W'"):
        ck.save_layer(Net(), tmp_path / "c.zip", {"a.W": np.zeros(1)})
    ck.save_layer(Net(), tmp_path / "c.zip", {"a.W": "a JSON value may share a state's name"})
    assert ck.load_layer(Net(), tmp_path / "c.zip") == {"a.W": "a JSON value may share a state's name"}
    with pytest.raises(ValueError, match="cannot be stored"):
        ck.save_layer(Net(), tmp_path / "c.zip", {"../evil": np.zeros(1)})


def test_dtypes_shapes_and_layouts_round_trip(tmp_path):
    class Many(Leaf):
        def __init__(self):
            super().__init__(2)
            self.i8 = Tensor(data=np.array([-3, 4], np.int8), dtype=np.int8, requires_grad=False)
            self.u64 = Tensor(data=np.array([2**63], np.uint64), dtype=np.uint64, requires_grad=False)
            self.f16 = Tensor(data=np.array([[0.5, -1]], np.float16), dtype=np.float16, requires_grad=False)
            self.f64 = Tensor(data=np.pi * np.ones((2, 1, 2)), dtype=np.float64, requires_grad=False)
            self.bool = Tensor(data=np.array([True, False]), dtype=np.bool_, requires_grad=False)
            self.scalar = Tensor(data=np.float32(2.5), requires_grad=False)
            self.empty = Tensor((0, 4), requires_grad=False)
            self.fortran = Tensor((3, 4), requires_grad=False)
            self.fortran.data = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))

    a, b = Many(), Many()
    for t in b.get_states().values():
        t.data[...] = 0
    ck.save_layer(a, tmp_path / "m.zip")
    ck.load_layer(b, tmp_path / "m.zip")
    assert_states_equal(states_of(a), states_of(b))
    info = ck.read(tmp_path / "m.zip")
    assert info.shapes["scalar"] == () and info.dtypes["u64"] == np.uint64 and info.shapes["empty"] == (0, 4)


def test_compressed_checkpoints_load_and_are_smaller(tmp_path):
    net = Net()
    net.a.W.data[...] = 0
    big = np.zeros((300, 300), np.float32)
    ck.save_layer(net, tmp_path / "s.zip", {"big": big})
    ck.save_layer(net, tmp_path / "d.zip", {"big": big}, compress=True)
    assert os.path.getsize(tmp_path / "d.zip") < os.path.getsize(tmp_path / "s.zip") / 10
    with zipfile.ZipFile(io.BytesIO(inner_npz(tmp_path / "d.zip"))) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    other = Net(seed=5)
    aux = ck.load_layer(other, tmp_path / "d.zip")
    assert_states_equal(states_of(net), states_of(other))
    np.testing.assert_array_equal(aux["big"], big)
    assert ck.read(tmp_path / "d.zip", verify=True).metadata["compression"] == "deflated"


def test_save_overwrites_atomically_and_follows_symlinks(tmp_path):
    p = tmp_path / "c.zip"
    p.write_bytes(b"old content")
    os.chmod(p, 0o640)
    ck.save_layer(Net(), p)
    assert ck.read(p).names and (os.stat(p).st_mode & 0o777) == 0o640
    link = tmp_path / "latest.zip"
    link.symlink_to(p)
    ck.save_layer(Net(seed=4), link)
    assert link.is_symlink()
    np.testing.assert_array_equal(ck.read_arrays(p)["a.W"], Net(seed=4).a.W.to_numpy())
    assert sorted(os.listdir(tmp_path)) == ["c.zip", "latest.zip"]
    with pytest.raises(IsADirectoryError):
        ck.save_layer(Net(), tmp_path)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_replaced_file_is_released_in_the_background_and_nothing_is_left(tmp_path):
    """Overwriting keeps the old file open across the rename (so the rename does not
    free its blocks) and closes it on a worker thread: no descriptor leaks, no file."""
    import singa.checkpoint.fileformat.atomic as atomic

    p = tmp_path / "c.zip"
    ck.save_layer(Net(seed=0), p)
    fds = len(os.listdir("/proc/self/fd"))
    for seed in range(1, 6):
        ck.save_layer(Net(seed=seed), p)
        assert os.listdir(tmp_path) == ["c.zip"]
        np.testing.assert_array_equal(ck.read_arrays(p)["a.W"], Net(seed=seed).a.W.to_numpy())
    atomic._finish_close()
    assert len(os.listdir("/proc/self/fd")) == fds


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_saves_in_a_forked_child_do_not_hang_or_leak(tmp_path):
    """The background closer is per process: a forked child starts its own."""
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        signal.alarm(300)  # a hang guard, not a speed check
        from singa import checkpoint as ck
        from test_checkpoint_helpers import Net
        from concurrent.futures import Future
        import singa.checkpoint.fileformat.atomic as atomic
        ck.save_layer(Net(seed=0), {str(tmp_path / "child.zip")!r})
        ck.save_layer(Net(seed=1), {str(tmp_path / "child.zip")!r})
        atomic._closing = Future()  # a close still pending when the process forks
        pid = os.fork()
        if pid == 0:
            for seed in range(5):
                ck.save_layer(Net(seed=seed), {str(tmp_path / "child.zip")!r})
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], timeout=600)
    assert r.returncode == 0
    np.testing.assert_array_equal(ck.read_arrays(tmp_path / "child.zip")["a.W"], Net(seed=4).a.W.to_numpy())


def test_save_from_an_atexit_handler(tmp_path):
    """At interpreter shutdown the worker threads take no work: the save runs inline."""
    p = tmp_path / "c.zip"
    code = textwrap.dedent(
        f"""
        import atexit, sys
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from singa import checkpoint as ck
        from singa.tensor import Tensor
        from test_checkpoint_helpers import Net
        net = Net(seed=3)
        net.big = Tensor((512, 1024), data=np.ones((512, 1024), np.float32))  # hashed on a worker
        ck.save_layer(net, {str(p)!r})
        atexit.register(lambda: ck.save_layer(net, {str(p)!r}, {{"v": "at-exit"}}))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Error" not in r.stderr, r.stderr
    assert ck.read(p).aux_values == {"v": "at-exit"}
    assert sorted(os.listdir(tmp_path)) == ["c.zip"]


def test_save_errors_name_the_checkpoint(tmp_path, monkeypatch):
    import singa.checkpoint.fileformat.npz_writing as cio

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    p = tmp_path / "c.zip"
    ck.save_layer(Net(seed=1), p)
    before = p.read_bytes()
    monkeypatch.setattr(cio, "write_npy", no_space)
    with pytest.raises(OSError, match=r"cannot save a checkpoint to .*c\.zip.*No space left") as e:
        ck.save_layer(Net(seed=2), p)
    assert e.value.errno == 28
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["c.zip"]


def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "c.zip"
    ck.save_layer(Net(seed=1), p)
    before = p.read_bytes()
    import singa.checkpoint.fileformat.npz_writing as cio

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(cio, "write_npy", boom)
    with pytest.raises(OSError, match="disk full"):
        ck.save_layer(Net(seed=2), p)
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["c.zip"]


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    from singa.checkpoint.fileformat.atomic import _tmp_prefix, host_tag

    p = tmp_path / "c.zip"
    dead = tmp_path / f"{_tmp_prefix('c.zip')}{host_tag()}.999999999.abc"
    dead.write_bytes(b"partial")
    alive = tmp_path / f"{_tmp_prefix('c.zip')}{host_tag()}.1.abc"  # pid 1 exists
    alive.write_bytes(b"partial")
    other = tmp_path / ".other.zip.singa-tmp.x.999999999.abc"
    other.write_bytes(b"")
    ck.save_layer(Net(), p)
    assert sorted(os.listdir(tmp_path)) == sorted(["c.zip", alive.name, other.name])


def test_optimizer_states_round_trip(tmp_path):
    for make in (
        lambda: opt.SGD(0.1, momentum=0.9, nesterov=True),
        lambda: opt.Adam(opt.ExponentialDecay(0.01, 10, 0.5, warmup_steps=2), amsgrad=True),
        lambda: opt.RMSProp(0.01, momentum=0.5),
    ):
        net, o = Net(), make()
        fake_grads(net, o, steps=3)
        ck.save_optimizer(o, tmp_path / "o.zip", net.get_params(), {"note": "x"})
        o2 = make()
        aux = ck.load_optimizer(o2, tmp_path / "o.zip", net.get_params())
        assert aux == {"note": "x"}
        s1, s2 = o.get_states(net.get_params()), o2.get_states(net.get_params())
        assert s1.keys() == s2.keys() and s1["slots"].keys() == s2["slots"].keys() and s1["slots"]
        for k in s1:
            if k != "slots":
                assert s1[k] == s2[k]
        for k in s1["slots"]:
            np.testing.assert_array_equal(s1["slots"][k], s2["slots"][k])
        # both continue identically (slots are keyed by parameter names, so a copy of the
        # parameters in another Net continues the same way)
        n2 = Net()
        n2.set_states(states_of(net))
        o3 = make()
        ck.load_optimizer(o3, tmp_path / "o.zip", n2.get_params())
        fake_grads(net, o, steps=2, seed=9)
        fake_grads(n2, o3, steps=2, seed=9)
        assert_states_equal(states_of(net), states_of(n2))
        assert o.steps == o3.steps == 5


def test_model_save_includes_optimizer_and_random_state(tmp_path):
    net = Net()
    net.optimizer = opt.SGD(0.05, momentum=0.9)
    fake_grads(net, net.optimizer)
    dev = device.get_default_device()
    dev.set_rand_seed(123)
    dev.rng.random(5)
    ck.save_model(net, tmp_path / "m.zip", {"epoch": 2})
    expected = dev.rng.random(4)
    info = ck.read(tmp_path / "m.zip")
    assert info.optimizer["class"] == "SGD" and info.optimizer["states"]["step"] == 2
    assert sorted(k for k, a in info.arrays.items() if a.kind == "optimizer") == [
        "optimizer/a.W/momentum",
        "optimizer/a.b/momentum",
        "optimizer/blocks.0.W/momentum",
        "optimizer/blocks.0.b/momentum",
        "optimizer/heads.h.W/momentum",
        "optimizer/heads.h.b/momentum",
    ]
    dev.set_rand_seed(0)
    other = Net(seed=3)
    other.optimizer = opt.SGD(0.05, momentum=0.9)
    assert ck.load_model(other, tmp_path / "m.zip") == {"epoch": 2}
    np.testing.assert_array_equal(dev.rng.random(4), expected)
    assert other.optimizer.steps == 2
    np.testing.assert_array_equal(
        other.optimizer.get_states(other.get_params())["slots"]["a.W/momentum"],
        net.optimizer.get_states(net.get_params())["slots"]["a.W/momentum"],
    )


def test_read_describes_a_checkpoint_without_a_model(tmp_path):
    net = Net()
    net.optimizer = opt.Adam(0.01)
    fake_grads(net, net.optimizer, steps=1)
    ck.save_model(net, tmp_path / "m.zip", {"epoch": 1, "ema": np.ones(3)})
    info = ck.read(tmp_path / "m.zip")
    assert info.names == list(net.get_states())
    assert info.shapes["heads.h.W"] == (5, 2) and info.dtypes["a.running"] == np.float32
    assert info.aux_values == {"epoch": 1} and info.arrays["ema"].kind == "aux"
    assert info.optimizer["class"] == "Adam" and info.rng["device"] == "cpu"
    assert info.metadata["singa_version"] == singa.__version__ and info.format_version == 1
    assert info.nbytes == sum(a.nbytes for a in info.arrays.values()) > 0
    assert all(len(a.sha256) == 64 for a in info.arrays.values())
    arrays = ck.read_arrays(tmp_path / "m.zip")
    np.testing.assert_array_equal(
        arrays["optimizer/a.W/m"], net.optimizer.get_states(net.get_params())["slots"]["a.W/m"]
    )


def _apache_singa_checkpoint(path, states, aux):
    """What Apache SINGA's Model.save_states writes: a deflated zip with np.savez's
    tensor_dict.npz and states_attr.json (dtype as SINGA's DataType enum)."""
    buf = io.BytesIO()
    np.savez(buf, **states, **aux)
    attrs = {k: {"state_type": 0, "shape": list(v.shape), "dtype": 0} for k, v in states.items()}
    attrs.update({k: {"state_type": 1, "shape": list(v.shape), "dtype": 0} for k, v in aux.items()})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tensor_dict.npz", buf.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("states_attr.json", json.dumps(attrs), compress_type=zipfile.ZIP_DEFLATED)


def test_apache_singa_checkpoints_load(tmp_path):
    src = Net(seed=8)
    p = tmp_path / "apache.zip"
    _apache_singa_checkpoint(p, states_of(src), {"step": np.array([5.0], np.float32)})
    dst = Net()
    aux = ck.load_layer(dst, p)
    assert_states_equal(states_of(src), states_of(dst))
    assert isinstance(aux["step"], Tensor) and aux["step"].to_numpy().tolist() == [5.0]
    info = ck.read(p, verify=True)
    assert info.format_version == 0 and info.arrays["a.W"].sha256 is None
    # and a corrupt byte inside such a file (no SHA-256) is caught by the zip CRC
    raw = bytearray(p.read_bytes())
    raw[60] ^= 0xFF
    (tmp_path / "bad.zip").write_bytes(bytes(raw))
    with pytest.raises(ck.CheckpointError, match="bad.zip"):
        ck.load_layer(Net(), tmp_path / "bad.zip")


def test_our_checkpoints_load_with_apache_singas_reader(tmp_path):
    """Apache SINGA's load_states: extract, json.load states_attr, np.load the npz,
    keep state_type 0 as model states and 1 as aux states (others ignored)."""
    net = Net()
    net.optimizer = opt.SGD(0.1, momentum=0.9)
    fake_grads(net, net.optimizer)
    ck.save_model(net, tmp_path / "m.zip", {"t": Tensor(data=np.ones(2, np.float32)), "epoch": 4})
    with zipfile.ZipFile(tmp_path / "m.zip") as z:
        z.extractall(tmp_path / "x")
    attrs = json.loads((tmp_path / "x" / "states_attr.json").read_text())
    npz = np.load(tmp_path / "x" / "tensor_dict.npz")
    model_states = {k: npz[k] for k in npz.files if attrs[k]["state_type"] == 0}
    aux_states = {k: npz[k] for k in npz.files if attrs[k]["state_type"] == 1}
    assert_states_equal(model_states, states_of(net))
    assert list(aux_states) == ["t"]


def test_large_member_count_and_long_names(tmp_path):
    class Wide(Leaf):
        def __init__(self):
            super().__init__(1)
            self.many = {
                f"k{i}": Tensor(data=np.full(1, i, np.float32), requires_grad=False) for i in range(300)
            }
            self.long = {"x" * 300: Tensor(data=np.ones(2, np.float32), requires_grad=False)}

    a = Wide()
    ck.save_layer(a, tmp_path / "w.zip")
    b = Wide()
    for t in b.get_states().values():
        t.data[...] = 0
    ck.load_layer(b, tmp_path / "w.zip")
    assert_states_equal(states_of(a), states_of(b))


def test_a_file_saved_on_a_gpu_loads_on_the_cpu(tmp_path):
    """A GPU device stores its generator as a seed (cupy exposes no state); the CPU reseeds."""
    from test_checkpoint_validation import members, rebuild

    net = Net()
    ck.save_model(net, tmp_path / "c.zip")
    parts = members(tmp_path / "c.zip")
    extra = json.loads(parts["extra_states.json"])
    extra["rng"], extra["device"] = {"device": "gpu", "seed": 5}, "cuda:0"
    parts["extra_states.json"] = json.dumps(extra).encode()
    rebuild(tmp_path / "g.zip", parts)
    dst = Net(seed=3)
    ck.load_model(dst, tmp_path / "g.zip")
    assert_states_equal(states_of(net), states_of(dst))
    np.testing.assert_array_equal(
        device.get_default_device().rng.random(3), np.random.default_rng(5).random(3)
    )


@pytest.mark.slow
def test_zip64_many_members(tmp_path):
    """More than 65535 arrays need the ZIP64 end records."""

    class Many(Leaf):
        def __init__(self):
            super().__init__(1)
            self.many = [
                Tensor(data=np.full(1, i, np.int32), dtype=np.int32, requires_grad=False)
                for i in range(70000)
            ]

    a = Many()
    ck.save_layer(a, tmp_path / "z.zip")
    with zipfile.ZipFile(io.BytesIO(inner_npz(tmp_path / "z.zip"))) as z:
        assert len(z.infolist()) == len(a.get_states())
    np.testing.assert_array_equal(ck.read_arrays(tmp_path / "z.zip")["many.69999"], [69999])


@pytest.mark.slow
@pytest.mark.skipif(
    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") < 14e9, reason="needs ~10 GB of free memory"
)
def test_zip64_member_over_4_gib(tmp_path):
    """An array over 4 GiB needs ZIP64 sizes in the member headers (np.zeros costs no
    memory until written; the file and the loaded copy do)."""
    if os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize < 12e9:
        pytest.skip("needs 12 GB of free disk")
    n = (1 << 32) + 1000
    big = Leaf(1)
    big.huge = Tensor((1,), dtype=np.uint8, requires_grad=False)
    big.huge.data = np.zeros(n, np.uint8)
    big.huge.data[-1] = 7
    p = tmp_path / "huge.zip"
    ck.save_layer(big, p)
    info = ck.read(p)
    assert info.shapes["huge"] == (n,) and os.path.getsize(p) > n
    with zipfile.ZipFile(p) as z:
        assert z.getinfo("tensor_dict.npz").file_size > n
    arrays = ck.read_arrays(p)
    assert arrays["huge"].shape == (n,) and arrays["huge"][-1] == 7 and arrays["huge"][-2] == 0
