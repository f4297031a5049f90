"""A baseline scoped to what was checked (issue 21): a run over some paths reads, reports and
rewrites only the entries of those paths; a missing baseline in CI is an error, not a file."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_baseline import TRAIN


def run(args, cwd, env=None):
    environment = {k: v for k, v in os.environ.items() if k != "CI"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=environment)


@pytest.fixture
def tree(tmp_path):
    """train.py at the top, pkg/model.py below; a baseline recording both."""
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text(TRAIN)
    first = run(["check", "--isolated", "--baseline", "b.json", "."], tmp_path)
    assert "recorded 2 findings" in first.stderr, first.stderr
    return tmp_path


def recorded_paths(tree):
    return sorted(e["path"] for e in json.loads((tree / "b.json").read_text())["findings"])


def test_update_from_a_sub_folder_keeps_the_other_entries(tree):
    result = run(["check", "--isolated", "--baseline", "../b.json", "--update-baseline", "."],
                 tree / "pkg")
    assert result.returncode == 0, result.stderr
    assert recorded_paths(tree) == ["pkg/model.py", "train.py"]
    assert "1 entry for files not checked kept" in result.stderr


def test_update_of_a_sub_path_replaces_only_its_entries(tree):
    (tree / "pkg" / "model.py").write_text(TRAIN.replace("append(loss)", "append(loss.item())"))
    result = run(["check", "--isolated", "--baseline", "b.json", "--update-baseline", "pkg"], tree)
    assert result.returncode == 0, result.stderr
    assert recorded_paths(tree) == ["train.py"]


def test_sarif_of_a_sub_path_reports_no_other_file_as_absent(tree):
    result = run(["check", "--isolated", "--baseline", "b.json", "--format", "sarif", "pkg"], tree)
    states = [(r["baselineState"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
              for r in json.loads(result.stdout)["runs"][0]["results"]]
    assert states == [("unchanged", "pkg/model.py")]


def test_a_finding_gone_from_a_checked_file_is_still_absent(tree):
    (tree / "pkg" / "model.py").write_text(TRAIN.replace("append(loss)", "append(loss.item())"))
    result = run(["check", "--isolated", "--baseline", "b.json", "--format", "sarif", "pkg"], tree)
    states = [(r["baselineState"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
              for r in json.loads(result.stdout)["runs"][0]["results"]]
    assert states == [("absent", "pkg/model.py")]


def test_a_deleted_file_under_a_checked_folder_is_absent(tree):
    (tree / "pkg" / "model.py").unlink()
    (tree / "pkg" / "other.py").write_text("x = 1\n")
    result = run(["check", "--isolated", "--baseline", "b.json", "--format", "sarif", "pkg"], tree)
    states = [r["baselineState"] for r in json.loads(result.stdout)["runs"][0]["results"]]
    assert states == ["absent"]


def test_a_file_that_does_not_parse_keeps_its_entries(tree):
    (tree / "pkg" / "model.py").write_text("def broken(:\n")
    result = run(["check", "--isolated", "--baseline", "b.json", "--update-baseline", "."], tree)
    assert result.returncode == 1 and "syntax error" in result.stderr
    assert recorded_paths(tree) == ["pkg/model.py", "train.py"]


@pytest.mark.parametrize("how", [{"env": {"CI": "true"}, "args": []},
                                 {"env": {}, "args": ["--no-create-baseline"]}])
def test_a_missing_baseline_in_ci_is_an_error(tree, how):
    result = run(["check", "--isolated", "--baseline", "typo.json", *how["args"], "."], tree,
                 env=how["env"])
    assert result.returncode == 2, result.stderr
    assert "typo.json" in result.stderr and "does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tree / "typo.json").exists()


def test_ci_false_still_records_a_first_baseline(tree):
    result = run(["check", "--isolated", "--baseline", "new.json", "."], tree, env={"CI": "false"})
    assert result.returncode == 0 and (tree / "new.json").exists()


def test_ci_may_still_write_a_baseline_it_is_asked_to_update(tree):
    result = run(["check", "--isolated", "--baseline", "new.json", "--update-baseline", "."], tree,
                 env={"CI": "true"})
    assert result.returncode == 0 and (tree / "new.json").exists()


def test_an_unwritable_baseline_folder_is_reported_before_the_run(tree):
    result = run(["check", "--isolated", "--baseline", "missing/b.json", "-v", "."], tree)
    assert result.returncode == 2
    assert "missing/b.json" in result.stderr and "tpf: checked" not in result.stderr
