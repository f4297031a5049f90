"""`tpf fix --diff` output is a patch `git apply` and `patch -p1` accept."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

LEAKY = textwrap.dedent('''\
    import torch
    import torch.nn.functional as F


    def train(model, loader, optimizer):
        torch.manual_seed(0)
        losses = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss)''')     # the fixed line is the last one, with no newline


def tpf(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, timeout=120)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY + "\n")
    (tmp_path / "exp #1").mkdir()
    (tmp_path / "exp #1" / "no_newline.py").write_text(LEAKY)
    (tmp_path / "latin.py").write_bytes(("# coding: latin-1\n# modèle\n" + LEAKY + "\n")
                                        .encode("latin-1"))
    return tmp_path


def _diff(tree):
    result = tpf(["fix", "--isolated", "--diff", "."], tree)
    assert result.returncode == 1, result.stderr
    assert b"a/./" not in result.stdout
    (tree.parent / "fix.patch").write_bytes(result.stdout)
    return result.stdout


def _fixed(tree):
    assert b"losses.append(loss.detach())" in (tree / "train.py").read_bytes()
    assert (tree / "exp #1" / "no_newline.py").read_text().endswith("losses.append(loss.detach())")
    latin = (tree / "latin.py").read_bytes()
    assert b"losses.append(loss.detach())" in latin and "modèle".encode("latin-1") in latin


def test_headers_are_a_and_b_relative_paths(tree):
    diff = _diff(tree)
    assert b"--- a/train.py\n+++ b/train.py\n" in diff
    assert b"--- a/exp #1/no_newline.py\t\n" in diff
    assert b"\\ No newline at end of file\n" in diff


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_apply_accepts_it(tree):
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    _diff(tree)
    subprocess.run(["git", "apply", "--check", str(tree.parent / "fix.patch")], cwd=tree,
                   check=True)
    subprocess.run(["git", "apply", str(tree.parent / "fix.patch")], cwd=tree, check=True)
    _fixed(tree)
    assert tpf(["fix", "--isolated", "--diff", "."], tree).returncode == 0


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch")
def test_patch_p1_accepts_it(tree):
    _diff(tree)
    with open(tree.parent / "fix.patch", "rb") as handle:
        subprocess.run(["patch", "-p1", "--batch", "--quiet"], cwd=tree, stdin=handle, check=True)
    _fixed(tree)
