"""Issue 15 acceptance, probe fleets: one probe panel served by two simulated endpoints, one of which
starts failing mid-run (5xx on every completion, or its server stopped). The run completes with the same
graded results as with one healthy endpoint, the traffic splits across the replicas while both are
healthy, and no successful call is made twice. Real openai clients, real loopback servers.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from benchfill.benchmarks import get_benchmark
from benchfill.config import FleetPolicy, ProbeConfig, RetryConfig
from benchfill.probes import ProbePanel, TrafficStats, collect_responses
from benchfill.schema import ModelCall
from benchfill.sim import SimServer, World
from benchfill.store import Store

TRIALS, SEED, ITEMS = 16, 5, 30
RETRY = RetryConfig(max_attempts=10, initial_wait_s=0, max_wait_s=0, jitter_s=0)
POLICY = FleetPolicy(eject_after=5, cooldown_s=0.2, max_cooldown_s=1.0, health_timeout_s=2.0)
FLIP_AFTER = 40  # requests the second replica has had when it starts failing


@pytest.fixture(scope="module")
def aime24(shared_data):
    return get_benchmark("aime24", data_dir=shared_data)


def make_world(bench) -> World:
    # Each endpoint gets a world of its own, built alike: as two vLLM replicas of the same weights.
    return World.from_items(bench.items, evaluator="math", text_field="problem", answer_field="answer",
                            n_probes=12, seed=11, latency_ms=5)


def panel(world: World, *, urls: list[str] | None = None, url: str | None = None) -> ProbePanel:
    where = {"replicas": urls} if urls else {"base_url": url}
    return ProbePanel([ProbeConfig(name=m, model=m, trials=TRIALS, concurrency=8, timeout_s=10, **where)
                       for m in world.probes], RETRY, POLICY)


def collect(store, pan, bench):
    stats = TrafficStats()
    return collect_responses(store, pan, bench.items, bench.spec, seed=SEED, stats=stats), stats


def served(srv: SimServer) -> tuple[int, int]:
    """(requests, successes) the server has seen so far, read from its counters while it runs."""
    while True:
        try:
            counts = [dict(c) for c in list(srv.app.stats.values())]
            return sum(c.get("requests", 0) for c in counts), sum(c.get("successes", 0) for c in counts)
        except RuntimeError:  # a counter added by the server thread while we read
            continue


class FailMidRun(threading.Thread):
    """Watches replica B; once it has had ``FLIP_AFTER`` requests, notes what both replicas served so
    far and makes B fail: ``how`` = "5xx" (every completion answers 500) or "stop" (its server goes)."""

    def __init__(self, a: SimServer, b: SimServer, how: str):
        super().__init__(daemon=True)
        self.a, self.b, self.how = a, b, how
        self.at_flip: tuple[int, int] | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            if served(self.b)[0] >= FLIP_AFTER:
                self.at_flip = (served(self.a)[0], served(self.b)[0])
                if self.how == "5xx":
                    self.b.world.fault_mix = {"500": 1.0}
                    self.b.world.fault_rate = 1.0
                else:
                    self.b.stop()
                return
            time.sleep(0.001)


@pytest.fixture(scope="module")
def one_healthy_endpoint(aime24, tmp_path_factory):
    world = make_world(aime24)
    with SimServer(world) as srv:
        m, stats = collect(Store(tmp_path_factory.mktemp("one") / "s.db"), panel(world, url=srv.base_url), aime24)
    assert stats.failures == 0 and stats.retries == 0
    return m


@pytest.mark.parametrize("how", ["5xx", "stop"])
def test_a_fleet_that_loses_a_replica_mid_run_gives_the_same_results(tmp_path, aime24, one_healthy_endpoint, how):
    store = Store(tmp_path / "s.db")
    world_a, world_b = make_world(aime24), make_world(aime24)
    with SimServer(world_a) as a, SimServer(world_b) as b:
        watcher = FailMidRun(a, b, how)
        watcher.start()
        try:
            m, stats = collect(store, panel(world_a, urls=[a.base_url, b.base_url]), aime24)
        finally:
            watcher.halt.set()
            watcher.join()
        a_req, a_ok = served(a)
        b_req, b_ok = served(b)
        # a rerun by a fleet of A alone is served from the cache: no key names the replica
        again, again_stats = collect(store, panel(world_a, urls=[a.base_url]), aime24)

    # the same graded results as one healthy endpoint, and nothing failed in the end
    assert stats.failures == 0
    np.testing.assert_array_equal(m.correct, one_healthy_endpoint.correct)
    np.testing.assert_array_equal(m.trials, one_healthy_endpoint.trials)
    # it failed mid-run, after both replicas had taken their share while healthy
    assert watcher.at_flip is not None, "replica B never reached the point where it starts failing"
    flip_a, flip_b = watcher.at_flip
    assert flip_b >= FLIP_AFTER and flip_a >= FLIP_AFTER // 2, f"traffic before the failure: A {flip_a}, B {flip_b}"
    calls = 12 * ITEMS
    assert FLIP_AFTER // 2 <= b_ok < calls - FLIP_AFTER  # B served part, A the rest
    # B was taken out; its requests were retried on A; each success happened once, and the client's
    # per-replica counts agree with the servers' own
    ra, rb = stats.replicas[a.base_url], stats.replicas[b.base_url]
    assert rb["ejections"] >= 1 and rb["failures"] >= POLICY.eject_after and ra["ejections"] == 0
    assert (ra["calls"], rb["calls"]) == (a_ok, b_ok) and a_ok + b_ok == calls == stats.calls
    assert ra["requests"] == a_req - again_stats.requests and stats.retries == rb["failures"] + ra["failures"]
    if how == "5xx":
        assert rb["requests"] == b_req and rb["failures"] == b_req - b_ok
    rows = store.all(ModelCall)
    assert len(rows) == calls and {r.endpoint for r in rows} == {a.base_url, b.base_url}
    assert again_stats.requests == 0 and again_stats.cache_hits == calls
    np.testing.assert_array_equal(again.correct, m.correct)


def test_a_run_on_a_fleet_reports_what_each_replica_served(tmp_path):
    """``benchfill run --config`` with every probe on two replicas: the run's report counts per replica."""
    import json

    from benchfill.run import RunOptions, run

    bench = get_benchmark("demo")
    worlds = [World.from_items(bench.items, evaluator=bench.spec.evaluator, text_field=bench.spec.text_field,
                               answer_field=bench.spec.answer_field, matrix=bench.matrix, n_probes=4, seed=5)
              for _ in range(2)]
    with SimServer(worlds[0]) as a, SimServer(worlds[1]) as b:
        probes = "".join(f'[[probes]]\nname = "{m}"\nmodel = "{m}"\ntrials = 8\nconcurrency = 4\n'
                         f'replicas = ["{a.base_url}", "{b.base_url}"]\n' for m in worlds[0].probes)
        cfg = tmp_path / "fleet.toml"
        cfg.write_text(probes + f'[rewriter]\nmodel = "openai/sim-rewriter"\napi_base = "{a.base_url}"\n'
                       f'[judge]\nmodel = "openai/sim-judge"\napi_base = "{a.base_url}"\ntemperature = 0.0\n')
        d = run(RunOptions(benchmark="demo", config=str(cfg), runs_dir=str(tmp_path / "runs"), gaps=1, rounds=1,
                           parents=2, children=2, references=8, progress=False, seed=5))
        probe_calls = [sum(c.get("successes", 0) for m, c in s.stats["models"].items() if m.startswith("sim-probe"))
                       for s in (a, b)]
    traffic = json.loads((d / "report.json").read_text())["backend"]["traffic"]
    assert set(traffic["replicas"]) == {a.base_url, b.base_url}
    served = [traffic["replicas"][u]["calls"] for u in (a.base_url, b.base_url)]
    assert served == probe_calls and min(served) > 0 and sum(served) == traffic["calls"]
    assert all(c["ejections"] == 0 and c["failures"] == 0 for c in traffic["replicas"].values())
    assert (f"Probe calls per endpoint: {a.base_url} {served[0]} served, 0 failed, 0 ejections; "
            f"{b.base_url} {served[1]} served, 0 failed, 0 ejections.") in (d / "report.md").read_text()
