"""Probe fleets (benchfill/fleet.py): the config's two forms, cache keys that never name a replica,
least-outstanding spread within each replica's bound, ejection, health checks and a fleet that is all
down. Real openai clients against real loopback servers; a dead replica is a port nobody listens on."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time

import pytest
from loopback_openai import LoopbackOpenAI

from benchfill.benchmarks import BenchmarkSpec
from benchfill.config import FleetPolicy, ProbeConfig, RetryConfig, load_config
from benchfill.errors import ConfigError, EndpointError
from benchfill.limits import EndpointBound
from benchfill.probes import ProbePanel, RolloutClient, sample_seed
from benchfill.schema import ModelCall
from benchfill.store import Store

SPEC = BenchmarkSpec(name="toy", evaluator="toy")
ITEMS = [{"id": f"q{i}", "problem": f"question {i}", "answer": "yes"} for i in range(12)]
NO_WAIT = RetryConfig(max_attempts=6, initial_wait_s=0, max_wait_s=0, jitter_s=0)
FAST = FleetPolicy(eject_after=3, cooldown_s=0.2, max_cooldown_s=1.0, health_timeout_s=2.0)
# The key of one request as benchfill made it before fleets existed (computed with that code): a run
# recorded then, with one endpoint, must find its calls under the same keys.
OLD_KEY = "fca0a139623d29f7f3d360b5a2e414c6b509acf870bea410077c970d337f9f84"
OLD_SINGLE_KEY = "216ec08c50e76e5ef530a6cdc48485ff5381aaf5a47b38a488a9923b2ca67d8e"  # sample 0, n refused


class YesGrader:
    def grade(self, response, item, spec=None):
        return "yes" in response


def prompt(item, spec):
    return f"<problem>{item['problem']}</problem>"


def dead_url() -> str:
    """A loopback port nobody listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def fleet_panel(urls, models=("m1",), policy=FAST, retry=NO_WAIT, concurrency=3, **kw) -> ProbePanel:
    return ProbePanel([ProbeConfig(name=f"p-{m}", replicas=list(urls), model=m, trials=2,
                                   concurrency=concurrency, timeout_s=5, **kw) for m in models], retry, policy)


def run(store, pan, items=ITEMS, seed=0, **kw):
    async def go():
        async with RolloutClient(store, pan, SPEC, YesGrader(), prompt_fn=prompt) as rc:
            return await rc.rollouts(items, seed=seed, **kw), rc.stats
    return asyncio.run(go())


def outcome(results):
    return sorted((r.item_id, r.probe, r.correct, r.trials) for r in results)


# -- configuration ------------------------------------------------------------------------------------
def test_a_probe_names_one_endpoint_or_a_fleet_of_replicas(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[[probes]]\nname = "one"\nbase_url = "http://a:8000/v1/"\nmodel = "m"\nconcurrency = 4\n'
                   '[[probes]]\nname = "many"\nmodel = "m"\nconcurrency = 8\n'
                   'replicas = ["http://a:8000/v1", {base_url = "http://b:8000/v1/", concurrency = 32}]\n'
                   '[fleets]\neject_after = 2\ncooldown_s = 3\n')
    c = load_config(cfg)
    one, many = c.probes
    assert one.endpoints == [("http://a:8000/v1", 4)] and not one.is_fleet
    assert many.endpoints == [("http://a:8000/v1", 8), ("http://b:8000/v1", 32)] and many.is_fleet
    assert one.key_endpoint == "http://a:8000/v1" and many.key_endpoint == "fleet:many"
    assert c.fleets.eject_after == 2 and c.fleets.cooldown_s == 3
    assert ProbePanel.from_config(c).caps() == {"http://a:8000/v1": 8, "http://b:8000/v1": 32}
    # the recorded config reads back as the same config
    assert load_config(None, [f"probes={__import__('json').dumps(c.redacted()['probes'])}"]).probes == c.probes
    over = load_config(cfg, ['probes.one.replicas=["http://c:1/v1","http://d:1/v1"]', "probes.one.base_url=null"])
    assert over.probes[0].endpoints == [("http://c:1/v1", 4), ("http://d:1/v1", 4)]

    for body, msg in [("base_url = \"http://a/v1\"\nreplicas = [\"http://b/v1\"]", "exactly one of base_url"),
                      ("", "exactly one of base_url"),
                      ("replicas = []", "replicas: List should have at least 1 item"),
                      ("replicas = [\"http://b/v1\", \"http://b/v1/\"]", "replica http://b/v1 appears twice"),
                      ("replicas = [{base_url = \"http://b/v1\", concurrency = 0}]", "replicas.0.concurrency")]:
        cfg.write_text(f'[[probes]]\nname = "p"\nmodel = "m"\n{body}\n')
        with pytest.raises(ConfigError, match=rf"^{cfg}: field probes.0.*{msg}"):
            load_config(cfg)


def plan_keys(p: ProbeConfig, item=None, seed=7) -> str:
    rc = RolloutClient(None, ProbePanel([p]), SPEC, prompt_fn=lambda it, s: "Solve: " + it["problem"])
    return rc._plan([item or {"id": "q1", "problem": "1+1?"}], [p], None, seed)[0][3]


def test_cache_keys_name_the_fleet_never_a_replica_and_old_single_endpoint_keys_hold():
    common = dict(model="Qwen/Qwen3-8B", trials=4)
    single = ProbeConfig(name="p1", base_url="http://127.0.0.1:8001/v1/", **common)
    assert plan_keys(single) == OLD_KEY  # unchanged by fleets: an old run resumes without paying again
    a, b, c = "http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1", "http://10.0.0.3:8000/v1"
    keys = {plan_keys(ProbeConfig(name="p1", replicas=r, **common)) for r in ([a, b], [b, a], [c], [a, b, c])}
    assert len(keys) == 1 and OLD_KEY not in keys  # which replicas serve it is not part of the key
    assert plan_keys(ProbeConfig(name="p2", replicas=[a, b], **common)) not in keys  # another fleet is
    # a single endpoint that grows into a fleet keeps its cache by naming its old URL as the fleet
    grown = ProbeConfig(name="p1", replicas=[a, b], fleet_id="http://127.0.0.1:8001/v1", **common)
    assert plan_keys(grown) == OLD_KEY
    # and a probe moved to another port keeps its cache the same way
    moved = ProbeConfig(name="p1", base_url="http://127.0.0.1:9001/v1", fleet_id="http://127.0.0.1:8001/v1", **common)
    assert plan_keys(moved) == OLD_KEY


def test_one_sample_per_request_keys_hold_too(tmp_path):
    with LoopbackOpenAI(models=("Qwen/Qwen3-8B",), refuse_n=True) as srv:
        store = Store(tmp_path / "s.db")
        p = ProbeConfig(name="p1", base_url=srv.base_url, model="Qwen/Qwen3-8B", trials=2, supports_n=False,
                        fleet_id="http://127.0.0.1:8001/v1")

        async def go():
            async with RolloutClient(store, ProbePanel([p], NO_WAIT), SPEC, YesGrader(),
                                     prompt_fn=lambda it, s: "Solve: " + it["problem"]) as rc:
                return await rc.rollouts([{"id": "q1", "problem": "1+1?"}], seed=7)
        asyncio.run(go())
        keys = {c.key for c in store.all(ModelCall)}
        assert sample_seed(7, 0) != 7 and OLD_SINGLE_KEY in keys and len(keys) == 2


# -- spread ------------------------------------------------------------------------------------------
def test_requests_spread_by_least_outstanding_within_each_replica_bound(tmp_path):
    with LoopbackOpenAI(models=("m1", "m2"), latency_s=0.05) as a, \
            LoopbackOpenAI(models=("m1", "m2"), latency_s=0.05) as b:
        pan = ProbePanel([ProbeConfig(name=f"p-{m}", model=m, trials=2, concurrency=2, timeout_s=5,
                                      replicas=[a.base_url, {"base_url": b.base_url, "concurrency": 6}])
                          for m in ("m1", "m2")], NO_WAIT, FAST)
        res, stats = run(Store(tmp_path / "s.db"), pan, items=ITEMS * 1 + [{**i, "id": i["id"] + "b", "problem": i["problem"] + "!"}
                                                                            for i in ITEMS])
        assert stats.failures == 0 and stats.calls == 48 and len(res) == 48
        assert a.peak_inflight == 2 and b.peak_inflight == 6  # each replica's own bound, used in full
        na, nb = sum(a.attempts.values()), sum(b.attempts.values())
        assert na + nb == 48 and 6 <= na <= 18  # saturated: about 2 : 6, as the bounds are
        assert stats.replicas == {a.base_url: {"requests": na, "calls": na, "failures": 0, "ejections": 0},
                                  b.base_url: {"requests": nb, "calls": nb, "failures": 0, "ejections": 0}}
        rows = store_rows = Store(tmp_path / "s.db").all(ModelCall)
        assert {r.endpoint for r in store_rows} == {a.base_url, b.base_url} and len(rows) == 48


def test_light_traffic_takes_turns(tmp_path):
    with LoopbackOpenAI() as a, LoopbackOpenAI() as b:
        pan = fleet_panel([a.base_url, b.base_url], concurrency=8)

        async def go():
            async with RolloutClient(Store(tmp_path / "s.db"), pan, SPEC, YesGrader(), prompt_fn=prompt) as rc:
                for item in ITEMS[:6]:  # one request at a time: ties go round the replicas
                    await rc.rollouts([item])
        asyncio.run(go())
        assert sum(a.attempts.values()) == 3 and sum(b.attempts.values()) == 3


def test_bound_tracks_slots_and_hands_them_over_in_order():
    async def go():
        bound = EndpointBound(1)
        freed = []
        bound.listen(lambda: freed.append(bound.in_flight))
        assert bound.try_take() and not bound.try_take() and bound.in_flight == 1
        order = []

        async def user(tag):
            async with bound:
                order.append(tag)
                await asyncio.sleep(0.01)
        waiting = [asyncio.ensure_future(user(t)) for t in "abc"]
        await asyncio.sleep(0)
        waiting[1].cancel()  # a waiter that gives up leaves no stale place in the queue
        bound.release()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert order == ["a", "c"] and bound.in_flight == 0 and freed == [0]
        bound.widen(3)
        assert [bound.try_take() for _ in range(4)] == [True, True, True, False]
    asyncio.run(go())


# -- failures ----------------------------------------------------------------------------------------
def test_a_dead_replica_is_ejected_and_its_requests_served_by_the_other(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="benchfill.fleet")
    with LoopbackOpenAI(models=("m1", "m2")) as alone:
        single, _ = run(Store(tmp_path / "one.db"), ProbePanel(
            [ProbeConfig(name=f"p-{m}", base_url=alone.base_url, model=m, trials=2) for m in ("m1", "m2")], NO_WAIT))
    with LoopbackOpenAI(models=("m1", "m2")) as good:
        gone = dead_url()  # after the server binds: a port freed before could be given to it
        res, stats = run(Store(tmp_path / "s.db"), fleet_panel([gone, good.base_url], ("m1", "m2")))
    assert stats.failures == 0 and outcome(res) == outcome(single)  # the same graded results
    dead = stats.replicas[gone]
    assert dead["calls"] == 0 and 3 <= dead["failures"] <= 3 + 3
    # Taken out once by its failed requests; a run still going when the 0.2 s cool-down ends (a loaded
    # machine: CI took 22 min) sees its health check fail and keep it out: said again, but the same
    # outage (one ejection) and no failed request.
    why = [r.getMessage().split(": ", 1)[1] for r in caplog.records if gone in r.getMessage()
           and "out of service" in r.getMessage()]
    assert dead["ejections"] == 1 and len(why) >= 1 and why[0].startswith("3 failed attempts in a row")
    assert all(w.startswith("health check failed") for w in why[1:]), why
    assert stats.replicas[good.base_url]["calls"] == 24 and stats.retries == dead["failures"]


def test_a_fleet_that_is_all_down_says_so_in_one_line_and_stops(tmp_path):
    urls = [dead_url(), dead_url()]
    t0 = time.monotonic()
    with pytest.raises(EndpointError) as err:
        run(Store(tmp_path / "s.db"), fleet_panel(urls, retry=RetryConfig(max_attempts=3, initial_wait_s=0,
                                                                           max_wait_s=0, jitter_s=0)))
    msg = str(err.value)
    assert "\n" not in msg and "probe p-m1: all 2 replicas are out of service" in msg
    assert all(u in msg for u in urls) and "health check failed" in msg
    # each attempt waited for a cool-down and its health check (three attempts: 0.2 + 0.4 + 0.8 s at
    # least), neither failing on the spot nor hanging
    assert 1.4 <= time.monotonic() - t0 < 15


def test_a_replica_that_comes_back_is_taken_back_after_its_health_check(tmp_path):
    from benchfill.sim import SimServer, World

    items = [{"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", n_probes=2, seed=3)
    late = dead_url()
    port = int(late.rsplit(":", 1)[1].split("/")[0])
    with SimServer(world) as up:
        pan = ProbePanel([ProbeConfig(name=m, model=m, replicas=[up.base_url, late], trials=2, timeout_s=5)
                          for m in world.probes], NO_WAIT, FAST)

        async def go():
            async with RolloutClient(Store(tmp_path / "s.db"), pan, SPEC, YesGrader(), prompt_fn=prompt) as rc:
                await rc.rollouts(items[:4], seed=1)
                assert rc.stats.replicas[late]["ejections"] >= 1
                with SimServer(world, port=port) as back:  # the replica's server starts, on its port
                    await asyncio.sleep(FAST.max_cooldown_s + 0.1)
                    await rc.rollouts(items[4:], seed=1)
                    served = sum(c["successes"] for c in back.stats["models"].values())
                return rc.stats, served
        stats, served = asyncio.run(go())
    assert stats.failures == 0 and served > 0 and stats.replicas[late]["calls"] == served


# -- probes check --------------------------------------------------------------------------------------
def test_probes_check_reports_every_replica(tmp_path, capsys):
    from benchfill.cli import main

    with LoopbackOpenAI(models=("m1",)) as a, LoopbackOpenAI(models=("m1",)) as b:
        gone = dead_url()  # after the servers bind: a port freed before could be given to one of them
        cfg = tmp_path / "cfg.toml"
        cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["{a.base_url}", "{b.base_url}"]\n')
        assert main(["probes", "check", "--config", str(cfg)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out == [f"ok    p1 [1/2]  {a.base_url}  m1  ok", f"ok    p1 [2/2]  {b.base_url}  m1  ok"]
        cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["{a.base_url}", "{gone}"]\n')
        assert main(["probes", "check", "--config", str(cfg)]) != 0
        cap = capsys.readouterr()
        assert cap.out.splitlines()[0] == f"ok    p1 [1/2]  {a.base_url}  m1  ok"
        assert cap.out.splitlines()[1].startswith(f"FAIL  p1 [2/2]  {gone}  m1  unreachable: ")
        assert cap.err.strip().startswith("benchfill: error: 1 of 2 endpoints not ready (1 of them replicas "
                                          "whose fleet is still served); first: p1 [2/2]")


def test_probes_serve_refuses_a_fleet_in_one_line(tmp_path):
    from benchfill import placement

    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["http://127.0.0.1:8001/v1"]\n')
    with pytest.raises(ConfigError, match=r"^probes.p1.replicas: probes serve plans one server per model"):
        placement.servers(load_config(cfg))


def test_the_fleet_docs_example_and_readme_snippet_load(tmp_path):
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for doc in ("docs/fleets.md", "README.md"):
        blocks = [b for b in re.findall(r"```toml\n(.*?)```", (root / doc).read_text(), re.S) if "replicas" in b]
        assert blocks, doc
        (tmp_path / "cfg.toml").write_text(blocks[0])
        cfg = load_config(tmp_path / "cfg.toml")
        fleet = next(p for p in cfg.probes if p.is_fleet)
        assert fleet.endpoints == [("http://10.0.0.11:8000/v1", 32), ("http://10.0.0.12:8000/v1", 64)]
        assert fleet.key_endpoint == "fleet:qwen3-8b"
        assert cfg.fleets == FleetPolicy()  # the defaults the page lists are the defaults


def test_slots_freed_on_replicas_out_of_service_do_not_cut_the_wait_short():
    """All replicas out, requests still finishing on them: their freed slots are no news to an attempt
    waiting for the cool-down and the health check; it fails with FleetDown only after those."""
    import openai

    from benchfill.fleet import Fleet, FleetDown, Replica
    from benchfill.limits import endpoint_bound

    policy = FleetPolicy(eject_after=1, cooldown_s=0.3, max_cooldown_s=0.3, health_timeout_s=1.0)

    async def go():
        counts: dict = {}
        replicas = []
        for url in (dead_url(), dead_url()):
            client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=1)
            replicas.append(Replica(url, client, endpoint_bound(url, 4), policy, lambda: counts))
        fleet = Fleet("p", replicas)
        held = [r for r in replicas for _ in range(3) if r.bound.try_take()]
        for r in replicas:
            r.eject("taken out by the test")
        t0 = time.monotonic()
        attempt = asyncio.ensure_future(fleet.acquire())
        for r in held:  # the requests in flight on them end, one by one
            await asyncio.sleep(0.01)
            r.bound.release()
        with pytest.raises(FleetDown, match="all 2 replicas are out of service"):
            await attempt
        waited = time.monotonic() - t0
        for r in replicas:
            r.close()
            await r.client.close()
        return waited
    assert asyncio.run(go()) >= 0.3


def test_back_pressure_and_bad_requests_never_take_a_replica_out(tmp_path):
    # every request meets two 429s wherever it goes, then succeeds: busy, not sick
    with LoopbackOpenAI(faults=[429, 429]) as a, LoopbackOpenAI(faults=[429, 429]) as b:
        res, stats = run(Store(tmp_path / "s.db"), fleet_panel([a.base_url, b.base_url],
                                                               policy=FAST.model_copy(update={"eject_after": 2})))
    assert stats.failures == 0 and stats.retries > 12 and len(res) == 12
    assert all(c["ejections"] == 0 and c["failures"] == 0 for c in stats.replicas.values())
    with LoopbackOpenAI(models=("other",)) as a, LoopbackOpenAI(models=("other",)) as b:  # 404: our mistake
        res, stats = run(Store(tmp_path / "t.db"), fleet_panel([a.base_url, b.base_url],
                                                               policy=FAST.model_copy(update={"eject_after": 1})),
                         strict=False)
    assert all(r.error and "HTTP 404" in r.error for r in res)
    assert all(c["ejections"] == 0 for c in stats.replicas.values())


def test_a_replica_failing_half_its_attempts_is_taken_out_by_its_error_rate():
    from benchfill.fleet import Replica

    policy = FleetPolicy(eject_after=10, error_rate=0.5, window=4, cooldown_s=5)

    async def go():
        counts: dict = {}
        r = Replica("http://x/v1", None, EndpointBound(1), policy, lambda: counts)
        r.ejectable = True
        seen = []
        for ok in (False, True, True, False, True):  # never two failures in a row
            r.outcome(ok, "HTTP 500")
            seen.append(r.in_service)
        r.close()
        return r, counts, seen
    r, counts, seen = asyncio.run(go())
    # 1 of 3 is not yet a rate (the window is not full); 2 of 4 is; then it stays out until checked
    assert seen == [True, True, True, False, False]
    assert r.reason == "2 of its last 4 attempts failed, last: HTTP 500"
    assert counts["http://x/v1"] == {"requests": 0, "calls": 3, "failures": 2, "ejections": 1}


def test_a_failed_health_check_lengthens_the_outage_and_is_not_another_ejection():
    from benchfill.fleet import Replica

    policy = FleetPolicy(eject_after=1, cooldown_s=5, max_cooldown_s=60)

    async def go():
        counts: dict = {}
        now = [0.0]
        r = Replica("http://x/v1", None, EndpointBound(1), policy, lambda: counts, clock=lambda: now[0])
        r.ejectable = True
        r.outcome(False, "refused")  # out for 5 s
        until = r.out_until
        now[0] = 5.0
        r.eject("health check failed: ConnectError")  # what a failed check does: out again, for 10 s
        longer = r.out_until - now[0]
        r.close()
        return counts["http://x/v1"], until, longer
    c, until, longer = asyncio.run(go())
    assert until == 5.0 and longer == 10.0  # the cool-down doubled: the same outage, told again
    assert c["ejections"] == 1 and c["failures"] == 1


def test_a_run_starts_while_each_fleet_keeps_a_replica_up(tmp_path):
    from benchfill.engine.backend import require_endpoints

    with LoopbackOpenAI(models=("m1",)) as up:
        cfg = tmp_path / "cfg.toml"
        cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["{dead_url()}", "{up.base_url}"]\n')
        require_endpoints(load_config(cfg), cfg)  # one replica down: the fleet still serves p1
        down = [dead_url(), dead_url()]
        cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["{down[0]}", "{down[1]}"]\n')
        with pytest.raises(EndpointError, match=rf"^{cfg}: p1 at {down[0]}: unreachable: .*\(and 1 more\)"):
            require_endpoints(load_config(cfg), cfg)


def test_a_call_never_goes_back_to_a_replica_it_failed_on_while_another_is_up(tmp_path):
    """A dead replica (never ejected here) has a free slot whenever asked; a healthy one answers 429 twice
    per request. A 429 must not make the call forget the dead replica: with four attempts every request is
    served (dead, 429, 429, served), where going back to the dead one ran the attempts out."""
    with LoopbackOpenAI(faults=[429, 429]) as busy:
        gone = dead_url()  # after the server binds: a port freed before could be given to it
        res, stats = run(Store(tmp_path / "s.db"), fleet_panel(
            [gone, busy.base_url], policy=FAST.model_copy(update={"eject_after": 1000, "error_rate": 1.0}),
            retry=NO_WAIT.model_copy(update={"max_attempts": 4})), strict=False)
    assert stats.failures == 0 and not any(r.error for r in res) and len(res) == 12
    assert stats.replicas[gone]["failures"] <= 12  # at most one failed attempt per request on it


def test_a_fleet_in_an_error_is_named_with_every_replica():
    from benchfill.probes import _where

    p = ProbeConfig(name="p4", replicas=["http://127.0.0.1:18431/v1", "http://127.0.0.1:18432/v1"], model="m")
    assert _where(p) == "fleet:p4 (2 replicas: http://127.0.0.1:18431/v1, http://127.0.0.1:18432/v1)"


def test_an_ejection_never_shows_a_key_the_replicas_error_echoed(monkeypatch, caplog):
    """The warning and FleetDown's line repeat what the replica said (an attempt's error, a health check's):
    the configured key's value and anything shaped like a credential are scrubbed from it."""
    import logging

    from benchfill.fleet import Fleet, Replica

    key = "fk-fl33t-s3cret"
    monkeypatch.setenv("BENCHFILL_TEST_FLEET_KEY", key)
    policy = FleetPolicy(eject_after=1, cooldown_s=5)

    async def go():
        counts: dict = {}
        a, b = (Replica(f"http://{h}/v1", None, EndpointBound(1), policy, lambda: counts,
                        key_envs=("BENCHFILL_TEST_FLEET_KEY",)) for h in ("a", "b"))
        fleet = Fleet("p", [a, b])
        a.outcome(False, f"HTTP 500: request headers were {{'authorization': 'Bearer {key}'}}; key {key}")
        b.outcome(False, "HTTP 500: request headers were {'x-api-key': 'other-s3cret'}")
        down = fleet.down_message()
        a.close()
        b.close()
        return down

    with caplog.at_level(logging.WARNING, logger="benchfill.fleet"):
        down = asyncio.run(go())
    assert caplog.text.count("out of service for 5.0 s: 1 failed attempts in a row") == 2
    assert "'authorization': 'Bearer ***'}; key ***" in caplog.text and "'x-api-key': '***'" in caplog.text
    for said in (caplog.text, down):
        assert "s3cret" not in said, said


class Refusing(LoopbackOpenAI):
    """A replica that answers every request with one status: a wrong key (401), a proxy's 403."""

    def __init__(self, status: int, **kw):
        self.status = status
        super().__init__(**kw)

    async def _models(self, request):
        from starlette.responses import JSONResponse

        return JSONResponse({"error": {"message": f"refused ({self.status})"}}, status_code=self.status)

    async def _chat(self, request):
        from starlette.responses import JSONResponse

        self.attempts["any"] += 1
        return JSONResponse({"error": {"message": f"refused ({self.status})"}}, status_code=self.status)


@pytest.mark.parametrize("refusal", [401, 403, 404])
def test_a_replica_that_refuses_the_key_or_lacks_the_model_is_taken_out_and_its_calls_served_elsewhere(
        tmp_path, refusal):
    """401/403 (its key is not ours) or 404 (it serves another model) on one replica, while another serves
    the same request: that replica's fault, and it stays so. The call goes to the other replica and the
    refusing one is taken out (its health check, /v1/models, keeps it out)."""
    more = [{**i, "id": i["id"] + "b", "problem": i["problem"] + "!"} for i in ITEMS]
    bad = Refusing(refusal) if refusal != 404 else LoopbackOpenAI(models=("m1-other",))  # serves another model
    with LoopbackOpenAI() as good, bad:
        async def go():
            async with RolloutClient(Store(tmp_path / "s.db"), fleet_panel([good.base_url, bad.base_url]), SPEC,
                                     YesGrader(), prompt_fn=prompt) as rc:
                first = await rc.rollouts(ITEMS, strict=False)
                refused = sum(bad.attempts.values())
                await asyncio.sleep(FAST.cooldown_s + 0.1)  # its health check is due: it keeps it out
                return first + await rc.rollouts(more, strict=False), refused, rc.stats
        res, refused, stats = asyncio.run(go())
    assert stats.failures == 0 and not any(r.error for r in res) and len(res) == 24
    assert stats.replicas[good.base_url]["calls"] == 24
    out = stats.replicas[bad.base_url]
    # refused by the calls sent there before the first of them was served elsewhere, and none after
    assert out["calls"] == 0 and out["ejections"] >= 1 and 1 <= refused == out["failures"] == stats.retries
    assert sum(bad.attempts.values()) == refused


def test_a_replica_that_answers_but_refuses_the_key_or_lacks_the_model_is_no_spare(tmp_path):
    """Before a run, a fleet may count on a replica that does not answer (the fleet ejects it and checks it
    again); one that answers but refuses the key, or serves another model, is a configuration to fix."""
    from benchfill.engine.backend import require_endpoints
    from benchfill.serving import check_endpoints

    class Sick(Refusing):
        async def _models(self, request):
            from starlette.responses import JSONResponse

            return JSONResponse({"error": {"message": "engine dead"}}, status_code=503)

    cfg = tmp_path / "cfg.toml"
    with LoopbackOpenAI() as up, Refusing(401) as locked, LoopbackOpenAI(models=("m1-other",)) as other, \
            Sick(503) as sick:
        for bad, detail in [(locked, "/v1/models answered HTTP 401 (the key was refused: none was sent; set the "
                                     "probe's api_key_env)"),
                            (other, "does not serve 'm1' (serves: m1-other)")]:
            cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["{up.base_url}", "{bad.base_url}"]\n')
            checks = check_endpoints(load_config(cfg))
            assert [(c.ok, c.reachable, c.spare) for c in checks] == [(True, True, False), (False, True, False)]
            assert checks[1].detail == detail
            with pytest.raises(EndpointError, match=rf"^{cfg}: p1 at {bad.base_url}: {re.escape(detail)}; "):
                require_endpoints(load_config(cfg), cfg)
        # a 5xx is a sick server, as a dead one is: the fleet ejects it, the run may start
        cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "m1"\nreplicas = ["{up.base_url}", "{sick.base_url}"]\n')
        assert [c.spare for c in check_endpoints(load_config(cfg))] == [False, True]
        require_endpoints(load_config(cfg), cfg)
