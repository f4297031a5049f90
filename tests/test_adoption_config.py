"""Configuration mistakes said, never swallowed (issue 21): an unknown code in a config
file is exit 2 as on the command line; a config file tpf cannot read is one line naming it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from test_cli import TRAIN


def run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(comment=""))
    return tmp_path


@pytest.mark.parametrize("line, needle", [
    ("select = TFP", "unknown rule code 'TFP' in select"),
    ("extend-select = TPF099", "unknown rule code 'TPF099' in extend-select"),
    ("ignore = TPF1000", "'TPF1000'"),
    ("extend-ignore = TFP001", "unknown rule code 'TFP001' in extend-ignore"),
    ("per-file-ignores =\n    tests/*: TPF00X", "per-file-ignores (setup.cfg)"),
    ("per-file-ignores =\n    tests/*: TPP", "unknown rule code 'TPP' in per-file-ignores"),
])
def test_an_unknown_code_in_the_config_is_exit_2(project, line, needle):
    (project / "setup.cfg").write_text(f"[flake8]\n{line}\n")
    result = run(["check", "train.py"], project)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "setup.cfg" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["fix", "stats"])
def test_fix_and_stats_reject_it_too(project, command):
    (project / "setup.cfg").write_text("[flake8]\nselect = TFP\n")
    result = run([command, "train.py"], project)
    assert result.returncode == 2
    assert result.stderr.strip() == "tpf: error: unknown rule code 'TFP' in select " \
                                    "(setup.cfg); run `tpf rules` for ours"


def test_other_plugins_codes_are_accepted(project):
    (project / "setup.cfg").write_text("[flake8]\nselect = E,W,F,C90,TPF\n"
                                       "extend-ignore = E501,W503\n")
    result = run(["check", "train.py"], project)
    assert result.returncode == 1 and "TPF001" in result.stdout, result.stderr
    assert result.stderr == ""


def test_a_prefix_that_switches_off_many_rules_is_said(project):
    (project / "setup.cfg").write_text("[flake8]\nextend-ignore = TPF0\n")
    result = run(["check", "train.py"], project)
    assert result.returncode == 0
    assert "tpf: warning: extend-ignore = TPF0 in setup.cfg switches off 18 rules " \
           "(TPF001..TPF018)" in result.stderr


def test_a_select_without_any_tpf_rule_is_said(project):
    (project / "setup.cfg").write_text("[flake8]\nselect = E,W,F\n")
    result = run(["check", "train.py"], project)
    assert "tpf: warning: select in setup.cfg selects no TPF rule; tpf checks nothing" \
        in result.stderr


@pytest.mark.parametrize("make, needle", [
    (lambda p: (p.write_text("[flake8]\nselect = TPF002\n"), os.chmod(p, 0)),
     "cannot read it (Permission denied)"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"[flake8]\nselect = TPF002 \xff\xfe\n"),
     "not UTF-8 (byte 25)"),
    (lambda p: p.write_text("[flake8\nselect = TPF002\n"), "cannot parse it"),
])
def test_an_unreadable_config_file_is_one_line_naming_it(project, make, needle):
    if "Permission" in needle and os.geteuid() == 0:
        pytest.skip("root reads every file")
    make(project / "setup.cfg")
    result = run(["check", "train.py"], project)
    warnings = [line for line in result.stderr.splitlines() if "setup.cfg" in line]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("tpf: warning: ")
    assert needle in warnings[0] and "flake8 skips it" in warnings[0]
    assert result.returncode == 1 and "TPF001" in result.stdout   # flake8's behaviour kept


def test_an_explicit_config_that_cannot_be_read_is_exit_2(project):
    (project / "conf.ini").mkdir()
    result = run(["check", "--config", "conf.ini", "train.py"], project)
    assert result.returncode == 2
    assert result.stderr.strip() == "tpf: error: conf.ini: cannot read the configuration " \
                                    "(is a directory)"
