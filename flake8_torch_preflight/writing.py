"""Writing users' files: atomically, only inside the tree we were given, one line per failure.

`tpf fix` and `tpf check -o` are the only writers. A fix is written to a temporary file in the
target's own folder (same file system, so the rename is atomic), flushed to disk, given the
original's permission bits, and moved over the original with `os.replace`: a crash or a full
disk leaves either the old file or the new one, never half of each. A symlink is followed
only when its target lies inside the tree named on the command line; the link itself is kept.
"""
from __future__ import annotations

import os
import stat
import tempfile
from typing import Iterable, Optional


class WriteProblem(Exception):
    """A file we will not or cannot write: one line for the user; the run goes on."""


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path`'s contents with `data`, keeping its mode; raises WriteProblem."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise WriteProblem(f"cannot write: {_reason(exc)}") from None
    if mode is not None and (not mode & stat.S_IWUSR or not os.access(path, os.W_OK)):
        # a read-only file stays so: replacing it through its folder would bypass that (and
        # root passes every os.access test)
        raise WriteProblem("cannot write: the file is read-only")
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.",
                                             suffix=".tpf-tmp")
    except OSError as exc:
        raise WriteProblem(f"cannot write: {_reason(exc)}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as exc:
        _remove_quietly(temporary)
        raise WriteProblem(f"cannot write: {_reason(exc)}") from None
    except BaseException:
        _remove_quietly(temporary)
        raise


def write_target(path: str, root: str) -> str:
    """The real file to write for `path`, found under the command-line argument `root`.

    A symlink (to the file, or to a folder on the way) is followed only when what it points
    to is inside `root`; otherwise WriteProblem. `root` is the folder argument the file was
    discovered under, or the folder of a file named directly.
    """
    real = os.path.realpath(path)
    tree = os.path.realpath(root if os.path.isdir(root) else os.path.dirname(root) or ".")
    if not _inside(real, tree):
        raise WriteProblem(f"not written: it is a symlink to {real}, outside {root}")
    return real


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:   # different drives on Windows
        return False


def check_output_path(output: str, inputs: Iterable[str]) -> None:
    """`-o FILE` must be writable and must not be one of the files being checked."""
    target = os.path.realpath(output)
    if os.path.isdir(target):
        raise WriteProblem(f"{output}: is a folder, not a file")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise WriteProblem(f"{output}: the folder {os.path.dirname(output) or '.'} does not exist")
    for path in inputs:
        if path != "-" and os.path.realpath(path) == target:
            raise WriteProblem(f"{output}: is one of the files being checked; "
                               f"the report would overwrite it")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _remove_quietly(path: Optional[str]) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
