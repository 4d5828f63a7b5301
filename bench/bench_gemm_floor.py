"""The convolutions' matrix products alone, against a whole onnxruntime forward.

A convolution by columns (im2col) is one matrix product (N*OH*OW, C*kh*kw) @
(C*kh*kw, O) per layer. This script records those shapes from one evaluation call
of a zoo model, then times, in interleaved blocks with pauses (``_harness.run_blocks``):

- ``products``: every layer's product once, numpy's BLAS on its own threads (whole
  products, random float32 operands: no column copies, no padding, no bias);
- ``products-1t``: the same on one BLAS thread;
- ``prepare``: ``sonnx.prepare(file).run`` on the exported model (the whole call);
- ``ort``: onnxruntime on the same file (``--threads`` intra-op threads).

The table's ``ratio`` is the products' median over onnxruntime's. The products are
the arithmetic floor of singa's convolution path on numpy's BLAS: when they alone take
more than 1.5x onnxruntime's whole forward, no rearrangement of the copies around them
reaches that target. Quote the load (``uptime``) with the figures.

Usage::

    python bench/bench_gemm_floor.py                        # cnn, resnet20; batch 1 and 64
    python bench/bench_gemm_floor.py --models resnet20 --batches 64 --reps 6
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import run_blocks, uptime  # noqa: E402
from bench_infer import MODELS, build  # noqa: E402

from singa import tensor  # noqa: E402
from singa.autograd import conv  # noqa: E402
from singa.kernels import blas_threads  # noqa: E402


def product_shapes(name: str, batch: int) -> list[tuple[int, int, int]]:
    """(M, K, O) of every convolution's product in one evaluation call of ``name``."""
    _, make, shape = MODELS[name]
    x = tensor.Tensor(data=np.zeros((batch, *shape), np.float32))
    m = make()
    m.compile([x], is_train=False, use_graph=False)
    m.eval()
    shapes: list[tuple[int, int, int]] = []
    real = conv.Conv2d.forward

    def recording(op, xa, W, b=None, **kw):
        y = real(op, xa, W, b, **kw)
        n, o, oh, ow = y.shape
        shapes.append((n * oh * ow, W.shape[1] * W.shape[2] * W.shape[3], o))
        return y

    conv.Conv2d.forward = recording
    try:
        m(x)
    finally:
        conv.Conv2d.forward = real
    return shapes


def products_step(shapes: list[tuple[int, int, int]], threads: int | None):
    """A call running every product once (on ``threads`` BLAS threads; None: BLAS's own).
    The limit is set through ``blas_threads.limit`` (a few microseconds; threadpoolctl's
    ``threadpool_limits`` scans the loaded libraries on every entry, about 2 ms)."""
    rng = np.random.default_rng(0)
    ops = [
        (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, o)).astype(np.float32))
        for m, k, o in shapes
    ]
    outs = [np.empty((a.shape[0], b.shape[1]), np.float32) for a, b in ops]

    def run():
        for (a, b), out in zip(ops, outs):
            np.matmul(a, b, out=out)

    if threads is None:
        return run

    def limited():
        with blas_threads.limit(threads):
            run()

    return limited


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn,resnet20")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--reps", type=int, default=4, help="interleaved rounds of blocks")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--pause", type=float, default=0.3)
    args = ap.parse_args(argv)
    print(f"start: {uptime()}")
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                shapes = product_shapes(name, batch)
                calls = build(name, batch, workdir, args.threads)
                steps = {
                    "products": products_step(shapes, None),
                    "products-1t": products_step(shapes, 1),
                    "prepare": calls["prepare"],
                    "ort": calls["ort"],
                }
                t = run_blocks(steps, args.reps, 40 if batch == 1 else 6, warmup=2, pause=args.pause)
                macs = sum(m * k * o for m, k, o in shapes)
                rows.append((name, batch, len(shapes), macs, t))
    print(f"{args.reps} interleaved blocks per mode; median (min) ms per call\n")
    print("| model | batch | convs | GFLOP | products | products, 1 BLAS thread | prepare | ort | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, batch, n, macs, t in rows:
        cells = " | ".join(f"{t[k].median * 1e3:.3f} ({t[k].minimum * 1e3:.3f})" for k in t)
        ratio = t["products"].median / t["ort"].median
        print(f"| {MODELS[name][0]} | {batch} | {n} | {2 * macs / 1e9:.3f} | {cells} | {ratio:.2f}x |")
    print(f"\nend:   {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
