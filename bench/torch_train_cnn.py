"""``singa-train cnn``'s recipe in PyTorch: the same network, batch order, optimizer and
learning-rate schedule, for the end-to-end comparison of ``bench_e2e.py``.

The data come as ``.npy`` files written by ``bench_e2e.py`` (the arrays ``singa.data``
loads: float32 images in [0, 1], int labels), so this process imports numpy and torch
only and its peak RSS is PyTorch's own. Batches are made as ``singa.data.DataLoader``
makes them: epoch ``e`` visits ``numpy.random.default_rng([seed, e]).permutation(n)``,
the last partial batch is dropped, each batch is normalised by the training set's
per-channel mean and standard deviation (given on the command line), evaluation
batches are in order and keep the last partial one. SGD with momentum, cosine decay of
the learning rate to 0 over all steps of the run (``opt.CosineDecay``, no warm-up). Per
step, as ``singa-train`` does, the loss and the number of correct predictions are read
back. Initialisation: PyTorch's defaults (singa's differ; the accuracy is compared).

    python bench/torch_train_cnn.py --data DIR --mean 0.286 --std 0.353 --epochs 1

Prints one JSON line per epoch (``{"epoch": ...}``) and a last one with the run's
summary and ``peak_rss_mb`` (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from collections.abc import Iterator

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def train_batches(
    x: np.ndarray, y: np.ndarray, batch: int, seed: int, epoch: int, mean: np.ndarray, std: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The training batches of epoch ``epoch``, as ``singa.data.DataLoader(shuffle=True,
    drop_last=True, mean=, std=)`` yields them (float32 images, int32 labels)."""
    order = np.random.default_rng([seed, int(epoch)]).permutation(len(x))
    for lo in range(0, len(x) - len(x) % batch, batch):
        idx = order[lo : lo + batch]
        xb = x[idx].astype(np.float32, copy=True)
        xb -= mean
        xb /= std
        yield xb, y[idx].astype(np.int32, copy=True)


def eval_batches(
    x: np.ndarray, y: np.ndarray, batch: int, mean: np.ndarray, std: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Evaluation batches in order, the last partial one kept."""
    for lo in range(0, len(x), batch):
        xb = x[lo : lo + batch].astype(np.float32, copy=True)
        xb -= mean
        xb /= std
        yield xb, y[lo : lo + batch].astype(np.int32, copy=True)


def cosine(step: int, total: int) -> float:
    """The factor of ``opt.CosineDecay`` (alpha 0) at ``step`` of ``total``."""
    return 0.5 * (1 + math.cos(math.pi * min(step, total) / total))


def per_channel(values: str, channels: int) -> np.ndarray:
    """Comma-separated floats as a (1, C, 1, 1) float32 array."""
    v = np.asarray([float(s) for s in values.split(",")], dtype=np.float32)
    return np.broadcast_to(v, (channels,)).reshape(1, channels, 1, 1).copy()


def evaluate(net, x: np.ndarray, y: np.ndarray, batch: int, mean, std) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over the evaluation set."""
    import torch

    net.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for xb, yb in eval_batches(x, y, batch, mean, std):
            out = net(torch.from_numpy(xb))
            t = torch.from_numpy(yb).long()
            loss_sum += float(torch.nn.functional.cross_entropy(out.double(), t, reduction="sum"))
            correct += int((out.argmax(1) == t).sum())
    net.train()
    return loss_sum / len(x), correct / len(x)


def run(args: argparse.Namespace) -> dict:
    """Train and evaluate; the summary."""
    import torch
    from _torch_models import cnn, count_params

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    load = {
        k: np.load(os.path.join(args.data, f"{k}.npy")) for k in ("x_train", "y_train", "x_test", "y_test")
    }
    x, y = load["x_train"], load["y_train"]
    channels, image = x.shape[1], x.shape[2]
    mean, std = per_channel(args.mean, channels), per_channel(args.std, channels)
    net = cnn(channels=channels, classes=args.classes, image=image)
    sgd = torch.optim.SGD(
        net.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    steps = len(x) // args.batch_size
    total = max(1, args.epochs * steps)
    sched = torch.optim.lr_scheduler.LambdaLR(sgd, lambda s: cosine(s, total))
    epochs = []
    for e in range(args.epochs):
        t0 = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        for xb, yb in train_batches(x, y, args.batch_size, args.seed, e, mean, std):
            t = torch.from_numpy(yb).long()
            sgd.zero_grad(set_to_none=True)
            out = net(torch.from_numpy(xb))
            loss = torch.nn.functional.cross_entropy(out, t)
            loss.backward()
            sgd.step()
            sched.step()
            loss_sum += float(loss) * len(yb)
            correct += int((out.argmax(1) == t).sum())
            seen += len(yb)
        dt = time.perf_counter() - t0
        vloss, vacc = evaluate(net, load["x_test"], load["y_test"], args.eval_batch_size, mean, std)
        rec = {"epoch": e + 1, "time_s": dt, "train_loss": loss_sum / seen, "train_acc": correct / seen}
        rec |= {"val_loss": vloss, "val_acc": vacc}
        print(json.dumps(rec), flush=True)
        epochs.append(rec)
    return {"params": count_params(net), "steps_per_epoch": steps, "epochs": epochs}


def parser() -> argparse.ArgumentParser:
    """The command-line options (``singa-train``'s defaults for the CNN)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data", required=True, help="folder with x_train.npy, y_train.npy, x_test.npy, y_test.npy"
    )
    ap.add_argument("--mean", required=True, help="per-channel training mean, comma-separated")
    ap.add_argument("--std", required=True, help="per-channel training standard deviation")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--eval-batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    summary = run(args)
    summary["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
