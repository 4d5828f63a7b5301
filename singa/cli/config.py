"""The run configuration of ``singa-train``: defaults, TOML config files and the
settings a resumed run takes from its checkpoint.

Precedence, highest first: options given on the command line, the ``--config`` file,
the run stored in the ``--resume`` checkpoint (for the settings that shape the
training trajectory), the defaults below.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from singa.cli.errors import CliError

__all__ = [
    "TrainConfig",
    "OPTIMIZER_DEFAULTS",
    "TRAJECTORY_KEYS",
    "read_toml",
    "config_keys",
]

#: per optimizer: (lr, momentum, weight_decay) used when the option is not given
OPTIMIZER_DEFAULTS = {
    "sgd": (0.05, 0.9, 0.0),
    "adam": (0.001, 0.0, 0.0),
    "adamw": (0.001, 0.0, 0.01),
    "rmsprop": (0.001, 0.0, 0.0),
    "adagrad": (0.01, 0.0, 0.0),
}

SCHEDULERS = ("constant", "cosine", "step", "exponential")

#: settings that decide the sequence of parameter values: a resumed run takes them
#: from its checkpoint unless they are given explicitly
TRAJECTORY_KEYS = (
    "model",
    "data",
    "batch_size",
    "lr",
    "momentum",
    "weight_decay",
    "optimizer",
    "scheduler",
    "warmup",
    "seed",
    "epochs",
)


@dataclass
class TrainConfig:
    """Every setting of a training run (the CLI's options, by their Python names)."""

    model: str = "cnn"
    data: str = "fashion-mnist-mini"
    data_dir: str | None = None
    download: bool = True
    epochs: int = 5
    batch_size: int = 64
    lr: float | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    optimizer: str = "sgd"
    scheduler: str = "cosine"
    warmup: int = 0
    graph: bool = True
    sequential: bool = False
    augment: bool = False
    precision: str = "float32"
    device: str = "cpu"
    seed: int = 0
    max_steps: int | None = None
    val_steps: int | None = None
    checkpoint: str | None = None
    resume: str | None = None
    export_onnx: str | None = None
    log: str | None = None
    plot: str | None = None
    no_plot: bool = False
    quiet: bool = False
    verbose: bool = False
    debug: bool = False
    # your own model and data (singa.cli.user_options)
    model_args: tuple = ()
    val_split: float = 0.1
    channels: str | None = None
    image_size: str | None = None
    target: str | None = None
    task: str = "classification"
    skip_bad: bool = False
    workers: int = 0
    init: str | None = None
    freeze: tuple = ()
    # fit's callbacks (singa.cli.fit_options)
    early_stop: int | None = None
    keep: int | None = None
    tensorboard: str | None = None
    accumulate: int = 1
    summary: bool = False
    time_budget: float | None = None
    ema: float | None = None
    lora: str | None = None  # singa.cli.lora
    # checkpoint folders (singa.cli.ckpt_options)
    checkpoint_dir: str | None = None
    save_every: int | None = None
    keep_best: int | None = None
    async_save: bool = False
    max_restarts: int = 0
    extra: dict = field(default_factory=dict)

    # ----- derived values -----------------------------------------------------------------
    @property
    def effective_lr(self) -> float:
        """The learning rate: the given one or the optimizer's default."""
        return self.lr if self.lr is not None else OPTIMIZER_DEFAULTS[self.optimizer][0]

    @property
    def effective_momentum(self) -> float:
        """The momentum (sgd, rmsprop): the given one or the optimizer's default."""
        return self.momentum if self.momentum is not None else OPTIMIZER_DEFAULTS[self.optimizer][1]

    @property
    def effective_weight_decay(self) -> float:
        """The weight decay: the given one or the optimizer's default."""
        wd = self.weight_decay
        return wd if wd is not None else OPTIMIZER_DEFAULTS[self.optimizer][2]

    @property
    def plot_path(self) -> str | None:
        """Where the loss/accuracy plot goes: ``--plot``, else next to the log (same
        name, ``.png``), else nowhere."""
        if self.no_plot:
            return None
        if self.plot:
            return self.plot
        if self.log:
            return str(Path(self.log).with_suffix(".png"))
        return None

    def to_json(self) -> dict:
        """The settings as a JSON dict (stored in checkpoints and the log)."""
        d = dataclasses.asdict(self)
        d.pop("extra")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    def trajectory(self) -> dict:
        """The settings that shape the training trajectory, with defaults resolved."""
        d = {k: getattr(self, k) for k in TRAJECTORY_KEYS}
        d["lr"] = self.effective_lr
        d["momentum"] = self.effective_momentum
        d["weight_decay"] = self.effective_weight_decay
        return d


def config_keys() -> list[str]:
    """The keys a config file may set (the option names, with '-' or '_')."""
    return [f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("extra", "resume_config")]


def read_toml(path: str) -> dict[str, Any]:
    """The settings of a TOML config file, keys normalised to Python names
    (``batch-size`` -> ``batch_size``). A top-level table ``[singa-train]`` or
    ``[train]``, if present, is used instead of the top level."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise CliError(f"cannot read config file {path}: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise CliError(f"config file {path} is not valid TOML: {e}") from e
    for table in ("singa-train", "singa_train", "train"):
        if isinstance(raw.get(table), dict):
            raw = raw[table]
            break
    out: dict[str, Any] = {}
    for k, v in raw.items():
        out[str(k).strip().replace("-", "_")] = v
    return out
