"""singa-train --task regression on a CSV file: trains with the mean squared error on
standardised targets, reports MSE and MAE in the target's units (epoch lines, log
records, evaluate), predicts values, resumes exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import assert_same_arrays, run_state

from singa import layer, metrics, opt, tensor, zoo
from singa.cli.regression import TargetScale, Unstandardised

FAST = ["--batch-size", "16", "--no-graph", "--no-plot"]
WEIGHTS = np.array([2.0, -1.0, 0.5, 1.5])


def _table(n: int, seed: int) -> np.ndarray:
    """Features and y = 100 + 8 * (x . w) + noise(0.5): far from standardised."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    y = 100.0 + 8.0 * x @ WEIGHTS + rng.normal(scale=0.5, size=n)
    return np.c_[x, y]


def _write(path, table: np.ndarray) -> None:
    np.savetxt(path, table, delimiter=",", header="a,b,c,d,price", comments="", fmt="%.8g")


@pytest.fixture
def csv(tmp_path):
    _write(tmp_path / "train.csv", _table(480, 0))
    _write(tmp_path / "test.csv", _table(100, 1))
    return tmp_path


def test_regression_trains_evaluates_and_predicts(run, csv):
    args = ["mlp", "--data", "csv:train.csv", "--task", "regression", "--epochs", "8", *FAST]
    r = run(*args, "--checkpoint", "ck.zip", "--log", "log.jsonl")
    assert r.exit_code == 0, r.output + r.stderr
    assert "regression" in r.output and "classes" not in r.output.splitlines()[0]
    assert "mse" in r.output and "mae" in r.output and "acc" not in r.output
    epochs = [json.loads(ln) for ln in (csv / "log.jsonl").read_text().splitlines()]
    epochs = [e for e in epochs if e["event"] == "epoch"]
    assert len(epochs) == 8 and "val_acc" not in epochs[-1] and "train_acc" not in epochs[-1]
    last = epochs[-1]
    test = np.loadtxt(csv / "test.csv", delimiter=",", skiprows=1)
    variance = float(test[:, -1].var())  # about 64 * |w|^2 = 480
    assert last["val_mse"] < 0.05 * variance and last["train_mse"] < 0.05 * variance
    # the loss is the MSE of the standardised target: the MSE over std squared
    std = run_state(csv / "ck.zip")["target_normalization"]["std"]
    assert last["val_loss"] == pytest.approx(last["val_mse"] / std**2, rel=1e-9)

    r = run("predict", "ck.zip", "test.csv", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    recs = [json.loads(ln) for ln in r.output.splitlines()]
    assert [x["input"] for x in recs] == [f"test.csv[{i}]" for i in range(100)]
    pred = np.array([x["prediction"] for x in recs])
    err = pred - test[:, -1]
    assert float(np.mean(err**2)) < 0.05 * variance  # in the target's units

    r = run("evaluate", "ck.zip", "--data", "csv:test.csv", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    res = json.loads(r.output)
    assert res["samples"] == 100 and "accuracy" not in res
    assert res["mse"] == pytest.approx(float(np.mean(err**2)), rel=1e-5)
    assert res["mae"] == pytest.approx(float(np.mean(np.abs(err))), rel=1e-5)
    r = run("evaluate", "ck.zip")  # the validation split, as in the last epoch's line
    assert r.exit_code == 0 and f"MSE {last['val_mse']:.6g}" in r.output

    np.savez(csv / "x.npz", x=test[:5, :4].astype(np.float32))  # features only
    r = run("predict", "ck.zip", "x.npz")
    assert r.exit_code == 0, r.output + r.stderr
    shown = [float(ln.split(": ")[1]) for ln in r.output.splitlines()]
    np.testing.assert_allclose(shown, pred[:5], rtol=1e-5)


def test_regression_resume_equals_an_uninterrupted_run(run, csv):
    args = ["mlp", "--data", "csv:train.csv", "--task", "regression", "--epochs", "2", *FAST]
    assert run(*args, "--checkpoint", "full.zip").exit_code == 0
    r = run(*args, "--checkpoint", "part.zip", "--max-steps", "33")  # mid-epoch 2
    assert r.exit_code == 0, r.output + r.stderr
    r = run("--resume", "part.zip")
    assert r.exit_code == 0, r.output + r.stderr
    assert assert_same_arrays(csv / "full.zip", csv / "part.zip") > 0
    full, part = run_state(csv / "full.zip"), run_state(csv / "part.zip")
    assert full["state"]["history"] == [
        {**rec, "time_s": a["time_s"], "eval_time_s": a["eval_time_s"], "samples_per_s": a["samples_per_s"]}
        for rec, a in zip(part["state"]["history"], full["state"]["history"])
    ]


def test_regression_needs_csv_data(run, tmp_path):
    np.savez(tmp_path / "t.npz", x=np.zeros((10, 3), np.float32), y=np.zeros(10, np.int32))
    r = run("mlp", "--data", "npz:t.npz", "--task", "regression")
    assert r.exit_code == 2 and "csv:FILE" in r.stderr


def test_unstandardised_metric_is_the_metric_in_target_units():
    scale = TargetScale(10.0, 3.0)
    rng = np.random.default_rng(0)
    out, y = rng.normal(size=(7, 1)), rng.normal(size=(7, 1))
    m = Unstandardised(metrics.MeanAbsoluteError(), scale)
    m.update(out, y)
    assert m.name == "mae"
    assert m.result() == pytest.approx(float(np.mean(np.abs((out * 3 + 10) - (y * 3 + 10)))))


def test_zoo_criterion_trains_with_the_mean_squared_error():
    m = zoo.mlp.MLP(num_classes=1, num_channels=3)
    assert m.criterion is None  # classifiers keep softmax cross-entropy
    m.criterion = layer.MeanSquareError()
    m.set_optimizer(opt.SGD(0.0))
    rng = np.random.default_rng(0)
    x = tensor.from_numpy(rng.normal(size=(8, 3)).astype(np.float32))
    y = rng.normal(size=(8, 1)).astype(np.float32)
    m.compile([x], is_train=True, use_graph=False)
    out, loss = m.train_one_batch(x, tensor.from_numpy(y))
    o = out.to_numpy().astype(np.float64)
    assert float(loss.to_numpy().reshape(-1)[0]) == pytest.approx(float(np.mean((o - y) ** 2)), rel=1e-5)


def test_a_model_without_a_criterion_is_refused(run, csv):
    (csv / "net.py").write_text(
        "from singa import layer, model\n\n"
        "class Net(model.Model):\n"
        "    def __init__(self, num_classes=1):\n"
        "        super().__init__()\n"
        "        self.fc = layer.Linear(num_classes)\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
    )
    r = run("net.py:Net", "--data", "csv:train.csv", "--task", "regression", *FAST)
    assert r.exit_code == 1 and "criterion" in r.stderr and "Traceback" not in r.stderr
    assert not (csv / "ck.zip").exists()


def test_the_epoch_line_of_a_regression():
    from singa.cli.output import format_epoch

    rec = {"epoch": 2, "train_loss": 0.5, "train_mse": 8.0, "train_mae": 2.0, "val_loss": 0.25}
    rec.update(val_mse=4.0, val_mae=1.5, time_s=1.0)
    line = format_epoch(rec, 3)
    assert "train loss 0.5 mse 8 mae 2" in line and "val loss 0.25 mse 4 mae 1.5" in line
    assert "acc" not in line
