"""SINGA's "Operation + Layer" CNN (from SINGA's autograd documentation): autograd.Conv2d,
BatchNorm2d, MaxPool2d, AvgPool2d layers with the relu, cat and flatten operations,
trained by SGD for a few steps, printing the loss.

The layers and the forward function are the documentation's, unchanged; only the data
loading and the sizes come from the command line.

The learning rate is 5e-4: the classifier sees 32 x 28 x 28 = 25,088 features of unit
variance (batch-normalized, never downsampled), so one SGD step moves the logits by
about lr x 25,088 / batch x the error, and momentum 0.9 multiplies that by up to 10.
With lr 5e-3 the steps overshoot: the loss first falls, then oscillates ever wider
as the momentum builds up (2-6 after 40 steps on fashion-mnist-mini); with 5e-4 it
falls steadily (about 0.5 after 50 steps).

Run:
    python examples/autograd/mnist_cnn.py                          # synthetic 28x28 data
    python examples/autograd/mnist_cnn.py --dataset fashion-mnist-mini --steps 50
    python examples/autograd/mnist_cnn.py --dataset mnist --epochs 1 --steps 0  # full epochs
    python examples/autograd/mnist_cnn.py --image-size 8 --batch-size 4 --steps 2  # tiny
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from singa import autograd, data, device, opt, tensor


def to_categorical(y, num_classes):
    """One-hot encode integer labels."""
    y = np.array(y, dtype="int")
    categorical = np.zeros((y.shape[0], num_classes))
    categorical[np.arange(y.shape[0]), y] = 1
    return categorical.astype(np.float32)


def load_data(name: str, image_size: int, n: int, seed: int):
    """(x_train, y_train one-hot, IMG_SIZE) for ``name``; a dataset that cannot be
    loaded ends the program with one line."""
    try:
        if name == "synthetic":
            ds = data.load("synthetic", shape=(1, image_size, image_size), n=n, n_test=0, seed=seed)
        else:
            ds = data.load(name)
    except (data.DatasetNotFoundError, data.DownloadError, data.ChecksumError, data.DataFormatError) as e:
        raise SystemExit(f"mnist_cnn.py: cannot load dataset {name!r}: {str(e).splitlines()[0]}") from None
    except ValueError as e:  # an unknown name
        raise SystemExit(f"mnist_cnn.py: {e}") from None
    x_train, y_train = ds.x_train.astype(np.float32), ds.y_train
    return x_train, to_categorical(y_train, 10), x_train.shape[-1]


def main(argv: list[str] | None = None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dataset", default="synthetic", help="synthetic, fashion-mnist-mini, mnist, fashion-mnist"
    )
    p.add_argument("--image-size", type=int, default=28, help="image size of the synthetic data")
    p.add_argument("--num-samples", type=int, default=512, help="number of synthetic samples")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="batches per epoch (0: the whole training set)")
    p.add_argument("--lr", type=float, default=0.0005, help="SGD learning rate (see above)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu", action="store_true", help="train on the first CUDA GPU (needs cupy)")
    args = p.parse_args(argv)

    dev = device.create_cuda_gpu() if args.gpu else device.get_default_device()
    dev.set_rand_seed(args.seed)
    np.random.seed(args.seed)
    x_train, y_train, IMG_SIZE = load_data(args.dataset, args.image_size, args.num_samples, args.seed)
    batch_sz = args.batch_size
    epochs = args.epochs
    batch_number = x_train.shape[0] // batch_sz
    if args.steps:
        batch_number = min(batch_number, args.steps)

    # ----- the documentation's layers (28 replaced by IMG_SIZE) -----
    conv1 = autograd.Conv2d(1, 32, 3, padding=1, bias=False)
    bn1 = autograd.BatchNorm2d(32)
    pooling1 = autograd.MaxPool2d(3, 1, padding=1)
    conv21 = autograd.Conv2d(32, 16, 3, padding=1)
    conv22 = autograd.Conv2d(32, 16, 3, padding=1)
    bn2 = autograd.BatchNorm2d(32)
    linear = autograd.Linear(32 * IMG_SIZE * IMG_SIZE, 10)
    pooling2 = autograd.AvgPool2d(3, 1, padding=1)

    def forward(x, t):
        # x is the input data (a batch of images)
        # t is the label vector (a batch of integers)
        y = conv1(x)  # Conv layer
        y = autograd.relu(y)  # ReLU operation
        y = bn1(y)  # BN layer
        y = pooling1(y)  # Pooling Layer

        # two parallel convolution layers
        y1 = conv21(y)
        y2 = conv22(y)
        y = autograd.cat((y1, y2), 1)  # cat operation
        y = autograd.relu(y)  # ReLU operation
        y = bn2(y)
        y = pooling2(y)

        y = autograd.flatten(y)  # flatten operation
        y = linear(y)  # Linear layer
        loss = autograd.softmax_cross_entropy(y, t)  # operation
        return loss, y

    sgd = opt.SGD(lr=args.lr, momentum=0.9)
    losses = []
    autograd.training = True
    for epoch in range(epochs):
        for i in range(batch_number):
            start = time.perf_counter()
            inputs = tensor.Tensor(
                device=dev, data=x_train[i * batch_sz : (1 + i) * batch_sz], stores_grad=False
            )
            targets = tensor.Tensor(
                device=dev,
                data=y_train[i * batch_sz : (1 + i) * batch_sz],
                requires_grad=False,
                stores_grad=False,
            )

            loss, y = forward(inputs, targets)  # forward the net

            for p_, gp in autograd.backward(loss):  # auto backward
                sgd.update(p_, gp)
            losses.append(float(loss.to_numpy()[0]))
            acc = (y.to_numpy().argmax(1) == targets.to_numpy().argmax(1)).mean()
            print(
                f"epoch {epoch} step {i}: loss = {losses[-1]:.4f}, accuracy = {acc:.3f} "
                f"({time.perf_counter() - start:.3f} s)",
                flush=True,
            )
    return losses


if __name__ == "__main__":
    main()
