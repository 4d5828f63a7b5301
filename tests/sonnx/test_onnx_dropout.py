"""Dropout: ONNX export (Identity outside training, checked by onnxruntime at two batch
sizes) and import of one-node Dropout
models (the identity unless training, the mask output boolean)."""

from __future__ import annotations

import numpy as np
from sonnx_helpers import check_export, op_types, rand, run_node_model

from singa import autograd


def test_dropout_outside_training_exports_as_identity():
    model = check_export(lambda x: autograd.dropout(x, 0.3, training=False), lambda b: [rand((b, 4))])
    assert op_types(model) == ["Identity"]


def test_dropout_node_imports_as_the_identity_with_a_boolean_mask():
    x = rand((3, 4), seed=2)
    y, mask = run_node_model("Dropout", {"x": x, "c_ratio": np.float32(0.5)}, n_out=2, opset=13)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
