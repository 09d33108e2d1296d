"""Grader throughput: code sandbox batching, the persistent math-verify worker, multiple choice.

Run from the repository root: ``python bench/bench_evaluators.py``. Prints wall times and the
ratios of the batched/persistent paths to the one-process-per-check alternative.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchfill.evaluators import get_evaluator
from benchfill.evaluators.sandbox import isolation

DATA = Path(os.environ.get("BENCHFILL_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _items(name: str) -> list[dict]:
    with open(DATA / name / "items.jsonl") as fh:
        return [json.loads(line) for line in fh]


def bench_code() -> None:
    items = _items("humaneval")
    code = get_evaluator("code")
    code.grade("    pass\n", items[0])  # probe the sandbox mode once
    start = time.perf_counter()
    grades = code.grade_pairs([(it["canonical_solution"], it) for it in items])
    batched = time.perf_counter() - start
    start = time.perf_counter()
    for it in items[:20]:
        code.grade(it["canonical_solution"], it)
    single = (time.perf_counter() - start) / 20 * len(items)
    print(
        f"code  sandbox {isolation()}: 164 HumanEval canonical, {sum(g.correct for g in grades)} pass"
    )
    print(
        f"      one batch {batched:.2f} s; one sandbox per problem (extrapolated from 20) {single:.2f} s;"
        f" ratio {single / batched:.1f}x"
    )


def bench_math() -> None:
    ev = get_evaluator("math")
    ref = {"answer": r"\frac{1}{2}"}
    ev.grade(r"\boxed{0.5}", ref)  # start the worker
    n = 1000
    start = time.perf_counter()
    for k in range(1, n + 1):
        ev.grade(rf"\boxed{{\frac{{{k}}}{{{2 * k}}}}}", ref)
    per_check = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for item in _items("aime24") * 34:
        ev.grade(f"so \\boxed{{{item['answer']}}}", item)
    per_int = (time.perf_counter() - start) / (30 * 34)
    cold = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from math_verify import parse, verify;"
                r"verify(parse('$\frac{1}{2}$'), parse('$\frac{3}{6}$'))",
            ],
            check=True,
        )
        cold.append(time.perf_counter() - start)
    fresh = sum(cold) / len(cold)
    print(
        f"math  symbolic via persistent worker {per_check * 1e3:.2f} ms/check; fresh process per check"
        f" {fresh * 1e3:.0f} ms; ratio {fresh / per_check:.0f}x; integer fast path {per_int * 1e6:.0f} us/check"
    )


def bench_choice() -> None:
    items = _items("mmlu-pro")
    ev = get_evaluator("multiple_choice")
    start = time.perf_counter()
    correct = sum(ev.grade(f"Step by step... The answer is ({it['answer']}).", it).correct for it in items)
    elapsed = time.perf_counter() - start
    print(
        f"mc    {len(items)} MMLU-Pro items graded in {elapsed:.2f} s ({correct} correct),"
        f" {elapsed / len(items) * 1e6:.0f} us/grade"
    )


if __name__ == "__main__":
    bench_code()
    bench_math()
    bench_choice()
