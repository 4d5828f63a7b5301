"""``singa-train gpt`` on text and ``singa-train generate``: the vocabulary travels in
the checkpoint, training lowers the validation loss, generation is seeded and uses the
checkpoint's characters only, and bad input is a one-line error."""

from __future__ import annotations

import json

import pytest

from singa.cli import lm

SMALL = ["--model-arg", "context=16", "--model-arg", "width=16", "--model-arg", "num_layers=1",
         "--model-arg", "num_heads=2", "--batch-size", "4"]  # fmt: skip


@pytest.fixture
def text_file(tmp_path):
    f = tmp_path / "verse.txt"
    f.write_text("shall i compare thee to a summer's day? thou art more lovely. " * 30, encoding="utf-8")
    return f


def test_train_then_generate(run, tmp_path, text_file):
    ck, log = tmp_path / "ck.zip", tmp_path / "log.jsonl"
    r = run(
        "gpt",
        "--data",
        f"text:{text_file}",
        "--max-steps",
        "40",
        "--lr",
        "3e-3",
        "--checkpoint",
        ck,
        "--log",
        log,
        *SMALL,
    )
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows[-1]["step"] == 40 and rows[-1]["val_loss"] < rows[0]["val_loss"] < 4.0
    model, vocab, meta = lm.load_lm(str(ck))
    assert vocab.chars == "".join(sorted(set(text_file.read_text())))
    assert meta["model"]["context"] == 16 and model.context == 16
    g1 = run("generate", ck, "--prompt", "shall", "--max-tokens", "20", "--seed", "3", "--top-k", "5")
    g2 = run("generate", ck, "--prompt", "shall", "--max-tokens", "20", "--seed", "3", "--top-k", "5")
    assert g1.exit_code == 0, g1.stderr
    out = g1.stdout.rstrip("\n")
    assert out == g2.stdout.rstrip("\n") and out.startswith("shall") and len(out) == 25
    assert set(out) <= set(vocab.chars)
    plain = run("generate", ck, "--prompt", "shall", "--max-tokens", "8", "--temperature", "0", "--no-cache")
    cached = run("generate", ck, "--prompt", "shall", "--max-tokens", "8", "--temperature", "0")
    assert plain.stdout == cached.stdout


def test_errors(run, tmp_path, text_file):
    r = run("gpt", "--data", "text:/no/such.txt")
    assert r.exit_code == 2 and "no such text file" in r.stderr
    r = run("cnn", "--data", f"text:{text_file}")
    assert r.exit_code == 1 and "trains the gpt model" in r.stderr
    r = run("gpt", "--data", f"text:{text_file}", "--model-arg", "depth=3")
    assert r.exit_code == 1 and "unknown --model-arg depth" in r.stderr
    ck = tmp_path / "ck.zip"
    assert (
        run("gpt", "--data", f"text:{text_file}", "--max-steps", "1", "--checkpoint", ck, *SMALL).exit_code
        == 0
    )
    r = run("gpt", "--data", f"text:{text_file}", "--model-arg", "width=32", "--resume", ck)
    assert r.exit_code == 1 and "cannot resume from" in r.stderr  # another model than the checkpoint's
    r = run("generate", ck, "--prompt", "QZ")
    assert r.exit_code == 1 and "not in the vocabulary" in r.stderr


@pytest.mark.parametrize("stop", [26, 30])  # an epoch's end, mid-epoch
def test_resume_is_bitwise_an_uninterrupted_run(run, tmp_path, text_file, stop):
    from cli_helpers import assert_same_arrays

    common = [
        "gpt",
        "--data",
        f"text:{text_file}",
        "--epochs",
        "2",
        "--seed",
        "5",
        "--model-arg",
        "dropout=0.1",
        *SMALL,
    ]
    assert run(*common, "--checkpoint", "full.zip").exit_code == 0
    r = run(*common, "--max-steps", stop, "--checkpoint", "part.zip")
    assert r.exit_code == 0, r.stderr
    r = run("--resume", "part.zip")  # the settings come from the checkpoint
    assert r.exit_code == 0, r.output + r.stderr
    assert f"resumed from part.zip at step {stop}" in r.stdout
    assert lm.load_lm(str(tmp_path / "part.zip"))[2]["step"] == 52  # 26 steps an epoch
    assert assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip") > 0


def test_checkpoint_dir_save_every_and_resume_auto(run, tmp_path, text_file):
    from cli_helpers import assert_same_arrays

    from singa import checkpoint

    common = ["gpt", "--data", f"text:{text_file}", "--epochs", "2", "--seed", "6", *SMALL]
    assert run(*common, "--checkpoint-dir", "full").exit_code == 0
    part = [*common, "--checkpoint-dir", "part", "--save-every", "10", "--keep", "2"]
    r = run(*part, "--max-steps", "33")
    assert r.exit_code == 0, r.output + r.stderr
    index = json.loads((tmp_path / "part" / "checkpoints.json").read_text())["checkpoints"]
    assert [c["step"] for c in index] == [30, 33]  # saves at 10, 20, 26 (an epoch), 30, 33; keep 2
    r = run(*part, "--resume", "auto")  # the same command, resubmitted
    assert r.exit_code == 0, r.output + r.stderr
    assert "resumed from" in r.stdout and "at step 33" in r.stdout
    full, done = checkpoint.newest_valid(tmp_path / "full"), checkpoint.newest_valid(tmp_path / "part")
    assert full[0] == done[0] == 52
    assert assert_same_arrays(full[1], done[1]) > 0


def test_evaluate_and_export_a_text_runs_checkpoint(run, tmp_path, text_file):
    import numpy as np

    from singa import tensor

    ck = tmp_path / "ck.zip"
    args = ["gpt", "--data", f"text:{text_file}", "--max-steps", "30", "--checkpoint", ck, "--log", "l.jsonl"]
    assert run(*args, *SMALL).exit_code == 0
    r = run("evaluate", ck, "--json", "--batch-size", "4")
    assert r.exit_code == 0, r.output + r.stderr
    res = json.loads(r.stdout)
    assert res["model"] == "gpt" and res["split"] == "val" and res["perplexity"] > 1
    # every window of the validation text, against the model's own loss on them
    model, vocab, meta = lm.load_lm(str(ck))
    data = lm.text.load_text(str(text_file), val_fraction=0.1)
    want = lm.validate(model, data.val, 4, model.context, None, None)
    assert res["loss"] == want
    r = run("export", ck, "--onnx", tmp_path / "gpt.onnx")
    assert r.exit_code == 0, r.output + r.stderr
    try:
        import onnxruntime as ort
    except Exception:
        pytest.skip("onnxruntime is not installed")
    sess = ort.InferenceSession(str(tmp_path / "gpt.onnx"), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for b, n in ((1, 5), (2, 16)):  # both axes dynamic
        ids = np.random.default_rng(n).integers(0, len(vocab), (b, n)).astype(np.int64)
        (got,) = sess.run(None, {name: ids})
        want = model(tensor.from_numpy(ids)).to_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_gpt_defaults_to_the_bundled_text(run):
    r = run("gpt", "--max-steps", "1", "--val-steps", "1", *SMALL)
    assert r.exit_code == 0, r.stderr
    assert "tinyshakespeare (bundled): 65 characters" in r.stdout
