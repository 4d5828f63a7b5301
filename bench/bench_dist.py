"""Data-parallel benchmark: MPI ranks against threads, and the all-reduce's cost.

1. Throughput on the MNIST CNN (1x28x28, batch ``--batch`` global, graph mode, SGD
   momentum) of
   - one process with one BLAS thread,
   - one process with two BLAS threads,
   - two MPI ranks with one BLAS thread each (batch/2 per rank, DistOpt),
   run one after another, ``--reps`` times interleaved. Each run warms up, then times
   ``--blocks`` blocks of ``--steps`` steps; a step's time is its block's time / steps.
   The table gives medians and minima over all blocks and samples/s of the global
   batch (from the median); for the ranks also the time rank 0 spent in the gradient
   all-reduce per step (which includes waiting for the slower rank).
2. The all-reduce alone (2 ranks): the gradients of the CNN and of ResNet-20 sent as
   DistOpt sends them (fused, float32), as float16, and sparsified (top 1%), median and
   minimum of ``--allreduce-reps`` repetitions, with the bytes each rank sends.

Usage::

    python bench/bench_dist.py                  # everything (starts mpiexec itself)
    python bench/bench_dist.py --reps 5 --steps 10
    python bench/bench_dist.py --skip-throughput

The figures depend on the machine being quiet: the script prints ``uptime`` before and
after. See bench/README.md for the method and the bandwidth model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


# ----- workers (run in their own processes, BLAS threads set by the environment) -------------
def _train_worker(args: argparse.Namespace) -> dict:
    import numpy as np

    from singa import device, opt, tensor, zoo

    dev = device.get_default_device()
    dev.set_rand_seed(0)
    model = zoo.create("cnn", num_classes=10, num_channels=1)
    sgd = opt.SGD(0.01, momentum=0.9)
    comm_time = [0.0]
    if args.distributed:
        sgd = opt.DistOpt(sgd)
        engine = sgd.communicator.host
        reduce = engine.allreduce

        def timed(buf):
            t = time.perf_counter()
            out = reduce(buf)
            comm_time[0] += time.perf_counter() - t
            return out

        engine.allreduce = timed
    world = getattr(sgd, "world_size", 1)
    rank = getattr(sgd, "global_rank", 0)
    b = args.batch // world
    rng = np.random.default_rng(rank)
    x = tensor.from_numpy(rng.standard_normal((b, 1, 28, 28)).astype(np.float32), dev)
    y = tensor.from_numpy(rng.integers(0, 10, b).astype(np.int32), dev)
    model.set_optimizer(sgd)
    model.compile([x], is_train=True, use_graph=True, sequential=False)
    for _ in range(args.warmup):
        model(x, y)
    steps, comm = [], []
    for _ in range(args.blocks):
        comm_time[0] = 0.0
        t = time.perf_counter()
        for _ in range(args.steps):
            model(x, y)
        steps.append((time.perf_counter() - t) / args.steps)
        comm.append(comm_time[0] / args.steps)
    return {"rank": rank, "world": world, "step": steps, "comm": comm}


def _allreduce_worker(args: argparse.Namespace) -> dict:
    import numpy as np

    from singa import device, opt, tensor, zoo
    from singa.parallel import collectives as coll

    comm = opt.DistOpt(opt.SGD()).communicator
    engine = comm.host
    out = {}
    for name, shape in (("cnn", (2, 1, 28, 28)), ("resnet20", (2, 3, 32, 32))):
        dev = device.get_default_device()
        dev.set_rand_seed(0)
        m = zoo.create(name, num_classes=10, num_channels=shape[1])
        m.compile([tensor.Tensor(shape, dev)], is_train=False)
        rng = np.random.default_rng(engine.global_rank)
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in m.get_params().values()]
        groups = coll.fusion_groups([g.size for g in grads], 2097152)
        n = sum(g.size for g in grads)
        kinds = {
            "float32": lambda gs: coll.fused_sum(engine, gs, 0.5),
            "float16": lambda gs: coll.fused_sum_half(engine, gs, 0.5),
            "top 1%": lambda gs: coll.sparse_sum(engine, gs, 0.01, True, None, 0.5),
        }
        res = {"params": n}
        for kind, fn in kinds.items():
            times = []
            for _ in range(args.allreduce_reps):
                engine.comm.Barrier()
                t = time.perf_counter()
                for grp in groups:
                    fn([grads[i] for i in grp])
                times.append(time.perf_counter() - t)
            res[kind] = times
        out[name] = res
    return out


# ----- the driver ---------------------------------------------------------------------------------
def _env(threads: int) -> dict:
    from singa.parallel.launch import mpi_env

    env = mpi_env(2, threads=threads, base={k: v for k, v in os.environ.items() if k not in _THREAD_VARS})
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(cmd: list[str], env: dict) -> dict:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[0])


def _worker_cmd(args: argparse.Namespace, worker: str, distributed: bool) -> list[str]:
    from singa.parallel.launch import mpiexec_command

    argv = [sys.executable, os.path.abspath(__file__), "--worker", worker]
    argv += ["--batch", str(args.batch), "--steps", str(args.steps), "--blocks", str(args.blocks)]
    argv += ["--warmup", str(args.warmup), "--allreduce-reps", str(args.allreduce_reps)]
    if distributed:
        return mpiexec_command(2, [*argv, "--distributed"])
    return argv


def _ms(values: list) -> str:
    return f"{1e3 * statistics.median(values):.2f} / {1e3 * min(values):.2f}"


def throughput(args: argparse.Namespace) -> None:
    configs = [
        ("1 process x 1 thread", 1, False),
        ("1 process x 2 threads", 2, False),
        ("2 ranks x 1 thread", 1, True),
    ]
    results: dict = {name: {"step": [], "comm": []} for name, _, _ in configs}
    for _ in range(args.reps):
        for name, threads, dist in configs:
            r = _run(_worker_cmd(args, "train", dist), _env(threads))
            results[name]["step"] += r["step"]
            results[name]["comm"] += r["comm"]
    base = statistics.median(results["1 process x 2 threads"]["step"])
    blocks = f"{args.reps} x {args.blocks} blocks of {args.steps} steps"
    print(f"\nMNIST CNN, global batch {args.batch}, graph mode ({blocks})\n")
    print("| configuration | step ms (median / min) | samples/s | vs 1 x 2 threads | all-reduce ms/step |")
    print("|---|---:|---:|---:|---:|")
    for name, _, dist in configs:
        st = results[name]["step"]
        med = statistics.median(st)
        comm = _ms(results[name]["comm"]) if dist else "-"
        print(f"| {name} | {_ms(st)} | {args.batch / med:,.0f} | {base / med:.2f}x | {comm} |")


def allreduce(args: argparse.Namespace) -> None:
    r = _run(_worker_cmd(args, "allreduce", True), _env(1))
    print(f"\nAll-reduce of one step's gradients, 2 ranks ({args.allreduce_reps} repetitions)\n")
    print("| model | parameters | float32 ms | float16 ms | top 1% ms | bytes/rank fp32 / fp16 / top 1% |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, res in r.items():
        n = res["params"]
        k = -(-n // 100)
        sizes = f"{4 * n / 1e6:.2f} MB / {2 * n / 1e6:.2f} MB / {8 * k / 1e6:.3f} MB"
        times = " | ".join(_ms(res[kind]) for kind in ("float32", "float16", "top 1%"))
        print(f"| {name} | {n:,} | {times} | {sizes} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=5, help="steps per timed block")
    p.add_argument("--blocks", type=int, default=6, help="timed blocks per run")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=3, help="interleaved runs of each configuration")
    p.add_argument("--allreduce-reps", type=int, default=30)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-allreduce", action="store_true")
    p.add_argument("--worker", choices=["train", "allreduce"], help=argparse.SUPPRESS)
    p.add_argument("--distributed", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        result = _train_worker(args) if args.worker == "train" else _allreduce_worker(args)
        if result.get("rank", 0) == 0 and (args.worker == "train" or _is_rank0()):
            print(json.dumps(result), flush=True)
        return
    print("load before:", _uptime())
    if not args.skip_throughput:
        throughput(args)
    if not args.skip_allreduce:
        allreduce(args)
    print("\nload after:", _uptime())


def _is_rank0() -> bool:
    return os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) == "0"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
