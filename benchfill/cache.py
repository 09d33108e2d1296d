"""The cache of completed model calls, keyed by a hash of the request.

The key covers what decides the answer (endpoint, model, messages, sampling settings, seed or sample
index) and nothing else: never a credential, so rotating a key keeps the cache, and a key never
reaches the store. ``CallCache.add`` queues rows and writes them in batches; a caller that must not
lose a completed call to a kill flushes once the call is done (the probe client writes the replies
of each turn of its event loop together, the rewriter and judge each call).

Several processes may share one cache (a sweep's units on a Ray cluster, one PostgreSQL store): a key
is the table's primary key, and every write is ``INSERT ... ON CONFLICT DO NOTHING`` with its rows in
key order, so concurrent writers of overlapping keys never duplicate a row, never fail on each other's
rows, and take the keys' locks in one order (PostgreSQL deadlocks two writers that insert the same
keys in opposite orders; tests/test_sweep_cache.py shows it). Where a process may be killed mid-work
and its work retried elsewhere, ``write_through(True)`` writes every call as it completes, so that
the retry repeats no call that had come back.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlmodel import select

from benchfill.schema import ModelCall, RunMeta, now
from benchfill.store import Store

_CHUNK = 500  # SQLite's bound-parameter limit is 999 on old builds
_WRITE_THROUGH = False


def write_through(on: bool = True) -> None:
    """Write each completed call at once rather than in batches (for every cache of this process).

    A batch lost with a killed process costs its calls again; a unit of work that another node may
    retry (``benchfill sweep --executor ray``) turns this on, at one small write per call.
    """
    global _WRITE_THROUGH
    _WRITE_THROUGH = bool(on)


@functools.lru_cache(maxsize=256)
def clean_endpoint(url: str | None) -> str:
    """An endpoint as it may be recorded: no user, password, query string or trailing slash."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def request_json(request: dict[str, Any], encoded: dict[str, str] | None = None) -> str:
    """A request body as canonical JSON (sorted keys, no whitespace, UTF-8 kept).

    ``encoded`` holds the canonical JSON of some top-level values already (a prompt shared by
    every probe of an item): they are spliced in, not encoded again; the string is the same.
    """
    if not encoded:
        return json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    parts = (f"{_json_value(k)}:{encoded[k] if k in encoded else _json_value(request[k])}" for k in sorted(request))
    return "{" + ",".join(parts) + "}"


# The JSON of the scalars a request repeats call after call (its keys, sampling settings, endpoint
# and model names), made by json.dumps once and then looked up: planning a batch spent most of its
# ~70 us per call encoding them again. Keyed by type too, as 1, 1.0 and True are equal dict keys.
_SCALARS: dict[tuple[type, Any], str] = {}
_SCALAR_TYPES = (str, int, float, bool, type(None))


def _json_value(v: Any) -> str:
    t = type(v)
    if t not in _SCALAR_TYPES:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    got = _SCALARS.get((t, v))
    if got is None:
        got = json.dumps(v, ensure_ascii=False)
        if len(_SCALARS) < 4096 and (t is not str or len(v) <= 200):
            _SCALARS[(t, v)] = got
    return got


def canonical_request(kind: str, endpoint: str, model: str, request: dict[str, Any],
                      body_json: str | None = None) -> str:
    """What the key hashes: ``{"endpoint", "kind", "model", "request"}`` as canonical JSON.

    Assembled around the request's own canonical JSON (``body_json``, when the caller has it) so
    that the prompt is serialised once per call, for the key and for the stored row alike; the
    string is exactly ``request_json`` of the whole object.
    """
    rj = request_json(request) if body_json is None else body_json
    d = _json_value
    return f'{{"endpoint":{d(clean_endpoint(endpoint))},"kind":{d(kind)},"model":{d(model)},"request":{rj}}}'


def request_key(kind: str, endpoint: str, model: str, request: dict[str, Any], body_json: str | None = None) -> str:
    return hashlib.sha256(canonical_request(kind, endpoint, model, request, body_json).encode()).hexdigest()


class CallCache:
    """Store-backed cache: batched look-ups, buffered writes flushed by size or age."""

    def __init__(self, store: Store, flush_every: int = 256, flush_after_s: float = 1.0):
        self.store = store
        self.flush_every = flush_every
        self.flush_after_s = flush_after_s
        # Run meta written in the same transaction as each batch of calls (a run keeps its traffic figures with
        # the calls they count: a process killed before its first checkpoint left answers in the cache and no
        # count of the requests that made them; written just after them, a kill between the two lost a batch's).
        self.meta_with_calls: Callable[[], dict[str, Any]] | None = None
        # Plain dicts, not ModelCall objects: building a SQLModel per call costs more than the HTTP call.
        self._pending: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """The stored response JSON of each key that has one (batched: one query per 500 keys)."""
        keys = list(dict.fromkeys(keys))
        wanted = set(keys)
        found = {row["key"]: row["response_json"] for row in self._pending if row["key"] in wanted}
        with self.store.session() as s:
            for i in range(0, len(keys), _CHUNK):
                q = select(ModelCall.key, ModelCall.response_json).where(ModelCall.key.in_(keys[i : i + _CHUNK]))
                found.update({k: r for k, r in s.exec(q)})
        return found

    def get(self, key: str) -> str | None:
        return self.get_many([key]).get(key)

    def add(self, row: dict[str, Any]) -> None:
        """Queue a completed call; written at the next flush (by size or age)."""
        self._pending.append(row)
        if _WRITE_THROUGH or len(self._pending) >= self.flush_every or time.monotonic() - self._last_flush > self.flush_after_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        # Key order: concurrent writers of overlapping keys then lock them in the same order.
        values, self._pending = sorted(self._pending, key=lambda row: row["key"]), []
        meta = [{"run_id": self.store.run_id, "key": k, "value_json": json.dumps(v)}
                for k, v in (self.meta_with_calls() if self.meta_with_calls is not None else {}).items()]
        dialect = self.store.engine.dialect.name
        if dialect in ("sqlite", "postgresql"):
            # One multi-row INSERT; a key already present is the same request, so keep the first. On the
            # table, not the ORM class (a plain executemany, ~2x less CPU per row), in a transaction of
            # the engine's own, not an ORM session: the probe client writes each turn's replies as they
            # come, often one row at a time, and a session costs more than the row (~0.14 against 0.08 ms).
            insert = importlib.import_module(f"sqlalchemy.dialects.{dialect}").insert
            with self.store.engine.begin() as conn:
                conn.execute(insert(ModelCall.__table__).on_conflict_do_nothing(index_elements=["key"]), values)
                if meta:
                    upsert = insert(RunMeta.__table__).values(meta)
                    conn.execute(upsert.on_conflict_do_update(index_elements=["run_id", "key"],
                                                              set_={"value_json": upsert.excluded.value_json}))
        else:
            with self.store.session() as s:
                for row in values:
                    s.merge(ModelCall(**row))
                for row in meta:
                    s.merge(RunMeta(**row))


MAX_TOKENS_COUNTED = 10_000_000  # a reply's usage beyond this is not a count any server means


def token_count(value: object) -> int:
    """A usage count as a server reported it, when it is one: a whole number in [0, MAX_TOKENS_COUNTED];
    anything else (negative, 10^15, "lots") counts 0, so that one server's nonsense does not become the
    run's traffic figures."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    n = int(value)
    return n if 0 <= n <= MAX_TOKENS_COUNTED else 0


def make_call(kind: str, key: str, endpoint: str, model: str, request: dict[str, Any], response: Any,
              prompt_tokens: int = 0, completion_tokens: int = 0, latency_s: float = 0.0,
              body_json: str | None = None) -> dict[str, Any]:
    """A ``ModelCall`` row as a dict, ready for ``CallCache.add`` (``body_json``: ``request_json(request)``)."""
    return {
        "key": key, "kind": kind, "endpoint": clean_endpoint(endpoint), "model": model,
        "request_json": request_json(request) if body_json is None else body_json,
        "response_json": json.dumps(response, separators=(",", ":"), ensure_ascii=False),  # not hashed
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "latency_s": latency_s,
        "created_at": now(),
    }
