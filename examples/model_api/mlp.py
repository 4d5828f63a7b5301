"""SINGA's Model-API MLP (the documentation's ``class MLP(model.Model)``, unchanged),
trained in graph mode on the 2-class problem of examples/autograd/mlp.py: 400 noisy
points labelled by which side of the line y = 5x + 1 they fall.

The model is compiled on placeholders with ``use_graph=True``; the first training
batch is traced and every later batch replays the recording (the input
placeholders are refilled with ``copy_from_numpy``). The last, smaller batch of each
epoch has another shape and gets its own trace.

Run:
    python examples/model_api/mlp.py                    # graph mode, scheduled replay
    python examples/model_api/mlp.py --sequential       # graph mode, recorded order
    python examples/model_api/mlp.py --no-graph         # eager execution
"""

from __future__ import annotations

import argparse

import numpy as np

from singa import device, layer, model, opt, tensor


class MLP(model.Model):  # the model is a subclass of Model
    def __init__(self, data_size=10, perceptron_size=100, num_classes=10):
        super(MLP, self).__init__()  # noqa: UP008 - as in SINGA's documentation

        # init the operators, layers and other objects
        self.relu = layer.ReLU()
        self.linear1 = layer.Linear(perceptron_size)
        self.linear2 = layer.Linear(num_classes)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, inputs):  # define the forward function
        y = self.linear1(inputs)
        y = self.relu(y)
        y = self.linear2(y)
        return y

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss

    def set_optimizer(self, optimizer):  # attach an optimizer
        self.optimizer = optimizer


def make_data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(points (n, 2) float32, one-hot labels (n, 2) int32) as in examples/autograd/mlp.py."""
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, n)
    y = 5 * x + 1 + 2 * rng.randn(n)
    label = (5 * x + 1 > y).astype(int)
    data = np.stack([x, y], axis=1).astype(np.float32)
    return data, np.eye(2, dtype=np.int32)[label]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=48)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=10, help="perceptron_size")
    p.add_argument("--no-graph", action="store_true", help="eager execution")
    p.add_argument("--sequential", action="store_true", help="replay in recorded order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    dev = device.get_default_device()
    dev.set_rand_seed(args.seed)
    data, labels = make_data(seed=args.seed)
    batch_size, num_classes = args.batch_size, 2

    # create a model instance
    m = MLP(data_size=2, perceptron_size=args.hidden, num_classes=num_classes)
    # initialize optimizer and attach it to the model
    sgd = opt.SGD(lr=args.lr, momentum=0.9, weight_decay=1e-5)
    m.set_optimizer(sgd)
    # input and target placeholders for the model
    tx = tensor.Tensor((batch_size, 2), dev, tensor.float32)
    ty = tensor.Tensor((batch_size, num_classes), dev, tensor.int32)
    # compile the model before training
    m.compile([tx], is_train=True, use_graph=not args.no_graph, sequential=args.sequential)

    losses = []
    order = np.random.RandomState(args.seed + 1)
    for epoch in range(args.epochs):
        idx = order.permutation(len(data))
        total, seen = 0.0, 0
        for b in range(0, len(data), batch_size):
            x, y = data[idx[b : b + batch_size]], labels[idx[b : b + batch_size]]
            if len(x) == batch_size:
                # copy the data into the input tensors
                tx.copy_from_numpy(x)
                ty.copy_from_numpy(y)
                inputs = (tx, ty)
            else:  # the last, smaller batch: new tensors (traced once, then replayed)
                inputs = (
                    tensor.Tensor(data=x, device=dev),
                    tensor.Tensor(data=y, device=dev, dtype=tensor.int32),
                )
            # training with one batch
            out, loss = m(*inputs)
            total += float(loss.to_numpy()[0]) * len(x)
            seen += len(x)
        losses.append(total / seen)
        if not args.quiet and (epoch % 5 == 0 or epoch == args.epochs - 1):
            print(f"epoch {epoch:3d}  training loss = {losses[-1]:.4f}")

    m.eval()
    logits = m(tensor.Tensor(data=data, device=dev)).to_numpy()
    accuracy = float((logits.argmax(axis=1) == labels.argmax(axis=1)).mean())
    if not args.quiet:
        print(f"training accuracy = {accuracy:.3f}  (traces: {len(m._graphs)}, lr {sgd.get_lr()})")
    return {
        "losses": losses,
        "accuracy": accuracy,
        "params": {k: v.to_numpy() for k, v in m.get_params().items()},
    }


if __name__ == "__main__":
    main()
