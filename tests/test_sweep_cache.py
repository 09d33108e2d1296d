"""The call cache shared by several processes on one PostgreSQL store (a sweep on a Ray cluster).

Several writer processes, started together, insert overlapping keys in different orders: every key
ends up exactly once, no writer fails (no unique violation, no deadlock), and every row written is
readable by the others. Write-through makes a completed call visible before any flush.
"""

from __future__ import annotations

import multiprocessing as mp
import random

from pg_server import postgres_url
from sqlalchemy import text

from benchfill.cache import CallCache, make_call, request_key, write_through
from benchfill.store import Store

WRITERS = 4
KEYS_PER_WRITER = 120
PASSES = 3
STRIDE = 40  # writer i writes keys [i*STRIDE, i*STRIDE + KEYS_PER_WRITER): each key by up to 3 writers


def _key(j: int) -> str:
    return request_key("probe", "http://127.0.0.1:1/v1", "m", {"messages": [{"role": "user", "content": f"q{j}"}]})


def _writer(url: str, i: int, barrier) -> None:
    store = Store(url)
    cache = CallCache(store, flush_every=60, flush_after_s=60.0)
    keys = list(range(i * STRIDE, i * STRIDE + KEYS_PER_WRITER))
    barrier.wait()
    for rep in range(PASSES):  # each writer in its own orders: the inserts would cross without sorting
        random.Random(f"{i}:{rep}").shuffle(keys)
        for j in keys:
            req = {"messages": [{"role": "user", "content": f"q{j}"}]}
            cache.add(make_call("probe", _key(j), "http://127.0.0.1:1/v1", "m", req, {"texts": [f"a{j}"]}))
        cache.flush()
    # Every key this writer wrote is there, whoever wrote it first, with the one answer it has.
    got = cache.get_many(_key(j) for j in keys)
    assert got == {_key(j): f'{{"texts":["a{j}"]}}' for j in keys}
    store.close()


def test_concurrent_writers_never_duplicate_or_fail():
    with postgres_url() as url:
        Store(url).close()  # the schema, created once before the writers race
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(WRITERS)
        procs = [ctx.Process(target=_writer, args=(url, i, barrier)) for i in range(WRITERS)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * WRITERS
        store = Store(url)
        with store.engine.connect() as conn:
            rows, distinct = conn.execute(text("SELECT count(*), count(DISTINCT key) FROM modelcall")).one()
        store.close()
        expected = (WRITERS - 1) * STRIDE + KEYS_PER_WRITER
        assert (rows, distinct) == (expected, expected)


def test_write_through_makes_each_call_visible_at_once(tmp_path):
    store = Store(tmp_path / "s.db")
    reader = Store(tmp_path / "s.db")
    req = {"messages": [{"role": "user", "content": "q"}]}
    key = _key(0)
    try:
        cache = CallCache(store, flush_every=1000, flush_after_s=3600.0)
        cache.add(make_call("probe", key, "http://127.0.0.1:1/v1", "m", req, {"texts": ["a"]}))
        assert CallCache(reader).get(key) is None  # batched: not written yet
        write_through(True)
        cache.add(make_call("probe", _key(1), "http://127.0.0.1:1/v1", "m", req, {"texts": ["b"]}))
        assert CallCache(reader).get_many([key, _key(1)]) == {key: '{"texts":["a"]}', _key(1): '{"texts":["b"]}'}
    finally:
        write_through(False)
        store.close()
        reader.close()
