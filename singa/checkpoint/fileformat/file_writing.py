"""Writing a whole checkpoint: the arrays and the JSON members into one zip,
replaced atomically."""

from __future__ import annotations

import datetime
import time
import zipfile
from typing import Any

from singa.checkpoint.fileformat.atomic import atomic_write
from singa.checkpoint.fileformat.hashing import sha256_hex
from singa.checkpoint.fileformat.layout import EXTRA_STATES, METADATA, STATES_ATTR, TENSOR_DICT, ArrayEntry
from singa.checkpoint.fileformat.manifest import extra_states_json, metadata_json, states_attr_json
from singa.checkpoint.fileformat.npz_writing import write_npz, zipinfo


def write_checkpoint(
    fpath: Any,
    entries: list[ArrayEntry],
    *,
    aux_values: dict,
    optimizer: dict | None,
    rng: dict | None,
    device: str | None,
    compress: bool = False,
) -> str:
    """Write a checkpoint atomically (see :func:`atomic_write`); returns the path."""
    created = datetime.datetime.now(datetime.timezone.utc)
    attrs_b = states_attr_json(entries)
    extra_b = extra_states_json(aux_values, optimizer, rng, device)
    when = time.localtime(created.timestamp())[:6]

    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w") as zf:
            shas = write_npz(f, zf, TENSOR_DICT, when, [(e.key, e.array) for e in entries], compress)
            zf.writestr(zipinfo(STATES_ATTR, when, compress), attrs_b)
            zf.writestr(zipinfo(EXTRA_STATES, when, compress), extra_b)
            members = {STATES_ATTR: sha256_hex(attrs_b), EXTRA_STATES: sha256_hex(extra_b)}
            meta = metadata_json(created.isoformat(timespec="seconds"), compress, device, shas, members)
            zf.writestr(zipinfo(METADATA, when, False), meta)

    return atomic_write(fpath, write)
