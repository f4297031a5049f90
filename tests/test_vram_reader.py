"""Reading scripts statically: the fixture scripts in fixtures/vram/ and the peer's traps."""

import os

import pytest

from vram_estimator.api import estimate_source
from vram_estimator.reading.script_reader import read_source

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
    decode = {t.name: t for t in r.estimate.phases["decode"]}  # the cache at the end of decoding
    assert decode["KV cache"].point == 2 * 32 * 8 * 128 * 1536 * 8 * 2


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


# --------------------------------------------------------------------------- hostile input (issue 11)
# Bounds are asserted through the folder's limits and step budget, never by timing.

import ast  # noqa: E402

from vram_estimator.reading import folding  # noqa: E402
from vram_estimator.reading.folding import Folder, Unknown  # noqa: E402
from vram_estimator.reading.script_reader import read_script  # noqa: E402


def _fold_module(src):
    """Fold every module assignment in order (as the reader does) and return the bindings."""
    env = {}

    def lookup(node, _ev):
        return (env[node.id], "") if isinstance(node, ast.Name) and node.id in env else None

    folder = Folder(lookup)
    for stmt in ast.parse(src).body:
        value, _ = folder.try_value(stmt.value)
        if value is None:
            env.pop(stmt.targets[0].id, None)
        else:
            env[stmt.targets[0].id] = value
    return env, folder


def test_power_tower_is_refused_before_it_is_built():
    env, folder = _fold_module("x = 10 ** 64\n" + "x = x ** 64\n" * 4)
    assert "x" not in env  # 10**64 is already beyond MAX_INT, and nothing bigger is computed
    assert folder.steps_left > folding.STEPS_PER_FILE - 100
    env, _ = _fold_module("x = 2 ** 62\ny = x * 4\nz = 3 ** 39\nw = 3 ** 40\n")
    assert env == {"x": 2**62, "z": 3**39}


def test_string_doubling_stops_at_the_length_bound():
    env, _ = _fold_module("s = 'ab'\n" + "s = s + s\n" * 31)
    assert "s" not in env
    env, _ = _fold_module("s = 'ab'\n" + "s = s + s\n" * 10)
    assert len(env["s"]) == 2048 <= folding.MAX_STR
    env, _ = _fold_module("s = 'a' * 10 ** 9\nl = [0] * 10 ** 9\nt = 'ab' * 3\n")
    assert env == {"t": "ababab"} or "s" not in env and "l" not in env


def _deep_binop(n):
    node = ast.Constant(1)
    for _ in range(n):
        node = ast.BinOp(left=node, op=ast.Add(), right=ast.Constant(1))
    return node


def test_deep_expressions_are_unknown_not_a_recursion_error():
    folder = Folder(lambda node, ev: None)
    with pytest.raises(Unknown):
        folder.value(_deep_binop(10_000))  # deeper than Python's parser would even accept
    assert folder.value(_deep_binop(30))[0] == 31


def test_step_budget_is_shared_by_a_whole_file():
    folder = Folder(lambda node, ev: None, steps=100)
    wide = ast.List(elts=[ast.Constant(i) for i in range(60)], ctx=ast.Load())
    assert folder.try_value(wide)[0] == list(range(60))
    assert folder.try_value(wide) == (None, "")  # the second one runs out of steps


def _module(stmts):
    tree = ast.Module(body=stmts, type_ignores=[])
    for node in ast.walk(tree):  # iterative; ast.fix_missing_locations recurses
        if "lineno" in node._attributes:
            node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, 0
    return tree


def test_reader_walks_deep_trees_iteratively():
    # a 20,000-long attribute chain, 5,000 nested elifs and a 10,000-term sum, built directly
    chain = ast.Name("a", ast.Load())
    for _ in range(20_000):
        chain = ast.Attribute(value=chain, attr="b", ctx=ast.Load())
    call = ast.Call(func=chain, args=[], keywords=[])
    nested = ast.If(test=ast.Name("c", ast.Load()), body=[ast.Pass()], orelse=[])
    inner = nested
    for i in range(5_000):
        branch = ast.If(test=ast.Name("c", ast.Load()), body=[
            ast.Assign(targets=[ast.Name("batch_size", ast.Store())], value=ast.Constant(i + 1))], orelse=[])
        inner.orelse = [branch]
        inner = branch
    big_sum = ast.Assign(targets=[ast.Name("seq_len", ast.Store())], value=_deep_binop(10_000))
    tree = _module([ast.Expr(call), nested, big_sum])
    facts = read_script(tree, "deep.py")
    assert facts.notes == []  # read to the end, no "could not be read" fallback
    assert facts.values["batch"].value == 1  # the first branch's constant; the rest do not outrank it
    assert "seq" not in facts.values


def test_nested_lambdas_and_deep_parentheses():
    src = "f = " + "lambda: " * 2000 + "1\nx = " + "(" * 150 + "1" + ")" * 150 + "\nbatch_size = x\n"
    facts = read_source(src, "l.py")
    assert facts.values["batch"].value == 1


def test_the_reader_never_writes_to_the_tree():
    src, path = load("lightning_bert.py")
    tree = ast.parse(src)
    before = [sorted(vars(n)) for n in ast.walk(tree)]
    read_script(tree, path)
    assert [sorted(vars(n)) for n in ast.walk(tree)] == before


def test_huge_literals_set_nothing():
    facts = read_source("batch_size = " + "9" * 400 + "\nmax_seq_length = 10 ** 30\nlora_r = -4\n", "h.py")
    assert facts.values == {}


def test_bom_and_coding_cookie_are_read_like_python():
    from vram_estimator.reading.inputs import decode_python

    text = decode_python("\ufeffbatch_size = 512\n".encode("utf-8"), "b.py")
    assert read_source(text, "b.py").values["batch"].value == 512
    latin = decode_python("# -*- coding: latin-1 -*-\n# café\nbatch_size = 3\n".encode("latin-1"), "l.py")
    assert "café" in latin and read_source(latin, "l.py").values["batch"].value == 3


def test_syntax_error_is_reported_as_such():
    facts = read_source("x = 1\ndef f(:\n", "s.py")
    assert facts.errors and "s.py:2" in facts.errors[0] and "syntax error" in facts.errors[0]
