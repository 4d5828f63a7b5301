"""ONNX export and import of SINGA's operators that span families (cossim, ranking_loss,
globalaveragepool), and the check that every operator type Apache SINGA's ONNX backend
imports is imported here. The per-family tests are in ``test_onnx_<family>.py``."""

from __future__ import annotations

import pytest
from sonnx_helpers import op_types, param, rand, roundtrip

from singa import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_cossim_ranking_loss_globalaveragepool():
    w = param(rand((5, 5), seed=4))
    roundtrip(lambda x: autograd.cossim(x, autograd.matmul(x, w)), lambda b: [rand((b, 5), seed=5)])
    roundtrip(
        lambda p, n: autograd.ranking_loss(p, n, 0.3), lambda b: [rand((b,), seed=6), rand((b,), seed=7)]
    )
    roundtrip(
        lambda p, n: autograd.ranking_loss(p, n), lambda b: [rand((b, 2), seed=8), rand((b, 2), seed=9)]
    )
    for fmt, shape in (
        ("channels_first", (2, 3, 4)),
        ("channels_first", (2, 3, 2, 2)),
        ("channels_last", (3, 4, 2)),
    ):
        model = roundtrip(
            lambda x, f=fmt: autograd.globalaveragepool(x, f), lambda b, s=shape: [rand((b, *s))]
        )
        assert "GlobalAveragePool" in op_types(model)


# The ONNX operator types Apache SINGA's ONNX backend imports (its sonnx module, 81 types).
SINGA_IMPORTS = """
Abs Acos Acosh Add And Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Clip
Concat ConstantOfShape Conv Cos Cosh DepthToSpace Div Dropout Elu Equal Erf Expand Flatten
Floor Gather Gemm GlobalAveragePool Greater HardSigmoid Identity LeakyRelu Less Log MatMul Max
MaxPool Mean Min Mul Neg NonZero Not OneHot Or PRelu Pad Pow Reciprocal ReduceMean ReduceSum
Relu Reshape ScatterElements Selu Shape Sigmoid Sign Sin Sinh Slice Softmax Softplus Softsign
SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh Tile Transpose Unsqueeze Upsample Where Xor
""".split()


def test_every_operator_singa_imports_is_imported_here():
    from singa.sonnx import backend

    assert len(SINGA_IMPORTS) == 81
    missing = set(SINGA_IMPORTS) - set(backend.supported_ops())
    assert not missing, sorted(missing)
