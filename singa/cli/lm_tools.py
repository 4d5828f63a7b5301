"""``singa-train evaluate`` and ``singa-train export`` of a text (gpt) run's checkpoint.

The checkpoint holds the run's character vocabulary, the model's sizes, the text it
trained on and its settings (:mod:`singa.cli.lm`). ``evaluate`` reports the mean
cross-entropy (and its perplexity) over consecutive windows of the run's validation text
(the last ``--val-split`` of it) or its training text; ``export`` writes an ONNX file
whose batch and sequence axes are both dynamic (token ids, int64, (N, L) with L at most
the model's context).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from singa import sonnx
from singa.cli.errors import CliError
from singa.cli.lm import BUNDLED, load_lm, validate
from singa.data import text
from singa.tensor import Tensor

__all__ = ["evaluate_lm", "export_lm"]


def evaluate_lm(path: str, dev: Any, split: str, batch_size: int) -> dict:
    """Mean loss and perplexity of a text run's model on its validation text (``split``
    ``test``) or its training text (``train``), over every whole window."""
    model, vocab, meta = load_lm(path, dev)
    spec = meta.get("data", BUNDLED)
    val_split = (meta.get("config") or {}).get("val_split") or 0.1
    try:
        data = text.load_text(None if spec == BUNDLED else spec[5:], val_fraction=val_split)
    except OSError as e:
        raise CliError(f"cannot read the run's text {spec[5:]}: {e.strerror or e}") from e
    if data.vocab.to_json() != meta["vocab"]:
        raise CliError(f"{spec[5:]} has changed since the run: its characters are not the checkpoint's")
    tokens = data.train if split == "train" else data.val
    ctx = model.context
    if len(tokens) < ctx + 1:
        raise CliError(f"the {split} text ({len(tokens)} characters) is shorter than the context {ctx} + 1")
    t0 = time.perf_counter()
    loss = validate(model, tokens, batch_size, ctx, None, model_device(model, dev))
    return {
        "model": "gpt",
        "data": data.source,
        "split": "train" if split == "train" else "val",
        "samples": (len(tokens) - ctx) // ctx,
        "loss": loss,
        "perplexity": math.exp(loss) if loss < 700 else math.inf,
        "time_s": time.perf_counter() - t0,
        "checkpoint": path,
    }


def model_device(model: Any, dev: Any) -> Any:
    """``dev`` when given, else the device of the model's first state."""
    if dev is not None:
        return dev
    return next(iter(model.get_states().values())).device


def export_lm(path: str, onnx_path: str, dev: Any, opset: int | None) -> dict:
    """Write a text run's model to ``onnx_path``: input token ids (N, L) int64, both axes
    dynamic (L at most the context), output logits (N, L, vocabulary)."""
    model, vocab, _ = load_lm(path, dev)
    ctx = min(8, model.context)
    x = Tensor(
        data=np.zeros((1, ctx), np.int64),
        device=model_device(model, dev),
        dtype=np.int64,
        requires_grad=False,
    )
    try:
        proto = sonnx.to_onnx([x], model, opset=opset, dynamic_batch=True, dynamic_axes={0: [1]})
        import onnx

        onnx.save(proto, onnx_path)
    except OSError as e:
        raise CliError(f"cannot write the ONNX file {onnx_path}: {e.strerror or e}") from e
    return {"model": "gpt", "onnx": onnx_path, "input": f"NxL int64 token ids (L <= {model.context})"}
