"""End to end: the zoo's ``gpt`` and its PyTorch twin (bench/torch_gpt.py) trained by
the same recipe on the same text, from the same initial weights, on the same batches;
their validation losses after the same number of steps are compared.

    python bench/gpt_e2e.py [--text FILE] [--steps 200] [--batch 16] [--context 128]
                            [--lr 1e-3] [--eval-batches 8] [--layers 4] [--width 128] [--no-torch]

Recipe (nanoGPT's, for a character model): AdamW (lr, betas 0.9/0.999, weight decay
0.01), no dropout, batches of random windows (seeded; ``singa.data.text``), the
validation loss the mean over the first ``--eval-batches`` consecutive windows of the
last 10 % of the text. The text defaults to the bundled tinyshakespeare. Prints JSON
with both losses, their relative difference, the wall time of each and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import _harness  # noqa: E402


def singa_run(model, data, a) -> tuple[float, list]:
    """Train the singa model (graph mode); (validation loss, training losses)."""
    import numpy as np

    from singa import opt
    from singa.data import text
    from singa.tensor import Tensor

    model.set_optimizer(opt.AdamW(a.lr))
    tx = Tensor((a.batch, a.context), dtype=np.int64, requires_grad=False)
    ty = Tensor((a.batch, a.context), dtype=np.int64, requires_grad=False)
    model.compile([tx], is_train=True, use_graph=True)
    losses = []
    for x, y in text.random_windows(data.train, a.batch, a.context, a.steps, seed=a.seed):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        losses.append(float(model(tx, ty)[1].to_numpy().reshape(-1)[0]))
    model.eval()
    vals = []
    for x, y in text.eval_windows(data.val, a.batch, a.context, a.eval_batches):
        out = model(Tensor(data=x, dtype=np.int64, requires_grad=False))
        vals.append(
            float(
                model.loss(out, Tensor(data=y, dtype=np.int64, requires_grad=False)).to_numpy().reshape(-1)[0]
            )
        )
    return float(np.mean(vals)), losses


def torch_run(tw, data, a) -> tuple[float, list]:
    """Train the twin the same way; (validation loss, training losses)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from singa.data import text

    o = torch.optim.AdamW(tw.parameters(), a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    v = tw.tok_emb.weight.shape[0]
    losses = []
    for x, y in text.random_windows(data.train, a.batch, a.context, a.steps, seed=a.seed):
        o.zero_grad(set_to_none=True)
        loss = F.cross_entropy(tw(torch.from_numpy(x)).reshape(-1, v), torch.from_numpy(y).reshape(-1))
        loss.backward()
        o.step()
        losses.append(float(loss.detach()))
    vals = []
    with torch.no_grad():
        for x, y in text.eval_windows(data.val, a.batch, a.context, a.eval_batches):
            vals.append(
                float(
                    F.cross_entropy(tw(torch.from_numpy(x)).reshape(-1, v), torch.from_numpy(y).reshape(-1))
                )
            )
    return float(np.mean(vals)), losses


def main(argv: list[str] | None = None) -> dict:
    """Train both and compare; returns the result row."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--no-torch", action="store_true")
    a = p.parse_args(argv)
    from singa import device, zoo
    from singa.data import text

    data = text.load_text(a.text)
    device.get_default_device().set_rand_seed(a.seed)
    model = zoo.create(
        "gpt", num_classes=len(data.vocab), context=a.context, num_layers=a.layers, width=a.width
    )
    torch_version = _harness.load_torch(a.threads, a.no_torch)
    twin = None
    if torch_version:
        from torch_gpt import twin_of

        twin = twin_of(model)  # the same initial weights
    row: dict = {"load_before": _harness.uptime(), "steps": a.steps, "batch": a.batch, "context": a.context}
    t0 = time.perf_counter()
    row["singa_val_loss"], losses = singa_run(model, data, a)
    row["singa_seconds"] = time.perf_counter() - t0
    row["singa_first_last_train_loss"] = [losses[0], losses[-1]]
    if twin is not None:
        t0 = time.perf_counter()
        row["torch_val_loss"], tl = torch_run(twin, data, a)
        row["torch_seconds"] = time.perf_counter() - t0
        row["torch_first_last_train_loss"] = [tl[0], tl[-1]]
        row["relative_difference"] = (
            abs(row["singa_val_loss"] - row["torch_val_loss"]) / row["torch_val_loss"]
        )
    row["load_after"] = _harness.uptime()
    print(json.dumps(row, indent=1))
    return row


if __name__ == "__main__":
    main()
