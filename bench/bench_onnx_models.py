"""Whole models exported by torch.onnx.export, imported with ``sonnx.prepare``: load
time (prepare), and inference time of our runtime against onnxruntime's at batch 1
and 16 (median of ``--reps`` runs after one warm-up, one thread each way: BLAS and
onnxruntime both get ``--threads``). Prints a markdown table (the one in
docs/onnx.md). Needs torch (to export) and onnxruntime; torchvision models with
``--torchvision`` when torchvision imports.

    python bench/bench_onnx_models.py --opsets 13,17 --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sonnx"))


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up (our first run traces the graph)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(name: str, module, shape: tuple, opset: int, reps: int, threads: int) -> dict:
    """One table row: load time and our/onnxruntime inference times at batch 1 and 16."""
    import onnx
    import onnxruntime as ort
    import whole_models

    from singa import sonnx

    data = whole_models.export(module, shape, opset)
    proto = onnx.load_from_string(data)
    t0 = time.perf_counter()
    rep = sonnx.prepare(proto)
    load_ms = (time.perf_counter() - t0) * 1e3
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    row = {"model": name, "opset": opset, "load_ms": load_ms}
    for n in (1, 16):
        x = whole_models.batch(shape, n)
        row[f"ours_{n}"] = _median_ms(lambda x=x: rep.run([x]), reps)
        row[f"ort_{n}"] = _median_ms(lambda x=x: sess.run(None, {"x": x}), reps)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--opsets", default="13,17")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--models", default="resnet_blocks,mobilenet_like,vit_like,segmentation_head")
    p.add_argument("--torchvision", action="store_true", help="also torchvision's models (slow)")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import whole_models

    small = whole_models.small_models()
    jobs = [(n, small[n][0](), small[n][1]) for n in args.models.split(",") if n]
    if args.torchvision:
        for n in whole_models.TORCHVISION:
            try:
                module, shape = whole_models.torchvision_model(n)
            except Exception as e:
                print(f"# {n}: torchvision not usable ({type(e).__name__})")
                continue
            jobs.append((n, module, shape))
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"# load: {load}, threads {args.threads}")
    print("| model | opset | load ms | ours b1 ms | ORT b1 ms | ours b16 ms | ORT b16 ms |")
    print("|---|---|---|---|---|---|---|")
    for opset in [int(o) for o in args.opsets.split(",")]:
        for name, module, shape in jobs:
            try:
                r = measure(name, module, shape, opset, args.reps, args.threads)
            except Exception as e:  # a model torch cannot export at this opset
                print(f"| {name} | {opset} | {type(e).__name__} | | | | |")
                continue
            print(
                f"| {r['model']} | {r['opset']} | {r['load_ms']:.0f} | {r['ours_1']:.1f} | {r['ort_1']:.1f} "
                f"| {r['ours_16']:.1f} | {r['ort_16']:.1f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
