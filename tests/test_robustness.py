"""Bad input, faults and misuse of `tpf`, the flake8 plugin and `vram-estimate` (issue 24):
one clear line and a distinct exit code, never a traceback, and the rest of the work done."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cli import TRAIN

FIXABLE = TRAIN.format(comment="")          # TPF001 on line 12, fixable
FIXED = "history.append(loss.detach())"


def tpf(args, cwd, **kwargs):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, **kwargs)


def flake8(args, cwd):
    return subprocess.run([sys.executable, "-m", "flake8", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def one_line(text: str) -> str:
    assert "Traceback" not in text, text
    lines = [line for line in text.strip().splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ---------------------------------------------------------------------------- 1. dangling symlink

@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_fix_skips_a_dangling_symlink_in_one_line_and_fixes_the_rest(tmp_path, jobs):
    (tmp_path / "a.py").write_text(FIXABLE)
    os.symlink("nowhere.py", tmp_path / "b.py")
    (tmp_path / "c.py").write_text(FIXABLE)
    result = tpf(["fix", "--isolated", "-q", "-j", jobs, "."], tmp_path)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "b.py" in line and "cannot read" in line
    assert FIXED in (tmp_path / "a.py").read_text()
    assert FIXED in (tmp_path / "c.py").read_text()
    assert os.path.islink(tmp_path / "b.py") and not (tmp_path / "nowhere.py").exists()


# ---------------------------------------------------------------------------- 2. killed by its pid

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
F_SETPIPE_SZ = 1031   # fcntl.F_SETPIPE_SZ, named there from Python 3.10 only


def _parents() -> dict:
    """pid -> parent pid of every live (not zombie) process, from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            out[int(entry)] = int(fields[1])
    return out


def _descendants(pid: int) -> set:
    parents, found, todo = _parents(), set(), [pid]
    while todo:
        current = todo.pop()
        for child, parent in parents.items():
            if parent == current and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _poll(condition, seconds: float) -> bool:
    """True as soon as `condition()` is; False after `seconds` (a bound, never a budget)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _drain(fd: int):
    """A thread reading `fd` to its end (EOF: every process holding the pipe is gone)."""
    import threading

    def read() -> None:
        while os.read(fd, 65536):
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _kill_tree(proc, sig: int, workers_started) -> None:
    """Wait for `proc`'s workers, send `sig` to it alone; then every pipe it held
    reaches EOF and every worker is gone. Whatever happens, nothing is left running."""
    workers: set = set()
    readers: list = []
    try:
        assert _poll(lambda: bool(workers_started()), 180), "no worker processes started"
        workers = _descendants(proc.pid)
        os.kill(proc.pid, sig)
        readers = [_drain(proc.stdout.fileno()), _drain(proc.stderr_read)]
        for reader in readers:
            reader.join(90)
        assert not any(reader.is_alive() for reader in readers), \
            "a pipe of the killed process is still held open"
        assert _poll(lambda: not (workers & set(_parents())), 90), "workers outlived it"
        proc.wait(90)
    finally:
        for pid in workers | _descendants(proc.pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for reader in readers:   # every writer is gone now: they reach EOF
            reader.join(30)
        if not any(reader.is_alive() for reader in readers):   # never close under a reader
            proc.stdout.close()
            os.close(proc.stderr_read)


def _start(args, cwd):
    """A process whose stderr is a pipe of one page that nobody reads until it is killed, so
    a `-v` run blocks on its own progress lines with its workers alive: no race."""
    import fcntl
    import subprocess as sp

    read, write = os.pipe()
    fcntl.fcntl(write, F_SETPIPE_SZ, 4096)
    proc = sp.Popen([sys.executable, *args], cwd=cwd, stdout=sp.PIPE, stderr=write,
                    stdin=sp.DEVNULL)
    os.close(write)
    proc.stderr_read = read
    return proc


@linux_only
@pytest.mark.parametrize("sig", [9, 15])
def test_check_workers_never_outlive_tpf(tmp_path, sig):
    for number in range(300):
        (tmp_path / f"module_{number:03d}.py").write_text(FIXABLE)
    proc = _start(["-m", "flake8_torch_preflight", "check", "--isolated", "--no-cache",
                   "-v", "-j", "2", "."], tmp_path)
    _kill_tree(proc, sig, lambda: len(_descendants(proc.pid)) >= 2)
    assert proc.returncode in (-sig, 128 + sig)


POOL_SCRIPT = """
import time
from flake8_torch_preflight import workers
with workers.worker_pool(2) as pool:
    for future in [pool.submit(time.sleep, 600) for _ in range(2)]:
        future.result()
"""


@linux_only
@pytest.mark.parametrize("sig", [9, 15])
def test_pool_workers_busy_in_a_task_never_outlive_their_parent(tmp_path, sig):
    proc = _start(["-c", POOL_SCRIPT], tmp_path)
    _kill_tree(proc, sig, lambda: len(_descendants(proc.pid)) >= 2)


def test_check_and_fix_run_their_workers_in_the_bound_pool(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import contextmanager

    from flake8_torch_preflight import cli, workers

    used = []

    @contextmanager
    def pool(count):
        used.append(count)
        with ThreadPoolExecutor(count) as executor:
            yield executor

    monkeypatch.setattr(workers, "worker_pool", pool)
    for number in range(3):
        (tmp_path / f"m{number}.py").write_text(FIXABLE)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "--isolated", "--no-cache", "-q", "-j", "2", "."]) == 1
    assert cli.main(["fix", "--isolated", "-q", "-j", "2", "."]) == 0
    assert used == [2, 2]


# ---------------------------------------------------------------------------- 3. baselines

def _recorded(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(FIXABLE)
    first = tpf(["check", "--isolated", "--baseline", "base.json", "."], tmp_path)
    assert first.returncode == 0, first.stderr
    return json.loads((tmp_path / "base.json").read_text())


def test_a_baseline_nested_too_deep_is_one_line_exit_2(tmp_path):
    (tmp_path / "train.py").write_text(FIXABLE)
    depth = 100_000
    (tmp_path / "base.json").write_text('{"format": 1, "findings": ' + "[" * depth
                                        + "]" * depth + "}")
    result = tpf(["check", "--isolated", "--baseline", "base.json", "."], tmp_path)
    assert result.returncode == 2
    assert "base.json" in one_line(result.stderr)


@pytest.mark.parametrize("spelling", ["./pkg/train.py", "absolute", "pkg\\train.py",
                                      "pkg/./train.py", ".\\pkg\\train.py"])
def test_baseline_paths_are_normalised_before_matching(tmp_path, spelling):
    data = _recorded(tmp_path)
    path = str(tmp_path / "pkg" / "train.py") if spelling == "absolute" else spelling
    data["findings"][0]["path"] = path
    (tmp_path / "base.json").write_text(json.dumps(data))
    result = tpf(["check", "--isolated", "--baseline", "base.json", "."], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 known finding" in result.stdout
    assert result.stderr == ""


def test_baseline_entries_naming_no_file_are_said_in_one_line(tmp_path):
    data = _recorded(tmp_path)
    stale = dict(data["findings"][0], path="gone/old.py", fingerprint="0" * 24)
    data["findings"] += [stale, dict(stale, fingerprint="1" * 24)]
    (tmp_path / "base.json").write_text(json.dumps(data))
    result = tpf(["check", "--isolated", "--baseline", "base.json", "pkg"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    line = one_line(result.stderr)
    assert "2 entries" in line and "gone/old.py" in line and "no file" in line
    assert tpf(["check", "--isolated", "-q", "--baseline", "base.json", "pkg"],
               tmp_path).stderr == ""


def test_a_baseline_with_a_byte_order_mark_is_read(tmp_path):
    data = _recorded(tmp_path)
    (tmp_path / "base.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode("utf-8"))
    result = tpf(["check", "--isolated", "--baseline", "base.json", "."], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 known finding" in result.stdout


# ---------------------------------------------------------------------------- 4. option values

@pytest.mark.parametrize("setting", ["tpf-cache = maybe", "tpf-notes = 2", "tpf-no-cache = sure"])
def test_a_bad_option_value_is_one_line_under_flake8_and_tpf(tmp_path, setting):
    (tmp_path / "train.py").write_text(FIXABLE)
    (tmp_path / "setup.cfg").write_text(f"[flake8]\n{setting}\n")
    key, value = (part.strip() for part in setting.split("="))
    result = flake8(["train.py"], tmp_path)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text
    assert any(key in line and value in line for line in text.splitlines()), text
    mine = tpf(["check", "train.py"], tmp_path)
    assert mine.returncode == 2
    line = one_line(mine.stderr)
    assert key in line and value in line


NOTE_SOURCE = (Path(__file__).resolve().parent.parent / "fixtures" / "fixes"
               / "tpf013_pin_memory.py").read_text()


@pytest.mark.parametrize("setting, notes, cached", [
    ("tpf-notes = true\ntpf-cache = false", True, False),
    ("tpf-notes = off\ntpf-cache = yes", False, True),
    ("tpf-notes = 1\ntpf-no-cache = 1", True, False),
    ("", False, True),
])
def test_good_option_values_still_work_in_the_file(tmp_path, setting, notes, cached):
    from flake8_torch_preflight.plugin import TorchPreflightChecker, cache_wanted, notes_wanted
    from flake8.options.parse_args import parse_args

    (tmp_path / "setup.cfg").write_text(f"[flake8]\n{setting}\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        _, options = parse_args([])
    finally:
        os.chdir(cwd)
        TorchPreflightChecker.show_notes = False
    assert notes_wanted(options) is notes and cache_wanted(options) is cached


def test_the_command_line_flags_still_work(tmp_path):
    (tmp_path / "train.py").write_text(NOTE_SOURCE)
    quiet = flake8(["--isolated", "--select", "TPF", "train.py"], tmp_path)
    noted = flake8(["--isolated", "--select", "TPF", "--tpf-notes", "--tpf-no-cache", "train.py"],
                   tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert noted.returncode == 1 and "TPF" in noted.stdout, noted.stdout + noted.stderr


# ---------------------------------------------------------------------------- 5. other kernels

def _julia_notebook(path: Path) -> Path:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "julia-1.9", "language": "julia", "display_name": "J"}
    nb.cells.append(nbformat.v4.new_code_cell("using Flux\nx = rand(3)"))
    nbformat.write(nb, str(path))
    return path


def test_a_notebook_in_another_language_is_not_checked_and_says_so(tmp_path):
    _julia_notebook(tmp_path / "flux.ipynb")
    (tmp_path / "train.py").write_text(FIXABLE.replace("history.append(loss)",
                                                       "history.append(loss.item())"))
    text = tpf(["check", "--isolated", "."], tmp_path)
    assert text.returncode == 1
    line = one_line(text.stderr)
    assert "flux.ipynb" in line and "not a Python notebook" in line and "julia" in line
    assert "1 file could not be checked" in text.stdout
    data = json.loads(tpf(["check", "--isolated", "--format", "json", "."], tmp_path).stdout)
    assert [e["path"] for e in data["errors"]] == ["./flux.ipynb"]
    assert "not a Python notebook" in data["errors"][0]["message"]
    fixed = tpf(["fix", "--isolated", "flux.ipynb"], tmp_path)
    assert fixed.returncode == 1 and "not a Python notebook" in fixed.stderr


# ---------------------------------------------------------------------------- 6. notebook installs

EVAL = ("import torch.nn as nn\n\n\ndef evaluate(model: nn.Module, loader):\n"
        "    model.eval()\n    correct = 0\n    for images, labels in loader:\n"
        "        logits = model(images)\n"
        "        correct += (logits.argmax(dim=1) == labels).sum().item()\n"
        "    return correct\n")


@pytest.mark.parametrize("installs", ["!pip install -q torch\n",
                                      "%pip install -q torch\n%matplotlib inline\n",
                                      "import os\n!pip install -q torch\n\n"])
def test_an_added_import_goes_after_the_installs(tmp_path, installs):
    from test_notebooks import make_notebook

    path = make_notebook(tmp_path / "eval.ipynb", installs + EVAL)
    result = tpf(["fix", "--isolated", "eval.ipynb"], tmp_path)
    assert result.returncode == 0 and "fixed TPF002" in result.stderr, result.stderr
    cells = json.loads(path.read_text())["cells"]
    lines = "".join([c for c in cells if c["cell_type"] == "code"][0]["source"]).splitlines()
    added = lines.index("import torch")
    install = max(i for i, line in enumerate(lines) if line.startswith(("!", "%")))
    assert added > install, lines
    assert lines[added + 1] == "import torch.nn as nn", lines


# ---------------------------------------------------------------------------- 7. repeated keys

def test_a_key_repeated_with_another_value_is_a_bad_comment():
    from vram_estimator.reading.config_comments import parse_comment

    values, errors = parse_comment("# vram: model=gpt2 model=llama-2-70b batch=2", 4)
    assert "model" not in values and "params" not in values and values["batch"].value == 2
    assert len(errors) == 1
    assert "model" in errors[0].message and "gpt2" in errors[0].message \
        and "llama-2-70b" in errors[0].message
    values, errors = parse_comment("# vram: gpu=a100-80gb device=h100-sxm", 1)
    assert errors and "gpu" not in values
    values, errors = parse_comment("# vram: batch=8 batch=8 seq=2k seq=2048", 1)
    assert errors == [] and values["batch"].value == 8 and values["seq"].value == 2048


def test_a_repeated_key_is_tpf102_in_flake8_and_bad_input_in_vram_estimate(tmp_path):
    from vram_estimator import cli as vram_cli

    (tmp_path / "train.py").write_text("import torch\n# vram: model=gpt2 model=llama-2-70b\n")
    result = flake8(["--isolated", "--select", "TPF102", "train.py"], tmp_path)
    assert "train.py:2:1: TPF102" in result.stdout and "model" in result.stdout, result.stdout
    estimate = subprocess.run([sys.executable, "-m", "vram_estimator.cli", "train.py"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert estimate.returncode == vram_cli.EXIT_BAD_INPUT, estimate.stdout + estimate.stderr
    assert "Traceback" not in estimate.stderr
    assert "llama-2-70b" in estimate.stdout + estimate.stderr


# ---------------------------------------------------------------------------- 8. odd file names

@pytest.mark.skipif(shutil.which("git") is None or os.name == "nt",
                    reason="needs git and names with tabs")
def test_diff_quotes_names_as_git_does_so_git_apply_takes_every_file(tmp_path):
    names = ["plain.py", "tab\there.py", "new\nline.py", 'quote"d.py', "back\\slash.py",
             "modèle.py", "with space.py"]
    for name in names:
        (tmp_path / name).write_text(FIXABLE)
    diff = tpf(["fix", "--isolated", "--diff", "."], tmp_path)
    assert diff.returncode == 1, diff.stderr
    assert '--- "a/tab\\there.py"' in diff.stdout and '+++ "b/new\\nline.py"' in diff.stdout
    patch = tmp_path.parent / "fix.patch"
    patch.write_text(diff.stdout)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=60)
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=tmp_path, check=True,
                   timeout=60)
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True, timeout=60)
    for name in names:
        assert FIXED in (tmp_path / name).read_text(), name


def test_diff_names_git_would_not_quote_stay_as_they_are():
    from flake8_torch_preflight.cli import quoted_diff_name

    assert quoted_diff_name("a/pkg/train.py") == "a/pkg/train.py"
    assert quoted_diff_name("a/exp #1/x.py") == "a/exp #1/x.py"
    assert quoted_diff_name("a/t\tb.py") == '"a/t\\tb.py"'
    assert quoted_diff_name("a/é.py") == '"a/\\303\\251.py"'
    assert quoted_diff_name('a/q"\\.py') == '"a/q\\"\\\\.py"'


# ---------------------------------------------------------------------------- 9. huge literals

def _max_rss_kib(cwd: Path, *args: str) -> int:
    """The peak memory of one `tpf` command, measured in a fresh interpreter."""
    script = textwrap.dedent(f"""\
        import resource, sys
        from flake8_torch_preflight import cli
        rc = cli.main({list(args)!r})
        print(rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def _check_rss(cwd: Path, name: str) -> int:
    return _max_rss_kib(cwd, "check", "--isolated", "--no-cache", "-q", "--format", "json",
                        "-o", "out.json", name)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_a_huge_literal_costs_memory_in_proportion_to_the_file_not_its_tree(tmp_path):
    elements = ", ".join(f"{i * 0.001:.6f}" for i in range(200_000))
    big = tmp_path / "big.py"
    big.write_text(FIXABLE + "\nDATA = [" + elements + "]\n\nWEIGHTS = {\n"
                   + "".join(f"    'w{i}': ({i}, {i + 1}),\n" for i in range(40_000)) + "}\n"
                   + FIXABLE.split("\n\n\n")[1].replace("def train", "def train2"))
    (tmp_path / "small.py").write_text(FIXABLE)
    size_kib = big.stat().st_size // 1024
    small = _check_rss(tmp_path, "small.py")
    assert _check_rss(tmp_path, "big.py") - small < 20 * size_kib    # it was 111x
    # the code around the literals is still checked, at its own lines and columns
    places = sorted((f["line"], f["column"], f["code"])
                    for f in json.loads((tmp_path / "out.json").read_text())["findings"])
    lines = big.read_text().splitlines()
    expected = [(number, 9, "TPF001") for number, line in enumerate(lines, 1)
                if line.strip() == "history.append(loss)"]
    assert len(expected) == 2 and places == expected, places
    # and fixed, within a bound of the same kind (LibCST reads each line of a statement no
    # fix touches as one placeholder comment: 40,000 lines of WEIGHTS cost about 80 MB)
    assert _max_rss_kib(tmp_path, "fix", "--isolated", "-q", "big.py") - small < 30 * size_kib
    assert big.read_text().count(FIXED) == 2


def test_only_displays_of_constants_are_left_out_and_positions_stay():
    from flake8_torch_preflight import literals

    many = ", ".join(str(i) for i in range(20_000))
    pairs = ",\n".join(f"    ({i}, 'x{i}')" for i in range(8_000))
    source = (f"A = [{many}]; b = 1\nB = f({many})\nC = x[{many}]\nD = [{many}, name]\n"
              f"E = {{\n{pairs}\n}}.keys()\nF = 2\n")
    padded = source + "#" * literals.MIN_SOURCE + "\n"
    out = literals.elide_huge_literals(padded)
    small = f"A = [{many}]\n"
    assert len(small) < literals.MIN_SOURCE and literals.elide_huge_literals(small) is small
    lines, new = padded.splitlines(), out.splitlines()
    assert len(new) == len(lines)
    assert new[0] == "A = (" + literals.PLACEHOLDER.ljust(len(many)) + "); b = 1"
    assert new[1:4] == lines[1:4]                                      # call, subscript, name
    assert new[4] == "E = (" + literals.PLACEHOLDER and new[5:-3] == [""] * 8_000
    assert new[-3] == "}.keys()".replace("}", ")") and new[-2:] == lines[-2:]
    tree = __import__("ast").parse(out)
    assert [node.lineno for node in tree.body] == [1, 1, 2, 3, 4, 5, 8_007]


def test_a_syntax_error_next_to_a_huge_literal_is_still_one():
    from flake8_torch_preflight import literals
    from flake8_torch_preflight.checking import FileProblem, parse_source

    many = ", ".join(str(i) for i in range(60_000))
    for broken in (f"A = [{many}]\nB = (\n", f"A = [{many} 7]\n", f"A = [{many}, 0777]\n"):
        assert len(broken) >= literals.MIN_SOURCE
        with pytest.raises(FileProblem):
            parse_source(broken, "big.py")
