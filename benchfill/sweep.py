"""A sweep: many benchmarks x strategies x seeds, each gap search one unit of work, one Table 2.

The paper's evaluation is a sweep (eight benchmarks, three gaps each, three strategies); this makes
it one command. The sweep file names the benchmarks (with per-benchmark options such as an anchor
cap for a large one), the gaps, the strategies, the seeds, the run options shared by all, and the
probe panel, rewriter and judge (a config file, or ``backend = "sim"`` for the simulated world).

Every (benchmark, strategy, seed) is an ordinary run (``benchfill run``) with its own run directory
(a custom benchmark's named after its label, ``custom_run_dir``); its gap searches are the units an
executor spreads (``benchfill.executors``: in this process, or as Ray tasks on a cluster). A rerun is a
resume: each run replays its completed calls from its store.
The result is ``sweep_table`` over the runs' reports.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchfill import locks
from benchfill.errors import BenchfillError, ConfigError, validation_line

# Run options a sweep sets itself (per benchmark, strategy and seed), so not in [options].
_SET_BY_SWEEP = {"benchmark", "items", "responses", "spec", "data_dir", "gaps", "strategy", "backend", "config",
                 "seed", "runs_dir", "store", "run_id", "progress", "extra"}


# A sweep's name names its folder, sweep-<name>/ (the file's name stands in for it when it has none).
SWEEP_NAME = r"^[A-Za-z0-9_.-]+$"


class BenchmarkEntry(BaseModel):
    """One benchmark of the sweep: a registered name, or items + spec (+ responses) of any other."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "3" for 3 is a mistake to name, not to coerce
    name: str | None = Field(default=None, min_length=1)
    items: str | None = None
    spec: str | None = None
    responses: str | None = None
    label: str | None = Field(default=None, min_length=1, description="its row in the table (default: name)")
    gaps: int | None = Field(default=None, ge=1, description="gaps to fill (default: the sweep's)")
    anchor_items: int | None = Field(default=None, ge=1, description="cap on the items the probe panel is placed "
                                     "with when the benchmark has a response matrix (default 300)")
    options: dict[str, Any] = Field(default_factory=dict, description="run options for this benchmark only")

    @property
    def row(self) -> str:
        return self.label or self.name or Path(self.items or "custom").stem


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "3" for 3 is a mistake to name, not to coerce
    name: str | None = Field(default=None, min_length=1, pattern=SWEEP_NAME)
    benchmarks: list[BenchmarkEntry] = Field(min_length=1)
    strategies: list[str] = Field(default_factory=lambda: ["benchfill", "baseline", "oracle"], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    gaps: int = Field(default=3, ge=1)
    backend: Literal["sim", "openai"] = "sim"
    config: str | None = Field(default=None, description="probe panel, rewriter and judge (TOML/YAML), backend openai")
    data_dir: str | None = None
    runs_dir: str | None = None
    store: str | None = Field(default=None, description="one SQLAlchemy URL for every run (PostgreSQL for --executor ray)")
    options: dict[str, Any] = Field(default_factory=dict, description="run options for every run (rounds, ...)")

    @field_validator("strategies")
    @classmethod
    def _known_strategies(cls, v: list[str]) -> list[str]:
        from benchfill.search import STRATEGIES

        for s in v:
            if s not in STRATEGIES:
                raise ValueError(f"unknown strategy {s!r} (choose from {', '.join(STRATEGIES)})")
        if len(set(v)) != len(v):
            raise ValueError("a strategy appears twice")
        return v

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("a seed appears twice")
        return v


@dataclass
class RunPlan:
    """One run of the sweep and the gap searches (units) it needs."""

    row: str
    strategy: str
    seed: int
    opts: Any  # RunOptions
    run_dir: Path
    entry: int = 0  # its benchmark's index in the file's benchmarks
    # The label of the plan whose run this is, where an earlier entry's plan names the same run (options that
    # differ only in what this strategy never reads, e.g. rounds for the oracle): run once, shown in both rows.
    shares: str | None = None

    @property
    def units(self) -> list[int]:
        """The gap indices searched as units (the oracle searches none: it only places midpoints)."""
        return [] if self.strategy == "oracle" else list(range(self.opts.gaps))

    @property
    def label(self) -> str:
        return f"{self.row}/{self.strategy}/seed{self.seed}"


@dataclass
class Sweep:
    name: str
    source: str
    config: SweepConfig
    runs: list[RunPlan]
    out_dir: Path
    store: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    store_given: str = ""  # where the store came from, for messages: "--store" or "FILE: field store"

    @property
    def to_run(self) -> list[RunPlan]:
        """The plans to run: each run once (a plan that shares an earlier one's run is only read)."""
        return [plan for plan in self.runs if plan.shares is None]


def load_sweep(path: str | Path, *, store: str | None = None, runs_dir: str | None = None) -> Sweep:
    """Read and check a sweep file; ``store``/``runs_dir`` override the file's. Paths in the file (a SQLite
    store's among them) are relative to the file; ``store`` and ``runs_dir`` given here, as on the command
    line, to the current directory (as ``benchfill run --store/--runs-dir``)."""
    from benchfill.data import read_mapping
    from benchfill.run import RunOptions, run_id_for, runs_root
    from benchfill.store import absolute_url

    path = Path(path)
    store_arg = store
    data = read_mapping(path)
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_line(str(path), exc)) from exc
    if not cfg.name and not re.fullmatch(SWEEP_NAME, path.stem):
        # the file's name stands in for name = ..., so it is held to the same rule (it names a folder): a name
        # of the user's choosing is clearer than one made up here
        raise ConfigError(f"{path}: field name: the file's name {path.stem!r} (the sweep's name when none is given) "
                          f"may hold only letters, digits, '.', '_' and '-'; add name = \"{folder_name(path.stem)}\"")
    here = path.resolve().parent

    def rel(p: str | None) -> str | None:
        return None if p is None else str((here / os.path.expanduser(p)).resolve())

    run_fields = {f.name for f in fields(RunOptions)}
    _check_options(cfg.options, run_fields, f"{path}: field options")
    if cfg.backend == "openai" and not cfg.config:
        raise ConfigError(f"{path}: field config: backend openai needs a config file with the probe panel, "
                          "rewriter and judge (or set backend = \"sim\")")
    if cfg.backend == "sim" and cfg.config:
        raise ConfigError(f"{path}: field config: backend sim serves its own panel; drop config or set "
                          "backend = \"openai\"")
    if store or cfg.store:  # a password in it is refused here, before any unit would refuse it
        from benchfill.store import check_store_url

        check_store_url(store or cfg.store or "", "--store" if store else f"{path}: field store")
    store = absolute_url(store) if store else (_store_in_file(cfg.store, here) if cfg.store else None)
    if cfg.data_dir and not Path(rel(cfg.data_dir) or "").is_dir():
        raise ConfigError(f"{path}: field data_dir: {rel(cfg.data_dir)}: no such folder")
    if runs_dir:
        root: str | None = str(Path(os.path.expanduser(runs_dir)).resolve())
    else:
        root = rel(cfg.runs_dir) if cfg.runs_dir else None
    runs: list[RunPlan] = []
    rows: set[str] = set()
    taken: set[Path] = set()  # the run directories of the plans so far: no two runs share one
    owner: dict[Path, RunPlan] = {}  # run directory -> the plan whose run it is
    for i, b in enumerate(cfg.benchmarks):
        shared: dict[str, set[int]] = {}  # strategy -> the earlier entries whose runs this one's plans share
        own = False  # whether one of its plans has a run of its own
        where = f"{path}: field benchmarks.{i}"
        if not b.name and not (b.items and b.spec):
            raise ConfigError(f"{where}: name a benchmark (name = ...) or give items and spec")
        if b.row in rows:
            # (a label given already: that one is the twin, and "give one a label" asks for what is there)
            raise ConfigError(f"{where}: {b.row!r} appears twice (give one {'another' if b.label else 'a'} label)")
        rows.add(b.row)
        _check_options(b.options, run_fields, f"{where}.options")
        for strategy in cfg.strategies:
            for seed in cfg.seeds:
                opts = RunOptions(**{**cfg.options, **b.options})
                opts.benchmark = None if b.items else b.name
                opts.items, opts.spec, opts.responses = rel(b.items), rel(b.spec), rel(b.responses)
                opts.data_dir = rel(cfg.data_dir) if cfg.data_dir else None
                opts.gaps = b.gaps or cfg.gaps
                opts.strategy, opts.seed, opts.backend = strategy, seed, cfg.backend
                opts.config = rel(cfg.config)
                opts.store = store
                opts.progress = False  # the sweep shows its own progress
                if b.anchor_items is not None:
                    opts.extra = {"anchor_items": b.anchor_items}
                if root:
                    opts.runs_dir = root
                opts.runs_dir = str(runs_root(opts).resolve())  # the same directory from any node
                try:  # every unit's options, before any work (a run would refuse them only when it starts)
                    opts.check(_field_namer(cfg, i))
                except ConfigError as exc:
                    raise ConfigError(f"{path}: field {exc}") from None
                if b.items:
                    run_dir = custom_run_dir(b.row, opts, taken)
                    opts.run_id = run_dir.name
                else:
                    run_dir = Path(opts.runs_dir) / run_id_for(opts)
                    # the folder planned here is the one the unit runs in: run_id_for looks at the folders there
                    # (a run an earlier benchfill made), which another unit's run may change before this one starts
                    opts.run_id = run_dir.name
                first = owner.get(run_dir)
                if first is not None:  # its options differ from an earlier entry's only where this strategy
                    # never reads them (the id leaves those out): the same run, run once and read by both rows
                    shared.setdefault(strategy, set()).add(first.entry)
                    runs.append(RunPlan(b.row, strategy, seed, opts, run_dir, entry=i, shares=first.label))
                    continue
                own = True
                taken.add(run_dir)
                owner[run_dir] = plan = RunPlan(b.row, strategy, seed, opts, run_dir, entry=i)
                runs.append(plan)
        if shared and not own:  # every run of it is an earlier entry's: a second row of the same runs
            owners = sorted(set().union(*shared.values()))
            if len(owners) == 1:
                said = (f"same benchmark and settings as benchmarks.{owners[0]} (the same runs: its options differ, if "
                        f"at all, only where {' and '.join(cfg.strategies)} never read{'s' if len(cfg.strategies) == 1 else ''} them)")
            else:  # each strategy's runs are another entry's
                said = "the same runs as other entries (" + "; ".join(
                    f"{s}: benchmarks.{' and benchmarks.'.join(map(str, sorted(shared[s])))}" for s in cfg.strategies) + ")"
            raise ConfigError(f"{where}: {said}")
    name = cfg.name or path.stem
    out_dir = Path(runs[0].opts.runs_dir) / f"sweep-{name}"
    return Sweep(name, str(path), cfg, runs, out_dir, store,
                 store_given="--store" if store_arg else f"{path}: field store")


def _field_namer(cfg: SweepConfig, i: int):
    """How ``RunOptions.check`` names an option of benchmark ``i``'s runs: the field of the file that sets
    it (its own ``options``, the sweep's ``[options]``, or the sweep field a run option comes from)."""
    b = cfg.benchmarks[i]
    own = {"gaps": f"benchmarks.{i}.gaps" if b.gaps else "gaps", "seed": "seeds", "strategy": "strategies",
           "backend": "backend", "config": "config"}

    def name(option: str) -> str:
        if option in b.options:
            return f"benchmarks.{i}.options.{option}"
        if option in cfg.options:
            return f"options.{option}"
        return own.get(option, f"options.{option}")

    return name


def _store_in_file(url: str, here: Path) -> str:
    """The file's ``store`` with a relative SQLite path made absolute from the file's folder, as every other
    path in the file (``store.absolute_url`` makes it so from the current directory)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)  # a valid URL by now (check_store_url)
    db = parsed.database
    if parsed.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:") \
            or Path(db).is_absolute():
        return url
    return parsed.set(database=str((here / db).resolve())).render_as_string(hide_password=False)


def custom_run_dir(row: str, opts: Any, taken: set[Path]) -> Path:
    """The run directory of a custom benchmark's run: ``<label>-<strategy>-<digest>``, the label made a
    file name (``folder_name``), so that it matches the table's row and two benchmarks whose items files
    share a name stay apart.

    Sweeps before this named it after the items file (``items-benchfill-<digest>``, as ``benchfill run
    --items`` still does). Such a directory, where it holds a run of these settings and no run is under
    the new name yet, is kept, so that a rerun resumes it (its store and, with ``backend = "sim"``, its
    simulated world's port, which its cache keys carry, are the directory's). A directory in ``taken``
    (another run of this sweep's) is never used again: two labels alike as file names with the same
    settings get the label's hash as well.
    """
    from benchfill.run import run_id_for

    root = Path(opts.runs_dir)
    old = root / run_id_for(opts)  # opts.run_id is not set yet: named after the items file
    name = folder_name(row)
    new = root / run_id_for(opts, name)
    if new in taken:
        new = root / run_id_for(opts, f"{name}-{hashlib.sha256(row.encode()).hexdigest()[:8]}")
        if new in taken:  # unreachable but for a hash collision
            raise ConfigError(f"benchmark {row}: its run directory {new} is another run's; "
                              "give it another label")
    if old not in taken and not _holds_run(new) and _holds_run(old):
        return old
    return new


def folder_name(label: str) -> str:
    """``label`` as a file name: each run of characters other than letters, digits, ``.``, ``_`` and ``-``
    becomes ``_`` (the characters a sweep's own name may have), without a leading or trailing dot or
    dash, at most 64 characters; ``custom`` if nothing is left."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-")[:64].strip("._-") or "custom"


def _holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run (a store of its own, or one named by URL). Its settings are the
    sweep's: the directory's name carries their digest, and a run refuses to resume with other settings
    anyway (``run._same_run``)."""
    from benchfill.store import STORE_FILE, STORE_URL_FILE

    return (run_dir / STORE_URL_FILE).is_file() or (run_dir / STORE_FILE).is_file()


def _check_options(options: dict[str, Any], known: set[str], where: str) -> None:
    for k in options:
        if k in _SET_BY_SWEEP:
            raise ConfigError(f"{where}.{k}: set by the sweep itself (see docs/sweep.md)")
        if k not in known:
            raise ConfigError(f"{where}.{k}: not a run option (see `benchfill run --help`)")


def _hold_sweep(sweep: Sweep) -> tuple[list[Path], int | None]:
    """The folders made for the table (outermost first), and a lock on ``sweep-<name>/`` held till the
    sweep ends: a second sweep of the file (or of another one of the same name and runs_dir) is refused,
    since it would run the same runs at once (the same run directories, the same simulated worlds'
    ports) and write the same table."""
    made: list[Path] = []
    missing = []
    d = sweep.out_dir
    while not d.exists():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        try:
            d.mkdir()
            made.append(d)
        except FileExistsError:  # made by another process at the same moment
            pass
    try:
        lock = locks.hold(sweep.out_dir, wait=False)
    except BlockingIOError:
        raise ConfigError(f"{sweep.source}: sweep {sweep.name} is in progress in another process (it holds "
                          f"{sweep.out_dir}); wait for it to end") from None
    return made, lock


def check_benchmarks(sweep: Sweep) -> None:
    """Read every benchmark once before any work, so a bad name or file fails in seconds; and the panel
    config, which every unit would otherwise fail on, one at a time, after the sweep's folder was made."""
    from benchfill.run import load_benchmark

    configs = {plan.opts.config for plan in sweep.runs if plan.opts.config}
    for path in sorted(configs):
        from benchfill.config import load_config
        from benchfill.engine.backend import _require_panel

        try:
            _require_panel(load_config(path), path)
        except BenchfillError as exc:
            raise type(exc)(f"{sweep.source}: field config: {exc}") from exc

    seen: set[str] = set()
    for plan in sweep.runs:
        if plan.row in seen:
            continue
        seen.add(plan.row)
        name = plan.opts.benchmark
        where = f"{sweep.source}: field benchmarks.{plan.entry}: benchmark {plan.row}" + (
            f" ({name})" if name and name != plan.row else "")
        try:
            bench = load_benchmark(plan.opts)
            bench.given_matrix()  # a malformed row fails here, before any run starts
        except BenchfillError as exc:
            # (a registered benchmark's own errors start with "benchmark <name>:" already)
            raise type(exc)(f"{where}: {str(exc).removeprefix(f'benchmark {name}: ')}") from exc
        if plan.opts.gaps > len(bench.items) + 1:
            gaps = f"benchmarks.{plan.entry}.gaps" if sweep.config.benchmarks[plan.entry].gaps else "gaps"
            raise ConfigError(f"{sweep.source}: field {gaps}: {plan.opts.gaps} gaps asked, but benchmark "
                              f"{plan.row}'s {len(bench.items)} items bound at most {len(bench.items) + 1}")


def check_endpoints(sweep: Sweep) -> None:
    """Fail before any work, as ``benchfill run`` does and with its error (exit 3), when an endpoint of the
    panel config is down: every unit would otherwise fail on it, one at a time, and the sweep end in a table
    of nothing, saying only that its units failed (exit 2). The driver reaches them itself on Ray too (it
    finishes each run)."""
    from benchfill.config import load_config
    from benchfill.engine.backend import require_endpoints

    for path in sorted({plan.opts.config for plan in sweep.runs if plan.opts.config}):
        try:
            require_endpoints(load_config(path), path)
        except BenchfillError as exc:
            raise type(exc)(f"{sweep.source}: field config: {exc}") from exc


def run_sweep(sweep: Sweep, executor: str = "local", ray_address: str | None = None,
              progress: bool = False) -> dict[str, Any]:
    """Run (or resume) every run of the sweep; write and return the table.

    Units that failed leave their run without a report; the table is written for the rest and the
    failure raised after it (rerun the sweep to resume them). ``progress``: lines on stderr as it goes
    (the CLI's default). Templates of the user's own are held for the whole sweep (``prompts.held_overrides``):
    edited while it runs, its later runs had used other templates than its earlier ones. (A Ray worker on
    another machine reads its own folder.)
    """
    from benchfill.prompts import held_overrides

    with held_overrides():
        return _run_sweep(sweep, executor, ray_address, progress)


def _run_sweep(sweep: Sweep, executor: str, ray_address: str | None, progress: bool) -> dict[str, Any]:
    from benchfill import executors
    from benchfill.sweep_table import write_table

    if not isinstance(sweep, Sweep):  # a path or a dict: read it first (load_sweep), as the CLI does
        raise ConfigError(f"sweep: expected a Sweep (benchfill.sweep.load_sweep(path)), got {type(sweep).__name__}")
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor: unknown executor {executor!r} (choose from local, ray)")
    check_benchmarks(sweep)
    check_endpoints(sweep)
    if sweep.store:  # a run that already has another store refuses it: say so before the store is made
        from benchfill.store import refuse_another_store

        for plan in sweep.to_run:
            # a sweep has no --run-id to give (its runs' ids come from their settings)
            refuse_another_store(plan.run_dir, sweep.store,
                                 way_out="run the sweep without a store (neither the file's store nor --store), "
                                         "or give it another --runs-dir")
    if sweep.store and executor == "local":  # one that cannot be opened fails every unit, one at a time: say so
        # once, first (the Ray path opens it once itself, after its own checks)
        from benchfill.store import Store

        Store(sweep.store, run_id="").close()
    if progress:  # as `benchfill run` says it: a run an earlier benchfill made, beside one this sweep starts anew
        from benchfill.run import earlier_runs

        for plan in sweep.to_run:
            if not plan.run_dir.exists():
                for line in earlier_runs(plan.run_dir, plan.opts.identity()):
                    print(f"{plan.label}: note: {line}", file=sys.stderr, flush=True)
    made, lock = _hold_sweep(sweep)
    try:
        tracker = Progress(sweep, progress)
        try:
            if executor == "ray":
                failed = executors.run_ray(sweep, tracker, ray_address)
            else:
                failed = executors.run_local(sweep, tracker)
        except BaseException:
            for d in reversed(made):  # refused before any work (Ray's checks): the folders this made go
                try:
                    d.rmdir()
                except OSError:  # not empty: a run began there
                    break
            raise
        table = write_table(sweep)
    finally:
        locks.release(lock)
    tracker.final()
    if failed:
        first = failed[0]
        # units, as the progress line counts them (a run that fails locally fails all its units at once)
        raise BenchfillError(f"{tracker.failed} of {tracker.total} units failed (first: {first[0]}: {first[1]}); "
                             f"the table of the runs that finished is at {table['paths']['table.md']}; "
                             "rerun the sweep to resume")
    return table


class Progress:
    """The whole sweep's progress on stderr: units done, in flight and failed; calls and rollouts, and
    how many of these a rerun replayed from the store rather than made again."""

    def __init__(self, sweep: Sweep, enabled: bool):
        self.enabled = enabled
        # A run with no gap units (the oracle) is one unit: placing its midpoints.
        self.total = sum(max(len(p.units), 1) for p in sweep.to_run)
        self.done = self.running = self.failed = 0
        self.model_calls = self.rollouts = 0
        self.replayed_calls = self.replayed_rollouts = 0
        self.t0 = time.monotonic()
        self._last = ""

    def started(self, n: int = 1) -> None:
        self.running += n
        self.show()

    def finished(self, spend: dict[str, int] | None, n: int = 1, sent: dict[str, int] | None = None) -> None:
        """``spend``: what the units' searches took, cache hits included (they were paid for once);
        ``sent``: what of it their process sent (``engine.backend.SENT``); the rest was replayed."""
        self.running -= n
        self.done += n
        if spend:
            calls, rollouts = int(spend.get("model_calls", 0)), int(spend.get("rollouts", 0))
            self.model_calls += calls
            self.rollouts += rollouts
            if sent is not None:
                self.replayed_calls += max(calls - int(sent.get("model_calls", 0)), 0)
                self.replayed_rollouts += max(rollouts - int(sent.get("rollouts", 0)), 0)
        self.show()

    def failure(self, n: int = 1) -> None:
        self.running -= n
        self.failed += n
        self.show()

    def show(self, note: str = "") -> None:
        line = (f"sweep: units {self.done}/{self.total} done, {self.running} running or queued, {self.failed} failed; "
                f"search model calls {self.model_calls}{_replayed(self.replayed_calls)}, "
                f"rollouts {self.rollouts}{_replayed(self.replayed_rollouts)}"
                f" ({time.monotonic() - self.t0:.0f} s){': ' + note if note else ''}")
        if self.enabled and line != self._last:
            self._last = line
            print(line, file=sys.stderr, flush=True)

    def final(self) -> None:
        self.show("finished" if not self.failed else "finished with failures")


def _replayed(n: int) -> str:
    return f" ({n} replayed)" if n else ""
