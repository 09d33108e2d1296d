"""Rewriter and judge through the real litellm client against the simulated world on loopback."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from benchfill.benchmarks import REGISTRY
from benchfill.config import LLMConfig, RetryConfig
from benchfill.errors import ConfigError, EndpointError
from benchfill.llm import Failure, LLMStats, RewriteResult, Verdict, judge, rewrite
from benchfill.schema import ModelCall
from benchfill.sim import SimServer, World
from benchfill.store import Store

SPEC = REGISTRY["aime24"]
NO_WAIT = RetryConfig(max_attempts=12, initial_wait_s=0, max_wait_s=0, jitter_s=0)


# Prompt formats of docs/contracts.md, written out here so these tests exercise llm.py alone.
def fmt_rewrite(parent, target_z, references, spec):
    refs = "".join(f'<reference difficulty="{10 * z:.1f}">{json.dumps(it)}</reference>\n' for it, z in references)
    return (f"Rewrite the parent.\n<parent>{json.dumps(parent)}</parent>\n"
            f"<target_difficulty>{10 * target_z:.1f}</target_difficulty>\n{refs}")


def parse_child(reply):
    m = re.search(r"<child>(.*?)</child>", reply, re.S)
    if not m:
        raise ValueError("no <child>...</child> block")
    return json.loads(m.group(1))


def fmt_judge(child, spec):
    return f"Is this item valid?\n<item>{json.dumps(child)}</item>"


def parse_verdict(reply):
    v = re.search(r"<verdict>(valid|invalid)</verdict>", reply)
    r = re.search(r"<reason>(.*?)</reason>", reply, re.S)
    if not v:
        raise ValueError("no <verdict>")
    return v.group(1) == "valid", (r.group(1) if r else "")


@pytest.fixture
def items(shared_data):
    from benchfill.benchmarks import get_benchmark

    return get_benchmark("aime24", data_dir=shared_data).items[:8]


def world(items, **knobs):
    # every reply in its plain form: these tests read replies with the bare parsers above, to try llm.py's
    # calls, retries and cache alone (the forms real models write are read in tests/test_sim_habits.py)
    knobs.setdefault("reply_habits", 0.0)
    return World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                            n_probes=2, seed=3, **knobs)


def cfg(srv, model, **kw):
    return LLMConfig(model=f"openai/{model}", api_base=srv.base_url, timeout_s=2, **kw)


def do_rewrite(srv, store, parent, seed, stats, refs=(), **kw):
    return asyncio.run(rewrite(cfg(srv, "sim-rewriter", **kw), parent, 0.8, list(refs), spec=SPEC, store=store,
                               seed=seed, retry=NO_WAIT, stats=stats, format_prompt=fmt_rewrite, parse=parse_child))


def do_judge(srv, store, child, seed, stats, **kw):
    return asyncio.run(judge(cfg(srv, "sim-judge", **kw), child, spec=SPEC, store=store, seed=seed, retry=NO_WAIT,
                             stats=stats, format_prompt=fmt_judge, parse=parse_verdict))


def test_rewrite_returns_a_child_in_the_benchmark_fields_and_caches_it(tmp_path, items):
    w = world(items)
    with SimServer(w) as srv:
        store, stats = Store(tmp_path / "s.db"), LLMStats()
        res = do_rewrite(srv, store, items[0], 1, stats, refs=[(items[1], 0.7), (items[2], 0.9)])
        assert isinstance(res, RewriteResult) and res.repairs == 0 and not res.cached
        assert res.child["problem"] != items[0]["problem"] and res.child["answer"]
        assert w.lookup(res.child["problem"]) is not None  # the world made it: the prompt was read right
        again = do_rewrite(srv, store, items[0], 1, stats, refs=[(items[1], 0.7), (items[2], 0.9)])
        assert again.cached and again.child == res.child
        assert stats.requests == 1 and stats.cache_hits == 1
        other = do_rewrite(srv, store, items[0], 2, stats, refs=[(items[1], 0.7), (items[2], 0.9)])
        assert stats.requests == 2 and other.child["problem"] != res.child["problem"]
        rows = store.all(ModelCall)
        assert {r.kind for r in rows} == {"rewriter"} and all(r.completion_tokens > 0 for r in rows)


def test_judge_verdicts_follow_the_world_when_the_judge_is_perfect(tmp_path, items):
    w = world(items, rewriter_knobs={"judge_recall": 1.0, "judge_fpr": 0.0, "invalid_base": 0.5, "invalid_slope": 0.0})
    with SimServer(w) as srv:
        store, stats = Store(tmp_path / "s.db"), LLMStats()
        seen = set()
        for seed in range(8):
            child = do_rewrite(srv, store, items[seed % 4], seed, stats).child
            v = do_judge(srv, store, child, seed, stats)
            assert isinstance(v, Verdict) and v.reason
            assert v.valid == w.is_valid(child["problem"])
            seen.add(v.valid)
        assert seen == {True, False}


def test_malformed_replies_are_repaired_or_counted_as_failures(tmp_path, items):
    with SimServer(world(items, rewriter_malformed_rate=1.0)) as srv:
        stats = LLMStats()
        res = do_rewrite(srv, Store(tmp_path / "a.db"), items[0], 0, stats, max_repairs=2)
        assert isinstance(res, Failure) and not res and len(res.replies) == 3
        assert stats.requests == 3 and stats.failures == 1 and "<child>" in res.replies[0]
    with SimServer(world(items, rewriter_malformed_rate=0.5)) as srv:
        stats = LLMStats()
        out = [do_rewrite(srv, Store(tmp_path / "b.db"), items[0], s, stats, max_repairs=4) for s in range(10)]
        assert all(isinstance(r, RewriteResult) for r in out)
        assert stats.repairs > 0 and sum(r.repairs for r in out) == stats.repairs


def test_transient_faults_are_retried_and_bad_requests_are_not(tmp_path, items):
    with SimServer(world(items, fault_rate=0.4, fault_mix={"429": 1, "500": 1, "malformed": 1})) as srv:
        stats = LLMStats()
        for s in range(6):
            assert do_judge(srv, Store(tmp_path / "s.db"), items[0], s, stats)
        assert stats.retries > 0 and stats.calls == 6
        assert srv.stats["models"]["sim-judge"]["successes"] == 6
        with pytest.raises(EndpointError, match=r"judge openai/nope at .*HTTP 404"):
            asyncio.run(judge(LLMConfig(model="openai/nope", api_base=srv.base_url), items[0], spec=SPEC,
                              retry=NO_WAIT, format_prompt=fmt_judge, parse=parse_verdict))


def test_key_comes_from_the_named_env_var_and_is_never_stored(tmp_path, items, monkeypatch):
    key = "fake-llm-key-0d9a-RECOGNISABLE"
    with SimServer(world(items, api_key=key)) as srv:
        store = Store(tmp_path / "s.db")
        with pytest.raises(ConfigError, match="BENCHFILL_TEST_LLM_KEY is not set"):
            do_judge(srv, store, items[0], 0, LLMStats(), api_key_env="BENCHFILL_TEST_LLM_KEY")
        monkeypatch.setenv("BENCHFILL_TEST_LLM_KEY", key)
        assert do_judge(srv, store, items[0], 0, LLMStats(), api_key_env="BENCHFILL_TEST_LLM_KEY")
        store.close()
    for f in tmp_path.iterdir():
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f.name


def test_default_prompts_and_parsers_drive_the_sim(tmp_path, items):
    """The shipped templates (benchfill.prompts) through litellm: the world reads them and answers."""
    w = world(items, judge_recall=1.0, judge_fpr=0.0, rewriter_malformed_rate=0.3)
    with SimServer(w) as srv:
        store, stats = Store(tmp_path / "s.db"), LLMStats()
        for seed in range(4):
            res = asyncio.run(rewrite(cfg(srv, "sim-rewriter"), items[seed], 0.2, [(items[5], 0.1), (items[6], 0.3)],
                                      spec=SPEC, store=store, seed=seed, retry=NO_WAIT, stats=stats))
            assert isinstance(res, RewriteResult) and w.lookup(res.child["problem"]) is not None
            v = asyncio.run(judge(cfg(srv, "sim-judge"), res.child, spec=SPEC, store=store, seed=seed,
                                  retry=NO_WAIT, stats=stats))
            assert isinstance(v, Verdict) and v.valid == w.is_valid(res.child["problem"]) and v.reason


def test_an_error_body_echoing_the_key_never_reaches_the_error(monkeypatch):
    """A 401 whose body repeats the request's headers: the EndpointError says HTTP 401 and what the server
    said, with the configured key's value (and any bearer token) scrubbed."""
    from loopback_openai import LoopbackOpenAI

    key = "lk-j0dge-s3cret"
    monkeypatch.setenv("BENCHFILL_TEST_LLM_KEY", key)
    for fault in (401, 500):
        with LoopbackOpenAI(models=("sim-judge",), faults=[fault] * 20, echo_headers=True) as srv:
            cfg = LLMConfig(model="openai/sim-judge", api_base=srv.base_url, api_key_env="BENCHFILL_TEST_LLM_KEY",
                            timeout_s=5)
            with pytest.raises(EndpointError, match=rf"judge openai/sim-judge at .*HTTP {fault}: ") as err:
                asyncio.run(judge(cfg, {"problem": "1+1?", "answer": "2"}, spec=SPEC,
                                  retry=RetryConfig(max_attempts=2, initial_wait_s=0, max_wait_s=0, jitter_s=0),
                                  format_prompt=fmt_judge, parse=parse_verdict))
        assert srv.auth_seen[0] == f"Bearer {key}"
        assert "rejected authorization: Bearer ***" in str(err.value) and "s3cret" not in str(err.value), str(err.value)


def test_a_reply_with_no_choices_is_asked_again_and_never_crashes_the_call(tmp_path):
    """HTTP 200 with "choices": [] (litellm hands it on as it is): retried like a cut-off body; once the
    attempts are spent, an empty reply, so the call ends as a Failure (a repair turn first) and the run goes
    on: never an IndexError, and never a stop that every rerun would meet again (a filtered prompt)."""
    from loopback_openai import LoopbackOpenAI

    def ask(srv, store, stats, retry=NO_WAIT):
        return asyncio.run(judge(cfg(srv, "sim-judge"), {"problem": "1+1?", "answer": "2"}, spec=SPEC, store=store,
                                 retry=retry, stats=stats, format_prompt=fmt_judge,
                                 parse=lambda reply: (True, reply)))  # the loopback server's plain replies

    with LoopbackOpenAI(models=("sim-judge",), faults=["no_choices"] * 2) as srv:
        stats = LLMStats()
        v = ask(srv, Store(tmp_path / "s.db"), stats)
        assert isinstance(v, Verdict) and v.reason.startswith("answer ")
        assert stats.retries == 2 and stats.requests == 3 and stats.calls == 1
    with LoopbackOpenAI(models=("sim-judge",), faults=["no_choices"] * 100) as srv:
        stats = LLMStats()
        three = RetryConfig(max_attempts=3, initial_wait_s=0, max_wait_s=0, jitter_s=0)
        store = Store(tmp_path / "t.db")
        out = asyncio.run(judge(cfg(srv, "sim-judge"), {"problem": "1+1?", "answer": "2"}, spec=SPEC, store=store,
                                retry=three, stats=stats, format_prompt=fmt_judge))  # the real parse: "" is malformed
        turns = cfg(srv, "sim-judge").max_repairs + 1
        assert isinstance(out, Failure) and "malformed" in out.reason and out.replies == [""] * turns
        assert stats.requests == 3 * turns and stats.failures == 1
        sent = stats.requests
        again = asyncio.run(judge(cfg(srv, "sim-judge"), {"problem": "1+1?", "answer": "2"}, spec=SPEC, store=store,
                                  retry=three, stats=stats, format_prompt=fmt_judge))
        assert isinstance(again, Failure) and stats.requests == sent  # a rerun: from the cache, not asked again


def test_a_judge_reply_dripped_past_timeout_s_is_cut_off_and_retried(tmp_path):
    # litellm's timeout bounds each read: a judge dripping its reply held the run past timeout_s
    from loopback_openai import LoopbackOpenAI

    with LoopbackOpenAI(models=("sim-judge",), faults=["drip"]) as srv:
        stats = LLMStats()
        v = asyncio.run(judge(LLMConfig(model="openai/sim-judge", api_base=srv.base_url, timeout_s=0.6),
                              {"problem": "1+1?", "answer": "2"},
            spec=SPEC, store=Store(tmp_path / "s.db"), retry=NO_WAIT, stats=stats, format_prompt=fmt_judge,
            parse=lambda reply: (True, reply)))
        # the dripped reply is whole and valid: only a cut-off makes the second request
        assert isinstance(v, Verdict) and stats.retries == 1 and stats.requests == 2


def test_hosted_models_of_one_provider_share_its_bound(monkeypatch):
    """"gpt-4o" and "gpt-4o-mini" (no provider prefix) both go to openai: one bound of `concurrency`
    for the two, as for "openai/gpt-4o", not one each."""
    from types import SimpleNamespace

    from benchfill.llm import _litellm

    litellm = _litellm()
    now = {"in_flight": 0, "peak": 0}

    async def fake_acompletion(**kw):  # no network: a hosted provider that answers after a moment
        now["in_flight"] += 1
        now["peak"] = max(now["peak"], now["in_flight"])
        await asyncio.sleep(0.02)
        now["in_flight"] -= 1
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(
            content="<verdict>valid</verdict><reason>fine</reason>"))], usage=None)

    monkeypatch.setattr(litellm, "acompletion", fake_acompletion)

    async def both():
        return await asyncio.gather(*(
            judge(LLMConfig(model=m, concurrency=1), {"problem": f"{s}+1?", "answer": "x"}, spec=SPEC, seed=s,
                  retry=NO_WAIT, format_prompt=fmt_judge, parse=parse_verdict)
            for m in ("gpt-4o", "gpt-4o-mini", "openai/gpt-4o") for s in range(2)))

    assert all(isinstance(v, Verdict) for v in asyncio.run(both()))
    assert now["peak"] == 1


def test_a_refused_connection_says_why_not_http_500():
    """litellm labels a connection it could not make "HTTP 500 ... Connection error."; the error says what
    the connection error wraps instead, as the probe client's errors do."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    conf = LLMConfig(model="openai/sim-judge", api_base=f"http://127.0.0.1:{port}/v1", timeout_s=2)
    from benchfill import netguard

    # as a library caller runs it, and as the CLI does (netguard.run: there every error of the run had
    # carried the RuntimeError of its event-loop check as context, and the message stopped at "HTTP 500")
    for runner in (asyncio.run, netguard.run):
        with pytest.raises(EndpointError) as err:
            runner(judge(conf, {"problem": "1+1?", "answer": "2"}, spec=SPEC, format_prompt=fmt_judge,
                         parse=parse_verdict, retry=RetryConfig(max_attempts=1, initial_wait_s=0, max_wait_s=0,
                                                                jitter_s=0)))
        said = str(err.value)
        assert "Connection error. (ConnectionRefusedError: " in said and "HTTP 500" not in said, (runner, said)


def test_a_level_the_host_gave_litellms_logger_stands():
    # a library caller's own logging choice was overridden: every use set litellm's loggers to ERROR
    import logging

    from benchfill.llm import _litellm

    lg = logging.getLogger("LiteLLM")
    before = lg.level
    try:
        lg.setLevel(logging.DEBUG)
        _litellm()
        assert lg.level == logging.DEBUG
        assert logging.getLogger("LiteLLM Router").level != logging.NOTSET  # the others: quiet, as before
    finally:
        lg.setLevel(before)


def test_a_runaway_malformed_reply_is_shown_back_in_part(monkeypatch):
    # a 10 MB malformed reply went back whole in every repair turn: paid for, or refused as too long
    import benchfill.llm as llm

    sent: list[list[dict]] = []

    async def complete(role, cfg, messages, seed, store, retry, stats):
        sent.append(messages)
        return ("x" * 1_000_000 if len(sent) == 1 else "<verdict>valid</verdict><reason>ok</reason>"), False, False

    monkeypatch.setattr(llm, "_complete", complete)
    v = asyncio.run(judge(LLMConfig(model="openai/j"), {"problem": "1+1?", "answer": "2"}, spec=SPEC,
                          format_prompt=fmt_judge))
    assert isinstance(v, Verdict) and v.repairs == 1
    echoed = sent[1][1]["content"]
    assert len(echoed) < llm.REPAIR_ECHO_CHARS + 100 and echoed.endswith("[... 980000 more characters cut]")


def test_a_reply_stopped_at_max_tokens_is_asked_again_and_a_null_answer_too(monkeypatch, caplog):
    # a cut reply was read as it stood: a reasoning model's draft <child> (or verdict) taken as its answer;
    # a child whose answer is null was measured, every probe graded wrong against the string "None"
    import logging

    import benchfill.llm as llm
    from benchfill.prompts import parse_child as real_parse

    good = '<child>{"problem": "Find 2+3.", "answer": "5"}</child>'
    replies = [(good, True), ('<child>{"problem": "Find 2+3.", "answer": null}</child>', False), (good, False)]
    sent: list[list[dict]] = []

    async def complete(role, cfg, messages, seed, store, retry, stats):
        sent.append(messages)
        text, cut = replies[len(sent) - 1]
        return text, False, cut

    monkeypatch.setattr(llm, "_complete", complete)
    stats = LLMStats()
    with caplog.at_level(logging.WARNING, "benchfill.llm"):
        res = asyncio.run(rewrite(LLMConfig(model="openai/r", max_repairs=2, max_tokens=512), {"problem": "1+1?", "answer": "2"},
                                  0.5, [], spec=SPEC, stats=stats, format_prompt=fmt_rewrite, parse=real_parse))
    assert isinstance(res, RewriteResult) and res.repairs == 2 and res.child["answer"] == "5"
    assert stats.cut == 1 and "stopped at max_tokens (512)" in sent[1][-1]["content"]
    assert "lacks field 'answer'" in sent[2][-1]["content"]
    assert any("raise rewriter.max_tokens" in r.getMessage() for r in caplog.records)


def test_a_cut_reply_from_the_cache_is_still_cut(tmp_path, items):
    # the server cuts every reply at max_tokens (finish_reason "length"); a rerun reads them from the store,
    # and must not take the cached drafts for answers
    w = world(items)
    with SimServer(w) as srv:
        store = Store(tmp_path / "s.db")
        for cached in (False, True):
            stats = LLMStats()
            res = do_rewrite(srv, store, items[0], 1, stats, max_tokens=8, max_repairs=1)
            assert isinstance(res, Failure) and res.cached is cached and stats.cut == 2, (cached, stats)


def test_usage_counts_that_are_not_counts_are_counted_zero():
    from benchfill.cache import token_count

    assert [token_count(v) for v in (12, 12.0, 0, -5, 10**15, "lots", None, True, float("nan"))] == [12, 12] + [0] * 7
