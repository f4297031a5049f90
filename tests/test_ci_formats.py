"""`tpf check --format gitlab` (GitLab code quality) and `--format junit` (JUnit XML)."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from flake8_torch_preflight import reporting
from flake8_torch_preflight.findings import Finding

ROOT = Path(__file__).resolve().parent.parent
LEAK = """\
import torch.nn as nn


def train(model: nn.Module, loader, optimizer):
    criterion = nn.CrossEntropyLoss()
    history = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        history.append(loss)
        loss.backward()
        optimizer.step()
    history.append(loss)
    return [h.item() for h in history]
"""
CLEAN = LEAK.replace("history.append(loss)", "history.append(loss.item())")


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(LEAK)
    (tmp_path / "src" / "clean.py").write_text(CLEAN)
    (tmp_path / "src" / "broken.py").write_text("def (:\n")
    return tmp_path


def test_gitlab_code_quality_has_every_required_field(project):
    result = run(["check", "--isolated", "--format", "gitlab", "src"], project)
    assert result.returncode == 1
    issues = json.loads(result.stdout)
    assert isinstance(issues, list) and issues
    for issue in issues:
        assert issue["description"] and issue["check_name"] and issue["fingerprint"]
        assert issue["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert issue["location"]["path"].startswith("src/")
        assert isinstance(issue["location"]["lines"]["begin"], int)
    findings = [i for i in issues if i["check_name"] == "TPF001"]
    assert {i["location"]["lines"]["begin"] for i in findings} == {10}
    assert findings[0]["severity"] == "major" and findings[0]["type"] == "issue"
    assert len({i["fingerprint"] for i in issues}) == len(issues)   # unique
    unchecked = [i for i in issues if i["location"]["path"] == "src/broken.py"]
    assert unchecked and unchecked[0]["severity"] == "blocker"


def test_gitlab_fingerprints_survive_moved_lines(project):
    first = json.loads(run(["check", "--isolated", "--format", "gitlab", "src/train.py"],
                           project).stdout)
    (project / "src" / "train.py").write_text("# a comment\n\n" + LEAK)
    moved = json.loads(run(["check", "--isolated", "--format", "gitlab", "src/train.py"],
                           project).stdout)
    assert [i["fingerprint"] for i in first] == [i["fingerprint"] for i in moved]
    assert moved[0]["location"]["lines"]["begin"] == first[0]["location"]["lines"]["begin"] + 2


def test_gitlab_severity_follows_the_level():
    items = [reporting.Item.from_finding("a.py", Finding(3, 4, "TPF001", level, "w", "e", "f"))
             for level in ("error", "warning", "note")]
    issues = json.loads(reporting.render_gitlab(items))
    assert [i["severity"] for i in issues] == ["critical", "major", "info"]


def test_junit_is_parseable_with_one_testcase_per_finding_and_per_clean_file(project):
    result = run(["check", "--isolated", "--format", "junit", "-o", "tpf.xml", "src"], project)
    assert result.returncode == 1
    root = ET.parse(project / "tpf.xml").getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases = [c for s in suites for c in s.iter("testcase")]
    failures = [c for c in cases if c.find("failure") is not None]
    errors = [c for c in cases if c.find("error") is not None]
    passed = [c for c in cases if not list(c)]
    assert len(failures) == 1 and "TPF001" in failures[0].get("name")
    assert failures[0].get("file") == "src/train.py" and failures[0].get("line") == "10"
    assert "TPF001" in failures[0].find("failure").get("message")
    assert len(errors) == 1 and errors[0].get("file") == "src/broken.py"
    assert [c.get("file") for c in passed] == ["src/clean.py"]
    suite = suites[0]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")


def test_junit_escapes_markup_in_messages():
    finding = Finding(1, 0, "TPF001", "error", "a <b> & \"c\"", "]]> x", "f")
    text = reporting.render_junit([reporting.Item.from_finding("a.py", finding)], [], ["a.py"])
    failure = ET.fromstring(text).find(".//failure")
    assert "a <b> & \"c\"" in failure.get("message") and "]]> x" in failure.text
