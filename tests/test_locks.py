"""Locks where the lock file is another user's: held through a read-only descriptor, or refused in one line."""

from __future__ import annotations

import os

import pytest

from benchfill import locks
from benchfill.errors import BenchfillError


def _no_write(monkeypatch, path):
    """As for a group member where the lock file was made 0644 (by another member, or an older benchfill)."""
    real = os.open

    def guarded(p, flags, *args):
        if str(p) == str(path) and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(13, "Permission denied", str(p))
        return real(p, flags, *args)

    monkeypatch.setattr(locks.os, "open", guarded)


def test_a_lock_file_this_user_cannot_write_still_locks(tmp_path, monkeypatch):
    # EACCES was taken for "no locks on this system": both runs of one run id went ahead on one store
    path = tmp_path / ".run.lock"
    path.touch()
    _no_write(monkeypatch, path)
    fd = locks.hold(path, wait=False)
    assert fd is not None
    try:
        with pytest.raises(BlockingIOError):
            locks.hold(path, wait=False)
    finally:
        locks.release(fd)


def test_a_byte_lock_on_a_file_this_user_cannot_write_is_refused_by_name(tmp_path, monkeypatch):
    path = tmp_path / "store.db-runs.lock"
    path.touch()
    _no_write(monkeypatch, path)
    with pytest.raises(BenchfillError, match=r"store\.db-runs\.lock: this user cannot write it, so it cannot lock"):
        locks.hold_byte(path, 7)


def test_a_run_resumed_through_a_lock_file_it_may_only_read_goes_ahead_locked(tmp_path, monkeypatch):
    # the read-only descriptor could not take the pid: ftruncate raised, and the resume died with a traceback
    import subprocess
    import sys

    from benchfill.run import LOCK_FILE, _hold_run

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = tmp_path / LOCK_FILE
    path.write_text(done.stdout)  # the pid of an earlier run, ended
    _no_write(monkeypatch, path)
    fd = _hold_run(tmp_path, "r")
    try:
        assert fd is not None
        # the pid in the file is an earlier run's (this holder could not write its own): not named
        with pytest.raises(BenchfillError, match=r"^run r is in progress in another process \(pid unknown\)"):
            _hold_run(tmp_path, "r")
    finally:
        locks.release(fd)
