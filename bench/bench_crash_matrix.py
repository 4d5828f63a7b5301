"""Crash matrix of CheckpointManager: SIGKILL at random moments of synchronous and
asynchronous saves, then check the folder.

Each trial starts a worker process that continues the folder's run (restoring its
newest valid checkpoint) and saves every step (keep_last=2, with an aux array of
``--blob-mb`` MB so that most of the time is spent writing); after a random delay the
worker is killed with SIGKILL. The trial then checks:

- every checkpoint the folder lists reads back whole and holds its own step;
- the newest valid one restores bitwise the states of an uninterrupted run at its step
  (the reference is computed here by training a fresh model that many steps);
- after one more step and save, the folder holds exactly the index and ``keep_last``
  files: no stray temporaries, retention exact.

The trials chain: each worker resumes what the previous one left. Usage::

    python bench/bench_crash_matrix.py --trials 200          # 100 sync + 100 async
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from singa import autograd, device, model, opt  # noqa: E402
from singa.checkpoint import CheckpointManager, newest_valid, read_arrays  # noqa: E402
from singa.checkpoint.manager import scan  # noqa: E402
from singa.tensor import Tensor  # noqa: E402

KEEP = 2


class Net(model.Model):
    """A small MLP (the states whose resume is checked)."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.w0 = Tensor(
            data=rng.standard_normal((6, 16)).astype(np.float32) * 0.3, requires_grad=True, stores_grad=True
        )
        self.b0 = Tensor(data=np.zeros(16, np.float32), requires_grad=True, stores_grad=True)
        self.w1 = Tensor(
            data=rng.standard_normal((16, 3)).astype(np.float32) * 0.3, requires_grad=True, stores_grad=True
        )

    def forward(self, x: Tensor) -> Tensor:
        return autograd.matmul(
            autograd.relu(autograd.add_bias(autograd.matmul(x, self.w0), self.b0)), self.w1
        )

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple:
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def build() -> Net:
    """A fresh model with its optimizer, compiled (eager)."""
    device.get_default_device().set_rand_seed(0)
    m = Net()
    m.set_optimizer(opt.SGD(0.05, momentum=0.9))
    m.compile([Tensor((4, 6))], is_train=True, use_graph=False)
    return m


def train_step(m: Net, step: int) -> None:
    """Training step ``step`` (1-based) on its own seeded batch."""
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.integers(0, 3, 4).astype(np.int32)
    m(Tensor(data=x), Tensor(data=y, requires_grad=False))


def states(m: Net) -> dict:
    """The model's states as numpy copies."""
    return {k: v.to_numpy().copy() for k, v in m.get_states().items()}


def reference(step: int) -> dict:
    """The states of an uninterrupted run after ``step`` steps."""
    m = build()
    for s in range(1, step + 1):
        train_step(m, s)
    return states(m)


def blob(step: int, mb: float) -> np.ndarray:
    """The aux array saved with ``step`` (its value is the step)."""
    return np.full(max(1, int(mb * (1 << 20)) // 4), step, np.float32)


def worker(folder: str, async_save: bool, mb: float) -> None:
    """Continue the folder's run, saving every step, until killed."""
    m = build()
    mgr = CheckpointManager(folder, keep_last=KEEP, async_save=async_save)
    restored = mgr.restore(m)
    step = restored.step if restored else 0
    print("ready", flush=True)
    while True:
        step += 1
        train_step(m, step)
        mgr.save(step, m, aux_states={"blob": blob(step, mb)})


def _start(folder: str, async_save: bool, mb: float) -> subprocess.Popen:
    code = (
        f"import sys; sys.path.insert(0, {HERE!r}); import bench_crash_matrix as b; "
        "b.worker(sys.argv[1], sys.argv[2] == '1', float(sys.argv[3]))"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", code, folder, "1" if async_save else "0", str(mb)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def check_folder(folder: str, mb: float) -> tuple[int, list[str]]:
    """Check a killed worker's folder; returns (newest valid step, problems)."""
    problems = []
    for r in scan(folder):
        arrays = read_arrays(os.path.join(folder, r.file))
        if not np.all(arrays["blob"] == r.step):
            problems.append(f"step {r.step}: the file holds another step's data")
    found = newest_valid(folder)
    if found is None:
        return 0, problems
    step, _, skipped = found
    problems += [f"damaged: {s}" for s in skipped]
    m = build()
    CheckpointManager(folder, keep_last=KEEP).restore(m)
    ref = reference(step)
    got = states(m)
    problems += [
        f"step {step}: {k} differs from the uninterrupted run"
        for k in ref
        if not np.array_equal(ref[k], got[k])
    ]
    return step, problems


def save_after(folder: str, step: int, mb: float) -> list[str]:
    """One more step and save; then exactly the index and the kept files remain."""
    m = build()
    mgr = CheckpointManager(folder, keep_last=KEEP)
    if step:
        mgr.restore(m)
    train_step(m, step + 1)
    mgr.save(step + 1, m, aux_states={"blob": blob(step + 1, mb)})
    names = sorted(os.listdir(folder))
    expected = sorted(["checkpoints.json"] + [f"ckpt-{s:09d}.zip" for s in mgr.all()])
    problems = [] if names == expected else [f"after the next save the folder holds {names}"]
    if len(mgr.all()) != min(KEEP, step + 1):
        problems.append(f"retention kept {mgr.all()}")
    return problems


def trial(folder: str, async_save: bool, mb: float, max_delay: float, rng: random.Random) -> dict:
    """One kill and its checks."""
    p = _start(folder, async_save, mb)
    line = p.stdout.readline() if p.stdout else ""
    if line.strip() != "ready":
        p.kill()
        err = p.stderr.read() if p.stderr else ""
        return {"ok": False, "problems": [f"worker failed to start: {err[-2000:]}"], "stray": 0, "step": 0}
    time.sleep(rng.uniform(0.0, max_delay))
    p.kill()
    p.wait()
    stray = sum(1 for n in os.listdir(folder) if ".singa-tmp." in n)
    step, problems = check_folder(folder, mb)
    problems += save_after(folder, step, mb)
    return {"ok": not problems, "problems": problems, "stray": stray, "step": step + 1}


def run_matrix(
    trials: int, mb: float = 2.0, max_delay: float = 1.0, seed: int = 0, folder: str | None = None
) -> dict:
    """``trials`` kills, alternating sync and async saves (each mode its own chained
    folder); returns counts and every problem found."""
    rng = random.Random(seed)
    out = {"trials": 0, "failed": 0, "stray_found": 0, "problems": [], "final_step": {}}
    with tempfile.TemporaryDirectory(prefix="singa-crash-") as tmp:
        base = folder or tmp
        for i in range(trials):
            async_save = i % 2 == 1
            d = os.path.join(base, "async" if async_save else "sync")
            os.makedirs(d, exist_ok=True)
            r = trial(d, async_save, mb, max_delay, rng)
            out["trials"] += 1
            out["failed"] += 0 if r["ok"] else 1
            out["stray_found"] += r["stray"]
            out["problems"] += [
                f"trial {i} ({'async' if async_save else 'sync'}): {p}" for p in r["problems"]
            ]
            out["final_step"]["async" if async_save else "sync"] = r["step"]
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the matrix and print a summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--blob-mb", type=float, default=2.0)
    ap.add_argument("--max-delay", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    r = run_matrix(a.trials, a.blob_mb, a.max_delay, a.seed)
    print(
        f"{r['trials']} SIGKILL trials (half sync, half async saves), {r['failed']} failed; "
        f"{r['stray_found']} kills left a temporary file (killed mid-write), all removed by the next save; "
        f"runs reached steps {r['final_step']} "
        f"({time.perf_counter() - t0:.0f}s; load {os.getloadavg()[0]:.1f})"
    )
    for p in r["problems"]:
        print("  " + p)
    sys.exit(1 if r["failed"] else 0)


if __name__ == "__main__":
    main()
