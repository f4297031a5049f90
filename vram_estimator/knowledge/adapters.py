"""LoRA implementations: the dtype each keeps its adapter weights in, and which runtime implies it.

Read from the libraries' sources (at development time; nothing here imports them):

* PEFT (``peft/tuners/tuners_utils.py``): ``_move_adapter_to_device_of_base_layer`` first gives
  the new adapter the base layer's float dtype (bf16/fp16 over half weights; a 4-bit layer's
  packed uint8 weight is not a float dtype, so its adapters keep torch's default fp32), then
  ``cast_adapter_dtype`` -- called by ``get_peft_model``/``PeftModel`` with
  ``autocast_adapter_dtype=True`` by default -- upcasts fp16/bf16 adapter parameters to fp32.
  So PEFT adapters are fp32 unless the script passes ``autocast_adapter_dtype=False``.
* torchtune (``torchtune/modules/peft/lora.py``, ``LoRALinear``): ``lora_a``/``lora_b`` are plain
  ``nn.Linear`` built inside the recipe's ``training.set_default_dtype(self._dtype)``: the
  model's dtype (bf16 under ``dtype: bf16``, also over NF4 weights).
* litgpt (``litgpt/lora.py``, ``LoRALinear``): ``lora_A``/``lora_B`` are ``nn.Parameter`` built
  under ``fabric.init_module()``, which sets the precision plugin's dtype: the model's dtype.

The gradients and AdamW's states of the adapters follow the parameters' dtype
(``torch.zeros_like(p)``), so this one table prices weights, gradients and optimizer states.
"""

from typing import Dict, Tuple

# dtype of the adapter weights over (bf16/fp16 weights, 4/8-bit quantised weights): "fp32" is
# four bytes, "model" the model's two-byte dtype (a quantised model's float parts are bf16)
ADAPTER_DTYPE: Dict[str, Tuple[str, str]] = {
    "peft": ("fp32", "fp32"),
    "torchtune": ("model", "model"),
    "litgpt": ("model", "model"),
}
# PEFT with ``autocast_adapter_dtype=False``: the adapters keep the base layer's float dtype, and a
# quantised layer's packed weight has none to give (torch's default fp32 stays)
PEFT_NO_UPCAST: Tuple[str, str] = ("model", "fp32")
DTYPE_BYTES: Dict[str, int] = {"fp32": 4, "model": 2}

# the runtime a script or config was read as -> the LoRA implementation it adapts with
LORA_IMPL_OF_RUNTIME: Dict[str, str] = {"litgpt": "litgpt", "torchtune": "torchtune"}

# the block-linear roles an implementation adapts when the run names none: PEFT takes the family's
# own default (``Breakdown.default_lora``, its TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING);
# litgpt's ``lora_query``/``lora_value`` default on and the rest off (``litgpt/finetune/lora.py``);
# torchtune's builders take ``lora_attn_modules`` (the attention projections)
DEFAULT_TARGET_ROLES: Dict[str, Tuple[str, ...]] = {"litgpt": ("qkv",), "torchtune": ("qkv",)}

# why, in a report's words
ADAPTER_DTYPE_WHY: Dict[str, str] = {
    "peft": "PEFT upcasts half adapters to fp32 (autocast_adapter_dtype=True)",
    "peft-no-upcast": "PEFT with autocast_adapter_dtype=False keeps the base layer's dtype",
    "peft-quantised": "PEFT adapters over 4/8-bit layers keep torch's default fp32",
    "torchtune": "torchtune builds LoRALinear in the model's dtype",
    "litgpt": "litgpt builds LoRALinear in the model's dtype",
}


def _dtypes(impl: str, autocast_adapter_dtype: bool) -> Tuple[str, str]:
    if impl == "peft" and not autocast_adapter_dtype:
        return PEFT_NO_UPCAST
    return ADAPTER_DTYPE.get(impl, ADAPTER_DTYPE["peft"])  # unknown: PEFT, the common case


def adapter_bytes(impl: str, half_model: bool, quantised: bool, autocast_adapter_dtype: bool = True) -> int:
    """Bytes per adapter parameter (and per gradient and AdamW state element).  Over fp32
    weights (fp32, AMP) every implementation keeps fp32 adapters."""
    if not (half_model or quantised):
        return 4
    over_half, over_quantised = _dtypes(impl, autocast_adapter_dtype)
    return DTYPE_BYTES[over_quantised if quantised else over_half]


def adapter_why(impl: str, quantised: bool, autocast_adapter_dtype: bool = True) -> str:
    key = impl
    if impl == "peft" and (quantised or not autocast_adapter_dtype):
        key = "peft-quantised" if quantised else "peft-no-upcast"
    return ADAPTER_DTYPE_WHY.get(key, ADAPTER_DTYPE_WHY["peft"])
