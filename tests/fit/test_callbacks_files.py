"""Callbacks that write files (checkpoints, CSV, JSON lines, TensorBoard events) and
the ones that change the weights (EMA) or the schedule (TimeBudget), through fit."""

import csv
import io
import json
import os

import numpy as np
import pytest

from singa import callbacks, checkpoint, opt
from singa.model.batches import ArrayBatches
from tests.fit.fit_helpers import classification, made, params


class Scripted(callbacks.Callback):
    """Replaces the epoch's val_loss with scripted values (runs before the others)."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def on_epoch_end(self, epoch, logs=None):
        logs["val_loss"] = self.values[epoch]


def test_model_checkpoint_every_epoch_keep_newest(tmp_path):
    x, y = classification(64)
    ck = callbacks.ModelCheckpoint(tmp_path / "ck-{epoch}.zip", keep=2)
    m = made()
    m.fit(x, y, batch_size=16, epochs=4, verbose=0, callbacks=[ck])
    assert sorted(os.listdir(tmp_path)) == ["ck-3.zip", "ck-4.zip"]
    assert [p for p, _ in ck.saved] == [str(tmp_path / "ck-3.zip"), str(tmp_path / "ck-4.zip")]
    info = checkpoint.read(str(tmp_path / "ck-4.zip"))
    pos = info.aux_values[callbacks.FIT_STATE_KEY]
    assert pos["epoch"] == 4 and pos["step"] == 16 and pos["epoch_done"]
    assert info.aux_values[callbacks.LOADER_STATE_KEY]["epoch"] == 4  # ArrayBatches.state_dict()
    fresh = made()
    fresh.compile([__import__("singa").tensor.from_numpy(x[:16])], is_train=True)
    fresh.load_states(str(tmp_path / "ck-4.zip"))
    for k, v in params(m).items():
        np.testing.assert_array_equal(v, params(fresh)[k])


def test_model_checkpoint_save_best_only_keeps_the_n_best(tmp_path):
    x, y = classification(32)
    vals = [5.0, 3.0, 4.0, 1.0, 2.0, 0.5]
    ck = callbacks.ModelCheckpoint(tmp_path / "best-{epoch}-{val_loss:.1f}.zip", save_best_only=True, keep=2)
    made().fit(x, y, batch_size=16, epochs=6, verbose=0, callbacks=[Scripted(vals), ck])
    # saved when improving: epochs 1 (5.0), 2 (3.0), 4 (1.0), 6 (0.5); the 2 best kept
    assert sorted(os.listdir(tmp_path)) == ["best-4-1.0.zip", "best-6-0.5.zip"]
    assert ck.best == 0.5


def test_model_checkpoint_every_n_steps_and_one_file(tmp_path):
    x, y = classification(64)
    seen = []

    class Spy(callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if os.path.exists(tmp_path / "s.zip"):
                seen.append(
                    checkpoint.read(str(tmp_path / "s.zip")).aux_values[callbacks.FIT_STATE_KEY]["step"]
                )

    ck = callbacks.ModelCheckpoint(tmp_path / "s.zip", every_n_steps=3)
    made().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[ck, Spy()])
    assert sorted(set(seen)) == [3, 6]
    with pytest.raises(ValueError, match="keep=2 needs a filepath"):
        callbacks.ModelCheckpoint(tmp_path / "s.zip", keep=2)


def test_model_checkpoint_bad_field_fails_before_writing(tmp_path):
    x, y = classification(32)
    ck = callbacks.ModelCheckpoint(tmp_path / "ck-{nope}.zip")
    with pytest.raises(ValueError, match="nope"):
        made().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[ck])
    assert os.listdir(tmp_path) == []


def test_csv_logger_rows(tmp_path):
    x, y = classification(48)
    path = tmp_path / "log.csv"
    h = made().fit(
        x,
        y,
        batch_size=16,
        epochs=3,
        validation_data=(x, y),
        verbose=0,
        callbacks=[callbacks.CSVLogger(path)],
    )
    rows = list(csv.DictReader(open(path)))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert list(rows[0]) == ["epoch", *sorted(h.history)]
    np.testing.assert_allclose([float(r["val_loss"]) for r in rows], h.history["val_loss"], rtol=1e-12)
    made().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callbacks.CSVLogger(path, append=True)])
    assert len(list(csv.DictReader(open(path)))) == 4


def test_json_logger_records(tmp_path):
    x, y = classification(48)
    path = tmp_path / "log.jsonl"
    h = made().fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        validation_data=(x, y),
        callbacks=[callbacks.JSONLogger(path, start_fields={"run": "a"})],
    )
    recs = [json.loads(line) for line in open(path)]
    assert [r["event"] for r in recs] == ["start", "epoch", "epoch", "end"]
    assert recs[0]["run"] == "a" and recs[0]["epochs"] == 2 and recs[0]["steps"] == 3
    assert [r["epoch"] for r in recs[1:3]] == [1, 2] and recs[2]["step"] == 6
    assert recs[2]["train_loss"] == h.history["loss"][1]  # singa-train --log's names
    assert recs[2]["train_acc"] == h.history["accuracy"][1]
    assert recs[2]["val_loss"] == h.history["val_loss"][1] and "val_acc" in recs[2] and "lr" in recs[2]


def test_tensorboard_event_files_read_back(tmp_path):
    pytest.importorskip("tensorboardX")
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except Exception:
        pytest.skip("the tensorboard package is not installed")
    x, y = classification(48)
    h = made().fit(
        x,
        y,
        batch_size=16,
        epochs=3,
        validation_data=(x, y),
        verbose=0,
        callbacks=[callbacks.TensorBoard(tmp_path, update_freq="batch")],
    )
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {
        "train/loss",
        "train/accuracy",
        "val/loss",
        "val/accuracy",
        "lr",
        "samples_per_s",
        "batch/loss",
    } <= tags
    got = [e.value for e in acc.Scalars("val/loss")]
    np.testing.assert_allclose(got, h.history["val_loss"], rtol=1e-6)
    assert [e.step for e in acc.Scalars("train/loss")] == [0, 1, 2]
    assert [e.step for e in acc.Scalars("batch/loss")] == list(range(1, 10))


def test_ema_averages_validates_on_them_and_is_saved(tmp_path):
    x, y = classification(48)
    m = made()
    d = 0.5

    class Track(callbacks.Callback):
        avg = None

        def on_train_batch_end(self, step, logs=None):
            if self.avg is None:  # the model is built on the first batch
                self.avg = {k: v.to_numpy() for k, v in self.model.get_params().items()}
            for k in self.avg:
                self.avg[k] = d * self.avg[k] + (1 - d) * self.model.get_states()[k].to_numpy()

    track = Track()
    ema = callbacks.EMA(decay=d, apply_at_end=False)
    ck = callbacks.ModelCheckpoint(tmp_path / "ck.zip")
    h = m.fit(x, y, batch_size=16, epochs=2, validation_data=(x, y), verbose=0, callbacks=[track, ema, ck])
    for k, v in track.avg.items():
        np.testing.assert_allclose(ema.average[k], v, rtol=1e-6)
    raw = params(m)
    m.set_states(ema.average, strict=False)
    # fit validates in batches of its batch_size; evaluate's default (32) would sum
    # other float32 batch means (1e-9 apart on an AVX2 machine)
    np.testing.assert_allclose(h.history["val_loss"][-1], m.evaluate(x, y, batch_size=16)["loss"], rtol=1e-10)
    arrays = checkpoint.read(str(tmp_path / "ck.zip")).arrays
    assert sorted(k for k, a in arrays.items() if a.kind == "aux") == sorted("ema/" + k for k in ema.average)
    assert any(not np.array_equal(raw[k], ema.average[k]) for k in ema.average)


def test_progress_bar_draws_and_prints_epoch_lines(capsys):
    x, y = classification(32)
    stream = io.StringIO()
    made().fit(
        x, y, batch_size=16, epochs=2, verbose=0, callbacks=[callbacks.ProgressBar(stream=stream, force=True)]
    )
    out = capsys.readouterr().out.splitlines()
    assert [ln.split("  ")[0] for ln in out] == ["epoch 1/2", "epoch 2/2"]
    assert "loss" in out[0] and "accuracy" in out[0]
    assert "epoch 1/2" in stream.getvalue() and "2/2" in stream.getvalue()


class Clock:
    """A clock that advances one second each time it is read."""

    def __init__(self):
        self.t = -1.0

    def __call__(self):
        self.t += 1.0
        return self.t


def test_time_budget_stops_and_fits_the_cosine_schedule():
    x, y = classification(160)  # 10 batches of 16 per epoch
    m = made()
    sched = opt.CosineDecay(0.1, decay_steps=90, warmup_steps=10)  # built for 100 steps
    m.optimizer.lr = sched
    budget = callbacks.TimeBudget(30, estimate_after=5, every=5, clock=Clock())
    m.fit(x, y, batch_size=16, epochs=10, verbose=0, callbacks=[budget])
    # one clock read per batch after the start: batch k ends at t = k; 30 s fit 30 steps
    assert budget.stopped and m.optimizer.steps == 30
    assert budget.horizon == 30
    assert (sched.warmup_steps, sched.decay_steps) == (3, 27)
    assert sched(30) == 0.0 and sched(29) < 0.001 and sched(2) == pytest.approx(0.1)


def test_time_budget_parses_durations():
    assert callbacks.parse_duration("10m") == 600 and callbacks.parse_duration("1h30m") == 5400
    assert callbacks.parse_duration("90") == 90 and callbacks.parse_duration(2.5) == 2.5
    with pytest.raises(ValueError, match="not a duration"):
        callbacks.parse_duration("ten minutes")
    with pytest.raises(ValueError, match="positive"):
        callbacks.parse_duration(0)


def test_a_failed_checkpoint_save_keeps_the_previous_file(tmp_path):
    x, y = classification(32)
    path = tmp_path / "ck.zip"
    made().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callbacks.ModelCheckpoint(path)])
    before = path.read_bytes()
    bad = callbacks.ModelCheckpoint(path, aux_states={"note": object()})  # not storable
    with pytest.raises(TypeError):
        made().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[bad])
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ck.zip"]  # no temporary file left behind


def test_time_budget_measures_the_rate_after_the_first_step():
    x, y = classification(160)

    class SlowStart(Clock):
        """The first batch (tracing) takes 10 s, every later one 1 s."""

        def __call__(self):
            self.t += 10.0 if self.t == 0.0 else 1.0
            return self.t

    m = made()
    sched = opt.CosineDecay(0.1, decay_steps=100)
    m.optimizer.lr = sched
    clock = SlowStart()
    clock.t = -1.0
    budget = callbacks.TimeBudget(40, estimate_after=5, every=5, clock=clock)
    m.fit(x, y, batch_size=16, epochs=10, verbose=0, callbacks=[budget])
    # t0 = 0, batch 1 ends at 10, batch k at 9 + k: the budget ends after batch 31
    assert m.optimizer.steps == 31 and budget.horizon == 31 and sched.decay_steps == 31


def test_a_run_continued_from_its_checkpoint_equals_the_uninterrupted_one(tmp_path):
    x, y = classification(64)

    def run(model, data, initial_epoch=0, ema=None):
        ema = ema or callbacks.EMA(0.9)
        ck = callbacks.ModelCheckpoint(tmp_path / "ck-{epoch}.zip")
        model.fit(data, epochs=3, initial_epoch=initial_epoch, verbose=0, callbacks=[ema, ck])
        return ema

    full = made()
    ema_full = run(full, ArrayBatches(x, y, 16, shuffle=True, seed=7))
    again = made()
    aux = again.load_states(str(tmp_path / "ck-2.zip"))  # before the first call: applied when built
    ema = callbacks.EMA(0.9)
    ema.load_aux(aux)
    data = ArrayBatches(x, y, 16, shuffle=True, seed=0)
    data.load_state_dict(aux[callbacks.LOADER_STATE_KEY])
    run(again, data, initial_epoch=aux[callbacks.FIT_STATE_KEY]["epoch"], ema=ema)
    for k, v in params(full).items():
        np.testing.assert_array_equal(v, params(again)[k], err_msg=k)
    for k, v in ema_full.average.items():
        np.testing.assert_array_equal(v, ema.average[k], err_msg=k)
