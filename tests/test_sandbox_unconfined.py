"""Unconfined (no working bubblewrap, explicitly allowed): what still holds (docs/traffic.md)."""

from __future__ import annotations

import os
import time

import pytest

from benchfill.evaluators.sandbox import ALLOW_ENV, run_programs


@pytest.fixture
def unconfined(monkeypatch, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no bwrap on it
    monkeypatch.setenv(ALLOW_ENV, "0")

    def run(sources, timeout=3.0):
        return run_programs(sources, timeout=timeout, cpu_seconds=int(timeout), allow_unconfined=True)

    return run


def test_a_detached_daemon_does_not_outlive_its_program(unconfined):
    daemon = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork():\n"
              "        os._exit(0)\n    os.write(w, str(os.getpid()).encode())\n    time.sleep(30)\n    os._exit(0)\n"
              "raise Exception(os.read(r, 20).decode())\n")
    (outcome,) = unconfined([daemon])
    grandchild = int(outcome.detail.split(": ")[1])
    deadline = time.monotonic() + 2
    while os.path.exists(f"/proc/{grandchild}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{grandchild}"), "a daemon outlived its batch"


def test_each_program_finds_an_empty_directory(unconfined):
    litter = "import os\nos.mkdir('d')\nos.chmod('d', 0)\nfor i in range(100):\n    open('f%d' % i, 'w').close()\n"
    check = "import os\nassert os.listdir('.') == [], os.listdir('.')[:3]\nassert os.environ['HOME'] == os.getcwd()\n"
    assert [o.status for o in unconfined([litter, check])] == ["passed", "passed"]


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: a user's programs run as that user")
def test_as_root_programs_run_as_a_throwaway_uid(unconfined, monkeypatch):
    # root is exempt from RLIMIT_NPROC and may read every process's environment (API keys)
    monkeypatch.setenv("BENCHFILL_TEST_SECRET", "sk-not-for-programs")
    probe = (
        "import os, time\n"
        "assert os.getuid() >= 200000 and not os.environ.get('BENCHFILL_TEST_SECRET')\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        "            data = open('/proc/%s/environ' % pid, 'rb').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        assert b'sk-not-for-programs' not in data, pid\n"
        "refused = 0\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(0.3)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        refused += 1\n"
        "assert refused, 'forked 40 processes past a limit of 32'\n"
    )
    (outcome,) = unconfined([probe])
    assert outcome.passed, outcome.detail


def test_a_program_that_kills_the_runner_sinks_only_itself(unconfined):
    # Unconfined, a program may signal its runner (same uid): the rest of the batch goes to a fresh one.
    killer = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    outcomes = unconfined(["pass", killer, "pass", "assert False", "pass"])
    assert [o.status for o in outcomes] == ["passed", "crashed", "passed", "failed", "passed"], outcomes
    assert outcomes[1].detail.startswith("sandbox died")
