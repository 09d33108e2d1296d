"""Run untrusted Python programs in a separate, confined process.

One sandbox process (``python -I``, isolated mode, running ``evaluators/sandbox_runner.py``) runs a
batch of programs; it forks once per program so that each gets its own wall timeout, CPU limit and
process group, and one runaway program cannot take the others with it. A program passes when it runs
to the end without raising.

Confinement is bubblewrap (``bwrap``, Debian's ``bubblewrap`` package), the tool Flatpak confines
its applications with, run unprivileged in a user namespace:

* no network: ``--unshare-all`` leaves only a loopback of its own;
* a root of its own with only what the interpreter needs, read-only: ``/usr`` (and the ``/bin``,
  ``/lib*`` links or directories), the dynamic loader's files from ``/etc``, and the interpreter's
  own directories (``bin``, ``lib`` under its prefixes, a virtualenv's included). Nothing else of
  the host is there: no home directories, no ``/run`` or ``/var/run`` (and so none of the host's Unix
  sockets), no ``/sys``, not the checkout. The root itself and ``/dev`` are remounted read-only;
* a private ``/tmp`` (64 MiB tmpfs; ``/var/tmp`` is a link to it) and ``/dev/shm`` (1 MiB), emptied
  before each program, and a fresh ``/dev`` and ``/proc``;
* no user namespaces inside (``--disable-userns``, where this bwrap has it);
* its own PID namespace, with the runner as PID 1 (``--as-pid-1``: bwrap's own init left a zombie on
  the host per launch where the host's PID 1 does not reap): every process of a program is killed
  before the next program starts, and should a sandbox die the rest of the batch gets a fresh one;
* rlimits set by the runner before any candidate runs: memory (``RLIMIT_AS``, per process),
  CPU per program, processes (``RLIMIT_NPROC``, counted inside its user namespace), file size, open
  files, no core files; plus a wall timeout per program; and a seccomp filter refusing the system
  calls whose memory no rlimit counts (SysV IPC, memfd).

As root (CI containers) the sandbox is started as a throwaway uid (``Popen(user=...)``, set by
``subprocess`` itself, no ``preexec_fn``): root is exempt from ``RLIMIT_NPROC``, a throwaway uid is
not. Nothing here changes namespaces inside this process, which may run threads.

Where bwrap is missing or cannot start (no user namespaces), ``isolation()`` says ``"unconfined"``
and ``run_programs`` refuses, in one line saying why, unless allowed (``allow_unconfined=True``, or
``BENCHFILL_ALLOW_UNCONFINED=1`` set by the user). Then the programs run with the same rlimits and
seccomp filter, an empty environment, a socket-blocking preamble, a scratch directory emptied before
each, as a throwaway uid when this process is root, and every process a program started is killed
before the next one: this guards against accidents, not against a determined program. docs/traffic.md
says what is and is not bounded.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from benchfill.errors import ConfigError
from benchfill.evaluators.sandbox_runner import (
    SCRATCH_UNUSABLE,  # its exit status when the scratch areas stay dirty
)

MEMORY_BYTES = 1 << 30  # address space, per process
FILE_BYTES = 16 << 20
TMP_BYTES = 64 << 20  # the private /tmp (and /var/tmp, a link to it), where the programs write
SHM_BYTES = 1 << 20  # the private /dev/shm (POSIX shared memory and semaphores)
MAX_PROCESSES = 32
MAX_OPEN_FILES = 128  # per process
ALLOW_ENV = "BENCHFILL_ALLOW_UNCONFINED"
WORKDIR = "/tmp/work"  # each program's working directory (and HOME, TMPDIR) under bubblewrap

UNCONFINED_REFUSAL = ("code items run generated programs and no confinement is available (install bubblewrap: "
                      "apt-get install bubblewrap); pass --allow-unconfined to run them without one")

_RUNNER = (Path(__file__).parent / "sandbox_runner.py").read_text(encoding="utf-8")

# Read-only from the host under bubblewrap, where they exist: the system, and what the dynamic loader
# reads from /etc. Links (/bin -> usr/bin on a merged /usr) are made links again.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
_SCRATCH = ("/tmp", "/dev/shm")  # emptied before each program under bubblewrap


class Unconfined(ConfigError):
    """Programs would run without confinement, and nobody allowed that."""


@dataclass(frozen=True)
class Outcome:
    """How one program ended: ``status`` is passed, failed, timeout or crashed."""

    passed: bool
    status: str
    detail: str


def _world_reachable(path: str, need: int = 0o001) -> bool:
    """Whether any user may reach ``path``: every directory above it open to others (o+x), and the
    path itself too (``need``: o+x to execute or enter it, o+r to read a file)."""
    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & need:
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


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _paths_of(python: str, prefixes: bool) -> tuple[str, ...]:
    """What an interpreter needs besides the system: its own directory (and that of its real path),
    and for this process's own interpreter, under each prefix (a virtualenv's, and the Python's it was
    made from), ``bin``, ``lib``, ``lib64`` and ``pyvenv.cfg``. Not the prefixes whole: a Python
    installed with ``--prefix=$HOME`` would bring the home directory in."""
    found = {os.path.dirname(python), os.path.dirname(os.path.realpath(python))}
    if prefixes:
        for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
            found |= {os.path.join(prefix, name) for name in ("bin", "lib", "lib64", "pyvenv.cfg")}
    found = {os.path.abspath(p) for p in found if p and os.path.exists(p)}
    # The system is bound already; "/" would undo the confinement.
    found = {p for p in found if p != "/" and not any(_under(os.path.realpath(p), s) or _under(p, s)
                                                     for s in _SYSTEM_DIRS)}
    return tuple(sorted(p for p in found if not any(q != p and _under(p, q) for q in found)))


@lru_cache(maxsize=2)
def _interpreter(as_other_uid: bool) -> tuple[str, tuple[str, ...]]:
    """The interpreter that runs the sandbox, and the paths to bind for it. A throwaway uid must be
    able to reach them: an interpreter kept under a closed directory (pyenv in ``/root``) gives way to
    the system's Python 3 (the programs need only the standard library)."""
    own = _paths_of(sys.executable, prefixes=True)
    if not as_other_uid or (_world_reachable(sys.executable) and all(
            _world_reachable(p, 0o001 if os.path.isdir(p) else 0o004) for p in own)):
        return sys.executable, own
    for cand in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(cand) and _world_reachable(cand):
            return cand, _paths_of(cand, prefixes=False)
    return sys.executable, own


_USERNS_GUARD_REFUSED: set[str] = set()  # bwraps that start a sandbox only without --disable-userns


@lru_cache(maxsize=8)
def _knows_disable_userns(bwrap: str) -> bool:
    """Whether this bwrap has ``--disable-userns`` (0.8 and later); asked once per binary."""
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in out.stdout + out.stderr


def _disables_userns(bwrap: str) -> bool:
    return bwrap not in _USERNS_GUARD_REFUSED and _knows_disable_userns(bwrap)


def _bwrap_command(bwrap: str, python: str, binds: tuple[str, ...]) -> list[str]:
    cmd = [bwrap, "--unshare-all"]
    if _disables_userns(bwrap):
        cmd += ["--unshare-user", "--disable-userns"]  # no nested user namespace: no mounts of its own
    cmd += ["--as-pid-1", "--die-with-parent", "--new-session"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    # --size applies to the next --tmpfs only; bwrap's /dev is a tmpfs too, so it is made read-only
    # (its device nodes stay writable: writing /dev/null is not writing to the file system).
    cmd += ["--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
            "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--symlink", "/tmp", "/var/tmp"]
    for path in binds:  # after the tmpfs: an interpreter under /tmp stays visible
        cmd += ["--ro-bind", path, path]
    cmd += ["--dir", WORKDIR, "--chdir", WORKDIR,
            "--remount-ro", "/",  # the root is a tmpfs of bwrap's, unbounded: nothing may be written there
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            "--setenv", "HOME", WORKDIR, "--setenv", "TMPDIR", WORKDIR, "--"]
    return [*cmd, python, "-I", "-c", _RUNNER]


def _pids_of(uid: int) -> list[int]:
    """The processes owned by ``uid`` (a process gone while read is left out)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def _launch(programs: list[str], timeout: float, cpu_seconds: int, bwrap: str | None) -> list[Outcome]:
    """Outcomes of ``programs``, under ``bwrap`` when given, else unconfined: one sandbox for the batch,
    and a fresh one for the programs after any that killed its sandbox or left it unusable, so that no
    program's outcome depends on another's."""
    outcomes: list[Outcome] = []
    while len(outcomes) < len(programs):
        rows, died, unusable = _launch_once(programs[len(outcomes):], timeout, cpu_seconds, bwrap)
        outcomes += [Outcome(status == "passed", status, detail) for status, detail in rows]
        if len(outcomes) < len(programs) and not (unusable and rows):  # the next one was running
            outcomes.append(Outcome(False, "crashed", f"sandbox died: {died[:200]}"))
    return outcomes


def _launch_once(programs: list[str], timeout: float, cpu_seconds: int,
                 bwrap: str | None) -> tuple[list[list[str]], str, bool]:
    """One sandbox process: the rows of the programs it finished, in order, and when it finished
    fewer than all, why it died and whether it stopped because its scratch area was left unusable."""
    root = os.geteuid() == 0
    uid = random.randrange(200_000, 1_200_000) if root else None
    python, binds = _interpreter(uid is not None)
    request = {"programs": programs, "timeout": timeout, "cpu_seconds": cpu_seconds, "memory": MEMORY_BYTES,
               "file_bytes": FILE_BYTES, "processes": MAX_PROCESSES, "files": MAX_OPEN_FILES,
               "block_socket": bwrap is None, "own_pid_namespace": bwrap is not None}
    overran = False
    with tempfile.TemporaryDirectory(prefix="benchfill-sandbox-", ignore_cleanup_errors=True) as scratch:
        if bwrap:
            cmd, cwd, env = _bwrap_command(bwrap, python, binds), "/", {"PATH": "/usr/bin:/bin"}
            request |= {"scratch": list(_SCRATCH), "workdir": WORKDIR,
                        "keep": [p for p in binds if any(_under(p, s) for s in _SCRATCH)]}
        else:
            workdir = os.path.join(scratch, "work")
            cmd, cwd = [python, "-I", "-c", _RUNNER], scratch
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
            request |= {"scratch": [scratch], "workdir": workdir, "keep": []}
            if uid is not None:
                os.chown(scratch, uid, uid)
            else:  # RLIMIT_NPROC counts the user's processes on the whole host: allow the program its own
                request["processes"] = len(_pids_of(os.getuid())) + MAX_PROCESSES
        extra = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, **extra)
        try:
            out, err = proc.communicate(json.dumps(request).encode(), timeout=(timeout + 1) * len(programs) + 10)
        except BaseException as exc:
            _end_sandbox(proc, uid)
            if not isinstance(exc, subprocess.TimeoutExpired):
                proc.wait()
                raise
            overran = True
            try:
                out, err = proc.communicate(timeout=10)  # the rows it finished before
            except subprocess.TimeoutExpired:
                out, err = b"", b""
        # Done: bwrap exits once its PID namespace is empty. Killing it now would orphan the
        # namespace's init to the host's PID 1, which in a container may never reap it.
        proc.wait()
    rows = []
    for line in out.decode("utf-8", "replace").splitlines()[: len(programs)]:
        try:
            status, detail = json.loads(line)
        except (ValueError, TypeError):
            break
        rows.append([str(status), str(detail)])
    last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    died = "sandbox overran its total time" if overran else last[0]
    return rows, died, proc.returncode == SCRATCH_UNUSABLE and not overran


def _end_sandbox(proc: subprocess.Popen, uid: int | None) -> None:
    """Kill a sandbox that overran: bwrap's dies with it (--die-with-parent). Unconfined, its programs
    are in process groups of their own: as a throwaway uid, every process of that uid goes too."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if uid is not None:
        for pid in _pids_of(uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue


@lru_cache(maxsize=8)
def _bwrap_problem(bwrap: str) -> str | None:
    """Why bubblewrap cannot start a sandbox here (it needs user namespaces), in bwrap's own words;
    None when it can. Probed once per binary; where only ``--disable-userns`` stops it (a kernel that
    refuses the guard), it is used without."""
    problem = _probe(bwrap)
    if problem and _disables_userns(bwrap):
        _USERNS_GUARD_REFUSED.add(bwrap)
        if _probe(bwrap) is None:
            return None
        _USERNS_GUARD_REFUSED.discard(bwrap)
    return problem


def _probe(bwrap: str) -> str | None:
    try:
        outcome = _launch(["pass"], 10.0, 10, bwrap)[0]
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if outcome.passed:
        return None
    reason = outcome.detail.removeprefix("sandbox died: ").removeprefix("bwrap: ").strip()
    return reason or outcome.status


def _confinement() -> tuple[str | None, str | None]:
    """(the bwrap that works here, None), or (None, the one line saying why there is none). bwrap is
    looked up on ``PATH`` at each call (a test may hide it)."""
    path = shutil.which("bwrap")
    if not path:
        return None, UNCONFINED_REFUSAL
    problem = _bwrap_problem(path)
    if problem:
        return None, (f"bubblewrap at {path} cannot start a sandbox: {problem} (code items run generated "
                      "programs; pass --allow-unconfined to run them without one)")
    return path, None


def isolation() -> str:
    """The confinement generated programs get here: ``"bubblewrap"`` or ``"unconfined"``."""
    return "bubblewrap" if _confinement()[0] else "unconfined"


def refusal() -> str | None:
    """The one line a run that must execute code refuses with here; None where bubblewrap works."""
    return _confinement()[1]


def unconfined_allowed() -> bool:
    """Whether the user allowed unconfined programs for this whole process (``BENCHFILL_ALLOW_UNCONFINED=1``)."""
    return os.environ.get(ALLOW_ENV, "").strip() == "1"


def run_programs(programs: list[str], timeout: float = 10.0, cpu_seconds: int = 10,
                 allow_unconfined: bool | None = None) -> list[Outcome]:
    """Run each program in one confined sandbox process; one ``Outcome`` per program, in order.

    Without a working bubblewrap this raises ``Unconfined`` unless ``allow_unconfined`` (default:
    the ``BENCHFILL_ALLOW_UNCONFINED=1`` environment variable) says to run them anyway.
    """
    if not programs:
        return []
    bwrap, why_not = _confinement()
    if bwrap is None and not (unconfined_allowed() if allow_unconfined is None else allow_unconfined):
        raise Unconfined(why_not)
    return _launch(list(programs), timeout, cpu_seconds, bwrap)


__all__ = ["ALLOW_ENV", "UNCONFINED_REFUSAL", "Outcome", "Unconfined", "isolation", "refusal", "run_programs",
           "unconfined_allowed"]
