"""Difficulty annotation of a new item by online calibration (Section 4.1), fixed or adaptive.

Probe abilities stay fixed at the original fit; only the new item's difficulty
is estimated, with the benchmark's guessing floor for multiple choice. The
fixed protocol is the paper's: every probe answers K_j times. The adaptive one
spends rollouts where they carry information (probes whose ability is near the
current estimate), stops early on a child clearly farther from the target than
the best item already found (a likelihood-ratio test, valid without a finite
MLE), refines a contender (deviation within the margin and within one fixed-
protocol se of the target) to the fixed protocol's precision, and only screens
the others (three times that se): they need ranking, not a precise value.

Confirmation re-annotates a selected item with fresh rollouts: it spends them on the probes
most informative at the current estimate until the z standard error reaches a stated target
or a stated cap (``ConfirmSettings``), so the confirmed value is both free of the selection's
winner's curse and more precise than one fixed-protocol pass (whose se is as large as the
deviations being compared). Told where the item would matter (its gap), a confirmation stops as
soon as its answers rule that out: the search then sets the item aside, and a precise figure for
it would buy nothing.

The probes' abilities are estimates too. An item placed through one probe inherits that probe's
ability error one for one, and more rollouts on the item do not remove it; only spreading them
over several probes averages it down. So each batch goes to the probes that lower the item's
whole placement error most, sampling and the panel's ability error together
(``Annotator._variance``): the most informative probes when abilities are exact, a wider spread
when they are not (aime25's 15 items leave each probe's ability uncertain by about 0.3 logits,
0.045 z). An annotation keeps the parts apart: ``z_se`` is the sampling error (the 1PL's; the
placement, the mean of the slopes' b_a, moves further with the answers' noise for a flat item and less
for a steep one, ``Annotator._sampling_factor``, a what-if), and ``misfit_z_se``
what the item's own discrimination may add (``Annotator.misfit``; the answers' fall across the
probes weighs the slopes it allows for, ``Annotator._unlean``); both are the child's own, and
the selection compares them together (``resolution_or_se``). ``ability_z_se`` is the inherited part,
shared by children of one gap (they are placed through the same probes near the target), and
``placement_z_se`` all three, which is what the report's intervals carry.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from benchfill.search.services import Probe, SearchServices

PROTOCOLS = ("fixed", "adaptive")
# Gauss-Hermite nodes and weights for an expectation over a standard normal (Annotator._misfit).
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(7)
_GH_W = _GH_W / _GH_W.sum()
# An even grid for the placement, where the answers reweigh the slopes (Annotator._unlean): a likelihood
# sharper than the prior falls between Gauss-Hermite nodes, whose spacing widens away from the centre.
_POST_X = np.linspace(-4.0, 4.0, 81)
_POST_W = np.exp(-0.5 * _POST_X**2)
_POST_W = _POST_W / _POST_W.sum()


@dataclass
class Annotation:
    difficulty: float  # b on the benchmark's logit scale
    se: float
    z: float
    z_se: float
    rollouts: int
    results: list[dict[str, Any]] = field(default_factory=list)  # per probe: probe, ability, correct, trials
    flags: list[str] = field(default_factory=list)
    stop: str = ""  # why the protocol stopped ("budget", "precise", "far", "fixed")
    order: dict[str, Any] | None = None  # the order screen's record (benchfill/search/screen.py)
    spot: list[dict[str, Any]] = field(default_factory=list)  # the screen's own rollouts (not in the estimate)
    ability_z_se: float = 0.0  # the part of the placement error inherited from the probes' ability error (z)
    misfit_z_se: float = 0.0  # the part the item's own discrimination may add (Annotator.misfit; z)
    chance: float | None = None  # the item's guessing floor it was placed with (None: the annotator's)

    @property
    def placement_z_se(self) -> float:
        """The z standard error of where the item sits on the fitted scale: sampling, the panel's ability
        error and the 1PL misfit allowance together (``z_se`` alone compares children placed through the
        same probes)."""
        return math.sqrt(self.z_se**2 + self.ability_z_se**2 + self.misfit_z_se**2)

    @property
    def fixed_z_se(self) -> float:
        """The part of ``placement_z_se`` that more rollouts on the same probes do not remove: the panel's
        ability error and the misfit allowance together."""
        return math.hypot(self.ability_z_se, self.misfit_z_se)

    @property
    def probe_names(self) -> list[str]:
        """The probes whose answers this placement holds (a confirmation leaves them out: ``confirm_pool``)."""
        return [r["probe"] for r in self.results]

    def to_dict(self) -> dict[str, Any]:
        return {
            "difficulty": self.difficulty,
            "se": self.se,
            "z": self.z,
            "z_se": self.z_se,
            "rollouts": self.rollouts,
            "probe_results": self.results,
            "flags": self.flags,
            "stop": self.stop,
            "order": self.order,
            "spot_results": self.spot,
            "ability_z_se": self.ability_z_se,
            "misfit_z_se": self.misfit_z_se,
            "chance": self.chance,
        }


@dataclass(frozen=True)
class AdaptiveSettings:
    first_batch: int = 4  # samples per probe in the first step
    first_width: int = 2  # probes asked in the first step (most informative at the target)
    batch: int = 4  # samples per probe per later step
    width: int = 2  # probes asked per later step (most informative at the estimate)
    min_rollouts: int = 8  # before any early stop
    precision: float = 1.0  # a contender stops at this multiple of the fixed protocol's standard error
    screen: float = 3.0  # a child that is no contender stops at this multiple
    contend: float = 1.0  # contender: deviation within the margin and within this many fixed-protocol se
    z_se_stop: float = 0.0  # and never refine below this z standard error
    far_lr: float = 2.0  # log-likelihood ratio that rules out every deviation within the margin


@dataclass(frozen=True)
class ConfirmSettings:
    z_se: float = 0.02  # stop once the confirmed z standard error is at most this
    max_budgets: float = 4.0  # ... or after this many fixed-protocol budgets of rollouts (the cap)
    batch: int = 8  # samples per probe per step
    width: int = 2  # probes asked per step (most informative at the current estimate)
    # Given the band where the item would matter (its gap), stop early once the fresh answers rule it
    # out: a log-likelihood ratio of this much between the best difficulty anywhere and the best inside
    # the band, after ``outside_min`` rollouts. 0 = never. A third to a half of the confirmed candidates
    # land outside their gap, and a precise figure for one the search then sets aside buys nothing:
    # cutting them short saves 8% of the rollouts per filled gap at the same true deviation
    # (docs/sim-rewriter.md, "Confirmations cut short").
    outside_lr: float = 2.0
    outside_min: int = 32
    # Stop, too, once the sampling se is at most this share of the part no rollout removes (the probes' ability
    # error and the item's unknown slope), after one fixed-protocol budget: past the panel's reach that part is
    # 0.07-0.28 z, far above the 0.02 target. 0 = never (the default: a run honours --confirm-se up to the cap).
    # At 0.3 the seven sets spent 11-15% fewer rollouts per gap at the same true deviation, but the chosen items'
    # measurement error rose 3-5%: the answers still weigh the slopes as they come, so the slope's part is not
    # quite fixed (docs/sim-rewriter.md, "The panel's reach").
    floor_share: float = 0.0
    # What-if, off: where the annotator allows for (probe, item) offsets (``Annotator.pair`` > 0), confirm only
    # through probes that did not annotate the child, so that the offsets the annotation's choice favoured are not
    # the ones it is scored by (while at least ``fresh_min`` such probes are left). Its errors then no longer
    # share the annotation's (0.3 to 0 in tests/test_search_annotate.py), but through the less informative rest
    # of a 12-probe panel the chosen items' stated se came out further from honest (rms error/se 1.56-1.69
    # against 1.19-1.36), fewer gaps were filled (16/17/8 of 126 against 19/16/13), and of the lower true
    # deviation (-0.011/-0.015/-0.022 z over gaps) the chosen items alone kept -0.010/-0.006/-0.001, the rest
    # being more gaps left open (docs/sim-rewriter.md, "Confirming through other probes").
    fresh_probes: bool = False
    fresh_min: int = 3

    def precise(self, z_se: float, fixed_z_se: float, rollouts: int, fixed_budget: int) -> bool:
        """Has a confirmation's sampling se (``z_se``) reached its target: ``self.z_se``, or, after one fixed
        budget, a share ``floor_share`` of the placement error that more rollouts would not remove
        (``fixed_z_se``: the ability and misfit parts together)?"""
        if z_se <= self.z_se:
            return True
        return self.floor_share > 0 and rollouts >= fixed_budget and z_se <= self.floor_share * fixed_z_se

    def cap(self, fixed_budget: int) -> int:
        return int(round(self.max_budgets * fixed_budget))


@dataclass
class Annotator:
    """Places items on a fitted scale: ``b_min``/``b_max`` fix the normalization."""

    services: SearchServices
    probes: list[Probe]
    chance: float  # the guessing floor of an item ``chance_of`` does not say (a gap's outlook: no item yet)
    b_min: float
    b_max: float
    protocol: str = "adaptive"
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    confirmation: ConfirmSettings = field(default_factory=ConfirmSettings)
    # The sd of log discrimination allowed for: the 1PL places an item of slope a at b + (1 - a) * (the
    # information-weighted mean of theta_j - b over the probes asked), an error no rollout at those probes
    # removes. Allowing for it adds E[(1 - a)^2] (that mean)^2 to the placement's variance, so the probes
    # are chosen to balance about the item and the stated se carries what is left. 0: a = 1, as before.
    misfit: float = 0.0
    # The sd, in logits, of each (probe, item) pair's own offset from the curve (irt/pair.py): a probe's
    # rollouts on an item cannot average its offset away, so a placement through probes of information shares
    # w_j carries s^2 sum w_j^2 that only more probes lower. Part of the item's own fixed error, beside the
    # misfit allowance, so the probes are spread to lower it and the stated se carries it. 0: none, as before.
    pair: float = 0.0
    # Weigh the slopes by the answers when placing an item (``_unlean``), not by the prior alone.
    slope_weights: bool = True
    # What-if, off: state the placement's own sampling se (``_sampling_factor``) instead of the 1PL's. It makes
    # the intervals as honest for flat and steep items as for middling ones, but the search reads the same se,
    # and its figures came out no better, some worse (docs/sim-rewriter.md, "A flat item's placement moves
    # further with the answers' noise").
    own_sampling: bool = False
    # Each item's own guessing floor (``BenchmarkSpec.chance_of``: 1 / its number of options), as the fit of
    # the original items had it (BenchFill, Sec. 4.1, fn. 4). None: ``chance`` for every item. With one floor
    # for all, the benchmark's median, children of mmlu-pro's 4-option items sat 0.3-0.6 logits too easy.
    chance_of: Callable[[dict[str, Any]], float] | None = None
    # item id -> rollouts answered through ``ask``, shared with the per-item copies (``at_chance``): what a
    # child whose prompt a probe then refused had cost (the search counts it, ``loop.set_aside_refused``)
    answered: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    # (A, B): an item placed at b through the probes sits at A + B b on the fit's scale of record
    # (``anchor_link``: the originals placed through the same probes, against their fitted b). (0, 1): as placed.
    link: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            from benchfill.errors import ConfigError

            raise ConfigError(f"--annotation: unknown protocol {self.protocol!r} (choose from {', '.join(PROTOCOLS)})")
        self.probes = sorted(self.probes, key=lambda p: p.name)

    @property
    def span(self) -> float:
        return max(self.b_max - self.b_min, 1e-9)

    @property
    def fixed_budget(self) -> int:
        return sum(p.trials for p in self.probes)

    def to_z(self, b: float) -> float:
        """The normalized difficulty of an item placed at ``b`` through the probes (the link applied)."""
        a, slope = self.link
        return (a + slope * b - self.b_min) / self.span

    def from_z(self, z: float) -> float:
        """The ``b`` through the probes of an item at normalized difficulty ``z`` (``to_z``'s inverse)."""
        a, slope = self.link
        return (self.b_min + z * self.span - a) / slope

    def z_of_logits(self, x: float) -> float:
        """A length of ``x`` logits placed through the probes, in normalized difficulty (written so that with
        no link it is ``x / span`` to the last bit: the search's near-tied choices turn on such bits)."""
        return x * self.link[1] / self.span

    def for_item(self, item: dict[str, Any]) -> Annotator:
        """This annotator with ``item``'s own guessing floor (itself where the floor is the same)."""
        return self if self.chance_of is None else self.at_chance(float(self.chance_of(item)))

    def at_chance(self, chance: float | None) -> Annotator:
        """This annotator with the guessing floor ``chance`` (None: its own)."""
        if chance is None or chance == self.chance:
            return self
        return replace(self, chance=chance, chance_of=None)

    async def ask(self, item_id: str, item: dict[str, Any], probe: str, n: int, key: str) -> int:
        """``services.rollouts``, its answers counted in ``answered``."""
        got = await self.services.rollouts(item_id, item, probe, n, key)
        self.answered[item_id] = self.answered.get(item_id, 0) + n
        return got

    async def annotate(
        self, item_id: str, item: dict[str, Any], key: str, target_z: float | None = None, margin: float = math.inf
    ) -> Annotation:
        """Annotate with the configured protocol; ``margin`` is how far from the target a child may
        sit and still matter (the best deviation known when its round began)."""
        if (own := self.for_item(item)) is not self:
            return await own.annotate(item_id, item, key, target_z, margin)
        if self.protocol == "fixed" or target_z is None:
            return await self.fixed(item_id, item, key)
        return await self._adaptive(item_id, item, key, target_z, margin)

    async def fixed(self, item_id: str, item: dict[str, Any], key: str) -> Annotation:
        if (own := self.for_item(item)) is not self:
            return await own.fixed(item_id, item, key)
        counts = await gather_all(self.ask(item_id, item, p.name, p.trials, f"{key}:{p.name}:0") for p in self.probes)
        correct = {p.name: int(c) for p, c in zip(self.probes, counts, strict=True)}
        trials = {p.name: p.trials for p in self.probes}
        ann = self._estimate(correct, trials)
        ann.stop = "fixed"
        return ann

    async def _adaptive(
        self, item_id: str, item: dict[str, Any], key: str, target_z: float, margin: float
    ) -> Annotation:
        """Sequential design: a first batch on the probes most informative at the target (where the
        rewriter aimed), then small batches on the probes most informative at the current estimate,
        until the child is clearly out of the running (a likelihood-ratio test against the band of
        deviations that could still win) or as precise as the fixed protocol would have made it."""
        s = self.adaptive
        correct = {p.name: 0 for p in self.probes}
        trials = {p.name: 0 for p in self.probes}
        asked = {p.name: 0 for p in self.probes}
        b_target = self.from_z(target_z)
        b = b_target
        budget = self.fixed_budget
        ann: Annotation | None = None
        step = 0
        while sum(trials.values()) < budget:
            width, batch = (s.first_width, s.first_batch) if step == 0 else (s.width, s.batch)
            chosen = self._next_probes(b, width, batch, trials)
            await self._ask_batch(item_id, item, key, chosen, budget, batch, correct, trials, asked)
            step += 1
            ann = self._estimate(correct, trials)
            b = self._steer(ann, correct, trials)
            if sum(trials.values()) < s.min_rollouts:
                continue
            if math.isfinite(margin) and self._out_of_band(correct, trials, target_z, margin) > s.far_lr:
                ann.stop = "far"
                return ann
            if "no_finite_mle" in ann.flags:
                continue
            se_fixed = self._fixed_se(ann.difficulty)
            if ann.z_se <= max(s.z_se_stop, s.precision * se_fixed):
                ann.stop = "precise"
                return ann
            # Not a contender on its point estimate: a coarse estimate is enough to rank it.
            if abs(ann.z - target_z) > min(margin, s.contend * se_fixed) and ann.z_se <= s.screen * se_fixed:
                ann.stop = "screened"
                return ann
        assert ann is not None
        ann.stop = "budget"
        return ann

    async def _ask_batch(self, item_id: str, item: dict[str, Any], key: str, chosen: list, budget: int,
                         batch: int, correct: dict, trials: dict, asked: dict) -> None:
        """One batch of ``batch`` rollouts per chosen probe (never past ``budget`` in all), added to
        the running counts. Each request's key names the probe and how often it was asked, so a
        rerun asks the same requests (cache hits) in any completion order."""
        sizes = _split(budget - sum(trials.values()), [batch] * len(chosen))
        asks = [(p, n) for p, n in zip(chosen, sizes, strict=True) if n > 0]
        got = await gather_all(self.ask(item_id, item, p.name, n, f"{key}:{p.name}:{asked[p.name]}") for p, n in asks)
        for (p, n), c in zip(asks, got, strict=True):
            correct[p.name] += int(c)
            trials[p.name] += n
            asked[p.name] += 1

    def confirm_pool(self, annotated: Iterable[str] = ()) -> list[Probe]:
        """The probes a confirmation may ask: those that did not annotate the item (``annotated``: their
        names) where offsets are allowed for and enough are left (``ConfirmSettings.fresh_probes``), else all."""
        s = self.confirmation
        if not (s.fresh_probes and self.pair > 0):
            return self.probes
        held = set(annotated)
        pool = [p for p in self.probes if p.name not in held]
        return pool if len(pool) >= max(s.fresh_min, 1) else self.probes

    async def confirm(self, item_id: str, item: dict[str, Any], key: str, b_start: float,
                      band: tuple[float, float] | None = None, resume: Annotation | None = None,
                      annotated: Iterable[str] = ()) -> Annotation:
        """Fresh rollouts (``key`` must differ from the annotation's) on the probes most informative
        at the current estimate, from ``b_start``, until ``z_se`` or the cap (``ConfirmSettings``).
        Only the fresh answers enter the estimate: the selection saw the old ones.

        ``band`` (z): where the item would matter; the confirmation stops early (``stop`` "outside")
        once its answers rule that band out. ``resume``: a confirmation of the same item and ``key``
        to go on from (one that stopped early), to the precision target. ``annotated``: the names of the probes
        whose answers chose the item, left out where offsets are allowed for (``confirm_pool``)."""
        if (own := self.for_item(item)) is not self:
            return await own.confirm(item_id, item, key, b_start, band, resume, annotated)
        s = self.confirmation
        pool = self.confirm_pool(annotated)
        cap = s.cap(self.fixed_budget)
        correct = {p.name: 0 for p in self.probes}
        trials = {p.name: 0 for p in self.probes}
        if resume is not None:
            for r in resume.results:
                correct[r["probe"]], trials[r["probe"]] = int(r["correct"]), int(r["trials"])
        # each request's key counts the probe's earlier requests, all of ``s.batch`` but a last one at the cap
        asked = {name: -(-n // s.batch) for name, n in trials.items()}
        # resumed, it goes on exactly as the confirmation would have gone on had it not stopped
        b, ann = (b_start, None) if resume is None else (self._steer(resume, correct, trials), replace(resume))
        while sum(trials.values()) < cap:
            chosen = self._next_probes(b, s.width, s.batch, trials, pool)
            await self._ask_batch(item_id, item, key, chosen, cap, s.batch, correct, trials, asked)
            ann = self._estimate(correct, trials)
            b = self._steer(ann, correct, trials)
            # The sampling error is the target: the ability part does not shrink with more rollouts,
            # and these have already been spread over the probes to thin it as far as they can. Where that
            # part and the slope's are wide (past the panel's reach), sampling need only fall to a share of them.
            if "no_finite_mle" not in ann.flags and s.precise(ann.z_se, ann.fixed_z_se, sum(trials.values()),
                                                               self.fixed_budget):
                ann.stop = "precise"
                return ann
            if (band is not None and s.outside_lr > 0 and sum(trials.values()) >= s.outside_min
                    and self._out_of(correct, trials, *band) > s.outside_lr):
                ann.stop = "outside"
                return ann
        assert ann is not None
        ann.stop = "cap"
        return ann

    def outlook(self, z: float) -> Annotation:
        """What a confirmation can state for an item at ``z`` before any is run: its design followed
        with the answers the 1PL expects there (the estimate stays at ``z``), to the precision target or
        the cap. Its ``placement_z_se`` is the best such an item's placement can be.

        Rollouts shrink only the sampling part. The misfit part (the item's unknown slope) is taken from
        the prior, since no answers say yet how the item falls across the probes, and it grows with how
        far the probes sit from the item: beyond the panel's strongest probe, every probe leans the same
        way, and no number of rollouts tells a flat item from a steep one. There a probe nearer the gap
        lowers it (``run.narrow_gaps`` works out how far, with this outlook), a tighter ``--confirm-se`` not."""
        s = self.confirmation
        b = self.from_z(z)
        cap = s.cap(self.fixed_budget)
        trials = {p.name: 0 for p in self.probes}
        sampling = ability = misfit = math.inf
        while sum(trials.values()) < cap:
            chosen = self._next_probes(b, s.width, s.batch, trials)
            for p, n in zip(chosen, _split(cap - sum(trials.values()), [s.batch] * len(chosen)), strict=True):
                trials[p.name] += n
            sampling, ability, misfit = self._parts(b, trials)
            if s.precise(self.z_of_logits(math.sqrt(sampling)), self.z_of_logits(math.sqrt(ability + misfit)),
                         sum(trials.values()), self.fixed_budget):
                break
        return Annotation(b, math.sqrt(sampling), z, self.z_of_logits(math.sqrt(sampling)), sum(trials.values()),
                          [{"probe": p.name, "ability": p.ability, "correct": None, "trials": trials[p.name]}
                           for p in self.probes if trials[p.name]],
                          ["expected"], stop="expected", ability_z_se=self.z_of_logits(math.sqrt(ability)),
                          misfit_z_se=self.z_of_logits(math.sqrt(misfit)))

    def pair_z_se(self, ann: Annotation) -> float:
        """The part of ``ann``'s ``misfit_z_se`` that the probes' own offsets on the item make (``pair``, 0 without
        it): pair sqrt(sum w_j^2) over the probes' information shares in its design, which only more probes lower
        (k equally informative ones: pair / sqrt(k))."""
        if not self.pair or not math.isfinite(ann.difficulty):
            return 0.0
        infos = self._infos(ann.difficulty)
        info = {r["probe"]: int(r["trials"]) * infos[r["probe"]] for r in ann.results}
        total = sum(info.values())
        return self.z_of_logits(math.sqrt(self._pair_variance(info, total))) if total > 0 else 0.0

    def _pair_variance(self, info: dict[str, float], total: float) -> float:
        """pair^2 sum w_j^2, w_j the probes' shares of the design's information ``info`` (``total``, > 0)."""
        return self.pair**2 * sum((v / total) ** 2 for v in info.values())

    def resolution(self, ann: Annotation) -> float:
        """The z standard error an annotation can vouch for: its own, but never looser than
        the fixed protocol's at its estimate (a screened child is not precise)."""
        if "no_finite_mle" in ann.flags or not math.isfinite(ann.z_se):
            return 0.0
        return min(ann.z_se, self.at_chance(ann.chance)._fixed_se(ann.difficulty))

    def resolution_or_se(self, ann: Annotation) -> float:
        """The z standard error that tells one child from another: the sampling error and the misfit
        allowance, each the child's own (the ability error is shared by children the same probes placed,
        and left out); a child with no finite estimate gets a wide one (it still says it landed far off).

        With the misfit left out, the posterior selection took the children whose designs looked
        balanced for precise, and chose flat items that sat far from where they were confirmed (on
        cruxeval-output's spread the chosen items' error was 3 times their stated se, the others' 0.9)."""
        if "no_finite_mle" in ann.flags or not math.isfinite(ann.z_se):
            return 0.25
        return max(math.hypot(ann.z_se, ann.misfit_z_se), 1e-3)

    def _fixed_se(self, b: float) -> float:
        """The z standard error (sampling) the fixed protocol would reach for an item at ``b``."""
        sampling, _ = self._variance(b, {p.name: p.trials for p in self.probes})
        return self.z_of_logits(math.sqrt(sampling))

    def _infos(self, b: float) -> dict[str, float]:
        """Fisher information of one answer of each probe about an item at ``b``, under the guessing
        model (3PL, a=1). The scalar form of irt.item_information, kept as the search was measured
        with it: the two differ in the last bits, enough to flip near-tied probe choices."""
        out = {}
        for p in self.probes:
            q = 1.0 / (1.0 + math.exp(min(700.0, b - p.ability)))  # clipped: exp overflows past 709
            prob = self.chance + (1 - self.chance) * q
            out[p.name] = ((1 - self.chance) * q * (1 - q)) ** 2 / max(prob * (1 - prob), 1e-12)
        return out

    def _variance(self, b: float, trials: dict[str, int], infos: dict[str, float] | None = None) -> tuple[float, float]:
        """Sampling and ability variance of b-hat for an item at ``b`` with ``trials`` per probe.

        b-hat solves the score equation, so it moves with theta_j by w_j = n_j I_j / sum n I (the
        probe's share of the information): the ability part is sum w_j^2 se(theta_j)^2, the
        probes' errors being independent. One probe: w = 1, its error in full; k equal probes: 1/k.
        ``infos`` (``_infos(b)``) spares recomputing them when the caller has them.
        """
        sampling, ability, misfit = self._parts(b, trials, infos)
        return sampling, ability + misfit

    def _parts(self, b: float, trials: dict[str, int], infos: dict[str, float] | None = None,
               misfit: float | None = None) -> tuple[float, float, float]:
        """``_variance``'s sampling part, and its inherited part split into the probes' ability error and
        the misfit allowance (``_misfit``; none at an infinite b, an item with no finite estimate).
        ``misfit``: that allowance, where the caller has it (``_misfit_after``, ``_unlean``)."""
        infos = self._infos(b) if infos is None else infos
        info = {p.name: trials.get(p.name, 0) * infos[p.name] for p in self.probes}
        total = sum(info.values())
        if total <= 0:
            # No probe informs b (each answer's information underflows to 0): no shares, so no ability or
            # pair part, but the slopes' spread the caller worked out stands. Dropped, a flat child the
            # answers' posterior placed 70 logits past every probe was stated to 0.03 z (its 1PL's
            # sampling se alone) and sat 330 such se from its truth (bench/bench_intervals.py, aime25).
            return math.inf, 0.0, 0.0 if misfit is None else misfit
        ability = sum((info[p.name] / total) ** 2 * p.ability_se**2 for p in self.probes)
        if misfit is None:
            misfit = self._misfit(b, trials, info, total) if math.isfinite(b) else 0.0
        if self.pair:  # each probe's offset moves the item as its ability error would, but per item
            misfit += self._pair_variance(info, total)
        return 1.0 / total, ability, misfit

    def _misfit_after(self, b: float, trials: dict[str, int], candidates: list[Probe], batch: int,
                      infos: dict[str, float]) -> dict[str, float]:
        """``_misfit`` of the design after ``batch`` more answers of each candidate probe, all at once."""
        if not self.misfit or not math.isfinite(b):
            return {p.name: 0.0 for p in candidates}
        base = np.array([float(trials.get(p.name, 0)) for p in self.probes])
        index = {p.name: j for j, p in enumerate(self.probes)}
        n = np.repeat(base[None, :], len(candidates), axis=0)
        for row, p in enumerate(candidates):
            n[row, index[p.name]] += batch
        info = n * np.array([infos[p.name] for p in self.probes])
        # A design with no information at b (every probe asked so far beyond the float's reach of it) has no
        # shares: ``_parts`` then states an infinite variance and reads no misfit, so zeros stand in for them
        # (dividing by 0 warned on a user's terminal and gave NaN nodes nothing read).
        total = info.sum(axis=1, keepdims=True)
        nodes = self._slopes_of(b, n, np.divide(info, total, out=np.zeros_like(info), where=total > 0))
        return {p.name: float(_GH_W @ (b - nodes[row]) ** 2) for row, p in enumerate(candidates)}

    def _misfit(self, b: float, trials: dict[str, int], info: dict[str, float], total: float) -> float:
        """The variance the item's own discrimination may add, E over log a ~ N(0, misfit^2) of (b - b_a)^2.

        b_a is the difficulty an item of slope a must have for the probes asked (``trials``) to expect the
        answers the 1PL expects of an item at ``b``: the 1PL's score equation sets the expected count of
        right answers to the observed one, so that is where it places an item of slope a. Near a = 1 this
        is (1 - a) times the information-weighted lean of the probes from b; far from it, a flat item
        (small a) is pulled toward the probes' mean ability by far more, and a balance of information
        about b hides that: on cruxeval-output's spread (sd 0.8) the linear form stated 0.01-0.016 z for
        chosen items that sat 0.1-0.29 z off. Seven Gauss-Hermite nodes over log a, Newton on each."""
        if not self.misfit or total <= 0:
            return 0.0
        return float(_GH_W @ (b - self._slopes(b, trials, info, total)) ** 2)

    def _unlean(self, b: float, trials: dict[str, int],
                correct: dict[str, int] | None = None) -> tuple[float, float, float]:
        """The mean of b_a over log a (``_misfit``'s b_a), their variance about it, and the ratio of that
        mean's sampling variance to the 1PL's b's (``_sampling_factor``; 1, not worked out, unless
        ``own_sampling``: it costs a third of a millisecond an estimate).

        With ``correct``, the slopes are weighed by how well each explains the answers (the prior times the
        likelihood at b_a, ``_slope_log_lik``, on an even grid): a posterior over log a, not the prior alone. b_a is the
        difficulty an item of slope a must have to expect the answers given in all, so what tells the slopes
        apart is how the answers fall across the probes: steeply from the weak ones to the strong ones, or
        not. The prior alone placed every child as if it had the benchmark's typical slope, and a flat one,
        pulled toward the probes by far more, kept that error through its confirmation (the same item, the
        same probes). Chosen for landing on the target, children with a < 0.7 (a quarter of all) were over a
        third of those chosen, and sat 0.06-0.08 z low (docs/sim-rewriter.md, "The answers weigh the slopes")."""
        infos = self._infos(b)
        info = {p.name: trials.get(p.name, 0) * infos[p.name] for p in self.probes}
        total = sum(info.values())
        if total <= 0:
            return b, 0.0, 1.0
        n = np.array([float(trials.get(p.name, 0)) for p in self.probes])
        if correct is None:
            nodes = self._slopes(b, trials, info, total)
            centre = float(_GH_W @ nodes)
            factor = self._sampling_factor(b, n, nodes, _GH_X, _GH_W) if self.own_sampling else 1.0
            return centre, float(_GH_W @ (nodes - centre) ** 2), factor
        c = np.array([float(correct.get(p.name, 0)) for p in self.probes])
        weights = np.array([info[p.name] for p in self.probes]) / total
        nodes = self._slopes_of(b, n[None, :], weights, _POST_X)[0]
        w = _POST_W * np.exp(self._slope_log_lik(nodes, _POST_X, n, c))
        w = w / w.sum()
        centre = float(w @ nodes)
        factor = self._sampling_factor(b, n, nodes, _POST_X, w) if self.own_sampling else 1.0
        return centre, float(w @ (nodes - centre) ** 2), factor

    def _sampling_factor(self, b: float, n: np.ndarray, nodes: np.ndarray, x: np.ndarray, w: np.ndarray) -> float:
        """How much more (or less) the placed difficulty, the mean of b_a over the slopes (``_unlean``), moves
        with the answers' sampling noise than the 1PL's own b does: its sampling variance over the 1PL's.

        b_a solves "expected right answers = observed", so it moves with the count by 1 / D_a, D_a the
        expected count's slope in b for an item of slope a (about a times the 1PL's): a flat item's b_a moves
        1/a times as far as the 1PL's b for the same noise. Their mean moves by sum w_a / D_a, and the count
        itself varies by sum w_a V_a, V_a its binomial variance for that item. The 1PL's own sampling
        variance is V_1 / D_1^2 at b (exactly so without a guessing floor); read as the placement's, it made
        a flat item's stated se too narrow and a steep one's too wide (bench/bench_intervals.py: rms error
        over stated se 1.55 for the flattest third of the children and 0.83 for the steepest; with the
        sampling part made negligible, about 1.1 for both). The ratio of the two variances, then: 1 with no
        misfit allowance (every a is 1 and b_a is b)."""
        from scipy.special import expit

        theta = np.array([p.ability for p in self.probes])
        g = self.chance
        a = np.exp(self.misfit * x)

        def slope_and_var(bs: np.ndarray, av: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            s = expit(av[:, None] * (theta[None, :] - bs[:, None]))
            prob = g + (1 - g) * s
            return (n * (1 - g) * av[:, None] * s * (1 - s)).sum(axis=1), (n * prob * (1 - prob)).sum(axis=1)

        d1, v1 = slope_and_var(np.array([b]), np.array([1.0]))
        da, va = slope_and_var(np.asarray(nodes, dtype=float), a)
        if d1[0] <= 0 or v1[0] <= 0 or np.any(da <= 0):
            return 1.0  # no finite sensitivity to compare (every probe far off): the 1PL's se stands
        return float((w @ va) / v1[0] * (d1[0] * (w @ (1.0 / da))) ** 2)

    def _slope_log_lik(self, nodes: np.ndarray, x: np.ndarray, n: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Log-likelihood of the answers (``c`` right of ``n`` per probe) for an item of slope a = e^(misfit x)
        at b_a (``nodes``), less its largest value.

        Each probe's term is tempered by the share of its count's variance that sampling makes: a probe's
        ability is itself uncertain, which moves its expected count by n p'(theta) se(theta), and read as
        exact, two probes half a logit apart with abilities 0.2 off would pass for a slope 40% off. Taken
        at face value, the answers made the stated se too narrow (kind on the seven sets: error over stated
        se 1.21, from 1.09 with the prior alone; 1.17 tempered)."""
        from scipy.special import expit

        theta = np.array([p.ability for p in self.probes])
        ability_se = np.array([p.ability_se for p in self.probes])
        a = np.exp(self.misfit * x)
        s = expit(a[:, None] * (theta[None, :] - nodes[:, None]))
        g = self.chance
        p = np.clip(g + (1 - g) * s, 1e-300, 1.0)
        q = np.clip((1 - g) * (1 - s), 1e-300, 1.0)
        sampling = n * p * q
        shift = n * (1 - g) * a[:, None] * s * (1 - s) * ability_se
        share = sampling / np.maximum(sampling + shift**2, 1e-300)
        # against the saturated fit (each probe's own rate), so that a term near zero, not one that is merely
        # tempered more, is what a good slope earns
        rate = np.divide(c, n, out=np.zeros_like(c), where=n > 0)
        right = np.where(c > 0, c * (np.log(p) - np.log(np.maximum(rate, 1e-300))), 0.0)
        wrong = np.where(n - c > 0, (n - c) * (np.log(q) - np.log(np.maximum(1 - rate, 1e-300))), 0.0)
        ll = (share * (right + wrong)).sum(axis=1)
        return ll - ll.max()

    def _slopes(self, b: float, trials: dict[str, int], info: dict[str, float], total: float) -> np.ndarray:
        """b_a at each Gauss-Hermite node of log a (``_misfit``)."""
        n = np.array([[float(trials.get(p.name, 0)) for p in self.probes]])
        return self._slopes_of(b, n, np.array([info[p.name] for p in self.probes]) / max(total, 1e-300))[0]

    def _slopes_of(self, b: float, n: np.ndarray, weights: np.ndarray, x: np.ndarray = _GH_X) -> np.ndarray:
        """b_a per design and node: ``n`` holds each design's trials per probe (designs x probes, in
        ``self.probes``' order), ``weights`` their information shares (where Newton starts, the linear
        answer). All designs at once: the probe choice weighs one design per candidate probe.

        Newton inside a bracket, bisecting where a step would leave it. Each probe's expected answer equals
        the 1PL's at b_i = theta_i - (theta_i - b) / a, so the root lies between the smallest and the largest
        b_i of the probes asked. Newton alone (30 steps clipped at 2 logits, to s54) overshot on steep nodes,
        where the count is a near-step in b_a, and left 186 of 1,646 calls on the demo with a node off its
        root by a logit; ``bench/bench_slope_nodes.py`` checks every call against bisection (none off now),
        and the bracketed form costs no more time than Newton alone did."""
        # Imported here: scipy stays off the start-up of commands that annotate nothing.
        from scipy.special import expit

        theta = np.array([p.ability for p in self.probes])
        g = self.chance
        target = n @ (g + (1 - g) * expit(theta - b))  # the answers the 1PL expects at b
        a = np.exp(self.misfit * x)
        mean = np.atleast_2d(weights) @ theta
        start = mean[:, None] + (b - mean[:, None]) / a[None, :]
        each = theta[None, :] - (theta[None, :] - b) / a[:, None]  # nodes x probes
        asked = (n > 0)[:, None, :]
        lo = np.where(asked, each[None, :, :], np.inf).min(axis=2)
        hi = np.where(asked, each[None, :, :], -np.inf).max(axis=2)
        none = ~asked.any(axis=2)  # a design with no answers: every b_a fits, the start stands
        lo, hi = np.where(none, start, lo), np.where(none, start, hi)
        bp = np.clip(start, lo, hi)
        for _ in range(200):
            s = expit(a[None, :, None] * (theta[None, None, :] - bp[:, :, None]))
            f = (n[:, None, :] * (g + (1 - g) * s)).sum(axis=2) - target[:, None]  # falls as b_a rises
            slope = (n[:, None, :] * ((1 - g) * a[None, :, None] * s * (1 - s))).sum(axis=2)  # -d count / d b_a
            lo, hi = np.where(f > 0, bp, lo), np.where(f < 0, bp, hi)
            step = f / np.maximum(slope, 1e-300)
            # A step that leaves the bracket bisects it, unless it is below the tolerance: Newton converging
            # from one side sits on the bracket's end, and a step off it would bisect a bracket just found.
            bisect = (slope <= 0) | (((bp + step <= lo) | (bp + step >= hi)) & (np.abs(step) > 1e-10))
            nxt = np.where(f == 0, bp, np.where(bisect, (lo + hi) / 2, bp + step))
            moved = np.abs(nxt - bp)
            bp = nxt
            if not float(np.max(np.minimum(moved, hi - lo))) > 1e-10:
                break
        return bp

    def _next_probes(self, b: float, width: int, batch: int, trials: dict[str, int],
                     pool: list[Probe] | None = None) -> list[Probe]:
        """``width`` probes of ``pool`` (default: all) for the next batch, chosen one at a time to lower the
        total variance of b-hat at ``b`` most: with exact abilities this is the most informative probes at
        ``b`` (the paper's adaptive idea), with uncertain ones it spreads the rollouts."""
        infos = self._infos(b)  # per answer, the same for every candidate
        n = dict(trials)
        pool = self.probes if pool is None else pool
        chosen: list[Probe] = []
        for _ in range(min(width, len(pool))):
            left = [p for p in pool if p not in chosen]
            misfit = self._misfit_after(b, n, left, batch, infos)

            def cost(p: Probe, misfit: dict[str, float] = misfit) -> tuple[float, float, str]:
                after = dict(n)
                after[p.name] = after.get(p.name, 0) + batch
                # to ten significant digits: probes alike at b (an item every probe answers right) tie but for
                # float noise, which is the machine's BLAS kernel's, and the tie must go to the name everywhere
                return (float(f"{sum(self._parts(b, after, infos, misfit=misfit[p.name])):.10g}"),
                        float(f"{-infos[p.name]:.10g}"), p.name)

            best = min(left, key=cost)
            chosen.append(best)
            n[best.name] = n.get(best.name, 0) + batch
        return chosen

    def _steer(self, ann: Annotation, correct: dict[str, int], trials: dict[str, int]) -> float:
        """Where to look next: the estimate, or just past the asked probes when every answer
        was right (the child is easier than all of them) or wrong (harder)."""
        if "no_finite_mle" not in ann.flags:
            return ann.difficulty
        asked = [p.ability for p in self.probes if trials[p.name] > 0]
        if sum(correct.values()) == sum(trials.values()):
            return min(asked) - 1.0
        return max(asked) + 1.0

    def _out_of_band(self, correct: dict[str, int], trials: dict[str, int], target_z: float, margin: float) -> float:
        """Log-likelihood ratio: best b anywhere vs best b whose deviation is at most ``margin``.

        Large means the data rule out every difficulty that could beat the best child so far,
        which holds even when there is no finite MLE (a child every probe solved)."""
        return self._out_of(correct, trials, target_z - margin, target_z + margin)

    def _out_of(self, correct: dict[str, int], trials: dict[str, int], lo_z: float, hi_z: float) -> float:
        """Log-likelihood ratio: best b anywhere vs best b whose z lies in [``lo_z``, ``hi_z``]."""
        used = [p for p in self.probes if trials[p.name] > 0]
        c = np.array([correct[p.name] for p in used], dtype=float)
        k = np.array([trials[p.name] for p in used], dtype=float)
        theta = np.array([p.ability for p in used], dtype=float)
        lo, hi = self.from_z(lo_z), self.from_z(hi_z)
        # z from -3 to 4; the upper end from b_max, as before the link, where there is none (the bits matter)
        upper = self.b_max if self.link == (0.0, 1.0) else self.from_z(1.0)
        wide = np.linspace(self.from_z(-3.0), upper + 3 * self.span / self.link[1], 601)
        band = np.linspace(lo, hi, 41)
        ll_all = _log_lik(np.concatenate([wide, band]), c, k, theta, self.chance)
        return float(ll_all.max() - ll_all[wide.size:].max())

    def _estimate(self, correct: dict[str, int], trials: dict[str, int]) -> Annotation:
        try:
            from benchfill.irt import online_calibrate
        except ImportError:  # the package face may not re-export it
            from benchfill.irt.online import online_calibrate

        used = [p for p in self.probes if trials[p.name] > 0]
        c = np.array([correct[p.name] for p in used], dtype=float)
        k = np.array([trials[p.name] for p in used], dtype=float)
        theta = np.array([p.ability for p in used], dtype=float)
        est = online_calibrate(c, k, theta, chance=self.chance)
        b = float(est.difficulty)
        se = float(est.se) if est.se is not None and np.isfinite(est.se) else math.inf
        if self.misfit and math.isfinite(b) and "no_finite_mle" not in (getattr(est, "flags", None) or ()):
            # Placed where items of every slope that would expect these answers lie on average, with their
            # spread as the misfit part: the 1PL's own b leans toward the probes' mean ability, by far more
            # for flat items than for steep ones (E[1/a] > 1), so it sits off on average (docs/sim-rewriter.md,
            # "Flat items").
            b, misfit, factor = self._unlean(b, trials, correct if self.slope_weights else None)
            se *= math.sqrt(factor)  # 1 unless own_sampling
            _, ability, misfit = self._parts(b, trials, misfit=misfit)  # (the pair allowance added to it)
        else:
            _, ability, misfit = self._parts(b, trials)
        ability_z_se, misfit_z_se = self.z_of_logits(math.sqrt(ability)), self.z_of_logits(math.sqrt(misfit))
        flags = list(getattr(est, "flags", []) or [])
        z = self.to_z(b)
        if not 0.0 <= z <= 1.0:
            flags.append("outside_range")
        results = [
            {"probe": p.name, "ability": p.ability, "correct": correct[p.name], "trials": trials[p.name]} for p in used
        ]
        return Annotation(b, se, z, self.z_of_logits(se), int(k.sum()), results, sorted(set(flags)),
                          ability_z_se=ability_z_se, misfit_z_se=misfit_z_se, chance=self.chance)


async def gather_all(calls) -> list:
    """``asyncio.gather`` of ``calls`` that raises the first failure only once every call has ended: a probe's
    refusal (``PromptRefused``) leaves the others' rollouts answered and counted (``Annotator.answered``)
    before the search sets the child aside, not still in flight."""
    got = await asyncio.gather(*calls, return_exceptions=True)
    for g in got:
        if isinstance(g, BaseException):
            raise g
    return got


def _split(room: int, sizes: list[int]) -> list[int]:
    """Trim a step's batch sizes so the total never exceeds the remaining budget."""
    out = []
    for n in sizes:
        take = min(n, room)
        out.append(take)
        room -= take
    return out


def _log_lik(b: np.ndarray, c: np.ndarray, k: np.ndarray, theta: np.ndarray, chance: float) -> np.ndarray:
    """Binomial log-likelihood of each difficulty in ``b`` (3PL with a=1 and guessing floor)."""
    s = 1.0 / (1.0 + np.exp(np.asarray(b)[:, None] - theta[None, :]))
    p = np.clip(chance + (1.0 - chance) * s, 1e-300, 1.0)
    q = np.clip((1.0 - chance) * (1.0 - s), 1e-300, 1.0)
    return (c * np.log(p) + (k - c) * np.log(q)).sum(axis=1)


def anchor_link(annotator: Annotator, matrix: Any, fit: Any, min_items: int = 10, max_se: float = 1.0,
                spread: bool = True) -> tuple[tuple[float, float], dict[str, Any]]:
    """((A, B), what it rests on): how an item placed through the probes maps onto the fit's scale of record.

    Each original item the probes answered in ``matrix`` (the panel's rollouts on the anchor items) is placed
    as a child is (``Annotator._estimate``, its own guessing floor), and set against its fitted difficulty:
    B is the ratio of the two spreads less their estimation error (mean-sigma linking), A the offset of the
    means. A child placed at b is then at A + B b on the record, as an original with the same answers would
    be. The identity where fewer than ``min_items`` items have a finite placement with an se under ``max_se``
    logits, or the spreads cannot be told from the error. ``spread`` False: the offset alone (B = 1), the
    precision-weighted mean of the differences."""
    identity = (0.0, 1.0)
    names = [p.name for p in annotator.probes]
    rows = {m: j for j, m in enumerate(matrix.models)}
    if not all(n in rows for n in names):
        return identity, {"items": 0, "why": "the probes are not all in the matrix"}
    plain = replace(annotator, link=identity)
    fitted = {i: k for k, i in enumerate(fit.item_ids)}
    placed, placed_var, record, record_var = [], [], [], []
    for col, item_id in enumerate(matrix.item_ids):
        k = fitted.get(item_id)
        trials = {n: int(matrix.trials[rows[n], col]) for n in names}
        if k is None or sum(1 for v in trials.values() if v > 0) < 3:
            continue
        correct = {n: int(matrix.correct[rows[n], col]) for n in names}
        ann = plain.at_chance(float(fit.chance[k]))._estimate(correct, trials)
        misfit_b = ann.misfit_z_se * plain.span
        if "no_finite_mle" in ann.flags or not (math.isfinite(ann.difficulty) and ann.se < max_se):
            continue
        placed.append(ann.difficulty)
        placed_var.append(ann.se**2 + misfit_b**2)
        record.append(float(fit.difficulty[k]))
        se = float(fit.difficulty_se[k])
        record_var.append(se**2 if math.isfinite(se) else 0.0)
    info: dict[str, Any] = {"items": len(placed)}
    if len(placed) < min_items:
        return identity, {**info, "why": f"fewer than {min_items} anchor items placed with an se under {max_se:g}"}
    if not spread:
        w = 1.0 / (np.asarray(placed_var) + np.asarray(record_var) + 1e-12)
        offset = float(np.sum(w * (np.asarray(record) - np.asarray(placed))) / np.sum(w))
        return (offset, 1.0), {**info, "offset": round(offset, 4), "slope": 1.0}
    spread_placed = float(np.var(placed)) - float(np.mean(placed_var))
    spread_record = float(np.var(record)) - float(np.mean(record_var))
    if spread_placed <= 0 or spread_record <= 0:
        return identity, {**info, "why": "the spreads are within their estimation error"}
    slope = min(max(math.sqrt(spread_record / spread_placed), 0.5), 2.0)
    offset = float(np.mean(record)) - slope * float(np.mean(placed))
    return (offset, slope), {**info, "offset": round(offset, 4), "slope": round(slope, 4)}
