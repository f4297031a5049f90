"""The progress line: on a terminal only, never in CI or with -q; -q and -v."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import pytest

from flake8_torch_preflight import progress

TRAIN = textwrap.dedent('''\
    import torch


    def train(model, loader, optimizer, criterion):
        torch.manual_seed(0)
        history = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            history.append(loss)
            loss.backward()
            optimizer.step()
        return history
''')


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_line_appears_after_a_moment_and_is_erased():
    stream, clock = FakeTTY(), Clock()
    bar = progress.Progress(3, stream, clock=clock)
    bar.advance(2)
    assert stream.getvalue() == ""                   # a quick run prints nothing
    clock.now = 1.0
    bar.advance(1)
    assert stream.getvalue().endswith("tpf: 2/3 files, 3 findings")
    clock.now = 1.01
    bar.advance(0)                                   # redraws are throttled
    assert "3/3" not in stream.getvalue()
    bar.close()
    assert stream.getvalue().endswith("\r\033[K")


@pytest.mark.parametrize("env, quiet, tty, shown", [
    ({}, 0, True, True),
    ({"CI": "true"}, 0, True, False),
    ({"CI": "1"}, 0, True, False),
    ({"CI": "false"}, 0, True, True),
    ({}, 1, True, False),
    ({}, 0, False, False),
])
def test_wanted(monkeypatch, env, quiet, tty, shown):
    monkeypatch.delenv("CI", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stream = FakeTTY() if tty else io.StringIO()
    assert progress.wanted(stream, quiet) is shown


def _project(tmp_path, count=3):
    for i in range(count):
        (tmp_path / f"train{i}.py").write_text(TRAIN)
    return tmp_path


def run(args, cwd, **env):
    full = {k: v for k, v in os.environ.items() if k != "CI"}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=full)


def test_not_a_tty_prints_nothing_extra(tmp_path):
    out = run(["check", "--isolated", "."], _project(tmp_path))
    assert out.stderr == ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_on_a_terminal_the_line_is_drawn_on_stderr(tmp_path):
    _project(tmp_path, 40)
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # a slow clock start: make the delay zero so even a short run draws the line
    code = ("import flake8_torch_preflight.progress as p; p._DELAY = 0; p._INTERVAL = 0; "
            "from flake8_torch_preflight.cli import main; raise SystemExit(main())")
    proc = subprocess.run([sys.executable, "-c", code, "check", "--isolated", "-j", "1", "."],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    drawn = b"".join(chunks).decode()
    assert proc.returncode == 1
    assert "tpf: 40/40 files, 40 findings" in drawn
    assert drawn.endswith("\r\033[K")                # erased before the report is read
    assert b"tpf:" not in proc.stdout.splitlines()[0]
    ci = subprocess.run([sys.executable, "-c", code, "check", "--isolated", "-j", "1", "."],
                        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        env={**env, "CI": "true"}, timeout=120)
    assert ci.stderr == b""


def test_quiet_and_verbose(tmp_path):
    _project(tmp_path, 2)
    quiet = run(["check", "--isolated", "-q", "."], tmp_path)
    assert quiet.stdout.splitlines() == [
        f"./train{i}.py:10:9: TPF001 [warning] `history` keeps each iteration's autograd graph "
        f"nodes alive" for i in range(2)]
    silent = run(["check", "--isolated", "-qq", "."], tmp_path)
    assert silent.stdout == "" and silent.returncode == 1
    verbose = run(["check", "--isolated", "-v", "-j", "1", "."], tmp_path)
    assert "tpf: checked ./train0.py: 1 finding(s)" in verbose.stderr
    assert "tpf: 2 file(s) in " in verbose.stderr
    fix_quiet = run(["fix", "--isolated", "-q", "."], tmp_path)
    assert fix_quiet.stderr == "" and fix_quiet.returncode == 0
