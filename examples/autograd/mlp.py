"""SINGA's "operation only" MLP: a 2-class problem learned with matmul, add_bias,
relu and softmax_cross_entropy, updated by SGD (from SINGA's autograd documentation).

Run: python examples/autograd/mlp.py
"""

import numpy as np

from singa import autograd, opt
from singa.tensor import Tensor


def to_categorical(y, num_classes):
    """One-hot encode integer labels."""
    y = np.array(y, dtype="int")
    categorical = np.zeros((y.shape[0], num_classes))
    categorical[np.arange(y.shape[0]), y] = 1
    return categorical.astype(np.float32)


if __name__ == "__main__":
    np.random.seed(0)
    # 400 noisy points labelled by which side of the line y = 5x + 1 they fall
    f = lambda x: 5 * x + 1  # noqa: E731
    bd_x = np.linspace(-1.0, 1, 200)
    bd_y = f(bd_x)
    x = np.random.uniform(-1, 1, 400)
    y = f(x) + 2 * np.random.randn(len(x))
    label = np.asarray([5 * a + 1 > b for (a, b) in zip(x, y)])
    label = to_categorical(label, 2).astype(np.float32)
    data = np.array([[a, b] for (a, b) in zip(x, y)], dtype=np.float32)

    w0 = Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)
    w0.gaussian(0.0, 0.1)
    b0 = Tensor(shape=(1, 3), requires_grad=True, stores_grad=True)
    b0.set_value(0.0)

    w1 = Tensor(shape=(3, 2), requires_grad=True, stores_grad=True)
    w1.gaussian(0.0, 0.1)
    b1 = Tensor(shape=(1, 2), requires_grad=True, stores_grad=True)
    b1.set_value(0.0)

    inputs = Tensor(data=data)  # data matrix
    target = Tensor(data=label)  # label vector
    autograd.training = True  # for training
    sgd = opt.SGD(0.05)  # optimizer

    for i in range(1001):
        x = autograd.matmul(inputs, w0)  # matrix multiplication
        x = autograd.add_bias(x, b0)  # add the bias vector
        x = autograd.relu(x)  # ReLU activation operation

        x = autograd.matmul(x, w1)
        x = autograd.add_bias(x, b1)

        loss = autograd.softmax_cross_entropy(x, target)

        for p, g in autograd.backward(loss):
            sgd.update(p, g)

        if i % 100 == 0:
            print(f"training loss = {loss.to_numpy()[0]:.4f}")

    accuracy = (x.to_numpy().argmax(axis=1) == label.argmax(axis=1)).mean()
    print(f"training accuracy = {accuracy:.3f}")
