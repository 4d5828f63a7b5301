"""singa-train --precision: mixed and float16 runs, exact resume of a mixed run."""

from __future__ import annotations

from cli_helpers import TINY, assert_same_arrays, run_state

from singa import checkpoint


def test_mixed_run_resumes_bitwise_with_its_precision(run, tmp_path):
    common = [*TINY, "--epochs", "1", "--seed", "3"]
    r = run(*common, "--precision", "mixed", "--max-steps", "12", "--checkpoint", "full.zip")
    assert r.exit_code == 0, r.output + r.stderr
    assert "mixed precision" in r.stdout
    r = run(*common, "--precision", "mixed", "--max-steps", "5", "--checkpoint", "part.zip")
    assert r.exit_code == 0, r.output
    assert run_state(tmp_path / "part.zip")["config"]["precision"] == "mixed"
    r = run("--resume", "part.zip", "--max-steps", "12")  # the precision comes from the checkpoint
    assert r.exit_code == 0, r.output + r.stderr
    assert "mixed precision" in r.stdout
    assert assert_same_arrays(tmp_path / "full.zip", tmp_path / "part.zip") == 8
    scaler = checkpoint.read(str(tmp_path / "part.zip")).optimizer["states"]["loss_scaler"]
    assert scaler["precision"] == "mixed" and scaler["growth_tracker"] == 12


def test_float16_run_stores_float16_parameters(run, tmp_path):
    r = run(*TINY, "--epochs", "1", "--precision", "float16", "--max-steps", "3", "--checkpoint", "h.zip")
    assert r.exit_code == 0, r.output + r.stderr
    arrays = checkpoint.read_arrays(str(tmp_path / "h.zip"))
    assert {str(a.dtype) for k, a in arrays.items() if not k.startswith("aux")} == {"float16"}


def test_unknown_precision_is_a_usage_error(run):
    r = run(*TINY, "--precision", "bfloat16")
    assert r.exit_code == 2 and "bfloat16" in r.stderr


def test_evaluate_and_export_a_float16_checkpoint(run, tmp_path):
    r = run(*TINY, "--epochs", "1", "--precision", "float16", "--max-steps", "2", "--checkpoint", "h.zip")
    assert r.exit_code == 0, r.output + r.stderr
    r = run("evaluate", "h.zip")
    assert r.exit_code == 0, r.output + r.stderr
    r = run("export", "h.zip", "--onnx", "h.onnx")
    assert r.exit_code == 0, r.output + r.stderr
    import onnx

    assert {i.data_type for i in onnx.load(str(tmp_path / "h.onnx")).graph.initializer} == {1}  # float32
