"""Re-score a recorded astroid comparison with our current resolver (astroid is not run again).

    python -m benchmarks.astroid_rescore BEFORE.json [--out AFTER.json] [--dest /work/corpus]

`BEFORE.json` is what `python -m benchmarks.astroid_compare --json` wrote. astroid's answers
do not depend on our code, so each recorded call keeps astroid's target and gets ours again
from the current analysis (each file analysed from its repository root, as
`astroid_compare` does); the outcomes are counted before and after. The call set is the
recorded one: calls only our new code resolves and neither side did before are not added.
Run with the recording's own code it gives the recorded counts back.
"""
from __future__ import annotations

import argparse
import ast
import collections
import json
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from flake8_torch_preflight.analysis.file_analysis import FileAnalysis

from . import astroid_compare as ac
from .corpus import DEFAULT_DEST, read_source

_PLACE = re.compile(r"\((.*):(\d+)\)$")


def _place(text: Optional[str]):
    found = _PLACE.search(text or "")
    return (found[1], int(found[2])) if found else None


def _outcome(theirs: Optional[str], mine: Optional[str]) -> str:
    a, m = _place(theirs), _place(mine)
    if a and m:
        return "both, same target" if a == m else "both, different targets"
    return "astroid only" if a else "ours only" if m else "neither"


def rescore_file(dest: Path, record: dict) -> list:
    root, path = dest / record["rel"].split("/")[0], dest / record["rel"]
    with ac.working_directory(root):
        analysis = FileAnalysis(ast.parse(read_source(path)), str(path))
        ours = ac.ours_targets(analysis)
        by_call = collections.defaultdict(list)
        for key, cand in ac.candidates(analysis).items():
            by_call[(key[0], cand.text)].append(key)
        out = []
        for call in record["calls"]:
            if (call["astroid"] or "").startswith(ac.BUILTIN):
                continue
            mine = next((ours[k] for k in by_call.get((call["line"], call["callee"]), [])
                         if k in ours), None)
            text = mine.text(root) if mine else None
            out.append(dict(call, ours_after=text, outcome_after=_outcome(call["astroid"], text)))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.astroid_rescore")
    parser.add_argument("before", type=Path)
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    recorded = json.loads(args.before.read_text())
    calls = [c for f in recorded["files"] if f.get("calls") for c in rescore_file(args.dest, f)]
    for label, field in (("before", "outcome"), ("after", "outcome_after")):
        counts = collections.Counter(c[field] for c in calls)
        print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    lost = [c for c in calls if c["outcome"] == "both, same target" != c["outcome_after"]]
    print(f"calls both resolved to the same target before and no longer: {len(lost)}")
    if args.out:
        args.out.write_text(json.dumps(calls, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
