"""singa-train on your own data: image folders (PNG and JPEG, RGB and grayscale), npz and
CSV files; training to a stated accuracy, evaluate, resume, predict, bad data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_same_arrays, error_lines, run_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from image_data import make_image_folder, make_table  # noqa: E402

FAST = ["--batch-size", "16", "--no-graph", "--no-plot"]


@pytest.fixture
def folder(tmp_path):
    """Three classes told apart only by where the bright pixels are; PNG and JPEG."""
    return make_image_folder(tmp_path / "shapes", per_class=30, size=12)


def test_image_folder_trains_evaluates_and_predicts(run, folder, tmp_path):
    r = run(
        "mlp",
        "--data",
        f"imagefolder:{folder}",
        "--epochs",
        "3",
        "--val-split",
        "0.2",
        *FAST,
        "--checkpoint",
        "ck.zip",
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "on imagefolder:" in r.stdout and "(72 train / 18 val, 3x12x12, 3 classes)" in r.stdout
    st = run_state(tmp_path / "ck.zip")
    assert st["dataset"]["class_names"] == ["circle", "square", "triangle"]
    assert st["state"]["history"][-1]["val_acc"] >= 0.9
    r = run("evaluate", "ck.zip", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    res = json.loads(r.stdout)
    assert res["samples"] == 18 and res["accuracy"] >= 0.9
    held = make_image_folder(
        tmp_path / "held", classes=("square", "triangle"), per_class=5, seed=9, patterns=(1, 2)
    )
    r = run("evaluate", "ck.zip", "--data", str(held), "--json")  # another folder, a class missing
    assert r.exit_code == 0, r.output + r.stderr
    res = json.loads(r.stdout)
    assert res["samples"] == 10 and res["split"] == "all" and res["accuracy"] >= 0.9
    images = sorted((folder / "square").glob("*"))[:4]
    r = run("predict", "ck.zip", *images, str(folder / "circle"), "--top-k", "2", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    recs = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(recs) == 4 + 30
    assert all(len(rec["predictions"]) == 2 for rec in recs)
    p = recs[0]["predictions"]
    assert p[0]["probability"] >= p[1]["probability"] and 0.99 <= sum(q["probability"] for q in p) + 0.01
    right = sum(rec["predictions"][0]["class"] == Path(rec["input"]).parent.name for rec in recs)
    assert right >= 0.9 * len(recs)
    r = run("predict", "ck.zip", images[0])
    assert r.exit_code == 0 and r.stdout.startswith(f"{images[0]}: ") and "%" in r.stdout


def test_grayscale_train_and_val_folders_with_a_forced_size(run, tmp_path):
    make_image_folder(tmp_path / "g" / "train", per_class=20, size=12, channels=1)
    make_image_folder(tmp_path / "g" / "val", per_class=6, size=12, channels=1, seed=3)
    r = run(
        "cnn", "--data", str(tmp_path / "g"), "--image-size", "16", "--epochs", "3", "--lr", "0.02", *FAST
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "(60 train / 18 val, 1x16x16, 3 classes)" in r.stdout
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("epoch 3/3")][0]
    assert float(last.split("val loss")[1].split("acc")[1].split("%")[0]) >= 80.0


def test_resume_from_a_user_data_checkpoint_equals_an_uninterrupted_run(run, folder, tmp_path):
    args = ["mlp", "--data", str(folder), "--epochs", "2", *FAST]
    assert run(*args, "--checkpoint", "full.zip").exit_code == 0
    r = run(*args, "--checkpoint", "part.zip", "--max-steps", "7", "--workers", "2")
    assert r.exit_code == 0, r.output + r.stderr
    r = run("--resume", "part.zip")  # the model, data and data options come from the checkpoint
    assert r.exit_code == 0, r.output + r.stderr
    assert assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip") > 0


def test_npz_data(run, tmp_path):
    rng = np.random.default_rng(0)
    x, y = make_table(300)
    np.savez(tmp_path / "t.npz", x=x.astype(np.float32), y=y, class_names=np.array(["low", "mid", "high"]))
    r = run("mlp", "--data", "npz:t.npz", "--epochs", "4", *FAST, "--checkpoint", "ck.zip")
    assert r.exit_code == 0, r.output + r.stderr
    assert run_state(tmp_path / "ck.zip")["state"]["history"][-1]["val_acc"] >= 0.85
    assert rng is not None
    np.savez(tmp_path / "q.npz", x=x[:5].astype(np.float32))
    r = run("predict", "ck.zip", "q.npz", "--top-k", "1")
    assert r.exit_code == 0, r.output + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and lines[0].startswith("q.npz[0]: ")
    names = ["low", "mid", "high"]
    assert sum(ln.split(": ")[1].split()[0] == names[t] for ln, t in zip(lines, y[:5])) >= 4


def test_csv_data(run, tmp_path):
    x, y = make_table(600, seed=1)
    rows = ["a,b,label,c,d"] + [f"{r[0]:.5f},{r[1]:.5f},k{t},{r[2]:.5f},{r[3]:.5f}" for r, t in zip(x, y)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    r = run(
        "mlp", "--data", "csv:t.csv", "--target", "label", "--epochs", "6", *FAST, "--checkpoint", "ck.zip"
    )
    assert r.exit_code == 0, r.output + r.stderr
    st = run_state(tmp_path / "ck.zip")
    assert st["dataset"]["class_names"] == ["k0", "k1", "k2"] and st["dataset"]["num_channels"] == 4
    assert st["state"]["history"][-1]["val_acc"] >= 0.85


@pytest.mark.parametrize(
    "make,match",
    [
        ("corrupt", "cannot read the image .*img000.png"),
        ("empty_class", "no images in the class folder .*empty"),
        ("single", "only one class"),
        ("csv_text", r"t.csv: row 3, column 'b': 'oops' is not a number"),
        ("csv_missing", r"t.csv: row 2, column 'a': missing value"),
    ],
)
def test_bad_data_is_one_line_naming_the_problem(run, tmp_path, make, match):
    import re

    spec = str(tmp_path / "f")
    if make == "corrupt":
        make_image_folder(tmp_path / "f", per_class=3)
        (tmp_path / "f" / "square" / "img000.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    elif make == "empty_class":
        make_image_folder(tmp_path / "f", per_class=3)
        (tmp_path / "f" / "empty").mkdir()
    elif make == "single":
        make_image_folder(tmp_path / "f", classes=("one",), per_class=3)
    else:
        text = "a,b,y\n1,2,0\n1,oops,1\n" if make == "csv_text" else "a,b,y\n,2,0\n1,2,1\n"
        (tmp_path / "t.csv").write_text(text)
        spec = "csv:t.csv"
    r = run("mlp", "--data", spec, "--epochs", "1", *FAST, "--checkpoint", "ck.zip")
    assert r.exit_code == 1, r.output
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and re.search(match, lines[0]), lines
    assert not (tmp_path / "ck.zip").exists()


def test_skip_bad_counts_and_trains(run, tmp_path):
    make_image_folder(tmp_path / "f", per_class=6)
    (tmp_path / "f" / "square" / "img000.png").write_bytes(b"not an image")
    r = run("mlp", "--data", str(tmp_path / "f"), "--epochs", "1", *FAST, "--batch-size", "4", "--skip-bad")
    assert r.exit_code == 0, r.output + r.stderr
    assert "skipped 1 unreadable image" in r.stderr and "img000.png" in r.stderr
    assert "(14 train / 3 val" in r.stdout


def test_bad_data_specs_are_usage_errors(run, tmp_path):
    r = run("mlp", "--data", "imagefolder:nowhere")
    assert r.exit_code == 2 and "no such folder" in r.stderr
    r = run("mlp", "--data", "nonsense")
    assert r.exit_code == 2 and "imagefolder:DIR" in r.stderr
    r = run("mlp", "--data", "npz:missing.npz")
    assert r.exit_code == 2 and "no such npz file" in r.stderr


def test_list_names_the_own_forms(run):
    r = run("--list")
    assert r.exit_code == 0 and "imagefolder:DIR" in r.stdout and "file.py:Name" in r.stdout
