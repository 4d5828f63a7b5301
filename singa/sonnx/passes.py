"""Peephole passes over the exported node list, run after every operator is converted."""

from __future__ import annotations

from onnx import helper


def simplify(nodes: list, keep: set[str], shapes: dict) -> None:
    """Drop Identity nodes, then fuse Linear's MatMul + Add into Gemm (in place);
    ``keep``: the graph output names, ``shapes``: traced shapes by value name."""
    drop_identities(nodes, keep)
    fuse_gemm(nodes, keep, shapes)


def drop_identities(nodes: list, keep: set[str]) -> None:
    """Remove Identity nodes (Dropout in eval mode, ...) whose output is not a graph output."""
    alias: dict[str, str] = {}
    kept = []
    for nd in nodes:
        for i, n in enumerate(nd.input):
            if n in alias:
                nd.input[i] = alias[n]
        if nd.op_type == "Identity" and nd.output[0] not in keep:
            alias[nd.output[0]] = nd.input[0]
            continue
        kept.append(nd)
    nodes[:] = kept


def fuse_gemm(nodes: list, keep: set[str], shapes: dict) -> None:
    """Rewrite a 2-D ``MatMul`` immediately followed by the ``Add`` of a 1-D bias
    (``matmul`` then ``add_bias``: what ``layer.Linear`` runs) as one ``Gemm``, as
    PyTorch exports ``nn.Linear``: one node per Linear (``last_layers`` counts it once).
    Only when the MatMul's result is used by that Add alone and is no graph output
    (``keep``), and the traced ``shapes`` show a (M, K) @ (K, N) + (N,) product."""
    uses: dict[str, int] = {}
    for nd in nodes:
        for n in nd.input:
            uses[n] = uses.get(n, 0) + 1
    out = []
    i = 0
    while i < len(nodes):
        mm = nodes[i]
        add = nodes[i + 1] if i + 1 < len(nodes) else None
        if (
            add is not None
            and mm.op_type == "MatMul"
            and add.op_type == "Add"
            and add.input[0] == mm.output[0]
            and uses.get(mm.output[0]) == 1
            and mm.output[0] not in keep
        ):
            a, b, c = (shapes.get(n) for n in (mm.input[0], mm.input[1], add.input[1]))
            if a is not None and b is not None and c is not None and len(a) == len(b) == 2 and c == (b[1],):
                name = mm.name.replace("MatMul", "Gemm") if mm.name else ""
                out.append(
                    helper.make_node(
                        "Gemm", [mm.input[0], mm.input[1], add.input[1]], list(add.output), name=name
                    )
                )
                i += 2
                continue
        out.append(mm)
        i += 1
    nodes[:] = out
