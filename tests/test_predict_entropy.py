"""Token-entropy features through the real openai client against a loopback server that returns logprobs."""

from __future__ import annotations

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

    def __init__(self, no_logprobs: bool = False):
        self.no_logprobs = no_logprobs
        self.requests: list[dict] = []
        self.serve(Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])]))

    def url(self, model: str) -> str:
        return f"{model}@http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: Request):
        body = await request.json()
        self.requests.append(body)
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
