"""Inputs where real scripts keep them: CLI-library signature defaults, module globals with
configurator overrides, HfArgumentParser dataclasses + their JSON, litgpt, YAML/JSON config
files, local config.json models; and the verdict over a defaulted input's range."""

import json
import os

import pytest

from vram_estimator.knowledge import db
from vram_estimator.api import estimate_configs, estimate_file, estimate_source
from vram_estimator.cli import main
from vram_estimator.reading.configs import read_config

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vram", "inputs")


def path(name):
    return os.path.join(HERE, name)


def settings(result):
    return {k: v.value for k, v in result.estimate.settings.items()}


# --------------------------------------------------------------------------- entry points


def test_alpaca_style_fire_defaults_fit_a_24gb_card():
    r = estimate_file(path("alpaca_style_finetune.py"), overrides={"model": "llama-2-7b"})
    s = settings(r)
    assert s["batch"] == 4 and s["seq"] == 256  # micro_batch_size, cutoff_len (not batch_size=128)
    assert s["precision"] == "int8" and s["lora"] == 8 and s["lora_targets"] == ["q_proj", "v_proj"]
    assert s["checkpointing"] == "on" and s["mode"] == "train"
    assert "default of train(micro_batch_size), run by fire.Fire" in r.estimate.settings["batch"].source
    assert r.verdict == "fits" and r.estimate.target["name"] == "rtx4090"


def test_alpaca_style_without_a_model_says_where_the_model_comes_from(capsys):
    assert main([path("alpaca_style_finetune.py")]) == 4
    out = capsys.readouterr().out
    assert "from_pretrained(base_model)" in out and "only known at run time" in out


def test_defaults_of_a_helper_that_no_cli_runs_are_not_read():
    src = (
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "def evaluate(model, batch_size=1, max_length=64):\n    pass\n"
        "def main():\n    loader = DataLoader(ds, batch_size=32)\n    loss.backward()\n"
        "if __name__ == '__main__':\n    main()\n"
        "# vram: model=gpt2\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["batch"] == 32 and s["seq"] != 64


@pytest.mark.parametrize(
    "runner",
    [
        "import fire\n{body}\nfire.Fire(main)\n",
        "import typer\n{body}\ntyper.run(main)\n",
        "from jsonargparse import CLI\n{body}\nCLI(main)\n",
        "{body}\nif __name__ == '__main__':\n    main()\n",
    ],
)
def test_each_cli_library_runs_the_signature_defaults(runner):
    body = "def main(model_name: str = 'gpt2', per_device_train_batch_size: int = 6, max_seq_length=512):\n    loss.backward()\n"
    s = settings(estimate_source(runner.format(body=body), "t.py"))
    assert (s["model"], s["batch"], s["seq"]) == ("gpt2", 6, 512)


def test_typer_option_and_click_option_defaults():
    src = (
        "import typer\napp = typer.Typer()\n@app.command()\n"
        "def train(batch_size: int = typer.Option(3, help='b'), model: str = 'gpt2'):\n    loss.backward()\n"
    )
    assert settings(estimate_source(src, "t.py"))["batch"] == 3
    src = (
        "import click\n@click.command()\n@click.option('--batch-size', default=5, type=int)\n"
        "@click.option('--model-name', default='gpt2')\ndef train(batch_size, model_name):\n    loss.backward()\n"
    )
    s = settings(estimate_source(src, "t.py"))
    assert s["batch"] == 5 and s["model"] == "gpt2"


def test_litgpt_style_lora_is_seen():
    r = estimate_file(path("litgpt_style_lora.py"), overrides={"gpu": "rtx4090"})
    s = settings(r)
    assert s["model"] == "llama-2-7b" and s["lora"] == 8 and s["lora_targets"] == ["q_proj", "v_proj"]
    assert s["batch"] == 1 and s["seq"] == 512 and s["precision"] == "bf16"
    assert r.estimate.params_trainable < 10_000_000 and r.verdict == "fits"  # not a 275 GiB full fine-tune


# --------------------------------------------------------------------------- nanoGPT


def _gpt2_config(n_layer, n_head, n_embd, positions):
    return {"model_type": "gpt2", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
            "n_positions": positions, "vocab_size": 50304, "tie_word_embeddings": True}


def test_nanogpt_globals_are_an_exact_model():
    r = estimate_file(path("nanogpt_style_train.py"), overrides={"gpu": "rtx4090"})
    s = settings(r)
    assert s["batch"] == 12 and s["seq"] == 1024 and s["precision"] == "bf16-mixed" and s["mode"] == "train"
    expected = db.model_from_hf_config(_gpt2_config(12, 12, 768, 1024))
    assert r.estimate.params_total == expected.params
    assert "n_layer/n_head/n_embd" in r.estimate.settings["model"].source


def test_configurator_override_from_the_config_file_given():
    r = estimate_file(
        path("nanogpt_style_train.py"), overrides={"gpu": "rtx4090"}, configs=[path("config/small_gpt.py")]
    )
    s = settings(r)
    assert s["batch"] == 32 and s["seq"] == 256
    assert r.estimate.settings["batch"].source == "small_gpt.py:2"
    assert r.estimate.params_total == db.model_from_hf_config(_gpt2_config(6, 6, 384, 256)).params
    assert r.estimate.settings["model"].source.startswith("small_gpt.py:4")


def test_globals_without_a_model_shape_are_no_model():
    src = "n_layer = 12\nbatch_size = 4\nloss.backward()\n"  # no n_head / n_embd: not a model
    assert estimate_source(src, "t.py").estimate is None


# --------------------------------------------------------------------------- HfArgumentParser


def test_hf_argument_parser_defaults_and_its_json():
    alone = estimate_file(path("hf_argparser_sft.py"))
    s = settings(alone)
    assert s["model"] == "mistral-7b" and s["seq"] == 1024 and s["lora"] == 16 and s["mode"] == "train"
    assert s["batch"] == 8 and alone.estimate.settings["batch"].guessed  # TrainingArguments' default
    assert any("HfArgumentParser" in n for n in alone.facts.notes)
    both = estimate_file(path("hf_argparser_sft.py"), configs=[path("sft_args.json")])
    s = settings(both)
    assert s["batch"] == 2 and s["checkpointing"] == "on" and s["precision"] == "bf16-mixed"
    assert s["optimizer"] == "paged-adamw-8bit"
    assert both.estimate.settings["batch"].source == "sft_args.json:3 (per_device_train_batch_size)"
    assert not any("HfArgumentParser" in n for n in both.facts.notes)


# --------------------------------------------------------------------------- config files


@pytest.mark.parametrize(
    "name, fmt, expected",
    [
        ("torchtune_lora.yaml", "torchtune recipe",
         dict(model="llama-3.1-8b", lora=8, batch=2, seq=2048, precision="bf16", checkpointing="on",
              optimizer="adamw",
              lora_targets=["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])),
        ("litgpt_qlora.yaml", "litgpt config",
         dict(model="llama-2-7b", precision="nf4", lora=32, batch=2, seq=512, world=1,
              lora_targets=["q_proj", "v_proj"])),
        ("axolotl_qlora.yml", "axolotl config",
         dict(model="llama-2-7b", precision="nf4", lora=32, batch=2, seq=4096, checkpointing="on",
              attention="flash", lora_targets=["all-linear"], optimizer="paged-adamw")),
        ("accelerate_fsdp.yaml", "accelerate config", dict(precision="bf16-mixed", world=8, sharding="fsdp")),
        ("ds_zero3_offload.json", "DeepSpeed config",
         dict(batch=4, precision="bf16", sharding="zero3", offload="optimizer")),
        ("sft_args.json", "Hugging Face arguments",
         dict(batch=2, checkpointing="on", precision="bf16-mixed", optimizer="paged-adamw-8bit")),
    ],
)
def test_config_formats(name, fmt, expected):
    read = read_config(path(name))
    assert read.format == fmt and read.error is None
    r = estimate_configs([path(name)], overrides={"model": "llama-2-7b"} if "model" not in expected else {})
    got = {k: v.value for k, v in r.facts.values.items()}
    for key, value in expected.items():
        assert got[key] == value, key
    for v in r.facts.values.values():  # every input names its file and line
        assert v.source.startswith(name)


def test_torchtune_source_names_the_line():
    r = estimate_configs([path("torchtune_lora.yaml")])
    assert r.facts.values["batch"].source == "torchtune_lora.yaml:14 (batch_size)"
    assert r.facts.values["seq"].source == "torchtune_lora.yaml:12 (tokenizer.max_seq_len)"


def test_config_named_by_the_script_is_read_and_an_unnamed_one_is_not(tmp_path):
    r = estimate_file(path("yaml_named_by_script.py"), overrides={"gpu": "t4"})
    s = settings(r)
    assert s["model"] == "qwen2.5-0.5b" and s["batch"] == 16 and s["seq"] == 1024 and s["lora"] == 16
    assert r.estimate.settings["batch"].source == "run_config.yaml:2 (micro_batch_size)"
    # the same YAML beside a script that never names it: not read
    (tmp_path / "run_config.yaml").write_text(open(path("run_config.yaml")).read())
    script = tmp_path / "train.py"
    script.write_text("# vram: model=gpt2\nloss.backward()\n")
    s = settings(estimate_file(str(script)))
    assert s["batch"] == 8 and s["model"] == "gpt2"


def test_explicit_config_beats_the_script_and_comments_beat_it():
    src = "# vram: seq=128\nfrom torch.utils.data import DataLoader\nDataLoader(ds, batch_size=64)\nloss.backward()\n"
    r = estimate_source(src, "t.py", configs=[path("axolotl_qlora.yml")])
    s = settings(r)
    assert s["batch"] == 2 and s["seq"] == 128 and s["model"] == "llama-2-7b"


def test_cli_takes_a_config_file_alone(capsys):
    rc = main([path("torchtune_lora.yaml"), "--gpu", "a100-80gb", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verdict"] == "fits"
    assert doc["inputs"]["batch"] == {"value": 2, "source": "torchtune_lora.yaml:14 (batch_size)"}


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("laughs.yaml", "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                   f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
                   for i in range(9)), "too large or nested too deeply"),
        ("deep.json", "[" * 100000 + "]" * 100000, "nested too deeply"),
        ("bad.yaml", "a: [1, 2\nb: }\n", "not valid YAML"),
        ("bad.json", "{'a': 1}", "not valid JSON"),
        ("latin.json", None, "not UTF-8"),
        ("unknown.yaml", "foo: 1\nbar: [1, 2]\n", "not a config format we read"),
    ],
)
def test_bad_config_files_are_one_line_and_exit_5(tmp_path, capsys, name, text, needle):
    p = tmp_path / name
    if text is None:
        p.write_bytes(b'{"base_model": "caf\xe9"}')
    else:
        p.write_text(text)
    assert main([str(p), "--model", "gpt2"]) == 5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0]


def test_big_config_file_is_refused_without_reading_it(tmp_path, capsys):
    p = tmp_path / "big.yaml"
    p.write_text("a: 1\n" + "# pad\n" * 200_000)
    assert main([str(p)]) == 5
    assert "at most" in capsys.readouterr().err


def test_config_values_out_of_bounds_are_not_used(tmp_path):
    p = tmp_path / "ax.yml"
    p.write_text("base_model: gpt2\nmicro_batch_size: " + "9" * 400 + "\nsequence_len: -5\nadapter: lora\n")
    r = estimate_configs([str(p)])
    assert "batch" not in r.facts.values and "seq" not in r.facts.values


# --------------------------------------------------------------------------- local config.json


WIDGET = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
          "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
          "max_position_embeddings": 2048, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
SCRIPT = ("# vram: gpu=t4 batch=2 seq=512\nfrom transformers import AutoModelForCausalLM\n"
          "m = AutoModelForCausalLM.from_pretrained('{ident}')\nloss.backward()\n")


def _cache(root, ident, config):
    repo = root / "hub" / ("models--" + ident.replace("/", "--"))
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123" / "config.json").write_text(json.dumps(config))


def test_any_hub_model_in_the_local_cache_is_counted_exactly(tmp_path, monkeypatch):
    _cache(tmp_path, "acme/widget-lm", WIDGET)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    r = estimate_source(SCRIPT.format(ident="acme/widget-lm"), str(tmp_path / "t.py"))
    assert r.errors == [] and r.estimate.params_total == db.model_from_hf_config(WIDGET).params
    assert "config.json at" in r.estimate.settings["model"].source


def test_a_model_folder_next_to_the_script(tmp_path):
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(WIDGET))
    r = estimate_source(SCRIPT.format(ident="./my-model"), str(tmp_path / "t.py"))
    assert r.estimate.params_total == db.model_from_hf_config(WIDGET).params
    # and as a flag
    r = estimate_source("loss.backward()\n", str(tmp_path / "t.py"), overrides={"model": str(tmp_path / "my-model")})
    assert r.estimate.params_total == db.model_from_hf_config(WIDGET).params


def test_unknown_model_says_where_it_looked_and_how_to_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    script = tmp_path / "t.py"
    script.write_text(SCRIPT.format(ident="acme/not-here-9"))
    assert main([str(script)]) == 2
    out = capsys.readouterr().out
    assert "unknown model 'acme/not-here-9'" in out and "models--acme--not-here-9" in out
    assert "huggingface-cli download acme/not-here-9 config.json" in out and "params=7B" in out
    assert "verdict" not in out


def test_config_json_of_a_family_we_do_not_model(tmp_path):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "no-such-arch", "hidden_size": 8}))
    r = estimate_source(SCRIPT.format(ident="./odd"), str(tmp_path / "t.py"))
    assert r.estimate is None and "not a configuration we can count" in r.errors[0].message


# --------------------------------------------------------------------------- verdict over a range


def test_a_defaulted_batch_that_decides_is_shown_over_its_range(capsys):
    src = "# vram: gpu=a10g model=llama-3.2-1b seq=1024 precision=bf16-mixed\nloss.backward()\n"
    r = estimate_source(src, "t.py")
    (sweep,) = r.deciding
    assert sweep.key == "batch" and [v for v, _ in sweep.points] == [1, 2, 4, 8, 16, 32]
    verdicts = [e.verdict for _, e in sweep.points]
    assert verdicts[-1] == "oom" and verdicts[0] != "oom"
    from vram_estimator.report import flake8_message, text_report

    msg = flake8_message(r)
    assert msg.startswith("TPF101 [warning]") and "depends on batch, which was not read" in msg
    assert "at batch 8" in msg  # the interval at the default, not one widened for the guess
    assert "batch was not read" in text_report(r, "t.py") and "verdict" in text_report(r, "t.py")


def test_a_stated_batch_is_not_swept():
    src = "# vram: gpu=a10g model=llama-3.2-1b batch=2 seq=1024 precision=bf16-mixed\nloss.backward()\n"
    assert [s.key for s in estimate_source(src, "t.py").sweeps] == []


def test_oom_at_every_plausible_batch_stays_tpf100():
    src = "# vram: gpu=t4 model=llama-3-70b seq=2048\nloss.backward()\n"
    r = estimate_source(src, "t.py")
    assert r.deciding == [] and r.sweeps and r.verdict == "oom"
    from vram_estimator.report import flake8_message

    assert flake8_message(r).startswith("TPF100 [error]")


def test_accumulation_steps_reach_the_model_side_as_grad_accum():
    r = estimate_file(path("nanogpt_style_train.py"))
    assert r.estimate.settings["grad_accum"].value == 40  # 5 * 8, folded
    r = estimate_file(path("alpaca_style_finetune.py"), overrides={"model": "llama-2-7b"})
    assert r.estimate.settings["grad_accum"].value == 32  # batch_size // micro_batch_size
