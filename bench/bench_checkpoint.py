"""Benchmark: checkpoint save/load throughput against plain ``np.savez``/``np.load``.

Builds a model of about ``--mb`` MB (float32: a few large matrices plus many small
biases, like a real network), then times, interleaved over ``--reps`` repetitions:

- ``np.savez`` of the same arrays (no fsync), and ``np.savez`` + fsync;
- ``save_model`` (atomic: temp file, fsync, rename; SHA-256 of every array);
- ``np.load`` reading every array of the .npz;
- ``np.load`` + ``Layer.set_states`` (a plain load into the model);
- ``read_arrays`` (read + SHA-256 verification) and ``load_layer`` (read, verify,
  validate, copy into the parameters in place).

Reads come from the page cache (the file was just written), so they measure the
software path; saves include the fsync when stated. Prints medians, minima and MB/s.

Usage: ``python bench/bench_checkpoint.py [--mb 100] [--reps 7] [--dir /tmp]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from singa import checkpoint as ck
from singa.layer.base import Layer
from singa.tensor import Tensor


class Big(Layer):
    """Parameters totalling about ``mb`` MB of float32."""

    def __init__(self, mb: float):
        super().__init__()
        n_big = 8
        side = int((mb * 1e6 * 0.98 / 4 / n_big) ** 0.5)
        rng = np.random.default_rng(0)
        self.W = [
            Tensor((side, side), data=rng.standard_normal((side, side), np.float32), stores_grad=True)
            for _ in range(n_big)
        ]
        self.b = [
            Tensor((side,), data=rng.standard_normal(side, np.float32), stores_grad=True) for _ in range(200)
        ]


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    model = Big(args.mb)
    arrays = {k: t.data for k, t in model.get_states().items()}
    mb = sum(a.nbytes for a in arrays.values()) / 1e6
    folder = tempfile.mkdtemp(prefix="singa-bench-", dir=args.dir)
    npz, ckpt = os.path.join(folder, "plain.npz"), os.path.join(folder, "ckpt.zip")

    def np_save() -> None:
        np.savez(npz, **arrays)

    def np_save_fsync() -> None:
        np.savez(npz, **arrays)
        _fsync(npz)

    def np_load() -> None:
        with np.load(npz, allow_pickle=False) as z:
            for k in z.files:
                z[k]

    def np_load_set() -> None:
        with np.load(npz, allow_pickle=False) as z:
            model.set_states({k: z[k] for k in z.files})

    def ck_save() -> None:
        ck.save_layer(model, ckpt)

    def ck_read() -> None:
        ck.read_arrays(ckpt)

    def ck_load() -> None:
        ck.load_layer(model, ckpt)

    cases = [
        ("np.savez", np_save),
        ("np.savez + fsync", np_save_fsync),
        ("checkpoint save (atomic, fsync, sha256)", ck_save),
        ("np.load (all arrays)", np_load),
        ("checkpoint read_arrays (sha256 verified)", ck_read),
        ("np.load + Layer.set_states (copied in place)", np_load_set),
        ("checkpoint load_layer (verified, copied in place)", ck_load),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _, fn in cases:  # warm-up (and create the files)
        fn()
    for _ in range(args.reps):
        for name, fn in cases:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"model: {len(arrays)} arrays, {mb:.1f} MB; {args.reps} reps; folder {folder}")
    print(f"{'case':52s} {'median ms':>10s} {'min ms':>8s} {'MB/s (median)':>14s}")
    for name, _ in cases:
        med, best = statistics.median(times[name]), min(times[name])
        print(f"{name:52s} {med * 1e3:10.1f} {best * 1e3:8.1f} {mb / med:14.0f}")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"ratios (median): save / np.savez = {med[cases[2][0]] / med['np.savez']:.2f}, "
        f"save / (np.savez + fsync) = {med[cases[2][0]] / med['np.savez + fsync']:.2f}, "
        f"read_arrays / np.load = {med[cases[4][0]] / med[cases[3][0]]:.2f}, "
        f"load_layer / (np.load + set_states) = {med[cases[6][0]] / med[cases[5][0]]:.2f}"
    )
    for p in (npz, ckpt):
        os.unlink(p)
    os.rmdir(folder)


if __name__ == "__main__":
    main()
