"""The probe panel's ability error in the annotator: worked by hand, and recovered against a panel
whose fitted abilities are off by a known spread.

An item is placed through the probes' fitted abilities, so it inherits their errors: no number of
rollouts on the item removes them, only spreading the rollouts over several probes averages them
down. The annotator's standard errors must say so, and its choice of probes must act on it.
"""

from __future__ import annotations

import asyncio
import math
import re

import numpy as np
import pytest

from benchfill.search import Annotator, Probe, derive_seed

B_MIN, B_MAX = -3.0, 3.0
TRUE_ABILITY = {f"p{j:02d}": float(a) for j, a in enumerate(np.linspace(-3, 3, 13))}


class Panel:
    """Probes answer by 1PL with their TRUE abilities; the annotator only knows fitted ones."""

    def __init__(self, b: dict[str, float], seed: int = 0):
        self.b, self.seed = dict(b), seed

    async def rollouts(self, item_id, item, probe, n, key):
        rng = np.random.default_rng(derive_seed(self.seed, "ro", key))
        return int(rng.binomial(n, 1 / (1 + math.exp(-(TRUE_ABILITY[probe] - self.b[item_id])))))


def _annotator(panel, abilities: dict[str, float], se: float) -> Annotator:
    probes = [Probe(n, a, 8, se) for n, a in abilities.items()]
    return Annotator(panel, probes, chance=0.0, b_min=B_MIN, b_max=B_MAX, protocol="adaptive")


def test_variance_worked_by_hand():
    ann = _annotator(None, {"a": 0.0, "b": 0.0, "c": 4.0}, 0.3)
    # One probe at the item's difficulty: information 8 * 1/4 = 2, so sampling 1/2; its ability error in full.
    sampling, ability = ann._variance(0.0, {"a": 8})
    assert math.isclose(sampling, 0.5) and math.isclose(ability, 0.09)
    # Two equally informative probes: half the sampling variance and half the ability variance.
    sampling, ability = ann._variance(0.0, {"a": 8, "b": 8})
    assert math.isclose(sampling, 0.25) and math.isclose(ability, 0.045)
    # Unequal shares w = (2, 2, 8 I_c) / total: sum w^2 * 0.09.
    i_c = 8 * math.exp(-4) / (1 + math.exp(-4)) ** 2
    total = 4 + i_c
    sampling, ability = ann._variance(0.0, {"a": 8, "b": 8, "c": 8})
    assert math.isclose(sampling, 1 / total)
    assert math.isclose(ability, 0.09 * (8 + i_c**2) / total**2)
    # No rollouts: nothing is known.
    assert ann._variance(0.0, {})[0] == math.inf
    # The fixed protocol's se (sampling, what the search's rules compare) in z.
    assert math.isclose(ann._fixed_se(0.0), math.sqrt(1 / total) / 6.0)



def test_the_misfit_allowance_worked_by_hand():
    """With log a ~ N(0, s^2), one probe a logit above an item at b = 0 places an item of slope a at 1 - 1/a
    (it expects the same answers): E[(1/a - 1)^2] = 1 - 2 e^(s^2/2) + e^(2 s^2), log a being symmetric.
    Balanced probes cancel for every a; near a = 1 the variance is s^2 times the information-weighted lean
    squared (the linear form the allowance had before)."""
    from dataclasses import replace

    ann = replace(_annotator(None, {"lo": -1.0, "hi": 1.0, "at": 0.0}, 0.0), misfit=0.35)
    m2 = 1 - 2 * math.exp(0.35**2 / 2) + math.exp(2 * 0.35**2)  # 0.1512
    assert math.isclose(m2, 0.15117, rel_tol=1e-3)
    _, inherited = ann._variance(0.0, {"hi": 8})  # one probe a logit above: the lean is 1
    assert math.isclose(inherited, m2, rel_tol=1e-6)  # seven Gauss-Hermite nodes
    _, inherited = ann._variance(0.0, {"lo": 8, "hi": 8})  # one each side, equal information: no lean
    assert math.isclose(inherited, 0.0, abs_tol=1e-15)
    i_hi = 8 * math.exp(-1) / (1 + math.exp(-1)) ** 2
    _, inherited = replace(ann, misfit=0.02)._variance(0.0, {"hi": 8, "at": 8})  # the linear limit
    assert math.isclose(inherited, (math.exp(0.02**2) - 1) * (i_hi / (i_hi + 2)) ** 2, rel_tol=2e-3)
    # The next probe after "hi": "at" (more information, a small lean) at s = 0.35; at s = 0.8 balancing wins.
    assert [p.name for p in ann._next_probes(0.0, 1, 8, {"hi": 8})] == ["at"]
    assert [p.name for p in replace(ann, misfit=0.8)._next_probes(0.0, 1, 8, {"hi": 8})] == ["lo"]


def test_the_misfit_allowance_agrees_with_a_direct_integral():
    """The nonlinear allowance against scipy: for each a, the root of the expected count (brentq), squared
    off b and integrated over the lognormal (quad). A flat item is pulled toward the probes by far more
    than (1 - a) times their lean: at s = 0.8 the allowance is well above the linear form's."""
    from dataclasses import replace

    from scipy.integrate import quad
    from scipy.optimize import brentq
    from scipy.special import expit

    base = _annotator(None, {"lo": -1.0, "hi": 1.0, "at": 0.0, "far": 2.5}, 0.0)
    trials = {"hi": 8, "at": 16, "far": 8}
    theta = {"lo": -1.0, "hi": 1.0, "at": 0.0, "far": 2.5}

    def count(b: float, a: float) -> float:
        return sum(n * expit(a * (theta[k] - b)) for k, n in trials.items())

    for s, b in ((0.35, 0.3), (0.8, 0.3), (0.8, -0.6)):
        def sq(x: float, s: float = s, b: float = b) -> float:
            a = math.exp(s * x)
            return (b - brentq(lambda bb: count(bb, a) - count(b, 1.0), -500, 500)) ** 2 * math.exp(-x * x / 2)

        want = quad(sq, -7, 7, limit=200)[0] / math.sqrt(2 * math.pi)
        ann = replace(base, misfit=s)
        infos = ann._infos(b)
        info = {p.name: trials.get(p.name, 0) * infos[p.name] for p in ann.probes}
        got = ann._misfit(b, trials, info, sum(info.values()))
        assert math.isclose(got, want, rel_tol=0.03), (s, b, got, want)
        lean = sum(info[k] * (theta[k] - b) for k in info) / sum(info.values())
        linear = (1 - 2 * math.exp(s * s / 2) + math.exp(2 * s * s)) * lean**2
        if s == 0.8:
            assert got > 1.3 * linear


def test_exact_abilities_keep_the_most_informative_probes_and_uncertain_ones_spread():
    abilities = {"near": 0.0, "next": 0.5, "far": 2.0}
    exact = _annotator(None, abilities, 0.0)
    assert [p.name for p in exact._next_probes(0.0, 2, 8, {})] == ["near", "next"]
    # Once "near" holds many rollouts, exact abilities still send more there; uncertain ones do not.
    many = {"near": 64}
    assert exact._next_probes(0.0, 1, 8, many)[0].name == "near"
    shaky = _annotator(None, abilities, 0.5)
    assert shaky._next_probes(0.0, 1, 8, many)[0].name == "next"


def _confirm_many(se_known: float, reps: int = 40, spread: float = 0.3):
    """Confirm an item at b = 0.1 against ``reps`` panels whose fitted abilities are off by N(0, spread)."""
    errs, ses, rollouts = [], [], []
    for rep in range(reps):
        rng = np.random.default_rng([7, rep])
        fitted = {n: a + spread * float(rng.normal()) for n, a in TRUE_ABILITY.items()}
        panel = Panel({"c": 0.1}, seed=rep)
        ann = _annotator(panel, fitted, se_known)
        c = asyncio.run(ann.confirm("c", {}, f"confirm:{rep}", 0.1))
        errs.append(c.difficulty - 0.1)
        ses.append(c.placement_z_se * (B_MAX - B_MIN))
        # The sampling part is the confirmation's target, as before; the placement se adds what the item inherits.
        assert c.stop == "cap" or c.z_se <= ann.confirmation.z_se
        assert c.placement_z_se >= c.z_se and (se_known > 0) == (c.ability_z_se > 0)
        rollouts.append(c.rollouts)
    return np.array(errs), np.array(ses), np.array(rollouts)


def test_knowing_the_ability_error_places_items_closer_and_says_how_close():
    blind_err, blind_se, blind_n = _confirm_many(0.0)
    aware_err, aware_se, aware_n = _confirm_many(0.3)
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))  # noqa: E731
    # Spread over more probes, the panel's errors average down: the placement is closer to the truth...
    assert rms(aware_err) < 0.8 * rms(blind_err)
    # ... and its placement se is honest (errors over se near 1), where the blind one claims twice the precision it has.
    assert 0.7 < rms(aware_err / aware_se) < 1.3
    assert rms(blind_err / blind_se) > 1.5
    # At no more than the cap's rollouts.
    assert aware_n.max() <= 4 * 13 * 8


def test_the_placed_se_carries_the_inherited_error_and_a_snapshot_keeps_it():
    from benchfill.search import Annotation
    from benchfill.search.loop import Child, GapResult
    from benchfill.search.services import Spend
    from benchfill.search.snapshot import annotation_from_dict, annotation_to_dict

    ann = Annotation(0.1, 0.18, 0.52, 0.03, 96, ability_z_se=0.04)
    assert math.isclose(ann.placement_z_se, 0.05)  # 3-4-5
    back = annotation_from_dict(annotation_to_dict(ann))
    assert back.ability_z_se == 0.04 and math.isclose(back.placement_z_se, 0.05)
    old = annotation_to_dict(ann)
    del old["ability_z_se"]  # a snapshot written before the field: nothing inherited is known
    assert annotation_from_dict(old).placement_z_se == 0.03
    child = Child("c", "p", "p", 1, {"id": "c"}, annotation=Annotation(0.0, 0.1, 0.5, 0.02, 16), confirmation=ann)
    res = GapResult(0, 0.45, 0.6, 0.525, "benchfill", [child], child, 1, Spend())
    z, se, by = res.placed
    assert (z, by) == (0.52, "confirmed") and math.isclose(se, 0.05)


def test_an_item_far_past_the_panel_has_no_information_and_no_overflow():
    ann = _annotator(None, TRUE_ABILITY, 0.3)
    assert ann._infos(5000.0)["p00"] == 0.0 and ann._infos(-5000.0)["p00"] == 0.0
    assert ann._variance(5000.0, {"p00": 8})[0] == math.inf


def test_the_posterior_never_pulls_an_unmeasurable_child_back_across_its_bound():
    """Every probe failed one child: it lies at or beyond its bound, 0.2 past the target. Its wide se
    let the prior (where the rewriter's response says it lands: on the target) pull it onto the target,
    and it beat a child measured 0.06 off."""
    from benchfill.search import Annotation
    from benchfill.search.loop import Child
    from benchfill.search.selection import select_posterior
    from benchfill.search.services import Verdict
    from benchfill.search.steering import Steering

    ann = _annotator(None, TRUE_ABILITY, 0.0)
    ok = Verdict(True, "", "toy")
    measured = Child("a", "p", "p", 1, {"id": "a"}, ok, Annotation(0.0, 0.1, 0.56, 0.02, 96), ask=0.5, parent_z=0.3)
    beyond = Child("b", "p", "p", 1, {"id": "b"}, ok,
                   Annotation(1.2, 1.0, 0.7, 0.2, 16, flags=["all_wrong", "no_finite_mle"]), ask=0.5, parent_z=0.3)
    assert select_posterior([measured, beyond], 0.5, Steering(), ann) is measured
    # ... and the mirror: every answer right, the bound 0.2 below the target.
    easy = Child("c", "p", "p", 1, {"id": "c"}, ok,
                 Annotation(-1.2, 1.0, 0.3, 0.2, 16, flags=["all_correct", "no_finite_mle"]), ask=0.5, parent_z=0.3)
    assert select_posterior([measured, easy], 0.5, Steering(), ann) is measured


def test_the_chance_a_chosen_item_truly_lies_inside_its_gap_worked_by_hand():
    from benchfill.search import Annotation
    from benchfill.search.loop import Child, GapResult
    from benchfill.search.services import Spend

    def result(z: float, z_se: float, ability_z_se: float = 0.0, left: float = 0.4, right: float = 0.6):
        conf = Annotation(0.0, 0.1, z, z_se, 96, ability_z_se=ability_z_se)
        child = Child("c", "p", "p", 1, {"id": "c"}, annotation=Annotation(0.0, 0.1, z, 0.05, 16), confirmation=conf)
        return GapResult(0, left, right, (left + right) / 2, "benchfill", [child], child, 1, Spend())

    # placed on the midpoint of [0.4, 0.6] with se 0.1 (0.06 sampling, 0.08 inherited: 3-4-5): within one
    # se either side, Phi(1) - Phi(-1) = 0.6827
    assert math.isclose(result(0.5, 0.06, 0.08).inside_probability, 0.682689, abs_tol=1e-6)
    # on the right edge: half the mass, less the tail beyond the left edge two se away (Phi(-2) = 0.02275)
    assert math.isclose(result(0.6, 0.1).inside_probability, 0.5 - 0.022750, abs_tol=1e-6)
    # a gap narrower than the se: confirmed on the target, still barely more likely in than out
    assert result(0.5, 0.02, left=0.49, right=0.51).inside_probability < 0.4
    # a precise placement inside a wide gap is all but sure; outside one, below a half
    assert result(0.5, 0.01).inside_probability > 0.999 and result(0.62, 0.1).inside_probability < 0.5
    assert result(0.5, 0.0).inside_probability == 1.0 and result(0.7, 0.0).inside_probability == 0.0
    empty = GapResult(0, 0.4, 0.6, 0.5, "benchfill", [], None, 1, Spend())
    assert empty.inside_probability is None


def test_the_placement_allows_for_flat_items_leaning_toward_the_probes():
    """One probe a logit above a 1PL estimate of 0: an item of slope a that expects the same answers sits
    at 1 - 1/a, so the placement is E[1 - 1/a] = 1 - e^(s^2/2) and its misfit variance
    Var(1/a) = e^(2 s^2) - e^(s^2). s = 0.5: -0.133148 and 0.364696. Without an allowance, the 1PL's own."""
    from dataclasses import replace

    ann = replace(_annotator(None, {"hi": 1.0, "lo": -1.0}, 0.0), misfit=0.5)
    b, var, _ = ann._unlean(0.0, {"hi": 8, "lo": 0})
    assert math.isclose(b, 1 - math.exp(0.125), rel_tol=1e-6) and math.isclose(b, -0.133148, rel_tol=1e-5)
    assert math.isclose(var, math.exp(0.5) - math.exp(0.25), rel_tol=1e-5) and math.isclose(var, 0.364696, rel_tol=1e-5)
    b, var, _ = ann._unlean(0.0, {"hi": 8, "lo": 8})  # balanced: every slope expects these answers at 0
    assert abs(b) < 1e-12 and var < 1e-24


def test_one_probe_says_nothing_about_the_slope_so_the_answers_leave_the_prior():
    """With one probe, every slope expects the given answers at its own b_a, so the likelihood is flat
    over log a and the answer-weighted placement is the prior's: the hand-worked E[1 - 1/a] above, on
    its even grid (to the grid's own error)."""
    from dataclasses import replace

    ann = replace(_annotator(None, {"hi": 1.0, "lo": -1.0}, 0.0), misfit=0.5)
    b, var, _ = ann._unlean(0.0, {"hi": 8, "lo": 0}, {"hi": 4, "lo": 0})
    assert math.isclose(b, 1 - math.exp(0.125), rel_tol=2e-3)
    assert math.isclose(var, math.exp(0.5) - math.exp(0.25), rel_tol=5e-3)


FOUR_BELOW = {"p0": 0.0, "p1": 0.5, "p2": 1.0, "p3": 1.5}  # four probes below an item at b = 2


def _answers_below(slope: float, n: int) -> tuple[dict, dict, float]:
    """Trials, the expected right answers of an item of ``slope`` at b = 2 from each of FOUR_BELOW, and the
    1PL's estimate from them (where the placement starts)."""
    from benchfill.irt.online import online_calibrate

    trials = {k: n for k in FOUR_BELOW}
    correct = {k: round(n / (1 + math.exp(-slope * (t - 2.0)))) for k, t in FOUR_BELOW.items()}
    names = sorted(FOUR_BELOW)
    est = online_calibrate(np.array([correct[k] for k in names], float), np.array([n] * 4, float),
                           np.array([FOUR_BELOW[k] for k in names]))
    return trials, correct, est.difficulty


@pytest.mark.parametrize("slope", [0.4, 1.0, 2.2])
def test_answers_spread_over_probes_recover_the_items_slope_and_place_it(slope):
    """Recovery: an item of slope a at b = 2, answered by four probes all below it (abilities 0 to 1.5,
    2,000 answers each, the expected counts). The 1PL pulls a flat item toward the probes and pushes a
    steep one away, and the prior alone cannot tell which it is (it places both near the 1PL's a = 1
    answer). The answers can: the fall of the right answers across the probes shows the slope, so the
    answer-weighted placement lands on b = 2 and its misfit part all but vanishes."""
    from dataclasses import replace

    ann = replace(_annotator(None, FOUR_BELOW, 0.0), misfit=0.5)
    trials, correct, start = _answers_below(slope, 2000)
    prior_b, prior_var, _ = ann._unlean(start, trials)
    b, var, _ = ann._unlean(start, trials, correct)
    # a flat item's b_a moves fast with a, so even a well-pinned slope leaves it some spread (0.12 at a = 0.4)
    assert abs(b - 2.0) < 0.03 and math.sqrt(var) < 0.15 and var < prior_var / 4
    if slope != 1.0:  # the prior alone stays off by most of the 1PL's own error (1.35 and 3.38)
        assert abs(prior_b - 2.0) > 0.5 and abs(prior_b - 2.0) > 20 * abs(b - 2.0)


def test_uncertain_probe_abilities_temper_what_the_answers_say_about_the_slope():
    """The same flat item (a = 0.4 at b = 2, 50 answers from each of four probes below it), placed through
    probes whose abilities are exact and through probes whose abilities are uncertain by 0.3 logits: the
    fall of the answers across the probes is then partly the probes' own error, so the answers move the
    placement less far from the prior's. (Its spread need not grow: b_a moves fastest with a where the
    slope is flattest, so a posterior sure of a flat slope can spread b more than a vaguer one.) With
    exact abilities, the likelihood is the binomial's (tempering by a share of 1 changes nothing)."""
    from dataclasses import replace

    n = 50
    trials, correct, start = _answers_below(0.4, n)
    placed = {}
    for se in (0.0, 0.3):
        ann = replace(_annotator(None, FOUR_BELOW, se), misfit=0.5)
        placed[se] = (ann._unlean(start, trials)[:2], ann._unlean(start, trials, correct)[:2])
    (prior_b, _), (exact_b, _) = placed[0.0]
    _, (loose_b, _) = placed[0.3]
    assert prior_b + 0.05 < loose_b < exact_b - 0.05  # the answers say flatter (higher), uncertain ones less firmly
    # by hand: with exact abilities the tempered likelihood is the binomial's, up to a constant per slope
    ann = replace(_annotator(None, FOUR_BELOW, 0.0), misfit=0.5)
    x = np.array([-1.0, 0.0, 1.0])
    nodes = np.array([1.6, 2.0, 2.4])
    names = sorted(FOUR_BELOW)  # the annotator's probe order
    nn = np.full(4, float(n))
    cc = np.array([float(correct[k]) for k in names])
    theta = np.array([FOUR_BELOW[k] for k in names])
    p = 1 / (1 + np.exp(-np.exp(0.5 * x)[:, None] * (theta[None, :] - nodes[:, None])))
    binomial = (cc * np.log(p) + (nn - cc) * np.log(1 - p)).sum(axis=1)
    assert np.allclose(ann._slope_log_lik(nodes, x, nn, cc), binomial - binomial.max())


def test_the_selection_counts_a_childs_own_misfit_but_not_the_shared_ability_error():
    """The posterior selection weighs each child's confirmed z by its own uncertainty: the sampling se and
    the misfit se (0.01 and 0.05: 0.051), not the ability se that children placed through the same probes
    share. Two children confirmed 0.0625 above the target: the one whose probes leaned is the less certain,
    so the prior (children of this parent and ask land on the target, sd 0.05) pulls it further toward the
    target, and it wins; an ability se alone changes nothing (the tie goes by id)."""
    from benchfill.search import Annotation
    from benchfill.search.loop import Child
    from benchfill.search.selection import select_posterior
    from benchfill.search.services import Verdict
    from benchfill.search.steering import Steering

    ann = _annotator(None, TRUE_ABILITY, 0.0)
    ok = Verdict(True, "", "toy")

    def child(name: str, z: float, **parts) -> Child:
        return Child(name, "p", "p", 1, {"id": name}, ok, Annotation(0.0, 0.1, z, 0.01, 96, **parts), ask=0.5,
                     parent_z=0.3)

    leaned = child("b", 0.5625, misfit_z_se=0.05)
    assert ann.resolution_or_se(leaned.annotation) == math.hypot(0.01, 0.05)
    assert select_posterior([child("a", 0.5625), leaned], 0.5, Steering(), ann) is leaned
    shared = child("b", 0.5625, ability_z_se=0.05)
    assert ann.resolution_or_se(shared.annotation) == 0.01
    assert select_posterior([child("a", 0.5625), shared], 0.5, Steering(), ann).item_id == "a"


def test_what_a_confirmation_can_reach_worked_by_hand():
    """``Annotator.outlook``: one probe at theta 0, exact, 8 trials (the cap: four budgets, 32 rollouts), span 6.
    An item at the probe: information 1/4 per answer, sampling variance 1/8, no lean. An item a logit above it:
    information e^-1 / (1 + e^-1)^2 per answer, and an item of slope a expects the same answers at b_a = 1/a,
    so the slope adds E[(1 - 1/a)^2] = 1 - 2 e^(s^2/2) + e^(2 s^2) at s = 0.5, which no rollout removes."""
    from dataclasses import replace

    ann = replace(_annotator(None, {"p": 0.0}, 0.0), misfit=0.5)
    at = ann.outlook(ann.to_z(0.0))
    assert at.rollouts == 32 and at.stop == "expected"  # the cap: 0.059 z is short of the 0.02 target
    assert math.isclose(at.z_se, math.sqrt(1 / 8) / 6) and at.misfit_z_se == 0.0 and at.ability_z_se == 0.0
    above = ann.outlook(ann.to_z(1.0))
    info = math.exp(-1) / (1 + math.exp(-1)) ** 2
    assert math.isclose(above.z_se, math.sqrt(1 / (32 * info)) / 6)
    m2 = 1 - 2 * math.exp(0.5**2 / 2) + math.exp(2 * 0.5**2)  # 0.3824
    assert math.isclose(above.misfit_z_se, math.sqrt(m2) / 6, rel_tol=1e-4)
    assert math.isclose(above.placement_z_se, math.hypot(above.z_se, above.misfit_z_se))


def test_a_gap_beyond_the_panels_strongest_probe_is_named_before_the_search():
    """Probes from -3 to 1 on a scale to 3: amid them a confirmation reaches the 0.02 target and the slope
    adds little; past the strongest, every probe leans the same way and the slope's part alone is wider
    than a 0.03 half-width. The run's warning names that gap, the nearest probe and the remedy, and says
    nothing of the gap amid the probes, nor of --confirm-se for the far one."""
    from dataclasses import replace

    from benchfill.run import narrow_gaps

    abilities = {n: a for n, a in TRUE_ABILITY.items() if a <= 1.0}
    ann = replace(_annotator(None, abilities, 0.0), misfit=0.5)
    amid, past = ann.outlook(0.4), ann.outlook(0.9)
    assert amid.z_se <= 0.02 and amid.misfit_z_se < 0.01
    assert past.misfit_z_se > 0.1 > 0.03

    def gap(left, right):
        return type("G", (), {"left": left, "right": right, "width": right - left})()

    assert narrow_gaps([gap(0.37, 0.43)], 0.02, ann) == []
    (line,) = narrow_gaps([gap(0.37, 0.43), gap(0.87, 0.93)], 0.02, ann)
    assert line.startswith("gap 1: beyond the probe panel's reach") and "no rollout removes (the item's unknown slope" in line
    strongest = max(abilities, key=abilities.get)
    assert f"nearest probe, {strongest}, sits at z {ann.to_z(1.0):.2f}" in line and "--confirm-se" not in line
    # What a probe at the gap would do is worked out, not assumed: the same outlook with one more probe there. Its
    # design still leans on the panel's probes below, so one probe cuts the slope's part to about a third, not under
    # this 0.03 half-width; under a 0.06 one it does, though the panel as it is leaves 0.166 there too.
    left = float(re.search(r"would bring what no rollout removes from [\d.]+ to ([\d.]+), still wider", line)[1])
    assert 0.03 < left < past.fixed_z_se / 2 and "would resolve it" not in line
    (line,) = narrow_gaps([gap(0.84, 0.96)], 0.02, ann)
    assert line.startswith("gap 0: beyond the probe panel's reach")
    assert f"would resolve it (what no rollout removes would fall to {left:.3f})" in line
    # without the annotator (or where the panel reaches), the rollout advice as before
    (line,) = narrow_gaps([gap(0.5, 0.52)], 0.02, ann)
    assert "--confirm-se 0.005" in line
    # Amid the probes, with their fitted abilities uncertain (se 0.3 logits): that part dominates, and no
    # probe model added near the gap removes it (mmlu-pro's gap 17, a probe right at it, was told to get one)
    shaky = replace(_annotator(None, abilities, 0.3), misfit=0.5)
    o = shaky.outlook(0.4)
    assert o.ability_z_se > o.misfit_z_se
    (line,) = narrow_gaps([gap(0.4 - o.ability_z_se / 2, 0.4 + o.ability_z_se / 2)], 0.02, shaky)
    assert line.startswith("gap 0: beyond the probe panel's reach")
    assert "most of it the probes' own ability error, which no added probe model removes" in line
    assert "would resolve it" not in line


def test_a_confirmation_past_the_panel_stops_once_the_slopes_part_dominates():
    """``ConfirmSettings.floor_share`` (off by default): past the strongest probe the item's unknown slope adds
    far more than the 0.02 z sampling target, so at 0.5 the confirmation stops once its sampling se is half that
    part (after one fixed budget), well before the cap; amid the probes the rule never fires, and the
    confirmation is the same as without it."""
    from dataclasses import replace

    abilities = {n: a for n, a in TRUE_ABILITY.items() if a <= 1.0}
    never = replace(_annotator(Panel({"far": 2.5, "amid": 0.0}), abilities, 0.0), misfit=0.5)
    assert never.confirmation.floor_share == 0.0
    ann = replace(never, confirmation=replace(never.confirmation, floor_share=0.5))
    cap = ann.confirmation.cap(ann.fixed_budget)
    far = asyncio.run(ann.confirm("far", {}, "far:c", 2.5))
    assert far.stop == "precise" and ann.fixed_budget <= far.rollouts < cap
    fixed = far.fixed_z_se
    assert math.isclose(fixed, math.hypot(far.ability_z_se, far.misfit_z_se))
    assert ann.confirmation.z_se < far.z_se <= 0.5 * fixed
    full = asyncio.run(never.confirm("far", {}, "far:c", 2.5))
    assert full.rollouts > far.rollouts
    # what it gives up: a placement se within 12% of its floor, against a little less with every rollout spent
    assert far.placement_z_se <= 1.12 * fixed * (1 + 1e-9) and full.placement_z_se < far.placement_z_se
    amid, amid0 = (asyncio.run(a.confirm("amid", {}, "amid:c", 0.0)) for a in (ann, never))
    assert (amid.rollouts, amid.z, amid.stop) == (amid0.rollouts, amid0.z, amid0.stop)
    # the outlook follows the same rule
    assert ann.outlook(ann.to_z(2.5)).rollouts < never.outlook(never.to_z(2.5)).rollouts


def test_a_chosen_item_beyond_the_panels_reach_is_flagged_wherever_it_appears():
    """``GapResult.mark_outside``: an item confirmed inside a gap of half-width 0.03 with 0.08 z of its se beyond
    any rollout is flagged ``beyond_reach`` (its flags reach the report, the review queue and the page), but not
    ``outside_gap``; one whose fixed part is narrower than the gap is flagged with neither."""
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, GapResult, Spend

    def result(misfit: float) -> GapResult:
        conf = Annotation(2.0, 0.1, 0.5, 0.02, 384, ability_z_se=0.01, misfit_z_se=misfit)
        child = Child("c", "p", "p", 1, {"id": "c"}, annotation=conf, confirmation=conf)
        return GapResult(0, 0.47, 0.53, 0.5, "benchfill", [child], child, 1, Spend())

    far = result(0.08)
    far.mark_outside()
    far.mark_outside()  # once only
    assert far.filled and far.chosen.flags == ["beyond_reach"]
    near = result(0.02)
    near.mark_outside()
    assert near.chosen.flags == []
    # the half-width is the bound, not the width: a fixed se of 0.041 (0.04 and 0.01) is past 0.03, within 0.06
    between = result(0.04)
    between.mark_outside()
    assert between.chosen.flags == ["beyond_reach"]


def test_a_flat_items_placement_moves_further_with_the_answers_noise_worked_by_hand():
    """One probe a logit above a 1PL estimate of 0: an item of slope a sits at b_a = 1 - 1/a, and its
    expected count's slope in b there is a times the 1PL's (the probe meets it at the same p), with the
    same binomial variance. So b_a moves 1/a times as far as the 1PL's b for the same noise, and their
    mean over the prior by E[1/a] = e^(s^2/2): the sampling variance is e^(s^2) times the 1PL's. s = 0.5:
    1.284025. With no allowance every a is 1: a factor of 1."""
    from dataclasses import replace

    ann = replace(_annotator(None, {"hi": 1.0, "lo": -1.0}, 0.0), misfit=0.5, own_sampling=True)
    _, _, factor = ann._unlean(0.0, {"hi": 8, "lo": 0})
    assert math.isclose(factor, math.exp(0.25), rel_tol=1e-6) and math.isclose(factor, 1.284025, rel_tol=1e-6)
    assert replace(ann, own_sampling=False)._unlean(0.0, {"hi": 8, "lo": 0})[2] == 1.0  # off: the 1PL's se
    flat = replace(ann, misfit=0.0)
    assert flat._sampling_factor(0.0, np.array([0.0, 8.0]), np.array([0.0]), np.array([0.0]), np.array([1.0])) == 1.0


@pytest.mark.parametrize(("slope", "default_rms"), [(0.4, 1.72), (2.2, 0.59)])
def test_the_placements_own_sampling_se_covers_flat_and_steep_items_alike(slope, default_rms):
    """Recovery: an item of slope a at b = 1.2 (between the two strongest of four probes, abilities 0 to 1.5),
    50 binomial answers from each, placed 500 times. With the placement's own sampling se (``own_sampling``,
    a what-if) the rms of (placed b - 1.2) / stated placement se is near 1 for a flat item and a steep one.
    Through the 1PL's sampling se (the default) it is 1.72 for a = 0.4 (a flat item's placement moves 1/a
    times as far with the noise) and 0.59 for a = 2.2: the same answers, the same placements."""
    from dataclasses import replace

    names = sorted(FOUR_BELOW)
    theta = np.array([FOUR_BELOW[k] for k in names])
    p = 1 / (1 + np.exp(-slope * (theta - 1.2)))
    answers = np.random.default_rng(11).binomial(50, p, size=(500, len(names)))
    for own, lo, hi in ((True, 0.8, 1.2), (False, default_rms - 0.02, default_rms + 0.02)):
        ann = replace(_annotator(None, FOUR_BELOW, 0.0), misfit=0.5, own_sampling=own)
        assert [q.name for q in ann.probes] == names
        r = []
        for row in answers:
            a = ann._estimate(dict(zip(names, map(int, row), strict=True)), dict.fromkeys(names, 50))
            if math.isfinite(a.difficulty) and "no_finite_mle" not in a.flags:
                r.append((a.difficulty - 1.2) / (a.placement_z_se * ann.span))
        rms = float(np.sqrt(np.mean(np.square(r))))
        assert len(r) > 450 and lo < rms < hi, (own, rms)


def test_an_item_placed_on_a_gaps_edge_does_not_fill_it_and_one_on_the_axis_end_is_in_range():
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child, GapResult, Spend
    from benchfill.search.selection import in_range

    def child(z: float) -> Child:
        a = Annotation(2.0, 0.1, z, 0.02, 384)
        return Child("c", "p", "p", 1, {"id": "c"}, annotation=a, confirmation=a)

    def result(z: float) -> GapResult:
        c = child(z)
        return GapResult(0, 0.47, 0.53, 0.5, "benchfill", [c], c, 1, Spend())

    assert not result(0.47).filled and not result(0.53).filled and result(0.4701).filled
    # [0, 1] closed: an item on the end splits no gap wider, and stays a candidate
    ends = [child(0.0), child(1.0), child(1.0001), child(-0.0001)]
    assert in_range(ends) == ends[:2]


def test_a_gap_narrower_than_the_probes_own_offsets_allow_asks_for_more_probes_not_one_near_it():
    """With an allowance of 3 logits for each probe's own offset on an item, a probe right at the item still
    leaves 3 logits, 0.5 z on a scale of 6: worked by hand, one probe's share is 1, four equally informative
    ones' 1/4 each (sqrt(sum w^2) = 1/2). Against a half-width of 0.05 z that part dominates, so the warning
    names it and says how many probes as informative would bring it to the half-width, (0.5 / 0.05)^2 = 100
    for one; it does not send the user for one probe near the gap, which would only swap one offset for another."""
    from dataclasses import replace

    from benchfill.run import narrow_gaps

    def gap(left, right):
        return type("G", (), {"left": left, "right": right, "width": right - left})()

    one = replace(_annotator(None, {"p": 0.0}, 0.0), pair=3.0)
    o = one.outlook(0.5)
    assert math.isclose(one.pair_z_se(o), 0.5) and math.isclose(o.misfit_z_se, 0.5)
    four = replace(_annotator(None, {f"p{j}": 0.0 for j in range(4)}, 0.0), pair=3.0)
    o4 = four.outlook(0.5)
    assert len({r["trials"] for r in o4.results}) == 1 and len(o4.results) == 4  # equal shares
    assert math.isclose(four.pair_z_se(o4), 0.25)
    assert replace(four, pair=0.0).pair_z_se(o4) == 0.0
    (line,) = narrow_gaps([gap(0.45, 0.55)], 0.02, one)
    assert line.startswith("gap 0: beyond the probe panel's reach")
    assert "the probes' own offsets on it 0.500" in line and "the item's unknown slope 0.000" in line
    assert "this panel's 1.0 effective probes leave 0.500, and it would take about 100 as informative" in line
    assert "would resolve it" not in line and "--confirm-se" not in line
    (line,) = narrow_gaps([gap(0.45, 0.55)], 0.02, four)
    assert "this panel's 4.0 effective probes leave 0.250, and it would take about 100 as informative" in line
    # without the allowance, the same panel reaches the gap: no warning of reach
    assert not any("reach" in w for w in narrow_gaps([gap(0.45, 0.55)], 0.02, replace(one, pair=0.0)))


def test_a_design_with_no_information_at_the_estimate_chooses_probes_without_a_numpy_warning():
    """Every probe hundreds of logits from b: no answer carries information there (it underflows to 0), the
    design has no shares, and the probe choice went on through a 0 / 0 that numpy warned of on the user's
    terminal (a run on a tiny benchmark of sums). Now the variance is infinite, the choice falls to the names."""
    import warnings
    from dataclasses import replace

    ann = replace(_annotator(None, {"a": 0.0, "b": 1.0}, 0.2), misfit=0.5)
    assert ann._infos(900.0) == {"a": 0.0, "b": 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [p.name for p in ann._next_probes(900.0, 2, 4, {"a": 4, "b": 0})] == ["a", "b"]


def test_a_placement_past_every_probes_reach_keeps_the_slopes_spread_in_its_se():
    """A flat child whose answers do not rise along the probes (the strongest solved all 8, one a logit below
    it 1 of 8; a confirmation in bench/bench_intervals.py, aime25): the answers' posterior over its slope
    puts its weight on the flattest slopes, whose b_a lies tens of logits below every probe, so the placement
    runs there and no probe carries information at it. Its slopes' spread must still be stated: dropped with
    the shares it came with, the placement claimed 0.03 z (the 1PL's sampling se alone) 9.7 z off."""
    from dataclasses import replace

    from benchfill.irt.online import online_calibrate

    ability = {"p01": -3.71, "p02": -2.60, "p03": -1.48, "p04": -1.02, "p07": 0.58, "p09": 0.64, "p10": 1.27,
               "p11": 0.58, "p12": 3.23}
    answers = {"p01": (160, 160), "p02": (167, 168), "p03": (8, 8), "p04": (2, 8), "p07": (5, 8), "p09": (5, 8),
               "p10": (1, 8), "p11": (8, 8), "p12": (8, 8)}
    ann = replace(Annotator(None, [Probe(n, a, 8, 0.2) for n, a in ability.items()], chance=0.0, b_min=-3.0,
                            b_max=5.0), misfit=1.0862)
    correct = {k: c for k, (c, _) in answers.items()}
    trials = {k: n for k, (_, n) in answers.items()}
    placed = ann._estimate(correct, trials)
    assert placed.difficulty < -60 and set(ann._infos(placed.difficulty).values()) == {0.0}
    _, spread, _ = ann._unlean(online_calibrate(
        np.array([float(correct[k]) for k in ability]), np.array([float(trials[k]) for k in ability]),
        np.array(list(ability.values()))).difficulty, trials, correct)
    assert placed.z_se < 0.05  # the sampling part, the 1PL's at its own estimate
    assert math.isclose(placed.misfit_z_se, ann.z_of_logits(math.sqrt(spread)), rel_tol=1e-9)
    # the 1PL's own estimate (-5.8 logits, z -0.35) lies within two of the stated se of the placement
    assert placed.placement_z_se > 4.0 and abs(placed.z - ann.to_z(-5.85)) < 2 * placed.placement_z_se


def test_each_slope_nodes_b_is_the_root_of_its_count_even_on_a_near_step_curve():
    """b_a at every node is where an item of slope a expects the answers the 1PL expects at b, to 1e-9 logits
    (brentq), steep nodes included: there the expected count is a near-step in b_a and plain Newton overshoots
    from one side of it to the other (30 steps clipped at 2 logits, to s54, left a node here 1.5 logits off). A
    design with no answers keeps its start."""
    from dataclasses import replace

    from scipy.optimize import brentq
    from scipy.special import expit

    from benchfill.search import annotate

    theta = {"lo": -1.0, "at": 0.0, "hi": 1.0, "far": 3.0}
    ann = replace(_annotator(None, theta, 0.0), misfit=0.6)
    names = [p.name for p in ann.probes]
    designs = np.array([[8.0, 0.0, 8.0, 16.0], [0.0, 16.0, 0.0, 8.0], [4.0, 4.0, 4.0, 4.0], [0.0, 0.0, 0.0, 0.0]])
    th = np.array([theta[k] for k in names])
    for b in (-2.5, 0.3, 0.9, 2.2):
        for x in (annotate._GH_X, annotate._POST_X):
            got = ann._slopes_of(b, designs, np.full((len(designs), len(names)), 0.25), x)
            for row, n in enumerate(designs[:3]):
                want = n @ expit(th - b)
                for node, a in enumerate(np.exp(0.6 * x)):
                    root = brentq(lambda bb, a=a, n=n, want=want: n @ expit(a * (th - bb)) - want, -60, 60,
                                  xtol=1e-12)
                    assert abs(got[row, node] - root) < 1e-9, (b, row, a, got[row, node], root)
            assert np.allclose(got[3], th.mean() + (b - th.mean()) / np.exp(0.6 * x))  # no answers: the start
