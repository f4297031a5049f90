"""The vram-estimate command line."""

import json
import os

from vram_estimator.cli import main

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vram")


def test_script_report(capsys):
    rc = main([os.path.join(HERE, "oom_full_finetune.py"), "--gpu", "h100-sxm"])
    out = capsys.readouterr().out
    assert rc == 6
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
    assert main(["--model", "llama-3-8b", "--gpu", "a100-90gb"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU" in err and "a100-80gb" in err  # with a suggestion
    assert main(["/nonexistent/x.py"]) == 5
    assert "cannot read /nonexistent/x.py" in capsys.readouterr().err
    assert main([os.path.join(HERE, "malformed.py")]) == 2
    out = capsys.readouterr().out
    assert "TPF102 line 2" in out and "verdict" not in out  # no report built on a wrong value


def test_nothing_fits(capsys):
    rc = main(["--model", "llama-3.1-405b", "--gpu", "t4", "--batch", "1", "--seq", "512"])
    out = capsys.readouterr().out
    assert rc == 6 and "nothing here fits this card" in out


# --------------------------------------------------------------------------- bad input (issues 10 and 11)

import pytest  # noqa: E402

BIG = "9" * 400


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--batch", "-3"], "--batch"),
        (["--batch", "0"], "--batch"),
        (["--batch", BIG], "too large"),
        (["--seq", "2k5"], "--seq"),
        (["--params", BIG], "--params"),
        (["--precision", "fp12"], "fp12"),
        (["--optimizer", "adamw9"], "adamw9"),
        (["--gpu", BIG], "--gpu"),
        (["--gpu", "2x" * 300 + "a100"], "--gpu"),
        (["--gpu", "0xa100-80gb"], "count"),
        (["--gpu", "a100-90gb"], "a100-80gb"),  # with a suggestion
        (["--model", "gpt5-ultra"], "unknown model"),
        (["--world", "abc"], "--world"),
        (["--no-such-flag"], "unrecognized"),
    ],
)
def test_bad_flags_are_one_error_line_exit_2_and_no_report(capsys, flags, needle):
    rc = main(["--model", "llama-3-8b", *flags] if "--model" not in flags else flags)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and needle in errors[0] and "Traceback" not in err


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_bom_file_is_read_not_dropped(tmp_path, capsys):
    src = "\ufeff# vram: gpu=t4\nfrom transformers import AutoModelForCausalLM\n" \
          "m = AutoModelForCausalLM.from_pretrained('gpt2')\nbatch_size = 512\nloss.backward()\n"
    p = write(tmp_path, "bom.py", src.encode("utf-8"))
    assert main([p, "--format", "json"]) == 6
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["batch"]["value"] == 512 and doc["verdict"] == "oom"


def test_coding_cookie_file_is_read(tmp_path, capsys):
    src = "# -*- coding: latin-1 -*-\n# vram: gpu=h100 model=gpt2 batch=2 seq=128\n# caf\u00e9\nloss.backward()\n"
    p = write(tmp_path, "latin.py", src.encode("latin-1"))
    assert main([p]) == 0 and "FITS" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name, data, needle",
    [
        ("notutf8.py", b"# vram: gpu=t4 model=gpt2\n# caf\xe9\n", "not valid utf-8"),
        ("badcookie.py", b"# -*- coding: klingon -*-\nx = 1\n", "cannot decode"),
        ("syntax.py", b"# vram: gpu=t4 model=gpt2\ndef f(:\n", "syntax.py:2:7: syntax error"),
        ("nul.py", b"x = 1\x00\n", "nul.py"),
    ],
)
def test_unreadable_scripts_are_one_line_exit_5(tmp_path, capsys, name, data, needle):
    p = write(tmp_path, name, data)
    assert main([p]) == 5
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and needle.lower() in err.lower()
    assert "Traceback" not in err


DEEP = [
    ("deep.py", b"# vram: gpu=t4 model=gpt2\nx = " + b"+".join([b"1"] * 10000) + b"\n"),
    ("chain.py", b"x = a" + b".b()" * 5000 + b"\n"),
    ("elifs.py", b"if a:\n    x = 1\n" + b"".join(b"elif a == %d:\n    x = 1\n" % i for i in range(5000))),
]


@pytest.mark.parametrize("name, data", DEEP, ids=[n for n, _ in DEEP])
def test_deeply_nested_scripts_give_one_line_or_a_report(tmp_path, capsys, name, data):
    """Whether Python's own parser takes these depends on its version and on the stack it
    is given (3.9 refuses a 5,000-link chain in the test's thread, while the tool parses it
    with a deeper stack; 3.13 parses 5,000 `elif`s): either the parse is refused, and that is
    one line and exit 5, or the file is read (iteratively) like any other. Never a traceback."""
    p = write(tmp_path, name, data)
    code = main([p])
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    if code == 5:
        assert len(err.strip().splitlines()) == 1 and "nested too deeply" in err.lower()
    else:
        assert code in (0, 1, 2, 4)


def test_a_folder_is_unreadable_input(tmp_path, capsys):
    assert main([str(tmp_path)]) == 5
    assert "it is a folder" in capsys.readouterr().err


def test_hostile_constant_folding_files_finish(tmp_path, capsys):
    # each of these hung or exhausted memory before the folding bounds; now they are plain files
    for body in ("x = 10 ** 64\n" + "x = x ** 64\n" * 4, "s = 'ab'\n" + "s = s + s\n" * 31,
                 "s = 'a' * 10 ** 9\n", "f = " + "lambda: " * 1000 + "1\n"):
        p = write(tmp_path, "h.py", ("# vram: gpu=a100-80gb model=gpt2\n" + body).encode())
        assert main([p]) == 0
    capsys.readouterr()


def test_huge_comment_number_is_tpf102(tmp_path, capsys):
    p = write(tmp_path, "c.py", ("# vram: gpu=t4 model=gpt2 batch=" + BIG + "\n").encode())
    assert main([p]) == 2
    out = capsys.readouterr().out
    assert "too large" in out and "OverflowError" not in out and "verdict" not in out


def test_exit_codes_are_documented():
    from vram_estimator import cli

    for words in ("0 fits", "1 tight", "2 bad usage", "4 no model", "5 unreadable", "6 oom"):
        assert words in cli._parser().epilog


def test_a_reader_that_stops_early_ends_the_listing_quietly():
    """`vram-estimate models | head -1`: the closed pipe is not a traceback."""
    import subprocess
    import sys

    listing = subprocess.Popen([sys.executable, "-c", "from vram_estimator.cli import main; "
                                "import sys; sys.exit(main(['models']))"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listing.stdout.close()   # before the child's interpreter has even started writing
    err = listing.stderr.read().decode()
    listing.wait(timeout=60)
    assert "Traceback" not in err and listing.returncode == 0
