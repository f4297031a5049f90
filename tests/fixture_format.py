"""Reading fixture files: inline `# expect: TPF001` comments say what must be reported.

Format (one file = one realistic training script, the rule's folder names its code):
- `# expect: TPF001` at the end of a line: that line must be reported with that code;
  several codes are comma-separated.
- Every other line must stay clean of errors and warnings from every rule, and of notes from
  the folder's own rule. (Notes of other rules, such as "no seeding at all", are tuning
  advice that most small fixtures would trigger; they are checked in their own folders.)
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path
from typing import List, Set, Tuple

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_EXPECT = re.compile(r"expect:\s*([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)")


def rule_fixtures() -> List[Path]:
    return sorted(p for p in FIXTURES.glob("TPF0*/*.py") if not p.name.endswith(".fixed.py"))


def expectations(source: str) -> Set[Tuple[int, str]]:
    expected = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            match = _EXPECT.search(token.string)
            if match:
                for code in match.group(1).split(","):
                    expected.add((token.start[0], code.strip()))
    return expected
