"""Images per second of ``singa.data.DataLoader`` over an ``ImageFolder`` of JPEGs with
0, 1 and 2 worker processes, side by side with PyTorch's DataLoader over torchvision's
ImageFolder (or, when torchvision does not import, a PIL-based torch Dataset doing the same
decode and resize), and the share of a training step's time spent waiting for data.

::

    python bench/bench_loader.py                        # 3000 JPEGs 64x64 -> 32x32, batch 64
    python bench/bench_loader.py --images 6000 --workers 0,2 --json out.json
    python bench/bench_loader.py --no-torch --dir /tmp/jpegs   # keep the folder between runs

Both sides decode with Pillow, convert to RGB, resize to ``--image-size`` with bilinear
filtering and scale to float32 in [0, 1]; both shuffle. Each row is one full epoch,
including the start of the worker processes. The wait share trains singa's ``cnn`` on the
batches with ``--wait-workers`` workers and counts the time spent in ``next(batches)``.
Figures depend on the machine's load: give ``uptime`` with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from singa import data, opt, tensor, zoo  # noqa: E402

__all__ = ["PILTwin", "make_jpegs", "singa_epoch", "torch_epoch", "wait_share", "main"]


def make_jpegs(root: str, images: int, size: int, classes: int = 10, seed: int = 0) -> str:
    """Write ``images`` random-texture JPEGs (``size`` x ``size``) into ``classes``
    sub-folders of ``root`` (kept if already there with that many images)."""
    from PIL import Image

    have = sum(len(f) for _, _, f in os.walk(root)) if os.path.isdir(root) else 0
    if have == images:
        return root
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(classes, size, size, 3), dtype=np.uint8)
    for i in range(images):
        c = i % classes
        folder = os.path.join(root, f"class{c:02d}")
        os.makedirs(folder, exist_ok=True)
        noise = rng.integers(-30, 30, size=(size, size, 3))
        img = np.clip(base[c].astype(np.int32) + noise, 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)
    return root


def singa_epoch(root: str, image_size: int, batch: int, workers: int) -> dict:
    """One shuffled epoch of singa's loader: images, seconds, images/s."""
    ds = data.ImageFolder(root, mode="RGB", image_size=image_size)
    t0 = time.perf_counter()
    n = 0
    with data.DataLoader(ds, batch_size=batch, shuffle=True, seed=0, workers=workers) as loader:
        for xb, _ in loader:
            n += len(xb)
    dt = time.perf_counter() - t0
    return {"loader": "singa", "workers": workers, "images": n, "seconds": dt, "images_per_s": n / dt}


def _torch_dataset(root: str, image_size: int) -> tuple[Any, str]:
    try:
        from torchvision import datasets, transforms

        tf = transforms.Compose(
            [
                transforms.Resize((image_size, image_size), transforms.InterpolationMode.BILINEAR),
                transforms.ToTensor(),
            ]
        )
        return datasets.ImageFolder(root, transform=tf), "torch+torchvision"
    except Exception:
        return PILTwin(root, image_size), "torch+PIL twin"


class PILTwin:
    """torchvision's ImageFolder + Resize + ToTensor, written with PIL and numpy."""

    def __init__(self, root: str, image_size: int):
        self.samples = data.ImageFolder(root, mode="RGB", image_size=image_size).samples
        self.size = image_size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        import torch
        from PIL import Image

        path, target = self.samples[i]
        with Image.open(path) as im:
            im = im.convert("RGB").resize((self.size, self.size), Image.Resampling.BILINEAR)
            arr = np.asarray(im, dtype=np.uint8)
        return torch.from_numpy(arr.transpose(2, 0, 1).copy()).float().div(255), target


def torch_epoch(root: str, image_size: int, batch: int, workers: int) -> dict | None:
    """One shuffled epoch of torch's DataLoader (None when torch does not import)."""
    try:
        import torch
    except Exception:
        return None
    ds, name = _torch_dataset(root, image_size)
    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, generator=g)
    t0 = time.perf_counter()
    n = 0
    for xb, _ in loader:
        n += len(xb)
    dt = time.perf_counter() - t0
    return {"loader": name, "workers": workers, "images": n, "seconds": dt, "images_per_s": n / dt}


def wait_share(root: str, image_size: int, batch: int, workers: int, steps: int) -> dict:
    """Train singa's cnn for ``steps`` steps on the folder: the share of the time spent
    waiting for the next batch."""
    ds = data.ImageFolder(root, mode="RGB", image_size=image_size)
    model = zoo.create("cnn", num_classes=len(ds.classes), num_channels=3, image_size=image_size)
    model.set_optimizer(opt.SGD(0.01, momentum=0.9))
    model.compile([tensor.Tensor((batch, 3, image_size, image_size))], is_train=True, use_graph=True)
    model.train()
    waited = total = 0.0
    done = 0
    with data.DataLoader(
        ds, batch_size=batch, shuffle=True, seed=0, drop_last=True, workers=workers
    ) as loader:
        it = iter(loader)
        next(it)  # the workers' start is not a step
        while done < steps:
            t0 = time.perf_counter()
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                continue
            t1 = time.perf_counter()
            model(tensor.from_numpy(xb), tensor.from_numpy(yb))
            t2 = time.perf_counter()
            waited += t1 - t0
            total += t2 - t0
            done += 1
    return {"workers": workers, "steps": done, "wait_share": waited / total if total else float("nan")}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; prints one row per loader and worker count."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--size", type=int, default=64, help="side of the JPEGs written")
    ap.add_argument("--image-size", type=int, default=32, help="side after the resize")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--dir", help="folder of the JPEGs (default: a temporary one)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--wait-workers", type=int, default=2)
    ap.add_argument("--wait-steps", type=int, default=20, help="0: skip the training-step measure")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = make_jpegs(args.dir or os.path.join(tmp, "jpegs"), args.images, args.size)
        rows = []
        for w in (int(v) for v in args.workers.split(",")):
            rows.append(singa_epoch(root, args.image_size, args.batch, w))
            theirs = None if args.no_torch else torch_epoch(root, args.image_size, args.batch, w)
            if theirs is not None:
                rows.append(theirs)
        for r in rows:
            rate = f"{r['images_per_s']:8.0f} images/s"
            print(f"{r['loader']:<20} workers {r['workers']}  {r['images']} images  {rate}")
        wait = None
        if args.wait_steps:
            wait = wait_share(root, args.image_size, args.batch, args.wait_workers, args.wait_steps)
            share = f"{100 * wait['wait_share']:.1f}%"
            print(f"training step (cnn, {wait['workers']} workers): {share} waiting for data")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "wait": wait, "args": vars(args), "load": os.getloadavg()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
