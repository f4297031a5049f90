"""`tpf check --baseline`: record today's findings, fail only on new ones; fingerprints that
survive line shifts and re-formatting; SARIF baselineState; `tpf stats`."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from flake8_torch_preflight import baseline

TRAIN = textwrap.dedent('''\
    import torch


    def train(model, loader, optimizer, criterion):
        torch.manual_seed(0)
        history = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            history.append(loss)
            loss.backward()
            optimizer.step()
        return history
''')


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def check(project, *extra):
    return run(["check", "--isolated", "--baseline", "tpf-baseline.json", *extra, "."], project)


def test_first_run_records_then_only_new_findings_fail(project):
    first = check(project)
    assert first.returncode == 0, first.stdout
    assert "tpf: recorded 1 finding in the baseline tpf-baseline.json" in first.stderr
    data = json.loads((project / "tpf-baseline.json").read_text())
    [entry] = data["findings"]
    assert entry["code"] == "TPF001" and entry["path"] == "train.py" and entry["scope"] == "train"
    assert entry["statement"] == "history . append ( loss )"
    again = check(project)
    assert again.returncode == 0
    assert "1 known finding in the baseline not shown" in again.stdout
    assert "TPF001" not in again.stdout


def test_fingerprints_survive_line_shifts_and_reformatting(project):
    check(project)
    shifted = ("import os\n\n\ndef helper():\n    return os.getcwd()\n\n\n"
               + TRAIN.replace("history.append(loss)", "history.append( loss )  # keep for plots"))
    (project / "train.py").write_text(shifted)
    result = check(project)
    assert result.returncode == 0, result.stdout


def test_an_injected_bug_fails(project):
    check(project)
    injected = TRAIN + "\n\n" + TRAIN.replace("def train(", "def finetune(")
    (project / "train.py").write_text(injected)
    result = check(project, "--format", "json")
    assert result.returncode == 1
    states = sorted((f["baseline"], f["line"]) for f in json.loads(result.stdout)["findings"])
    assert states == [("new", 25), ("unchanged", 10)]
    text = check(project)
    assert "train.py:25:9: TPF001" in text.stdout and "train.py:10:" not in text.stdout


def test_sarif_baseline_state_new_unchanged_absent(project):
    check(project)
    (project / "other.py").write_text(TRAIN)
    log = json.loads(check(project, "--format", "sarif").stdout)
    states = sorted((r["baselineState"], r["locations"][0]["physicalLocation"]
                     ["artifactLocation"]["uri"]) for r in log["runs"][0]["results"])
    assert states == [("new", "other.py"), ("unchanged", "train.py")]
    assert all("tpfStatement/v1" in r["partialFingerprints"] for r in log["runs"][0]["results"])
    (project / "train.py").write_text(TRAIN.replace("append(loss)", "append(loss.item())"))
    log = json.loads(check(project, "--format", "sarif").stdout)
    states = sorted(r["baselineState"] for r in log["runs"][0]["results"])
    assert states == ["absent", "new"]
    from test_formatters import _validate
    _validate(log)


def test_update_baseline(project):
    check(project)
    (project / "other.py").write_text(TRAIN)
    assert check(project).returncode == 1
    updated = check(project, "--update-baseline")
    assert updated.returncode == 0 and "recorded 2 findings" in updated.stderr
    assert check(project).returncode == 0


def test_baseline_paths_are_relative_to_the_baseline_file(project):
    sub = project / "src"
    sub.mkdir()
    (project / "train.py").rename(sub / "train.py")
    assert run(["check", "--isolated", "--baseline", "tpf-baseline.json", "src"], project) \
        .returncode == 0
    inside = run(["check", "--isolated", "--baseline", "../tpf-baseline.json", "."], sub)
    assert inside.returncode == 0, inside.stdout


@pytest.mark.parametrize("content", ["not json", '{"format": 99, "findings": []}', "[]"])
def test_bad_baseline_is_one_line(project, content):
    (project / "tpf-baseline.json").write_text(content)
    result = check(project)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "not a tpf baseline" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_update_baseline_needs_a_file(project):
    result = run(["check", "--isolated", "--update-baseline", "."], project)
    assert result.returncode == 2 and "--update-baseline needs --baseline FILE" in result.stderr


def test_occurrences_of_one_statement_are_counted():
    entries = baseline.fingerprints([("TPF001", "a.py", 3, "f", "x"), ("TPF001", "a.py", 9, "f", "x")])
    assert entries[0].fingerprint != entries[1].fingerprint
    states, absent = baseline.classify(entries[:1], entries)
    assert states == ["unchanged"] and [e.line for e in absent] == [9]


def test_normalise_drops_comments_and_layout():
    assert baseline.normalise("x = f( a ,b )  # why") == baseline.normalise("x = f(a, b)")
    assert baseline.normalise("for x in y:") == "for x in y :"


# ---------------------------------------------------------------------------- stats

def test_stats_counts_findings_and_noqa_per_rule(project):
    (project / "quiet.py").write_text(TRAIN.replace("history.append(loss)",
                                                    "history.append(loss)  # noqa: TPF001"))
    result = run(["stats", "--isolated", "."], project)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.strip()}
    assert rows["TPF001"][-3:] == ["1", "1", "2"]      # reported, noqa, files
    assert "# noqa suppressions:" in result.stdout
    assert "./quiet.py:10:9: TPF001" in result.stdout
    with_report = run(["check", "--isolated", "--statistics", "."], project)
    assert with_report.returncode == 1 and "# noqa suppressions:" in with_report.stdout
