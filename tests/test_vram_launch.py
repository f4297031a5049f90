"""What the launcher decides (Lightning Fabric/Trainer strategies, litgpt's devices > 1, torchtune
recipes, accelerate and DeepSpeed configs, launch shell scripts, global / micro batch) and the
model names people write: each reader shape from a small file in tmp_path, with its source."""

import json

import pytest

from vram_estimator.knowledge import db
from vram_estimator.api import estimate_configs, estimate_file, estimate_source
from vram_estimator.cli import main
from vram_estimator.knowledge.db import closest_models
from vram_estimator.knowledge.model_names import stored_precision


def settings(result):
    assert result.estimate is not None, (result.errors, result.input_error)
    return result.estimate.settings


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- Lightning / litgpt scripts

LIT_LLAMA_LORA = '''
import lightning as L
import torch
from lit_llama.lora import lora, mark_only_lora_as_trainable
from lit_llama.model import LLaMA, LLaMAConfig

micro_batch_size = 4
batch_size = 128
gradient_accumulation_iters = batch_size // micro_batch_size
max_seq_length = 256

def main():
    fabric = L.Fabric(accelerator="cuda", devices=1, precision="bf16-true")
    config = LLaMAConfig.from_name("7B")
    with fabric.init_module(), lora(r=8, alpha=16, dropout=0.05, enabled=True):
        model = LLaMA(config)
    mark_only_lora_as_trainable(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    fabric.backward(model(x).sum() / gradient_accumulation_iters)

if __name__ == "__main__":
    main()
'''


def test_fabric_bf16_true_is_bf16_weights_and_a_lit_llama_size_is_a_model():
    s = settings(estimate_source(LIT_LLAMA_LORA, "lora.py", gpu="rtx4090"))
    assert s["precision"].value == "bf16" and s["precision"].source == "lora.py:13"
    assert s["model"].value == "llama-2-7b" and "lit-llama 7B" in s["model"].source
    assert s["lora"].value == 8 and s["lora_targets"].value == ["q_proj", "v_proj"]
    assert s["grad_accum"].value == 32 and s["world"].value == 1


def test_fabric_without_a_literal_precision_says_nothing_about_precision():
    src = LIT_LLAMA_LORA.replace('precision="bf16-true"', "precision=precision")
    s = settings(estimate_source(src, "lora.py"))
    assert s["precision"].source.startswith("default")


LITGPT_FULL = '''
import lightning as L
import torch
from lightning.fabric.strategies import FSDPStrategy
from litgpt.args import TrainArgs
from litgpt.model import GPT, Block, Config
from litgpt.utils import CLI, get_default_supported_precision

def setup(
    model_name: str = "Llama-2-7b-hf",
    devices: int = 1,
    precision=None,
    train: TrainArgs = TrainArgs(global_batch_size=16, micro_batch_size=1, max_seq_length=512),
):
    precision = precision or get_default_supported_precision(training=True)
    if devices > 1:
        strategy = FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block})
    else:
        strategy = "auto"
    fabric = L.Fabric(devices=devices, strategy=strategy, precision=precision)
    model = GPT(Config.from_name(model_name))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    fabric.backward(model(x).sum())

if __name__ == "__main__":
    CLI(setup)
'''


def test_litgpt_script_shards_and_checkpoints_only_with_more_than_one_device():
    one = settings(estimate_source(LITGPT_FULL, "full.py"))
    assert one["world"].value == 1 and one["sharding"].value == "none" and one["checkpointing"].value == "off"
    assert one["precision"].value == "bf16-mixed" and "litgpt's training default" in one["precision"].source
    assert one["grad_accum"].value == 16 and "global batch 16" in one["grad_accum"].source
    assert one["optimizer_foreach"].value is False and one["model"].value == "llama-2-7b"
    four = settings(estimate_source(LITGPT_FULL, "full.py", overrides={"world": "4"}))
    assert four["sharding"].value == "fsdp" and "with more than one rank" in four["sharding"].source
    assert four["checkpointing"].value == "on" and "full.py:17" in four["checkpointing"].source
    assert four["grad_accum"].value == 4  # 16 // (1 x 4)


def test_an_unconditional_fsdp_strategy_holds_on_its_own_devices():
    src = (
        "import lightning as L\nfrom lightning.fabric.strategies import FSDPStrategy\n"
        "strategy = FSDPStrategy(sharding_strategy='SHARD_GRAD_OP', cpu_offload=True)\n"
        "fabric = L.Fabric(devices=4, strategy=strategy)\nfabric.backward(loss)\n# vram: model=gpt2\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["world"].value == 4 and s["sharding"].value == "zero2" and s["offload"].value == "both"
    assert s["checkpointing"].value == "off"


def test_a_strategy_under_the_main_guard_is_not_conditional_on_the_devices():
    src = (
        "import lightning as L\nfrom lightning.fabric.strategies import FSDPStrategy\n"
        "if __name__ == '__main__':\n"
        "    fabric = L.Fabric(devices=1, strategy=FSDPStrategy(activation_checkpointing_policy={Block}))\n"
        "    fabric.backward(loss)\n# vram: model=gpt2\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["checkpointing"].value == "on" and "more than one rank" not in s["checkpointing"].source


def test_model_parallel_strategy_reads_the_parallelize_function():
    src = (
        "import lightning as L\nfrom lightning.fabric.strategies import ModelParallelStrategy\n"
        "def parallelize_fn(model, mesh, activation_checkpointing=True):\n"
        "    if activation_checkpointing:\n        model = checkpoint_wrapper(model)\n"
        "    fully_shard(model, mesh=mesh)\n    return model\n"
        "def main(devices: int = 1):\n"
        "    if devices > 1:\n        strategy = ModelParallelStrategy(parallelize_fn=parallelize_fn)\n"
        "    else:\n        strategy = 'auto'\n"
        "    fabric = L.Fabric(devices=devices, strategy=strategy)\n    fabric.backward(loss)\n"
        "main()\n# vram: model=gpt2 world=2\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["sharding"].value == "fsdp"  # fully_shard is read wherever it is called
    assert s["checkpointing"].value == "on" and "parallelize_fn() checkpoints every block" in s["checkpointing"].source


def test_lightning_trainer_deepspeed_strategy_object_and_accumulation():
    src = (
        "import pytorch_lightning as pl\nfrom pytorch_lightning.strategies import DeepSpeedStrategy\n"
        "trainer = pl.Trainer(devices=2, accumulate_grad_batches=4, "
        "strategy=DeepSpeedStrategy(stage=3, offload_optimizer=True, offload_parameters=True))\n"
        "trainer.fit(model)\n# vram: model=gpt2\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert (s["sharding"].value, s["offload"].value, s["grad_accum"].value, s["world"].value) == (
        "zero3", "both", 4, 2)


@pytest.mark.parametrize(
    "call, expected",
    [
        ("bnb.optim.PagedAdamW8bit(params)", "paged-adamw-8bit"),
        ("bnb.optim.AdamW(params, optim_bits=8, is_paged=True)", "paged-adamw-8bit"),
        ("bnb.optim.AdamW(params, optim_bits=8)", "adamw-8bit"),
        ("bnb.optim.PagedAdamW(params)", "paged-adamw"),
        ("torch.optim.AdamW(params)", "adamw"),
    ],
)
def test_paged_and_8bit_optimizers_are_not_torch_adamw(call, expected):
    src = f"import torch\nimport bitsandbytes as bnb\nopt = {call}\nloss.backward()\n# vram: model=gpt2\n"
    assert settings(estimate_source(src, "t.py"))["optimizer"].value == expected


def test_training_arguments_optim_enum_accumulation_and_fused():
    src = (
        "from transformers import TrainingArguments\nfrom transformers.training_args import OptimizerNames\n"
        "a = TrainingArguments(output_dir='o', optim=OptimizerNames.PAGED_ADAMW_8BIT, "
        "gradient_accumulation_steps=8)\n"
        "b = TrainingArguments(output_dir='o', optim='adamw_torch_fused')\n# vram: model=gpt2\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["optimizer"].value == "paged-adamw-8bit" and s["grad_accum"].value == 8


def test_fused_optim_string_turns_the_foreach_temporaries_off():
    src = "from transformers import TrainingArguments\na = TrainingArguments(optim='adamw_torch_fused')\n"
    s = settings(estimate_source(src + "# vram: model=gpt2\n", "t.py"))
    assert s["optimizer"].value == "adamw" and s["optimizer_foreach"].value is False


# --------------------------------------------------------------------------- config files

LITGPT_YAML = """checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf
precision: bf16-true
quantize: {quantize}
devices: {devices}
lora_r: 16
lora_query: true
lora_value: true
train:
  global_batch_size: 16
  micro_batch_size: 2
  max_seq_length: 512
optimizer:
  class_path: torch.optim.AdamW
"""


def test_litgpt_yaml_with_two_devices_is_fsdp_with_per_block_checkpointing(tmp_path):
    path = write(tmp_path, "lora.yaml", LITGPT_YAML.format(quantize="null", devices=2))
    s = settings(estimate_configs([path]))
    assert s["world"].value == 2 and s["sharding"].value == "fsdp" and s["checkpointing"].value == "on"
    assert s["fsdp_units"].value == "litgpt"  # FSDP1 Block units up to litgpt 0.5.4, FSDP2 after
    assert "devices > 1 (litgpt's launcher)" in s["sharding"].source
    assert s["grad_accum"].value == 4 and s["optimizer"].value == "adamw"


def test_litgpt_full_finetune_yaml_shards_whole_blocks_with_fsdp1(tmp_path):
    """`litgpt finetune full` / `adapter`: FSDPStrategy(auto_wrap_policy={Block}), one FSDP1
    unit per block (what the frozen-gradient term of LoRA under FSDP1 needs to know)."""
    text = "\n".join(line for line in LITGPT_YAML.format(quantize="null", devices=4).splitlines()
                     if not line.startswith("lora_"))
    s = settings(estimate_configs([write(tmp_path, "full.yaml", text)]))
    assert (s["sharding"].value, s["fsdp_units"].value, s["checkpointing"].value) == ("fsdp", "block", "on")


def test_litgpt_yaml_quantised_single_device_uses_paged_adamw(tmp_path):
    path = write(tmp_path, "qlora.yaml", LITGPT_YAML.format(quantize="bnb.nf4", devices=1))
    s = settings(estimate_configs([path]))
    assert s["sharding"].value == "none" and s["checkpointing"].value == "off"
    assert s["precision"].value == "nf4" and s["optimizer"].value == "paged-adamw"
    assert "qlora.yaml:3 (quantize)" == s["optimizer"].source


TORCHTUNE = """# To launch on 2 devices, run the following command from root:
#   tune run --nnodes 1 --nproc_per_node 2 lora_finetune_distributed --config llama3_1/8B_lora
model:
  _component_: torchtune.models.llama3_1.lora_llama3_1_8b
  lora_attn_modules: ['q_proj', 'v_proj']
  lora_rank: 8
batch_size: 2
gradient_accumulation_steps: 8
fsdp_cpu_offload: {offload}
optimizer:
  _component_: torch.optim.AdamW
  fused: True
"""


def test_torchtune_distributed_recipe_from_its_tune_run_comment(tmp_path):
    path = write(tmp_path, "8B_lora.yaml", TORCHTUNE.format(offload="True"))
    s = settings(estimate_configs([path]))
    assert s["world"].value == 2 and "comment line 2" in s["world"].source
    assert s["sharding"].value == "fsdp2" and "lora_finetune_distributed" in s["sharding"].source
    assert s["offload"].value == "both" and s["grad_accum"].value == 8
    assert s["optimizer_foreach"].value is False


def test_torchtune_single_device_config_name_is_one_gpu(tmp_path):
    text = "\n".join(TORCHTUNE.format(offload="False").splitlines()[2:])
    path = write(tmp_path, "8B_lora_single_device.yaml", text)
    s = settings(estimate_configs([path]))
    assert s["world"].value == 1 and "single-device recipe" in s["world"].source
    assert s["sharding"].value == "none"


def test_torchtune_builder_called_in_a_script():
    src = (
        "from torchtune.models.llama3_1 import lora_llama3_1_8b\n"
        "model = lora_llama3_1_8b(lora_attn_modules=['q_proj', 'k_proj', 'v_proj'], lora_rank=16,"
        " apply_lora_to_mlp=True)\nloss.backward()\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["model"].value == "llama-3.1-8b" and s["lora"].value == 16
    assert s["lora_targets"].value == ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]


def test_accelerate_fsdp_checkpointing_and_deepspeed_accumulation(tmp_path):
    fsdp = write(tmp_path, "fsdp.yaml", (
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 4\n"
        "mixed_precision: bf16\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
        "  fsdp_activation_checkpointing: true\n"))
    s = settings(estimate_configs([fsdp], overrides={"model": "llama-2-7b"}))
    assert (s["world"].value, s["sharding"].value, s["checkpointing"].value) == (4, "fsdp", "on")
    ds = write(tmp_path, "ds.yaml", (
        "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 2\n"
        "  gradient_accumulation_steps: 4\n  offload_optimizer_device: cpu\n"))
    s = settings(estimate_configs([ds], overrides={"model": "llama-2-7b"}))
    assert (s["sharding"].value, s["grad_accum"].value, s["offload"].value) == ("zero2", 4, "optimizer")


def test_accelerate_config_follows_its_deepspeed_config_file(tmp_path):
    write(tmp_path, "zero3.json", json.dumps({"zero_optimization": {"stage": 3}}))
    acc = write(tmp_path, "acc.yaml", (
        "distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n"
        "  deepspeed_config_file: zero3.json\n"))
    s = settings(estimate_configs([acc], overrides={"model": "llama-2-7b"}))
    assert s["sharding"].value == "zero3" and "zero3.json" in s["sharding"].source


def test_deepspeed_json_global_batch_gives_the_accumulation(tmp_path):
    path = write(tmp_path, "ds.json", json.dumps({
        "train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
        "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}))
    s = settings(estimate_configs([path], overrides={"model": "llama-2-7b", "world": "2"}))
    assert s["grad_accum"].value == 8 and "ds.json" in s["grad_accum"].source
    assert s["sharding"].value == "zero3" and s["offload"].value == "param"
    explicit = json.dumps({"gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": 4})
    path = write(tmp_path, "ds2.json", explicit)
    assert settings(estimate_configs([path], overrides={"model": "gpt2"}))["grad_accum"].value == 2


# --------------------------------------------------------------------------- launch scripts

RUN_SH = """#!/bin/bash
set -e
CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --standalone --nproc_per_node=4 \\
    train.py --model_name_or_path meta-llama/Llama-2-7b-hf \\
    --per_device_train_batch_size 2 --gradient_accumulation_steps 8 --bf16 \\
    --deepspeed ds.json
"""


def test_torchrun_shell_script_gives_world_arguments_and_the_deepspeed_config(tmp_path):
    write(tmp_path, "ds.json", json.dumps({"zero_optimization": {"stage": 2}}))
    path = write(tmp_path, "run.sh", RUN_SH)
    s = settings(estimate_configs([path]))
    assert s["world"].value == 4 and s["world"].source == "run.sh:3 (torchrun ranks)"
    assert s["batch"].value == 2 and s["grad_accum"].value == 8 and s["model"].value == "llama-2-7b"
    assert s["sharding"].value == "zero2"


@pytest.mark.parametrize(
    "line, world",
    [
        ("python -m torch.distributed.run --nproc_per_node 2 --nnodes 2 train.py", 4),
        ("accelerate launch --num_processes=8 --config_file acc.yaml train.py", 8),
        ("deepspeed --num_gpus 2 train.py --deepspeed ds.json", 2),
        ("deepspeed --include localhost:0,1,2 train.py", 3),
        ("litgpt finetune lora checkpoints/meta-llama/Llama-2-7b-hf --devices 2", 2),
        ("torchrun --nproc_per_node $NGPUS train.py", None),
    ],
)
def test_launchers_and_their_rank_options(tmp_path, line, world):
    path = write(tmp_path, "go.sh", line + "\n")
    result = estimate_configs([path], overrides={"model": "gpt2"})
    got = settings(result).get("world")
    assert (got.value if got is not None and not got.source.startswith("default") else None) == world


def test_launch_lines_that_disagree_give_no_world(tmp_path):
    path = write(tmp_path, "go.sh", "torchrun --nproc_per_node 2 a.py\ntorchrun --nproc_per_node 8 a.py\n")
    s = settings(estimate_configs([path], overrides={"model": "gpt2"}))
    assert s["world"].source == "default"


def test_tune_run_line_in_a_shell_script_names_the_recipe(tmp_path):
    path = write(tmp_path, "go.sh", "tune run --nproc_per_node 2 full_finetune_distributed --config x\n")
    s = settings(estimate_configs([path], overrides={"model": "llama-3.1-8b"}))
    assert s["world"].value == 2 and s["sharding"].value == "fsdp2"


def test_a_shell_script_runs_the_python_script_beside_it(tmp_path, capsys):
    write(tmp_path, "train.py", "import torch\nloss.backward()\n# vram: model=gpt2 batch=2\n")
    path = write(tmp_path, "run.sh", "torchrun --nproc_per_node 2 train.py\n")
    assert main([path, "--gpu", "h100-sxm", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["world"]["value"] == 2 and doc["inputs"]["batch"]["source"] == "comment line 3"


def test_shell_script_without_a_launch_line_is_one_line_and_exit_5(tmp_path, capsys):
    path = write(tmp_path, "go.sh", "echo hello\n")
    assert main([path]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a config format we read" in err


def test_gpus_flag_is_the_world():
    assert main(["--model", "gpt2", "--gpus", "4", "--format", "json"]) == 0


# --------------------------------------------------------------------------- names

@pytest.mark.parametrize(
    "name, key, stored",
    [
        ("unsloth/llama-3-8b-bnb-4bit", "llama-3-8b", "nf4"),
        ("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit", "llama-3.1-8b", "nf4"),
        ("unsloth/tinyllama-bnb-4bit", "tinyllama-1.1b", "nf4"),
        ("TheBloke/Llama-2-7B-GPTQ", "llama-2-7b", "nf4"),
        ("checkpoints/meta-llama/Llama-2-7b-hf", "llama-2-7b", None),
        ("./checkpoints/TinyLlama/TinyLlama-1.1B-Chat-v1.0/", "tinyllama-1.1b", None),
        ("huggyllama/llama-7b", "llama-2-7b", None),
        ("Llama-2-7b-hf", "llama-2-7b", None),
        ("llama3_1_8b", "llama-3.1-8b", None),
        ("stabilityai/stablelm-base-alpha-3b", None, None),
    ],
)
def test_names_people_write(name, key, stored):
    assert db.find_model(name) == key and stored_precision(name) == stored


def test_a_pre_quantised_checkpoint_is_read_as_nf4_weights():
    src = "from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained(" \
          "'unsloth/llama-3-8b-bnb-4bit')\nloss.backward()\n"
    s = settings(estimate_source(src, "t.py"))
    assert s["model"].value == "llama-3-8b" and s["precision"].value == "nf4"
    assert "pre-quantised checkpoint" in s["precision"].source


def test_litgpt_config_from_name():
    src = "from litgpt import Config, GPT\nconfig = Config.from_name('Llama-2-7b-hf', lora_r=4, lora_query=True)\n"
    s = settings(estimate_source(src + "loss.backward()\n", "t.py"))
    assert s["model"].value == "llama-2-7b" and s["lora"].value == 4 and s["lora_targets"].value == ["q_proj"]


def test_an_unknown_name_is_one_line_with_the_closest_models(capsys):
    src = "from transformers import AutoModelForCausalLM\n" \
          "m = AutoModelForCausalLM.from_pretrained('stabilityai/stablelm-3b-4e1t')\n"
    r = estimate_source(src, "t.py")
    assert r.estimate is None and len(r.errors) == 1
    message = r.errors[0].message
    assert "closest built-in: smollm3-3b" in message and "params=" in message and "config.json" in message
    assert closest_models("unsloth/mistral-7b-v0.3-bnb-4bit")[0] == "mistral-7b"


def test_estimate_file_on_every_new_shape_never_raises(tmp_path):
    for text in ("torchrun --nproc_per_node=\n", "tune run\n", "accelerate launch --num_processes 0 x.py\n",
                 "deepspeed --include '@@' x.py\n", "litgpt\n", "torchrun 'unclosed\n"):
        path = write(tmp_path, "x.sh", text)
        r = estimate_configs([path], overrides={"model": "gpt2"})
        assert r.input_error or r.estimate.settings["world"].source == "default"
        assert estimate_file(str(tmp_path / "missing.py"), configs=[path]).input_error


# --------------------------------------------------------------------------- what is predicted

def test_report_gives_allocated_reserved_and_the_cards_view(capsys):
    main(["--model", "llama-2-7b", "--gpu", "a100-80gb", "--lora", "8", "--precision", "bf16", "--batch", "1"])
    out = capsys.readouterr().out
    rows = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines() if "interval" in line}
    assert "torch.cuda.max_memory_allocated()" in rows["allocated peak"]
    assert "torch.cuda.max_memory_reserved()" in rows["reserved peak"]
    assert "nvidia-smi" in rows["card's view"] and "verdict compares this" in rows["card's view"]


def test_json_carries_allocated_reserved_and_card_and_the_verdict_judges_the_card(capsys):
    main(["--model", "llama-2-7b", "--gpu", "rtx4090", "--lora", "8", "--precision", "bf16", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    alloc, reserved, card, peak = doc["allocated"], doc["reserved"], doc["card"], doc["peak"]
    assert alloc["measured_by"] == "torch.cuda.max_memory_allocated()"
    assert {k: reserved[k] for k in peak} == peak  # 'peak' kept: the reserved peak
    assert alloc["point"] <= reserved["point"] < card["point"]
    assert card["point"] - reserved["point"] == doc["target"]["context"]
    usable_card = doc["target"]["capacity"] - doc["target"]["reserve"]
    expected = "fits" if card["upper"] <= usable_card else "oom" if card["lower"] > usable_card else "tight"
    assert doc["verdict"] == expected


def test_without_a_target_there_is_no_cards_view(capsys):
    main(["--model", "gpt2", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert "card" not in doc and doc["allocated"]["point"] <= doc["reserved"]["point"]


def test_litgpt_pretrain_yaml_shards_without_checkpointing(tmp_path):
    path = write(tmp_path, "pretrain.yaml", (
        "model_name: tiny-llama-1.1b\ndevices: 8\ntrain:\n  global_batch_size: 512\n  micro_batch_size: 4\n"
        "  max_seq_length: 2048\n"))
    s = settings(estimate_configs([path]))
    assert s["model"].value == "tinyllama-1.1b" and s["sharding"].value == "fsdp"
    assert s["checkpointing"].value == "off" and s["grad_accum"].value == 16


def test_read_from_lists_the_accumulation_with_its_source(tmp_path, capsys):
    path = write(tmp_path, "lora.yaml", LITGPT_YAML.format(quantize="null", devices=2))
    main([path, "--gpu", "a100-80gb"])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("grad_accum"))
    assert "global batch 16 / (micro-batch 2 x 2 ranks)" in line
