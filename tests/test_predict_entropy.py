"""Token-entropy features through the real openai client against a loopback server that returns logprobs."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from unittest import mock

import numpy as np
import pytest
from loopback_openai import ThreadedServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from benchfill.errors import ConfigError, EndpointError
from benchfill.predict.entropy import SUMMARY_NAMES, EntropyFeatures, Scorer, summarize, token_entropy
from benchfill.predict.features import build_blocks

# per model: how many equally likely candidates each generated token has (entropy log k);
# "flat" answers one token per word of the prompt, so longer prompts give longer trajectories
PATTERNS = {"rising": [1, 2, 4, 8], "flat": None}


class LogprobServer(ThreadedServer):
    """Answers /v1/chat/completions with ``logprobs.content`` and ``top_logprobs`` like vLLM/OpenAI do."""

    def __init__(self, no_logprobs: bool = False, delay_s: float = 0.0):
        self.no_logprobs = no_logprobs
        self.delay_s = delay_s  # each answer waits this long, so that requests overlap when they can
        self.requests: list[dict] = []
        self.in_flight = self.most_in_flight = 0
        self.serve(Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])]))

    def url(self, model: str) -> str:
        return f"{model}@http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: Request):
        body = await request.json()
        self.requests.append(body)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(self.delay_s)
        self.in_flight -= 1
        prompt = body["messages"][-1]["content"]
        ks = PATTERNS[body["model"]] or [2] * len(prompt.split())
        k_top = body.get("top_logprobs") or 1
        content = []
        for pos, k in enumerate(ks[: body.get("max_tokens") or len(ks)]):
            tops = [{"token": f"t{j}", "logprob": float(-np.log(k)), "bytes": None} for j in range(min(k, k_top))]
            content.append({"token": f"w{pos}", "logprob": tops[0]["logprob"], "bytes": None, "top_logprobs": tops})
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"},
                  "logprobs": None if self.no_logprobs else {"content": content}}
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                             "choices": [choice], "usage": {"prompt_tokens": 1, "completion_tokens": len(ks),
                                                            "total_tokens": len(ks) + 1}})


def test_token_entropy_by_hand():
    assert token_entropy([np.log(0.5), np.log(0.5)]) == pytest.approx(np.log(2))
    # the top-k is renormalized: two tokens at 0.3 and 0.1 become 0.75 / 0.25
    assert token_entropy([np.log(0.3), np.log(0.1)]) == pytest.approx(-(0.75 * np.log(0.75) + 0.25 * np.log(0.25)))
    assert token_entropy([0.0]) == 0.0 and token_entropy([]) == 0.0


def test_summaries_by_hand():
    s = dict(zip(SUMMARY_NAMES, summarize([0.0, 1.0, 2.0, 3.0]), strict=True))
    assert s["mean"] == 1.5 and s["sd"] == pytest.approx(np.sqrt(1.25))
    assert s["q50"] == 1.5 and s["slope"] == pytest.approx(3.0)  # over relative position 0..1
    assert s["first_decile"] == 0.0 and s["last_decile"] == 3.0 and s["top10_mean"] == 3.0
    assert s["total_variation"] == 1.0 and s["n_tokens"] == pytest.approx(np.log(5))
    assert not summarize([]).any()


def test_entropy_family_over_the_openai_client_with_cross_scorer_gaps():
    with LogprobServer() as srv:
        feats = EntropyFeatures([Scorer.parse(srv.url("rising")), Scorer.parse(srv.url("flat"))], concurrency=2)
        blocks = build_blocks(["one two", "one two three four five six"], ["entropy"], entropy=feats)
        assert {r["logprobs"] for r in srv.requests} == {True}
        assert {r["top_logprobs"] for r in srv.requests} == {20}
    (block,) = blocks
    cols = dict(zip(block.names, block.X.T, strict=True))
    rising = np.log([1, 2, 4, 8])
    assert cols["rising:mean"] == pytest.approx([rising.mean()] * 2)
    assert cols["rising:slope"][0] == pytest.approx(np.polyfit(np.linspace(0, 1, 4), rising, 1)[0])
    assert cols["flat:mean"] == pytest.approx([np.log(2)] * 2)
    assert cols["flat:n_tokens"] == pytest.approx(np.log1p([2, 6]))
    gap = cols["gap:rising-flat:mean"]
    assert gap == pytest.approx([abs(rising.mean() - np.log(2))] * 2)
    assert block.X.shape == (2, 3 * len(SUMMARY_NAMES))


def test_a_reply_without_logprobs_and_a_bad_scorer_fail_clearly():
    with LogprobServer(no_logprobs=True) as srv:
        with pytest.raises(EndpointError, match="carries no logprobs"):
            EntropyFeatures([Scorer.parse(srv.url("flat"))])(["a b"])
    with pytest.raises(ConfigError, match="expected MODEL@http"):
        Scorer.parse("qwen3-8b")


@pytest.mark.parametrize("url, what", [
    ("http://u:s3cret-pw@127.0.0.1:1/v1", "a password"),
    ("http://s3cret-tok@127.0.0.1:1/v1", "a name or token before '@'"),
    ("http://127.0.0.1:1/v1?api_key=s3cret-q", "a secret in its query string: api_key"),
])
def test_a_scorer_url_with_credentials_is_refused_and_never_written(tmp_path, url, what):
    """The scorer's spec is written into the predictor file (Predictor.to_dict): its key comes from
    BENCHFILL_SCORER_API_KEY, never from the URL."""
    from benchfill.predict import Predictor
    from benchfill.predict.models import DifficultyModel

    with pytest.raises(ConfigError) as err:
        Scorer.parse(f"m@{url}")
    assert str(err.value) == f"--scorer m: the URL carries {what}; leave it out and put the scorer's key in " \
                             "BENCHFILL_SCORER_API_KEY"
    with pytest.raises(ConfigError, match="^scorer m: the URL carries") as err:
        Predictor(families=["length", "entropy"], model=DifficultyModel(), residual_sd=1.0, scorers=[f"m@{url}"])
    assert "s3cret" not in str(err.value)


def test_predict_train_refuses_a_scorer_with_credentials_before_any_work(tmp_path, capsys):
    from benchfill.cli import main

    out = tmp_path / "pred.json"
    rc = main(["predict", "train", "--benchmark", "aime25", "--data-dir", str(tmp_path / "no-data"), "--families",
               "length,entropy", "--scorer", "m@http://u:s3cret-pw@127.0.0.1:1/v1", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["benchfill: error: --scorer m: the URL carries a password; leave it out and put the "
                               "scorer's key in BENCHFILL_SCORER_API_KEY"]
    assert not out.exists()


def test_a_scorer_error_body_echoing_the_key_is_scrubbed(monkeypatch):
    from types import SimpleNamespace

    import httpx
    import openai

    monkeypatch.setenv("BENCHFILL_SCORER_API_KEY", "sk-scorer-s3cret-0042")
    feats = EntropyFeatures([Scorer.parse("m@http://127.0.0.1:1/v1")])
    body = "denied; request headers were {'authorization': 'Bearer sk-scorer-s3cret-0042'}"
    exc = openai.AuthenticationError(body, response=httpx.Response(401, request=httpx.Request("POST", "http://x")),
                                     body=None)

    def create(**kw):
        raise exc

    feats._clients[feats.scorers[0]] = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    with pytest.raises(EndpointError, match="HTTP 401: denied; request headers were") as err:
        feats.trajectory(feats.scorers[0], "a b")
    assert "s3cret" not in str(err.value)


def test_a_cache_that_cannot_be_written_ends_the_scoring_in_one_error_naming_it(tmp_path):
    # A full disk: each worker thread died on the write with a traceback, and the caller waited for its
    # answers for ever, saying once a minute that the scorer (which had answered) had stopped answering.
    import errno

    cache = tmp_path / "entropy.jsonl"
    with LogprobServer() as srv:
        scorer = EntropyFeatures([Scorer.parse(srv.url("flat"))], concurrency=4, cache=str(cache), stall_s=5)
        real_open = open

        def full_disk(path, *a, **k):
            if str(path) == str(cache):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_open(path, *a, **k)

        import builtins

        raised: list[BaseException] = []

        def score() -> None:
            try:
                scorer(["one two", "three four", "five", "six seven"])
            except BaseException as exc:
                raised.append(exc)

        with mock.patch.object(builtins, "open", full_disk):
            t = threading.Thread(target=score, daemon=True)  # (a thread: the bug waited for ever)
            t.start()
            t.join(timeout=30)
        assert not t.is_alive() and len(raised) == 1 and isinstance(raised[0], ConfigError), raised
        assert re.match(rf"^{re.escape(str(cache))}: cannot write the scorer cache \(No space left on device\); "
                        r"the answers written before", str(raised[0]))


def test_the_trajectory_cache_resumes_without_asking_again_and_drops_a_cut_last_line(tmp_path):
    cache = tmp_path / "new-folder" / "entropy.jsonl"  # made on the first answer
    seen = []
    texts = ["one two", "one two three", "a b c d"]
    with LogprobServer() as srv:
        first = EntropyFeatures([Scorer.parse(srv.url("flat"))], concurrency=2, cache=str(cache),
                                on_progress=lambda s, done, total: seen.append((s.model, done, total)))
        _, X1 = first(texts[:2])
        assert len(srv.requests) == 2 and first.computed == 2
        assert sorted(seen) == [("flat", 1, 2), ("flat", 2, 2)]
        # a crash mid-write leaves a cut last line: it is dropped and that text scored again
        with open(cache, "a", encoding="utf-8") as fh:
            fh.write('{"model": "flat", "max_to')
        again = EntropyFeatures([Scorer.parse(srv.url("flat"))],
                                cache=str(cache))
        _, X2 = again(texts)
        assert len(srv.requests) == 3 and again.computed == 1  # only the new text was asked for
        assert X2[:2] == pytest.approx(X1)
        assert X2[2, SUMMARY_NAMES.index("mean")] == pytest.approx(np.log(2))
        # a text given twice in one call is asked once and gets one trajectory
        _, X3 = again(["e f", "e f"])
        assert len(srv.requests) == 4 and (X3[0] == X3[1]).all()
        # another max_tokens is another trajectory: asked for, not taken from the cache
        other = EntropyFeatures([Scorer.parse(srv.url("flat"), max_tokens=1)], cache=str(cache))
        other(texts[:1])
        assert len(srv.requests) == 5
    lines = cache.read_text().splitlines()
    assert len(lines) == 5 and all(line.endswith("}") for line in lines)
    assert set(json.loads(lines[0])) == {"model", "max_tokens", "top_logprobs", "digest", "H"}  # no text, no URL
    cache.write_text("not json\n")
    with pytest.raises(ConfigError, match=r"entropy.jsonl:1: not a trajectory record"):
        EntropyFeatures([Scorer.parse("flat@http://127.0.0.1:1/v1")], cache=str(cache))
    with pytest.raises(ConfigError, match=r"^--scorer-cache .*new-folder: a folder; give a file"):
        EntropyFeatures([Scorer.parse("flat@http://127.0.0.1:1/v1")], cache=str(cache.parent))


def test_scorer_concurrency_bounds_the_requests_in_flight(shared_data, tmp_path, capsys):
    from benchfill.cli import main

    with LogprobServer(delay_s=0.05) as srv:
        assert main(["predict", "evaluate", "--benchmark", "aime25", "--data-dir", str(shared_data), "--families",
                     "length,entropy", "--scorer", srv.url("flat"), "--scorer-concurrency", "1"]) == 0
        assert len(srv.requests) == 15 and srv.most_in_flight == 1
    with LogprobServer(delay_s=0.05) as srv:  # the default asks eight at a time
        assert main(["predict", "evaluate", "--benchmark", "aime25", "--data-dir", str(shared_data), "--families",
                     "length,entropy", "--scorer", srv.url("flat")]) == 0
        assert srv.most_in_flight > 1


def test_the_cli_says_how_far_the_scorer_is_and_a_rerun_asks_only_for_the_rest(shared_data, tmp_path, capsys):
    from benchfill.cli import main

    cache = tmp_path / "answers.jsonl"
    pred = tmp_path / "aime.json"
    with LogprobServer() as srv:
        args = ["--benchmark", "aime25", "--data-dir", str(shared_data), "--families", "length,entropy",
                "--scorer", srv.url("flat"), "--scorer-cache", str(cache)]
        assert main(["predict", "evaluate", *args]) == 0
        err = capsys.readouterr().err
        assert "scorer flat: 15/15 items" in err and len(srv.requests) == 15
        # train, then score the same items with the saved predictor, through the same cache: nothing asked again
        assert main(["predict", "train", *args, "--out", str(pred)]) == 0
        trained = tmp_path / "aime-i.jsonl"  # the matrix covers AIME I only: the items trained on
        trained.write_text("".join(ln + "\n" for ln in (shared_data / "aime25" / "items.jsonl").read_text().splitlines()
                                   if '"2025-I-' in ln))
        assert main(["predict", "score", "--predictor", str(pred), "--items", str(trained),
                     "--scorer-cache", str(cache)]) == 0
        assert len(srv.requests) == 15
        assert "scorer flat: 15/15 items" in capsys.readouterr().err
        # score two new items: one the scorer has answered (an aime25 problem), one it has not
        items = tmp_path / "new.jsonl"
        aime = json.loads((shared_data / "aime25" / "items.jsonl").read_text().splitlines()[0])
        items.write_text(json.dumps({"id": "old", "problem": aime["problem"]}) + "\n"
                         + json.dumps({"id": "new", "problem": "Find x if 2x = 6."}) + "\n")
        assert main(["predict", "score", "--predictor", str(pred), "--items", str(items),
                     "--scorer-cache", str(cache)]) == 0
        assert len(srv.requests) == 16 and "scorer flat: 2/2 items" in capsys.readouterr().err
    assert len(cache.read_text().splitlines()) == 16


@pytest.mark.parametrize("args, said", [
    (["--families", "length", "--scorer", "m@http://127.0.0.1:1/v1"],
     "--scorer: applies only to the entropy family, which --families leaves out"),
    (["--families", "length", "--scorer-cache", "c.jsonl"],
     "--scorer-cache: applies only to the entropy family, which --families leaves out"),
    (["--families", "length,entropy"],
     "--families: the entropy family needs a scorer (--scorer MODEL@URL, an endpoint that returns logprobs)"),
    (["--families", "length", "--scorer-concurrency", "1"],
     "--scorer-concurrency: applies only to the entropy family, which --families leaves out"),
])
@pytest.mark.parametrize("command", ["evaluate", "residuals"])
def test_scorer_options_that_do_not_fit_the_families_are_refused_before_the_fit(shared_data, capsys, command,
                                                                                  args, said):
    from benchfill.cli import main

    rc = main(["predict", command, "--benchmark", "aime25", "--data-dir", str(shared_data), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"benchfill: error: {said}"]  # no "fitting 1PL" line: nothing ran before it


def test_residuals_with_a_predictor_refuses_a_scorer_of_its_own(shared_data, tmp_path, capsys):
    from benchfill.cli import main

    pred = tmp_path / "p.json"
    assert main(["predict", "train", "--benchmark", "aime25", "--data-dir", str(shared_data), "--families",
                 "length", "--out", str(pred)]) == 0
    capsys.readouterr()
    for extra, said in ((["--scorer", "m@http://127.0.0.1:1/v1"], "--scorer: --predictor"),
                        (["--scorer-cache", "c.jsonl"], f"--scorer-cache: --predictor {pred} uses no scorer")):
        rc = main(["predict", "residuals", "--benchmark", "aime25", "--data-dir", str(shared_data),
                   "--predictor", str(pred), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and said in err[0]
    for opt, val in (("--scorer-cache", "c.jsonl"), ("--scorer-concurrency", "1")):
        rc = main(["predict", "score", "--predictor", str(pred), "--items", str(tmp_path / "none.jsonl"), opt, val])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and err == [f"benchfill: error: {opt}: --predictor {pred} uses no scorer"]
