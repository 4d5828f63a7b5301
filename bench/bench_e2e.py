"""End to end: ``singa-train cnn --data fashion-mnist`` against ``torch_train_cnn.py``
(the same network, batch order, optimizer and schedule in PyTorch).

Each run is a fresh process, started through ``/bin/sh`` so that its peak RSS
(``ru_maxrss``) is its own; the two alternate for ``--pairs`` pairs. Ours runs
``singa-train``'s own code (``singa.cli.main``) with its defaults for the CNN (SGD, momentum,
cosine schedule over the run, graph mode, batch 64, no augmentation) and ``--log``; the
per-epoch training time (the training loop only, as ``singa-train`` reports it) and the
test accuracy come from that log. PyTorch gets the same arrays (written once to ``.npy``
files), the same per-channel normalisation, learning rate, momentum, weight decay and
evaluation batch size, read from ``singa.cli``'s defaults.

Data: ``--data auto`` takes the full Fashion-MNIST (60,000 / 10,000) when its files are
on disk (singa's cache, ``--data-dir``, the Debian package; no download) and otherwise
the embedded ``fashion-mnist-mini`` (8,000 training / 2,000 validation images cut from
Fashion-MNIST's test set), saying which.

Usage::

    python bench/bench_e2e.py                         # 1 epoch, 3 alternating pairs
    python bench/bench_e2e.py --epochs 5 --pairs 4 --data fashion-mnist --data-dir ~/fmnist
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from _harness import run_child, thread_env, uptime  # noqa: E402


# ----- the singa child -------------------------------------------------------------------------
def singa_child(argv: list[str]) -> int:
    """Run ``singa-train`` in this process with ``argv`` (which must hold ``--log``);
    print the epochs from its log and this process's peak RSS as one JSON line."""
    import resource

    from singa.cli.main import main as singa_train

    try:
        singa_train(argv)
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    log = argv[argv.index("--log") + 1]
    with open(log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    start = next(r for r in records if r["event"] == "start")
    epochs = [r for r in records if r["event"] == "epoch"]
    summary = {
        "params": start.get("params"),
        "steps_per_epoch": start.get("steps_per_epoch"),
        "epochs": epochs,
    }
    summary["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    print(json.dumps(summary))
    return 0


# ----- the parent ------------------------------------------------------------------------------
def pick_data(name: str, data_dir: str | None):
    """The dataset to use and a note on it (``auto``: full Fashion-MNIST if on disk)."""
    from singa import data

    if name != "auto":
        return name, data.load(name, data_dir=data_dir, download=False), ""
    try:
        return "fashion-mnist", data.load("fashion-mnist", data_dir=data_dir, download=False), ""
    except data.DatasetNotFoundError:
        note = (
            "full Fashion-MNIST not on disk (no download here): using the embedded fashion-mnist-mini, "
            "8,000 training / 2,000 validation images"
        )
        return "fashion-mnist-mini", data.load("fashion-mnist-mini"), note


def recipe(batch_size: int, info) -> dict:
    """``singa-train``'s defaults for SGD, as the PyTorch script needs them."""
    from singa.cli.config import OPTIMIZER_DEFAULTS, TrainConfig
    from singa.cli.trainer import eval_batch_size

    cfg = TrainConfig(batch_size=batch_size)
    if cfg.optimizer != "sgd" or cfg.scheduler != "cosine" or cfg.warmup or cfg.augment:
        raise SystemExit("bench_e2e: singa-train's defaults changed (optimizer/scheduler); update the script")
    lr, momentum, wd = OPTIMIZER_DEFAULTS["sgd"]
    return {
        "lr": lr,
        "momentum": momentum,
        "weight_decay": wd,
        "eval_batch_size": eval_batch_size(batch_size, info),
    }


def write_arrays(ds, folder: str) -> None:
    """The dataset's four arrays as .npy files for the PyTorch process."""
    import numpy as np

    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.save(os.path.join(folder, f"{key}.npy"), getattr(ds, key))


def commands(args: argparse.Namespace, data_name: str, ds, folder: str) -> dict[str, list[str]]:
    """The argv of each library's run."""
    from singa import data

    mean, std = data.channel_mean_std(ds.x_train)
    r = recipe(args.batch_size, ds.info)
    common = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--seed", str(args.seed)]
    singa = [os.path.abspath(__file__), "--singa-child", "cnn", "--data", data_name, "--no-download", *common]
    singa += ["--quiet", "--no-plot", "--log", os.path.join(folder, "singa.jsonl")]
    if args.data_dir:
        singa += ["--data-dir", args.data_dir]
    torch = [os.path.join(HERE, "torch_train_cnn.py"), "--data", folder, *common]
    torch += ["--mean", ",".join(map(str, mean.tolist())), "--std", ",".join(map(str, std.tolist()))]
    torch += [
        "--lr",
        str(r["lr"]),
        "--momentum",
        str(r["momentum"]),
        "--weight-decay",
        str(r["weight_decay"]),
    ]
    torch += ["--eval-batch-size", str(r["eval_batch_size"]), "--threads", str(args.threads)]
    torch += ["--classes", str(ds.info.num_classes)]
    return {"singa": singa, "torch": torch}


def run_pairs(args: argparse.Namespace, cmds: dict, folder: str) -> dict[str, list[dict]]:
    """``--pairs`` alternating runs of each library (a fresh process each)."""
    env = thread_env(args.threads)
    env["PYTHONPATH"] = os.path.abspath(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    runs: dict[str, list[dict]] = {lib: [] for lib in cmds}
    for i in range(args.pairs):
        for lib, argv in cmds.items():
            log = os.path.join(folder, "singa.jsonl")
            if lib == "singa" and os.path.exists(log):
                os.remove(log)
            res = run_child(argv, env=env)
            runs[lib].append(res)
            times = ", ".join(f"{e['time_s']:.2f}" for e in res["epochs"])
            acc = res["epochs"][-1]["val_acc"] if res["epochs"] else float("nan")
            print(f"pair {i + 1} {lib:5s}: epoch times {times} s, test accuracy {100 * acc:.2f}%, "
                  f"peak RSS {res['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
    return runs


def report(runs: dict[str, list[dict]], epochs: int) -> None:
    """The summary table and the ratio of training times."""
    print()
    print("| library | parameters | train s / epoch median (min) | total train s median | "
          "test accuracy | peak RSS MB |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    totals = {}
    for lib, rs in runs.items():
        per_epoch = [e["time_s"] for r in rs for e in r["epochs"]]
        totals[lib] = [sum(e["time_s"] for e in r["epochs"]) for r in rs]
        accs = sorted(100 * r["epochs"][-1]["val_acc"] for r in rs)
        rss = sorted(r["peak_rss_mb"] for r in rs)
        print(
            f"| {lib} | {rs[0]['params']:,} | {statistics.median(per_epoch):.2f} ({min(per_epoch):.2f}) | "
            f"{statistics.median(totals[lib]):.2f} | {accs[0]:.2f}-{accs[-1]:.2f}% | "
            f"{rss[0]:.0f}-{rss[-1]:.0f} |"
        )
    if "torch" in totals:
        ratios = sorted(a / b for a, b in zip(totals["singa"], totals["torch"], strict=False))
        print(
            f"\nsinga / torch training time per pair ({epochs} epoch(s)): "
            + ", ".join(f"{r:.2f}x" for r in ratios)
            + f"; median {statistics.median(ratios):.2f}x"
        )


def parser() -> argparse.ArgumentParser:
    """The command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="auto", help="auto, fashion-mnist or fashion-mnist-mini")
    ap.add_argument("--data-dir", default=None, help="folder with the Fashion-MNIST IDX files")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=3, help="alternating (singa, torch) runs")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="BLAS/OpenMP threads and torch.set_num_threads")
    ap.add_argument("--no-torch", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--singa-child"]:
        return singa_child(argv[1:])
    args = parser().parse_args(argv)
    print(f"start: {uptime()}")
    data_name, ds, note = pick_data(args.data, args.data_dir)
    sizes = f"{len(ds.x_train)} train / {len(ds.x_test)} {ds.info.test_split}"
    print(f"data: {data_name} ({sizes})" + (f"; {note}" if note else ""))
    with tempfile.TemporaryDirectory(prefix="bench_e2e_") as folder:
        write_arrays(ds, folder)
        cmds = commands(args, data_name, ds, folder)
        if args.no_torch or not _torch_installed():
            cmds.pop("torch")
        runs = run_pairs(args, cmds, folder)
    print(f"end:   {uptime()}")
    report(runs, args.epochs)
    return 0


def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


if __name__ == "__main__":
    sys.exit(main())
