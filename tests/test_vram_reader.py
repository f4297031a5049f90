"""Reading scripts statically: the fixture scripts in fixtures/vram/ and the peer's traps."""

import os

import pytest

from vram_estimator.api import estimate_source
from vram_estimator.script_reader import read_source

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vram")


def load(name):
    path = os.path.join(HERE, name)
    with open(path, encoding="utf-8") as handle:
        return handle.read(), path


def values(name):
    src, path = load(name)
    return {k: v.value for k, v in read_source(src, path).values.items()}, read_source(src, path)


def test_hf_trainer_without_backward_is_training():
    v, facts = values("hf_trainer_llama.py")
    assert v["mode"] == "train"
    assert v["model"] == "llama-3-8b"
    assert v["batch"] == 2 and v["checkpointing"] == "on" and v["optimizer"] == "adamw"
    assert v["sharding"] == "zero3" and v["seq"] == 2048 and v["attention"] == "sdpa"
    assert "Trainer" in facts.values["mode"].source


def test_lightning_fit_is_training_and_model_checkpoint_is_not_checkpointing():
    v, _ = values("lightning_bert.py")
    assert v["mode"] == "train"
    assert "checkpointing" not in v
    assert v["precision"] == "bf16-mixed" and v["world"] == 4 and v["batch"] == 64
    assert v["model"] == "bert-base-uncased" and v["optimizer"] == "adamw"


def test_qlora_script():
    v, facts = values("qlora_llama2.py")
    assert v["precision"] == "nf4" and v["lora"] == 16 and v["checkpointing"] == "on"
    assert v["lora_targets"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert v["optimizer"] == "paged-adamw-8bit" and v["batch"] == 4 and v["mode"] == "train"
    src, path = load("qlora_llama2.py")
    r = estimate_source(src, path)
    assert r.verdict == "fits"  # the peer called this a certain OOM


def test_deepspeed_config_dict():
    v, facts = values("deepspeed_dict.py")
    assert v["sharding"] == "zero3" and v["offload"] == "optimizer" and v["batch"] == 4
    assert v["precision"] == "bf16" and v["seq"] == 4096 and v["mode"] == "train"
    assert facts.values["batch"].source.endswith("(DeepSpeed config)")


def test_deepspeed_json_file_named_by_script():
    src, path = load("deepspeed_file.py")
    facts = estimate_source(src, path).facts
    v = {k: x.value for k, x in facts.values.items()}
    assert v["sharding"] == "zero2"
    assert v["batch"] == 1  # TrainingArguments keyword beats the JSON file's micro-batch
    assert any("ds_zero2.json" in n for n in facts.notes)


def test_torch_dtype_and_generate():
    v, _ = values("generate_llama.py")
    assert v["precision"] == "bf16" and v["mode"] == "generate"
    assert v["new_tokens"] == 512 and v["seq"] == 1024
    src, path = load("generate_llama.py")
    r = estimate_source(src, path)
    assert r.estimate.settings["context"].value == 1536
    assert r.estimate.term("KV cache").point == 2 * 32 * 8 * 128 * 1536 * 8 * 2


def test_argparse_defaults():
    v, facts = values("argparse_resnet.py")
    assert v["batch"] == 256 and v["image"] == 224
    assert "argparse default" in facts.values["batch"].source
    assert v["model"] == "resnet50" and v["optimizer"] == "sgd-momentum" and v["precision"] == "fp16-mixed"
    assert v["mode"] == "train"


def test_comments_override_script():
    src = (
        "# vram: batch=1 model=gpt2\nfrom torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, batch_size=64)\nloss.backward()\n"
    )
    r = estimate_source(src, "t.py")
    assert r.estimate.settings["batch"].value == 1
    assert r.estimate.settings["batch"].source == "comment line 1"


def test_constants_and_arithmetic():
    src = (
        "BASE = 512\nSEQ_LEN = BASE * 4\nBATCH_SIZE = 2 ** 3\n"
        "from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('gpt2')\n"
        "loss.backward()\n"
    )
    v = {k: x.value for k, x in read_source(src, "c.py").values.items()}
    assert v["seq"] == 2048 and v["batch"] == 8 and v["model"] == "gpt2"


def test_dataclass_field_defaults():
    src = (
        "from dataclasses import dataclass, field\n@dataclass\nclass Args:\n"
        "    model_name_or_path: str = field(default='mistralai/Mistral-7B-v0.1')\n"
        "    per_device_train_batch_size: int = 3\n"
        "    max_seq_length: int = field(default=1024)\n"
    )
    v = {k: x.value for k, x in read_source(src, "d.py").values.items()}
    assert v["model"] == "mistral-7b" and v["batch"] == 3 and v["seq"] == 1024


def test_real_torch_checkpoint_counts_but_other_checkpoint_names_do_not():
    src = "from torch.utils.checkpoint import checkpoint\ny = checkpoint(block, x)\n"
    assert read_source(src, "a.py").values["checkpointing"].value == "on"
    src = (
        "from lightning.pytorch.callbacks import ModelCheckpoint\ncb = ModelCheckpoint(dirpath='x')\n"
        "save_checkpoint(model)\n"
    )
    assert "checkpointing" not in read_source(src, "b.py").values


def test_no_grad_script_is_inference():
    src = (
        "import torch\nfrom transformers import AutoModel\nm = AutoModel.from_pretrained('bert-base-uncased')\n"
        "with torch.no_grad():\n    m(x)\n"
    )
    assert read_source(src, "i.py").values["mode"].value == "inference"


@pytest.mark.parametrize(
    "src", ["def (:\n", "x = (", "\x00", "import torch\nx = 1 / 0\n", "a = 10 ** 10 ** 10\n"]
)
def test_garbage_never_raises(src):
    facts = read_source(src, "g.py")
    assert isinstance(facts.values, dict)
