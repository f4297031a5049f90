"""`tpf fix` and `tpf check -o` write safely: atomically, inside the tree, one line per
failure, in the file's own encoding; bad options and configs are one-line errors."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from flake8_torch_preflight import writing

LEAKY = textwrap.dedent('''\
    import torch
    import torch.nn.functional as F


    def train(model, loader, optimizer):
        torch.manual_seed(0)
        losses = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            losses.append(loss)
            loss.backward()
            optimizer.step()
        return losses
''')
FIXED_LINE = "losses.append(loss.detach())"


def run(args, cwd, stdin=None):
    kwargs = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, timeout=120, **kwargs)


def one_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# ---------------------------------------------------------------------------- atomic write

def test_atomic_write_keeps_the_mode_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("old\n")
    os.chmod(path, 0o751)
    writing.atomic_write(str(path), b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o751
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_atomic_write_failure_keeps_the_original(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_text("old\n")

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(writing.WriteProblem, match="No space left on device"):
        writing.atomic_write(str(path), b"new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_fix_writes_atomically_and_keeps_mode(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(LEAKY)
    os.chmod(path, 0o640)
    inode = os.stat(path).st_ino
    assert run(["fix", "--isolated", "train.py"], tmp_path).returncode == 0
    assert FIXED_LINE in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert os.stat(path).st_ino != inode            # a new file moved into place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


# ---------------------------------------------------------------------------- symlinks

def test_symlink_out_of_the_tree_is_not_followed(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text(LEAKY)
    tree = tmp_path / "project"
    tree.mkdir()
    (tree / "link.py").symlink_to(outside)
    (tree / "own.py").write_text(LEAKY)
    out = run(["fix", "--isolated", "."], tree)
    assert out.returncode == 1
    line = one_line(out.stderr.replace(b"tpf: fixed", b"").split(b"\n", 1)[0] + b"\n")
    assert line.startswith("tpf: error: ./link.py: not written: it is a symlink to ")
    assert outside.read_text() == LEAKY                   # untouched
    assert FIXED_LINE in (tree / "own.py").read_text()    # the run went on


def test_symlink_inside_the_tree_writes_the_target_and_keeps_the_link(tmp_path):
    (tmp_path / "real.py").write_text(LEAKY)
    (tmp_path / "alias.py").symlink_to("real.py")
    assert run(["fix", "--isolated", "alias.py"], tmp_path).returncode == 0
    assert (tmp_path / "alias.py").is_symlink()
    assert FIXED_LINE in (tmp_path / "real.py").read_text()


# ---------------------------------------------------------------------------- unwritable

def test_read_only_file_is_one_line_and_the_run_goes_on(tmp_path):
    (tmp_path / "a_locked.py").write_text(LEAKY)
    os.chmod(tmp_path / "a_locked.py", 0o444)
    (tmp_path / "b_open.py").write_text(LEAKY)
    out = run(["fix", "--isolated", "."], tmp_path)
    assert out.returncode == 1
    errors = [x for x in out.stderr.decode().splitlines() if x.startswith("tpf: error")]
    assert errors == ["tpf: error: ./a_locked.py: cannot write: the file is read-only"]
    assert (tmp_path / "a_locked.py").read_text() == LEAKY
    assert FIXED_LINE in (tmp_path / "b_open.py").read_text()
    assert "Traceback" not in out.stderr.decode()


# ---------------------------------------------------------------------------- encodings

def test_fix_stdin_keeps_latin1_and_counts_the_fix(tmp_path):
    source = ("# -*- coding: latin-1 -*-\n# entraîné\n" + LEAKY).encode("latin-1")
    out = run(["fix", "--isolated", "--stdin-display-name", "t.py", "-"], tmp_path, stdin=source)
    assert out.returncode == 0
    assert out.stdout == source.replace(b"losses.append(loss)", FIXED_LINE.encode())
    assert b"tpf: fixed 1 of 1 finding with an autofix in 1 of 1 file" in out.stderr


@pytest.mark.parametrize("prefix, encoding", [(b"\xef\xbb\xbf", "utf-8"),
                                              (b"# coding: latin-1\n", "latin-1")])
def test_fix_keeps_bom_and_encoding_on_disk(tmp_path, prefix, encoding):
    path = tmp_path / "train.py"
    body = ("# modèle\n" + LEAKY.replace("\n", "\r\n")).encode(encoding)
    path.write_bytes(prefix + body)
    assert run(["fix", "--isolated", "train.py"], tmp_path).returncode == 0
    assert path.read_bytes() == prefix + body.replace(b"losses.append(loss)", FIXED_LINE.encode())


# ---------------------------------------------------------------------------- -o

def test_output_file_never_overwrites_an_input(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    out = run(["check", "--isolated", "-o", "train.py", "train.py"], tmp_path)
    assert out.returncode == 2
    assert one_line(out.stderr) == ("tpf: error: train.py: is one of the files being checked; "
                                    "the report would overwrite it")
    assert (tmp_path / "train.py").read_text() == LEAKY
    out = run(["check", "--isolated", "-o", "./train.py", "."], tmp_path)
    assert out.returncode == 2 and (tmp_path / "train.py").read_text() == LEAKY


@pytest.mark.parametrize("target, needle", [
    ("missing/report.txt", "the folder missing does not exist"),
    (".", "is a folder, not a file"),
])
def test_output_file_bad_path_is_one_line(tmp_path, target, needle):
    (tmp_path / "train.py").write_text(LEAKY)
    out = run(["check", "--isolated", "-o", target, "train.py"], tmp_path)
    assert out.returncode == 2 and needle in one_line(out.stderr)


def test_output_file_is_written(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    out = run(["check", "--isolated", "--format", "json", "-o", "report.json", "train.py"], tmp_path)
    assert out.returncode == 1 and out.stdout == b""
    assert b'"TPF001"' in (tmp_path / "report.json").read_bytes()


# ---------------------------------------------------------------------------- options, config

@pytest.mark.parametrize("option", ["--select", "--ignore", "--extend-select", "--extend-ignore"])
def test_empty_code_list_is_an_error(tmp_path, option):
    (tmp_path / "train.py").write_text(LEAKY)
    out = run(["check", "--isolated", option, ",,,", "train.py"], tmp_path)
    assert out.returncode == 2
    assert "no rule codes in ',,,'" in one_line(out.stderr)


@pytest.mark.parametrize("body, needle", [
    ("[flake8]\nselect = TPF\nselect = E\n", "option 'select' in section 'flake8' already exists"),
    ("[flake8]\nmax-line-length = abc\n", "invalid literal for int()"),
    ("[flake8]\nignore = TPF-1\n", "'TPF-1'"),
    ("[flake8]\ndisable-noqa = maybe\n", "Not a boolean"),
    ("[flake8]\nper-file-ignores = train.py\n", "per-file-ignores"),
])
def test_config_flake8_rejects_is_an_error(tmp_path, body, needle):
    (tmp_path / "train.py").write_text(LEAKY)
    (tmp_path / "setup.cfg").write_text(body)
    out = run(["check", "train.py"], tmp_path)
    assert out.returncode == 2
    assert needle in one_line(out.stderr)
    flake8 = subprocess.run([sys.executable, "-m", "flake8", "train.py"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert flake8.returncode != 0     # flake8 rejects the same file


def test_config_flake8_ignores_is_ignored_here_too(tmp_path):
    """A candidate with no section header is skipped by flake8's discovery (with a warning):
    the next candidate counts, exactly as under flake8."""
    (tmp_path / "train.py").write_text(LEAKY)
    (tmp_path / "setup.cfg").write_text("select = TPF\n[flake8]\n")
    (tmp_path / "tox.ini").write_text("[flake8]\nextend-ignore = TPF001\n")
    out = run(["check", "train.py"], tmp_path)
    assert out.returncode == 0, out.stderr
