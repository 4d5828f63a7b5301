"""Depthwise convolution (``groups == channels``): the depthwise kernels of
:mod:`singa.kernels.conv_depthwise` (``depthwise``: the compiled kernels; ``passes``:
its elementwise passes, which serve cupy and float16) against the general grouped path
of :class:`~singa.autograd.conv.Conv2d` they replace, and PyTorch, in one process.

One step is forward + backward (dx and dW) of a 3x3 (or given) depthwise convolution
with "same" padding, float32. The three variants alternate in blocks (``_harness.run_blocks``);
each line gives the median and minimum wall time of a step and the median CPU time.
Run with one thread for per-kernel figures:

    OMP_NUM_THREADS=1 SINGA_NUM_THREADS=1 python bench/bench_depthwise.py
    python bench/bench_depthwise.py --shapes 8x32x112 4x728x19 --reps 6
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
from _harness import load_torch, ms, run_blocks, uptime  # noqa: E402

import singa.kernels.conv_depthwise as depthwise  # noqa: E402
from singa import autograd, tensor  # noqa: E402

#: (batch, channels, height=width) of Xception's and MobileNet's depthwise layers
DEFAULT_SHAPES = ("4x128x75", "4x256x38", "4x728x19", "8x32x112", "8x96x56")


def singa_step(x: np.ndarray, w: np.ndarray, k: int, grouped: bool, passes: bool = False):
    """A forward + backward step through ``autograd.conv2d``; ``grouped`` forces the
    general grouped path, ``passes`` the depthwise elementwise passes (the cupy and
    float16 kernels) instead of the compiled ones."""
    tx, tw = tensor.from_numpy(x), tensor.from_numpy(w)
    for t in (tx, tw):
        t.stores_grad = True
    applies, compiled = depthwise.applies, depthwise._compiled

    def step() -> None:
        if grouped:
            depthwise.applies = lambda *a: False
        if passes:
            depthwise._compiled = lambda *a: False
        try:
            y = autograd.conv2d(tx, tw, padding=k // 2, groups=x.shape[1])
            for _ in autograd.backward(autograd.sum(y)):
                pass
        finally:
            depthwise.applies, depthwise._compiled = applies, compiled

    return step


def torch_step(torch, x: np.ndarray, w: np.ndarray, k: int):
    """The same step in PyTorch."""
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)

    def step() -> None:
        torch.nn.functional.conv2d(tx, tw, padding=k // 2, groups=x.shape[1]).sum().backward()

    return step


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints one row per shape and variant."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="NxCxH (H = W)")
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--reps", type=int, default=5, help="rounds of blocks")
    p.add_argument("--block", type=int, default=3, help="timed steps per block")
    p.add_argument("--no-torch", action="store_true")
    a = p.parse_args(argv)
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count() or 1
    torch_version = load_torch(threads, a.no_torch)
    torch = None
    if torch_version:
        import torch
    print(
        f"# depthwise conv, kernel {a.kernel}, float32; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    print(f"# torch {torch_version}; {uptime()}")
    print(f"{'shape':>12} {'variant':>10} {'median ms':>10} {'min ms':>8} {'cpu ms':>8}")
    rng = np.random.default_rng(0)
    autograd.training = True
    for shape in a.shapes:
        n, c, h = (int(v) for v in shape.split("x"))
        x = rng.standard_normal((n, c, h, h), dtype=np.float32)
        w = rng.standard_normal((c, 1, a.kernel, a.kernel), dtype=np.float32)
        steps = {
            "depthwise": singa_step(x, w, a.kernel, grouped=False),
            "passes": singa_step(x, w, a.kernel, grouped=False, passes=True),
            "grouped": singa_step(x, w, a.kernel, grouped=True),
        }
        if torch is not None:
            steps["torch"] = torch_step(torch, x, w, a.kernel)
        timings = run_blocks(steps, a.reps, a.block)
        for key, t in timings.items():
            print(f"{shape:>12} {key:>10} {ms(t.median):>10} {ms(t.minimum):>8} {ms(t.cpu_median):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
