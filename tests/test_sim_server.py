"""The simulated world's HTTP face, driven through the real openai SDK and raw httpx."""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest

from benchfill.errors import ConfigError
from benchfill.evaluators import get_evaluator
from benchfill.sim import SimServer, World


@pytest.fixture(scope="module")
def aime_items(shared_data):
    return [json.loads(line) for line in open(shared_data / "aime24" / "items.jsonl")]


@pytest.fixture(scope="module")
def server(aime_items):
    world = World.from_items(aime_items, evaluator="math", text_field="problem", answer_field="answer", seed=7)
    with SimServer(world) as srv:
        yield srv


def solver_prompt(text: str) -> list[dict]:
    return [{"role": "system", "content": "Put the final answer in \\boxed{}."},
            {"role": "user", "content": f"Solve the problem.\n<problem>\n{text}\n</problem>"}]


def client(srv: SimServer, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0, **kw)


def test_models_lists_probes_rewriter_and_judge(server):
    ids = [m.id for m in client(server).models.list()]
    assert ids[:12] == [f"sim-probe-{k:02d}" for k in range(1, 13)]
    assert {"sim-rewriter", "sim-judge"} <= set(ids)
    assert len(ids) == 14


def test_n_and_seed_are_honoured_and_deterministic(server, aime_items):
    c = client(server)
    msgs = solver_prompt(aime_items[3]["problem"])
    r1 = c.chat.completions.create(model="sim-probe-07", messages=msgs, n=16, seed=11, temperature=0.7,
                                   top_p=0.95, max_tokens=512)
    r2 = c.chat.completions.create(model="sim-probe-07", messages=msgs, n=16, seed=11, temperature=0.7,
                                   top_p=0.95, max_tokens=512)
    r3 = c.chat.completions.create(model="sim-probe-07", messages=msgs, n=16, seed=12)
    assert [ch.index for ch in r1.choices] == list(range(16))
    texts1 = [ch.message.content for ch in r1.choices]
    assert texts1 == [ch.message.content for ch in r2.choices]
    assert texts1 != [ch.message.content for ch in r3.choices]
    # every reply commits to an answer the grader reads, or ran out of tokens and says so
    math = get_evaluator("math")
    assert all(ch.finish_reason == "length" or math.grade(ch.message.content, aime_items[3]).extracted
               for ch in r1.choices)
    assert r1.object == "chat.completion" and r1.model == "sim-probe-07" and r1.id and r1.created > 0
    assert r1.usage.prompt_tokens > 0 and r1.usage.completion_tokens >= 16
    assert r1.usage.total_tokens == r1.usage.prompt_tokens + r1.usage.completion_tokens
    # Choice i does not depend on how many samples were asked for.
    r4 = c.chat.completions.create(model="sim-probe-07", messages=msgs, n=4, seed=11)
    assert [ch.message.content for ch in r4.choices] == texts1[:4]


def test_world_truth_matches_the_formula_inputs(server, aime_items):
    w = server.world
    b = [w.true_difficulty(it["id"]) for it in aime_items]
    assert min(b) == w.b_min and max(b) == w.b_max
    assert w.true_z(aime_items[0]["problem"]) == pytest.approx((b[0] - w.b_min) / (w.b_max - w.b_min))
    # A ladder of abilities spanning the difficulties, weakest first.
    theta = list(w.abilities.values())
    assert theta == sorted(theta) and theta[0] == -2.5 and theta[-1] == 2.5


def test_errors_are_openai_shaped(server):
    c = client(server)
    with pytest.raises(openai.NotFoundError) as exc:
        c.chat.completions.create(model="gpt-nonexistent", messages=[{"role": "user", "content": "hi"}])
    assert exc.value.status_code == 404 and "gpt-nonexistent" in str(exc.value)
    base = server.base_url
    r = httpx.post(f"{base}/chat/completions", content=b"{not json")
    assert r.status_code == 400 and "message" in r.json()["error"]
    r = httpx.post(f"{base}/chat/completions", json={"model": "sim-probe-01", "messages": [], "n": 0})
    assert r.status_code == 400
    r = httpx.post(f"{base}/chat/completions", json={"messages": []})
    assert r.status_code == 400
    assert httpx.get(f"{base}/nothing-here").status_code == 404


def test_unknown_problem_is_answered_wrong_and_counted(server):
    before = server.stats["unknown_problems"]
    r = client(server).chat.completions.create(model="sim-probe-12", messages=solver_prompt("What is 1+1?"), n=3)
    assert all("\\boxed" not in ch.message.content for ch in r.choices)
    assert server.stats["unknown_problems"] == before + 1


def test_truth_endpoint_is_labelled_simulated(server, aime_items):
    item = aime_items[5]
    r = httpx.post(server.base_url.removesuffix("/v1") + "/sim/truth", json={"text": "  " + item["problem"] + "\n"})
    body = r.json()
    assert body["simulated"] is True and body["known"] is True and body["item_id"] == item["id"]
    assert body["difficulty"] == pytest.approx(server.world.true_difficulty(item["id"]))
    assert body["valid"] is True
    r = httpx.post(server.base_url.removesuffix("/v1") + "/sim/truth", json={"text": "never seen"})
    assert r.json() == {"simulated": True, "known": False}


def test_bearer_key_is_required_when_configured(aime_items):
    world = World.from_items(aime_items[:5], evaluator="math", text_field="problem", answer_field="answer",
                             api_key="sk-sim-secret")
    with SimServer(world) as srv:
        with pytest.raises(openai.AuthenticationError):
            client(srv).models.list()
        ok = openai.OpenAI(base_url=srv.base_url, api_key="sk-sim-secret", max_retries=0)
        assert len(ok.models.list().data) == 14


def test_fitted_world_uses_the_response_matrix(shared_data):
    from benchfill.data import read_items, read_responses

    items = read_items(shared_data / "aime25" / "items.jsonl")
    matrix = read_responses(shared_data / "aime25" / "responses.csv", items=items)
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                             matrix=matrix, n_probes=6)
    assert world.latent_origin == "fit"
    assert set(world.source_models.values()) <= set(matrix.models)
    # Items the matrix solved most often are the easiest in the world.
    rate = matrix.correct.sum(0) / matrix.trials.sum(0)
    easiest, hardest = matrix.item_ids[rate.argmax()], matrix.item_ids[rate.argmin()]
    assert world.true_difficulty(easiest) < world.true_difficulty(hardest)
    # A world made by a fit under the hierarchical prior (bench_search.py --world-prior): the same items in the
    # same order, their ends spread further (aime25's difficulties' sd, estimated, is above 1)
    from benchfill.irt import fit

    wide = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                            matrix=matrix, n_probes=6, latent_prior="hierarchical")
    ids = list(matrix.item_ids)
    b, b_wide = ([w.true_difficulty(i) for i in ids] for w in (world, wide))
    assert np.argsort(b).tolist() == np.argsort(b_wide).tolist()
    assert np.ptp(b_wide) > np.ptp(b)
    own = fit(matrix, prior="hierarchical")
    assert b_wide == pytest.approx(list(own.difficulty))  # the fit it names, item by item
    with pytest.raises(ConfigError, match=r"sim: latent_prior 'hierarchical' needs a response matrix to fit"):
        World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                         latent_prior="hierarchical")  # a drawn world: refused, not ignored
    with pytest.raises(ConfigError, match="sim: latent_prior 'wide' unknown"):
        World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", matrix=matrix,
                         latent_prior="wide")


def test_a_run_directory_keeps_its_port_below_the_ephemeral_range(tmp_path):
    # The port is in the cache keys, so it must not change between runs of one directory; it must also
    # stay out of Linux's default ephemeral range (32768-60999), where an outgoing connection could hold it.
    from benchfill.engine.backend import sim_port

    ports = [sim_port(tmp_path / f"run-{i}") for i in range(2000)]
    assert all(20000 <= p < 32000 for p in ports)
    assert len(set(ports)) > 1700  # spread (about 1,840 expected of 12,000 values), so two rarely share one
    assert sim_port(tmp_path / "run-7") == ports[7] == sim_port(tmp_path / "x" / ".." / "run-7")


def test_a_stop_answers_a_waiting_request_503_not_a_traceback(aime_items):
    # Ctrl-C on `sim serve` while a request waits out its latency: the client gets a retryable 503 that
    # says why, at once, not uvicorn's "Exception in ASGI application" and a bare 500 after its grace.
    import threading
    import time

    world = World.from_items(aime_items, evaluator="math", text_field="problem", answer_field="answer", seed=7,
                             latency_ms=5000)
    srv = SimServer(world).start()
    answer: dict = {}

    def ask():
        answer["r"] = httpx.post(srv.base_url + "/chat/completions", timeout=30,
                                 json={"model": "sim-probe-01", "messages": solver_prompt(aime_items[0]["problem"])})

    t = threading.Thread(target=ask)
    t.start()
    deadline = time.monotonic() + 10
    while srv.stats["models"].get("sim-probe-01", {}).get("requests", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # uvicorn's loggers do not propagate to pytest's capture
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        srv.stop()
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    t.join(timeout=10)
    logged = "\n".join(r.getMessage() for r in records)
    r = answer["r"]
    assert r.status_code == 503
    assert "shutting down" in r.json()["error"]["message"]
    assert "Exception in ASGI application" not in logged
    assert "Cancel" not in logged  # answered before uvicorn's grace ran out: nothing left for it to cancel


def test_what_the_world_does_not_serve_is_refused_not_pretended(server, aime_items):
    # stream=True got a plain JSON body, which the SDK read as no chunks: an empty answer for every item;
    # logprobs came back None, tools were ignored, a string seed went into the id
    c = client(server)
    msgs = solver_prompt(aime_items[0]["problem"])
    for extra, said in (({"stream": True}, "'stream': benchfill's simulated world does not serve streaming"), ({"logprobs": True}, "'logprobs'"),
                        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "'tools'"),
                        ({"response_format": {"type": "json_object"}}, "'response_format'"),
                        ({"seed": "abc"}, "'seed': a whole number"), ({"temperature": "hot"}, "'temperature'"),
                        ({"max_tokens": -5}, "'max_tokens'"), ({"n": True}, "'n'")):
        r = httpx.post(f"{server.base_url}/chat/completions", json={"model": "sim-probe-01", "messages": msgs,
                                                                    **extra})
        assert r.status_code == 400 and said in r.json()["error"]["message"], (extra, r.text)
    empty = httpx.post(f"{server.base_url}/chat/completions", json={"model": "sim-probe-01", "messages": []})
    assert "'messages': a non-empty list" in empty.json()["error"]["message"]
    assert httpx.get(f"{server.base_url}/chat/completions").status_code == 405
    assert httpx.get(server.base_url.removesuffix("/v1") + "/health").status_code == 200
    assert c.models.retrieve("sim-probe-01").id == "sim-probe-01"


def test_temperature_zero_stop_and_the_token_cap_are_honoured_and_ids_differ(server, aime_items):
    c = client(server)
    msgs = solver_prompt(aime_items[5]["problem"])
    greedy = c.chat.completions.create(model="sim-probe-06", messages=msgs, n=5, temperature=0)
    assert len({ch.message.content for ch in greedy.choices}) == 1  # every choice the most likely one
    # whatever the seed: a probe asked one sample at a time, each with its own seed, answers alike too
    alone = {c.chat.completions.create(model="sim-probe-06", messages=msgs, temperature=0, seed=k).choices[0]
             .message.content for k in range(4)}
    assert alone == {greedy.choices[0].message.content}
    full = c.chat.completions.create(model="sim-probe-06", messages=msgs, seed=3).choices[0].message.content
    capped = c.chat.completions.create(model="sim-probe-06", messages=msgs, seed=3, max_tokens=2)
    cut = capped.choices[0]
    assert cut.finish_reason == "length" and cut.message.content == full[:7]
    assert capped.usage.completion_tokens == 2  # no more than the cap, as the usage counts it
    word = full.split()[1]
    stopped = c.chat.completions.create(model="sim-probe-06", messages=msgs, seed=3, stop=[word]).choices[0]
    assert stopped.message.content == full[:full.find(word)] and stopped.finish_reason == "stop"
    a = c.chat.completions.with_raw_response.create(model="sim-probe-01", messages=msgs)
    b = c.chat.completions.create(model="sim-probe-02", messages=msgs)
    assert a.parse().id != b.id and a.headers["x-benchfill-simulated"] == "true"


def test_an_item_in_a_clients_own_template_is_answered_and_anything_else_says_it_is_simulated(server, aime_items):
    # a client's system message and template around the item got "I am not able to solve this problem.":
    # every item scored 0% on every probe, without a word
    c = client(server)
    text = aime_items[2]["problem"]
    own = [{"role": "system", "content": "You are a helpful math assistant."},
           {"role": "user", "content": f"Solve the following problem. Put the final answer in \\boxed{{}}.\n\n{text}"}]
    before = server.stats["unknown_problems"]
    r = c.chat.completions.create(model="sim-probe-12", messages=own, n=4)
    assert all("\\boxed{" in ch.message.content for ch in r.choices)
    assert server.stats["unknown_problems"] == before
    other = c.chat.completions.create(model="sim-probe-12", messages=[{"role": "user", "content": "Hello"}])
    assert other.choices[0].message.content.startswith("[benchfill simulated world] This prompt holds none")
    # a one-shot example quotes two items in one message: which is asked is not the world's to guess
    shot = f"Problem: {aime_items[8]['problem']}\nAnswer: 127\n\nNow solve this one.\nProblem: {text}"
    two = c.chat.completions.create(model="sim-probe-12", messages=[{"role": "user", "content": shot}])
    assert two.choices[0].message.content.startswith("[benchfill simulated world]")


def test_health_answers_without_the_key_and_a_wrong_method_names_the_right_one(aime_items):
    world = World.from_items(aime_items[:5], evaluator="math", text_field="problem", answer_field="answer", seed=7,
                             api_key="sekret")
    with SimServer(world) as srv:
        root = srv.base_url.removesuffix("/v1")
        assert httpx.get(f"{root}/health").status_code == 200  # as vLLM's: a readiness poll sends no key
        assert httpx.get(f"{srv.base_url}/models").status_code == 401
        r = httpx.get(f"{srv.base_url}/chat/completions", headers={"authorization": "Bearer sekret"})
        assert r.status_code == 405 and r.headers["allow"] == "POST"


def test_a_multiple_choice_item_in_its_own_cot_template_with_options_is_found(shared_data):
    # the options and a long instruction pushed the question under a third of what the client wrote: 25 of
    # 40 mmlu-pro items in MMLU-Pro's own CoT template got the "holds none of the items" reply
    from benchfill.sim import roles

    items = [json.loads(line) for line in open(shared_data / "mmlu-pro" / "items.jsonl")][:400]
    world = World.from_items(items, evaluator="multiple_choice", text_field="question", answer_field="answer",
                             options_field="options", seed=0)
    found = 0
    for it in items[::10]:
        opts = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(it["options"]))
        prompt = (f"The following are multiple choice questions (with answers) about {it['category']}. Think step by "
                  f"step and then finish your answer with \"the answer is (X)\".\n\nQuestion: {it['question']}\n"
                  f"Options:\n{opts}\nAnswer: Let's think step by step.")
        hit = roles.prompt_item(world, prompt, [{"role": "user", "content": prompt}])
        found += hit is not None and hit.fields["question"] == it["question"]
    # all but "What is a paradigm?": 19 characters, a sixth of its prompt, too short to be told from a stem
    assert found == 39
    # a question of the user's own quoting a generic stem that is an item of its own is not that item
    stems = [{"id": "a", "question": "Which of the following statements about primes is true?",
              "options": ["2 is odd", "3 is even"], "answer": "A"},
             {"id": "b", "question": "Which of the following statements about primes is true? Consider 7.",
              "options": ["7 is prime", "7 is even"], "answer": "A"}]
    small = World.from_items(stems, evaluator="multiple_choice", text_field="question", answer_field="answer",
                             options_field="options", seed=0)
    mine = ("My own quiz on numbers, written for a class of twelve-year-olds who have just met primes. "
            "Which of the following statements about primes is true? A. 9 is prime B. 11 is prime C. 1 is prime")
    assert roles.prompt_item(small, mine, [{"role": "user", "content": mine}]) is None


def test_only_probe_prompts_are_kept_and_their_text_is_bounded(aime_items, monkeypatch):
    """A long-lived `sim serve` kept every prompt it saw: the rewriter's and the judge's, seldom asked twice,
    are not kept, and the probes' are held to a bound on their characters."""
    import benchfill.sim.server as server_mod
    from benchfill.benchmarks import BenchmarkSpec
    from benchfill.prompts import format_judge_prompt

    world = World.from_items(aime_items, evaluator="math", text_field="problem", answer_field="answer", seed=7)
    with SimServer(world) as srv:
        c = client(srv)
        spec = BenchmarkSpec(name="aime", text_field="problem", answer_field="answer", evaluator="math")
        for k in range(3):
            judge = format_judge_prompt({"problem": aime_items[k]["problem"], "answer": "1"}, spec)
            c.chat.completions.create(model="sim-judge", messages=[{"role": "user", "content": judge}])
        assert srv.app._prompts == {}
        first = aime_items[0]["problem"]
        c.chat.completions.create(model="sim-probe-01", messages=solver_prompt(first), n=2, seed=1)
        assert len(srv.app._prompts) == 1 and srv.app._prompt_chars > len(first)
        monkeypatch.setattr(server_mod, "_PROMPT_CACHE_CHARS", 10)  # past the bound: cleared, then kept anew
        c.chat.completions.create(model="sim-probe-01", messages=solver_prompt(aime_items[1]["problem"]), n=2, seed=1)
        assert len(srv.app._prompts) == 1 and srv.app._prompt_chars < 2 * len(first) + 2000
