"""Guards of a ``singa-train`` run: divergence (a loss or parameters gone wild stop
the run before anything is saved over a good checkpoint) and the size of the
validation when the training is capped."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from singa.cli.config import TrainConfig
from singa.cli.errors import CliError

__all__ = ["DIVERGED_LOSS_FACTOR", "check_loss", "check_params", "val_batches"]

#: a cross-entropy above a million times that of a uniform guess (ln of the number of
#: classes) means the training has diverged, as does a non-finite one
DIVERGED_LOSS_FACTOR = 1e6


def _diverged(cfg: TrainConfig, step: int, what: str) -> CliError:
    kept = f"; {cfg.checkpoint} keeps the last good state" if cfg.checkpoint else ""
    return CliError(
        f"training diverged at step {step}: {what} (try a lower --lr than {cfg.effective_lr:g}){kept}"
    )


def check_loss(loss: float, step: int, num_classes: int, cfg: TrainConfig) -> None:
    """Stop the run (a CliError, nothing saved) when the loss of ``step`` is not
    finite or absurdly large."""
    limit = DIVERGED_LOSS_FACTOR * math.log(max(2, num_classes))
    if not math.isfinite(loss) or loss > limit:
        raise _diverged(cfg, step, f"the loss is {loss:g}")


def check_params(model: Any, step: int, cfg: TrainConfig) -> None:
    """Refuse to save non-finite parameters over a good checkpoint."""
    for name, p in model.get_params().items():
        if not np.isfinite(p.to_numpy()).all():
            raise _diverged(cfg, step, f"parameter {name} is not finite")


def val_batches(cfg: TrainConfig, steps_per_epoch: int, n_val: int) -> int | None:
    """How many of the ``n_val`` validation batches to run: ``--val-steps``, else with
    ``--max-steps`` the fraction of the validation set that matches the fraction of
    an epoch trained, else all (None)."""
    if cfg.val_steps is not None:
        return cfg.val_steps
    if cfg.max_steps is None or cfg.max_steps >= steps_per_epoch:
        return None
    return max(1, math.ceil(n_val * cfg.max_steps / steps_per_epoch))
