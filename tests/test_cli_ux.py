"""What a user of ruff or flake8 expects in the first hour (issue 24): `--exit-zero`,
`tpf explain <rule name>`, `--show-source`/`--no-show-source`, `vram-estimate`'s exit codes
aligned with tpf and flake8 (2 is bad usage) and its `--json` spelling, and the README
saying that an existing `select =` list must name TPF."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flake8_torch_preflight import cli
from vram_estimator import cli as vram_cli

ROOT = Path(__file__).resolve().parent.parent
VRAM = ROOT / "fixtures" / "vram"
TRAIN = """\
import torch.nn as nn


def train(model: nn.Module, loader, optimizer):
    criterion = nn.CrossEntropyLoss()
    history = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        history.append(loss)
        loss.backward()
        optimizer.step()
    return history
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_exit_zero_reports_findings_and_exits_0(project, capsys):
    assert cli.main(["check", "--isolated", "train.py"]) == 1
    capsys.readouterr()
    assert cli.main(["check", "--isolated", "--exit-zero", "train.py"]) == 0
    assert "TPF001" in capsys.readouterr().out


def test_exit_zero_keeps_a_file_that_could_not_be_checked_failing(project, capsys):
    (project / "broken.py").write_text("def (:\n")
    assert cli.main(["check", "--isolated", "--exit-zero", "broken.py"]) == 1


@pytest.mark.parametrize("name", ["retained-graph", "RETAINED-GRAPH", "TPF001", "tpf001"])
def test_explain_takes_rule_names_as_well_as_codes(name, capsys):
    assert cli.main(["explain", name]) == 0
    assert capsys.readouterr().out.startswith("TPF001 retained-graph")


def test_explain_an_unknown_name_is_one_usage_line(capsys):
    assert cli.main(["explain", "retained-graf"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "retained-graph" in err   # a suggestion


def test_show_source_is_accepted_and_no_show_source_drops_the_line(project, capsys):
    assert cli.main(["check", "--isolated", "--show-source", "train.py"]) == 1
    shown = capsys.readouterr().out
    assert "history.append(loss)" in shown and "^" in shown
    assert cli.main(["check", "--isolated", "--no-show-source", "train.py"]) == 1
    hidden = capsys.readouterr().out
    assert "TPF001" in hidden and "| " not in hidden


def test_help_names_the_new_options(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["check", "--help"])
    text = capsys.readouterr().out
    for option in ("--exit-zero", "--show-source", "--no-show-source", "gitlab", "junit"):
        assert option in text


# ---------------------------------------------------------------------------- vram-estimate

def test_vram_oom_is_not_the_usage_code(capsys):
    rc = vram_cli.main([str(VRAM / "oom_full_finetune.py"), "--gpu", "h100-sxm"])
    assert rc == vram_cli.EXIT_OOM == 6
    assert "verdict: OOM" in capsys.readouterr().out


def test_vram_bad_usage_and_bad_input_exit_2(capsys):
    assert vram_cli.main(["--no-such-flag"]) == 2
    assert vram_cli.main(["--model", "llama-3-8b", "--gpu", "a100-90gb"]) == 2
    assert vram_cli.main([str(VRAM / "malformed.py")]) == 2
    capsys.readouterr()


def test_vram_json_spelling(capsys):
    rc = vram_cli.main(["--model", "gpt2", "--gpu", "a100-80gb", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["verdict"] == "fits"


def test_vram_help_epilog_states_the_mapping():
    proc = subprocess.run([sys.executable, "-m", "vram_estimator.cli", "--help"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    text = " ".join(proc.stdout.split())
    assert "2 bad usage" in text and "6 oom" in text and "--json" in text


# ---------------------------------------------------------------------------- README

def test_readme_says_an_existing_select_list_must_name_tpf():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    configuration = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert "select =" in configuration and "add `TPF`" in configuration


def test_readme_and_vram_doc_state_the_new_exit_codes():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    vram = " ".join((ROOT / "docs" / "vram.md").read_text(encoding="utf-8").split())
    for text in (readme, vram):
        assert "2 bad usage" in text and "6 oom" in text
