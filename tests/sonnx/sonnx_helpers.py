"""Shared helpers of the sonnx tests: export, check with onnxruntime at several batch
sizes against our own eval output."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

from singa import autograd, sonnx, tensor
from singa.layer.base import Layer

ort = None


def session(model: onnx.ModelProto):
    """An onnxruntime CPU session with one thread (the test machines are small)."""
    global ort
    if ort is None:
        import onnxruntime

        ort = onnxruntime
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def reference(target, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Our own outputs, evaluated as the exporter traces them (eval mode, no_grad)."""
    xs = [tensor.from_numpy(a) for a in arrays]
    if isinstance(target, Layer):
        modes = [(target, target.training)] + [(s, s.training) for s in target.sublayers().values()]
        target.eval()
        try:
            with autograd.no_grad():
                target.ensure_initialized(*xs)
                out = target.forward(*xs)
        finally:
            for layer, mode in modes:
                layer.training = mode
    else:
        with autograd.no_grad():
            out = target(*xs)
    outs = out if isinstance(out, list | tuple) else [out]
    return [o.to_numpy() for o in outs]


def check_export(
    target,
    make: Callable[[int], Sequence[np.ndarray]],
    batches: Sequence[int] = (3, 5),
    tol: float = 1e-4,
    **kwargs,
) -> onnx.ModelProto:
    """Export ``target`` traced on ``make(batches[0])``, check it with the full checker
    (to_onnx does) and compare onnxruntime's outputs with ours at every batch size:
    max abs diff <= tol * max(1, output scale)."""
    first = [tensor.from_numpy(a) for a in make(batches[0])]
    model = sonnx.to_onnx(first, target, **kwargs)
    onnx.checker.check_model(model, full_check=True)
    sess = session(model)
    names = [i.name for i in sess.get_inputs()]
    for b in batches:
        arrays = list(make(b))
        want = reference(target, arrays)
        got = sess.run(None, dict(zip(names, arrays)))
        assert len(got) == len(want)
        for w, g in zip(want, got):
            assert g.shape == w.shape, f"batch {b}: shape {g.shape} != {w.shape}"
            scale = max(1.0, float(np.abs(w).max()) if w.size else 1.0)
            err = float(np.abs(g.astype(np.float64) - w).max()) if w.size else 0.0
            assert err <= tol * scale, f"batch {b}: max abs diff {err:.3g} (scale {scale:.3g})"
    return model


def rand(shape, seed: int = 0, dtype=np.float32, low: float | None = None, high: float | None = None):
    """A reproducible random array (normal, or uniform in [low, high))."""
    rng = np.random.default_rng(seed + int(np.prod(shape)))
    if low is not None:
        return rng.uniform(low, high, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def op_types(model: onnx.ModelProto) -> list[str]:
    """The op types of a model's nodes, in order."""
    return [n.op_type for n in model.graph.node]


def node_model(op_type: str, inputs: dict, n_out: int = 1, opset: int = 18, **attrs) -> onnx.ModelProto:
    """A one-node ONNX model of ``op_type``: ``inputs`` maps names to arrays (graph
    inputs, in order; a name starting with "c_" is an initializer), outputs y0, y1, ..."""
    from onnx import helper, numpy_helper

    feeds = [n for n in inputs if not n.startswith("c_")]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in inputs.items() if n.startswith("c_")]
    vis = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(inputs[n]).dtype), None)
        for n in feeds
    ]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, list(inputs), outs, **attrs)
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        vis,
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model)
    for want, got in zip(model.graph.output, inferred.graph.output):
        want.CopyFrom(got)
    return model


def run_node_model(op_type: str, inputs: dict, n_out: int = 1, opset: int = 18, **attrs) -> list:
    """Our outputs of :func:`node_model` (fed the non-initializer inputs)."""
    model = node_model(op_type, inputs, n_out, opset, **attrs)
    return sonnx.prepare(model).run([np.asarray(a) for n, a in inputs.items() if not n.startswith("c_")])


def ort_node_model(op_type: str, inputs: dict, n_out: int = 1, opset: int = 18, **attrs) -> list:
    """onnxruntime's outputs of :func:`node_model`."""
    sess = session(node_model(op_type, inputs, n_out, opset, **attrs))
    return sess.run(None, {n: np.asarray(a) for n, a in inputs.items() if not n.startswith("c_")})


def handler_fn(op_type: str, opset: int = 18, n_inputs: int = 1, **attrs):
    """The import handler of ``op_type`` as a function of Tensors (for gradchecks of
    handlers composed of autograd operators)."""
    from onnx import helper

    from singa.sonnx import registry
    from singa.sonnx.context import NodeContext

    node = helper.make_node(op_type, [f"x{i}" for i in range(n_inputs)], ["y"], **attrs)

    def fn(*ts):
        ctx = NodeContext(node, opset, ts[0].device, True)
        out = registry.IMPORT[op_type](ctx, list(ts))
        return out[0] if isinstance(out, list | tuple) else out

    return fn


def param(a, name: str | None = None) -> tensor.Tensor:
    """A parameter tensor (requires and stores its gradient) holding ``a``."""
    a = np.asarray(a)
    return tensor.Tensor(data=a, dtype=a.dtype, requires_grad=True, stores_grad=True, name=name)


def roundtrip(fn, make: Callable[[int], Sequence[np.ndarray]], **kwargs) -> onnx.ModelProto:
    """Export ``fn`` (checked by onnxruntime at batches 3 and 5), import it with
    ``sonnx.prepare`` and run it at both batches against our own output."""
    model = check_export(fn, make, **kwargs)
    rep = sonnx.prepare(model)
    for b in (3, 5):
        arrays = make(b)
        for want, got in zip(reference(fn, arrays), rep.run(arrays), strict=True):
            got = np.asarray(got)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return model


def unit(b: int) -> list[np.ndarray]:
    """One (b, 3, 4) float32 array in (-0.9, 0.9) (inside every inverse function's domain)."""
    return [rand((b, 3, 4), low=-0.9, high=0.9)]


def case_value(v):
    """An ONNX node case's input or output as a run takes and returns it: an array, a
    list of arrays (a sequence), None (an empty optional), read with ``numpy_helper``."""
    from onnx import numpy_helper

    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, onnx.SequenceProto):
        return numpy_helper.to_list(v)
    if isinstance(v, onnx.OptionalProto):
        return case_value(numpy_helper.to_optional(v))
    return v


def bilinear(img: np.ndarray, y: float, x: float) -> float:
    """A 2-D image at real pixel coordinates (y, x), bilinear, zeros outside: the
    scalar twin of GridSample and DeformConv's sampling."""
    h, w = img.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                total += wy * wx * img[yy, xx]
    return total
