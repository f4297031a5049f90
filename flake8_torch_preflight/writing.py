"""Writing users' files: atomically, only inside the tree we were given, one line per failure.

`tpf fix`, `tpf check -o` and the baseline are the only writers. A file is written to a
temporary file in the target's own folder (same file system, so the rename is atomic),
flushed to disk, given the original's permission bits (a new file: what the umask allows,
as `open` would create it), and moved over the original with `os.replace`: a crash or a full
disk leaves either the old file or the new one, never half of each. Just before the rename a
fixed file is compared with what was read (size, modification time, SHA-256 of the content);
if it changed meanwhile (an editor saved it while `tpf fix` worked) it is left as it is, with
a message. A symlink is followed only when its target lies inside the tree named on the
command line; the link itself is kept. Every message names the file.

**Temporary files** (`create_temporary`, used by the cache across runs too) are named
`.<name>.<host>-<pid>.<random>.tpf-tmp` and opened with O_EXCL|O_NOFOLLOW (never an existing
file, never through a link). One left by a killed writer is removed by the next run that
discovers files in its folder or writes there (`remove_stale_temporaries`): when its name says
it was written on this machine by a process that no longer exists, or whoever wrote it, when
it is more than an hour old (a write lasts milliseconds). A live writer's file is never
removed: its process exists. (Where the pid cannot be asked, as on Windows or a writer in
another pid namespace with the same host name, only the hour counts, or the writer's rename
fails and it reports the file as not written; the file it meant to replace is untouched.)
"""
from __future__ import annotations

import hashlib
import os
import secrets
import stat
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

TEMP_SUFFIX = ".tpf-tmp"
STALE_AFTER_S = 3600
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class WriteProblem(Exception):
    """A file we will not or cannot write: one line for the user, naming it; the run goes on."""


@dataclass(frozen=True)
class Snapshot:
    """What a file was when it was read: compared again just before it is replaced."""
    size: int
    mtime_ns: int
    digest: str

    @classmethod
    def of(cls, status: os.stat_result, data: bytes) -> "Snapshot":
        return cls(status.st_size, status.st_mtime_ns, hashlib.sha256(data).hexdigest())


def atomic_write(path: str, data: bytes, display: Optional[str] = None,
                 expected: Optional[Snapshot] = None) -> None:
    """Replace `path`'s contents with `data`, keeping its mode; raises WriteProblem naming
    `display` (default `path`). With `expected`, the file must still be what was read."""
    name = display or path
    folder = os.path.dirname(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise WriteProblem(f"{name}: cannot write: {_reason(exc)}") from None
    if mode is not None and (not mode & stat.S_IWUSR or not os.access(path, os.W_OK)):
        # a read-only file stays so: replacing it through its folder would bypass that (and
        # root passes every os.access test)
        raise WriteProblem(f"{name}: cannot write: the file is read-only")
    remove_stale_temporaries(folder)
    try:
        handle, temporary = create_temporary(folder, os.path.basename(path))
    except OSError as exc:
        raise WriteProblem(f"{name}: cannot write: {_reason(exc)}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode if mode is not None else new_file_mode())
        if expected is not None and _changed_since(path, expected):
            _remove_quietly(temporary)
            raise WriteProblem(f"{name}: not written: the file changed on disk while tpf "
                               f"worked on it; run tpf again")
        os.replace(temporary, path)
    except OSError as exc:
        _remove_quietly(temporary)
        raise WriteProblem(f"{name}: cannot write: {_reason(exc)}") from None
    except BaseException:
        _remove_quietly(temporary)
        raise


def create_temporary(folder: str, name: str) -> Tuple[int, str]:
    """(descriptor open for writing, path) of a new empty file in `folder`, mode 0600, named
    for `name` and for this machine and process (see the module's docstring)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        path = os.path.join(folder, f".{name[:64]}.{_host()}-{os.getpid()}."
                                    f"{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {folder}")


def remove_stale_temporaries(folder: str) -> int:
    """Remove from `folder` the temporary files of ours whose writer is gone; how many."""
    try:
        with os.scandir(folder) as listing:
            ours = [item for item in listing
                    if item.name.startswith(".") and item.name.endswith(TEMP_SUFFIX)]
    except OSError:
        return 0
    removed, now = 0, time.time()
    for item in ours:
        try:
            info = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and _stale(item.name, now - info.st_mtime):
            removed += _remove_quietly(item.path)
    return removed


def _stale(name: str, age_s: float) -> bool:
    if age_s > STALE_AFTER_S:
        return True
    parts = name[:-len(TEMP_SUFFIX)].rsplit(".", 2)     # ".<name>", "<host>-<pid>", random
    host, _, pid = parts[1].partition("-") if len(parts) == 3 else ("", "", "")
    return host == _host() and pid.isascii() and pid.isdigit() and not _alive(int(pid))


def _host() -> str:
    node = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    return hashlib.sha256(node.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _alive(pid: int) -> bool:
    """Whether process `pid` exists; True when that cannot be asked (on Windows `os.kill`
    would end the process instead of asking)."""
    if os.name != "posix" or not 0 < pid < 2 ** 31:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:             # exists, someone else's
        return True
    return True


def _changed_since(path: str, expected: Snapshot) -> bool:
    try:
        status = os.stat(path)
        if (status.st_size, status.st_mtime_ns) != (expected.size, expected.mtime_ns):
            return True
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() != expected.digest
    except OSError:   # gone or unreadable now: not what we read
        return True


def new_file_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0o666 less the process's umask."""
    current = os.umask(0o022)   # the only way to read it is to set it (and set it back)
    os.umask(current)
    return 0o666 & ~current


def check_writable(path: str) -> None:
    """Before a run: `path` can be created or replaced (its folder exists and takes a new
    file; an existing file is a writable regular file). Raises WriteProblem naming it."""
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise WriteProblem(f"{path}: is a folder, not a file")
    if not os.path.isdir(folder):
        raise WriteProblem(f"{path}: the folder {os.path.dirname(path) or '.'} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise WriteProblem(f"{path}: cannot write: the folder "
                           f"{os.path.dirname(path) or '.'} is not writable")
    if os.path.lexists(target):
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode):
            raise WriteProblem(f"{path}: not a regular file")
        if not mode & stat.S_IWUSR or not os.access(target, os.W_OK):
            raise WriteProblem(f"{path}: cannot write: the file is read-only")


def write_target(path: str, root: str, display: Optional[str] = None) -> str:
    """The real file to write for `path`, found under the command-line argument `root`.

    A symlink (to the file, or to a folder on the way) is followed only when what it points
    to is inside `root`; otherwise WriteProblem. `root` is the folder argument the file was
    discovered under, or the folder of a file named directly.
    """
    real = os.path.realpath(path)
    tree = os.path.realpath(root if os.path.isdir(root) else os.path.dirname(root) or ".")
    if not _inside(real, tree):
        raise WriteProblem(f"{display or path}: not written: it is a symlink to {real}, "
                           f"outside {root}")
    return real


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:   # different drives on Windows
        return False


def check_output_path(output: str, inputs: Iterable[str]) -> None:
    """`-o FILE` must be writable and must not be one of the files being checked."""
    target = os.path.realpath(output)
    check_writable(output)
    for path in inputs:
        if path != "-" and os.path.realpath(path) == target:
            raise WriteProblem(f"{output}: is one of the files being checked; "
                               f"the report would overwrite it")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _remove_quietly(path: Optional[str]) -> int:
    """Remove `path` if it can be; 1 when removed, else 0."""
    if path:
        try:
            os.unlink(path)
            return 1
        except OSError:
            pass
    return 0
