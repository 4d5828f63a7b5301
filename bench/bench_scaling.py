"""Scaling benchmark: training-step time against batch size, model size and thread
count, for singa (graph mode), PyTorch eager and, with ``--torch-compile``, torch.compile.

Thread counts must be fixed before numpy or torch is imported, so every thread count
runs in its own process (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and
``MKL_NUM_THREADS`` set in its environment, and ``torch.set_num_threads``). In each
process, for every (model, batch) cell, the libraries alternate in blocks of steps with
a pause between blocks (the method of ``bench_graph.py``); the cell's figure is the
median (and minimum) of its timed steps. The table is markdown, ready for
``bench/README.md``; ``--json`` writes every number.

torch.compile keeps one compiled network per model and thread count across the batch
sizes, as a user's training script would: the second batch size makes it recompile
with a dynamic batch dimension, later ones reuse that. ``--compile-static`` compiles
for every batch size instead (one compilation per cell, several minutes each model).
Compilation times are listed under the table.

Usage::

    python bench/bench_scaling.py                          # the default grid, ~5-10 min
    python bench/bench_scaling.py --torch-compile          # add torch.compile
    python bench/bench_scaling.py --models cnn,resnet20 --batches 32,64 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from _harness import Timing, first_step, load_torch, ms, run_blocks, run_child, thread_env, uptime  # noqa: E402

MODELS = ("mlp", "cnn", "resnet8", "resnet20")
LIBS = ("graph", "torch", "torch-compile")
#: timed steps per block for models whose step is too short for the default
STEPS_FOR = {"mlp": 20}


# ----- the child: one thread count ---------------------------------------------------------
def _torch_cell(name: str, batch: int, compiled_nets: dict, compile_static: bool):
    """A PyTorch step for (name, batch); ``compiled_nets`` keeps one compiled network per
    model (None: eager)."""
    import torch
    from _torch_models import build
    from bench_graph import MODELS as SPECS
    from bench_graph import batch_arrays

    x, y = batch_arrays(batch, SPECS[name].shape)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    if compiled_nets is None:
        torch.manual_seed(0)
        net = fwd = build(name)
    else:
        if compile_static or name not in compiled_nets:
            torch.manual_seed(0)
            net = build(name)
            compiled_nets[name] = (net, torch.compile(net, dynamic=False if compile_static else None))
        net, fwd = compiled_nets[name]
    sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        sgd.zero_grad(set_to_none=True)
        loss_fn(fwd(xt), yt).backward()
        sgd.step()

    return step


def _cell_steps(name: str, batch: int, libs: list[str], compiled_nets: dict, args) -> tuple[dict, dict, dict]:
    """The steps of one cell, their first-step times, and failures by library."""
    from bench_graph import singa_step

    steps, timings, failed = {}, {}, {}
    for lib in libs:
        try:
            if lib == "graph":
                step = singa_step(name, "graph", batch)[0]
            else:
                step = _torch_cell(
                    name, batch, compiled_nets if lib == "torch-compile" else None, args.compile_static
                )
            timings[lib] = Timing(first=first_step(step))
            steps[lib] = step
        except Exception as e:  # torch.compile may fail (toolchain, unsupported op): skip the cell
            failed[lib] = f"{type(e).__name__}: {str(e)[:160]}"
    return steps, timings, failed


def child(args: argparse.Namespace) -> int:
    """Time every cell at this process's thread count; print one JSON line."""
    threads = args.threads[0]
    libs = list(args.libs)
    if load_torch(threads, "torch" not in libs and "torch-compile" not in libs) is None:
        libs = [lib for lib in libs if lib == "graph"]
    compiled_nets: dict = {}
    cells = []
    for name in args.models:
        for batch in args.batches:
            steps, timings, failed = _cell_steps(name, batch, libs, compiled_nets, args)
            run_blocks(steps, args.reps, STEPS_FOR.get(name, args.steps), args.warmup, args.pause, timings)
            for lib, t in timings.items():
                cells.append(
                    {
                        "model": name,
                        "batch": batch,
                        "threads": threads,
                        "lib": lib,
                        "median_s": t.median,
                        "min_s": t.minimum,
                        "cpu_s": t.cpu_median,
                        "first_s": t.first,
                        "steps": len(t.wall),
                    }
                )
            cells += [
                {"model": name, "batch": batch, "threads": threads, "lib": k, "error": v}
                for k, v in failed.items()
            ]
    print(json.dumps({"threads": threads, "cells": cells}))
    return 0


# ----- the parent: one child per thread count, then the table -------------------------------
def _cell(cells: list[dict], model: str, batch: int, threads: int, lib: str) -> dict | None:
    for c in cells:
        if (c["model"], c["batch"], c["threads"], c["lib"]) == (model, batch, threads, lib):
            return c
    return None


def _fmt(c: dict | None) -> str:
    if c is None:
        return "-"
    if "error" in c:
        return "failed"
    return f"{ms(c['median_s'])} ({ms(c['min_s'])})"


def table(
    cells: list[dict], models: list[str], batches: list[int], threads: list[int], libs: list[str]
) -> str:
    """The markdown table: one row per (model, batch, threads)."""
    names = {"graph": "singa graph", "torch": "torch eager", "torch-compile": "torch.compile"}
    head = ["model", "batch", "threads", *(f"{names[lib]} ms" for lib in libs), "graph / best torch"]
    head += ["samples/s graph", "graph speed-up from 1 thread", "torch speed-up from 1 thread"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for model in models:
        for batch in batches:
            for n in threads:
                got = {lib: _cell(cells, model, batch, n, lib) for lib in libs}
                ok = {lib: c for lib, c in got.items() if c is not None and "error" not in c}
                row = [model, str(batch), str(n), *(_fmt(got[lib]) for lib in libs)]
                best = min((ok[k]["median_s"] for k in ("torch", "torch-compile") if k in ok), default=None)
                row.append(f"{ok['graph']['median_s'] / best:.2f}x" if best and "graph" in ok else "-")
                row.append(f"{batch / ok['graph']['median_s']:,.0f}" if "graph" in ok else "-")
                for lib in ("graph", "torch"):
                    one = _cell(cells, model, batch, 1, lib)
                    good = n != 1 and lib in ok and one is not None and "error" not in one
                    row.append(f"{one['median_s'] / ok[lib]['median_s']:.2f}x" if good else "-")
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def compile_notes(cells: list[dict]) -> list[str]:
    """First-step (compilation) times of torch.compile, and failures."""
    out = []
    for c in cells:
        if c["lib"] == "torch-compile" and "error" not in c and c["first_s"] > 1.0:
            out.append(
                f"- {c['model']} batch {c['batch']}, {c['threads']} thread(s): "
                f"first step {c['first_s']:.1f} s"
            )
    out += [
        f"- {c['model']} batch {c['batch']} {c['lib']}: failed ({c['error']})" for c in cells if "error" in c
    ]
    return out


def parent(args: argparse.Namespace) -> int:
    """Start one child per thread count, print the table."""
    print(f"start: {uptime()}")
    cells: list[dict] = []
    for n in args.threads:
        argv = [os.path.abspath(__file__), "--child", "--threads", str(n), "--models", ",".join(args.models)]
        argv += ["--batches", ",".join(map(str, args.batches)), "--libs", ",".join(args.libs)]
        argv += ["--steps", str(args.steps), "--reps", str(args.reps), "--warmup", str(args.warmup)]
        argv += ["--pause", str(args.pause)] + (["--compile-static"] if args.compile_static else [])
        cells += run_child(argv, env=thread_env(n))["cells"]
    print(f"end:   {uptime()}")
    print(
        f"step time, median (min) in ms over {args.reps} rounds x {args.steps} steps "
        f"({', '.join(f'{k}: {v}' for k, v in STEPS_FOR.items())}); SGD momentum 0.9, float32"
    )
    print()
    print(table(cells, args.models, args.batches, args.threads, args.libs))
    notes = compile_notes(cells)
    if notes:
        print("\ntorch.compile first steps / failures:\n" + "\n".join(notes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cells, f, indent=1)
    return 0


def _list(kind: type, allowed: tuple | None = None):
    def parse(text: str) -> list:
        items = [kind(s.strip()) for s in text.split(",") if s.strip()]
        bad = [i for i in items if allowed is not None and i not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list from {allowed}, got {text!r}")
        return items

    return parse


def parser() -> argparse.ArgumentParser:
    """The command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=_list(str, MODELS), default=list(MODELS), help=",".join(MODELS))
    ap.add_argument("--batches", type=_list(int), default=[16, 32, 64, 128, 256])
    ap.add_argument("--threads", type=_list(int), default=[1, 2], help="thread counts, one process each")
    ap.add_argument("--libs", type=_list(str, LIBS), default=["graph", "torch"], help=",".join(LIBS))
    ap.add_argument("--torch-compile", action="store_true", help="add torch-compile to --libs")
    ap.add_argument("--compile-static", action="store_true", help="compile once per batch size")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per block")
    ap.add_argument("--reps", type=int, default=3, help="rounds of alternating blocks per cell")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before each block")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds of pause before each block")
    ap.add_argument("--json", help="also write every cell to this JSON file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.torch_compile and "torch-compile" not in args.libs:
        args.libs.append("torch-compile")
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
