"""CPU kernels below autograd: the machinery operators, optimizers and inference call.

Nothing here knows about ``Operation`` or ``Tensor``: these modules take numpy (or
cupy) arrays and return arrays.

- :mod:`~singa.kernels.workers`: pieces of work on the worker threads (both cores).
- :mod:`~singa.kernels.blas_threads`: BLAS threads per product shape.
- :mod:`~singa.kernels.products`: large matrix products in blocks on the workers.
- :mod:`~singa.kernels.jit`: numba kernels (compiled once, cached).
- :mod:`~singa.kernels.buffers`: the pool of scratch arrays and the buffer-ownership rule.
- :mod:`~singa.kernels.im2col`: columns, col2im, channels-last layout, padding.
- :mod:`~singa.kernels.conv_geometry`: convolution and pooling geometry (pads, sizes).
- :mod:`~singa.kernels.conv_epilogue`: bias, BatchNorm, residual, ReLU and max-pool
  applied to a convolution's batch slices.
- :mod:`~singa.kernels.conv_slices`: a convolution's batch slices on the workers and
  its filter layouts.
- :mod:`~singa.kernels.conv_forward`: the forward of a convolution, plain (the
  operator's) or with an eval-only epilogue (inference's fused kernels).
- :mod:`~singa.kernels.conv_depthwise`: depthwise convolution kernels.
- :mod:`~singa.kernels.conv_winograd`: eval-only Winograd convolutions of folded
  inference graphs.
"""
