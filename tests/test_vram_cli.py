"""The vram-estimate command line."""

import json
import os

from vram_estimator.cli import main

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vram")


def test_script_report(capsys):
    rc = main([os.path.join(HERE, "oom_full_finetune.py"), "--gpu", "h100-sxm"])
    out = capsys.readouterr().out
    assert rc == 2
    for needle in (
        "verdict: OOM",
        "usable",
        "interval",
        "remedies (each alone)",
        "smallest combination",
        "read from:",
        "comment line 3",
        "█",
    ):
        assert needle in out


def test_model_only_generate(capsys):
    rc = main(
        [
            "--model",
            "llama-3-8b",
            "--gpu",
            "a100-80gb",
            "--mode",
            "generate",
            "--batch",
            "16",
            "--context",
            "8192",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "KV cache" in out and "FITS" in out


def test_json(capsys):
    rc = main([os.path.join(HERE, "qlora_llama2.py"), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verdict"] == "fits"
    assert doc["inputs"]["precision"]["value"] == "nf4"
    assert doc["peak"]["lower"] <= doc["peak"]["point"] <= doc["peak"]["upper"]
    assert doc["target"]["name"] == "rtx4090"


def test_flags_override_comments(capsys):
    main(
        [
            os.path.join(HERE, "oom_full_finetune.py"),
            "--batch",
            "1",
            "--lora",
            "16",
            "--checkpointing",
            "on",
            "--format",
            "json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["batch"] == {"value": 1, "source": "--batch"}
    assert doc["verdict"] == "fits"


def test_lists(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "p4de.24xlarge" in out
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "8,030,261,248" in out
    assert main(["models", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpt2"]["params"] == 124_439_808


def test_bad_input_exit_codes(capsys):
    assert main(["--model", "llama-3-8b", "--gpu", "a100-90gb"]) == 3
    err = capsys.readouterr().err
    assert "unknown GPU" in err and "a100-80gb" in err  # with a suggestion
    assert main(["/nonexistent/x.py"]) == 5
    assert "cannot read /nonexistent/x.py" in capsys.readouterr().err
    assert main([os.path.join(HERE, "malformed.py")]) == 3
    out = capsys.readouterr().out
    assert "TPF102 line 2" in out and "verdict" not in out  # no report built on a wrong value


def test_nothing_fits(capsys):
    rc = main(["--model", "llama-3.1-405b", "--gpu", "t4", "--batch", "1", "--seq", "512"])
    out = capsys.readouterr().out
    assert rc == 2 and "nothing here fits this card" in out
