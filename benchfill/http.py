"""A lean HTTP client under the openai SDK: one aiohttp session, no httpx machinery per request.

The SDK accepts any ``httpx2.AsyncClient`` as ``http_client`` and calls only its ``send`` for each
request it has built (URL, auth headers, JSON body, timeouts). ``httpx2.AsyncClient.send`` then runs
auth flows, redirect handling, event hooks and the transport's request/response conversions; for
the plain POSTs of probe rollouts none of those do anything, yet together they cost about 0.3 ms of
CPU per request, a quarter of the whole client (bench/bench_traffic.py). ``LeanAioHttpClient.send``
hands the request the SDK built straight to aiohttp (keep-alive pool, C-accelerated parser) and
wraps the reply in an ``httpx2.Response`` so the SDK's status checks, error mapping and parsing run
unchanged. Failures come back as the httpx2 exceptions the SDK expects, so timeouts surface as
``APITimeoutError`` and dropped connections as ``APIConnectionError``.

Bodies are read whole: a ``stream=True`` request gets its body once the server has finished, which
is right for what benchfill asks (non-streamed completions) and still correct, only not
incremental, for anything else.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import aiohttp
import httpx2

__all__ = ["LeanAioHttpClient"]

# aiohttp failures -> the httpx2 exceptions the openai SDK sorts into timeouts and connection errors.
# Order matters: the first match wins, most specific first.
_ERRORS: tuple[tuple[type[BaseException], type[httpx2.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx2.ConnectTimeout),
    (aiohttp.SocketTimeoutError, httpx2.ReadTimeout),
    (aiohttp.ServerTimeoutError, httpx2.ReadTimeout),
    (asyncio.TimeoutError, httpx2.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx2.ConnectError),
    (aiohttp.ClientPayloadError, httpx2.RemoteProtocolError),
    (aiohttp.ServerDisconnectedError, httpx2.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx2.RemoteProtocolError),
    (aiohttp.InvalidURL, httpx2.UnsupportedProtocol),
    (aiohttp.ClientError, httpx2.NetworkError),
    (OSError, httpx2.NetworkError),
)


# aiohttp has already undone these; httpx2 would undo them again (and sets its own length).
_DROP = (b"content-encoding", b"transfer-encoding", b"content-length")


class LeanAioHttpClient(httpx2.AsyncClient):
    """``openai.AsyncOpenAI(http_client=LeanAioHttpClient(max_connections=64))``.

    ``max_connections`` caps the keep-alive pool (size it to the requests you let through at once);
    ``keepalive_s`` is how long an idle connection is kept.
    """

    def __init__(self, *, max_connections: int = 100, keepalive_s: float = 30.0, **kwargs: Any):
        super().__init__(**kwargs)
        # Nothing of the client's own to merge into each request (the SDK sends its own headers):
        # then build_request can skip httpx2's merging of headers, cookies and query parameters.
        self._plain = not any(kwargs.get(k) for k in ("headers", "cookies", "params", "auth", "base_url"))
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._aio_session: aiohttp.ClientSession | None = None
        self._aio_timeouts: dict[tuple, aiohttp.ClientTimeout] = {}
        self._aio_urls: dict[str, httpx2.URL] = {}

    def _aio_open(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop, as aiohttp requires.
        connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=self._keepalive_s)
        self._aio_session = aiohttp.ClientSession(connector=connector, auto_decompress=True,
                                              skip_auto_headers=("User-Agent",))
        return self._aio_session

    def _aio_timeout(self, request: httpx2.Request) -> aiohttp.ClientTimeout:
        t = request.extensions.get("timeout") or self.timeout.as_dict()
        key = (t.get("connect"), t.get("read"), t.get("pool"))
        got = self._aio_timeouts.get(key)
        if got is None:  # a handful of distinct settings per run: build each once
            got = self._aio_timeouts[key] = aiohttp.ClientTimeout(sock_connect=key[0], sock_read=key[1], connect=key[2])
        return got

    def build_request(self, method: str, url: httpx2.URL | str, *, content: Any = None, data: Any = None,
                      files: Any = None, json: Any = None, params: Any = None, headers: Any = None,
                      cookies: Any = None, timeout: Any = httpx2.USE_CLIENT_DEFAULT,
                      extensions: dict | None = None) -> httpx2.Request:
        parsed = self._aio_urls.get(url) if isinstance(url, str) else url
        if parsed is None:
            # The SDK sends the same few absolute URLs as strings, and httpx2 spends ~70 us parsing
            # each one: parse a URL once (httpx2.URL is immutable, so sharing it is safe).
            parsed = httpx2.URL(url)
            if len(self._aio_urls) < 1024:
                self._aio_urls[url] = parsed
        if not (self._plain and data is None and not files and not params and not cookies
                and parsed.is_absolute_url):
            return super().build_request(method, url, content=content, data=data, files=files, json=json,
                                         params=params, headers=headers, cookies=cookies, timeout=timeout,
                                         extensions=extensions)
        url = parsed
        extensions = {} if extensions is None else extensions
        if "timeout" not in extensions:
            t = self.timeout if timeout is httpx2.USE_CLIENT_DEFAULT else httpx2.Timeout(timeout)
            extensions = {**extensions, "timeout": t.as_dict()}
        return httpx2.Request(method, url, content=content, json=json, headers=headers, extensions=extensions)

    async def send(self, request: httpx2.Request, *, stream: bool = False, auth: Any = None,
                   **kwargs: Any) -> httpx2.Response:
        if auth is not None:  # an auth flow (the SDK's custom_auth) is httpx2's to run, not ours
            return await super().send(request, stream=stream, auth=auth, **kwargs)
        session = self._aio_session if self._aio_session is not None and not self._aio_session.closed else self._aio_open()
        t0 = time.perf_counter()
        try:
            body = request.content or None
        except httpx2.RequestNotRead:
            body = await request.aread() or None
        headers = request.headers
        try:
            async with session.request(request.method, str(request.url), headers=headers.multi_items(), data=body,
                                       allow_redirects=False, timeout=self._aio_timeout(request)) as resp:
                content = await resp.read()
                raw_headers = [(k, v) for k, v in resp.raw_headers
                               if k.lower() not in _DROP]
                status = resp.status
        except Exception as exc:
            for source, target in _ERRORS:
                if isinstance(exc, source):
                    raise target(f"{type(exc).__name__}: {exc}", request=request) from exc
            raise
        response = httpx2.Response(status, headers=raw_headers, content=content, request=request)
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - t0)
        return response

    async def aclose(self) -> None:
        if self._aio_session is not None:
            await self._aio_session.close()
            self._aio_session = None
        await super().aclose()
