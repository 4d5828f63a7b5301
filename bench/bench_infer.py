"""Inference benchmark: singa's evaluation paths against onnxruntime on the same ONNX file.

Each model (the zoo's MNIST CNN and CIFAR ResNet-20, BatchNorm statistics set away
from their defaults) is compiled, exported with singa's exporter, and run at each batch
size by:

- ``eager``: ``model.eval()``, graph mode off (operator by operator);
- ``graph``: ``model.eval()`` in graph mode, the exact fusions (bitwise eager);
- ``graph-fold``: the same with ``fold_batchnorm=True`` (BatchNorm folded into the
  convolution weights, Winograd convolutions; float32-close to eager, not bitwise);
- ``prepare-nodes``: ``sonnx.prepare(file, use_graph=False).run`` (node by node: what
  ``prepare`` did before the inference path);
- ``prepare``: ``sonnx.prepare(file).run`` (fused replay, folded as ``graph-fold``);
- ``ort``: onnxruntime's CPU session on the file (``--threads`` intra-op threads).

All (model, batch, mode) runs are interleaved over ``--reps`` repetitions, each a block
of ``--warmup`` untimed then ``--calls`` timed calls, with a ``--pause`` between blocks
so that one library's spinning thread pool does not slow the next (``_harness.run_blocks``).
The table gives the first call's time (which traces and fuses the graph modes), the
median and minimum wall time per call over all timed calls, the CPU time per call
(``time.process_time``, all threads), and the ratios of the median and of the minimum
to onnxruntime's; the largest difference of each mode's output from onnxruntime's is
printed below it. Quote the load (``uptime``) with the figures.

Usage::

    python bench/bench_infer.py                          # cnn, resnet20; batch 1 and 64
    python bench/bench_infer.py --models resnet20 --batches 64 --reps 8
    python bench/bench_infer.py --blas-threads 1         # numpy's BLAS on one thread
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import first_step, run_blocks, uptime  # noqa: E402

from singa import sonnx, tensor  # noqa: E402
from singa.zoo import cnn, resnet  # noqa: E402

Call = Callable[[], object]
MODES = ("eager", "graph", "graph-fold", "prepare-nodes", "prepare", "ort")
MODELS = {
    "cnn": ("MNIST CNN, 1x28x28", lambda: cnn.CNN(num_classes=10, num_channels=1), (1, 28, 28)),
    "resnet20": (
        "ResNet-20, 3x32x32",
        lambda: resnet.resnet20(num_classes=10, num_channels=3),
        (3, 32, 32),
    ),
}


def _randomize_batchnorm(m) -> None:
    """BatchNorm statistics and affine parameters away from 0/1, as after training."""
    rng = np.random.default_rng(1)
    for name, t in m.get_states().items():
        layer_name, _, kind = name.rpartition(".")
        if "bn" not in layer_name.rsplit(".", 1)[-1]:
            continue
        if kind in ("running_var", "scale"):
            t.copy_from_numpy((rng.random(t.shape) * 0.8 + 0.6).astype(t.dtype))
        elif kind in ("running_mean", "bias"):
            t.copy_from_numpy((rng.standard_normal(t.shape) * 0.1).astype(t.dtype))


def build(name: str, batch: int, workdir: str, threads: int) -> dict[str, Call]:
    """The callables of every mode for one model and batch (none called yet)."""
    import onnxruntime as ort

    _, make, shape = MODELS[name]
    x = np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32)
    tx = tensor.Tensor(data=x)
    m = make()
    m.compile([tx], is_train=False, use_graph=False)
    _randomize_batchnorm(m)
    m.eval()
    path = os.path.join(workdir, f"{name}-{batch}.onnx")
    sonnx.export_model(m, path, [tx])
    models = {mode: make() for mode in ("eager", "graph", "graph-fold")}
    for mode, mm in models.items():
        mm.compile([tx], is_train=False, use_graph=mode != "eager")
        mm.set_states({k: v.to_numpy() for k, v in m.get_states().items()})
        mm.graph(mode != "eager", fold_batchnorm=mode == "graph-fold")
        mm.eval()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    nodes, rep = sonnx.prepare(path, use_graph=False), sonnx.prepare(path)
    calls: dict[str, Call] = {
        "eager": lambda: models["eager"](tx),
        "graph": lambda: models["graph"](tx),
        "graph-fold": lambda: models["graph-fold"](tx),
        "prepare-nodes": lambda: nodes.run([x]),
        "prepare": lambda: rep.run([x]),
        "ort": lambda: sess.run(None, feed),
    }
    return calls


def output_of(call: Call) -> np.ndarray:
    """The (first) output of one call, as a numpy array."""
    y = call()
    y = y[0] if isinstance(y, list) else y
    return y.to_numpy() if isinstance(y, tensor.Tensor) else np.asarray(y)


def _limit_blas(threads: int | None) -> str:
    if threads is None:
        return "default"
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return "default (threadpoolctl not installed)"
    threadpool_limits(threads, user_api="blas")
    return str(threads)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {','.join(MODELS)}")
    ap.add_argument("--batches", default="1,64", help="comma-separated batch sizes")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {','.join(MODES)}")
    ap.add_argument("--reps", type=int, default=6, help="interleaved repetitions (blocks per run)")
    ap.add_argument("--calls", type=int, default=0, help="timed calls per block (0: 40 at batch 1, 8 else)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls before each block")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between blocks")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--blas-threads", type=int, default=None, help="numpy BLAS threads (threadpoolctl)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    modes = [n.strip() for n in args.modes.split(",") if n.strip()]
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if any(n not in MODELS for n in names) or any(md not in MODES for md in modes):
        ap.error(f"known models {list(MODELS)}, modes {list(MODES)}")
    blas = _limit_blas(args.blas_threads)
    import onnxruntime as ort

    print(f"start: {uptime()}")
    runs: dict[tuple, Call] = {}
    outs: dict[tuple, np.ndarray] = {}
    firsts: dict[tuple, float] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            for b in batches:
                calls = build(name, b, workdir, args.threads)
                for md in modes:
                    key = (name, b, md)
                    runs[key] = calls[md]
                    firsts[key] = first_step(calls[md])  # traces the graph modes
                    outs[key] = output_of(calls[md])
        times = run_blocks(
            runs, args.reps, lambda key: args.calls or (40 if key[1] == 1 else 8), args.warmup, args.pause
        )
    _report(args, names, batches, modes, times, firsts, outs, blas, ort.__version__)
    print(f"\nend:   {uptime()}")
    return 0


def _report(args, names, batches, modes, times, firsts, outs, blas, ort_version) -> None:
    print(
        f"{args.reps} interleaved blocks of {args.calls or '40 (batch 1) / 8'} timed calls after "
        f"{args.warmup} warm-up calls, {args.pause} s pauses; times in ms per call"
    )
    print(
        f"python {platform.python_version()}, numpy {np.__version__} (BLAS threads: {blas}), onnxruntime "
        f"{ort_version} ({args.threads} threads), cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}"
    )
    print()
    print("| model | batch | mode | first call | median | min | cpu/call | vs ort (median) | vs ort (min) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    diffs = []
    for name in names:
        for b in batches:
            ref = times.get((name, b, "ort"))
            for md in modes:
                t = times[(name, b, md)]
                r_med = f"{t.median / ref.median:.2f}x" if ref else "-"
                r_min = f"{t.minimum / ref.minimum:.2f}x" if ref else "-"
                first = firsts[(name, b, md)]
                print(
                    f"| {MODELS[name][0]} | {b} | {md} | {first * 1e3:.3f} | {t.median * 1e3:.3f} | "
                    f"{t.minimum * 1e3:.3f} | {t.cpu_median * 1e3:.3f} | {r_med} | {r_min} |"
                )
                if ref and md != "ort":
                    diff = np.abs(outs[(name, b, md)] - outs[(name, b, "ort")]).max()
                    diffs.append(f"{name} batch {b} {md}: {diff:.2e}")
    if diffs:
        print("\nlargest |output - onnxruntime output|: " + "; ".join(diffs))


if __name__ == "__main__":
    sys.exit(main())
