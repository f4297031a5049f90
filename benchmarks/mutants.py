"""Injected-bug recall (issue 14): put each silent bug our rules target into real corpus files
where it fits, lint the result, and count how often the rule reports it.

    python -m benchmarks.mutants --dest /work/corpus [--subset all|tuned|new]
        [--rules TPF003,TPF009] [--limit N] [--seed 0] [--out mutants.json]
        [--show-misses N]

Each operator (benchmarks/mutation_ops.py) finds the sites of a file where its change is
really that bug and yields one mutant per (file, site). Every mutant must still parse. A
mutant is **reported** when linting it (in-process, `engine.lint_source`, the target rule
only, with the file's own path so that project files beside it resolve) gives a finding of the
target code that the original file did not have: findings are compared as multisets of lines,
the original's lines mapped through the edit. A miss gets a first reason from the analysis
layer (benchmarks/mutation_misses.py). `--limit N` keeps N mutants per rule, drawn with
`--seed`; `--seed` also draws the form of the softmax/sigmoid a site gets. The same arguments
give the same mutants and the same numbers. Method and results: docs/recall.md.
"""
from __future__ import annotations

import argparse
import collections
import difflib
import inspect
import json
import random
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from .corpus import (CORPUS_TOML, DEFAULT_DEST, Repo, corpus_files, load_corpus, read_source,
                     select_repos)
from .mutation_misses import classify
from .mutation_ops import NO_EFFECT_SUFFIX, OPERATORS, Mutation, Operator
from .mutation_text import Source, apply_edits, line_mapper, parses


class Mutant(NamedTuple):
    repo: str
    path: Path            # the corpus file
    rel: str              # `<repo>/<path>` as the findings name it
    mutation: Mutation
    text: str             # the mutated source


class Result(NamedTuple):
    mutant: Mutant
    reported: bool
    reason: str           # "" when reported


# ---------------------------------------------------------------------------------- inject

def mutants_of(source: Source, operators: Sequence[Operator], seed: int) -> Iterable[Tuple[Mutation, str]]:
    """Each operator's mutations of one file that still parse, one per site."""
    seen = set()
    for op in operators:
        rng = random.Random(f"{seed}:{source.path}:{op.name}")
        try:
            found = list(op.find(source, rng))
        except (ValueError, IndexError, AttributeError, KeyError) as error:
            print(f"operator {op.name} failed on {source.path}: {error!r}", file=sys.stderr)
            continue
        for mutation in found:
            key = (mutation.operator, mutation.line, mutation.edits)
            if key in seen:
                continue
            seen.add(key)
            text = apply_edits(source.text, mutation.edits)
            if text != source.text and parses(text):
                yield mutation, text


def collect(dest: Path, repos: Sequence[Repo], operators: Sequence[Operator],
            seed: int) -> List[Mutant]:
    out = []
    for name, paths in corpus_files(dest, repos).items():
        for path in paths:
            text = read_source(path)
            if "torch" not in text:
                continue          # not PyTorch code: no operator applies
            try:
                source = Source(text, str(path))
            except (SyntaxError, ValueError):
                continue
            if not source.imports_torch():
                continue
            rel = path.relative_to(dest).as_posix()
            for mutation, mutated in mutants_of(source, operators, seed):
                out.append(Mutant(name, path, rel, mutation, mutated))
    return out


def limit_per_rule(mutants: List[Mutant], limit: Optional[int], seed: int) -> List[Mutant]:
    if not limit:
        return mutants
    by_rule: Dict[str, List[Mutant]] = collections.defaultdict(list)
    for m in mutants:
        by_rule[m.mutation.code].append(m)
    rng = random.Random(seed)
    kept = []
    for code in sorted(by_rule):
        group = by_rule[code]
        kept.extend(group if len(group) <= limit else rng.sample(group, limit))
    order = {id(m): i for i, m in enumerate(mutants)}
    return sorted(kept, key=lambda m: order[id(m)])


# ---------------------------------------------------------------------------------- lint

class Linter:
    """The engine, one rule at a time, with the original file's findings cached."""

    def __init__(self) -> None:
        from flake8_torch_preflight import engine
        from flake8_torch_preflight.rules import ALL_RULES

        self.engine = engine
        self.rules = {rule.code: rule for rule in ALL_RULES}
        params = inspect.signature(engine.lint_source).parameters
        # notes are opt-in (issue 14): the benchmark counts them, so ask for them
        self.extra = {"notes": True} if "notes" in params else {}
        self._original: Dict[Tuple[str, str], List[int]] = {}

    def registered(self, code: str) -> bool:
        return code in self.rules

    def lines(self, text: str, path: str, code: str) -> List[int]:
        findings = self.engine.lint_source(text, path, rules=[self.rules[code]], **self.extra)
        return [f.line for f in findings if f.code == code]

    def original(self, path: str, text: str, code: str) -> List[int]:
        key = (path, code)
        if key not in self._original:
            self._original[key] = self.lines(text, path, code)
        return self._original[key]


def new_findings(original: List[int], mutant: List[int], mutation: Mutation) -> List[int]:
    """Lines of target-code findings in the mutant that the original did not have."""
    mapped = line_mapper(mutation.edits)
    remaining = collections.Counter(mapped(line) for line in original)
    new = []
    for line in mutant:
        if remaining[line]:
            remaining[line] -= 1
        else:
            new.append(line)
    return new


def evaluate(mutants: Sequence[Mutant], linter: Linter) -> List[Result]:
    results = []
    originals: Dict[str, str] = {}
    for m in mutants:
        code = m.mutation.code
        if not linter.registered(code):
            results.append(Result(m, False, classify(m.mutation, m.text, str(m.path), False)))
            continue
        path = str(m.path)
        if path not in originals:
            originals = {path: read_source(m.path)}      # one file at a time
        before = linter.original(path, originals[path], code)
        after = linter.lines(m.text, path, code)
        if new_findings(before, after, m.mutation):
            results.append(Result(m, True, ""))
        else:
            results.append(Result(m, False, classify(m.mutation, m.text, path, True)))
    return results


# ---------------------------------------------------------------------------------- report

def record(result: Result) -> dict:
    m = result.mutant
    return {"file": m.rel, "line": m.mutation.line, "code": m.mutation.code,
            "operator": m.mutation.operator, "variant": m.mutation.variant,
            "loop_line": m.mutation.loop_line, "detail": m.mutation.detail,
            "reported": result.reported, "reason": result.reason}


# Operators whose finding is a note (the code is correct, a tuning observation): their recall
# is shown on rows of their own and kept out of the `all` row.
NOTE_OPERATORS = {"ungate-logging-sync", "drop-num-workers"}


def counts_as_bug(operator: str) -> bool:
    """A note's operator, or an injected change with no effect on training (the operator
    says so: `... (no effect)`), is shown on its own row and kept out of the totals."""
    return operator not in NOTE_OPERATORS and not operator.endswith(NO_EFFECT_SUFFIX)


def recall_table(results: Sequence[Result], by: str = "code", top: int = 3) -> str:
    groups: Dict[str, List[Result]] = collections.defaultdict(list)
    for r in results:
        m = r.mutant.mutation
        note = " (note)" if m.operator in NOTE_OPERATORS else (
            NO_EFFECT_SUFFIX if m.operator.endswith(NO_EFFECT_SUFFIX) else "")
        key = m.code + note if by == "code" else f"{m.code} {m.operator} / {m.variant}"
        groups[key].append(r)
    rows = [f"| {'rule' if by == 'code' else 'rule, operator / variant'} | mutants | reported "
            "| recall | top miss reasons |", "|---|---:|---:|---:|---|"]
    kept_apart = ("(note)", NO_EFFECT_SUFFIX.strip())
    for key in sorted(groups, key=lambda k: (any(word in k for word in kept_apart), k)):
        rows.append(_row(key, groups[key], top))
    if by == "code":
        bugs = [r for r in results if counts_as_bug(r.mutant.mutation.operator)]
        if bugs:
            rows.append(_row("**all (errors and warnings)**", bugs, top))
            recalls = [sum(r.reported for r in group) / len(group)
                       for key, group in groups.items()
                       if not any(word in key for word in kept_apart)]
            rows.append(f"| **mean of the rules' recalls** | | | "
                        f"{100 * sum(recalls) / len(recalls):.0f} % | every rule weighs the same |")
    return "\n".join(rows)


def _row(key: str, group: List[Result], top: int) -> str:
    reported = sum(r.reported for r in group)
    reasons = collections.Counter(r.reason for r in group if not r.reported)
    text = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common(top))
    return f"| {key} | {len(group)} | {reported} | {100 * reported / len(group):.0f} % | {text} |"


def show_misses(results: Sequence[Result], per_rule: int, seed: int) -> str:
    """A sample of misses per rule with the diff, for reading by hand."""
    rng = random.Random(seed)
    out = []
    by_rule: Dict[str, List[Result]] = collections.defaultdict(list)
    for r in results:
        if not r.reported:
            by_rule[r.mutant.mutation.code].append(r)
    for code in sorted(by_rule):
        misses = by_rule[code]
        for r in rng.sample(misses, min(per_rule, len(misses))):
            m = r.mutant
            out.append(f"=== {code} {m.rel}:{m.mutation.line} {m.mutation.operator}/"
                       f"{m.mutation.variant} loop={m.mutation.loop_line}: {r.reason}")
            original = read_source(m.path).splitlines(keepends=True)
            out.extend(line.rstrip("\n") for line in difflib.unified_diff(
                original, m.text.splitlines(keepends=True), m.rel, m.rel + " (mutant)", n=2))
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutants",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS_TOML)
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--subset", choices=("all", "tuned", "new"), default="all",
                        help="the repositories the rules were tuned on, the others, or all")
    parser.add_argument("--rules", default="", help="comma-separated codes (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="at most N mutants per rule")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write one JSON record per mutant here")
    parser.add_argument("--show-misses", type=int, default=0, metavar="N",
                        help="print N missed mutants per rule with their diff")
    parser.add_argument("--by-variant", action="store_true",
                        help="also print the table per operator and variant")
    parser.add_argument("--by-subset", action="store_true",
                        help="also print the table for the tuned and the new repositories apart")
    args = parser.parse_args(argv)

    codes = {c.strip().upper() for c in args.rules.split(",") if c.strip()}
    operators = [op for op in OPERATORS if not codes or op.code in codes]
    if not operators:
        parser.error(f"no operator for {sorted(codes)}")
    repos = select_repos(load_corpus(args.corpus), args.subset)
    start = time.perf_counter()
    mutants = limit_per_rule(collect(args.dest, repos, operators, args.seed), args.limit,
                             args.seed)
    injected = time.perf_counter()
    results = evaluate(mutants, Linter())
    done = time.perf_counter()
    if args.out:
        args.out.write_text(json.dumps([record(r) for r in results], indent=1) + "\n")
    files = sum(len(p) for p in corpus_files(args.dest, repos).values())
    print(f"{len(results)} mutants in {files} files of {len(repos)} repositories "
          f"(subset {args.subset}, seed {args.seed}); inject {injected - start:.1f} s, "
          f"lint and classify {done - injected:.1f} s")
    print(recall_table(results))
    if args.by_variant:
        print()
        print(recall_table(results, by="variant"))
    if args.by_subset:
        tuned = {r.name for r in repos if r.tuned}
        for label, keep in (("tuned", True), ("new", False)):
            part = [r for r in results if (r.mutant.repo in tuned) == keep]
            if part:
                print(f"\nsubset {label}: {len(part)} mutants")
                print(recall_table(part))
    if args.show_misses:
        print()
        print(show_misses(results, args.show_misses, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
