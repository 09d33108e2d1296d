"""Defects a QA pass found in the measuring commands: models with trials 0 only, sparse matrices in
rankings, rank agreement over two models, a fit of another benchmark in detect, the hypergeometric
CDF's cost, and hand-edited fit files."""

from __future__ import annotations

import json
import warnings
from fractions import Fraction
from math import comb, sqrt

import numpy as np
import pytest

from benchfill.cli import main
from benchfill.data import read_responses, untried_note
from benchfill.errors import DataError
from benchfill.irt.fit import IrtFit

HEADER = "model,item_id,correct,trials\n"
# A solves i1-i3, B i1-i2, C i1: full scores A .75, B .5, C .25
THREE = HEADER + "".join(f"{m},i{i},{int(i <= n)},1\n" for m, n in (("A", 3), ("B", 2), ("C", 1)) for i in range(1, 5))
SPARSE = THREE + "D,i1,1,1\nD,i2,0,0\n"  # D tried i1 alone


def _write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _one_line_error(capsys, argv, pattern: str) -> None:
    import re

    rc = main(argv)
    err = capsys.readouterr().err
    assert rc != 0 and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err


# -- 1. a model with trials 0 only is no model -------------------------------------------------------


def test_a_model_with_trials_0_only_does_not_count_towards_the_two_irt_needs(tmp_path, capsys):
    o = _write(tmp_path, "o.csv", HEADER + "A,i1,1,1\nA,i2,0,1\nA,i3,1,1\nB,i1,0,0\nB,i2,0,0\nB,i3,0,0\n")
    _one_line_error(capsys, ["fit", "--responses", str(o), "--out", str(tmp_path / "o.json")],
                    r"o\.csv: responses from 1 model \(1 more with trials 0 only: B\); IRT needs at least two")
    assert not (tmp_path / "o.json").exists()


def test_a_model_with_trials_0_only_is_left_out_and_named(tmp_path):
    f = _write(tmp_path, "r.csv", HEADER + "A,i1,1,1\nB,i1,0,0\nC,i1,0,1\nA,i2,0,1\nC,i2,1,1\n")
    m = read_responses(f)
    assert m.models == ("A", "C") and m.trials.tolist() == [[1, 1], [1, 1]]
    note = f"{f}: 1 model(s) with trials 0 only have no ability and are left out: B"
    assert untried_note(m) == note
    assert untried_note(m.with_chance(0.25)) == note  # kept through a benchmark's guessing floors
    assert read_responses(f, min_models=1).models == ("A", "C")  # detect: the same models


# -- 2, 3, 4. rank agreement: sparse matrices, undefined correlations, two models --------------------


def _no_warnings():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error")  # numpy's and scipy's warnings fail the test
    return ctx


def test_calibrate_leaves_out_a_model_with_no_responses_on_the_kept_items(tmp_path):
    from benchfill.pruning import calibrate

    m = read_responses(_write(tmp_path, "tp.csv", SPARSE))
    ctx = _no_warnings()
    try:
        # uniform target for k = 2: quantiles .25 and .75 -> i2 (z .1), then i3 (z .5; ties go to the lower index)
        r = calibrate([0.0, 0.1, 0.5, 1.0], 2, item_ids=m.item_ids, matrix=m, n_random=10)
    finally:
        ctx.__exit__(None, None, None)
    assert r.selected == ["i2", "i3"]
    # on i2, i3: A 1, B .5, C 0, D nothing; reference (full): A .75, B .5, C .25 -> the same order
    assert r.ranking["calibrated"] == pytest.approx({"spearman": 1.0, "kendall": 1.0})
    assert r.notes == ["calibrated: 1 model(s) with no responses on the kept items are left out of its ranking: D"]


def test_rank_agreement_by_hand_and_undefined_without_a_warning():
    from benchfill.pruning import _agreement

    ref = np.array([0.75, 0.5, 0.25])
    ctx = _no_warnings()
    try:
        # scores 1, 1, .5: ranks 2.5 2.5 1 against 3 2 1: r = 1.5 / sqrt(1.5 * 2); tau-b: 2 concordant pairs,
        # one tied in the scores: 2 / sqrt(2 * 3)
        s, k, why = _agreement(np.array([1.0, 1.0, 0.5]), ref)
        assert (s, k, why) == (pytest.approx(sqrt(3) / 2), pytest.approx(2 / sqrt(6)), None)
        s, k, why = _agreement(np.array([0.5, 0.5, 0.5]), ref)
        assert np.isnan(s) and np.isnan(k) and why == "every model scores the same on the kept items"
        s, k, why = _agreement(np.array([1.0, np.nan, 0.0]), ref)
        assert np.isnan(s) and why == "2 model(s) with responses, 3 needed"
    finally:
        ctx.__exit__(None, None, None)


def test_random_subsets_that_tie_every_model_are_left_out_of_the_mean(tmp_path):
    from benchfill.pruning import calibrate

    m = read_responses(_write(tmp_path, "t.csv", THREE))
    ctx = _no_warnings()
    try:
        r = calibrate([0.0, 0.3, 0.6, 1.0], 2, item_ids=m.item_ids, matrix=m, n_random=30, seed=0)
    finally:
        ctx.__exit__(None, None, None)
    # Spearman of each pair of items against A .75, B .5, C .25, by hand: {i1, i4} ties A, B, C at .5
    by_pair = {(0, 1): sqrt(3) / 2, (0, 2): sqrt(3) / 2, (1, 2): 1.0, (1, 3): sqrt(3) / 2, (2, 3): sqrt(3) / 2}
    rng = np.random.default_rng(0)
    pairs = [tuple(sorted(rng.choice(4, size=2, replace=False).tolist())) for _ in range(30)]
    defined = [by_pair[p] for p in pairs if p != (0, 3)]
    assert r.ranking["random"]["undefined"] == 30 - len(defined) > 0
    assert r.ranking["random"]["spearman"] == pytest.approx(np.mean(defined))


def test_calibrate_prunes_two_models_and_skips_only_the_ranking(tmp_path, capsys):
    two = _write(tmp_path, "two.csv", HEADER + "A,i1,1,1\nB,i1,1,1\nA,i2,1,1\nB,i2,0,1\nA,i3,0,1\nB,i3,0,1\n")
    assert main(["calibrate", "--responses", str(two), "--size", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["selected"]) == 1 and d["ranking"] is None
    assert d["notes"] == [f"{two}: rank agreement needs at least 3 models, found 2; not computed"]


def test_profile_subsets_leave_out_models_with_no_responses(tmp_path):
    from benchfill.measure.profiles import profile
    from benchfill.measure.profiles_subset import evaluate_subsets, kendall_tau_b, model_scores

    m = read_responses(_write(tmp_path, "tp.csv", SPARSE))
    ctx = _no_warnings()
    try:
        s = model_scores(m, ("C", "B", "A", "D"), ["i2", "i3"])
        assert s[:3].tolist() == [0.0, 0.5, 1.0] and np.isnan(s[3])
        assert np.isnan(kendall_tau_b([0.5, 0.5, 0.5], [1, 2, 3]))
        bp = profile(m, draws=19, cache_dir=False)
        ev = evaluate_subsets(bp, m, 2, repeats=10)
    finally:
        ctx.__exit__(None, None, None)
    figures = [*ev.ndr_profile, *ev.tau_profile, *ev.ndr_random, *ev.tau_random]
    assert np.isfinite(figures).all(), figures
    assert any(n.startswith("profile-guided: 1 model(s) with no responses on some subsets") and n.endswith(": D")
               for n in ev.notes), ev.notes


def test_profile_subsets_refuse_models_that_all_score_the_same(tmp_path):
    from benchfill.measure.profiles import profile
    from benchfill.measure.profiles_subset import evaluate_subsets

    m = read_responses(_write(tmp_path, "flat.csv", HEADER + "A,i1,1,1\nA,i2,0,1\nB,i1,0,1\nB,i2,1,1\n"))
    bp = profile(m, draws=19, cache_dir=False)
    with pytest.raises(DataError, match=r"flat\.csv: every model has the same score on the full benchmark"):
        evaluate_subsets(bp, m, 1, repeats=2)


# -- 5. detect with a fit of another benchmark --------------------------------------------------------


def _fit(item_ids, difficulty) -> IrtFit:
    n = len(item_ids)
    return IrtFit(model="1pl", engine="map", models=("x", "y"), item_ids=tuple(item_ids), ability=np.zeros(2),
                  ability_se=np.ones(2), difficulty=np.asarray(difficulty, float), difficulty_se=np.ones(n),
                  chance=np.zeros(n))


def test_detect_refuses_a_fit_without_any_of_the_items(tmp_path, capsys):
    b = _write(tmp_path, "b.csv", HEADER + "A,i1,3,10\nA,i2,5,10\n")
    a = _write(tmp_path, "a.csv", HEADER + "A,i1,6,10\nA,i2,5,10\n")
    _fit(["2025-I-01", "2025-I-02"], [0.0, 1.0]).save(tmp_path / "other.json")
    _one_line_error(capsys, ["detect", "--before", str(b), "--after", str(a), "--fit", str(tmp_path / "other.json")],
                    r"other\.json: none of the 2 items of .*b\.csv and .*a\.csv is in the fit \(e\.g\. 'i1'\)")
    _fit(["i1", "2025-I-02"], [0.0, 1.0]).save(tmp_path / "half.json")
    assert main(["detect", "--before", str(b), "--after", str(a), "--fit", str(tmp_path / "half.json"),
                 "--permutations", "0"]) == 0
    out, err = capsys.readouterr()
    assert err == f"benchfill: warning: {tmp_path / 'half.json'}: 1 of the 2 items tested are not in the fit and " \
                  "are in no band\n"
    assert "1 item(s) without a difficulty are in no band" in out


# -- 6. the hypergeometric CDF ------------------------------------------------------------------------


def test_hypergeom_cdf_by_hand_and_against_exact_counts():
    from benchfill.measure.detect import _hypergeom_cdf

    # 2 successes among 4 outcomes, 2 drawn: P(0) = C(2,2)/C(4,2) = 1/6, P(1) = 2*2/6, P(2) = 1/6
    assert _hypergeom_cdf(2, 4, 2) == pytest.approx([1 / 6, 5 / 6, 1.0], abs=1e-15)
    for n in range(1, 26):
        for k in range(n + 1):
            for d in range(n + 1):
                exact = np.cumsum([float(Fraction(comb(k, x) * comb(n - k, d - x), comb(n, d))) for x in range(d + 1)])
                assert _hypergeom_cdf(k, n, d) == pytest.approx(exact, abs=1e-14)


def test_hypergeom_cdf_of_ten_thousand_rollouts_is_a_distribution():
    """Big-integer comb() took about 15 s here (detect on 10,000 rollouts per item: 31 s, now 1.8 s)."""
    from benchfill.measure.detect import _hypergeom_cdf

    cdf = _hypergeom_cdf(11_000, 20_000, 10_000)
    # symmetric about its mean 5,500 to float precision, and a distribution
    assert cdf[-1] == pytest.approx(1.0, abs=1e-12) and cdf[5499] == pytest.approx(1 - cdf[5500], abs=1e-12)


# -- 7. hand-edited fit files ------------------------------------------------------------------------


@pytest.mark.parametrize("edit, pattern", [
    ({"item_ids": ["i1", "i1", "i3", "i4"]}, r"field 'item_ids' names 'i1' twice"),
    ({"models": ["x", "x"]}, r"field 'models' names 'x' twice"),
    ({"b_min": 2.0, "b_max": -1.0}, r"fields 'b_min' and 'b_max' \(2, -1\) are not the lowest and highest of field "
                                    r"'difficulty' \(-1, 2\)"),
    ({"b_min": 0.0, "b_max": 0.0}, r"fields 'b_min' and 'b_max' \(0, 0\) are not the lowest"),
    ({"chance": [5, 0, 0, 0]}, r"field 'chance' of item 'i1' is 5, not in \[0, 1\)"),
    ({"chance": [0, 0, 0, 1]}, r"field 'chance' of item 'i4' is 1, not in \[0, 1\)"),
    ({"chance": [0, 0, 0]}, r"field 'chance' has 3 values for 4 items"),
])
def test_a_hand_edited_fit_is_refused_naming_the_field(tmp_path, capsys, edit, pattern):
    path = tmp_path / "fit.json"
    _fit(["i1", "i2", "i3", "i4"], [-1.0, 0.0, 1.0, 2.0]).save(path)
    d = json.loads(path.read_text())
    path.write_text(json.dumps({**d, **edit}))
    with pytest.raises(DataError, match=r"fit\.json: " + pattern):
        IrtFit.load(path)
    _one_line_error(capsys, ["diagnose", "--fit", str(path)], r"fit\.json: " + pattern)


def test_a_saved_fit_still_loads(tmp_path):
    path = tmp_path / "fit.json"
    _fit(["i1", "i2", "i3"], [-0.3, 1.7, 0.1]).save(path)
    f = IrtFit.load(path)
    assert (f.b_min, f.b_max) == (-0.3, 1.7) and f.z[1] == 1.0
    _fit(["i1", "i2"], [0.5, 0.5]).save(path)  # all at one difficulty: b_min = b_max is the fit's own
    assert IrtFit.load(path).b_min == IrtFit.load(path).b_max == 0.5


def test_the_library_refuses_what_the_file_reader_leaves_out():
    # A caller's arrays (a pivot's missing cells filled with 0): an item no model tried came back at z 0.67,
    # a gap's edge in diagnose; counts past int64 wrapped, or left the fit with no Newton step (a TypeError).
    import benchfill
    from benchfill import ResponseMatrix

    rng = np.random.default_rng(0)
    trials = np.full((6, 8), 4)
    correct = rng.integers(0, 5, (6, 8))
    trials[:, 7] = correct[:, 7] = 0
    models, items = tuple(f"m{j}" for j in range(6)), tuple(f"i{i}" for i in range(8))
    with pytest.raises(DataError, match=r"1 item\(s\) no model tried \('i7'\): the prior alone would place them"):
        benchfill.fit(ResponseMatrix(models, items, correct, trials))
    trials[:, 7], correct[:, 7] = 4, 2
    trials[5, :] = correct[5, :] = 0
    with pytest.raises(DataError, match=r"1 model\(s\) that tried no item \('m5'\)"):
        benchfill.fit(ResponseMatrix(models, items, correct, trials))
    huge = np.full((3, 3), 2**62, dtype=np.uint64) * np.uint64(2)
    with pytest.raises(DataError, match=r"ResponseMatrix: correct holds \d+, implausibly large \(at most 1000000000"):
        ResponseMatrix(("a", "b", "c"), ("x", "y", "z"), huge, huge)
    with pytest.raises(DataError, match=r"trials holds 1e\+300, implausibly large"):
        ResponseMatrix(("a", "b", "c"), ("x", "y", "z"), np.ones((3, 3)), np.full((3, 3), 1e300))


def test_two_items_have_no_coverage_gaps_to_report(tmp_path, capsys):
    # min-max normalized, two items sit at 0 and 1 whatever the data: DDM 0.25, max gap 1, every time
    two = _write(tmp_path, "two_items.csv", HEADER + "".join(f"m{j},a,{j % 2},1\nm{j},b,{(j // 2) % 2},1\n"
                                                             for j in range(6)))  # fmt: skip
    assert main(["diagnose", "--responses", str(two)]) == 2
    assert "two items, which the min-max scale puts at 0 and 1 whatever their difficulties" in capsys.readouterr().err


def test_profile_subsets_leave_tau_b_undefined_with_two_models(tmp_path):
    from benchfill.measure.profiles import profile
    from benchfill.measure.profiles_subset import evaluate_subsets

    rows = "".join(f"{m},q{i},{(i * (j + 2)) % 5},4\n" for j, m in enumerate("AB") for i in range(12))
    m = read_responses(_write(tmp_path, "two_models.csv", HEADER + rows), min_models=1)
    ev = evaluate_subsets(profile(m, draws=99, cache_dir=False), m, size=4, repeats=3)
    assert np.isnan(ev.tau_profile[0]) and np.isnan(ev.tau_random[0])
    assert any("tau-b undefined in 3 of 3 draws (fewer than 3 models" in n for n in ev.notes)
