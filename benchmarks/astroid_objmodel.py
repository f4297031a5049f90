"""Measurement for issue 25, item 5: does astroid answer the object-model questions (what a
called name or attribute holds: an instance, a class, a bound method, a `partial`) within
the speed budget?

    python -m benchmarks.astroid_objmodel --dest /work/corpus [--repos pytorch-examples] [--limit 60]

Needs astroid (`pip install -e .[bench]`); without it, it prints one line and exits 0. Not
part of the test suite. astroid runs in the closed world of `benchmarks.astroid_compare`
(nothing outside the repository root is resolved or built). For every call whose callee is a
name or an attribute (`f(...)`, `model.x(...)`), it asks astroid what the callee is
(`safe_infer`) and counts the kinds answered, and it times astroid's build and inference per
file against our whole analysis (every rule) of the same file. CPU time, one process.
"""
from __future__ import annotations

import argparse
import ast
import time
from collections import Counter
from pathlib import Path
from typing import List

from flake8_torch_preflight.engine import lint_tree


def _files(dest: Path, repos: List[str], limit: int) -> List[Path]:
    out: List[Path] = []
    for repo in repos:
        out += sorted((dest / repo).rglob("*.py"))[:limit]
    return out


def _callees(module):
    from astroid import nodes

    for call in module.nodes_of_class(nodes.Call):
        if isinstance(call.func, (nodes.Name, nodes.Attribute)):
            yield call


def measure(dest: Path, repos: List[str], limit: int) -> dict:
    from benchmarks.astroid_compare import ClosedWorld, module_name, search_base, search_path

    world = ClosedWorld()
    world.install()
    kinds: Counter = Counter()
    astroid_s = ours_s = 0.0
    asked = lines = 0
    try:
        for repo in repos:
            root = dest / repo
            for path in _files(dest, [repo], limit):
                source = path.read_text(encoding="utf-8", errors="replace")
                try:
                    tree = ast.parse(source)
                except SyntaxError:
                    continue
                lines += len(source.splitlines())
                world.reset_project(str(root), search_path(path, root))
                start = time.process_time()
                try:
                    module = world.build(path, module_name(path, search_base(path, root)))
                except Exception:     # noqa: BLE001 - a file astroid cannot build
                    continue
                for call in _callees(module):
                    asked += 1
                    value = world.infer_callee(call)
                    kinds[type(value).__name__ if value is not None else "unknown"] += 1
                astroid_s += time.process_time() - start
                start = time.process_time()
                lint_tree(tree, str(path))
                ours_s += time.process_time() - start
    finally:
        world.uninstall()
    return {"lines": lines, "calls": asked, "kinds": dict(kinds.most_common()),
            "astroid_s": round(astroid_s, 2), "ours_s": round(ours_s, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.astroid_objmodel")
    parser.add_argument("--dest", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--repos", default="pytorch-examples,nanoGPT,detr,SimCLR")
    parser.add_argument("--limit", type=int, default=60)
    args = parser.parse_args(argv)
    try:
        import astroid  # noqa: F401
    except ImportError:
        print("astroid is not installed (pip install -e .[bench]); nothing measured")
        return 0
    result = measure(args.dest, [r for r in args.repos.split(",") if r], args.limit)
    per_k = 1000 / max(result["lines"], 1)
    print(f"{result['lines']} lines, {result['calls']} calls asked")
    print(f"astroid build + inference: {result['astroid_s']} s "
          f"({result['astroid_s'] * per_k * 1000:.0f} ms / 1,000 lines); "
          f"our whole analysis, every rule: {result['ours_s']} s "
          f"({result['ours_s'] * per_k * 1000:.0f} ms / 1,000 lines)")
    print("astroid's answers:", result["kinds"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
