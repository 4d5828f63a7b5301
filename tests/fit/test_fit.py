"""Model.fit / evaluate / predict: the same numbers as a hand-written loop, gradient
accumulation, epoch metrics in float64 over the whole set."""

import numpy as np
import pytest

from singa import callbacks, metrics, opt
from singa.model.batches import ArrayBatches
from tests.fit.fit_helpers import CNN, MLP, Regressor, classification, hand_loop, images, made, params


@pytest.mark.parametrize("use_graph", [True, False])
def test_fit_equals_hand_written_loop_bitwise(use_graph):
    x, y = classification(100)
    a = made()
    a.fit(x, y, batch_size=16, epochs=2, seed=5, verbose=0, use_graph=use_graph)
    b = made()
    hand_loop(b, x, y, 16, 2, seed=5, use_graph=use_graph)
    pa, pb = params(a), params(b)
    assert sorted(pa) == sorted(pb)
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
    assert a.optimizer.steps == b.optimizer.steps == 2 * 7
    assert a.graph_mode is use_graph


def test_fit_cnn_equals_hand_written_loop_bitwise():
    x, y = images(48)
    a = made(CNN)
    a.fit(x, y, batch_size=16, epochs=1, seed=1, verbose=0)
    b = made(CNN)
    hand_loop(b, x, y, 16, 1, seed=1)
    for k, v in params(a).items():
        np.testing.assert_array_equal(v, params(b)[k], err_msg=k)


@pytest.mark.parametrize("use_graph", [True, False])
@pytest.mark.parametrize("n", [128, 120])  # 120: the epoch's last update is from 3 batches
def test_accumulate_equals_one_larger_batch(use_graph, n):
    x, y = classification(n)
    a = made(momentum=0.9)
    a.fit(x, y, batch_size=8, accumulate=4, epochs=2, shuffle=False, verbose=0, use_graph=use_graph)
    b = made(momentum=0.9)
    b.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, use_graph=use_graph)
    assert a.optimizer.steps == b.optimizer.steps == 2 * int(np.ceil(n / 32))
    for k, v in params(a).items():
        np.testing.assert_allclose(v, params(b)[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_accumulate_cnn_equals_larger_batch():
    x, y = images(64)
    a = made(CNN)
    a.fit(x, y, batch_size=8, accumulate=2, epochs=1, shuffle=False, verbose=0)
    b = made(CNN)
    b.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for k, v in params(a).items():
        np.testing.assert_allclose(v, params(b)[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_accumulate_refuses_what_it_cannot_do():
    x, y = classification(32)
    m = made()
    m.optimizer.clip_norm = 1.0
    with pytest.raises(ValueError, match="clip_norm"):
        m.fit(x, y, accumulate=2, verbose=0)
    with pytest.raises(ValueError, match="accumulate must be an int >= 1"):
        made().fit(x, y, accumulate=0, verbose=0)


def test_an_update_in_progress_goes_through_a_checkpoint(tmp_path):
    """ModelCheckpoint(every_n_steps) 2 batches into an update of 3 stores the partial
    sums; a FitLoop given them (``accumulator.load_aux``) ends like the uninterrupted
    run; a checkpoint of another accumulate is refused before anything changes."""
    from singa.model.fit import FitLoop
    from singa.opt.accumulate import ACCUMULATOR_KEY

    x, y = classification(96)  # 6 batches of 16
    whole = made()
    whole.fit(x, y, batch_size=16, epochs=1, shuffle=False, accumulate=3, verbose=0)

    class StopAt2(callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            self.model.stop_training = step == 1

    first = made()
    ck = callbacks.ModelCheckpoint(str(tmp_path / "ck-{step}.zip"), every_n_steps=2)
    cbs = [ck, StopAt2()]
    first.fit(x, y, batch_size=16, epochs=1, shuffle=False, accumulate=3, verbose=0, callbacks=cbs)
    second = made()
    aux = second.load_states(str(tmp_path / "ck-2.zip"))
    assert aux[ACCUMULATOR_KEY] == {"k": 3, "pending": 2}
    loop = FitLoop(second, ArrayBatches(x, y, 16), accumulate=3, verbose=0)
    loop.initial_batch = 2
    with pytest.raises(ValueError, match="this run accumulates 3"):
        loop.accumulator.load_aux({**aux, ACCUMULATOR_KEY: {"k": 4, "pending": 2}})
    for bad in ({"k": 3}, {"k": 3, "pending": 3}, {"k": "3", "pending": 1}, [3, 1]):
        with pytest.raises(ValueError, match="must be"):
            loop.accumulator.load_aux({**aux, ACCUMULATOR_KEY: bad})
    assert loop.accumulator.pending == 0 and not loop.accumulator.buffers
    loop.accumulator.load_aux(aux)
    loop.run()
    want, got = params(whole), params(second)
    assert sorted(want) == sorted(got)
    for k in want:
        np.testing.assert_array_equal(want[k], got[k], err_msg=k)


def test_evaluate_metrics_equal_numpy_on_the_whole_set():
    x, y = classification(103)  # 103 = 6 * 16 + 7: the last batch is smaller
    m = made()
    m.fit(x, y, batch_size=16, epochs=2, seed=0, verbose=0)
    res = m.evaluate(x, y, batch_size=16, metrics=["accuracy", "top2_accuracy"])
    # the same batches: a BLAS's row results may depend on the batch's row count
    logits = m.predict(x, batch_size=16).astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    np.testing.assert_allclose(res["loss"], np.mean(lse - logits[np.arange(103), y]), rtol=1e-12)
    assert res["accuracy"] == np.mean(logits.argmax(1) == y)
    top2 = np.argsort(-logits, axis=1, kind="stable")[:, :2]
    assert res["top2_accuracy"] == np.mean((top2 == y[:, None]).any(1))
    assert set(res) == {"loss", "accuracy", "top2_accuracy"}


def test_epoch_loss_is_the_sample_weighted_mean_not_a_mean_of_batch_means():
    x, y = classification(40)  # batches of 16, 16, 8

    class Record(callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = []

        def on_train_batch_end(self, step, logs=None):
            self.batches.append((logs["batch_loss"], logs["size"]))

    rec = Record()
    h = made().fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[rec])
    losses, sizes = np.array(rec.batches).T
    assert list(sizes) == [16, 16, 8]
    np.testing.assert_allclose(h.history["loss"][0], (losses * sizes).sum() / 40, rtol=1e-12)
    assert abs(h.history["loss"][0] - losses.mean()) > 1e-9


def test_batch_logs_are_built_only_for_callbacks_with_batch_hooks(monkeypatch):
    """Keras's check: without a callback overriding a batch hook, fit calls no batch
    hook and builds no per-batch logs; the epoch logs are the same either way."""
    from singa.model import fit as fit_module

    built = []
    real = fit_module.FitLoop._running_logs
    monkeypatch.setattr(fit_module.FitLoop, "_running_logs", lambda self: built.append(1) or real(self))
    x, y = classification(40)

    class EpochOnly(callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.logs = dict(logs)

    class Batches(EpochOnly):
        def on_train_batch_begin(self, step, logs=None):
            built.append(0)

    quiet, hooked = EpochOnly(), Batches()
    assert not callbacks.CallbackList([quiet, callbacks.History()]).implements_train_batch_hooks()
    assert callbacks.CallbackList([quiet, hooked]).implements_train_batch_hooks()
    made().fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[quiet])
    assert built == []
    made().fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[hooked])
    assert built == [0, 1] * 6
    timing = {"samples_per_s"}
    assert quiet.logs.keys() == hooked.logs.keys()
    assert {k: v for k, v in quiet.logs.items() if k not in timing} == {
        k: v for k, v in hooked.logs.items() if k not in timing
    }


def test_history_and_validation_split_uses_the_last_samples():
    x, y = classification(100)
    m = made()
    h = m.fit(x, y, batch_size=20, epochs=3, validation_split=0.2, seed=0, verbose=0)
    assert h.epoch == [0, 1, 2] and m.history is h
    assert set(h.history) == {"loss", "accuracy", "val_loss", "val_accuracy", "lr", "samples_per_s"}
    assert all(len(v) == 3 for v in h.history.values())
    want = m.evaluate(x[80:], y[80:], batch_size=20)  # fit validates in its own batches
    np.testing.assert_allclose(h.history["val_loss"][-1], want["loss"], rtol=1e-12)
    assert h.history["val_accuracy"][-1] == want["accuracy"]


def test_fit_takes_a_loader_or_any_iterable_of_batches():
    x, y = classification(64)
    a = made()
    a.fit(ArrayBatches(x, y, 16, shuffle=True, seed=2), epochs=2, verbose=0)
    b = made()
    b.fit(x, y, batch_size=16, epochs=2, seed=2, verbose=0)
    for k, v in params(a).items():
        np.testing.assert_array_equal(v, params(b)[k])
    batches = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)]
    c = made()
    h = c.fit(batches, epochs=2, verbose=0, steps_per_epoch=3)
    assert c.optimizer.steps == 6 and len(h.epoch) == 2
    gen = ((x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16))
    d = made()
    with pytest.warns(RuntimeWarning, match="no batches"):
        h = d.fit(gen, epochs=5, verbose=0)
    assert d.optimizer.steps == 4 and h.epoch == [0]


def test_fit_keeps_a_user_compiled_model_as_it_is():
    x, y = classification(32)
    m = made()
    from singa import tensor

    m.compile([tensor.from_numpy(x[:8])], is_train=True, use_graph=False)
    m.fit(x, y, batch_size=8, verbose=0)
    assert m.graph_mode is False


def test_regression_defaults_to_mae_and_mse_validation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x @ rng.normal(size=(4, 2))).astype(np.float32)
    m = made(Regressor, lr=0.05, momentum=0.0)
    h = m.fit(x, y, batch_size=16, epochs=3, validation_data=(x, y), verbose=0)
    assert "mae" in h.history and h.history["loss"][-1] < h.history["loss"][0]
    out = m.predict(x, batch_size=10).astype(np.float64)
    res = m.evaluate(x, y, batch_size=10)
    np.testing.assert_allclose(res["loss"], np.mean((out - y) ** 2), rtol=1e-10)
    np.testing.assert_allclose(res["mae"], np.mean(np.abs(out - y)), rtol=1e-10)


def test_predict_restores_the_mode_and_batches():
    x, y = classification(50)
    m = made()
    m.fit(x, y, verbose=0)
    assert m.training
    out = m.predict(x, batch_size=7)
    assert out.shape == (50, 3) and m.training
    m.eval()
    # float32 rows from batches of 7 and of 50: equal to rounding (not bitwise: a BLAS's
    # row results may depend on the batch's row count)
    np.testing.assert_allclose(m.predict(x, batch_size=50), out, rtol=1e-5, atol=1e-6)
    assert not m.training


def test_a_raising_callback_stops_cleanly():
    x, y = classification(64)

    class Boom(callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ended = None

        def on_train_batch_end(self, step, logs=None):
            if step == 2:
                raise RuntimeError("boom")

        def on_train_end(self, logs=None):
            self.ended = logs

    boom = Boom()
    m = made()
    sgd = m.optimizer
    with pytest.raises(RuntimeError, match="boom"):
        m.fit(x, y, batch_size=8, accumulate=2, callbacks=[boom], verbose=0)
    assert m.optimizer is sgd and boom.ended["error"] is True
    assert sgd.steps == 1  # batches 0 and 1 made one update


def test_stop_training_ends_after_the_batch_and_runs_epoch_end():
    x, y = classification(64)

    class StopAt(callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if step == 1:
                self.model.stop_training = True

    h = made().fit(x, y, batch_size=8, epochs=3, callbacks=[StopAt()], verbose=0)
    assert h.epoch == [0]


def test_fit_argument_errors():
    x, y = classification(16)
    m = MLP()
    with pytest.raises(ValueError, match="set an optimizer"):
        m.fit(x, y, verbose=0)
    m.set_optimizer(opt.SGD(0.1))
    with pytest.raises(ValueError, match="epochs"):
        m.fit(x, y, epochs=-1, verbose=0)
    with pytest.raises(ValueError, match="different numbers of samples"):
        m.fit(x, y[:3], verbose=0)
    with pytest.raises(ValueError, match="validation_split"):
        m.fit(x, y, validation_split=1.5, verbose=0)
    with pytest.raises(ValueError, match="unknown metric"):
        m.evaluate(x, y, metrics=["f7"])


def test_metrics_are_float64_sums():
    acc = metrics.get("accuracy")
    acc.update(np.eye(3)[[0, 1, 2]], np.array([0, 1, 1]))
    acc.update(np.eye(3)[[2]], np.array([2]))
    assert acc.result() == 3 / 4 and acc.get_state() == [3.0, 4]
    mae = metrics.get("mae")
    mae.update(np.array([[1.0], [2.0]]), np.array([[0.0], [0.0]]))
    assert mae.result() == 1.5
    assert metrics.get("top5").k == 5
    with pytest.raises(ValueError, match="k must be"):
        metrics.TopKAccuracy(0)


def test_fit_under_mixed_precision_equals_the_hand_loop():
    x, y = classification(64)
    from singa import tensor

    def compiled():
        m = made()
        m.compile([tensor.from_numpy(x[:16])], is_train=True, use_graph=True, precision="mixed")
        return m

    a = compiled()
    a.fit(x, y, batch_size=16, epochs=2, seed=4, verbose=0)
    b = compiled()
    for e in range(2):
        order = np.random.default_rng([4, e]).permutation(64)
        for lo in range(0, 64, 16):
            idx = order[lo : lo + 16]
            b(tensor.from_numpy(x[idx]), tensor.from_numpy(y[idx]))
    assert a.precision == "mixed" and a.optimizer.loss_scaler is not None
    for k, v in params(a).items():
        np.testing.assert_array_equal(v, params(b)[k], err_msg=k)


def test_fit_with_a_one_rank_distopt_equals_plain_sgd(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SINGA_DIST"):
        monkeypatch.delenv(var, raising=False)
    x, y = classification(64)
    a = made()
    a.set_optimizer(opt.DistOpt(opt.SGD(0.1, momentum=0.9)))
    ha = a.fit(x, y, batch_size=16, epochs=2, seed=1, verbose=0)
    b = made()
    hb = b.fit(x, y, batch_size=16, epochs=2, seed=1, verbose=0)
    for k, v in params(a).items():
        np.testing.assert_array_equal(v, params(b)[k], err_msg=k)
    assert ha.history["loss"] == hb.history["loss"]


def test_a_continued_epoch_starts_at_its_batch():
    from singa.model.fit import FitLoop

    x, y = classification(96)
    a = made()
    a.fit(x, y, batch_size=16, epochs=2, seed=3, verbose=0)
    # the same run, stopped after 8 steps (epoch 1, batch 2) and continued in a new loop
    b = made()

    class StopAt(callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if self.model.optimizer.steps == 8:
                self.model.stop_training = True

    data = ArrayBatches(x, y, 16, shuffle=True, seed=3)
    first = FitLoop(b, data, epochs=2, callbacks=[StopAt()], verbose=0)
    first.run()
    sums = first.sums()
    rest = FitLoop(b, data, epochs=2, initial_epoch=1, verbose=0)
    rest.initial_batch, rest.initial_step, rest.initial_sums = 2, 8, sums
    h = rest.run()
    for k, v in params(a).items():
        np.testing.assert_array_equal(v, params(b)[k], err_msg=k)
    assert h.history["loss"] == a.history.history["loss"][1:]
