"""QLoRA under the runtime that runs it, pinned in bytes on a small configuration: torchtune's
NF4 weights are torchao's ``NF4Tensor`` (``torchao/dtypes/nf4tensor.py``), not bitsandbytes'
``Linear4bit``: another scaler layout, only the adapted linears quantised, and a dequantisation
that keeps far more than the half weight in flight."""

import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from vram_estimator.api import estimate_configs  # noqa: E402
from vram_estimator.costs import terms as T  # noqa: E402
from vram_estimator.costs.estimate import setup  # noqa: E402
from vram_estimator.reading.config_comments import Value  # noqa: E402

SMALL = dict(model="tinyllama-1.1b", batch=2, seq=64, lora=8, mode="train", precision="nf4")
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _setup(**given):
    return setup({k: Value(v, "test") for k, v in given.items()})


def test_torchao_nf4_scalers_are_int8_per_64_and_a_bf16_factor_per_256_scalers():
    tune = _setup(runtime="torchtune", lora_targets=list(ALL), **SMALL)
    bnb = _setup(lora_targets=list(ALL), **SMALL)
    n = tune.model.breakdown.linear
    assert T.quantised_params(tune) == n == T.quantised_params(bnb)
    # bitsandbytes double quantisation: uint8 absmax per 64 + an fp32 per 256 blocks
    per_weight_gap = (4.0 - 2.0) / (64 * 256)
    # and PEFT keeps its adapters in fp32 where torchtune keeps the model's bf16 (knowledge/adapters)
    adapter_gap = (4.0 - 2.0) * tune.lora_params
    assert T.weights(bnb).point - T.weights(tune).point == pytest.approx(per_weight_gap * n + adapter_gap)
    assert T.nf4_scaler_bytes(tune) == pytest.approx(1 / 64 + 2 / (64 * 256))


def test_torchtune_quantises_only_the_adapted_linears():
    """``LoRALinear(quantize_base=True)`` holds ``to_nf4(linear.weight)``; a block linear without
    an adapter stays an ``nn.Linear`` in bf16."""
    qv = _setup(runtime="torchtune", lora_targets=["q_proj", "v_proj"], **SMALL)
    bd, d = qv.model.breakdown, qv.model.dims
    q_v = d.layers * sum(t.fan_in * t.fan_out for t in bd.lora_targets if t.name in ("q_proj", "v_proj"))
    assert T.quantised_params(qv) == q_v
    bnb = _setup(lora_targets=["q_proj", "v_proj"], **SMALL)
    assert T.quantised_params(bnb) == bd.linear  # bitsandbytes replaces every block linear
    per = 0.5 + T.nf4_scaler_bytes(qv)
    expected = per * q_v + 2.0 * (bd.total - q_v) + 2.0 * qv.lora_params  # bf16 adapters
    assert T.weights(qv).point == pytest.approx(expected)


def test_torchao_dequantisation_keeps_14_bytes_per_weight_in_flight():
    """``get_original_weight``: int64 codes (8 B), bf16 look-ups (2), scaled halves (2) and the
    stacked weight (2) at once, for the largest quantised linear; bitsandbytes: the half weight."""
    tune = _setup(runtime="torchtune", lora_targets=list(ALL), **SMALL)
    bnb = _setup(lora_targets=list(ALL), **SMALL)
    largest = max(t.fan_in * t.fan_out for t in tune.model.breakdown.lora_targets)
    assert T.dequant_buffer(tune).point == pytest.approx(14.0 * largest)
    assert T.dequant_buffer(bnb).point == pytest.approx(2.0 * largest)


def test_linear_nf4_keeps_no_input():
    """``LinearNF4.forward`` saves only the weight (``ctx.save_for_backward(weight)``)."""
    tune = _setup(runtime="torchtune", lora_targets=["q_proj", "v_proj"], **SMALL)
    assert tune.adapters().quant_keeps_input is False


def test_torchtune_recipe_says_its_runtime(tmp_path):
    path = tmp_path / "7B_qlora_single_device.yaml"
    path.write_text(
        "model:\n  _component_: torchtune.models.llama2.qlora_llama2_7b\n  lora_rank: 8\n"
        "  lora_attn_modules: ['q_proj', 'v_proj']\nbatch_size: 2\n"
    )
    result = estimate_configs([str(path)])
    assert result.estimate is not None, (result.errors, result.input_error)
    s = result.estimate.settings
    assert s["runtime"].value == "torchtune" and s["precision"].value == "nf4"
    dequant = result.estimate.term("dequantised weight")
    assert dequant is not None and "14 B per weight" in dequant.note


# --------------------------------------------------------------------------- bitsandbytes + PEFT

KBIT_SCRIPT = """import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
model = AutoModelForCausalLM.from_pretrained("TinyLlama/TinyLlama-1.1B-Chat-v1.0", quantization_config=q)
model = prepare_model_for_kbit_training(model)
model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
"""


def test_prepare_model_for_kbit_training_keeps_the_unquantised_params_in_fp32():
    """``prepare_model_for_kbit_training`` casts every half parameter that is not ``Params4bit``
    to fp32: 4 B per embedding, norm and head weight instead of 2, and fp32 logits."""
    up = _setup(kbit_fp32=True, lora_targets=["q_proj", "v_proj"], **SMALL)
    bare = _setup(lora_targets=["q_proj", "v_proj"], **SMALL)
    bd = up.model.breakdown
    rest = bd.total - T.quantised_params(up)
    assert T.weights(up).point - T.weights(bare).point == pytest.approx(2.0 * rest)
    assert T.weights(up).upper == pytest.approx(T.weights(bare).upper)  # the old upper end was this case
    toks, vocab = 2 * 64, up.model.dims.vocab
    assert T.logits(up).point == pytest.approx(12.0 * toks * vocab)  # fp32 logits, log-softmax, gradient
    assert T.logits(bare).point == pytest.approx(10.0 * toks * vocab)
    # torchtune and litgpt never call it; the flag changes nothing there
    tune = _setup(kbit_fp32=True, runtime="torchtune", lora_targets=["q_proj", "v_proj"], **SMALL)
    assert T.kbit_fp32(tune) is False


def test_the_script_reader_sees_prepare_model_for_kbit_training():
    from vram_estimator.api import estimate_source

    result = estimate_source(KBIT_SCRIPT)
    assert result.estimate is not None, (result.errors, result.input_error)
    s = result.estimate.settings
    assert s["kbit_fp32"].value is True and s["precision"].value == "nf4"
    quiet = estimate_source(KBIT_SCRIPT.replace("model = prepare_model_for_kbit_training(model)\n", ""))
    assert "kbit_fp32" not in quiet.estimate.settings


def test_torchao_nf4_shards_its_scalers_under_fsdp2():
    """``NF4Tensor.fsdp_pre_all_gather`` all-gathers the scalers with the data: they are sharded,
    unlike bitsandbytes' ``QuantState`` kept whole on every rank."""
    given = dict(model="llama-2-7b", precision="nf4", lora=8, world=2, sharding="fsdp2", batch=1, seq=64,
                 mode="train", lora_targets=list(ALL))
    tune = _setup(runtime="torchtune", **given)
    bnb = _setup(**given)
    assert T.quant_state(tune) is None and T.quant_state(bnb) is not None
    one = _setup(runtime="torchtune", **dict(given, world=1, sharding="none"))
    assert T.weights(tune).point == pytest.approx(T.weights(one).point / 2)  # scalers included
