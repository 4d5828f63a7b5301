"""ONNX export and import of the attention family (scaled_dot_product_attention,
masked_softmax): onnxruntime gives our outputs at two batch sizes and two sequence
lengths (dynamic axes), with the opset 17 decomposition and opset 23's Attention, and
our importer runs the exported graphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from sonnx_helpers import check_export, op_types, rand, reference, session

from singa import autograd, sonnx, tensor


def check_dynamic(fn, make, sizes=((2, 5), (3, 7)), opset=17, axes=None, tol=1e-4):
    """Export ``fn`` traced on ``make(*sizes[0])`` with a dynamic batch and sequence
    length, then compare onnxruntime and our importer with ``fn`` at every size."""
    first = [tensor.from_numpy(a) for a in make(*sizes[0])]
    axes = (
        axes if axes is not None else {i: [a.ndim - 2] for i, a in enumerate(make(*sizes[0])) if a.ndim >= 3}
    )
    model = sonnx.to_onnx(first, fn, opset=opset, dynamic_batch=True, dynamic_axes=axes)
    onnx.checker.check_model(model, full_check=True)
    sess = session(model)
    names = [i.name for i in sess.get_inputs()]
    rep = sonnx.prepare(model)
    for b, s in sizes:
        arrays = list(make(b, s))
        (want,) = reference(fn, arrays)
        (got,) = sess.run(None, dict(zip(names, arrays)))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=tol, rtol=0)
        (mine,) = rep.run(arrays)
        np.testing.assert_allclose(mine, want, atol=tol, rtol=0)
    return model


def qkv(b, s, h=2, d=4):
    return [rand((b, h, s, d), seed=i) for i in range(3)]


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_exports_with_dynamic_batch_and_length(opset, causal):
    def fn(q, k, v):
        return autograd.scaled_dot_product_attention(q, k, v, is_causal=causal)

    model = check_dynamic(fn, qkv, opset=opset)
    types = op_types(model)
    assert ("Attention" in types) == (opset >= 23)
    assert model.graph.input[0].type.tensor_type.shape.dim[2].dim_param  # the length is symbolic


@pytest.mark.parametrize("opset", [17, 23])
def test_sdpa_with_a_boolean_mask_input(opset):
    def make(b, s):
        mask = np.random.default_rng(s).random((b, 1, s, s)) > 0.3
        mask[..., 0] = True  # every row attends something (ONNX Attention's empty rows differ)
        return qkv(b, s) + [mask]

    check_dynamic(
        lambda q, k, v, m: autograd.scaled_dot_product_attention(q, k, v, m),
        make,
        opset=opset,
        axes={0: [2], 1: [2], 2: [2], 3: [2, 3]},
    )


def test_sdpa_float_mask_and_empty_rows_at_opset_17():
    def make(b, s):
        fm = rand((b, 1, 1, s), seed=9)
        fm[:, :, :, -1] = -np.inf
        return qkv(b, s) + [fm]

    check_dynamic(
        lambda q, k, v, m: autograd.scaled_dot_product_attention(q, k, v, m, is_causal=True),
        make,
        axes={0: [2], 1: [2], 2: [2], 3: [3]},
    )
    q, k, v = qkv(1, 3)
    fm = np.zeros((3, 3), np.float32)
    fm[:, 0] = -np.inf  # query 0's only key is masked: its row is 0 in both
    check_export(
        lambda a, b, c, m: autograd.scaled_dot_product_attention(a, b, c, m, is_causal=True),
        lambda b: [np.repeat(x, b, 0) for x in (q, k, v)] + [fm],
        batches=(2, 4),
    )


def test_sdpa_three_dim_inputs_export_the_decomposition_at_23():
    model = check_dynamic(
        lambda q, k, v: autograd.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda b, s: [rand((b, s, 4), seed=i) for i in range(3)],
        opset=23,
    )
    assert "Attention" not in op_types(model)


def test_sdpa_with_dropout_does_not_export():
    q, k, v = qkv(2, 3)
    with pytest.raises(sonnx.ExportError, match="dropout"):
        sonnx.to_onnx(
            [tensor.from_numpy(a) for a in (q, k, v)],
            lambda a, b, c: autograd.scaled_dot_product_attention(a, b, c, dropout_p=0.1),
        )


@pytest.mark.parametrize("opset,axis", [(17, -1), (17, 1), (11, 1), (11, -1)])
def test_masked_softmax_exports(opset, axis):
    mask = np.random.default_rng(0).random((1, 4, 5)) > 0.4
    mask[0, 0, :] = False
    check_export(
        lambda x: autograd.masked_softmax(x, tensor.from_numpy(mask), axis),
        lambda b: [rand((b, 4, 5))],
        opset=opset,
    )


def test_masked_softmax_imports_back():
    x = rand((2, 4, 5))
    mask = np.random.default_rng(1).random((2, 4, 5)) > 0.5
    model = sonnx.to_onnx(
        [tensor.from_numpy(x), tensor.from_numpy(mask)], lambda a, m: autograd.masked_softmax(a, m, 1)
    )
    (got,) = sonnx.prepare(model).run([x, mask])
    want = autograd.masked_softmax(tensor.from_numpy(x), tensor.from_numpy(mask), 1).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
