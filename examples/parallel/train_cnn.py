"""The training loop shared by the distributed examples (SINGA's
``examples/cnn/train_cnn.py`` role): a zoo model on the embedded Fashion-MNIST subset,
each rank on its shard of every global batch, rank 0 printing.

Called by ``train_mpi.py`` (ranks started by mpiexec) and ``train_multiprocess.py``
(ranks started by Python's multiprocessing, GPUs and NCCL).
"""

from __future__ import annotations

import time

import numpy as np

from singa import data, device, tensor, zoo


def run(
    global_rank: int,
    world_size: int,
    local_rank: int,
    max_epoch: int,
    batch_size: int,
    model: str,
    data_name: str,
    sgd,
    graph: bool = True,
    verbosity: int = 0,
    dist_option: str = "plain",
    spars: float | None = None,
    max_steps: int | None = None,
    gpu: bool = False,
) -> float:
    """Train ``model`` with the DistOpt ``sgd``; returns rank 0's validation accuracy
    (every rank computes it on the whole validation set)."""
    dev = device.create_cuda_gpu_on(local_rank) if gpu else device.get_default_device()
    dev.set_rand_seed(0)  # the same initial parameters on every rank
    ds = data.load(data_name)
    mean, std = data.channel_mean_std(ds.x_train)
    train = data.DataLoader(
        ds.x_train, ds.y_train, batch_size, shuffle=True, seed=0, drop_last=True, mean=mean, std=std,
        num_replicas=world_size, rank=global_rank,
    )  # fmt: skip
    val = data.DataLoader(ds.x_val, ds.y_val, 256, mean=mean, std=std)
    net = zoo.create(model, num_classes=ds.info.num_classes, num_channels=ds.info.num_channels)
    net.set_optimizer(sgd)
    tx = tensor.Tensor((batch_size, *ds.info.sample_shape), dev, requires_grad=False)
    net.compile([tx], is_train=True, use_graph=graph, sequential=False)
    if global_rank == 0:
        print(f"{model} on {data_name}: {world_size} ranks x batch {batch_size}, {dist_option}", flush=True)
    acc, step = 0.0, 0
    for epoch in range(max_epoch):
        net.train()
        t0 = time.perf_counter()
        losses = []
        for x, y in train:
            _, loss = net(tensor.from_numpy(x, dev), tensor.from_numpy(y, dev), dist_option, spars)
            losses.append(float(loss))
            step += 1
            if max_steps is not None and step >= max_steps:
                break
        dt = time.perf_counter() - t0
        net.eval()
        correct = sum(int((net(tensor.from_numpy(x, dev)).to_numpy().argmax(1) == y).sum()) for x, y in val)
        acc = correct / len(ds.y_val)
        if global_rank == 0:
            print(
                f"epoch {epoch + 1}: mean loss {np.mean(losses):.4f} (rank 0), validation accuracy "
                f"{100 * acc:.2f}%, {len(losses) * batch_size * world_size / dt:,.0f} samples/s",
                flush=True,
            )
        if max_steps is not None and step >= max_steps:
            break
    return acc
