"""The order screen on new items: does a child's correctness rise along the probe axis?

Every child the search annotates gets its order-consistency score o (BSDProbe, Appendix D;
``benchfill.measure.order_test``) from the annotation's per-probe results, probes ordered by their
fixed ability, weakest first. A child with o <= alpha carries the flag ``order_anomaly``: strong
probes failing what weak ones solve is the mark of a wrong key (the weak probes give the slip the key
encodes), which a judge that let the child through did not see. A flagged child is never chosen
while an unflagged valid one exists (``prefer_unflagged``), and where it is chosen the flag shows in
the report, the review queue and the review page.

Only probes that were asked enter the test. The adaptive protocol asks a few neighbouring probes
near the child's estimate, over which a wrong key's reversal is too shallow to see in 4-8 answers
each (on those alone the screen flagged none of the sim's judged-valid wrong-key children). So the
screen spot-checks the ends of the probe axis (weakest and strongest probe, where not asked) in
small steps, going on only while the evidence leans toward a reversal (o <= 0.5): a valid child
settles after one step, a wrong-key one gets the answers that decide it. These rollouts enter the
test, never the difficulty estimate. For a confirmed child the confirmation's fresh rollouts are
pooled in (docs/profiles.md, "Screening new items").

Calibration cost: adaptive annotation yields many distinct trials vectors, and each needs its own
Monte Carlo null. The screen uses ``draws=199`` (o resolves to 1/200, enough to decide o <= 0.05)
and the on-disk cache, so a trials vector is simulated once per machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchfill.search.annotate import gather_all

ORDER_FLAG = "order_anomaly"


@dataclass(frozen=True)
class ScreenSettings:
    alpha: float = 0.05
    draws: int = 199
    seed: int = 0
    cache_dir: str | Path | None | bool = None  # None: the user cache dir; False: memory only
    # Spot checks at the ends of the probe axis (module docstring). 0 = the annotation's probes only.
    spot_trials: int = 4  # per end and step
    spot_steps: int = 6  # at most this many steps ...
    spot_continue: float = 0.5  # ... each taken only while o is at most this (and not yet flagged)
    spot_ends: str = "both"  # "both" axis ends not asked, or only the "far" one
    spot_first: str = "both"  # the first step asks "both" ends, or only the "far" one (cheaper, less power)
    # Which children get the spot check: "all", or "contenders" (those the adaptive annotation did
    # not rule out as far from the target; cheaper, but most wrong-key children are ruled out as far
    # and then keep only the weak screen on their annotation's probes).
    spot_on: str = "all"
    # The probes' own offsets on an item (logits) the null allows for (measure.order_test): the run's pair
    # allowance (``for_annotator``). With the binomial null alone, in a world whose probes agree with themselves
    # as real ones do (pair_sd 3.5), the screen flagged 827 of 2,522 valid children, and 12 of the 20 chosen
    # (bench/bench_screen.py): a valid item's answers rise along the probe axis less regularly than binomial.
    pair: float = 0.0


DEFAULT_SCREEN = ScreenSettings()  # what the search's hook uses (bench/bench_screen.py varies it)


def for_annotator(annotator: Any, settings: ScreenSettings | None = None) -> ScreenSettings:
    """``settings`` (the default's) with the pair allowance of the annotator that placed the children."""
    settings = settings or DEFAULT_SCREEN
    pair = float(getattr(annotator, "pair", 0.0) or 0.0)
    return settings if pair == settings.pair else replace(settings, pair=pair)


def pooled_results(*result_lists: list[dict[str, Any]] | None) -> list[tuple[str, float, int, int]]:
    """(probe, ability, correct, trials) per probe, summed over the given result lists, weakest
    probe first (ties by name); probes never asked are left out."""
    acc: dict[str, list] = {}
    for results in result_lists:
        for r in results or ():
            if int(r["trials"]) <= 0:
                continue
            a = acc.setdefault(str(r["probe"]), [float(r["ability"]), 0, 0])
            a[1] += int(r["correct"])
            a[2] += int(r["trials"])
    return sorted(((p, a, k, t) for p, (a, k, t) in acc.items()), key=lambda x: (x[1], x[0]))


def order_score(results: list[tuple[str, float, int, int]], settings: ScreenSettings | None = None
                ) -> dict[str, Any] | None:
    """The order-consistency record of pooled per-probe results, or None with under two probes."""
    settings = settings or DEFAULT_SCREEN
    from benchfill.measure.order_test import order_consistency

    if len(results) < 2:
        return None
    score = order_consistency([k for *_, k, _ in results], [t for *_, t in results], alpha=settings.alpha,
                              draws=settings.draws, seed=settings.seed, cache_dir=settings.cache_dir,
                              pair=settings.pair)
    return {"o": score.p_value, "D": score.statistic, "flagged": score.flagged,
            "probes": [p for p, *_ in results], "correct": [k for _, _, k, _ in results],
            "trials": [t for *_, t in results]}


async def screen_new_child(child: Any, annotator: Any, key: str, spend: Any,
                           settings: ScreenSettings | None = None) -> dict[str, Any] | None:
    """The search's hook: spot-check the ends of the probe axis (``ScreenSettings``), then screen (against a
    null that allows for the annotator's pair allowance)."""
    settings = for_annotator(annotator, settings)
    ann = child.annotation
    if ann is None:
        return None
    wanted = settings.spot_trials > 0 and (settings.spot_on == "all" or ann.stop != "far")
    ends = axis_ends(annotator.probes, ann.results, settings.spot_ends) if wanted else []
    n = settings.spot_trials
    for step in range(settings.spot_steps if ends else 0):
        if step > 0:  # look again only while the evidence leans toward a reversal
            rec = screen_child(child, settings)
            if rec is None or rec["flagged"] or rec["o"] > settings.spot_continue:
                break
            ends = axis_ends(annotator.probes, ann.results, settings.spot_ends)  # both ends from the second step on
        elif settings.spot_first == "far":  # a valid child usually settles on the far end alone
            ends = axis_ends(annotator.probes, ann.results, "far")
        got = await gather_all(annotator.ask(child.item_id, child.item, p.name, n, f"{key}:{p.name}:spot{step}")
                         for p in ends)
        ann.spot += [{"probe": p.name, "ability": p.ability, "correct": int(k), "trials": n}
                     for p, k in zip(ends, got, strict=True)]
        spend.screen_rollouts += n * len(ends)
    return screen_child(child, settings)


def axis_ends(probes: list, results: list[dict[str, Any]], which: str = "both") -> list:
    """The weakest and strongest probes not yet asked ("both"), or only the one farther in ability
    from the asked ones ("far")."""
    asked = {str(r["probe"]) for r in results if int(r["trials"]) > 0}
    if not probes or not asked:
        return []
    weak = min(probes, key=lambda p: (p.ability, p.name))
    strong = max(probes, key=lambda p: (p.ability, p.name))
    lo = min(p.ability for p in probes if p.name in asked)
    hi = max(p.ability for p in probes if p.name in asked)
    options = [(lo - weak.ability, weak)] if weak.name not in asked else []
    options += [(strong.ability - hi, strong)] if strong.name not in asked and strong is not weak else []
    if which == "far" and options:
        return [max(options, key=lambda x: x[0])[1]]
    return [p for _, p in options]


def screen_child(child: Any, settings: ScreenSettings | None = None) -> dict[str, Any] | None:
    """Score an annotated child (its annotation, plus its confirmation when it has one) and set or
    clear its ``order_anomaly`` flag; the record is kept on the annotation it was computed for."""
    settings = settings or DEFAULT_SCREEN
    ann = child.annotation
    if ann is None:
        return None
    conf = getattr(child, "confirmation", None)
    rec = order_score(pooled_results(ann.results, ann.spot, conf.results if conf is not None else None), settings)
    if rec is not None:
        rec["pooled_confirmation"] = conf is not None
    (conf if conf is not None else ann).order = rec
    flagged = rec is not None and rec["flagged"]
    if flagged and ORDER_FLAG not in child.flags:
        child.flags.append(ORDER_FLAG)
    elif not flagged and ORDER_FLAG in child.flags:
        child.flags.remove(ORDER_FLAG)
    return rec


def prefer_unflagged(children: list) -> list:
    """The children a selection may pick: the unflagged ones, or all of them when every one is
    flagged (a flagged child is then chosen openly: its flag travels with it)."""
    clean = [c for c in children if ORDER_FLAG not in c.flags]
    return clean or children


def order_record(child: Any) -> dict[str, Any] | None:
    """The latest order record of a child (the pooled one where it was confirmed)."""
    for ann in (getattr(child, "confirmation", None), getattr(child, "annotation", None)):
        rec = getattr(ann, "order", None) if ann is not None else None
        if rec is not None:
            return rec
    return None
