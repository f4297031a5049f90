"""`tpf check` / `tpf fix` / `tpf explain` / `tpf rules`: exit codes, config, noqa, bad input."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flake8_torch_preflight import cli

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# TPF001 warning on line 12 (backward frees activations), nothing else at warning level.
TRAIN = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    def train(model: nn.Module, loader, optimizer):
        torch.manual_seed(0)
        criterion = nn.CrossEntropyLoss()
        history = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            history.append(loss){comment}
            loss.backward()
            optimizer.step()
        return history
''')
CLEAN = TRAIN.replace("history.append(loss)", "history.append(loss.item())")


def run(args, cwd, stdin=None):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, input=stdin, timeout=120)


def codes(result):
    data = json.loads(result.stdout)
    return sorted((f["line"], f["code"]) for f in data["findings"])


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(comment=""))
    return tmp_path


# ---------------------------------------------------------------------------- exit codes

def test_exit_codes_and_thresholds(project):
    assert run(["check", "--isolated", "train.py"], project).returncode == 1
    assert run(["check", "--isolated", "--fail-on", "error", "train.py"], project).returncode == 0
    (project / "clean.py").write_text(CLEAN.format(comment=""))
    result = run(["check", "--isolated", "clean.py"], project)
    assert result.returncode == 0, result.stdout
    assert "No findings" in result.stdout


def test_notes_are_opt_in_and_never_fail(tmp_path):
    source = (FIXTURES / "fixes" / "tpf013_pin_memory.py").read_text()
    (tmp_path / "loader.py").write_text(source)
    shown = run(["check", "--isolated", "--notes", "--format", "json", "loader.py"], tmp_path)
    levels = {f["severity"] for f in json.loads(shown.stdout)["findings"]}
    if levels != {"note"}:
        pytest.skip(f"fixture has non-note findings now: {levels}")
    assert shown.returncode == 0
    hidden = run(["check", "--isolated", "--format", "json", "loader.py"], tmp_path)
    assert json.loads(hidden.stdout)["findings"] == [] and hidden.returncode == 0
    (tmp_path / "setup.cfg").write_text("[flake8]\ntpf-notes = true\n")
    configured = run(["check", "--format", "json", "loader.py"], tmp_path)
    assert {f["severity"] for f in json.loads(configured.stdout)["findings"]} == {"note"}
    # --fail-on note asks for notes, so it shows them
    assert run(["check", "--isolated", "--fail-on", "note", "loader.py"], tmp_path).returncode == 1


def test_terminal_report_shows_source_caret_evidence_fix(project):
    out = run(["check", "--isolated", "train.py"], project).stdout
    assert "train.py:12:9: TPF001 [warning]" in out
    assert "12 |         history.append(loss)" in out
    assert "   |         ^" in out
    assert "= evidence:" in out and "= fix: store `loss.detach()`" in out
    assert "\033[" not in out                 # not a TTY: no colour
    assert out.strip().splitlines()[-1].startswith("Found 1 finding (1 warning) in 1 file.")
    coloured = run(["check", "--isolated", "--color", "always", "train.py"], project).stdout
    assert "\033[" in coloured


# ---------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, needle", [
    (["check", "missing.py"], "missing.py: no such file or directory"),
    (["check", "--select", "TPF999", "."], "unknown rule code 'TPF999' in --select"),
    (["check", "--ignore", "XYZ", "."], "unknown rule code 'XYZ' in --ignore"),
    (["check", "--fail-on", "fatal", "."], "invalid choice"),
    (["check", "--jobs", "many", "."], "--jobs must be a number"),
    (["explain", "TPF999"], "unknown rule code 'TPF999'"),
    (["frobnicate"], "invalid choice"),
    (["check", "--config", "nope.cfg", "."], "does not exist"),
])
def test_bad_invocation_is_one_line_and_exit_2(project, args, needle):
    result = run(args, project)
    assert result.returncode == 2
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_bad_files_are_one_line_each_and_exit_1(project):
    (project / "broken.py").write_text("import torch\ndef f(:\n    pass\n")
    (project / "latin.py").write_bytes(b"import torch\nname = '\xe9t\xe9'\n")
    result = run(["check", "--isolated", "broken.py", "latin.py", "train.py"], project)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert lines[0].startswith("tpf: error: broken.py: syntax error: ") and "line 2" in lines[0]
    assert lines[1].startswith("tpf: error: latin.py: cannot decode as utf-8")
    assert "TPF001" in result.stdout            # the good file is still checked
    assert "2 files could not be checked" in result.stdout


def test_declared_encoding_is_honoured(project):
    (project / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9t\xe9'\n")
    assert run(["check", "--isolated", "latin.py"], project).returncode == 0


def test_unreadable_file(project, monkeypatch, capsys):
    import os
    real_open = os.open

    def deny(path, *args, **kwargs):   # tpf reads with os.open (never blocking on a FIFO)
        if str(path).endswith("train.py"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.chdir(project)
    monkeypatch.setattr("os.open", deny)
    assert cli.main(["check", "--isolated", "--jobs", "1", "train.py"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "tpf: error: train.py: cannot read: Permission denied"


def test_stdin(project):
    result = run(["check", "--isolated", "--stdin-display-name", "t.py", "-"], project,
                 stdin=TRAIN.format(comment=""))
    assert result.returncode == 1 and "t.py:12:9: TPF001" in result.stdout


# ---------------------------------------------------------------------------- config

def _cfg(path: Path, body: str, section="flake8"):
    path.write_text(f"[{section}]\n{textwrap.dedent(body)}")


def test_config_discovery_first_file_with_flake8_section_wins(project):
    _cfg(project / "tox.ini", "extend-ignore = TPF001\n")
    assert codes(run(["check", "--format", "json", "train.py"], project)) == []
    _cfg(project / "setup.cfg", "max-line-length = 100\n")     # setup.cfg wins, not merged
    assert codes(run(["check", "--format", "json", "train.py"], project)) == [(12, "TPF001")]
    _cfg(project / "setup.cfg", "x = 1\n", section="metadata")  # no [flake8]: tox.ini again
    assert codes(run(["check", "--format", "json", "train.py"], project)) == []
    sub = project / "pkg"
    sub.mkdir()
    (sub / "train.py").write_text(TRAIN.format(comment=""))
    assert codes(run(["check", "--format", "json", "train.py"], sub)) == []   # walks up
    assert codes(run(["check", "--isolated", "--format", "json", "train.py"], sub)) == [(12, "TPF001")]


def test_command_line_overrides_config(project):
    _cfg(project / "setup.cfg", "select = TPF002\n")
    assert codes(run(["check", "--format", "json", "train.py"], project)) == []
    assert codes(run(["check", "--format", "json", "--select", "TPF001", "train.py"], project)) \
        == [(12, "TPF001")]
    _cfg(project / "setup.cfg", "ignore = TPF\n")
    assert codes(run(["check", "--format", "json", "--ignore", "TPF002", "train.py"], project)) \
        == [(12, "TPF001")]


def test_per_file_ignores_and_exclude(project):
    (project / "scripts").mkdir()
    (project / "scripts" / "train.py").write_text(TRAIN.format(comment=""))
    (project / "build").mkdir()
    (project / "build" / "train.py").write_text(TRAIN.format(comment=""))
    _cfg(project / ".flake8", "per-file-ignores =\n    scripts/*:TPF001\nextend-exclude = build\n")
    data = json.loads(run(["check", "--format", "json", "."], project).stdout)
    paths = {f["path"] for f in data["findings"] if f["code"] == "TPF001"}
    assert paths == {"./train.py"}


def test_vram_gpu_and_unknown_keys_are_accepted(project):
    _cfg(project / "setup.cfg", "vram-gpu = A100-80GB\nmax-line-length = 120\n")
    assert run(["check", "--format", "json", "train.py"], project).returncode == 1


# ---------------------------------------------------------------------------- noqa = flake8

NOQA_CASES = ["", "  # noqa", "  # noqa: TPF001", "  # noqa:TPF001", "  # noqa: TPF0",
              "  # noqa: E501", "  # noqa: TPF", "  # NOQA : TPF001", "  # noqa: TPF002,E501",
              "  # noqa: TPF002 TPF001"]


def _flake8_codes(path: Path, cwd: Path, *extra):
    out = subprocess.run([sys.executable, "-m", "flake8", "--isolated", "--select", "TPF",
                          "--format", "%(row)d:%(code)s", *extra, str(path)],
                         cwd=cwd, capture_output=True, text=True, timeout=120).stdout
    return sorted((int(r), c) for r, c in (line.split(":") for line in out.split()))


def test_noqa_matches_flake8_exactly(tmp_path):
    for index, comment in enumerate(NOQA_CASES):
        path = tmp_path / f"case_{index}.py"
        path.write_text(TRAIN.format(comment=comment))
    multi = TRAIN.format(comment="").replace(
        "history.append(loss)", "history.append(  # noqa: TPF001\n            loss)")
    (tmp_path / "case_multi.py").write_text(multi)
    closing = TRAIN.format(comment="").replace(
        "history.append(loss)", "history.append(\n            loss)  # noqa: TPF001")
    (tmp_path / "case_closing.py").write_text(closing)
    (tmp_path / "case_file.py").write_text("# flake8: noqa\n" + TRAIN.format(comment=""))
    for path in sorted(tmp_path.glob("case_*.py")):
        ours = [c for c in codes(run(["check", "--isolated", "--select", "TPF", "--format", "json",
                                      path.name], tmp_path))]
        assert ours == _flake8_codes(path, tmp_path), path.read_text()


def test_same_findings_as_flake8_on_fixtures():
    folders = sorted(p for p in FIXTURES.glob("TPF0*") if p.is_dir())[:6]
    ours = json.loads(run(["check", "--isolated", "--format", "json", *map(str, folders)], ROOT).stdout)
    mine = sorted((Path(f["path"]).resolve(), f["line"], f["code"]) for f in ours["findings"])
    out = subprocess.run([sys.executable, "-m", "flake8", "--isolated", "--select", "TPF",
                          "--format", "%(path)s|%(row)d|%(code)s", *map(str, folders)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    theirs = sorted((Path(p).resolve(), int(r), c) for p, r, c in
                    (line.split("|") for line in out.splitlines() if line))
    assert mine == theirs


def test_disable_noqa(project):
    (project / "train.py").write_text(TRAIN.format(comment="  # noqa"))
    assert codes(run(["check", "--isolated", "--format", "json", "train.py"], project)) == []
    assert codes(run(["check", "--isolated", "--disable-noqa", "--format", "json", "train.py"],
                     project)) == [(12, "TPF001")]


def test_fix_honours_noqa_and_disable_noqa(project):
    """`tpf fix` leaves a `# noqa` line alone, and with --disable-noqa fixes it (the noqa
    decision is made once, by the same predicate as `check`)."""
    source = TRAIN.format(comment="  # noqa")
    (project / "train.py").write_text(source)
    run(["fix", "--isolated", "train.py"], project)
    assert (project / "train.py").read_text() == source
    run(["fix", "--isolated", "--disable-noqa", "train.py"], project)
    assert ".detach()" in (project / "train.py").read_text()


# ---------------------------------------------------------------------------- jobs

def test_jobs_two_equals_jobs_one():
    folders = [str(p) for p in sorted(FIXTURES.glob("TPF0*")) if p.is_dir()]
    one = run(["check", "--isolated", "--format", "json", "-j", "1", *folders], ROOT)
    two = run(["check", "--isolated", "--format", "json", "-j", "2", *folders], ROOT)
    assert one.returncode == two.returncode
    assert json.loads(one.stdout) == json.loads(two.stdout)
    assert json.loads(one.stdout)["findings"]


# ---------------------------------------------------------------------------- fix / explain / rules

def test_fix_writes_and_diff_does_not(project):
    before = (project / "train.py").read_text()
    diff = run(["fix", "--isolated", "--diff", "train.py"], project)
    assert diff.returncode == 1 and "+        history.append(loss.detach())" in diff.stdout
    assert (project / "train.py").read_text() == before
    done = run(["fix", "--isolated", "train.py"], project)
    assert done.returncode == 0, done.stderr
    assert "fixed TPF001" in done.stderr
    assert "history.append(loss.detach())" in (project / "train.py").read_text()
    assert run(["fix", "--isolated", "--diff", "train.py"], project).returncode == 0
    assert codes(run(["check", "--isolated", "--format", "json", "train.py"], project)) == []


def test_fix_respects_select_ignore_and_noqa(project):
    before = (project / "train.py").read_text()
    assert run(["fix", "--isolated", "--ignore", "TPF001", "train.py"], project).returncode == 0
    assert (project / "train.py").read_text() == before
    (project / "train.py").write_text(TRAIN.format(comment="  # noqa: TPF001"))
    run(["fix", "--isolated", "train.py"], project)
    assert "detach" not in (project / "train.py").read_text()


def test_fix_bad_file(project):
    (project / "broken.py").write_text("def f(:\n")
    result = run(["fix", "--isolated", "broken.py"], project)
    assert result.returncode == 1 and "broken.py: syntax error" in result.stderr
    assert "Traceback" not in result.stderr


def test_explain_and_rules():
    from flake8_torch_preflight.rules import ALL_RULES

    listing = run(["rules"], ROOT)
    assert listing.returncode == 0
    for rule in ALL_RULES:
        assert rule.code in listing.stdout and rule.name in listing.stdout
    text = run(["explain", "tpf003"], ROOT)
    assert text.returncode == 0
    assert text.stdout.startswith("TPF003 missing-zero-grad [error]")
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert heading in text.stdout


def test_console_script_entry_point():
    if sys.version_info >= (3, 10):
        from importlib.metadata import entry_points
    else:   # `group=` arrived in 3.10; the backport is a declared dependency before that
        from importlib_metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("tpf") == "flake8_torch_preflight.cli:main"


def test_memory_codes_match_flake8_when_the_vram_plugin_is_installed():
    pytest.importorskip("vram_estimator.flake8_plugin")
    folder = FIXTURES / "vram"
    if not folder.is_dir():
        pytest.skip("no vram fixtures")
    ours = json.loads(run(["check", "--isolated", "--vram-gpu", "a100-80gb", "--format", "json",
                           str(folder)], ROOT).stdout)
    mine = sorted((Path(f["path"]).name, f["line"], f["code"]) for f in ours["findings"])
    out = subprocess.run([sys.executable, "-m", "flake8", "--isolated", "--select", "TPF",
                          "--vram-gpu", "a100-80gb", "--format", "%(path)s|%(row)d|%(code)s",
                          str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    theirs = sorted((Path(p).name, int(r), c) for p, r, c in
                    (line.split("|") for line in out.splitlines() if line))
    assert mine == theirs
    assert any(code.startswith("TPF1") for _, _, code in mine)


def test_memory_findings_have_their_parts_in_machine_formats():
    pytest.importorskip("vram_estimator.flake8_plugin")
    folder = FIXTURES / "vram"
    if not folder.is_dir():
        pytest.skip("no vram fixtures")
    data = json.loads(run(["check", "--isolated", "--vram-gpu", "a100-80gb", "--format", "json",
                           str(folder)], ROOT).stdout)
    memory = [f for f in data["findings"] if f["code"].startswith("TPF1")]
    assert memory
    for finding in memory:
        assert "(); fix:" not in finding["message"] and not finding["message"].endswith("fix: ")
        assert finding["what"] and finding["fix"]


def test_bad_vram_gpu_is_a_usage_error(project):
    pytest.importorskip("vram_estimator.flake8_plugin")
    if not hasattr(__import__("vram_estimator.flake8_plugin").flake8_plugin, "gpu_option_problem"):
        pytest.skip("an older memory plugin")
    result = run(["check", "--isolated", "--vram-gpu", "0xa100", "train.py"], project)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    (project / "setup.cfg").write_text("[flake8]\nvram-gpu = 2x2xa100\n")
    result = run(["check", "train.py"], project)
    assert result.returncode == 2 and "vram-gpu = 2x2xa100" in result.stderr
