"""Advisory file locks (flock) that the kernel drops when their holder dies, killed or not.

An import holds its output folder while it writes (benchfill/importers/matrix.py); a run holds its run
directory while it works (benchfill/run.py), and its run id in a SQLite store that several runs share
(``hold_byte``, through benchfill/store.py); a fit's save holds its path while it writes the fit and its
posterior draws (``transient``, benchfill/irt/fit.py). Where the platform or the file system has no such lock
(Windows, some network mounts) there is none, and the callers fall back to what they did without.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def hold(path: Path, *, shared: bool = False, wait: bool = True) -> int | None:
    """An flock on ``path`` (a folder, opened as itself so that no lock file is left, or a file, created
    if missing): its descriptor, which ``release`` closes; None where no lock can be taken. Not
    ``wait``ing, a lock another process holds raises ``BlockingIOError``."""
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY) if path.is_dir() else _open_lock_file(path)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:  # no flock on this file system
        os.close(fd)
        return None
    return fd


def _open_lock_file(path: Path) -> int:
    """A lock file's descriptor, created if missing; read-only where this user may not write it (one made
    0644 by another member of a group, or by an older benchfill): flock takes a lock through any
    descriptor, and going on with none let two runs of one run id work on one store at once."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its lock


# hold_byte: the lock file's descriptor, and how many holders in this process each byte has
_FILES: dict[str, int] = {}
_HELD: dict[tuple[str, int], int] = {}
_GUARD = threading.Lock()


def hold_byte(path: Path, byte: int, *, shared: bool = False) -> tuple[str, int] | None:
    """A POSIX record lock on one byte of ``path`` (created if missing), so that one file holds a lock per
    key: its handle for ``release_byte``, None where no lock can be taken. Held elsewhere, raises
    ``BlockingIOError``.

    POSIX locks belong to the process, and closing any descriptor of the file drops all of them, so the
    file stays open here for the process's life; holders of one byte within this process share it (they
    are counted, and the byte is unlocked when the last one lets go)."""
    try:
        import fcntl
    except ImportError:
        return None
    key = (str(path), byte)
    with _GUARD:
        if _HELD.get(key):
            _HELD[key] += 1
            return key
        fd = _FILES.get(key[0])
        if fd is None:
            try:
                fd = _FILES[key[0]] = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except PermissionError:  # a POSIX write lock needs a descriptor open for writing: none to be had
                from benchfill.errors import BenchfillError

                raise BenchfillError(f"{path}: this user cannot write it, so it cannot lock the store's runs "
                                     "against each other; make it writable for the group that shares the store "
                                     "(chmod g+w)") from None
            except OSError:
                return None
        try:
            fcntl.lockf(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB, 1, byte)
        except (BlockingIOError, PermissionError):  # (EACCES: some systems' word for "held")
            raise BlockingIOError(f"{path}: byte {byte} is locked") from None
        except OSError:
            return None
        _HELD[key] = 1
        return key


def release_byte(handle: tuple[str, int] | None) -> None:
    if handle is None:
        return
    import fcntl

    with _GUARD:
        _HELD[handle] -= 1
        if not _HELD[handle]:
            del _HELD[handle]
            fcntl.lockf(_FILES[handle[0]], fcntl.LOCK_UN, 1, handle[1])


@contextmanager
def transient(path: Path) -> Iterator[None]:
    """An exclusive flock on a lock file at ``path`` that exists only while it is held, so that nothing is
    left beside what the caller writes. The holder removes the file before letting go; a waiter that then
    finds its descriptor no longer names the file at ``path`` (removed, or made anew by a third process)
    opens it again. Where no flock can be taken, nothing is held."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    while True:
        try:
            fd = _open_lock_file(path)
        except OSError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no flock on this file system
            os.close(fd)
            path.unlink(missing_ok=True)
            yield
            return
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed the file we waited on
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # while still held: a waiter then sees its file is gone and retries
        os.close(fd)
