"""Where a residual network's training step spends its time: cProfile of singa's
step (graph or eager) and torch.profiler of the PyTorch twin (eager or
``torch.compile``), for the per-kernel comparison in ``bench/README.md``.

    python bench/profile_resnet.py --model resnet20 --mode graph [--steps 5] [--rows 40]
    python bench/profile_resnet.py --model resnet20 --mode torch-compile

For native frames of ours, run the same command under ``py-spy record --native``.
Prints the step's median and minimum over ``--steps`` timed steps (after three
warm-up steps) with the load average, then the profile of ``--steps`` more steps (the
profilers slow the step; compare the parts, not the totals).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import bench_graph  # noqa: E402
from _harness import time_and_profile  # noqa: E402


def _step(a: argparse.Namespace):
    if a.mode.startswith("torch"):
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
        return bench_graph.torch_step(a.model, a.batch, a.mode == "torch-compile")[0]
    return bench_graph.singa_step(a.model, a.mode, a.batch)[0]


def main(argv: list[str] | None = None) -> None:
    """Time and profile one library's step."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet20", choices=sorted(bench_graph.MODELS))
    p.add_argument("--mode", choices=["graph", "eager", "torch", "torch-compile"], default="graph")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rows", type=int, default=40)
    a = p.parse_args(argv)
    step = _step(a)
    time_and_profile(a.mode, step, a.steps, a.rows, a.mode.startswith("torch"))


if __name__ == "__main__":
    main()
