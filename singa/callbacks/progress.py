"""The per-epoch progress bar (tqdm) with the running loss, metrics and samples/s,
and a line per epoch."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from singa.callbacks.base import Callback

__all__ = ["ProgressBar", "format_logs"]


def format_logs(logs: dict) -> str:
    """``loss 0.1234  accuracy 97.50%  val_loss ...``: fractions named like accuracies
    in percent, other numbers with four decimals."""
    parts = []
    for k, v in logs.items():
        if not isinstance(v, int | float) or isinstance(v, bool):
            continue
        if k == "samples_per_s":
            parts.append(f"{v:,.0f} samples/s")
        elif k == "lr":
            parts.append(f"lr {v:.3g}")
        elif "acc" in k and math.isfinite(v):
            parts.append(f"{k} {100 * v:.2f}%")
        else:
            parts.append(f"{k} {v:.4f}")
    return "  ".join(parts)


class ProgressBar(Callback):
    """A tqdm bar per epoch on stderr (only when it is a terminal, unless ``force``)
    showing the running loss and metrics, and one line per epoch on stdout.

    Args:
        stream: where the bar goes (default stderr).
        epoch_lines: print the epoch's logs after each epoch.
        force: draw the bar even when ``stream`` is not a terminal.
        bar: False draws no bar at all (Keras's ``verbose=2``: the epoch lines only).
    """

    def __init__(
        self, stream: TextIO | None = None, epoch_lines: bool = True, force: bool = False, bar: bool = True
    ):
        super().__init__()
        self.stream = stream
        self.epoch_lines = epoch_lines
        self.force = force
        self.show_bar = bar
        self.bar: Any = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Open the epoch's bar."""
        from tqdm import tqdm

        stream = self.stream if self.stream is not None else sys.stderr
        show = self.show_bar and (self.force or (hasattr(stream, "isatty") and stream.isatty()))
        epochs = self.params.get("epochs")
        self.bar = tqdm(
            total=self.params.get("steps"),
            initial=int(self.params.get("initial_batch", 0))
            if epoch == self.params.get("initial_epoch")
            else 0,
            desc=f"epoch {epoch + 1}/{epochs}" if epochs else f"epoch {epoch + 1}",
            unit="batch",
            leave=False,
            file=stream,
            dynamic_ncols=True,
            disable=not show,
            mininterval=0.25,
        )
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        """Advance the bar."""
        if self.bar is None:
            return
        if not self.bar.disable:
            running = {k: v for k, v in (logs or {}).items() if k != "size"}
            self.bar.set_postfix_str(format_logs(running), refresh=False)
        self.bar.update(1)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Close the bar; print the epoch's line."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.epoch_lines:
            epochs = self.params.get("epochs")
            print(f"epoch {epoch + 1}/{epochs}  {format_logs(logs or {})}")

    def on_train_end(self, logs: dict | None = None) -> None:
        """Close a bar left open by a stop."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
