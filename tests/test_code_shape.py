"""The code stays readable: no function of either package longer than 60 lines or of
cyclomatic complexity 25 or more (radon's measure, the one the issues quote)."""
from pathlib import Path

import pytest

radon_complexity = pytest.importorskip("radon.complexity")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("flake8_torch_preflight", "vram_estimator")
MAX_LINES = 60
MAX_COMPLEXITY = 24


def _functions():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            seen = set()
            for block in radon_complexity.cc_visit(source):
                for item in [block, *getattr(block, "methods", ())]:
                    if item.letter in ("F", "M") and item.lineno not in seen:
                        seen.add(item.lineno)
                        yield path.relative_to(ROOT), item


def test_no_function_is_too_long_or_too_complex():
    too_big = [f"{path}:{item.lineno} {item.fullname}: {item.endline - item.lineno + 1} lines, "
               f"complexity {item.complexity}"
               for path, item in _functions()
               if item.endline - item.lineno + 1 > MAX_LINES or item.complexity > MAX_COMPLEXITY]
    assert not too_big, "\n".join(too_big)


def test_rules_ask_the_analysis_instead_of_walking_the_tree():
    """Issue 25: rules read the shared analysis; a walk of the tree belongs in analysis/."""
    rules = Path(__file__).resolve().parent.parent / "flake8_torch_preflight" / "rules"
    walkers = [path.name for path in sorted(rules.glob("*.py"))
               if "ast.walk(" in path.read_text(encoding="utf-8")]
    assert walkers == []
