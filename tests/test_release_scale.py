"""A release from a run that is not the scale of record's: every difficulty and z of a generated row on the
scale of record (the gap's edges and the target included, through the one map), its flag ``outside_gap`` as the run's, the
simulated truth mapped alike; and the card says which items lie outside their gap, and gives the run's
own top-k beside its top-5."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from test_review_support import CHILD_IDS, make_run, record_fit

from benchfill.irt.fit import IrtFit
from benchfill.release import release
from benchfill.review import ReviewBoard
from benchfill.store import Store

SHIFT = 0.4  # run b places the left edge of child 0's gap this much higher (b) than its map of run a implies


def _second_run(tmp_path, shared_data):
    """Run b: run a's items on a stretched, shifted scale (b' = 2 b + 1), the left edge item of child 0's gap
    placed higher still, and its queue written on that fit as a run writes it. Child 0 is confirmed just
    below its gap's left edge in run b (flagged outside_gap there), which on the record lies inside."""
    run = make_run(tmp_path, shared_data, "run-b")
    fit = IrtFit.load(run / "fit.json")
    ids = list(fit.item_ids)
    order = [ids[i] for i in np.argsort(fit.z)]
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    b = 2.0 * np.asarray(fit.difficulty, dtype=float) + 1.0
    b[ids.index(recs[0]["ancestor_id"])] += SHIFT  # (a child's parent is its gap's left edge item)
    fit.difficulty = b
    fit.b_min, fit.b_max = float(b.min()), float(b.max())
    record_fit(run, fit)
    z = dict(zip(ids, fit.z, strict=True))
    for n, rec in enumerate(recs):
        left_id = rec["ancestor_id"]
        left, right = z[left_id], z[order[order.index(left_id) + 1]]
        target = (left + right) / 2
        ann_z = target + 0.03 * (n - 1.5)
        conf_z = left - 0.002 if n == 0 else ann_z + 0.01
        true_z = conf_z + 0.05
        rec.update(gap={"left": left, "right": right}, target_z=target,
                   annotated={"difficulty": float(fit.denormalize(ann_z)), "se": 0.4, "z": ann_z},
                   confirmed={"difficulty": float(fit.denormalize(conf_z)), "se": 0.3, "z": conf_z},
                   flags=[] if left < conf_z < right else ["outside_gap"],
                   true_difficulty=float(fit.denormalize(true_z)), true_z=true_z, world_difficulty=0.123)
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = Store(run / "store.db")
    store.set_meta("options", {"gaps": 3})  # the run's --gaps
    store.close()
    return run, recs


def _accept_all(run):
    with ReviewBoard(run) as board:
        for item_id in CHILD_IDS:
            board.decide(item_id, "ann", "accept")


def _rows(res):
    return [json.loads(x) for x in (res.path / "data" / "test.jsonl").read_text().splitlines()]


def test_a_release_from_another_run_puts_every_column_of_a_new_row_on_the_scale_of_record(tmp_path, shared_data):
    first = make_run(tmp_path, shared_data, "run-a")
    second, recs = _second_run(tmp_path, shared_data)
    _accept_all(first)
    _accept_all(second)
    out = tmp_path / "releases"
    a = release(first, "1.0.0", out=out)
    b = release(second, "1.1.0", out=out)
    scale = json.loads((out / "aime24" / "scale_of_record.json").read_text())
    card = (b.path / "README.md").read_text()
    meta = yaml.safe_load(card.split("---\n")[1])["benchfill"]
    icpt, slope = meta["scale_of_record"]["intercept"], meta["scale_of_record"]["slope"]
    assert slope == pytest.approx(0.5, abs=0.02)  # b' = 2 b + 1, give or take the shifted item

    def z_rec(b_run: float) -> float:
        return (icpt + slope * b_run - scale["b_min"]) / (scale["b_max"] - scale["b_min"])

    fit_b = IrtFit.load(second / "fit.json")
    originals = {r["id"]: r["z"] for r in _rows(a) if r["origin"] == "original"}
    ids = list(fit_b.item_ids)
    order = [ids[i] for i in np.argsort(fit_b.z)]
    new = {r["id"].split("@")[0]: r for r in _rows(b) if r["origin"] == "generated" and r["released_in"] == "1.1.0"}
    assert sorted(new) == sorted(CHILD_IDS)
    # the originals' standard errors too, through the same map (the run's b se stretched by its slope)
    kept = [r for r in _rows(b) if r["origin"] == "original" and r["id"] in ids]
    assert len(kept) == len(ids)
    for r in kept:
        assert r["difficulty_se"] == pytest.approx(slope * float(fit_b.difficulty_se[ids.index(r["id"])]), rel=1e-6)
    for rec in recs:
        row, conf, ann = new[rec["item_id"]], rec["confirmed"], rec["annotated"]
        assert row["difficulty_source"] == "confirmed"
        assert row["difficulty"] == pytest.approx(icpt + slope * conf["difficulty"], abs=1e-9)
        assert row["confirmed_difficulty"] == pytest.approx(row["difficulty"], abs=1e-12)
        assert row["confirmed_z"] == pytest.approx(row["z"], abs=1e-12) == pytest.approx(z_rec(conf["difficulty"]))
        assert row["confirmed_se"] == pytest.approx(row["difficulty_se"]) == pytest.approx(slope * conf["se"])
        assert row["annotated_difficulty"] == pytest.approx(icpt + slope * ann["difficulty"], abs=1e-9)
        assert row["annotated_z"] == pytest.approx(z_rec(ann["difficulty"]), abs=1e-9)
        assert row["annotated_se"] == pytest.approx(slope * ann["se"])
        assert row["target_z"] == pytest.approx(z_rec(float(fit_b.denormalize(rec["target_z"]))), abs=1e-9)
        # the gap's edges go through the target's map, not to where the record puts the two originals that
        # bound it: the child, its target and its edges keep the order the run measured them in
        for edge, side in ((row["gap_left"], "left"), (row["gap_right"], "right")):
            assert edge == pytest.approx(z_rec(float(fit_b.denormalize(rec["gap"][side]))), abs=1e-9)
        assert row["gap_left"] < row["target_z"] < row["gap_right"]
        inside = row["gap_left"] < row["z"] < row["gap_right"]
        assert ("outside_gap" in json.loads(row["flags"])) == (not inside) == ("outside_gap" in rec["flags"])
        # the simulated truth, on the fitted scale in the record, is on the record's scale too
        assert row["true_difficulty"] == pytest.approx(icpt + slope * rec["true_difficulty"], abs=1e-9)
    # The record places child 0's left edge item lower than the map of run b does (SHIFT): there the child
    # would lie inside the gap between the two originals, and the card would have flagged none; the run
    # measured the child and that edge item with one panel, and the child below the item.
    right_id = order[order.index(recs[0]["ancestor_id"]) + 1]
    zero = new[CHILD_IDS[0]]
    assert originals[recs[0]["ancestor_id"]] < zero["z"] < originals[right_id]
    assert json.loads(zero["flags"]) == ["outside_gap"]
    # A record written before the fitted-scale truth holds the world's own scale: released as unknown.
    assert all(r["true_difficulty"] is None for r in _rows(a) if r["origin"] == "generated")


def test_the_card_names_the_items_outside_their_gap_and_gives_the_runs_top_k(tmp_path, shared_data):
    from benchfill.measure.before_after import before_after

    second, recs = _second_run(tmp_path, shared_data)
    _accept_all(second)
    res = release(second, "1.0.0")  # its own scale of record: child 0 lies outside its gap as the run says
    rows = _rows(res)
    outside = [r["id"] for r in rows if r["origin"] == "generated" and "outside_gap" in json.loads(r["flags"])]
    assert outside == [CHILD_IDS[0]]
    card = (res.path / "README.md").read_text()
    meta = yaml.safe_load(card.split("---\n")[1])["benchfill"]
    assert meta["outside_gap"] == outside and meta["run_top_k"] == 3
    assert f"1 generated item(s) lie outside the gap they were made for, as the run measured the item and its " \
           f"gap, both mapped onto this scale (flag `outside_gap` in column `flags`): `{CHILD_IDS[0]}`" in card
    log = (res.path / "CHANGELOG.md").read_text()
    assert f"- outside their gap (flag `outside_gap`): `{CHILD_IDS[0]}`" in log
    # the run report's top-3 beside the card's top-5, computed the same way, and why they differ
    z_before = [r["z"] for r in rows if r["origin"] == "original"]
    placed = [r for r in rows if r["origin"] == "generated"]
    ba = before_after(z_before, [r["z"] for r in placed], [r["z_se"] for r in placed], 3)
    before, after = meta["coverage"]["before"], meta["coverage"]["after"]
    assert before["top3_gap_sum"] == pytest.approx(ba["before"]["top3_gap_sum"], abs=5e-5)
    assert after["top3_gap_sum"] == pytest.approx(ba["after"]["top3_gap_sum"], abs=5e-5)
    lo, hi = ba["after_interval"]["top3_gap_sum"]
    assert after["after_interval"]["top3_gap_sum"] == pytest.approx([lo, hi])
    assert (f"| top-3 gap sum (the run's --gaps) | {before['top3_gap_sum']} | {after['top3_gap_sum']} | "
            f"{lo:.4f} to {hi:.4f} |") in card
    assert "The top-3 row uses the k of run `run-b` (its --gaps), as that run's report does" in card
    assert f"top-3 gap sum {before['top3_gap_sum']} -> {after['top3_gap_sum']}" in log


def test_an_edited_scale_of_record_is_caught_by_the_next_release_and_by_verify(tmp_path, shared_data):
    # Halving every b of the file moved the next release's "before" figures (max gap 0.1355 -> 0.2689) with
    # no word, though the card says they are the same in every release.
    from benchfill.errors import BenchfillError
    from benchfill.release import verify_release

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run, writable=True) as board:
        board.decide(CHILD_IDS[0], "ann", "accept")
    out = tmp_path / "releases"
    first = release(run, "1.0.0", out=out)
    assert verify_release(first.path) == []
    path = out / "aime24" / "scale_of_record.json"
    kept = path.read_bytes()
    scale = json.loads(kept)
    scale["b"] = {k: 0.5 * v for k, v in scale["b"].items()}
    path.write_text(json.dumps(scale, indent=1))
    with ReviewBoard(run, writable=True) as board:
        board.decide(CHILD_IDS[1], "ann", "accept")
    with pytest.raises(BenchfillError, match=r"scale_of_record\.json: sha256 .* is not the one release 1\.0\.0 was "
                                             r"placed on .*the file was edited; restore it"):
        release(run, "1.1.0", out=out)
    assert not (out / "aime24" / "1.1.0").exists()
    assert verify_release(first.path) == [f"{path}: sha256 differs from the one release 1.0.0 was placed on (modified)"]
    path.write_bytes(kept)  # restored: all is as it was
    assert verify_release(first.path) == []
    assert release(run, "1.1.0", out=out).version == "1.1.0"


def test_the_after_interval_is_the_level_it_says_worked_by_hand():
    # Items at 0, 0.2 and 1; a new one at 0.8 +- 0.01 splits the gap [0.2, 1] into 0.6 + e and 0.2 - e: the
    # max gap (and top-1 sum) is 0.6 + e, e ~ N(0, 0.01^2), so the 90% interval is 0.6 -+ 1.645 x 0.01. An
    # 80% interval labelled 90% had passed (the tests checked only lo < after < hi).
    from scipy.stats import norm

    from benchfill.measure.before_after import before_after

    r = before_after([0.0, 0.2, 1.0], [0.8], [0.01], 1, seed=0)
    half = norm.ppf(0.95) * 0.01
    assert r["interval_level"] == 0.9
    for name in ("max_gap", "top1_gap_sum"):
        lo, hi = r["after_interval"][name]
        assert lo == pytest.approx(0.6 - half, abs=0.0012) and hi == pytest.approx(0.6 + half, abs=0.0012)


def test_a_run_is_mapped_onto_the_record_by_mean_and_sigma_and_refused_when_the_fits_disagree(tmp_path):
    # A least-squares line mapped any fit at all: one correlated -0.004 with the record (another simulated
    # world) put its child at the record's middle with a 280-fold smaller se, counted as filling a gap. And
    # its slope shrinks by the correlation, pulling every mapped item toward the record's mean.
    from types import SimpleNamespace

    from benchfill.errors import DataError
    from benchfill.release import ScaleOfRecord

    ids = [f"q{i}" for i in range(12)]
    b_rec = np.linspace(-2, 2, 12)
    record = ScaleOfRecord(dict(zip(ids, b_rec, strict=True)), -2.0, 2.0, "first", "1.0.0")
    wobble = np.array([0.1, -0.1] * 6)
    run_b = (b_rec + wobble - 0.3) / 1.5  # another fit of the same items: shifted, scaled, a little noise
    to_record = record.mapping(SimpleNamespace(item_ids=ids, difficulty=run_b), tmp_path / "second")
    # by hand: slope = sd(record) / sd(run), intercept = mean(record) - slope * mean(run)
    slope = np.std(b_rec) / np.std(run_b)
    assert record.slope == pytest.approx(slope) and record.intercept == pytest.approx(-slope * np.mean(run_b))
    assert to_record(1.0) == pytest.approx(record.intercept + slope)
    assert slope > np.polyfit(run_b, b_rec, 1)[0]  # least squares shrinks it by the correlation
    shuffled = np.random.default_rng(0).permutation(b_rec)  # the same spread, no agreement
    with pytest.raises(DataError, match=r"second: its fit cannot be mapped onto the scale of record of run first: "
                                        r"its z correlate -?0\.\d+ with the record's on 12 shared items \(at least 0\.9\)"):
        record.mapping(SimpleNamespace(item_ids=ids, difficulty=shuffled), tmp_path / "second")


def test_the_card_says_when_an_after_figure_lies_below_its_interval_as_the_report_does():
    from benchfill.report import BELOW_INTERVAL, BELOW_WHY
    from benchfill.review.card import coverage_figures, dataset_card

    before = coverage_figures([0.0, 0.1, 0.5, 0.55, 1.0])
    after = coverage_figures([0.0, 0.1, 0.3, 0.5, 0.55, 0.8, 1.0])  # max gap 0.25, top-5 sum 0.95
    meta = {"benchmark": "b", "version": "1.0.0", "n_original": 5, "n_generated": 2, "release_rule": "one accept",
            "run_id": "r", "run_top_k": 5}
    inside = after | {"interval_level": 0.9, "after_interval": {"max_gap": [0.24, 0.3], "top5_gap_sum": [0.9, 1.05]}}
    card = dataset_card(meta, before, inside, "")
    assert BELOW_INTERVAL not in card and "their own fit error, which moves the gaps' edges, is not in it" in card
    # a figure that takes each new item exactly at its estimate can sit below the interval of the true figure
    below = after | {"interval_level": 0.9, "after_interval": {"max_gap": [0.24, 0.3], "top5_gap_sum": [0.96, 1.05]}}
    said = dataset_card(meta, before, below, "")
    assert f"The top-5 gap sum after lies below its interval: {BELOW_WHY}." in said and BELOW_INTERVAL not in said
    both = after | {"interval_level": 0.9, "after_interval": {"max_gap": [0.26, 0.3], "top5_gap_sum": [0.96, 1.05]}}
    assert f"The max gap and the top-5 gap sum after lie below their intervals: {BELOW_WHY}." in dataset_card(
        meta, before, both, "")
