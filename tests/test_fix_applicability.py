"""Why a fix was not applied, and the unsafe fixes behind `--unsafe-fixes` (issue 24).

Per finding (`tpf fix` stderr, `tpf check --format json`'s `autofix`, SARIF `fixes` and
properties) and in `tpf fix`'s summary: which fixes exist (safe, unsafe, none), which were
applied, and for the others why not. The unsafe fixes (TPF007 `model.train()`, TPF009
`sampler.set_epoch(epoch)`, each at the top of the loop) are applied only with
`--unsafe-fixes`."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from flake8_torch_preflight.engine import lint_source
from flake8_torch_preflight.fixes import fix_source

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = json.loads((ROOT / "tests" / "sarif-schema-2.1.0.json").read_text())

# TPF001 twice: line 11 the proof accepts (`history`), line 12 it refuses (reaches a loss)
MIXED = textwrap.dedent("""\
    import torch.nn as nn


    def train(loader, optimizer, loss, accum_steps):
        encoder = nn.Linear(128, 64)
        inputs = {}
        history = []
        for batch in loader:
            for step, micro in enumerate(batch):
                out = encoder(micro)
                history.append(out.sum())
                inputs[step] = encoder(micro)
                if (step + 1) % accum_steps == 0:
                    loss(**inputs).backward()
                    optimizer.step()
                    optimizer.zero_grad()
        return [h.item() for h in history]
    """)

SAMPLER = textwrap.dedent("""\
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def main(model, dataset, epochs=10):
        dist.init_process_group("nccl")
        model = DDP(model.cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(epochs):
            # one pass over this rank's shard
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
    """)

EVAL = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    def fit(model: nn.Module, train_loader, val_loader, epochs: int = 10):
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        model.train()
        for epoch in range(epochs):
            for images, labels in train_loader:
                optimizer.zero_grad()
                criterion(model(images), labels).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                for images, labels in val_loader:
                    print(model(images).argmax(1))
    """)


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "mixed.py").write_text(MIXED)
    (tmp_path / "sampler.py").write_text(SAMPLER)
    (tmp_path / "evaluate.py").write_text(EVAL)
    return tmp_path


# ---------------------------------------------------------------------------- why not applied

def test_fix_says_per_finding_and_in_the_summary_why_a_fix_was_not_applied(project):
    result = run(["fix", "--isolated", "mixed.py"], project)
    assert "mixed.py:11:" in result.stderr and "fixed TPF001" in result.stderr
    refused = [line for line in result.stderr.splitlines() if "not fixed TPF001" in line]
    assert len(refused) == 1 and refused[0].startswith("mixed.py:12:")
    assert "reaches `loss(...)`" in refused[0]
    summary = result.stderr.strip().splitlines()[-1]
    assert "fixed 1 of 2 findings with an autofix" in summary and "1 not fixed" in summary


def test_unsafe_fixes_are_counted_and_named_without_the_flag(project):
    result = run(["fix", "--isolated", "sampler.py", "evaluate.py"], project)
    assert (project / "sampler.py").read_text() == SAMPLER
    assert (project / "evaluate.py").read_text() == EVAL
    assert "not fixed TPF009" in result.stderr and "--unsafe-fixes" in result.stderr
    summary = result.stderr.strip().splitlines()[-1]
    assert "fixed 0 of 2" in summary and "2 unsafe" in summary and "--unsafe-fixes" in summary


def test_fix_json_reports_applicability_applied_and_reason(project):
    result = run(["fix", "--isolated", "--format", "json", "mixed.py", "sampler.py"], project)
    data = json.loads(result.stdout)
    by_line = {(f["path"], f["line"], f["code"]): f["autofix"] for f in data["findings"]}
    assert by_line[("mixed.py", 11, "TPF001")] == {"applicability": "safe", "applied": True,
                                                   "reason": None}
    refused = by_line[("mixed.py", 12, "TPF001")]
    assert refused["applicability"] == "safe" and not refused["applied"]
    assert "reaches `loss(...)`" in refused["reason"]
    unsafe = by_line[("sampler.py", 12, "TPF009")]
    assert unsafe["applicability"] == "unsafe" and not unsafe["applied"]
    assert "--unsafe-fixes" in unsafe["reason"]
    assert data["summary"]["fixed"] == 1 and data["summary"]["with_autofix"] == 3


def test_check_json_says_which_fix_each_finding_has(project):
    result = run(["check", "--isolated", "--format", "json", "mixed.py", "sampler.py"], project)
    fixes = {(f["line"], f["code"]): f["autofix"] for f in json.loads(result.stdout)["findings"]}
    assert fixes[(11, "TPF001")] == {"applicability": "safe", "available": True, "reason": None}
    assert fixes[(12, "TPF001")]["available"] is False
    assert "reaches `loss(...)`" in fixes[(12, "TPF001")]["reason"]
    assert fixes[(12, "TPF009")] == {"applicability": "unsafe", "available": True,
                                     "reason": None}


def test_a_rule_without_autofix_says_none(tmp_path):
    (tmp_path / "t.py").write_text(MIXED.replace("optimizer.zero_grad()\n", "pass\n"))
    data = json.loads(run(["check", "--isolated", "--format", "json", "t.py"], tmp_path).stdout)
    tpf003 = [f for f in data["findings"] if f["code"] == "TPF003"]
    assert tpf003 and tpf003[0]["autofix"] == {"applicability": "none", "available": False,
                                               "reason": None}


# ---------------------------------------------------------------------------- --unsafe-fixes

def test_unsafe_fixes_apply_set_epoch_and_train_only_with_the_flag(project):
    assert fix_source(SAMPLER, "sampler.py").source == SAMPLER
    result = run(["fix", "--isolated", "--unsafe-fixes", "sampler.py", "evaluate.py"], project)
    assert result.returncode == 0, result.stderr
    fixed = (project / "sampler.py").read_text()
    assert fixed == SAMPLER.replace(
        "    for epoch in range(epochs):\n",
        "    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n")
    assert (project / "evaluate.py").read_text() == EVAL.replace(
        "    for epoch in range(epochs):\n",
        "    for epoch in range(epochs):\n        model.train()\n")
    assert not [f for f in lint_source(fixed, "sampler.py") if f.code == "TPF009"]
    again = run(["fix", "--isolated", "--unsafe-fixes", "sampler.py", "evaluate.py"], project)
    assert (project / "sampler.py").read_text() == fixed and "fixed 0 of 0" in again.stderr


def test_unsafe_fixes_in_the_diff(project):
    plain = run(["fix", "--isolated", "--diff", "sampler.py"], project)
    assert plain.stdout == "" and plain.returncode == 0
    diff = run(["fix", "--isolated", "--diff", "--unsafe-fixes", "sampler.py"], project)
    assert "+        sampler.set_epoch(epoch)\n" in diff.stdout and diff.returncode == 1


def test_an_inline_sampler_is_left_with_a_reason(tmp_path):
    inline = SAMPLER.replace("        sampler = DistributedSampler(dataset)\n", "").replace(
        "sampler=sampler", "sampler=DistributedSampler(dataset)")
    (tmp_path / "t.py").write_text(inline)
    result = run(["fix", "--isolated", "--unsafe-fixes", "t.py"], tmp_path)
    assert (tmp_path / "t.py").read_text() == inline
    assert "not fixed TPF009" in result.stderr and "one local name" in result.stderr


def test_tpf008_documents_no_autofix():
    assert "autofix: none" in cli_output(["explain", "TPF008"])


def cli_output(args):
    return run(args, ROOT).stdout


# ---------------------------------------------------------------------------- SARIF

def test_sarif_carries_fixes_with_replacements_and_their_safety(project):
    result = run(["check", "--isolated", "--format", "sarif", "mixed.py", "sampler.py"], project)
    log = json.loads(result.stdout)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)
    results = {(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                r["locations"][0]["physicalLocation"]["region"]["startLine"], r["ruleId"]): r
               for r in log["runs"][0]["results"]}
    safe = results[("mixed.py", 11, "TPF001")]
    assert safe["properties"]["fixSafety"] == "safe"
    change = safe["fixes"][0]["artifactChanges"][0]
    assert change["artifactLocation"]["uri"] == "mixed.py"
    inserted = change["replacements"][0]["insertedContent"]["text"]
    assert "history.append(out.sum().detach())" in inserted
    assert "fixes" not in results[("mixed.py", 12, "TPF001")]
    unsafe = results[("sampler.py", 12, "TPF009")]
    assert unsafe["properties"]["fixSafety"] == "unsafe"
    assert "sampler.set_epoch(epoch)" in \
        unsafe["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"]


def test_a_site_the_fix_does_not_cover_says_what_shape_it_needs(tmp_path):
    (tmp_path / "t.py").write_text(textwrap.dedent("""\
        import torch


        def main(model, loader):
            model.eval()
            scores = []
            for x in loader:
                scores.append(model(x).argmax(1).tolist())
            return scores
        """))
    data = json.loads(run(["check", "--isolated", "--format", "json", "t.py"], tmp_path).stdout)
    tpf002 = [f["autofix"] for f in data["findings"] if f["code"] == "TPF002"]
    assert tpf002 and "`with torch.no_grad():` block" in tpf002[0]["reason"]
    result = run(["fix", "--isolated", "t.py"], tmp_path)
    assert "1 no automatic fix for this shape of code" in result.stderr


def test_the_text_summary_counts_safe_and_unsafe_fixes_apart(project):
    result = run(["check", "--isolated", "mixed.py", "sampler.py"], project)
    summary = result.stdout.strip().splitlines()[-1]
    assert "1 fixable with `tpf fix`." in summary
    assert "1 more with `tpf fix --unsafe-fixes`." in summary
    assert "[tpf fix --unsafe-fixes]" in result.stdout
