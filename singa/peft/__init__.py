"""Parameter-efficient fine-tuning: LoRA with Apache SINGA's ``singa_peft`` API.

Code written for SINGA's ``singa_peft`` runs with ``singa.peft`` in its place::

    from singa.peft import LinearLoraConfig, get_peft_model

    config = LinearLoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, target_layers=["linear1", "*conv*"])
    peft_model = get_peft_model(model, config)   # model changed in place, base frozen
    peft_model.set_optimizer(opt.SGD(lr=0.01))
    peft_model.compile([tx], is_train=True, use_graph=True)
    out, loss = peft_model(tx, ty)               # trains lora_A / lora_B only
    peft_model.save_adapters("adapters.zip")     # a few KB: adapters and config
    peft_model.merge_weights(True)               # runs as the plain model
    plain = peft_model.merge_and_unload()        # the plain model with merged weights

LoRA adapts ``Linear``, ``Conv2d`` (group 1) and the projections of
``MultiHeadAttention`` when the model has one; layers are chosen by dotted name or glob.
See :mod:`singa.peft.layers` for the computation and :mod:`singa.peft.adapters` for the
adapter file.
"""

from singa.peft.adapters import SavedAdapters
from singa.peft.config import LinearLoraConfig, PeftConfig
from singa.peft.layers import Conv2dLoRALayer, LinearLoRALayer, LoRALayer, lora_scaling
from singa.peft.peft_model import PeftModel, get_peft_model
from singa.peft.registry import PeftRegistry
from singa.peft.tuner import BaseTuner, LinearLoraTuner, merge_and_unload

__all__ = [
    "PeftConfig",
    "LinearLoraConfig",
    "LoRALayer",
    "LinearLoRALayer",
    "Conv2dLoRALayer",
    "BaseTuner",
    "LinearLoraTuner",
    "PeftRegistry",
    "PeftModel",
    "get_peft_model",
    "merge_and_unload",
    "SavedAdapters",
    "lora_scaling",
]
