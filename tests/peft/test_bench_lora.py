"""bench/bench_lora.py runs its smallest configuration and reports both modes: LoRA
trains fewer values, keeps optimizer slots only for the adapters and writes a smaller
file (counts and sizes, no clock)."""

import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)

import bench_lora  # noqa: E402
import pytest  # noqa: E402


def test_child_rows_compare_lora_with_full_fine_tuning():
    full = bench_lora.child("full", "mlp", 2, 1, 2, "*", "adam")
    lora = bench_lora.child("lora", "mlp", 2, 1, 2, "*", "adam")
    assert full["trainable"] == full["total"]  # every state of the zoo MLP trains
    assert lora["total"] == full["total"] + lora["trainable"]  # the base plus the adapters
    assert lora["trainable"] < full["trainable"] / 10
    assert lora["optimizer_slots"] == 2 * 4  # Adam's m and v for each of the 4 adapter tensors
    assert lora["file_bytes"] < full["file_bytes"] / 10
    assert lora["peak_mb"] >= lora["built_mb"] > 0


@pytest.mark.slow  # two fresh interpreters
def test_main_prints_the_table(capsys):
    assert bench_lora.main(["--model", "mlp", "--batch", "2", "--steps", "1", "--r", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| full |") == 1 and out.count("\n| lora |") == 1
    assert "LoRA peak RSS - full peak RSS" in out
