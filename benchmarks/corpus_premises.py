"""Issue 25: ask every error of a corpus lint for its premises.

    python -m benchmarks.corpus_premises --dest /work/corpus --findings /tmp/objmodel-after.txt

Reads the files that carry an error in a `benchmarks.corpus lint` output, lints each again
from its repository's root (as flake8 runs) and prints each error's premises; exits 1 when an
error has none or rests on an assumed one.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
from pathlib import Path

from flake8_torch_preflight.engine import lint_tree
from flake8_torch_preflight.findings import ERROR

_ERROR_LINE = re.compile(r"^(.+?):\d+:\d+: TPF\d+ \[error\]")


def error_files(findings: Path):
    return sorted({m.group(1) for m in map(_ERROR_LINE.match, findings.read_text().splitlines()) if m})


def check(dest: Path, rel: str):
    """(line, code, premises) of each error of one file."""
    path = dest / rel
    here = os.getcwd()
    os.chdir(dest / rel.split("/", 1)[0])
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        return [(f.line, f.code, f.premises) for f in lint_tree(tree, str(path)) if f.severity == ERROR]
    finally:
        os.chdir(here)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.corpus_premises")
    parser.add_argument("--dest", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--findings", type=Path, required=True)
    args = parser.parse_args(argv)
    errors = failed = 0
    for rel in error_files(args.findings):
        for line, code, premises in check(args.dest, rel):
            errors += 1
            unproven = [p for p in premises if not p.proven]
            failed += bool(unproven) or not premises
            print(f"{rel}:{line} {code}")
            for premise in premises:
                print(f"    [{premise.status}] {premise.sentence()}")
    print(f"{errors} errors, {failed} with a missing or assumed premise")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
