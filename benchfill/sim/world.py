"""The seeded simulated world: probes with abilities, items with latent difficulties, a rewriter, a judge.

The world knows the truth a real run cannot see (every item's latent difficulty and
validity), so a simulated run can report true gap reduction next to the annotated one.
All behaviour is a deterministic function of (world seed, model, prompt, request seed,
choice index): a retried request gets exactly the reply a first attempt would have got.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchfill.data import guessing_floor, json_kind
from benchfill.errors import ConfigError, DataError
from benchfill.matrix import ResponseMatrix
from benchfill.sim import signal, texts
from benchfill.sim.habits import DEFAULT_RATE as DEFAULT_HABITS
from benchfill.sim.latent import PRIORS, draw_latent, probe_names
from benchfill.sim.rewriter import DEFAULT_PRESET, RewriterModel, rewriter_model

DEFAULT_FAULT_MIX = {"429": 0.4, "500": 0.3, "timeout": 0.15, "malformed": 0.15}
# Items differ in how sharply they separate weaker from stronger models: P(correct) = g + (1 - g) *
# sigmoid(a (theta - b)), with log a ~ N(0, sd^2) per item. A world with a = 1 everywhere is the very
# 1PL the annotator fits, and so kinder than real data. The empirical-Bayes spread of the public
# matrices (irt/spread.py) is 0.36 (humaneval), 0.37 (aime25), 0.47 (mmlu-pro), 0.50 (mbpp), 0.52
# (chembench), 0.54 (livecodebench-codegen) and 0.84 (cruxeval-output): the world takes the median.
# (0.35 until the spread was estimated without the shrinkage of a MAP fit's prior.) docs/sim-rewriter.md
# ("Item discrimination", "Flat items") measures what it does to the search.
DISCRIMINATION_SD = 0.5
# Real models' repeated answers to one item agree with each other far beyond the IRT curve: the Pearson
# dispersion of the counts about a 2PL fit is 4.58 (livecodebench-codegen) and 5.35 (cruxeval-output), where
# independent draws give 1. Each (probe, item) pair's own logit offset, N(0, sd^2), gives the world that:
# 4.71 and 5.03 at 5 with the offsets about the curve (PAIR_CURVE), 0.76 and 0.79 at 0 (bench/bench_pair_effect.py;
# 3.5 matched them, 4.85 and 5.12, while the offsets were added to the curve, before s48). 0 is kinder than real
# data: more rollouts of one probe would average away what, for a real probe, they cannot. docs/sim-rewriter.md
# ("Probes that agree with themselves", "The probes' curve") measures what it does to the search.
PAIR_SD = 5.0
PAIR_SD_MAX = 8.0
# How the offsets meet the curve. The latent abilities and difficulties were fitted to real answers (or drawn
# as such a fit would give them), so their curve is what a model answers on average over pairs like this one:
# the offsets are each pair's departure from it, and each pair's own curve is steeper, by
# k = sqrt(1 + pi sd^2 / 8), so that averaged over N(0, sd^2) offsets it is the latent one again (the probit
# approximation of the logistic-normal mean). "average" does that; "added" puts the offsets on the latent curve
# itself, which flattens it on average by about k, the world before s48: on livecodebench-codegen at 3.5 its 12
# probes' rows fitted abilities 2.4 times closer together than the real rows they stand for (1PL sd 0.69 against
# 1.64), and "average" 1.40 (bench/bench_pair_effect.py).
PAIR_CURVES = ("average", "added")
PAIR_CURVE = "average"


@dataclass
class SimItem:
    key: str  # texts.text_key of the item's text
    id: str
    fields: dict[str, Any]
    difficulty: float  # latent b on the logit scale
    chance: float  # guessing floor g
    answer: str  # the TRUE answer (math value, option letter, or code solution)
    stated: str  # the reference answer the item states; differs from ``answer`` when invalid
    valid: bool = True
    parent: str | None = None  # parent item id, for generated children
    origin: str = "original"
    discrimination: float | None = None  # a, drawn from the item's key on first use (World.p_correct)
    pair: dict[str, float] | None = None  # each probe's own offset on this item, in logits (World.pair_offset)


@dataclass
class World:
    evaluator: str
    text_field: str
    answer_field: str
    seed: int
    abilities: dict[str, float]  # probe name -> theta
    b_min: float  # the ORIGINAL items' latent range: the z scale
    b_max: float
    # The rewriter's sense of difficulty and the judge's skill (benchfill/sim/rewriter.py).
    rewriter: RewriterModel = field(default_factory=lambda: rewriter_model(DEFAULT_PRESET))
    rewriter_preset: str = DEFAULT_PRESET
    rewriter_malformed_rate: float = 0.0
    # The share of replies written in one of a real model's habits (benchfill/sim/habits.py): reasoning
    # blocks, bold labels, extra fences, LaTeX left single in JSON, replies cut short. Form only, never content.
    reply_habits: float = DEFAULT_HABITS
    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    fault_rate: float = 0.0
    fault_mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_FAULT_MIX))
    retry_after_s: float = 1.0
    timeout_hold_s: float = 60.0  # how long a "timeout" fault holds the connection
    api_key: str | None = None
    rewriter_model: str = "sim-rewriter"
    judge_model: str = "sim-judge"
    options_field: str = "options"
    tests_field: str = "test"
    entry_point_field: str = "entry_point"
    state_path: Path | None = None
    source_models: dict[str, str] = field(default_factory=dict)  # probe -> fitted model behind it
    latent_origin: str = "draw"
    # The text's difficulty signal (benchfill/sim/signal.py): its strength in [0, 1], 0 = none, and
    # the original items' latent mean and sd that standardize it.
    text_signal: float = 0.0
    discrimination_sd: float = DISCRIMINATION_SD  # sd of log a over items (0: the 1PL the annotator fits)
    # sd of each (probe, item) pair's own offset from the IRT curve, in logits (0: every probe's answers to an
    # item are independent draws around the curve; real ones agree with themselves far more; pair_offset)
    pair_sd: float = PAIR_SD
    pair_curve: str = PAIR_CURVE  # how the offsets meet the latent curve (PAIR_CURVES; p_correct)
    signal_mean: float = 0.0
    signal_sd: float = 1.0
    aliases: dict[str, str] = field(default_factory=dict)  # unmarked text key -> marked key (originals)
    items: dict[str, SimItem] = field(default_factory=dict)  # key -> item
    originals: list[dict[str, Any]] = field(default_factory=list)  # the original items' fields, in order
    by_id: dict[str, str] = field(default_factory=dict)  # id -> key
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _read_to: dict = field(default_factory=dict, repr=False)  # state file -> (bytes, lines) read so far
    # The state files of the other runs that share this world (a shared store), found anew at each refresh:
    # a run started after this one writes children this one's rewriter and probes are then asked about.
    siblings: Callable[[], Iterable[Path]] | None = field(default=None, repr=False)
    # The last write of the state file that failed (a full disk), None once one succeeds: the run that serves
    # this world says it in one line, naming the file, where its rewriter only heard an error status.
    write_failure: OSError | None = field(default=None, repr=False)

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_items(
        cls,
        items: Sequence[dict[str, Any]],
        *,
        evaluator: str,
        text_field: str,
        answer_field: str,
        matrix: ResponseMatrix | None = None,
        n_probes: int = 12,
        seed: int = 0,
        state_path: str | Path | None = None,
        rewriter: str | RewriterModel | None = None,
        rewriter_knobs: dict[str, float] | None = None,
        latent_prior: str = "normal",
        **knobs: Any,
    ) -> World:
        """A world over ``items``; truth from a fit of ``matrix`` when given, else a seeded draw.

        ``latent_prior``: the difficulties' prior of that fit, N(0, 1) as a run's ("normal"), or
        "hierarchical" (a world with the ends as spread as that prior finds them; sim/latent.py).

        ``rewriter`` names a preset (``kind``, ``realistic``, ``hostile``) or gives a model;
        ``rewriter_knobs`` override single knobs of it (judge_recall and judge_fpr among them)."""
        if evaluator not in texts.EVALUATORS:
            raise ConfigError(f"sim: evaluator {evaluator!r} not simulated; use one of {', '.join(texts.EVALUATORS)}")
        if not items:
            raise ConfigError("sim: no items to build a world from")
        if n_probes < 1:
            raise ConfigError(f"sim: n_probes must be >= 1, got {n_probes}")
        if state_path:
            _check_state_path(Path(state_path))
        if latent_prior not in PRIORS:
            raise ConfigError(f"sim: latent_prior {latent_prior!r} unknown (choose from {', '.join(PRIORS)})")
        for name in ("fault_rate", "rewriter_malformed_rate", "text_signal", "reply_habits"):
            v = knobs.get(name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ConfigError(f"sim: {name} must lie in [0, 1], got {v}")
        v = knobs.get("discrimination_sd")
        if v is not None and not (math.isfinite(v) and 0.0 <= v <= 2.0):
            raise ConfigError(f"sim: discrimination_sd must lie in [0, 2], got {v}")
        v = knobs.get("pair_sd")
        if v is not None and not (math.isfinite(v) and 0.0 <= v <= PAIR_SD_MAX):
            raise ConfigError(f"sim: pair_sd must lie in [0, {PAIR_SD_MAX:g}], got {v}")
        v = knobs.get("pair_curve")
        if v is not None and v not in PAIR_CURVES:
            raise ConfigError(f"sim: pair_curve {v!r} unknown (choose from {', '.join(PAIR_CURVES)})")
        rewriter_knobs = dict(rewriter_knobs or {})
        for name, knob in (("judge_recall", "judge_recall"), ("judge_fpr", "judge_fpr"), ("invalid_rate", "invalid_base")):
            if knobs.get(name) is not None:  # the first world's keywords, kept as shorthands
                rewriter_knobs[knob] = knobs.pop(name)
            knobs.pop(name, None)
        model = rewriter_model(rewriter, **rewriter_knobs)
        preset = rewriter if isinstance(rewriter, str) else (DEFAULT_PRESET if rewriter is None else "custom")
        if rewriter_knobs:
            preset += "+" + ",".join(f"{k}={v:g}" for k, v in sorted(rewriter_knobs.items()))
        ids = [str(it.get("id", k)) for k, it in enumerate(items)]
        latent = draw_latent(ids, n_probes=n_probes, seed=seed, matrix=matrix, prior=latent_prior)
        names = probe_names(n_probes)
        world = cls(
            evaluator=evaluator,
            text_field=text_field,
            answer_field=answer_field,
            seed=seed,
            abilities={n: float(t) for n, t in zip(names, latent.ability, strict=True)},
            b_min=float(latent.difficulty.min()),
            b_max=float(latent.difficulty.max()),
            state_path=Path(state_path) if state_path else None,
            source_models={n: m for n, m in zip(names, latent.source_models, strict=True) if m},
            latent_origin=latent.origin,
            rewriter=model,
            rewriter_preset=preset,
            **knobs,
        )
        world.signal_mean, world.signal_sd = float(latent.difficulty.mean()), float(latent.difficulty.std()) or 1.0
        for item_id, it, b in zip(ids, items, latent.difficulty, strict=True):
            if text_field not in it:
                raise ConfigError(f"sim: item {item_id} lacks the text field {text_field!r}")
            answer = world._true_answer(it)
            fields = dict(it)
            if world.text_signal > 0:
                fields[text_field] = world.with_signal(str(it[text_field]), float(b))
                world.aliases[texts.text_key(str(it[text_field]))] = texts.text_key(fields[text_field])
            world._add(SimItem(texts.text_key(str(fields[text_field])), item_id, fields, float(b),
                               world._chance(it), answer, answer))
            world.originals.append(fields)
        world._load_state()
        return world

    def _true_answer(self, fields: dict[str, Any]) -> str:
        if self.answer_field not in fields:
            raise ConfigError(f"sim: item {fields.get('id')} lacks the answer field {self.answer_field!r}")
        return str(fields[self.answer_field]).strip() if self.evaluator != "code" else str(fields[self.answer_field])

    def _chance(self, fields: dict[str, Any]) -> float:
        return guessing_floor(fields, self.options_field) if self.evaluator == "multiple_choice" else 0.0

    def _add(self, item: SimItem) -> None:
        self.items.setdefault(item.key, item)
        self.by_id.setdefault(item.id, item.key)

    # -- truth, for simulated reports ------------------------------------------------------------
    @property
    def probes(self) -> list[str]:
        return list(self.abilities)

    def lookup(self, item_id_or_text: str) -> SimItem | None:
        key = self.by_id.get(item_id_or_text)
        if key is None:
            key = texts.text_key(item_id_or_text)
            key = self.aliases.get(key, key)  # an original quoted without its signal sentences
        return self.items.get(key)

    def original_items(self) -> list[dict[str, Any]]:
        """The original items' fields as this world serves them: with the text signal, their text
        carries its sentences, and a run must use these texts for its predictor to see them. All of
        them, in the benchmark's order: two items with the same text are one item to the world's
        registry (keyed by text), but two rows of the benchmark."""
        return [dict(f) for f in self.originals]

    def with_signal(self, text: str, b: float) -> str:
        """``text`` (without any signal sentences) marked for an item of true difficulty ``b``
        (benchfill/sim/signal.py); unchanged when the world has no text signal. The item's own noise
        draw is keyed by its unmarked text, apart from every other stream of the world."""
        if self.text_signal <= 0:
            return text
        rng = self.rng("text-signal", texts.text_key(text))
        s = signal.score((b - self.signal_mean) / self.signal_sd, self.text_signal, rng.gauss(0.0, 1.0))
        return signal.mark(text, signal.cue_count(s), self.evaluator, rng)

    def true_difficulty(self, item_id_or_text: str) -> float:
        item = self.lookup(item_id_or_text)
        if item is None:
            raise KeyError(f"sim: unknown item {item_id_or_text[:60]!r}")
        return item.difficulty

    def to_z(self, b: float) -> float:
        span = self.b_max - self.b_min
        return 0.5 if span <= 0 else (b - self.b_min) / span

    def from_z(self, z: float) -> float:
        return self.b_min + z * (self.b_max - self.b_min)

    def true_z(self, item_id_or_text: str) -> float:
        """Latent difficulty normalized by the ORIGINAL items' latent min and max (not clipped)."""
        return self.to_z(self.true_difficulty(item_id_or_text))

    @property
    def judge_recall(self) -> float:
        return self.rewriter.judge_recall

    @property
    def judge_fpr(self) -> float:
        return self.rewriter.judge_fpr

    def perceived_z(self, item: SimItem) -> float:
        """Where the rewriter sees ``item``: its distortion of the true z plus a fixed per-item error."""
        m = self.rewriter
        error = m.perception_noise * self.rng("perceive", item.key).gauss(0.0, 1.0) if m.perception_noise else 0.0
        return m.perceive(self.to_z(item.difficulty), error)

    def is_valid(self, item_id_or_text: str) -> bool:
        item = self.lookup(item_id_or_text)
        if item is None:
            raise KeyError(f"sim: unknown item {item_id_or_text[:60]!r}")
        return item.valid

    def p_correct(self, probe: str, item: SimItem) -> float:
        """P(correct) = g + (1 - g) * sigmoid(k a (theta - b) + e), a the item's discrimination, e the
        pair's own offset (``pair_offset``; 0 unless ``pair_sd``), k the steepening that keeps the latent
        curve as the offsets' average (``pair_steepness``)."""
        x = (self.pair_steepness() * self.discrimination(item) * (self.abilities[probe] - item.difficulty)
             + self.pair_offset(probe, item))
        return item.chance + (1.0 - item.chance) / (1.0 + math.exp(-x))

    def pair_steepness(self) -> float:
        """k = sqrt(1 + pi pair_sd^2 / 8) where the latent curve is the offsets' average (``pair_curve``
        "average", PAIR_CURVE's comment), else 1: then E_e[sigmoid(k x + e)] is sigmoid(x) to within 0.016 for pair_sd up to 5."""
        if self.pair_curve != "average" or not self.pair_sd:
            return 1.0
        return math.sqrt(1.0 + math.pi * self.pair_sd**2 / 8.0)

    def pair_offset(self, probe: str, item: SimItem) -> float:
        """e ~ N(0, pair_sd^2), drawn once per (probe, item) from their keys: what one model knows or
        misses of one item beyond its ability and the item's difficulty. A real model's repeated samples
        of one item agree with each other far beyond the curve (bench/bench_pair_effect.py measures the
        published matrices), so more rollouts of one probe cannot average it away; only more probes can.
        A child draws its own, independent of its parent's (a judgement call)."""
        if not self.pair_sd:
            return 0.0
        if item.pair is None:
            item.pair = {}
        e = item.pair.get(probe)
        if e is None:
            e = item.pair[probe] = self.pair_sd * self.rng("pair", probe, item.key).gauss(0.0, 1.0)
        return e

    def discrimination(self, item: SimItem) -> float:
        """The item's a = exp(sd * N(0, 1)), drawn from its text's key: the same item, the same a, in
        every run and process of this world."""
        if item.discrimination is None:
            sd = self.discrimination_sd
            item.discrimination = math.exp(sd * self.rng("discrimination", item.key).gauss(0.0, 1.0)) if sd else 1.0
        return item.discrimination

    def p_slip(self, probe: str) -> float:
        """P(a wrong reply of ``probe`` gives an invalid item's stated wrong key): weaker probes make
        the slip the key encodes more often, so the item's correctness falls along the model axis:
        ``rewriter.slip`` at the weakest probe, falling linearly with ability to 0 at the strongest."""
        lo, hi = min(self.abilities.values()), max(self.abilities.values())
        if hi <= lo:
            return self.rewriter.slip
        return self.rewriter.slip * (hi - self.abilities[probe]) / (hi - lo)

    def graded_correct(self, probe: str, item: SimItem, u_solve: float, u_slip: float) -> bool:
        """Is one reply right against the item's STATED key? (the server's replies grade the same way)"""
        solved = u_solve < self.p_correct(probe, item)
        if item.valid:
            return solved
        if self.evaluator == "code" and item.stated == item.answer:  # a broken test fails every program
            return False
        # A wrong key, or (code) tests written to the rewriter's own wrong solution: a wrong reply that makes
        # the same slip passes, as the probes that misread the problem the same way would
        return not solved and u_slip < self.p_slip(probe)

    def role(self, model: str) -> str | None:
        if model in self.abilities:
            return "probe"
        if model == self.rewriter_model:
            return "rewriter"
        if model == self.judge_model:
            return "judge"
        return None

    # -- the children registry, persisted so a restarted server still knows them ----------------
    def register_child(self, item: SimItem) -> SimItem:
        with self._lock:
            existing = self.items.get(item.key)
            if existing is not None:
                return existing
            # On file first, then in memory: a write that fails (a full disk, no file descriptor left) fails
            # the request, whose retry registers the child again. Held in memory first, the retry found it
            # and answered, and the child was never written: the world's other processes knew it not.
            if self.state_path is not None:
                try:
                    self._append(item)
                except OSError as exc:
                    if exc.filename is None:  # a write or flush names no file
                        exc.filename = str(self.state_path)
                    self.write_failure = exc
                    raise
                self.write_failure = None
            self._add(item)
        return item

    def _append(self, item: SimItem) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps({"world_seed": self.seed, **_stored(item)}) + "\n").encode()
        with open(self.state_path, "ab+") as fh:
            # A line a killed server cut short would swallow this record (the reader passes over the
            # joined line): end it first. Each record is one write, so only a crash leaves one cut.
            end = fh.seek(0, os.SEEK_END)
            if end:
                fh.seek(end - 1)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
            fh.write(line)  # appended at the end, wherever the read left the position
            fh.flush()

    def load_registry(self, path: Path) -> None:
        """Know the children another run registered (runs that share a store share a world); its
        file is read, never written."""
        self._load_state(path)

    def _load_state(self, path: Path | None = None) -> None:
        path = path or self.state_path
        if path is None or not path.exists():
            return
        offset, n = self._read_to.get(path, (0, 0))
        # binary: a line of another encoding is reported by its number, not met as a decode error mid-read
        with open(path, "rb") as fh:
            fh.seek(offset)
            while line := fh.readline():
                if not line.endswith(b"\n"):  # being written by another server: read it next time
                    break
                n += 1
                rec = _child_record(line, path, n)
                self._read_to[path] = (fh.tell(), n)
                if rec is not None:
                    self._add(SimItem(**{k: v for k, v in rec.items() if k in _RECORD_FIELDS}))

    def refresh(self) -> None:
        """Read the children other servers of this world appended to the shared state file since the last
        read (the replicas of a fleet share one world, and a child one of them wrote is asked of another),
        and those the runs sharing its store registered (``siblings``): their children become parents and
        references here, and a child read only at start-up would miss every run begun after it."""
        others = list(self.siblings()) if self.siblings is not None else []  # (a store query: not under the lock)
        with self._lock:
            if self.state_path is not None:
                self._load_state()
            for path in others:
                if path != self.state_path:
                    self._load_state(path)

    def rng(self, *parts: object) -> random.Random:
        return texts.rng_for(self.seed, *parts)

    def uniform(self, *parts: object) -> float:
        return texts.uniform(self.seed, *parts)


def _check_state_path(path: Path) -> None:
    """Refuse at start a state file that can never be written: under a regular file (the world started and
    its first child failed with HTTP 507, "...: File exists"), or a folder. The file itself and its
    missing folders are made by the first write (``World._append``)."""
    if path.is_dir():
        raise ConfigError(f"sim: state file {path}: is a folder; name a file (e.g. {path / 'state.jsonl'})")
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(f"sim: state file {path}: {folder} is a file, not a folder")
            break


def _stored(item: SimItem) -> dict[str, Any]:
    """What the state file keeps of an item: not its discrimination, which the world draws again from the
    item's key under its own ``discrimination_sd``."""
    return {k: v for k, v in asdict(item).items() if k != "discrimination"}


# What a state line must hold to be a child (``_stored``): the fields SimItem cannot do without
# (``_REQUIRED``), and the JSON types its users take every field to have.
_RECORD_FIELDS = frozenset(SimItem.__dataclass_fields__)
_REQUIRED = ("key", "id", "fields", "difficulty", "chance", "answer", "stated")
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "key": ((str,), "a string"), "id": ((str,), "a string"), "fields": ((dict,), "an object"),
    "difficulty": ((int, float), "a number"), "chance": ((int, float), "a number"), "answer": ((str,), "a string"),
    "stated": ((str,), "a string"), "valid": ((bool,), "true or false"), "parent": ((str, type(None)), "a string or null"),
    "origin": ((str,), "a string"), "discrimination": ((int, float, type(None)), "a number or null"),
}  # fmt: skip


def _child_record(line: bytes, path: Path, n: int) -> dict[str, Any] | None:
    """The child a state file's line holds, None for a line to pass over, or a DataError naming the line.

    Passed over: a blank line, and one that starts as every record does ("{") but is not JSON: a server
    killed mid-write leaves such a line (the next server's record appended to it), and that child was never
    answered. Anything else is not this world's writing (a hand edit, another file), and loading it would
    fail far from the file or quietly put a wrong item in the world.
    """
    def bad(why: str) -> DataError:
        return DataError(f"{path} line {n}: not a child record ({why})")

    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not UTF-8 text") from None
    if not text.strip():
        return None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError:
        if text.lstrip().startswith("{"):
            return None
        raise bad("not JSON") from None
    if not isinstance(rec, dict):
        raise bad(f"a JSON {json_kind(rec)}, not an object")
    missing = [k for k in _REQUIRED if k not in rec]
    if missing:
        raise bad(f"no {', '.join(missing)}")
    for k, (types, what) in _TYPES.items():
        if k in rec and (not isinstance(rec[k], types) or (bool not in types and isinstance(rec[k], bool))):
            raise bad(f"field {k!r} must be {what}, found {json.dumps(rec[k], ensure_ascii=False)[:40]}")
    return rec
