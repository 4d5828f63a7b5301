"""Peak memory of LoRA fine-tuning against full fine-tuning, and the trainable
fraction, for a zoo model (each run in a fresh process).

    python bench/bench_lora.py [--model resnet18] [--batch 8] [--steps 3] [--r 4]
                               [--target '*'] [--optimizer adam]
    python bench/bench_lora.py --model gpt --width 256 --seq 64   # the zoo's GPT, tokens

For each mode (``full``: every parameter trains; ``lora``: ``get_peft_model`` with
``LinearLoraConfig(r, lora_alpha=2r, target_layers=[target])``, the base frozen) a
child process builds the model, compiles it (graph mode), runs the steps and reports
its peak RSS (``ru_maxrss``) after building and at the end, the trainable and total
parameter counts, and the sizes of a full checkpoint and of an adapter file. The
saving in memory is what freezing removes: the gradients and optimizer slots of the
frozen weights (activations are the same in both modes, plus the adapters' own).
Figures depend on the machine's load only through time, not memory; state the load
(``uptime``) with any time you quote.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def rss_mb() -> float:
    """Peak RSS of this process so far, MB (10^6 bytes; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def _model_and_batch(model: str, batch: int, width: int, seq: int) -> tuple:
    """The zoo model and one batch (images and labels, or GPT's tokens and next tokens)."""
    import numpy as np

    from singa import tensor, zoo

    rng = np.random.default_rng(0)
    if model == "gpt":
        m = zoo.create("gpt", num_classes=256, width=width, context=seq)
        tokens = rng.integers(0, 256, (batch, seq + 1)).astype(np.int32)
        return m, tensor.from_numpy(tokens[:, :-1]), tensor.from_numpy(tokens[:, 1:])
    shape = (1, 28, 28) if model in ("cnn", "mlp") else (3, 32, 32)
    m = zoo.create(model, num_classes=10, num_channels=shape[0], image_size=shape[1:])
    tx = tensor.from_numpy(rng.standard_normal((batch, *shape)).astype(np.float32))
    return m, tx, tensor.from_numpy(rng.integers(0, 10, batch).astype(np.int32))


def child(
    mode: str,
    model: str,
    batch: int,
    steps: int,
    r: int,
    target: str,
    optimizer: str,
    width: int = 128,
    seq: int = 64,
) -> dict:
    """One run in this process; returns the JSON row."""
    from singa import device, opt
    from singa.peft import LinearLoraConfig, get_peft_model

    device.get_default_device().set_rand_seed(0)
    m, tx, ty = _model_and_batch(model, batch, width, seq)
    m.compile([tx], is_train=False)  # the "pretrained" base: its weights exist
    run = m
    if mode == "lora":
        run = get_peft_model(m, LinearLoraConfig(r=r, lora_alpha=2 * r, target_layers=[target]))
    run.set_optimizer(opt.Adam(1e-3) if optimizer == "adam" else opt.SGD(0.01, momentum=0.9))
    run.compile([tx], is_train=True, use_graph=True)
    built = rss_mb()
    for _ in range(steps):
        run(tx, ty)
    states = list(m.get_states().values())
    trainable = sum(t.size() for t in run.get_params().values())
    row = {
        "mode": mode,
        "built_mb": built,
        "peak_mb": rss_mb(),
        "trainable": trainable,
        "total": sum(t.size() for t in states),  # every state value, adapters included
        "optimizer_slots": len(run.optimizer.get_states(run.get_params()).get("slots", {})),
    }
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ck.zip")
        if mode == "lora":
            row["file_bytes"] = run.save_adapters(path).nbytes
        else:
            m.save_states(path)
            row["file_bytes"] = os.path.getsize(path)
    return row


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--r", type=int, default=4)
    p.add_argument("--target", default="*")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--width", type=int, default=128, help="gpt: the model width")
    p.add_argument("--seq", type=int, default=64, help="gpt: the sequence length")
    p.add_argument("--child", choices=["full", "lora"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run both modes in child processes and print a table (or, as a child, one JSON line)."""
    a = parse(argv)
    if a.child:
        row = child(a.child, a.model, a.batch, a.steps, a.r, a.target, a.optimizer, a.width, a.seq)
        print(json.dumps(row))
        return 0
    import _harness

    args = ["--model", a.model, "--batch", str(a.batch), "--steps", str(a.steps), "--r", str(a.r)]
    args += ["--target", a.target, "--optimizer", a.optimizer, "--width", str(a.width), "--seq", str(a.seq)]
    rows = [
        _harness.run_child([os.path.abspath(__file__), *args, "--child", mode]) for mode in ("full", "lora")
    ]
    what = f"{a.model} (width {a.width}, {a.seq} tokens)" if a.model == "gpt" else a.model
    print(f"# {what}, batch {a.batch}, {a.steps} steps, {a.optimizer}, LoRA r={a.r} on {a.target!r}")
    head = ["mode", "trainable", "all states", "trainable %", "optimizer slots"]
    head += ["peak RSS built (MB)", "peak RSS end (MB)", "file (KB)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        cells = [row["mode"], f"{row['trainable']:,}", f"{row['total']:,}"]
        cells += [f"{100 * row['trainable'] / row['total']:.2f}", str(row["optimizer_slots"])]
        cells += [f"{row['built_mb']:.0f}", f"{row['peak_mb']:.0f}", f"{row['file_bytes'] / 1e3:.1f}"]
        print("| " + " | ".join(cells) + " |")
    full, lora = rows
    print(f"LoRA peak RSS - full peak RSS: {lora['peak_mb'] - full['peak_mb']:+.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
