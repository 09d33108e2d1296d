"""The built-in demo benchmark: generated here, from a seed, with nothing to download.

Forty-eight small arithmetic word problems with integer answers (AIME-style, so
the ``math`` evaluator grades them) and a simulated 12-model x 48-item x 8-trial
response matrix drawn from a 1PL model. The true difficulties sit in three
clusters with empty stretches between them, so that diagnosis finds real gaps
and gap filling has something to do. Harder clusters get problems with more steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchfill.matrix import ResponseMatrix

N_MODELS = 12
TRIALS = 8
# (centre, spread, count) of each difficulty cluster on the logit scale.
CLUSTERS = ((-2.2, 0.25, 18), (0.2, 0.2, 16), (2.6, 0.3, 14))

Template = Callable[[np.random.Generator], tuple[str, int]]


def _add(r: np.random.Generator) -> tuple[str, int]:
    a, b = int(r.integers(3, 40)), int(r.integers(2, 30))
    return f"Maya has {a} apples and buys {b} more. How many apples does she have now?", a + b


def _times(r: np.random.Generator) -> tuple[str, int]:
    a, b = int(r.integers(4, 25)), int(r.integers(2, 12))
    return f"A box holds {a} pencils. How many pencils are in {b} boxes?", a * b


def _share(r: np.random.Generator) -> tuple[str, int]:
    per, kids = int(r.integers(2, 15)), int(r.integers(2, 9))
    return f"{per * kids} stickers are shared equally among {kids} children. How many stickers does each child get?", per


def _trip(r: np.random.Generator) -> tuple[str, int]:
    a, b, c, d = (int(x) for x in r.integers((40, 2, 30, 1), (120, 6, 90, 5)))
    text = (
        f"A train travels at {a} km per hour for {b} hours, then at {c} km per hour for {d} hours. "
        "How many kilometres does it travel in total?"
    )
    return text, a * b + c * d


def _change(r: np.random.Generator) -> tuple[str, int]:
    price, n = int(r.integers(3, 20)), int(r.integers(2, 8))
    paid = (price * n // 50 + 1) * 50
    text = (
        f"Notebooks cost {price} dollars each. Leo buys {n} notebooks and pays with {paid} dollars. "
        "How many dollars of change does he get?"
    )
    return text, paid - price * n


def _garden(r: np.random.Generator) -> tuple[str, int]:
    w, h, path = int(r.integers(5, 20)), int(r.integers(5, 20)), int(r.integers(1, 3))
    text = (
        f"A rectangular garden is {w} m by {h} m. A path {path} m wide runs around the outside of it. "
        "What is the area of the path in square metres?"
    )
    return text, (w + 2 * path) * (h + 2 * path) - w * h


def _multiples(r: np.random.Generator) -> tuple[str, int]:
    n, a, b = int(r.integers(50, 400)), int(r.integers(3, 8)), int(r.integers(8, 14))
    text = f"Find the sum of all positive integers less than {n} that are divisible by {a} or by {b}."
    return text, sum(x for x in range(1, n) if x % a == 0 or x % b == 0)


def _pairs(r: np.random.Generator) -> tuple[str, int]:
    s, m = int(r.integers(12, 40)), int(r.integers(4, 13))
    text = (
        f"How many ordered pairs of positive integers (x, y) satisfy x + y <= {s} "
        f"and have a product x*y that is a multiple of {m}?"
    )
    return text, sum(1 for x in range(1, s) for y in range(1, s - x + 1) if (x * y) % m == 0)


def _power_mod(r: np.random.Generator) -> tuple[str, int]:
    a, e, m = int(r.integers(3, 20)), int(r.integers(20, 200)), int(r.integers(7, 100))
    return f"What is the remainder when {a}^{e} is divided by {m}?", pow(a, e, m)


# One template family per cluster: more steps for harder items.
TEMPLATES: tuple[tuple[Template, ...], ...] = (
    (_add, _times, _share),
    (_trip, _change, _garden),
    (_multiples, _pairs, _power_mod),
)


@dataclass(frozen=True)
class DemoBenchmark:
    items: list[dict[str, Any]]
    matrix: ResponseMatrix
    true_difficulty: np.ndarray  # b_i on the logit scale, in item order
    true_ability: np.ndarray  # theta_j, in model order
    seed: int
    name: str = "demo"


def demo_benchmark(seed: int = 0) -> DemoBenchmark:
    """The seeded demo: same seed, same items, same responses."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        from benchfill.errors import ConfigError

        raise ConfigError(f"seed: expected a whole number >= 0, got {type(seed).__name__} {seed!r}")
    rng = np.random.default_rng(seed)
    ability = np.sort(np.linspace(-3.0, 3.5, N_MODELS) + rng.normal(0.0, 0.2, N_MODELS))
    difficulty: list[float] = []
    items: list[dict[str, Any]] = []
    for (centre, spread, count), family in zip(CLUSTERS, TEMPLATES, strict=True):
        for _ in range(count):
            b = float(centre + rng.normal(0.0, spread))
            text, answer = family[int(rng.integers(len(family)))](rng)
            items.append({"id": f"demo-{len(items) + 1:03d}", "problem": text, "answer": str(answer)})
            difficulty.append(b)
    b = np.asarray(difficulty)
    p = 1.0 / (1.0 + np.exp(-(ability[:, None] - b[None, :])))
    trials = np.full(p.shape, TRIALS, dtype=np.int64)
    correct = rng.binomial(trials, p).astype(np.int64)
    models = tuple(f"demo-model-{j + 1:02d}" for j in range(N_MODELS))
    matrix = ResponseMatrix(
        models, tuple(it["id"] for it in items), correct, trials, np.zeros(len(items)), f"demo(seed={seed})"
    )
    return DemoBenchmark(items=items, matrix=matrix, true_difficulty=b, true_ability=ability, seed=seed)
