"""Issue 3 acceptance, end to end through the real openai SDK against the simulated world on loopback.

12 simulated probes x 30 aime24 items x 32 rollouts, graded by the real ``math`` evaluator and fitted
by ``benchfill.irt.fit``: the fit recovers the world's latent difficulties; 20% injected faults change
nothing in the graded result and never repeat a succeeded call; a rerun is served from the cache; and
the credential named by the config never reaches the store, the logs or an output file.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from benchfill.benchmarks import get_benchmark
from benchfill.config import ProbeConfig, RetryConfig
from benchfill.probes import ProbePanel, TrafficStats, collect_responses
from benchfill.sim import SimServer, World
from benchfill.store import Store

KEY_ENV = "BENCHFILL_TEST_PROBE_KEY"
FAKE_KEY = "fake-key-7c1e9b5a-RECOGNISABLE"
TRIALS, SEED = 32, 5


@pytest.fixture(scope="module")
def aime24(shared_data):
    return get_benchmark("aime24", data_dir=shared_data)


def make_world(bench, **knobs) -> World:
    return World.from_items(bench.items, evaluator="math", text_field="problem", answer_field="answer",
                            n_probes=12, seed=11, **knobs)


def make_panel(world: World, url: str, key_env: str | None = None, timeout_s: float = 5.0) -> ProbePanel:
    # 5 s per attempt so that a "timeout" fault (held until the client gives up) costs one short wait,
    # not the default's, while a genuine reply slowed by a loaded machine still arrives in time: at 0.5 s
    # one did not, once, and at 2 s, on a machine running the suite beside two searches, 24 did (retries
    # the server never counted as faults).
    probes = [ProbeConfig(name=m, base_url=url, model=m, trials=TRIALS, concurrency=24, timeout_s=timeout_s,
                          api_key_env=key_env) for m in world.probes]
    return ProbePanel(probes, RetryConfig(max_attempts=15, initial_wait_s=0, max_wait_s=0, jitter_s=0))


def collect(store, panel, bench, seed=SEED):
    stats = TrafficStats()
    m = collect_responses(store, panel, bench.items, bench.spec, seed=seed, stats=stats)
    return m, stats


@pytest.mark.slow
def test_rollouts_recover_latent_difficulties_and_survive_faults(tmp_path, aime24):
    from benchfill.irt import fit

    # Probes whose answers are independent draws about the curve (pair_sd 0): what is checked is that the traffic
    # hands the fit what the world meant. With the default offsets (3.5 logits, as real models agree with
    # themselves) twelve probes place thirty items far less well: the 2PL's correlation is 0.63 at this seed.
    world = make_world(aime24, pair_sd=0.0)
    with SimServer(world) as srv:
        # No faults here: an ordinary timeout, so a slow reply on a loaded machine is not counted as a retry.
        clean, stats = collect(Store(tmp_path / "clean.db"), make_panel(world, srv.base_url, timeout_s=30), aime24)
    assert stats.requests == stats.calls == 12 * 30 and stats.retries == 0
    assert clean.trials.shape == (12, 30) and (clean.trials == TRIALS).all()
    truth = np.array([world.true_difficulty(i["problem"]) for i in aime24.items])
    # The world's items differ in discrimination (sd 0.5 of log a): the 2PL is its own model and recovers the
    # latent difficulties (0.984 at this commit); the 1PL, which the search uses, still carries most of them
    # (0.946; 0.995 in a world of a = 1).
    r = np.corrcoef(fit(clean, seed=0, model="2pl").difficulty, truth)[0, 1]
    assert r >= 0.95, f"2PL: correlation with the latent difficulties {r:.3f}"
    r = np.corrcoef(fit(clean, seed=0).difficulty, truth)[0, 1]
    assert r >= 0.9, f"1PL: correlation with the latent difficulties {r:.3f}"

    faulty = make_world(aime24, fault_rate=0.2, pair_sd=0.0)
    with SimServer(faulty) as srv:
        noisy, nstats = collect(Store(tmp_path / "faulty.db"), make_panel(faulty, srv.base_url), aime24)
        server = srv.stats["models"]
    assert nstats.retries > 30 and nstats.failures == 0
    np.testing.assert_array_equal(noisy.correct, clean.correct)
    np.testing.assert_array_equal(noisy.trials, clean.trials)
    # one success per (model, prompt): each probe saw 30 distinct prompts and succeeded exactly 30 times
    assert {m: c["successes"] for m, c in server.items()} == {m: 30 for m in faulty.probes}
    assert sum(c.get("faults", 0) for c in server.values()) == nstats.retries
    kinds = {k for c in server.values() for k in c if k.startswith("fault_")}
    assert kinds == {"fault_429", "fault_500", "fault_timeout", "fault_malformed"}


def test_rerun_is_served_from_the_cache_and_a_new_seed_is_not(tmp_path, aime24):
    items = aime24.items[:6]
    bench = type(aime24)(aime24.spec, aime24.items_path, _items=items)
    world = make_world(aime24)
    with SimServer(world) as srv:
        store = Store(tmp_path / "s.db")
        panel = make_panel(world, srv.base_url)
        first, s1 = collect(store, panel, bench)
        before = sum(c["requests"] for c in srv.stats["models"].values())
        again, s2 = collect(store, panel, bench)
        after = sum(c["requests"] for c in srv.stats["models"].values())
        other, s3 = collect(store, panel, bench, seed=SEED + 1)
    assert s1.requests == 72 and s2.requests == 0 and s2.cache_hits == 72 and after == before
    np.testing.assert_array_equal(first.correct, again.correct)
    assert s3.requests == 72 and s3.cache_hits == 0
    assert not np.array_equal(first.correct, other.correct)


def test_credentials_never_reach_store_logs_or_outputs(tmp_path, aime24, monkeypatch, caplog, capsys):
    from benchfill.cli import main

    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    caplog.set_level(logging.DEBUG)
    items = aime24.items[:4]
    bench = type(aime24)(aime24.spec, aime24.items_path, _items=items)
    world = make_world(aime24, api_key=FAKE_KEY, fault_rate=0.2)
    with SimServer(world) as srv:
        store = Store(tmp_path / "s.db")
        m, stats = collect(store, make_panel(world, srv.base_url, KEY_ENV), bench)
        assert stats.calls == 48 and (m.trials == TRIALS).all()  # the key was sent: the server demands it
        cfg = tmp_path / "cfg.toml"
        cfg.write_text("".join(f'[[probes]]\nname = "{p}"\nbase_url = "{srv.base_url}"\nmodel = "{p}"\n'
                               f'api_key_env = "{KEY_ENV}"\n' for p in world.probes[:2]))
        assert main(["probes", "check", "--config", str(cfg)]) == 0
    serve_cfg = tmp_path / "serve.toml"  # as on a GPU host: one port per served model
    serve_cfg.write_text(cfg.read_text().replace(srv.base_url, "http://127.0.0.1:8101/v1", 1)
                         .replace(srv.base_url, "http://127.0.0.1:8102/v1").replace("[[probes]]", "[[probes]]\ngpu_memory_gb = 8"))
    script = tmp_path / "serve.sh"
    assert main(["probes", "serve", "--config", str(serve_cfg), "--gpus", "1x80", "--write", str(script)]) == 0
    # The key reaches vLLM through its environment, named, never as a value or an argument (issue 17).
    text = script.read_text()
    assert f'VLLM_API_KEY="${KEY_ENV}"' in text and "--api-key" not in text
    store.close()
    out = capsys.readouterr()
    blobs = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert "s.db" in blobs and "serve.sh" in blobs
    assert any(r.name.startswith(("openai", "httpx", "httpcore")) for r in caplog.records)  # logs were captured
    for name, data in [*blobs.items(), ("logs", caplog.text.encode()), ("stdout", out.out.encode()),
                       ("stderr", out.err.encode())]:
        assert FAKE_KEY.encode() not in data, f"credential leaked into {name}"
