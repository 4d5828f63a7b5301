"""One library's training run in a fresh process, for peak-RSS measurements.

    python bench/_rss_child.py LIB MODEL BATCH STEPS THREADS

LIB is ``singa-graph``, ``singa-eager``, ``torch`` or ``torch-compile``; MODEL a zoo
name with a PyTorch twin in ``_torch_models`` (image models take 3x32x32 inputs except
``cnn`` and ``mlp``, 1x28x28). Only the library measured is imported. Prints one JSON
line: peak RSS (``ru_maxrss``) after the imports, after the model is built, after the
first step and at the end, in MB (10^6 bytes), and the first step's seconds. Thread
counts come from the environment (BLAS) and THREADS (``torch.set_num_threads``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def rss_mb() -> float:
    """Peak RSS of this process so far, MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def shape_of(model: str) -> tuple:
    """The sample shape the benchmarks give ``model``."""
    return (1, 28, 28) if model in ("cnn", "mlp") else (3, 32, 32)


def singa_steps(model: str, batch: int, graph: bool, marks: dict):
    """Build the zoo model and return one training step (numpy and singa only)."""
    import numpy as np

    from singa import device, opt, tensor, zoo

    marks["imports_mb"] = rss_mb()
    shape = shape_of(model)
    device.get_default_device().set_rand_seed(0)
    m = zoo.create(model, num_classes=10, num_channels=shape[0], image_size=shape[1:])
    m.set_optimizer(opt.SGD(0.01, momentum=0.9))
    rng = np.random.default_rng(0)
    tx = tensor.from_numpy(rng.standard_normal((batch, *shape)).astype(np.float32))
    ty = tensor.from_numpy(rng.integers(0, 10, batch).astype(np.int32))
    m.compile([tx], is_train=True, use_graph=graph)
    marks["built_mb"] = rss_mb()
    return lambda: m(tx, ty)


def torch_steps(model: str, batch: int, compiled: bool, threads: int, marks: dict):
    """Build the PyTorch twin and return one training step (torch only)."""
    import torch
    from _torch_models import build

    torch.set_num_threads(threads)
    marks["imports_mb"] = rss_mb()
    torch.manual_seed(0)
    net = build(model)
    fwd = torch.compile(net) if compiled else net
    x = torch.randn(batch, *shape_of(model))
    y = torch.randint(0, 10, (batch,))
    sgd = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    marks["built_mb"] = rss_mb()

    def step() -> None:
        sgd.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(fwd(x), y).backward()
        sgd.step()

    return step


def main(argv: list[str]) -> int:
    lib, model, batch, steps, threads = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    marks: dict = {"lib": lib, "model": model, "batch": batch, "steps": steps, "start_mb": rss_mb()}
    if lib.startswith("singa-"):
        step = singa_steps(model, batch, lib == "singa-graph", marks)
    elif lib in ("torch", "torch-compile"):
        step = torch_steps(model, batch, lib == "torch-compile", threads, marks)
    else:
        raise SystemExit(f"unknown library {lib!r}")
    t0 = time.perf_counter()
    step()
    marks["first_step_s"] = time.perf_counter() - t0
    marks["step1_mb"] = rss_mb()
    for _ in range(steps - 1):
        step()
    marks["peak_mb"] = rss_mb()
    print(json.dumps(marks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
