"""Worker processes (`tpf check -j N`, `tpf fix -j N`) that never outlive the `tpf` that
started them.

An editor, a test runner or `Popen.kill()` ends `tpf` by its pid (SIGKILL or SIGTERM), not by
its process group as Ctrl-C does. Plain `ProcessPoolExecutor` workers then live on, idle on
a queue nobody will ever write, holding the caller's stdout and stderr pipes open, so a caller
reading `tpf`'s output to its end waited for as long as they lived. Here:

- each worker's stdout is /dev/null (results travel through the pool's queue, never fd 1), so
  no worker holds the caller's stdout pipe even for a moment;
- each worker dies with its parent: on Linux by the kernel (`PR_SET_PDEATHSIG`), and on every
  system by a watcher thread that waits for the parent to end (a pidfd where there is one,
  else a poll of the parent pid once a second) and then exits the worker at once;
- SIGTERM in the parent, while a pool runs, unwinds it (`Terminated`): the pool's workers are
  terminated instead of waited for, temporary files are cleaned up by the code unwinding, and
  `tpf` exits 143.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Sequence

PR_SET_PDEATHSIG = 1         # <linux/prctl.h>
_POLL_SECONDS = 1.0


class Terminated(Exception):
    """SIGTERM arrived while worker processes ran: `tpf` stops them and exits 143."""


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers end with this process; on any exception (SIGTERM,
    Ctrl-C, an error) they are terminated, never waited for."""
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_bind_to_parent,
                               initargs=(os.getpid(),))
    previous = _on_sigterm_raise()
    try:
        yield pool
    except BaseException:
        _stop(pool)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        _restore_sigterm(previous)


def ordered_map(pool, function: Callable[[Any], Any], items: Sequence[Any],
                chunksize: int = 1) -> Iterator[Any]:
    """`pool.map(function, items, chunksize=...)`, results in order, minus map's cleanup: a
    map abandoned by an exception cancels its futures, and when `_stop` then ends the
    workers, Python before 3.12 fails in the pool's own thread on the cancelled futures (a
    traceback after `tpf: terminated`)."""
    futures = [pool.submit(_run_chunk, function, items[start:start + chunksize])
               for start in range(0, len(items), max(chunksize, 1))]
    for future in futures:
        yield from future.result()


def _run_chunk(function: Callable[[Any], Any], chunk: Sequence[Any]) -> List[Any]:
    return [function(item) for item in chunk]


def _on_sigterm_raise():
    """SIGTERM raises `Terminated` in the main thread (the handler to restore, or None)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminated(signum, frame):
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, terminated)
    except (ValueError, OSError):   # not allowed here (an embedding host)
        return None


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the workers now; what has not started fails with BrokenProcessPool, unread.
    `_processes` is the executor's own table of its workers (a public `terminate_workers()`
    only exists from Python 3.14)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())   # shutdown drops it
    for process in processes:
        try:
            process.terminate()
        except (OSError, AttributeError, ValueError):
            pass
    pool.shutdown(wait=False)   # not cancel_futures: 3.11 then raises in its own thread


# ---------------------------------------------------------------------------- in the worker

def _bind_to_parent(parent: int) -> None:
    """Worker initializer: stdout to /dev/null, and die with `parent`."""
    try:   # a forked worker inherits the parent's handler; `_stop`'s SIGTERM must end it
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass
    _release_stdout()
    if sys.platform.startswith("linux"):
        _die_with_parent_linux()
    if not _alive(parent):   # it died before the worker got here
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="tpf-parent-watch",
                     daemon=True).start()


def _release_stdout() -> None:
    try:
        sys.stdout.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def _die_with_parent_linux() -> None:
    """The kernel sends SIGKILL to this worker when the process that started it ends."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError, TypeError):
        pass   # the watcher thread still ends the worker


def _alive(pid: int) -> bool:
    if os.name == "nt":
        import multiprocessing

        parent = multiprocessing.parent_process()
        return parent is None or parent.is_alive()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # exists, owned by someone else: not ours, so ours is gone
        return False
    return True


def _watch(parent: int) -> None:
    """Exit this worker at once when `parent` ends."""
    if hasattr(os, "pidfd_open"):
        try:
            import select

            descriptor = os.pidfd_open(parent)
            select.select([descriptor], [], [])   # readable when the process has ended
            os._exit(1)
        except OSError:
            pass   # no pidfd support in this kernel: poll below
    import time

    while _alive(parent):
        time.sleep(_POLL_SECONDS)
    os._exit(1)
