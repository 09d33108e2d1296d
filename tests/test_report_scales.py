"""The review record on the run's fitted scale: the simulated truth as report.json's true z (not the world's
own scale), the ECDF position at the confirmed z; and what the page, the CSV and a release make of it,
records written before included."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.report import review_records
from benchfill.review.export import export_queue
from benchfill.review.server import ReviewServer
from benchfill.search.annotate import Annotation
from benchfill.search.loop import Child
from benchfill.search.services import Verdict


def _result(annotated_z: float, confirmed_z: float | None, true_z: float | None, latent: float | None):
    def ann(z):
        return Annotation(difficulty=-2.0 + 4.0 * z, se=0.3, z=z, z_se=0.05, rollouts=24)

    child = Child("c0", "p0", "p0", 1, {"id": "c0", "problem": "Find x.", "answer": "1"},
                  verdict=Verdict(True, "fine", "judge"), annotation=ann(annotated_z),
                  confirmation=None if confirmed_z is None else ann(confirmed_z),
                  true_difficulty=latent, true_z=true_z)
    return SimpleNamespace(chosen=child, gap_index=0, left=0.3, right=0.4, target_z=0.35, inside_probability=0.5,
                           shared=None)


# Eleven items at z = 0, 0.1, ..., 1 on b from -2 to 2.
FIT = SimpleNamespace(z=np.linspace(0.0, 1.0, 11), b_min=-2.0, b_max=2.0)
BENCH = SimpleNamespace(items=[{"id": "p0", "problem": "Find y.", "answer": "2"}],
                        spec=SimpleNamespace(name="demo", text_field="problem", answer_field="answer", evaluator="math"))
OPTS = SimpleNamespace()


def test_the_review_record_holds_the_truth_on_the_fitted_scale_and_the_ecdf_at_the_confirmed_z():
    # annotated at 0.33 (4 items below), confirmed at 0.57 (6 below); the truth at z 0.6 on this fit, whatever
    # the world's own latent b (7.0) is
    (rec,) = review_records([_result(0.33, 0.57, 0.6, 7.0)], OPTS, "run", BENCH, FIT, {"simulated": True})
    assert rec["ecdf_position"] == pytest.approx(6 / 11)
    assert rec["true_z"] == 0.6 and rec["true_difficulty"] == pytest.approx(-2.0 + 4.0 * 0.6)
    assert rec["world_difficulty"] == 7.0
    (rec,) = review_records([_result(0.33, None, 0.6, 7.0)], OPTS, "run", BENCH, FIT, {"simulated": True})
    assert rec["ecdf_position"] == pytest.approx(4 / 11)  # unconfirmed: at the annotated z
    (rec,) = review_records([_result(0.33, 0.57, None, None)], OPTS, "run", BENCH, FIT, {})
    assert rec["true_z"] is None and rec["true_difficulty"] is None and rec["world_difficulty"] is None


def _with_truth(run):
    """Give the first record the fitted-scale truth a run now writes; the others stay as written before."""
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    recs[0].update(true_z=0.4321, true_difficulty=-1.2345, world_difficulty=2.5)
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


def test_the_page_and_the_sheet_show_the_truth_on_the_fitted_scale(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    recs = _with_truth(run)
    with ReviewServer(run) as srv:
        cookies = httpx.get(srv.url).cookies
        new, old = (httpx.get(f"http://127.0.0.1:{srv.port}/item/{i}", cookies=cookies).text for i in CHILD_IDS[:2])
    assert ("true difficulty (simulated world, on this run's fitted scale): <span id=\"true-difficulty\">"
            "b = -1.234 (z = 0.432)</span>") in new
    assert "2.500" not in new  # the world's own b is not what the reviewer compares
    # a record written before holds the world's own scale: shown, and said to be so
    assert (f"true difficulty (simulated world, on the world's own scale, not this run's fitted one: not comparable "
            f"with the estimates above): {recs[1]['true_difficulty']:.3f}") in old
    rows = {r["item_id"]: r for r in csv.DictReader(export_queue(run)[1].open(encoding="utf-8-sig"))}
    assert (rows[CHILD_IDS[0]]["true_difficulty"], rows[CHILD_IDS[0]]["true_z"]) == ("-1.2345", "0.4321")
    assert (rows[CHILD_IDS[1]]["true_difficulty"], rows[CHILD_IDS[1]]["true_z"]) == ("", "")


def test_a_release_ships_the_truth_on_its_scale_of_record(tmp_path, shared_data):
    from benchfill.release import release
    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    _with_truth(run)
    with ReviewBoard(run) as board:
        for i in CHILD_IDS[:2]:
            board.decide(i, "ann", "accept")
    res = release(run, "1.0.0")  # its own scale of record: the run's fitted scale
    rows = {r["id"]: r for r in map(json.loads, (res.path / "data" / "test.jsonl").read_text().splitlines())}
    assert rows[CHILD_IDS[0]]["true_difficulty"] == pytest.approx(-1.2345)
    assert rows[CHILD_IDS[1]]["true_difficulty"] is None  # the world's own scale maps onto no fit


def _rep(**over):
    """A report.json dict as write_report makes it, one gap whose chosen item is placed at ``placed_by``."""
    gap = {"gap_index": 0, "left": 0.30, "right": 0.34, "width": 0.04, "target_z": 0.32, "chosen_id": "c0",
           "ancestor_id": "p0", "annotated_z": 0.321, "annotated_z_se": 0.03, "confirmed_z": None, "true_z": None,
           "placed_z": 0.321, "placed_z_se": 0.03, "placed_by": "annotated", "inside_probability": 0.48,
           "status": "filled", "flags": [], "rounds_used": 2, "stopped": "rounds", "spend": {"rollouts": 10,
           "model_calls": 4}, "steering": None, "confirmed_children": []}
    rep = {"run_id": "r", "benchmark": "demo", "simulated": True, "backend": {"backend": "sim"}, "strategy": "benchfill",
           "annotation": "adaptive", "steering": "on", "confirm": False, "seed": 0, "responses": "given",
           "n_items": 11, "gaps_filled": 1, "gaps_outside": 0, "gaps_expected_inside": 0.48,
           "placed_by": ["annotated"], "top_k": 1, "top_k_sum_before": 0.1, "top_k_sum_after": 0.06,
           "max_gap_before": 0.1, "max_gap_after": 0.06, "top_k_reduction": 0.4, "after_interval": None,
           "top_k_reduction_expected": None, "interval_level": None, "top_k_sum_after_annotated": 0.06,
           "max_gap_after_annotated": 0.06, "top_k_reduction_annotated": 0.4, "isolation": None,
           "gaps_before": [{"left": 0.3, "right": 0.34, "width": 0.04, "left_item": "a", "right_item": "b"}],
           "gaps": [gap], "spend": {}, "memory": None}
    rep.update(over)
    return rep


def test_figures_at_the_annotated_difficulty_are_called_optimistic_and_the_advice_fits():
    from benchfill.report import _markdown, summary_lines

    md = _markdown(_rep())
    assert "the confirmed one is measured on fresh rollouts" not in md
    assert ("After-figures place each chosen item at its **annotated** difficulty, the estimate the search chose it "
            "on: confirmation was off (`--no-confirm`)") in md
    assert "so these figures are **optimistic**" in md and "rerun without `--no-confirm`" in md
    # the narrow gap's advice: --confirm-se does nothing without a confirmation
    narrow = md.split("**Narrower than the estimate resolves**")[1].split("\n")[0]
    assert "rerun without `--no-confirm`" in narrow and "a tighter `--confirm-se` resolves it" not in narrow
    assert summary_lines(_rep())[0].endswith("after-figures by annotated z (optimistic: the estimates the selection "
                                             "chose on; rerun without --no-confirm)")
    # confirmed: as before
    conf = _rep(placed_by=["confirmed"], confirm=True)
    conf["gaps"][0].update(placed_by="confirmed", confirmed_z=0.321)
    md = _markdown(conf)
    assert "at its **confirmed** difficulty (measured on fresh rollouts" in md and "optimistic" not in md
    assert "the selection's winner's curse does not inflate it" in md
    # with the probes' own offsets allowed for, the confirmation does not claim to undo the curse: fresh rollouts
    # of the same probes carry the same offsets (bench/bench_confirm_offsets.py)
    offsets = _markdown({**conf, "backend": {**(conf.get("backend") or {}), "pair_allowance": {"sd": 3.3, "given": True}}})
    assert "does not inflate" not in offsets
    assert "the probes' own offsets on the item are the same in both, so the part they make remains" in offsets
    assert "a tighter `--confirm-se` resolves it, at more rollouts" in md
    assert summary_lines(conf)[0].endswith("after-figures by confirmed z")
    # nothing placed: it said "after-figures by none z"
    assert summary_lines(_rep(placed_by=[], confirm=True))[0].endswith(": no item placed: the after-figures are "
                                                                        "the before")
    # generated programs that ran unconfined are said in the headline, beside SIMULATED
    assert summary_lines(_rep(isolation="unconfined"))[0].startswith("r (SIMULATED) (UNCONFINED): ")
    assert summary_lines(_rep(isolation="bubblewrap", simulated=False))[0].startswith("r: ")


def test_a_gap_beyond_the_panels_reach_is_not_told_to_spend_more_rollouts():
    # Confirmed to a sampling se of 0.005 with a placement se of 0.03 against a half-width of 0.02: the 0.0296
    # that no rollout removes (the slope, the abilities) is wider than the gap, so the remedy is a probe near it.
    from benchfill.report import _markdown

    conf = _rep(placed_by=["confirmed"], confirm=True)
    conf["gaps"][0].update(placed_by="confirmed", confirmed_z=0.321, placed_fixed_z_se=(0.03**2 - 0.005**2) ** 0.5)
    md = _markdown(conf)
    reach = md.split("**Beyond the probe panel's reach**")[1].split("\n")[0]
    assert "gap 0 (half-width 0.0200 against se 0.0300, 0.0296 of it beyond any rollout)" in reach
    assert "a probe model near the gap lowers it; the run's warnings before the search work out how far" in reach and "which no added probe removes" in reach
    assert "Narrower than the estimate resolves" not in md and "--confirm-se" not in reach
    assert "own offset" not in reach
    # with an allowance for each probe's own offset on an item, that part is named, and its remedy
    md = _markdown({**conf, "backend": {**(conf.get("backend") or {}), "pair_allowance": {"sd": 3.3, "given": True}}})
    reach = md.split("**Beyond the probe panel's reach**")[1].split("\n")[0]
    assert "each probe's own offset on the item, which only many more probe models lower" in reach
    assert "the probes' fitted abilities and the item's unknown slope, and each probe's own offset on it." in md
    assert "the probes' fitted abilities and the item's unknown slope." in _markdown(conf)
    # most of it sampling: the rollout advice, as before
    conf["gaps"][0].update(placed_fixed_z_se=(0.03**2 - 0.028**2) ** 0.5)
    md = _markdown(conf)
    assert "Beyond the probe panel's reach" not in md and "a tighter `--confirm-se` resolves it" in md


def test_the_oracle_and_the_baseline_are_not_said_to_steer_and_the_oracle_is_a_bound():
    from benchfill.report import _markdown, summary_lines

    oracle_gap = {"gap_index": 0, "target_z": 0.32, "chosen_id": None, "annotated_z": 0.32, "placed_z": 0.32,
                  "placed_by": "oracle", "placed_z_se": 0.0, "strategy": "oracle", "status": "filled"}
    oracle = _rep(strategy="oracle", steering=None, placed_by=["oracle"], gaps=[oracle_gap], gaps_expected_inside=None)
    md = _markdown(oracle)
    assert "steering **n/a**" in md and "steering **on**" not in md
    assert "After-figures are the **oracle**'s: an ideal item placed exactly at the midpoint of the then-largest" in md
    assert "annotated** difficulty" not in md and "winner's curse does not inflate" not in md
    assert "a bound, not a measurement" in summary_lines(oracle)[0]
    baseline = _rep(strategy="baseline", steering=None)
    assert "steering **n/a**" in _markdown(baseline)
    assert "steering **on**" in _markdown(_rep()) and "steering **off**" in _markdown(_rep(steering="off"))


def test_probe_answers_stopped_at_max_tokens_are_named_in_the_report():
    from benchfill.report import _markdown

    assert "stopped at max_tokens" not in _markdown(_rep(backend={"backend": "config", "traffic": {"cut": 0}}))
    md = _markdown(_rep(backend={"backend": "config", "traffic": {"cut": 37}}))
    assert "**37 probe answer(s) stopped at max_tokens** before they ended and were graded wrong" in md
    assert "Raise the probes' max_tokens in the config" in md
    # a simulated run has no config to change: the world wrote them so, among wrong answers only
    sim = _markdown(_rep(backend={"backend": "sim", "simulated": True, "traffic": {"cut": 5}}))
    assert "5 probe answer(s) stopped at max_tokens" in sim and "--sim-reply-habits" in sim
    assert "in the config" not in sim
