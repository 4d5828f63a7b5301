"""A compiled count of correct class predictions, for the accuracy metric.

fit updates its accuracy after every training step, when the interpreter's caches are
cold from the step: numpy's ``argmax``, ``==`` and ``count_nonzero`` then cost about
17 us together on a 64 x 10 batch, this one loop about 7 us.
"""

from __future__ import annotations

from singa.kernels.jit import kernel

__all__ = ["count_correct"]


@kernel
def count_correct(out, labels):  # pragma: no cover (compiled)
    """How many rows of ``out`` (N, classes >= 1) have their largest value at the
    index ``labels[i]``: numpy's ``argmax`` (the first largest; the first NaN if any)."""
    correct = 0
    for i in range(out.shape[0]):
        best = 0
        top = out[i, 0]
        if top == top:
            for j in range(1, out.shape[1]):
                v = out[i, j]
                if v != v:
                    best = j
                    break
                if v > top:
                    best, top = j, v
        if best == labels[i]:
            correct += 1
    return correct
