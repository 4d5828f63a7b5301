"""ONNX export and import (SINGA's ``sonnx``).

Export: :func:`to_onnx` traces the computation from input tensors to outputs and
returns an ``onnx.ModelProto``; :func:`export_model` (what ``Model.export_onnx``
calls) writes a model's file; :func:`save` writes a ModelProto.

Import: :func:`prepare` returns a backend representation whose ``run(inputs)``
executes an ONNX model with autograd operators; :class:`SONNXModel` is a trainable
``Model`` built from an ONNX file.

Example::

    from singa import sonnx
    onnx_model = sonnx.to_onnx([x], model)       # model in eval mode
    rep = sonnx.prepare(onnx_model, dev)
    y, = rep.run([x])
"""

from singa.sonnx.export import (
    DEFAULT_OPSET,
    ExportContext,
    ExportError,
    export_model,
    max_opset,
    save,
    to_onnx,
)
