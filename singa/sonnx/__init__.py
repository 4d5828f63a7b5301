"""ONNX export and import (SINGA's ``sonnx``).

Export: :func:`to_onnx` exports the computation from input tensors to outputs (output
tensors computed with autograd recording, as in SINGA, or the model / a function) and
returns an ``onnx.ModelProto``; :func:`export_model` writes a model's file
(``dtype=tensor.float16`` for a float16 file); :func:`save` writes a ModelProto.

Import: :func:`prepare` returns a backend representation whose ``run(inputs)``
executes an ONNX model with autograd operators; :class:`SONNXModel` is a trainable
``Model`` built from an ONNX file.

Example::

    from singa import sonnx
    onnx_model = sonnx.to_onnx([x], model)       # model in eval mode
    autograd.training = True
    onnx_model = sonnx.to_onnx([x], [model.forward(x)], model=model)   # SINGA's form
    # (the same graph and initializer names; without model=: param_<k>, bn<k>.running_mean)
    rep = sonnx.prepare(onnx_model, dev)
    y, = rep.run([x])
"""

from singa.sonnx.backend import (
    SingaBackend,
    SingaRep,
    UnsupportedOperator,
    prepare,
    run_model,
    run_node,
    supported_ops,
    supports_device,
)
from singa.sonnx.checks import InvalidModel
from singa.sonnx.export import (
    DEFAULT_OPSET,
    ExportContext,
    ExportError,
    export_model,
    max_opset,
    save,
    to_onnx,
)
from singa.sonnx.model import SONNXModel

__all__ = [
    "DEFAULT_OPSET",
    "ExportContext",
    "ExportError",
    "InvalidModel",
    "SONNXModel",
    "SingaBackend",
    "SingaRep",
    "UnsupportedOperator",
    "export_model",
    "max_opset",
    "prepare",
    "run_model",
    "run_node",
    "save",
    "supported_ops",
    "supports_device",
    "to_onnx",
]
