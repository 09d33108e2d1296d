"""What a run hands over: report.json, report.md, the plots and the review queue.

Every file is written to a temporary name and renamed, so a killed run never
leaves half a report. Figures follow the paper: ECDF before and after with the
filled gaps shaded (Figure 5) and target deviation per round (Figure 8).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchfill import untrusted
from benchfill.outputs import named, shared_mode, temp_path
from benchfill.search.screen import order_record


def _unanswered(bench, fit) -> dict[str, Any]:
    """The benchmark's items its given response matrix does not hold (no rows, or trials 0 only), by where the
    run's fit put them: placed by the probe panel's rollouts alone, or left off the scale."""
    given = bench.given_matrix() if hasattr(bench, "given_matrix") else None
    if given is None:
        return {}
    have, fitted = set(given.item_ids), set(fit.item_ids)
    missing = [str(it["id"]) for it in bench.items if str(it["id"]) not in have]
    if not missing:
        return {}
    return {"items_without_responses": {"placed_by_panel": [i for i in missing if i in fitted],
                                        "off_the_scale": [i for i in missing if i not in fitted]}}


_UNANSWERED = (("placed_by_panel", "placed by the probe panel's rollouts alone"),
               ("off_the_scale", "not on the scale, so no gap is measured around them"))


def _unanswered_said(parts: dict[str, list[str]], name: Callable[[str], str], most: int) -> list[str]:
    return [f"{len(parts[key])} item(s) of the benchmark have no responses in the given matrix; {how}: "
            + ", ".join(name(i) for i in parts[key][:most]) + (", ..." if len(parts[key]) > most else "")
            for key, how in _UNANSWERED if parts[key]]


def unanswered_note(bench, fit) -> str | None:
    """One line on the items the given responses never name (``_unanswered``), or None."""
    parts = _unanswered(bench, fit).get("items_without_responses")
    return "; ".join(_unanswered_said(parts, str, 5)) if parts else None


def _unanswered_lines(rep: dict[str, Any]) -> list[str]:
    parts = rep.get("items_without_responses")
    return [*(f"- {line}" for line in _unanswered_said(parts, untrusted.md_code, 10)), ""] if parts else []


def write_report(run_dir: Path, *, opts, run_id: str, bench, fit, gaps, results, oracle_z, backend: dict,
                 matrix_source: str, queue: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    from benchfill.coverage import top_k_gap_sum
    from benchfill.measure.before_after import before_after

    k = opts.gaps
    z = np.asarray(fit.z, dtype=float)
    simulated = bool(backend.get("simulated"))
    records = [_gap_record(r, fit) for r in results]
    if oracle_z is not None:
        records = [{"gap_index": i, "target_z": v, "chosen_id": None, "annotated_z": v, "placed_z": v,
                    "placed_by": "oracle", "placed_z_se": 0.0, "strategy": "oracle", "status": "filled"}
                   for i, v in enumerate(oracle_z)]
    placed = [r for r in records if r.get("placed_z") is not None]
    between = _between_edges(records, gaps, fit) if oracle_z is None else None
    # Headline: each chosen item at its confirmed z (annotated only where none), with an interval.
    head = before_after(z, [r["placed_z"] for r in placed], [r.get("placed_z_se", 0.0) for r in placed], k,
                        seed=opts.seed)
    ann = before_after(z, [r["annotated_z"] for r in placed], None, k)
    after = np.concatenate([z, [r["placed_z"] for r in placed]]) if placed else z
    key = f"top{k}_gap_sum"
    rep: dict[str, Any] = {
        "run_id": run_id,
        "benchmark": bench.spec.name,
        "simulated": simulated,
        "backend": backend,
        "strategy": opts.strategy,
        # the oracle annotates and confirms nothing: None (its run id leaves both out, so one oracle run's report
        # had said "fixed" or "adaptive" by the last command that resumed it)
        "annotation": opts.annotation if opts.strategy != "oracle" else None,
        # steering is benchfill's own (the baseline and the oracle ask for no target): None for them
        "steering": opts.steering if opts.strategy == "benchfill" else None,
        "confirm": bool(opts.confirm) if opts.strategy != "oracle" else None,
        "isolation": _isolation(bench),  # how generated programs were confined (None: the grader runs none)
        "seed": opts.seed,
        "responses": matrix_source,
        # items of the benchmark its given responses never name: placed by the probe panel alone where it
        # answered them, off the scale where it did not (no gap is measured around them)
        **_unanswered(bench, fit),
        "n_items": int(z.size),
        "gaps_filled": sum(r.get("status") == "filled" for r in records),
        "gaps_outside": sum(r.get("status") == "outside_gap" for r in records),
        # how many gaps are truly filled, expected by the chosen items' inside probabilities ("filled"
        # counts the confirmed z inside, and overstates the truly filled ones where gaps are narrow)
        "gaps_expected_inside": (sum(r["inside_probability"] for r in records if r.get("inside_probability") is not None)
                                 if oracle_z is None else None),
        # ... and expected to lie between the two original items at their gap's edges, those items' own fit
        # error counted (None where an edge's se is unknown): the question a reader asks of "filled"
        "gaps_expected_between_edges": between,
        "placed_by": sorted({r["placed_by"] for r in placed}),
        "top_k": k,
        "top_k_sum_before": head["before"][key],
        "top_k_sum_after": head["after"][key],
        "max_gap_before": head["before"]["max_gap"],
        "max_gap_after": head["after"]["max_gap"],
        # DDM against the uniform target, as diagnose and the release card give it (the card had it, the report not)
        "ddm_before": head["before"]["ddm"],
        "ddm_after": head["after"]["ddm"],
        "top_k_reduction": head["reduction"],
        "after_interval": head.get("after_interval"),
        # the top-k reduction averaged over the chosen items' error (None where every se is 0)
        "top_k_reduction_expected": head.get("reduction_expected"),
        "interval_level": head.get("interval_level"),
        "top_k_sum_after_annotated": ann["after"][key],
        "max_gap_after_annotated": ann["after"]["max_gap"],
        "top_k_reduction_annotated": ann["reduction"],
        "gaps_before": [{"left": g.left, "right": g.right, "width": g.width,
                         "left_item": g.left_item, "right_item": g.right_item} for g in gaps],
        "gaps": records,
        "spend": _total_spend(results),
        "memory": _memory_summary(results, backend),
    }
    # The deviation claimed is the placed one (confirmed where there is one), as the after-figures:
    # the annotated one is the value the selection chose on, biased low by that choice (a
    # best-of-N baseline most of all), and is kept beside it only for comparison.
    devs = [r["placed_deviation"] for r in records if r.get("placed_deviation") is not None]
    rep["target_deviation"] = float(np.mean(devs)) if devs else None
    ann_devs = [r["deviation"] for r in records if r.get("deviation") is not None]
    rep["target_deviation_annotated"] = float(np.mean(ann_devs)) if ann_devs else None
    if simulated and not backend.get("sim_endpoints"):  # the truth is the in-process world's (sim serve's is its own)
        true_devs = [r["true_deviation"] for r in records if r.get("true_deviation") is not None]
        rep["true_target_deviation (simulated)"] = float(np.mean(true_devs)) if true_devs else None
        true_z = [r["true_z"] for r in records if r.get("true_z") is not None]
        unknown = sum(1 for r in records if r.get("chosen_id") and r.get("true_z") is None)
        # A chosen item the world cannot place (another machine's run on a shared store) leaves the true
        # figures over a subset: said, and no true top-k sum, which would count its gap as unfilled.
        rep["true_z_unknown (simulated)"] = unknown
        if true_z and not unknown:
            rep["top_k_sum_after_true (simulated)"] = top_k_gap_sum(np.concatenate([z, true_z]), k)
        rep["sim_rewriter"] = backend.get("sim_rewriter")
    # The plots first and the report last: a run stopped in between leaves no report.md that names plots
    # not yet drawn (a rerun redoes it all).
    _plots(run_dir / "plots", z, after, gaps, results, rep)
    # An export for spreadsheets and scripts; review itself reads the queue from the store.
    _write(run_dir / "review_queue.jsonl", "".join(
        json.dumps(q, default=_jsonable) + "\n"
        for q in (queue if queue is not None else review_records(results, opts, run_id, bench, fit, backend))
    ))
    _write(run_dir / "report.md", _markdown(rep))
    _write(run_dir / "report.json", json.dumps(rep, indent=1, default=_jsonable))
    return rep


def _between_edges(records: list[dict[str, Any]], gaps, fit) -> float | None:
    """Give each chosen item's record its chance of lying between the two original items at its gap's edges
    (``between_edges_probability``), by its placed z and se and those items' fitted z and se, the errors taken
    as independent normals; return their sum, or None where an edge's se is unknown (or there are none).

    ``inside_probability`` holds the edges where the fit puts them, as the gap is defined; but the edges are
    estimates too, as large in error on a small benchmark as the new item's placement, so that chance states
    more than a reader of "filled" may count on. Both lie on the fit's own b_min-b_max scale, so an edge that
    is an end of it (the easiest or hardest item) is taken with its error as any other: whether the item lies
    between the two is a question on the b scale, which a fixed linear map to z leaves as it is."""
    from benchfill.coverage import inside_chance

    span = float(fit.b_max - fit.b_min)
    if span <= 0:
        return None
    z_se = dict(zip(fit.item_ids, np.asarray(fit.difficulty_se, dtype=float) / span, strict=True))
    total = 0.0
    chosen = 0
    for r in records:
        if r.get("inside_probability") is None:
            continue
        g = gaps[r["gap_index"]]
        # an end point of the axis (no item there) is exact: the scale's own end
        edges = [0.0 if name is None else z_se.get(name, float("nan")) for name in (g.left_item, g.right_item)]
        if not all(np.isfinite(edges)) or not np.isfinite(r["placed_z_se"]):
            r["between_edges_probability"] = None
            total = float("nan")
            continue
        r["between_edges_probability"] = inside_chance(r["placed_z"], r["placed_z_se"], r["left"], r["right"],
                                                       edges[0], edges[1])
        total += r["between_edges_probability"]
        chosen += 1
    return total if chosen and np.isfinite(total) else None


def _gap_record(r, fit) -> dict[str, Any]:
    c = r.chosen
    rec: dict[str, Any] = {
        "gap_index": r.gap_index, "left": r.left, "right": r.right, "width": r.right - r.left,
        "target_z": r.target_z, "strategy": r.strategy, "rounds_used": r.rounds_used, "spend": r.spend.to_dict(),
        "stopped": getattr(r, "stop", "") or "",  # "tolerance", "indistinct", "inner", "given_up" or "rounds"
        "children": len(r.children), "valid_children": sum(ch.valid for ch in r.children),
        "chosen_id": None, "annotated_z": None, "placed_z": None,
        "status": "failed" if c is None else ("filled" if r.filled else "outside_gap"),
        "deviation_by_round": {str(t): v for t, v in sorted(r.deviations_by_round.items())},
        "steering": r.steering,
        "memory": r.shared or None,  # what the store's shared memory gave this gap (docs/memory.md)
        # every child that got fresh confirming rollouts, the chosen one among them: where each landed
        "confirmed_children": [{"id": ch.item_id, "z": ch.confirmation.z, "placement_z_se": ch.confirmation.placement_z_se,
                                "inside": r.left < ch.confirmation.z < r.right, "rollouts": ch.confirmation.rollouts,
                                # stopped as soon as its answers ruled out the gap (or beating the one confirmed
                                # nearer the target): a coarse figure, which a chosen child never keeps
                                "cut_short": ch.confirmation.stop == "outside",
                                # set aside: by its z and se it would widen the top-k gap sum in expectation
                                "widens": "widens_coverage" in ch.flags}
                               for ch in r.children if ch.confirmation is not None],
    }
    if c is None:
        return rec
    z_placed, se_placed, by = r.placed
    rec.update({"placed_z": z_placed, "placed_z_se": se_placed, "placed_by": by,
                # the part of that se no rollout removes (the item's unknown slope, the probes' abilities):
                # only probes near the gap do (the run's warnings work out how far one would)
                "placed_fixed_z_se": (c.confirmation or c.annotation).fixed_z_se,
                "placed_deviation": abs(z_placed - r.target_z), "ask": c.ask,
                # the chance it lies inside the fitted gap, by that estimate and its se: near 0.5 where the gap
                # is narrower than the se, whatever "filled" says
                "inside_probability": r.inside_probability})
    a = c.annotation
    rec.update({
        "chosen_id": c.item_id, "parent_id": c.parent_id, "ancestor_id": c.ancestor_id, "round": c.round,
        "annotated_z": a.z, "annotated_difficulty": a.difficulty, "annotated_se": a.se, "annotated_z_se": a.z_se,
        # what the table and the review page show beside the annotated z (annotated_z_se is sampling alone)
        "annotated_placement_z_se": a.placement_z_se,
        "deviation": abs(a.z - r.target_z), "flags": c.flags, "annotation_rollouts": a.rollouts,
        "order_consistency": order_record(c),
    })
    if c.confirmation is not None:
        k = c.confirmation
        rec.update({"confirmed_z": k.z, "confirmed_difficulty": k.difficulty, "confirmed_se": k.se,
                    "confirmed_placement_z_se": k.placement_z_se,
                    "confirmed_deviation": abs(k.z - r.target_z)})
    if c.true_z is not None:
        rec.update({"true_z": c.true_z, "true_deviation": abs(c.true_z - r.target_z)})
    return rec


def _memory_summary(results, backend: dict) -> dict[str, Any] | None:
    """What the run took from the store's shared memory: gaps filled by reuse, parents retrieved
    from earlier runs, the scales it mapped or left out (None: the run read no shared memory)."""
    mem = backend.get("memory")
    if mem is None:
        return None
    shared = [r.shared for r in results if r.shared]
    return {
        **mem,
        "gaps_reused": sum(bool(s.get("reused_from")) for s in shared),
        # distinct entries: the gaps' memories overlap where gaps lie near each other (summed, a run that
        # read 38 earlier children said 51). A summary written before the entries were kept sums.
        "entries_from_earlier_runs": (len({e for s in shared for e in s["earlier_entries"]})
                                      if all("earlier_entries" in s for s in shared)
                                      else sum(s.get("entries_from_earlier_runs", 0) for s in shared)),
        "parents_from_earlier_runs": len({p for s in shared for p in s.get("parents_from_earlier_runs", [])}),
        "children_of_earlier_parents": sum(s.get("children_of_earlier_parents", 0) for s in shared),
        "earlier_runs": sorted({run for s in shared for run in s.get("earlier_runs", [])}),
    }


def _confirmed_note(c: dict[str, Any]) -> str:
    """What the report says beside a confirmed child's z: outside the gap, cut short at N rollouts, both, or nothing."""
    notes = (([] if c["inside"] else ["outside"]) + ([f"cut short at {c['rollouts']} rollouts"] if c.get("cut_short") else [])
             + (["would widen the coverage in expectation"] if c.get("widens") else []))
    return f" ({'; '.join(notes)})" if notes else ""


def _memory_lines(rep: dict[str, Any]) -> list[str]:
    m = rep.get("memory")
    if not m:
        return []
    lines = ["", "## Shared memory", "",
             f"Scale {m['scale']}; {m['entries_from_earlier_runs']} entries from earlier runs "
             f"({', '.join(m['earlier_runs']) or 'none'}) seeded the searched gaps' memories; "
             f"{m['parents_from_earlier_runs']} of them were parents ({m['children_of_earlier_parents']} children); "
             f"{m['gaps_reused']} gap(s) filled by reusing an earlier run's child (no rewrite paid for)."]
    for sc, k in (m.get("linked") or {}).items():
        lines.append(f"- scale {sc} mapped by mean/sigma on {k['shared']} shared items: z_now = {k['a']:.4f} z "
                     f"{k['b']:+.4f} (correlation {k['correlation']:.4f}, residual rms {k['rms']:.4f})")
    for sc, why in (m.get("left_out") or {}).items():
        lines.append(f"- scale {sc} left out: {why}")
    for g in rep["gaps"]:
        rf = (g.get("memory") or {}).get("reused_from")
        if rf:
            lines.append(f"- gap {g['gap_index']}: **reused** {untrusted.md_code(rf['item_id'])} of run {untrusted.md_code(rf['run_id'])} "
                         f"(confirmed z {rf['z_then']:.4f} then, {rf['z_now']:.4f} on this scale)")
    return lines


def _total_spend(results) -> dict[str, int]:
    tot: dict[str, int] = {}
    for r in results:
        for key, v in r.spend.to_dict().items():
            tot[key] = tot.get(key, 0) + v
    return tot


def _isolation(bench) -> str | None:
    from benchfill.evaluators import isolation_of

    return isolation_of(bench.spec.evaluator)


def review_records(results, opts, run_id, bench, fit, backend) -> list[dict[str, Any]]:
    """One review record per chosen child (the contract of docs/contracts.md), JSON-ready."""
    return json.loads(json.dumps(_review_records(results, opts, run_id, bench, fit, backend), default=_jsonable))


def _review_records(results, opts, run_id, bench, fit, backend) -> list[dict[str, Any]]:

    z = np.sort(np.asarray(fit.z, dtype=float))
    out, isolation = [], _isolation(bench)
    items = {it["id"]: it for it in bench.items}
    for r in results:
        c = r.chosen
        if c is None:
            continue
        a, k = c.annotation, c.confirmation
        out.append({
            "item_id": c.item_id, "run_id": run_id, "benchmark": bench.spec.name, "gap_index": r.gap_index,
            "gap": {"left": r.left, "right": r.right},
            "ancestor_id": c.ancestor_id, "ancestor": items.get(c.ancestor_id), "child": c.item,
            "text_field": bench.spec.text_field, "answer_field": bench.spec.answer_field,
            "options_field": getattr(bench.spec, "options_field", None),  # a reviewer must see the options a key names
            "target_z": r.target_z,
            # placement_z_se: sampling and the panel's inherited ability error, what the report's interval
            # carries (a release gives its after-figures the same interval from it)
            "annotated": {"difficulty": a.difficulty, "se": a.se, "z": a.z, "placement_z_se": a.placement_z_se},
            "confirmed": None if k is None else {"difficulty": k.difficulty, "se": k.se, "z": k.z,
                                                 "placement_z_se": k.placement_z_se},
            # the chance it lies inside its fitted gap, by the placed z and its se (the report's figure)
            "inside_probability": r.inside_probability,
            # where it sits among the benchmark's items, by the estimate the report places it at
            "ecdf_position": float(np.searchsorted(z, (k or a).z) / max(z.size, 1)),
            "probe_results": (k or a).results,
            "judge": {"valid": c.verdict.valid, "reason": c.verdict.reason, "model": c.verdict.model},
            "rewriter_model": backend.get("rewriter_model"), "judge_model": backend.get("judge_model"),
            "probe_panel": backend.get("probe_panel"),
            "flags": c.flags, "near_duplicate": c.near_duplicate, "order_consistency": order_record(c),
            "simulated": bool(backend.get("simulated")), "isolation": isolation,
            "reused_from": (r.shared or {}).get("reused_from"),  # an earlier run's child, no new rewrite
            **_truth(c, fit, bool(backend.get("simulated"))),
            "created_at": datetime.now(UTC).isoformat(),
        })
    return out


def _truth(c, fit, simulated: bool) -> dict[str, Any]:
    """The world's truth about a child for its review record, simulated runs only: ``true_z`` and
    ``true_difficulty`` on this run's fitted scale (benchfill.sim.truth, as report.json's true z), so they
    compare with the annotated and confirmed estimates beside them; ``world_difficulty`` the latent b on the
    world's own scale, which does not. A record without ``true_z`` (written before) holds the latter as
    ``true_difficulty``."""
    if not simulated:
        return {"true_difficulty": None, "true_z": None, "world_difficulty": None}
    tz, span = c.true_z, float(fit.b_max - fit.b_min)
    b = None if tz is None or span <= 0 else float(fit.b_min) + float(tz) * span  # TrueScale.fitted_b
    return {"true_difficulty": b, "true_z": tz, "world_difficulty": c.true_difficulty}


def _with_interval(rep: dict[str, Any], name: str, value: float) -> str:
    """An after-figure with the report's interval for it, where there is one."""
    lo_hi = (rep.get("after_interval") or {}).get(name)
    level = f"{100 * (rep.get('interval_level') or 0.9):.0f}%"
    return f"{value:.4f}" + (f" ({level} interval {lo_hi[0]:.4f} to {lo_hi[1]:.4f})" if lo_hi else "")


_BELOW = ("takes each new item exactly at its estimate, and an error either way widens one of the two gaps the item "
          "leaves, so the true figure is likely higher")
BELOW_INTERVAL = f"a figure below its interval: it {_BELOW}"
BELOW_WHY = f"such a figure {_BELOW}"  # the same, as the release card says it after naming the figure or figures


def _below_interval(rep: dict[str, Any]) -> bool:
    """Does an after-figure lie below its own interval (the interval's draws are the true figure's)?"""
    k = rep["top_k"]
    iv = rep.get("after_interval") or {}
    return any(name in iv and value < iv[name][0] - 1e-12
               for name, value in (("max_gap", rep["max_gap_after"]), (f"top{k}_gap_sum", rep["top_k_sum_after"])))


def summary_lines(rep: dict[str, Any]) -> list[str]:
    """The headline of a finished run (report.json's dict), for a terminal: the confirmed after-figures
    with their interval, the gaps filled and those flagged outside_gap, in a few lines."""
    k = rep["top_k"]
    placed_by = ", ".join(rep.get("placed_by") or [])
    outside = [str(g["gap_index"]) for g in rep["gaps"] if "outside_gap" in (g.get("flags") or [])]
    by = f"after-figures by {placed_by} z" if placed_by else "no item placed: the after-figures are the before"
    marks = "".join(f" ({m})" for m, on in (("SIMULATED", rep["simulated"]),
                                               ("UNCONFINED", rep.get("isolation") == "unconfined")) if on)
    lines = [f"{rep['run_id']}{marks}: {by}"
             + _optimism(rep),
             f"  max gap      {rep['max_gap_before']:.4f} -> {_with_interval(rep, 'max_gap', rep['max_gap_after'])}",
             f"  top-{k} sum    {rep['top_k_sum_before']:.4f} -> {_with_interval(rep, f'top{k}_gap_sum', rep['top_k_sum_after'])}"
             f", reduction {100 * rep['top_k_reduction']:.1f}%",
             f"  gaps filled  {rep['gaps_filled']} of {len(rep['gaps'])}"
             + (f"; outside_gap: gap {', '.join(outside)}" if outside else "")]
    if _below_interval(rep):
        lines.insert(3, f"  ({BELOW_INTERVAL})")
    spend = rep.get("spend") or {}
    if spend:
        screen = f" (+ {spend['screen_rollouts']} spot-check rollouts)" if spend.get("screen_rollouts") else ""
        # named by what they count: the store holds the probe panel's benchmark rollouts and their calls too
        lines.append(f"  spend        {spend.get('model_calls', 0)} rewriter/judge calls, {spend.get('rollouts', 0)} "
                     "annotation and confirmation rollouts"
                     + screen)
        if spend.get("failures"):  # a model that never answers in the format asked fills nothing, and says why
            lines.append(f"  unreadable   {spend['failures']} of {spend.get('rewriter_calls', 0)} rewrites: no reply readable "
                         "after the repair turns allowed (flagged rewrite_failed; -v shows why)")
    return lines


def _optimism(rep: dict[str, Any]) -> str:
    """What the headline must say beside figures that are not measured on fresh rollouts."""
    placed_by = rep.get("placed_by") or []
    if placed_by == ["oracle"]:
        return " (the oracle: ideal items at the gaps' midpoints, a bound, not a measurement)"
    if "annotated" in placed_by:
        return " (optimistic: the estimates the selection chose on; rerun without --no-confirm)"
    return ""


def _misfit_words(rep: dict[str, Any]) -> str:
    """What the stated se allows for the chosen items' own discrimination (``--misfit``)."""
    m = (rep.get("backend") or {}).get("misfit")
    if not m:
        return "no allowance for the items' own discrimination"
    if not m["sd"]:
        return "no allowance for the items' own discrimination (`--misfit 0`: each item taken to fit the 1PL)"
    est = m.get("estimate")
    if m.get("given"):
        src = "as given by `--misfit`"
    elif est:
        src = (f"estimated from the run's response matrix, {est['models']} models x {est['items']} items: "
               f"{est['sd']:.2f}" + (f", raised to the floor {m['floor']:g}" if est["sd"] < m["sd"] else ""))
    else:
        src = f"the floor {m['floor']:g}: {m.get('why', 'no estimate')}"
    return (f"an allowance for their own discrimination (sd of log a {m['sd']:.2f}, {src}; how each item's "
            "answers fall across the probes weighs the slopes it allows for)")


def _pair_words(rep: dict[str, Any]) -> str:
    """What the stated se allows for the probes' own offsets on an item (``--pair-allowance``), or ''."""
    p = (rep.get("backend") or {}).get("pair_allowance")
    if not p:
        return ""
    if p.get("given") and not p.get("sd"):
        return ", and no allowance for each probe's own offset on an item (`--pair-allowance 0`)"
    if p.get("given"):
        return (f", and an allowance for each probe's own offset on an item (sd {p['sd']:.2f} logits, as given by "
                "`--pair-allowance`), which only more probes lower")
    if not p.get("sd"):
        why = p.get("note") or "the panel's repeated answers show none"
        return f", and no allowance for each probe's own offset on an item ({why})"
    return (f", and an allowance for each probe's own offset on an item (sd {p['sd']:.2f} logits, estimated from "
            f"the panel's repeated answers, {p['cells']} cells of {p['models']} probes), which only more probes lower")


def _placement(rep: dict[str, Any]) -> str:
    """Which difficulty the after-figures place each chosen item at, and what that means for them."""
    placed_by = rep.get("placed_by") or []
    se = ("the interval carries that estimate's standard error: its sampling, the probe panel's own ability "
          f"error, which the item inherits, and {_misfit_words(rep)}{_pair_words(rep)}. It holds the original items at their fitted "
          "places: their own fit error, which moves the gaps' edges, is not in it.")
    if not placed_by:
        return "No item was placed: the after-figures are the before-figures."
    if placed_by == ["oracle"]:
        return ("After-figures are the **oracle**'s: an ideal item placed exactly at the midpoint of the then-largest "
                "gap, once per gap, with no rewriter, judge or rollouts. They bound what filling the gaps could give; "
                "they measure no item.")
    if "annotated" not in placed_by:
        if _pair_sd(rep):
            # Fresh rollouts of the same probes carry the same offsets: on the demo at 5 logits the two
            # placements' errors correlate 0.93 (0.35 without offsets), and a chosen item's confirmation put it
            # 0.51 logits from the target where it truly lay 0.74 away (bench/bench_confirm_offsets.py).
            return ("After-figures place each chosen item at its **confirmed** difficulty (measured on fresh rollouts, "
                    "which take out the sampling part of the selection's winner's curse; the probes' own offsets on "
                    "the item are the same in both, so the part they make remains, and the figures flatter the "
                    f"chosen items by some of it); {se}")
        return ("After-figures place each chosen item at its **confirmed** difficulty (measured on fresh rollouts, "
                f"so the selection's winner's curse does not inflate it); {se}")
    unconfirmed = [str(r["gap_index"]) for r in rep["gaps"] if r.get("placed_by") == "annotated"]
    where = "each chosen item" if placed_by == ["annotated"] else f"the chosen items of gap {', '.join(unconfirmed)}"
    how = ("confirmation was off (`--no-confirm`)" if rep.get("confirm") is False else "no confirmation was made")
    return (f"After-figures place {where} at its **annotated** difficulty, the estimate the search chose it on: "
            f"{how}. Choosing the child nearest the target flatters that estimate (the winner's curse), so these "
            f"figures are **optimistic**, the reduction most of all; rerun without `--no-confirm` to measure the chosen "
            f"items on fresh rollouts. {se[0].upper()}{se[1:]}")


def _item_cell(item_id: str | None) -> str:
    """A gap's side in a table: the item's id as code (ids are the benchmark's: untrusted), or the axis's end."""
    return "end" if item_id is None else untrusted.md_code(item_id, table=True)


def _markdown(rep: dict[str, Any]) -> str:
    lines = []
    if rep["simulated"] and rep["backend"].get("sim_endpoints"):  # `sim serve` behind a config
        lines.append(f"**SIMULATED RUN**: the configured endpoints serve benchfill's simulated world (`sim serve` "
                     f"at {', '.join(untrusted.md_text(e) for e in rep['backend']['sim_endpoints'])}); no real LLM "
                     "answered (backend " + untrusted.md_text(rep["backend"]["backend"]) + ").")
    elif rep["simulated"]:
        lines.append("**SIMULATED RUN**: every model here is the simulated world (backend sim); no real LLM was called.")
    else:
        lines.append(f"Run against real endpoints (backend {rep['backend']['backend']}).")
    if rep["backend"].get("backend") != "sim":
        served = (rep["backend"].get("traffic") or {}).get("replicas") or {}
        if len(served) > 1:  # several endpoints, a probe fleet's replicas among them (docs/fleets.md)
            lines.append("Probe calls per endpoint: " + "; ".join(
                f"{u} {c['calls']} served, {c['failures']} failed, {c['ejections']} ejections" for u, c in served.items())
                + ". Counted over every process of this run, a resumed one's included.")
    stopped = (rep["backend"].get("traffic") or {}).get("cut") or 0
    if stopped and rep["backend"].get("backend") == "sim":  # the world's own habit: no config to change
        lines.append(f"{stopped} probe answer(s) stopped at max_tokens before they ended and were graded wrong, as a "
                     "real probe's are: the simulated world writes a few of its wrong answers so (`--sim-reply-habits`), "
                     "so no figure moved.")
    elif stopped:
        lines.append(f"**{stopped} probe answer(s) stopped at max_tokens** before they ended and were graded wrong: "
                     "items that need long answers look harder than they are. Raise the probes' max_tokens in the "
                     "config and run again.")
    k = rep["top_k"]
    lines += [
        "", f"# benchfill run {untrusted.md_text(rep['run_id'])}", "",
        f"Benchmark **{rep['benchmark']}** ({rep['n_items']} items, responses: {rep['responses']}); "
        f"strategy **{rep['strategy']}**, annotation **{rep['annotation'] or 'n/a'}**, steering **{_steering(rep)}**, "
        f"seed {rep['seed']}.", "",
        _placement(rep), "",
        *_unanswered_lines(rep),
        "| metric | before | after |", "| --- | --- | --- |",
        f"| max gap | {rep['max_gap_before']:.4f} | {_with_interval(rep, 'max_gap', rep['max_gap_after'])} |",
        f"| top-{k} gap sum | {rep['top_k_sum_before']:.4f} | {_with_interval(rep, f'top{k}_gap_sum', rep['top_k_sum_after'])} |",
        *([f"| DDM (uniform) | {rep['ddm_before']:.4f} | {_with_interval(rep, 'ddm', rep['ddm_after'])} |"]
          if rep.get("ddm_before") is not None else []),  # a report written before the field has none
        *(["", f"Note: {BELOW_INTERVAL[0].upper()}{BELOW_INTERVAL[1:]}."] if _below_interval(rep) else []),
        "", f"Top-{k} reduction: **{100 * rep['top_k_reduction']:.1f}%**. Gaps filled (chosen item inside its "
        f"gap): {rep['gaps_filled']} of {len(rep['gaps'])}"
        + (f"; **{rep['gaps_outside']} chosen item(s) lie outside their gap** (flag `outside_gap`)."
           if rep.get("gaps_outside") else "."),
    ]
    if rep.get("top_k_reduction_expected") is not None:
        lines.append(f"Averaged over the chosen items' error (the interval's draws), the top-{k} reduction is "
                     f"{100 * rep['top_k_reduction_expected']:.1f}% (each item's true z may lie elsewhere in its gap or outside "
                     "it, and one truly beyond the easiest or hardest item opens a new gap).")
    lines += _inside_lines(rep)
    if abs(rep["top_k_sum_after_annotated"] - rep["top_k_sum_after"]) > 1e-12:
        lines.append(f"By the annotated difficulties (those the search chose on, before the fresh confirming "
                     f"rollouts; the choice tends to flatter them, though a single item can go either way): top-{k} sum "
                     f"{rep['top_k_sum_after_annotated']:.4f} ({100 * rep['top_k_reduction_annotated']:.1f}% "
                     f"reduction), max gap {rep['max_gap_after_annotated']:.4f}.")
    if rep.get("top_k_sum_after_true (simulated)") is not None:
        true_sum = rep["top_k_sum_after_true (simulated)"]
        lines.append(f"With each chosen item at its true difficulty, mapped onto this fit's scale, and the original "
                     f"items at their fitted places, where the gaps were measured (simulated): top-{k} sum "
                     f"{true_sum:.4f} ({100 * (1 - true_sum / rep['top_k_sum_before']):.1f}% reduction); "
                     f"rewriter preset {(rep.get('sim_rewriter') or {}).get('preset', '?')}.")
    world = (rep.get("backend") or {}).get("world_truth (simulated)")
    if world and world.get("top_k_sum_before"):
        lines.append(f"By the world's own difficulties, the original items' as well (simulated; their fit error moves "
                     f"the gaps' edges, and no fit sees this): top-{k} sum {world['top_k_sum_before']:.4f} -> "
                     f"{world['top_k_sum_after']:.4f} ({100 * (1 - world['top_k_sum_after'] / world['top_k_sum_before']):.1f}% "
                     f"reduction), on the originals' own min-max scale; {world['inside']} of {world['chosen']} chosen "
                     "item(s) truly lie between the two original items at their gap's edges.")
    if rep.get("true_z_unknown (simulated)"):
        lines.append(f"The world knows no true difficulty for {rep['true_z_unknown (simulated)']} chosen item(s) (made by "
                     "a run it cannot read: another machine's, on the shared store): no true top-k sum is given, and "
                     "the true deviation is over the other gaps.")
    if rep.get("isolation"):
        lines.append(f"Generated programs ran {'under bubblewrap' if rep['isolation'] == 'bubblewrap' else 'UNCONFINED'}.")
    lines += ["", "## Gaps before", "", "| # | left | right | width | between |", "| --- | --- | --- | --- | --- |"]
    for i, g in enumerate(rep["gaps_before"]):
        lines.append(f"| {i} | {g['left']:.4f} | {g['right']:.4f} | {g['width']:.4f} | "
                     f"{_item_cell(g['left_item'])} / {_item_cell(g['right_item'])} |")
    lines += ["", "## Per gap", "", "Rounds show why the search stopped: at the tolerance, once the best child "
              "could not be told apart from the target at the annotation's precision (indistinct), or after "
              "the last round. Each ± is the placement se, as on the review page: sampling, the probes' fitted "
              "abilities and the item's unknown slope"
              + (", and each probe's own offset on it." if _pair_sd(rep) else "."), "",
              "| gap | target | chosen (ancestor) | annotated z ± se | confirmed z ± se | "
              "true z (sim) | rounds | rollouts | model calls | flags |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    steer_lines = []
    for r in rep["gaps"]:
        if r.get("chosen_id") is None and rep["strategy"] != "oracle":
            # valid children but none chosen: none was placed on the benchmark's range (search/selection.in_range),
            # or those confirmed there would widen the coverage in expectation (GapSearch.widens)
            widening = sum(bool(c.get("widens")) for c in r.get("confirmed_children") or [])
            failed = r["spend"].get("failures", 0)
            unread = f" ({failed} of {r['spend'].get('rewriter_calls', 0)} rewrites unreadable)" if failed else ""
            why = (f"no valid child{unread}" if not r.get("valid_children") else
                   f"none taken: {widening} confirmed but likely beyond the end of the axis, where it would widen "
                   f"the top-{k} gap sum in expectation (of {r['valid_children']} valid)" if widening else
                   f"none placed on the range [0, 1] (of {r['valid_children']} valid)")
            lines.append(f"| {r['gap_index']} | {r['target_z']:.4f} | {why} | | | | "
                         f"{_rounds(r)} | {r['spend']['rollouts']} | {r['spend']['model_calls']} | |")
            continue
        sp = r.get("spend", {})
        lines.append(
            f"| {r['gap_index']} | {r['target_z']:.4f} | {untrusted.md_code(r.get('chosen_id'), table=True)} "
            f"({untrusted.md_code(r.get('ancestor_id', ''), table=True)}) | "
            f"{_pm(r['annotated_z'], r.get('annotated_placement_z_se', r.get('annotated_z_se')))} | "
            f"{_pm(r.get('confirmed_z'), r.get('confirmed_placement_z_se'))} | "
            f"{_f(r.get('true_z'))} | {_rounds(r)} | {sp.get('rollouts', 0)} | "
            f"{sp.get('model_calls', 0)} | {', '.join(r.get('flags', []))} |")
        st = r.get("steering")
        if st:
            steer_lines.append(
                f"| {r['gap_index']} | {'on' if st.get('steered') else 'off'} | {st['points']} | {st['offset']:+.4f} | "
                f"{st['share']:.3f} | {st['residual_sd']:.4f} | {st['mean_shift']:+.4f} | {st['max_abs_shift']:.4f} |")
    confirmed = [r for r in rep["gaps"] if len(r.get("confirmed_children") or []) > 1]
    if confirmed:
        lines += ["", "Children confirmed on fresh rollouts where the search compared several (confirmed z; "
                  "the chosen one marked *; a confirmation cut short stopped once its answers ruled out the gap, "
                  "or beating a child confirmed nearer the target):"]
        lines += [f"- gap {r['gap_index']} (target {r['target_z']:.4f}): " + ", ".join(
            f"{untrusted.md_code(c['id'])}{'*' if c['id'] == r.get('chosen_id') else ''} {c['z']:.4f}{_confirmed_note(c)}"
            for c in r["confirmed_children"]) for r in confirmed]
    lines += _memory_lines(rep)
    if steer_lines:
        lines += ["", "## What the search learned of the rewriter", "",
                  "Per gap, from its own annotated children: z_child - z_parent = offset + share x (ask - z_parent), "
                  "shrunk toward no correction (offset 0, share 1) while there are few children. With steering on, "
                  "each ask is the one this response maps onto the target (per parent); the shift is ask - target.",
                  "", "| gap | steering | children | offset | share | residual sd | mean shift | max shift |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |", *steer_lines]
    lines += ["", "Plots: `plots/ecdf_before_after.png`, `plots/target_deviation.png`. "
              "Review queue: `review_queue.jsonl`.", ""]
    return "\n".join(lines)


def _steering(rep: dict[str, Any]) -> str:
    """on / off for benchfill; n/a for the baseline and the oracle, which steer nothing."""
    if rep["strategy"] != "benchfill":
        return "n/a"
    return rep.get("steering") or "on"  # (a report from before the field: steering was on)


def _inside_lines(rep: dict[str, Any]) -> list[str]:
    """How sure "filled" is: each chosen item's chance of lying inside its gap as fitted, by its placed z and
    se (the edges held where the fit puts them); and, by name, the gaps narrower than that se, where "filled" or "outside" is near chance."""
    chosen = [r for r in rep["gaps"] if r.get("inside_probability") is not None]  # the oracle's have none
    if not chosen:
        return []
    lines = [f"By each chosen item's {'/'.join(sorted({r['placed_by'] for r in chosen}))} z and its se, the chance "
             "that it lies inside its gap as the fit places the gap's edges (their own fit error not counted): "
             + ", ".join(
                 f"gap {r['gap_index']} {r['inside_probability']:.2f}" for r in chosen)
             + f" (expected {rep['gaps_expected_inside']:.1f} of {len(rep['gaps'])} gaps)."]
    if rep.get("gaps_expected_between_edges") is not None:  # (a report from before the figure has none)
        lines.append("Counting the fit error of the two original items at each gap's edges too (independent normal "
                     "errors), the chance that it lies between them: " + ", ".join(
                         f"gap {r['gap_index']} {r['between_edges_probability']:.2f}" for r in chosen)
                     + f" (expected {rep['gaps_expected_between_edges']:.1f} of {len(rep['gaps'])} gaps).")
    narrow = [r for r in chosen if r["width"] / 2 < r["placed_z_se"]]
    # Beyond the panel's reach: what no rollout removes is itself wider than the half-width (a report
    # from before the field has none, and keeps the rollout remedy).
    reach = [r for r in narrow if _fixed_se(r) >= r["width"] / 2]
    rollouts = [r for r in narrow if r not in reach]
    if rollouts:
        # --confirm-se sets the confirmation's precision: it does nothing for an item placed unconfirmed
        fix = ("a confirmation on fresh rollouts (rerun without `--no-confirm`; `--confirm-se` sets its precision) "
               "resolves it, at more rollouts" if any(r["placed_by"] == "annotated" for r in rollouts)
               else "a tighter `--confirm-se` resolves it, at more rollouts")
        lines.append("**Narrower than the estimate resolves**: " + "; ".join(
            f"gap {r['gap_index']} (half-width {r['width'] / 2:.4f} against se {r['placed_z_se']:.4f})" for r in rollouts)
            + f". Whether its item lies inside is near chance; {fix}.")
    if reach:
        lines.append("**Beyond the probe panel's reach**: " + "; ".join(
            f"gap {r['gap_index']} (half-width {r['width'] / 2:.4f} against se {r['placed_z_se']:.4f}, "
            f"{_fixed_se(r):.4f} of it beyond any rollout)" for r in reach)
            + ". Whether its item lies inside is near chance, and no number of rollouts brings the se below the part "
              "beyond them, which is already wider than the half-width. That part is the item's unknown slope, which "
              "leans far when every probe sits on one side of the gap (a probe model near the gap lowers it; the "
              "run's warnings before the search work out how far), and the probes' own fitted abilities, which no "
              "added probe removes"
            + (", and each probe's own offset on the item, which only many more probe models lower (the run's "
               "warnings before the search say how many)" if _pair_sd(rep) else "") + ".")
    return lines


def _pair_sd(rep: dict[str, Any]) -> float:
    """The sd the run allowed for each probe's own offset on an item (0: none, or a report from before it)."""
    return float(((rep.get("backend") or {}).get("pair_allowance") or {}).get("sd") or 0.0)


def _fixed_se(r: dict[str, Any]) -> float:
    """The part of a chosen item's placement se that no rollout removes (0 where the record lacks it)."""
    return r.get("placed_fixed_z_se") or 0.0


def _f(v) -> str:
    return "" if v is None else f"{v:.4f}"


def _pm(v, se) -> str:
    return _f(v) if v is None or se is None else f"{v:.4f} ± {se:.4f}"


def _plots(folder: Path, before: np.ndarray, after: np.ndarray, gaps, results, rep) -> None:
    from benchfill.plots import new_figure

    folder.mkdir(parents=True, exist_ok=True)
    fig = new_figure(figsize=(6, 4))
    ax = fig.subplots()
    for g in gaps:
        ax.axvspan(g.left, g.right, color="grey", alpha=0.2)
    for data, label, color in ((before, "before", "tab:orange"), (after, "after", "tab:blue")):
        x = np.sort(data)
        ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=label, color=color)
    ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.8, label="uniform")
    ax.set_xlabel("normalized difficulty z")
    ax.set_ylabel("ECDF")
    ax.set_title(f"{rep['benchmark']}: max gap {rep['max_gap_before']:.3f} -> {rep['max_gap_after']:.3f}"
                 + (" (simulated)" if rep["simulated"] else ""))
    ax.legend(loc="lower right")
    _savefig(fig, folder / "ecdf_before_after.png")

    fig = new_figure(figsize=(6, 4))
    ax = fig.subplots()
    for r in results:
        by_round = r.deviations_by_round
        for t, devs in by_round.items():
            ax.scatter([t] * len(devs), [10 * d for d in devs], s=8, color="tab:blue", alpha=0.4)
        if by_round:
            ts = sorted(by_round)
            ax.errorbar(ts, [10 * np.mean(by_round[t]) for t in ts], [10 * np.std(by_round[t]) for t in ts],
                        marker="o", label=f"gap {r.gap_index}")
    ax.set_xlabel("round")
    ax.set_ylabel("|z - target| x 10")
    ax.set_title("target deviation per round" + (" (simulated)" if rep["simulated"] else ""))
    if ax.get_legend_handles_labels()[0]:  # no annotated child at all: nothing to label
        ax.legend()
    _savefig(fig, folder / "target_deviation.png")


def _savefig(fig, path: Path) -> None:
    tmp = temp_path(path.parent, path.name, suffix=".tmp.png")  # (matplotlib takes the format from the suffix)
    try:  # a write that fails (a full disk) leaves no half-drawn file in the run folder
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        os.chmod(tmp, shared_mode())
        os.replace(tmp, path)
    except OSError as exc:
        named(exc, path)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def _write(path: Path, text: str) -> None:
    tmp = temp_path(path.parent, path.name)  # its own name, not "<name>.tmp", which may be a user's file
    try:
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, shared_mode())
        os.replace(tmp, path)
    except OSError as exc:
        named(exc, path)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def _jsonable(o: Any):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, datetime):
        return o.isoformat()
    return str(o)


def _rounds(r: dict[str, Any]) -> str:
    why = r.get("stopped")
    return f"{r.get('rounds_used', '')} ({why})" if why else str(r.get("rounds_used", ""))
