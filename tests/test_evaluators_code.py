"""Code grading on all 164 HumanEval problems, and hostile programs kept in the sandbox."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid

import pytest

from benchfill.evaluators import get_evaluator
from benchfill.evaluators.code_tests import build_program, extract_code
from benchfill.evaluators.sandbox import isolation, run_programs

CODE = get_evaluator("code", timeout=3.0, cpu_seconds=3)


@pytest.fixture(scope="module")
def humaneval(shared_data):
    with open(shared_data / "humaneval" / "items.jsonl") as fh:
        return [json.loads(line) for line in fh]


def _sandbox_uid_processes() -> list[int]:
    """Processes still owned by a throwaway sandbox uid (there must be none after a batch)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid >= 200_000:
                    found.append(int(entry))
            except FileNotFoundError:
                continue
    return found


def test_all_canonical_solutions_pass(humaneval):
    assert len(humaneval) == 164
    # in one sandbox batch; how fast is bench/bench_evaluators.py's to measure, not a timed test's
    grades = CODE.grade_pairs([(item["canonical_solution"], item) for item in humaneval])
    failed = [(item["id"], g.reason) for item, g in zip(humaneval, grades, strict=True) if not g.correct]
    assert failed == []


def test_broken_solutions_fail(humaneval):
    broken = []
    for item in humaneval:
        broken.append(("    return None\n", item))
        # the canonical solution with its last return replaced: wrong, not crashing at import
        lines = item["canonical_solution"].splitlines()
        idx = max(i for i, line in enumerate(lines) if line.strip().startswith("return"))
        indent = lines[idx][: len(lines[idx]) - len(lines[idx].lstrip())]
        lines[idx] = f"{indent}raise ValueError('broken')"
        broken.append(("\n".join(lines) + "\n", item))
    grades = CODE.grade_pairs(broken)
    passed = [item["id"] for (_, item), g in zip(broken, grades, strict=True) if g.correct]
    assert passed == []


def test_fenced_full_function_reply(humaneval):
    item = humaneval[0]
    full = item["prompt"] + item["canonical_solution"]
    reply = f"Here is my solution.\n\n```python\n{full}```\nIt checks all pairs."
    assert extract_code(reply) == full
    assert CODE.grade(reply, item).correct
    wrong = reply.replace("distance < threshold", "distance > threshold")
    assert not CODE.grade(wrong, item).correct
    # the full function follows the whole prompt, so the prompt's helpers stay defined
    assert build_program(full, item).startswith(item["prompt"])


def test_the_block_that_defines_the_function_is_the_answer(humaneval):
    # the last fenced block was taken whatever it held: example usage, tests or printed output after a
    # right function graded it wrong; prose before an unfenced function was run as code
    item = humaneval[0]
    full = item["prompt"] + item["canonical_solution"]
    fence = "```"
    replies = [
        f"{fence}python\n{full}{fence}\nExample usage:\n{fence}python\nprint(has_close_elements([1.0], 0.5))\n{fence}",
        f"{fence}python\n{full}{fence}\nOutput:\n{fence}\nFalse\n{fence}",
        f"{fence}python\n{full}{fence}\n{fence}bash\npython -m pytest\n{fence}",
        f"Here is the function:\n\n{full}",
        f"~~~python\n{full}~~~",
        "1. The function:\n" + "\n".join("   " + line for line in f"{fence}python\n{full}{fence}".split("\n")),
        f"<think>draft\n{fence}python\ndef has_close_elements(numbers, threshold):\n    return 0\n{fence}\n</think>\n"
        f"{fence}python\n{full}{fence}",
    ]
    for reply in replies:
        assert CODE.grade(reply, item).correct, reply
    # a helper in a block of its own before the function stays with it
    helper = ("def close(a, b, t):\n    return abs(a - b) < t\n")
    uses = full.replace("if distance < threshold:", "if close(elem, elem2, threshold):")
    assert CODE.grade(f"{fence}python\n{helper}{fence}\n\n{fence}python\n{uses}{fence}", item).correct
    # a raw completion (the body) that runs on into a helper or a main keeps its body
    body = item["canonical_solution"]
    assert CODE.grade(body + "\n\ndef main():\n    print(1)\n", item).correct
    # prose whose list is indented is still prose before unfenced code
    assert CODE.grade(f"Plan:\n- pair up the numbers\n  - compare each pair\n\n{full}", item).correct
    # and thinking that never closes offers no code
    assert not CODE.grade(f"<think>\n{fence}python\n{full}{fence}", item).correct


def test_no_code_is_wrong(humaneval):
    grade = CODE.grade("```python\n```", humaneval[0])
    assert not grade.correct and grade.reason == "no code found"


def test_one_bad_program_does_not_sink_its_batch(humaneval):
    item = humaneval[2]
    responses = [
        "    while True:\n        pass\n",
        item["canonical_solution"],
        "    import os\n    os._exit(0)\n",
    ]
    grades = CODE.grade_many(responses, item, None)
    assert [g.correct for g in grades] == [False, True, False]
    assert grades[0].reason.startswith("timeout")
    assert grades[2].reason.startswith("crashed")


# Hostile programs: each must end graded wrong, within its limits, leaving nothing behind.


def _run_one(source: str, timeout: float = 2.0, cpu_seconds: int = 2):
    start = time.perf_counter()
    (outcome,) = run_programs([source], timeout=timeout, cpu_seconds=cpu_seconds)
    return outcome, time.perf_counter() - start


def test_endless_loop_is_stopped():
    # The wall clock must be what stops it: with the CPU limit equal to the wall timeout the two raced,
    # and the CPU limit won once in a CI rehearsal ("crashed").
    outcome, elapsed = _run_one("while True:\n    pass\n", cpu_seconds=5)
    assert not outcome.passed and outcome.status == "timeout"
    assert elapsed < 6


def test_a_program_out_of_cpu_time_is_a_timeout_too():
    # The CPU limit stops it long before the wall clock would: a time limit all the same, not a crash
    # (with both limits equal, as by default, either may stop an endless loop first).
    outcome, elapsed = _run_one("while True:\n    pass\n", timeout=30.0, cpu_seconds=1)
    assert not outcome.passed and outcome.status == "timeout" and outcome.detail == "CPU time over 1s"
    assert elapsed < 10


def test_fork_bomb_is_contained():
    before = len(os.listdir("/proc"))
    outcome, elapsed = _run_one("import os\nwhile True:\n    os.fork()\n")
    assert not outcome.passed
    assert elapsed < 8
    assert _sandbox_uid_processes() == []
    assert len(os.listdir("/proc")) < before + 20


def test_a_fork_bomb_does_not_starve_the_next_program_in_its_batch():
    # Its processes count against the batch uid's process limit until reaped; the next program
    # in the batch must find them gone (before the fix this failed every time, and a program forking
    # a few processes after a bomb failed about one batch in twenty).
    bomb = "import os\nwhile True:\n    os.fork()\n"
    # 28 children at once: with the sandbox runner and the program itself, 30 of the uid's 32 processes
    forker = ("import os, time\npids = []\nfor _ in range(28):\n    pid = os.fork()\n    if pid == 0:\n"
              "        time.sleep(0.05)\n        os._exit(0)\n    pids.append(pid)\nfor pid in pids:\n"
              "    os.waitpid(pid, 0)\n")
    for _ in range(5):
        assert [o.passed for o in run_programs([bomb, forker], timeout=2.0, cpu_seconds=2)] == [False, True]


def test_escaped_daemon_is_killed():
    source = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    while True:\n        time.sleep(1)\n"
    outcome, _ = _run_one(source)
    assert outcome.passed  # the program itself ends fine; its daemon must not outlive the batch
    assert _sandbox_uid_processes() == []


def test_writes_outside_the_directory_do_not_land(tmp_path):
    name = f"benchfill-escape-{uuid.uuid4().hex}"
    targets = [tmp_path / name, f"/tmp/{name}", "../" + name, os.path.join(os.getcwd(), name)]
    sources = [
        f"open({str(t)!r}, 'w').write('x')\nassert False, 'a write outside the sandbox landed'\n"
        for t in targets
    ]
    outcomes = run_programs(sources, timeout=2.0, cpu_seconds=2)
    assert not any(o.passed for o in outcomes)
    for target in targets[:2] + targets[3:]:
        assert not os.path.exists(target), target
    # writing inside its own directory is allowed
    (inside,) = run_programs(["open('scratch.txt', 'w').write('ok')"], timeout=2.0)
    assert inside.passed


def test_network_connection_fails():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        source = (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
        )
        outcome, _ = _run_one(source)
        assert not outcome.passed
        with pytest.raises(TimeoutError):
            server.accept()  # nothing reached the host's loopback
        (remote,) = run_programs(["import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)"])
        assert not remote.passed
    finally:
        server.close()


def test_huge_allocation_fails():
    outcome, elapsed = _run_one("x = bytearray(8 * 1024 ** 3)\n")
    assert not outcome.passed and "MemoryError" in outcome.detail
    outcome, _ = _run_one("x = [0] * (10 ** 10)\n")
    assert not outcome.passed


def test_hostile_candidates_graded_wrong_through_the_evaluator(humaneval):
    item = humaneval[0]
    escape = f"/etc/benchfill-escape-{uuid.uuid4().hex}"  # unique: a failed run must not fail the next
    hostile = [
        "    while True:\n        pass\n",
        "    import os\n    while True:\n        os.fork()\n",
        f"    open({escape!r}, 'w').write('x')\n    return True\n",
        "    import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    return True\n",
        "    x = bytearray(8 * 1024 ** 3)\n    return True\n",
    ]
    grades = CODE.grade_many(hostile, item, None)
    assert [g.correct for g in grades] == [False] * len(hostile)
    assert not os.path.exists(escape)


def test_programs_run_under_bubblewrap():
    # CI installs bubblewrap (.ci/run): every hostile-code test above ran inside it
    assert isolation() == "bubblewrap" == CODE.isolation()
    from benchfill.evaluators import isolation_of

    assert isolation_of("code") == "bubblewrap" and isolation_of("math") is None
    # the sandbox sees its own loopback, a read-only system and a private, empty /tmp
    probe = ("import os, socket\n"
             "assert os.listdir('/tmp') == ['work'] and os.getcwd() == '/tmp/work'\n"
             "assert not os.access('/usr', os.W_OK) and socket.gethostname()\n"
             "assert os.getppid() == 1\n")  # its own PID namespace, the sandbox's runner as PID 1
    (inside,) = run_programs([probe], timeout=5.0)
    assert inside.passed, inside.detail


def test_without_bubblewrap_programs_are_refused_unless_allowed(monkeypatch, tmp_path):
    from benchfill.evaluators.sandbox import ALLOW_ENV, UNCONFINED_REFUSAL, Unconfined

    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    assert isolation() == "unconfined" == CODE.isolation()
    with pytest.raises(Unconfined) as refused:
        run_programs(["pass"])
    assert str(refused.value) == UNCONFINED_REFUSAL and "\n" not in UNCONFINED_REFUSAL
    with pytest.raises(Unconfined):
        CODE.grade("    return 1\n", {"prompt": "def f():\n", "test": "", "entry_point": "f"})
    # allowed explicitly: the programs run, with the socket preamble standing in for a network namespace
    network = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)"
    outcomes = run_programs(["assert sum(range(4)) == 6", network], timeout=2.0, allow_unconfined=True)
    assert [o.passed for o in outcomes] == [True, False] and "network disabled" in outcomes[1].detail
    monkeypatch.setenv(ALLOW_ENV, "1")
    assert run_programs(["pass"])[0].passed


def test_sandbox_works_with_an_interpreter_under_tmp(tmp_path):
    """CI may clone the checkout (and its virtualenv) under /tmp, which the sandbox makes private."""
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    sandbox = os.path.join(os.path.dirname(__file__), "..", "benchfill", "evaluators", "sandbox.py")
    probe = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(sandbox)))!r})\n"
        f"spec = importlib.util.spec_from_file_location('sandbox', {os.path.abspath(sandbox)!r})\n"
        "sb = sys.modules['sandbox'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(sb)\n"
        "print(sb.isolation(), sb.run_programs(['assert 1 + 1 == 2'], 10.0, 10)[0].status)\n"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["bubblewrap", "passed"], out.stderr
