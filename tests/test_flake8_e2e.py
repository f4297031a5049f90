"""The real `flake8` executable, with the plugin found through its entry point."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

LEAKY = textwrap.dedent(
    """\
    import torch


    def train(model, loader, optimizer, criterion):
        losses = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            losses.append(loss)
            loss.backward()
            optimizer.step()
        return losses
    """
)


def flake8(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "flake8", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    return tmp_path


def test_plugin_is_registered(tmp_path):
    out = flake8("--version", cwd=tmp_path).stdout
    assert "flake8-torch-preflight" in out


def test_reports_with_evidence_and_fix(project):
    out = flake8("--isolated", "--select", "TPF", "train.py", cwd=project).stdout
    assert "train.py:9:9: TPF001 [warning]" in out
    assert "fix: store `loss.detach()`" in out


def test_noqa_with_code_silences_only_that_code(project):
    src = LEAKY.replace("losses.append(loss)", "losses.append(loss)  # noqa: TPF001")
    (project / "train.py").write_text(src)
    assert flake8("--isolated", "--select", "TPF", "train.py", cwd=project).stdout == ""
    other = LEAKY.replace("losses.append(loss)", "losses.append(loss)  # noqa: TPF003")
    (project / "train.py").write_text(other)
    assert "TPF001" in flake8("--isolated", "--select", "TPF", "train.py", cwd=project).stdout


def test_extend_ignore_and_per_file_ignores_from_config(project):
    (project / "setup.cfg").write_text("[flake8]\nselect = TPF\nextend-ignore = TPF001\n")
    assert flake8("train.py", cwd=project).stdout == ""
    (project / "setup.cfg").write_text("[flake8]\nselect = TPF\nper-file-ignores =\n    train.py:TPF001\n")
    assert flake8("train.py", cwd=project).stdout == ""


def test_skip_file_comment(project):
    (project / "train.py").write_text("# tpf: skip-file\n" + LEAKY)
    assert flake8("--isolated", "--select", "TPF", "train.py", cwd=project).stdout == ""


def test_parallel_jobs_match_serial(project):
    for i in range(4):
        (project / f"copy{i}.py").write_text(LEAKY)
    serial = flake8("--isolated", "--select", "TPF", "-j", "1", ".", cwd=project).stdout
    parallel = flake8("--isolated", "--select", "TPF", "-j", "2", ".", cwd=project).stdout
    assert serial and sorted(serial.splitlines()) == sorted(parallel.splitlines())


def test_syntax_error_file_does_not_crash(project):
    (project / "broken.py").write_text("import torch\nfor x in loader\n    pass\n")
    proc = flake8("--isolated", "--select", "TPF,E999", "broken.py", cwd=project)
    assert "E999" in proc.stdout


# ---------------------------------------------------------------------------- notes are opt-in

# A correct script whose only finding is a note (TPF011: nothing is seeded).
NOTED = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """
)


@pytest.fixture
def noted(tmp_path):
    (tmp_path / "script.py").write_text(NOTED)
    (tmp_path / "train.py").write_text(LEAKY)
    return tmp_path


def test_notes_are_hidden_by_default(noted):
    out = flake8("--isolated", "--select", "TPF", ".", cwd=noted).stdout
    assert "TPF001 [warning]" in out
    assert "[note]" not in out


def test_notes_come_back_with_the_option(noted):
    out = flake8("--isolated", "--select", "TPF", "--tpf-notes", ".", cwd=noted).stdout
    assert "script.py:9:1: TPF011 [note]" in out and "TPF001 [warning]" in out


def test_notes_come_back_with_the_config_key(noted):
    (noted / "setup.cfg").write_text("[flake8]\nselect = TPF\ntpf-notes = true\n")
    assert "TPF011 [note]" in flake8(".", cwd=noted).stdout
    (noted / "setup.cfg").write_text("[flake8]\nselect = TPF\ntpf-notes = false\n")
    assert "[note]" not in flake8(".", cwd=noted).stdout


def test_notes_with_parallel_jobs(noted):
    for i in range(3):
        (noted / f"copy{i}.py").write_text(NOTED)
    out = flake8("--isolated", "--select", "TPF", "--tpf-notes", "-j", "2", ".", cwd=noted).stdout
    assert out.count("TPF011 [note]") == 4


def test_tpf_check_notes_switch_is_the_same(noted):
    def tpf(*args):
        return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", "check", *args, "."],
                              cwd=noted, capture_output=True, text=True, timeout=120).stdout

    assert "[note]" not in tpf("--isolated")
    assert "script.py:9:1: TPF011 [note]" in tpf("--isolated", "--notes")
    (noted / "setup.cfg").write_text("[flake8]\ntpf-notes = true\n")
    assert "TPF011 [note]" in tpf()
