"""Graph mode on a CUDA GPU (cupy): replays match eager steps. Skipped without a GPU."""

import numpy as np
import pytest
from model_helpers import CNN, MLP, batches

from singa import device, opt
from singa.tensor import Tensor

cupy = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(device.get_num_gpus() == 0, reason="no CUDA GPU visible to cupy"),
]


def _train(make, use_graph, sequential, data):
    gpu = device.create_cuda_gpu()
    gpu.set_rand_seed(0)
    m = make()
    for t in m.get_states().values():
        t.to_device(gpu)
    m.set_optimizer(opt.SGD(0.1, momentum=0.9))
    m.graph(use_graph, sequential)
    losses = []
    for x, y in data:
        out, loss = m(
            Tensor(data=x, device=gpu), Tensor(data=y, device=gpu, dtype=np.int32, requires_grad=False)
        )
        losses.append(loss.to_numpy())
    return losses, {k: v.to_numpy() for k, v in m.get_states().items()}


@pytest.mark.parametrize("make, shape", [(MLP, (16, 6)), (lambda: CNN(ratio=0.0), (4, 2, 8, 8))])
@pytest.mark.parametrize("sequential", [True, False])
def test_gpu_graph_matches_eager(make, shape, sequential):
    data = batches(4, shape, 3)
    eager = _train(make, False, False, data)
    graph = _train(make, True, sequential, data)
    for a, b in zip(eager[0], graph[0]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for k in eager[1]:
        np.testing.assert_allclose(eager[1][k], graph[1][k], rtol=1e-5, atol=1e-6, err_msg=k)
