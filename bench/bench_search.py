"""BenchFill against the budget-matched baseline and the oracle, swept over the simulated rewriter.

The search's claim rests on a rewriter that is no kinder than a real LLM, so this sweeps it
(docs/sim-rewriter.md): the three presets (kind, realistic, hostile) on every difficulty set, and a
grid over the rewriter's bias (drift, logits), mean response share, noise, and references on/off on
the quick sets. Every cell runs several seeds; each seed builds its world, fits the benchmark from the
probe panel's rollouts, picks the top-3 gaps, and runs, paired on that world:

  benchfill          the defaults (adaptive annotation, confirmation; target steering off since s55)
  benchfill/steer    the defaults with target steering on (--steering on)
  benchfill/paper    the paper's protocol: no steering, the child with the least annotated deviation
  benchfill/prescreen  the defaults + the text pre-screen (benchfill/search/prescreen.py): a predictor
                     trained on the benchmark's items and fitted z skips children whose text puts them
                     far outside the gap; with --text-signal S the world's texts carry a difficulty
                     signal of strength S (benchfill/sim/signal.py). Where the screen switches itself
                     off (no usable signal), its run is the defaults' run, reused.
  baseline           best-of-N uniform parents, no references, on the rounds benchfill used per gap
  oracle             the midpoint of the then-largest gap, three times (an upper bound, no search)

"true" figures place the world's latent difficulty of each chosen item on the run's fitted scale
(benchfill.sim.truth, the same map as the run report), next to the benchmark items' fitted z.
The search talks to the world in-process (benchfill.sim.direct: the product's prompts and parsers,
the world's roles, no HTTP), which is what makes hundreds of cells affordable on two cores.

    python bench/bench_search.py --quick    # presets on the quick sets, a reduced grid (< 15 min)
    python bench/bench_search.py            # presets on all sets, the full grid on the quick sets
    python bench/bench_search.py --quick --no-grid --text-signal 0.8   # the pre-screen's saving
    python bench/bench_search.py --jobs 16 --seeds 10    # on 16 processes (default: every CPU it may use)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _common import shared_data  # noqa: E402  (../shared/data, or $BENCHFILL_SHARED_DATA)

from benchfill.cli.argtypes import misfit_sd  # noqa: E402
from benchfill.cli.argtypes import pair_sd as pair_sd_arg  # noqa: E402
from benchfill.errors import ConfigError  # noqa: E402
from benchfill.run import RunOptions  # noqa: E402
from benchfill.search import SearchSettings  # noqa: E402
from benchfill.sim.rewriter import parse_knobs, rewriter_model  # noqa: E402
from benchfill.sim.world import DISCRIMINATION_SD, PAIR_CURVES, PAIR_SD_MAX  # noqa: E402
from benchfill.sim.world import PAIR_CURVE as WORLD_PAIR_CURVE  # noqa: E402
from benchfill.sim.world import PAIR_SD as WORLD_PAIR_SD  # noqa: E402

SETS = ("demo", "aime25", "humaneval", "mbpp", "livecodebench-codegen", "cruxeval-output", "chembench")
QUICK_SETS = ("demo", "aime25", "humaneval")
STRATEGIES = ("benchfill", "benchfill/steer", "benchfill/paper", "benchfill/prescreen", "baseline", "oracle")
# The defaults' own steering (SearchSettings), so that "benchfill" stays what a user runs if the default moves.
DEFAULT_STEERING = SearchSettings().steering
K = 3
FAR = 0.1  # z: "far outside the gap", about the sd of a text prediction honest against children
# The grid around the realistic preset: drift (the bias references cannot cancel), share, noise, references.
GRID = {"drift": (-1.0, 0.0, 1.0), "share": (0.25, 0.6), "noise": (0.4, 1.0), "anchor": (0.5, 0.0)}
QUICK_GRID = {"drift": (-1.0, 1.0), "share": (0.25,), "noise": (1.0,), "anchor": (0.5, 0.0)}


def load_set(name: str, max_items: int, seed: int):
    """A Benchmark with items (real or invented) and its real response matrix, subsampled."""
    from benchfill.benchmarks import Benchmark, BenchmarkSpec, get_benchmark
    from benchfill.data import read_responses

    if name == "demo":
        return get_benchmark("demo"), "built-in demo (48 items)"
    d = shared_data() / name
    math_spec = dict(text_field="problem", answer_field="answer", evaluator="math", solver_prompt="math")
    if (d / "items.jsonl").is_file() and name.startswith("aime"):
        bench = get_benchmark(name, shared_data())
        matrix = read_responses(d / "responses.csv", items=bench.items)
        kept = set(matrix.item_ids)
        items = [it for it in bench.items if it["id"] in kept]
        note = f"real texts, {len(items)} items with responses"
    else:
        matrix = read_responses(d / "responses.csv")
        items = invent_items(matrix.item_ids, seed)
        note = f"invented demo-style texts, {matrix.n_items} items"
    if matrix.n_items > max_items:
        rng = np.random.default_rng([seed, len(name)])
        idx = np.sort(rng.choice(matrix.n_items, size=max_items, replace=False))
        matrix = matrix.select_items(idx)
        keep = set(matrix.item_ids)
        items = [it for it in items if it["id"] in keep]
        note += f", subsampled to {max_items}"
    spec = BenchmarkSpec(name=f"sim-{name}", **math_spec, source=f"fit of {d}/responses.csv")
    return Benchmark(spec=spec, items_path=None, _items=items, matrix=matrix), note


def invent_items(item_ids, seed: int) -> list[dict]:
    """Demo-style integer-answer problems; the world's truth, not the text, sets their difficulty."""
    from benchfill.demo import TEMPLATES

    rng = np.random.default_rng([seed, 0xBE7C])
    family = [t for fam in TEMPLATES for t in fam]
    out, seen = [], set()
    for i in item_ids:
        while True:
            text, answer = family[int(rng.integers(len(family)))](rng)
            if text not in seen:
                break
        seen.add(text)
        out.append({"id": i, "problem": text, "answer": str(answer)})
    return out


@dataclass
class Outcome:
    """One strategy on one (cell, set, seed)."""

    red_true: float
    red_conf: float
    red_ann: float
    dev_true: float
    rollouts: int  # annotation + confirmation
    calls: int  # rewriter + judge
    filled: int  # gaps whose chosen item's true z lies inside the gap
    steer_shift: float = 0.0
    prescreened: int = 0  # children the pre-screen kept from annotation
    false_skips: int = 0  # ... of which the true z lay inside the gap
    screen_on: bool = False  # benchfill/prescreen's: did the pre-screen find a usable signal (else its run is the defaults')
    filled_confirmed: int = 0  # gaps whose chosen item's confirmed z lies inside (the report's "filled")
    conf_err: float = 0.0  # mean |confirmed z - true z| of the chosen items: the measurement's own error
    conf_r: list = field(default_factory=list)  # (confirmed z - true z) / its placement se, per chosen item
    conf_valid: list = field(default_factory=list)  # ... and whether that item's stated answer is right
    # What any pre-screen could save at most: annotation rollouts on children after the first round (the
    # screen's warm-up) whose true z lies outside their gap, and of those, more than FAR z outside it.
    outside_rollouts: int = 0
    far_rollouts: int = 0
    # Where the share of the oracle goes (docs/sim-rewriter.md): the true top-3 reduction with an item exactly on
    # each gap's target (what the plan of one item per top-3 gap can reach), and with an item whose confirmed z is
    # exactly the target, so that its true z sits off it by the measurement's own error (confirmed z - true z of
    # this seed's chosen items, every assignment of them to the gaps averaged): what a search that always found
    # such a child would reach with this annotator. nan where no item was chosen.
    red_plan: float = float("nan")
    red_meas: float = float("nan")
    dev_conf: float = float("nan")  # mean |confirmed z - target| of the chosen items: the search's own slack
    # Where the confirmations go: children confirmed, of them confirmed outside their gap, those cut short (their
    # answers ruled out the gap, or beating the child confirmed nearest the target), and the rollouts they took.
    confirmed: int = 0
    confirmed_outside: int = 0
    cut_short: int = 0
    confirm_rollouts: int = 0
    outside_truly_inside: int = 0  # children confirmed outside their gap whose true z lay inside it (set aside wrongly)
    # Mean half-width of the top-3 gaps: where it is near the measurement error (conf_err), an item confirmed on
    # the target lands outside its gap about as often as inside, which caps the share of the oracle.
    half_width: float = float("nan")
    # The chosen items' chance of lying inside their gap as fitted, by their confirmed z and its stated se
    # (GapResult.inside_probability, as the report gives it), summed over the gaps: beside ``filled``
    # (truly inside), it shows whether that chance is honest.
    p_inside: float = 0.0
    # Children on the range set aside because they would widen the top-3 sum in expectation (GapSearch.widens),
    # and gaps left open with such a child among their confirmed ones.
    widening: int = 0
    open_for_widening: int = 0
    # Confirmations that ran to the cap (ConfirmSettings.max_budgets) before their precision target.
    at_cap: int = 0
    # The panel's reach (Annotator.outlook): the placement se a confirmation can state at each top-3 target at
    # best, averaged, and the gaps where the part no rollout removes is wider than the half-width ("beyond
    # reach"); and what the strategy leaves with those gaps dropped: the true reduction of the chosen items of
    # the other gaps, their rollouts, and how many of them were confirmed inside.
    reach_se: float = float("nan")
    beyond_reach: int = 0
    red_reach: float = 0.0
    rollouts_reach: int = 0
    filled_reach: int = 0
    # The order screen's spot checks at the ends of the probe axis (search/screen.py): probe rollouts too, but
    # not in ``rollouts`` (annotation and confirmation), the figure the rollout bar has been read on
    screen_rollouts: int = 0
    # The true top-3 reduction by the world's own difficulties: the original items at their latent b too, not at
    # their fitted places, on the originals' own min-max scale (benchfill.sim.truth.world_truth, the report's
    # line). The "true" figures above keep the originals where the fit put them, as the gaps were measured; this
    # counts the originals' fit error, which moves the gaps' edges, as well. The oracle's items are the latent
    # b that the fit would place exactly on its targets (TrueScale, inverted).
    red_world: float = float("nan")
    # Of the chosen items whose gap has an original item at each edge: how many, the chance each lies between
    # those two items with their fit error counted (coverage.inside_chance, the report's between_edges_probability),
    # summed, and how many truly do by the world's own difficulties (the report's world line): whether that
    # chance is honest where the fitted one (p_inside, against the gap as fitted) is not asked to be.
    n_between: int = 0
    p_between: float = 0.0
    world_between: int = 0
    # |true z - target| of each chosen item alone: ``dev_true`` counts a gap left open at its half-width, less than
    # a chosen item's typical deviation where placements are coarse (the offsets' world), so there a strategy that
    # leaves more gaps open looks nearer the target; this does not. ``gaps``: all gaps, open ones too.
    dev_chosen: list[float] = field(default_factory=list)
    gaps: int = 0
    # The same r of every child the search confirmed and did not choose, and whether its answer is right: the
    # measurement after the search's choice of whom to confirm (on the annotation, whose probes' offsets the
    # confirmation shares) but before its choice among them (bench_intervals.py sets them side by side).
    others_r: list = field(default_factory=list)
    others_valid: list = field(default_factory=list)
    # Where the children truly land (print_steering): valid children whose true z lies inside their gap, and per
    # gap the mean and sd of their true z less the target, with the gap's half-width; the learned response's
    # residual sd per gap (kept whether or not it steers), which counts what the annotation's se leaves out too.
    truly_inside: int = 0
    landing: list = field(default_factory=list)  # (mean, sd, half-width) per gap with two valid children or more
    resid_sd: list = field(default_factory=list)
    # What the response learns from (print_response): every child the judge passed, whether its stated answer is
    # right and its annotated z less its true z; per gap, the learned offset and the offset the right-keyed
    # children truly have about the learned share (true z - z_parent - share (ask - z_parent), their mean).
    judged: list = field(default_factory=list)  # (right key, annotated z - true z)
    lean: list = field(default_factory=list)  # (learned offset, right-keyed children's true offset)


@dataclass
class Cell:
    label: str  # the rewriter configuration
    set: str
    seeds: list[int] = field(default_factory=list)
    out: dict[str, list[Outcome]] = field(default_factory=dict)


@dataclass
class SimSetup:
    """A simulated benchmark set up as a run sets it up: the world, its in-process services, the
    panel's rollouts joined to the given matrix on anchor items, the MAP fit, the annotator's probes."""

    world: object
    services: object
    fit: object
    probes: list
    chance: float
    ids: list
    z: np.ndarray
    items: dict  # benchmark item id -> fields, as the world serves them
    z_of: dict  # benchmark item id -> fitted z
    misfit: float  # the annotator's misfit allowance (a run's --misfit, resolved as the run resolves "auto")
    link: tuple = (0.0, 1.0)  # the annotator's anchor link (--link), else the identity
    pair: float = 0.0  # the annotator's allowance for the (probe, item) offsets (--pair-allowance)

    def annotator(self):
        from benchfill.search.annotate import Annotator

        extra = {} if CONFIRMATION is None else {"confirmation": CONFIRMATION}
        if ADAPTIVE is not None:
            extra["adaptive"] = ADAPTIVE
        extra["misfit"] = self.misfit
        extra["slope_weights"] = not PRIOR_SLOPES
        extra["own_sampling"] = OWN_SAMPLING
        extra["link"] = tuple(self.link)
        extra["pair"] = self.pair
        return Annotator(self.services, self.probes, self.chance, self.fit.b_min, self.fit.b_max, "adaptive", **extra)


# The confirmation's precision target and cap (``--confirm-se``, ``--confirm-cap``): the measurement
# error of the chosen items, and so the share of the oracle's reduction any strategy can reach, follows it.
CONFIRMATION = None  # set in main(); None: the Annotator's default (tests import this module)
# ``--first-batch``: the adaptive annotation's first step (None: the Annotator's default).
ADAPTIVE = None
# ``--ability-blind``: the annotator as before it knew the probes' ability error (every probe exact).
ABILITY_BLIND = False
# ``--reach-probes``: what-if: the panel plus two probes whose abilities are the easiest and the hardest items'
# difficulties, so that no gap lies beyond its reach (the remedy a run's warning names).
REACH_PROBES = False
SPOT_ON = "all"  # what-if: the order screen's spot checks on "contenders" only (ScreenSettings.spot_on)
# ``--world-matrix``: what-if: the benchmark's published matrix redrawn from the world (same models, items and
# trials; each model at its fitted ability, each item at its latent b and the world's own slope), so that the
# published rows and the probe panel's rows answer by one model. The real rows follow the items' real slopes,
# the panel's rows the world's drawn ones, and a 1PL fit of the two together places the probes off the items.
WORLD_MATRIX = False
LINK = False  # ``--link``: children placed through the probes mapped onto the record by the originals (anchor_link)
OWN_SAMPLING = False  # ``--own-sampling``: the annotator states the placement's own sampling se, not the 1PL's
PRIOR_SLOPES = False  # ``--prior-slopes``: place items by the prior over slopes alone, as before the answers weighed them
# The world's sd of log item discrimination; None: the world's default; "like-set": each set's own, estimated
# from its matrix (irt/spread.py; the world's default for a set without one).
DISCRIMINATION = None
MISFIT = RunOptions.misfit  # the sd of log discrimination the annotator allows for (a run's --misfit, or "auto")
# ``--reply-habits``: the share of the world's rewriter and judge replies written in real models' habits (form only:
# a reader that reads every form right leaves every figure as it is; benchfill.sim.habits). None: the world's default.
REPLY_HABITS = None
# ``--prior``: the difficulties' prior of the benchmark's fit, the run's N(0, 1) ("normal") or the hierarchical one
# (what-if: a run has no such option; benchfill.irt.hierarchical)
PRIOR = "normal"
# ``--world-prior``: the prior of the fit the world's latent difficulties come from (real sets): a run's N(0, 1), or
# the hierarchical one, a world whose ends are as spread as that prior finds them (benchfill.sim.latent)
WORLD_PRIOR = "normal"
_PAIR_MEMO: dict = {}
PAIR_ALLOWANCE = "auto"  # the annotator's allowance for them (--pair-allowance: an sd, or "auto" as irt/pair.py estimates it)
PAIR_SD = WORLD_PAIR_SD  # the world's (probe, item) offsets, logits (--pair-sd; its default, 5)
PAIR_CURVE = WORLD_PAIR_CURVE  # how they meet the curve (--pair-curve; its default, "average")


def world_spread(bench) -> float | None:
    """The world's sd of log a for ``bench`` under DISCRIMINATION (None: the world's default)."""
    if DISCRIMINATION != "like-set":
        return DISCRIMINATION
    return None if bench.matrix is None else set_spread(bench)


_SPREADS: dict = {}


def set_spread(bench) -> float:
    """The spread of log discrimination in ``bench``'s own matrix (no floor), once per set and process."""
    from benchfill.irt.spread import discrimination_spread

    if bench.spec.name not in _SPREADS:
        _SPREADS[bench.spec.name] = discrimination_spread(bench.matrix).sd
    return _SPREADS[bench.spec.name]


# ``--accept-within F``: the share of a gap's half-width around the target within which a confirmed candidate
# ends the search before its runners-up are confirmed (SearchSettings.accept_within); None: the default.
ACCEPT_WITHIN = None

# ``--parents R``, ``--children C``, ``--first-parents R1``: what-ifs on the round's shape (SearchSettings.parents,
# .children and .first_parents; the paper's R and C), as keyword arguments; empty: the search's defaults.
SHAPE: dict = {}
# the benchfill strategies' selection rule (--selection; the paper's protocol and the baseline keep "closest")
SELECTION = "posterior"

# ``--take-widening``: what-if: take a confirmed child even where it would widen the top-k gap sum in
# expectation (GapSearch.top_k 0), as before that check.
WIDENS = True


# ``--panel NxK``: the probe panel, N probes answering K times each (the benchmark phase and the fixed protocol).
PANEL = (12, 8)


def world_sd_arg(text: str) -> float | str:
    """``--discrimination``: an sd of log a in [0, 2], or ``like-set``."""
    if text.strip().lower() == "like-set":
        return "like-set"
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not 0 <= v <= 2:
        raise argparse.ArgumentTypeError(f"expected like-set or an sd of log a in [0, 2], got {text!r}")
    return v


def print_spreads(sets) -> None:
    """Per set: the spread of log discrimination its own matrix shows, what the world draws, and what the
    annotator's allowance ``auto`` makes of the matrix without the panel's rows (a run adds them)."""
    from benchfill.irt.spread import ALLOWANCE_FLOOR

    rows = []
    for name in sets:
        bench = _BENCHES[name][0]
        own = None if bench.matrix is None else set_spread(bench)
        world = world_spread(bench)
        rows.append(f"{name} {'-' if own is None else f'{own:.2f}'} / "
                    f"{DISCRIMINATION_SD if world is None else round(world, 2)} / "
                    + (f"{max(own if own is not None else 0.0, ALLOWANCE_FLOOR):.2f}" if MISFIT == "auto" else f"{MISFIT}"))
    # redrawn, the matrix a run fits shows the world's spread, and ``auto`` makes its allowance of that
    redrawn = " (with --world-matrix the allowance is made of the redrawn matrix instead)" if WORLD_MATRIX else ""
    print("sd of log discrimination, the set's own matrix / the world's / the allowance: " + "; ".join(rows) + redrawn,
          flush=True)


def panel_arg(text: str) -> tuple[int, int]:
    """``--panel NxK`` as (N, K), for argparse (bench_panel_error.py takes it too)."""
    try:
        n_probes, n_trials = (int(x) for x in text.lower().split("x"))
        if n_probes < 2 or n_trials < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NxK with N >= 2 probes and K >= 1 trials, got {text!r}") from None
    return n_probes, n_trials


def sim_setup(bench, preset: str, knobs: dict, seed: int, text_signal: float = 0.0) -> SimSetup:
    from benchfill.engine.backend import _stack, anchor_items, panel_probes
    from benchfill.irt import fit as irt_fit
    from benchfill.sim import World
    from benchfill.sim.direct import WorldServices

    spec = bench.spec
    world = World.from_items(bench.items, evaluator=spec.evaluator, text_field=spec.text_field,
                             answer_field=spec.answer_field, matrix=bench.matrix, seed=seed,
                             rewriter=preset, rewriter_knobs=knobs, text_signal=text_signal, n_probes=PANEL[0],
                             **({} if REPLY_HABITS is None else {"reply_habits": REPLY_HABITS}),
                             **({} if WORLD_PRIOR == "normal" else {"latent_prior": WORLD_PRIOR}),
                             pair_sd=PAIR_SD, pair_curve=PAIR_CURVE,
                             **({} if world_spread(bench) is None else {"discrimination_sd": world_spread(bench)}))
    if REACH_PROBES:  # what-if: the panel plus a probe at the easiest and one at the hardest item's difficulty
        latent = [it.difficulty for it in world.items.values() if it.origin == "original"]
        world.abilities.update({"sim-probe-easiest": min(latent), "sim-probe-hardest": max(latent)})
    services = WorldServices(world, spec, seed)
    given = bench.matrix if bench.matrix is None or not WORLD_MATRIX else world_matrix(world, bench.matrix, seed)
    bench_items = world.original_items()  # the texts as the world serves them (with their signal, if any)
    # As a run does: the panel's rollouts join the given matrix on anchor items (all items without one).
    anchors = bench_items if given is None else anchor_items(given, bench_items)
    panel = services.panel_matrix(anchors, trials=PANEL[1])
    matrix = panel if given is None else _stack(given, panel)
    fit = irt_fit(matrix, engine="map", seed=seed, **({} if PRIOR == "normal" else {"prior": PRIOR}))
    probes = panel_probes(fit, [(p, PANEL[1]) for p in world.probes], ability_error=not ABILITY_BLIND)
    chance = float(np.median(fit.chance)) if len(fit.chance) else 0.0
    ids = list(fit.item_ids)
    z = np.asarray(fit.z, dtype=float)
    by_id = {it["id"]: it for it in bench_items}
    items = {i: by_id[i] for i in ids if i in by_id}
    z_of = {i: float(v) for i, v in zip(ids, z, strict=True) if i in by_id}
    if MISFIT == "auto":  # as a run resolves it (Backend._misfit): from the matrix the run fits
        from benchfill.irt.spread import misfit_allowance

        misfit = misfit_allowance(matrix, seed=seed)[0]
    else:
        misfit = float(MISFIT)
    if PAIR_ALLOWANCE == "auto":  # as a run resolves it: from the panel's own repeated answers (irt/pair.py)
        from benchfill.irt.pair import pair_sd

        # the probes answer alike whatever the rewriter: one estimate per set, seed and world
        key = (spec.name, seed, PAIR_SD, PAIR_CURVE, PRIOR, WORLD_PRIOR, WORLD_MATRIX, PANEL)
        if key not in _PAIR_MEMO:
            _PAIR_MEMO[key] = pair_sd(matrix, list(world.probes), seed=seed)[0]
        pair = _PAIR_MEMO[key]
    else:
        pair = float(PAIR_ALLOWANCE)
    link = (0.0, 1.0)
    if LINK:  # what-if: as a run would link its children, through the panel's answers to the originals
        from benchfill.search.annotate import Annotator, anchor_link

        plain = Annotator(services, probes, chance, fit.b_min, fit.b_max, "adaptive", misfit=misfit,
                          slope_weights=not PRIOR_SLOPES, own_sampling=OWN_SAMPLING)
        link, _ = anchor_link(plain, matrix, fit, spread=LINK != "offset")
    return SimSetup(world, services, fit, probes, chance, ids, z, items, z_of, misfit, link, pair)


def world_matrix(world, matrix, seed: int, trials: np.ndarray | None = None):
    """``matrix`` redrawn from ``world`` (--world-matrix): each of its models at the ability the world's own fit
    of it gives (benchfill.sim.latent), each item at its latent b, with the world's slope and guessing floor;
    the same trials (or ``trials``), and pairs never tried stay untried."""
    from benchfill.matrix import ResponseMatrix
    from benchfill.sim.latent import _fit_matrix

    theta = np.asarray(_fit_matrix(matrix).ability, dtype=float)
    items = [world.lookup(i) for i in matrix.item_ids]
    b = np.array([it.difficulty for it in items])
    a = np.array([world.discrimination(it) for it in items])
    g = np.array([it.chance for it in items])
    p = g + (1 - g) / (1 + np.exp(-a * (theta[:, None] - b[None, :])))
    n = np.asarray(matrix.trials if trials is None else trials, dtype=np.int64)
    correct = np.random.default_rng([seed, 0x3A7]).binomial(n, p)
    return ResponseMatrix(matrix.models, matrix.item_ids, correct.astype(np.int64), n.copy(),
                          np.asarray(matrix.chance, dtype=float).copy(), f"{matrix.source} (redrawn from the world)")


async def run_seed(bench, preset: str, knobs: dict, seed: int, rounds: int,
                   text_signal: float = 0.0, strategies: tuple[str, ...] = STRATEGIES) -> dict[str, Outcome]:
    """Every strategy of ``strategies`` on one seed's world. They run in the order of ``STRATEGIES`` on one
    world, each on its own annotator, so a strategy's figures do not depend on which come after it: a
    caller that needs only benchfill's (a test) names it alone. The baseline is matched to benchfill's
    rounds and rewrites, so it needs benchfill."""
    from dataclasses import replace

    from benchfill.search import screen

    if screen.DEFAULT_SCREEN.spot_on != SPOT_ON:  # --spot-on (in every process: workers start afresh)
        screen.DEFAULT_SCREEN = replace(screen.DEFAULT_SCREEN, spot_on=SPOT_ON)
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {', '.join(STRATEGIES)}")
    if "baseline" in strategies and "benchfill" not in strategies:
        raise ValueError("the baseline is matched to benchfill's spend: name benchfill too")
    from benchfill import coverage
    from benchfill.search import baseline_search, benchfill_search, oracle_fill
    from benchfill.search.loop import GapSearch
    from benchfill.search.prescreen import train_prescreen
    from benchfill.sim.truth import true_scale

    spec = bench.spec
    sim = sim_setup(bench, preset, knobs, seed, text_signal)
    world, services, fit, ids, z, items, z_of = sim.world, sim.services, sim.fit, sim.ids, sim.z, sim.items, sim.z_of
    gaps = coverage.gaps(z, k=K, item_ids=ids)
    before = coverage.top_k_gap_sum(z, K)
    scale = true_scale(world, fit)

    def truth(c) -> float:  # a child's true z, on the benchmark's fitted scale
        return scale.z(world.true_difficulty(str(c.item[spec.text_field])))

    # As a run with --prescreen on does: one predictor per run, on the benchmark's items and fitted z (only
    # when its strategy runs: training takes up to a second or so).
    screen = (train_prescreen(items, z_of, text_field=spec.text_field, seed=seed)
              if "benchfill/prescreen" in strategies else None)

    def red(zs: list[float]) -> float:
        return 1 - coverage.top_k_gap_sum(np.concatenate([z, zs]), K) / before if zs else 0.0

    latent = np.array([world.lookup(i).difficulty for i in ids], dtype=float)
    w_lo, w_span = float(latent.min()), float(np.ptp(latent))
    w_z = (latent - w_lo) / w_span
    w_before = coverage.top_k_gap_sum(w_z, K)

    def red_world(bs: list[float]) -> float:  # new items at latent b ``bs``, every item on the world's own scale
        if not len(bs):
            return 0.0
        return 1 - coverage.top_k_gap_sum(np.concatenate([w_z, (np.asarray(bs) - w_lo) / w_span]), K) / w_before

    async def strategy(label: str, rounds_matched=None, children_matched=None):
        ann = sim.annotator()
        steered = label == "benchfill/steer" or (label in ("benchfill", "benchfill/prescreen") and DEFAULT_STEERING)
        settings = SearchSettings(rounds=rounds, steering=steered,
                                  selection="closest" if label in ("benchfill/paper", "baseline") else SELECTION,
                                  **SHAPE, **({} if ACCEPT_WITHIN is None else {"accept_within": ACCEPT_WITHIN}))
        gs = [GapSearch(g, gap.left, gap.right, items, z_of, screen if label == "benchfill/prescreen" else None,
                        top_k=K if WIDENS else 0)
              for g, gap in enumerate(gaps)]
        async def confirm(c, band=None, resume=None):
            return await ann.confirm(c.item_id, c.item, f"confirm:s{seed}:{c.item_id}", c.annotation.difficulty,
                                     band=band, resume=resume, annotated=c.annotation.probe_names)

        if label == "baseline":
            res = await asyncio.gather(*(baseline_search(s, services, ann, settings, seed=seed,
                                                         rounds_matched=rounds_matched[s.gap_index],
                                                         children_matched=children_matched[s.gap_index])
                                         for s in gs))
        else:
            # The paper's protocol confirms only the chosen child, after the search, as the baseline.
            confirmer = None if label == "benchfill/paper" else confirm
            res = await asyncio.gather(*(benchfill_search(s, services, ann, settings, seed=seed, confirm=confirmer)
                                         for s in gs))
        for r in res:  # confirmation, as a run does it: fresh rollouts on the chosen child
            if r.chosen is not None and r.chosen.confirmation is None:
                c = r.chosen
                c.confirmation = await ann.confirm(c.item_id, c.item, f"confirm:s{seed}:{c.item_id}",
                                                   c.annotation.difficulty, annotated=c.annotation.probe_names)
                r.spend.rollouts += c.confirmation.rollouts
        return res

    span = float(fit.b_max - fit.b_min)
    edge_se = dict(zip(fit.item_ids, np.asarray(fit.difficulty_se, dtype=float) / span, strict=True))

    def between(res) -> tuple[int, float, int]:  # (gaps, expected between their edge items, truly between)
        n, p, truly = 0, 0.0, 0
        for r in res:
            g, c = gaps[r.gap_index], r.chosen
            if c is None or r.placed is None or g.left_item is None or g.right_item is None:
                continue
            z_placed, se_placed, _ = r.placed
            n += 1
            p += coverage.inside_chance(z_placed, se_placed, r.left, r.right, edge_se[g.left_item],
                                        edge_se[g.right_item])
            ends = sorted(world.lookup(e).difficulty for e in (g.left_item, g.right_item))
            truly += ends[0] < world.true_difficulty(str(c.item[spec.text_field])) < ends[1]
        return n, p, truly

    out: dict[str, Outcome] = {}
    reach = [sim.annotator().outlook((g.left + g.right) / 2) for g in gaps]
    beyond = [o.fixed_z_se >= g.width / 2 for o, g in zip(reach, gaps, strict=True)]  # as a run's warning has it
    results = {s: await strategy(s) for s in ("benchfill", "benchfill/steer", "benchfill/paper") if s in strategies}
    if "benchfill/prescreen" in strategies:
        if screen.active:
            results["benchfill/prescreen"] = await strategy("benchfill/prescreen")
        else:  # a screen that found no usable signal never fires: its run would repeat the defaults' exactly
            results["benchfill/prescreen"] = results.get("benchfill") or await strategy("benchfill")
    if "baseline" in strategies:
        matched = {r.gap_index: r.rounds_used for r in results["benchfill"]}
        # the same number of rewrites as benchfill asked for on each gap (its rounds may vary in width)
        asked = {r.gap_index: r.spend.rewriter_calls for r in results["benchfill"]}
        results["baseline"] = await strategy("baseline", matched, asked)
    for label, res in results.items():
        chosen = [(r, r.chosen) for r in res if r.chosen is not None]
        true_z = [truth(c) for _, c in chosen]
        conf_z = [c.confirmation.z for _, c in chosen]
        ann_z = [c.annotation.z for _, c in chosen]
        devs = [abs(t - r.target_z) for (r, _), t in zip(chosen, true_z, strict=True)]
        dev_chosen = list(devs)
        # a gap with no valid child: the worst a gap can do is to stay open, counted at half its width
        devs += [(r.right - r.left) / 2 for r in res if r.chosen is None]
        shifts = [r.steering["mean_shift"] for r in res if r.steering]
        skipped = [(r, c) for r in res for c in r.children if "prescreened" in c.flags]
        false = sum(r.left < truth(c) < r.right for r, c in skipped)
        miss = [(c.annotation.rollouts, max(r.left - t, t - r.right)) for r in res for c in r.children
                if c.annotation is not None and c.round > 1 for t in [truth(c)]]
        targets = [r.target_z for r in res]
        confirmed = [(r, c) for r in res for c in r.children if c.confirmation is not None]
        outside = [(r, c) for r, c in confirmed if not r.left < c.confirmation.z < r.right]
        others = [c for r, c in confirmed if c is not r.chosen and c.confirmation.placement_z_se > 0
                  and math.isfinite(c.confirmation.z)]
        red_meas = measurement_limited(red, targets, [c - t for c, t in zip(conf_z, true_z, strict=True)])
        # whether each annotated child's stated answer is right (the judge's verdict aside): once per child
        right_key = {id(c): world.is_valid(str(c.item[spec.text_field])) for r in res for c in r.children
                     if c.annotation is not None and c.item is not None}
        landed = {id(r): [truth(c) for c in r.children if right_key.get(id(c))] for r in res}
        lean = [(r.steering["offset"], float(np.mean(
                    [truth(c) - c.parent_z - r.steering["share"] * (c.ask - c.parent_z) for c in right])))
                for r in res if r.steering
                for right in [[c for c in r.children if c.valid and right_key[id(c)] and c.parent_z is not None
                               and c.ask is not None]] if right]
        out[label] = Outcome(red(true_z), red(conf_z), red(ann_z), float(np.mean(devs)),
                             sum(r.spend.rollouts for r in res), sum(r.spend.model_calls for r in res),
                             sum(r.left < t < r.right for (r, _), t in zip(chosen, true_z, strict=True)),
                             float(np.mean(shifts)) if shifts else 0.0, len(skipped), false,
                             label == "benchfill/prescreen" and screen.active,
                             sum(r.left < c.confirmation.z < r.right for r, c in chosen),
                             float(np.mean([abs(c - t) for c, t in zip(conf_z, true_z, strict=True)])) if chosen else 0.0,
                             [(c.confirmation.z - t) / c.confirmation.placement_z_se
                              for (_, c), t in zip(chosen, true_z, strict=True) if c.confirmation.placement_z_se > 0],
                             [world.is_valid(str(c.item[spec.text_field]))
                              for _, c in chosen if c.confirmation.placement_z_se > 0],
                             sum(n for n, d in miss if d > 0), sum(n for n, d in miss if d > FAR),
                             red(targets), red_meas,
                             float(np.mean([abs(c - r.target_z) for (r, _), c in zip(chosen, conf_z, strict=True)]))
                             if chosen else float("nan"),
                             len(confirmed), len(outside), sum(c.confirmation.stop == "outside" for _, c in confirmed),
                             sum(c.confirmation.rollouts for _, c in confirmed),
                             sum(r.left < truth(c) < r.right for r, c in outside),
                             float(np.mean([(r.right - r.left) / 2 for r in res])),
                             sum(r.inside_probability or 0.0 for r in res),
                             sum("widens_coverage" in c.flags for r in res for c in r.children),
                             sum(r.chosen is None and any("widens_coverage" in c.flags for c in r.children) for r in res),
                             at_cap=sum(c.confirmation.stop == "cap" for _, c in confirmed),
                             reach_se=float(np.mean([o.placement_z_se for o in reach])), beyond_reach=sum(beyond),
                             red_reach=red([t for (r, _), t in zip(chosen, true_z, strict=True)
                                            if not beyond[r.gap_index]]),
                             rollouts_reach=sum(r.spend.rollouts for r in res if not beyond[r.gap_index]),
                             filled_reach=sum(r.left < c.confirmation.z < r.right for r, c in chosen
                                              if not beyond[r.gap_index]),
                             screen_rollouts=sum(r.spend.screen_rollouts for r in res),
                             red_world=red_world([world.true_difficulty(str(c.item[spec.text_field]))
                                                  for _, c in chosen]),
                             dev_chosen=dev_chosen, gaps=len(res),
                             others_r=[(c.confirmation.z - truth(c)) / c.confirmation.placement_z_se for c in others],
                             others_valid=[world.is_valid(str(c.item[spec.text_field])) for c in others],
                             truly_inside=sum(r.left < t < r.right for r in res for t in landed[id(r)]),
                             landing=[(float(np.mean(d)), float(np.std(d, ddof=1)), (r.right - r.left) / 2)
                                      for r in res for d in [np.array(landed[id(r)]) - r.target_z] if d.size > 1],
                             resid_sd=[r.steering["residual_sd"] for r in res if r.steering],
                             judged=[(right_key[id(c)], c.annotation.z - truth(c)) for r in res for c in r.children
                                     if c.valid],
                             lean=lean,
                             **dict(zip(("n_between", "p_between", "world_between"), between(res), strict=True)))
    if "oracle" in strategies:
        placed = oracle_fill(z, K)
        r = red(placed)
        at = [(float(fit.b_min) + v * span - scale.intercept) / scale.slope for v in placed]
        out["oracle"] = Outcome(r, r, r, 0.0, 0, 0, K, red_world=red_world(at))
    return out


def measurement_limited(red, targets: list[float], errors: list[float]) -> float:
    """The reduction ``red`` gives items whose confirmed z is exactly each target, so that their true z sits
    at target - error: every assignment of the observed measurement errors (confirmed z - true z) to the
    targets, with repetition, averaged. nan without errors (no item was chosen)."""
    if not errors:
        return float("nan")
    return float(np.mean([red([t - e for t, e in zip(targets, combo, strict=True)])
                          for combo in itertools.product(errors, repeat=len(targets))]))


# The sets, loaded once in main() and handed to each worker process with the option globals above.
_BENCHES: dict = {}
# One BLAS thread per worker: N workers each with a BLAS pool as wide as the machine would oversubscribe
# its cores N-fold. The figures did not change with it (compared on a small sweep, one thread against two).
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cpus() -> int:
    """The CPUs this process may use: on this project's 2-core machine one process left --quick at
    925 s, past its 15-minute bound, and the figures do not depend on the number of processes."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _options() -> tuple:
    """The what-if globals set in main(), as the worker processes of --jobs receive them."""
    return CONFIRMATION, ABILITY_BLIND, PANEL, ACCEPT_WITHIN, ADAPTIVE, SHAPE, WIDENS, DISCRIMINATION, MISFIT, PRIOR_SLOPES, REACH_PROBES, WORLD_MATRIX, OWN_SAMPLING, SELECTION, SPOT_ON, LINK, REPLY_HABITS, PRIOR, WORLD_PRIOR, PAIR_SD, PAIR_CURVE, PAIR_ALLOWANCE


def _init_worker(benches: dict, options: tuple) -> None:
    global CONFIRMATION, ABILITY_BLIND, PANEL, ACCEPT_WITHIN, ADAPTIVE, SHAPE, WIDENS, DISCRIMINATION, MISFIT, PRIOR_SLOPES, REACH_PROBES, WORLD_MATRIX, OWN_SAMPLING, SELECTION, SPOT_ON, LINK, REPLY_HABITS, PRIOR, WORLD_PRIOR, PAIR_SD, PAIR_CURVE, PAIR_ALLOWANCE
    _BENCHES.update(benches)
    CONFIRMATION, ABILITY_BLIND, PANEL, ACCEPT_WITHIN, ADAPTIVE, SHAPE, WIDENS, DISCRIMINATION, MISFIT, PRIOR_SLOPES, REACH_PROBES, WORLD_MATRIX, OWN_SAMPLING, SELECTION, SPOT_ON, LINK, REPLY_HABITS, PRIOR, WORLD_PRIOR, PAIR_SD, PAIR_CURVE, PAIR_ALLOWANCE = options


def preset_jobs(presets: list[str], sets: list[str], knobs: dict[str, float] | None = None) -> list[tuple]:
    """The sweep's preset cells (label, preset, knobs, set); knobs overridden (``--rewriter-knobs``) are named in
    the label, so that such a cell is never read as the preset's own (the kind rollouts line reads "preset kind")."""
    knobs = dict(knobs or {})
    named = "".join(f" {k}={v:g}" for k, v in knobs.items())
    return [(f"preset {p}{named}", p, dict(knobs), s) for p in presets for s in sets]


def _seed_task(task: tuple) -> tuple[int, int, dict[str, Outcome]]:
    """One (cell, seed) of the sweep: every seed's world and run depend on the seed alone, so the
    figures do not depend on which process runs it or in what order (--jobs 1 and --jobs N agree)."""
    j, label, preset, knobs, set_name, seed, rounds, text_signal, strategies = task
    return j, seed, asyncio.run(run_seed(_BENCHES[set_name][0], preset, knobs, seed, rounds, text_signal,
                                         strategies))


def run_jobs(jobs: list[tuple], seeds: list[int], rounds: int, text_signal: float, workers: int,
             strategies: tuple[str, ...] = STRATEGIES) -> list[Cell]:
    """Every (cell, seed) of ``jobs``, on ``workers`` processes; the cells in the order of ``jobs``. Only
    ``strategies`` are run (``run_seed``); the tables print all of them, so ``main`` runs them all."""
    import concurrent.futures as cf
    import multiprocessing as mp

    cells = [Cell(label, s, list(seeds)) for label, _, _, s in jobs]
    tasks = [(j, label, preset, knobs, s, seed, rounds, text_signal, strategies)
             for j, (label, preset, knobs, s) in enumerate(jobs) for seed in seeds]
    got: dict[int, dict[int, dict[str, Outcome]]] = {}
    t0 = time.perf_counter()

    def collect(j: int, seed: int, out: dict[str, Outcome]) -> None:
        got.setdefault(j, {})[seed] = out
        if len(got[j]) == len(seeds):
            label, _, _, s = jobs[j]
            done = sum(len(v) == len(seeds) for v in got.values())
            print(f"[{done}/{len(jobs)}] {label} on {s} ({_BENCHES[s][1]}): {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)

    if workers <= 1:
        for t in tasks:
            collect(*_seed_task(t))
    else:
        # spawn, not fork: a worker starts a fresh interpreter, so the BLAS thread limit set here takes
        # effect at its numpy import (a forked child keeps the parent's BLAS pool)
        saved = {k: os.environ.get(k) for k in _THREAD_VARS}
        os.environ.update(dict.fromkeys(_THREAD_VARS, "1"))
        try:
            with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                                        initargs=(_BENCHES, _options())) as pool:
                for fut in cf.as_completed([pool.submit(_seed_task, t) for t in tasks]):
                    collect(*fut.result())
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    for j, cell in enumerate(cells):
        for seed in seeds:  # in seed order, whatever order they finished in
            for k, v in got[j][seed].items():
                cell.out.setdefault(k, []).append(v)
    return cells


# The width of the rewriter column: the longest label of the run, at least 34 (set by ``set_label_width``);
# a grid label ("drift+1 share0.25 noise0.4 refs off") or a preset with knobs named runs past 34.
_LABEL_W = 34


def set_label_width(cells: list[Cell]) -> None:
    global _LABEL_W
    _LABEL_W = max([34] + [len(c.label) + 2 for c in cells])


def _mean(vals) -> float:
    """The mean, nan of nothing (numpy warns on an empty mean)."""
    return float(np.mean(vals)) if len(vals) else float("nan")


def _ms(vals) -> str:
    a = np.asarray(vals, dtype=float)
    return f"{a.mean():.3f}±{a.std(ddof=1) if a.size > 1 else 0.0:.3f}"


def print_cells(cells: list[Cell]) -> None:
    head = (f"{'rewriter':<{_LABEL_W}}{'set':<22}{'strategy':<18}{'top3 red (true)':>16}{'/oracle':>8}{'true dev':>14}"
            f"{'conf red':>9}{'rollouts':>9}{'calls':>7}{'in gap':>7}{'shift':>7}")
    print(head)
    print("-" * len(head))
    for c in cells:
        orc = np.mean([o.red_true for o in c.out["oracle"]])
        for s in STRATEGIES:
            o = c.out[s]
            share = np.mean([x.red_true for x in o]) / orc if orc > 0 else float("nan")
            print(f"{c.label:<{_LABEL_W}}{c.set:<22}{s:<18}{_ms([x.red_true for x in o]):>16}{share:>8.2f}"
                  f"{_ms([x.dev_true for x in o]):>14}{np.mean([x.red_conf for x in o]):>9.3f}"
                  f"{np.mean([x.rollouts for x in o]):>9.0f}{np.mean([x.calls for x in o]):>7.0f}"
                  f"{np.mean([x.filled for x in o]):>7.2f}{np.mean([x.steer_shift for x in o]):>7.3f}")


def paired(cells: list[Cell], strategy: str = "benchfill",
           against: str = "baseline") -> list[tuple[Cell, np.ndarray, np.ndarray, bool]]:
    """Per cell: ``strategy`` - ``against``, paired by seed, for true deviation and true top-3 reduction."""
    rows = []
    for c in cells:
        pairs = list(zip(c.out[strategy], c.out[against], strict=True))
        d_dev = np.array([a.dev_true - b.dev_true for a, b in pairs])
        d_red = np.array([a.red_true - b.red_true for a, b in pairs])
        rows.append((c, d_dev, d_red, d_dev.mean() <= 0 and d_red.mean() >= 0))
    return rows


def _se(d: np.ndarray) -> float:
    """The standard error of a paired mean difference over seeds (0 with one seed)."""
    return float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0


def print_paired(cells: list[Cell]) -> None:
    print("\nbenchfill (defaults) - baseline, paired by seed: mean ± its standard error [min, max] over seeds; "
          "holds = deviation no larger and reduction no smaller on average")
    head = f"{'rewriter':<{_LABEL_W}}{'set':<22}{'d true dev':>34}{'d top3 red (true)':>34}{'calls bf/bl':>13}{'holds':>7}"
    print(head)
    print("-" * len(head))
    short = []  # cells that do not hold, with how many standard errors the worse half falls short by
    for c, d_dev, d_red, ok in paired(cells):
        se_dev, se_red = _se(d_dev), _se(d_red)
        calls = f"{np.mean([o.calls for o in c.out['benchfill']]):.0f}/{np.mean([o.calls for o in c.out['baseline']]):.0f}"
        print(f"{c.label:<{_LABEL_W}}{c.set:<22}{d_dev.mean():>+9.4f}±{se_dev:.4f} [{d_dev.min():+.3f},{d_dev.max():+.3f}]"
              f"{d_red.mean():>+9.4f}±{se_red:.4f} [{d_red.min():+.3f},{d_red.max():+.3f}]{calls:>13}"
              f"{'yes' if ok else 'NO':>7}")
        if not ok:
            short.append(max(d_dev.mean() / se_dev if d_dev.mean() > 0 and se_dev > 0 else 0.0,
                             -d_red.mean() / se_red if d_red.mean() < 0 and se_red > 0 else 0.0))
    n_ok = len(cells) - len(short)
    beyond = sum(t > 2 for t in short)
    print(f"holds in {n_ok} of {len(cells)} cells"
          + (f"; of the {len(short)} that do not, {beyond} fall short by more than two standard errors of the "
             f"paired mean (largest {max(short):.1f})" if short else ""))


def print_steering_against_none(cells: list[Cell]) -> None:
    """The per-cell rule for the other searches too, and steering against none, paired by seed per cell and
    then averaged over cells: what a choice of steering's default rests on (docs/sim-rewriter.md, s52, s54,
    s55). Printed as without steering less with it, as s54 chose the default by: since s55 that is benchfill
    (the defaults) less benchfill/steer."""
    if not cells or any(s not in cells[0].out for s in ("benchfill/steer", "benchfill/paper")):
        return
    print("\nSteering against none: cells holding the rule above against the baseline (matched on benchfill's calls) "
          "for benchfill (the defaults, no steering), with steering and the paper's protocol; then benchfill less "
          "benchfill/steer, per cell paired by seed, mean over cells ± its standard error (cells where it is lower / "
          "higher)")
    head = (f"{'rewriter':<{_LABEL_W}}{'cells':>6}{'holds bf/steer/paper':>24}"
            f"{'bf-steer true dev':>30}{'bf-steer top3 red':>30}")
    print(head)
    print("-" * len(head))
    groups = {label: [c for c in cells if c.label == label] for label in dict.fromkeys(c.label for c in cells)
              if label.startswith("preset")}
    grid = [c for c in cells if not c.label.startswith("preset")]
    if grid:
        groups["grid (every rewriter of it)"] = grid
    if len(groups) > 1:
        groups["all"] = cells
    for name, cs in groups.items():
        holds = "/".join(str(sum(ok for *_, ok in paired(cs, s))) for s in ("benchfill", "benchfill/steer",
                                                                            "benchfill/paper"))
        rows = paired(cs, "benchfill", "benchfill/steer")
        d_dev = np.array([d.mean() for _, d, _, _ in rows])
        d_red = np.array([r.mean() for _, _, r, _ in rows])
        print(f"{name:<{_LABEL_W}}{len(cs):>6}{holds:>24}"
              f"{d_dev.mean():>+12.4f}±{_se(d_dev):.4f} ({int((d_dev < 0).sum())} lower)"
              f"{d_red.mean():>+11.4f}±{_se(d_red):.4f} ({int((d_red > 0).sum())} higher)")


def print_prescreen(cells: list[Cell], text_signal: float) -> None:
    """benchfill/prescreen next to benchfill (the defaults), paired by seed on the same world."""
    print(f"\nbenchfill/prescreen vs benchfill, paired by seed; text signal {text_signal:g} "
          "(corr of the texts' latent score with true difficulty); mean [min, max] over seeds")
    head = (f"{'rewriter':<{_LABEL_W}}{'set':<22}{'screen on':>10}{'skipped':>8}{'false':>6}{'rollouts bf/ps':>16}"
            f"{'saved':>26}{'d true dev (ps-bf)':>27}{'in gap bf/ps':>13}")
    print(head)
    print("-" * len(head))
    tot_bf = tot_ps = 0.0
    d_all = []
    for c in cells:
        bf, ps = c.out["benchfill"], c.out["benchfill/prescreen"]
        saved = np.array([1 - p.rollouts / b.rollouts if b.rollouts else 0.0 for b, p in zip(bf, ps, strict=True)])
        d_dev = np.array([p.dev_true - b.dev_true for b, p in zip(bf, ps, strict=True)])
        tot_bf += sum(b.rollouts for b in bf)
        tot_ps += sum(p.rollouts for p in ps)
        d_all += list(d_dev)
        print(f"{c.label:<{_LABEL_W}}{c.set:<22}{sum(p.screen_on for p in ps):>6}/{len(ps):<3}"
              f"{np.mean([p.prescreened for p in ps]):>8.1f}{sum(p.false_skips for p in ps):>6}"
              f"{np.mean([b.rollouts for b in bf]):>8.0f}/{np.mean([p.rollouts for p in ps]):<7.0f}"
              f"{saved.mean():>+11.1%} [{saved.min():+.1%},{saved.max():+.1%}]"
              f"{d_dev.mean():>+11.4f} [{d_dev.min():+.3f},{d_dev.max():+.3f}]"
              f"{np.mean([b.filled for b in bf]):>7.2f}/{np.mean([p.filled for p in ps]):<5.2f}")
    outside = sum(o.outside_rollouts for c in cells for o in c.out["benchfill"])
    far = sum(o.far_rollouts for c in cells for o in c.out["benchfill"])
    if tot_bf:
        print(f"the ceiling (benchfill's own run): {outside / tot_bf:.1%} of its rollouts annotated children after "
              f"the first round whose true z lay outside their gap, {far / tot_bf:.1%} more than {FAR:g} z outside: "
              "what a screen that knew the truth could skip")
        d = np.array(d_all)
        print(f"all cells: rollouts saved {1 - tot_ps / tot_bf:.1%} ({tot_bf:.0f} -> {tot_ps:.0f}); "
              f"true deviation ps - bf {d.mean():+.4f} (se {_se(d):.4f},"
              f" {int(np.sum(d > 1e-12))} of {d.size} seeds worse, {int(np.sum(d < -1e-12))} better)")


def shortfall(c: Cell, strategy: str = "benchfill") -> tuple[float, float, float]:
    """(plan, measurement-limited, reached): shares of the oracle's mean true top-3 reduction in one cell."""
    orc = np.mean([o.red_true for o in c.out["oracle"]])
    o = c.out[strategy]
    meas = [x.red_meas for x in o if np.isfinite(x.red_meas)]
    return (np.mean([x.red_plan for x in o]) / orc, np.mean(meas) / orc if meas else float("nan"),
            np.mean([x.red_true for x in o]) / orc)


def print_shortfall(cells: list[Cell]) -> None:
    """Where benchfill's share of the oracle goes: the plan (one item per top-3 gap, on its target), the
    measurement (a child confirmed exactly on the target still sits off it by the confirmation's error),
    the search (the rest: how far from the target the chosen child's confirmed z is, and gaps left open)."""
    print("\nWhere benchfill's share of the oracle's true top-3 reduction goes (mean over seeds): plan = an item exactly "
          "on each top-3 gap's target; measured = an item confirmed exactly on it, off by this run's measurement error; "
          "reached = benchfill; half-width = the top-3 gaps' mean half-width, against |conf-true|, the chosen items' "
          "measurement error; reach se = the placement se a confirmation can state at the targets at best "
          "(Annotator.outlook), beyond = gaps per seed where the part of it no rollout removes is wider than the "
          "half-width")
    head = (f"{'rewriter':<{_LABEL_W}}{'set':<22}{'plan':>7}{'measured':>10}{'reached':>9}{'|conf-true|':>13}{'|conf-target|':>15}"
            f"{'half-width':>12}{'reach se':>10}{'beyond':>8}")
    print(head)
    print("-" * len(head))
    for c in cells:
        if not c.label.startswith("preset"):
            continue
        plan, meas, got = shortfall(c)
        o = c.out["benchfill"]
        print(f"{c.label:<{_LABEL_W}}{c.set:<22}{plan:>7.2f}{meas:>10.2f}{got:>9.2f}{np.mean([x.conf_err for x in o]):>13.4f}"
              f"{np.mean([x.dev_conf for x in o]):>15.4f}{np.mean([x.half_width for x in o]):>12.4f}"
              f"{np.mean([x.reach_se for x in o]):>10.4f}{np.mean([x.beyond_reach for x in o]):>8.2f}")
    print(f"{'rewriter':<{_LABEL_W}}{'plan':>16}{'measured':>16}{'reached':>16}   (mean over sets, min set)")
    for label in dict.fromkeys(c.label for c in cells):
        rows = np.array([shortfall(c) for c in cells if c.label == label])
        print(f"{label:<{_LABEL_W}}" + "".join(f"{f'{np.nanmean(v):.2f} ({np.nanmin(v):.2f})':>16}" for v in rows.T))
    print("benchfill with the gaps beyond the panel's reach dropped (what-if, same runs): gaps beyond reach, share of "
          "the oracle over all gaps and with those dropped (mean over sets), rollouts per filled gap both ways")
    for label in dict.fromkeys(c.label for c in cells):
        cs = [c for c in cells if c.label == label]
        outs = [o for c in cs for o in c.out["benchfill"]]
        share = [np.mean([o.red_true for o in c.out["benchfill"]]) / np.mean([o.red_true for o in c.out["oracle"]])
                 for c in cs]
        kept = [np.mean([o.red_reach for o in c.out["benchfill"]]) / np.mean([o.red_true for o in c.out["oracle"]])
                for c in cs]
        per = sum(o.rollouts for o in outs) / max(sum(o.filled_confirmed for o in outs), 1)
        per_kept = sum(o.rollouts_reach for o in outs) / max(sum(o.filled_reach for o in outs), 1)
        beyond = sum(o.beyond_reach for o in outs)
        # with every gap beyond reach nothing is left to score: a share or cost of 0 would read as measured
        some = beyond < K * len(outs)
        kept_s, per_kept_s = (f"{np.mean(kept):.2f}", f"{per_kept:.0f}") if some else ("-", "-")
        print(f"{label:<{_LABEL_W}}{beyond:>5} of {K * len(outs):<5}{np.mean(share):>8.2f}{kept_s:>8}{per:>9.0f}"
              f"{per_kept_s:>9}")


def print_summary(cells: list[Cell], rollouts_ref: float | None) -> None:
    strategies = ("benchfill", "benchfill/steer", "benchfill/paper", "baseline")
    print("\nMean true deviation from the target (mean over sets and seeds), by rewriter:")
    print(f"{'rewriter':<{_LABEL_W}}{'benchfill':>12}{'steer':>12}{'paper':>12}{'baseline':>12}")
    for label in dict.fromkeys(c.label for c in cells):
        cs = [c for c in cells if c.label == label]
        devs = [np.mean([o.dev_true for c in cs for o in c.out[s]]) for s in strategies]
        print(f"{label:<{_LABEL_W}}{''.join(f'{d:>12.4f}' for d in devs)}")
    print("\nThe same of the chosen items alone (a gap left open, counted above at its half-width, is left out), "
          "with how many gaps of all were left open:")
    print(f"{'rewriter':<{_LABEL_W}}{'benchfill':>16}{'steer':>16}{'paper':>16}{'baseline':>16}")
    for label in dict.fromkeys(c.label for c in cells):
        cs = [c for c in cells if c.label == label]
        row = ""
        for s in strategies:
            outs = [o for c in cs for o in c.out[s]]
            chosen = [d for o in outs for d in o.dev_chosen]
            gaps = sum(o.gaps for o in outs)
            row += f"{np.mean(chosen) if chosen else float('nan'):>9.4f} ({gaps - len(chosen):>3d})"
        print(f"{label:<{_LABEL_W}}{row}")
    print("\nMeasurement error of the chosen items (benchfill, over sets and seeds): mean |confirmed z - true z|, and "
          "the rms of (confirmed z - true z) / its stated placement se, 1 when that se is honest; of all gaps, those "
          "whose chosen item was confirmed inside (the report's 'filled'), the expected number inside (as fitted) by the "
          "confirmed z and its se (the report's inside probability, summed), and those truly inside; then, of the chosen "
          "items whose gap has an original item at each edge, the expected number lying between those two items with "
          "their own fit error counted (the report's between-edges chance, summed), and how many truly do by the "
          "world's own difficulties:")
    for label in dict.fromkeys(c.label for c in cells):
        outs = [o for c in cells if c.label == label for o in c.out["benchfill"]]
        z2 = [v * v for o in outs for v in o.conf_r]
        print(f"{label:<{_LABEL_W}}{np.mean([o.conf_err for o in outs]):>12.4f}{np.sqrt(np.mean(z2)) if z2 else float('nan'):>8.2f}"
              f"{sum(o.filled_confirmed for o in outs):>8d}{sum(o.p_inside for o in outs):>8.1f}"
              f"{sum(o.filled for o in outs):>8d} of {K * len(outs)}; between the edge items "
              f"{sum(o.p_between for o in outs):.1f} expected, {sum(o.world_between for o in outs)} by the world, of "
              f"{sum(o.n_between for o in outs)}")
    print("\nConfirmations (benchfill): per gap, children confirmed, of them confirmed outside their gap, confirmations "
          "cut short (their answers ruled out the gap, or beating a child confirmed nearer the target); the share of all "
          "rollouts spent confirming, annotation rollouts per gap; of all children confirmed outside their gap, those "
          "whose true z lay inside it; and children set aside because they would widen the top-3 sum in expectation "
          "(GapSearch.widens), with the gaps left open for it; confirmations that ran to the cap before their precision:")
    for label in dict.fromkeys(c.label for c in cells):
        outs = [o for c in cells if c.label == label for o in c.out["benchfill"]]
        gaps = K * len(outs)
        print(f"{label:<{_LABEL_W}}{sum(o.confirmed for o in outs) / gaps:>8.2f}{sum(o.confirmed_outside for o in outs) / gaps:>8.2f}"
              f"{sum(o.cut_short for o in outs) / gaps:>8.2f}"
              f"{sum(o.confirm_rollouts for o in outs) / max(sum(o.rollouts for o in outs), 1):>8.2f}"
              f"{sum(o.rollouts - o.confirm_rollouts for o in outs) / gaps:>8.0f}"
              f"{sum(o.outside_truly_inside for o in outs):>6} of {sum(o.confirmed_outside for o in outs)}"
              f"{sum(o.widening for o in outs):>6} set aside, {sum(o.open_for_widening for o in outs)} gaps left open"
              f"; {sum(o.at_cap for o in outs)} of {sum(o.confirmed for o in outs)} at the cap")
    print_steering(cells)
    print_response(cells)
    print("\nShare of the oracle's true top-3 reduction, mean over sets (min set), by rewriter:")
    print(f"{'rewriter':<{_LABEL_W}}{'benchfill':>20}{'steer':>20}{'paper':>20}{'baseline':>20}{'rollouts/gap':>14}"
          f"{'per filled':>12}{'filled':>8}")
    for label in dict.fromkeys(c.label for c in cells):
        cs = [c for c in cells if c.label == label]
        parts = []
        for s in ("benchfill", "benchfill/steer", "benchfill/paper", "baseline"):
            shares = [np.mean([o.red_true for o in c.out[s]]) / np.mean([o.red_true for o in c.out["oracle"]])
                      for c in cs]
            parts.append(f"{np.mean(shares):.2f} ({min(shares):.2f})")
        outs = [o for c in cs for o in c.out["benchfill"]]
        per_gap = np.mean([o.rollouts / K for o in outs])
        filled = sum(o.filled_confirmed for o in outs)
        per_filled = sum(o.rollouts for o in outs) / max(filled, 1)
        print(f"{label:<{_LABEL_W}}{''.join(f'{p:>20}' for p in parts)}{per_gap:>14.0f}{per_filled:>12.0f}"
              f"{filled / (K * len(outs)):>8.2f}")
    print("\nBy the world's own difficulties (the original items at their latent b too, so that their fit error, which "
          "moves the gaps' edges, counts): true top-3 reduction, mean over seeds, per set and over sets; beside it the "
          "same on the fitted scale, as above. No share is given: where the fitted gaps are not the world's, the "
          "oracle's own reduction here is near 0 or below, and a share of it says nothing")
    print(f"{'rewriter':<{_LABEL_W}}{'benchfill':>11}{'baseline':>10}{'oracle':>8}   fitted scale")
    for label in dict.fromkeys(c.label for c in cells):
        cs = [c for c in cells if c.label == label]
        mean = {s: np.mean([o.red_world for c in cs for o in c.out[s]]) for s in ("benchfill", "baseline", "oracle")}
        fit_mean = {s: np.mean([o.red_true for c in cs for o in c.out[s]]) for s in ("benchfill", "oracle")}
        print(f"{label:<{_LABEL_W}}{mean['benchfill']:>11.3f}{mean['baseline']:>10.3f}{mean['oracle']:>8.3f}"
              f"   benchfill {fit_mean['benchfill']:.3f}, oracle {fit_mean['oracle']:.3f}")
        for c in cs:  # per set: where the fitted gaps are the world's and where not
            w = {s: np.mean([o.red_world for o in c.out[s]]) for s in ("benchfill", "baseline", "oracle")}
            f = {s: np.mean([o.red_true for o in c.out[s]]) for s in ("benchfill", "oracle")}
            print(f"  {c.set:<{_LABEL_W - 2}}{w['benchfill']:>11.3f}{w['baseline']:>10.3f}{w['oracle']:>8.3f}"
                  f"   benchfill {f['benchfill']:.3f}, oracle {f['oracle']:.3f}")
    if rollouts_ref:
        for strategy in ("benchfill", "benchfill/paper"):
            kind = [o for c in cells if c.label == "preset kind" for o in c.out[strategy]]
            if kind:
                per_filled = sum(o.rollouts for o in kind) / max(sum(o.filled_confirmed for o in kind), 1)
                print(f"kind, {strategy}: {np.mean([o.rollouts / K for o in kind]):.0f} rollouts per gap, "
                      f"{per_filled:.0f} per filled gap (confirmed inside; filled {sum(o.filled_confirmed for o in kind)}"
                      f" of {K * len(kind)}) vs {rollouts_ref:.0f} per gap before this change, when every chosen item "
                      f"counted as filled (ratio {per_filled / rollouts_ref:.2f}; bar 1.20)")
                with_screen = sum(o.rollouts + o.screen_rollouts for o in kind) / max(
                    sum(o.filled_confirmed for o in kind), 1)
                print(f"kind, {strategy}: with the order screen's spot checks too (the figure above counts "
                      f"annotation and confirmation only): {with_screen:.0f} per filled gap "
                      f"(ratio {with_screen / rollouts_ref:.2f})")


def landing_gain(gaps: list[tuple[float, float, float]]) -> float:
    """How many times more children would land inside their gaps were they centred on each gap's middle than
    where they land, ``gaps`` giving per gap (mean, sd, half-width) of where they land about the target, each
    scattered N(mean, sd^2): the chance of landing inside summed over the gaps both ways, a ratio of the two.
    The most that centring the asks (steering) can gain in children inside, before the measurement picks."""
    from scipy.stats import norm

    g = np.array([x for x in gaps if x[1] > 0], dtype=float).reshape(-1, 3)
    if not len(g):
        return float("nan")
    m, sd, h = g.T
    centred = norm.cdf(h / sd) - norm.cdf(-h / sd)
    off = norm.cdf((h - m) / sd) - norm.cdf((-h - m) / sd)
    return float(centred.sum() / max(off.sum(), 1e-300))


def print_steering(cells: list[Cell]) -> None:
    """Where the children truly land, with and without steering: what centring the asks can gain is bounded by
    how widely the children scatter about where they are aimed against how narrow the gaps are."""
    print("\nWhere the children truly land (valid children annotated, true z less the target, mean over gaps): "
          "children inside their gap per gap, the mean (signed) and the sd within a gap, benchfill/steer / "
          "benchfill (without steering); the gaps' half-width; the most that centring the unsteered children on the "
          "target could multiply those inside by, their scatter kept (landing_gain, over all gaps); and the learned "
          "response's residual sd (benchfill/steer), which counts the annotation's error beyond its stated se too:")
    print(f"{'rewriter':<{_LABEL_W}}{'inside/gap':>16}{'mean':>16}{'sd':>14}{'half-w':>8}{'most gain':>11}{'resid sd':>10}")
    for label in dict.fromkeys(c.label for c in cells):
        cs = [c for c in cells if c.label == label]
        cols = []
        for s in ("benchfill/steer", "benchfill"):  # with steering, then without (the defaults since s55)
            outs = [o for c in cs for o in c.out[s]]
            land = [g for o in outs for g in o.landing]
            cols.append((sum(o.truly_inside for o in outs) / max(sum(o.gaps for o in outs), 1),
                         *(_mean([g[i] for g in land]) for i in range(3)), landing_gain(land)))
        resid = [v for c in cs for o in c.out["benchfill/steer"] for v in o.resid_sd]
        (ib, mb, sb, hb, _), (io, mo, so, _, go) = cols
        print(f"{label:<{_LABEL_W}}{ib:>7.2f} / {io:<6.2f}{mb:>+7.3f} / {mo:<+6.3f}{sb:>6.3f} / {so:<5.3f}{hb:>8.3f}{go:>11.2f}"
              f"{_mean(resid):>10.3f}")


def print_response(cells: list[Cell]) -> None:
    """What the learned response reads: a child whose stated answer is wrong and that the judge passed is
    answered wrong by the probes that solve it, so it reads harder than it is, and the response takes that for
    the rewriter's. The children are benchfill's (the defaults: without steering since s55, so the response
    is learned but not acted on), pooled over sets and seeds."""
    print("\nWhat the response learns from (benchfill): children the judge passed per gap, the share of them whose "
          "stated answer is wrong, the mean annotated z less true z of those and of the right-keyed ones; the "
          "learned offset against the offset the right-keyed children truly have about the learned share "
          "(mean over gaps), and the share of that true offset the response learned (where it is 0.02 z or more); "
          "then the chosen items with a wrong key, of those chosen, benchfill's and the baseline's:")
    print(f"{'rewriter':<{_LABEL_W}}{'judged/gap':>11}{'wrong key':>11}{'err wrong':>11}{'err right':>11}"
          f"{'learned':>10}{'true':>9}{'learned share':>15}{'chosen wrong':>14}{'baseline':>10}")
    for label in dict.fromkeys(c.label for c in cells):
        outs = [o for c in cells if c.label == label for o in c.out["benchfill"]]
        judged = [j for o in outs for j in o.judged]
        wrong = [e for ok, e in judged if not ok]
        right = [e for ok, e in judged if ok]
        lean = [g for o in outs for g in o.lean]
        learned, true = _mean([g[0] for g in lean]), _mean([g[1] for g in lean])
        print(f"{label:<{_LABEL_W}}{len(judged) / max(sum(o.gaps for o in outs), 1):>11.1f}{len(wrong) / max(len(judged), 1):>11.3f}"
              f"{_mean(wrong):>+11.3f}{_mean(right):>+11.3f}{learned:>+10.3f}{true:>+9.3f}"
              f"{learned / true if abs(true) >= 0.02 else float('nan'):>15.2f}"
              f"{_wrong_of(outs):>14}{_wrong_of([o for c in cells if c.label == label for o in c.out.get('baseline', [])]):>10}")


def _wrong_of(outs: list[Outcome]) -> str:
    """"a/n": of the n chosen items (confirmed), a whose stated answer is wrong."""
    chosen = [ok for o in outs for ok in o.conf_valid]
    return f"{sum(not ok for ok in chosen)}/{len(chosen)}"


def main() -> None:
    from benchfill.search.annotate import AdaptiveSettings, ConfirmSettings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="presets on the quick sets, a reduced grid")
    ap.add_argument("--sets", nargs="*", help=f"difficulty sets for the presets (of {', '.join(SETS)})")
    ap.add_argument("--presets", nargs="*", default=["kind", "realistic", "hostile"])
    ap.add_argument("--rewriter-knobs", metavar="KNOB=VALUE,...",
                    help="what-if: override knobs of every preset cell (benchfill.sim.rewriter.parse_knobs), e.g. "
                         "judge_recall=1 (a judge that catches every wrong key: what any key check could give at most); "
                         "the cells' labels name them, the grid keeps its own")
    ap.add_argument("--no-grid", action="store_true", help="presets only")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (paired across strategies)")
    ap.add_argument("--first-seed", type=int, default=0, metavar="N",
                    help="seeds N, N+1, ... (default 0): fresh worlds to check a change chosen on the first ones")
    ap.add_argument("--max-items", type=int, help="subsample larger sets to this many items (default 150, quick 60)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--text-signal", type=float, default=0.0, metavar="S",
                    help="the simulated texts' difficulty signal, a correlation in [0, 1] (default 0: none)")
    ap.add_argument("--confirm-se", type=float, default=0.02, metavar="SE",
                    help="confirmation stops at this z standard error (default 0.02, a run's default)")
    ap.add_argument("--confirm-cap", type=float, default=4.0, metavar="BUDGETS",
                    help="... or after this many fixed-protocol budgets of rollouts (default 4)")
    ap.add_argument("--confirm-floor", type=float, default=ConfirmSettings.floor_share, metavar="F",
                    help="what-if: ... or once its sampling se is at most F times the part no rollout removes, "
                         "after one fixed budget (default 0: never, as a run does)")
    ap.add_argument("--confirm-probes", choices=("fresh", "same"), default="same",
                    help="what-if: fresh: where offsets are allowed for, confirm only through probes that did not "
                         "annotate the child (ConfirmSettings.fresh_probes); same (default, as a run does): any probe")
    ap.add_argument("--outside-lr", type=float, default=2.0, metavar="LR",
                    help="a confirmation stops early once its answers rule out the band where the item would matter "
                         "(its gap; for a runner-up, nearer the target than the child confirmed nearest) by this "
                         "log-likelihood ratio (default 2, a run's default; 0: never, as before)")
    ap.add_argument("--first-batch", type=int, metavar="N",
                    help="what-if: the adaptive annotation's first step asks N samples of each of its two probes "
                         "and may stop after it (default: the annotator's, 4)")
    ap.add_argument("--parents", type=int, metavar="R",
                    help="what-if: parents per round (default: the search's, 4, the paper's R)")
    ap.add_argument("--children", type=int, metavar="C",
                    help="what-if: children per parent and round (default: the search's, 4, the paper's C)")
    ap.add_argument("--first-parents", type=int, metavar="R1",
                    help="what-if: parents in the first round only (default: as later rounds)")
    ap.add_argument("--confirmations", type=int, metavar="N",
                    help="what-if: SearchSettings.confirmations, the runners-up and fallback picks a gap may confirm "
                         "(default: the search's, 6)")
    ap.add_argument("--stop-inner", type=float, metavar="F",
                    help="what-if: also stop (after confirming) once the best child's annotated z is within F of "
                         "the gap's half-width of the target (SearchSettings.stop_inner)")
    ap.add_argument("--steer-gate", type=float, metavar="G",
                    help="what-if: steer only once the learned response is told apart from no correction by G "
                         "posterior sds (SearchSettings.steer_gate; default 0: always)")
    ap.add_argument("--steer-robust", type=float, metavar="C",
                    help="what-if: Huber's threshold of the learned response's fit, in sds (SearchSettings.steer_robust; "
                         "default 2)")
    ap.add_argument("--width", type=float, metavar="Q",
                    help="what-if: adaptive round width (SearchSettings.width): after the first round, ask parents "
                         "for children only until the learned response says one lands inside the gap with chance Q")
    ap.add_argument("--give-up", type=int, metavar="K",
                    help="what-if: end a gap after round K when none of its valid children is annotated inside it "
                         "(SearchSettings.give_up)")
    ap.add_argument("--take-widening", action="store_true",
                    help="what-if: take a confirmed child even where, by its confirmed z and se, it would widen the "
                         "top-3 gap sum in expectation (lying beyond an end of the axis), as before that check")
    ap.add_argument("--ability-blind", action="store_true",
                    help="what-if: the annotator takes every probe's ability as exact (as before it knew "
                         "their standard errors), to show what knowing them buys")
    ap.add_argument("--spot-on", choices=("all", "contenders"), default="all",
                    help="what-if: the order screen spot-checks every annotated child (all, the default) or only "
                         "those the annotation did not rule out as far from the target (ScreenSettings.spot_on)")
    ap.add_argument("--reach-probes", action="store_true",
                    help="what-if: the panel plus a probe at the easiest and one at the hardest item's difficulty, "
                         "so that no gap lies beyond the panel's reach (the remedy a run's warning names)")
    ap.add_argument("--world-matrix", action="store_true",
                    help="what-if: each set's published matrix redrawn from the world (its models at their fitted "
                         "abilities, the world's slopes), so that published and panel rows answer by one model")
    ap.add_argument("--link", nargs="?", const="spread", choices=("spread", "offset"), default=None,
                    help="what-if: a child placed through the probes is mapped onto the fit's scale of record by "
                         "the originals placed the same way (search.annotate.anchor_link): offset and spread, or "
                         "the offset alone")
    ap.add_argument("--own-sampling", action="store_true",
                    help="what-if: the annotator states the placement's own sampling se (Annotator._sampling_factor), "
                         "not the 1PL's, and the search reads it")
    ap.add_argument("--prior-slopes", action="store_true",
                    help="what-if: the annotator places each item by the prior over its slope alone (as before the "
                         "answers weighed the slopes; Annotator.slope_weights off)")
    ap.add_argument("--accept-within", type=float, metavar="F",
                    help="a candidate confirmed within F of the gap's half-width from the target ends the search; "
                         "farther out, its runners-up are confirmed first (default: the search's, 0.5; 1: the "
                         "first candidate confirmed inside the gap ends it)")
    ap.add_argument("--selection", choices=("posterior", "reduction"), default="posterior",
                    help="how benchfill picks a gap's child (SearchSettings.selection; default posterior: least expected "
                         "squared deviation from the target; reduction: least expected top-3 gap sum with it added)")
    ap.add_argument("--end-inside", action="store_true",
                    help="what-if: after the last round, confirm runners-up only until one lands anywhere inside "
                         "the gap, as before (SearchSettings.settle_at_end off; default: until one lands within "
                         "--accept-within of the target, as at a stop)")
    ap.add_argument("--panel", type=panel_arg, default="12x8", metavar="NxK",
                    help="the probe panel: N probes, K trials each per item (default 12x8, a run's default)")
    ap.add_argument("--jobs", type=int, default=_cpus(), metavar="N",
                    help=f"run the (cell, seed) pairs on N processes (default: the CPUs this process may use, "
                         f"{_cpus()} here); the figures do not change")
    ap.add_argument("--discrimination", type=world_sd_arg, metavar="SD",
                    help="the world's sd of log item discrimination (default: the world's, "
                         "benchfill.sim.world.DISCRIMINATION_SD; 0: the 1PL the annotator fits; like-set: each set's "
                         "own, estimated from its matrix)")
    ap.add_argument("--misfit", type=misfit_sd, default=RunOptions.misfit, metavar="SD",
                    help=f"the sd of log a the annotator allows for (a run's --misfit, default {RunOptions.misfit}; 0: the "
                         "annotator before it, which took every item to fit the 1PL)")
    ap.add_argument("--reply-habits", type=float, metavar="RATE",
                    help="the share of the world's rewriter and judge replies in real models' habits (default: the "
                         "world's, benchfill.sim.habits.DEFAULT_RATE); form only, so the figures should not move")
    ap.add_argument("--prior", choices=("normal", "hierarchical"), default="normal",
                    help="what-if: the benchmark's fit under the hierarchical difficulty prior (a run fits under N(0, 1))")
    ap.add_argument("--world-prior", choices=("normal", "hierarchical"), default="normal",
                    help="what-if: the world's latent difficulties from a fit of the published matrix under the "
                         "hierarchical prior (default: under N(0, 1), as a run fits), a world with more spread ends")
    ap.add_argument("--pair-curve", choices=PAIR_CURVES, default=WORLD_PAIR_CURVE,
                    help="how those offsets meet the curve: 'average' (the world's default) keeps the latent curve "
                         "as their average; 'added' puts them on it, flattening it (the world before s48, in which "
                         "every figure of docs/sim-rewriter.md before \"The probes' curve\" was measured)")
    ap.add_argument("--pair-sd", type=float, default=WORLD_PAIR_SD, metavar="SD",
                    help="each (probe, item) pair's own offset from the IRT curve, sd in logits (the world's pair_sd, "
                         "default 5, where the published matrices' agreement within a pair is matched (3.5 before s48), "
                         "bench/bench_pair_effect.py; 0: a probe's answers to an item are independent draws around "
                         "the curve, the kinder world the figures before s46 were measured in)")
    ap.add_argument("--pair-allowance", type=pair_sd_arg, default="auto", metavar="SD|auto",
                    help="the annotator's allowance for the (probe, item) offsets, an sd in logits or auto (a run's "
                         "default: estimated from the panel's repeated answers on the anchors, benchfill.irt.pair); "
                         "0: none, the annotator before it")
    ap.add_argument("--rollouts-ref", type=float,
                    help="annotation+confirmation rollouts per gap of the kind preset before this change")
    args = ap.parse_args()
    global CONFIRMATION, ABILITY_BLIND, PANEL, ACCEPT_WITHIN, ADAPTIVE, SHAPE, WIDENS, DISCRIMINATION, MISFIT, PRIOR_SLOPES, REACH_PROBES, WORLD_MATRIX, OWN_SAMPLING, SELECTION, SPOT_ON, LINK, REPLY_HABITS, PRIOR, WORLD_PRIOR, PAIR_SD, PAIR_CURVE, PAIR_ALLOWANCE

    PANEL = args.panel
    if not 0.0 <= args.pair_sd <= PAIR_SD_MAX:  # the world's own range
        ap.error(f"--pair-sd: expected an sd in [0, {PAIR_SD_MAX:g}] logits, got {args.pair_sd}")
    PAIR_SD = args.pair_sd
    PAIR_CURVE = args.pair_curve
    PAIR_ALLOWANCE = args.pair_allowance
    DISCRIMINATION = args.discrimination
    MISFIT = args.misfit
    if args.jobs < 1:
        ap.error(f"--jobs: expected a positive number of processes, got {args.jobs}")
    ABILITY_BLIND = args.ability_blind
    PRIOR_SLOPES = args.prior_slopes
    OWN_SAMPLING = args.own_sampling
    LINK = args.link
    REACH_PROBES = args.reach_probes
    SPOT_ON = args.spot_on
    WORLD_MATRIX = args.world_matrix
    if args.reply_habits is not None and not 0 <= args.reply_habits <= 1:
        ap.error(f"--reply-habits: expected a share in [0, 1], got {args.reply_habits}")
    REPLY_HABITS = args.reply_habits
    PRIOR = args.prior
    WORLD_PRIOR = args.world_prior
    WIDENS = not args.take_widening
    if args.accept_within is not None and not 0 < args.accept_within <= 1:
        ap.error(f"--accept-within: expected a share of the half-width in (0, 1], got {args.accept_within}")
    ACCEPT_WITHIN = args.accept_within
    if args.outside_lr < 0:
        ap.error(f"--outside-lr: expected a log-likelihood ratio >= 0, got {args.outside_lr}")
    if args.first_batch is not None:
        if args.first_batch < 1:
            ap.error(f"--first-batch: expected a positive number of samples, got {args.first_batch}")
        first = AdaptiveSettings().first_width * args.first_batch
        ADAPTIVE = AdaptiveSettings(first_batch=args.first_batch, min_rollouts=first)
    for name in ("parents", "children", "first_parents", "confirmations"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                ap.error(f"--{name.replace('_', '-')}: expected a positive number, got {value}")
            SHAPE[name] = value
    if args.give_up is not None:
        if args.give_up < 1:
            ap.error(f"--give-up: expected a number of rounds >= 1, got {args.give_up}")
        SHAPE["give_up"] = args.give_up
    if args.width is not None:
        if not 0 < args.width < 1:
            ap.error(f"--width: expected a chance in (0, 1), got {args.width}")
        SHAPE["width"] = args.width
    if args.end_inside:
        SHAPE["settle_at_end"] = False
    SELECTION = args.selection
    if args.steer_gate is not None:
        if args.steer_gate < 0:
            ap.error(f"--steer-gate: expected a number of sds >= 0, got {args.steer_gate}")
        SHAPE["steer_gate"] = args.steer_gate
    if args.steer_robust is not None:
        if not args.steer_robust > 0:
            ap.error(f"--steer-robust: expected a number of sds > 0, got {args.steer_robust}")
        SHAPE["steer_robust"] = args.steer_robust
    if args.stop_inner is not None:
        if not 0 < args.stop_inner <= 1:
            ap.error(f"--stop-inner: expected a share of the half-width in (0, 1], got {args.stop_inner}")
        SHAPE["stop_inner"] = args.stop_inner
    if not 0 <= args.confirm_floor < 1:
        ap.error(f"--confirm-floor: expected a share in [0, 1), got {args.confirm_floor}")
    CONFIRMATION = ConfirmSettings(z_se=args.confirm_se, max_budgets=args.confirm_cap, outside_lr=args.outside_lr,
                                   floor_share=args.confirm_floor, fresh_probes=args.confirm_probes == "fresh")
    try:
        preset_knobs = parse_knobs(args.rewriter_knobs)
        for p in args.presets:
            rewriter_model(p, **preset_knobs)  # a value out of range names itself before any run
    except ConfigError as e:
        ap.error(str(e))
    sets = args.sets or (QUICK_SETS if args.quick else SETS)
    max_items = args.max_items or (60 if args.quick else 150)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    grid = QUICK_GRID if args.quick else GRID
    first = f" R1={SHAPE['first_parents']}" if "first_parents" in SHAPE else ""
    print(f"bench_search: top-{K} gaps, T={args.rounds} R={SHAPE.get('parents', 4)} C={SHAPE.get('children', 4)}{first} L=16, {PANEL[0]} probes x {PANEL[1]} trials, adaptive annotation "
          f"+ confirmation to z se {args.confirm_se:g} (cap {args.confirm_cap:g} budgets{'' if args.outside_lr else ', never cut short'}{f', or {args.confirm_floor:g} of the part no rollout removes' if args.confirm_floor else ''}{'; confirmed through probes that did not annotate' if args.confirm_probes == 'fresh' else ''}); seeds {seeds}; sets {', '.join(sets)} (max {max_items} items); "
          f"text signal {args.text_signal:g}{'; ability-blind annotator' if args.ability_blind else ''}"
          f"; item discrimination sd {DISCRIMINATION if DISCRIMINATION is not None else DISCRIMINATION_SD}"
          f"{f'; (probe, item) offsets sd {PAIR_SD:g} logits' if PAIR_SD else ''}"
          f"{' added to the curve (the world before s48)' if PAIR_SD and PAIR_CURVE == 'added' else ''}"
          f"{f'; the allowance for (probe, item) offsets: {PAIR_ALLOWANCE}' if PAIR_ALLOWANCE else ''}"
          f"; annotator's misfit allowance sd {MISFIT}{' (slopes by the prior alone)' if PRIOR_SLOPES else ''}"
          f"{'; the placement states its own sampling se' if OWN_SAMPLING else ''}"
          f"{f'; children linked to the record through the originals ({LINK})' if LINK else ''}"
          f"{f'; selection {SELECTION}' if SELECTION != 'posterior' else ''}"
          f"{'; two probes added at the easiest and the hardest items' if REACH_PROBES else ''}"
          f"{'; the order screen spot-checks contenders only' if SPOT_ON != 'all' else ''}"
          f"{'; published matrices redrawn from the world' if WORLD_MATRIX else ''}"
          f"{f'; replies in habits at rate {REPLY_HABITS:g}' if REPLY_HABITS is not None else ''}"
          f"{'; the benchmark fitted under the hierarchical prior' if PRIOR != 'normal' else ''}"
          f"{'; the world made by a fit under the hierarchical prior' if WORLD_PRIOR != 'normal' else ''}"
          f"{f'; accept within {args.accept_within:g}' if args.accept_within is not None else ''}"
          f"{f'; stop inner {args.stop_inner:g}' if args.stop_inner is not None else ''}"
          f"{f'; give up after round {args.give_up}' if args.give_up is not None else ''}"
          f"{f'; the presets with {args.rewriter_knobs}' if preset_knobs else ''}"
          f"{f'; steering gated at {args.steer_gate:g} sds' if args.steer_gate is not None else ''}"
          f"{f'; the response fit with Huber at {args.steer_robust:g} sds' if args.steer_robust is not None else ''}"
          f"{f'; adaptive round width {args.width:g}' if args.width is not None else ''}"
          f"{f'; at most {args.confirmations} confirmations per gap' if args.confirmations is not None else ''}"
          f"{f'; first annotation step {args.first_batch} samples x 2 probes' if args.first_batch else ''}"
          f"{f'; {args.jobs} processes' if args.jobs > 1 else ''}", flush=True)
    t_all = time.perf_counter()
    for name in dict.fromkeys([*sets, *QUICK_SETS]):
        _BENCHES[name] = load_set(name, max_items, 0)
    print_spreads(sets)
    jobs = preset_jobs(args.presets, sets, preset_knobs)
    if not args.no_grid:
        for combo in itertools.product(*grid.values()):
            knobs = dict(zip(grid, combo, strict=True))
            label = "drift{drift:+g} share{share:g} noise{noise:g} refs {r}".format(
                **knobs, r="on" if knobs["anchor"] > 0 else "off")
            jobs += [(label, "realistic", knobs, s) for s in QUICK_SETS]
    cells = run_jobs(jobs, seeds, args.rounds, args.text_signal, args.jobs)
    set_label_width(cells)
    print()
    print_cells(cells)
    print_paired(cells)
    print_steering_against_none(cells)
    print_prescreen(cells, args.text_signal)
    print_summary(cells, args.rollouts_ref)
    print_shortfall(cells)
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
