"""On-demand fuzz run of the real command lines (the complement of tests/test_fuzz.py).

    python -m benchmarks.fuzz [--examples 300] [--seed 1] [--keep DIR]

tests/test_fuzz.py drives the tools in process; this writes the same generated and mutated
files (its seeded `corpus`) into a folder and runs what users run, as processes, under two
hash seeds: `flake8 --select TPF,TPF1 --tpf-notes`, `tpf check --notes --format json -j 2`,
`tpf fix` twice on a copy (the second run must change nothing, every fixed file must still
parse), and `vram-estimate` on every tenth file. flake8 gets only the files Python can parse
or reject: on a file too deep for the parser flake8 itself crashes, before any plugin runs.
It fails (exit 1) when a command prints a traceback through our code, exits with a status
it does not document, or prints something else under the other hash seed; it prints the
wall time of each command. Not part of CI: it takes minutes.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
HASH_SEEDS = ("0", "4242")
# The exit statuses each command documents (anything else, or a traceback, is a failure).
FLAKE8_STATUSES = {0, 1}
TPF_STATUSES = {0, 1}
VRAM_STATUSES = {0, 1, 2, 3, 4, 5}
OUR_FRAME = re.compile(r'File "[^"]*(flake8_torch_preflight|vram_estimator)[/\\]')


def write_corpus(folder: Path, seed: int, count: int) -> List[Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_fuzz import corpus   # the harness's seeded generator: one source of inputs

    paths = []
    for number, data in enumerate(corpus(seed, count)):
        path = folder / f"case_{number:05d}.py"
        path.write_bytes(data)
        paths.append(path)
    return paths


def too_deep_for_python(data: bytes) -> bool:
    try:
        ast.parse(data)
    except (RecursionError, MemoryError):
        return True
    except (SyntaxError, ValueError):
        pass
    return False


def run(command: Sequence[str], hash_seed: str, cwd: Path) -> Tuple[int, str, str, float]:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    start = time.perf_counter()
    done = subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, timeout=3600)
    return (done.returncode, done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"), time.perf_counter() - start)


class Checker:
    def __init__(self) -> None:
        self.failures: List[str] = []
        self.upstream: List[str] = []
        self.seconds: Dict[str, List[float]] = {}

    def outcome(self, name: str, command: Sequence[str], statuses: set, hash_seed: str,
                cwd: Path) -> Tuple[int, str]:
        status, out, err, seconds = run(command, hash_seed, cwd)
        self.seconds.setdefault(name, []).append(seconds)
        text = out + err
        if "Traceback (most recent call last)" in text:
            if OUR_FRAME.search(text):
                self.failures.append(f"{name}: traceback\n{text[-3000:]}")
            else:   # flake8's own (it cannot parse a file, before any plugin runs): not ours
                self.upstream.append(f"{name}: {text.strip().splitlines()[-1][:200]}")
        if status not in statuses:
            self.failures.append(f"{name}: exit status {status}\n{err[-2000:]}")
        return status, out

    def same(self, name: str, outputs: List[Tuple[int, str]]) -> None:
        if any(o != outputs[0] for o in outputs[1:]):
            self.failures.append(f"{name}: different output under hash seeds {HASH_SEEDS}")


def fix_twice(checker: Checker, folder: Path, copy: Path, hash_seed: str) -> Tuple[int, str]:
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(folder, copy)
    first = checker.outcome("tpf fix", ["tpf", "fix", "-q", "."], TPF_STATUSES, hash_seed, copy)
    fixed = {p.name: p.read_bytes() for p in sorted(copy.glob("*.py"))}
    original = {p.name: p.read_bytes() for p in sorted(folder.glob("*.py"))}
    for name, data in fixed.items():
        if data != original[name]:
            try:
                ast.parse(data)
            except (SyntaxError, ValueError) as exc:
                checker.failures.append(f"tpf fix: {name} no longer parses: {exc}")
    checker.outcome("tpf fix (again)", ["tpf", "fix", "-q", "."], TPF_STATUSES, hash_seed, copy)
    again = {p.name: p.read_bytes() for p in sorted(copy.glob("*.py"))}
    changed = sorted(n for n in again if again[n] != fixed[n])
    if changed:
        checker.failures.append(f"tpf fix is not idempotent on {changed[:5]}")
    return first[0], repr(sorted((n, hashlib.sha256(d).hexdigest()) for n, d in fixed.items()))


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", help="write the corpus here and keep it (default: a temp folder)")
    args = parser.parse_args(argv)
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tpf-fuzz-"))
    folder = base / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    paths = write_corpus(folder, args.seed, args.examples)
    # flake8 itself dies (RecursionError in its processor.build_ast, before any plugin runs)
    # on a file too deep for Python's parser, and then checks nothing else: leave those out
    readable = [p for p in paths if not too_deep_for_python(p.read_bytes())]
    checker = Checker()
    outputs: Dict[str, List[Tuple[int, str]]] = {}
    for hash_seed in HASH_SEEDS:
        outputs.setdefault("flake8", []).append(checker.outcome(
            "flake8", [sys.executable, "-m", "flake8", "--isolated", "--select", "TPF,TPF1",
                       "--tpf-notes", "--vram-gpu", "a100-80gb"] + [p.name for p in readable],
            FLAKE8_STATUSES, hash_seed, folder))
        outputs.setdefault("tpf check", []).append(checker.outcome(
            "tpf check", ["tpf", "check", "--isolated", "--notes", "--format", "json",
                          "--vram-gpu", "a100-80gb", "-j", "2", "."],
            TPF_STATUSES, hash_seed, folder))
        outputs.setdefault("tpf fix", []).append(
            fix_twice(checker, folder, base / f"fixed-{hash_seed}", hash_seed))
        estimates = [checker.outcome("vram-estimate", ["vram-estimate", path.name, "--gpu",
                                                       "a100-80gb"], VRAM_STATUSES, hash_seed,
                                     folder) for path in paths[::10]]
        outputs.setdefault("vram-estimate", []).append((0, repr(estimates)))
    for name, results in outputs.items():
        checker.same(name, results)
    for name, seconds in checker.seconds.items():
        print(f"{name:16} {len(seconds):4} runs  {sum(seconds):7.1f} s")
    print(f"{len(paths)} files in {folder}" + ("" if args.keep else " (removed)")
          + f"; {len(paths) - len(readable)} too deep for Python's parser left out of flake8's run")
    if not args.keep:
        shutil.rmtree(base)
    for line in sorted(set(checker.upstream)):
        print("upstream (not ours)", line)
    for failure in checker.failures:
        print("FAIL", failure)
    print("ok" if not checker.failures else f"{len(checker.failures)} failures")
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main())
