"""The zoo's ``gpt`` side by side with its PyTorch twin (bench/torch_gpt.py, same
weights): training step time, peak memory, and generation tokens/s.

    python bench/bench_gpt.py [--batch 16] [--context 128] [--steps 5] [--reps 3]
                              [--gen-tokens 100] [--threads 2] [--no-torch] [--json FILE]

- step: one AdamW training step at (batch, context), singa eager and graph against
  PyTorch eager, timed by the blocks method of ``_harness`` (medians, CPU time, load);
- memory: peak RSS of each library's training run in a fresh process (``ru_maxrss``);
- generate: tokens/s sampling ``--gen-tokens`` tokens from a one-token prompt: singa
  with its key/value cache and without, PyTorch's cache-less loop (nanoGPT's) and
  PyTorch with an equivalent cache (median of ``--reps`` alternating rounds, each run
  after an untimed one).

Figures depend on the machine's load: the load averages before and after are printed
with them; quote them together.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import _harness  # noqa: E402


def _model(vocab: int, context: int, seed: int = 0):
    from singa import device, zoo

    device.get_default_device().set_rand_seed(seed)
    return zoo.create("gpt", num_classes=vocab, context=context)


def _data(batch: int, context: int, vocab: int):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.integers(0, vocab, (batch, context))
    return x, np.roll(x, -1, axis=1)


def singa_step(batch: int, context: int, vocab: int, graph: bool):
    """A closure running one singa training step."""
    import numpy as np

    from singa import opt
    from singa.tensor import Tensor

    m = _model(vocab, context)
    m.set_optimizer(opt.AdamW(1e-3))
    x, y = _data(batch, context, vocab)
    tx = Tensor(data=x, dtype=np.int64, requires_grad=False)
    ty = Tensor(data=y, dtype=np.int64, requires_grad=False)
    m.compile([tx], is_train=True, use_graph=graph)
    return lambda: m(tx, ty)


def torch_step(batch: int, context: int, vocab: int):
    """A closure running one PyTorch eager training step of the twin."""
    import torch
    import torch.nn.functional as F
    from torch_gpt import twin_of

    tw = twin_of(_model(vocab, context))
    o = torch.optim.AdamW(tw.parameters(), 1e-3)
    x, y = (torch.from_numpy(a) for a in _data(batch, context, vocab))

    def step() -> None:
        o.zero_grad(set_to_none=True)
        loss = F.cross_entropy(tw(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        o.step()

    return step


def generation(vocab: int, context: int, n: int, use_torch: bool, reps: int = 3, pause: float = 0.3) -> dict:
    """Tokens per second of each sampler: the median over ``reps`` rounds of
    alternating runs of ``n`` tokens, each run after an untimed one (a first call pays
    for kernel loading and the allocator's first touches, which a long generation
    does not)."""
    m = _model(vocab, context)
    samplers = {
        "singa_cached": lambda: m.generate([[1]], n, temperature=1.0, seed=0),
        "singa_no_cache": lambda: m.generate([[1]], n, temperature=1.0, seed=0, use_cache=False),
    }
    tokens = {"singa_cached": n, "singa_no_cache": n}
    if use_torch:
        import torch
        from torch_gpt import generate_cached, generate_plain, twin_of

        tw = twin_of(m).eval()
        idx = torch.tensor([[1]])
        samplers["torch_no_cache"] = lambda: generate_plain(tw, idx, n)
        samplers["torch_cached"] = lambda: generate_cached(tw, idx, min(n, context - 1))
        tokens["torch_no_cache"], tokens["torch_cached"] = n, min(n, context - 1)
    timings = _harness.run_blocks(samplers, reps, 1, warmup=1, pause=pause)
    return {k: tokens[k] / t.median for k, t in timings.items()}


def child(which: str, batch: int, context: int, vocab: int, steps: int) -> None:
    """Run ``steps`` training steps in this process and print its peak RSS (JSON)."""
    step = torch_step(batch, context, vocab) if which == "torch" else singa_step(batch, context, vocab, True)
    for _ in range(steps):
        step()
    print(
        json.dumps(
            {"which": which, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6}
        )
    )


def main(argv: list[str] | None = None) -> dict:
    """Run the three measurements; returns the results (and prints them)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--pause", type=float, default=0.3)
    p.add_argument("--gen-tokens", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--json")
    p.add_argument("--child", choices=["singa", "torch"])
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.batch, a.context, a.vocab, a.steps)
        return {}
    torch_version = _harness.load_torch(a.threads, a.no_torch)
    out: dict = {
        "load_before": _harness.uptime(),
        "batch": a.batch,
        "context": a.context,
        "torch": torch_version,
    }
    steps = {
        "singa_eager": singa_step(a.batch, a.context, a.vocab, False),
        "singa_graph": singa_step(a.batch, a.context, a.vocab, True),
    }
    if torch_version:
        steps["torch_eager"] = torch_step(a.batch, a.context, a.vocab)
    timings = _harness.run_blocks(steps, a.reps, a.steps, warmup=a.warmup, pause=a.pause)
    out["step_ms"] = {
        k: {"median": t.median * 1e3, "min": t.minimum * 1e3, "cpu": t.cpu_median * 1e3}
        for k, t in timings.items()
    }
    if not a.no_memory:
        env = _harness.thread_env(a.threads)
        which = ["singa"] + (["torch"] if torch_version else [])
        args = ["--batch", str(a.batch), "--context", str(a.context), "--vocab", str(a.vocab), "--steps", "3"]
        out["peak_mb"] = {
            w: _harness.run_child([__file__, "--child", w, *args], env)["peak_mb"] for w in which
        }
    if a.gen_tokens > 0:
        out["tokens_per_s"] = generation(
            a.vocab, a.context, a.gen_tokens, torch_version is not None, a.reps, a.pause
        )
    out["load_after"] = _harness.uptime()
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
