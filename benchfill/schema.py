"""The tables of a run's store.

One SQLModel table per kind of record. Only the orchestrator (the process that
owns the run) writes; workers hand results back. JSON payloads are kept as text
so that SQLite and PostgreSQL behave the same.

The tables live on a registry and MetaData of their own (``metadata``), not on SQLModel's
global one, so an application that uses SQLModel for its own tables neither creates ours
nor collides with them. A change to a column needs a migration in ``benchfill.store``.

Several runs may share one store (a PostgreSQL URL every node of a sweep reaches, a store a
user names to keep the search memory across runs): every table that holds one run's records
carries that run's id (``run_id``, part of the key where the key is a name), and a ``Store``
handle reads and writes only its own run's rows. The call cache (``ModelCall``) is shared on
purpose: a request answered for one run is answered for all.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Index, UniqueConstraint
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel


def now() -> datetime:
    return datetime.now(UTC)


def as_utc(t: datetime) -> datetime:
    """A stored time read back without its zone (SQLite keeps none) is UTC, as written."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


class StoreTable(SQLModel, registry=registry()):
    """Base of the store's tables: its own registry, so its own MetaData."""


metadata = StoreTable.metadata


class SchemaVersion(StoreTable, table=True):
    """The schema version of the store (one row), so that an older store is upgraded or refused."""

    id: int = Field(default=1, primary_key=True)
    version: int


class RunMeta(StoreTable, table=True):
    """Key-value facts about the run: config, seed, benchmark, fit, status."""

    run_id: str = Field(default="", primary_key=True)
    key: str = Field(primary_key=True)
    value_json: str


class ModelCall(StoreTable, table=True):
    """A completed model call, keyed by a hash of the request (never the credentials).

    The cache that makes a resumed run repeat no paid work.
    """

    key: str = Field(primary_key=True)  # sha256 hex of the canonical request
    kind: str = Field(index=True)  # "probe" | "rewriter" | "judge"
    endpoint: str = ""  # base URL or litellm provider, no credentials
    model: str = ""
    request_json: str = ""
    response_json: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    created_at: datetime = Field(default_factory=now)


class Item(StoreTable, table=True):
    """An item of the benchmark or a generated candidate, in the benchmark's own fields."""

    run_id: str = Field(default="", primary_key=True)  # child ids (bf-g0-r1-p0-c0) repeat across runs
    id: str = Field(primary_key=True)
    origin: str = "original"  # "original" | "generated"
    data_json: str  # the item's own fields (text, answer, options, tests...)
    parent_id: str | None = Field(default=None, index=True)
    created_at: datetime = Field(default_factory=now)


class Candidate(StoreTable, table=True):
    """A child proposed by the rewriter during a gap's search, with its annotation."""

    run_id: str = Field(default="", primary_key=True)
    id: str = Field(primary_key=True)  # same id as its Item row
    gap_index: int = Field(index=True)
    round: int
    parent_id: str
    target_z: float
    valid: bool | None = None  # judge verdict
    judge_reason: str = ""
    difficulty: float | None = None  # b on the benchmark's scale (online calibration)
    difficulty_se: float | None = None
    z: float | None = None
    rollouts: int = 0
    confirmed_difficulty: float | None = None
    confirmed_se: float | None = None
    confirmed_z: float | None = None
    true_difficulty: float | None = None  # simulated world only; labelled as such
    flags_json: str = "[]"
    status: str = "proposed"  # "proposed" | "selected"
    review_json: str | None = None  # a selected child's review record (docs/contracts.md), the queue's source
    created_at: datetime = Field(default_factory=now)


class ProbeResult(StoreTable, table=True):
    """Graded rollouts of one probe on one item."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(default="", index=True)
    item_id: str = Field(index=True)
    probe: str
    correct: int
    trials: int
    phase: str = "annotate"  # "benchmark" | "annotate" | "confirm"
    call_key: str = ""
    created_at: datetime = Field(default_factory=now)


class GapState(StoreTable, table=True):
    """Progress of one gap's search, so a rerun resumes where it stopped."""

    run_id: str = Field(default="", primary_key=True)
    gap_index: int = Field(primary_key=True)
    left: float
    right: float
    target_z: float
    status: str = "pending"  # "pending" | "running" | "done"
    rounds_used: int = 0
    chosen_id: str | None = None
    state_json: str = "{}"


class ReviewDecision(StoreTable, table=True):
    """One reviewer's decision on one proposed item."""

    # The decisions on one run's item (the search memory looks up the children it retrieves by run and id).
    __table_args__ = (Index("ix_reviewdecision_run_item", "run_id", "item_id"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(default="", index=True)
    item_id: str = Field(index=True)
    reviewer: str
    decision: str  # "accept" | "reject" | "edit"
    reason: str = ""
    edited_json: str | None = None  # the edited item fields; the original stays in Item
    created_at: datetime = Field(default_factory=now)
    # Where it was made: "page" (the review page), "sheet:<the sheet's export time>" (a CSV import), or ""
    # (a library call). A re-imported sheet must not undo a later decision made elsewhere.
    source: str = ""


class Release(StoreTable, table=True):
    run_id: str = Field(default="", primary_key=True)
    version: str = Field(primary_key=True)
    path: str
    manifest_sha256: str
    created_at: datetime = Field(default_factory=now)


# The tables whose rows belong to one run (their ``run_id`` column); a Store handle sees its own.
RUN_TABLES: tuple[type[StoreTable], ...] = (RunMeta, Item, Candidate, ProbeResult, GapState, ReviewDecision, Release)


class MemoryRecord(StoreTable, table=True):
    """The search memory shared across gaps, runs and releases (benchfill/engine/memory_store.py,
    docs/memory.md): every annotated item of a benchmark, original or generated, on the scale of
    the fit that measured it. Retrieval is an index range scan on (benchmark, scale, simulated, z)."""

    __table_args__ = (
        # A run reads only the children of its own world (``simulated``): one range of this index per scale.
        Index("ix_memory_near", "benchmark", "scale", "simulated", "z"),
        # A fit's originals, which link scales; the scales that hold children of a world, and how many.
        Index("ix_memory_origin", "benchmark", "origin", "simulated", "scale"),
        UniqueConstraint("benchmark", "scale", "run_id", "item_id", name="uq_memory_entry"),
    )

    id: int | None = Field(default=None, primary_key=True)
    benchmark: str
    scale: str  # the fit it was measured on (a hash of the originals' fitted z)
    run_id: str = ""  # the run that made it ("" for the benchmark's own items)
    item_id: str  # its id within that run
    origin: str = "original"  # "original" | "generated"
    # Made in the simulated world (True) or with real endpoints (False); False for the benchmark's own items,
    # which are the same items in either world; None for a child of a run whose backend was never recorded
    # (migration m005), which no run reads. A run reads only its own world's children.
    simulated: bool | None = False
    z: float  # the confirmed z where there is one, else the annotated (or fitted) z
    z_se: float = 0.0
    confirmed: bool = False
    parent_id: str = ""
    ancestor_id: str = ""
    gap_index: int | None = None
    round: int | None = None
    valid: bool | None = None  # the judge's verdict (None for originals)
    flags_json: str = "[]"
    parent_ok: bool = True  # valid and no flag that bars it from being a parent (search/memory.py)
    data_json: str = "{}"  # the item's own fields, so a later run can rewrite it without this run's Item rows
    record_json: str | None = None  # the child's whole record (search/snapshot.py): a later run can reuse it
    created_at: datetime = Field(default_factory=now)
