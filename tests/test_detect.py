"""The localized-improvement test: exact p-values by enumeration, size under the null, power, the CLI."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchfill.cli import main
from benchfill.errors import DataError
from benchfill.matrix import ResponseMatrix
from benchfill.measure.detect import detect, exact_p_value, stratified_permutation_test


def _brute_force_p(before: list[list[int]], after: list[list[int]]) -> float:
    """Every reassignment of each item's pooled outcomes between the conditions, counted one by one."""
    def gain(bs, as_):
        return (sum(sum(a) / len(a) for a in as_) - sum(sum(b) / len(b) for b in bs)) / len(bs)

    observed = gain(before, after)
    per_item = []
    for b, a in zip(before, after, strict=True):
        pool = b + a
        splits = []
        for pick in itertools.combinations(range(len(pool)), len(a)):
            new_a = [pool[k] for k in pick]
            new_b = [pool[k] for k in range(len(pool)) if k not in pick]
            splits.append((new_b, new_a))
        per_item.append(splits)
    hits = total = 0
    for combo in itertools.product(*per_item):
        total += 1
        hits += gain([c[0] for c in combo], [c[1] for c in combo]) >= observed - 1e-12
    return hits / total


def test_one_item_by_hand():
    # before 0/2, after 2/2: the pool {1,1,0,0} splits 6 ways, one of them puts both successes after.
    assert exact_p_value([0], [2], [2], [2]) == pytest.approx(1 / 6)


def test_p_value_matches_exact_enumeration_on_a_tiny_case():
    # unequal rollouts across items and conditions, one item that cannot move (all failures)
    before = [[1, 0, 0], [0, 1], [0, 0, 1, 0], [0, 0]]
    after = [[1, 1, 0], [1, 1, 1], [1, 0, 1, 0], [0, 0, 0]]
    exact = _brute_force_p(before, after)
    cb, tb = [sum(x) for x in before], [len(x) for x in before]
    ca, ta = [sum(x) for x in after], [len(x) for x in after]
    assert exact_p_value(cb, tb, ca, ta) == pytest.approx(exact, abs=1e-12)
    gain, p = stratified_permutation_test(cb, tb, ca, ta, permutations=100_000, seed=3)
    assert gain == pytest.approx(np.mean([np.mean(a) for a in after]) - np.mean([np.mean(b) for b in before]))
    se = np.sqrt(exact * (1 - exact) / 100_000)
    assert abs(p - exact) < 4 * se, (p, exact)
    assert 0.05 < exact < 0.5  # a case where the Monte Carlo error is visible, not a degenerate 0 or 1


def test_many_items_of_few_rollouts_match_the_exact_p_value():
    # A benchmark's shape: items outnumber their rollouts, where the permutations count every item's inverse
    # CDF a step at a time (the items' CDFs here have at most 4 steps, against 60 items).
    rng = np.random.default_rng(11)
    tb, ta = rng.integers(2, 5, 60), rng.integers(2, 5, 60)
    cb, ca = rng.binomial(tb, 0.5), rng.binomial(ta, 0.53)
    exact = exact_p_value(cb, tb, ca, ta)
    _, p = stratified_permutation_test(cb, tb, ca, ta, permutations=50_000, seed=1)
    se = np.sqrt(exact * (1 - exact) / 50_000)
    assert 0.01 < exact < 0.5 and abs(p - exact) < 4 * se, (p, exact)


def test_size_holds_under_the_null():
    rng = np.random.default_rng(11)
    n_sims, n_items, r = 1000, 30, 16
    false = 0
    for _ in range(n_sims):
        p = rng.uniform(0.05, 0.95, n_items)
        cb, ca = rng.binomial(r, p), rng.binomial(r, p)
        _, pv = stratified_permutation_test(cb, np.full(n_items, r), ca, np.full(n_items, r),
                                            permutations=1000, seed=rng)  # fmt: skip
        false += pv < 0.05
    rate = false / n_sims
    # about 5%: the statistic is discrete, so a hair under is expected; 3 SE of a 5% rate is 2.1 points
    assert 0.03 <= rate <= 0.07, rate


def _matrix(model: str, ids: list[str], correct, trials) -> ResponseMatrix:
    return ResponseMatrix((model,), tuple(ids), np.array([correct]), np.array([trials]))


def test_a_localized_gain_is_detected_and_shown_in_its_band():
    rng = np.random.default_rng(5)
    n, r = 40, 32
    ids = [f"q{i}" for i in range(n)]
    z = np.linspace(0, 1, n)
    p_before = 1 / (1 + np.exp(-(0.5 - z) * 6))
    p_after = np.where((z >= 0.4) & (z < 0.6), np.minimum(p_before + 0.35, 0.99), p_before)
    before = _matrix("base", ids, rng.binomial(r, p_before), np.full(n, r))
    after = _matrix("sft", ids, rng.binomial(r, p_after), np.full(n, r))
    res = detect(before, after, difficulty=dict(zip(ids, z, strict=True)), permutations=20_000)
    assert res.detected and res.p_value < 0.01 and res.gain > 0.04
    band = max(res.bands, key=lambda b: b.gain)
    assert (band.lo, band.hi) == pytest.approx((0.4, 0.6)) and band.gain > 0.2
    text = "\n".join(res.lines())
    assert "base -> sft on 40 items" in text and "p = " in text and "[0.40, 0.60)" in text
    null = detect(before, _matrix("same", ids, before.correct[0], before.trials[0]), permutations=2000)
    assert null.gain == 0 and null.p_value > 0.5 and not null.detected


def test_detect_cli(tmp_path, capsys):
    b, a = tmp_path / "before.csv", tmp_path / "after.csv"
    b.write_text("model,item_id,correct,trials\n" + "".join(f"m,q{i},{i % 4},8\n" for i in range(12)))
    a.write_text("model,item_id,correct,trials\n" + "".join(f"m2,q{i},{min(8, i % 4 + 3)},8\n" for i in range(12)))
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "5000"]) == 0
    out = capsys.readouterr().out
    assert "m -> m2 on 12 items" in out and "gain +" in out and "improvement detected at p < 0.05" in out
    assert "gain per difficulty band (difficulty: 1 - pooled accuracy" in out
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "0", "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["permutations"] == 0 and d["p_value"] < 0.001 and d["detected"]
    from benchfill.irt.fit import IrtFit

    ids = tuple(f"q{i}" for i in range(12))
    difficulty = np.linspace(-2, 2, 12)  # z = 0, 1/11, ..., 1
    IrtFit(model="1pl", engine="map", models=("x", "y"), item_ids=ids, ability=np.zeros(2), ability_se=np.ones(2),
           difficulty=difficulty, difficulty_se=np.ones(12), chance=np.zeros(12), seed=0).save(tmp_path / "fit.json")  # fmt: skip
    assert main(["detect", "--before", str(b), "--after", str(a), "--fit", str(tmp_path / "fit.json"),
                 "--bands", "2", "--permutations", "0"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "difficulty: normalized IRT difficulty z" in out
    assert "[0.00, 0.50)    6 items" in out and "[0.50, 1.00]    6 items" in out  # the last band holds z = 1
    a.write_text("model,item_id,correct,trials\nm2,q1,9,8\n")
    assert main(["detect", "--before", str(b), "--after", str(a)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "after.csv" in err[0]


def test_difficulties_on_band_edges_start_the_band_above():
    # Pooled accuracies 0.2, 0.4, 0.6, 0.8 give difficulties 1 - 0.8 = 0.19999999999999996, 0.6, 0.4, 0.2 (edges
    # from linspace were 0.6000000000000001): searchsorted put two of them a band low, leaving [0.2, 0.4) and
    # [0.6, 0.8) empty. One item per band 1..4, and z = 1 (an item beyond the hardest too) in the last band.
    ids = ["q0", "q1", "q2", "q3", "q4", "q5"]
    m = _matrix("M", ids, [1, 2, 3, 4, 0, 0], [5] * 6)
    res = detect(m, m, permutations=0)
    assert [b.n_items for b in res.bands] == [0, 1, 1, 1, 3]
    assert [(b.lo, b.hi) for b in res.bands] == [(0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0)]
    z = dict(zip(ids, [0.0, 1 - 0.8, np.linspace(0, 1, 6)[3], 0.4, 1.0, 1.3], strict=True))
    assert [b.n_items for b in detect(m, m, difficulty=z, permutations=0).bands] == [1, 1, 1, 1, 2]
    text = "\n".join(res.lines())
    assert "  [0.60, 0.80)    1 items" in text and "  [0.80, 1.00]    3 items" in text


def test_detect_cli_names_items_with_trials_0_only(tmp_path, capsys):
    b, a = tmp_path / "before.csv", tmp_path / "after.csv"
    b.write_text("model,item_id,correct,trials\nm,q0,1,4\nm,q1,2,4\nm,gone,0,0\n")
    a.write_text("model,item_id,correct,trials\nm,q0,3,4\nm,q1,2,4\nm,gone,1,4\n")
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "0"]) == 0
    out, err = capsys.readouterr()
    assert "m -> m on 2 items" in out
    assert err.strip().splitlines() == [f"benchfill: warning: {b}: 1 item(s) with trials 0 only have no "
                                        "difficulty and are left out: gone"]


def test_bad_input_is_one_clear_error():
    with pytest.raises(DataError, match="same, non-empty list of items"):
        stratified_permutation_test([1, 2], [4, 4], [1], [4])
    with pytest.raises(DataError, match="at least one rollout"):
        stratified_permutation_test([0], [0], [1], [4])
    two = ResponseMatrix(("a", "b"), ("q",), np.array([[1], [2]]), np.array([[4], [4]]))
    with pytest.raises(DataError, match="2 models; name one"):
        detect(two, two)


def test_the_float_weights_of_rollout_counts_past_the_integer_lattice_by_hand():
    # Rollout counts whose least common multiple passes 2^30 take the float path. Two items, one with two
    # rollouts after and a million before, one with a million after and four before: item i weighs
    # 1/t_after + 1/t_before, and p = P(sum_i w_i (x_i - observed_i) >= 0) is summed over the two
    # hypergeometric laws (three and five outcomes). Weights of 1/t_after alone (the before term dropped)
    # had passed every test: p would be 0.406 here, against 0.328.
    from scipy.stats import hypergeom

    cb, tb, ca, ta = [500_001, 1], [1_000_003, 4], [1, 500_016], [2, 1_000_033]
    assert int(np.lcm.reduce(np.array(ta + tb, dtype=np.int64))) > 1 << 30

    def p_by_hand(w):
        k = [ca[i] + cb[i] for i in range(2)]
        law = [{x: hypergeom.pmf(x, ta[i] + tb[i], k[i], ta[i])
                for x in range(max(0, k[i] - tb[i]), min(k[i], ta[i]) + 1)} for i in range(2)]
        return sum(pa * pb for xa, pa in law[0].items() for xb, pb in law[1].items()
                   if w[0] * (xa - ca[0]) + w[1] * (xb - ca[1]) >= -1e-12)

    exact = p_by_hand([1 / ta[i] + 1 / tb[i] for i in range(2)])
    assert exact == pytest.approx(0.328, abs=0.001) and p_by_hand([1 / t for t in ta]) == pytest.approx(0.406, abs=0.001)
    _, p = stratified_permutation_test(cb, tb, ca, ta, permutations=20_000, seed=5)
    assert abs(p - exact) < 4 * np.sqrt(exact * (1 - exact) / 20_000), (p, exact)


def test_rollout_counts_whose_lcm_wraps_int64_keep_the_tests_direction():
    # 100 rollouts an item, a few failed, so the counts run from 85 to 100: their least common multiple is
    # past 2**63, and numpy's int64 lcm wrapped to a negative number that passed the lattice's size check,
    # so the weights came out negative and a 20-point drop read as an improvement at p = 0.00001.
    rng = np.random.default_rng(3)
    n = 40
    tb, ta = rng.integers(85, 101, n), rng.integers(85, 101, n)
    assert int(np.lcm.reduce(np.concatenate([ta, tb]))) < 0  # what numpy makes of it
    cb, ca = rng.binomial(tb, 0.6), rng.binomial(ta, 0.4)
    gain, p = stratified_permutation_test(cb, tb, ca, ta, permutations=2_000, seed=0)
    assert gain < -0.15 and p > 0.99
    gain, p = stratified_permutation_test(ca, ta, cb, tb, permutations=2_000, seed=0)  # the other way round
    assert gain > 0.15 and p < 0.001
    with pytest.raises(DataError, match="too large; use permutations"):
        exact_p_value(cb, tb, ca, ta)


def test_a_p_value_is_never_zero():
    # no permutation reaches an observed result this extreme: p is 1 / (1 + permutations), not 0
    gain, p = stratified_permutation_test([0], [1000], [1000], [1000], permutations=99, seed=0)
    assert gain == 1.0 and p == pytest.approx(1 / 100)


def test_default_bands_place_an_item_by_its_pooled_accuracy_not_its_before_accuracy():
    # docs/detect.md: "pooled rather than 'before' accuracy". q0: 0 of 10 before, 10 of 10 after: by its
    # before accuracy alone it is the hardest (z 1, last band); pooled (10 of 20) it sits at z 0.5
    before = _matrix("M", ["q0", "q1"], [0, 5], [10, 10])
    after = _matrix("M", ["q0", "q1"], [10, 5], [10, 10])
    res = detect(before, after, permutations=0)
    [band] = [b for b in res.bands if b.n_items and b.lo <= 0.5 < b.hi]
    assert band.n_items == 2 and (band.lo, band.hi) == (0.4, 0.6)


def test_a_p_value_at_alpha_is_no_detection():
    from benchfill.measure.detect import DetectResult

    def at(p: float) -> DetectResult:
        return DetectResult("a", "b", 10, 0.5, 0.6, p, 0, 0.05, "pooled")

    assert not at(0.05).detected and at(0.0499).detected  # detection is p < alpha (README, docs/detect.md)
