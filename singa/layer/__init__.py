"""Layers: parameterised building blocks that size themselves on first call.

Every layer subclasses :class:`Layer` (``singa.layer.base``): parameters are created on
the first call from the input's shape, device and float dtype (``Linear(10)`` needs no
input size), or at construction when every size is given (``Linear(784, 10)``); states
are named by attribute path (``conv1.W``, ``block1.layers.1.W``, ``bn1.running_mean``).

Example::

    from singa import layer
    fc = layer.Linear(10)
    y = fc(x)                      # W: (x.shape[-1], 10), created now
    print(list(fc.get_params()))   # ['W', 'b']
"""

from singa.layer.activation import GELU, HardSwish, LeakyReLU, Mish, ReLU, Sigmoid, SiLU, SoftMax, Tanh
from singa.layer.attention import MultiHeadAttention
from singa.layer.base import Layer, LoadResult
from singa.layer.conv import (
    AvgPool1d,
    AvgPool2d,
    Conv2d,
    GlobalAvgPool2d,
    MaxPool1d,
    MaxPool2d,
    Pooling2d,
    SeparableConv2d,
)
from singa.layer.linear import Embedding, Gemm, Linear
from singa.layer.loss import BinaryCrossEntropy, CrossEntropy, MeanSquareError, SoftMaxCrossEntropy
from singa.layer.merge import Add, Cat
from singa.layer.norm import BatchNorm2d, Dropout, LayerNorm, RMSNorm
from singa.layer.position import PatchEmbedding, PositionalEmbedding, SinusoidalPositionalEncoding
from singa.layer.rnn import LSTM, RNN, RNN_Base
from singa.layer.rnn_gru import GRU, CudnnRNN
from singa.layer.shaping import Flatten, Reshape
from singa.layer.transformer import (
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
