"""Run untrusted Python programs in a separate, confined process.

One sandbox process (``python -I``, isolated mode) runs a batch of programs; it
forks once per program so that each gets its own wall timeout, CPU limit and
process group, and one runaway program cannot take the others with it. A
program passes when it runs to the end without raising.

Confinement, strongest available first (``isolation()`` says which is active):

* as root (the usual CI container): the sandbox enters a new network namespace
  (no interfaces but a downed loopback: no connection can be made) and a new
  mount namespace where ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are fresh,
  private tmpfs mounts that vanish with it; then it drops to a throwaway uid
  that owns nothing but its working directory. Writes elsewhere fail with
  EACCES or land on the private tmpfs. Each batch gets its own random uid, so
  ``RLIMIT_NPROC`` (per uid) caps a fork bomb to that batch, and at the end every
  process of that uid is killed, including ones that left the process group.
* root, where namespaces are refused (a container without CAP_SYS_ADMIN): the
  same throwaway uid, a network namespace if one can still be made, else the
  socket preamble below. Without a private ``/tmp`` the uid can create files in
  world-writable directories, so after the batch every file it owns there
  (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``, ``/var/lock`` and their
  world-writable subdirectories) is removed: nothing it wrote outlives it.
* not root: a user + network namespace if the kernel allows unprivileged ones,
  else a preamble in the sandbox that disables ``socket`` (a fallback that
  determined code can get around); files are confined only by the working
  directory being a throwaway temp dir.

Always: ``cwd`` is a fresh ``TemporaryDirectory``, an empty environment,
``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_FSIZE``, ``RLIMIT_NPROC``, no core
files, a new session, and the whole process group is killed on timeout.
Known limit: a program can fake a pass by writing to its result pipe, so this
guards against accidents and sloppy models, not against a determined adversary.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

MEMORY_BYTES = 1 << 30
FILE_BYTES = 16 << 20
MAX_PROCESSES = 32

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PRIVATE_DIRS = (b"/tmp", b"/var/tmp", b"/dev/shm")
_libc = ctypes.CDLL(None, use_errno=True)


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
# Orphans of a program (its forks) become our children, so we can reap them and
# none is left as a zombie for the machine's init to collect.
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
    deadline, data, status = time.monotonic() + timeout, b"", None
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
        if os.waitpid(pid, os.WNOHANG)[0]:
            pid = -pid  # reaped
            break
    # Kill the program and anything it forked, and reap them all before the next program starts:
    # until reaped they still count against the uid's RLIMIT_NPROC, and a fork bomb's dying
    # remnants made the next program's own fork fail (about one batch in ten).
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
    while True:  # reap orphans the kill left behind
        try:
            if not os.waitpid(-1, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
    if status == "timeout":
        results.append(["timeout", "wall time over %gs" % timeout])
    elif data == b"P":
        results.append(["passed", ""])
    elif data.startswith(b"F"):
        results.append(["failed", data[1:201].decode("utf-8", "replace")])
    else:
        results.append(["crashed", "ended without a result (killed, CPU or memory limit)"])
if spec["own_uid"]:
    # A throwaway uid: -1 reaches only this batch's processes (daemons that left
    # their group included); then wait for every one of them.
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
sys.stdout.write(json.dumps(results))
"""


def _check(rc: int) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@lru_cache(maxsize=1)
def _hidden_python() -> dict[str, list[str]]:
    """Closed directories (e.g. a 0700 ``/root``) above the interpreter, and what lies under them.

    The throwaway uid must still reach the interpreter and its libraries (pyenv
    lives in ``/root``), so the sandbox re-exposes exactly those paths.
    """
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.executable)}
    needed = {os.path.dirname(p) if os.path.isfile(p) else p for p in needed}
    needed = {p for p in needed if not any(p.startswith(q + "/") for q in needed)}
    blocked: dict[str, list[str]] = {}
    for path in sorted(needed):
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if not os.stat(ancestor).st_mode & 0o001:
                blocked.setdefault(ancestor, []).append(path)
                break
    return blocked


def _mount(
    source: str | bytes | None, target: str | bytes, fstype: bytes | None, flags: int, data: bytes | None
):
    source = source.encode() if isinstance(source, str) else source
    target = target.encode() if isinstance(target, str) else target
    _check(_libc.mount(source, target, fstype, flags, data))


@lru_cache(maxsize=1)
def _python_under_private_dirs() -> list[str]:
    """Interpreter paths (a virtualenv in a checkout under /tmp, say) that the private /tmp,
    /var/tmp or /dev/shm would hide from the sandbox."""
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.executable)}
    needed = {os.path.dirname(p) if os.path.isfile(p) else p for p in needed}
    private = tuple(d.decode() + "/" for d in _PRIVATE_DIRS)
    return sorted(p for p in needed if p.startswith(private))


def _enter_private_namespaces(hidden: dict[str, list[str]], keep: list[str] | None = None) -> None:
    _check(_libc.unshare(_CLONE_NEWNET | _CLONE_NEWNS))
    _mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
    # Park the interpreter paths that live under a private dir on a scratch tmpfs (over /mnt, in this
    # namespace only), lay the private tmpfs, then put them back where they were.
    parked = []
    if keep:
        _mount(b"tmpfs", b"/mnt", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=700")
        for i, path in enumerate(keep):
            stage = f"/mnt/keep-{i}"
            os.mkdir(stage)
            _mount(path, stage, None, _MS_BIND | _MS_REC, None)
            parked.append((stage, path))
    for path in _PRIVATE_DIRS:
        if os.path.isdir(path):
            _mount(b"tmpfs", path, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=16m,mode=1777")
    for stage, path in parked:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(stage, path, None, _MS_BIND | _MS_REC, None)
        _check(_libc.umount2(stage.encode(), _MNT_DETACH))
    # Re-expose the interpreter: park each needed path, lay an open tmpfs over the closed
    # ancestor (hiding the rest of it, e.g. the home directory), and put the paths back.
    for n, (ancestor, paths) in enumerate(hidden.items()):
        stages = []
        for i, path in enumerate(paths):
            stage = f"/tmp/.benchfill-stage-{n}-{i}"
            os.mkdir(stage)
            _mount(path, stage, None, _MS_BIND | _MS_REC, None)
            stages.append((stage, path))
        _mount(b"tmpfs", ancestor, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=755")
        for stage, path in stages:
            os.makedirs(path, exist_ok=True)
            _mount(stage, path, None, _MS_BIND | _MS_REC, None)
            _check(_libc.umount2(stage.encode(), _MNT_DETACH))


def _set_limits(cpu_seconds: int) -> None:
    for limit, value in (
        (resource.RLIMIT_AS, MEMORY_BYTES),
        (resource.RLIMIT_FSIZE, FILE_BYTES),
        (resource.RLIMIT_NPROC, MAX_PROCESSES),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, cpu_seconds),
    ):
        resource.setrlimit(limit, (value, value))


def _preexec(mode: str, uid: int | None, cpu_seconds: int):
    hidden = _hidden_python() if mode == "root" else {}
    keep = _python_under_private_dirs() if mode == "root" else []

    def setup() -> None:
        if mode == "root":
            _enter_private_namespaces(hidden, keep)
        elif mode == "uid":
            _libc.unshare(_CLONE_NEWNET)  # best effort: the socket preamble stands in when refused
        elif mode == "userns":
            _check(_libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET))
        _set_limits(cpu_seconds)
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    return setup


def _kill_uid(uid: int) -> None:
    """Kill every process of the throwaway uid (those that left the process group too)."""

    def as_uid() -> None:
        os.setresuid(uid, uid, uid)
        try:
            os.kill(-1, signal.SIGKILL)  # as that uid, -1 reaches only its own processes
        except ProcessLookupError:
            pass

    subprocess.run(["true"], preexec_fn=as_uid, check=False)


# World-writable places a throwaway uid can write to when /tmp is not private ("uid" mode).
_SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")


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


@lru_cache(maxsize=4)
def _python_for(mode: str) -> str:
    """The interpreter that runs the sandbox.

    In "uid" mode the throwaway uid itself must be able to start it, with no mount namespace to
    re-expose one kept under a private directory (an interpreter under ``/root``): then the
    system's own Python 3 stands in (the programs need only the standard library).
    """
    if mode != "uid" or _world_reachable(sys.executable):
        return sys.executable
    for cand in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(cand) and _world_reachable(cand):
            return cand
    return sys.executable


def _remove_files_of(uid: int) -> None:
    """Remove what ``uid`` created in the world-writable places (it can write nowhere else)."""
    import shutil
    import stat

    todo, seen = list(_SHARED_WRITABLE), set()
    while todo:
        path = todo.pop()
        try:
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            entries = list(os.scandir(real))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == uid:
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    try:
                        os.unlink(entry.path)
                    except OSError:
                        pass
            elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
                todo.append(entry.path)  # another world-writable directory: it may hold its files


def _launch(mode: str, programs: list[str], timeout: float, cpu_seconds: int) -> list[Outcome]:
    uid = random.randrange(200_000, 1_200_000) if mode in ("root", "uid") else None
    with tempfile.TemporaryDirectory(prefix="benchfill-sandbox-", ignore_cleanup_errors=True) as outer:
        # The outer dir stays root-only, so ".." is closed to the sandbox uid.
        workdir = os.path.join(outer, "work")
        os.mkdir(workdir, 0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
        request = {
            "programs": programs,
            "timeout": timeout,
            "cpu_seconds": cpu_seconds,
            "block_socket": mode in ("plain", "uid"),
            "own_uid": uid is not None,
        }
        proc = subprocess.Popen(
            [_python_for(mode), "-I", "-c", _RUNNER],
            cwd=workdir,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_preexec(mode, uid, cpu_seconds * max(1, len(programs)) + 5),
        )
        try:
            out, err = proc.communicate(
                json.dumps(request).encode(), timeout=(timeout + 1) * len(programs) + 10
            )
        except subprocess.TimeoutExpired:
            out, err = b"", b"sandbox overran its total time"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            if uid is not None:
                _kill_uid(uid)
            if mode == "uid":
                _remove_files_of(uid)
    try:
        rows = json.loads(out)
        return [Outcome(status == "passed", status, detail) for status, detail in rows]
    except (ValueError, TypeError):
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return [Outcome(False, "crashed", f"sandbox died: {detail[0][:200]}") for _ in programs]


@lru_cache(maxsize=1)
def _mode() -> str:
    """The strongest confinement that works on this machine (probed once per process)."""
    candidates = (["root", "uid"] if os.geteuid() == 0 else []) + ["userns"]
    for mode in candidates:
        try:
            if _launch(mode, ["pass"], 10.0, 10)[0].passed:
                return mode
        except (OSError, subprocess.SubprocessError):
            continue
    return "plain"


def isolation() -> dict[str, str]:
    """Which confinement is active, for logs and reports."""
    mode = _mode()
    return {
        "mode": mode,
        "network": {"root": "network namespace", "userns": "network namespace", "plain": "socket preamble",
                    "uid": "network namespace where allowed, else socket preamble"}[mode],
        "filesystem": {"root": "throwaway uid, private /tmp",
                       "uid": "throwaway uid; its files in shared temp dirs removed after each batch"}.get(
            mode, "temporary working directory"),
    }


def run_programs(programs: list[str], timeout: float = 10.0, cpu_seconds: int = 10) -> list[Outcome]:
    """Run each program in one confined sandbox process; one ``Outcome`` per program, in order."""
    if not programs:
        return []
    return _launch(_mode(), list(programs), timeout, cpu_seconds)


__all__ = ["Outcome", "isolation", "run_programs"]
