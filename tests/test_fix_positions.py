"""The fixer's positions are resolved one top-level statement at a time (the whole-module
pass was seconds on large files); they must be the positions LibCST gives for the whole
module, node for node."""
import ast
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from flake8_torch_preflight.fixes.edits import Context

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "fixtures" / "fixes").glob("*.py")) + sorted((ROOT / "examples").glob("*.py")) \
    + [ROOT / "flake8_torch_preflight" / "fixes" / "edits.py"]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_statement_positions_match_the_whole_module(path):
    source = path.read_text(encoding="utf-8")
    module = cst.parse_module(source)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    ctx = Context(source, str(path), ast.parse(source), module)
    for statement in module.body:
        first = whole[statement].start.line
        local = ctx.positions_at(first)
        for node, where in local.items():
            if isinstance(node, cst.Module):
                continue   # the one-statement module it was laid out in
            expected = whole[node]
            assert (where.start_line, where.start_col, where.end_line, where.end_col) == \
                (expected.start.line, expected.start.column, expected.end.line, expected.end.column)


def test_a_comment_header_and_blank_lines_shift_nothing():
    source = "# header\n\n\nimport torch\n\n\n# about f\ndef f(x):\n    return x.softmax(-1)\n"
    module = cst.parse_module(source)
    ctx = Context(source, "t.py", ast.parse(source), module)
    call = ast.parse(source).body[1].body[0].value
    found = ctx.cst_expr(call)
    assert isinstance(found, cst.Call) and found.func.attr.value == "softmax"
