"""Worker process pools that end with the process that made them.

A ``ProcessPoolExecutor`` worker waits on its call queue, and holds that queue's write end itself, so when
its owner is killed outright (SIGKILL, the OOM killer) no end-of-file ever reaches it: the workers, and
with forkserver the server they were forked from and the resource tracker, live on orphaned (a killed
run on a code benchmark left four such processes running, the workers 46 MB each). Each worker watches
its owner and exits when the owner does. A clean shutdown is unchanged.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

__all__ = ["owned_pool", "die_with"]


def owned_pool(workers: int, method: str) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes started by ``method`` (fork, forkserver, spawn) that end with this one."""
    return ProcessPoolExecutor(workers, mp_context=mp.get_context(method), initializer=die_with,
                               initargs=(os.getpid(),))


def die_with(owner: int) -> None:
    """Pool initializer: end this process when process ``owner`` ends, however it ends.

    A pidfd (Linux 5.3) becomes readable when its process exits: one blocking wait, no polling. Elsewhere
    the owner is looked for once a second. (Not the parent-death signal: under forkserver a worker's
    parent is the server, which outlives the owner.)

    The owner alone decides when its workers stop: Ctrl-C reaches the terminal's whole process group, and a
    worker that raised it inside a task would report it as the task's error and take the next queued task
    (a stopped NUTS fit ran its queued chains for 21 s more); SIGTERM, which a fork copied the owner's
    handler for, ends a worker at once (``Process.terminate``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:  # gone before this worker started
        os._exit(1)
    except (AttributeError, OSError):
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _alive(owner):
                time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="benchfill-die-with-owner", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the number: ours is gone
        return False
    return True
