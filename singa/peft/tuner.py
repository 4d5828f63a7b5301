"""Tuners: what injects a PEFT method into a model and merges it (SINGA's
``BaseTuner`` and ``LinearLoraTuner``)."""

from __future__ import annotations

from typing import Any

from singa.layer.attention import MultiHeadAttention
from singa.layer.base import Layer
from singa.layer.conv import Conv2d
from singa.layer.linear import Linear
from singa.model.model import Model
from singa.peft.config import LinearLoraConfig, PeftConfig
from singa.peft.layers import Conv2dLoRALayer, LinearLoRALayer, LoRALayer, set_frozen
from singa.peft.registry import PeftRegistry
from singa.peft.targets import find_layer, match_layers, replace_layer
from singa.tensor import Tensor

__all__ = ["BaseTuner", "LinearLoraTuner", "merge_and_unload"]


class BaseTuner:
    """The base class of tuners: a PEFT method implements :meth:`inject` and
    :meth:`merge_weights` and registers itself with
    ``@PeftRegistry.register("name")``."""

    #: the configuration class of the method (used to read saved configurations)
    config_class: type = PeftConfig

    def __init__(self, config: PeftConfig):
        self.config = config

    def inject(self, base_model: Layer) -> Layer:
        """Add the method's layers to ``base_model`` (in place) and return it."""
        raise NotImplementedError(f"{type(self).__name__}.inject")

    def merge_weights(self, base_model: Layer, mode: bool = True) -> Layer:
        """Merge the method's weights into the base weights (``mode=True``) or take
        them out again (``mode=False``); returns ``base_model``."""
        raise NotImplementedError(f"{type(self).__name__}.merge_weights")

    def freeze_new_parameters(self, base_model: Layer) -> list[Tensor]:
        """Freeze base parameters created after :meth:`inject` (by a lazily sized
        model's first call); returns them (default: none)."""
        return []

    def lora_layers(self, base_model: Layer) -> dict[str, Any]:
        """The method's layers in ``base_model`` by dotted name (default: none)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """The configuration and what was injected, as JSON values."""
        return {"config": self.config.to_dict(), "layers": [], "saved": []}

    @staticmethod
    def freeze_base_parameters(base_model: Layer) -> list[Tensor]:
        """Freeze every trainable parameter of ``base_model`` (:func:`set_frozen`: no
        gradient, no optimizer slots); returns the tensors frozen."""
        params = [t for t in base_model.get_params().values() if t.requires_grad]
        set_frozen(params, True)
        return params


def _unfreeze(tensors: list[Tensor]) -> None:
    set_frozen(tensors, False)


@PeftRegistry.register("linear_lora")
class LinearLoraTuner(BaseTuner):
    """LoRA on every targeted ``Linear`` and ``Conv2d`` (group 1) of a model; a
    targeted ``MultiHeadAttention`` has its four projections adapted (``q_proj``,
    ``k_proj``, ``v_proj``, ``out_proj``: target ``*.q_proj`` to choose some).

    Attributes:
        targeted_layers: dotted names of the layers that now hold LoRA layers.
        saved_layers: dotted names of the ``modules_to_save`` layers.
        frozen: the base parameters this tuner froze.
    """

    config_class = LinearLoraConfig
    #: the LoRA layer class for each supported base layer class
    layer_classes: dict[type, type] = {Linear: LinearLoRALayer, Conv2d: Conv2dLoRALayer}

    def __init__(self, config: LinearLoraConfig):
        if not isinstance(config, LinearLoraConfig):
            raise TypeError(f"LinearLoraTuner: expected a LinearLoraConfig, got {type(config).__name__}")
        super().__init__(config)
        self.config: LinearLoraConfig = config
        self.targeted_layers: list[str] = []
        self.saved_layers: list[str] = []
        self.frozen: list[Tensor] = []

    def lora_class(self, layer: Layer) -> type | None:
        """The LoRA layer class that can adapt ``layer``, or None."""
        for base_type, cls in self.layer_classes.items():
            if isinstance(layer, base_type):
                try:
                    cls.check_base(layer)
                except (TypeError, ValueError):
                    return None
                return cls
        return None

    def find_targets(self, base_model: Layer) -> dict[str, Layer]:
        """The layers the configuration names, by dotted name in model order, an
        attention layer standing for its projections (ValueError for a name or glob
        that does not fit; nothing is changed)."""
        hidden = lambda s: isinstance(s, LoRALayer)  # noqa: E731
        if self.config.target_layers is None:
            return match_layers(base_model, ["*"], lambda s: isinstance(s, Linear), hidden)
        supported = lambda s: isinstance(s, MultiHeadAttention) or self.lora_class(s) is not None  # noqa: E731
        found = match_layers(base_model, self.config.target_layers, supported, hidden)
        for path, layer in list(found.items()):
            if isinstance(layer, MultiHeadAttention):
                del found[path]
                projections = ("q_proj", "k_proj", "v_proj", "out_proj")
                found.update((f"{path}.{n}", getattr(layer, n)) for n in projections)
        order = list(base_model.sublayers())
        return dict(sorted(found.items(), key=lambda kv: order.index(kv[0])))

    def _find_saved(self, base_model: Layer, targets: dict[str, Layer]) -> dict[str, Layer]:
        if self.config.modules_to_save is None:
            return {}
        saved = match_layers(base_model, self.config.modules_to_save, lambda s: True, what="modules_to_save")
        both = sorted(set(saved) & set(targets))
        if both:
            raise ValueError(f"modules_to_save: {', '.join(both)} would be both adapted and trained in full")
        return saved

    def inject(self, base_model: Layer) -> Layer:
        """Replace each targeted layer by its LoRA layer (in place), after freezing
        the base parameters when ``freeze_base_model``; returns ``base_model``."""
        if self.targeted_layers:
            raise RuntimeError("LinearLoraTuner.inject: this tuner has injected its adapters already")
        if not isinstance(base_model, Layer):
            raise TypeError(
                f"LinearLoraTuner.inject: expected a Layer or Model, not {type(base_model).__name__}"
            )
        if any(isinstance(s, LoRALayer) for s in base_model.sublayers().values()):
            raise ValueError("the model holds LoRA layers already (merge_and_unload() them first)")
        targets = self.find_targets(base_model)
        saved = self._find_saved(base_model, targets)
        if self.config.freeze_base_model:
            self.frozen = self.freeze_base_parameters(base_model)
        cfg = self.config
        for path, layer in targets.items():
            cls = self.lora_class(layer)
            if cls is None:  # find_targets kept only layers that have a LoRA class
                raise AssertionError(f"no LoRA layer class for {path}")
            lora = cls(layer, cfg.r, cfg.lora_alpha, cfg.lora_dropout, cfg.use_rslora)
            replace_layer(base_model, path, lora)
        keep = {id(t) for s in saved.values() for t in s.get_states().values()}
        _unfreeze([t for t in self.frozen if id(t) in keep])
        self.frozen = [t for t in self.frozen if id(t) not in keep]
        self.targeted_layers = list(targets)
        self.saved_layers = list(saved)
        return base_model

    def freeze_new_parameters(self, base_model: Layer) -> list[Tensor]:
        """With ``freeze_base_model``: freeze the base parameters created since
        :meth:`inject` (a lazily sized model creates them on its first call), all but
        the adapters and the ``modules_to_save`` states; returns those frozen."""
        if not self.config.freeze_base_model:
            return []
        keep = {id(t) for t in self.adapter_tensors(base_model)}
        new = [t for t in base_model.get_params().values() if id(t) not in keep and t.requires_grad]
        set_frozen(new, True)
        self.frozen += new
        return new

    def adapter_tensors(self, base_model: Layer) -> list[Tensor]:
        """The tensors that train: every LoRA layer's adapters (those created so far)
        and the ``modules_to_save`` states."""
        tensors = [t for lora in self.lora_layers(base_model).values() for t in lora.adapters().values()]
        for path in self.saved_layers:
            tensors += find_layer(base_model, path).get_states().values()
        return tensors

    def lora_layers(self, base_model: Layer) -> dict[str, Any]:
        """The LoRA layers this tuner put into ``base_model``, by dotted name."""
        return {p: find_layer(base_model, p) for p in self.targeted_layers}

    def merge_weights(self, base_model: Layer, mode: bool = True) -> Layer:
        """Merge (``mode=True``) or unmerge every LoRA layer; returns ``base_model``."""
        for lora in self.lora_layers(base_model).values():
            lora.merge_weights(mode)
        return base_model

    def unload(self, base_model: Layer, merge: bool = True) -> Layer:
        """Put the base layers back in place of the LoRA layers, merged first (or
        unmerged, with ``merge=False``), and unfreeze the base weights this tuner
        froze; returns ``base_model``, a plain model again."""
        for path, lora in self.lora_layers(base_model).items():
            lora.merge_weights(merge)
            lora.freeze_pretrained_weight(False)
            replace_layer(base_model, path, lora.base_layer)
        _unfreeze(self.frozen)
        self.frozen = []
        self.targeted_layers = []
        return base_model

    def adapter_states(self, base_model: Layer) -> dict[str, Tensor]:
        """The tensors an adapter checkpoint holds: each LoRA layer's ``lora_A`` and
        ``lora_B`` and the states of the ``modules_to_save`` layers, by dotted name."""
        states: dict[str, Tensor] = {}
        for path, lora in self.lora_layers(base_model).items():
            if lora.lora_A is None:
                raise RuntimeError(f"the adapters of {path!r} do not exist yet (compile or call the model)")
            states.update((f"{path}.{k}", t) for k, t in lora.adapters().items())
        for path in self.saved_layers:
            layer = find_layer(base_model, path)
            states.update((f"{path}.{k}", t) for k, t in layer.get_states().items())
        return states

    def describe(self) -> dict[str, Any]:
        """The configuration plus the adapted and saved layers (JSON values)."""
        config = self.config.to_dict()
        return {"config": config, "layers": list(self.targeted_layers), "saved": list(self.saved_layers)}


def merge_and_unload(model: Layer) -> Layer:
    """Merge every LoRA layer found in ``model`` and put its base layer back (no tuner
    needed: for a model rebuilt with its adapters, e.g. from a checkpoint); the base
    weights of those layers are trainable again. Returns ``model``, changed in place."""
    outer = {p: s for p, s in model.sublayers().items() if isinstance(s, LoRALayer)}
    outer = {p: s for p, s in outer.items() if not any(p.startswith(q + ".") for q in outer)}
    for path, lora in outer.items():
        lora.merge()
        lora.freeze_pretrained_weight(False)
        replace_layer(model, path, lora.base_layer)
    if isinstance(model, Model):
        model.reset_graph()  # its traces ran the adapters
    return model
