"""A model exported by PyTorch's torch.onnx.export imports, matches and fine-tunes."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from singa import opt, sonnx, tensor

torch = pytest.importorskip("torch")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.leaky_relu(self.dw(y), 0.1)
        y = torch.sigmoid(self.up(y))
        y = torch.nn.functional.max_pool2d(self.pool(y), 1)
        y = torch.flatten(y, 1)
        return torch.nn.functional.gelu(self.fc(torch.nn.functional.dropout(y, 0.2, self.training)))


def export(net, opset):
    torch.manual_seed(0)
    net.eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    buf = io.BytesIO()
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                net,
                (x,),
                buf,
                opset_version=opset,
                input_names=["x"],
                output_names=["y"],
                dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
                dynamo=False,
            )
        except Exception as e:  # pragma: no cover - depends on the torch build
            pytest.skip(f"torch.onnx.export is not usable here: {e}")
    return buf.getvalue()


@pytest.mark.parametrize("opset", [13, 17])
def test_torch_export_imports_and_matches(opset):
    torch.manual_seed(0)
    net = Net()
    data = export(net, opset)
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.tensor(x)).numpy()
    (got,) = sonnx.prepare(data).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_torch_model_fine_tunes():
    torch.manual_seed(1)
    data = export(Net(), 17)
    m = sonnx.SONNXModel(data)
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    m.train()
    x = tensor.from_numpy(np.random.default_rng(1).standard_normal((8, 3, 8, 8)).astype(np.float32))
    y = tensor.from_numpy((np.arange(8) % 5).astype(np.int64))
    losses = [float(m(x, y)[1]) for _ in range(6)]
    assert losses[-1] < losses[0]
