"""Writes that respect the user, only regular files read, `tpf fix -j` (issue 21)."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from flake8_torch_preflight import cli
from test_writing import FIXED_LINE, LEAKY


def run(args, cwd, umask=None, timeout=20):
    def set_umask():
        if umask is not None:
            os.umask(umask)
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=set_umask)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# ---------------------------------------------------------------------------- writes

@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_created_files_follow_the_umask(tmp_path, umask, expected):
    (tmp_path / "train.py").write_text(LEAKY)
    run(["check", "--isolated", "--baseline", "b.json", "-o", "report.txt", "."], tmp_path,
        umask=umask)
    assert mode(tmp_path / "b.json") == expected
    assert mode(tmp_path / "report.txt") == expected


def test_a_fixed_file_keeps_its_mode_whatever_the_umask(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    os.chmod(tmp_path / "train.py", 0o664)
    assert run(["fix", "--isolated", "train.py"], tmp_path, umask=0o077).returncode == 0
    assert mode(tmp_path / "train.py") == 0o664


def test_an_edit_made_while_fix_runs_is_kept(tmp_path, monkeypatch, capsys):
    path = tmp_path / "train.py"
    path.write_text(LEAKY)
    real_fix = cli._fix_python

    def fix_while_the_user_saves(name, data, settings, *options):
        outcome = real_fix(name, data, settings, *options)
        path.write_text(LEAKY + "# the user's edit\n")
        return outcome

    monkeypatch.setattr(cli, "_fix_python", fix_while_the_user_saves)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["fix", "--isolated", "train.py"]) == 1
    assert path.read_text() == LEAKY + "# the user's edit\n"
    err = capsys.readouterr().err
    assert "tpf: error: train.py: not written: the file changed on disk" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


@pytest.mark.parametrize("target, needle", [
    ("missing/report.txt", "missing/report.txt: the folder missing does not exist"),
    ("locked/report.txt", "locked/report.txt: cannot write: the folder locked is not writable"),
])
def test_an_unwritable_output_is_reported_before_the_run(tmp_path, target, needle):
    if target.startswith("locked") and os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    (tmp_path / "train.py").write_text(LEAKY)
    (tmp_path / "locked").mkdir(mode=0o555)
    result = run(["check", "--isolated", "-v", "-o", target, "."], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"tpf: error: {needle}"


def test_a_read_only_baseline_is_reported_before_the_run(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    assert run(["check", "--isolated", "--baseline", "b.json", "."], tmp_path).returncode == 0
    os.chmod(tmp_path / "b.json", 0o444)
    result = run(["check", "--isolated", "--baseline", "b.json", "--update-baseline", "-v", "."],
                 tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "tpf: error: b.json: cannot write: the file is read-only"


# ---------------------------------------------------------------------------- regular files

@pytest.fixture
def special_files(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    os.mkfifo(tmp_path / "pipe.py")
    os.mkfifo(tmp_path / "pipe.ipynb")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.py"))
    yield tmp_path
    server.close()


@pytest.mark.parametrize("command", ["check", "fix", "stats"])
def test_a_named_pipe_in_the_tree_never_hangs(special_files, command):
    result = run([command, "--isolated", "-v", "."], special_files, timeout=20)
    assert "Traceback" not in result.stderr
    assert "tpf: skipped ./pipe.py: not a regular file (a named pipe)" in result.stderr
    assert "tpf: skipped ./sock.py: not a regular file (a socket)" in result.stderr
    if command == "fix":
        assert FIXED_LINE in (special_files / "train.py").read_text()
    quiet = run([command, "--isolated", "."], special_files, timeout=20)
    assert "skipped" not in quiet.stderr


def test_a_named_pipe_named_on_the_command_line_is_one_line(special_files):
    result = run(["check", "--isolated", "pipe.py", "train.py"], special_files, timeout=20)
    assert result.returncode == 1
    assert "tpf: error: pipe.py: not a regular file (a named pipe)" in result.stderr


def test_a_named_pipe_as_setup_cfg_never_hangs(tmp_path):
    (tmp_path / "train.py").write_text(LEAKY)
    os.mkfifo(tmp_path / "setup.cfg")
    result = run(["check", "."], tmp_path, timeout=20)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("tpf: error: setup.cfg: not a regular file (a named pipe)")


# ---------------------------------------------------------------------------- fix -j

def test_fix_jobs_matches_one_job(tmp_path):
    for name in "abcd":
        (tmp_path / f"{name}.py").write_text(LEAKY)
    result = run(["fix", "--isolated", "-j", "2", "."], tmp_path)
    assert result.returncode == 0, result.stderr
    assert all(FIXED_LINE in (tmp_path / f"{n}.py").read_text() for n in "abcd")
    assert "tpf: fixed 4 of 4 findings with an autofix in 4 of 4 files" in result.stderr
    assert run(["fix", "--isolated", "-j", "0", "."], tmp_path).returncode == 2


# ---------------------------------------------------------------------------- fix memory

def test_libcst_parses_only_the_statements_a_fix_touches(monkeypatch):
    import libcst

    from flake8_torch_preflight.fixes import fix_source

    helper = "def helper_{0}(values):\n    return [v * 2 for v in values if v > {0}]\n\n\n"
    source = ("import torch\nimport torch.nn.functional as F\n\n\n" + "".join(helper.format(i) for i in range(200))
              + LEAKY.split("\n\n\n", 1)[1] + "\n\n" + "".join(helper.format(i) for i in range(200, 300)))
    parsed = []
    real_parse = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda text: parsed.append(text) or real_parse(text))
    result = fix_source(source, "big.py")
    assert [f.code for f in result.fixed] == ["TPF001"]
    assert result.source == source.replace("losses.append(loss)", FIXED_LINE)
    assert len(parsed) == 1 and parsed[0].count("# <tpf: elided line") == 600
    assert "def helper_" not in parsed[0]
