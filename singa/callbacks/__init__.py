"""Callbacks of :meth:`singa.model.Model.fit` (Keras's contract: see
:mod:`singa.callbacks.base`).

Example::

    from singa import callbacks
    history = m.fit(x, y, epochs=20, validation_split=0.1, callbacks=[
        callbacks.EarlyStopping(patience=3, restore_best_weights=True),
        callbacks.ModelCheckpoint("ck-{epoch}.zip", keep=2),
    ])
    history.history["val_loss"]
"""

from singa.callbacks.base import Callback, CallbackList, History
from singa.callbacks.budget import TimeBudget, parse_duration
from singa.callbacks.checkpoint import FIT_STATE_KEY, LOADER_STATE_KEY, ModelCheckpoint
from singa.callbacks.early_stopping import EarlyStopping
from singa.callbacks.ema import EMA
from singa.callbacks.guards import Diverged, TerminateOnNaN
from singa.callbacks.loggers import CSVLogger, JSONLogger
from singa.callbacks.progress import ProgressBar
from singa.callbacks.schedule import LearningRateScheduler, ReduceLROnPlateau
from singa.callbacks.tensorboard import TensorBoard

__all__ = [
    "Callback",
    "CallbackList",
    "History",
    "ModelCheckpoint",
    "EarlyStopping",
    "CSVLogger",
    "JSONLogger",
    "TensorBoard",
    "LearningRateScheduler",
    "ReduceLROnPlateau",
    "TerminateOnNaN",
    "Diverged",
    "ProgressBar",
    "EMA",
    "TimeBudget",
    "parse_duration",
    "FIT_STATE_KEY",
    "LOADER_STATE_KEY",
]
