"""The review page over real HTTP on loopback: token, CSRF, Host check, escaping, loopback-only bind."""

from __future__ import annotations

import shutil
import socket
import subprocess

import conftest
import httpx
import pytest
from test_review_support import CHILD_IDS, SCRIPT_ID, make_run

from benchfill.review import ReviewBoard
from benchfill.review.server import ReviewServer


@pytest.fixture
def server(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewServer(run) as srv:
        yield srv


def _base(srv):
    return f"http://127.0.0.1:{srv.port}"


def test_requests_without_the_token_are_refused(server):
    base = _base(server)
    assert httpx.get(base + "/").status_code == 403
    assert httpx.get(base + "/?token=wrong").status_code == 403
    assert httpx.get(base + "/static/review.js").status_code == 403
    assert httpx.get(base + f"/item/{CHILD_IDS[0]}").status_code == 403
    r = httpx.post(base + "/api/decision", json={"item_id": CHILD_IDS[0], "reviewer": "x", "decision": "accept"})
    assert r.status_code == 403 and "restarted server prints a new one" in r.json()["error"]  # JSON for the script
    ok = httpx.get(server.url)
    assert ok.status_code == 200 and all(i in ok.text for i in CHILD_IDS)
    # no answer is sniffed into another type: a text/plain 404 that echoes an item id stays text
    missing = httpx.get(server.url.replace("/?", "/item/%3Cb%3Ex%3C%2Fb%3E?"))
    assert missing.status_code == 404 and missing.headers["x-content-type-options"] == "nosniff"
    assert ok.headers["x-content-type-options"] == "nosniff" and r.headers["x-content-type-options"] == "nosniff"
    assert "HttpOnly" in ok.headers["set-cookie"] and "SameSite=strict" in ok.headers["set-cookie"]
    # Named for this server: two review pages on 127.0.0.1 (cookies ignore the port) keep their own tokens.
    name = ok.headers["set-cookie"].split("=", 1)[0]
    assert name.startswith("benchfill_token_") and name != "benchfill_token_"
    with httpx.Client(base_url=base, cookies={"benchfill_token": server.token}) as c:  # another server's name
        assert c.get(f"/item/{CHILD_IDS[0]}").status_code == 403
    # The cookie alone opens pages, but a decision needs the token in a header (CSRF).
    with httpx.Client(base_url=base, cookies={name: server.token}) as c:
        assert c.get(f"/item/{CHILD_IDS[0]}").status_code == 200
        forged = c.post("/api/decision", json={"item_id": CHILD_IDS[0], "reviewer": "x", "decision": "accept"})
        assert forged.status_code == 403
    # A rebinding attack names another host: refused even with the token.
    assert httpx.get(server.url, headers={"Host": "evil.example:80"}).status_code == 403
    with ReviewBoard(server.board.run_dir) as b:
        assert b.decisions() == []


def test_decisions_reach_the_store_at_once(server):
    h = {"X-Benchfill-Token": server.token}
    url = _base(server) + "/api/decision"
    r = httpx.post(url, headers=h, json={"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "reject"})
    assert r.status_code == 400 and "'reason' is required" in r.json()["error"]
    r = httpx.post(url, headers=h, json={"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "reject",
                                          "reason": "ambiguous"})  # fmt: skip
    assert r.status_code == 200
    assert httpx.post(url, headers=h, content=b"not json").status_code == 400
    with ReviewBoard(server.board.run_dir) as b:  # a separate connection sees the committed row
        [d] = b.decisions()
        assert (d.item_id, d.reviewer, d.decision, d.reason, d.source) == (CHILD_IDS[1], "ann", "reject", "ambiguous", "page")


def test_item_text_is_shown_escaped(server):
    page = httpx.get(_base(server) + f"/item/{SCRIPT_ID}?token={server.token}")
    assert page.status_code == 200
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page.text
    assert "<script>alert" not in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert httpx.get(_base(server) + f"/item/nope?token={server.token}").status_code == 404


def _global_ipv4() -> list[str]:
    if not shutil.which("ip"):
        return []
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    return [line.split()[3].split("/")[0] for line in out.stdout.splitlines() if len(line.split()) > 3]


def test_listens_on_loopback_only(server):
    assert server.sock.getsockname()[0] == "127.0.0.1"
    for addr in _global_ipv4():  # this machine's other interfaces: nothing listens there
        s = socket.socket()
        s.settimeout(2)
        try:
            with pytest.raises(OSError):
                conftest._real_connect(s, (addr, server.port))
        finally:
            s.close()
