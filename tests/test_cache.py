"""The cache across runs (`cache.py`): a hit is what a miss computes; what a file read, changed,
invalidates it; concurrent writers and damaged entries are safe; it can be turned off."""
from __future__ import annotations

import ast
import json
import os
import pickle
import shlex
import shutil
import struct
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor

import pytest

from flake8_torch_preflight import cache, engine
from flake8_torch_preflight.analysis.project import resolution as project, workspace
from flake8_torch_preflight.analysis.topics import seeding

MODEL = '''
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        return {out}
'''

TRAIN = '''
import torch
import torch.nn as nn
from models import Net


def main(loader):
    model = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss)
    return losses
'''
SOFTMAX, RAW = "F.softmax(self.fc(x), dim=1)", "self.fc(x)"


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A project root (`pyproject.toml`) with a model file and a training script that
    imports it, alone in its parent folder; the user's cache folder (the key's) elsewhere in
    tmp; the cache on, and this process's memory of earlier runs forgotten."""
    root = tmp_path / "work" / "proj"
    root.mkdir(parents=True)
    monkeypatch.delenv(cache.ENV_DISABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "cache"))
    monkeypatch.chdir(root)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "models.py").write_text(MODEL.format(out=SOFTMAX))
    (root / "train.py").write_text(TRAIN)
    new_process()
    yield root
    new_process()


def new_process():
    """Forget what this process learnt, as a new run would start."""
    workspace.clear()
    for table in (project._FILES, project._ROOTS, project._MARKED, project._LOOKUPS, seeding._SUMMARIES):
        table.clear()
    for name in ("_DIGESTS", "_ANSWERS", "_READY", "_ROOT_OF", "_PRUNED", "_KEY"):
        getattr(cache, name, {}).clear()
    cache.set_enabled(True)


def lint(path):
    source = path.read_text()
    return engine.lint_file(ast.parse(source), str(path), source)


def described(findings):
    return [(f.line, f.col, f.message, f.plan and (f.plan.kind, ast.dump(f.plan.node)))
            for f in findings]


def no_analysis(monkeypatch):
    """Make any analysis fail loudly: what comes back can only be a hit."""
    def refuse(*args, **kwargs):
        raise AssertionError("analysed: not a cache hit")
    monkeypatch.setattr(engine, "lint_tree", refuse)


def entries(root):
    folder = root / cache.FOLDER_NAME / "findings"
    return sorted(folder.glob("*" + cache.ENTRY_SUFFIX)) if folder.is_dir() else []


def read(entry_path):
    """The JSON of an entry (its MAC line skipped)."""
    return json.loads(entry_path.read_bytes().partition(b"\n")[2])


def sign(entry_path, entry):
    """Write `entry` with a MAC under the user's real key (as if the key had leaked)."""
    entry_path.write_bytes(cache._seal(entry, cache._key()))


def codes(findings):
    return {f.code for f in findings}


def test_a_hit_returns_what_the_analysis_found_fix_plans_included(proj, monkeypatch):
    cold = lint(proj / "train.py")
    codes = sorted(f.code for f in cold)
    assert codes == ["TPF001", "TPF005"] and any(f.plan for f in cold)
    assert (proj / cache.FOLDER_NAME / ".gitignore").read_text().splitlines()[-1] == "*"
    new_process()
    with monkeypatch.context() as patched:
        no_analysis(patched)
        warm = lint(proj / "train.py")
    assert described(warm) == described(cold)
    assert all(w.plan is None or w.plan.node is not c.plan.node for w, c in zip(warm, cold))


def test_editing_an_imported_module_changes_the_importers_findings(proj, monkeypatch):
    assert "TPF005" in {f.code for f in lint(proj / "train.py")}
    new_process()
    (proj / "models.py").write_text(MODEL.format(out=RAW))
    assert "TPF005" not in {f.code for f in lint(proj / "train.py")}
    new_process()
    with monkeypatch.context() as patched:        # the new answer is kept in turn
        no_analysis(patched)
        assert "TPF005" not in {f.code for f in lint(proj / "train.py")}


def test_a_module_that_appears_where_a_lookup_found_nothing_invalidates(proj):
    (proj / "train.py").write_text(TRAIN.replace("from models import", "from nets import"))
    assert "TPF005" not in {f.code for f in lint(proj / "train.py")}
    new_process()
    (proj / "nets.py").write_text(MODEL.format(out=SOFTMAX))
    assert "TPF005" in {f.code for f in lint(proj / "train.py")}


def test_a_touched_file_with_the_same_content_still_hits(proj, monkeypatch):
    lint(proj / "train.py")
    new_process()
    os.utime(proj / "models.py", ns=(1, 1))
    with monkeypatch.context() as patched:
        no_analysis(patched)
        assert lint(proj / "train.py")


def test_damaged_and_foreign_entries_are_misses(proj):
    expected = described(lint(proj / "train.py"))
    (entry,) = [e for e in entries(proj) if e.stat().st_size > 100]
    good = entry.read_bytes()
    other_key = cache._seal(read(entry), b"k" * 32)        # another user's, another machine's
    for damaged in (good[: len(good) // 2], b"", b"not an entry", good + b" ", other_key,
                    pickle.dumps({"format": cache.FORMAT}), b"\n" + good.partition(b"\n")[2]):
        new_process()
        entry.write_bytes(damaged)
        assert described(lint(proj / "train.py")) == expected


GOOD_RECORD = [3, 4, "TPF001", "error", "what", "evidence", "fix",
               ["detach", [["body", 0], ["value", -1]], None]]
BAD_RECORDS = [
    42, "TPF001", [], GOOD_RECORD[:7], GOOD_RECORD + [None],
    [-1] + GOOD_RECORD[1:], [True] + GOOD_RECORD[1:], [3.0] + GOOD_RECORD[1:],
    [2 ** 40] + GOOD_RECORD[1:], [3, None] + GOOD_RECORD[2:],
    [3, 4, "E501"] + GOOD_RECORD[3:], [3, 4, "TPF0011"] + GOOD_RECORD[3:],
    [3, 4, "TPF\u0661\u0662\u0663"] + GOOD_RECORD[3:], [3, 4, ["TPF001"]] + GOOD_RECORD[3:],
    GOOD_RECORD[:3] + ["fatal"] + GOOD_RECORD[4:], GOOD_RECORD[:3] + [["error"]] + GOOD_RECORD[4:],
    GOOD_RECORD[:4] + [3] + GOOD_RECORD[5:], GOOD_RECORD[:6] + [None, None],
    GOOD_RECORD[:7] + [["detach", [["body", -2]], None]],
    GOOD_RECORD[:7] + [["detach", [["__class__", -1]], None]],
    GOOD_RECORD[:7] + [["os.system", [], None]], GOOD_RECORD[:7] + [["detach", "body", None]],
    GOOD_RECORD[:7] + [["detach", [["body", 0, 1]], None]], GOOD_RECORD[:7] + [{"kind": 1}],
]


@pytest.mark.parametrize("record", BAD_RECORDS)
def test_an_entry_with_the_right_mac_is_still_checked_field_by_field(proj, record):
    expected = described(lint(proj / "train.py"))
    (entry,) = [e for e in entries(proj) if e.stat().st_size > 100]
    data = read(entry)
    assert cache._valid_entry(data, data["key"], data["digest"])
    assert cache.valid_record(GOOD_RECORD) and not cache.valid_record(record)
    data["findings"] = [record]
    sign(entry, data)
    new_process()
    assert described(lint(proj / "train.py")) == expected


@pytest.mark.parametrize("field, value", [
    ("format", 1), ("format", True), ("key", None), ("digest", "0" * 64), ("lookups", [[1, 2, 3]]),
    ("lookups", {}), ("files", [["models.py", "not a digest"]]), ("files", [["x"]]),
    ("findings", None), ("extra", 1)])
def test_every_field_of_an_entry_is_checked(proj, field, value):
    expected = described(lint(proj / "train.py"))
    (entry,) = [e for e in entries(proj) if e.stat().st_size > 100]
    data = read(entry)
    data[field] = value
    sign(entry, data)
    new_process()
    assert described(lint(proj / "train.py")) == expected


def test_turned_off_by_the_environment_and_the_switch(proj, monkeypatch):
    monkeypatch.setenv(cache.ENV_DISABLE, "1")
    lint(proj / "train.py")
    assert not (proj / cache.FOLDER_NAME).exists()
    monkeypatch.delenv(cache.ENV_DISABLE)
    cache.set_enabled(False)
    lint(proj / "train.py")
    assert not (proj / cache.FOLDER_NAME).exists()


def test_the_folder_is_at_the_project_root_else_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "repo" / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    new_process()
    assert cache.project_root(str(tmp_path / "repo" / "src" / "pkg" / "m.py")) == \
        str(tmp_path / "repo")
    loose = tmp_path / "elsewhere"
    loose.mkdir()
    if cache.project_root(str(loose / "x.py")) != str(tmp_path):   # no marker above tmp
        pytest.skip("a root marker above the temporary folder")


def _lint_in_worker(path):
    new_process()
    return described(lint(__import__("pathlib").Path(path)))


def test_concurrent_writers_leave_valid_entries(proj):
    for index in range(6):
        (proj / f"train{index}.py").write_text(TRAIN)
    paths = [str(proj / f"train{index % 6}.py") for index in range(24)]
    with ProcessPoolExecutor(4) as pool:
        results = list(pool.map(_lint_in_worker, paths))
    assert all(r == results[0] for r in results)
    assert len(entries(proj)) == 6
    assert not _temporaries(proj / cache.FOLDER_NAME)


def test_pruning_keeps_the_newest_entries(tmp_path):
    for index in range(10):
        path = tmp_path / f"{index:02d}.json"
        path.write_bytes(b"x" * 10)
        os.utime(path, (1_000_000 + index, 1_000_000 + index))
    (tmp_path / "0123.pickle").write_bytes(b"")      # an entry of the format before
    removed = cache.prune(str(tmp_path), max_entries=4, max_age_s=1e12)
    assert removed == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["06.json", "07.json",
                                                          "08.json", "09.json"]
    assert cache.prune(str(tmp_path), max_bytes=25, max_age_s=1e12) == 2
    assert cache.prune(str(tmp_path), max_age_s=1) == 2


# ---------------------------------------------------------------------------- whole runs

def _run(args, cwd, env_off=False):
    env = dict(os.environ)
    env.pop(cache.ENV_DISABLE, None)
    if env_off:
        env[cache.ENV_DISABLE] = "1"
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_tpf_check_twice_and_without_the_cache_agree(proj):
    (proj / "setup.cfg").write_text("[flake8]\n")
    check = ["flake8_torch_preflight", "check", "--format", "json", "--no-vram", "-j", "1", "."]
    cold = _run(check, proj)
    assert entries(proj)
    warm = _run(check, proj)
    off = _run(check + ["--no-cache"], proj)
    assert cold.stdout == warm.stdout == off.stdout
    findings = json.loads(cold.stdout)
    assert {f["code"] for f in findings["findings"]} == {"TPF001", "TPF005"}
    (proj / "models.py").write_text(MODEL.format(out=RAW))
    edited = json.loads(_run(check, proj).stdout)
    assert {f["code"] for f in edited["findings"]} == {"TPF001"}


@pytest.mark.parametrize("switch", [["--tpf-no-cache"], ["--config", "off.cfg"]])
def test_flake8_cache_switches(proj, switch):
    (proj / "off.cfg").write_text("[flake8]\ntpf-cache = false\n")
    out = _run(["flake8", "--select", "TPF", *switch, "train.py"], proj)
    assert "TPF005" in out.stdout
    assert not (proj / cache.FOLDER_NAME).exists()


def test_flake8_jobs_share_one_cache(proj):
    for index in range(8):
        (proj / f"train{index}.py").write_text(TRAIN)
    args = ["flake8", "--isolated", "--select", "TPF", "-j", "4", "."]
    off = _run(args, proj, env_off=True)
    cold, warm = _run(args, proj), _run(args, proj)
    assert sorted(cold.stdout.splitlines()) == sorted(warm.stdout.splitlines()) == \
        sorted(off.stdout.splitlines())
    assert len(off.stdout.splitlines()) == 18
    assert len(entries(proj)) == 10


def test_tpf_fix_never_reads_the_cache(proj, monkeypatch):
    lint(proj / "train.py")
    for entry in entries(proj):          # a poisoned cache: every finding moved a line down
        data = read(entry)
        data["findings"] = [[line + 1] + rest for line, *rest in data["findings"]]
        sign(entry, data)
    before = (proj / "train.py").read_text()
    out = _run(["flake8_torch_preflight", "fix", "--select", "TPF001", "train.py"], proj)
    assert out.returncode == 0, out.stderr
    after = (proj / "train.py").read_text()
    assert after != before and "losses.append(loss.detach())" in textwrap.dedent(after)


# ---------------------------------------------------------------------------- what a repository ships
# Issue 24: a `.tpf_cache/` that comes with the code (a pull request, a tarball, a CI cache
# whose key is predictable) must not run code, hide a finding or crash the run, under
# `tpf check` and under flake8 alike.

TOOLS = {
    "tpf": ["flake8_torch_preflight", "check", "--no-vram", "-j", "1", "."],
    "flake8": ["flake8", "--isolated", "--select", "TPF", "."],
}


def system_pickle(command: str) -> bytes:
    """The exploit of issue 24: a protocol-4 pickle whose global is `os.system` reached
    through our own module's `os` (a dotted name the old whitelist accepted)."""
    def text(value: str) -> bytes:
        data = value.encode()
        return b"X" + struct.pack("<I", len(data)) + data
    return b"\x80\x04" + text("flake8_torch_preflight.cache") + text("os.system") + b"\x93" + \
        text(command) + b"\x85R."


def forge(proj, edit):
    """Rewrite every entry as someone without the user's key would: `edit(entry)`, the MAC
    line kept."""
    for path in entries(proj):
        head, _, payload = path.read_bytes().partition(b"\n")
        entry = json.loads(payload)
        edit(entry)
        path.write_bytes(head + b"\n" + json.dumps(entry, sort_keys=True).encode())


def outcome(run):
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, run.stdout


@pytest.mark.skipif(os.name != "posix", reason="the payload is a POSIX shell command")
@pytest.mark.parametrize("tool", TOOLS)
def test_a_poisoned_entry_runs_no_code(proj, tool):
    cold = outcome(_run(TOOLS[tool], proj))
    marker = proj.parent / "marker"
    assert entries(proj)
    for path in entries(proj):
        path.write_bytes(system_pickle(f"touch {shlex.quote(str(marker))}"))
    assert outcome(_run(TOOLS[tool], proj)) == cold
    assert not marker.exists()


@pytest.mark.parametrize("findings", [[], [42], [["x"]]])
@pytest.mark.parametrize("tool", TOOLS)
def test_a_forged_entry_hides_nothing_and_crashes_nothing(proj, tool, findings):
    cold = outcome(_run(TOOLS[tool], proj))
    assert cold[0] == 1 and "TPF005" in cold[1]
    forge(proj, lambda entry: entry.update(findings=findings))
    assert outcome(_run(TOOLS[tool], proj)) == cold


@pytest.mark.parametrize("tool", TOOLS)
def test_a_cache_folder_linked_out_of_the_project_is_not_used(proj, tool):
    (proj / cache.FOLDER_NAME).symlink_to("..")            # ln -s .. .tpf_cache
    outside = sorted(p.name for p in proj.parent.iterdir())
    cold = outcome(_run(TOOLS[tool], proj))
    assert cold[0] == 1 and "TPF005" in cold[1]
    assert sorted(p.name for p in proj.parent.iterdir()) == outside    # no ../.gitignore
    assert outcome(_run(TOOLS[tool], proj)) == cold


def test_nothing_is_written_through_a_link_inside_the_cache_folder(proj, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (proj / cache.FOLDER_NAME).mkdir()
    (proj / cache.FOLDER_NAME / "findings").symlink_to(outside)
    (proj / cache.FOLDER_NAME / ".gitignore").symlink_to(outside / "victim")
    assert "TPF005" in codes(lint(proj / "train.py"))
    assert not list(outside.iterdir())


def test_a_cache_tracked_by_git_is_not_used(proj):
    if shutil.which("git") is None:
        pytest.skip("no git")
    cold = described(lint(proj / "train.py"))
    for path in entries(proj):          # signed with the user's key, as if it had leaked
        sign(path, dict(read(path), findings=[]))
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    new_process()
    assert lint(proj / "train.py") == []            # the key alone would not have helped
    subprocess.run(["git", "add", "-f", cache.FOLDER_NAME], cwd=proj, check=True)
    new_process()
    assert described(lint(proj / "train.py")) == cold


def test_a_module_edited_without_changing_its_size_or_mtime_is_read_again(proj):
    models = proj / "models.py"
    assert "TPF005" in codes(lint(proj / "train.py"))
    before = models.stat()
    models.write_text(MODEL.format(out=RAW.ljust(len(SOFTMAX))))    # as `cp -p` leaves it
    os.utime(models, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert models.stat().st_size == before.st_size
    new_process()
    assert "TPF005" not in codes(lint(proj / "train.py"))


KILLED_CACHE_WRITE = """if True:
    import ast, os, signal, sys
    from flake8_torch_preflight import engine
    os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)   # dies mid-write
    source = open(sys.argv[1]).read()
    engine.lint_file(ast.parse(source), sys.argv[1], source)
"""


def _temporaries(folder):
    return [p for p in folder.rglob("*") if p.name.endswith(".tpf-tmp") or
            p.name.startswith(".tmp-")]


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_a_cache_write_killed_midway_leaves_nothing_after_the_next_run(proj):
    env = dict(os.environ)
    env.pop(cache.ENV_DISABLE, None)
    killed = subprocess.run([sys.executable, "-c", KILLED_CACHE_WRITE, "train.py"], cwd=proj,
                            env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert _temporaries(proj / cache.FOLDER_NAME)
    assert outcome(_run(TOOLS["tpf"], proj))[0] == 1
    assert not _temporaries(proj / cache.FOLDER_NAME)


# ---------------------------------------------------------------------------- the key

def test_the_key_is_the_users_made_private_once_and_kept_outside_the_project(proj, tmp_path):
    lint(proj / "train.py")
    key = tmp_path / "home" / "cache" / "flake8-torch-preflight" / "key"
    assert cache.key_path() == str(key)
    assert len(key.read_text()) == 64 and not list(proj.rglob("key"))
    if os.name == "posix":
        assert (key.stat().st_mode & 0o777, key.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    made = key.read_bytes()
    new_process()
    lint(proj / "train.py")
    assert key.read_bytes() == made and not _temporaries(key.parent)


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
@pytest.mark.parametrize("loosen", ["key", "folder"])
def test_a_key_others_can_read_or_replace_turns_the_cache_off(proj, tmp_path, loosen):
    lint(proj / "train.py")
    key = tmp_path / "home" / "cache" / "flake8-torch-preflight" / "key"
    (key if loosen == "key" else key.parent).chmod(0o644 if loosen == "key" else 0o777)
    shutil.rmtree(proj / cache.FOLDER_NAME)
    new_process()
    assert "TPF005" in codes(lint(proj / "train.py"))
    assert cache._key() is None and not (proj / cache.FOLDER_NAME).exists()


def test_no_home_folder_means_no_cache(proj, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)     # `~` stays `~`
    assert cache.key_path() is None
    assert "TPF005" in codes(lint(proj / "train.py"))
    assert not (proj / cache.FOLDER_NAME).exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_planted_as_an_entry_is_a_miss_not_a_hang(proj):
    expected = described(lint(proj / "train.py"))
    (entry,) = [e for e in entries(proj) if e.stat().st_size > 100]
    entry.unlink()
    os.mkfifo(entry)
    new_process()
    assert described(lint(proj / "train.py")) == expected


def test_the_folder_ignores_itself_and_takes_no_git_call_when_made_now(proj, monkeypatch):
    calls = []
    monkeypatch.setattr(cache, "_tracked_by_git", lambda root: calls.append(root) or False)
    lint(proj / "train.py")
    ignore = proj / cache.FOLDER_NAME / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*" and calls == []
    if os.name == "posix":
        assert ignore.stat().st_mode & 0o777 == 0o644
    new_process()
    lint(proj / "train.py")
    assert calls == [str(proj)]
