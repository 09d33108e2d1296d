"""The probe panel's ability error in the annotator: worked by hand, and recovered against a panel
whose fitted abilities are off by a known spread.

An item is placed through the probes' fitted abilities, so it inherits their errors: no number of
rollouts on the item removes them, only spreading the rollouts over several probes averages them
down. The annotator's standard errors must say so, and its choice of probes must act on it.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

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
    """With log a ~ N(0, s^2) the 1PL misplaces an item by (1 - a) times the probes' information-weighted
    lean from it: E[(1 - a)^2] = 1 - 2 e^(s^2/2) + e^(2 s^2) times the lean squared; balanced probes cancel."""
    from dataclasses import replace

    ann = replace(_annotator(None, {"lo": -1.0, "hi": 1.0, "at": 0.0}, 0.0), misfit=0.35)
    m2 = 1 - 2 * math.exp(0.35**2 / 2) + math.exp(2 * 0.35**2)  # 0.1512
    assert math.isclose(m2, 0.15117, rel_tol=1e-3)
    _, inherited = ann._variance(0.0, {"hi": 8})  # one probe a logit above: the lean is 1
    assert math.isclose(inherited, m2)
    _, inherited = ann._variance(0.0, {"lo": 8, "hi": 8})  # one each side, equal information: no lean
    assert math.isclose(inherited, 0.0, abs_tol=1e-15)
    _, inherited = ann._variance(0.0, {"hi": 8, "at": 8})  # shares I_hi / (I_hi + 2) at lean 1
    i_hi = 8 * math.exp(-1) / (1 + math.exp(-1)) ** 2
    assert math.isclose(inherited, m2 * (i_hi / (i_hi + 2)) ** 2)
    # The next probe after "hi": "at" (sampling 1/(I_hi + 2) = 0.280, misfit 0.151 * 0.44^2 = 0.029) beats
    # "lo" (1/(2 I_hi) = 0.318, no lean) at s = 0.35; at s = 0.8 (E[(1-a)^2] = 1.84) balancing wins.
    assert [p.name for p in ann._next_probes(0.0, 1, 8, {"hi": 8})] == ["at"]
    assert [p.name for p in replace(ann, misfit=0.8)._next_probes(0.0, 1, 8, {"hi": 8})] == ["lo"]


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
