"""Whole models exported by torch.onnx.export, imported with ``sonnx.prepare``: load
time (prepare), and inference time of our runtime against onnxruntime's at batch 1
and 16 (median of ``--reps`` runs after one warm-up, one thread each way: BLAS and
onnxruntime both get ``--threads``). Prints a markdown table (the one in
docs/onnx.md). Needs torch (to export) and onnxruntime; torchvision models with
``--torchvision`` when torchvision imports, or from the stored graphs (opset 17, random
weights with the exported statistics: ``tests/sonnx/stored_graphs.py``) with ``--stored``,
which needs neither torch nor torchvision.

    python bench/bench_onnx_models.py --opsets 13,17 --reps 5
    python bench/bench_onnx_models.py --models "" --stored --reps 5
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


def measure(name: str, proto, reps: int, threads: int) -> dict:
    """One table row: load time and our/onnxruntime inference times at batch 1 and 16."""
    import numpy as np
    import onnxruntime as ort
    import stored_graphs

    from singa import sonnx

    data = proto.SerializeToString()
    opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    shape = stored_graphs.input_shape(proto)
    t0 = time.perf_counter()
    rep = sonnx.prepare(proto)
    load_ms = (time.perf_counter() - t0) * 1e3
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    row = {"model": name, "opset": opset, "load_ms": load_ms}
    for n in (1, 16):
        x = np.random.default_rng(n).standard_normal((n, *shape)).astype(np.float32)
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
    p.add_argument("--stored", action="store_true", help="torchvision's models from the stored graphs")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"# load: {load}, threads {args.threads}")
    print("| model | opset | load ms | ours b1 ms | ORT b1 ms | ours b16 ms | ORT b16 ms |")
    print("|---|---|---|---|---|---|---|")
    for name, proto in _jobs(args):
        if isinstance(proto, Exception):  # a model torch cannot export at this opset
            print(f"| {name} | | {type(proto).__name__} | | | | |")
            continue
        r = measure(name, proto, args.reps, args.threads)
        print(
            f"| {r['model']} | {r['opset']} | {r['load_ms']:.0f} | {r['ours_1']:.1f} | {r['ort_1']:.1f} "
            f"| {r['ours_16']:.1f} | {r['ort_16']:.1f} |"
        )
    return 0


def _exported(module, shape: tuple, opset: int):
    import onnx
    import whole_models

    try:
        return onnx.load_from_string(whole_models.export(module, shape, opset))
    except Exception as e:
        return e


def _jobs(args):
    """``(name, ModelProto or the export's exception)`` for every requested model."""
    opsets = [int(o) for o in args.opsets.split(",")]
    names = [n for n in args.models.split(",") if n]
    if names or args.torchvision:
        import whole_models

        small = whole_models.small_models()
        for opset in opsets:
            for n in names:
                yield n, _exported(small[n][0](), small[n][1], opset)
            for n in [*whole_models.TORCHVISION, *whole_models.TORCHVISION_DENSE] if args.torchvision else []:
                yield n, _exported(*whole_models.torchvision_model(n), opset)
    if args.stored:
        import stored_graphs

        for n in stored_graphs.names():
            yield n, stored_graphs.load(n)


if __name__ == "__main__":
    raise SystemExit(main())
