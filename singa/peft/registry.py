"""The registry of PEFT methods: a config's ``peft_type`` names the tuner class that
injects it (SINGA's ``PeftRegistry``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PeftRegistry"]


class PeftRegistry:
    """Tuner classes by name. Register one with the decorator
    ``@PeftRegistry.register("my_method")``; :func:`~singa.peft.get_peft_model` looks
    up ``config.peft_type`` here."""

    _tuners: dict[str, type] = {}

    @classmethod
    def register(cls, tuner_name: str) -> Callable[[type], type]:
        """A class decorator registering the tuner class under ``tuner_name`` (a later
        registration of the same name replaces the earlier one, as in SINGA)."""
        if not isinstance(tuner_name, str) or not tuner_name:
            raise ValueError(f"PeftRegistry.register: the name must be a non-empty string: {tuner_name!r}")

        def decorator(tuner_class: type) -> type:
            cls._tuners[tuner_name] = tuner_class
            return tuner_class

        return decorator

    @classmethod
    def get_tuner(cls, tuner_name: str) -> Any:
        """The tuner class registered as ``tuner_name``; ValueError naming the known
        ones otherwise."""
        if tuner_name not in cls._tuners:
            known = ", ".join(sorted(cls._tuners)) or "none"
            raise ValueError(f"Unsupported peft method: {tuner_name!r} (registered: {known})")
        return cls._tuners[tuner_name]

    @classmethod
    def names(cls) -> list[str]:
        """The registered names."""
        return sorted(cls._tuners)
