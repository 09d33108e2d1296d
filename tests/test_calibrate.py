"""Calibration by pruning (Algorithm 1) against hand-worked selections and rankings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchfill.coverage import ddm
from benchfill.errors import BenchfillError
from benchfill.matrix import ResponseMatrix
from benchfill.pruning import calibrate, model_scores, prune_to_target, read_reference

Z = np.array([0.0, 0.05, 0.1, 0.5, 0.52, 0.9, 1.0])


def test_algorithm_1_by_hand():
    # k = 3: targets 1/6, 1/2, 5/6 -> nearest items 0.1, 0.5, 0.9
    assert prune_to_target(Z, 3).tolist() == [2, 3, 5]
    # ties in position: the used item is skipped, the next one (lowest index) taken
    assert prune_to_target([0.5, 0.5, 0.5], 2).tolist() == [0, 1]
    # Beta(2,2) target with k = 1 puts its only quantile at 0.5
    assert prune_to_target(Z, 1, "beta:2,2").tolist() == [3]
    assert sorted(prune_to_target(Z, 7).tolist()) == list(range(7))
    with pytest.raises(BenchfillError, match=r"^k: must lie in 1\.\.7 \(the number of items\), got 8$"):
        prune_to_target(Z, 8)


def test_calibrate_reports_ddm_before_and_after():
    r = calibrate(Z, 3, item_ids=list("abcdefg"))
    assert r.selected == ["c", "d", "f"]
    assert r.ddm_after == pytest.approx((abs(0.1 - 1 / 6) + 0 + abs(0.9 - 5 / 6)) / 3)
    assert r.ddm_before == pytest.approx(ddm(Z))
    assert r.ddm_after < r.ddm_before
    assert r.ddm_random is not None and r.ranking is None


def _matrix():
    # 4 models, 7 items. Items 2, 3, 5 (the calibrated set) rank models A > B > C > D;
    # the other items rank them in reverse, so the full benchmark ranks differently.
    rate = np.array(
        [
            # 0    1    2    3    4    5    6
            [0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0],  # A
            [0.2, 0.2, 0.8, 0.8, 0.2, 0.8, 0.2],  # B
            [0.8, 0.8, 0.4, 0.4, 0.8, 0.4, 0.8],  # C
            [1.0, 1.0, 0.2, 0.2, 1.0, 0.2, 1.0],  # D
        ]
    )
    trials = np.full(rate.shape, 5)
    return ResponseMatrix(("A", "B", "C", "D"), tuple("abcdefg"), (rate * 5).astype(np.int64), trials)


def test_model_scores_and_reference_ranking(tmp_path):
    m = _matrix()
    assert model_scores(m, np.array([2, 3, 5])) == pytest.approx([1.0, 0.8, 0.4, 0.2])
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"A": 4, "B": 3, "C": 2, "D": 1, "extra": 0}))
    r = calibrate(Z, 3, item_ids=list("abcdefg"), matrix=m, reference=ref, n_random=10, seed=1)
    assert r.ranking["calibrated"] == pytest.approx({"spearman": 1.0, "kendall": 1.0})
    # full scores: A 3/7, B 3.6/7, C 4.4/7, D 4.6/7 -> exactly reversed
    assert r.ranking["full"] == pytest.approx({"spearman": -1.0, "kendall": -1.0})
    assert -1.0 <= r.ranking["random"]["spearman"] <= 1.0 and r.ranking["random"]["n"] == 10
    # no reference: the full benchmark is the reference
    r2 = calibrate(Z, 3, item_ids=list("abcdefg"), matrix=m)
    assert r2.ranking["full"]["spearman"] == pytest.approx(1.0)
    assert r2.ranking["calibrated"]["spearman"] == pytest.approx(-1.0)
    assert r2.ranking["reference"] == "full benchmark"


def test_reference_file_errors(tmp_path):
    f = tmp_path / "ref.csv"
    f.write_text("model,score\nA,1\nB,2\n")
    with pytest.raises(BenchfillError, match="no reference score for model 'C'"):
        read_reference(f, ("A", "B", "C"))
    f.write_text("model,score\nA,1\nB,two\n")
    with pytest.raises(BenchfillError, match=r"ref\.csv:3"):
        read_reference(f, ("A", "B"))
    f.write_text("model,score\nA,1\nB,2\n")
    assert read_reference(f, ("B", "A")).tolist() == [2.0, 1.0]


def test_calibration_on_demo_moves_towards_uniform():
    from benchfill.demo import demo_benchmark
    from benchfill.irt import fit

    d = demo_benchmark(0)
    f = fit(d.matrix)
    r = calibrate(f, 24, matrix=d.matrix, seed=0)
    assert r.ddm_after < 0.75 * r.ddm_before  # gaps remain: pruning cannot fill them
    assert r.ddm_after < r.ddm_random
    assert len(set(r.selected)) == 24 and set(r.selected) <= set(d.matrix.item_ids)
