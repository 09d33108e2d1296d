"""A small OpenAI-compatible server on loopback with fault knobs, for the traffic unit tests.

It answers ``/v1/models`` and ``/v1/chat/completions`` deterministically from (model, prompt, seed,
sample index), and can fail the first attempts of each request in chosen ways, refuse ``n > 1``, or
record the Authorization headers it saw. The acceptance tests use the product's simulated world.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections import Counter

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


class ThreadedServer:
    """A Starlette app served by uvicorn in a thread on a free loopback port (a context manager)."""

    def serve(self, app: Starlette) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started and time.time() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(5)


class LoopbackOpenAI(ThreadedServer):
    def __init__(self, models=("m1",), faults=(), refuse_n=False, latency_s=0.0, echo_headers=False):
        self.models = list(models)
        self.faults = list(faults)  # per request, the first len(faults) attempts fail: 429/500/400/"timeout"/"no_choices"
        self.echo_headers = echo_headers  # a fault's body repeats the key and the headers (as careless proxies do)
        self.refuse_n = refuse_n
        self.latency_s = latency_s
        self.attempts: Counter = Counter()
        self.successes: Counter = Counter()
        self.auth_seen: list[str] = []
        self.bodies: list[dict] = []
        self.client_ports: list[int] = []  # each request's client port: a new one is a new connection
        self.inflight = self.peak_inflight = 0
        self.serve(Starlette(routes=[Route("/v1/models", self._models),
                                     Route("/v1/chat/completions", self._chat, methods=["POST"])]))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    async def _chat(self, request: Request):
        self.inflight += 1  # requests being served at once, and the most seen
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        try:
            return await self._answer(request)
        finally:
            self.inflight -= 1

    async def _answer(self, request: Request):
        self.auth_seen.append(request.headers.get("authorization", ""))
        self.client_ports.append(request.client.port)
        body = await request.json()
        self.bodies.append(body)
        prompt = body["messages"][-1]["content"]
        ident = json.dumps([body["model"], prompt, body.get("seed"), body.get("n", 1)])
        k = self.attempts[ident]
        self.attempts[ident] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if body["model"] not in self.models:
            return JSONResponse({"error": {"message": f"model {body['model']} not found"}}, status_code=404)
        if self.refuse_n and body.get("n", 1) > 1:
            return JSONResponse({"error": {"message": "n > 1 is not supported"}}, status_code=400)
        if k < len(self.faults):
            fault = self.faults[k]
            if fault == "timeout":  # outlive the client's timeout; the client gives up first
                await asyncio.sleep(1.0)
                return JSONResponse({"error": {"message": "too late"}}, status_code=504)
            if fault == "drip":  # a whole, valid reply, ten bytes every 0.1 s: no single read waits long
                n = body.get("n", 1)
                payload = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant",
                                 "content": reply(body["model"], prompt, body.get("seed"), i)}} for i in range(n)],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()

                async def drip():
                    for i in range(0, len(payload), 10):
                        yield payload[i:i + 10]
                        await asyncio.sleep(0.1)

                return StreamingResponse(drip(), media_type="application/json")
            if fault == "null_content":  # a 200 whose every choice holds no answer (content null)
                n = body.get("n", 1)
                return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": i, "finish_reason": "length",
                                                  "message": {"role": "assistant", "content": None}}
                                                 for i in range(n)],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}})
            if fault == "too_long":  # vLLM's refusal of a prompt longer than its context
                return JSONResponse({"object": "error", "type": "BadRequestError", "code": 400,
                                     "message": "This model's maximum context length is 8192 tokens. However, you "
                                                "requested 9216 tokens (5120 in the messages, 4096 in the "
                                                "completion). Please reduce the length of the messages or completion."},
                                    status_code=400)
            if fault == "max_tokens_too_long":  # vLLM's refusal where max_tokens alone fills the context
                return JSONResponse({"object": "error", "type": "BadRequestError", "code": 400,
                                     "message": "This model's maximum context length is 2048 tokens. However, you "
                                                "requested 4196 tokens (100 in the messages, 4096 in the "
                                                "completion). Please reduce the length of the messages or completion."},
                                    status_code=400)
            if fault == "cut":  # the usual answers, each stopped at max_tokens (a draft, whatever it says)
                n = body.get("n", 1)
                return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": i, "finish_reason": "length",
                                                  "message": {"role": "assistant",
                                                              "content": "yes? wait, " + reply(body["model"], prompt, body.get("seed"), i)}}
                                                 for i in range(n)],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 9, "total_tokens": 10}})
            if fault == "no_choices":  # a 200 that holds no reply
                return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                                              "total_tokens": 1}})
            said = (f"; rejected authorization: {request.headers.get('authorization')}; request headers were "
                    f"{dict(request.headers)}") if self.echo_headers else ""
            return JSONResponse({"error": {"message": f"injected {fault}{said}"}}, status_code=fault)
        self.successes[ident] += 1
        n = body.get("n", 1)
        texts = [reply(body["model"], prompt, body.get("seed"), i) for i in range(n)]
        return JSONResponse({
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": t}}
                        for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 3 * n, "total_tokens": 0},
        })


def reply(model: str, prompt: str, seed, index: int) -> str:
    """Deterministic: an even hash answers "yes" (graded correct by the tests), an odd one "no"."""
    h = hashlib.sha256(f"{model}|{prompt}|{seed}|{index}".encode()).digest()[0]
    return f"answer {'yes' if h % 2 == 0 else 'no'} {h}"
