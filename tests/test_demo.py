"""The built-in demo: seeded, real arithmetic problems, uneven difficulty with visible gaps."""

from __future__ import annotations

import re

import numpy as np

from benchfill.coverage import expected_uniform_max_gap, max_gap
from benchfill.demo import demo_benchmark


def test_shape_and_determinism():
    a, b, c = demo_benchmark(0), demo_benchmark(0), demo_benchmark(1)
    m = a.matrix
    assert 10 <= m.n_models <= 14 and 40 <= m.n_items <= 60
    assert np.all(m.trials == 8)
    assert np.array_equal(m.correct, b.matrix.correct) and a.items == b.items
    assert not np.array_equal(m.correct, c.matrix.correct)
    assert len({it["id"] for it in a.items}) == len(a.items)
    assert m.item_ids == tuple(it["id"] for it in a.items)
    assert a.true_difficulty.shape == (m.n_items,) and a.true_ability.shape == (m.n_models,)


def test_answers_are_integers_that_solve_the_problem():
    checked = 0
    for it in demo_benchmark(3).items + demo_benchmark(4).items:
        assert set(it) >= {"id", "problem", "answer"}
        assert re.fullmatch(r"-?\d+", it["answer"])
        text, ans = it["problem"], int(it["answer"])
        if mt := re.match(r"Maya has (\d+) apples and buys (\d+) more", text):
            assert ans == int(mt[1]) + int(mt[2])
            checked += 1
        elif mt := re.match(r"A box holds (\d+) pencils\. How many pencils are in (\d+) boxes", text):
            assert ans == int(mt[1]) * int(mt[2])
            checked += 1
        elif mt := re.match(r"What is the remainder when (\d+)\^(\d+) is divided by (\d+)", text):
            assert ans == int(mt[1]) ** int(mt[2]) % int(mt[3])
            checked += 1
        elif mt := re.match(r"Find the sum of all positive integers less than (\d+) that are divisible by (\d+) or by (\d+)", text):
            n, a, b = int(mt[1]), int(mt[2]), int(mt[3])
            # inclusion-exclusion, independent of the generator's brute force
            from math import lcm

            def s(d, n=n):
                k = (n - 1) // d
                return d * k * (k + 1) // 2

            assert ans == s(a) + s(b) - s(lcm(a, b))
            checked += 1
    assert checked >= 10


def test_difficulty_is_uneven_with_gaps_and_responses_follow_it():
    d = demo_benchmark(0)
    b = d.true_difficulty
    z = (b - b.min()) / (b.max() - b.min())
    assert max_gap(z) > 2 * expected_uniform_max_gap(len(z))
    # harder items are solved less often: success rate falls with true difficulty
    rate = d.matrix.correct.sum(0) / d.matrix.trials.sum(0)
    assert np.corrcoef(rate, b)[0, 1] < -0.9
    # stronger models solve more
    assert np.corrcoef(d.matrix.correct.sum(1), d.true_ability)[0, 1] > 0.9


def test_map_fit_recovers_the_true_difficulties():
    from benchfill.irt import fit

    d = demo_benchmark(0)
    f = fit(d.matrix, engine="map")
    assert np.corrcoef(f.difficulty, d.true_difficulty)[0, 1] > 0.95
    assert np.corrcoef(f.ability, d.true_ability)[0, 1] > 0.95
