"""`tpf fix`: fixture pairs, and properties every fix must keep (parse, idempotence, bytes)."""
from __future__ import annotations

import ast
import difflib
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flake8_torch_preflight.engine import lint_source
from flake8_torch_preflight.fixes import fix_source
from flake8_torch_preflight.rules import ALL_RULES

FIXES = Path(__file__).resolve().parent.parent / "fixtures" / "fixes"
REGISTERED = {rule.code for rule in ALL_RULES}
CASES = sorted(p for p in FIXES.glob("*.py") if not p.name.endswith(".fixed.py"))


FIXABLE = ("TPF001", "TPF002", "TPF005", "TPF013")
UNSAFE = ("TPF007", "TPF009")   # applied only with unsafe=True (`tpf fix --unsafe-fixes`)


def _code(path: Path) -> str:
    """`tpf001_*` cases fix one code; `multi_*` cases every fixable code."""
    return path.name.split("_", 1)[0].upper()


def _skip_unregistered(code: str) -> None:
    for needed in (FIXABLE if code == "MULTI" else (code,)):
        if needed not in REGISTERED:
            pytest.skip(f"{needed} is not registered yet")


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_fixture_pair(case):
    code = _code(case)
    _skip_unregistered(code)
    if code == "MULTI":
        return _check_multi(case)
    source = case.read_text()
    expected = case.with_name(case.stem + ".fixed.py").read_text()
    unsafe = code in UNSAFE
    if unsafe:   # never without the flag
        assert fix_source(source, str(case)).source == source
    result = fix_source(source, str(case), unsafe=unsafe)
    assert result.source == expected
    ast.parse(result.source)
    assert fix_source(result.source, str(case), unsafe=unsafe).source == result.source  # idempotent
    before = Counter(f.code for f in lint_source(source, str(case)))
    after = Counter(f.code for f in lint_source(result.source, str(case)))
    assert after[code] == before[code] - sum(1 for f in result.fixed if f.code == code)
    for other in set(after) | set(before):
        assert after[other] <= before[other], f"the fix added a {other} finding"
    if expected != source:
        assert result.fixed and all(f.code == code for f in result.fixed)


def _check_multi(case: Path) -> None:
    source = case.read_text()
    result = fix_source(source, str(case))
    assert result.source == case.with_name(case.stem + ".fixed.py").read_text()
    assert {f.code for f in result.fixed} == set(FIXABLE) and not result.skipped
    assert fix_source(result.source).source == result.source
    after = {f.code for f in lint_source(result.source, str(case))}
    assert not after & set(FIXABLE)


def test_nested_fixes_in_one_statement():
    _skip_unregistered("MULTI")
    source = textwrap.dedent("""\
        import torch
        import torch.nn.functional as F


        def train(model, loader, optimizer):
            torch.manual_seed(0)
            history = []
            for x, y in loader:
                optimizer.zero_grad()
                history.append(F.cross_entropy(F.softmax(model(x), dim=1), y))
                history[-1].backward()
                optimizer.step()
            return history
        """)
    result = fix_source(source)
    line = result.source.splitlines()[9]
    assert line.strip() == "history.append(F.cross_entropy(model(x), y).detach())" or \
        len(result.fixed) < 2, line
    ast.parse(result.source)


def test_every_fixable_rule_has_pairs():
    codes = Counter(_code(p) for p in CASES)
    for code in ("TPF001", "TPF002", "TPF005", "TPF013"):
        assert codes[code] >= 2, code
    for case in CASES:
        assert case.with_name(case.stem + ".fixed.py").exists(), case


def test_libcst_is_not_imported_by_check_paths():
    script = ("import sys, flake8_torch_preflight.plugin, flake8_torch_preflight.cli, "
              "flake8_torch_preflight.formatters, flake8_torch_preflight.fixes; "
              "print('libcst' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unparsable_and_unrelated_sources_are_returned_unchanged():
    for source in ("def f(:\n", "x = 1\n", "", "import torch\n# tpf: skip-file\n"):
        assert fix_source(source).source == source


def test_fix_keeps_crlf_and_non_ascii():
    source = (FIXES / "tpf001_append_loss.py").read_text().replace(
        "# keep the curve for plotting", "# courbe pour le tracé ✓")
    crlf = source.replace("\n", "\r\n")
    fixed = fix_source(crlf).source
    assert "\r\n" in fixed and "\n" not in fixed.replace("\r\n", "")
    assert "loss.detach())   # courbe pour le tracé ✓" in fixed


def test_nll_loss_with_softmax_is_not_unwrapped():
    _skip_unregistered("TPF005")
    source = (FIXES / "tpf005_functional.py").read_text().replace("F.cross_entropy", "F.nll_loss")
    assert fix_source(source).source == source


def test_pin_memory_is_not_added_next_to_kwargs():
    _skip_unregistered("TPF013")
    source = (FIXES / "tpf013_pin_memory.py").read_text().replace(
        "num_workers=4)", "num_workers=4, **loader_kwargs)").replace(
        "epochs: int = 3", "epochs: int = 3, loader_kwargs=None")
    assert "pin_memory" not in fix_source(source).source


# ---------------------------------------------------------------------------- properties

TRAIN = '''def {train}(model, loader, optimizer, criterion):
{i}history = []
{i}for x, y in loader:
{i}{i}optimizer.zero_grad()
{i}{i}loss = criterion(model(x), y)
{i}{i}loss.backward()
{i}{i}optimizer.step()
{i}{i}history.append({stored}){comment}
{i}return history
'''
EVAL = '''{decorators}def {name}(model, val_loader):
{i}model.eval()
{i}correct = 0
{i}for x, y in val_loader:
{i}{i}correct += (model(x).argmax(1) == y).sum().item(){comment}
{i}return correct
'''
COMMENTS = ["", "  # noqa", "  # noqa: TPF001", "  # noqa: E501", "  # noqa:TPF002",
            "  # noqa: TPF", "  # café ✓", "  # noqa: TPF0"]


@st.composite
def programs(draw):
    indent = draw(st.sampled_from(["    ", "  "]))
    header = draw(st.sampled_from([
        "import torch\nimport torch.nn as nn\n",
        "import torch as th\n",
        '"""Training."""\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader\n',
        "from torch import nn\n",
    ]))
    parts = [header, "\n\n"]
    for index in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            parts.append(TRAIN.format(
                train=f"train_{index}", i=indent,
                stored=draw(st.sampled_from(["loss", "loss.detach()", "loss.item()", "loss * 2"])),
                comment=draw(st.sampled_from(COMMENTS))))
        else:
            parts.append(EVAL.format(
                name=draw(st.sampled_from(["evaluate", "validate_epoch", "summarise"])) + f"_{index}"
                if draw(st.booleans()) else f"evaluate_{index}",
                decorators=draw(st.sampled_from(["", "@staticmethod\n", "# eval\n"])),
                i=indent, comment=draw(st.sampled_from(COMMENTS))))
        parts.append(draw(st.sampled_from(["\n\n", "\n\n# ---\n\n", "\n\n\n"])))
    source = "".join(parts)
    if draw(st.booleans()):
        source = source.replace("\n", "\r\n")
    return source


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_fix_properties(source):
    result = fix_source(source, "generated.py")
    fixed = result.source
    ast.parse(fixed)                                     # never unparsable
    assert fix_source(fixed, "generated.py").source == fixed   # idempotent
    before = Counter(f.code for f in lint_source(source))
    after = Counter(f.code for f in lint_source(fixed))
    for code in before:
        assert after[code] <= before[code] - sum(1 for f in result.fixed if f.code == code)
    # untouched bytes: changed lines are the fixed findings' lines; insertions are only
    # decorators and the torch import; nothing else moves
    old, new = source.splitlines(True), fixed.splitlines(True)
    fixed_lines = {f.line for f in result.fixed}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        assert tag in ("replace", "insert"), (tag, old[i1:i2], new[j1:j2])
        if tag == "insert":
            for line in new[j1:j2]:
                assert line.strip() in ("@torch.no_grad()", "@th.no_grad()", "import torch"), line
        else:
            assert i2 - i1 == j2 - j1
            for number, (a, b) in enumerate(zip(old[i1:i2], new[j1:j2]), start=i1 + 1):
                assert number in fixed_lines
                ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
                assert all(op[0] in ("equal", "insert") for op in ops), (a, b)
    # a line whose noqa covers the code is never touched
    from flake8_torch_preflight.noqa import NoqaMap

    noqa = NoqaMap(old)
    for finding in result.fixed:
        assert not noqa.suppressed(finding.line, finding.code)
