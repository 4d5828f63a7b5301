"""Whole models exported by PyTorch for the import tests and the benchmark
(``bench/bench_onnx_models.py``): small networks written with ``torch.nn`` alone in
the shapes of the classification, segmentation and attention models real exports
hold (a ResNet block net, a MobileNet-style depthwise net, a ViT-style attention
net, an upsampling segmentation head), and torchvision's models when torchvision
imports. Everything here needs torch; callers skip when it does not import."""

from __future__ import annotations

import io
import os
import sys
import warnings

import numpy as np


def _torch():
    import torch

    return torch


def small_models() -> dict:
    """``{name: (make_module, input_shape)}`` of the torch.nn-only models."""
    torch = _torch()
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c, stride):
            super().__init__()
            self.c1 = nn.Conv2d(c if stride == 1 else c // 2, c, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(c)
            self.c2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(c)
            self.skip = (
                nn.Sequential()
                if stride == 1
                else nn.Sequential(nn.Conv2d(c // 2, c, 1, stride), nn.BatchNorm2d(c))
            )

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    class ResNetBlocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
            self.blocks = nn.Sequential(Block(8, 1), Block(16, 2))
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            y = self.blocks(self.stem(x))
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    class MobileNetLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU6(),
                nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.BatchNorm2d(8), nn.Hardswish(),
                nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16), nn.ReLU6(),
                nn.Conv2d(16, 16, 3, 2, 1, groups=16), nn.BatchNorm2d(16), nn.Hardsigmoid(),
            )  # fmt: skip
            self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(16, 10))

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    class ViTLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, 16, 4, 4)
            self.cls = nn.Parameter(torch.randn(1, 1, 16) * 0.1)
            self.pos = nn.Parameter(torch.randn(1, 17, 16) * 0.1)
            layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(16)
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            t = self.patch(x).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], 1) + self.pos
            return self.head(self.norm(self.encoder(t))[:, 0])

    class SegHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.Sequential(
                nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU()
            )
            self.mid = nn.Conv2d(16, 8, 1)
            self.out = nn.Conv2d(8, 5, 3, 1, 1)

        def forward(self, x):
            y = self.mid(self.down(x))
            y = nn.functional.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
            y = nn.functional.interpolate(self.out(y), size=x.shape[-2:], mode="nearest")
            return y

    return {
        "resnet_blocks": (ResNetBlocks, (3, 16, 16)),
        "mobilenet_like": (MobileNetLike, (3, 16, 16)),
        "vit_like": (ViTLike, (3, 16, 16)),
        "segmentation_head": (SegHead, (3, 16, 16)),
    }


#: torchvision classification models (constructor name, input side), when torchvision imports
TORCHVISION = {
    "resnet18": ("resnet18", 64),
    "mobilenet_v2": ("mobilenet_v2", 64),
    "mobilenet_v3_small": ("mobilenet_v3_small", 64),
    "efficientnet_b0": ("efficientnet_b0", 64),
    "regnet_y_400mf": ("regnet_y_400mf", 64),
    "convnext_tiny": ("convnext_tiny", 64),
    "densenet121": ("densenet121", 64),
    "shufflenet_v2_x0_5": ("shufflenet_v2_x0_5", 64),
    "squeezenet1_0": ("squeezenet1_0", 64),
    "googlenet": ("googlenet", 64),
    "vit_b_16": ("vit_b_16", 224),
    "swin_t": ("swin_t", 224),
    "maxvit_t": ("maxvit_t", 224),
}
#: torchvision segmentation models (their "out" map) and a detection backbone (its FPN maps)
TORCHVISION_DENSE = {
    "fcn_resnet50": ("segmentation", "fcn_resnet50", 64),
    "deeplabv3_mobilenet_v3_large": ("segmentation", "deeplabv3_mobilenet_v3_large", 64),
    "fasterrcnn_resnet50_fpn_backbone": ("detection", "fasterrcnn_resnet50_fpn", 64),
}


def _dense_model(kind: str, ctor: str):
    torch = _torch()
    import torchvision

    if kind == "segmentation":
        net = getattr(torchvision.models.segmentation, ctor)(weights=None, weights_backbone=None)

        class SegmentationOut(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, x):
                return self.net(x)["out"]

        return SegmentationOut()
    backbone = getattr(torchvision.models.detection, ctor)(weights=None, weights_backbone=None).backbone

    class FeatureMaps(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = backbone

        def forward(self, x):
            return tuple(self.backbone(x).values())

    return FeatureMaps()


def torchvision_model(name: str):
    """A torchvision model with random weights (eval mode) and its input shape: a
    classifier of ``TORCHVISION``, or a segmentation model or detection backbone of
    ``TORCHVISION_DENSE``."""
    import torchvision

    if name in TORCHVISION_DENSE:
        kind, ctor, side = TORCHVISION_DENSE[name]
        return _dense_model(kind, ctor).eval(), (3, side, side)
    ctor, side = TORCHVISION[name]
    kwargs = {"weights": None}
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=True)
    return getattr(torchvision.models, ctor)(**kwargs).eval(), (3, side, side)


def _randomize_zeros(module) -> None:
    """Give zero-initialised weights (ViT's head, ...) small random values, so that the
    output depends on the whole network."""
    for p in module.parameters():
        if p.dim() > 1 and not bool(p.any()):
            p.normal_(0.0, 0.02)


def export(module, shape: tuple, opset: int, batch: int = 2) -> bytes:
    """``torch.onnx.export`` of ``module`` (eval mode, random BatchNorm statistics) with a
    dynamic batch axis; the ONNX bytes."""
    torch = _torch()
    torch.manual_seed(0)
    module.eval()
    with torch.no_grad():
        _randomize_zeros(module)
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    buf = io.BytesIO()
    x = torch.randn(batch, *shape)
    with torch.no_grad():
        y = module(x)
    n_out = len(y) if isinstance(y, tuple) else 1
    names = ["y"] + [f"y{i}" for i in range(1, n_out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (x,),
            buf,
            opset_version=opset,
            input_names=["x"],
            output_names=names,
            dynamic_axes={"x": {0: "n"}, **{y: {0: "n"} for y in names}},
            dynamo=False,
        )
    return buf.getvalue()


def batch(shape: tuple, n: int, seed: int = 0) -> np.ndarray:
    """A reproducible float32 input batch."""
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def store(directory: str, opset: int = 17) -> None:
    """Export every torchvision model here and write its stripped graph (``stored_graphs``)
    to ``directory/<name>.onnx.gz``."""
    import onnx
    import stored_graphs

    os.makedirs(directory, exist_ok=True)
    for name in [*TORCHVISION, *TORCHVISION_DENSE]:
        module, shape = torchvision_model(name)
        proto = onnx.load_from_string(export(module, shape, opset, batch=1))
        stored_graphs.save(proto, os.path.join(directory, f"{name}.onnx.gz"))
        print(name, os.path.getsize(os.path.join(directory, f"{name}.onnx.gz")))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="write the stripped torchvision graphs")
    parser.add_argument("--store", required=True, help="directory for <name>.onnx.gz")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    store(args.store, args.opset)
