"""What ``singa-train`` shows and writes: console lines, the per-epoch progress bar,
the JSON-lines metrics log and the loss/accuracy plot.

Lines go to stdout (``-q`` silences them, ``-v`` adds details); the progress bar and
warnings go to stderr. The bar is drawn only when stderr is a terminal.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, TextIO

import click
from tqdm import tqdm

from singa.callbacks.loggers import json_line

__all__ = ["Console", "JsonLog", "Progress", "write_plot", "format_epoch", "fmt_time"]


def fmt_time(seconds: float) -> str:
    """``12.3s``, ``4m05s`` or ``1h02m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _pct(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.2f}%"


def _num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.4f}"


def format_epoch(rec: dict, epochs: int, split: str = "val") -> str:
    """The one-line summary of an epoch record (see :meth:`singa.cli.trainer.Trainer`);
    ``split`` names the held-out split ("val" or "test")."""
    tag = f"epoch {rec['epoch']}/{epochs}"
    if rec.get("partial"):
        tag += f" (stopped at step {rec['step']})"
    if "val_mse" in rec:  # regression (singa.cli.regression)
        from singa.cli.regression import format_regression

        scores = format_regression(rec, split)
    else:
        scores = [
            f"train loss {_num(rec.get('train_loss'))} acc {_pct(rec.get('train_acc'))}",
            f"{split} loss {_num(rec.get('val_loss'))} acc {_pct(rec.get('val_acc'))}",
        ]
    parts = [tag, *scores, fmt_time(rec.get("time_s", 0.0))]
    rate = rec.get("samples_per_s") or 0.0
    if rate >= 1:  # none measured (no step in this run) or below the display's resolution
        parts.append(f"{rate:,.0f} samples/s")
    return "  ".join(parts)


class Console:
    """Console output with the verbosity of ``-q`` / ``-v``."""

    def __init__(self, quiet: bool = False, verbose: bool = False):
        self.quiet = quiet
        self.verbose = verbose and not quiet

    def info(self, msg: str) -> None:
        """A normal line (stdout), hidden by ``-q``."""
        if not self.quiet:
            click.echo(msg)

    def detail(self, msg: str) -> None:
        """A line shown with ``-v`` only (stdout)."""
        if self.verbose:
            click.echo(msg)

    def warn(self, msg: str) -> None:
        """A warning (stderr), shown even with ``-q``."""
        click.echo(f"warning: {msg}", err=True)


class Progress:
    """The progress bar of one epoch: running loss, accuracy and samples/s."""

    def __init__(self, total: int, initial: int, desc: str, enabled: bool, stream: TextIO | None = None):
        stream = stream if stream is not None else sys.stderr
        show = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="batch",
            leave=False,
            file=stream,
            dynamic_ncols=True,
            disable=not show,
            mininterval=0.25,
        )
        self.t0 = time.perf_counter()
        self.samples = 0

    def update(self, loss: float, acc: float, samples: int) -> None:
        """One batch done; ``loss`` and ``acc`` are the running means of the epoch."""
        self.samples += samples
        if not self.bar.disable:
            dt = max(time.perf_counter() - self.t0, 1e-9)
            postfix = {"loss": f"{loss:.4f}"}
            if not math.isnan(acc):  # a regression has no accuracy
                postfix["acc"] = f"{100 * acc:.2f}%"
            postfix["samples/s"] = f"{self.samples / dt:,.0f}"
            self.bar.set_postfix(ordered_dict=postfix, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        """Remove the bar."""
        self.bar.close()


class JsonLog:
    """Metrics as JSON lines: one object per event (``start``, ``epoch``, ``interrupted``,
    ``end``), each with ``event`` and ``time`` (ISO 8601, UTC). A fresh run truncates
    the file, a resumed one appends to it."""

    def __init__(self, path: str | None, append: bool):
        self.path = path
        self.f = open(path, "a" if append else "w", encoding="utf-8") if path else None  # noqa: SIM115

    def write(self, event: str, **fields: Any) -> None:
        """Append one record and flush it."""
        if self.f is None:
            return
        self.f.write(json_line(event, fields) + "\n")
        self.f.flush()

    def close(self) -> None:
        """Close the file."""
        if self.f is not None:
            self.f.close()
            self.f = None


def matplotlib_available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plot(path: str, history: list[dict], title: str) -> None:
    """A PNG with two panels (the loss, and the accuracy or a regression's MSE) of the
    train and validation curves per epoch. Needs matplotlib (the ``plot`` extra)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [r["epoch"] for r in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    try:
        for key, label in (("train_loss", "train"), ("val_loss", "validation")):
            ax1.plot(epochs, [r.get(key) for r in history], marker="o", label=label)
        regression = any("val_mse" in r for r in history)  # MSE in the target's units
        key2, factor = ("mse", 1) if regression else ("acc", 100)
        for key, label in ((f"train_{key2}", "train"), (f"val_{key2}", "validation")):
            ax2.plot(
                epochs,
                [factor * r[key] if r.get(key) is not None else None for r in history],
                marker="o",
                label=label,
            )
        ax1.set_title("loss")
        ax2.set_title("MSE" if regression else "accuracy (%)")
        for ax in (ax1, ax2):
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.suptitle(title)
        fig.tight_layout()
        tmp = f"{path}.tmp-{os.getpid()}.png"
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
