"""The cache across runs: a file's findings are kept until the file or what it read changes.

A run of flake8 or `tpf check` over an unchanged project should cost almost nothing of ours.
Like mypy's and ruff's caches, ours lives in a folder at the project root (`.tpf_cache/`, at
the first folder above the linted file holding `.git`, `pyproject.toml`, `setup.cfg` or
`setup.py`, else the current directory), which ignores itself in git (a `.gitignore` holding
`*`, as ruff, mypy and pytest write).

**What an entry holds.** One entry per linted file and tool: the file's absolute path and
the path as given, the tool's fingerprint (version, Python version, and a digest of our own
source files, so an edited checkout never reads results of the code before the edit), the
options that change findings, the SHA-256 of the file's text, its findings (with their fix
plans, as paths from the tree's root to the nodes they edit), and **what the analysis read besides the file**:

- every module lookup the analysis made, from whichever file made it (`project.module_file`:
  importing file, module, the file it found or None), so a file created where a lookup found
  nothing, or removed where it found one, invalidates the entry;
- the size, modification time (ns) and SHA-256 of every project file those lookups found,
  as far as imports resolve (the module summaries follow every project import): a changed
  module invalidates the entries of every file that imports it, directly or through others.

**A hit** is an entry whose key matches, whose text digest equals the file's, whose lookups
still find the same files and whose files still have the same content (size and mtime first;
when they differ, the content's digest decides). It returns exactly the findings a miss
would compute. Anything else, a missing, unreadable, truncated or foreign entry included,
is a miss and is recomputed.

**Safe under `flake8 -j N` and concurrent runs.** Entries are written to a temporary file in
the same folder and moved into place with `os.replace`: a reader sees the old entry, the new
one or none, never half of one. Two writers of the same entry write the same findings.
Entries are read with an unpickler that refuses every global outside the builtin types and
this package's classes: a `.tpf_cache` shipped in a repository cannot run code.

**Bounded.** At most once an hour per process and folder (a stamp file records the last
prune), entries unused for 30 days are removed, then the oldest until the folder holds at
most `MAX_ENTRIES` entries and `MAX_BYTES` bytes; temporary files left by a killed writer
go after an hour.

**Off** with `tpf check --no-cache`, flake8's `--tpf-no-cache` or `tpf-cache = false` in
`[flake8]`, or `TPF_NO_CACHE=1` in the environment (the test suite runs with it). `tpf fix`
never reads it: it lints the file it edits itself.

Besides findings, `load_object`/`store_object` keep any picklable value computed from one
file's content alone (see their docstrings).
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import __version__

FOLDER_NAME = ".tpf_cache"
ENV_DISABLE = "TPF_NO_CACHE"
FORMAT = 1                          # bump when an entry's layout changes
ROOT_MARKERS = (".git", "pyproject.toml", "setup.cfg", "setup.py")
MAX_ENTRIES = 50_000
MAX_BYTES = 256 * 1024 * 1024
MAX_AGE_S = 30 * 24 * 3600
PRUNE_EVERY_S = 3600
TEMP_PREFIX = ".tmp-"
_FINDINGS, _OBJECTS = "findings", "objects"

_ENABLED = [True]


def set_enabled(enabled: bool) -> None:
    """Turn the cache on or off for this process (the plugin's and the CLI's options)."""
    _ENABLED[0] = bool(enabled)


def enabled() -> bool:
    return _ENABLED[0] and os.environ.get(ENV_DISABLE, "").strip().lower() in ("", "0", "false", "no")


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


def _folder(path: str, kind: str) -> Optional[str]:
    """`<root>/.tpf_cache/<kind>`, created with its `.gitignore`; None when it cannot be."""
    base = os.path.join(project_root(path), FOLDER_NAME)
    folder = os.path.join(base, kind)
    ready = _READY.get(folder)
    if ready is None:
        ready = _READY[folder] = _prepare(base, folder)
    return folder if ready else None


def _prepare(base: str, folder: str) -> bool:
    try:
        os.makedirs(folder, exist_ok=True)
        ignore = os.path.join(base, ".gitignore")
        if not os.path.exists(ignore):
            _write_atomically(ignore, b"# created by flake8-torch-preflight\n*\n")
            os.chmod(ignore, 0o644)     # mkstemp's 0600 would hide it from the other users
        return os.access(folder, os.W_OK)
    except OSError:
        return False


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


# path -> (size, mtime_ns, sha256 of its bytes): each file is hashed once per process
_DIGESTS: Dict[str, Tuple[int, int, str]] = {}


def file_state(path: str) -> Optional[Tuple[int, int, str]]:
    """(size, mtime_ns, sha256) of the file at `path`, or None when it cannot be read."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    known = _DIGESTS.get(path)
    if known is not None and known[:2] == (info.st_size, info.st_mtime_ns):
        return known
    try:
        with open(path, "rb") as handle:
            state = (info.st_size, info.st_mtime_ns, hashlib.sha256(handle.read()).hexdigest())
    except OSError:
        return None
    _DIGESTS[path] = state
    return state


def _unchanged(path: str, size: int, mtime_ns: int, digest: str) -> bool:
    try:
        info = os.stat(path)
    except OSError:
        return False
    if (info.st_size, info.st_mtime_ns) == (size, mtime_ns):
        return True
    if info.st_size != size:
        return False
    state = file_state(path)      # touched, same size: the content decides
    return state is not None and state[2] == digest


# ---------------------------------------------------------------------------- entries

class _SafeUnpickler(pickle.Unpickler):
    """Builtin data and this package's own classes; any other global is refused."""

    _BUILTINS = frozenset({"set", "frozenset", "complex", "range", "slice", "bytearray"})

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in self._BUILTINS:
            return super().find_class(module, name)
        if module.split(".", 1)[0] in ("flake8_torch_preflight", "vram_estimator") and \
                module in sys.modules:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _read_entry(path: str) -> Optional[dict]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
            written = os.fstat(handle.fileno()).st_mtime
        entry = _SafeUnpickler(io.BytesIO(data)).load()
    except Exception:       # missing, truncated, foreign, refused: a miss
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    if time.time() - written > 24 * 3600:
        _touch(path)        # pruning keeps what is used
    return entry


def _write_entry(path: str, entry: dict) -> None:
    try:
        _write_atomically(path, pickle.dumps(entry, protocol=4))
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
        pass                # a cache that cannot write is a cache that misses
    _maybe_prune(os.path.dirname(path))


def _write_atomically(path: str, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TEMP_PREFIX)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _entry_path(folder: str, *key: str) -> str:
    name = hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return os.path.join(folder, name + ".pickle")


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _touch(path: str) -> None:
    try:
        os.utime(path)
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
    if time.time() - _mtime(stamp) < PRUNE_EVERY_S:
        return
    try:
        with open(stamp, "ab"):
            pass
        _touch(stamp)
    except OSError:
        return
    prune(folder)


def prune(folder: str, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES,
          max_age_s: float = MAX_AGE_S) -> int:
    """Remove old entries (and stale temporary files) from `folder`; the number removed."""
    now = time.time()
    kept: List[Tuple[float, int, str]] = []
    removed = 0
    try:
        listing = list(os.scandir(folder))
    except OSError:
        return 0
    for item in listing:
        try:
            info = item.stat()
        except OSError:
            continue
        if item.name.startswith(TEMP_PREFIX):
            if now - info.st_mtime > PRUNE_EVERY_S:
                removed += _remove(item.path)
        elif item.name.endswith(".pickle"):
            if now - info.st_mtime > max_age_s:
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


# ---------------------------------------------------------------------------- findings

class Dependencies:
    """What the analysis of one file read besides it: module lookups and the files found."""

    def __init__(self, lookups: Sequence[Tuple[str, str, Optional[str]]],
                 files: Iterable[str]) -> None:
        self.lookups = list(lookups)
        self.files = sorted(set(files))

    def record(self) -> Optional[Tuple[list, list]]:
        """(lookups, [(path, size, mtime_ns, sha256)]), or None when a file cannot be read."""
        states = []
        for path in self.files:
            state = file_state(path)
            if state is None:
                return None
            states.append((path,) + state)
        return self.lookups, states


# (working directory, importing file, module) -> what the lookup finds in this process (the
# file system is taken not to change during a run, as `project.module_file` takes it; without
# a root marker the search depends on the working directory)
_ANSWERS: Dict[Tuple[str, str, str], Optional[str]] = {}


def _still_valid(recorded, lookup) -> bool:
    lookups, states = recorded
    for path, size, mtime_ns, digest in states:
        if not _unchanged(path, size, mtime_ns, digest):
            return False
    cwd = os.getcwd()
    for importer, module, found in lookups:
        key = (cwd, importer, module)
        if key not in _ANSWERS:
            _ANSWERS[key] = lookup(importer, module)
        if _ANSWERS[key] != found:
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
    """The stored findings records of `filename` when its entry is valid, else None.

    `lookup(importer, module)` answers a module lookup now (`project.module_file`)."""
    folder = _folder(filename, _FINDINGS)
    if folder is None:
        return None
    key = _findings_key(filename, options)
    entry = _read_entry(_entry_path(folder, *key))
    if entry is None or entry.get("key") != key or entry.get("digest") != digest:
        return None
    try:
        if not _still_valid(entry["reads"], lookup):
            return None
        return list(entry["findings"])
    except Exception:     # a damaged entry of the right format
        return None


def store_findings(filename: str, digest: str, options: str, records: list,
                   dependencies: Dependencies) -> None:
    folder = _folder(filename, _FINDINGS)
    if folder is None:
        return
    reads = dependencies.record()
    if reads is None:
        return
    key = _findings_key(filename, options)
    _write_entry(_entry_path(folder, *key),
                 {"format": FORMAT, "key": key, "digest": digest, "reads": reads,
                  "findings": records})


# ---------------------------------------------------------------------------- objects

def load_object(kind: str, path: str) -> Optional[Any]:
    """The value stored by `store_object(kind, path, ...)` for the file at `path` as it is
    on disk now, or None (a miss, the cache off, the file unreadable).

    Contract: the value was computed from that file's bytes alone (and this tool's code):
    it is keyed by (kind, absolute path, the file's SHA-256, the tool's fingerprint), so it
    must not depend on other files, options or the importer. Values are pickled; reading
    one accepts only builtin data and instances of this package's classes."""
    if not cacheable(path):
        return None
    state = file_state(path)
    folder = _folder(path, _OBJECTS)
    if state is None or folder is None:
        return None
    key = (tool_fingerprint(), kind, os.path.abspath(path))
    entry = _read_entry(_entry_path(folder, *key))
    if entry is None or entry.get("key") != key or entry.get("digest") != state[2]:
        return None
    return entry.get("value")


def store_object(kind: str, path: str, value: Any, digest: Optional[str] = None) -> None:
    """Keep `value` for the file at `path` (see `load_object`). `digest` is the SHA-256 of
    the bytes the value was computed from: given, the value is kept only while the file
    still has them (a file changed while it was analysed is not recorded wrongly)."""
    if not cacheable(path):
        return
    state = file_state(path)
    folder = _folder(path, _OBJECTS)
    if state is None or folder is None or (digest is not None and digest != state[2]):
        return
    key = (tool_fingerprint(), kind, os.path.abspath(path))
    _write_entry(_entry_path(folder, *key),
                 {"format": FORMAT, "key": key, "digest": state[2], "value": value})
