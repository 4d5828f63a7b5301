"""singa-train's failures: usage errors exit 2; missing data, a mismatched checkpoint,
an unwritable path exit 1 with one line on stderr and no traceback; --debug shows it."""

from __future__ import annotations

import pytest
from cli_helpers import TINY, error_lines

from singa import device
from singa.cli.errors import CliError, one_line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["vgg"], "Invalid value for 'MODEL'"),
        (["--checkpoint", "."], "is a directory"),
        (["--epochs", "0"], "Invalid value for '--epochs'"),
        (["--optimizer", "lbfgs"], "Invalid value for '--optimizer'"),
        (["--lr", "-1"], "Invalid value for '--lr'"),
        (["--momentum", "1.5"], "Invalid value for '--momentum'"),
        (["--lr", "nan"], "Invalid value for '--lr': 'nan' is not a finite number"),
        (["--lr", "inf"], "Invalid value for '--lr': 'inf' is not a finite number"),
        (["--momentum", "nan"], "Invalid value for '--momentum': 'nan' is not a finite number"),
        (["--weight-decay", "inf"], "Invalid value for '--weight-decay': 'inf' is not a finite number"),
        (
            ["--data-dir", "no/such/folder"],
            "Invalid value for '--data-dir': Directory 'no/such/folder' does not",
        ),
        (["evaluate", "x.zip", "--data-dir", "nope"], "does not exist"),
        (["--val-steps", "0"], "Invalid value for '--val-steps'"),
        (["--data", "imagenet"], "Invalid value for '--data'"),
        (["--device", "tpu"], "Invalid value for '--device'"),
        (["--no-such-option"], "No such option"),
        (["--resume", "missing.zip"], "does not exist"),
        (["--config", "missing.toml"], "does not exist"),
        (["-q", "-v"], "exclude each other"),
        (["--plot", "p.png", "--no-plot"], "exclude each other"),
        (["evaluate"], "Missing argument 'CHECKPOINT'"),
    ],
)
def test_usage_errors_exit_2(run, args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_export_needs_onnx_path(run, tmp_path):
    (tmp_path / "ck.zip").write_bytes(b"x")
    r = run("export", "ck.zip")
    assert r.exit_code == 2 and "--onnx" in r.stderr


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("epochz = 3\n", "unknown setting(s) epochz"),
        ("epochs = 0\n", "epochs = 0"),
        ('optimizer = "lbfgs"\n', "optimizer = 'lbfgs'"),
        ('graph = "yes"\n', "not a boolean"),
        ("epochs = [\n", "not valid TOML"),
        ("", "holds no settings"),
        ("# only a comment\n", "holds no settings"),
        ("lr = nan\n", "lr = nan: nan is not a finite number"),
    ],
)
def test_bad_config_files_are_usage_errors(run, tmp_path, toml, message):
    (tmp_path / "c.toml").write_text(toml)
    r = run("--config", "c.toml")
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Invalid value for '--config'" in r.stderr


def _one_error_line(r) -> str:
    assert r.exit_code == 1, (r.exit_code, r.output, r.stderr)
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in r.stderr
    return lines[0]


def test_missing_data_is_one_line(run, tmp_path):
    line = _one_error_line(run("cnn", "--data", "mnist", "--data-dir", tmp_path, "--no-download"))
    assert "dataset 'mnist' not found" in line and "--no-download" in line


def test_missing_data_details_with_verbose(run, tmp_path):
    r = run("cnn", "--data", "mnist", "--data-dir", tmp_path, "--no-download", "-v")
    assert r.exit_code == 1
    assert "It looked in:" in r.stderr and "To get the files" in r.stderr
    assert "Traceback" not in r.stderr


def test_unwritable_checkpoint_path(run, tmp_path):
    (tmp_path / "afile").write_text("")
    line = _one_error_line(run(*TINY, "--checkpoint", "afile/ck.zip"))
    assert "cannot write the checkpoint afile/ck.zip" in line


@pytest.mark.parametrize("opt", ["--log", "--export-onnx"])
def test_unwritable_outputs(run, tmp_path, opt):
    (tmp_path / "afile").write_text("")
    line = _one_error_line(run(*TINY, opt, "afile/x/out"))
    assert "cannot write the" in line


def test_output_path_that_is_a_folder_in_a_config_file(run, tmp_path):
    (tmp_path / "d.zip").mkdir()
    (tmp_path / "c.toml").write_text('checkpoint = "d.zip"\n')
    r = run(*TINY, "--config", "c.toml")
    assert r.exit_code == 2 and "checkpoint = 'd.zip'" in r.stderr and "is a directory" in r.stderr


def test_checkpoint_of_another_model_does_not_resume(run, tmp_path):
    assert run(*TINY, "--max-steps", "2", "--checkpoint", "mlp.zip").exit_code == 0
    line = _one_error_line(run("cnn", "--data", "synthetic", "--resume", "mlp.zip"))
    assert "checkpoint mlp.zip does not match cnn on synthetic" in line
    assert "(-v for details)" in line


def test_checkpoint_of_another_model_does_not_evaluate(run, tmp_path):
    assert run(*TINY, "--max-steps", "2", "--checkpoint", "mlp.zip").exit_code == 0
    line = _one_error_line(run("evaluate", "mlp.zip", "--model", "cnn"))
    assert "does not match cnn" in line
    line = _one_error_line(run("export", "mlp.zip", "--model", "resnet8", "--onnx", "x.onnx"))
    assert "does not match resnet8" in line


def test_resume_needs_a_singa_train_checkpoint(run, tmp_path):
    from singa import zoo
    from singa.tensor import from_numpy

    m = zoo.create("mlp")
    m.compile([from_numpy(__import__("numpy").zeros((1, 1, 28, 28), "float32"))], is_train=False)
    m.save_states(str(tmp_path / "plain.zip"))
    line = _one_error_line(run("mlp", "--data", "synthetic", "--resume", "plain.zip"))
    assert "holds no singa-train run state" in line
    # evaluate works on it once told the model and the data
    r = run("evaluate", "plain.zip", "--model", "mlp", "--data", "synthetic")
    assert r.exit_code == 0, r.output + r.stderr
    line = _one_error_line(run("evaluate", "plain.zip"))
    assert "give --model" in line


def test_corrupt_checkpoint(run, tmp_path):
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04 not really a zip")
    line = _one_error_line(run(*TINY, "--resume", "bad.zip"))
    assert "cannot resume from bad.zip" in line
    line = _one_error_line(run("evaluate", "bad.zip"))
    assert "cannot read the checkpoint bad.zip" in line


def test_changed_batch_size_on_resume(run):
    assert run(*TINY, "--max-steps", "2", "--checkpoint", "ck.zip").exit_code == 0
    r = run("--resume", "ck.zip", "--batch-size", "64")
    line = _one_error_line(r)
    assert "32 steps per epoch, this run has 16" in line


def test_batch_larger_than_the_data(run):
    line = _one_error_line(run("mlp", "--data", "synthetic", "--batch-size", "5000"))
    assert "larger than the 1024 training samples" in line


@pytest.fixture
def small_synthetic(monkeypatch):
    """Make 'synthetic' 8x8 images (too small for the CNN)."""
    from singa import data

    real = data.load

    def load(name, *a, **kw):
        if name == "synthetic":
            return real(name, shape=(1, 8, 8), n=64, n_test=16)
        return real(name, *a, **kw)

    monkeypatch.setattr("singa.cli.common.data.load", load)


def test_cnn_on_too_small_images(run, tmp_path, small_synthetic):
    line = _one_error_line(run("cnn", "--data", "synthetic", "--batch-size", "8"))
    assert "cnn does not fit synthetic (1x8x8)" in line and "at least 16x16" in line


def test_gpu_without_cupy_or_gpu(run):
    if device.get_num_gpus() > 0:
        pytest.skip("a GPU is present")
    line = _one_error_line(run(*TINY, "--device", "gpu"))
    assert "--device gpu" in line


def test_debug_shows_the_exception(run, tmp_path):
    r = run("cnn", "--data", "mnist", "--data-dir", tmp_path, "--no-download", "--debug")
    assert r.exit_code == 1
    assert r.exception is not None and type(r.exception).__name__ == "CliError"


def test_one_line():
    assert one_line(CliError("a\nb")) == "a"
    assert one_line(ValueError("bad thing:\n  detail")) == "bad thing"
    assert one_line(KeyError("k")) == "'k'"
    assert one_line(ZeroDivisionError("x")) == "ZeroDivisionError: x"
    err = FileNotFoundError(2, "No such file or directory", "/x/y")
    assert one_line(err) == "No such file or directory: /x/y"


@pytest.mark.parametrize("opt", [["--optimizer", "adam", "--lr", "1e6"], ["--lr", "1e9"]])
def test_divergence_stops_with_one_line_and_keeps_the_last_good_checkpoint(run, tmp_path, opt):
    """A loss that is not finite, or hundreds of times a uniform guess's, stops the
    run before the next save: the checkpoint written earlier stays as it was."""
    assert run(*TINY, "--max-steps", "32", "--checkpoint", "ck.zip").exit_code == 0
    good = (tmp_path / "ck.zip").read_bytes()
    line = _one_error_line(run(*TINY, "--checkpoint", "ck.zip", *opt))
    assert "training diverged at step" in line and "try a lower --lr" in line
    assert "ck.zip keeps the last good state" in line
    assert (tmp_path / "ck.zip").read_bytes() == good
