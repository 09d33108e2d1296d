"""Run untrusted Python programs in a separate, confined process.

One sandbox process (``python -I``, isolated mode) runs a batch of programs; it forks once per
program so that each gets its own wall timeout, CPU limit and process group, and one runaway
program cannot take the others with it. A program passes when it runs to the end without raising.

Confinement is bubblewrap (``bwrap``, Debian's ``bubblewrap`` package), the tool Flatpak confines
its applications with, run unprivileged in a user namespace:

* no network: ``--unshare-net`` leaves only a loopback of its own, so nothing on the host or
  beyond can be reached;
* a read-only view of the system (``--ro-bind / /``), a fresh ``/dev`` and ``/proc``, and a
  private ``/tmp`` (a small tmpfs, also the working directory) that vanishes with the sandbox;
* its own PID namespace, with the sandbox's runner as PID 1 (``--as-pid-1``: bwrap's own init left
  a zombie on the host per launch where the host's PID 1 does not reap): when the batch ends, every
  process it started dies with it, daemons that left their process group included;
* rlimits set by the sandbox's own code before any candidate runs: memory (``RLIMIT_AS``), CPU
  per program, processes (``RLIMIT_NPROC``, counted inside its user namespace), file size, no core
  files; plus a wall timeout per program and a kill of its whole process group.

As root (CI containers) bwrap is started as a throwaway uid (``Popen(user=...)``, set by
``subprocess`` itself, no ``preexec_fn``): root is exempt from ``RLIMIT_NPROC``, a throwaway uid is
not. Nothing here changes namespaces inside this process, which may run threads.

Where bwrap is missing or cannot start (no user namespaces), ``isolation()`` says ``"unconfined"``
and ``run_programs`` refuses unless allowed (``allow_unconfined=True`` or
``BENCHFILL_ALLOW_UNCONFINED=1``, which ``benchfill run --allow-unconfined`` sets): then programs run
with the same rlimits and a socket-blocking preamble in a temporary directory, which guards
against accidents, not against a determined program. Known limit under both: a program can fake
a pass by writing to its result pipe.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

from benchfill.errors import ConfigError

MEMORY_BYTES = 1 << 30
FILE_BYTES = 16 << 20
TMP_BYTES = 64 << 20  # the private /tmp, where the programs write
MAX_PROCESSES = 32
ALLOW_ENV = "BENCHFILL_ALLOW_UNCONFINED"

log = logging.getLogger("benchfill.sandbox")

UNCONFINED_REFUSAL = ("code items run generated programs and no confinement is available (install bubblewrap: "
                      "apt-get install bubblewrap); pass --allow-unconfined to run them without one")


class Unconfined(ConfigError):
    """Programs would run without confinement, and nobody allowed that."""


@dataclass(frozen=True)
class Outcome:
    """How one program ended: ``status`` is passed, failed, timeout or crashed."""

    passed: bool
    status: str
    detail: str


# The sandbox's own code; the programs arrive as JSON on stdin.
_RUNNER = r"""
import ctypes, json, os, resource, select, signal, sys, time
spec = json.loads(sys.stdin.read())
# Limits on this process, inherited by every program and everything it forks (hard limits: no
# program can raise them again).
for limit, value in ((resource.RLIMIT_AS, spec["memory"]), (resource.RLIMIT_FSIZE, spec["file_bytes"]),
                     (resource.RLIMIT_NPROC, spec["processes"]), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(limit, (value, value))
# Orphans of a program (its forks) become our children, so we can reap them.
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if spec["block_socket"]:
    import socket
    def _no_network(*args, **kwargs):
        raise OSError("network disabled in sandbox")
    socket.socket.connect = socket.socket.connect_ex = _no_network
    socket.create_connection = socket.getaddrinfo = _no_network
timeout, cpu = spec["timeout"], spec["cpu_seconds"]
results = []
for source in spec["programs"]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        try:
            exec(compile(source, "<candidate>", "exec"), {"__name__": "__candidate__"})
            message = b"P"
        except BaseException as exc:
            message = ("F" + type(exc).__name__ + ": " + str(exc)[:200]).encode("utf-8", "replace")
        try:
            os.write(w, message)
        finally:
            os._exit(0)
    os.close(w)
    deadline, data, status, ended = time.monotonic() + timeout, b"", None, None
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select([r], [], [], min(left, 0.05))
        if ready:
            chunk = os.read(r, 4096)
            data += chunk
            if not chunk:
                break
        done, how = os.waitpid(pid, os.WNOHANG)
        if done:
            pid, ended = -pid, how  # reaped
            break
    # Killed by the CPU limit (SIGXCPU at the soft limit): its time ran out, as surely as on the wall
    # clock, which it races when both limits are equal.
    if status is None and pid > 0 and not data:
        for _ in range(20):  # its pipe closed as it died: give the exit a moment to be reaped
            done, how = os.waitpid(pid, os.WNOHANG)
            if done:
                pid, ended = -pid, how
                break
            time.sleep(0.005)
    if status is None and not data and ended is not None and os.WIFSIGNALED(ended) \
            and os.WTERMSIG(ended) == signal.SIGXCPU:
        status = "cputime"
    # Kill the program and anything it forked, and reap them all before the next program starts:
    # until reaped they still count against RLIMIT_NPROC, and a fork bomb's dying remnants would
    # make the next program's own fork fail.
    group, end = abs(pid), time.monotonic() + 5
    while time.monotonic() < end:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:  # no process left in the group
            break
        try:
            os.waitpid(-group, 0)
        except ChildProcessError:  # the rest are not (yet) ours: their parents are dying
            time.sleep(0.001)
    os.close(r)
    if spec["own_pid_namespace"]:
        # Alone in this PID namespace: -1 reaches only the batch's processes (daemons that left
        # their group included), so none is still running when the next program starts.
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while True:  # reap orphans the kill left behind
        try:
            if not os.waitpid(-1, 0 if spec["own_pid_namespace"] else os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
    if status == "timeout":
        results.append(["timeout", "wall time over %gs" % timeout])
    elif status == "cputime":
        results.append(["timeout", "CPU time over %ds" % cpu])
    elif data == b"P":
        results.append(["passed", ""])
    elif data.startswith(b"F"):
        results.append(["failed", data[1:201].decode("utf-8", "replace")])
    else:
        results.append(["crashed", "ended without a result (killed, CPU or memory limit)"])
sys.stdout.write(json.dumps(results))
"""


def _world_reachable(path: str) -> bool:
    """Whether any user may execute ``path``: every directory above it open to others (o+x)."""
    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & 0o001:
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & 0o001:
                return False
            if parent == os.path.dirname(parent):
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


@lru_cache(maxsize=2)
def _python(as_other_uid: bool) -> str:
    """The interpreter that runs the sandbox. A throwaway uid must be able to start it: one kept
    under a closed directory (pyenv in ``/root``) gives way to the system's Python 3 (the programs
    need only the standard library)."""
    if not as_other_uid or _world_reachable(sys.executable):
        return sys.executable
    for cand in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(cand) and _world_reachable(cand):
            return cand
    return sys.executable


def _under_private_dirs(python: str) -> list[str]:
    """Interpreter paths (a virtualenv in a checkout under /tmp, say) that the private /tmp would hide."""
    paths = {os.path.dirname(python), os.path.dirname(os.path.realpath(python))}
    if python == sys.executable:
        paths |= {sys.prefix, sys.base_prefix}
    return sorted(p for p in paths if p.startswith(("/tmp/", "/var/tmp/")) and os.path.isdir(p))


def _bwrap_command(bwrap: str, python: str) -> list[str]:
    cmd = [bwrap, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session",
           "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    for path in _under_private_dirs(python):
        cmd += ["--ro-bind", path, path]
    cmd += ["--dir", "/tmp/work", "--chdir", "/tmp/work", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            "--setenv", "HOME", "/tmp/work", "--setenv", "TMPDIR", "/tmp/work", "--"]
    return [*cmd, python, "-I", "-c", _RUNNER]


def _launch(programs: list[str], timeout: float, cpu_seconds: int, bwrap: str | None) -> list[Outcome]:
    """One sandbox process for the batch: under ``bwrap`` when given, else unconfined."""
    root = os.geteuid() == 0
    uid = random.randrange(200_000, 1_200_000) if bwrap and root else None
    request = {"programs": programs, "timeout": timeout, "cpu_seconds": cpu_seconds, "memory": MEMORY_BYTES,
               "file_bytes": FILE_BYTES, "processes": MAX_PROCESSES, "block_socket": bwrap is None,
               "own_pid_namespace": bwrap is not None}
    with tempfile.TemporaryDirectory(prefix="benchfill-sandbox-", ignore_cleanup_errors=True) as workdir:
        if bwrap:
            cmd, cwd, env = _bwrap_command(bwrap, _python(uid is not None)), "/", {"PATH": "/usr/bin:/bin"}
        else:
            cmd, cwd = [sys.executable, "-I", "-c", _RUNNER], workdir
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        extra = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, **extra)
        try:
            out, err = proc.communicate(json.dumps(request).encode(), timeout=(timeout + 1) * len(programs) + 10)
        except BaseException:
            out, err = b"", b"sandbox overran its total time"
            # bwrap's sandbox dies with it (--die-with-parent); unconfined, its session goes too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            if not isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
                raise
        # Done: bwrap exits once its PID namespace is empty. Killing it now would orphan the
        # namespace's init to the host's PID 1, which in a container may never reap it.
        proc.wait()
    try:
        rows = json.loads(out)
        return [Outcome(status == "passed", status, detail) for status, detail in rows]
    except (ValueError, TypeError):
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return [Outcome(False, "crashed", f"sandbox died: {detail[0][:200]}") for _ in programs]


@lru_cache(maxsize=8)
def _bwrap_works(bwrap: str) -> bool:
    """Whether bubblewrap can start a sandbox here (it needs user namespaces); probed once per binary."""
    try:
        ok = _launch(["pass"], 10.0, 10, bwrap)[0].passed
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("bubblewrap at %s cannot start a sandbox: %s", bwrap, exc)
        return False
    if not ok:
        log.warning("bubblewrap at %s cannot start a sandbox (user namespaces refused?)", bwrap)
    return ok


def _bwrap() -> str | None:
    """The bubblewrap that works here, found on ``PATH`` at each call (a test may hide it)."""
    path = shutil.which("bwrap")
    return path if path and _bwrap_works(path) else None


def isolation() -> str:
    """The confinement generated programs get here: ``"bubblewrap"`` or ``"unconfined"``."""
    return "bubblewrap" if _bwrap() else "unconfined"


def unconfined_allowed() -> bool:
    return os.environ.get(ALLOW_ENV, "").strip() == "1"


def run_programs(programs: list[str], timeout: float = 10.0, cpu_seconds: int = 10,
                 allow_unconfined: bool | None = None) -> list[Outcome]:
    """Run each program in one confined sandbox process; one ``Outcome`` per program, in order.

    Without bubblewrap this raises ``Unconfined`` unless ``allow_unconfined`` (default: the
    ``BENCHFILL_ALLOW_UNCONFINED=1`` environment variable) says to run them anyway.
    """
    if not programs:
        return []
    bwrap = _bwrap()
    if bwrap is None and not (unconfined_allowed() if allow_unconfined is None else allow_unconfined):
        raise Unconfined(UNCONFINED_REFUSAL)
    return _launch(list(programs), timeout, cpu_seconds, bwrap)


__all__ = ["ALLOW_ENV", "UNCONFINED_REFUSAL", "Outcome", "Unconfined", "isolation", "run_programs"]
