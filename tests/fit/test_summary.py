"""Model.summary(): the table's shapes, parameter counts and MACs, counted by hand."""

import numpy as np
import pytest

from singa import layer, model, tensor
from tests.fit.fit_helpers import CNN, MLP, classification, made, params


def test_cnn_summary_counts():
    m = CNN()
    from singa.model.summary import layer_rows

    rows, totals = layer_rows(m, (1, 8, 8))
    rows = {r["name"]: r for r in rows}
    assert rows["conv"]["output_shape"] == ("None", 4, 8, 8)
    assert rows["conv"]["params"] == 4 * 1 * 3 * 3 + 4
    assert rows["conv"]["macs"] == 8 * 8 * 4 * 1 * 3 * 3
    assert rows["pool"]["output_shape"] == ("None", 4, 4, 4) and rows["pool"]["params"] == 0
    assert rows["flat"]["output_shape"] == ("None", 64)
    assert rows["fc"]["params"] == 64 * 3 + 3 and rows["fc"]["macs"] == 64 * 3
    assert totals["params"] == totals["trainable"] == 40 + 195
    assert totals["bytes"] == 4 * 235 and totals["macs"] == 2304 + 192
    assert "loss_fn" not in rows  # never called by forward


def test_summary_text_and_states_unchanged():
    m = made()
    x, y = classification(32)
    m.fit(x, y, batch_size=16, verbose=0)
    before = params(m)
    lines = []
    text = m.summary(print_fn=lines.append)  # the compiled input shape
    assert lines == [text]
    assert "l1 (Linear)" in text and "(None, 16)" in text and "Total params: 195" in text
    assert "MACs per sample: 176" in text
    for k, v in params(m).items():
        np.testing.assert_array_equal(v, before[k])
    assert m.training


def test_summary_frozen_and_buffers():
    class BN(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(4)
            self.bn = layer.BatchNorm2d(2)

        def forward(self, x):
            return self.bn(x), self.fc(tensor.reshape(x, (x.shape[0], -1)))

    from singa.model.summary import layer_rows

    m = BN()
    rows, totals = layer_rows(m, (2, 3, 3))
    rows = {r["name"]: r for r in rows}
    assert rows["bn"]["trainable"] == "partly"  # scale/bias train, running stats do not
    assert totals["non_trainable"] == 4 and totals["trainable"] == 4 + 18 * 4 + 4
    assert totals["output_shape"] == [("None", 2, 3, 3), ("None", 4)]


def test_summary_needs_a_shape():
    with pytest.raises(ValueError, match="give input_shape"):
        MLP().summary()
    with pytest.raises(ValueError, match="positive ints"):
        MLP().summary((0, 3))
