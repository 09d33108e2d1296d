"""The sandbox's own code: runs a batch of candidate programs, each in a fork of its own.

``evaluators.sandbox`` starts it as ``python -I -c <this file>``, under bubblewrap or unconfined. It
reads the request as JSON on stdin and writes one ``[status, detail]`` JSON line per program on stdout.
Standard library only, and no syntax newer than Python 3.7: it may run under the system's Python.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import select
import signal
import stat
import struct
import sys
import time

SCRATCH_UNUSABLE = 3  # exit status: the scratch areas could not be emptied for the next program
_MAX_MESSAGE = 512  # a result is "P" or "F" and 200 characters: a program writing more is not one of ours

# System calls no program may make. SysV shared memory, semaphores and message queues and memfd hold
# memory that no rlimit counts (SysV objects also outlive the program that made them, until the batch
# ends). The kernel's keyrings belong to no namespace: bwrap's new session is only setsid, so a program
# could read the session keyring of whoever started benchfill (a Kerberos ticket, an fscrypt key), plant
# keys there that outlive grading, and use up the user's key quota (as Docker's default profile does,
# they are refused). Per architecture: its audit number, then shmget, semget, msgget, memfd_create,
# add_key, request_key, keyctl.
_REFUSED = {
    "x86_64": (0xC000003E, (29, 64, 68, 319, 248, 249, 250)),
    "aarch64": (0xC00000B7, (194, 190, 186, 279, 217, 218, 219)),
}
_X32_BIT = 0x40000000  # x86_64's x32 system calls: the same calls under other numbers


def _refuse_system_calls(libc) -> bool:
    """A seccomp filter on this process and all it starts: the calls above fail with EPERM, and so does
    every call through another ABI (32-bit). False where this architecture is not known."""
    arch, calls = _REFUSED.get(os.uname().machine, (None, ()))
    if arch is None or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    tests = [_X32_BIT] if arch == 0xC000003E else []
    tests += list(calls)
    deny_at = 4 + len(tests) + 1  # the last instruction
    code = [(load, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny), (load, 0, 0, 0)]
    for k in tests:
        code.append((jge if k == _X32_BIT else jeq, deny_at - len(code) - 1, 0, k))
    code += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *c) for c in code))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(code), ctypes.cast(buf, ctypes.c_void_p))
    ul = ctypes.c_ulong
    if libc.prctl(38, ul(1), ul(0), ul(0), ul(0)):  # PR_SET_NO_NEW_PRIVS, needed to install a filter
        return False
    return libc.prctl(22, ul(2), ctypes.byref(prog), ul(0), ul(0)) == 0  # PR_SET_SECCOMP, MODE_FILTER


def _children() -> list:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _end_all(own_pid_namespace: bool) -> None:
    """Kill and reap every process the batch started, daemons included. Alone in a PID namespace,
    kill(-1) reaches them all. Elsewhere this process is their subreaper: whatever left its process
    group, however it detached, is a child of ours or below one, and becomes ours when its parent dies."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if own_pid_namespace:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            for pid in _children():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:  # none left
            return
        time.sleep(0.001)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _remove(parent_fd: int, name: str, dev: int) -> None:
    """Remove ``name`` and everything below it. By descriptors, one at a time, without recursion: a
    program may nest directories far deeper than Python's recursion limit or PATH_MAX. Symbolic links
    are removed, never followed; directories are made ours to empty first (a program may have closed
    them with chmod 0); another file system below (a mount point) is an error."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    os.chmod(name, 0o700, dir_fd=parent_fd)
    fd, depth, left = os.open(name, _DIR_FLAGS, dir_fd=parent_fd), 0, None
    try:
        while True:
            if os.fstat(fd).st_dev != dev:
                raise OSError(errno.EBUSY, "a mount point inside the scratch area")
            seen = descended = False
            with os.scandir(fd) as entries:
                for entry in entries:
                    seen = True
                    if not entry.is_dir(follow_symlinks=False):
                        os.unlink(entry.name, dir_fd=fd)
                        continue
                    try:
                        os.rmdir(entry.name, dir_fd=fd)
                        continue
                    except OSError:
                        if entry.inode() == left:  # emptied, and still not removable
                            raise
                    os.chmod(entry.name, 0o700, dir_fd=fd)
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd, depth, left, descended = child, depth + 1, None, True
                    break
            if descended or seen:
                continue
            if depth == 0:
                break
            left = os.fstat(fd).st_ino
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd, depth = parent, depth - 1
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _modes(scratch: list, keep: list) -> dict:
    """The modes to restore before each program: the scratch areas' own, and those of the directories
    on the way to a mount kept inside one (an interpreter under /tmp)."""
    modes = {}
    for top in scratch:
        modes[top] = os.stat(top).st_mode & 0o7777
        for path in keep:
            if path.startswith(top.rstrip("/") + "/"):
                up = os.path.dirname(path)
                while len(up) > len(top.rstrip("/")):
                    modes[up] = os.stat(up).st_mode & 0o7777
                    up = os.path.dirname(up)
    return modes


def _clear(top: str, keep: frozenset, modes: dict) -> None:
    """Empty the scratch area ``top``, all but the mounts in ``keep`` and the way to them."""
    try:
        os.chmod(top, modes[top])
    except PermissionError:  # not ours (then not the programs' either)
        pass
    fd = os.open(top, _DIR_FLAGS)
    try:
        dev = os.fstat(fd).st_dev
        with os.scandir(fd) as entries:
            names = [e.name for e in entries]
        for name in names:
            path = top.rstrip("/") + "/" + name
            if path in keep:
                continue
            if path in modes:
                _clear(path, keep, modes)
            else:
                _remove(fd, name, dev)
    finally:
        os.close(fd)


def _fresh_scratch(spec: dict, modes: dict) -> None:
    os.chdir("/")
    keep = frozenset(spec["keep"])
    for top in spec["scratch"]:
        _clear(top, keep, modes)
    os.mkdir(spec["workdir"], 0o700)
    os.chdir(spec["workdir"])


def _result_of(exc: BaseException) -> bytes:
    try:
        text = "F" + type(exc).__name__ + ": " + str(exc)[:200]
    except BaseException:  # noqa: B036  (a program's exception may fail to print; it failed all the same)
        text = "F" + "unprintable exception"
    return text.encode("utf-8", "replace")


def _run(source: str, spec: dict, _write=os.write, _exit=os._exit, _result_of=_result_of) -> list:
    """One program in a fork of its own. The fork reports through ``_write`` and ends through
    ``_exit``, taken when this module was read: a program that replaces ``os.write`` or ``os._exit``
    replaces them in its own copy of ``os`` only."""
    timeout, cpu = spec["timeout"], spec["cpu_seconds"]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(null)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            try:
                exec(compile(source, "<candidate>", "exec"), {"__name__": "__candidate__"})
                message = b"P"
            except BaseException as exc:  # noqa: B036  (SystemExit, KeyboardInterrupt: failures too)
                message = _result_of(exc)
            _write(w, message)
        finally:
            _exit(0)
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
            if len(data) > _MAX_MESSAGE:
                status = "overflow"
                break
        done, how = os.waitpid(pid, os.WNOHANG)
        if done:
            pid, ended = -pid, how  # reaped
            break
    # A program that wrote its result and ended between one look at the pipe and the next was reaped with
    # its result unread: a pass graded "ended without a result" (1 batch in about 450 on a loaded machine).
    # Whatever it wrote is in the pipe still; a descendant holding the pipe open cannot make this wait.
    while status is None and select.select([r], [], [], 0)[0]:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
        if len(data) > _MAX_MESSAGE:
            status = "overflow"
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
    _end_all(spec["own_pid_namespace"])
    if status == "timeout":
        return ["timeout", f"wall time over {timeout:g}s"]
    if status == "cputime":
        return ["timeout", f"CPU time over {cpu}s"]
    if data == b"P":
        return ["passed", ""]
    if data.startswith(b"F") and status is None:
        return ["failed", data[1:201].decode("utf-8", "replace")]
    return ["crashed", "ended without a result (killed, CPU or memory limit)"]


def main() -> None:
    spec = json.loads(sys.stdin.read())
    # Hard limits on this process, inherited by every program and all it forks.
    for limit, value in ((resource.RLIMIT_AS, spec["memory"]), (resource.RLIMIT_FSIZE, spec["file_bytes"]),
                         (resource.RLIMIT_NPROC, spec["processes"]), (resource.RLIMIT_NOFILE, spec["files"]),
                         (resource.RLIMIT_MSGQUEUE, 0), (resource.RLIMIT_CORE, 0)):
        hard = resource.getrlimit(limit)[1]
        if hard != resource.RLIM_INFINITY and hard < value:  # already lower: keep that
            value = hard
        resource.setrlimit(limit, (value, value))
    libc = ctypes.CDLL(None, use_errno=True)
    ul = ctypes.c_ulong
    # Orphans of a program (its forks, its daemons) become our children, so we can end and reap them.
    libc.prctl(36, ul(1), ul(0), ul(0), ul(0))  # PR_SET_CHILD_SUBREAPER
    # Not dumpable: a program (same uid) cannot ptrace this process or open its /proc/<pid>/fd (the
    # pipe these results go back on).
    libc.prctl(4, ul(0), ul(0), ul(0), ul(0))  # PR_SET_DUMPABLE
    _refuse_system_calls(libc)
    if spec["block_socket"]:
        import socket

        def _no_network(*args, **kwargs):
            raise OSError("network disabled in sandbox")

        socket.socket.connect = socket.socket.connect_ex = _no_network
        socket.create_connection = socket.getaddrinfo = _no_network
    modes = _modes(spec["scratch"], spec["keep"])
    for source in spec["programs"]:
        try:  # each program starts in empty scratch areas, whatever the one before left there
            _fresh_scratch(spec, modes)
        except OSError as exc:  # the caller starts a fresh sandbox for the rest
            sys.stderr.write(f"scratch area left unusable: {exc}\n")
            sys.exit(SCRATCH_UNUSABLE)
        # One line per program as it ends: if this process dies, what it finished is not lost.
        sys.stdout.write(json.dumps(_run(source, spec)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
