"""PEFT configurations: :class:`PeftConfig` (what every method shares) and
:class:`LinearLoraConfig` (LoRA's rank, scaling, dropout and targets), with SINGA's
constructor signatures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["PeftConfig", "LinearLoraConfig"]


class PeftConfig:
    """The base class of every PEFT method's configuration (SINGA's ``PeftConfig``).

    Args:
        peft_type: the registered name of the method's tuner (``"linear_lora"``), see
            :class:`~singa.peft.PeftRegistry`.
        freeze_base_model: freeze every parameter of the base model before the
            adapters are added (default True).
    """

    def __init__(self, peft_type: str, freeze_base_model: bool = True):
        if not isinstance(peft_type, str) or not peft_type:
            raise ValueError(f"PeftConfig: peft_type must be a non-empty string, got {peft_type!r}")
        self.peft_type = peft_type
        self.freeze_base_model = bool(freeze_base_model)

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON values (stored with adapter checkpoints)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items()}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"{type(self).__name__}({args})"


def _check_patterns(value: Any, what: str) -> list[str] | None:
    """None, or the list of non-empty strings in ``value`` (a single string is one)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise TypeError(f"LinearLoraConfig: {what} must be a list of layer names or globs, got {value!r}")
    if not value:
        raise ValueError(f"LinearLoraConfig: {what} is empty (use None for the default)")
    return list(value)


class LinearLoraConfig(PeftConfig):
    """LoRA (Hu et al., 2021): each targeted layer keeps its weight ``W`` frozen and
    learns ``delta W = scaling * B @ A`` of rank ``r`` (SINGA's ``LinearLoraConfig``).

    Args:
        r: the rank of the update (a positive integer; default 8).
        lora_alpha: the scaling numerator: ``scaling = lora_alpha / r`` (default 1, as
            SINGA; peft's default is 8).
        lora_dropout: dropout ratio applied to the adapter's input while training, in
            [0, 1) (default 0).
        target_layers: the layers to adapt, as dotted names (``"linear1"``,
            ``"blocks.0.fc"``) or globs of them (``"*linear*"``, ``"encoder.*.q_proj"``,
            matched with :func:`fnmatch.fnmatchcase`). ``None`` adapts every ``Linear``.
            An exact name must be a supported layer (Linear, Conv2d with group 1,
            MultiHeadAttention); a glob skips unsupported layers; a name or glob that
            matches nothing is an error.
        use_rslora: rank-stabilized LoRA: ``scaling = lora_alpha / sqrt(r)``.
        modules_to_save: names or globs of layers left trainable although the base is
            frozen (a new classifier head, say); their parameters are saved with the
            adapters (peft's option of that name).
        freeze_base_model: see :class:`PeftConfig`.
    """

    def __init__(
        self,
        r: int = 8,
        lora_alpha: float = 1,
        lora_dropout: float = 0,
        target_layers: Sequence[str] | str | None = None,
        *,
        use_rslora: bool = False,
        modules_to_save: Sequence[str] | str | None = None,
        freeze_base_model: bool = True,
    ):
        if isinstance(r, bool) or not isinstance(r, int) or r <= 0:
            raise ValueError(f"LinearLoraConfig: r must be a positive integer, got {r!r}")
        if isinstance(lora_alpha, bool) or not isinstance(lora_alpha, int | float):
            raise TypeError(f"LinearLoraConfig: lora_alpha must be a number, got {lora_alpha!r}")
        if not math.isfinite(lora_alpha):
            raise ValueError(f"LinearLoraConfig: lora_alpha must be finite, got {lora_alpha!r}")
        if isinstance(lora_dropout, bool) or not isinstance(lora_dropout, int | float):
            raise TypeError(f"LinearLoraConfig: lora_dropout must be a number, got {lora_dropout!r}")
        if not 0 <= lora_dropout < 1:
            raise ValueError(f"LinearLoraConfig: lora_dropout must be in [0, 1), got {lora_dropout!r}")
        targets = _check_patterns(target_layers, "target_layers")
        saved = _check_patterns(modules_to_save, "modules_to_save")
        super().__init__(peft_type="linear_lora", freeze_base_model=freeze_base_model)
        self.r = int(r)
        self.lora_alpha = lora_alpha
        self.lora_dropout = float(lora_dropout)
        self.target_layers = targets
        self.use_rslora = bool(use_rslora)
        self.modules_to_save = saved

    @property
    def scaling(self) -> float:
        """``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``."""
        return self.lora_alpha / (math.sqrt(self.r) if self.use_rslora else self.r)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinearLoraConfig:
        """The configuration :meth:`to_dict` wrote; unknown or missing keys raise ValueError."""
        if not isinstance(d, dict):
            raise ValueError(f"LinearLoraConfig.from_dict: expected a dict, got {type(d).__name__}")
        if d.get("peft_type") != "linear_lora":
            raise ValueError(
                f"LinearLoraConfig.from_dict: peft_type is {d.get('peft_type')!r}, not 'linear_lora'"
            )
        known = {"r", "lora_alpha", "lora_dropout", "target_layers", "use_rslora", "modules_to_save"}
        known |= {"freeze_base_model", "peft_type"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"LinearLoraConfig.from_dict: unknown keys {unknown}")
        args = {k: v for k, v in d.items() if k != "peft_type"}
        try:
            return cls(**args)
        except TypeError as e:
            raise ValueError(f"LinearLoraConfig.from_dict: {e}") from None
