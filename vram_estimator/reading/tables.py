"""Library knowledge that both the script reader and the config-file readers use.

A script's ``torch.optim.AdamW(...)`` and a torchtune recipe's ``_component_:
torch.optim.AdamW`` name the same optimizer class; a Lightning ``Trainer(precision="bf16")``
and a litgpt YAML's ``precision: bf16`` the same precision; a litgpt script's
``lora_query=True`` default and the same key in its YAML the same adapted linears.  One table
each, here, so :mod:`.call_handlers`, :mod:`.entrypoints` and :mod:`.configs.formats` read
them alike.  This module imports nothing of the package.
"""

from __future__ import annotations

# optimizer class names, lower-cased without underscores -> our optimizer name
OPTIMIZER_CLASSES = {
    "adamw": "adamw",
    "adam": "adam",
    "fusedadam": "adam",
    "sgd": "sgd",
    "adafactor": "adafactor",
    "adamw8bit": "adamw-8bit",
    "adam8bit": "adamw-8bit",
    "pagedadamw8bit": "paged-adamw-8bit",
    "pagedadam8bit": "paged-adamw-8bit",
    "pagedadamw": "paged-adamw",
    "pagedadamw32bit": "paged-adamw",
    "lion": "lion",
    "lion8bit": "lion-8bit",
    "deepspeedcpuadam": "adamw",
    "adamwschedulefree": "adamw",
}
# Lightning / litgpt ``precision=`` strings -> our precision
LIGHTNING_PRECISION = {
    "16": "fp16-mixed",
    "16-mixed": "fp16-mixed",
    "bf16": "bf16-mixed",
    "bf16-mixed": "bf16-mixed",
    "32": "fp32",
    "32-true": "fp32",
    "bf16-true": "bf16",
    "16-true": "fp16",
    "transformer-engine": "bf16-mixed",
}
# litgpt LoRA switches -> the linears they put adapters on (Hugging Face names)
LITGPT_LORA_ROLES = {
    "lora_query": ("q_proj",),
    "lora_key": ("k_proj",),
    "lora_value": ("v_proj",),
    "lora_projection": ("o_proj",),
    "lora_mlp": ("gate_proj", "up_proj", "down_proj"),
    "lora_head": ("lm_head",),
}
