"""Reading fixture files: inline `# expect: TPF001` comments say what must be reported.

Format (one file = one realistic training script, the rule's folder names its code):
- `# expect: TPF001:13` at the end of a line: that line must be reported with that code, at
  that column (1-based, as flake8 prints it: `train.py:12:13: TPF001 ...`); several codes
  are comma-separated (`# expect: TPF001:13, TPF010:20`). The column may be left out
  (`# expect: TPF001`) only while a fixture is being written: every committed fixture pins it.
  A severity may follow the column where the severity is the point of the fixture
  (`# expect: TPF001:9 warning`: the backward may free it, so not the "until OOM" error).
- Every other line must stay clean of errors and warnings from every rule, and of notes from
  the folder's own rule. (Notes of other rules, such as "no seeding at all", are tuning
  advice that most small fixtures would trigger; they are checked in their own folders.)
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_ITEM = r"[A-Z]+[0-9]+(?::[0-9]+)?(?:\s+(?:error|warning|note)\b)?"
_EXPECT = re.compile(rf"expect:\s*({_ITEM}(?:\s*,\s*{_ITEM})*)")


def rule_fixtures() -> List[Path]:
    return sorted(p for p in FIXTURES.glob("TPF0*/*.py") if not p.name.endswith(".fixed.py"))


def expectations(source: str) -> Set[Tuple[int, str]]:
    """(line, code) of every expectation."""
    return set(expected_columns(source))


def expected_columns(source: str) -> Dict[Tuple[int, str], Optional[int]]:
    """(line, code) -> the pinned 1-based column (None where none is pinned yet)."""
    return {key: col for key, (col, _) in _expected_items(source).items()}


def expected_severities(source: str) -> Dict[Tuple[int, str], str]:
    """(line, code) -> the severity written after the column, where one is."""
    return {key: severity for key, (_, severity) in _expected_items(source).items() if severity}


def _expected_items(source: str) -> Dict[Tuple[int, str], Tuple[Optional[int], str]]:
    expected: Dict[Tuple[int, str], Tuple[Optional[int], str]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            match = _EXPECT.search(token.string)
            if match:
                for item in match.group(1).split(","):
                    pinned, _, severity = item.strip().partition(" ")
                    code, _, col = pinned.partition(":")
                    expected[(token.start[0], code)] = (int(col) if col else None,
                                                        severity.strip())
    return expected
