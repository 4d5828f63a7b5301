"""Optimizers and learning-rate schedules (SINGA's ``singa.opt``).

``SGD``, ``Adam``, ``AdamW``, ``RMSProp`` and ``AdaGrad`` follow PyTorch's update
formulas and update parameters in place. Each takes ``lr`` as a number or a
scheduler (``Constant``, ``ExponentialDecay``, ``StepDecay``, ``CosineDecay``,
``PolynomialDecay``, ``OneCycle``, all
with optional warm-up) that advances once per ``backward_and_update``, and an
optional ``clip_norm`` (gradient clipping by global norm). ``LossScaler`` is
dynamic loss scaling for float16 training (``Model.compile(..., precision="mixed")``).

Example::

    from singa import opt
    sgd = opt.SGD(0.05, momentum=0.9)
    for p, g in autograd.backward(loss):
        sgd.update(p, g)
    # or, equivalently plus a scheduler step:
    sgd(loss)

Data-parallel training wraps any of them: ``opt.DistOpt(sgd)`` (see
:mod:`singa.opt.dist`; launch with ``mpiexec -n N python train.py``).
"""

from singa.opt.base import Optimizer, clip_by_global_norm, global_norm
from singa.opt.dist import DistOpt
from singa.opt.optimizers import SGD, AdaGrad, Adam, AdamW, RMSProp
from singa.opt.scaler import LossScaler
from singa.opt.schedulers import (
    Constant,
    CosineDecay,
    DecayScheduler,
    ExponentialDecay,
    OneCycle,
    PolynomialDecay,
    Scheduler,
    StepDecay,
)

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSProp",
    "AdaGrad",
    "Scheduler",
    "DecayScheduler",
    "Constant",
    "ExponentialDecay",
    "StepDecay",
    "CosineDecay",
    "PolynomialDecay",
    "OneCycle",
    "LossScaler",
    "clip_by_global_norm",
    "DistOpt",
    "global_norm",
]
