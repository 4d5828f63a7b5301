"""The counting of EarlyStopping and ReduceLROnPlateau against Keras's documented
behaviour, driven epoch by epoch with scripted logs."""

import math

import numpy as np
import pytest

from singa import callbacks, opt
from singa.tensor import Tensor


class FakeModel:
    """What the callbacks use of a model: stop_training, states, an optimizer."""

    def __init__(self, lr=0.1):
        self.stop_training = False
        self.w = Tensor(data=np.zeros(2, np.float32), requires_grad=True, stores_grad=True)
        self.optimizer = opt.SGD(lr)

    def get_states(self):
        return {"w": self.w}

    get_params = get_states

    def set_states(self, states, strict=True):
        self.w.data[...] = states["w"]


def drive(cb, values, key="val_loss", model=None, on_epoch=None):
    """Run epochs with ``values`` of ``key`` until the callback stops the model;
    returns the number of epochs run."""
    model = model or FakeModel()
    cb.set_model(model)
    cb.on_train_begin()
    n = 0
    for epoch, v in enumerate(values):
        model.w.data[...] = epoch  # the states of epoch `epoch`
        if on_epoch:
            on_epoch(epoch, model)
        cb.on_epoch_end(epoch, {key: v})
        n += 1
        if model.stop_training:
            break
    cb.on_train_end()
    return n


def test_early_stopping_keras_doc_example():
    # Keras's docstring: patience=3 on a loss that never improves after the first
    # epoch: "Only 4 epochs are run."
    es = callbacks.EarlyStopping(monitor="loss", patience=3)
    assert drive(es, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], key="loss") == 4
    assert es.stopped_epoch == 3 and es.best == 1.0 and es.wait == 3


def test_early_stopping_patience_zero_stops_at_the_first_non_improvement():
    es = callbacks.EarlyStopping(patience=0)
    assert drive(es, [3.0, 2.0, 2.5, 1.0]) == 3
    assert es.stopped_epoch == 2 and es.best == 2.0 and es.best_epoch == 1


def test_early_stopping_improvement_resets_wait():
    es = callbacks.EarlyStopping(patience=2)
    # 5, 4 (better), 4.5, 4.2 (2 without improvement -> stop at epoch 3)
    assert drive(es, [5.0, 4.0, 4.5, 3.9, 4.0, 4.1, 4.2]) == 6
    assert es.best == 3.9 and es.stopped_epoch == 5


def test_early_stopping_min_delta():
    es = callbacks.EarlyStopping(patience=1, min_delta=0.1)
    # 1.0 -> 0.95 is not an improvement by more than 0.1: wait 1 -> stop at epoch 1
    assert drive(es, [1.0, 0.95, 0.5]) == 2
    es = callbacks.EarlyStopping(patience=1, min_delta=0.1)
    assert drive(es, [1.0, 0.85, 0.7, 0.65]) == 4
    assert es.best == 0.7


def test_early_stopping_mode_max_for_accuracy_auto():
    es = callbacks.EarlyStopping(monitor="val_accuracy", patience=1)
    assert es.watch.mode == "max"
    assert drive(es, [0.5, 0.6, 0.55, 0.7], key="val_accuracy") == 3
    es = callbacks.EarlyStopping(monitor="val_loss", mode="max", patience=0)
    assert drive(es, [1.0, 2.0, 1.5]) == 3


def test_early_stopping_baseline_keeps_counting_until_beaten():
    # Keras: improvements that do not beat the baseline do not reset wait (an
    # improving epoch never stops the run itself; the next non-improving one does)
    es = callbacks.EarlyStopping(patience=2, baseline=0.5)
    assert drive(es, [0.9, 0.8, 0.85, 0.7]) == 3 and es.wait == 3
    es = callbacks.EarlyStopping(patience=2)
    assert drive(es, [0.9, 0.8, 0.85, 0.7]) == 4
    es = callbacks.EarlyStopping(patience=2, baseline=0.5)
    assert drive(es, [0.9, 0.4, 0.45, 0.46, 0.47]) == 4


def test_early_stopping_restore_best_weights():
    es = callbacks.EarlyStopping(patience=1, restore_best_weights=True)
    model = FakeModel()
    drive(es, [3.0, 1.0, 2.0, 2.5], model=model)
    assert es.best_epoch == 1 and es.stopped_epoch == 2
    np.testing.assert_array_equal(model.w.data, [1, 1])  # epoch 1's states


def test_early_stopping_missing_monitor_warns_and_skips():
    es = callbacks.EarlyStopping(monitor="val_loss")
    es.set_model(FakeModel())
    es.on_train_begin()
    with pytest.warns(RuntimeWarning, match="val_loss"):
        es.on_epoch_end(0, {"loss": 1.0})
    assert es.wait == 0


def test_early_stopping_nan_never_improves():
    es = callbacks.EarlyStopping(patience=1)
    assert drive(es, [1.0, math.nan, 0.5]) == 2


def test_reduce_lr_on_plateau_counting():
    cb = callbacks.ReduceLROnPlateau(factor=0.5, patience=2, min_delta=0.0)
    model = FakeModel(lr=1.0)
    lrs = []
    drive(
        cb,
        [1.0, 1.0, 1.0, 0.5, 0.6, 0.7, 0.8, 0.9],
        model=model,
        on_epoch=lambda e, m: lrs.append(m.optimizer.get_lr()),
    )
    # epochs 1, 2 no improvement -> halve after epoch 2; 3 improves; 4, 5 -> halve after 5
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]


def test_reduce_lr_on_plateau_cooldown_and_min_lr():
    cb = callbacks.ReduceLROnPlateau(factor=0.1, patience=1, cooldown=2, min_lr=0.005, min_delta=0)
    model = FakeModel(lr=1.0)
    lrs = []
    drive(cb, [1.0] * 9, model=model, on_epoch=lambda e, m: lrs.append(m.optimizer.get_lr()))
    # Keras: reduce after epoch 1 (cooldown_counter 2); epoch 2 counts the cooldown
    # down to 1, epoch 3 to 0 and, no longer in cooldown, counts wait 1 -> reduce; ...
    # the rate stops at min_lr
    np.testing.assert_allclose(lrs, [1.0, 1.0, 0.1, 0.1, 0.01, 0.01, 0.005, 0.005, 0.005])


def test_reduce_lr_on_plateau_scales_a_schedule():
    model = FakeModel()
    model.optimizer = opt.SGD(opt.CosineDecay(1.0, decay_steps=100))
    model.optimizer.steps = 50
    cb = callbacks.ReduceLROnPlateau(factor=0.5, patience=0)
    drive(cb, [1.0, 2.0], model=model)
    assert model.optimizer.get_lr() == pytest.approx(0.25)
    model.optimizer.steps = 100
    assert model.optimizer.get_lr() == 0.0  # the schedule keeps its shape


def test_learning_rate_scheduler_keras_signature_and_epoch_only():
    model = FakeModel(lr=0.1)
    cb = callbacks.LearningRateScheduler(lambda epoch, lr: lr if epoch < 2 else lr * 0.5)
    cb.set_model(model)
    got = []
    for e in range(4):
        cb.on_epoch_begin(e)
        got.append(model.optimizer.get_lr())
    np.testing.assert_allclose(got, [0.1, 0.1, 0.05, 0.025])
    cb = callbacks.LearningRateScheduler(opt.StepDecay(1.0, step_size=2))
    cb.set_model(model)
    cb.on_epoch_begin(3)
    assert model.optimizer.get_lr() == pytest.approx(0.1)


def test_terminate_on_nan_stops_or_raises():
    model = FakeModel()
    cb = callbacks.TerminateOnNaN()
    cb.set_model(model)
    cb.on_train_begin()
    cb.on_train_batch_end(0, {"loss": 1.0})
    assert not model.stop_training
    cb.on_train_batch_end(1, {"loss": math.inf})
    assert model.stop_training and cb.stopped_step == 2
    cb = callbacks.TerminateOnNaN(limit=10.0, raise_error=True)
    cb.set_model(FakeModel())
    cb.on_train_begin()
    with pytest.raises(callbacks.Diverged, match="step 1"):
        cb.on_train_batch_end(0, {"loss": 11.0})
