"""What the sandbox bounds and hides (docs/traffic.md, "The sandbox"): each test is one way a program
reached past it before."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchfill.evaluators.sandbox import run_programs


def _one(source: str, timeout: float = 5.0):
    (outcome,) = run_programs([source], timeout=timeout, cpu_seconds=int(timeout))
    return outcome


def test_host_files_are_out_of_sight(tmp_path):
    """A read-only bind of / let a program read every file of the host and connect() to every socket file
    (D-Bus, PostgreSQL, Docker's). The sandbox's root now holds only the interpreter's directories and what
    the loader needs: the folders where a host's sockets live (/run, /var/run, /home) are not there."""
    from benchfill.evaluators import sandbox

    secret = tmp_path / "secret.txt"
    secret.write_text("api key")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    checkout_file = str(Path(__file__).resolve())  # the checkout: neither bound nor readable
    binds = list(sandbox._interpreter(os.geteuid() == 0)[1])  # the interpreter's own directories
    probe = (
        "import os\n"
        f"for path in ({str(secret)!r}, {checkout_file!r}, '/etc/passwd', '/etc/hostname'):\n"
        "    try:\n"
        "        open(path).read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    raise AssertionError('read ' + path)\n"
        f"binds = {binds!r}\n"
        "for gone in ('/home', '/root', '/run', '/var/run', '/sys', '/srv', '/opt', '/mnt', '/work'):\n"
        "    # absent, or only the way to the interpreter's directories\n"
        "    assert not os.path.exists(gone) or any(b.startswith(gone + '/') for b in binds), gone\n"
        "assert set(os.listdir('/')) <= {'usr', 'bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32', 'etc', 'dev',\n"
        "                                'proc', 'tmp', 'var'} | {b.split('/')[1] for b in binds}\n"
        "assert set(os.listdir('/etc')) <= {'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime', 'alternatives'}\n"
    )
    outcome = _one(probe)
    assert outcome.passed, outcome.detail


def test_scratch_areas_and_the_rest_have_their_documented_bounds():
    probe = (
        "import os\n"
        "def size(path):\n"
        "    s = os.statvfs(path)\n"
        "    return s.f_blocks * s.f_frsize\n"
        "assert size('/tmp') <= 64 << 20 and size('/dev/shm') <= 1 << 20\n"
        "assert os.path.realpath('/var/tmp') == '/tmp'\n"
        "for path in ('/x', '/dev/x', '/etc/x', '/usr/x', '/var/x', '/proc/sys/kernel/shmall'):\n"
        "    try:\n"
        "        open(path, 'w').write('1')\n"
        "    except OSError:\n"
        "        continue\n"
        "    raise AssertionError('wrote ' + path)\n"
        "open('/dev/null', 'w').write('still a sink')\n"
        "try:\n"
        "    open('/dev/shm/big', 'wb').write(b'x' * (2 << 20))\n"
        "    raise AssertionError('2 MiB in /dev/shm')\n"
        "except OSError:\n"
        "    pass\n"
    )
    outcome = _one(probe)
    assert outcome.passed, outcome.detail


def test_no_user_namespace_inside():
    # With one, a program is root of its own namespace and mounts unbounded tmpfs of its own.
    probe = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "assert libc.unshare(0x10000000) != 0, 'made a user namespace'\n")  # CLONE_NEWUSER
    outcome = _one(probe)
    assert outcome.passed, outcome.detail


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="seccomp numbers known for these")
def test_memory_no_rlimit_counts_is_refused():
    # SysV shared memory, detached, counts against no process's RLIMIT_AS and outlived the program;
    # memfd pages written with write() are in no address space either.
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.shmget(0, ctypes.c_size_t(1 << 20), 0o1600) == -1 and ctypes.get_errno() == 1\n"
        "assert libc.semget(0, 1, 0o1600) == -1 and libc.msgget(0, 0o1600) == -1\n"
        "try:\n"
        "    os.memfd_create('x')\n"
        "    raise AssertionError('memfd')\n"
        "except PermissionError:\n"
        "    pass\n"
    )
    outcome = _one(probe)
    assert outcome.passed, outcome.detail


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="seccomp numbers known for these")
def test_the_kernel_keyrings_are_refused():
    # keyrings belong to no namespace: a program read the session keyring of whoever started the grader,
    # planted keys there that outlived grading, and could use up the user's key quota
    nums = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[os.uname().machine]
    probe = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"add_key, request_key, keyctl = {nums}\n"
        "p = b'planted'\n"
        "assert libc.syscall(add_key, b'user', b'qa', p, len(p), -3) == -1 and ctypes.get_errno() == 1\n"
        "assert libc.syscall(request_key, b'user', b'qa', None, 0) == -1 and ctypes.get_errno() == 1\n"
        "assert libc.syscall(keyctl, 0, -3, 0) == -1 and ctypes.get_errno() == 1\n"  # KEYCTL_GET_KEYRING_ID
    )
    outcome = _one(probe)
    assert outcome.passed, outcome.detail


_LITTER = """
import os, socket
os.mkdir('closed')
open('closed/f', 'w').write('x')
os.chmod('closed', 0)
try:
    for i in range(8):
        open('junk%d' % i, 'wb').write(b'x' * (15 << 20))
except OSError:
    pass
for i in range(3000):
    open('s%d' % i, 'w').close()
os.symlink('/usr', 'to_usr')
os.mkfifo('fifo')
open('/dev/shm/left', 'wb').write(b'x' * 1000)
open('/var/tmp/left', 'w').write('x')
here = os.getcwd()
for _ in range(3000):  # deeper than Python's recursion limit and than PATH_MAX
    os.mkdir('d')
    os.chdir('d')
os.chdir(here)
os.chmod('.', 0o500)
"""

_CHECK = """
import os
assert os.listdir('.') == [], os.listdir('.')[:5]
assert os.listdir('/tmp') == ['work'] and os.listdir('/dev/shm') == []
for i in range(3):  # the room the first program filled is back
    open('big%d' % i, 'wb').write(b'x' * (15 << 20))
"""


def test_each_program_finds_empty_scratch_areas():
    outcomes = run_programs([_LITTER, _CHECK, _CHECK], timeout=20.0, cpu_seconds=20)
    assert [o.status for o in outcomes] == ["passed"] * 3, outcomes


def test_a_pass_is_not_faked_by_replacing_os_write():
    patched = "import os\n_w = os.write\nos.write = lambda fd, b: _w(fd, b'P')\nassert False, 'wrong'\n"
    outcome = _one(patched)
    assert not outcome.passed and outcome.detail.startswith("AssertionError"), outcome


def test_the_scratch_cleaner_removes_what_a_program_can_make(tmp_path):
    """The runner's own cleaner, directly: deep, closed, linked, with a kept mount's way left alone."""
    from benchfill.evaluators import sandbox_runner as runner

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    top = tmp_path / "scratch"
    (top / "kept" / "mount").mkdir(parents=True)
    (top / "kept" / "litter").write_text("x")
    deep = top / "work"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(2000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    (top / "link").symlink_to(outside)
    (top / "dirlink").symlink_to(tmp_path)
    (top / "closed").mkdir()
    (top / "closed" / "f").write_text("x")
    os.chmod(top / "closed", 0)
    keep = [str(top / "kept" / "mount")]
    modes = runner._modes([str(top)], keep)
    os.chmod(top / "kept", 0)  # a program closing the way to an interpreter kept under /tmp
    started = time.perf_counter()
    runner._clear(str(top), frozenset(keep), modes)
    assert time.perf_counter() - started < 5
    assert sorted(os.listdir(top)) == ["kept"] and os.listdir(top / "kept") == ["mount"]
    assert stat.S_IMODE(os.stat(top / "kept").st_mode) == modes[str(top / "kept")]
    assert outside.read_text() == "keep me" and (tmp_path / "outside.txt").exists()


def test_programs_after_a_dead_or_unusable_sandbox_get_a_fresh_one(monkeypatch):
    from benchfill.evaluators import sandbox

    launches = []
    script = iter([
        ([["passed", ""]], "killed", False),  # died during the second program: it is charged, not the rest
        ([["passed", ""]], "scratch area left unusable: x", True),  # stopped before the fourth: not charged
        ([], "scratch area left unusable: y", True),  # even a fresh one cannot: the fourth is charged
        ([["failed", "AssertionError: "]], "", False),
    ])

    def launch_once(programs, timeout, cpu_seconds, bwrap):
        launches.append(list(programs))
        return next(script)

    monkeypatch.setattr(sandbox, "_launch_once", launch_once)
    outcomes = sandbox._launch(["a", "b", "c", "d", "e"], 1.0, 1, "bwrap")
    assert launches == [list("abcde"), list("cde"), list("de"), list("e")]
    assert [o.status for o in outcomes] == ["passed", "crashed", "passed", "crashed", "failed"]
    assert outcomes[1].detail == "sandbox died: killed"


def test_a_kernel_refusing_the_user_namespace_guard_still_gets_a_sandbox(monkeypatch, tmp_path):
    import shutil

    from benchfill.evaluators import sandbox

    real = shutil.which("bwrap")
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = --disable-userns ]; then\n"
                    "    echo 'bwrap: Creating new namespace failed: Invalid argument' >&2; exit 1\n  fi\ndone\n"
                    f"exec {real} \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # as a user: a throwaway uid could not reach tmp_path
    try:
        assert sandbox._bwrap_problem(str(fake)) is None
        assert "--disable-userns" not in sandbox._bwrap_command(str(fake), "/usr/bin/python3", ())
    finally:
        sandbox._USERNS_GUARD_REFUSED.discard(str(fake))


def test_a_result_written_just_before_the_program_ends_is_read(tmp_path):
    """The runner's wait, in a process of its own (its clean-up kills its caller's children): a look at the
    pipe that finds nothing, then a program gone with its result unread in the pipe, was graded 'ended
    without a result' (a correct HumanEval answer, about one batch in 450 on a loaded machine)."""
    script = tmp_path / "late.py"
    script.write_text(
        "import json, select, time\n"
        "from benchfill.evaluators import sandbox_runner as runner\n"
        "class Late:  # every wait finds nothing, as when the program writes and ends right after the look\n"
        "    @staticmethod\n"
        "    def select(r, w, x, timeout=None):\n"
        "        if timeout == 0:\n"
        "            return select.select(r, w, x, 0)\n"
        "        time.sleep(0.2)\n"
        "        return [], [], []\n"
        "runner.select = Late\n"
        "spec = {'timeout': 10.0, 'cpu_seconds': 10, 'own_pid_namespace': False}\n"
        "print(json.dumps([runner._run('x = 1\\n', spec), runner._run('assert False, \"no\"\\n', spec)]))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [["passed", ""], ["failed", "AssertionError: no"]]
