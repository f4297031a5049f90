"""Issue 26, terms 2-6, each read from the library's source and pinned in bytes on a small
configuration: the loss implementations (``loss=``), litgpt's FSDP1 units with frozen weights,
litgpt's QLoRA embedding swap, FSDP's CPU offload, and the readings (litgpt's ``setup()``,
Gemma 2 under litgpt, names whose architecture is inferred, a litgpt-style pretraining script)."""

import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from vram_estimator.api import estimate_configs, estimate_file, estimate_source  # noqa: E402
from vram_estimator.cli import main  # noqa: E402
from vram_estimator.costs import terms as T  # noqa: E402
from vram_estimator.costs.estimate import estimate, setup  # noqa: E402
from vram_estimator.knowledge import db  # noqa: E402
from vram_estimator.reading.config_comments import Value, normalise, parse_comment  # noqa: E402

FIXTURES = os.path.join(ROOT, "fixtures", "vram")


def _setup(**given):
    return setup({k: Value(v, "test") for k, v in given.items()})


def _settings(result):
    assert result.estimate is not None, (result.errors, result.input_error)
    return result.estimate.settings


SMALL = dict(model="tinyllama-1.1b", batch=2, seq=64, lora=8, mode="train")


# --------------------------------------------------------------------------- 2. the loss


@pytest.mark.parametrize(
    "loss, precision, per_logit",
    [("plain", "bf16", 4.0), ("plain", "bf16-mixed", 6.0), ("plain", "fp32", 8.0),
     ("torchtune-linear", "bf16", 4.75), ("litgpt-chunked", "bf16", 4.1), ("hf", "bf16", 10.0)],
)
def test_loss_bytes_per_logit(loss, precision, per_logit):
    s = _setup(loss=loss, precision=precision, **SMALL)
    assert T.logits(s).point == pytest.approx(2 * 64 * 32000 * per_logit)


def test_liger_keeps_no_logits_only_hidden_sized_pieces():
    s = _setup(loss="liger-fused", precision="bf16", **SMALL)
    term = T.logits(s)
    assert term.point == pytest.approx(2 * 64 * 2048 * 10.0)  # tokens x hidden x (2+2+2+4)
    assert "Liger" in term.note


def test_loss_comment_and_flag_and_bad_value():
    values, errors = parse_comment("# vram: loss=liger", 1)
    assert not errors and values["loss"].value == "liger-fused"
    assert normalise("loss", "CEWithChunkedOutputLoss") == ("torchtune-chunked", None)
    _, error = normalise("loss", "mse")
    assert "hf, plain" in error
    assert main(["--model", "tinyllama-1.1b", "--loss", "nonsense"]) == 2


def test_the_report_says_which_loss_and_why():
    result = estimate_source("import torch\n# vram: model=llama-2-7b precision=bf16 lora=8 batch=1 seq=512\n")
    est = result.estimate
    assert est.settings["loss"].value == "hf" and est.settings["loss"].source.startswith("default")
    assert any(n.startswith("loss hf: half logits + fp32 upcast") for n in est.notes)


LIGER_SCRIPT = """
import torch
from liger_kernel.transformers import apply_liger_kernel_to_llama
from transformers import AutoModelForCausalLM

apply_liger_kernel_to_llama({kw})
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.bfloat16)
loss = model(input_ids=x, labels=x).loss
loss.backward()
"""


@pytest.mark.parametrize(
    "kw, expected",
    [("", "liger-fused"), ("fused_linear_cross_entropy=False", "hf"),
     ("fused_linear_cross_entropy=False, cross_entropy=True", "plain")],
)
def test_liger_patch_functions(kw, expected):
    s = _settings(estimate_source(LIGER_SCRIPT.format(kw=kw)))
    assert s["loss"].value == expected


def test_torchtune_recipe_names_its_loss(tmp_path):
    path = tmp_path / "7B_lora_single_device.yaml"
    path.write_text(
        "model:\n  _component_: torchtune.models.llama2.lora_llama2_7b\n  lora_rank: 8\n"
        "batch_size: 2\nloss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n"
    )
    s = _settings(estimate_configs([str(path)]))
    assert s["loss"].value == "torchtune-linear" and "loss._component_" in s["loss"].source


# --------------------------------------------------------------------------- 3. litgpt multi-GPU LoRA

LITGPT_LORA = """checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf
precision: bf16-true
devices: 4
lora_r: 8
lora_query: true
lora_value: true
train:
  global_batch_size: 16
  micro_batch_size: 1
  max_seq_length: 512
"""


def test_litgpt_lora_config_on_four_gpus_keeps_unsharded_frozen_gradients(tmp_path):
    path = tmp_path / "lora.yaml"
    path.write_text(LITGPT_LORA)
    est = estimate_configs([str(path)]).estimate
    s = est.settings
    assert (s["sharding"].value, s["fsdp_units"].value, s["grad_accum"].value) == ("fsdp", "litgpt", 4)
    bd = db.model("llama-2-7b").breakdown
    term = [t for t in est.phases["backward"] if t.name == "frozen gradients"][0]
    # bf16 gradients of every block weight, unsharded under no_sync (accumulation 16 / (1 x 4))
    assert term.point == pytest.approx(2.0 * (bd.total - bd.embed - bd.head))
    assert term.lower == 0.0  # litgpt >= 0.5.5 (FSDP2) keeps none


def test_litgpt_lora_without_accumulation_shards_the_frozen_gradients():
    s = _setup(model="llama-2-7b", precision="bf16", lora=8, world=4, sharding="fsdp", fsdp_units="litgpt",
               grad_accum=1, batch=1, seq=512, mode="train")
    bd = s.model.breakdown
    assert T.frozen_gradients(s).point == pytest.approx(2.0 * (bd.total - bd.embed - bd.head) / 4)


# --------------------------------------------------------------------------- 4. litgpt QLoRA


def test_litgpt_qlora_keeps_the_replaced_embedding_and_its_gradient():
    s = _setup(precision="nf4", runtime="litgpt", **SMALL)
    assert T.litgpt_quantised_embedding(s).point == pytest.approx(2 * 2.0 * 32000 * 2048)
    assert s.bnb_saves_input  # litgpt pins bitsandbytes 0.42.0
    assert T.litgpt_quantised_embedding(_setup(precision="nf4", **SMALL)) is None


# --------------------------------------------------------------------------- 5. FSDP CPU offload


def test_fsdp_offload_keeps_one_units_gradient_and_the_roots():
    s = _setup(model="tinyllama-1.1b", precision="bf16", world=2, sharding="fsdp", offload="both",
               batch=1, seq=64, mode="train")
    bd = s.model.breakdown
    block = (bd.total - bd.embed - bd.head) / 22
    assert T.offloaded_unit_gradients(s).point == pytest.approx(2.0 * (block * 1.5 + bd.embed + bd.head))
    assert T.gradients(s).point == 0.0
    names = {t.name for t in estimate({k: Value(v, "t") for k, v in dict(
        model="tinyllama-1.1b", precision="bf16", world=2, sharding="fsdp", offload="both", batch=1,
        seq=64).items()}).phases["backward"]}
    assert "unit gradients" in names and "head gradient" not in names


# --------------------------------------------------------------------------- 6. reading

LITGPT_COMMAND = """
import lightning as L
from lightning.fabric.strategies import FSDPStrategy
from litgpt.lora import GPT, Block, Config, mark_only_lora_as_trainable
from litgpt.utils import chunked_cross_entropy

def setup(checkpoint_dir, devices: int = 1, lora_r: int = 16, lora_dropout: float = 0.05,
          lora_query: bool = True, lora_value: bool = True):
    config = Config.from_file(checkpoint_dir / "model_config.yaml", lora_r=lora_r,
                              lora_dropout=lora_dropout, lora_query=lora_query, lora_value=lora_value)
    fabric = L.Fabric(devices=devices)
    fabric.launch(main, config)

def main(fabric, config):
    model = GPT(config)
    mark_only_lora_as_trainable(model)
    loss = chunked_cross_entropy(model(x, lm_head_chunk_size=128), y)
    fabric.backward(loss)
"""


def test_litgpt_command_module_setup_defaults_give_the_rank():
    s = _settings(estimate_source(LITGPT_COMMAND + "# vram: model=llama-2-7b\n"))
    assert s["lora"].value == 16 and "setup(lora_r)" in s["lora"].source
    assert s["lora_dropout"].value == 0.05 and s["loss"].value == "litgpt-chunked"


def test_gemma2_under_litgpt_is_eager_and_under_transformers_sdpa():
    lit = _settings(estimate_source(LITGPT_COMMAND + "# vram: model=gemma-2-9b\n"))
    assert lit["attention"].value == "eager" and "litgpt" in lit["attention"].source
    hf = _settings(estimate_source("import torch\n# vram: model=gemma-2-9b lora=8\n"))
    assert hf["attention"].value == "sdpa"
    llama = _settings(estimate_source(LITGPT_COMMAND + "# vram: model=llama-2-7b\n"))
    assert llama["attention"].value == "sdpa"


@pytest.mark.parametrize(
    "name, family, params",
    [("unsloth/Mistral-7B-v0.2", "mistral", 7241732096), ("stabilityai/stablelm-base-alpha-3b", "neox", None)],
)
def test_names_whose_architecture_is_inferred(name, family, params):
    model = db.model_from_name(name)
    assert model.family.name == family and "inferred from the name" in model.source
    if params:
        assert model.breakdown.total == params
    est = estimate_source(f"import torch\n# vram: model={name} lora=8\n").estimate
    assert any("architecture inferred from the name" in n for n in est.notes)
    assert db.model_from_name("unsloth/Mistral-7B-v0.3") is None  # another vocabulary


def test_litgpt_style_pretraining_script_reads_eight_fsdp_ranks_and_tinyllama():
    s = _settings(estimate_file(os.path.join(FIXTURES, "litgpt_pretrain_fsdp.py")))
    assert s["model"].value == "tinyllama-1.1b"
    assert (s["world"].value, s["sharding"].value) == (8, "fsdp")
    model = db.model("tinyllama-1.1b").config
    assert (model["layers"], model["hidden"], model["heads"], model["kv_heads"], model["ff"], model["vocab"]) == (
        22, 2048, 32, 4, 5632, 32000)


def test_pretraining_script_with_a_literal_fabric():
    text = (
        "import lightning as L\nfrom lightning.fabric.strategies import FSDPStrategy\n"
        "from lit_gpt.model import GPT, Block, Config\n"
        "fabric = L.Fabric(devices=8, strategy=FSDPStrategy(auto_wrap_policy={Block}))\n"
        "config = Config.from_name('tiny_LLaMA_1b')\nmodel = GPT(config)\nloss.backward()\n"
    )
    s = _settings(estimate_source(text))
    assert (s["model"].value, s["world"].value, s["sharding"].value) == ("tinyllama-1.1b", 8, "fsdp")


def test_nf4_absmax_with_and_without_double_quantisation():
    bd = db.model("tinyllama-1.1b").breakdown
    rest = 2.0 * (bd.total - bd.linear)
    plain = T.weights(_setup(precision="nf4", double_quant=False, **SMALL)).point
    double = T.weights(_setup(precision="nf4", **SMALL)).point
    lora = 4.0 * _setup(precision="nf4", **SMALL).lora_params
    assert plain == pytest.approx(bd.linear * (0.5 + 4 / 64) + rest + lora)  # fp32 absmax per 64
    assert double == pytest.approx(bd.linear * (0.5 + 1 / 64 + 4 / (64 * 256)) + rest + lora)


def test_litgpt_quantize_and_bitsandbytes_config_say_whether_absmax_is_quantised(tmp_path):
    path = tmp_path / "qlora.yaml"
    path.write_text(LITGPT_LORA.replace("devices: 4", "devices: 1\nquantize: bnb.nf4"))
    assert _settings(estimate_configs([str(path)]))["double_quant"].value is False
    path.write_text(LITGPT_LORA.replace("devices: 4", "devices: 1\nquantize: bnb.nf4-dq"))
    assert _settings(estimate_configs([str(path)]))["double_quant"].value is True
    script = ("import torch\nfrom transformers import BitsAndBytesConfig, AutoModelForCausalLM\n"
              "q = BitsAndBytesConfig(load_in_4bit=True{kw})\n"
              "m = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', quantization_config=q)\n")
    assert _settings(estimate_source(script.format(kw="")))["double_quant"].value is False
    dq = _settings(estimate_source(script.format(kw=", bnb_4bit_use_double_quant=True")))
    assert dq["double_quant"].value is True


def test_litgpt_quantises_the_head_and_dequantises_through_fp16():
    lit = _setup(precision="nf4", runtime="litgpt", **SMALL)
    peft = _setup(precision="nf4", **SMALL)
    bd = lit.model.breakdown
    head_saving = bd.head * (2.0 - (0.5 + 1 / 64 + 4 / (64 * 256)))
    adapters = (4 - 2) * lit.lora_params  # PEFT's adapters fp32, litgpt's in the model's bf16
    assert T.weights(peft).point - T.weights(lit).point == pytest.approx(head_saving + adapters)
    assert T.dequant_buffer(lit).point == pytest.approx(2 * 2.0 * bd.head)  # fp16 copy + its bf16 cast
    largest = max(t.fan_in * t.fan_out for t in bd.lora_targets)
    assert T.dequant_buffer(peft).point == pytest.approx(2.0 * largest)


def test_sharded_4bit_weights_keep_every_layers_absmax_on_every_rank():
    sharded = _setup(model="llama-2-7b", precision="nf4", lora=8, world=2, sharding="fsdp", batch=1, seq=64,
                     mode="train")
    bd = sharded.model.breakdown
    assert T.quant_state(sharded).point == pytest.approx(bd.linear * (1 / 64 + 4 / (64 * 256)))
    rest = 2.0 * (bd.total - bd.linear)
    assert T.weights(sharded).point == pytest.approx((0.5 * bd.linear + rest + 4.0 * sharded.lora_params) / 2)
    assert T.quant_state(_setup(model="llama-2-7b", precision="nf4", lora=8, batch=1, seq=64)) is None


@pytest.mark.parametrize(
    "line",
    ["from mylosses import apply_liger_kernel_to_llama\napply_liger_kernel_to_llama()\n",
     "from mylosses import CEWithChunkedOutputLoss\nloss_fn = CEWithChunkedOutputLoss()\n",
     "from mylosses import chunked_cross_entropy\nloss = chunked_cross_entropy(logits, y)\n"],
)
def test_a_loss_of_the_same_name_from_another_module_says_nothing(line):
    text = "import torch\n" + line + "# vram: model=llama-2-7b precision=bf16 lora=8 batch=1 seq=512\nloss.backward()\n"
    s = _settings(estimate_source(text))
    assert s["loss"].value == "hf" and s["loss"].source.startswith("default")


def test_an_unknown_config_name_gets_no_download_hint():
    text = ("from lit_gpt.model import GPT, Config\nconfig = Config.from_name('tiny_LLaMA_120M')\n"
            "model = GPT(config)\nloss.backward()\n")
    message = estimate_source(text).errors[0].message
    assert "unknown model 'tiny_LLaMA_120M'" in message and "huggingface-cli" not in message
    assert "params=7B" in message
