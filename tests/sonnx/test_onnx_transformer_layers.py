"""The attention and transformer layers export (opset 17's decomposition and opset 23's
Attention) with a dynamic batch and sequence length: onnxruntime and our importer give
our outputs at two batch sizes and two lengths."""

import numpy as np
import pytest
from sonnx_helpers import op_types
from test_onnx_attention import check_dynamic

from singa import layer
from singa.layer.base import Layer


class TinyDecoder(Layer):
    """Token embedding + learned positions + 2 causal pre-norm blocks + head."""

    def __init__(self):
        super().__init__()
        self.emb = layer.Embedding(11, 8)
        self.pos = layer.PositionalEmbedding(16, 8)
        block = layer.TransformerEncoderLayer(8, 2, 16, dropout=0.1, activation="gelu", norm_first=True)
        self.blocks = layer.TransformerEncoder(block, 2, norm=layer.LayerNorm(8))
        self.head = layer.Linear(8, 11)

    def forward(self, idx):
        return self.head(self.blocks(self.pos(self.emb(idx)), is_causal=True))


@pytest.mark.parametrize("opset", [17, 23])
def test_decoder_only_model_exports_with_dynamic_length(opset):
    model = TinyDecoder()
    model.eval()

    def make(b, s):
        return [np.random.default_rng(b * s).integers(0, 11, (b, s))]

    onnx_model = check_dynamic(model, make, opset=opset, axes={0: [1]})
    assert ("Attention" in op_types(onnx_model)) == (opset >= 23)


def test_mha_cross_attention_and_encoder_layer_export():
    mha = layer.MultiHeadAttention(8, 2, kdim=3, vdim=5)
    mha.eval()

    def cross(q, k, v):
        return mha(q, k, v)[0]

    rng = np.random.default_rng(0)
    check_dynamic(
        cross,
        lambda b, s: [rng.standard_normal((b, s, d)).astype(np.float32) for d in (8, 3, 5)],
        axes={0: [1], 1: [1], 2: [1]},
    )
    enc = layer.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=False)
    enc.eval()
    check_dynamic(enc, lambda b, s: [rng.standard_normal((b, s, 8)).astype(np.float32)], axes={0: [1]})
