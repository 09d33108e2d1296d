"""A persistent worker process that checks math answers with math-verify.

Why a separate process: math-verify parses LaTeX into sympy, which can hang or
swallow memory on hostile input. The worker runs math-verify's own timeouts
(signal based, so they need a main thread, which the worker has), sits under an
address-space cap, and is killed and restarted by the parent if a check
overruns its wall timeout. One worker is started on first use and reused, so a
check costs an IPC round trip and the sympy work, not a Python start-up.

Protocol: one JSON object per line. Request ``{"gold": str, "answer": str}``;
reply ``{"equal": bool, "error": str | null}``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

MEMORY_CAP_BYTES = 2 << 30


class VerifierFailed(Exception):
    """The worker overran its wall timeout or died (it is restarted on the next check)."""


class MathVerifier:
    """Parent-side handle on one worker; thread safe (requests are serialized)."""

    def __init__(self, timeout: float = 10.0, check_timeout: int = 5):
        self.timeout = timeout
        self.check_timeout = check_timeout
        self._proc: subprocess.Popen | None = None
        self._warm = False
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.Popen(
            [sys.executable, "-m", "benchfill.evaluators.math_worker", str(self.check_timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )

    def equal(self, gold: str, answer: str) -> bool:
        """Whether ``answer`` equals ``gold``; ``VerifierFailed`` if the worker overruns."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
                self._warm = False
            proc = self._proc
            try:
                proc.stdin.write(json.dumps({"gold": gold, "answer": answer}) + "\n")
                proc.stdin.flush()
                # The first call also pays the worker's import of sympy (a second or two).
                wait = self.timeout if self._warm else self.timeout + 30
                ready, _, _ = select.select([proc.stdout], [], [], wait)
                line = proc.stdout.readline() if ready else ""
            except (BrokenPipeError, OSError):
                line = ""
            if not line:
                self._kill()
                raise VerifierFailed(f"math check failed or took over {self.timeout:g} s")
            self._warm = True
            reply = json.loads(line)
            return bool(reply["equal"])

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            proc, self._proc = self._proc, None
            for pipe in (proc.stdin, proc.stdout):  # closed, not left to the garbage collector
                if pipe is not None:
                    with contextlib.suppress(OSError):  # a request left unsent to a dead worker: nothing to flush to
                        pipe.close()

    def close(self) -> None:
        with self._lock:
            self._kill()


_shared: MathVerifier | None = None


def shared_verifier() -> MathVerifier:
    global _shared
    if _shared is None:
        _shared = MathVerifier()
        atexit.register(_shared.close)
    return _shared


def _serve(check_timeout: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
    from math_verify import parse, verify

    for line in sys.stdin:
        request = json.loads(line)
        try:
            gold = parse(f"${request['gold']}$", parsing_timeout=check_timeout)
            answer = parse(f"${request['answer']}$", parsing_timeout=check_timeout)
            equal = bool(gold and answer and verify(gold, answer, timeout_seconds=check_timeout))
            reply = {"equal": equal, "error": None}
        except Exception as exc:  # noqa: BLE001 - any parser failure means "not shown equal"
            reply = {"equal": False, "error": type(exc).__name__}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
