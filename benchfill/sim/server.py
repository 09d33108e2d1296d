"""The simulated world as a real OpenAI-compatible HTTP server (a lean ASGI app under uvicorn).

Endpoints: ``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/chat/completions`` (honours ``n``,
``seed``, ``temperature`` 0 as greedy, ``stop`` and ``max_tokens``; refuses streaming, logprobs and tools),
``GET /health``,
``POST /sim/truth`` (latent difficulty and validity of an item, labelled simulated) and
``GET /sim/stats`` (requests, faults and successes per model). Faults are decided per
attempt, content per request, so a retried request gets exactly the fault-free reply.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections import defaultdict
from typing import Any

from benchfill.sim import habits, roles
from benchfill.sim.world import World

try:  # a faster JSON codec when installed; the server works without it
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    _loads = orjson.loads
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    import json

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

# every reply says it is simulated, beside its model names and system_fingerprint: a client that keeps only
# the content and headers cannot take it for a real model's
_JSON = [(b"content-type", b"application/json"), (b"x-benchfill-simulated", b"true")]
_ALLOWED = {"/v1/chat/completions": b"POST", "/v1/models": b"GET", "/sim/truth": b"POST", "/sim/stats": b"GET",
            "/health": b"GET"}
_MAX_BODY = 32 << 20  # a request body larger than this is refused (413): no model's context holds it
# What the world does not do: refused (400) rather than answered as if it had (a streaming client got an empty
# answer for every item, a reader of logprobs a None it crashed on)
_UNSUPPORTED = {"stream": "streaming", "logprobs": "logprobs", "top_logprobs": "logprobs", "tools": "tool calls",
                "tool_choice": "tool calls", "functions": "function calls", "function_call": "function calls"}
# The probe prompts' lookups kept (each item's prompt is asked again and again), held to this many characters
# of prompt text: a count alone let a long-lived `sim serve` keep gigabytes of long prompts. The rewriter's and
# the judge's prompts are seldom asked twice and are not kept.
_PROMPT_CACHE_CHARS = 64 << 20


def _error(status: int, message: str, kind: str, code: str | None = None) -> tuple[int, bytes]:
    return status, _dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


OWNER = "benchfill-sim"  # every model listed is owned by it: a client tells the simulated world by it


class SimApp:
    """ASGI callable. One instance per server; counts are per instance."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.stats: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.unknown_problems = 0
        self._attempt = 0
        self._served = 0
        # prompt text -> (prompt hash, item): the per-prompt work is done once.
        self._prompts: dict[str, tuple[str, Any]] = {}
        self._prompt_chars = 0  # characters of prompt text held in _prompts
        self._auth = f"Bearer {world.api_key}".encode() if world.api_key else None
        # Set when the server begins to stop (Ctrl-C, SimServer.stop): a request still waiting out its
        # latency is answered 503 at once, so none is left for uvicorn to cancel (its traceback, a bare 500).
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def begin_stop(self) -> None:
        """From any thread: answer every waiting request 503 now."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    async def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or raise ``asyncio.CancelledError`` at once if the server begins to stop."""
        if self._stopping is None:
            self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return
        raise asyncio.CancelledError("the server is stopping")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/health" and method == "GET":  # as vLLM's: open, for a readiness poll that sends no key
            await _respond(send, 200, b"{}")
            return
        if self._auth is not None and dict(scope["headers"]).get(b"authorization") != self._auth:
            await _respond(send, *_error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
            return
        if path == "/v1/chat/completions" and method == "POST":
            started = False

            async def tracked(msg: dict) -> None:
                nonlocal started
                started = started or msg["type"] == "http.response.start"
                await send(msg)

            try:
                await self._chat(await _body(receive), receive, tracked)
            except OSError as exc:
                # The world could not record a child (a full disk): an error status the client may retry once
                # there is room, and no traceback per request; a run that serves this world names the file.
                if not started:
                    said = f"{exc.filename}: {exc.strerror or exc}" if exc.filename else str(exc)
                    await _respond(send, *_error(507, f"The simulated world could not record the item: {said}",
                                                 "server_error"))
            except asyncio.CancelledError:
                # The server is stopping (Ctrl-C) while this request waits out its latency (begin_stop, or
                # uvicorn cancelling it after its grace): answer it as a server going away does, a retryable
                # 503, instead of uvicorn's traceback and bare 500.
                if not started:
                    await _respond(send, *_error(503, "The simulated world is shutting down.", "server_error"))
        elif path == "/v1/models" and method == "GET":
            await _respond(send, 200, _dumps(self._models()))
        elif path == "/sim/truth" and method == "POST":
            await _respond(send, *self._truth(await _body(receive)))
        elif path == "/sim/stats" and method == "GET":
            await _respond(send, 200, _dumps(self.snapshot()))
        elif path.startswith("/v1/models/") and method == "GET":
            model = next((m for m in self._models()["data"] if m["id"] == path.removeprefix("/v1/models/")), None)
            await _respond(send, *((200, _dumps(model)) if model else _error(
                404, f"The model `{path.removeprefix('/v1/models/')}` does not exist.", "invalid_request_error",
                "model_not_found")))
        elif path in _ALLOWED:
            await _respond(send, *_error(405, f"{method} is not allowed on {path}", "invalid_request_error"),
                           [(b"allow", _ALLOWED[path])])
        else:
            await _respond(send, *_error(404, f"no route {method} {path} (the simulated world serves "
                                              "/v1/models and /v1/chat/completions)", "invalid_request_error"))

    def snapshot(self) -> dict[str, Any]:
        per_model = {m: dict(c) for m, c in self.stats.items()}
        return {"simulated": True, "models": per_model, "unknown_problems": self.unknown_problems,
                "children": sum(1 for it in self.world.items.values() if it.origin == "generated")}

    def _models(self) -> dict[str, Any]:
        w = self.world
        data = [{"id": m, "object": "model", "created": 0, "owned_by": OWNER, "role": "probe",
                 "source_model": w.source_models.get(m, "")} for m in w.abilities]
        data += [{"id": w.rewriter_model, "object": "model", "created": 0, "owned_by": OWNER,
                  "role": "rewriter"},
                 {"id": w.judge_model, "object": "model", "created": 0, "owned_by": OWNER, "role": "judge"}]
        return {"object": "list", "data": data}

    def _truth(self, raw: bytes) -> tuple[int, bytes]:
        try:
            req = _loads(raw)
            text = req.get("text") or (req.get("item") or {}).get(self.world.text_field) or req.get("item_id")
        except Exception:
            return _error(400, "body must be JSON with 'text', 'item' or 'item_id'", "invalid_request_error")
        if not isinstance(text, str):
            return _error(400, "body must name the item by 'text', 'item' or 'item_id'", "invalid_request_error")
        item = self.world.lookup(text)
        if item is None:
            return 200, _dumps({"simulated": True, "known": False})
        return 200, _dumps({"simulated": True, "known": True, "item_id": item.id, "difficulty": item.difficulty,
                            "z": self.world.to_z(item.difficulty), "valid": item.valid,
                            "parent": item.parent, "origin": item.origin})

    async def _chat(self, raw: bytes, receive: Any, send: Any) -> None:
        w = self.world
        if raw is None:
            await _respond(send, *_error(413, f"request body over {_MAX_BODY >> 20} MB", "invalid_request_error"))
            return
        try:
            req = _loads(raw)
            model = req["model"]
            messages = req["messages"]
            n = req.get("n")
            n = 1 if n is None else n
            seed = req.get("seed")
            prompt = "\n".join(_content(m) for m in messages)
        except Exception:
            await _respond(send, *_error(400, "malformed request: need JSON with 'model' and 'messages'",
                                         "invalid_request_error"))
            return
        bad = _bad_parameter(req, model, messages, n)
        if bad:
            await _respond(send, *_error(400, bad, "invalid_request_error"))
            return
        role = w.role(model)
        if role is None:
            await _respond(send, *_error(404, f"The model `{model}` does not exist.", "invalid_request_error",
                                         "model_not_found"))
            return
        counts = self.stats[model]
        counts["requests"] += 1
        self._attempt += 1
        # Per attempt, never per content; seeded only where a draw is made (seeding costs more than
        # the rest of a plain request's bookkeeping).
        attempt = _LazyRandom(w.seed * 1_000_003 + self._attempt)
        if w.latency_jitter_ms > 0:
            await self._wait(max(w.latency_ms + w.latency_jitter_ms * (2 * attempt.random() - 1), 0.0) / 1000)
        elif w.latency_ms > 0:
            await self._wait(w.latency_ms / 1000)
        if w.fault_rate > 0 and attempt.random() < w.fault_rate:
            kind = _pick(w.fault_mix, attempt.random())
            counts["faults"] += 1
            counts["fault_" + kind] += 1
            await self._fault(kind, receive, send)
            return

        cached = self._prompts.get(prompt)
        if cached is None:
            if self._prompt_chars > _PROMPT_CACHE_CHARS:
                self._prompts.clear()
                self._prompt_chars = 0
            item = roles.prompt_item(w, prompt, messages) if role == "probe" else None
            if role == "probe" and item is None:  # a child another server of this world wrote: read its state
                w.refresh()
                item = roles.prompt_item(w, prompt, messages)
            cached = (roles.prompt_hash(prompt), item)
            if role == "probe" and item is not None:  # an unknown problem may become known: not cached
                self._prompts[prompt] = cached
                self._prompt_chars += len(prompt)
        prompt_hash, item = cached
        # temperature 0: greedy, as a real decode: one draw whatever the seed (a sample asked for alone with its
        # own seed, as a probe that refuses n is asked, drew anew each time), repeated for every choice
        greedy = req.get("temperature") == 0
        draws = 1 if greedy else n
        if greedy:
            seed = None
        if role == "probe":
            replies, n_correct = roles.solve(w, model, prompt, prompt_hash, item, seed, draws,
                                             req.get("max_completion_tokens") or req.get("max_tokens"))
            counts["samples"] += n
            counts["correct"] += n_correct * (n // draws)
            if item is None:
                self.unknown_problems += 1
        elif role == "rewriter":
            malformed = [attempt.random() < w.rewriter_malformed_rate for _ in range(draws)]
            counts["malformed_children"] += sum(malformed)
            replies = roles.rewrite(w, prompt, prompt_hash, seed, draws, malformed)
        else:
            replies = roles.judge(w, prompt, prompt_hash, seed, draws)
        replies = replies * (n // draws)
        counts["successes"] += 1
        finished = [_cut(r, req) for r in replies]
        # as the client sees them: a stop string that ends a reply first makes it no cut one
        counts["cut_replies"] += sum(isinstance(r, habits.Cut) and why == "length"
                                     for r, (_, why) in zip(replies, finished, strict=True))
        prompt_tokens = len(prompt) // 4 + 1
        completion_tokens = sum(len(r) // 4 + 1 for r, _ in finished)
        self._served += 1
        body = {
            # one id per completion (tracing and caching tools key on it), the prompt's hash in it
            "id": f"chatcmpl-sim-{prompt_hash[:12]}-{seed if seed is not None else 'x'}-{self._served:x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "benchfill-sim",
            "choices": [{"index": i, "message": {"role": "assistant", "content": r}, "finish_reason": why,
                         "logprobs": None} for i, (r, why) in enumerate(finished)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        await _respond(send, 200, _dumps(body))

    async def _fault(self, kind: str, receive: Any, send: Any) -> None:
        w = self.world
        if kind == "429":
            retry = w.retry_after_s
            headers = [(b"retry-after", str(max(int(retry + 0.999), 0)).encode()),
                       (b"retry-after-ms", str(int(retry * 1000)).encode())]
            await _respond(send, *_error(429, "Rate limit reached (simulated).", "rate_limit_error",
                                         "rate_limit_exceeded"), headers)
        elif kind == "500":
            await _respond(send, *_error(500, "The server had an error (simulated).", "server_error"))
        elif kind == "malformed":
            await _respond(send, 200, b'{"id": "chatcmpl-sim", "object": "chat.completion", "choices": [{"ind')
        else:  # timeout: hold the connection until the client gives up (or hold_s passes)
            try:
                await asyncio.wait_for(_until_disconnect(receive), w.timeout_hold_s)
            except TimeoutError:
                await _respond(send, *_error(504, "Gateway timeout (simulated).", "server_error"))


class _LazyRandom:
    """A ``random.Random(seed)`` made on its first draw."""

    __slots__ = ("seed", "_rng")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng: random.Random | None = None

    def random(self) -> float:
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return self._rng.random()


def _pick(mix: dict[str, float], u: float) -> str:
    total = sum(mix.values())
    acc = 0.0
    for kind, weight in mix.items():
        acc += weight / total
        if u < acc:
            return kind
    return next(iter(mix))


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


async def _body(receive: Any) -> bytes | None:
    """The request's body; None past ``_MAX_BODY`` (the rest is read and dropped)."""
    chunks, size = [], 0
    while True:
        msg = await receive()
        part = msg.get("body", b"")
        size += len(part)
        if size <= _MAX_BODY:
            chunks.append(part)
        if not msg.get("more_body"):
            return b"".join(chunks) if size <= _MAX_BODY else None


def _bad_parameter(req: dict, model: Any, messages: Any, n: Any) -> str | None:
    """What a request asks that the world cannot do, or gives a value no server takes; None if nothing."""
    if not isinstance(model, str):
        return "'model': a model id (a string)"
    if not isinstance(messages, list) or not messages:
        return "'messages': a non-empty list of messages"
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 256:
        return f"'n': a whole number in 1..256, got {n!r}"
    for key, what in _UNSUPPORTED.items():
        if req.get(key) not in (None, False, [], 0, "none"):
            return f"'{key}': benchfill's simulated world does not serve {what}; ask without it"
    fmt = req.get("response_format")
    if fmt not in (None, {"type": "text"}):
        return "'response_format': only text is served by benchfill's simulated world"
    seed = req.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        return f"'seed': a whole number, got {seed!r}"
    temperature = req.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= 2):
        return f"'temperature': a number in [0, 2], got {temperature!r}"
    for key in ("max_tokens", "max_completion_tokens"):
        value = req.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"'{key}': a whole number of at least 1, got {value!r}"
    stop = req.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(x, str) for x in stop)):
        return f"'stop': a string or a list of strings, got {stop!r}"
    return None


def _cut(reply: str, req: dict) -> tuple[str, str]:
    """A reply and its finish reason under the request's stop strings and token cap (a token is taken as four
    characters, as the usage counts them). A reply the world wrote as cut (``habits.Cut``) ran out of tokens
    whatever the cap: a real server cuts at the context's end where a request sets none."""
    ran_out = isinstance(reply, habits.Cut)
    stop = req.get("stop")
    for s in [stop] if isinstance(stop, str) else stop or []:
        at = reply.find(s) if s else -1
        if at >= 0:
            reply, ran_out = reply[:at], False
    cap = req.get("max_completion_tokens") or req.get("max_tokens")
    if cap is not None and len(reply) // 4 + 1 > cap:  # (the usage's count: cut to what counts as the cap)
        return reply[:cap * 4 - 1], "length"
    return str(reply), "length" if ran_out else "stop"


async def _until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _respond(send: Any, status: int, body: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": _JSON + [(b"content-length", str(len(body)).encode())] + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def uvicorn_config(app: SimApp, **kw: Any):
    import importlib.util

    from benchfill.asgi import quiet_config

    fast = {"loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11"}
    # proxy_headers off: nothing stands in front of the simulated world, and uvicorn's proxy
    # middleware would inspect every request's headers for nothing.
    return quiet_config(app, lifespan="off", proxy_headers=False, timeout_graceful_shutdown=1, **fast, **kw)


def sim_uvicorn_server(app: SimApp, **kw: Any):
    """A uvicorn server for the world whose stop (a signal, or ``should_exit``) first answers every request
    still waiting out its latency 503 (``SimApp.begin_stop``)."""
    import uvicorn

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.begin_stop()
            super().handle_exit(sig, frame)

    return _Server(uvicorn_config(app, **kw))


class SimServer:
    """Run the world's server in a background thread: ``with SimServer(world) as s: s.base_url``."""

    def __init__(self, world: World, host: str = "127.0.0.1", port: int = 0) -> None:
        self.world = world
        self.host = host
        self.port = port
        self.app = SimApp(world)
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def stats(self) -> dict[str, Any]:
        return self.app.snapshot()

    def start(self) -> SimServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            # Listening here, not in uvicorn's thread: with SO_REUSEADDR two processes may both bind a port
            # that neither listens on yet, and the second listen() fails. It must fail here, where the caller
            # sees it (a busy port), not in the thread, after start() has returned.
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._server = sim_uvicorn_server(self.app)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"benchfill-sim:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("simulated server failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self.app.begin_stop()
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = self._thread = None

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
