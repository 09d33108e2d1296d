"""The BenchFill search for one gap (Algorithm 2 of the paper, Appendix E).

Memory of annotated items near the gap -> parents closest to the target ->
reference list (half below, half above) -> rewriter -> judge -> online
calibration -> memory update; stop early once a valid child is within the
tolerance, then select the valid child closest to the target.

Every call's key is (seed, strategy, gap, round, parent, child), so a rerun of
the same search replays the same requests; the callers' store-backed caches
answer the completed ones. A killed run does not replay its completed rounds,
though: after each round the search hands its whole state (``SearchState``) to
``on_round``, and a search given that state back (``restore``) goes on from the
next round exactly as if it had never stopped.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from benchfill.coverage import expected_top_k_change, inside_chance, normal_cdf
from benchfill.errors import PromptRefused
from benchfill.search.annotate import Annotation, Annotator
from benchfill.search.memory import Memory, MemoryEntry, may_parent, tie_key
from benchfill.search.prescreen import PreScreen
from benchfill.search.screen import for_annotator, screen_child, screen_new_child
from benchfill.search.selection import chooser, in_range, select_closest, select_posterior
from benchfill.search.services import SELF_CHECK, Reference, SearchServices, Spend, Verdict
from benchfill.search.steering import Steering

log = logging.getLogger("benchfill.search")

__all__ = ["Child", "GapResult", "GapSearch", "SearchSettings", "SearchState", "benchfill_search", "select_closest",
           "select_posterior"]


@dataclass(frozen=True)
class SearchSettings:
    rounds: int = 8  # T
    parents: int = 4  # R
    children: int = 4  # C
    references: int = 16  # L
    tolerance: float = 0.01  # tau on the normalized scale
    memory_size: int = 16  # benchmark items that seed the memory
    # Adaptive annotation only (the fixed protocol keeps the paper's rule): also stop once the best
    # child sits within this many of its own z standard errors of the target, since it then cannot
    # be told apart from the target and later rounds would chase unmeasurable differences. 0 = off.
    indistinct: float = 1.0
    # ... but only once that standard error is small against the gap (at most this share of its
    # width): a weak panel (few probes, few trials) cannot place a child inside the gap at all, and
    # stopping there would hand back an item that fills nothing.
    indistinct_max_se: float = 1.0
    # With a confirmer: runners-up get fresh confirming rollouts while fewer than this many children of
    # the gap are confirmed, and at the end at most this many more picks whose confirmation lands beyond
    # the range are tried. 6: against 3, on the seven sets at 12 seeds, it confirmed inside 10-14 more
    # gaps in 100 and truly filled 2-6 more, lowered the true deviation by 7-12% and the rollouts per
    # filled gap by 2-7% (docs/sim-rewriter.md, "Six confirmations per gap").
    confirmations: int = 6
    # With a confirmer: a candidate confirmed inside the gap ends the search, but if it lies farther from
    # the target than this share of the gap's half-width, the runners-up are confirmed first (within
    # ``confirmations``), so that the choice is made among them. The candidate is picked on its
    # annotation, whose z se is often as wide as the gap's half-width, so its confirmation often lands in
    # the gap's outer part, which splits the gap unevenly; searching on with more rounds instead took that
    # same child again in 70 of 72 gaps tried. 1 = any candidate confirmed inside ends the search at once
    # (docs/sim-rewriter.md, "Where the share of the oracle goes").
    accept_within: float = 0.5
    # With a confirmer: after the last round, runners-up are confirmed until one lands in that inner part
    # too, not merely inside the gap (within ``confirmations``). False keeps the rule before: the first
    # runner-up confirmed anywhere inside ends the confirming, however near the gap's edge it lies.
    settle_at_end: bool = True
    # Target steering (benchfill/search/steering.py): ask the rewriter for what its learned response
    # maps onto the target, with references around that ask. False (the default since s55) asks for the
    # target itself, as the paper does: over bench_search's 93 cells the search without it kept the true
    # deviation as low (-0.0014 z, se 0.0036), reduced the top-3 sum more (+0.015) and held against the
    # baseline in more cells (55 against 51), the rule set before that sweep printed (docs/sim-rewriter.md,
    # s54 and s55). The response is learned either way, and the report shows it.
    steering: bool = False
    # What-ifs of the learned response (bench_search.py --steer-gate, --steer-robust; docs/sim-rewriter.md, "What
    # the response learns from"): steer only once it is told apart from no correction by this many sds (0:
    # always), and Huber's threshold of its fit. Neither was better on the whole at twelve seeds, nor the gate
    # on the full sweep's grid (s52), so both keep the response as it was.
    steer_gate: float = 0.0
    steer_robust: float = 2.0
    # How the chosen child is picked: "posterior" (least expected squared deviation, the annotation
    # shrunk toward where the learned response says a child of that parent and ask lands), "reduction"
    # (the same estimate, scored by the expected top-k gap sum with the child added: ``top_k`` of the
    # GapSearch) or "closest" (the paper's: least annotated deviation, which the winner's curse favours).
    selection: str = "posterior"
    # Parents in the first round only (0: ``parents``); later rounds keep the paper's R. A what-if
    # (bench_search.py --first-parents): it did not lower the kind rewriter's rollouts, so it is off.
    first_parents: int = 0
    # With a confirmer: also try to stop (confirm the best child) once its annotated z lies within this
    # share of the gap's half-width of the target. 0 = off: only the tolerance and indistinct stops. A
    # what-if (bench_search.py --stop-inner): at 1, with three confirmations, it saved 4-6% of the
    # rollouts per filled gap on the seven sets for 0.01-0.02 of the oracle share, so it is off
    # (docs/sim-rewriter.md).
    stop_inner: float = 0.0
    # A what-if (bench_search.py --give-up K): after round K, end a gap none of whose valid children so far
    # is annotated inside it. 0 = off: at K = 4, with three confirmations, it saved 8-12% of the rollouts
    # per filled gap on the seven sets, but the realistic and hostile rewriters fill later rounds' gaps it
    # gave up on, and their true deviation grew by 14% and 29% (docs/sim-rewriter.md).
    give_up: int = 0
    # Adaptive round width (beyond the paper), 0 = off: every round asks R parents for C children each.
    # At Q in (0, 1), a round after the first asks, parent by parent (closest to the target first), C
    # children each, only until the learned response says that at least one of them lands inside the
    # gap with chance Q (``round_width``). A rewriter whose children land where they are asked needs
    # fewer to find a gap than one whose children scatter; the response tells them apart. A what-if
    # (bench_search.py --width Q): at 0.9 it cut kind's annotation by a third but its rollouts per filled gap
    # on the seven sets by only 6% (1.58x the reference), the accuracy within noise, so it is off
    # (docs/sim-rewriter.md, "A round as wide as the rewriter needs").
    width: float = 0.0


@dataclass
class Child:
    item_id: str
    parent_id: str
    ancestor_id: str
    round: int
    item: dict[str, Any] | None
    verdict: Verdict | None = None
    annotation: Annotation | None = None
    flags: list[str] = field(default_factory=list)
    true_difficulty: float | None = None
    true_z: float | None = None
    near_duplicate: dict[str, Any] | None = None
    confirmation: Annotation | None = None  # fresh rollouts on the selected child
    ask: float | None = None  # the difficulty the rewriter was asked for (the target, or a steered ask)
    parent_z: float | None = None  # the parent's z when it was chosen

    @property
    def valid(self) -> bool:
        return self.item is not None and self.verdict is not None and self.verdict.valid and self.annotation is not None

    def deviation(self, target_z: float) -> float:
        return abs(self.annotation.z - target_z) if self.annotation else math.inf


@dataclass
class GapSearch:
    """A gap to fill and the benchmark around it (and the text pre-screen its children pass, if any)."""

    gap_index: int
    left: float
    right: float
    items: dict[str, dict[str, Any]]  # benchmark item id -> fields
    z: dict[str, float]  # benchmark item id -> fitted normalized difficulty
    prescreen: PreScreen | None = None  # benchfill/search/prescreen.py: skips children predicted far outside
    # The memory's first entries, when the caller retrieved them (the store's shared memory: other
    # gaps', runs' and releases' children around this gap); their fields must be in ``items``.
    # None: the ``memory_size`` benchmark items nearest the target (line 4).
    memory: list[MemoryEntry] | None = None
    # The k of the top-k gap sum the run is scored by: a confirmed child that would raise it in
    # expectation (``widens``) is never taken. 0: no such check.
    top_k: int = 5
    _widening: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # widens(), per estimate

    @property
    def target_z(self) -> float:
        return (self.left + self.right) / 2

    @cached_property
    def _axis(self) -> np.ndarray:
        return np.fromiter(self.z.values(), dtype=float, count=len(self.z))

    @cached_property
    def scored(self) -> tuple[np.ndarray, int, float, float]:
        """(axis, k, left, right) the "reduction" selection scores a child on: the benchmark's z with the
        run's other gaps (the rest of the axis's ``top_k`` widest) split at their targets, as if each were
        filled where it is aimed, k, and this gap. A child then counts for what it adds to the run's top-k
        sum."""
        from benchfill.coverage import gaps as widest

        axis = self._axis
        if self.top_k < 1 or not axis.size:
            return axis, self.top_k, self.left, self.right
        others = [(g.left + g.right) / 2 for g in widest(axis, k=self.top_k)
                  if not (abs(g.left - self.left) < 1e-12 and abs(g.right - self.right) < 1e-12)]
        return np.concatenate([axis, others]), self.top_k, self.left, self.right

    def widens(self, c: Child) -> bool:
        """Would the benchmark's top-k gap sum grow, in expectation, with ``c`` at its confirmed z (that
        estimate's placement se)? Only a chance of lying beyond the easiest or hardest item can make it:
        there the item opens a new gap. At an end gap narrower than the se (the whole of CRUXEval-output:
        0.0075 z either side of the target, a se of 0.011-0.017) an item confirmed inside it lies beyond
        the end about a third of the time; taking it did more harm than good (docs/sim-rewriter.md)."""
        a = c.confirmation
        # A confirmation cut short is coarse (its se wide): not judged until completed, if it ever is.
        if a is None or a.stop == "outside" or self.top_k < 1 or not self.z:
            return False
        key = (c.item_id, a.z, a.placement_z_se)
        if key not in self._widening:  # (a nan se counts as exact there, as an se of 0)
            self._widening[key] = expected_top_k_change(self._axis, a.z, a.placement_z_se, self.top_k) > 1e-12
        return self._widening[key]


@dataclass
class GapResult:
    gap_index: int
    left: float
    right: float
    target_z: float
    strategy: str
    children: list[Child]
    chosen: Child | None
    rounds_used: int
    spend: Spend
    memory: list[list[Any]] = field(default_factory=list)
    stop: str = ""  # why the search ended: "tolerance", "indistinct", "inner" (stop_inner), "given_up" (give_up) or "rounds"
    steering: dict[str, Any] | None = None  # the learned response and how far it moved the asks
    # What the store's shared memory gave this gap (entries and parents from earlier runs, a reused
    # child); filled in by the engine (benchfill/engine/memory_store.py), empty without one.
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def placed(self) -> tuple[float, float, str] | None:
        """(z, its standard error, "confirmed" | "annotated") of the chosen item: the confirmed
        estimate where there is one (free of the selection's winner's curse), else the annotated;
        the se is the placement's, with the error inherited from the probes' abilities."""
        c = self.chosen
        if c is None:
            return None
        a = c.confirmation or c.annotation
        return a.z, a.placement_z_se, "confirmed" if c.confirmation is not None else "annotated"

    @property
    def filled(self) -> bool:
        """Does the chosen item's placed z lie inside the gap? Only then does it fill it."""
        p = self.placed
        return p is not None and self.left < p[0] < self.right

    @property
    def inside_probability(self) -> float | None:
        """The chance that the chosen item lies inside the gap as fitted, given its placed z and that
        estimate's standard error (normal, flat prior). Where the gap is narrower than the se, an item
        placed inside it is little more likely to be there than one placed just outside: "filled" is
        then a coin's word, and this says so. None without a chosen item."""
        p = self.placed
        if p is None:
            return None
        z, se, _ = p
        if math.isnan(se):
            return None
        return inside_chance(z, se, self.left, self.right)  # (an se of 0, the oracle's: exact)

    def mark_outside(self) -> None:
        """Flag a chosen item whose placed z is outside its gap (``outside_gap``), and one whose placement
        error that no rollout removes is itself wider than the gap's half-width (``beyond_reach``: every
        probe sat on one side of it, so inside or outside is near chance whatever its z), wherever it appears."""
        c = self.chosen
        if c is None:
            return
        if not self.filled and "outside_gap" not in c.flags:
            c.flags.append("outside_gap")
        a = c.confirmation or c.annotation
        if a.fixed_z_se >= (self.right - self.left) / 2 and "beyond_reach" not in c.flags:
            c.flags.append("beyond_reach")

    @property
    def deviations_by_round(self) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for c in self.children:
            if c.valid:
                out.setdefault(c.round, []).append(c.deviation(self.target_z))
        return out


@dataclass
class SearchState:
    """Everything a search carries from one round to the next, after round ``round``: given back
    as ``restore``, the search goes on from round ``round + 1`` as if it had never stopped (the
    call keys derive from (seed, gap, round, parent, child), so no random state is kept)."""

    round: int
    children: list[Child]
    memory: Memory
    spend: Spend
    response: Steering


# Hooks the orchestrator passes in: it alone writes the store.
OnChild = Callable[[int, Child, float], None]
# after each round: the gap, the search's state, and the child it would choose now (None: no valid child yet)
OnRound = Callable[[int, SearchState, "Child | None"], None]


async def benchfill_search(
    gap: GapSearch,
    services: SearchServices,
    annotator: Annotator,
    settings: SearchSettings | None = None,
    *,
    seed: int = 0,
    on_child: OnChild | None = None,
    on_round: OnRound | None = None,
    check_child: Callable[[Child], None] | None = None,
    confirm: Confirm | None = None,
    restore: SearchState | None = None,
) -> GapResult:
    """One gap's search. With ``confirm`` (fresh rollouts on a child), a stop is only taken once
    the candidate's confirmed z lies inside the gap: a candidate confirmed outside is set aside and
    the search goes on; one confirmed in the gap's outer part has its runners-up confirmed before the
    stop (``settings.accept_within``); after the last round, runners-up are confirmed the same way (at
    most ``settings.confirmations`` in all), until one lands in the inner part."""
    settings = settings or SearchSettings()
    target = gap.target_z
    if confirm is not None:
        confirm = _Confirmer(confirm, annotator)
    if restore is not None:
        t, children, spend, response = restore.round, list(restore.children), restore.spend, restore.response
        memory = restore.memory
        response.gate, response.robust = settings.steer_gate, settings.steer_robust  # (a snapshot keeps the points)
    else:
        # The response is kept whether or not it steers: the posterior selection uses it too.
        t, children, spend, response = 0, [], Spend(), Steering(gate=settings.steer_gate, robust=settings.steer_robust)
        memory = (Memory.nearest(gap.memory, target, settings.memory_size) if gap.memory is not None
                  else Memory.near_gap(list(gap.z), list(gap.z.values()), target, settings.memory_size))
    items = dict(gap.items)
    for c in children:
        if c.item is not None:
            items[c.item_id] = c.item
    if gap.prescreen is not None:  # the pre-screen's per-gap calibration sees the restored children again
        for c in children:
            if c.item is not None and c.verdict is not None and c.verdict.valid:
                gap.prescreen.screen(c, gap.gap_index, gap.left, gap.right)
    stop = "rounds"
    steering = response if settings.steering else None
    choose = chooser(settings.selection, response, annotator,
                     gap.scored if settings.selection == "reduction" else None)
    restored = restore is not None and t > 0  # its stop test is still to be made
    while True:
        if not restored:
            if t >= settings.rounds:
                break
            t += 1
            await _round(gap, services, annotator, settings, seed, t, memory, items, children, spend, response,
                         steering, check_child, on_child)
        best_child = choose(children, target)
        best = best_child.deviation(target) if best_child else math.inf
        if on_round and not restored:
            on_round(gap.gap_index, SearchState(t, children, memory, spend, response), best_child)
        restored = False
        why = ""
        if best <= settings.tolerance:
            why = "tolerance"
        elif _indistinct(best_child, target, gap.left, gap.right, annotator, settings):
            why = "indistinct"
        elif confirm is not None and best <= settings.stop_inner * (gap.right - gap.left) / 2:
            why = "inner"
        if why and (confirm is None or await _settled(best_child, children, gap, choose, confirm, spend, memory,
                                                      settings)):
            stop = why
            break
        if settings.give_up and t >= settings.give_up and t < settings.rounds and not any(
                c.valid and c.annotation is not None and gap.left < c.annotation.z < gap.right for c in children):
            stop = "given_up"
            break
    rounds_used = t
    if confirm is None:
        chosen = _final(children, gap, choose)
    else:
        chosen = await _chosen_at_end(children, gap, choose, confirm, spend, memory, settings)
    for c in in_range(children):  # on the range, yet set aside for widening the coverage: the report says so
        if c is not chosen and gap.widens(c) and "widens_coverage" not in c.flags:
            c.flags.append("widens_coverage")
    return GapResult(
        gap.gap_index, gap.left, gap.right, target, "benchfill", children, chosen,
        rounds_used, spend, memory.to_json(), stop, {**response.summary(), "steered": settings.steering},
    )


async def _round(gap: GapSearch, services: SearchServices, annotator: Annotator, settings: SearchSettings,
                 seed: int, t: int, memory: Memory, items: dict[str, dict[str, Any]], children: list[Child],
                 spend: Spend, response: Steering, steering: Steering | None, check_child, on_child) -> None:
    """Round ``t``: parents -> references -> rewriter -> judge -> annotation -> memory (lines 7-29)."""
    target = gap.target_z
    parents = memory.parents(settings.first_parents if t == 1 and settings.first_parents else settings.parents)
    # A child matters only if it could beat what the previous rounds already found.
    margin = min((c.deviation(target) for c in children if c.valid), default=(gap.right - gap.left) / 2)
    asks = [steering.ask(target, p.z, p.item_id, record=False) if steering else target for p in parents]
    widths = (round_width(gap, parents, asks, response, children, settings) if settings.width > 0 and t > 1
              else [settings.children] * len(parents))
    jobs = []
    for pi, (p, ask, width) in enumerate(zip(parents, asks, widths, strict=True)):
        if not width:
            continue
        if steering:
            steering.asks.append((target, ask))
        refs = [Reference(items[e.item_id], e.z, e.item_id)
                for e in memory.references(settings.references, around=ask)]
        jobs += [
            _make_child(gap, services, annotator, spend, seed, "benchfill", t, pi, ci, p, items[p.item_id], refs,
                        margin, check_child, ask=ask)
            for ci in range(width)
        ]
    made = await asyncio.gather(*jobs)
    for child in made:  # in (parent, child) order, never completion order
        children.append(child)
        if child.item is not None:
            items[child.item_id] = child.item
        if child.valid:
            memory.add(MemoryEntry(child.item_id, child.annotation.z, "generated", child.ancestor_id,
                                   may_parent(child.flags)))
            response.observe(child.parent_z, child.ask, child.annotation.z,
                             annotator.resolution_or_se(child.annotation), child.parent_id)
        if on_child:
            on_child(gap.gap_index, child, target)


def round_width(gap: GapSearch, parents: list[MemoryEntry], asks: list[float], response: Steering,
                children: list[Child], settings: SearchSettings) -> list[int]:
    """Children per parent for a round of adaptive width (``settings.width`` = Q): the parents whose
    children are likeliest to land inside the gap first, ``settings.children`` each, until the chance
    that none of the round's children lands inside falls to 1 - Q. A child of parent j lands inside
    with chance v * P(left < N(m_j, s^2) < right): m_j where the learned response puts a child of that
    parent and ask, s its residual sd (the scatter the annotation's error does not explain), v the gap's
    share of valid children so far (Laplace's rule). The last parent asked may get fewer than C, the
    parents left over none."""
    _, _, sigma = response.response()
    made = [c for c in children if c.item is not None or "rewrite_failed" in c.flags]
    v = (sum(c.valid for c in made) + 1) / (len(made) + 2)
    inside = [v * (normal_cdf((gap.right - m) / sigma) - normal_cdf((gap.left - m) / sigma))
              for p, ask in zip(parents, asks, strict=True) for m in [response.predict(p.z, ask, p.item_id)]]
    miss = 1.0
    widths = [0] * len(parents)
    for j in sorted(range(len(parents)), key=lambda j: tie_key(-inside[j])):  # stable: ties keep the memory's order
        while widths[j] < settings.children and miss > 1 - settings.width:
            widths[j] += 1
            miss *= 1 - inside[j]
    return widths


def _indistinct(
    best: Child | None, target_z: float, left: float, right: float, annotator: Annotator, settings: SearchSettings
) -> bool:
    """Is the best child inside the gap and within ``settings.indistinct`` standard errors of the
    target, with that standard error small against the gap (adaptive only)?"""
    if best is None or annotator.protocol != "adaptive" or settings.indistinct <= 0:
        return False
    if not left < best.annotation.z < right:  # an item outside the gap fills nothing: keep searching
        return False
    resolution = annotator.resolution(best.annotation)
    if resolution > settings.indistinct_max_se * (right - left):
        return False
    return best.deviation(target_z) <= settings.indistinct * resolution


# Fresh rollouts on a child: ``confirm(child, band=None, resume=None)`` (``Annotator.confirm``): with a
# ``band`` (z) it may stop early once the answers rule the band out; with ``resume`` it goes on from such a
# confirmation to the precision target.
Confirm = Callable[..., Awaitable[Annotation]]


def _inside(c: Child, gap: GapSearch) -> bool:
    """Confirmed inside the gap, and not expected to widen the coverage (``GapSearch.widens``)."""
    return c.confirmation is not None and gap.left < c.confirmation.z < gap.right and not gap.widens(c)


def _usable(children: list[Child], gap: GapSearch) -> list[Child]:
    """The fallback's candidates: on the benchmark's range, and none confirmed to widen the coverage."""
    return [c for c in in_range(children) if not gap.widens(c)]


async def _confirmed_inside(c: Child, gap: GapSearch, confirm: Confirm, spend: Spend, memory: Memory,
                            band: tuple[float, float] | None = None) -> bool:
    """Confirm ``c`` (once) and say whether it landed inside the gap; its memory entry takes the
    confirmed z either way, so parents and references use the better estimate. A child whose
    fresh answers soon rule out the ``band`` where it could matter (default: the gap) stops there
    (``stop`` "outside"): it cannot beat what is already confirmed, and should it be chosen all
    the same, ``_completed`` takes its confirmation on to the precision target."""
    if c.confirmation is None:
        await _take_confirmation(c, confirm, spend, memory, band=band or (gap.left, gap.right))
    return _inside(c, gap)


@dataclass
class _Confirmer:
    """The caller's ``confirm`` with the annotator whose ``answered`` counts its rollouts (``set_aside_refused``)."""

    confirm: Confirm
    annotator: Annotator

    async def __call__(self, c: Child, **how) -> Annotation:
        return await self.confirm(c, **how)


def set_aside_refused(c: Child, exc: PromptRefused, annotator: Annotator | None, spend: Spend,
             memory: Memory | None = None) -> None:
    """A child whose prompt a probe refused as longer than its context holds: it cannot be measured, so it is
    set aside (``probe_refused``; not valid, no parent), its rollouts so far counted. Stopping the run for it
    stopped every rerun too: the rewriter's reply is cached, so the same child came back."""
    log.warning("%s set aside: %s", c.item_id, exc)
    counted = sum(a.rollouts for a in (c.annotation, c.confirmation) if a is not None)
    if annotator is not None:
        spend.rollouts += max(annotator.answered.get(c.item_id, 0) - counted - _spot_rollouts(c), 0)
    held = c.confirmation or c.annotation
    if "probe_refused" not in c.flags:
        c.flags.append("probe_refused")
    c.annotation = c.confirmation = None
    if memory is not None and held is not None:
        memory.update(c.item_id, held.z, False)


def _spot_rollouts(c: Child) -> int:
    """The order screen's spot checks of ``c`` (counted in the spend's screen_rollouts, not its rollouts)."""
    return sum(int(s["trials"]) for s in getattr(c.annotation, "spot", None) or [])


async def _take_confirmation(c: Child, confirm: Confirm, spend: Spend, memory: Memory, **how) -> None:
    """``confirm(c, **how)``: the child takes the (new or resumed) confirmation, screened again with the
    fresh rollouts pooled in; the spend counts only the rollouts added, and its memory entry takes the
    confirmed z. A probe's refusal of its prompt sets it aside (``set_aside_refused``)."""
    before = c.confirmation.rollouts if c.confirmation is not None else 0
    try:
        c.confirmation = await confirm(c, **how)
    except PromptRefused as exc:
        set_aside_refused(c, exc, getattr(confirm, "annotator", None), spend, memory)
        return
    screen_child(c, for_annotator(getattr(confirm, "annotator", None)))
    spend.rollouts += c.confirmation.rollouts - before
    memory.update(c.item_id, c.confirmation.z, may_parent(c.flags))


def _cut_short(c: Child | None) -> bool:
    return c is not None and c.confirmation is not None and c.confirmation.stop == "outside"


async def _completed(c: Child, confirm: Confirm, spend: Spend, memory: Memory) -> None:
    """A chosen child whose confirmation stopped early (outside its gap) gets the rest of it, to the
    precision target, so that the figure the report carries for it is as precise as any other's."""
    await _take_confirmation(c, confirm, spend, memory, resume=c.confirmation)


async def _settled(best: Child, children: list[Child], gap: GapSearch, choose, confirm: Confirm, spend: Spend,
                   memory: Memory, settings: SearchSettings) -> bool:
    """May the search stop on ``best``? Only if it is confirmed inside the gap; if it lands in the gap's
    outer part (``settings.accept_within``), the runners-up are confirmed too, best first, until one lands
    in the inner part or ``settings.confirmations`` children of the gap are confirmed. The chosen child
    is then the best of those confirmed inside (``_final``)."""
    if not await _confirmed_inside(best, gap, confirm, spend, memory):
        return False
    await _confirm_runners_up(children, gap, choose, confirm, spend, memory, settings.confirmations,
                              until=lambda c: _inner(c, gap, settings))
    return True


def _inner(c: Child, gap: GapSearch, settings: SearchSettings) -> bool:
    """Confirmed inside the gap and within ``settings.accept_within`` of its half-width of the target."""
    return _inside(c, gap) and abs(c.confirmation.z - gap.target_z) <= settings.accept_within * (gap.right - gap.left) / 2


async def _confirm_runners_up(children: list[Child], gap: GapSearch, choose, confirm: Confirm, spend: Spend,
                              memory: Memory, cap: int, until: Callable[[Child], bool] | None = None) -> None:
    """Confirm the best unconfirmed children, one at a time, until one satisfies ``until`` (default:
    confirmed inside the gap) or ``cap`` children of the gap are confirmed."""
    until = until or (lambda c: _inside(c, gap))
    while not any(until(c) for c in children) and sum(c.confirmation is not None for c in children) < cap:
        pick = choose([c for c in children if c.confirmation is None], gap.target_z)
        if pick is None:
            return
        # A runner-up matters only if it lands nearer the target than the nearest confirmed inside.
        best = min((abs(c.confirmation.z - gap.target_z) for c in children if _inside(c, gap)), default=None)
        band = None if best is None else (gap.target_z - best, gap.target_z + best)
        await _confirmed_inside(pick, gap, confirm, spend, memory, band)


async def _chosen_at_end(children: list[Child], gap: GapSearch, choose, confirm: Confirm, spend: Spend,
                         memory: Memory, settings: SearchSettings) -> Child | None:
    """The gap's chosen child once the search has ended. Runners-up are confirmed first, as at a stop,
    until one lands in the gap's inner part (``settings.accept_within``; anywhere inside with
    ``settle_at_end`` off) or ``settings.confirmations`` children are confirmed: a gap that ran out its
    rounds is a hard one, and the first child confirmed inside it often sits at its edge, where it
    splits the gap into one nearly as wide and one of nothing."""
    until = (lambda c: _inner(c, gap, settings)) if settings.settle_at_end else None
    await _confirm_runners_up(children, gap, choose, confirm, spend, memory, settings.confirmations, until)
    return await _confirmed_final(children, gap, choose, confirm, spend, memory, settings.confirmations)


def _final(children: list[Child], gap: GapSearch, choose) -> Child | None:
    """The chosen child: the best of those confirmed inside the gap, if any; else the best of those on
    the benchmark's range (``selection.in_range``); else none. Neither counts a child confirmed to widen
    the coverage in expectation (``GapSearch.widens``)."""
    inside = [c for c in children if _inside(c, gap)]
    return choose(inside or _usable(children, gap), gap.target_z)


async def _confirmed_final(children: list[Child], gap: GapSearch, choose, confirm: Confirm, spend: Spend,
                           memory: Memory, cap: int) -> Child | None:
    """``_final``, with the pick confirmed here (the run confirms the chosen child anyway, so the first
    costs nothing extra). A pick whose annotation was on the range but whose confirmation lands beyond
    it is set aside for the next, at most ``cap`` more confirmations; after those, only a confirmed
    child is taken. Near an end of the axis an early-stopped annotation can sit well inside the range
    while the child lies beyond it (a humaneval seed: annotated 0.876 +- 0.127, confirmed 1.083)."""
    chosen = _final(children, gap, choose)
    fresh = 0
    while chosen is not None and (chosen.confirmation is None or _cut_short(chosen)):
        if _cut_short(chosen):  # it stays chosen, its figure made as precise as any other's
            await _completed(chosen, confirm, spend, memory)
        elif fresh > cap:
            break
        else:
            fresh += 1
            await _confirmed_inside(chosen, gap, confirm, spend, memory)
        chosen = _final(children, gap, choose)
    if chosen is not None and chosen.confirmation is None:
        chosen = choose([c for c in _usable(children, gap) if c.confirmation is not None], gap.target_z)
        if _cut_short(chosen):
            await _completed(chosen, confirm, spend, memory)
            # judged only now, complete: the gap stays open rather than take it (or one a probe refused)
            if gap.widens(chosen) or not chosen.valid:
                chosen = None
    return chosen


def child_id(strategy: str, gap_index: int, rnd: int, parent_index: int, child_index: int) -> str:
    tag = "bf" if strategy == "benchfill" else strategy[:4]
    return f"{tag}-g{gap_index}-r{rnd}-p{parent_index}-c{child_index}"


def _repair_calls(services: SearchServices, key: str) -> int:
    """The repair turns the services' rewrite and judge of ``key`` took (``SearchServices``), 0 where not told."""
    told = getattr(services, "repair_calls", None)
    return int(told(key)) if told is not None else 0


async def _make_child(
    gap: GapSearch,
    services: SearchServices,
    annotator: Annotator,
    spend: Spend,
    seed: int,
    strategy: str,
    rnd: int,
    parent_index: int,
    child_index: int,
    parent: MemoryEntry,
    parent_item: dict[str, Any],
    refs: list[Reference],
    margin: float,
    check_child: Callable[[Child], None] | None,
    ask: float | None = None,
) -> Child:
    cid = child_id(strategy, gap.gap_index, rnd, parent_index, child_index)
    while cid in gap.items:  # a benchmark made from a release holds items of an earlier run under such ids:
        cid += "-new"  # one of the same name took the original's place in the store, and left the release
    key = f"s{seed}:{cid}"
    ask = gap.target_z if ask is None else ask
    child = Child(cid, parent.item_id, parent.ancestor_id or parent.item_id, rnd, None, ask=ask, parent_z=parent.z)
    spend.rewriter_calls += 1
    item = await services.rewrite(parent_item, ask, refs, key)
    if item is None:
        spend.failures += 1
        spend.repair_calls += _repair_calls(services, key)
        child.flags.append("rewrite_failed")
        return child
    child.item = item
    child.verdict = await services.judge(item, key)
    spend.judge_calls += child.verdict.model != SELF_CHECK  # refused by its own grader: no judge was asked
    spend.repair_calls += _repair_calls(services, key)
    if not child.verdict.valid:
        child.flags.append("fails_own_check" if child.verdict.model == SELF_CHECK else "judged_invalid")
        return child
    if gap.prescreen is not None and gap.prescreen.skips(child, gap):
        spend.prescreened += 1  # flagged with its prediction; no rollouts spent
        return child
    try:
        child.annotation = await annotator.annotate(cid, item, key, gap.target_z, margin)
        spend.rollouts += child.annotation.rollouts
        child.flags.extend(f for f in child.annotation.flags if f not in child.flags)
        await screen_new_child(child, annotator, key, spend)  # order consistency along the probe axis
    except PromptRefused as exc:
        set_aside_refused(child, exc, annotator, spend)
        return child
    if check_child:
        check_child(child)
    return child
