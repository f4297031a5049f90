"""The cache across runs: a file's findings are kept until the file or what it read changes.

A run of flake8 or `tpf check` over an unchanged project should cost almost nothing of ours.
Like mypy's and ruff's caches, ours lives in a folder at the project root (`.tpf_cache/`, at
the first folder above the linted file holding `.git`, `pyproject.toml`, `setup.cfg` or
`setup.py`, else the current directory), which ignores itself in git (a `.gitignore` holding
`*`, as ruff, mypy and pytest write).

**Nothing a repository ships is trusted.** A `.tpf_cache/` may come with the code (committed
in a pull request, unpacked from a tarball, restored from a CI cache whose key is
predictable), so reading one must not run code, hide a finding or crash:

- An entry is plain data: one line `tpf-cache-2 <MAC>`, then canonical JSON (sorted keys,
  ASCII). Nothing in it is ever called, imported or unpickled.
- The MAC is HMAC-SHA256 of the JSON under a per-user secret key kept outside every project:
  `$XDG_CACHE_HOME/flake8-torch-preflight/key`, else `~/.cache/flake8-torch-preflight/key`
  (64 hex digits; created at the first run, mode 0600, in a folder of mode 0700, written to a
  temporary file and linked into place so that concurrent first runs agree on one key). A
  repository cannot ship an entry that passes: it does not know the key. The key is used
  only when it is a regular file owned by the user, readable by nobody else, in a folder
  owned by the user and writable by nobody else; otherwise, or without a home folder, the
  cache is off (delete the key folder to make a new key).
- An entry whose MAC passes is still validated field by field (types, ranges, codes
  `TPF[0-9]{3}`, severities, the key and the file's digest it was written for): anything
  else is a miss, recomputed, never a traceback and never fewer findings.
- The cache folder is not used when git tracks anything in it (one `git ls-files` a process,
  only when the folder was there before the run; a few milliseconds; git's fsmonitor hook is
  switched off for it, so a repository's git config runs nothing; without git, the MAC alone
  guards), or when `.tpf_cache`, its `findings/` or `tmp/` is not a real folder (a symlink,
  say `ln -s .. .tpf_cache`). Nothing is written or read through a symlink: files are opened
  with O_NOFOLLOW (and O_NONBLOCK, so a FIFO planted as an entry does not hang the run),
  temporary files are created with O_EXCL, and a `.gitignore` that exists in any form,
  a dangling link included, is left as it is.

**What an entry holds.** One entry per linted file and tool: the file's absolute path and
the path as given, the tool's fingerprint (version, Python version, and a digest of our own
source files, so an edited checkout never reads results of the code before the edit), the
options that change findings, the SHA-256 of the file's text, its findings (with their fix
plans, as paths from the tree's root to the nodes they edit), and **what the analysis read
besides the file**:

- every module lookup the analysis made, from whichever file made it (`project.module_file`:
  importing file, module, the file it found or None), so a file created where a lookup found
  nothing, or removed where it found one, invalidates the entry;
- the SHA-256 of every project file those lookups found, as far as imports resolve (the
  module summaries follow every project import): a changed module invalidates the entries of
  every file that imports it, directly or through others. The content decides, never size
  or modification time (`cp -p`, `rsync -a` and `tar x` keep both); each such file is hashed
  once a process.

**A hit** is an entry whose MAC and fields pass, whose key matches, whose text digest equals
the file's, whose lookups still find the same files and whose files still have the same
content. It returns exactly the findings a miss would compute. Anything else is a miss.

**Safe under `flake8 -j N` and concurrent runs.** Entries are written to a temporary file in
`.tpf_cache/tmp/` and moved into place with `os.replace`: a reader sees the old entry, the
new one or none, never half of one. Two writers of the same entry write the same findings.
Temporary files of a killed writer are removed at the next run (see `writing.py`).

**Bounded.** At most once an hour per process and folder (a stamp file records the last
prune), entries unused for 30 days are removed, then the oldest until the folder holds at
most `MAX_ENTRIES` entries and `MAX_BYTES` bytes; an entry over `MAX_ENTRY_BYTES` is not read.

**Off** with `tpf check --no-cache`, flake8's `--tpf-no-cache` or `tpf-cache = false` in
`[flake8]`, or `TPF_NO_CACHE=1` in the environment (the test suite runs with it). `tpf fix`
never reads it: it lints the file it edits itself.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import __version__
from .writing import create_temporary, remove_stale_temporaries

FOLDER_NAME = ".tpf_cache"
ENV_DISABLE = "TPF_NO_CACHE"
FORMAT = 2                          # bump when an entry's layout changes
MAGIC = b"tpf-cache-2 "
ROOT_MARKERS = (".git", "pyproject.toml", "setup.cfg", "setup.py")
KEY_FOLDER = "flake8-torch-preflight"
MAX_ENTRIES = 50_000
MAX_BYTES = 256 * 1024 * 1024
MAX_ENTRY_BYTES = 16 * 1024 * 1024
MAX_AGE_S = 30 * 24 * 3600
PRUNE_EVERY_S = 3600
GIT_TIMEOUT_S = 10
ENTRY_SUFFIX = ".json"
_FINDINGS, _TMP = "findings", "tmp"
_GITIGNORE = b"# created by flake8-torch-preflight\n*\n"
_POSIX = os.name == "posix"
# never through a symlink, never waiting on a FIFO, bytes as they are (Windows)
_SAFE_OPEN = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_BINARY", 0)

_ENABLED = [True]


def set_enabled(enabled: bool) -> None:
    """Turn the cache on or off for this process (the plugin's and the CLI's options)."""
    _ENABLED[0] = bool(enabled)


def enabled() -> bool:
    return _ENABLED[0] and os.environ.get(ENV_DISABLE, "").strip().lower() in ("", "0", "false", "no")


# ---------------------------------------------------------------------------- the key

_KEY: Dict[str, Optional[bytes]] = {}


def key_path() -> Optional[str]:
    """Where the user's secret key lives (XDG's cache folder); None without a home folder."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, KEY_FOLDER, "key")


def _key() -> Optional[bytes]:
    """The user's key, created at the first use; None (no cache) when it cannot be trusted."""
    path = key_path()
    if path is None:
        return None
    if path not in _KEY:
        key = _read_key(path)
        if key is None and _create_key(path):
            key = _read_key(path)
        _KEY[path] = key
    return _KEY[path]


def _private(info: os.stat_result, others_may: int) -> bool:
    """Owned by this user and granting others nothing of `others_may` (POSIX only)."""
    return not _POSIX or (info.st_uid == os.getuid() and not info.st_mode & others_may)


def _read_key(path: str) -> Optional[bytes]:
    try:
        folder = os.lstat(os.path.dirname(path))
    except OSError:
        return None
    if not stat.S_ISDIR(folder.st_mode) or not _private(folder, 0o022):
        return None
    handle = _open_regular(path, os.O_RDONLY)
    if handle is None:
        return None
    try:
        data = os.read(handle, 65) if _private(os.fstat(handle), 0o077) else b""
    except OSError:
        data = b""
    finally:
        os.close(handle)
    if len(data) != 64 or not re.fullmatch(rb"[0-9a-f]{64}", data):
        return None
    return bytes.fromhex(data.decode("ascii"))


def _create_key(path: str) -> bool:
    """Write a new random key unless another process was first; False when it cannot be."""
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        remove_stale_temporaries(folder)        # of a first run killed while it wrote
        handle, temporary = create_temporary(folder, "key")
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(secrets.token_hex(32).encode("ascii"))
            out.flush()
            os.fsync(out.fileno())
        os.link(temporary, path)        # fails when it exists: the first key stays
    except FileExistsError:
        pass
    except OSError:
        return False
    finally:
        _remove(temporary)
    return True


def _seal(entry: dict, key: bytes) -> bytes:
    """The bytes of an entry: its MAC line, then its canonical JSON."""
    payload = json.dumps(entry, sort_keys=True, separators=(",", ":"), allow_nan=False)
    data = payload.encode("ascii")
    return MAGIC + hmac.new(key, data, hashlib.sha256).hexdigest().encode("ascii") + b"\n" + data


def _unseal(data: bytes, key: bytes) -> Optional[object]:
    """The JSON value of an entry whose MAC passes, else None."""
    head, newline, payload = data.partition(b"\n")
    if not newline or not head.startswith(MAGIC):
        return None
    expected = hmac.new(key, payload, hashlib.sha256).hexdigest().encode("ascii")
    if not hmac.compare_digest(head[len(MAGIC):], expected):
        return None
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        return None


# ---------------------------------------------------------------------------- where

_ROOT_OF: Dict[str, str] = {}


def project_root(path: str) -> str:
    """The first folder at or above `path`'s folder holding a root marker, else the cwd."""
    start = os.path.dirname(os.path.abspath(path))
    cached = _ROOT_OF.get(start)
    if cached is not None:
        return cached
    folder, root = start, None
    while True:
        if any(os.path.exists(os.path.join(folder, marker)) for marker in ROOT_MARKERS):
            root = folder
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    _ROOT_OF[start] = root = root or os.getcwd()
    return root


_READY: Dict[str, bool] = {}


def _folder(path: str) -> Optional[str]:
    """`<root>/.tpf_cache` of `path`'s project when it may be used (see the docstring)."""
    root = project_root(path)
    ready = _READY.get(root)
    if ready is None:
        ready = _READY[root] = _prepare(root)
    return os.path.join(root, FOLDER_NAME) if ready else None


def _prepare(root: str) -> bool:
    base = os.path.join(root, FOLDER_NAME)
    made = _real_folder(base)
    if made is None or (not made and _tracked_by_git(root)):
        return False
    if _real_folder(os.path.join(base, _FINDINGS)) is None or \
            _real_folder(os.path.join(base, _TMP)) is None:
        return False
    remove_stale_temporaries(os.path.join(base, _TMP))
    ignore = os.path.join(base, ".gitignore")
    if not os.path.lexists(ignore):
        try:
            _write_atomically(ignore, _GITIGNORE, base, 0o644)   # others may read it
        except OSError:
            return False
    return True


def _real_folder(path: str) -> Optional[bool]:
    """Make the folder `path`: True when made now, False when it was there, None when it is
    anything else (a symlink, a file) or cannot be made."""
    try:
        os.mkdir(path)
        return True
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        return False if stat.S_ISDIR(os.lstat(path).st_mode) else None
    except OSError:
        return None


def _tracked_by_git(root: str) -> bool:
    """Whether git tracks anything in `root`'s cache folder: then it came with the code.
    No git, or no repository: False (the MAC alone guards)."""
    command = ["git", "-c", "core.fsmonitor=false", "ls-files", "-z", "--", FOLDER_NAME]
    try:
        listed = subprocess.run(command, cwd=root, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, GIT_OPTIONAL_LOCKS="0"),
                                timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return True             # cannot tell: not used
    except OSError:
        return False
    return bool(listed.stdout)


# ---------------------------------------------------------------------------- identity

_TOOL: List[str] = []


def tool_fingerprint() -> str:
    """Version, Python version and a digest of this package's sources (read once a process):
    results of other code are never read back, an edited checkout's included."""
    if not _TOOL:
        digest = hashlib.sha256(f"{FORMAT}|{__version__}|{sys.version_info[:2]}".encode())
        package = os.path.dirname(os.path.abspath(__file__))
        for folder, dirs, names in sorted(os.walk(package)):
            dirs.sort()
            for name in sorted(n for n in names if n.endswith(".py")):
                full = os.path.join(folder, name)
                digest.update(os.path.relpath(full, package).encode())
                try:
                    with open(full, "rb") as handle:
                        digest.update(hashlib.sha256(handle.read()).digest())
                except OSError:
                    digest.update(b"?")
        _TOOL.append(digest.hexdigest()[:32])
    return _TOOL[0]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# path -> (size, mtime_ns, sha256 of its bytes): each file is hashed once per process (the
# size and time only tell whether it changed during the process)
_DIGESTS: Dict[str, Tuple[int, int, str]] = {}


def file_digest(path: str) -> Optional[str]:
    """SHA-256 of the file at `path`'s bytes, or None when it cannot be read."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    known = _DIGESTS.get(path)
    if known is not None and known[:2] == (info.st_size, info.st_mtime_ns):
        return known[2]
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
    _DIGESTS[path] = (info.st_size, info.st_mtime_ns, digest)
    return digest


# ---------------------------------------------------------------------------- entries

def _open_regular(path: str, flags: int, mode: int = 0o600) -> Optional[int]:
    """A descriptor of the regular file at `path`, never through a symlink and never
    blocking on a FIFO; None for anything else."""
    try:
        handle = os.open(path, flags | _SAFE_OPEN, mode)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(handle).st_mode):
            return handle
    except OSError:
        pass
    os.close(handle)
    return None


def _read_entry(path: str, key: bytes) -> Optional[object]:
    handle = _open_regular(path, os.O_RDONLY)
    if handle is None:
        return None
    try:
        with os.fdopen(handle, "rb") as reading:
            data = reading.read(MAX_ENTRY_BYTES + 1)
            entry = _unseal(data, key) if len(data) <= MAX_ENTRY_BYTES else None
            if entry is not None and time.time() - os.fstat(handle).st_mtime > 24 * 3600:
                _touch(handle, path)        # pruning keeps what is used (ours only)
    except OSError:
        return None
    return entry


def _write_entry(base: str, path: str, entry: dict, key: bytes) -> None:
    try:
        _write_atomically(path, _seal(entry, key), base)
    except (OSError, TypeError, ValueError, RecursionError):
        pass                # a cache that cannot write is a cache that misses
    _maybe_prune(os.path.dirname(path))


def _write_atomically(path: str, data: bytes, base: str, mode: Optional[int] = None) -> None:
    """Write through a new temporary file in `base`/tmp, renamed over `path` (a rename
    replaces a symlink at `path`, it never writes through one)."""
    handle, temporary = create_temporary(os.path.join(base, _TMP), os.path.basename(path))
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _entry_path(base: str, *key: str) -> str:
    name = hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return os.path.join(base, _FINDINGS, name + ENTRY_SUFFIX)


def _touch(handle: int, path: str) -> None:
    try:
        os.utime(handle if os.utime in os.supports_fd else path)
    except OSError:
        pass


# ---------------------------------------------------------------------------- pruning

_PRUNED: Dict[str, bool] = {}
_STAMP = "pruned"


def _maybe_prune(folder: str) -> None:
    """Prune `folder` when no process has in the last hour (checked once a process)."""
    if _PRUNED.get(folder):
        return
    _PRUNED[folder] = True
    stamp = os.path.join(folder, _STAMP)
    try:
        if time.time() - os.lstat(stamp).st_mtime < PRUNE_EVERY_S:
            return
    except OSError:
        pass
    handle = _open_regular(stamp, os.O_WRONLY | os.O_CREAT)
    if handle is None:
        return
    _touch(handle, stamp)
    os.close(handle)
    prune(folder)


def prune(folder: str, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES,
          max_age_s: float = MAX_AGE_S) -> int:
    """Remove old entries, and files of earlier formats, from `folder`; the number removed."""
    now = time.time()
    kept: List[Tuple[float, int, str]] = []
    removed = 0
    try:
        listing = list(os.scandir(folder))
    except OSError:
        return 0
    for item in listing:
        try:
            info = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if item.name == _STAMP:
            continue
        if not item.name.endswith(ENTRY_SUFFIX) or now - info.st_mtime > max_age_s:
            removed += _remove(item.path)
        else:
            kept.append((info.st_mtime, info.st_size, item.path))
    kept.sort(reverse=True)                      # newest first
    total = 0
    for count, (_, size, path) in enumerate(kept):
        total += size
        if count >= max_entries or total > max_bytes:
            removed += _remove(path)
    return removed


def _remove(path: str) -> int:
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0


# ---------------------------------------------------------------------------- validation

_CODE = re.compile(r"TPF[0-9]{3}\Z")
_SEVERITIES = ("error", "warning", "note")
_BIG = 2 ** 31


def _count(value: object, lowest: int = 0) -> bool:
    return type(value) is int and lowest <= value < _BIG     # a bool is no count


def _text(value: object) -> bool:
    return isinstance(value, str)


def _name(value: object) -> bool:
    return isinstance(value, str) and value.isidentifier() and not value.startswith("_")


def _node_path(value: object) -> bool:
    """[[field, index or -1], ...] from the module down (`engine._node_paths`)."""
    return isinstance(value, list) and all(
        isinstance(step, list) and len(step) == 2 and _name(step[0]) and _count(step[1], -1)
        for step in value)


def _plan(value: object) -> bool:
    """None, or [kind, node path, replacement's node path or None]."""
    return value is None or (
        isinstance(value, list) and len(value) == 3 and _name(value[0]) and
        _node_path(value[1]) and (value[2] is None or _node_path(value[2])))


def valid_record(record: object) -> bool:
    """[line, col, code, severity, what, evidence, fix, plan], as `engine._to_records`
    writes a finding."""
    return (isinstance(record, list) and len(record) == 8 and _count(record[0]) and
            _count(record[1]) and _text(record[2]) and _CODE.match(record[2]) is not None and
            record[3] in _SEVERITIES and all(_text(part) for part in record[4:7]) and
            _plan(record[7]))


def _lookup(value: object) -> bool:
    return isinstance(value, list) and len(value) == 3 and _text(value[0]) and \
        _text(value[1]) and (value[2] is None or _text(value[2]))


def _file(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and _text(value[0]) and \
        _text(value[1]) and re.fullmatch(r"[0-9a-f]{64}", value[1]) is not None


def _all(values: object, valid) -> bool:
    return isinstance(values, list) and all(valid(value) for value in values)


_ENTRY_FIELDS = frozenset(("format", "key", "digest", "lookups", "files", "findings"))


def _valid_entry(entry: object, key: Sequence[str], digest: str) -> bool:
    """An entry of this format, for this file as named, this tool and options, and this text."""
    return (isinstance(entry, dict) and set(entry) == _ENTRY_FIELDS and
            type(entry["format"]) is int and entry["format"] == FORMAT and
            entry["key"] == list(key) and entry["digest"] == digest and
            _all(entry["lookups"], _lookup) and _all(entry["files"], _file) and
            _all(entry["findings"], valid_record))


# ---------------------------------------------------------------------------- findings

class Dependencies:
    """What the analysis of one file read besides it: module lookups and the files found."""

    def __init__(self, lookups: Sequence[Tuple[str, str, Optional[str]]],
                 files: Iterable[str]) -> None:
        self.lookups = [list(lookup) for lookup in lookups]
        self.files = sorted(set(files))

    def digests(self) -> Optional[List[List[str]]]:
        """[[path, sha256]] of the files, or None when one cannot be read."""
        found = []
        for path in self.files:
            digest = file_digest(path)
            if digest is None:
                return None
            found.append([path, digest])
        return found


# (working directory, importing file, module) -> what the lookup finds in this process (the
# file system is taken not to change during a run, as `project.module_file` takes it; without
# a root marker the search depends on the working directory)
_ANSWERS: Dict[Tuple[str, str, str], Optional[str]] = {}


def _still_valid(entry: dict, lookup) -> bool:
    for path, digest in entry["files"]:
        if file_digest(path) != digest:
            return False
    cwd = os.getcwd()
    for importer, module, found in entry["lookups"]:
        asked = (cwd, importer, module)
        if asked not in _ANSWERS:
            _ANSWERS[asked] = lookup(importer, module)
        if _ANSWERS[asked] != found:
            return False
    return True


def _findings_key(filename: str, options: str) -> Tuple[str, str, str, str]:
    """The file as named (a message may depend on the spelling) and as found."""
    return (tool_fingerprint(), os.path.abspath(filename), filename, options)


def cacheable(filename: str) -> bool:
    """On, and `filename` names a file on disk (not stdin or an unsaved buffer's name)."""
    return enabled() and bool(filename) and not filename.startswith("<") and \
        os.path.isfile(filename)


def load_findings(filename: str, digest: str, options: str, lookup) -> Optional[list]:
    """The stored findings records of `filename` (lists, see `valid_record`) when its entry
    is valid, else None. `lookup(importer, module)` answers a module lookup now
    (`project.module_file`)."""
    key = _key()
    base = _folder(filename) if key is not None else None
    if base is None:
        return None
    name = _findings_key(filename, options)
    entry = _read_entry(_entry_path(base, *name), key)
    if not _valid_entry(entry, name, digest) or not _still_valid(entry, lookup):
        return None
    return entry["findings"]


def store_findings(filename: str, digest: str, options: str, records: list,
                   dependencies: Dependencies) -> None:
    key = _key()
    base = _folder(filename) if key is not None else None
    files = dependencies.digests() if base is not None else None
    if files is None:
        return
    name = _findings_key(filename, options)
    entry = {"format": FORMAT, "key": list(name), "digest": digest,
             "lookups": dependencies.lookups, "files": files, "findings": records}
    _write_entry(base, _entry_path(base, *name), entry, key)
