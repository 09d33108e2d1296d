"""The search memory in the store, shared across gaps, runs and releases (docs/memory.md).

Every annotated item of a benchmark is a ``MemoryRecord``: the benchmark's own items on the scale
of each fit that measured them, and every annotated child of every run, with its z, standard
error, validity, flags and provenance. A run reads it once, before its gaps are searched:

- **Parents and references.** For each gap, the ``memory_size`` entries nearest the target seed
  the in-process ``Memory`` (benchfill/search/memory.py), which the algorithm uses as before. Each
  scale is read by two index range scans on (benchmark, scale, simulated, z), one up and one down
  from the target, ``LIMIT k`` each, so retrieval costs milliseconds however large the memory grows.
- **Eligibility.** An entry the judge rejected, a screen flagged (``NO_PARENT_FLAGS``), that review
  rejected (``review.rule.outcome`` over the decisions made on it in any run, under the release rule
  the run that made it kept) or that a reviewer's edit replaced is a reference at most, never a
  parent, and never reused.
- **Worlds.** A child made in the simulated world is never read by a run on real endpoints, nor a
  real child by a simulated run (whose world cannot know its truth); the report counts those left out.
- **Scales.** A fit of the same benchmark with another seed or panel puts the items on a slightly
  different scale. An entry of another scale is mapped onto the current one by the mean/sigma link
  of the originals both fits measured (z_now = A z_then + B, A = sd_now / sd_then, B = mean_now -
  A mean_then), or left out, with the reason logged, when they share fewer than ``MIN_SHARED``
  items or their z correlate less than ``MIN_CORRELATION``.
- **Reuse.** An earlier run's child whose confirmed z (mapped) lies inside a gap, valid, unflagged,
  neither rejected nor edited in review, and confirmed to the precision target (not cut short),
  fills that gap at once: no rewrite is paid for, and the gap and its review record say it was reused.

The seeds and reuse picks of a run are saved in its meta (``memory_seed``) the first time, so a
resumed run searches from the very memory the interrupted one had, whatever other runs added since.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, or_, text, tuple_
from sqlalchemy import delete as sql_delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from benchfill.review.rule import Outcome, ReleaseRule, outcome
from benchfill.schema import MemoryRecord, ReviewDecision, RunMeta, as_utc
from benchfill.search.loop import Child, GapResult
from benchfill.search.memory import NO_PARENT_FLAGS, MemoryEntry, may_parent
from benchfill.search.services import Spend
from benchfill.search.snapshot import annotation_from_dict, annotation_to_dict, child_from_dict, child_to_dict
from benchfill.store import simulated_run

MIN_SHARED = 10  # benchmark items two fits must share before one's entries are mapped onto the other
REMOVED_META = "release_removed"  # RunMeta: the removals in force after a run's latest release, [[item, run, at]]
MIN_CORRELATION = 0.9  # ... and how closely their z must agree
SEED_META = "memory_seed"


def scale_id(item_ids: list[str], z: list[float]) -> str:
    """The scale of a fit: a hash of its originals' fitted z (same fit, same id)."""
    rows = sorted((str(i), round(float(v), 10)) for i, v in zip(item_ids, z, strict=True))
    return "fit-" + hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:12]


def foreign_id(item_id: str, run_id: str) -> str:
    """How an earlier run's child is named in this run (its ids repeat across runs)."""
    return f"{item_id}@{run_id}"


@dataclass(frozen=True)
class Link:
    """z on ``scale`` mapped onto the current scale: a * z + b (mean/sigma over shared originals)."""

    scale: str
    a: float
    b: float
    shared: int
    correlation: float
    rms: float  # residual of the shared originals after the link

    def __call__(self, z: float) -> float:
        return self.a * z + self.b


def mean_sigma_link(scale: str, then: dict[str, float], now: dict[str, float], min_shared: int = MIN_SHARED) -> Link | str:
    """The link from ``then`` (item -> z) to ``now``, or why there is none."""
    ids = sorted(set(then) & set(now))
    if len(ids) < min_shared:
        return f"shares {len(ids)} benchmark items with the current fit (at least {min_shared} needed)"
    x = [then[i] for i in ids]
    y = [now[i] for i in ids]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sx = math.sqrt(sum((v - mx) ** 2 for v in x) / len(x))
    sy = math.sqrt(sum((v - my) ** 2 for v in y) / len(y))
    if sx <= 0 or sy <= 0:
        return "its shared items all sit at one z"
    r = sum((u - mx) * (v - my) for u, v in zip(x, y, strict=True)) / (len(x) * sx * sy)
    if r < MIN_CORRELATION:
        return f"its z correlate {r:.3f} with the current fit's on {len(ids)} shared items (at least {MIN_CORRELATION})"
    a = sy / sx
    b = my - a * mx
    rms = math.sqrt(sum((a * u + b - v) ** 2 for u, v in zip(x, y, strict=True)) / len(x))
    return Link(scale, a, b, len(ids), r, rms)


@dataclass(frozen=True)
class Found:
    """A memory entry as retrieved: its row, and its z and se on the current scale."""

    row: MemoryRecord
    link: Link  # from the row's scale onto the current one
    parent_ok: bool  # the row's own verdict and flags, neither rejected nor edited in review

    @property
    def z(self) -> float:
        return self.link(self.row.z)

    @property
    def z_se(self) -> float:
        return self.link.a * self.row.z_se

    @property
    def name(self) -> str:
        r = self.row
        return r.item_id if r.origin == "original" else foreign_id(r.item_id, r.run_id)

    def entry(self) -> MemoryEntry:
        r = self.row
        return MemoryEntry(self.name, self.z, r.origin, r.ancestor_id or r.item_id, self.parent_ok,
                           "" if r.origin == "original" else r.run_id)


class SharedMemory:
    """The memory of one benchmark in one store, as seen by one run on one fit.

    ``simulated``: the run's world (by default its recorded backend, "sim" or not). The run reads only
    the children of its own world and writes its own as such."""

    def __init__(self, store, benchmark: str, item_ids: list[str], z: list[float], simulated: bool | None = None):
        self.store, self.benchmark, self.run_id = store, benchmark, store.run_id
        self.now = {str(i): float(v) for i, v in zip(item_ids, z, strict=True)}
        self.scale = scale_id(item_ids, z)
        self.simulated = simulated_run(store) if simulated is None else bool(simulated)
        self.links: dict[str, Link] = {}
        self.removed: dict[tuple[str, str], datetime] = {}  # (run, item) -> when a release removed it
        self.left_out: dict[str, str] = {}  # scale (or "scale (whose children)") -> why its entries are not used
        self.rules: dict[str, ReleaseRule] = {}  # run -> the release rule it kept
        self.elsewhere: dict[str, Any] = {}  # run -> its simulated world, where it is not this run's (_worlds)

    # -- writing -----------------------------------------------------------------------------
    def record_originals(self) -> None:
        """The benchmark's items on this fit's scale (once per scale: they are what links scales)."""
        with self.store.session() as s:
            have = s.exec(select(MemoryRecord.id).where(MemoryRecord.benchmark == self.benchmark,
                                                        MemoryRecord.scale == self.scale,
                                                        MemoryRecord.origin == "original").limit(1)).first()
            if have is None:  # another run on this fit may be writing them now: theirs are the same rows
                rows = [dict(benchmark=self.benchmark, scale=self.scale, run_id="", item_id=i, origin="original",
                             simulated=False, z=v, ancestor_id=i) for i, v in sorted(self.now.items())]
                _insert_missing(s, rows)

    def _set_aside(self, child: Child) -> None:
        """A child a probe refused (``probe_refused``): its row, if any, marked no parent and not valid."""
        with self.store.session() as s:
            row = s.exec(select(MemoryRecord).where(
                MemoryRecord.benchmark == self.benchmark, MemoryRecord.scale == self.scale,
                MemoryRecord.run_id == self.run_id, MemoryRecord.item_id == child.item_id)).first()
            if row is not None:
                row.parent_ok, row.valid, row.flags_json = False, False, json.dumps(child.flags)
                s.add(row)

    def record_child(self, gap_index: int, child: Child) -> None:
        """An annotated child (again, once confirmed or flagged: the row is updated)."""
        a = child.confirmation or child.annotation
        if "probe_refused" in child.flags and child.item is not None and "reused" not in child.flags:
            self._set_aside(child)  # set aside after its row was written: no parent now, nor valid
            return
        if a is None or child.item is None or "reused" in child.flags:
            return
        # A confirmation cut short outside its gap is a coarse figure: not one a later run may reuse as it is.
        confirmed = child.confirmation is not None and child.confirmation.stop != "outside"
        values = dict(
            origin="generated", simulated=self.simulated, z=a.z, z_se=a.z_se, confirmed=confirmed,
            parent_id=child.parent_id, ancestor_id=child.ancestor_id, gap_index=gap_index, round=child.round,
            valid=None if child.verdict is None else child.verdict.valid, flags_json=json.dumps(child.flags),
            parent_ok=bool(child.valid and may_parent(child.flags)), data_json=json.dumps(child.item),
            record_json=json.dumps(child_to_dict(child)),
        )
        with self.store.session() as s:
            row = s.exec(select(MemoryRecord).where(
                MemoryRecord.benchmark == self.benchmark, MemoryRecord.scale == self.scale,
                MemoryRecord.run_id == self.run_id, MemoryRecord.item_id == child.item_id)).first()
            if row is None:
                row = MemoryRecord(benchmark=self.benchmark, scale=self.scale, run_id=self.run_id,
                                   item_id=child.item_id, **values)
            else:
                for k, v in values.items():
                    setattr(row, k, v)
            s.add(row)

    # -- reading -----------------------------------------------------------------------------
    def link_scales(self) -> None:
        """Map every other scale that holds children of this run's world onto the current one, or say
        why not; count, per scale, the children of the other world (or of none recorded) left out."""
        kids = (MemoryRecord.benchmark == self.benchmark, MemoryRecord.origin == "generated")
        with self.store.session() as s:
            scales: set[str] = set()  # one index seek per scale (a DISTINCT would read every entry)
            while (nxt := s.exec(select(func.min(MemoryRecord.scale)).where(
                    *kids, MemoryRecord.simulated == self.simulated,
                    MemoryRecord.scale > max(scales, default=""))).one()):
                scales.add(nxt)
            self.links = {self.scale: Link(self.scale, 1.0, 0.0, len(self.now), 1.0, 0.0)}
            self.removed = _removals(s)
            self.left_out = {}
            mine, self.elsewhere = self._worlds(s) if self.simulated else (None, {})
            if self.elsewhere:
                counts = s.exec(select(MemoryRecord.run_id, func.count()).where(
                    *kids, MemoryRecord.simulated == True, col(MemoryRecord.run_id).in_(sorted(self.elsewhere)),  # noqa: E712
                ).group_by(MemoryRecord.run_id)).all()
                for run, n in sorted(counts):
                    self.left_out[f"run {run} (another simulated world)"] = _ELSEWHERE.format(
                        n=n, theirs=_world_name(self.elsewhere[run]), mine=_world_name(mine))
            mine, other = ("simulated", "real") if self.simulated else ("real", "simulated")
            for world, why in ((not self.simulated, _OTHER_WORLD[mine]), (None, _NO_WORLD)):
                counts = s.exec(select(MemoryRecord.scale, func.count()).where(
                    *kids, MemoryRecord.simulated.is_(None) if world is None else MemoryRecord.simulated == world,
                ).group_by(MemoryRecord.scale)).all()
                whose = "children of no recorded backend" if world is None else f"{other} children"
                for sc, n in sorted(counts):
                    self.left_out[f"{sc} ({whose})"] = why.format(n=n)
            for sc in sorted(scales - {self.scale}):
                then = dict(s.exec(select(MemoryRecord.item_id, MemoryRecord.z).where(
                    MemoryRecord.benchmark == self.benchmark, MemoryRecord.origin == "original",
                    MemoryRecord.simulated == False, MemoryRecord.scale == sc)).all())  # noqa: E712
                got = mean_sigma_link(sc, then, self.now)
                if isinstance(got, Link):
                    self.links[sc] = got
                else:
                    self.left_out[sc] = got

    def nearest(self, target: float, k: int) -> list[Found]:
        """The ``k`` entries nearest ``target`` on the current scale: the benchmark's items of this
        fit and the children of other runs on every linked scale (this run's own are restored, not
        retrieved). Two index range scans per scale, ``LIMIT k`` each."""
        if not self.links:
            self.link_scales()
        rows: list[tuple[MemoryRecord, Link]] = []
        with self.store.session() as s:
            for sc, link in self.links.items():
                if link.a <= 0:
                    continue
                t = (target - link.b) / link.a
                for base in self._ranges(sc):
                    up = base.where(MemoryRecord.z >= t).order_by(col(MemoryRecord.z).asc()).limit(k)
                    down = base.where(MemoryRecord.z < t).order_by(col(MemoryRecord.z).desc()).limit(k)
                    for q in (up, down):
                        rows += [(r, link) for r in s.exec(q)]
            review = self.reviewed(s, [r for r, _ in rows])
        found = [Found(r, link, bool(r.parent_ok and r.valid is not False)
                       and _stands(review.get(_key(r)), self.removed.get(_key(r))))
                 for r, link in rows]
        found.sort(key=lambda f: (abs(f.z - target), f.name))
        return found[:k]

    def _ranges(self, sc: str) -> list:
        """The queries of scale ``sc`` that ``nearest`` reads up and down from the target, each one
        range of (benchmark, scale, simulated, z): the children of this run's world (not this run's own:
        they are restored, not retrieved), and on the current scale the benchmark's items (False)."""
        on = select(MemoryRecord).where(MemoryRecord.benchmark == self.benchmark, MemoryRecord.scale == sc)
        not_own = or_(MemoryRecord.origin == "original", MemoryRecord.run_id != self.run_id)
        kids = on.where(MemoryRecord.simulated == self.simulated, MemoryRecord.origin == "generated", not_own,
                        *self._not_elsewhere())
        if sc != self.scale:
            return [kids]
        if not self.simulated:  # the benchmark's items and the real children: one range
            return [on.where(MemoryRecord.simulated == False, not_own)]  # noqa: E712
        return [kids, on.where(MemoryRecord.simulated == False, MemoryRecord.origin == "original")]  # noqa: E712

    def reusable(self, left: float, right: float) -> Found | None:
        """The earlier run's child of this run's world nearest the gap's middle whose confirmed z lies
        inside the gap: valid, unflagged, neither rejected nor edited in review; None if there is none.
        Per scale, index range scans out from the middle, ``LIMIT`` growing only while every row found
        was barred by its review."""
        if not self.links:
            self.link_scales()
        target = (left + right) / 2
        best: list[Found] = []
        with self.store.session() as s:
            for sc, link in self.links.items():
                if link.a <= 0:
                    continue
                lo, hi, mid = ((v - link.b) / link.a for v in (left, right, target))
                base = select(MemoryRecord).where(
                    MemoryRecord.benchmark == self.benchmark, MemoryRecord.scale == sc,
                    MemoryRecord.simulated == self.simulated, MemoryRecord.origin == "generated",
                    MemoryRecord.confirmed == True, MemoryRecord.parent_ok == True,  # noqa: E712
                    MemoryRecord.run_id != self.run_id, *self._not_elsewhere())
                sides = (base.where(MemoryRecord.z >= mid, MemoryRecord.z < hi).order_by(col(MemoryRecord.z).asc()),
                         base.where(MemoryRecord.z < mid, MemoryRecord.z > lo).order_by(col(MemoryRecord.z).desc()))
                for q in sides:
                    limit = 8
                    while True:
                        rows = list(s.exec(q.limit(limit)))
                        review = self.reviewed(s, rows)
                        ok = [Found(r, link, True) for r in rows if _stands(review.get(_key(r)), self.removed.get(_key(r)))
                              and r.record_json and left < link(r.z) < right and not _barred(r)]
                        if ok or len(rows) < limit:
                            best += ok[:1]
                            break
                        limit *= 4
        best.sort(key=lambda f: (abs(f.z - target), f.name))
        return best[0] if best else None

    def _worlds(self, s: Session) -> tuple[tuple, dict[str, Any]]:
        """This run's simulated world, and the runs of this store whose world is not it: another item discrimination
        (``--sim-discrimination``; an older benchfill's runs had none: 0), or the world of ``sim serve``
        behind a config, which this one cannot see into. Their children were measured against other
        probes' answers: a confirmed z there is not one here (one had been reused as a gap's fill)."""
        mine = _world_of(self.store.get_meta("options"))
        rows = s.exec(select(RunMeta.run_id, RunMeta.value_json).where(RunMeta.key == "options",
                                                                      RunMeta.run_id != self.run_id)).all()
        out = {}
        for run, value in rows:
            theirs = _world_of(json.loads(value))
            if theirs != mine:
                out[run] = theirs
        return mine, out

    def _not_elsewhere(self) -> list:
        return [col(MemoryRecord.run_id).notin_(sorted(self.elsewhere))] if self.elsewhere else []

    def reviewed(self, s: Session, rows: list[MemoryRecord]) -> dict[tuple[str, str], Outcome]:
        """Where review left each generated row of ``rows`` that has decisions (``reviewed``), under the
        rules this memory has read so far."""
        return reviewed(s, [_key(r) for r in rows if r.origin == "generated"], self.rules)


def reviewed(s: Session, keys: list[tuple[str, str]], rules: dict[str, ReleaseRule]) -> dict[tuple[str, str], Outcome]:
    """Where review left each generated child ``keys`` (run, item) that has decisions: the release rule's
    ``outcome`` over the decisions made on it in any run (its own id in the run that made it, and
    ``item@run`` in a run that reused it, as ``ReviewBoard`` pools them), under the rule that run kept
    (read into ``rules`` as needed). Looked up by (run, item) and by ``item@run``: ids repeat across runs,
    names do not."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    by_name = {foreign_id(i, run): (run, i) for run, i in keys}
    pooled: dict[tuple[str, str], list[ReviewDecision]] = {}
    for at in range(0, len(keys), 200):  # within any database's limit on bound parameters
        chunk = keys[at : at + 200]
        for d in s.scalars(*_decisions_on(chunk)):
            key = by_name.get(d.item_id, (d.run_id, d.item_id))
            pooled.setdefault(key, []).append(d.model_copy(update={"item_id": foreign_id(*reversed(key))}))
    if not pooled:
        return {}
    _rules_of(s, {run for run, _ in pooled}, rules)
    return {key: outcome(foreign_id(key[1], key[0]), got, rules[key[0]]) for key, got in pooled.items()}


def _rules_of(s: Session, runs: set[str], rules: dict[str, ReleaseRule]) -> None:
    """The release rule each run kept (``RunMeta`` "release_rule", as ``ReviewBoard`` keeps it), else the
    default, into ``rules``."""
    missing = sorted(runs - set(rules))
    if not missing:
        return
    kept = dict(s.exec(select(RunMeta.run_id, RunMeta.value_json).where(
        RunMeta.key == "release_rule", col(RunMeta.run_id).in_(missing))).all())
    for run in missing:
        got = json.loads(kept[run]) if run in kept else None
        rules[run] = ReleaseRule(**got) if isinstance(got, dict) else ReleaseRule()


def _decisions_on(keys: list[tuple[str, str]]) -> tuple[Any, dict[str, str]]:
    """The decisions on the children ``keys`` (run, item), made in their run or as ``item@run`` in any.

    One index seek per term ((run_id, item_id), then item_id), as plain SQL: SQLite scans the whole
    table for a row-value IN, and building the same OR as SQLAlchemy expressions costs more than the
    look-up itself."""
    params: dict[str, str] = {}
    terms = []
    for n, (run, item) in enumerate(keys):
        params[f"r{n}"], params[f"i{n}"], params[f"f{n}"] = run, item, foreign_id(item, run)
        terms.append(f"(run_id = :r{n} AND item_id = :i{n})")
    names = ", ".join(f":f{n}" for n in range(len(keys)))
    sql = f"SELECT * FROM {ReviewDecision.__table__.name} WHERE {' OR '.join(terms)} OR item_id IN ({names})"
    return select(ReviewDecision).from_statement(text(sql)), params


def _key(r: MemoryRecord) -> tuple[str, str]:
    return (r.run_id, r.item_id)


def _stands(review: Outcome | None, removed_at: datetime | None = None) -> bool:
    """Whether review leaves a child as it was made, to be a parent or reused: not rejected under the
    rule, no edit standing (the release carries the edit; the text in the memory is the old one), and not
    removed from a release (``removed_at``) unless a reviewer accepted or edited it after that, as a
    release takes it back (benchfill.release_carry.keep_out)."""
    if removed_at is not None and not any(d.decision in ("accept", "edit") and as_utc(d.created_at) > removed_at
                                          for d in (review.decisions if review else [])):  # fmt: skip
        return False
    return review is None or (review.status != "rejected" and review.edited_fields is None)


def _removals(s: Session) -> dict[tuple[str, str], datetime]:
    """(run, item) -> when a release removed it, over every run of the store (``REMOVED_META``)."""
    out: dict[tuple[str, str], datetime] = {}
    for value in s.exec(select(RunMeta.value_json).where(RunMeta.key == REMOVED_META)).all():
        try:
            entries = json.loads(value)
        except ValueError:
            continue
        for e in entries if isinstance(entries, list) else []:
            try:
                item, run, at = str(e[0]), str(e[1]), as_utc(datetime.fromisoformat(str(e[2])))
            except (TypeError, ValueError, IndexError):
                continue
            out[(run, item)] = max(at, out.get((run, item), at))
    return out


# What a run leaves out of the memory, beside scales it cannot link: another world's children (by the
# world of this run) and children whose run never recorded its backend (before migration m005).
_OTHER_WORLD = {
    "real": "{n} children made in the simulated world; this run uses real endpoints, so none is a parent, "
            "a reference or reused",
    "simulated": "{n} children made with real endpoints; this simulated world cannot know their true difficulty, "
                 "so none is a parent, a reference or reused",
}
_NO_WORLD = "{n} children of runs that recorded no backend (simulated or real unknown), so none is read"
_ELSEWHERE = ("{n} children made in another simulated world ({theirs}; this run's: {mine}): measured against "
              "other probes' answers, so none is a parent, a reference or reused")


def _world_of(options: Any) -> tuple:
    """A simulated run's world, by its recorded settings: the in-process world and its item discrimination
    (absent before the world drew one: the 1PL world, 0), or a `sim serve` world behind a config."""
    opts = options if isinstance(options, dict) else {}
    if opts.get("backend", "sim") != "sim":
        return ("served",)
    pair = float(opts.get("sim_pair_sd", 0.0) or 0.0)  # (absent before the world drew offsets: 0)
    # (absent before the offsets met the curve about its average: added to it)
    about = pair and opts.get("sim_pair_curve", "added") == "average"
    return ("sim", float(opts.get("sim_discrimination", 0.0) or 0.0)) + ((pair,) if pair else ()) + \
        (("average",) if about else ())


def _world_name(world: tuple) -> str:
    if world[0] == "served":
        return "sim serve's"
    return (f"item discrimination sd {world[1]:g}" + (f", probe offsets sd {world[2]:g}" if len(world) > 2 else "")
            + (" about the curve" if len(world) > 3 else ""))


# What keeps an earlier child from being reused as a gap's pick, beyond what keeps it from being a parent:
# a placement that is only a bound (no finite estimate: every probe wrong, or right, or at chance), and
# what the earlier run itself said against it as a pick (outside its gap, widening the coverage).
NO_REUSE_FLAGS = NO_PARENT_FLAGS | {"no_finite_mle", "all_wrong", "all_correct", "at_or_below_chance", "diverged",
                                    "no_trials", "outside_gap", "outside_range", "widens_coverage"}


def _barred(r: MemoryRecord) -> bool:
    try:
        flags = set(json.loads(r.flags_json or "[]"))
    except ValueError:
        return True
    return bool(flags & NO_REUSE_FLAGS)


def reused_child(found: Found, b_min: float, b_max: float) -> Child:
    """An earlier run's child as this run's pick for a gap: its record with every z mapped onto
    the current scale (the difficulty follows from the current fit's normalization), its ids
    marked with the run it came from, and the flag ``reused``."""
    r, link = found.row, found.link
    c = child_from_dict(json.loads(r.record_json or "{}"))
    span = max(b_max - b_min, 1e-9)

    def mapped(a):
        if a is None:
            return None
        d = annotation_to_dict(a)
        z, z_se = link(a.z), link.a * a.z_se
        return annotation_from_dict({**d, "z": z, "z_se": z_se, "difficulty": b_min + z * span, "se": z_se * span})

    c.annotation, c.confirmation = mapped(c.annotation), mapped(c.confirmation)
    c.item_id = foreign_id(r.item_id, r.run_id)
    if c.parent_id != c.ancestor_id:
        c.parent_id = foreign_id(c.parent_id, r.run_id)
    c.round, c.ask, c.parent_z, c.true_difficulty, c.true_z = 0, None, None, None, None
    c.item = {**(c.item or {}), "id": c.item_id}
    c.flags = [f for f in c.flags if f != "outside_gap"] + ["reused"]
    return c


def reuse_record(found: Found) -> dict[str, Any]:
    """What the report and the review record say of a reused child: where it came from, how it was mapped."""
    r, link = found.row, found.link
    return {"run_id": r.run_id, "item_id": r.item_id, "scale": r.scale, "z_then": r.z, "z_now": found.z,
            "link": None if link.a == 1.0 and link.b == 0.0 else asdict(link)}


def plan_memory(shared: SharedMemory, gaps, size: int, b_min: float, b_max: float) -> dict[str, Any]:
    """What the shared memory gives each gap of a run, read once before any search (and saved in
    the run's meta, so a resumed run reads it back rather than a memory other runs changed since):
    the seed entries with the fields of the earlier runs' children among them, and a child to reuse."""
    shared.link_scales()
    plan: dict[str, Any] = {
        "scale": shared.scale,
        "linked": {sc: asdict(k) for sc, k in shared.links.items() if sc != shared.scale},
        "left_out": dict(shared.left_out), "gaps": {},
    }
    for g, gap in enumerate(gaps):
        found = shared.nearest((gap.left + gap.right) / 2, size)
        reuse = shared.reusable(gap.left, gap.right)
        plan["gaps"][str(g)] = {
            "left": gap.left, "right": gap.right,
            "entries": [f.entry().to_list() for f in found],
            "items": {f.name: json.loads(f.row.data_json) for f in found if f.row.origin == "generated"},
            "reuse": None if reuse is None else {"child": child_to_dict(reused_child(reuse, b_min, b_max)),
                                                 "from": reuse_record(reuse)},
        }
    return plan


def open_plan(store, benchmark: str, ids: list[str], z: list[float], gaps, fit, size: int):
    """The run's view of the shared memory and its plan: the one its interrupted attempt saved, if
    any (same fit, same scale), else a new one, saved before any gap is searched."""
    shared = SharedMemory(store, benchmark, ids, z)
    shared.record_originals()
    plan = store.get_meta(SEED_META)
    if plan is None or plan.get("scale") != shared.scale:
        plan = plan_memory(shared, gaps, size, fit.b_min, fit.b_max)
        store.set_meta(SEED_META, plan)
    return shared, plan


def _insert_missing(s: Session, rows: list[dict[str, Any]]) -> None:
    """Insert memory rows, leaving any already there (``uq_memory_entry``) as they are, without a
    check-then-insert race: ON CONFLICT DO NOTHING on PostgreSQL, INSERT OR IGNORE on SQLite."""
    if not rows:
        return
    table = MemoryRecord.__table__
    dialect = s.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        for i in range(0, len(rows), 500):
            s.execute(insert(table).on_conflict_do_nothing(), rows[i : i + 500])
        return
    try:  # another database: all of them or none, in a savepoint
        with s.begin_nested():
            s.execute(table.insert(), rows)
    except IntegrityError:
        pass


def gap_plan(plan: dict[str, Any] | None, g: int, left: float, right: float) -> dict[str, Any] | None:
    """The plan of gap ``g``, if the plan was made for a gap with these bounds."""
    got = (plan or {}).get("gaps", {}).get(str(g))
    return got if got is not None and (got["left"], got["right"]) == (left, right) else None


def seed_entries(gap_plan: dict[str, Any]) -> list[MemoryEntry]:
    return [MemoryEntry.from_list(e) for e in gap_plan["entries"]]


def reuse_result(gap_plan: dict[str, Any], g: int, left: float, right: float) -> GapResult:
    """A gap filled by an earlier run's child: no round, no spend."""
    c = child_from_dict(gap_plan["reuse"]["child"])
    res = GapResult(g, left, right, (left + right) / 2, "benchfill", [c], c, 0, Spend(), [], "reused", None)
    # not searched: its seed memory was read by nothing, so it counts no entries; the run it came from counts
    reused_from = gap_plan["reuse"]["from"]
    res.shared = {**shared_summary(gap_plan, res, searched=False), "reused_from": reused_from,
                  "earlier_runs": [reused_from["run_id"]]}
    return res


def shared_summary(gap_plan: dict[str, Any] | None, res: GapResult, searched: bool = True) -> dict[str, Any]:
    """How much of a gap's search came from earlier runs: entries in its first memory (``earlier_entries``,
    named ``item@run`` as this run names them, so a run's summary counts an entry several gaps shared once), parents (children made
    from an earlier run's child), and those runs."""
    if gap_plan is None:
        return {}
    earlier = {e.item_id: e.source for e in seed_entries(gap_plan) if e.source} if searched else {}
    from_earlier = [c for c in res.children if c.parent_id in earlier and "reused" not in c.flags]
    return {"entries_from_earlier_runs": len(earlier),
            "earlier_entries": sorted(earlier),
            "children_of_earlier_parents": len(from_earlier),
            "parents_from_earlier_runs": sorted({c.parent_id for c in from_earlier}),
            "earlier_runs": sorted(set(earlier.values()))}


# -- looking after the memory (``benchfill memory list | forget``) ---------------------------------------------


def memory_contents(store, benchmark: str | None = None) -> list[dict[str, Any]]:
    """What the store's memory holds, per benchmark and run: the benchmark's own items (run ``""``, per
    fit), and each run's children with their world, how many were confirmed and how many may parent, as
    a later run's retrieval decides it (``_stands``): not rejected nor edited in review, nor removed from
    a release, beside the judge's verdict and the screens' flags."""
    world = {True: "simulated", False: "real", None: "unknown"}
    with store.session() as s:
        q = select(MemoryRecord.benchmark, MemoryRecord.run_id, MemoryRecord.origin, MemoryRecord.simulated,
                   func.count(), func.sum(case((col(MemoryRecord.confirmed), 1), else_=0)),
                   func.sum(case((col(MemoryRecord.parent_ok), 1), else_=0)),
                   func.count(func.distinct(MemoryRecord.scale)))
        if benchmark is not None:
            q = q.where(MemoryRecord.benchmark == benchmark)
        rows = s.exec(q.group_by(MemoryRecord.benchmark, MemoryRecord.run_id, MemoryRecord.origin,
                                 MemoryRecord.simulated)).all()
        barred = _barred_by_review(s, benchmark)
    out = [{"benchmark": b, "run_id": r, "origin": o, "world": "-" if o == "original" else world[sim],
            "entries": int(n), "confirmed": int(c or 0),
            "may_parent": int(p or 0) - barred.get((b, r, sim), 0) if o == "generated" else int(p or 0),
            "scales": int(sc)}
           for b, r, o, sim, n, c, p, sc in rows]
    return sorted(out, key=lambda d: (d["benchmark"], d["origin"] != "original", d["run_id"], d["world"]))


def _barred_by_review(s: Session, benchmark: str | None) -> dict[tuple[str, str, bool | None], int]:
    """(benchmark, run, simulated) -> how many of its children the judge and the screens let parent but
    review or a release's removal does not. Only the children a decision or a removal names come back:
    they are few beside the memory."""
    removed = _removals(s)
    keys = set(removed)
    for run, item in s.exec(select(ReviewDecision.run_id, ReviewDecision.item_id).distinct()).all():
        keys.add((run, item))  # a decision in the run that made the child
        name = item
        while "@" in name:  # "X@A", made in a run that reused A's "X" ("X@A@B": B's "X@A", and so A's "X")
            name, _, origin = name.rpartition("@")
            keys.add((origin, name))
    named: list[tuple[str, str, str, bool | None]] = []
    ordered = sorted(keys)
    # One pass of the table per 5,000 keys (no index leads with run and item), in the database: only the rows
    # named come back (all the eligible children, read into Python, had doubled the command's time on a
    # store of 500,000 and tripled its memory)
    for at in range(0, len(ordered), 5000):
        chunk = ordered[at : at + 5000]
        q = select(MemoryRecord.benchmark, MemoryRecord.run_id, MemoryRecord.item_id, MemoryRecord.simulated).where(
            MemoryRecord.origin == "generated", MemoryRecord.parent_ok == True,  # noqa: E712
            tuple_(MemoryRecord.run_id, MemoryRecord.item_id).in_(chunk))
        if benchmark is not None:
            q = q.where(MemoryRecord.benchmark == benchmark)
        named += list(s.exec(q).all())
    review = reviewed(s, [(run, item) for _, run, item, _ in named], {})
    out: dict[tuple[str, str, bool | None], int] = {}
    for b, run, item, sim in named:
        if not _stands(review.get((run, item)), removed.get((run, item))):
            out[(b, run, sim)] = out.get((b, run, sim), 0) + 1
    return out


def forget_run(store, run_id: str, benchmark: str | None = None, *, dry_run: bool = False) -> int:
    """Remove one run's children from the memory (all its benchmarks', or one's), so that no later run takes
    them as parents, references or reuse; the run's own rows (its gaps, candidates, review) stay. Returns
    how many entries were (or, ``dry_run``, would be) removed. A run resumed afterwards records the children
    it annotates from then on again."""
    with store.session() as s:
        where = [MemoryRecord.run_id == run_id, MemoryRecord.origin == "generated"]
        if benchmark is not None:
            where.append(MemoryRecord.benchmark == benchmark)
        n = int(s.exec(select(func.count()).select_from(MemoryRecord).where(*where)).one())
        if n and not dry_run:
            s.exec(sql_delete(MemoryRecord).where(*where))
    return n
