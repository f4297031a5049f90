"""LoRA adapter bytes by implementation (knowledge/adapters.py) and PEFT's default targets.

PEFT keeps adapters in fp32 over bf16/fp16 weights (``cast_adapter_dtype``, on by default through
``autocast_adapter_dtype=True``); torchtune and litgpt build them in the model's dtype.  The
gradients and AdamW's two states follow the adapters' dtype."""

import pytest

from vram_estimator.api import estimate_source
from vram_estimator.costs import terms as T
from vram_estimator.costs.estimate import setup
from vram_estimator.knowledge import db
from vram_estimator.knowledge.registry import FAMILIES
from vram_estimator.reading.config_comments import Value
from vram_estimator.reading.configs.formats import torchtune_model_settings
from vram_estimator.reading.script_reader import read_source

# llama-2-7b, r=8 on q_proj and v_proj: 32 blocks x 8 x (4096 + 4096) x 2 linears
LLAMA_R8_QV = 32 * 8 * (4096 + 4096) * 2


def _setup(**given):
    return setup({k: Value(v, "test") for k, v in given.items()})


def _lora_terms(**given):
    s = _setup(model="llama-2-7b", batch=1, seq=256, lora=8, mode="train", **given)
    base = 2.0 * s.model.breakdown.total if s.pc == "half" else 4.0 * s.model.breakdown.total
    return s, T.weights(s).point, T.gradients(s).point, T.optimizer_state(s).point, base


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_peft_prices_adapters_in_fp32_over_half_weights(precision):
    s, weights, grads, states, base = _lora_terms(precision=precision)
    assert s.lora_params == LLAMA_R8_QV
    assert weights - base == 4 * LLAMA_R8_QV
    assert grads == 4 * LLAMA_R8_QV
    assert states == 2 * 4 * LLAMA_R8_QV  # AdamW: exp_avg and exp_avg_sq
    assert "fp32" in T.weights(s).note and "autocast_adapter_dtype" in T.weights(s).note


@pytest.mark.parametrize("impl", ["torchtune", "litgpt"])
def test_torchtune_and_litgpt_keep_adapters_in_the_model_dtype(impl):
    s, weights, grads, states, base = _lora_terms(precision="bf16", lora_impl=impl)
    assert (weights - base, grads, states) == (2 * LLAMA_R8_QV, 2 * LLAMA_R8_QV, 2 * 2 * LLAMA_R8_QV)
    assert "bf16" in T.weights(s).note and impl in T.weights(s).note


def test_fp32_and_amp_weights_keep_fp32_adapters_everywhere():
    for impl in ("peft", "torchtune", "litgpt"):
        for precision in ("fp32", "bf16-mixed"):
            s, weights, grads, states, base = _lora_terms(precision=precision, lora_impl=impl)
            assert (weights - base, grads) == (4 * LLAMA_R8_QV, 4 * LLAMA_R8_QV)


def test_quantised_base_peft_fp32_torchtune_bf16():
    """PEFT's adapters over a 4-bit layer get no float dtype to follow (fp32); torchtune's QLoRA
    builds them under the model's bf16."""
    assert _setup(model="llama-2-7b", precision="nf4", lora=8, mode="train").adapter_bytes == 4
    tune = _setup(model="llama-2-7b", precision="nf4", lora=8, mode="train", lora_impl="torchtune")
    assert tune.adapter_bytes == 2


SCRIPT = """import torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.bfloat16)
config = LoraConfig(r=8, target_modules=["q_proj", "v_proj"])
model = get_peft_model(model, config{extra})
optimizer = torch.optim.AdamW(model.parameters())
"""


def test_autocast_adapter_dtype_false_is_read_and_keeps_bf16_adapters():
    off = read_source(SCRIPT.format(extra=", autocast_adapter_dtype=False")).values
    assert off["autocast_adapter_dtype"].value is False
    assert "autocast_adapter_dtype" not in read_source(SCRIPT.format(extra="")).values
    s, weights, grads, states, base = _lora_terms(precision="bf16", autocast_adapter_dtype=False)
    assert (weights - base, grads) == (2 * LLAMA_R8_QV, 2 * LLAMA_R8_QV)
    assert "autocast_adapter_dtype=False" in T.weights(s).note


def test_autocast_adapter_dtype_false_lowers_the_script_estimate():
    on = estimate_source(SCRIPT.format(extra=""), gpu="a100-80gb")
    off = estimate_source(SCRIPT.format(extra=", autocast_adapter_dtype=False"), gpu="a100-80gb")
    assert on.estimate.point - off.estimate.point >= 2 * LLAMA_R8_QV * 3  # weights, grads, 2 states


def test_runtime_and_torchtune_builders_name_the_implementation():
    assert _setup(model="llama-2-7b", lora=8, runtime="litgpt").lora_impl == "litgpt"
    assert _setup(model="llama-2-7b", lora=8).lora_impl == "peft"
    out = torchtune_model_settings({"_component_": "torchtune.models.llama2.lora_llama2_7b", "lora_rank": 8})
    assert ("lora_impl", "torchtune") in {(x.key, x.value) for x in out}


# phi-2: 32 blocks, hidden 2560, MLP 10240
PHI2_QV = 32 * 8 * (2560 + 2560) * 2
PHI2_FC = 32 * 8 * (2560 + 10240) * 2


def test_phi_peft_default_targets_the_mlp_too():
    """PEFT's mapping for phi is q_proj, v_proj, fc1, fc2 (peft/utils/constants.py)."""
    s = _setup(model="phi-2", precision="bf16", lora=8, mode="train")
    assert sorted(t.name for t in s.chosen_lora()) == ["fc1", "fc2", "q_proj", "v_proj"]
    assert s.lora_params == PHI2_QV + PHI2_FC
    assert T.gradients(s).point == 4 * (PHI2_QV + PHI2_FC)


def test_litgpt_default_targets_stay_query_and_value():
    s = _setup(model="phi-2", precision="bf16", lora=8, mode="train", runtime="litgpt")
    assert sorted(t.name for t in s.chosen_lora()) == ["q_proj", "v_proj"]
    assert s.lora_params == PHI2_QV


def _one_model_per_family():
    seen = {}
    for key, entry in db.models().items():
        seen.setdefault(entry["family"], key)
    return seen


def test_default_targets_match_peft_mapping():
    """Every family PEFT maps (by model_type) has PEFT's default targets.  Families PEFT does not
    map make PEFT ask for ``target_modules``; their defaults are our guess."""
    constants = pytest.importorskip("peft.utils.constants")
    mapping = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    checked = 0
    for family, key in _one_model_per_family().items():
        spec = db.model(key)
        for hf_type in FAMILIES[family].hf_types:
            if isinstance(mapping.get(hf_type), list):
                assert set(spec.breakdown.default_lora) == set(mapping[hf_type]), (family, hf_type)
                checked += 1
    assert checked >= 15
