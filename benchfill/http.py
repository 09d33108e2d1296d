"""A lean HTTP/1.1 client under the openai SDK, for probe traffic to plain-HTTP model servers.

The SDK accepts any ``httpx2.AsyncClient`` as ``http_client`` and calls only its ``build_request``
and ``send`` for each request it has built (URL, auth headers, JSON body, timeouts).
``httpx2.AsyncClient.send`` then runs auth flows, redirect handling, event hooks and the transport's
request/response conversions, and a general client library (httpx's pool, aiohttp's session) adds
its own request and response objects on top; for the plain keep-alive POSTs of probe rollouts to a
vLLM server none of that does anything, yet it was over a quarter of a probe worker's CPU
(bench/bench_traffic.py). ``LeanHttpClient.send`` writes the request the SDK built onto a pooled
keep-alive connection (an asyncio protocol), parses the reply with httptools (llhttp, the C parser
uvicorn uses) and hands back an ``httpx2.Response``, so the SDK's status checks, error mapping and
parsing run unchanged. Failures come back as the httpx2 exceptions the SDK expects: timeouts surface
as ``APITimeoutError``, refused and dropped connections as ``APIConnectionError``.

What it does not do, it leaves to httpx2's own ``send`` (the SDK's default stack): ``https``
endpoints (TLS, certificates), endpoints reached through a proxy named in the environment,
requests carrying an auth flow, and methods other than POST and GET. Bodies are read whole: a
``stream=True`` request gets its body once the server has finished, which is right for what
benchfill asks (non-streamed completions) and still correct, only not incremental, for anything else.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import urllib.request
from typing import Any

import httptools
import httpx2

__all__ = ["LeanHttpClient"]

class _Stale(Exception):
    """A reused keep-alive connection was closed by the server before any byte of the reply."""


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: one request at a time, the reply parsed as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.waiter: asyncio.Future | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.headers_done = False
        self.got_bytes = False
        self.until_close = False  # no length and not chunked: the body ends when the server closes
        self.keep_alive = False
        self.last_read = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.read_timeout: float | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():  # bytes nobody asked for: the connection is unusable
            self.abort()
            return
        self.got_bytes = True
        self.last_read = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx2.RemoteProtocolError("the server switched protocols; not supported here"))
        except httptools.HttpParserError as exc:
            self._fail(httpx2.RemoteProtocolError(f"malformed HTTP reply: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if self.headers_done and self.until_close:
            self.on_message_complete()
        elif not self.got_bytes and self.reused:
            self._fail(_Stale())
        else:
            self._fail(httpx2.RemoteProtocolError(
                "Server disconnected without sending a complete response"
                + (f" ({type(exc).__name__}: {exc})" if exc else "")))

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.waiter is None or self.waiter.done():  # a second reply to one request: never reuse this
            self.abort()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.status = self.parser.get_status_code()
        names = {k.lower() for k, _ in self.headers}
        if b"transfer-encoding" in names:  # framing the parser has undone: not the reply's to carry
            self.headers = [(k, v) for k, v in self.headers if k.lower() != b"transfer-encoding"]
        self.until_close = (b"content-length" not in names and b"transfer-encoding" not in names
                            and self.status >= 200 and self.status not in (204, 304))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:  # an interim reply (100 Continue): the real one follows
            self.headers, self.body, self.headers_done = [], [], False
            return
        self.keep_alive = not self.until_close and self.parser.should_keep_alive()
        self._cancel_timer()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.status, self.headers, b"".join(self.body)))
            self.headers, self.body = [], []  # what was handed over stays as it is

    # -- used by LeanHttpClient -------------------------------------------------------------------
    def request(self, data: bytes, read_timeout: float | None) -> asyncio.Future:
        self.status, self.headers, self.body = 0, [], []
        self.headers_done = self.got_bytes = self.until_close = self.keep_alive = False
        self.waiter = self.loop.create_future()
        self.read_timeout = read_timeout
        if read_timeout is not None:
            self.last_read = self.loop.time()
            self.timer = self.loop.call_at(self.last_read + read_timeout, self._check_timeout)
        self.transport.write(data)
        return self.waiter

    def done(self) -> None:
        """The reply has been taken: ready for the next request, or closed if it cannot be."""
        self.waiter = None
        self.reused = True
        if not self.keep_alive:
            self.abort()

    def abort(self) -> None:
        self.closed = True
        self._cancel_timer()
        if self.transport is not None:
            try:
                self.transport.abort()
            except RuntimeError:  # its event loop has ended (a client reused across asyncio.run calls)
                pass

    def _check_timeout(self) -> None:
        # Re-armed from the last read rather than on every read: one timer per reply, not per chunk.
        self.timer = None
        if self.waiter is None or self.waiter.done():
            return
        due = self.last_read + self.read_timeout
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._check_timeout)
            return
        self._fail(httpx2.ReadTimeout(f"no reply within {self.read_timeout:g} s"))

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fail(self, exc: BaseException) -> None:
        waiter = self.waiter
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


class LeanHttpClient(httpx2.AsyncClient):
    """``openai.AsyncOpenAI(http_client=LeanHttpClient(max_connections=64))``.

    ``max_connections`` caps the open connections (size it to the requests you let through at
    once); requests beyond it wait for one, up to the ``pool`` timeout.
    """

    def __init__(self, *, max_connections: int = 100, **kwargs: Any):
        # What httpx2 sends itself (https, proxied, auth flows) gets the same bound.
        kwargs.setdefault("limits", httpx2.Limits(max_connections=max_connections,
                                                  max_keepalive_connections=max_connections))
        super().__init__(**kwargs)
        # Nothing of the client's own to merge into each request (the SDK sends its own headers):
        # then build_request can skip httpx2's merging of headers, cookies and query parameters.
        self._plain = not any(kwargs.get(k) for k in ("headers", "cookies", "params", "auth", "base_url"))
        # A proxy or transport given here is httpx2's to use, for every request.
        self._passthrough = any(kwargs.get(k) for k in ("proxy", "mounts", "transport"))
        self._max_connections = max_connections
        self._urls: dict[str, httpx2.URL] = {}
        self._direct: dict[tuple[bytes, bytes, int | None], bool] = {}
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open: set[_Connection] = set()

    def build_request(self, method: str, url: httpx2.URL | str, *, content: Any = None, data: Any = None,
                      files: Any = None, json: Any = None, params: Any = None, headers: Any = None,
                      cookies: Any = None, timeout: Any = httpx2.USE_CLIENT_DEFAULT,
                      extensions: dict | None = None) -> httpx2.Request:
        parsed = self._urls.get(url) if isinstance(url, str) else url
        if parsed is None:
            # The SDK sends the same few absolute URLs as strings, and httpx2 spends ~70 us parsing
            # each one: parse a URL once (httpx2.URL is immutable, so sharing it is safe).
            parsed = httpx2.URL(url)
            if len(self._urls) < 1024:
                self._urls[url] = parsed
        if not (self._plain and data is None and not files and not params and not cookies
                and parsed.is_absolute_url):
            return super().build_request(method, url, content=content, data=data, files=files, json=json,
                                         params=params, headers=headers, cookies=cookies, timeout=timeout,
                                         extensions=extensions)
        extensions = {} if extensions is None else extensions
        if "timeout" not in extensions:
            t = self.timeout if timeout is httpx2.USE_CLIENT_DEFAULT else httpx2.Timeout(timeout)
            extensions = {**extensions, "timeout": t.as_dict()}
        return httpx2.Request(method, parsed, content=content, json=json, headers=headers, extensions=extensions)

    def _is_direct(self, url: httpx2.URL) -> bool:
        """Plain HTTP with no proxy in the way: what this client sends itself."""
        key = (url.raw_scheme, url.raw_host, url.port)
        got = self._direct.get(key)
        if got is None:
            got = url.scheme == "http" and not self._passthrough
            if got and self._trust_env:  # a proxy named in the environment is httpx2's to use
                proxies = urllib.request.getproxies()
                got = not (proxies.get("http") or proxies.get("all")) or bool(
                    urllib.request.proxy_bypass(url.host))
            self._direct[key] = got
        return got

    async def send(self, request: httpx2.Request, *, stream: bool = False, auth: Any = None,
                   **kwargs: Any) -> httpx2.Response:
        url = request.url
        if auth is not None or request.method not in ("POST", "GET") or not self._is_direct(url):
            return await super().send(request, stream=stream, auth=auth, **kwargs)
        t0 = time.perf_counter()
        try:
            body = request.content
        except httpx2.RequestNotRead:
            body = await request.aread()
        raw = request.headers.raw
        head = b"".join([request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n",
                         *[b"%s: %s\r\n" % kv for kv in raw], b"\r\n"])
        if head.count(b"\n") != len(raw) + 2 or head.count(b"\r") != len(raw) + 2:
            raise httpx2.LocalProtocolError("a header name or value holds a line break", request=request)
        timeouts = request.extensions.get("timeout") or self.timeout.as_dict()
        origin = (url.host, url.port or 80)
        for attempt in (0, 1):
            conn = await self._checkout(origin, timeouts, request)
            try:
                status, headers, content = await conn.request(head + body, timeouts.get("read"))
            except _Stale:
                # The server closed an idle keep-alive connection just as it was reused, before it
                # read the request: send it once more on a new connection, as browsers do.
                if attempt == 0:
                    continue
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response",
                                                 request=request) from None
            except httpx2.TransportError as exc:
                exc.request = request
                raise
            finally:
                self._checkin(origin, conn)
            break
        response = httpx2.Response(status, headers=headers, content=content, request=request)
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - t0)
        return response

    async def _checkout(self, origin: tuple[str, int], timeouts: dict, request: httpx2.Request) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop: connections of an old one are dead
            self._drop_all()
            self._loop, self._slots = loop, asyncio.Semaphore(self._max_connections)
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), timeouts.get("pool"))
            except TimeoutError:
                raise httpx2.PoolTimeout(f"no free connection within {timeouts.get('pool'):g} s",
                                         request=request) from None
        else:
            await self._slots.acquire()
        try:
            idle = self._idle.get(origin)
            while idle:
                conn = idle.pop()
                if not conn.closed:
                    return conn
                self._open.discard(conn)
            return await self._connect(loop, origin, timeouts.get("connect"), request)
        except BaseException:
            self._slots.release()
            raise

    async def _connect(self, loop: asyncio.AbstractEventLoop, origin: tuple[str, int], timeout: float | None,
                       request: httpx2.Request) -> _Connection:
        conn = _Connection(loop)
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, *origin), timeout)
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"no connection to {origin[0]}:{origin[1]} within {timeout:g} s",
                                        request=request) from None
        except OSError as exc:
            raise httpx2.ConnectError(f"{type(exc).__name__}: {exc}", request=request) from exc
        self._open.add(conn)
        return conn

    def _checkin(self, origin: tuple[str, int], conn: _Connection) -> None:
        # A reply not taken (cancelled, failed) leaves the connection mid-exchange: never reuse it.
        if conn.waiter is None or not conn.waiter.done() or conn.waiter.cancelled() or conn.waiter.exception():
            conn.waiter = None
            conn.abort()
        else:
            conn.done()
        if conn.closed:
            self._open.discard(conn)
        else:
            self._idle.setdefault(origin, []).append(conn)
        self._slots.release()

    def _drop_all(self) -> None:
        for conn in self._open:
            conn.abort()
        self._open.clear()
        self._idle.clear()

    async def aclose(self) -> None:
        self._drop_all()
        await super().aclose()
