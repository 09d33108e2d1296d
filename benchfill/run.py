"""One run end to end: benchmark -> responses -> IRT fit -> gaps -> one search per gap -> report.

The run directory ``runs/<run-id>/`` holds the store, the fit, the report, the
plots and the review queue. The run id is a hash of the arguments that decide
the result, so running the same command again finds the same directory; every
model call is cached in the store under a hash of its request and every random
choice is keyed by (seed, gap, round, parent, child), so a rerun after a kill
replays the completed work from the cache and repeats no paid call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import hashlib
import json
import logging
import math
import numbers
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

from benchfill import calling_module, locks
from benchfill.errors import NOTE, ConfigError, DataError
from benchfill.untrusted import terminal

log = logging.getLogger("benchfill.run")

BACKENDS = ("sim", "openai")
EXTRA_KEYS = {"anchor_items"}  # RunOptions.extra: anchor items for a benchmark with a matrix (a sweep sets it)


@dataclass
class RunOptions:
    """The settings of one run, field for field those of `benchfill run` (``--sim-rewriter`` is ``--rewriter``).

    What to run on: ``benchmark`` (a registered name; None: the config's ``[benchmark]``, else the built-in
    demo), or ``items`` and ``spec`` (a benchmark of your own), with ``responses`` (a response matrix) and
    ``data_dir`` (where registered benchmarks' files live). ``config``: a TOML/YAML file naming the probe
    panel, rewriter and judge (``backend`` then defaults to "openai"; without one, "sim", the simulated world).

    The search (the BenchFill paper's defaults): ``gaps`` to fill, ``strategy`` ("benchfill", "baseline" or
    "oracle"), ``rounds``, ``parents`` and ``children`` per round, ``references`` shown to the rewriter,
    ``tolerance`` (stop once the best child lies this close to the gap's target, in z), ``steering`` ("off",
    the default: ask for the target, the paper's protocol; "on": ask for what the rewriter's learned response
    lands on the target),
    ``selection`` ("posterior", "reduction" or "closest"), ``near_duplicate`` (a child this similar to an
    item, 0-100, is flagged), ``prescreen`` ("on": skip children their text predicts far outside the gap).
    The annotation: ``annotation`` ("adaptive" or "fixed"), ``confirm`` (fresh rollouts on the chosen item),
    ``confirm_se`` and ``confirm_cap`` (where the confirmation stops), ``misfit`` (the discrimination spread
    allowed for), ``pair_allowance`` (the sd of the (probe, item) offsets allowed for). The simulated world:
    ``sim_probes``, ``sim_latency_ms``, ``sim_discrimination``, ``sim_pair_sd``, ``sim_pair_curve``,
    ``sim_reply_habits`` (the share of replies in a real model's habits, form only), ``sim_rewriter`` (a preset: "kind", "realistic", "hostile") and ``sim_rewriter_knobs`` (docs/sim-rewriter.md).
    Where it goes: ``runs_dir``, ``store`` (a SQLAlchemy URL), ``run_id``. ``progress``: lines on stderr as
    it goes. ``allow_unconfined``: run generated code where no sandbox is available. ``extra``: settings
    without a flag (``anchor_items``). ``RunOptions.check`` refuses what no run can use, naming the field.
    """

    # None: the one a config's [benchmark] names, else (with no --items/--spec either) the built-in demo
    # (``default_benchmark``); the CLI asks for one instead
    benchmark: str | None = None
    items: str | None = None
    responses: str | None = None
    spec: str | None = None
    data_dir: str | None = None
    gaps: int = 3
    strategy: str = "benchfill"
    annotation: str = "adaptive"
    confirm: bool = True
    # The confirmation's precision: stop at this sampling z se, or after this many fixed-protocol budgets.
    # Looser is cheaper and places less exactly (docs/sim-rewriter.md measures the trade).
    confirm_se: float = 0.02
    confirm_cap: float = 4.0
    # The sd of log item discrimination the annotator allows for (search/annotate.py, Annotator.misfit).
    # "auto": the benchmark's own, estimated from its matrix (irt/spread.py), at least 0.5; 0: every item
    # taken to fit the 1PL exactly.
    misfit: float | str = "auto"
    # The sd, in logits, of each (probe, item) pair's own offset from the curve the annotator allows for
    # (search/annotate.py, Annotator.pair; irt/pair.py). "auto": estimated from the probe panel's own repeated
    # answers on the benchmark's items; 0: a probe's answers to an item are independent draws about the curve.
    pair_allowance: float | str = "auto"
    backend: str | None = None  # default: openai when --config gives a probe panel, else sim
    config: str | None = None
    seed: int = 0
    rounds: int = 8
    parents: int = 4
    children: int = 4
    references: int = 16
    tolerance: float = 0.01
    steering: str = "off"  # "off" (the paper's protocol) | "on" (target steering)
    selection: str = "posterior"  # "posterior" | "reduction" | "closest" (the paper's rule)
    rounds_matched: int | None = None  # baseline: T_g to match (default: rounds)
    near_duplicate: float = 90.0
    prescreen: str = "off"  # "on": skip children whose text puts them far outside the gap (search/prescreen.py)
    sim_probes: int = 12
    sim_latency_ms: float = 0.0
    # sim backend: sd of log item discrimination (benchfill.sim.world.DISCRIMINATION_SD; 0: the 1PL the
    # annotator fits, kinder than real data)
    sim_discrimination: float = 0.5
    # sim backend: sd, in logits, of each (probe, item) pair's own offset from the curve (benchfill.sim.world.PAIR_SD,
    # 5, matches the published matrices, bench/bench_pair_effect.py; 0: a probe's answers to an item are
    # independent draws about the curve, kinder than real data)
    sim_pair_sd: float = 5.0
    # sim backend: how those offsets meet the curve (benchfill.sim.world.PAIR_CURVE): "average" keeps the latent
    # curve as their average, as real answers fitted it; "added" flattens it (the world before s48)
    sim_pair_curve: str = "average"
    # sim backend: the share of replies written in a real model's habits (benchfill/sim/habits.py); form
    # only, so it is not part of a run's identity
    sim_reply_habits: float = 0.3
    sim_rewriter: str | None = None  # sim backend: rewriter preset (default realistic), docs/sim-rewriter.md
    sim_rewriter_knobs: dict[str, float] = field(default_factory=dict)
    runs_dir: str | None = None
    store: str | None = None  # a SQLAlchemy URL (PostgreSQL); default runs/<id>/store.db
    run_id: str | None = None
    progress: bool = False  # lines on stderr as the run goes (the CLI's default; a library caller asks for them)
    progress_label: str = ""  # said before each progress line (a sweep's run, among others in one process)
    allow_unconfined: bool = False  # run generated code even where no sandbox (bubblewrap) is available
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved_backend(self, name: Callable[[str], str] | None = None) -> str:
        if self.backend:
            if self.backend not in BACKENDS:
                raise ConfigError(f"{(name or opt)('backend')}: unknown backend {self.backend!r} "
                                  f"(choose from {', '.join(BACKENDS)})")
            return self.backend
        return "openai" if self.config else "sim"

    def check(self, name: Callable[[str], str] | None = None) -> None:
        """Refuse options no run can use, before any work (run and --dry-run), in one line that starts
        with the option's name: ``name(field)``, by default the field's (its flag under the CLI: ``opt``); a
        sweep names the field of its file instead."""
        from benchfill.search import PROTOCOLS, STRATEGIES

        name = name or opt
        for f in fields(self):  # a bool option set from a file or by a library caller: "no" would be truthy
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise ConfigError(f"{name(f.name)}: true or false, got {getattr(self, f.name)!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"{name('strategy')}: unknown strategy {self.strategy!r} "
                              f"(choose from {', '.join(STRATEGIES)})")
        if self.annotation not in PROTOCOLS:
            raise ConfigError(f"{name('annotation')}: unknown protocol {self.annotation!r} "
                              f"(choose from {', '.join(PROTOCOLS)})")
        for key, value, least in (("gaps", self.gaps, 1), ("rounds", self.rounds, 1), ("parents", self.parents, 1),
                                  ("children", self.children, 1), ("references", self.references, 0),
                                  ("sim_probes", self.sim_probes, 2), ("seed", self.seed, 0),
                                  ("rounds_matched", self.rounds_matched, 1)):
            if value is None and key == "rounds_matched":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ConfigError(f"{name(key)}: a whole number, got {value!r}")
            value = int(value)  # a numpy integer (a caller's computed gaps) as a plain one: reports hold JSON
            setattr(self, key, value)
            if value < least:
                raise ConfigError(f"{name(key)}: must be at least {least}, got {value}")
        for key, value, lo, hi in (("tolerance", self.tolerance, 0.0, 1.0),
                                   ("near_duplicate", self.near_duplicate, 0.0, 100.0),
                                   ("sim_latency_ms", self.sim_latency_ms, 0.0, float("inf")),
                                   ("sim_discrimination", self.sim_discrimination, 0.0, 2.0),
                                   ("sim_pair_sd", self.sim_pair_sd, 0.0, 8.0),
                                   ("sim_reply_habits", self.sim_reply_habits, 0.0, 1.0),
                                   ("misfit", 0.0 if self.misfit == "auto" else self.misfit, 0.0, 2.0),
                                   ("pair_allowance", 0.0 if self.pair_allowance == "auto" else self.pair_allowance,
                                    0.0, 6.0)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not lo <= value <= hi:
                auto = " or auto" if key in ("misfit", "pair_allowance") else ""
                raise ConfigError(f"{name(key)}: a number in [{lo:g}, {hi:g}]{auto}, got {value!r}")
            if not isinstance(value, (int, float)):  # a numpy float32 as a plain float: the run id is JSON
                setattr(self, key, float(value))  # (an int stays an int: 50 and 50.0 are other run ids)
        if not isinstance(self.extra, dict) or set(self.extra) - EXTRA_KEYS:  # a misspelt key did nothing
            unknown = sorted(set(self.extra) - EXTRA_KEYS) if isinstance(self.extra, dict) else self.extra
            raise ConfigError(f"{name('extra')}: unknown {unknown!r} (it takes {', '.join(sorted(EXTRA_KEYS))})")
        anchors = self.extra.get("anchor_items")  # (a sweep's file checks its own; a caller's reached numpy)
        if anchors is None and "anchor_items" in self.extra:  # None: the default, as the key left out (its run)
            self.extra = {k: v for k, v in self.extra.items() if k != "anchor_items"}
        elif anchors is not None:
            if isinstance(anchors, bool) or not isinstance(anchors, numbers.Integral) or anchors < 1:
                raise ConfigError(f"{name('extra')}: anchor_items must be a whole number of at least 1, "
                                  f"got {anchors!r}")
            self.extra = {**self.extra, "anchor_items": int(anchors)}
        for key in ("steering", "prescreen"):  # YAML reads a bare on/off as true/false
            if isinstance(getattr(self, key), bool):
                setattr(self, key, "on" if getattr(self, key) else "off")
        if self.steering not in ("on", "off"):
            raise ConfigError(f"{name('steering')}: {self.steering!r} is neither on nor off")
        # the run's folder is <runs dir>/<run id>: "../x" or "a/b" would write it elsewhere; a control character
        # (a newline, a terminal escape) or a bidi override would reach every message, report and card that
        # names the run. Any other name a folder may have is kept: runs made under it before must still resume.
        for key in ("runs_dir", "items", "spec", "responses", "config", "data_dir", "store", "benchmark"):
            value = getattr(self, key)  # pathlib's TypeError, deep in the run, named no field
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigError(f"{name(key)}: a path or name (str), got {type(value).__name__} {value!r:.80}")
        rid = self.run_id  # (an empty one, given, had quietly named the default id)
        if rid is not None and (not isinstance(rid, str) or rid.strip() in ("", ".", "..")
                                or any(c in rid for c in "/\\\0") or terminal(rid) != rid):
            raise ConfigError(f"{name('run_id')}: a plain folder name (no '/', not '.' or '..', no control "
                              f"character), got {rid!r}")
        if self.selection not in ("posterior", "reduction", "closest"):
            raise ConfigError(f"{name('selection')}: unknown rule {self.selection!r} "
                              "(choose from posterior, reduction, closest)")
        from benchfill.sim.world import PAIR_CURVES

        if self.sim_pair_curve not in PAIR_CURVES:
            raise ConfigError(f"{name('sim_pair_curve')}: {self.sim_pair_curve!r} unknown (choose from "
                              f"{', '.join(PAIR_CURVES)})")
        if self.prescreen not in ("on", "off"):
            raise ConfigError(f"{name('prescreen')}: {self.prescreen!r} is neither on nor off")
        if _not_number(self.confirm_se) or not 0 < self.confirm_se < 1:
            raise ConfigError(f"{name('confirm_se')}: a z standard error in (0, 1), got {self.confirm_se!r}")
        if _not_number(self.confirm_cap) or not 0 < self.confirm_cap < float("inf"):
            raise ConfigError(f"{name('confirm_cap')}: a positive number of fixed-protocol budgets, "
                              f"got {self.confirm_cap!r}")
        self._check_rewriter(name)
        # The simulated world's other knobs, likewise: with real endpoints they did nothing, without a word (and
        # sim_probes and sim_latency_ms changed the run's id, so the command without them did not resume it)
        if self.resolved_backend(name) != "sim":
            for key in ("sim_probes", "sim_latency_ms", "sim_discrimination", "sim_pair_sd", "sim_pair_curve",
                        "sim_reply_habits"):
                if getattr(self, key) != RunOptions.__dataclass_fields__[key].default:
                    raise ConfigError(f"{name(key)}: sets the simulated world, which does nothing with "
                                      f"{name('backend')} openai")

    def _check_rewriter(self, name: Callable[[str], str]) -> None:
        """The simulated rewriter's preset and knobs, as the world would refuse them only when it is built
        (after the run directory and, in a sweep, other runs' work)."""
        from benchfill.sim.rewriter import KNOBS, PRESETS, rewriter_model

        if self.sim_rewriter is not None and (not isinstance(self.sim_rewriter, str) or self.sim_rewriter not in PRESETS):
            raise ConfigError(f"{name('sim_rewriter')}: unknown preset {self.sim_rewriter!r} "
                              f"(choose from {', '.join(PRESETS)})")
        knobs = self.sim_rewriter_knobs
        if not isinstance(knobs, dict):
            raise ConfigError(f"{name('sim_rewriter_knobs')}: a table of knob = number, got {knobs!r}")
        for k, v in knobs.items():
            if k not in KNOBS:
                raise ConfigError(f"{name('sim_rewriter_knobs')}: unknown knob {k!r} (knobs: {', '.join(KNOBS)})")
            if _not_number(v) or not math.isfinite(v):
                raise ConfigError(f"{name('sim_rewriter_knobs')}: {k} must be a number, got {v!r}")
        if self.resolved_backend(name) != "sim" and (self.sim_rewriter or knobs):
            which = "sim_rewriter" if self.sim_rewriter else "sim_rewriter_knobs"
            raise ConfigError(f"{name(which)}: sets the simulated world's rewriter, which does nothing with "
                              f"{name('backend')} openai")
        try:  # the knobs' ranges (RewriterModel's own checks)
            rewriter_model(self.sim_rewriter, **knobs)
        except ConfigError as exc:
            raise ConfigError(f"{name('sim_rewriter_knobs')}: {str(exc).removeprefix('sim rewriter: ')}") from None

    def identity(self, *, idle_at_defaults: bool = True) -> dict[str, Any]:
        """The arguments that decide the result (not where it is written, not how it is shown); those the run's
        strategy never reads at their defaults (``idle_at_default``; ``idle_at_defaults=False``: as given, as an
        earlier benchfill made a run's id of them)."""
        d = asdict(self)
        for k in ("runs_dir", "store", "run_id", "progress", "progress_label", "data_dir", "allow_unconfined",
                  "sim_reply_habits"):
            d.pop(k)
        d["backend"] = self.resolved_backend()
        if d["backend"] != "sim":  # world knobs: real runs keep the ids they had
            d.pop("sim_discrimination")
            d.pop("sim_pair_sd")
            d.pop("sim_pair_curve")
        elif not self.sim_pair_sd:  # no offsets: nothing for them to meet the curve by
            d.pop("sim_pair_curve")
        if idle_at_defaults:
            d = idle_at_default(d)
        from benchfill.prompts import overrides_digest

        prompts = overrides_digest()  # templates of the user's own (BENCHFILL_PROMPTS_DIR) decide the result too
        if prompts:  # (runs on the built-in prompts keep the ids they had)
            d["prompts_sha256"] = prompts
        for k, absent in ABSENT_MEANS.items():  # added later: runs made without them keep the ids they had
            if k in d and d[k] == absent:
                d.pop(k)
        for k in PATH_OPTIONS:  # one file, however it is spelt or wherever the command runs from: one run
            if isinstance(d.get(k), str) and d[k] and not d[k].startswith("hf:"):
                d[k] = str(Path(d[k]).expanduser().resolve())
        return d


# Options added after runs were made, and the value a run's id (and its stored options) without one stands for:
# what every run before them did. At that value an option is left out of the id, so those runs keep theirs;
# where the default is another (the pair allowance: none before, auto now; the simulated probes' pair offsets: 0
# before, 5 now (3.5 from s46 to s48), and added to the curve before, about it now), a run at the default is a
# new run.
ABSENT_MEANS: dict[str, Any] = {"prescreen": "off", "confirm_se": RunOptions.confirm_se,
                                "confirm_cap": RunOptions.confirm_cap, "pair_allowance": 0.0, "sim_pair_sd": 0.0,
                                "sim_pair_curve": "added"}


# What the oracle never reads: it places an ideal item at each gap's midpoint, after the fit, with no search.
_ORACLE_IDLE = ("rounds", "parents", "children", "references", "tolerance", "steering", "selection", "annotation",
                "confirm", "confirm_se", "confirm_cap", "near_duplicate", "prescreen")


def idle_at_default(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (RunOptions' fields by name) with those the run's strategy never reads at their defaults:
    rounds_matched but for the baseline, the search's settings for the oracle, the confirmation's precision with
    no confirmation. A run's id is made of them so, and a stored run's options are compared so, so that the
    command with or without such an option names and resumes the same run (one made before, too)."""
    default = {k: f.default for k, f in RunOptions.__dataclass_fields__.items()}
    idle = set() if options.get("strategy") == "baseline" else {"rounds_matched"}
    if options.get("strategy") == "oracle":
        idle.update(_ORACLE_IDLE)
    if options.get("confirm") is False:
        idle.update(("confirm_se", "confirm_cap"))
    out = {k: default[k] if k in idle else v for k, v in options.items()}
    extra = out.get("extra")
    if isinstance(extra, dict) and "anchor_items" in extra:  # (the engine imported only where it is given)
        from benchfill.engine.backend import ANCHOR_ITEMS

        if extra["anchor_items"] == ANCHOR_ITEMS:  # the default spelt out (a sweep's anchor_items = 300): the
            # run that `benchfill run`, which has no such flag, makes with the same options
            out["extra"] = {k: v for k, v in extra.items() if k != "anchor_items"}
    return out


# How RunOptions.check names an option by default: its flag of `benchfill run`, where the flag is not the
# field's name with dashes (a flag that turns it off: the field, then the flag).
_FLAGS = {"sim_rewriter": "--rewriter", "sim_rewriter_knobs": "--rewriter-knobs", "confirm": "confirm (--no-confirm)",
          "progress": "progress (--quiet)", "extra": "extra"}  # (extra has no flag: a library caller's or a sweep's)


def option_flag(field_name: str) -> str:
    return _FLAGS.get(field_name, "--" + field_name.replace("_", "-"))


def _field(field_name: str) -> str:
    return field_name


# How a refusal names an option: the field a library caller set (``RunOptions(sim_rewriter=...)``), or, under
# the CLI (``flag_names``), the flag its user typed. A library caller read "--rewriter: unknown preset" for a
# field named sim_rewriter.
_NAMER: contextvars.ContextVar[Callable[[str], str]] = contextvars.ContextVar("benchfill_option_names",
                                                                             default=_field)


@contextlib.contextmanager
def flag_names():
    """Name options by their `benchfill run` flags in what is refused within (the CLI's)."""
    token = _NAMER.set(option_flag)
    try:
        yield
    finally:
        _NAMER.reset(token)


def opt(field_name: str) -> str:
    """An option as the caller knows it: its field, or its flag under the CLI."""
    return _NAMER.get()(field_name)


def _not_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, (int, float))


def run_id_for(opts: RunOptions, name: str | None = None) -> str:
    """``--run-id``, else ``<name>-<strategy>-<digest of the settings>``; ``name`` defaults to the
    benchmark's, or the items file's stem (a sweep names a custom benchmark's runs after its label)."""
    if opts.run_id:
        return opts.run_id
    digest = hashlib.sha256(json.dumps(opts.identity(), sort_keys=True).encode()).hexdigest()[:10]
    if not name and not opts.benchmark and opts.items and opts.items.startswith("hf:"):
        # a dataset, not a file: "hf:acme/quiz::test" names its runs "acme_quiz_test-...", not "quiz::test-..."
        # (a local folder by its own name: its path, home folder and all, went into every published row)
        from benchfill import hub

        try:
            public = hub.parse(opts.items).public()
        except DataError:
            public = opts.items
        def named(ref: str) -> str:
            return re.sub(r"[^A-Za-z0-9._-]+", "_", ref[3:]).strip("._-")[:64] or "hf"

        name = named(public)
        # a run an earlier benchfill named after the whole path is resumed where it is, not started anew
        before = named(opts.items)
        if before != name and (runs_root(opts) / f"{_folder_name(before)}-{opts.strategy}-{digest}").is_dir():
            name = before
    name = _folder_name(name or opts.benchmark or Path(opts.items or "custom").stem)
    if len(name.encode()) > 200:  # a folder name holds 255 bytes: a long items file's stem is cut, as a sweep's label
        name = name.encode()[:64].decode(errors="ignore")
    run_id = f"{name}-{opts.strategy}-{digest}"
    # A run an earlier benchfill made with an option its strategy never reads carried the option in its id: where
    # that folder holds a run, the command that gives the option again resumes it there (it was abandoned without a
    # word, a finished one redone). Whichever folder holds what, the same command names the same folder: a sweep
    # plans its runs' folders before any runs (the command without the option cannot know the old id; it starts
    # anew, and earlier_runs names the old run beside it).
    given = hashlib.sha256(json.dumps(opts.identity(idle_at_defaults=False), sort_keys=True).encode()).hexdigest()[:10]
    if given != digest:
        from benchfill.store import STORE_FILE, STORE_URL_FILE

        old = f"{name}-{opts.strategy}-{given}"
        if any((runs_root(opts) / old / f).is_file() for f in (STORE_FILE, STORE_URL_FILE)):
            return old
    return run_id


def _folder_name(name: str) -> str:
    """``name`` where it is text this system can name a folder with; else its letters, digits, '.', '_' and
    '-' (a file name in another code page, "m\xfcller.jsonl", or any non-ASCII one under LC_ALL=C with
    PYTHONUTF8=0, reaches Python as surrogates: the run id's encoding stopped the run with a traceback)."""
    try:
        name.encode()
        os.fsencode(name)
        return name
    except UnicodeEncodeError:
        text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:64] or "items"


def runs_root(opts: RunOptions) -> Path:
    return Path(opts.runs_dir or os.environ.get("BENCHFILL_RUNS_DIR") or "runs")


def _require_options(opts: Any) -> None:
    if not isinstance(opts, RunOptions):  # a dict had failed deep in the run, on an attribute
        raise ConfigError(f"opts: a benchfill.RunOptions, got {type(opts).__name__} {opts!r:.80}"
                          + (" (write RunOptions(**opts))" if isinstance(opts, dict) else ""))


def run(opts: RunOptions) -> Path:
    """Do (or resume) the run; return its directory. ``opts`` is left as it was given (a caller reuses it)."""
    from benchfill import netguard

    _require_options(opts)
    opts = copy.deepcopy(opts)  # the benchmark a config names, the demo's default, check()'s on/off
    _benchmark_from_config(opts)
    default_benchmark(opts)
    return netguard.run(execute(opts))  # uvloop where installed, unless held to loopback


async def execute(opts: RunOptions, sim_url: str | None = None, gaps_only: list[int] | None = None) -> Path:
    """Do (or resume) the run. A sweep's units (docs/sweep.md) call it with ``gaps_only``: search those
    gaps only (none: just the fit) and write no report; ``sim_url``: the run's simulated world, already
    served there for every unit of the run. Templates of the user's own are held as they are when it begins
    (``prompts.held_overrides``): edited meanwhile, they reach neither its calls nor its id."""
    from benchfill.prompts import held_overrides

    with held_overrides():
        return await _execute(opts, sim_url, gaps_only)


async def _execute(opts: RunOptions, sim_url: str | None, gaps_only: list[int] | None) -> Path:
    import numpy as np

    from benchfill import coverage
    from benchfill.engine.backend import open_backend
    from benchfill.report import write_report
    from benchfill.search import NearDuplicateIndex, oracle_fill
    from benchfill.store import open_run_store, run_name

    opts.check()
    bench = load_benchmark(opts)
    check_enough_items(bench, opts)
    from benchfill.evaluators import require_confinement

    isolation = require_confinement(bench.spec.evaluator, opts.allow_unconfined)  # refuses before any work
    from benchfill.prompts import check_overrides

    prompt_warnings = check_overrides()  # a bad override: refused before the run's folder is made
    items = bench.items
    if opts.gaps > len(items) + 1:  # n items bound n + 1 gaps; asking more would search them all, slowly
        raise ConfigError(f"{opt('gaps')} {opts.gaps}: {bench.name} has {len(items)} items, so at most {len(items) + 1} gaps")
    run_dir = runs_root(opts) / run_id_for(opts)
    if gaps_only is None:
        _check_outputs(run_dir)
    fresh = not run_dir.exists()
    made = [d for d in (run_dir, *run_dir.parents) if not d.exists()]  # the runs dir too, where this makes it
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a runs dir under /proc, or read-only: the field named, as any bad option is
        raise ConfigError(f"{opt('runs_dir')} {runs_root(opts)}: cannot make the run's folder there "
                          f"({exc.strerror or exc})") from None
    # One process at a time works in a run directory (a sweep's units, which search different gaps of one
    # run, share it among themselves); held until this process ends, however it ends.
    lock = _hold_run(run_dir, run_id_for(opts), exclusive=gaps_only is None)
    show = progress_printer(opts.progress, opts.progress_label)
    for line in prompt_warnings:  # a warning, not progress: --quiet hid it, and a library caller's log never had it
        log.warning("%s", line)
    if fresh and not opts.run_id and gaps_only is None:
        for line in earlier_runs(run_dir, opts.identity()):
            log.warning("%s", line, extra=NOTE)  # news a --quiet run still says
    if isolation == "unconfined":  # allowed, perhaps by a BENCHFILL_ALLOW_UNCONFINED=1 set long ago: said at
        # once, --quiet or not, as a security matter is no progress line
        print(f"benchfill: warning: {run_id_for(opts)}: generated programs will run UNCONFINED (no bubblewrap "
              "sandbox), with this user's rights", file=sys.stderr, flush=True)
    try:
        store = open_run_store(run_dir, opts.store, where=opt("store"))
    except BaseException:
        _give_up(made, lock)
        raise
    try:  # a store named by URL may be shared: the same command from another folder has this run id too
        let_go = store.hold_run(exclusive=gaps_only is None) if opts.store else (lambda: None)
    except BaseException:
        store.close()
        _give_up(made, lock)
        raise
    started = False
    try:
        inputs = _input_hashes(opts, items, bench)  # (read once: the items and responses files may be large)
        _same_run(store, opts, run_id_for(opts), inputs, bench)  # a resume must not mix two runs' settings or files
        if not store.get_meta("options"):  # from the start: a run killed during its fit is checked too
            identity = opts.identity()
            store.set_meta("options", identity)
            store.set_meta(PROMPTS_META, {"sha256": identity.get("prompts_sha256")})
        if not store.get_meta("code"):  # the code that began it (its version, and its commit where a checkout)
            from benchfill.source import code_identity

            store.set_meta("code", code_identity())
        recorded = store.get_meta(INPUTS_META) or {}
        if inputs.keys() - recorded.keys():  # (a run from before they were all recorded: the rest recorded now)
            store.set_meta(INPUTS_META, {**inputs, **recorded})
        if opts.config and not store.get_meta("config_sha256"):
            store.set_meta("config_sha256", _sha256_of(opts.config))
        _record_originals(store, items)
        async with open_backend(opts, bench, store, run_dir, sim_url=sim_url) as backend:
            started = True
            fit, matrix_source = await backend.fit_benchmark()
            z = np.asarray(fit.z, dtype=float)
            ids = list(fit.item_ids)
            store.set_meta("benchmark", bench.spec.model_dump(mode="json"))
            store.set_meta("seed", opts.seed)
            store.set_meta("config", backend.config.redacted())
            store.set_meta("backend", backend.name)
            run_name(store, run_dir, keep=True)  # its name in releases, whatever its folder is called later
            store.set_meta("strategy", opts.strategy)
            store.set_meta("isolation", isolation)  # how generated code was confined, if any ran
            store.set_meta("options", opts.identity())
            store.set_meta("fit", fit.to_dict())
            if not gaps_only:  # a sweep's gap units leave the run directory to the run's own steps
                fit.save(run_dir / "fit.json")
            chosen_gaps = coverage.gaps(z, k=opts.gaps, item_ids=ids)
            by_id = {it["id"]: it for it in items}
            gap_items = {i: by_id[i] for i in ids if i in by_id}
            z_of = {i: float(v) for i, v in zip(ids, z, strict=True) if i in by_id}
            if opts.confirm and opts.strategy != "oracle":
                for line in narrow_gaps(chosen_gaps, opts.confirm_se, backend.annotator):
                    log.warning("%s", line)  # a warning, not progress: --quiet must not hide it
            if opts.strategy == "oracle":
                results, oracle_z = [], oracle_fill(z, opts.gaps)
            else:
                oracle_z = None
                text_field = bench.spec.text_field
                dup = NearDuplicateIndex({i: str(it.get(text_field, "")) for i, it in gap_items.items()},
                                         opts.near_duplicate)
                if opts.prescreen == "on" and opts.strategy == "benchfill":
                    backend.train_prescreen(gap_items, z_of)
                if opts.strategy == "benchfill":  # the store's shared memory (docs/memory.md)
                    backend.plan_memory(list(z_of), list(z_of.values()), chosen_gaps)
                results = await asyncio.gather(*(
                    backend.search_gap(g, gap, gap_items, z_of, dup, show) for g, gap in enumerate(chosen_gaps)
                    if gaps_only is None or g in gaps_only
                ))
                if opts.confirm:
                    await asyncio.gather(*(backend.confirm(r) for r in results if r.chosen is not None))
                backend.attach_truth(results, chosen_gaps)
                for r in results:
                    r.mark_outside()
                    backend.remember(r)
                    _record_gap_done(store, r)
        if gaps_only is not None:
            return run_dir
        from benchfill.report import review_records

        # The review queue lives in the store (review and release read it there, PostgreSQL included).
        summary = backend.summary()  # (once: it records and sums every process's traffic)
        queue = review_records(results, opts, run_id_for(opts), bench, fit, summary)
        _check_outputs(run_dir)  # again: the run may have taken hours, and the folder changed meanwhile
        _record_review_queue(store, queue)
        rep = write_report(run_dir, opts=opts, run_id=run_id_for(opts), bench=bench, fit=fit, gaps=chosen_gaps,
                           results=results, oracle_z=oracle_z, backend=summary, matrix_source=matrix_source,
                           queue=queue)
        if rep.get("memory"):  # what the search read of earlier runs: a release's card names them
            store.set_meta("memory", rep["memory"])
    except BaseException:
        if fresh and not started and opts.store is None:
            # Stopped before any work (bad config, endpoint down, a bug, Ctrl-C): leave no empty run directory.
            store.close()
            _remove_made(made)
        raise
    finally:
        let_go()
        store.close()
        locks.release(lock)
    return run_dir


# What a run writes into its folder besides the store (IrtFit.save, report.write_report): a file or a
# folder, each of which is checked before the run writes any, so that one in the way stops the run at
# once rather than after it has rewritten the others (a report beside the plots of another state).
OUTPUT_FILES = ("fit.json", "report.json", "report.md", "review_queue.jsonl")
PLOTS_DIR = "plots"
PLOT_FILES = ("ecdf_before_after.png", "target_deviation.png")


def _check_outputs(run_dir: Path) -> None:
    """Refuse, in one line naming the path, a run folder whose outputs cannot be written where they go:
    a folder where a file goes, a file where a folder goes (the run folder, its plots, or one above)."""
    from benchfill.outputs import check_targets

    plots = run_dir / PLOTS_DIR
    outputs = (*(run_dir / n for n in OUTPUT_FILES), *(plots / n for n in PLOT_FILES))
    check_targets(run_dir, outputs, (plots,), what="the run", hint=f"give another {opt('runs_dir')} or {opt('run_id')}")
    # A folder of the user's that holds no run but files of a run's names (their own fit.json, report.md):
    # the run had replaced them without a word
    if run_dir.is_dir() and not any((run_dir / n).exists() for n in ("store.db", "store.url")):
        theirs = [p for p in outputs if p.exists()]
        if theirs:
            raise ConfigError(f"{run_dir}: holds no run (no store.db), yet files a run writes ({theirs[0].name}"
                              f"{', ...' if len(theirs) > 1 else ''}), which it would replace; move them away, "
                              f"or give another {opt('runs_dir')} or {opt('run_id')}")


def _give_up(made: list[Path], lock) -> None:
    """Stopped before the store was ready (it cannot be opened, or another process holds the run): a run
    directory this command made holds nothing yet, and goes."""
    locks.release(lock)
    _remove_made(made)


def _remove_made(made: list[Path]) -> None:
    """Remove the run directory this command made (``made[0]``, if it made it), then the folders it made
    above it (the runs dir of a first run) where nothing else has been written into them since."""
    if not made:
        return
    shutil.rmtree(made[0], ignore_errors=True)
    for d in made[1:]:
        try:
            d.rmdir()
        except OSError:
            break


def _sha256_of(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


PATH_OPTIONS = ("items", "spec", "responses", "config")  # the options that name a file (compared by content)
INPUTS_META = "inputs_sha256"  # option -> sha256 of the file it names (items, spec, responses)
INPUT_FILES = ("items", "spec", "responses")  # the options of RunOptions.identity that name a file by its path
LOCK_FILE = ".run.lock"


def _input_hashes(opts: RunOptions, items: list[dict[str, Any]], bench: Any = None) -> dict[str, str]:
    """The content of the files the run id names only by path (resolved: one file however it is spelt):
    a file edited in place keeps the run id, and a run id given for another file names that run. ``--items hf:...`` names a
    dataset, not a file: its loaded ``items`` are hashed (canonical JSON) instead. A registered ``bench``'s
    own files (``BENCHMARK_FILES``), which the run id names only by the benchmark's name, are hashed too:
    its data folder's items or responses edited, or another data folder given, is not the same run."""
    from benchfill.hub import is_hub

    def canonical(rows: list[dict[str, Any]]) -> str:
        text = json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    out = {}
    for k in INPUT_FILES:
        value = getattr(opts, k)
        if not value:
            continue
        out[k] = canonical(items) if k == "items" and is_hub(value) else _sha256_of(value)
    if bench is not None and not opts.items:
        # (the demo, or a benchmark read from the Hub when no data folder holds it: its rows)
        out["benchmark_items"] = _sha256_of(bench.items_path) if bench.items_path else canonical(items)
        if bench.responses_path and not opts.responses:
            out["benchmark_responses"] = _sha256_of(bench.responses_path)
    return out


BENCHMARK_FILES = {"benchmark_items": "items", "benchmark_responses": "responses"}  # _input_hashes' keys


def _hold_run(run_dir: Path, run_id: str, exclusive: bool = True) -> int | None:
    """Take the run directory's lock (``locks.hold``), or refuse in one line naming the process that holds
    it. ``exclusive`` False: a shared hold (a sweep's units of one run). None where there is no such lock."""
    path = run_dir / LOCK_FILE
    try:
        fd = locks.hold(path, shared=not exclusive, wait=False)
    except BlockingIOError:
        holder = path.read_text(errors="replace").strip() or "unknown"
        if holder.isdigit() and holder != str(os.getpid()):
            from benchfill.outputs import _alive

            if not _alive(int(holder)):  # a pid left by an earlier run (a holder that may only read the file
                holder = "unknown"       # could not write its own): not one to name, nor to kill
        where = ("in this process, in another thread" if holder == str(os.getpid())
                 else f"in another process (pid {holder})")
        raise ConfigError(f"run {run_id} is in progress {where}; wait for it to end, "
                          f"or give another {opt('run_id')} for a new run") from None
    if fd is not None and exclusive:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # a lock file this user may only read (locks._open_lock_file): held, its pid unsaid
            pass
    return fd


def earlier_runs(run_dir: Path, identity: dict[str, Any], most: int = 3) -> list[str]:
    """A line for each earlier run of the same benchmark and strategy beside a run about to start anew
    (newest first) that is unfinished, or that an older benchfill made (the settings that differ are ones
    one of the two versions lacks): what settings it differs in. "Rerun the same command to resume"
    starts a new run instead where the run id changed: another benchfill added settings, or a setting was
    given otherwise; said, not left to be found.
    Each store is only read (SQLite, read-only: an older version's store is not upgraded by a look)."""
    import sqlite3

    prefix = run_dir.name.rsplit("-", 1)[0] + "-"
    siblings = sorted((d for d in run_dir.parent.glob(f"{glob_escape(prefix)}*")
                       if d != run_dir and d.is_dir() and (d / "store.db").is_file()),
                      key=lambda d: d.stat().st_mtime, reverse=True)
    out = []
    now = json.loads(json.dumps(identity, default=str))
    digests: dict[str, str | None] = {}

    def digest(path: str) -> str | None:  # this run's file's content, hashed once for all the siblings
        if path not in digests:
            try:
                digests[path] = _sha256_of(path)
            except OSError:
                digests[path] = None
        return digests[path]

    for d in siblings[:20]:  # (a runs folder of many seeds: a look at the newest twenty, at most three named)
        if len(out) == most:
            break
        # A store closed cleanly has no -wal beside it: read it as immutable, which leaves nothing behind (a plain
        # read-only connection to a WAL store left -wal and -shm files in every earlier run's folder). One with
        # a -wal (live, or killed) is read as it stands: its -wal is there already (and its -shm, unless a copy
        # left it behind, which this read then makes).
        db_path = (d / "store.db").resolve()
        closed = not db_path.with_name("store.db-wal").exists()
        try:
            with contextlib.closing(sqlite3.connect(f"{db_path.as_uri()}?mode=ro{'&immutable=1' if closed else ''}",
                                                    uri=True)) as db:
                meta = dict(db.execute("select key, value_json from runmeta where key in ('options', ?, ?)",
                                       (INPUTS_META, "config_sha256")).fetchall())
        except sqlite3.Error:
            continue
        stored = json.loads(meta.get("options") or "{}")
        files = json.loads(meta.get(INPUTS_META) or "{}")
        if not isinstance(stored, dict) or not isinstance(files, dict):
            continue
        stored = idle_at_default(stored)  # (as _same_run compares them)
        if meta.get("config_sha256"):  # (the panel config's content is kept apart from the other files')
            files["config"] = json.loads(meta["config_sha256"])
        differ, unknown, moved = [], [], []
        for k in sorted(stored.keys() | now.keys()):
            if k not in PATH_OPTIONS:
                if stored.get(k) != now.get(k):
                    differ.append(k)
            elif bool(stored.get(k)) != bool(now.get(k)):
                differ.append(k)
            elif now.get(k) and not str(now[k]).startswith("hf:"):  # by content where the run recorded it
                if files.get(k) is None:
                    unknown.append(k)
                elif files[k] != digest(now[k]):
                    differ.append(k)
                elif stored[k] != now[k]:
                    moved.append(k)
        state = "finished" if (d / "report.json").is_file() else "unfinished"
        # A finished run is one the user made and may mean to keep beside this one (another seed, another
        # file): said only where the settings that differ are ones a version of benchfill lacked, or where none
        # differ (the same run under an id of another version's making: one made with an option its strategy
        # never reads, which the id now leaves out)
        if state == "finished" and differ and any(k in stored and k in now for k in differ):
            continue
        if differ:
            what = f"settings that differ: {', '.join(differ)}"
        elif unknown:  # a run from before file contents were recorded
            what = f"the same settings; the content of its {', '.join(unknown)} was not recorded"
        elif moved:  # a copy of the same content at another path
            what = f"the same settings and files' content, its {', '.join(moved)} at another path"
        else:  # the same run under an id of another version's making
            what = "the same settings and files"
        out.append(f"{d} is an earlier {state} run of this benchmark and strategy ({what}); this run starts anew "
                   f"beside it" + (", and its review decisions stay there" if state == "finished" else "")
                   + (f" ({opt('run_id')} {d.name} resumes it instead)" if not (differ or unknown or moved) else ""))
    return out


PROMPTS_META = "prompts"  # {"sha256": the digest of the run's own templates, or None: the built-in ones}


def _same_prompts(store, run_id: str, has: str | None) -> None:
    """Refuse to resume a run on other prompt templates than it was made with (``BENCHFILL_PROMPTS_DIR``, which
    the options compared in ``_same_run`` do not hold). A run made before benchfill recorded them is resumed
    with a note: whether it had templates of its own, nothing says."""
    from benchfill.prompts import PROMPTS_DIR_ENV

    recorded = store.get_meta(PROMPTS_META)
    if not isinstance(recorded, dict):
        these = f"the templates of {PROMPTS_DIR_ENV}" if has else "the built-in prompts"
        log.warning("run %s was made before benchfill recorded its prompt templates; it is resumed with %s, "
                    "which nothing can check against those it began with", run_id, these, extra=NOTE)
        return
    was = recorded.get("sha256")
    if was != has:
        how = ("with the built-in prompts; this command has templates of its own" if was is None else
               "with prompt templates of its own; this command has the built-in ones" if has is None else
               "with other prompt templates than this command's (edited since?)")
        raise ConfigError(f"run {run_id} was made {how} ({PROMPTS_DIR_ENV}): resume with the run's own, or "
                          f"give another {opt('run_id')}")


def _same_run(store, opts: RunOptions, run_id: str, inputs: dict[str, str], bench: Any = None) -> None:
    """Refuse to resume a run whose stored settings differ from these (a reused --run-id, or a config file
    edited in place, which keeps the run id): the rest of the run would mix two runs' work."""
    stored = store.get_meta("options")
    if stored:
        stored = idle_at_default(stored)  # as the id is made: a run made with an idle option before resumes too
        now = json.loads(json.dumps(opts.identity(), default=str))
        for k, absent in ABSENT_MEANS.items():  # one side without it: the value its absence stands for
            if (k in stored) != (k in now):
                stored.setdefault(k, absent)
                now.setdefault(k, absent)
        # A file is compared by its content below, not by how its path is spelt: a run made before paths
        # were resolved, or from another folder, resumes with the same files; a file given to one and not
        # to the other (a --responses dropped) is a difference here
        differ = sorted(k for k in stored.keys() & now.keys()
                        if (bool(stored[k]) != bool(now[k]) if k in PATH_OPTIONS else stored[k] != now[k]))
        _same_prompts(store, run_id, now.get("prompts_sha256"))
        if differ:
            # the strategy first: the options idle for one of the two strategies are at their defaults on that
            # side only, and the first of those, alphabetically, was named with a default the user never asked;
            # likewise the world's offsets before how they meet the curve, which is idle without them
            k = next((k for k in ("strategy", "sim_pair_sd") if k in differ), differ[0])
            raise ConfigError(f"run {run_id} was made with {k} = {stored[k]!r}; this command asks {now[k]!r}. "
                              f"Resume with the run's own settings, or give another {opt('run_id')}")
    recorded = store.get_meta(INPUTS_META) or {}  # none for a run from before they were recorded
    for k, now_sha in inputs.items():
        if recorded.get(k) not in (None, now_sha) and k in BENCHMARK_FILES:
            what = BENCHMARK_FILES[k]
            path = getattr(bench, f"{what}_path", None)
            where = f"{path}: benchmark {opts.benchmark}'s {what}" if path else f"benchmark {opts.benchmark}'s {what}"
            raise ConfigError(f"{where} are not those run {run_id} was made with (the run id names the benchmark, "
                              "not its files: edited since, or another data folder); restore them to resume, or "
                              f"give another {opt('run_id')} for a new run")
        if recorded.get(k) not in (None, now_sha):
            if k == "items" and str(opts.items).startswith("hf:"):
                raise ConfigError(f"{opt('items')} {opts.items}: the dataset's rows are not those run {run_id} was "
                                  "made with (the run id names the dataset, not its rows: another copy, or a newer "
                                  f"revision); give another {opt('run_id')} for a new run")
            raise ConfigError(f"{opt(k)} {getattr(opts, k)}: not the file run {run_id} was made with (the run id "
                              "names the path, not the content: this file edited, or another file given this run's "
                              f"id); give another {opt('run_id')} for a new run")
    spec = store.get_meta("benchmark")  # the spec as the run read it (a default of an older version included)
    if isinstance(spec, dict) and bench is not None:
        now_spec = bench.spec.model_dump(mode="json")
        for k in ("chance", "options_field", "evaluator", "text_field", "answer_field"):
            if k in spec and k in now_spec and spec[k] != now_spec[k]:
                # the file is the one the run was made with (checked above): an earlier version read it otherwise,
                # and the run's fit and children rest on that reading. Pinning the field in the file would make it
                # another file, which no resume takes: a new run is the way.
                raise ConfigError(f"run {run_id} was made by an earlier benchfill that read its spec's {k} as "
                                  f"{spec[k]!r}; this version reads {now_spec[k]!r} (a multiple-choice spec without "
                                  f"chance now means chance = \"options\"), and the run's fit and items rest on "
                                  f"the old reading, so it cannot be resumed: start it anew under another {opt('run_id')} "
                                  f"(a sweep's unit: another label or --runs-dir)")
    digest = store.get_meta("config_sha256")
    if opts.config and digest and digest != _sha256_of(opts.config):
        raise ConfigError(f"{opts.config}: changed since run {run_id} started (the run id names the file, not its "
                          f"content); restore it to resume, or give another {opt('run_id')} for a new run")


def load_benchmark(opts: RunOptions):
    from benchfill.benchmarks import custom_benchmark, get_benchmark

    if opts.items or opts.spec:
        if opts.benchmark:  # the run would be named after one benchmark and made of the other
            raise ConfigError(f"{opt('benchmark')} {opts.benchmark} with {opt('items')}/{opt('spec')}: name a "
                              "registered benchmark, "
                              "or give items and a spec, not both")
        if not (opts.items and opts.spec):
            raise ConfigError(f"a custom benchmark needs both {opt('items')} and {opt('spec')}")
        return custom_benchmark(opts.items, opts.spec, opts.responses, opts.data_dir)
    if not opts.benchmark:
        raise ConfigError(f"name a benchmark ({opt('benchmark')} NAME) or give {opt('items')} and {opt('spec')}")
    bench = get_benchmark(opts.benchmark, opts.data_dir)
    if opts.responses:
        from benchfill.errors import DataError

        if not Path(opts.responses).is_file():
            raise DataError(f"{opts.responses}: responses file not found")
        bench.responses_path = Path(opts.responses)
        bench.matrix = None  # the demo's own, in memory, would have been used instead: the file is the user's
    return bench


def check_enough_items(bench: Any, opts: RunOptions) -> None:
    """Refuse a benchmark of one or two items before any model call, as ``diagnose`` refuses its matrix: the
    min-max scale puts two items at 0 and 1 whatever their difficulties, and one alone has no spacing, so a
    run searched gaps of noise (confirmed z of 4e8) and spent its whole budget on them."""
    n = len(bench.items)
    if n < 3:
        source = opts.items or bench.name
        what = "one item" if n == 1 else f"{n} items, which the min-max scale puts at 0 and 1 whatever their difficulties"
        raise DataError(f"{source}: {what}; coverage gaps need at least three")


def default_benchmark(opts: RunOptions) -> None:
    """A library caller's run that names nothing (no benchmark, items, spec, or config naming one) is of the
    built-in demo, as ``RunOptions()`` promises; set after the config is read, so that neither a config's
    [benchmark] nor --items/--spec meets a benchmark the caller never gave."""
    if not (opts.benchmark or opts.items or opts.spec):
        opts.benchmark = "demo"


def _benchmark_from_config(opts: RunOptions) -> None:
    """The config file's [benchmark] section names the benchmark when --benchmark does not (and must agree
    when both do); a section that is not {name = ...} is checked and refused, never ignored. For a single
    run (``run``, ``dry_run``) only: a sweep names its benchmarks itself and may share one panel config
    among them, so it does not read the section (this read the config again at every benchmark load)."""
    if not opts.config or opts.items or opts.spec:
        return
    from benchfill.config import load_config

    cfg = load_config(opts.config)
    if not cfg.benchmark:
        return
    if set(cfg.benchmark) != {"name"}:
        cfg.benchmark_spec()  # names a misspelt field
        raise ConfigError(f"{opts.config}: [benchmark] holds a full spec; a run reads one from {opt('spec')} with "
                          f"{opt('items')} (keep only name = ... here)")
    name = str(cfg.benchmark["name"])
    if opts.benchmark and opts.benchmark != name:
        raise ConfigError(f"{opt('benchmark')} {opts.benchmark} but {opts.config} names [benchmark] {name}; "
                          "give one")
    opts.benchmark = name


def narrow_gaps(gaps, confirm_se: float, annotator=None) -> list[str]:
    """A warning per gap narrower than the confirmation resolves: with a half-width below the confirmed
    estimate's standard error, an item confirmed inside the gap is little more likely to lie there than
    one confirmed just outside, so "filled" would be near chance (on the whole of a large benchmark the
    largest gaps can be that narrow; docs/sim-rewriter.md, "Where a set falls short"). An se of half the
    half-width puts an item confirmed on the target inside with probability 0.95; the sampling se shrinks
    as one over the root of the rollouts, so halving it costs four times the confirming ones.

    With the run's ``annotator``, a gap is first checked against what a confirmation can reach there at
    all (``Annotator.outlook``): where the part of the placement error that no rollout removes (the item's
    unknown slope, the probes' ability error) is itself wider than the half-width, the gap lies beyond the
    panel's reach, and the remedy lies in the panel (a probe model near it, whose effect the warning works out
    the same way, or many more probe models), not a tighter ``--confirm-se`` (four of the
    seven sets the bench uses have their largest gaps beyond the strongest or the weakest of their
    panel's models: docs/sim-rewriter.md, "The panel's reach")."""
    out = []
    for g, gap in enumerate(gaps):
        half = gap.width / 2
        # At an end of the axis a miss is worse than no fill: an item truly beyond the hardest (easiest)
        # item opens a new gap there, which can raise the top-k sum (the whole of CRUXEval-output).
        end = "hardest" if gap.right >= 1.0 else "easiest" if gap.left <= 0.0 else ""
        tail = (f", and one truly beyond the benchmark's {end} item opens a new gap there (a child likely to "
                "lie beyond it is set aside, so the gap may stay open)" if end else "")
        if annotator is not None:
            target = (gap.left + gap.right) / 2
            o = annotator.outlook(target)
            fixed = o.fixed_z_se
            if fixed >= half:
                near = min(annotator.probes, key=lambda p: abs(annotator.to_z(p.ability) - target))
                span = [annotator.to_z(p.ability) for p in annotator.probes]
                # The remedy follows the part that dominates: the slope's leans far past the panel's ends (a
                # probe there resolves it); the probes' own ability error no added probe removes (a gap in the
                # middle of mmlu-pro's panel, a probe right at it, was told to get a probe near it).
                pair = annotator.pair_z_se(o)
                slope = math.sqrt(max(o.misfit_z_se**2 - pair**2, 0.0))
                if pair >= max(slope, o.ability_z_se):
                    # Only more probes lower it, as one over the root of their number: a probe near the gap
                    # replaces one offset by another (the demo's gaps, under a real panel's agreement, wanted
                    # hundreds of probe models).
                    shares = 1.0 / (pair / annotator.z_of_logits(annotator.pair)) ** 2  # the effective probes
                    need = math.ceil(shares * (pair / half) ** 2)
                    remedy = (f"most of it the probes' own offsets on the item (sd {annotator.pair:.2f} logits: each "
                              "probe's answers agree with themselves beyond the curve, as real models' do), which only "
                              f"more probe models lower: this panel's {shares:.1f} effective probes leave {pair:.3f}, "
                              f"and it would take about {need} as informative there to bring that part to the "
                              "half-width")
                elif o.misfit_z_se >= o.ability_z_se and not min(span) <= target <= max(span):
                    # Say what such a probe would do, worked out, not assumed: the same outlook with one more
                    # probe at the target, fitted as well as the nearest. Where the probes' own offsets or
                    # abilities are part of what is left, one probe may not bring it under the half-width (the
                    # bench's two probes added at the axis's ends did not in the world of record: docs/
                    # sim-rewriter.md, "Two probes at the ends, in the world of record").
                    from benchfill.search.services import Probe

                    extra = Probe("a probe at the gap", annotator.from_z(target), near.trials, near.ability_se)
                    left = replace(annotator, probes=[*annotator.probes, extra]).outlook(target).fixed_z_se
                    remedy = (f"the panel's nearest probe, {near.name}, sits at z {annotator.to_z(near.ability):.2f}, "
                              f"and a probe model of ability near z {target:.2f} " + (
                                  f"would resolve it (what no rollout removes would fall to {left:.3f})" if left < half
                                  else f"would bring what no rollout removes from {fixed:.3f} to {left:.3f}, still "
                                       "wider than the half-width (more probe models near it would be needed)"))
                elif o.misfit_z_se >= o.ability_z_se:
                    remedy = (f"most of it the item's unknown slope, though probes sit on both sides (the nearest, "
                              f"{near.name}, at z {annotator.to_z(near.ability):.2f}): the gap is narrower than this "
                              "panel can place an item")
                else:
                    remedy = ("most of it the probes' own ability error, which no added probe model removes: the gap "
                              "is narrower than this panel can place an item (a panel placed on more of the "
                              "benchmark's items, or with more trials each, narrows it)")
                own = f", the probes' own offsets on it {pair:.3f}" if pair else ""
                out.append(f"gap {g}: beyond the probe panel's reach: at its target (z {target:.3f}) a confirmation "
                           f"places an item to a z se of {o.placement_z_se:.3f} at best, and {fixed:.3f} of that no "
                           f"rollout removes (the item's unknown slope {slope:.3f}{own}, the probes' abilities "
                           f"{o.ability_z_se:.3f}), against a half-width of {half:.4f} z: whether its item lies inside "
                           f"will be near chance{tail}; {remedy}")  # fmt: skip
                continue
        if half < confirm_se:
            want = half / 2
            out.append(f"gap {g}: half-width {half:.4f} z is below the confirmation's z se ({confirm_se:g}): whether "
                       f"its item lies inside will be near chance{tail}; --confirm-se {want:.2g} (and a "
                       f"--confirm-cap to match) would resolve it, at about {(confirm_se / want) ** 2:.0f}x the "
                       "confirming rollouts")
    return out


def progress_printer(enabled: bool, label: str = ""):
    def show(msg: str) -> None:
        if enabled:
            print(f"{label}: {msg}" if label else msg, file=sys.stderr, flush=True)

    return show


def planned_budget(
    opts: RunOptions, n_items: int, probe_trials: list[int], have_responses: bool | str,
    max_repairs: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """The most a run can spend (``--dry-run``); early stops and the adaptive protocol spend less.
    ``max_repairs``: the rewriter's and the judge's repair turns allowed after a malformed reply."""
    from benchfill.search.screen import DEFAULT_SCREEN
    per_child = sum(probe_trials)
    if opts.strategy == "oracle":
        children = 0
    elif opts.strategy == "baseline":
        children = opts.parents * opts.children * (opts.rounds_matched or opts.rounds)
    else:
        children = opts.rounds * opts.parents * opts.children
    # The panel's benchmark rollouts: none when the given matrix already holds the panel; anchor
    # items when a matrix is given without it; every item when there is no matrix.
    if have_responses is True:
        bench_items = 0
    elif have_responses == "matrix":
        from benchfill.engine.backend import ANCHOR_ITEMS

        bench_items = min(n_items, ANCHOR_ITEMS)
    else:
        bench_items = n_items
    bench_rollouts = bench_items * per_child
    out = {
        "gaps": opts.gaps,
        "rewriter_calls": opts.gaps * children,
        "judge_calls": opts.gaps * children,
        "benchmark_probe_requests": bench_items * len(probe_trials),
        "benchmark_rollouts": bench_rollouts,
        # a repair turn is one more call to the model: at most max_repairs after each first call
        "repair_calls_max": opts.gaps * children * (max_repairs[0] + max_repairs[1]),
        "annotation_rollouts_max": opts.gaps * children * per_child,
        # the order screen's spot checks at both ends of the probe axis, on each annotated child
        "screen_rollouts_max": opts.gaps * children * DEFAULT_SCREEN.spot_steps * DEFAULT_SCREEN.spot_trials * 2,
        "confirmation_rollouts_max": (opts.gaps * _confirmations_max(opts, children)
                                      * _confirm_cap(per_child, opts.confirm_cap) if opts.confirm and children else 0),
    }
    # Every figure is an upper bound. The adaptive protocol (default) never asks a child more than the
    # fixed protocol's budget, so its bound is the same; it usually spends far less and stops sooner
    # (bench/bench_search.py measures how much); say so rather than print a guess as a plan.
    out["annotation"] = opts.annotation if opts.strategy != "oracle" else "n/a"  # (the oracle annotates nothing)
    out["figures"] = "upper bounds" + (" (adaptive annotation: actual spend is typically much lower)"
                                       if opts.annotation == "adaptive" and children else "")
    out["model_calls_max"] = out["rewriter_calls"] + out["judge_calls"] + out["repair_calls_max"]
    out["rollouts_max"] = (bench_rollouts + out["annotation_rollouts_max"] + out["screen_rollouts_max"]
                           + out["confirmation_rollouts_max"])
    return out


def _confirmations_max(opts: RunOptions, children: int) -> int:
    """The most children of one gap that get a confirmation, each at most the cap (a resumed one
    included). The baseline confirms its pick only. The search may confirm its best child at each
    round's stop test, runners-up while fewer than ``SearchSettings.confirmations`` are confirmed, and
    at the end up to that many plus one fresh picks whose confirmation lands beyond the range
    (benchfill/search/loop.py)."""
    if opts.strategy != "benchfill":
        return 1
    from benchfill.search import SearchSettings

    return min(children, opts.rounds + 2 * SearchSettings().confirmations)


def _confirm_cap(fixed_budget: int, budgets: float) -> int:
    from benchfill.search.annotate import ConfirmSettings

    return ConfirmSettings(max_budgets=budgets).cap(fixed_budget)


def _record_originals(store, items: list[dict[str, Any]]) -> None:
    from benchfill.schema import Item

    with store.session() as s:
        have = {row.id for row in s.exec(store.select(Item))}
        for it in items:
            if it["id"] not in have:
                s.add(Item(run_id=store.run_id, id=it["id"], origin="original", data_json=json.dumps(it)))


def _record_gap_done(store, result) -> None:
    from benchfill.schema import Candidate, GapState
    from benchfill.search.snapshot import result_to_dict

    with store.session() as s:
        state = store.get(s, GapState, result.gap_index)
        if state is None:
            state = GapState(run_id=store.run_id, gap_index=result.gap_index, left=result.left, right=result.right, target_z=result.target_z)
        state.status = "done"
        state.rounds_used = result.rounds_used
        state.chosen_id = result.chosen.item_id if result.chosen else None
        state.state_json = json.dumps(result_to_dict(result))  # a resumed run takes it as it is
        s.add(state)
        for c in result.children:  # the simulated world's truth, fetched after the search, and every
            # confirmation (the runners-up the search compared, not only the chosen child)
            refused = "probe_refused" in c.flags  # set aside after its row was written (search.loop.set_aside_refused)
            if c.true_difficulty is None and c.confirmation is None and not refused:
                continue
            row = store.get(s, Candidate, c.item_id)
            if row is None:
                continue
            if refused:
                row.valid, row.flags_json = False, json.dumps(c.flags)
            if c.true_difficulty is not None:
                row.true_difficulty = c.true_difficulty
            if c.confirmation is not None:
                a = c.confirmation
                row.confirmed_difficulty, row.confirmed_se, row.confirmed_z = a.difficulty, a.se, a.z
            s.add(row)
        if result.chosen is not None:
            row = store.get(s, Candidate, result.chosen.item_id)
            if row is not None:
                row.status = "selected"
                row.flags_json = json.dumps(result.chosen.flags)
                s.add(row)


def _record_review_queue(store, records: list[dict[str, Any]]) -> None:
    from benchfill.schema import Candidate

    with store.session() as s:
        for rec in records:
            row = store.get(s, Candidate, rec["item_id"])
            if row is not None:
                if row.review_json:  # a resumed run proposes the item again: it was proposed when first recorded
                    first = json.loads(row.review_json).get("created_at")
                    if first:
                        rec["created_at"] = first
                row.review_json = json.dumps(rec)
                s.add(row)


def dry_run(opts: RunOptions) -> dict[str, Any]:
    """The plan without any model call: the benchmark is read, nothing is written."""
    _require_options(opts)
    opts = copy.deepcopy(opts)
    opts.check()
    if opts.store:  # refused as the run refuses it: a URL with a password would not run, so it is no plan
        from benchfill.store import check_store_url

        check_store_url(opts.store, opt("store"))
    _benchmark_from_config(opts)
    default_benchmark(opts)
    bench = load_benchmark(opts)
    check_enough_items(bench, opts)
    if opts.gaps > len(bench.items) + 1:
        raise ConfigError(f"{opt('gaps')} {opts.gaps}: {bench.name} has {len(bench.items)} items, so at most "
                          f"{len(bench.items) + 1} gaps")
    if opts.resolved_backend() == "sim":
        from benchfill.config import LLMConfig

        trials, names = [8] * opts.sim_probes, None
        repairs = (LLMConfig(model="sim").max_repairs,) * 2  # the sim backend's rewriter and judge (engine/backend.py)
    else:
        from benchfill.config import load_config
        from benchfill.engine.backend import _require_panel

        cfg = load_config(opts.config)
        _require_panel(cfg, opts.config)
        trials, names = [p.trials for p in cfg.probes], {p.name for p in cfg.probes}
        repairs = (cfg.rewriter.max_repairs, cfg.judge.max_repairs)
    # The panel's own rollouts on every item are needed unless the given matrix already holds it.
    have: bool | str = False
    if bench.matrix is not None:
        have = "matrix"
    elif bench.responses_path is not None:
        # read, not only named: a malformed file is refused here, as the run would refuse it
        given = bench.given_matrix()
        have = (bool(names) and names <= set(given.models)) or "matrix"
    from benchfill.prompts import check_overrides

    warnings = check_overrides()  # a bad override is refused here too, not at the run's first call
    from benchfill.evaluators import require_confinement

    # refused here as the run refuses it (a code benchmark with no bubblewrap): a plan that would not run is none
    isolation = require_confinement(bench.spec.evaluator, opts.allow_unconfined)
    out = {"run_id": run_id_for(opts), "backend": opts.resolved_backend(), "strategy": opts.strategy}
    if isolation is not None:
        out["isolation"] = isolation  # how generated programs would be confined
    out.update(planned_budget(opts, len(bench.items), trials, have, repairs))
    if warnings:
        out["warnings"] = "; ".join(warnings)
    return out


# ``benchfill.run(...)`` calls run(): the package attribute is this module (see benchfill.calling_module).
sys.modules[__name__].__class__ = calling_module(run)
