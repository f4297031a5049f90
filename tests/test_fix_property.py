"""Every autofix `tpf fix` proposes carries a proof; this applies each one and checks the
proof's premises on the result (`benchmarks/fix_proof.py`): the fixed file parses, re-lint
shows the finding gone and nothing new, and the analysis of the fixed file still proves the
detached value a tensor whose container reaches no backward, loss or unseen call (for
`@torch.no_grad()`: a function whose computation reaches no gradient consumer).

Runs over every fixture and example; over a corpus too when `TPF_CORPUS` names a folder
(CI has none: `TPF_CORPUS=/work/corpus python -m pytest tests/test_fix_property.py`).
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from benchmarks.fix_proof import check_files, check_source, python_files

ROOT = Path(__file__).resolve().parent.parent
FILES = python_files([ROOT / "fixtures", ROOT / "examples"])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_fix_keeps_its_proof(path):
    report = check_source(path.read_text(encoding="utf-8"), str(path))
    assert not report.failures, "\n".join(report.failures)


def test_the_check_counts_fixes_and_refusals():
    totals = check_files(python_files([ROOT / "fixtures" / "fixes", ROOT / "examples"]))
    assert totals["applied"] and totals["refused"] and not totals["failures"]


def test_a_refused_fix_names_the_failed_premise():
    source = textwrap.dedent("""\
        import torch.nn as nn


        def train(loader, optimizer, loss, accum_steps):
            encoder = nn.Linear(128, 64)
            inputs = {}
            for batch in loader:
                for step, micro in enumerate(batch):
                    inputs[step] = encoder(micro)
                    if (step + 1) % accum_steps == 0:
                        loss(**inputs).backward()
                        optimizer.step()
                        optimizer.zero_grad()
        """)
    report = check_source(source, "train.py")
    assert not report.applied
    assert any("reaches `loss(...)`" in why for why in report.refused), report.refused


@pytest.mark.skipif(not os.environ.get("TPF_CORPUS"), reason="no corpus (set TPF_CORPUS)")
def test_every_fix_on_the_corpus_keeps_its_proof():
    totals = check_files(python_files([Path(os.environ["TPF_CORPUS"])]))
    print(f"corpus: {len(totals['applied'])} fixes applied, {len(totals['refused'])} refused "
          f"by the proof")
    assert not totals["failures"], "\n".join(totals["failures"][:20])


def test_the_unsafe_fixes_are_applied_and_keep_their_proof():
    """`tpf fix --unsafe-fixes` (TPF007 `model.train()`, TPF009 `sampler.set_epoch(epoch)`,
    each the loop's first statement): applied on the rules' positive fixtures, each proven
    in the fixed file, and for the others the finding says why not."""
    totals = check_files(python_files([ROOT / "fixtures" / "TPF007", ROOT / "fixtures" / "TPF009"]))
    applied = {entry.rsplit(" ", 1)[1] for entry in totals["applied"]}
    assert {"TPF007", "TPF009"} <= applied and not totals["failures"], totals["failures"]
