"""``singa-train gpt``: training the zoo's language model on text.

A run trains ``gpt`` when MODEL is ``gpt`` or ``--data`` is ``text:FILE`` (or
``tinyshakespeare``, the bundled public-domain text and the default for ``gpt``). The
text's character vocabulary is built from the file and stored in the checkpoint (as
JSON, with the model's sizes), the first ``1 - --val-split`` of the text trains and
the rest validates (split by position). An "epoch" is ``len(train) // (batch *
context)`` steps of random windows (seeded by ``--seed`` and the epoch); validation
is the mean loss over consecutive windows (``--val-steps`` batches, default 8).

Options used: --batch-size, --epochs, --max-steps, --val-steps, --optimizer (AdamW
unless given), --lr, --weight-decay, --seed, --graph, --precision, --device,
--checkpoint, --log, --model-arg (num_layers, num_heads, width, context, dropout),
--val-split, -q, --resume FILE (a text run's checkpoint: the run's settings come from
it unless given again, and the run goes on bitwise as an uninterrupted one would, also
from a checkpoint that --max-steps or --save-every wrote mid-epoch), --checkpoint-dir with
--save-every, --keep, --keep-best, --async-save and --resume auto|DIR (as image runs). Not
used here: image options; --nproc is refused (not offered for text runs yet).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from singa import device, opt, zoo
from singa.cli.errors import CliError
from singa.cli.model_spec import parse_model_args
from singa.data import text
from singa.tensor import Tensor

__all__ = [
    "LM_KEY",
    "BUNDLED",
    "RESUMED",
    "text_spec",
    "is_lm_run",
    "resumed_text_run",
    "text_run_meta",
    "train_lm",
    "load_lm",
]

#: the checkpoint's auxiliary entry of a text run (vocabulary, model sizes, progress)
LM_KEY = "singa_lm"
#: the name of the bundled text
BUNDLED = "tinyshakespeare"
_MODEL_ARGS = ("num_layers", "num_heads", "width", "context", "dropout")


def text_spec(value: str) -> str | None:
    """The canonical form of a text ``--data`` value (``tinyshakespeare`` or
    ``text:/abs/path``), None when it is not one; CliError for a missing file."""
    v = str(value).strip()
    if v.lower() == BUNDLED:
        return BUNDLED
    if not v.lower().startswith("text:"):
        return None
    path = v[5:]
    if not os.path.isfile(path):
        raise CliError(f"{v!r}: no such text file {path}")
    return f"text:{os.path.abspath(path)}"


def is_lm_run(cfg: Any, explicit: set) -> bool:
    """Whether this run trains the language model (CliError for a text/image mismatch)."""
    is_text = text_spec(cfg.data) is not None if isinstance(cfg.data, str) else False
    gpt = str(cfg.model).lower() == "gpt"
    if is_text and not gpt and "model" in explicit:
        raise CliError(f"text data trains the gpt model, not {cfg.model!r}")
    if gpt and not is_text and "data" in explicit:
        raise CliError(f"gpt trains on text (--data text:FILE or {BUNDLED}), not {cfg.data!r}")
    return gpt or is_text


def _model_kwargs(model_args: Any) -> dict:
    kw = parse_model_args(list(model_args or ()))
    unknown = sorted(set(kw) - set(_MODEL_ARGS))
    if unknown:
        raise CliError(f"gpt: unknown --model-arg {', '.join(unknown)} (known: {', '.join(_MODEL_ARGS)})")
    return kw


def _optimizer_name(cfg: Any, explicit: set) -> str:
    return cfg.optimizer if "optimizer" in explicit else "adamw"


def _optimizer(cfg: Any, explicit: set) -> opt.Optimizer:
    name = _optimizer_name(cfg, explicit)
    lr = cfg.lr if cfg.lr is not None else 1e-3
    if name == "sgd":
        return opt.SGD(lr, momentum=cfg.momentum if cfg.momentum is not None else 0.9)
    if name == "adam":
        return opt.Adam(lr, weight_decay=cfg.weight_decay or 0.0)
    if name == "adamw":
        return opt.AdamW(lr, weight_decay=0.01 if cfg.weight_decay is None else cfg.weight_decay)
    raise CliError(f"gpt: optimizer {name!r} is not offered for text runs (sgd, adam, adamw)")


def _tensor(a: np.ndarray, dev: Any) -> Tensor:
    return Tensor(data=a, device=dev, dtype=np.int64, requires_grad=False)


def validate(model: Any, tokens: np.ndarray, batch: int, context: int, batches: int, dev: Any) -> float:
    """Mean cross-entropy over the first ``batches`` consecutive windows of ``tokens``."""
    was = model.training
    model.eval()
    try:
        losses = [
            float(model.loss(model(_tensor(x, dev)), _tensor(y, dev)).to_numpy().reshape(-1)[0])
            for x, y in text.eval_windows(tokens, batch, context, batches)
        ]
    finally:
        model.train(was)
    return float(np.mean(losses))


def _say(cfg: Any, msg: str) -> None:
    if not cfg.quiet:
        print(msg, flush=True)


class _Saver:
    """Where a text run's checkpoints go: ``--checkpoint FILE`` (rewritten), or the
    ``--checkpoint-dir`` folder's manager (numbered files, ``--keep``, ``--keep-best``,
    ``--async-save``), as image runs save."""

    def __init__(self, model: Any, cfg: Any, meta: dict):
        from singa.cli.ckpt_options import ManagedCheckpoints

        self.model, self.cfg, self.meta = model, cfg, meta
        self.managed = ManagedCheckpoints(cfg) if cfg.checkpoint_dir else None

    def __call__(self, step: int, val: float, epoch_end: bool) -> None:
        """Save the state at ``step`` (``val`` the last validation loss)."""
        aux = {LM_KEY: self.meta | {"step": step, "val_loss": val}}
        try:
            if self.managed is not None:
                self.managed.save(step, self.model, aux, [{"val_loss": val}], epoch_end)
            elif self.cfg.checkpoint:
                self.model.save_states(self.cfg.checkpoint, aux_states=aux)
        except OSError as e:
            where = self.cfg.checkpoint_dir or self.cfg.checkpoint
            raise CliError(f"cannot write a checkpoint to {where}: {e.strerror or e}") from e

    def wait(self) -> None:
        """Wait for a background save (raising its error)."""
        if self.managed is not None:
            self.managed.wait()


#: the settings a text run stores in its checkpoints and a resumed run takes from there
#: unless they are given again (--max-steps is the stop, not part of the trajectory)
RESUMED = ("data", "batch_size", "seed", "epochs", "lr", "momentum", "weight_decay", "model_args",
           "val_split", "val_steps", "precision", "graph")  # fmt: skip


def text_run_meta(path: str) -> dict | None:
    """The text-run entry of the checkpoint ``path`` (vocabulary, model sizes, settings,
    step), or None for any other checkpoint or a file that is not one (the image tools
    report that)."""
    from singa import checkpoint

    try:
        meta = checkpoint.read(path).aux_values.get(LM_KEY)
    except Exception:
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("model"), dict) else None


def resumed_text_run(cfg: Any, explicit: set) -> bool:
    """When ``--resume`` names a text run's checkpoint, take its settings (those not
    given again) into ``cfg``, with ``model`` gpt, and return True. A text run's
    ``--resume auto`` / ``--resume DIR`` becomes the folder's newest valid checkpoint
    first (an image run's is resolved by its trainer)."""
    if cfg.resume and not os.path.isfile(cfg.resume) and is_lm_run(cfg, explicit):
        from singa.cli.ckpt_options import resolve_resume  # --resume auto / DIR: its newest file

        def warn(msg: str) -> None:
            print(f"warning: {msg}", file=sys.stderr)

        resolve_resume(cfg, warn, lambda msg: _say(cfg, msg))
    meta = text_run_meta(cfg.resume) if cfg.resume and os.path.isfile(cfg.resume) else None
    if meta is None or not isinstance(meta.get("config"), dict):
        return False
    stored = meta["config"]
    for key in RESUMED:
        if key in stored and key not in explicit:
            value = stored[key]
            setattr(cfg, key, tuple(value) if key == "model_args" else value)
    if "optimizer" not in explicit:
        cfg.optimizer = stored.get("optimizer", "adamw")
        explicit.add("optimizer")
    cfg.model = "gpt"
    if not cfg.checkpoint and not cfg.checkpoint_dir:  # as an image run: the checkpoint goes on
        cfg.checkpoint = cfg.resume
    return True


def _config(cfg: Any, explicit: set) -> dict:
    """The settings of :data:`RESUMED` (JSON values) and the optimizer's name."""
    out = {k: getattr(cfg, k) for k in RESUMED}
    out["model_args"] = list(cfg.model_args or ())
    out["optimizer"] = _optimizer_name(cfg, explicit)
    return out


def _setup(cfg: Any, explicit: set) -> tuple:
    spec = text_spec(cfg.data) or BUNDLED  # gpt without text data: the bundled text
    data = text.load_text(None if spec == BUNDLED else spec[5:], val_fraction=cfg.val_split or 0.1)
    kw = _model_kwargs(cfg.model_args)
    dev = device.create_cuda_gpu() if cfg.device == "gpu" else device.get_default_device()
    dev.set_rand_seed(cfg.seed)
    model = zoo.create("gpt", num_classes=len(data.vocab), **kw)
    model.set_optimizer(_optimizer(cfg, explicit))
    return spec, data, kw, dev, model


def train_lm(cfg: Any, explicit: set) -> dict:
    """Train gpt on the text of ``cfg``; returns the summary (also printed)."""
    spec, data, kw, dev, model = _setup(cfg, explicit)
    ctx, b = model.context, cfg.batch_size
    if len(data.val) < ctx + 1:
        raise CliError(
            f"the validation text ({len(data.val)} characters) is shorter than the context {ctx} + 1"
        )
    per_epoch = max(1, len(data.train) // (b * ctx))
    total = per_epoch * cfg.epochs if cfg.max_steps is None else cfg.max_steps
    vbatches = cfg.val_steps or 8
    tx, ty = _tensor(np.zeros((b, ctx), np.int64), dev), _tensor(np.zeros((b, ctx), np.int64), dev)
    model.compile([tx], is_train=True, use_graph=cfg.graph, precision=cfg.precision)
    _say(cfg, f"gpt on {data.source}: {len(data.vocab)} characters, {len(data.train)} train / "
         f"{len(data.val)} val tokens, {total} steps of {b}x{ctx}")  # fmt: skip
    meta = {"vocab": data.vocab.to_json(), "model": kw | {"num_classes": len(data.vocab)}, "data": spec,
            "config": _config(cfg, explicit)}  # fmt: skip
    step = _resume(model, cfg, meta)
    save = _Saver(model, cfg, meta)
    log = open(cfg.log, "a") if cfg.log else None  # noqa: SIM115 (closed below)
    t0, val = time.perf_counter(), float("nan")
    try:
        while step < total:
            where = (per_epoch, total, step)
            step, val, train = _train_part(model, cfg, data, (tx, ty, dev), where, vbatches, save)
            row = {"epoch": -(-step // per_epoch), "step": step, "train_loss": train, "val_loss": val,
                   "time_s": time.perf_counter() - t0}  # fmt: skip
            _say(cfg, f"epoch {row['epoch']}: step {step}, train loss {train:.4f}, val loss {val:.4f}")
            if log:
                log.write(json.dumps(row) + "\n")
            save(step, val, epoch_end=True)
        save.wait()
    finally:
        if log:
            log.close()
    summary = {"steps": step, "val_loss": val, "seconds": time.perf_counter() - t0}
    _say(cfg, f"done: {step} steps, val loss {val:.4f}, {summary['seconds']:.1f}s")
    return summary


def _resume(model: Any, cfg: Any, meta: dict) -> int:
    """Load ``--resume``'s states (parameters, optimizer, random state) into the compiled
    ``model``; returns the step it reached (0 without ``--resume``)."""
    if not cfg.resume:
        return 0
    try:
        aux = model.load_states(cfg.resume)
    except Exception as e:
        raise CliError(f"cannot resume from {cfg.resume}: {str(e).splitlines()[0]}") from e
    stored = aux.get(LM_KEY) if isinstance(aux, dict) else None
    if (
        not isinstance(stored, dict)
        or stored.get("vocab") != meta["vocab"]
        or stored.get("model") != meta["model"]
    ):
        raise CliError(f"cannot resume from {cfg.resume}: it is not a checkpoint of this text run's model")
    step = int(stored.get("step", 0))
    _say(cfg, f"resumed from {cfg.resume} at step {step}")
    return step


def _train_part(model: Any, cfg: Any, data: Any, io: tuple, where: tuple, vbatches: int, save: Any) -> tuple:
    """Train from ``step`` to the end of its epoch (or to ``total``); returns the new step
    , the validation loss and the part's mean training loss. An epoch's windows are drawn
    from a generator seeded by ``--seed`` and the epoch, so a run resumed mid-epoch skips
    the windows the first part used and draws the same ones after them. ``save`` writes
    the ``--save-every`` checkpoints on the way."""
    tx, ty, dev = io
    per_epoch, total, step = where
    epoch, skip = divmod(step, per_epoch)
    n = min(per_epoch - skip, total - step)
    b, ctx = tx.shape
    losses = []
    windows = text.random_windows(data.train, b, ctx, skip + n, seed=cfg.seed * 100003 + epoch)
    for i, (x, y) in enumerate(windows):
        if i < skip:
            continue
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        loss = float(model(tx, ty)[1].to_numpy().reshape(-1)[0])
        if not math.isfinite(loss):
            raise CliError(f"the loss is {loss} at step {step + 1}; try a smaller --lr")
        losses.append(loss)
        step += 1
        if cfg.save_every and step % cfg.save_every == 0 and step % per_epoch and step < total:
            save(step, float("nan"), epoch_end=False)  # --save-every, mid-epoch
    return step, validate(model, data.val, b, ctx, vbatches, dev), float(np.mean(losses))


def load_lm(path: str, dev: Any = None) -> tuple:
    """The gpt model and vocabulary of a text run's checkpoint (CliError when it is not one)."""
    from singa import checkpoint

    try:
        meta = checkpoint.read(path).aux_values.get(LM_KEY)
    except Exception as e:
        raise CliError(f"cannot read the checkpoint {path}: {e}") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), dict):
        raise CliError(f"{path} is not a checkpoint of a text run (singa-train gpt): it has no vocabulary")
    try:
        vocab = text.CharVocab.from_json(meta["vocab"])
        model = zoo.create("gpt", **meta["model"])
    except (KeyError, TypeError, ValueError) as e:
        raise CliError(f"{path}: its text-run entry is damaged ({e})") from e
    model.load_states(path)
    model.eval()
    return model, vocab, meta
