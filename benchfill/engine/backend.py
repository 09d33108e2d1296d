"""The search's services bound to real model traffic, and the backend a run talks to.

Rewriter and judge go through ``benchfill.llm`` (litellm), probe rollouts through
``benchfill.probes`` (the openai SDK); both cache every completed call in the
run's store. The ``sim`` backend starts the simulated world in-process on
loopback and builds a config that points at it: from there on, the path is the
same as against real endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchfill import untrusted
from benchfill.errors import ConfigError, EndpointError, PromptRefused
from benchfill.evaluators.base import Evaluator
from benchfill.netguard import off_loop
from benchfill.search.annotate import Annotation, Annotator, ConfirmSettings
from benchfill.search.loop import Child, GapResult, GapSearch, SearchSettings, benchfill_search
from benchfill.search.screen import for_annotator, screen_child
from benchfill.search.services import SELF_CHECK, Probe, Reference, Verdict, derive_seed
from benchfill.search.strategies import baseline_search
from benchfill.store import SIM_ENDPOINTS_META

log = logging.getLogger("benchfill.run")

# The search's calls this process has sent rather than served from the store's cache. The search's
# ``Spend`` counts a cache hit as a call (it was paid for once, by an earlier run), so a sweep tells a
# rerun's replayed calls from its new ones by this tally, read before and after each of its units
# (benchfill/executors.py); a process runs one unit at a time.
SENT = {"model_calls": 0, "rollouts": 0}
# The run's meta keys "traffic/<process>": each process's probe traffic (``TrafficStats``), written under
# its own key, so that the report counts every process of a run (a resumed one, a sweep's units) and a
# process that writes its figures again only replaces them.
TRAFFIC_META = "traffic/"
# The run meta key of the misfit allowance ``--misfit auto`` resolved to, and what it rests on (Backend._misfit).
MISFIT_META = "misfit"
# ... and of the (probe, item) offsets' allowance ``--pair-allowance auto`` resolved to (Backend._pair).
PAIR_META = "pair_allowance"


def _repairs_of(res) -> int:
    """Calls beyond the first that a rewrite or judge took: its repair turns, or, failed, one per reply after
    the first (``benchfill.llm``)."""
    replies = getattr(res, "replies", None)
    return max(len(replies) - 1, 0) if replies is not None else int(getattr(res, "repairs", 0))


def chosen_deviation(chosen: Child | None, gap: GapSearch) -> str:
    """A round's line on the child the search would choose now: its confirmed deviation where it has been
    confirmed, which the run's figures rest on (a confirmation that put it outside the gap had gone unsaid
    while the annotated figure looked near perfect), else its annotated one."""
    if chosen is None:
        return "no valid child yet"
    best = chosen.deviation(gap.target_z)
    if chosen.confirmation is None:
        return f"chosen child's annotated deviation {best:.4f}"
    z = chosen.confirmation.z
    where = "" if gap.left < z < gap.right else ", outside the gap"
    return f"chosen child's confirmed deviation {abs(z - gap.target_z):.4f}{where} (annotated {best:.4f})"


class TrafficServices:
    """``SearchServices`` over the rewriter, the judge and the probe panel of a config."""

    def __init__(self, config, spec, store, rollout_client, seed: int, world=None):
        self.config, self.spec, self.store, self.rc, self.seed, self.world = config, spec, store, rollout_client, seed, world
        self.phase = "annotate"
        from benchfill.llm import LLMStats

        self.llm_stats = LLMStats()
        self._repairs: dict[str, int] = {}  # key -> repair turns of its rewrite and judge, until taken
        self._told_unreadable = False

    async def rewrite(self, parent: dict[str, Any], target_z: float, references: list[Reference], key: str):
        from benchfill import llm, prompts

        child_id = key.split(":", 1)[1]
        # ids are not content: the rewriter sees none (nor a dataset's task_id, told by its holding the id)
        refs = [(prompts.content_of(r.item, self.spec), r.z) for r in references]
        shown = prompts.content_of(parent, self.spec)
        try:
            res = await llm.rewrite(self.config.rewriter, shown, target_z, refs, spec=self.spec, store=self.store,
                                    seed=derive_seed(self.seed, "rewrite", key), retry=self.config.retry,
                                    stats=self.llm_stats)
        except EndpointError:
            failed = getattr(self.world, "write_failure", None)
            if failed is not None:  # the simulated world's own trouble (its state file's disk full), said as such
                raise failed from None
            raise
        extra = _repairs_of(res)
        if not res.cached:  # its repair turns were sent too
            SENT["model_calls"] += 1 + extra
        self._repairs[key] = self._repairs.get(key, 0) + extra
        if not res:  # a counted failure: the replies stayed unreadable after the repairs allowed
            if not self._told_unreadable:  # once a run: the report counts them, and -v names every one
                self._told_unreadable = True
                log.warning("%s; the rewrite is flagged rewrite_failed (the report counts such rewrites; -v "
                            "shows every unreadable reply)", untrusted.terminal(res.reason))
            return None
        return prompts.new_child(res.child, child_id, self.spec, parent)

    async def judge(self, child: dict[str, Any], key: str) -> Verdict:
        from benchfill import llm, prompts

        fault = await self.reference_fault(child)
        if fault:  # no judge asked: what the grader itself refuses needs no opinion
            return Verdict(False, fault, SELF_CHECK)
        shown = prompts.content_of(child, self.spec)
        res = await llm.judge(self.config.judge, shown, spec=self.spec, store=self.store,
                              seed=derive_seed(self.seed, "judge", key), retry=self.config.retry,
                              stats=self.llm_stats)
        extra = _repairs_of(res)
        if not res.cached:  # its repair turns were sent too
            SENT["model_calls"] += 1 + extra
        self._repairs[key] = self._repairs.get(key, 0) + extra
        if not res:
            return Verdict(False, f"judge reply unreadable: {res.reason}", self.config.judge.model)
        return Verdict(bool(res.valid), str(res.reason), self.config.judge.model)

    async def reference_fault(self, child: dict[str, Any]) -> str | None:
        """Why the child's own reference answer fails the benchmark's grader (``Evaluator.reference_fault``:
        a code item's solution against its own tests), run off the loop; None where it passes or the grader
        has no such check. Not cached: it costs a sandbox launch, and a rerun reaches the same verdict."""
        grader = self.rc.evaluator if self.rc is not None else None
        if grader is None or type(grader).reference_fault is Evaluator.reference_fault:
            return None
        return await off_loop(grader.reference_fault, child, self.spec)

    async def rollouts(self, item_id: str, item: dict[str, Any], probe: str, n: int, key: str) -> int:
        got = await self.rc.rollouts([{**item, "id": item_id}], trials=n, seed=derive_seed(self.seed, "probe", key),
                                     probes=[probe], phase=self.phase)
        # The order screen's spot checks (keys ending ":spot<step>", search/screen.py) are not in the
        # spend's rollouts but its screen_rollouts: left out here too.
        if not got[0].cached and not key.rsplit(":", 1)[-1].startswith("spot"):
            SENT["rollouts"] += got[0].trials
        return int(got[0].correct)

    def repair_calls(self, key: str) -> int:
        """The repair turns the rewrite and judge of ``key`` took since last asked (``SearchServices``)."""
        return self._repairs.pop(key, 0)

    def with_phase(self, phase: str) -> TrafficServices:
        """The same services whose rollouts are recorded under another phase (e.g. "confirm")."""
        other = copy.copy(self)
        other.phase = phase
        return other


# What this process computed from a matrix, by its digest and seed: the runs of a local sweep (one per
# strategy and seed, on one benchmark) each fitted the same matrix and estimated the same spread again,
# about half of such a sweep's time on mmlu-pro. Both are deterministic in (matrix, seed) in one process.
_MEMO: dict[tuple, Any] = {}
_MEMO_MAX = 8


def _memo_get(key: tuple) -> Any:
    return copy.deepcopy(_MEMO.get(key))


def _memo_put(key: tuple, value: Any) -> None:
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = copy.deepcopy(value)


class Backend:
    def __init__(self, name: str, opts, bench, store, run_dir: Path, config, world=None, server=None):
        self.name, self.opts, self.bench, self.store, self.run_dir = name, opts, bench, store, run_dir
        self.config, self.world, self.server = config, world, server
        self.rc = None
        self.fit = None
        self.annotator: Annotator | None = None
        self.misfit: dict | None = None  # the misfit allowance and what it rests on (_misfit)
        self.pair: dict | None = None  # the (probe, item) offsets' allowance and what it rests on (_pair)
        self.services: TrafficServices | None = None
        self.prescreen = None  # benchfill/search/prescreen.py, trained by train_prescreen when asked for
        self.world_truth = None  # simulated runs: the gap figures by the world's own difficulties (attach_truth)
        self.shared = None  # the store's search memory (engine/memory_store.py), opened by plan_memory
        self.memory_plan: dict | None = None
        self.traffic_key = f"{TRAFFIC_META}{uuid.uuid4().hex}"

    def record_traffic(self) -> None:
        """Keep this process's probe traffic in the store (again: replaced, not added)."""
        if self.rc is not None:
            self.store.set_meta(self.traffic_key, self.rc.stats.as_dict())

    def traffic(self) -> dict[str, Any]:
        """The probe traffic of every process of this run, this one's figures beside it."""
        from dataclasses import fields

        from benchfill.probes import TrafficStats
        from benchfill.schema import RunMeta

        self.record_traffic()
        names = {f.name for f in fields(TrafficStats)}
        total, processes = TrafficStats(), 0
        for row in self.store.all(RunMeta, RunMeta.key.startswith(TRAFFIC_META)):
            total.add(TrafficStats(**{k: v for k, v in json.loads(row.value_json).items() if k in names}))
            processes += 1
        # what these count, said in the report (a replica's requests were read as all the calls it served)
        return {"scope": "probe requests only (the rewriter's and judge's calls are in spend)", **total.as_dict(),
                "processes": processes, "this_process": self.rc.stats.as_dict()}

    async def fit_benchmark(self):
        """The IRT fit of the benchmark, with the probe panel on the same scale."""
        from benchfill.irt import fit as irt_fit

        matrix, source = self._given_matrix()
        names = [p.name for p in self.config.probes]
        if matrix is None or not set(names) <= set(matrix.models):
            # The panel's abilities must sit on the benchmark's scale: its rollouts join the matrix
            # (cached, so a rerun asks nothing again). Without a matrix they are the matrix, on every
            # item; with one, a spread of anchor items places the probes just as well at a fraction
            # of the cost on a large benchmark (12,032 x 12 requests for mmlu-pro otherwise).
            items = self.bench.items if matrix is None else self._anchors(matrix)
            probe_m = await self._panel_matrix(items)
            matrix = probe_m if matrix is None else _stack(matrix, probe_m)
            what = "probe panel rollouts" if len(items) == len(self.bench.items) else (
                f"probe panel rollouts on {len(items)} anchor items")
            source = f"{source} + {what}" if source else what
        digest = _matrix_digest(matrix)
        self.fit = self._fit_of_record(digest)
        if self.fit is None:
            self.fit = _memo_get(("fit", digest, self.opts.seed))
            if self.fit is not None:
                self._say(f"fitting IRT on {matrix.n_models} models x {matrix.n_items} items: made already in this "
                          "process, for another run of the same matrix and seed")
            else:
                self._say(f"fitting IRT on {matrix.n_models} models x {matrix.n_items} items ...")
                # off the event loop: it holds Ctrl-C and SIGTERM for as long as it runs (seconds on mmlu-pro)
                self.fit = await off_loop(irt_fit, matrix, engine="map", seed=self.opts.seed)
                _memo_put(("fit", digest, self.opts.seed), self.fit)
            self._check_scale_kept()
            self._record_fit(digest)
        from benchfill.report import unanswered_note

        note = unanswered_note(self.bench, self.fit)
        if note:  # a maintainer who forgot to evaluate an item is told (a warning: --quiet keeps it)
            log.warning(note)
        probes = panel_probes(self.fit, [(p.name, p.trials) for p in self.config.probes])
        # A gap's outlook, planned before any item exists, takes the median floor; each item its own.
        chance = float(np.median(self.fit.chance)) if len(self.fit.chance) else 0.0
        spec = self.bench.spec
        chance_of = spec.chance_of if getattr(spec, "chance", None) == "options" else None
        confirmation = ConfirmSettings(z_se=self.opts.confirm_se, max_budgets=self.opts.confirm_cap)
        misfit = await self._misfit(matrix, digest)
        pair = await self._pair(matrix, digest)
        self.annotator = Annotator(self.services, probes, chance, self.fit.b_min, self.fit.b_max, self.opts.annotation,
                                   confirmation=confirmation, misfit=misfit, chance_of=chance_of, pair=pair)
        self.record_traffic()  # the panel's rollouts, kept as the fit is
        return self.fit, source

    def _say(self, msg: str) -> None:
        """A progress line on stderr, as the run's own (``benchfill.run.progress_printer``, which imports
        this module: not imported back)."""
        if self.opts.progress:
            import sys

            label = self.opts.progress_label
            print(f"{label}: {msg}" if label else msg, file=sys.stderr, flush=True)

    async def _tick(self, what: str, total: int) -> None:
        """Say, every ``PROGRESS_EVERY_S``, how many requests are sent so far (until cancelled)."""
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            st = self.rc.stats
            # (about: a retry is one more, and a server that takes one sample a request is sent one a trial)
            self._say(f"{what}: {st.requests} requests sent so far, of about {total} ({st.cache_hits} answered from "
                      "the cache) ...")

    async def _misfit(self, matrix, digest: str) -> float:
        """The annotator's misfit allowance: ``--misfit SD``, or with ``auto`` the benchmark's own spread of
        log discrimination (irt/spread.py), estimated once from the matrix of record and kept with it, so a
        resumed run and every unit of a sweep allow the same."""
        if self.opts.misfit != "auto":
            self.misfit = {"sd": float(self.opts.misfit), "estimate": None, "given": True}
            return float(self.opts.misfit)
        saved = self.store.get_meta(MISFIT_META)
        if saved and saved.get("matrix") == digest:
            self.misfit = {k: v for k, v in saved.items() if k != "matrix"}
            return float(saved["sd"])
        from benchfill.irt.spread import misfit_allowance

        key = ("misfit", digest, self.opts.seed)
        got = _memo_get(key)
        if got is None:
            self._say("estimating how item discrimination spreads (the misfit allowance) ...")
            got = await off_loop(misfit_allowance, matrix, seed=self.opts.seed)  # 20 s on mmlu-pro
            _memo_put(key, got)
        sd, record = got
        self.store.set_meta(MISFIT_META, {**record, "matrix": digest})
        self.misfit = record
        return sd

    async def _pair(self, matrix, digest: str) -> float:
        """The annotator's allowance for the (probe, item) offsets: ``--pair-allowance SD``, or with ``auto``
        their sd estimated from the panel's own repeated answers in the matrix of record (irt/pair.py), once,
        kept with it, so a resumed run and every unit of a sweep allow the same. A panel with no repeated
        answers there (its rows given with one trial each) says nothing of it: 0, and the report says why."""
        given = self.opts.pair_allowance
        if given != "auto":
            self.pair = {"sd": float(given), "given": True}
            return float(given)
        saved = self.store.get_meta(PAIR_META)
        if saved and saved.get("matrix") == digest:
            self.pair = {k: v for k, v in saved.items() if k != "matrix"}
            return float(saved["sd"])
        from benchfill.irt.pair import pair_sd

        names = [p.name for p in self.config.probes]
        key = ("pair", digest, tuple(names), self.opts.seed)
        got = _memo_get(key)
        if got is None:
            self._say("estimating how far the probes' answers stray from the curve (the pair allowance) ...")
            got = await off_loop(pair_sd, matrix, names, seed=self.opts.seed)
            _memo_put(key, got)
        sd, record = got
        self.store.set_meta(PAIR_META, {**record, "matrix": digest})
        self.pair = record
        return sd

    def _anchors(self, matrix) -> list[dict]:
        """The anchor items this run chose when it began, else a new choice, recorded: a resumed run and
        every unit of a sweep place the panel on the same items wherever they run."""
        by_id = {it["id"]: it for it in self.bench.items}
        saved = self.store.get_meta("anchor_items")
        if saved and all(i in by_id for i in saved):
            return [by_id[i] for i in saved]
        chosen = anchor_items(matrix, self.bench.items, int(self.opts.extra.get("anchor_items", ANCHOR_ITEMS)))
        self.store.set_meta("anchor_items", [it["id"] for it in chosen])
        return chosen

    def _fit_of_record(self, digest: str):
        """The fit this run recorded when it started, if it was made from the same matrix (models, items, counts).

        A resumed run, and every unit of a sweep, goes on with the scale it began with instead of fitting
        again: the MAP optimum of a large matrix moves in its last digits with the number of BLAS threads
        (mmlu-pro's z differ between one thread and several), and a search on another scale is another search.
        """
        from benchfill.irt.fit import IrtFit

        saved = self.store.get_meta("fit")
        if saved and saved.get("engine") == "map" and self.store.get_meta("fit_matrix") == digest:
            return IrtFit.from_dict(saved)
        return None

    def _check_scale_kept(self) -> None:
        """Refuse to go on with a run on another scale than the one it recorded where review decisions or
        releases rest on that one; say so where nothing does.

        A run fitted anew onto another scale (the panel's answers differ, as after an upgrade changed the
        simulated world, or an earlier benchfill recorded the fit) has other gap edges, so each gap is searched
        again and its children are written under the ids the old ones had: a run resumed by ``--run-id`` after
        an upgrade put a reviewer's reject and edit on items they never saw, and released them."""
        from benchfill.errors import NOTE
        from benchfill.irt.fit import IrtFit
        from benchfill.schema import Release, ReviewDecision

        saved = self.store.get_meta("fit")
        if not saved:  # a new run
            return
        try:
            old = IrtFit.from_dict(saved)
            if old.item_ids == self.fit.item_ids and np.array_equal(old.z, self.fit.z):
                return  # the same scale (a fit recorded before what it was made from was)
        except Exception:  # a fit this benchfill cannot read is no scale to keep
            pass
        decided, released = len(self.store.all(ReviewDecision)), len(self.store.all(Release))
        name = self.store.run_id or self.run_dir.name
        if decided or released:
            raise ConfigError(
                f"run {name}: its {decided} review decision{'' if decided == 1 else 's'} and {released} "
                f"release{'' if released == 1 else 's'} rest on the scale it recorded, and this benchfill fits the "
                "benchmark onto another (the panel answers otherwise, or an earlier benchfill made the run): "
                "searched again, its children's ids would name other items under those decisions. Review and "
                "release the run as it stands (neither runs it again), or start a new run under another run id")
        log.warning("run %s: the benchmark is fitted onto another scale than the one the run recorded (the panel "
                    "answers otherwise, or an earlier benchfill made the run); its gaps are searched again",
                    name, extra=NOTE)

    def _record_fit(self, digest: str) -> None:
        # The fit first, then what it was made from: a crash between the two leaves them unmatched,
        # so the next attempt fits again rather than take a fit of another matrix.
        self.store.set_meta("fit", self.fit.to_dict())
        self.store.set_meta("fit_matrix", digest)

    def _given_matrix(self):
        if self.bench.matrix is not None:
            return self.bench.matrix, "built-in demo responses"
        if self.bench.responses_path is not None:
            return self.bench.given_matrix(), str(self.bench.responses_path)
        return None, ""

    async def _panel_matrix(self, items):

        from benchfill.matrix import ResponseMatrix

        res = []
        seed = derive_seed(self.opts.seed, "benchmark")
        # the first minutes of a run on a large benchmark: say what they are
        self._say(f"benchmark rollouts: {len(self.config.probes)} probes x {len(items)} items, to place the panel "
                  "on the benchmark's scale ...")
        # a line at least every PROGRESS_EVERY_S as well: a batch of 500 items said nothing for minutes
        total = len(self.config.probes) * len(items)  # a request a probe and an item (its trials as n samples)
        ticker = asyncio.create_task(self._tick("benchmark rollouts", total)) if self.opts.progress else None
        try:
            for start in range(0, len(items), BENCHMARK_BATCH):
                batch = items[start : start + BENCHMARK_BATCH]
                res += await self.rc.rollouts(batch, seed=seed, phase="benchmark")
                if len(items) > BENCHMARK_BATCH:
                    st = self.rc.stats
                    self._say(f"benchmark rollouts: {start + len(batch)}/{len(items)} items "
                              f"({st.requests} requests, {st.cache_hits} from the cache)")
        finally:
            if ticker is not None:
                ticker.cancel()
        models = [p.name for p in self.config.probes]
        mi, ii = {m: j for j, m in enumerate(models)}, {it["id"]: i for i, it in enumerate(items)}
        correct = np.zeros((len(models), len(items)), dtype=np.int64)
        trials = np.zeros_like(correct)
        for r in res:
            correct[mi[r.probe], ii[r.item_id]] += r.correct
            trials[mi[r.probe], ii[r.item_id]] += r.trials
        chance = dict(zip((it["id"] for it in self.bench.items), self.bench.chance, strict=True))
        return ResponseMatrix(tuple(models), tuple(ii), correct, trials,
                              np.array([chance[i] for i in ii], dtype=float), "probe rollouts")

    def plan_memory(self, ids: list[str], z: list[float], gaps) -> None:
        """Read the store's shared memory once, before any gap is searched (engine/memory_store.py)."""
        from benchfill.engine.memory_store import open_plan

        self.shared, self.memory_plan = open_plan(self.store, self.bench.spec.name, ids, z, gaps, self.fit,
                                                  SearchSettings().memory_size)

    def remember(self, result: GapResult) -> None:
        """The gap's children in the shared memory, as they finally stand (confirmed, flagged)."""
        if self.shared is not None:
            for c in result.children:
                self.shared.record_child(result.gap_index, c)

    async def search_gap(self, g: int, gap, items, z_of, dup, show) -> GapResult:
        from benchfill.engine.memory_store import gap_plan, reuse_result, seed_entries, shared_summary
        from benchfill.engine.record import record_child, record_round, restored_gap

        o = self.opts
        done, state = restored_gap(self.store, g, gap.left, gap.right)
        if done is not None:
            show(f"gap {g}: restored from the store ({done.rounds_used} round{'' if done.rounds_used == 1 else 's'}, "
                 "done)")
            if self.prescreen is not None:  # its summary counts every child it screened, as uninterrupted
                for c in done.children:
                    if c.item is not None and c.verdict is not None and c.verdict.valid and "reused" not in c.flags:
                        self.prescreen.screen(c, g, gap.left, gap.right)
            return done
        plan = gap_plan(self.memory_plan, g, gap.left, gap.right)
        gs = GapSearch(g, gap.left, gap.right, {**items, **(plan["items"] if plan else {})}, z_of, self.prescreen,
                       seed_entries(plan) if plan else None, top_k=o.gaps)
        if plan is not None and plan["reuse"] is not None:  # an earlier run's child fits: no rewrite paid for
            res = reuse_result(plan, g, gap.left, gap.right)
            # ... unless, at an end of the axis, it would widen the coverage in expectation, as the search's own
            # children would not be taken there either
            if not gs.widens(res.chosen):
                record_child(self.store, g, res.chosen, res.target_z)
                show(f"gap {g}: reused {res.chosen.item_id} (confirmed z {res.placed[0]:.4f})")
                return res
            show(f"gap {g}: {res.chosen.item_id} of an earlier run lies inside but would likely widen the "
                 f"coverage at this end of the axis; searching instead")
        settings = SearchSettings(rounds=o.rounds, parents=o.parents, children=o.children, references=o.references,
                                  tolerance=o.tolerance, steering=o.steering == "on", selection=o.selection)
        text_field = self.bench.spec.text_field

        def check(child: Child) -> None:
            hit = dup.check(str((child.item or {}).get(text_field, "")))
            if hit is not None:
                child.near_duplicate = hit
                child.flags.append("near_duplicate")

        def on_child(gi: int, child: Child, target: float) -> None:
            record_child(self.store, gi, child, target)
            if self.shared is not None:
                self.shared.record_child(gi, child)

        # "chosen", not "best": the posterior selection weighs each child's se too, so the child it takes can
        # change for one farther from the target (a reader saw the "best" deviation rise from round to round)
        def on_round(gi: int, st, chosen: Child | None) -> None:
            record_round(self.store, gi, gs, st)
            self.record_traffic()  # with the round's checkpoint: a process killed outright loses less of it
            show(f"gap {gi} [{gs.left:.3f}, {gs.right:.3f}] round {st.round}/{o.rounds}: "
                 f"{chosen_deviation(chosen, gs)}, rollouts {st.spend.rollouts}, "
                 f"model calls {st.spend.model_calls}")

        if o.strategy == "baseline":
            res = await baseline_search(gs, self.services, self.annotator, settings, rounds_matched=o.rounds_matched,
                                        seed=o.seed, on_child=on_child, check_child=check)
            show(f"gap {g}: baseline done, rollouts {res.spend.rollouts}, model calls {res.spend.model_calls}")
            return res
        if state is not None:
            show(f"gap {g}: restored after round {state.round} from the store")
        res = await benchfill_search(gs, self.services, self.annotator, settings, seed=o.seed,
                                     on_child=on_child, on_round=on_round, check_child=check,
                                     confirm=self.confirm_child if o.confirm else None, restore=state)
        res.shared = shared_summary(plan, res)
        return res

    def train_prescreen(self, items, z_of) -> None:
        """The text pre-screen of this run: one predictor on the benchmark's items and fitted z."""
        from benchfill.search.prescreen import train_prescreen

        spec = self.bench.spec
        self.prescreen = train_prescreen(items, z_of, text_field=spec.text_field,
                                         options_field=spec.options_field, seed=self.opts.seed)
        self._say(f"pre-screen {self.prescreen.reason}")

    async def confirm_child(self, c: Child, band: tuple[float, float] | None = None,
                            resume: Annotation | None = None) -> Annotation:
        """Fresh rollouts (another seed) on a child, on the probes most informative at its estimate
        until a stated precision or cap (``ConfirmSettings``): its difficulty unbiased by the
        selection; with ``band``, stopped early once its answers rule that band out; with ``resume``,
        taken on from such a confirmation. The rollouts are labelled phase "confirm" through a copy of
        the services, so the shared ``services.phase`` never changes under concurrent work."""
        confirmer = replace(self.annotator, services=self.services.with_phase("confirm"))
        return await confirmer.confirm(c.item_id, c.item, f"confirm:s{self.opts.seed}:{c.item_id}",
                                       c.annotation.difficulty, band=band, resume=resume,
                                       annotated=c.annotation.probe_names)

    async def confirm(self, result: GapResult) -> None:
        """Confirm the chosen child, unless the search already did."""
        c = result.chosen
        if c.confirmation is None:
            try:
                c.confirmation = await self.confirm_child(c)
            except PromptRefused as exc:  # (the baseline's pick: the search sets its own aside, search.loop)
                from benchfill.search.loop import set_aside_refused

                set_aside_refused(c, exc, self.annotator, result.spend)
                result.chosen = None  # the gap stays open rather than take an item no probe could measure
                return
            screen_child(c, for_annotator(self.annotator))  # the order screen again, the fresh rollouts pooled in
            result.spend.rollouts += c.confirmation.rollouts

    def attach_truth(self, results: list[GapResult], gaps: list | None = None) -> None:
        """Simulated runs only, after the search: every child's latent difficulty from the world,
        and its z on this run's fitted scale (benchfill.sim.truth), where the report compares it
        with the benchmark items' fitted z; given the ``gaps`` the results index, the gap figures by the
        world's own difficulties too (``world_truth``). Nothing the search decided ever saw these."""
        if self.world is None or self.fit is None:
            return
        from benchfill.sim.truth import true_scale, world_truth

        scale = true_scale(self.world, self.fit)
        field = self.bench.spec.text_field
        for r in results:
            for c in r.children:
                item = self.world.lookup(str((c.item or {}).get(field, ""))) if c.item else None
                if item is not None:
                    c.true_difficulty = float(item.difficulty)
                    c.true_z = scale.z(item.difficulty)
        if gaps is not None:  # (the gaps the results index, with the items at their edges)
            self.world_truth = world_truth(self.world, self.fit, results, gaps, self.opts.gaps)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.name, "probe_panel": [p.name for p in self.config.probes],
                               "rewriter_model": self.config.rewriter.model, "judge_model": self.config.judge.model}
        if self.rc is not None:
            out["traffic"] = self.traffic()
        if self.annotator is not None:
            # The panel's fitted abilities and their standard errors: every placement inherits the latter.
            out["probe_abilities"] = {p.name: {"ability": round(p.ability, 4), "se": round(p.ability_se, 4)}
                                      for p in self.annotator.probes}
            out["misfit"] = self.misfit  # the allowance for the items' own discrimination, and its source
            out["pair_allowance"] = self.pair  # the allowance for the (probe, item) offsets, and its source
        if self.prescreen is not None:
            out["prescreen"] = self.prescreen.summary()
        if self.world_truth is not None:
            out["world_truth (simulated)"] = self.world_truth
        if self.memory_plan is not None:
            p = self.memory_plan
            out["memory"] = {"scale": p["scale"], "linked": p["linked"], "left_out": p["left_out"]}
        if self.world is not None:
            out["simulated"] = True
            out["sim_rewriter"] = {"preset": self.world.rewriter_preset, "knobs": self.world.rewriter.to_dict()}
        elif endpoints := self.store.get_meta(SIM_ENDPOINTS_META):
            out["simulated"] = True
            out["sim_endpoints"] = endpoints
        return out


@contextlib.asynccontextmanager
async def open_backend(opts, bench, store, run_dir: Path, sim_url: str | None = None) -> AsyncIterator[Backend]:
    from benchfill.probes import ProbePanel, RolloutClient

    backend = opts.resolved_backend()
    server = world = None
    if backend == "sim":
        world, server, config = start_sim(opts, bench, run_dir, url=sim_url, store=store)
    else:
        from benchfill.config import load_config

        config = load_config(opts.config)
        _require_panel(config, opts.config)
        checks = await asyncio.to_thread(require_endpoints, config, opts.config)
        # `sim serve` behind a config: the world is simulated whatever the backend is called, and is said
        # so in the report, the review records, the release card and the shared memory
        sim_endpoints = sorted({c.base_url for c in checks if c.simulated})
        if sim_endpoints:
            store.set_meta(SIM_ENDPOINTS_META, sim_endpoints)
            print(f"benchfill: note: {opts.config}: {', '.join(sim_endpoints)} serve{'s' if len(sim_endpoints) == 1 else ''} "
                  "benchfill's simulated world (sim serve): this run is a simulated run", file=sys.stderr, flush=True)
    b = None
    try:
        b = Backend(backend, opts, bench, store, run_dir, config, world, server)
        from benchfill.evaluators import evaluator_for_run

        # the run's own permission to run programs unconfined goes with the grader to its workers
        evaluator = evaluator_for_run(bench.spec.evaluator, opts.allow_unconfined)
        async with RolloutClient(store, ProbePanel.from_config(config), bench.spec, evaluator,
                                 prompt_fn=_solver_prompt()) as rc:
            b.rc = rc
            # the figures kept with the calls they count, in one transaction
            rc.cache.meta_with_calls = lambda: {b.traffic_key: rc.stats.as_dict()}
            b.services = TrafficServices(config, bench.spec, store, rc, opts.seed, world)
            yield b
    finally:
        # However the process ends its work, its figures stay for the report of a resume (a store that
        # failed has the first word: summary() records them again on the way to a report).
        with contextlib.suppress(Exception):
            if b is not None:
                b.record_traffic()
        if server is not None:
            server.stop()


def require_endpoints(config, source) -> list:
    """Fail in seconds, before any work, when an endpoint is down: retries would otherwise spend
    minutes backing off on every call of the first batch. The checks, when all is well."""
    from benchfill.errors import EndpointError
    from benchfill.serving import check_endpoints

    checks = check_endpoints(config)
    bad = [c for c in checks if not (c.ok or c.spare or c.skipped)]  # a fleet needs one replica up
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        c = bad[0]
        raise EndpointError(f"{source}: {c.name} at {c.base_url}: {c.detail}{more}; "
                            f"see `benchfill probes check --config {source}`")
    return checks


def _require_panel(config, source) -> None:
    if source is None and not config.probes:  # no file at all: "None: no probe panel" named nothing
        raise ConfigError("backend 'openai' needs a config naming the probe panel, the rewriter and the judge "
                          "(--config FILE, or config= in the library; docs/panel.example.toml)")
    if not config.probes:
        raise ConfigError(f"{source}: no probe panel configured (add [[probes]] entries)")
    if config.rewriter is None:
        raise ConfigError(f"{source}: no rewriter configured (add a [rewriter] section)")
    if config.judge is None:
        raise ConfigError(f"{source}: no judge configured (add a [judge] section)")
    import os

    named = [(f"probes.{p.name}", p.api_key_env) for p in config.probes]
    named += [(role, getattr(config, role).api_key_env) for role in ("rewriter", "judge")]
    for where, var in named:  # said here, not as the server's 401 after the run has started
        if var and not os.environ.get(var):
            raise ConfigError(f"{source}: {where}.api_key_env: environment variable {var} is not set")


def _matrix_digest(matrix) -> str:
    """What a fit was made from: models, items and counts."""
    import hashlib

    h = hashlib.sha256(json.dumps([list(matrix.models), list(matrix.item_ids)]).encode())
    for a in (matrix.correct, matrix.trials, matrix.chance):
        h.update(np.ascontiguousarray(a, dtype=float).tobytes())
    return h.hexdigest()


SIM_STATE_META = "sim_state"  # a simulated run's world state file, kept in its run meta for runs elsewhere
SIM_PORT_META = "sim_port"  # the port a simulated run's world was first served on: its calls' cache keys hold it


def _sibling_states(run_dir: Path, url: str, store=None) -> list[Path]:
    """The simulated world's state files of the other runs on the same store, found anew at each call (a
    run begun after this one shares its children too, ``World.refresh``): those the store's runs recorded
    (any folder on this machine), and those beside ``run_dir`` (runs from before the record)."""
    from benchfill.store import absolute_url

    own = (run_dir / "sim_world_state.jsonl").resolve()
    found, url = set(), absolute_url(url)  # as store.url holds it
    for other in sorted(run_dir.parent.glob("*/store.url")):
        try:
            same = absolute_url(other.read_text().split("\n", 1)[0].strip()) == url
        except OSError:  # a folder being made or removed
            continue
        if other.parent != run_dir and same:
            found.add((other.parent / "sim_world_state.jsonl").resolve())
    if store is not None:
        try:
            rows = _all_runs_meta(store)
        except Exception:  # the store busy or gone for a moment: the folder scan stands
            rows = []
        for r in rows:
            found.update(Path(p).resolve() for p in _state_paths(json.loads(r.value_json)))
    return sorted(p for p in found if p != own)


def _state_paths(value) -> list[str]:
    """The state files a run's ``SIM_STATE_META`` row names: every folder the run was worked from (one path,
    as an older benchfill wrote it, or a list)."""
    return [value] if isinstance(value, str) else [p for p in value or () if isinstance(p, str)]


def _all_runs_meta(store) -> list:
    """Every run's ``SIM_STATE_META`` row (``Store.all`` reads this run's only)."""
    from sqlmodel import select

    from benchfill.schema import RunMeta

    with store.session() as s:
        return list(s.exec(select(RunMeta).where(RunMeta.key == SIM_STATE_META)))


def start_sim(opts, bench, run_dir: Path, url: str | None = None, store=None):
    """The simulated world over the benchmark's items, served in-process, and a config pointing at it.

    With ``url``, the same world is already served there (by a sweep, for every unit of the run):
    it is built here for its names and its truth, and no server is started (``server`` is None)."""
    from benchfill.config import Config, LLMConfig, ProbeConfig
    from benchfill.sim import SimServer, World

    spec = bench.spec
    matrix = bench.given_matrix()
    # the spec's own field names, as `sim serve` gives them: the world read a code spec's tests under "test"
    # and wrote that field into every child of a spec whose tests are elsewhere
    named = {name: getattr(spec, name) for name in ("options_field", "tests_field", "entry_point_field")
             if getattr(spec, name, None)}
    world = World.from_items(bench.items, evaluator=spec.evaluator, text_field=spec.text_field,
                             answer_field=spec.answer_field, matrix=matrix, n_probes=opts.sim_probes, **named,
                             seed=opts.seed, state_path=run_dir / "sim_world_state.jsonl",
                             latency_ms=opts.sim_latency_ms, rewriter=opts.sim_rewriter,
                             discrimination_sd=opts.sim_discrimination, reply_habits=opts.sim_reply_habits,
                             pair_sd=opts.sim_pair_sd, pair_curve=opts.sim_pair_curve,
                             rewriter_knobs=opts.sim_rewriter_knobs)
    if opts.store:  # one world for the runs that share a store: it knows their children (shared memory)
        if store is not None:  # where this run's children are, for the runs in other folders on the store
            # every folder this run was worked from: one resumed from another folder on the same store still
            # finds the children its world made before (that folder's state was dropped, and 20 probe calls
            # met a world that knew none of them, graded wrong)
            own = str((run_dir / "sim_world_state.jsonl").resolve())
            paths = _state_paths(store.get_meta(SIM_STATE_META))
            if own not in paths:
                store.set_meta(SIM_STATE_META, [*paths, own])
        world.siblings = functools.partial(_sibling_states, run_dir, opts.store, store)
        world.refresh()
    # The cache key holds the endpoint URL, port included, so a resumed run serves its world on the port its
    # calls were made on: the one kept in its store at its first start, else one fixed per run directory. A
    # port from the directory alone changed with a run folder moved elsewhere (its path is another), and the
    # resumed run sent every call again. A busy port falls back to any free one (then calls are repeated).
    server = None
    if url is None:
        kept = store.get_meta(SIM_PORT_META) if store is not None else None
        port = kept if type(kept) is int and 0 < kept < 65536 else sim_port(run_dir)
        try:
            server = SimServer(world, port=port).start()
        except OSError:
            server = SimServer(world).start()
        if store is not None and port != kept:  # the first start: where this run's calls are keyed from now on
            store.set_meta(SIM_PORT_META, server.port)
        url = server.base_url
    config = Config(
        probes=[ProbeConfig(name=n, base_url=url, model=n, trials=8, temperature=1.0) for n in world.probes],
        rewriter=LLMConfig(model=f"openai/{world.rewriter_model}", api_base=url, temperature=1.0),
        judge=LLMConfig(model=f"openai/{world.judge_model}", api_base=url, temperature=0.0),
        seed=opts.seed,
    )
    return world, server, config


def sim_port(run_dir: Path) -> int:
    """The loopback port of a run's simulated world at its first start (then kept in its store, as
``SIM_PORT_META``, since the cache keys hold it: a moved run is served on it again); fixed per run directory.

    In [20000, 32000): above Ray's worker ports (10002-19999) and below Linux's default ephemeral range
    (32768-60999), where the system hands out the local ports of outgoing connections. A port in that
    range can be held by one of them (Ray's, the clients') when a sweep starts its worlds, and the sweep
    then refuses to start: the ray sweep test failed so in a CI rehearsal."""
    return 20000 + derive_seed(0, str(Path(run_dir).resolve())) % 12000


# Above this many items, a given response matrix places the probe panel through anchor items only.
ANCHOR_ITEMS = 300
BENCHMARK_BATCH = 500  # items per progress line while collecting the panel's benchmark rollouts
PROGRESS_EVERY_S = 15.0  # and a line at least this often, however few the items


def anchor_items(matrix, items, n: int = ANCHOR_ITEMS) -> list[dict]:
    """``n`` items spread evenly over the difficulty the given matrix implies (all when fewer).

    Deterministic (sorted by a MAP fit of the matrix alone, then evenly spaced ranks), so a
    resumed run asks for exactly the same rollouts.
    """
    if len(items) <= n:
        return list(items)
    from benchfill.irt import fit as irt_fit

    fitted = irt_fit(matrix, engine="map")
    difficulty = dict(zip(fitted.item_ids, np.asarray(fitted.difficulty, dtype=float), strict=True))
    answered = [it for it in items if it["id"] in difficulty]
    if len(answered) <= n:
        return answered
    # Ranked on difficulties rounded to 1e-9: the MAP optimum moves in its last digits with the number of
    # BLAS threads, and near-ties would otherwise change places from one machine to another.
    ranked = sorted(answered, key=lambda it: (round(difficulty[it["id"]], 9), it["id"]))
    picks = np.linspace(0, len(ranked) - 1, n).round().astype(int)
    return [ranked[k] for k in sorted(set(picks.tolist()))]


def panel_probes(fit, panel: list[tuple[str, int]], *, ability_error: bool = True) -> list[Probe]:
    """The annotator's probes from the fit that placed them: (name, trials) each, with the fitted
    ability and its standard error (none where the fit has no usable one, or ``ability_error`` is off)."""
    ability = dict(zip(fit.models, np.asarray(fit.ability, dtype=float), strict=True))
    se = dict(zip(fit.models, np.asarray(fit.ability_se, dtype=float), strict=True))

    def usable(v: float) -> float:
        return float(v) if ability_error and np.isfinite(v) and v > 0 else 0.0

    return [Probe(name, ability[name], trials, usable(se[name])) for name, trials in panel]


def _stack(a, b):
    """Two response matrices over the union of their items (pairs never tried stay at zero trials).

    A model in both (a probe of the panel that the given matrix also holds, when other probes are not in
    it) keeps its rows apart: ``a``'s is renamed "NAME (given)", so that NAME is ``b``'s, the rollouts of
    the run's own prompts, which place the probe (a published row may have answered other prompts)."""
    from benchfill.matrix import ResponseMatrix

    ids = list(a.item_ids) + [i for i in b.item_ids if i not in set(a.item_ids)]
    col = {i: k for k, i in enumerate(ids)}
    taken = set(b.models)
    models = [f"{m} (given)" if m in taken else m for m in a.models] + list(b.models)
    correct = np.zeros((len(models), len(ids)), dtype=np.int64)
    trials = np.zeros_like(correct)
    chance = np.zeros(len(ids))
    for off, m in ((0, a), (a.n_models, b)):
        idx = [col[i] for i in m.item_ids]
        correct[off: off + m.n_models, idx] = m.correct
        trials[off: off + m.n_models, idx] = m.trials
        chance[idx] = m.chance
    return ResponseMatrix(tuple(models), tuple(ids), correct, trials, chance, f"{a.source} + {b.source}")


def _solver_prompt():
    """The shared solver templates when present; else the contract's tags, which any solver reads."""
    try:
        from benchfill.prompts import format_solver_prompt

        return format_solver_prompt
    except ImportError:
        return _tagged_solver_prompt


def _tagged_solver_prompt(item: dict[str, Any], spec) -> str:
    text = str(item.get(spec.text_field, ""))
    if spec.evaluator == "multiple_choice":
        opts = item.get(spec.options_field or "options") or []
        lines = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(opts))
        return (f"<problem>{text}</problem>\n<options>\n{lines}\n</options>\n"
                "Think step by step, then finish with: The answer is (X)")
    if spec.evaluator == "code":
        return f"<problem>{text}</problem>\nComplete the function; reply with one ```python block."
    return f"<problem>{text}</problem>\nSolve the problem; put the final answer in \\boxed{{}}."
