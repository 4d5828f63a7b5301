"""The zoo's ``vit`` beside the ``cnn`` on Fashion-MNIST-sized batches: the training
step of each in singa (graph mode) and in PyTorch eager (same architectures), and the
ratio singa/PyTorch of each.

    python bench/bench_vit.py [--batch 64] [--steps 5] [--reps 3] [--no-torch]

One step: forward, softmax cross-entropy, backward, an SGD momentum update, on a fixed
(batch, 1, 28, 28) batch. Timed by the blocks method of ``_harness``; the load averages
before and after are printed: quote them with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import _harness  # noqa: E402


def _batch(batch: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.random((batch, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, batch).astype(np.int32)


def singa_step(name: str, batch: int, width: int, layers: int):
    """One singa training step of zoo model ``name`` (graph mode)."""
    from singa import device, opt, zoo
    from singa.tensor import Tensor

    device.get_default_device().set_rand_seed(0)
    kw = {"num_layers": layers, "width": width} if name == "vit" else {}
    m = zoo.create(name, num_classes=10, num_channels=1, image_size=28, **kw)
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    x, y = _batch(batch)
    tx, ty = Tensor(data=x), Tensor(data=y, dtype=y.dtype, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=True)
    return lambda: m(tx, ty)


def torch_vit(width: int, layers: int):
    """The same ViT in PyTorch: patch 7, learned positions, pre-norm GELU blocks, mean."""
    import torch
    from torch import nn

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(1, width, 7, 7)
            self.pos = nn.Parameter(torch.zeros(16, width))
            block = nn.TransformerEncoderLayer(
                width, 4, 4 * width, 0.0, "gelu", batch_first=True, norm_first=True
            )
            self.enc = nn.TransformerEncoder(
                block, layers, norm=nn.LayerNorm(width), enable_nested_tensor=False
            )
            self.fc = nn.Linear(width, 10)

        def forward(self, x):
            h = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            return self.fc(self.enc(h).mean(1))

    return ViT()


def torch_step(name: str, batch: int, width: int, layers: int):
    """One PyTorch eager training step of the same model."""
    import torch
    import torch.nn.functional as F

    if name == "vit":
        net = torch_vit(width, layers)
    else:
        import _torch_models

        net = _torch_models.cnn()
    o = torch.optim.SGD(net.parameters(), 0.01, momentum=0.9)
    x, y = (torch.from_numpy(a) for a in _batch(batch))
    y = y.long()

    def step() -> None:
        o.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        o.step()

    return step


def main(argv: list[str] | None = None) -> dict:
    """Time the four steps; returns medians (ms) and ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--pause", type=float, default=0.3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-torch", action="store_true")
    a = p.parse_args(argv)
    torch_version = _harness.load_torch(a.threads, a.no_torch)
    out: dict = {"load_before": _harness.uptime(), "batch": a.batch, "torch": torch_version}
    steps = {f"singa_{n}": singa_step(n, a.batch, a.width, a.layers) for n in ("vit", "cnn")}
    if torch_version:
        steps.update({f"torch_{n}": torch_step(n, a.batch, a.width, a.layers) for n in ("vit", "cnn")})
    timings = _harness.run_blocks(steps, a.reps, a.steps, warmup=a.warmup, pause=a.pause)
    out["step_ms"] = {k: t.median * 1e3 for k, t in timings.items()}
    if torch_version:
        out["ratio_singa_over_torch"] = {
            n: out["step_ms"][f"singa_{n}"] / out["step_ms"][f"torch_{n}"] for n in ("vit", "cnn")
        }
    out["load_after"] = _harness.uptime()
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
