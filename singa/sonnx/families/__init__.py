"""ONNX converters and import handlers, one module per autograd family.

``singa/sonnx/families/<family>.py`` is named like the autograd module that defines the
operators, ``singa/autograd/<family>.py``, and holds both directions:

* ``EXPORT = {OperationSubclass: converter}``: a converter is called as
  ``convert(ctx, op, in_names, out_names, in_arrays, out_arrays)`` with an
  :class:`~singa.sonnx.context.ExportContext` and adds the nodes that produce ``out_names``;
* ``IMPORT = {"OnnxOpType": handler}``: a handler is called as ``handle(ctx, inputs)`` with a
  :class:`~singa.sonnx.context.NodeContext` and returns the output Tensor(s). Every handler
  declares with :func:`~singa.sonnx.context.builds` the autograd Operation classes it
  builds, its main one first (none for Constant, Shape ... whose values are computed when
  the node runs).

Where an ONNX op type lives: in the family of the autograd operator whose converter
writes that op type (``SoftmaxCrossEntropyLoss`` in ``loss``, ``MaxPool`` in
``pooling_nd``, which builds ``MaxPoolNd``); an op type no converter writes, whose
handler composes several autograd operators, goes in the family of its main operator,
the first one it declares (``PRelu`` in ``activation``, ``GlobalMaxPool`` in
``reduction``). Operator-less handlers (Identity, Constant, Shape ...) live in ``shaping``.

Adding an operator: the checklist in ``docs/architecture.md`` (in short: ``Foo`` and
``foo`` in ``singa/autograd/bar.py``, a converter and a handler here with one line in each
table, ``bar.Foo: convert_foo,`` in ``EXPORT`` and ``"Foo": handle_foo,`` in ``IMPORT``,
and the tests named after the family). A new family module is listed once, in the import
below: :data:`FAMILIES` is every family module this package imports, by name.
"""

from types import ModuleType

from singa.sonnx.families import (
    activation,
    attention,
    contraction,
    control,
    conv,
    conv_transpose,
    creation,
    detection,
    dropout,
    elementwise,
    gated,
    image,
    indexing,
    indexing_nd,
    linalg,
    logical,
    loss,
    ml,
    normalization,
    pooling,
    pooling_nd,
    positional,
    preview,
    prod,
    quantize,
    rearrange,
    recurrent,
    reduction,
    resize,
    rotary,
    rounding,
    sequence,
    shaping,
    signal,
    sorting,
    text,
    training,
    trigonometric,
    variadic,
)

#: the family modules, each with its ``EXPORT`` and ``IMPORT`` tables
FAMILIES: tuple[ModuleType, ...] = tuple(
    sorted((m for m in list(globals().values()) if isinstance(m, ModuleType)), key=lambda m: m.__name__)
)
