"""ReLU's CPU kernels, forward and gradient, each one pass over a 1-D run of memory.

numpy's maximum ran about 5x slower than a plain loop on this machine's AVX2 (0.78
against 0.14 ms on 2**20 float32 values, one thread) and the backward made a boolean
mask first (0.5-0.8 against 0.22-0.27 ms); :class:`singa.autograd.activation.ReLU` runs
these over pieces of memory on the worker threads (:func:`workers.run_flat`). Results
are numpy's bit for bit: NaN stays NaN, -0.0 becomes 0, dy * (y > 0) keeps the sign of
a zero product.
"""

from __future__ import annotations

from singa.kernels.jit import kernel

__all__ = ["relu", "relu_grad", "relu_in_place", "relu_grad_in_place"]


@kernel
def relu(x, y):  # pragma: no cover (compiled)
    z = x.dtype.type(0)
    for i in range(x.shape[0]):
        v = x[i]
        y[i] = z if v <= z else v


@kernel
def relu_grad(dy, y, dx):  # pragma: no cover (compiled)
    z = y.dtype.type(0)
    for i in range(dy.shape[0]):
        dx[i] = dy[i] * (dy.dtype.type(1) if y[i] > z else dy.dtype.type(0))


# In-place kernels (a graph replay's): given one array as input and output, the kernels
# above fail the vector loop's overlap check and run scalar, 2.3-2.7x slower (2**20
# float32, one thread: ReLU 345 against 126 us, gradient 505 against 224 us). ``v + z``
# is v for v > 0 (NaN stays): a stored new value keeps the loop a vector select.
@kernel
def relu_in_place(x):  # pragma: no cover (compiled)
    z = x.dtype.type(0)
    for i in range(x.shape[0]):
        v = x[i]
        x[i] = z if v <= z else v + z


@kernel
def relu_grad_in_place(y, dy):  # pragma: no cover (compiled)
    z = y.dtype.type(0)
    for i in range(dy.shape[0]):
        dy[i] = dy[i] * (dy.dtype.type(1) if y[i] > z else dy.dtype.type(0))
