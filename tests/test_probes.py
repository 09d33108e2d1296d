"""Probe rollouts: n samples per request, cache, retries, n>1 fallback, grading, stats."""

from __future__ import annotations

import asyncio

import pytest
from loopback_openai import LoopbackOpenAI, reply

from benchfill.benchmarks import BenchmarkSpec
from benchfill.cache import request_key
from benchfill.config import ProbeConfig, RetryConfig
from benchfill.errors import EndpointError
from benchfill.probes import ProbePanel, RolloutClient, collect_responses, sample_seed
from benchfill.schema import ModelCall, ProbeResult
from benchfill.store import Store

SPEC = BenchmarkSpec(name="toy", evaluator="toy")
ITEMS = [{"id": f"q{i}", "problem": f"question {i}", "answer": "yes"} for i in range(5)]
NO_WAIT = RetryConfig(max_attempts=5, initial_wait_s=0, max_wait_s=0, jitter_s=0)


class YesGrader:
    def __init__(self):
        self.calls = 0

    def grade(self, response, item, spec=None):
        self.calls += 1
        return "yes" in response


def prompt(item, spec):
    return f"<problem>{item['problem']}</problem>"


def panel(url, names=("m1",), **kw):
    return ProbePanel([ProbeConfig(name=f"p-{m}", base_url=url, model=m, trials=4, concurrency=3, **kw)
                       for m in names], NO_WAIT)


def expected_correct(model, item, n, seed):
    return sum("yes" in reply(model, prompt(item, SPEC), seed, i) for i in range(n))


def run(store, pan, items=ITEMS, seed=0, grader=None, **kw):
    async def go():
        async with RolloutClient(store, pan, SPEC, grader or YesGrader(), prompt_fn=prompt) as rc:
            return await rc.rollouts(items, seed=seed, **kw), rc.stats
    return asyncio.run(go())


def test_one_request_per_item_and_probe_graded_and_cached(tmp_path):
    with LoopbackOpenAI(models=("m1", "m2")) as srv:
        store = Store(tmp_path / "s.db")
        pan = panel(srv.base_url, ("m1", "m2"))
        res, stats = run(store, pan, seed=7)
        assert stats.requests == 10 and stats.calls == 10 and stats.cache_hits == 0
        assert all(b["n"] == 4 and b["seed"] == 7 for b in srv.bodies)
        for r in res:
            item = next(i for i in ITEMS if i["id"] == r.item_id)
            assert r.trials == 4
            assert r.correct == expected_correct(r.probe[2:], item, 4, 7)
        assert stats.completion_tokens == 10 * 12 and stats.prompt_tokens > 0 and stats.latency_s > 0
        # a rerun grades the cached replies again and calls nothing
        grader = YesGrader()
        res2, stats2 = run(store, pan, seed=7, grader=grader)
        assert stats2.requests == 0 and stats2.cache_hits == 10 and grader.calls > 0
        assert [(r.correct, r.trials) for r in res2] == [(r.correct, r.trials) for r in res]
        assert len(srv.bodies) == 10
        # another seed is another request
        _, stats3 = run(store, pan, seed=8)
        assert stats3.requests == 10
        rows = store.all(ProbeResult)
        assert len(rows) == 20  # the rerun with seed 7 did not add duplicate rows
        calls = store.all(ModelCall)
        assert len(calls) == 20 and all(c.kind == "probe" and c.completion_tokens == 12 for c in calls)


def test_retries_transient_failures_and_never_repeats_a_success(tmp_path):
    with LoopbackOpenAI(faults=[429, 500, 503]) as srv:
        res, stats = run(Store(tmp_path / "s.db"), panel(srv.base_url))
        assert stats.retries == 15 and stats.requests == 20 and stats.failures == 0
        assert all(v == 1 for v in srv.successes.values()) and len(srv.successes) == 5
        assert all(r.trials == 4 for r in res)


def test_an_answer_stopped_at_max_tokens_is_graded_wrong_and_warned_of(tmp_path, caplog):
    # a reasoning model's draft cut at max_tokens ("the answer is 204? Wait, ...") was graded as its answer
    import logging

    store = Store(tmp_path / "s.db")
    with LoopbackOpenAI(faults=["cut"]) as srv, caplog.at_level(logging.WARNING, "benchfill.probes"):
        res, stats = run(store, panel(srv.base_url))  # each item's first request is answered cut
        # every answer reads "yes? wait, ...", which the grader takes as right were it not cut
        assert all(r.trials == 4 and r.correct == 0 for r in res)
        assert stats.cut == 20 and stats.calls == 5
        said = [r.getMessage() for r in caplog.records if "max_tokens" in r.getMessage()]
        assert len(said) == 1 and "16 of its 16 answers so far stopped at max_tokens" in said[0], said
        again, stats2 = run(store, panel(srv.base_url))  # from the cache: graded the same
    assert stats2.cache_hits == 5 and [r.correct for r in again] == [r.correct for r in res]


def test_a_prompt_the_probe_refuses_as_too_long_is_the_items_fault(tmp_path):
    # vLLM's 400 for a prompt past its context stopped a run like any failed call, and every rerun met it again
    from benchfill.errors import PromptRefused

    with LoopbackOpenAI(faults=["too_long"]) as srv:
        with pytest.raises(PromptRefused, match="q0's prompt is longer than the probe takes.*maximum context length"):
            run(Store(tmp_path / "s.db"), panel(srv.base_url), items=ITEMS[:1])
    once = RetryConfig(max_attempts=1, initial_wait_s=0, max_wait_s=0, jitter_s=0)
    # a 400 that says nothing of length, or says max_tokens alone fills the context, is not the item's fault
    for k, fault in enumerate([400, "max_tokens_too_long"]):
        with LoopbackOpenAI(faults=[fault]) as srv:
            with pytest.raises(EndpointError) as caught:
                run(Store(tmp_path / f"t{k}.db"), ProbePanel([ProbeConfig(name="p-m1", base_url=srv.base_url,
                                                                          model="m1", trials=4)], once), items=ITEMS[:1])
        assert not isinstance(caught.value, PromptRefused), fault


def test_timeout_is_retried(tmp_path):
    with LoopbackOpenAI(faults=["timeout"]) as srv:
        res, stats = run(Store(tmp_path / "s.db"), panel(srv.base_url, timeout_s=0.6), items=ITEMS[:2])
        assert stats.retries == 2 and all(r.trials == 4 for r in res)


def test_a_reply_dripped_past_timeout_s_is_cut_off_and_retried(tmp_path):
    # timeout_s reached the SDK as a per-read timeout: a server sending a byte at a time held the call (and
    # the run) for as long as it dripped; each attempt now ends at timeout_s
    with LoopbackOpenAI(faults=["drip"]) as srv:
        res, stats = run(Store(tmp_path / "s.db"), panel(srv.base_url, timeout_s=0.6), items=ITEMS[:2])
        # the dripped replies are whole and valid: only a cut-off makes the second request of each
        assert stats.retries == 2 and stats.requests == 4 and all(r.trials == 4 for r in res)


def test_a_probe_whose_answers_come_back_empty_is_warned_of_once(tmp_path, caplog):
    # content null on every reply: all graded wrong, the difficulties moved, and not a word said
    import logging

    with LoopbackOpenAI(faults=["null_content"]) as srv, caplog.at_level(logging.WARNING, "benchfill.probes"):
        res, stats = run(Store(tmp_path / "s.db"), panel(srv.base_url))
    assert all(r.trials == 4 and r.correct == 0 for r in res)  # graded wrong, as documented
    said = [r.getMessage() for r in caplog.records if "came back empty" in r.getMessage()]
    assert len(said) == 1 and "16 of its 16 answers" in said[0], said


def test_other_4xx_is_not_retried_and_fails_with_a_clear_error(tmp_path):
    with LoopbackOpenAI(faults=[400]) as srv:
        store = Store(tmp_path / "s.db")
        with pytest.raises(EndpointError, match=r"5 of 5 probe calls failed.*HTTP 400"):
            run(store, panel(srv.base_url))
        assert sum(srv.attempts.values()) == 5
        res, stats = run(store, panel(srv.base_url), strict=False)  # second attempt of each succeeds
        assert stats.failures == 0 and all(r.trials == 4 for r in res)


def test_unknown_model_is_reported_per_probe(tmp_path):
    with LoopbackOpenAI(models=("m1",)) as srv:
        res, stats = run(Store(tmp_path / "s.db"), panel(srv.base_url, ("nope",)), strict=False)
        assert stats.failures == 5 and all(r.error and "HTTP 404" in r.error and r.trials == 0 for r in res)


def test_exhausted_retries_fail_the_call_not_the_batch(tmp_path):
    with LoopbackOpenAI(faults=[500] * 10) as srv:
        res, stats = run(Store(tmp_path / "s.db"), panel(srv.base_url), items=ITEMS[:1], strict=False)
        assert stats.requests == NO_WAIT.max_attempts and stats.failures == 1 and res[0].error


def test_endpoint_refusing_n_gets_single_samples_with_distinct_seeds(tmp_path, caplog):
    import logging

    with LoopbackOpenAI(refuse_n=True) as srv, caplog.at_level(logging.WARNING, logger="benchfill.probes"):
        store = Store(tmp_path / "s.db")
        res, stats = run(store, panel(srv.base_url), items=ITEMS[:2], seed=3)
        # said at WARNING, once: an operator's CLI shows no INFO line, and the requests multiply
        said = [r.getMessage() for r in caplog.records if "refuses n>1" in r.getMessage()]
        assert len(said) == 1 and "supports_n = false" in said[0], said
        singles = [b for b in srv.bodies if b.get("n", 1) == 1]
        assert len(singles) == 8
        assert len({b["seed"] for b in singles}) == 4  # four samples, four seeds, same for both items
        assert {b["seed"] for b in singles} == {sample_seed(3, k) for k in range(4)}
        assert all(r.trials == 4 for r in res)
        item = ITEMS[0]
        want = sum("yes" in reply("m1", prompt(item, SPEC), sample_seed(3, k), 0) for k in range(4))
        assert res[0].correct == want
        # the fallback's calls are cached too: a declared single-sample probe reruns for free
        _, stats2 = run(store, panel(srv.base_url, supports_n=False), items=ITEMS[:2], seed=3)
        assert stats2.requests == 0 and stats2.cache_hits == 8


def test_concurrency_is_bounded_per_endpoint(tmp_path):
    with LoopbackOpenAI(latency_s=0.05) as srv:
        items = [{"id": f"c{i}", "problem": f"c {i}", "answer": "yes"} for i in range(12)]
        run(Store(tmp_path / "s.db"), panel(srv.base_url), items=items)
        assert 1 < srv.peak_inflight <= 3


def test_collect_responses_builds_the_matrix(tmp_path):
    with LoopbackOpenAI(models=("m1", "m2")) as srv:
        m = collect_responses(Store(tmp_path / "s.db"), panel(srv.base_url, ("m1", "m2")), ITEMS, SPEC,
                              trials=6, seed=1, evaluator=YesGrader(), prompt_fn=prompt)
        assert m.models == ("p-m1", "p-m2") and m.item_ids == tuple(i["id"] for i in ITEMS)
        assert (m.trials == 6).all()
        assert m.correct[1, 2] == expected_correct("m2", ITEMS[2], 6, 1)


def test_cache_key_ignores_credentials_and_covers_sampling():
    req = {"messages": [{"role": "user", "content": "x"}], "temperature": 0.6, "n": 4, "seed": 0}
    k = request_key("probe", "http://h:1/v1", "m", req)
    assert k == request_key("probe", "http://user:secret@h:1/v1/", "m", dict(reversed(req.items())))
    assert k != request_key("probe", "http://h:1/v1", "m", {**req, "seed": 1})
    assert k != request_key("probe", "http://h:1/v1", "m", {**req, "temperature": 0.7})
    assert k != request_key("probe", "http://h:2/v1", "m", req)
    assert k != request_key("probe", "http://h:1/v1", "m2", req)


# -- benchfill probes check / serve ------------------------------------------------------------------
def _cfg(tmp_path, probes, name="cfg.toml"):
    text = "".join(f'[[probes]]\nname = "{n}"\nbase_url = "{u}"\nmodel = "{m}"\nconcurrency = 2\ntrials = 4\n'
                   for n, u, m in probes)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_probes_check_reports_each_endpoint(tmp_path, capsys):
    from benchfill.cli import main

    with LoopbackOpenAI(models=("m1", "m2")) as srv:
        good = _cfg(tmp_path, [("a", srv.base_url, "m1"), ("b", srv.base_url, "m2")])
        assert main(["probes", "check", "--config", good]) == 0
        out = capsys.readouterr().out.splitlines()
        assert [ln.split()[:2] for ln in out] == [["ok", "a"], ["ok", "b"]]
        bad = _cfg(tmp_path, [("a", srv.base_url, "m1"), ("b", srv.base_url, "m9"),
                              ("c", "http://127.0.0.1:9/v1", "m1")], "bad.toml")
        assert main(["probes", "check", "--config", bad, "--timeout", "2"]) == 3
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert lines[0].startswith("ok") and "does not serve 'm9' (serves: m1, m2)" in lines[1]
    assert lines[2].startswith("FAIL") and "unreachable" in lines[2]
    assert cap.err.startswith("benchfill: error: 2 of 3 endpoints not ready; first: b")


def test_probes_check_names_an_unset_key_variable_and_a_hosted_model_it_does_not_ask(tmp_path, capsys,
                                                                                      monkeypatch):
    """An api_key_env that is not set showed only as the server's HTTP 401, and a rewriter without an
    api_base was left out of the list without a word."""
    from benchfill.cli import main

    monkeypatch.delenv("BF_UNSET_KEY_VAR", raising=False)
    with LoopbackOpenAI(models=("m1",)) as srv:
        path = tmp_path / "cfg.toml"
        path.write_text(f'[[probes]]\nname = "a"\nbase_url = "{srv.base_url}"\nmodel = "m1"\n'
                        f'[[probes]]\nname = "b"\nbase_url = "{srv.base_url}"\nmodel = "m1"\n'
                        'api_key_env = "BF_UNSET_KEY_VAR"\n[rewriter]\nmodel = "openai/gpt-4o"\n')
        # the configuration at fault, not an endpoint: 2, as `run` with the same config exits (it was 3)
        assert main(["probes", "check", "--config", str(path)]) == 2
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["ok", "a"], ["FAIL", "b"], ["skip", "rewriter"]]
    assert "api_key_env: environment variable BF_UNSET_KEY_VAR is not set" in lines[1]
    assert "hosted provider (no api_base): not checked" in lines[2]
    assert cap.err.startswith("benchfill: error: 1 of 3 endpoints not ready; first: b")
    path.write_text(path.read_text().replace(srv.base_url, "http://127.0.0.1:9/v1", 1))  # and one down too
    assert main(["probes", "check", "--config", str(path), "--timeout", "2"]) == 3


def test_retry_classification_and_retry_after():
    import httpx

    from benchfill.retry import is_retryable, retry_after_s

    def err(code, headers=None):
        e = Exception(f"HTTP {code}")
        e.status_code = code
        e.response = httpx.Response(code, headers=headers or {})
        return e

    assert all(is_retryable(err(c)) for c in (408, 429, 500, 502, 503, 504))
    assert not any(is_retryable(err(c)) for c in (400, 401, 403, 404, 422))
    assert is_retryable(httpx.ConnectError("refused")) and is_retryable(httpx.ReadTimeout("slow"))
    assert is_retryable(ConnectionResetError()) and not is_retryable(ValueError("a bug"))
    assert retry_after_s(err(429, {"retry-after": "2"})) == 2.0
    assert retry_after_s(err(429, {"retry-after-ms": "250", "retry-after": "1"})) == 0.25
    assert retry_after_s(err(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0


def test_backoff_waits_for_retry_after_up_to_the_cap():
    from tenacity import RetryCallState

    from benchfill.retry import sync_retrying

    r = sync_retrying(RetryConfig(initial_wait_s=0.01, max_wait_s=5, jitter_s=0))
    state = RetryCallState(r, None, (), {})
    e = Exception("429")
    e.response = type("R", (), {"headers": {"retry-after": "3"}})()
    state.set_exception((Exception, e, None))
    assert r.wait(state) == 3.0
    capped = sync_retrying(RetryConfig(initial_wait_s=0.01, max_wait_s=0.5, jitter_s=0))
    assert capped.wait(state) == 0.5


def test_request_json_with_a_pre_encoded_prompt_is_the_same_string():
    import json

    from benchfill.cache import canonical_request, request_json

    messages = [{"role": "user", "content": 'a "quoted" prompt\nwith é, ✓ and \u2028'}]
    for req in ({"messages": messages, "n": 4, "seed": 7, "temperature": 0.7, "top_p": 1.0, "max_tokens": None},
                {"messages": messages, "n": 1, "seed": 12, "sample_index": 3, "temperature": 1}):
        plain = json.dumps(req, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert request_json(req, {"messages": request_json(messages)}) == request_json(req) == plain
        whole = {"kind": "probe", "endpoint": "http://127.0.0.1:8000/v1", "model": "m", "request": req}
        assert canonical_request("probe", "http://127.0.0.1:8000/v1/", "m", req, plain) == json.dumps(
            whole, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Repeated scalars are encoded once and remembered: 1, 1.0 and True stay apart, nesting stays exact.
    for _ in range(2):
        for value in (1, 1.0, True, None, 0.1 + 0.2, 1e16, "x\u2028é", [1, {"b": 2, "a": 1.0}]):
            req = {"messages": messages, "temperature": value, "n": 1}
            plain = json.dumps(req, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            assert request_json(req, {"messages": request_json(messages)}) == plain


def test_a_request_asked_twice_at_once_is_sent_once_and_serves_both(tmp_path):
    """Two items in the same words (the demo has a pair) make the same request: one call answers
    both, each graded under its own id, and a rerun finds both in the cache."""
    twins = [*ITEMS, {"id": "q0-twin", "problem": ITEMS[0]["problem"], "answer": "yes"}]
    with LoopbackOpenAI(models=("m1",)) as srv:
        store = Store(tmp_path / "s.db")
        res, stats = run(store, panel(srv.base_url), items=twins, seed=3)
        assert stats.calls == len(ITEMS) and len(srv.bodies) == len(ITEMS) and stats.cache_hits == 1
        by_id = {r.item_id: r for r in res}
        assert by_id["q0-twin"].correct == by_id["q0"].correct == expected_correct("m1", ITEMS[0], 4, 3)
        assert by_id["q0-twin"].trials == 4 and not by_id["q0-twin"].error
        assert {r.item_id for r in store.all(ProbeResult)} == {r.item_id for r in res}
        _, again = run(store, panel(srv.base_url), items=twins, seed=3)
        assert again.requests == 0 and again.cache_hits == len(twins)


def test_the_pool_forgets_an_idle_connection_before_the_server_closes_it(tmp_path):
    """uvicorn (vLLM's server, the simulated world's) closes a connection idle for 5 s. The probe
    clients' pool lets one go after 4 s, so a request after a pause of 4.5 s (the loop busy with the run's own work)
    opens a new connection instead of sending on one the server may be closing (bench/bench_keepalive.py:
    with the SDK's 5 s pool such requests fail and are retried). A shorter pause reuses the connection."""
    import time

    async def go(srv, pan):
        async with RolloutClient(Store(tmp_path / "s.db"), pan, SPEC, YesGrader(), prompt_fn=prompt) as rc:
            seen = []
            for i, pause in enumerate((0.5, 4.5)):  # new seeds each time: calls, not cache hits
                await rc.rollouts(ITEMS[:1], seed=2 * i)
                time.sleep(pause)  # blocks the loop, as the run's CPU work does
                await rc.rollouts(ITEMS[:1], seed=2 * i + 1)
                seen.append(srv.client_ports[-2:])
            return seen, rc.stats

    with LoopbackOpenAI(models=("m1",)) as srv:
        (short, long), stats = asyncio.run(go(srv, ProbePanel([ProbeConfig(
            name="p", base_url=srv.base_url, model="m1", trials=4, concurrency=1)], NO_WAIT)))
    assert short[0] == short[1] and long[0] != long[1]
    assert stats.retries == 0 and stats.calls == 4


def test_an_error_body_echoing_the_request_headers_never_shows_the_key(tmp_path, monkeypatch):
    """A careless gateway's 401 repeats the request's headers, the probe's key among them: neither the
    failed rollouts' errors nor the run's error line may show it (probe_http.describe_error scrubs)."""
    key = "pk-pr0be-s3cret"
    monkeypatch.setenv("BENCHFILL_TEST_PROBE_KEY", key)
    with LoopbackOpenAI(faults=[401] * 20, echo_headers=True) as srv:
        pan = panel(srv.base_url, api_key_env="BENCHFILL_TEST_PROBE_KEY")
        res, stats = run(Store(tmp_path / "s.db"), pan, strict=False)
        with pytest.raises(EndpointError, match=r"5 of 5 probe calls failed.*HTTP 401") as err:
            run(Store(tmp_path / "t.db"), pan)
    assert srv.auth_seen[0] == f"Bearer {key}"  # sent, and echoed in the body
    for said in [*(r.error for r in res), str(err.value)]:
        assert "rejected authorization: Bearer ***; request headers were" in said, said
        assert key not in said and "s3cret" not in said, said


def test_describe_error_scrubs_known_keys_and_credential_shapes(monkeypatch):
    from benchfill.probe_http import describe_error

    monkeypatch.setenv("BENCHFILL_TEST_PROBE_KEY", "plainkey42")
    exc = ConnectionError("refused; headers {'Authorization': 'Basic dXNlcjpwdw==', 'api-key': 'abc', "
                          "'x-api-key': 'xyz'}, sent plainkey42 as Bearer tok.en-123456 with sk-abcdefghijklmnop")
    said = describe_error(exc, ["BENCHFILL_TEST_PROBE_KEY", None])
    assert said == ("ConnectionError: refused; headers {'Authorization': 'Basic ***', 'api-key': '***', "
                    "'x-api-key': '***'}, sent *** as Bearer *** with ***")


def test_a_servers_masked_echo_of_a_known_key_is_masked_too(monkeypatch):
    # OpenAI's 401 says "Incorrect API key provided: sk-LEAKT****AAAA": the key's first eight and last four
    from benchfill.redact import scrub

    monkeypatch.setenv("BENCHFILL_TEST_PROBE_KEY", "LEAKTESTpanelDDDDDDDDzz")
    for echo in ("LEAKTEST****DDzz", "LEAKTESTpa...Dzz", "LEAKTEST\u2026DDzz", "LEAKTESTpanel**"):
        said = scrub(f"HTTP 401: Incorrect API key provided: {echo}. You passed", env=["BENCHFILL_TEST_PROBE_KEY"])
        assert said == "HTTP 401: Incorrect API key provided: ***. You passed", said
    # the first eight characters alone, without a mask after them, are not the key's echo: words stay
    assert scrub("LEAKTEST is the test's name", env=["BENCHFILL_TEST_PROBE_KEY"]) == "LEAKTEST is the test's name"


def test_a_probe_is_warned_of_at_three_cut_answers_and_five_percent_not_at_one_of_its_first_sixteen(caplog):
    # one cut answer among a probe's first sixteen is 6%: at a true rate of 1% that had warned of one probe in six
    import logging
    from collections import Counter

    from benchfill.probes import TrafficStats

    rc = RolloutClient.__new__(RolloutClient)  # the counting alone, no endpoint
    rc._answers, rc._empty, rc._cut, rc._warned, rc._warned_cut = Counter(), Counter(), Counter(), set(), set()
    rc.stats = TrafficStats()
    p = ProbeConfig(name="p", base_url="http://127.0.0.1:9/v1", model="m")
    with caplog.at_level(logging.WARNING, "benchfill.probes"):
        rc._count_empty(p, ["x"] * 16, [0])  # 1 of 16
        rc._count_empty(p, ["x"] * 16, [0])  # 2 of 32
        assert not caplog.records
        rc._count_empty(p, ["x"] * 8, [0])  # 3 of 40: 7.5%, and three
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "3 of its 40 answers so far stopped at max_tokens" in said[0]
    assert rc.stats.cut == 3
