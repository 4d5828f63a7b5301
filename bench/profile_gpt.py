"""Where the zoo ``gpt`` training step spends its time: cProfile of singa's step
(eager or graph) and torch.profiler of its PyTorch twin (bench/torch_gpt.py).

    OMP_NUM_THREADS=1 SINGA_NUM_THREADS=1 taskset -c 1 \\
        python bench/profile_gpt.py [--mode graph|eager|torch] [--steps 3] [--rows 30]

Prints the step's median and minimum over ``--steps`` timed steps (after three warm-up
steps) with the load average, then the profile of ``--steps`` more steps (the
profilers slow the step; compare the parts, not the totals).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import bench_gpt  # noqa: E402
from _harness import time_and_profile  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    """Time and profile one library's step."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["graph", "eager", "torch"], default="graph")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rows", type=int, default=30)
    a = p.parse_args(argv)
    if a.mode == "torch":
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        step = bench_gpt.torch_step(a.batch, a.context, a.vocab)
    else:
        step = bench_gpt.singa_step(a.batch, a.context, a.vocab, a.mode == "graph")
    time_and_profile(a.mode, step, a.steps, a.rows, a.mode == "torch")


if __name__ == "__main__":
    main()
