"""Every fixture, through the real plugin class, must report exactly what it expects."""
from __future__ import annotations

import ast

import pytest

from fixture_format import (FIXTURES, expectations, expected_columns, expected_severities,
                            rule_fixtures)
from flake8_torch_preflight.plugin import TorchPreflightChecker

CASES = rule_fixtures()


def _findings(path):
    source = path.read_text()
    checker = TorchPreflightChecker(ast.parse(source), source.splitlines(True), str(path))
    checker.show_notes = True   # the harness checks notes too (flake8 shows them with --tpf-notes)
    return source, [(line, col, message) for line, col, message, _ in checker.run()]


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(FIXTURES)) for p in CASES])
def test_fixture(path):
    source, found = _findings(path)
    own_code = path.parent.name
    expected = expectations(source)
    reported = set()
    for line, _, message in found:
        code, level = message.split()[0], message.split()[1]
        if level == "[note]" and code != own_code and (line, code) not in expected:
            continue
        reported.add((line, code))
    missing = sorted(expected - reported)
    extra = sorted(reported - expected)
    details = "\n".join(m for ln, _, m in found if (ln, m.split()[0]) in set(extra))
    assert not missing and not extra, f"missing={missing} extra={extra}\n{details}"
    columns = {(line, message.split()[0]): col + 1 for line, col, message in found}
    wrong = {key: (col, columns[key]) for key, col in expected_columns(source).items()
             if col is not None and columns.get(key) != col}
    assert not wrong, f"pinned column != reported column: {wrong}"
    levels = {(line, message.split()[0]): message.split()[1].strip("[]") for line, _, message in found}
    wrong = {key: (severity, levels.get(key)) for key, severity in expected_severities(source).items()
             if levels.get(key) != severity}
    assert not wrong, f"expected severity != reported severity: {wrong}"


def test_every_rule_has_enough_cases():
    from flake8_torch_preflight.rules import ALL_RULES

    for rule in ALL_RULES:
        files = list((FIXTURES / rule.code).glob("*.py"))
        positives = [p for p in files if any(c == rule.code for _, c in expectations(p.read_text()))]
        quiet = [p for p in files if p not in positives]
        assert len(positives) >= 8, f"{rule.code}: {len(positives)} positive fixtures"
        assert len(quiet) >= 8, f"{rule.code}: {len(quiet)} quiet fixtures"
