"""What a run's report claims (issue 10): after-figures at the confirmed difficulty with an interval,
a gap counted as filled only when the chosen item's confirmed z lies inside it, the flag
``outside_gap`` wherever a chosen item appears, the simulated truth on the run's fitted scale, and
the review page marked as simulated."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchfill.coverage import ddm, top_k_gap_sum
from benchfill.errors import DataError
from benchfill.review.export import export_queue
from benchfill.review.server import ReviewServer
from benchfill.run import RunOptions, run

# How the claims are computed and shown, on a tiny budget: probes that answer independently about the curve
# (pair_sd 0), so that six of them in two rounds choose items to show. The default world, whose probes agree with
# themselves as real ones do, is run by test_every_confirmation_is_kept_in_the_store_and_listed_in_the_report
# and test_readme_demo.py.
FAST = dict(gaps=2, rounds=2, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_pair_sd=0.0)


def _report(d):
    return json.loads((d / "report.json").read_text()), (d / "report.md").read_text()


def test_a_chosen_item_outside_its_gap_is_flagged_everywhere(tmp_path):
    # Every child comes out 4 logits harder than the rewriter meant: none can land in these gaps.
    # (three gaps: one chosen outside, two failed, so that the counts of each status differ)
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), sim_rewriter="kind",
                      sim_rewriter_knobs={"drift": 4.0}, **{**FAST, "gaps": 3})
    d = run(opts)
    rep, md = _report(d)
    chosen = [g for g in rep["gaps"] if g["chosen_id"]]
    assert chosen and all(g["status"] == "outside_gap" and "outside_gap" in g["flags"] for g in chosen)
    for g in chosen:  # the claim rests on the confirmed z, and it really is outside
        assert g["placed_by"] == "confirmed" and g["placed_z"] == g["confirmed_z"]
        assert not g["left"] < g["confirmed_z"] < g["right"]
        assert g["inside_probability"] < 0.5  # placed outside, so more likely outside than in
    assert rep["gaps_filled"] == 0 and rep["gaps_outside"] == len(chosen)
    # each count is its own status's, and together with the failed ones they are every gap
    statuses = [g["status"] for g in rep["gaps"]]
    assert statuses.count("outside_gap") != statuses.count("failed")
    assert rep["gaps_outside"] == statuses.count("outside_gap") and rep["gaps_filled"] == statuses.count("filled")
    assert statuses.count("failed") + rep["gaps_outside"] + rep["gaps_filled"] == len(statuses)
    assert f"{len(chosen)} chosen item(s) lie outside their gap" in md and "outside_gap" in md
    queue = [json.loads(x) for x in (d / "review_queue.jsonl").read_text().splitlines()]
    assert queue and all("outside_gap" in q["flags"] for q in queue)
    # ... and the reviewer sees how likely it is to lie inside after all, as the report gives it
    by_gap = {g["gap_index"]: g["inside_probability"] for g in chosen}
    assert all(q["inside_probability"] == by_gap[q["gap_index"]] < 0.5 for q in queue)
    # ... and the placement se the report's interval carries, which a release's card uses in turn
    se_by_gap = {g["gap_index"]: g["placed_z_se"] for g in chosen}
    assert all(q["confirmed"]["placement_z_se"] == se_by_gap[q["gap_index"]] > 0 for q in queue)
    rows = list(csv.DictReader(export_queue(d)[1].open(encoding="utf-8-sig")))
    assert [float(r["inside_probability"]) for r in rows] == [q["inside_probability"] for q in queue]
    with ReviewServer(d) as srv:
        page = httpx.get(srv.url).text
        item = httpx.get(f"http://127.0.0.1:{srv.port}/item/{queue[0]['item_id']}", cookies=httpx.get(srv.url).cookies)
    assert "outside_gap" in page and "SIMULATED RUN" in page and "simulated-banner" in item.text
    assert f'id="inside-probability">{queue[0]["inside_probability"]:.2f}<' in item.text
    conf = queue[0]["confirmed"]  # where it sits, with the se the report's interval carries
    assert f"(z = {conf['z']:.3f} &plusmn; {conf['placement_z_se']:.3f})" in item.text
    assert [float(r["confirmed_z_se"]) for r in rows] == [q["confirmed"]["placement_z_se"] for q in queue]
    # the report's table gives each estimate the se the page gives it (it had shown the annotation's
    # sampling se alone under the same label)
    ann = queue[0]["annotated"]
    assert f"(z = {ann['z']:.3f} &plusmn; {ann['placement_z_se']:.3f})" in item.text
    assert (f"| {ann['z']:.4f} ± {ann['placement_z_se']:.4f} | {conf['z']:.4f} ± {conf['placement_z_se']:.4f} |"
            in md)


def test_a_gap_whose_children_all_lie_beyond_the_range_stays_open_and_says_why(tmp_path):
    # Every child has a wrong key that weak probes give: the strong probes all fail it, so it places
    # beyond the benchmark's hardest item, where it would open a new gap instead of filling this one.
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), sim_rewriter="kind", gaps=1, rounds=2, parents=2,
                      children=2, references=8, sim_probes=8, progress=False,
                      sim_rewriter_knobs={"invalid_base": 1.0, "invalid_max": 1.0, "judge_recall": 0.0, "slip": 1.0})
    d = run(opts)
    rep, md = _report(d)
    (g,) = rep["gaps"]
    assert g["chosen_id"] is None and g["valid_children"] > 0 and rep["gaps_filled"] == 0
    assert f"none placed on the range [0, 1] (of {g['valid_children']} valid)" in md
    assert rep["top_k_sum_after"] == pytest.approx(rep["top_k_sum_before"]) and rep["top_k_reduction"] == 0  # nothing inserted
    assert (d / "review_queue.jsonl").read_text().strip() == ""
    # Confirmed beyond the range, they are not the ones the widening check set aside (that flag is for a
    # child on the range, tests/test_search_loop.py) ...
    assert g["confirmed_children"] and not any(c["widens"] for c in g["confirmed_children"])
    # ... and where the check did set one aside, the report names it as the reason the gap stayed open.
    from benchfill.report import _markdown

    g["confirmed_children"][0].update(z=0.999, inside=True, widens=True)
    md = _markdown(rep)
    assert (f"none taken: 1 confirmed but likely beyond the end of the axis, where it would widen the top-1 gap "
            f"sum in expectation (of {g['valid_children']} valid)") in md
    assert "would widen the coverage in expectation" in md


def test_the_expected_after_figures_average_over_the_new_items_error_worked_by_hand():
    from math import pi, sqrt

    from benchfill.measure.before_after import DRAWS, before_after

    # Items at 0 and 1 (the top-1 sum is 1); a new item at 0.5 with se 0.1 leaves max(x, 1 - x), whose mean
    # is 0.5 + E|x - 0.5| = 0.5 + 0.1 sqrt(2/pi); its sd is 0.1 sqrt(1 - 2/pi), so DRAWS draws pin it to
    # well within 4 of their standard errors. The point figure (the item exactly at 0.5) is 0.5.
    out = before_after([0.0, 1.0], [0.5], [0.1], 1, seed=3)
    want, mc = 0.5 + 0.1 * sqrt(2 / pi), 0.1 * sqrt(1 - 2 / pi) / sqrt(DRAWS)
    assert out["after"]["top1_gap_sum"] == 0.5 and out["reduction"] == 0.5
    assert abs(out["after_expected"]["top1_gap_sum"] - want) < 4 * mc
    assert out["reduction_expected"] == pytest.approx(1 - out["after_expected"]["top1_gap_sum"])
    assert "after_expected" not in before_after([0.0, 1.0], [0.5], [0.0], 1)  # no error, no average


@pytest.fixture(scope="module")
def kind_run(tmp_path_factory):
    """One short run with the kind rewriter, read by the tests below (each copies it before changing it)."""
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path_factory.mktemp("kind")), sim_rewriter="kind", **FAST)
    return opts, run(opts)


def test_after_figures_are_the_confirmed_ones_with_an_interval(kind_run):
    opts, d = kind_run
    rep, md = _report(d)
    fit = json.loads((d / "fit.json").read_text())
    b = np.asarray(fit["difficulty"], dtype=float)
    z = (b - fit["b_min"]) / (fit["b_max"] - fit["b_min"])
    placed = [g["confirmed_z"] for g in rep["gaps"] if g["chosen_id"]]
    annotated = [g["annotated_z"] for g in rep["gaps"] if g["chosen_id"]]
    assert placed and rep["placed_by"] == ["confirmed"]
    assert rep["top_k_sum_after"] == top_k_gap_sum(np.concatenate([z, placed]), 2)
    assert rep["top_k_sum_after_annotated"] == top_k_gap_sum(np.concatenate([z, annotated]), 2)
    # DDM too, against the uniform target as the release card gives it, with its interval
    assert (rep["ddm_before"], rep["ddm_after"]) == (ddm(z), ddm(np.concatenate([z, placed])))
    lo, hi = rep["after_interval"]["ddm"]
    assert f"| DDM (uniform) | {ddm(z):.4f} | {rep['ddm_after']:.4f} (90% interval {lo:.4f} to {hi:.4f}) |" in md
    # The deviation claimed is the confirmed one too; the annotated one is kept beside it.
    targets = [g["target_z"] for g in rep["gaps"] if g["chosen_id"]]
    assert rep["target_deviation"] == pytest.approx(np.mean(np.abs(np.subtract(placed, targets))))
    assert rep["target_deviation_annotated"] == pytest.approx(np.mean(np.abs(np.subtract(annotated, targets))))
    lo, hi = rep["after_interval"]["top2_gap_sum"]
    assert lo <= rep["top_k_sum_after"] <= hi + 1e-12 and lo < hi
    assert "90% interval" in md and "confirmed" in md
    # ... and the reduction averaged over the same draws, beside the point figure
    from benchfill.measure.before_after import before_after

    ses = [g["placed_z_se"] for g in rep["gaps"] if g["chosen_id"]]
    assert rep["top_k_reduction_expected"] == before_after(z, placed, ses, 2, seed=opts.seed)["reduction_expected"]
    assert f"the top-2 reduction is {100 * rep['top_k_reduction_expected']:.1f}%" in md
    # A gap counts as filled exactly when its chosen item's confirmed z lies inside it.
    for g in rep["gaps"]:
        if g["chosen_id"]:
            inside = g["left"] < g["confirmed_z"] < g["right"]
            assert (g["status"] == "filled") == inside
    # The world's truth sits on this run's fitted scale: the originals' latent difficulties map onto
    # their fitted z closely, so a chosen item's true z is comparable with the benchmark's z.
    assert all(g.get("true_z") is not None for g in rep["gaps"] if g["chosen_id"])
    assert "at its true difficulty, mapped onto this fit's scale, and the original items at their fitted places" in md
    # ... and beside it the world's own verdict, the originals at their latent b too (their fit error moves the
    # gaps' edges): worked here from the world itself
    from benchfill.engine.backend import start_sim
    from benchfill.run import load_benchmark

    world = start_sim(opts, load_benchmark(opts), d, url="http://127.0.0.1:1/v1")[0]
    latent = {i: world.lookup(i).difficulty for i in fit["item_ids"]}
    lo, hi = min(latent.values()), max(latent.values())
    chosen = [g for g in rep["gaps"] if g["chosen_id"]]
    queue = {q["item_id"]: q for q in map(json.loads, (d / "review_queue.jsonl").read_text().splitlines())}
    truth = [queue[g["chosen_id"]]["world_difficulty"] for g in chosen]  # their latent b, as the world made them
    own = (np.array(list(latent.values())) - lo) / (hi - lo)
    world_said = rep["backend"]["world_truth (simulated)"]
    assert world_said["top_k_sum_before"] == pytest.approx(top_k_gap_sum(own, 2))
    assert world_said["top_k_sum_after"] == pytest.approx(top_k_gap_sum(np.concatenate([own, (np.array(truth) - lo) / (hi - lo)]), 2))
    edge = {round(v, 12): i for i, v in zip(fit["item_ids"], z, strict=True)}
    ends = [(latent[edge[round(g["left"], 12)]], latent[edge[round(g["right"], 12)]]) for g in chosen]
    inside = sum(min(e) < t < max(e) for e, t in zip(ends, truth, strict=True))
    assert (world_said["inside"], world_said["chosen"]) == (inside, len(chosen))
    assert f"{inside} of {len(chosen)} chosen item(s) truly lie between the two original items" in md
    # ... and the review queue holds that same truth (its b on the fitted scale beside it), not the world's own b
    for g in rep["gaps"]:
        if g["chosen_id"]:
            q = queue[g["chosen_id"]]
            assert q["true_z"] == g["true_z"]
            assert q["true_difficulty"] == pytest.approx(fit["b_min"] + g["true_z"] * (fit["b_max"] - fit["b_min"]))


def test_the_review_queue_is_read_from_the_store(kind_run, tmp_path):
    """Review works from the store alone (as it must with a PostgreSQL store): the JSONL the report
    writes is an export, and removing it changes nothing the board sees."""
    import shutil

    from benchfill.review import ReviewBoard

    d = Path(shutil.copytree(kind_run[1], tmp_path / kind_run[1].name))  # the board's decisions go to the copy
    exported = [json.loads(x) for x in (d / "review_queue.jsonl").read_text().splitlines()]
    (d / "review_queue.jsonl").unlink()
    with ReviewBoard(d) as board:
        assert [e.record for e in board.entries] == exported
        board.decide(exported[0]["item_id"], "ann", "accept")
        assert board.outcomes()[exported[0]["item_id"]].decisions


def test_a_finished_run_that_chose_nothing_has_an_empty_queue_in_the_store(kind_run, tmp_path):
    """Store-only, a run whose every gap is done with no item chosen has nothing to review (not "has the run
    finished?"); one with a gap still running is still told to finish it."""
    import shutil

    from benchfill.review import load_queue
    from benchfill.schema import Candidate, GapState
    from benchfill.store import Store

    d = Path(shutil.copytree(kind_run[1], tmp_path / kind_run[1].name))
    (d / "review_queue.jsonl").unlink()
    store = Store(d / "store.db")
    try:
        with store.session() as s:
            for row in store.all(Candidate, Candidate.status == "selected"):
                row.status = "proposed"
                s.add(row)
        assert load_queue(d, store) == []
        with store.session() as s:
            state = store.all(GapState)[0]
            state.status = "running"
            s.add(state)
        with pytest.raises(DataError, match="has `benchfill run` finished"):
            load_queue(d, store)
    finally:
        store.close()


def test_the_confirmations_precision_is_the_users_to_set(tmp_path, capsys):
    from benchfill.cli import main
    from benchfill.errors import ConfigError
    from benchfill.run import dry_run, run_id_for

    base = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **FAST)
    loose = RunOptions(benchmark="demo", runs_dir=str(tmp_path), confirm_se=0.05, confirm_cap=8.0, **FAST)
    # Runs at the defaults keep the ids they had before the options existed; others get their own.
    assert "confirm_se" not in base.identity() and run_id_for(loose) != run_id_for(base)
    assert dry_run(loose)["confirmation_rollouts_max"] == 2 * dry_run(base)["confirmation_rollouts_max"]
    d = run(loose)
    rep, _ = _report(d)
    fit = json.loads((d / "fit.json").read_text())
    span = fit["b_max"] - fit["b_min"]
    confirmed = [g for g in rep["gaps"] if g.get("confirmed_se") is not None]
    assert confirmed
    for g in confirmed:  # stopped at the looser precision (the cap is far): sampling se within 0.05 z ...
        assert g["confirmed_se"] / span <= 0.05 + 1e-12
        # ... while the placement se the interval carries adds the panel's inherited error
        assert g["confirmed_placement_z_se"] > g["confirmed_se"] / span
    for bad, field in (("0", "^confirm_se: "), ("1.5", "^confirm_se: ")):  # (a library caller: the field's name)
        with pytest.raises(ConfigError, match=field):
            run(RunOptions(benchmark="demo", runs_dir=str(tmp_path), confirm_se=float(bad), **FAST))
    code = main(["run", "--benchmark", "demo", "--runs-dir", str(tmp_path / "x"), "--confirm-cap", "0", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--confirm-cap" in err[0]
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_every_confirmation_is_kept_in_the_store_and_listed_in_the_report(tmp_path):
    # The realistic rewriter's first candidates often land in the outer half of a gap, so the search
    # confirms runners-up before it stops: each one's confirmed z is in the store and the report.
    from benchfill.schema import Candidate
    from benchfill.store import Store

    d = run(RunOptions(benchmark="demo", runs_dir=str(tmp_path), gaps=3, rounds=4, progress=False))
    rep, md = _report(d)
    listed = {c["id"]: c for g in rep["gaps"] for c in g["confirmed_children"]}
    several = [g for g in rep["gaps"] if len(g["confirmed_children"]) > 1]
    assert several, "no gap compared confirmed children: the test shows nothing"
    for g in rep["gaps"]:
        if g["chosen_id"] is not None:
            assert listed[g["chosen_id"]]["z"] == g["confirmed_z"]
            assert not listed[g["chosen_id"]]["cut_short"]  # a chosen child's figure is never a coarse one
        for c in g["confirmed_children"]:
            assert c["inside"] == (g["left"] < c["z"] < g["right"]) and c["rollouts"] > 0
    # The dry run's bound holds for them, where one confirmation per gap (the bound before runners-up
    # were confirmed) does not.
    from benchfill.run import dry_run

    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), gaps=3, rounds=4, progress=False)
    bound = dry_run(opts)["confirmation_rollouts_max"]
    spent = [sum(c["rollouts"] for c in g["confirmed_children"]) for g in rep["gaps"]]
    assert sum(spent) <= bound and max(spent) > bound / 3 / (4 + 2 * 6)
    rows = {r.id: r for r in Store(d / "store.db").all(Candidate) if r.confirmed_z is not None}  # its own store
    assert {i: r.confirmed_z for i, r in rows.items()} == {i: c["z"] for i, c in listed.items()}
    g = several[0]
    assert f"- gap {g['gap_index']} (target {g['target_z']:.4f}): " in md
    chosen = g["chosen_id"]
    assert chosen is None or f"`{chosen}`* {listed[chosen]['z']:.4f}" in md
    cut = [c for g in several for c in g["confirmed_children"] if c["cut_short"]]
    assert cut, "no confirmation was cut short: the test shows nothing"
    assert all(f"`{c['id']}` {c['z']:.4f} (" in md and f"cut short at {c['rollouts']} rollouts)" in md for c in cut)


def test_how_sure_filled_is_and_a_gap_narrower_than_the_confirmation(tmp_path, caplog):
    # A loose confirmation (z se 0.3) against the demo's gaps (half-widths about 0.05-0.07): the run says
    # before it searches that "filled" will be near chance, and the report gives each chosen item's chance of
    # lying inside its gap as fitted and names the gaps narrower than the estimate's se.
    import logging
    import math

    from benchfill.run import narrow_gaps

    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), sim_rewriter="kind", confirm_se=0.3,
                      **{**FAST, "progress": True})
    with caplog.at_level(logging.WARNING, logger="benchfill"):  # warnings, which --quiet does not hide
        d = run(opts)
    err = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    rep, md = _report(d)
    for g in rep["gaps_before"]:
        assert f"half-width {g['width'] / 2:.4f} z is below the confirmation's z se (0.3)" in err
    chosen = [g for g in rep["gaps"] if g["chosen_id"]]
    assert chosen
    for g in chosen:
        z, se = g["placed_z"], g["placed_z_se"]
        phi = [0.5 * math.erfc(-(x - z) / se / math.sqrt(2)) for x in (g["left"], g["right"])]
        assert math.isclose(g["inside_probability"], phi[1] - phi[0])
        assert f"gap {g['gap_index']} {g['inside_probability']:.2f}" in md
    assert rep["gaps_expected_inside"] == pytest.approx(sum(g["inside_probability"] for g in chosen))
    # ... and between the two original items at its gap's edges, their own fit error counted (the run's fit, its
    # b se on the z scale; benchfill.coverage.inside_chance is checked by hand and by simulation elsewhere)
    from benchfill.coverage import inside_chance
    from benchfill.irt.fit import IrtFit

    fit = IrtFit.load(d / "fit.json")
    z_se = dict(zip(fit.item_ids, fit.difficulty_se / (fit.b_max - fit.b_min), strict=True))
    for g in chosen:
        edges = rep["gaps_before"][g["gap_index"]]
        assert g["between_edges_probability"] == pytest.approx(inside_chance(
            g["placed_z"], g["placed_z_se"], g["left"], g["right"], z_se[edges["left_item"]],
            z_se[edges["right_item"]]))
        assert f"gap {g['gap_index']} {g['between_edges_probability']:.2f}" in md
    assert rep["gaps_expected_between_edges"] == pytest.approx(sum(g["between_edges_probability"] for g in chosen))
    assert f"(expected {rep['gaps_expected_between_edges']:.1f} of {len(rep['gaps'])} gaps)." in md
    narrow = [g for g in chosen if g["placed_z_se"] > g["width"] / 2]
    # named as a gap more rollouts would resolve, or as one beyond the panel's reach (which the draws decide)
    assert narrow and ("**Narrower than the estimate resolves**" in md or "**Beyond the probe panel's reach**" in md)
    assert all(f"gap {g['gap_index']} (half-width {g['width'] / 2:.4f}" in md for g in narrow)
    # at the default precision the demo's gaps are wide enough: nothing to warn of
    def gap(left, right):
        return type("G", (), {"left": left, "right": right, "width": right - left})()

    assert narrow_gaps([gap(0.3, 0.44)], 0.02) == []
    (line,) = narrow_gaps([gap(0.5, 0.52)], 0.02)  # half-width 0.01: se 0.005, 16x
    assert line.startswith("gap 0: half-width 0.0100 z") and "--confirm-se 0.005" in line and "16x" in line
    assert "beyond" not in line
    top, bottom = narrow_gaps([gap(0.985, 1.0), gap(0.0, 0.015)], 0.02)  # the ends of the axis
    assert "beyond the benchmark's hardest item" in top and top.startswith("gap 0:")
    assert "is set aside, so the gap may stay open" in top
    assert "beyond the benchmark's easiest item" in bottom and bottom.startswith("gap 1:")


def test_the_run_command_ends_with_the_confirmed_headline_and_names_an_outside_gap(tmp_path, capsys):
    # What a user sees at the terminal: the report's confirmed after-figures with their interval, and the
    # gaps whose chosen item lies outside (every child here comes out 4 logits harder than meant).
    from benchfill.cli import main

    args = ["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(tmp_path), "--rewriter", "kind",
            "--rewriter-knobs", "drift=4", "--gaps", "2", "--rounds", "2", "--parents", "2", "--children", "2",
            "--references", "8", "--sim-probes", "6", "--sim-pair-sd", "0"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    d = Path(out.strip())  # stdout is the run folder alone
    assert d.parent == tmp_path and (d / "report.json").exists()
    rep, _ = _report(d)
    lo, hi = rep["after_interval"]["top2_gap_sum"]
    outside = [g["gap_index"] for g in rep["gaps"] if "outside_gap" in (g.get("flags") or [])]
    assert outside and rep["placed_by"] == ["confirmed"]
    assert f"{rep['run_id']} (SIMULATED): after-figures by confirmed z" in err
    assert (f"top-2 sum    {rep['top_k_sum_before']:.4f} -> {rep['top_k_sum_after']:.4f} (90% interval {lo:.4f} to {hi:.4f})"
            f", reduction {100 * rep['top_k_reduction']:.1f}%") in err
    assert f"gaps filled  {rep['gaps_filled']} of 2; outside_gap: gap {', '.join(map(str, outside))}" in err
    # --quiet: stdout alone, the run folder, for scripts; the rerun resumes from the store.
    assert main([*args, "--quiet"]) == 0
    out2, err2 = capsys.readouterr()
    assert out2 == out and err2 == ""


def test_a_point_below_its_interval_is_explained_where_it_is_shown():
    from benchfill.report import BELOW_INTERVAL, summary_lines

    rep = {"run_id": "r", "simulated": False, "placed_by": ["confirmed"], "top_k": 2, "gaps": [], "gaps_filled": 2,
           "max_gap_before": 0.10, "max_gap_after": 0.0852, "top_k_sum_before": 0.2580, "top_k_sum_after": 0.1577,
           "top_k_reduction": 0.389, "interval_level": 0.9,
           "after_interval": {"max_gap": [0.0852, 0.0950], "top2_gap_sum": [0.1587, 0.2103]}}
    lines = summary_lines(rep)
    assert lines[2].startswith("  top-2 sum    0.2580 -> 0.1577 (90% interval 0.1587 to 0.2103)")
    assert lines[3] == f"  ({BELOW_INTERVAL})"
    rep["after_interval"]["top2_gap_sum"] = [0.15, 0.2103]  # inside: nothing to explain
    assert not any(BELOW_INTERVAL in ln for ln in summary_lines(rep))


def test_the_worlds_inside_count_reads_the_edge_items_the_report_names_where_items_tie():
    # A and B tie at z 0; the gap the report names runs from B to C. The count had taken the first tied item
    # in fit order (A), and counted a child between A and B as inside B-C.
    from types import SimpleNamespace as NS

    from benchfill import coverage
    from benchfill.sim.truth import world_truth

    ids, z, latent = ["A", "B", "C", "D"], [0.0, 0.0, 0.6, 1.0], {"A": -3.0, "B": -1.0, "C": 0.5, "D": 2.0}
    world = NS(lookup=lambda i: NS(difficulty=latent[i], origin="original"))
    [gap] = coverage.gaps(z, k=1, item_ids=ids)
    assert (gap.left_item, gap.right_item) == ("B", "C")
    fit = NS(item_ids=ids, z=z)
    said = [world_truth(world, fit, [NS(gap_index=0, chosen=NS(true_difficulty=t), left=gap.left, right=gap.right)],
                        [gap], 1)["inside"] for t in (-2.0, 0.0)]
    assert said == [0, 1]  # -2 lies between A and B, not B and C; 0 lies between B and C
