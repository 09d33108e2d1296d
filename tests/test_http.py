"""benchfill.http.LeanHttpClient against a scripted HTTP/1.1 server on loopback.

The server runs in the test's own event loop and answers each request with the reply a test gives
for it (raw bytes, so framing, keep-alive and failures are exact). It counts connections and
requests, so reuse, bounds and retries are checked, not assumed.
"""

from __future__ import annotations

import asyncio
import gzip

import httpx2
import openai
import pytest

from benchfill.http import LeanHttpClient


def reply(body: bytes = b'{"ok": true}', status: str = "200 OK", headers: tuple = (), length: bool = True) -> bytes:
    head = [f"HTTP/1.1 {status}".encode(), b"content-type: application/json", *headers]
    if length:
        head.append(b"content-length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class Scripted:
    """``async with Scripted(answer) as srv``: ``answer(n, conn, request) -> bytes | None | "close"``.

    ``n`` counts requests over the server's life, ``conn`` connections; bytes are written back,
    ``"close"`` closes the connection without a reply, ``(bytes, "close")`` writes and then closes,
    ``None`` holds the connection open until the client goes.
    """

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self.open = self.peak_open = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                out = self.answer(len(self.requests), conn, request)
                if asyncio.iscoroutine(out):
                    out = await out
                if out == "close":
                    return
                if isinstance(out, tuple):  # (bytes, "close"): write, then close
                    writer.write(out[0])
                    await writer.drain()
                    return
                if out is None:
                    await reader.read()  # hold until the client goes
                    return
                writer.write(out)
                await writer.drain()
        finally:
            self.open -= 1
            writer.close()


def post(client: LeanHttpClient, url: str, body: bytes = b'{"q": 1}', **timeouts) -> asyncio.Future:
    t = httpx2.Timeout(timeouts.pop("timeout", 5.0), **timeouts)
    req = client.build_request("POST", f"{url}/v1/chat/completions", content=body,
                               headers={"Content-Type": "application/json"}, timeout=t)
    return client.send(req)


def exchange(answer, count: int) -> tuple[list[httpx2.Response], Scripted]:
    """``count`` requests, one after another, through a fresh client to a server answering ``answer``."""
    async def go():
        async with Scripted(answer) as srv:
            client = LeanHttpClient()
            out = [await post(client, srv.url, b'{"q": %d}' % i) for i in range(count)]
            await client.aclose()
            return out, srv

    return asyncio.run(go())


def test_keep_alive_reuses_one_connection_and_the_request_arrives_intact():
    out, srv = exchange(lambda n, c, r: reply(b'{"n": %d}' % n), 20)
    assert [r.json()["n"] for r in out] == list(range(1, 21)) and srv.connections == 1
    first = srv.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in first and first.endswith(b'\r\n\r\n{"q": 0}')


def test_chunked_gzip_and_read_until_close_bodies_are_decoded():
    payload = b'{"text": "' + b"x" * 5000 + b'"}'
    packed = gzip.compress(payload)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(packed[i:i + 700]), packed[i:i + 700])
                       for i in range(0, len(packed), 700)) + b"0\r\n\r\n"

    def answer(n, c, r):
        if n == 1:
            return reply(chunked, headers=(b"transfer-encoding: chunked", b"content-encoding: gzip"), length=False)
        if n == 2:  # no length, not chunked: the body is whatever comes before the close
            return reply(payload, headers=(b"connection: close",), length=False), "close"
        return reply(payload)

    out, srv = exchange(answer, 3)
    assert all(r.status_code == 200 and r.content == payload for r in out)
    assert "transfer-encoding" not in out[0].headers
    assert srv.connections == 2  # the read-until-close reply ended its connection


def test_connection_close_is_honoured_and_an_interim_100_is_skipped():
    def answer(n, c, r):
        if n == 1:
            return reply(headers=(b"connection: close",))
        return b"HTTP/1.1 100 Continue\r\n\r\n" + reply(b'{"n": 2}')

    (a, b), srv = exchange(answer, 2)
    assert a.json() == {"ok": True} and b.json() == {"n": 2} and srv.connections == 2


def test_a_connection_that_sent_two_replies_to_one_request_is_not_reused():
    def answer(n, c, r):
        return reply(b'{"n": %d}' % n) + (reply(b'{"extra": 1}') if n == 1 else b"")

    (a, b), srv = exchange(answer, 2)
    assert a.json() == {"n": 1} and b.json() == {"n": 2} and srv.connections == 2
    assert "extra" not in a.text and a.headers["content-length"] == "8"


def test_a_keep_alive_connection_closed_by_the_server_is_retried_once_on_a_new_one():
    # The server reads the second request on the reused connection and closes without a reply
    # (its keep-alive timeout struck): the client sends it again on a new connection.
    def answer(n, c, r):
        return "close" if n == 2 else reply(b'{"n": %d}' % n)

    (a, b), srv = exchange(answer, 2)
    assert a.json() == {"n": 1} and b.json() == {"n": 3} and srv.connections == 2


def test_a_new_connection_dropped_before_the_reply_is_not_retried():
    async def go():
        async with Scripted(lambda n, c, r: "close") as srv:
            client = LeanHttpClient()
            with pytest.raises(httpx2.RemoteProtocolError, match="without sending a complete response"):
                await post(client, srv.url)
            await client.aclose()
            return srv

    assert len(asyncio.run(go()).requests) == 1


def test_failures_map_to_httpx2_errors():
    half = reply(b'{"text": "' + b"y" * 100)[:-20]  # promises more than it sends
    script = {1: None, 2: (half, "close"), 3: b"NOT HTTP AT ALL\r\n\r\n"}

    async def go():
        async with Scripted(lambda n, c, r: script[n]) as srv:
            client = LeanHttpClient()
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(httpx2.ReadTimeout):  # 1: no reply at all
                await post(client, srv.url, timeout=0.3)
            waited = loop.time() - t0
            with pytest.raises(httpx2.RemoteProtocolError, match="complete response"):  # 2: cut short
                await post(client, srv.url)
            with pytest.raises(httpx2.RemoteProtocolError, match="malformed HTTP reply"):  # 3: not HTTP
                await post(client, srv.url)
            await client.aclose()
            with pytest.raises(httpx2.ConnectError):
                await post(LeanHttpClient(), "http://127.0.0.1:9")
            return waited, srv

    waited, srv = asyncio.run(go())
    assert 0.25 < waited < 2.0 and srv.connections == 3  # a failed exchange never reuses its connection


def test_open_connections_stay_within_the_bound_and_a_full_pool_times_out():
    async def slow(n, c, r):
        await asyncio.sleep(0.05)
        return reply(b'{"n": %d}' % n)

    async def go():
        async with Scripted(slow) as srv:
            client = LeanHttpClient(max_connections=3)
            got = await asyncio.gather(*(post(client, srv.url) for _ in range(24)))
            assert sorted(r.json()["n"] for r in got) == list(range(1, 25))
            assert srv.peak_open == 3
            one = LeanHttpClient(max_connections=1)
            first = asyncio.ensure_future(post(one, srv.url))
            await asyncio.sleep(0.01)
            with pytest.raises(httpx2.PoolTimeout):
                await post(one, srv.url, timeout=5.0, pool=0.01)
            assert (await first).status_code == 200
            await client.aclose()
            await one.aclose()
            return srv

    srv = asyncio.run(go())
    assert srv.connections == 4  # 3, reused for 24 requests, and the second client's one


def test_a_cancelled_request_frees_its_slot_and_its_connection_is_not_reused():
    def answer(n, c, r):
        return None if n == 1 else reply(b'{"n": %d}' % n)

    async def go():
        async with Scripted(answer) as srv:
            client = LeanHttpClient(max_connections=1)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(post(client, srv.url), 0.1)
            after = await post(client, srv.url, pool=1.0)
            await client.aclose()
            return after, srv

    after, srv = asyncio.run(go())
    assert after.json() == {"n": 2} and srv.connections == 2


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent():
    async def go():
        async with Scripted(lambda n, c, r: reply()) as srv:
            client = LeanHttpClient()
            req = client.build_request("POST", f"{srv.url}/v1/chat/completions", content=b"{}")
            req.headers["X-Bad"] = "a\r\nInjected: 1"
            with pytest.raises(httpx2.LocalProtocolError):
                await client.send(req)
            await client.aclose()
            return srv

    assert asyncio.run(go()).requests == []


def test_https_and_proxied_endpoints_are_left_to_httpx2(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    client = LeanHttpClient()
    assert client._is_direct(httpx2.URL("http://127.0.0.1:8000/v1"))
    assert not client._is_direct(httpx2.URL("https://api.example.com/v1"))
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "gpu-host")
    fresh = LeanHttpClient()
    assert not fresh._is_direct(httpx2.URL("http://10.0.0.5:8000/v1"))
    assert fresh._is_direct(httpx2.URL("http://gpu-host:8000/v1"))
    assert LeanHttpClient(trust_env=False)._is_direct(httpx2.URL("http://10.0.0.5:8000/v1"))
    explicit = LeanHttpClient(trust_env=False, proxy="http://proxy.internal:3128")
    assert not explicit._is_direct(httpx2.URL("http://10.0.0.5:8000/v1"))


def test_one_client_serves_successive_event_loops():
    client = LeanHttpClient()

    async def go(url):
        return (await post(client, url)).status_code

    async def both():
        async with Scripted(lambda n, c, r: reply()) as srv:
            return srv.url, await go(srv.url)

    for _ in range(2):
        assert asyncio.run(both())[1] == 200



def test_a_connection_still_open_when_its_loop_ended_is_dropped_not_reused():
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def answer(conn):  # replies to each request and never closes: the client must let go
        buf = b""
        try:
            while data := conn.recv(65536):
                buf += data
                while b"\r\n\r\n" in buf:
                    head, _, rest = buf.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    buf = rest[length:]
                    conn.sendall(reply())
        except OSError:  # the test closed the socket under it: done
            pass

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    client = LeanHttpClient()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    async def one():
        return (await post(client, url)).status_code

    try:
        assert [asyncio.run(one()) for _ in range(3)] == [200, 200, 200]
        assert len(accepted) == 3  # one connection per loop; none of an ended loop was written to
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


def test_the_openai_sdk_over_it_gets_typed_results_and_its_own_error_types():
    def answer(n, c, r):
        if b"/models" in r.split(b"\r\n")[0]:
            return reply(b'{"object": "list", "data": [{"id": "m1", "object": "model", "created": 0, '
                         b'"owned_by": "me"}]}')
        if n == 2:
            return reply(b'{"error": {"message": "slow down", "type": "rate_limit_error"}}',
                         status="429 Too Many Requests")
        return reply(b'{"id": "c", "object": "chat.completion", "created": 0, "model": "m1", "choices": '
                     b'[{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], '
                     b'"usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}')

    async def go():
        async with Scripted(answer) as srv:
            sdk = openai.AsyncOpenAI(base_url=f"{srv.url}/v1", api_key="sk-test-not-real", max_retries=0,
                                     http_client=LeanHttpClient())
            models = await sdk.models.list()
            with pytest.raises(openai.RateLimitError, match="slow down"):
                await sdk.chat.completions.create(model="m1", messages=[{"role": "user", "content": "q"}])
            done = await sdk.chat.completions.create(model="m1", messages=[{"role": "user", "content": "q"}])
            await sdk.close()
            return models, done, srv

    models, done, srv = asyncio.run(go())
    assert [m.id for m in models.data] == ["m1"] and done.choices[0].message.content == "hi"
    assert done.usage.total_tokens == 4 and srv.connections == 1
    assert srv.requests[0].startswith(b"GET /v1/models HTTP/1.1\r\n")
    assert b"authorization: bearer sk-test-not-real" in srv.requests[1].lower()


def test_a_proxied_endpoint_goes_through_httpx2_and_its_proxy(monkeypatch):
    # The scripted server plays the proxy: httpx2 sends it the request in absolute form.
    for var in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)

    async def go():
        async with Scripted(lambda n, c, r: reply(b'{"via": "proxy"}')) as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            client = LeanHttpClient()
            got = await post(client, "http://gpu-host.internal:8000")
            await client.aclose()
            return got, proxy

    got, proxy = asyncio.run(go())
    assert got.json() == {"via": "proxy"}
    assert proxy.requests[0].startswith(b"POST http://gpu-host.internal:8000/v1/chat/completions HTTP/1.1\r\n")
