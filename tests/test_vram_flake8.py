"""The flake8 plugin: TPF100/101/102 placement, message shape, option, and never raising."""

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from vram_estimator.flake8_plugin import VramChecker


def run(src, gpu=None, filename="t.py"):
    VramChecker.vram_gpu = gpu
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):   # a NUL byte is a ValueError before Python 3.12
        tree = None
    try:
        return list(VramChecker(tree, src.splitlines(True), filename).run())
    finally:
        VramChecker.vram_gpu = None


def codes(found):
    return [m.split()[0] for _, _, m, _ in found]


def test_attributes():
    assert VramChecker.name == "flake8-torch-preflight.vram"
    assert VramChecker.version


def test_oom_reported_on_comment_line_with_evidence_and_fix():
    src = "import torch\n\n# vram: gpu=a100-80gb model=llama-3-8b batch=4 seq=2048 precision=bf16-mixed\nloss.backward()\n"
    found = run(src)
    assert codes(found) == ["TPF100"]
    line, col, msg, typ = found[0]
    assert line == 3 and col == 0 and typ is VramChecker
    assert msg.startswith("TPF100 [error] projected peak ")
    assert "exceeds a100-80gb usable" in msg and "even at the optimistic end" in msg
    assert "from model=llama-3-8b comment line 3" in msg
    assert "; fix: " in msg and "\n" not in msg


def test_fits_is_silent():
    src = "# vram: gpu=h100 model=gpt2 batch=8 seq=1024 precision=bf16-mixed\nloss.backward()\n"
    assert run(src) == []


def test_no_target_no_output():
    src = "# vram: model=llama-3-8b batch=64\nloss.backward()\n"
    assert run(src) == []


def test_option_supplies_target_and_comment_overrides_it():
    src = "# vram: model=llama-3-8b batch=4 seq=2048\nloss.backward()\n"
    assert codes(run(src, gpu="t4")) == ["TPF100"]
    src2 = "# vram: model=gpt2 batch=1 seq=128 gpu=h200\nloss.backward()\n"
    assert run(src2, gpu="t4") == []


def test_option_without_comment_reads_script_and_reports_line_1():
    src = textwrap.dedent("""\
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")
        args = TrainingArguments(output_dir="o", per_device_train_batch_size=8)
        Trainer(model=model, args=args).train()
        """)
    found = run(src, gpu="a10g")
    assert codes(found) == ["TPF100"] and found[0][0] == 1


def test_tight_is_tpf101():
    src = "# vram: gpu=rtx4090 model=llama-2-7b mode=inference precision=fp16 batch=1 seq=4096 attention=eager\n"
    found = run(src)
    assert codes(found) in (["TPF101"], [])
    # find a capacity inside the interval to force the straddle
    from vram_estimator.api import estimate_config

    e = estimate_config(
        model="llama-2-7b", mode="inference", precision="fp16", batch=1, seq=4096, attention="eager"
    ).estimate
    cap = (e.point + e.upper) / 2 / 0.98 / 1024**3 + 0.5
    found = run(
        f"# vram: gpu={cap:.2f}GiB model=llama-2-7b mode=inference precision=fp16 batch=1 seq=4096 "
        "attention=eager\n"
    )
    assert codes(found) == ["TPF101"] and found[0][2].startswith("TPF101 [warning] ")


def test_tpf102_for_bad_comments_names_text_and_accepted_values():
    src = "# vram: gpu=a100-80gb model=llama-3-8b\n# vram: batch=four precison=bf16\n# vram: gpu=a100-90gb\n"
    found = run(src)
    msgs = [m for _, _, m, _ in found if m.startswith("TPF102")]
    assert len(msgs) == 3
    assert any("batch=four" in m for m in msgs)
    assert any("precison" in m and "accepted keys" in m for m in msgs)
    assert any("a100-90gb" in m and "a100-80gb" in m for m in msgs)
    assert all(line in (2, 3) for line, _, m, _ in found if m.startswith("TPF102"))


def test_unknown_gpu_option_is_tpf102_not_exception():
    found = run("# vram: model=gpt2\n", gpu="quantum-9000")
    assert codes(found) == ["TPF102"] and "quantum-9000" in found[0][2]


def test_unknown_model_from_script_is_tpf102():
    src = "# vram: gpu=a100-80gb\nfrom transformers import AutoModel\nm = AutoModel.from_pretrained('acme/x-1')\n"
    found = run(src)
    assert codes(found) == ["TPF102"] and "acme/x-1" in found[0][2] and found[0][0] == 3


@pytest.mark.parametrize(
    "src",
    [
        "# vram: \x00\n",
        "def f(:\n  # vram: gpu=t4 model=gpt2\n",
        "# vram: gpu==\n",
        "# vram: model=params=0\n",
        "# vram: gpu=t4 batch=99999999999999999999 model=gpt2\n",
    ],
)
def test_never_raises(src):
    found = run(src)
    assert all(m.split()[0] in ("TPF100", "TPF101", "TPF102") for _, _, m, _ in found)


def test_plugin_is_light_to_import():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, vram_estimator.flake8_plugin as p; "
            "print(any(m in sys.modules for m in ('torch', 'transformers', 'libcst')))",
        ],
        capture_output=True,
        text=True,
        cwd=os.path.join(os.path.dirname(__file__), ".."),
    )
    assert out.stdout.strip() == "False"


def _entry_points(group):
    if sys.version_info >= (3, 10):
        from importlib.metadata import entry_points
    else:   # `group=` arrived in 3.10; the backport is a dependency before it
        from importlib_metadata import entry_points
    return entry_points(group=group)


def test_through_flake8_with_config_option(tmp_path):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    installed = any(e.name == "TPF1" for e in _entry_points("flake8.extension"))
    local = "" if installed else textwrap.dedent(f"""\
        [flake8:local-plugins]
        extension =
            TPF1 = vram_estimator.flake8_plugin:VramChecker
        paths = {root}
        """)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    (tmp_path / "setup.cfg").write_text("[flake8]\nselect = TPF1\nvram-gpu = t4\n" + local)
    (tmp_path / "train.py").write_text(
        "# vram: model=llama-3-8b batch=4 seq=2048\nloss.backward()\n"
        "# vram: model=gpt2 batch=1  # noqa: TPF100\n"
    )
    (tmp_path / "ok.py").write_text("# vram: model=gpt2 batch=1 seq=64\nloss.backward()\n")
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--config", "setup.cfg", "train.py", "ok.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stderr == ""
    lines = proc.stdout.strip().splitlines()
    # the last comment wins (gpt2 batch=1) and fits; so nothing is reported for train.py either
    assert lines == []
    (tmp_path / "train.py").write_text("# vram: model=llama-3-8b batch=4 seq=2048\nloss.backward()\n")
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--config", "setup.cfg", "train.py", "ok.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py:1:1: TPF100 [error]")
    (tmp_path / "train.py").write_text("# vram: model=llama-3-8b batch=4 seq=2048  # noqa: TPF100\n")
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--config", "setup.cfg", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdout.strip() == ""


# --------------------------------------------------------------------------- issue 11: options, tree, records


def _flake8(tmp_path, cfg, args, files):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    installed = any(e.name == "TPF1" for e in _entry_points("flake8.extension"))
    local = "" if installed else (
        f"[flake8:local-plugins]\nextension =\n    TPF1 = vram_estimator.flake8_plugin:VramChecker\npaths = {root}\n"
    )
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    (tmp_path / "setup.cfg").write_text("[flake8]\nselect = TPF1\n" + cfg + local)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--config", "setup.cfg", *args, *files],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )


@pytest.mark.parametrize("where", ["setup.cfg", "command line"])
def test_bad_vram_gpu_is_an_option_error_flake8_users_see(tmp_path, where):
    cfg = "vram-gpu = a100-90gb\n" if where == "setup.cfg" else ""
    args = ["--vram-gpu", "a100-90gb"] if where == "command line" else []
    proc = _flake8(tmp_path, cfg, args, {"train.py": "# vram: model=llama-3-8b batch=4 seq=2048\nloss.backward()\n"})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "vram-gpu = a100-90gb" in text and "did you mean a100-80gb" in text
    assert "Traceback" not in text


def test_bad_vram_gpu_passed_to_the_records_api_is_one_tpf102_on_line_1():
    from vram_estimator.flake8_plugin import vram_findings

    found = vram_findings(ast.parse("x = 1\n"), ["x = 1\n"], "t.py", gpu="0xa100-80gb")
    assert [(f.line, f.col, f.code) for f in found] == [(1, 0, "TPF102")]
    assert "count" in found[0].what and found[0].fix


def test_vram_findings_records_and_checker_messages_agree():
    from vram_estimator.flake8_plugin import vram_findings

    src = "import torch\n\n# vram: gpu=a100-80gb model=llama-3-8b batch=4 seq=2048 precision=bf16-mixed\nloss.backward()\n"
    (rec,) = vram_findings(ast.parse(src), src.splitlines(True), "t.py")
    assert (rec.line, rec.col, rec.code, rec.severity) == (3, 0, "TPF100", "error")
    assert rec.what.startswith("projected peak") and "GiB" in rec.evidence and rec.fix
    assert not rec.fix.startswith("(") and not rec.what.endswith(")")
    assert run(src)[0][2] == rec.message() == f"TPF100 [error] {rec.what} ({rec.evidence}); fix: {rec.fix}"
    bad = "# vram: gpu=t4 model=gpt2 batch=four\n"
    (err,) = vram_findings(ast.parse(bad), [bad], "t.py")
    assert err.code == "TPF102" and err.evidence == "" and " ()" not in err.message()


def test_huge_comment_batch_is_a_clear_tpf102():
    found = run("# vram: gpu=t4 model=gpt2 batch=" + "9" * 400 + "\n")
    assert codes(found) == ["TPF102"] and "too large" in found[0][2] and "OverflowError" not in found[0][2]


def test_no_verdict_on_a_value_the_user_got_wrong():
    found = run("# vram: gpu=t4 model=llama-3-8b batch=4 seq=2048 precision=fp12\n")
    assert codes(found) == ["TPF102"]  # not also a TPF100 built on the default precision


def test_plugin_never_writes_to_flake8s_tree():
    src, _ = open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "vram", "lightning_bert.py")).read(), None
    tree = ast.parse(src)
    before = [sorted(vars(n)) for n in ast.walk(tree)]
    VramChecker.vram_gpu = "a100-80gb"
    try:
        list(VramChecker(tree, src.splitlines(True), "lightning_bert.py").run())
    finally:
        VramChecker.vram_gpu = None
    assert [sorted(vars(n)) for n in ast.walk(tree)] == before


def test_files_without_vram_and_without_a_target_cost_one_scan(monkeypatch):
    import vram_estimator.api as api

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("estimated a file that has nothing to estimate")

    monkeypatch.setattr(api, "estimate_source", boom)
    assert run("import torch\nx = torch.zeros(3)\n") == []
