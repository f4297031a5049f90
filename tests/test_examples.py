"""The example scripts: `bad_train.py` reports exactly its `# expect:` lines (any rule, any
level, notes shown) and holds an instance of every registered rule; `good_train.py`, the same
script fixed, reports nothing at all (not even a note).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fixture_format import FIXTURES, expectations
from flake8_torch_preflight.engine import lint_source
from flake8_torch_preflight.plugin import TorchPreflightChecker
from flake8_torch_preflight.rules import ALL_RULES as REGISTERED

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ALL_RULES = {rule.code for rule in REGISTERED}


def _messages(path: Path):
    source = path.read_text()
    checker = TorchPreflightChecker(ast.parse(source), source.splitlines(True), str(path))
    checker.show_notes = True
    return source, [(line, message) for line, _, message, _ in checker.run()]


def test_bad_train_reports_exactly_its_markers():
    source, found = _messages(EXAMPLES / "bad_train.py")
    expected = expectations(source)
    assert {c for _, c in expected} >= ALL_RULES
    reported = {(line, message.split()[0]) for line, message in found}
    details = "\n".join(f"{line}: {message}" for line, message in found)
    assert reported == expected, details


def test_good_train_is_clean():
    _, found = _messages(EXAMPLES / "good_train.py")
    assert not found, "\n".join(f"{line}: {m}" for line, m in found)


@pytest.mark.parametrize("level", ["error", "warning"])
def test_tpf001_severity_split(level):
    """`positive_error_*`: no backward frees the stored graph; `positive_warning_*`: one does."""
    paths = sorted((FIXTURES / "TPF001").glob(f"positive_{level}_*.py"))
    assert len(paths) >= 3
    for path in paths:
        levels = {f.severity for f in lint_source(path.read_text(), str(path)) if f.code == "TPF001"}
        assert levels == {level}, path.name
