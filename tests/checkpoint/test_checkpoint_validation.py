"""Checkpoint loading validates everything before changing anything; hostile files."""

import hashlib
import io
import json
import struct
import zipfile

import numpy as np
import pytest
from test_checkpoint_helpers import Leaf, Net, assert_states_equal, fake_grads, states_of

from singa import checkpoint as ck
from singa import device, opt
from singa.checkpoint.fileformat.file_reading import read_checkpoint
from singa.tensor import Tensor

CheckpointError = ck.CheckpointError


def members(path):
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def npz_members(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def zip_bytes(parts, method=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return buf.getvalue()


def rebuild(path, parts, npz=None, fix=True):
    """Write a checkpoint from (modified) members; ``fix`` recomputes the digests."""
    parts = dict(parts)
    if npz is not None:
        parts["tensor_dict.npz"] = zip_bytes(npz)
    if fix and "metadata.json" in parts and "tensor_dict.npz" in parts:
        meta = json.loads(parts["metadata.json"])
        inner = npz_members(parts["tensor_dict.npz"])
        meta["arrays"] = {n[:-4]: hashlib.sha256(b).hexdigest() for n, b in inner.items()}
        for m in ("states_attr.json", "extra_states.json"):
            if m in parts:
                meta["members"][m] = hashlib.sha256(parts[m]).hexdigest()
        parts["metadata.json"] = json.dumps(meta).encode()
    with open(path, "wb") as f:
        f.write(zip_bytes(parts))
    return path


@pytest.fixture
def saved(tmp_path):
    net = Net()
    net.optimizer = opt.SGD(0.1, momentum=0.9)
    fake_grads(net, net.optimizer)
    p = tmp_path / "good.zip"
    ck.save_model(net, p, {"epoch": 1})
    return p


def snapshot(model):
    o = model.optimizer
    st = o.get_states(model.get_params()) if o is not None else None
    return states_of(model), st, device.get_default_device().get_rng_state()


def assert_unchanged(model, snap):
    s, o, r = snapshot(model)
    assert_states_equal(snap[0], s)
    if snap[1] is not None:
        assert {k: v for k, v in snap[1].items() if k != "slots"} == {
            k: v for k, v in o.items() if k != "slots"
        }
        assert snap[1]["slots"].keys() == o["slots"].keys()
        for k in o["slots"]:
            np.testing.assert_array_equal(snap[1]["slots"][k], o["slots"][k])
    assert r == snap[2]


def fresh_model(cls=Net, **kw):
    m = cls(**kw)
    m.optimizer = opt.SGD(0.1, momentum=0.9)
    fake_grads(m, m.optimizer, steps=1, seed=11)
    device.get_default_device().set_rand_seed(99)
    return m


class Different(Net):
    """One state missing, one with another shape, one with another dtype, one extra."""

    def __init__(self):
        super().__init__()
        del self.heads
        self.a.W = Tensor(data=np.zeros((3, 3), np.float32), requires_grad=True, stores_grad=True)
        self.a.running = Tensor(data=np.zeros(2, np.float64), dtype=np.float64, requires_grad=False)
        self.extra = Leaf(1)


def test_mismatched_model_names_every_entry_and_changes_nothing(saved):
    m = fresh_model(Different)
    snap = snapshot(m)
    with pytest.raises(CheckpointError) as e:
        ck.load_model(m, saved)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "good.zip" in msg and "nothing was changed" in msg
    assert "missing: extra.W (expected (1, 3) float32)" in msg
    assert "unexpected: heads.h.W (found (5, 2) float32)" in msg
    assert "mismatched: a.W: expected (3, 3) float32, found (2, 3) float32" in msg
    assert "mismatched: a.running: expected (2,) float64, found (2,) float32" in msg
    assert_unchanged(m, snap)


def test_strict_false_loads_what_matches_and_reports_the_rest(saved):
    m = fresh_model(Different)
    w_before = m.a.W.to_numpy()
    with pytest.warns(ck.CheckpointWarning, match="unexpected: heads.h.W"):
        aux = ck.load_model(m, saved, strict=False)
    assert aux == {"epoch": 1}
    r = aux.report
    assert r.missing == [
        "extra.W (expected (1, 3) float32)",
        "extra.b (expected (3,) float32)",
        "extra.running (expected (1,) float32)",
    ]
    assert len(r.unexpected) == 3 and len(r.mismatched) == 2
    assert "optimizer state of a.W" in r.skipped and "optimizer state of extra.W" in r.skipped
    src = read_checkpoint(saved).values
    np.testing.assert_array_equal(m.blocks[0].W.to_numpy(), src["blocks.0.W"])
    np.testing.assert_array_equal(m.a.W.to_numpy(), w_before)  # mismatched: left as it was
    st = m.optimizer.get_states(m.get_params())
    np.testing.assert_array_equal(st["slots"]["blocks.0.W/momentum"], src["optimizer/blocks.0.W/momentum"])
    assert st["step"] == 2


def test_optimizer_of_another_class_is_an_error(saved):
    m = fresh_model()
    m.optimizer = opt.Adam(0.1)
    snap = snapshot(m)
    with pytest.raises(CheckpointError, match="the file holds SGD states, the optimizer is Adam"):
        ck.load_model(m, saved)
    assert_unchanged(m, snap)
    with pytest.warns(ck.CheckpointWarning, match="SGD"):
        aux = ck.load_model(m, saved, strict=False)
    assert any("SGD" in s for s in aux.report.skipped)
    assert_states_equal(
        states_of(m), {k: v for k, v in read_checkpoint(saved).values.items() if "/" not in k}
    )


def test_optimizer_states_that_do_not_fit_change_nothing(tmp_path, saved):
    parts = members(saved)
    inner = npz_members(parts["tensor_dict.npz"])
    buf = io.BytesIO()
    np.save(buf, np.zeros((7, 7), np.float32))
    inner["optimizer/a.W/momentum.npy"] = buf.getvalue()
    attrs = json.loads(parts["states_attr.json"])
    attrs["optimizer/a.W/momentum"]["shape"] = [7, 7]
    parts["states_attr.json"] = json.dumps(attrs).encode()
    p = rebuild(tmp_path / "badslot.zip", parts, inner)
    m = fresh_model()
    snap = snapshot(m)
    with pytest.raises(CheckpointError, match=r"badslot.zip.*slot a.W/momentum: expected \(2, 3\)"):
        ck.load_model(m, p)
    assert_unchanged(m, snap)


def test_bad_random_state_changes_nothing(tmp_path, saved):
    parts = members(saved)
    extra = json.loads(parts["extra_states.json"])
    extra["rng"]["state"]["bit_generator"] = "MT19937"
    parts["extra_states.json"] = json.dumps(extra).encode()
    p = rebuild(tmp_path / "rng.zip", parts)
    m = fresh_model()
    snap = snapshot(m)
    with pytest.raises(CheckpointError, match="random state: the file holds a 'MT19937' generator state"):
        ck.load_model(m, p)
    assert_unchanged(m, snap)


def test_model_without_optimizer_loads_and_reports_it(saved):
    m = Net(seed=5)
    aux = ck.load_model(m, saved)
    assert aux.report.skipped == ["optimizer states (the model has no optimizer: call set_optimizer first)"]


# ----- broken and hostile files ------------------------------------------------------------------
def expect_error(model, path, pattern):
    snap = snapshot(model)
    with pytest.raises(CheckpointError, match=pattern) as e:
        ck.load_model(model, path)
    assert str(path.name) in str(e.value)
    assert_unchanged(model, snap)
    with pytest.raises(CheckpointError):
        ck.read(path, verify=True)
    return str(e.value)


def test_not_a_zip_and_empty_file(tmp_path):
    (tmp_path / "text.zip").write_text("hello, not a zip")
    expect_error(fresh_model(), tmp_path / "text.zip", "not a valid zip")
    (tmp_path / "empty.zip").write_bytes(b"")
    expect_error(fresh_model(), tmp_path / "empty.zip", "not a valid zip")
    with pytest.raises(FileNotFoundError):
        ck.load_model(fresh_model(), tmp_path / "nope.zip")


@pytest.mark.parametrize("frac", [0.05, 0.3, 0.5, 0.9, 0.999])
def test_truncated_file(tmp_path, saved, frac):
    raw = saved.read_bytes()
    p = tmp_path / "cut.zip"
    p.write_bytes(raw[: int(len(raw) * frac)])
    expect_error(fresh_model(), p, "cut.zip")


def test_missing_and_unexpected_members(tmp_path, saved):
    parts = members(saved)
    del parts["extra_states.json"]
    expect_error(fresh_model(), rebuild(tmp_path / "m1.zip", parts), "missing member 'extra_states.json'")
    parts = members(saved)
    parts["notes.txt"] = b"hi"
    expect_error(fresh_model(), rebuild(tmp_path / "m2.zip", parts), "unexpected member 'notes.txt'")
    parts = members(saved)
    expect_error(
        fresh_model(),
        rebuild(tmp_path / "m3.zip", {"metadata.json": parts["metadata.json"]}),
        "missing member",
    )


def test_checksum_mismatch_names_the_array(tmp_path, saved):
    raw = bytearray(saved.read_bytes())
    w = read_checkpoint(saved).values["blocks.0.W"].tobytes()
    i = raw.find(w)
    assert i > 0
    raw[i + 5] ^= 0x01
    p = tmp_path / "flip.zip"
    p.write_bytes(bytes(raw))
    msg = expect_error(fresh_model(), p, "checksum mismatch for array 'blocks.0.W'")
    assert "a.W" not in msg
    with pytest.raises(CheckpointError):
        ck.read_arrays(p)


def test_read_without_verify_does_not_read_array_data(tmp_path):
    big = np.arange(100_000, dtype=np.float32)
    ck.save_layer(Net(), tmp_path / "c.zip", {"big": big})
    raw = bytearray((tmp_path / "c.zip").read_bytes())
    raw[raw.find(big.tobytes()) + 200_000] ^= 0x01
    p = tmp_path / "flip.zip"
    p.write_bytes(bytes(raw))
    assert ck.read(p).arrays["big"].shape == (100_000,)  # the structure alone is fine
    with pytest.raises(CheckpointError, match="checksum mismatch for array 'big'"):
        ck.read(p, verify=True)


def test_json_member_corruption_is_detected(tmp_path, saved):
    parts = members(saved)
    attrs = json.loads(parts["states_attr.json"])
    attrs["a.W"]["shape"] = [3, 2]
    parts["states_attr.json"] = json.dumps(attrs).encode()
    expect_error(
        fresh_model(), rebuild(tmp_path / "j1.zip", parts, fix=False), "checksum mismatch in states_attr"
    )
    expect_error(fresh_model(), rebuild(tmp_path / "j2.zip", parts), r"'a.W'.*\[3, 2\]|\(3, 2\)")
    parts = members(saved)
    parts["extra_states.json"] = b"{not json"
    expect_error(fresh_model(), rebuild(tmp_path / "j3.zip", parts), "not valid JSON")


def test_future_format_version(tmp_path, saved):
    parts = members(saved)
    meta = json.loads(parts["metadata.json"])
    meta["format_version"] = 2
    meta["something_new"] = True
    parts["metadata.json"] = json.dumps(meta).encode()
    expect_error(
        fresh_model(), rebuild(tmp_path / "v2.zip", parts), "format version 2, written by a newer singa"
    )


def test_path_traversal_names_are_rejected(tmp_path, saved):
    parts = members(saved)
    inner = npz_members(parts["tensor_dict.npz"])
    for bad in ("../evil.npy", "/etc/evil.npy", "a/../../evil.npy", "C:evil.npy", "a\\..\\evil.npy"):
        inner2 = dict(inner)
        inner2[bad] = inner2.pop("a.W.npy")
        expect_error(fresh_model(), rebuild(tmp_path / "trav.zip", parts, inner2), "rejected member name")
    parts2 = dict(parts)
    parts2["../../x.json"] = b"{}"
    expect_error(fresh_model(), rebuild(tmp_path / "trav2.zip", parts2), "rejected member name")


def test_object_arrays_are_rejected_without_unpickling(tmp_path, saved):
    parts = members(saved)
    inner = npz_members(parts["tensor_dict.npz"])
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}, None], dtype=object), allow_pickle=True)
    inner["a.W.npy"] = buf.getvalue()
    expect_error(fresh_model(), rebuild(tmp_path / "obj.zip", parts, inner), "object arrays are not allowed")
    buf = io.BytesIO()
    np.save(buf, np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    inner["a.W.npy"] = buf.getvalue()
    expect_error(fresh_model(), rebuild(tmp_path / "rec.zip", parts, inner), "structured or object dtype")


def _patch_central_size(data, name, new_size):
    """Set the uncompressed size of ``name`` in the central directory of a zip."""
    raw = bytearray(data)
    i = raw.find(b"PK\x01\x02" + b"".join([]))
    while i >= 0:
        n = struct.unpack("<H", raw[i + 28 : i + 30])[0]
        if raw[i + 46 : i + 46 + n] == name.encode():
            raw[i + 24 : i + 28] = struct.pack("<L", new_size)
            return bytes(raw)
        i = raw.find(b"PK\x01\x02", i + 4)
    raise AssertionError(name)


def test_zip_bomb_declared_sizes_are_rejected(tmp_path, saved):
    parts = members(saved)
    # a deflated JSON member declaring 4 GB from a few bytes
    z = zip_bytes({k: v for k, v in parts.items()}, zipfile.ZIP_DEFLATED)
    p = tmp_path / "bomb.zip"
    p.write_bytes(_patch_central_size(z, "extra_states.json", 0xFFFFFFF0))
    expect_error(fresh_model(), p, "zip bomb")
    # an array member whose declared size exceeds the limit
    inner = npz_members(parts["tensor_dict.npz"])
    big = zip_bytes(inner, zipfile.ZIP_DEFLATED)
    parts["tensor_dict.npz"] = _patch_central_size(big, "a.W.npy", 0xFFFFFFF0)
    p2 = tmp_path / "bomb2.zip"
    with open(p2, "wb") as f:
        f.write(zip_bytes(parts))
    expect_error(fresh_model(), p2, "zip bomb|declares|not a .npy|corrupt")
    # a real high-ratio member: allowed by deflate's limits, refused by the memory limit
    parts = members(saved)
    inner = npz_members(parts["tensor_dict.npz"])
    buf = io.BytesIO()
    np.save(buf, np.zeros(50_000_000, np.uint8))
    inner["a.W.npy"] = buf.getvalue()
    parts["tensor_dict.npz"] = zip_bytes(inner, zipfile.ZIP_DEFLATED)
    p3 = tmp_path / "bomb3.zip"
    with open(p3, "wb") as f:
        f.write(zip_bytes(parts))
    assert p3.stat().st_size < 200_000
    with pytest.raises(CheckpointError, match="more than the limit"):
        read_checkpoint(p3, max_bytes=10_000_000)


def test_overlapping_members_are_rejected(tmp_path, saved):
    """A member whose data covers the next member (the 'overlapping files' zip bomb)."""
    raw = bytearray(zip_bytes(members(saved)))
    cd = {}
    i = raw.find(b"PK\x01\x02")
    while i >= 0:
        n = struct.unpack("<H", raw[i + 28 : i + 30])[0]
        cd[bytes(raw[i + 46 : i + 46 + n]).decode()] = i
        i = raw.find(b"PK\x01\x02", i + 4)
    first, second = cd["tensor_dict.npz"], cd["states_attr.json"]
    size = struct.unpack("<L", raw[first + 20 : first + 24])[0] + 40
    raw[first + 20 : first + 28] = struct.pack("<LL", size, size)
    p = tmp_path / "overlap.zip"
    p.write_bytes(bytes(raw))
    assert second > first
    expect_error(fresh_model(), p, "overlap")


def test_encrypted_and_unsupported_members_are_rejected(tmp_path, saved):
    raw = bytearray(saved.read_bytes())
    i = raw.find(b"PK\x01\x02")
    raw[i + 8] |= 0x01  # encrypted flag in the central directory
    p = tmp_path / "enc.zip"
    p.write_bytes(bytes(raw))
    expect_error(fresh_model(), p, "encrypted")
    raw = bytearray(saved.read_bytes())
    raw[i + 10] = 12  # bzip2
    p.write_bytes(bytes(raw))
    expect_error(fresh_model(), p, "unsupported compression")


def test_big_endian_arrays_are_converted(tmp_path, saved):
    parts = members(saved)
    inner = npz_members(parts["tensor_dict.npz"])
    w = read_checkpoint(saved).values["a.W"]
    buf = io.BytesIO()
    np.save(buf, w.astype(">f4"))
    inner["a.W.npy"] = buf.getvalue()
    m = fresh_model()
    ck.load_model(m, rebuild(tmp_path / "be.zip", parts, inner))
    np.testing.assert_array_equal(m.a.W.to_numpy(), w)
    assert m.a.W.dtype == np.float32 and m.a.W.dtype.isnative


def test_a_zip_that_is_not_a_checkpoint(tmp_path):
    p = tmp_path / "other.zip"
    p.write_bytes(zip_bytes({"hello.txt": b"hi"}))
    expect_error(fresh_model(), p, "not a checkpoint.*missing member 'states_attr.json'")


def test_npy_version_2_headers_are_read(tmp_path, saved):
    parts = members(saved)
    inner = npz_members(parts["tensor_dict.npz"])
    w = read_checkpoint(saved).values["a.W"]
    buf = io.BytesIO()
    np.lib.format.write_array(buf, w, version=(2, 0))
    inner["a.W.npy"] = buf.getvalue()
    m = fresh_model()
    ck.load_model(m, rebuild(tmp_path / "v2npy.zip", parts, inner))
    np.testing.assert_array_equal(m.a.W.to_numpy(), w)
