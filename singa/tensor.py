"""Tensor: an n-dimensional array on a device, with the attributes autograd needs.

A :class:`Tensor` wraps a numpy array (CPU) or a cupy array (GPU) in ``.data``.
Autograd uses three attributes (as in SINGA): ``.creator`` (the Operation that
produced it, None for a leaf), ``.requires_grad`` (its gradient must be computed)
and ``.stores_grad`` (its gradient is yielded by ``autograd.backward``; implies
``requires_grad``).

Example::

    from singa import tensor
    w = tensor.Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)
    w.gaussian(0.0, 0.1)
    x = tensor.from_numpy(np.ones((4, 2), np.float32))
    y = x @ w            # records an autograd operation
"""

from singa.tensor_core import (  # noqa: F401 - the face of the tensor module
    PlaceHolder,
    Tensor,
    bind_operators,
    float16,
    float32,
    float64,
    from_numpy,
    int32,
    int64,
    ones,
    ones_like,
    random,
    singa_dtype,
    to_numpy,
    zeros,
    zeros_like,
)

# SINGA's module-level functions live in their own module; re-exported here so that
# ``tensor.sum(...)`` etc. work as in SINGA.
from singa.tensor_functions import (  # noqa: F401 - re-exported
    abs,
    add,
    add_column,
    add_row,
    average,
    axpy,
    bernoulli,
    ceil,
    concatenate,
    contiguous,
    copy_data_to_from,
    copy_from_numpy,
    div,
    einsum,
    eltwise_mult,
    eq,
    exp,
    from_raw_tensor,
    from_raw_tensors,
    gaussian,
    ge,
    gt,
    le,
    log,
    lt,
    mult,
    pow,
    product,
    repeat,
    reshape,
    sigmoid,
    sign,
    sizeof,
    softmax,
    sqrt,
    square,
    sub,
    sum,
    sum_columns,
    sum_rows,
    tanh,
    tensordot,
    to_host,
    transpose,
    uniform,
)
