"""Train the zoo's MNIST CNN on the embedded Fashion-MNIST subset with the Model API
(what ``singa-train`` does, in a page).

    python examples/train_cnn.py              # 3 epochs, about 85% validation accuracy
    python examples/train_cnn.py --steps 20   # a quick look
"""

from __future__ import annotations

import argparse

from singa import data, device, opt, tensor, zoo


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)

    dev = device.get_default_device()
    dev.set_rand_seed(0)
    ds = data.load("fashion-mnist-mini")
    mean, std = data.channel_mean_std(ds.x_train)
    train = data.DataLoader(
        ds.x_train, ds.y_train, args.batch_size, shuffle=True, seed=0, drop_last=True, mean=mean, std=std
    )
    val = data.DataLoader(ds.x_val, ds.y_val, 256, mean=mean, std=std)

    model = zoo.create("cnn", num_classes=ds.info.num_classes, num_channels=ds.info.num_channels)
    model.set_optimizer(opt.SGD(lr=opt.CosineDecay(0.05, decay_steps=args.epochs * len(train)), momentum=0.9))
    tx = tensor.Tensor((args.batch_size, *ds.info.sample_shape), dev, requires_grad=False)
    model.compile([tx], is_train=True, use_graph=True, sequential=False)

    step, acc = 0, 0.0
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            out, loss = model(tensor.from_numpy(x, dev), tensor.from_numpy(y, dev))
            step += 1
            if args.steps is not None and step >= args.steps:
                break
        model.eval()
        correct = sum(int((model(tensor.from_numpy(x, dev)).to_numpy().argmax(1) == y).sum()) for x, y in val)
        acc = correct / len(ds.y_val)
        print(f"epoch {epoch + 1}: last loss {float(loss):.4f}, validation accuracy {100 * acc:.2f}%")
        if args.steps is not None and step >= args.steps:
            break
    return acc


if __name__ == "__main__":
    main()
