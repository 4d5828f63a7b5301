"""Automatic differentiation: operators on Tensors, recorded for ``backward``.

Operators always record the graph (each output's ``creator``, each operator's
``src``), as SINGA's do; ``autograd.training = True`` (SINGA's switch) makes them also
keep what backward needs, and while it is False nothing is kept for backward (so
``sonnx.to_onnx`` can export outputs computed in evaluation mode). ``no_grad()``
records nothing at all. Whether Dropout and
BatchNorm behave as in training is a separate matter, owned by the layers
(``train()``/``eval()``); the functional ``dropout`` and ``batchnorm_2d`` take a
``training`` argument that defaults to this flag.

Example::

    from singa import autograd
    autograd.training = True
    y = autograd.relu(autograd.add_bias(autograd.matmul(x, w), b))
    loss = autograd.softmax_cross_entropy(y, t)
    for p, g in autograd.backward(loss):
        sgd.update(p, g)

SINGA's autograd examples also use layer classes from this module (``autograd.Conv2d``,
``autograd.BatchNorm2d``, ...). Those live a floor up, in :mod:`singa.layer.legacy`,
which sets them on this module when it is imported (``import singa`` imports it), so
this package never imports the layers.
"""

training = False

#: the active precision policy (see :mod:`singa.model.precision`); while it is set,
#: every operator call goes through ``autocast.call(op, inputs)``
autocast = None

import sys  # noqa: E402

from singa import tensor as _tensor  # noqa: E402
from singa.autograd import engine as _engine  # noqa: E402

_engine.bind_switches(sys.modules[__name__])
_tensor.bind_operators(sys.modules[__name__])  # Tensor's + - * @ [] reshape record our operators

from singa.autograd.activation import *  # noqa: E402,F403
from singa.autograd.attention import *  # noqa: E402,F403
from singa.autograd.contraction import *  # noqa: E402,F403
from singa.autograd.conv import *  # noqa: E402,F403
from singa.autograd.conv_transpose import *  # noqa: E402,F403
from singa.autograd.creation import *  # noqa: E402,F403
from singa.autograd.dropout import *  # noqa: E402,F403
from singa.autograd.elementwise import *  # noqa: E402,F403
from singa.autograd.engine import (  # noqa: E402
    Operation,
    Operator,
    backward,
    gradients,
    no_grad,
    unbroadcast,
)
from singa.autograd.gated import *  # noqa: E402,F403
from singa.autograd.indexing import *  # noqa: E402,F403
from singa.autograd.indexing_nd import *  # noqa: E402,F403
from singa.autograd.linalg import *  # noqa: E402,F403
from singa.autograd.logical import *  # noqa: E402,F403
from singa.autograd.loss import *  # noqa: E402,F403
from singa.autograd.normalization import *  # noqa: E402,F403
from singa.autograd.operators import *  # noqa: E402,F403
from singa.autograd.pooling import *  # noqa: E402,F403
from singa.autograd.pooling_nd import *  # noqa: E402,F403
from singa.autograd.positional import *  # noqa: E402,F403
from singa.autograd.prod import *  # noqa: E402,F403
from singa.autograd.rearrange import *  # noqa: E402,F403
from singa.autograd.reduction import *  # noqa: E402,F403
from singa.autograd.resize import *  # noqa: E402,F403
from singa.autograd.rounding import *  # noqa: E402,F403
from singa.autograd.shaping import *  # noqa: E402,F403
from singa.autograd.sorting import *  # noqa: E402,F403
from singa.autograd.trigonometric import *  # noqa: E402,F403
from singa.autograd.variadic import *  # noqa: E402,F403
