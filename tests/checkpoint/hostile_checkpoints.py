"""A corpus of hostile checkpoint files (this module holds no tests): used by
``test_checkpoint_hostile.py`` and by ``bench/bench_hostile.py``, which times how
fast and in how little memory each one is refused.

Every builder takes a folder and a good checkpoint (bytes) of the model the file
is loaded into, writes one file and returns its path.
"""

import hashlib
import io
import json
import os
import struct
import zipfile

import numpy as np


def members(raw):
    """The members of a zip (bytes) by name."""
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def zip_bytes(parts, method=zipfile.ZIP_STORED):
    """A zip of ``parts`` (name -> bytes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return buf.getvalue()


def _zeros_npy_deflated(z, name, nbytes, chunk=1 << 24):
    """Add ``name``: a deflated .npy of ``nbytes`` zero bytes, streamed (never held)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": (nbytes,)})
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    zeros = bytes(chunk)
    with z.open(info, "w", force_zip64=True) as w:
        w.write(buf.getvalue())
        for i in range(0, nbytes, chunk):
            w.write(zeros[: min(chunk, nbytes - i)])


def _with_digests(parts):
    """Recompute metadata.json's digests so that only the hostile part is wrong."""
    meta = json.loads(parts["metadata.json"])
    inner = members(parts["tensor_dict.npz"])
    meta["arrays"] = {n[:-4]: hashlib.sha256(b).hexdigest() for n, b in inner.items()}
    for m in ("states_attr.json", "extra_states.json"):
        meta["members"][m] = hashlib.sha256(parts[m]).hexdigest()
    parts["metadata.json"] = json.dumps(meta).encode()
    return parts


def nested_zip_bomb(folder, good, inflated=1 << 30):
    """An Apache SINGA-style file (no metadata.json) whose deflated tensor_dict.npz
    holds a deflated .npy of ``inflated`` zero bytes: a zip inside a zip, ~1000x
    per level."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        _zeros_npy_deflated(z, "a.W.npy", inflated)
    attrs = {"a.W": {"state_type": 0, "shape": [inflated], "dtype": "uint8"}}
    parts = {"tensor_dict.npz": inner.getvalue(), "states_attr.json": json.dumps(attrs).encode()}
    path = os.path.join(folder, "nested_bomb.zip")
    with open(path, "wb") as f:
        f.write(zip_bytes(parts, zipfile.ZIP_DEFLATED))
    return path


def flat_zip_bomb(folder, good, inflated=1 << 30):
    """A version-1 file whose (stored) tensor_dict.npz holds a deflated .npy of
    ``inflated`` zero bytes under a real state's name."""
    parts = members(good)
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        _zeros_npy_deflated(z, "a.W.npy", inflated)
        for name, data in members(parts["tensor_dict.npz"]).items():
            if name != "a.W.npy":
                z.writestr(name, data)
    parts["tensor_dict.npz"] = inner.getvalue()
    attrs = json.loads(parts["states_attr.json"])
    attrs["a.W"].update(shape=[inflated], dtype="uint8")
    parts["states_attr.json"] = json.dumps(attrs).encode()
    path = os.path.join(folder, "flat_bomb.zip")
    with open(path, "wb") as f:
        f.write(zip_bytes(_with_digests(parts)))
    return path


def dev_zero(folder, good):
    """``/dev/zero``: endless zeros."""
    return "/dev/zero"


def fifo(folder, good):
    """A FIFO nobody writes to (opening it for reading would block)."""
    path = os.path.join(folder, "fifo.zip")
    if not os.path.exists(path):
        os.mkfifo(path)
    return path


def many_members(folder, good, count=100_000):
    """A zip of ``count`` tiny members."""
    path = os.path.join(folder, "many_members.zip")
    with zipfile.ZipFile(path, "w") as z:
        for i in range(count):
            z.writestr(f"m{i:06d}.npy", b"")
    return path


def many_arrays(folder, good, count=100_000):
    """A version-1 file whose tensor_dict.npz and states_attr.json list ``count`` arrays."""
    parts = members(good)
    header = io.BytesIO()
    np.save(header, np.zeros(0, np.float32))
    inner = io.BytesIO()
    attrs = {}
    with zipfile.ZipFile(inner, "w") as z:
        for i in range(count):
            z.writestr(f"x{i}.npy", header.getvalue())
            attrs[f"x{i}"] = {"state_type": 0, "shape": [0], "dtype": "float32"}
    parts["tensor_dict.npz"] = inner.getvalue()
    parts["states_attr.json"] = json.dumps(attrs).encode()
    path = os.path.join(folder, "many_arrays.zip")
    with open(path, "wb") as f:
        f.write(zip_bytes(_with_digests(parts)))
    return path


def _end_record_at(raw):
    at = raw.rfind(b"PK\x05\x06")
    assert at >= 0
    return at


def lying_member_count(folder, good):
    """The end record declares 2 members; the central directory holds 4."""
    raw = bytearray(good)
    at = _end_record_at(raw)
    struct.pack_into("<HH", raw, at + 8, 2, 2)
    path = os.path.join(folder, "lying_count.zip")
    with open(path, "wb") as f:
        f.write(raw)
    return path


def lying_directory_size(folder, good):
    """The end record declares a 4 GB central directory."""
    raw = bytearray(good)
    at = _end_record_at(raw)
    struct.pack_into("<L", raw, at + 12, 0xFFFFFFF0)
    path = os.path.join(folder, "lying_directory.zip")
    with open(path, "wb") as f:
        f.write(raw)
    return path


def lying_member_size(folder, good):
    """The central directory declares 4 GB for extra_states.json (deflated)."""
    raw = bytearray(zip_bytes(members(good), zipfile.ZIP_DEFLATED))
    i = raw.find(b"PK\x01\x02")
    while i >= 0:
        (name_len,) = struct.unpack("<H", raw[i + 28 : i + 30])
        if bytes(raw[i + 46 : i + 46 + name_len]) == b"extra_states.json":
            struct.pack_into("<L", raw, i + 24, 0xFFFFFFF0)
            break
        i = raw.find(b"PK\x01\x02", i + 4)
    path = os.path.join(folder, "lying_size.zip")
    with open(path, "wb") as f:
        f.write(raw)
    return path


def huge_shape(folder, good):
    """states_attr.json and the .npy header of a.W declare 2**40 elements."""
    parts = members(good)
    inner = members(parts["tensor_dict.npz"])
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    inner["a.W.npy"] = head.getvalue() + b"\0" * 64
    parts["tensor_dict.npz"] = zip_bytes(inner)
    attrs = json.loads(parts["states_attr.json"])
    attrs["a.W"]["shape"] = [1 << 40]
    parts["states_attr.json"] = json.dumps(attrs).encode()
    path = os.path.join(folder, "huge_shape.zip")
    with open(path, "wb") as f:
        f.write(zip_bytes(_with_digests(parts)))
    return path


def truncated(folder, good):
    """The file cut 100 bytes before its end."""
    path = os.path.join(folder, "truncated.zip")
    with open(path, "wb") as f:
        f.write(good[:-100])
    return path


#: every builder, by name
CORPUS = {
    f.__name__: f
    for f in (
        nested_zip_bomb,
        flat_zip_bomb,
        dev_zero,
        fifo,
        many_members,
        many_arrays,
        lying_member_count,
        lying_directory_size,
        lying_member_size,
        huge_shape,
        truncated,
    )
}
