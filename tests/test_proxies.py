"""The HTTP environment a user's shell gives a run: a proxy, a LiteLLM gateway switch, a CA bundle.

A shell set up for a corporate proxy sent every prompt of an offline simulated run (the benchmark's items)
to that proxy; a missing SSL_CERT_FILE crashed an http-only run with a traceback; USE_LITELLM_PROXY sent
the rewriter's calls to a LiteLLM gateway instead of the simulated world.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest

from benchfill import proxies
from benchfill.errors import ConfigError

PROXY = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy")


class CountingProxy:
    """A proxy on loopback that counts the connections it is given and answers each with a 502, as a
    corporate proxy that cannot reach the target does."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.seen += 1
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def close(self):
        self.sock.close()


@pytest.fixture
def clean_env(monkeypatch):
    for var in (*PROXY, "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "USE_LITELLM_PROXY"):
        monkeypatch.setenv(var, "")  # recorded as it was (absent): what the code under test sets is undone too
        monkeypatch.delenv(var)
    return monkeypatch


def test_a_simulated_run_never_goes_through_the_shells_proxy(tmp_path, clean_env, capsys):
    from benchfill.cli import main

    proxy = CountingProxy()
    try:
        for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
            clean_env.setenv(var, proxy.url)
        clean_env.setenv("NO_PROXY", "localhost,.corp.example")  # a usual corporate setting: not 127.0.0.1
        rc = main(["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1", "--parents", "2",
                   "--children", "2", "--runs-dir", str(tmp_path), "--run-id", "r", "--quiet"])
        assert rc == 0, capsys.readouterr().err
        assert proxy.seen == 0  # not one prompt went to the proxy
        report = json.loads((tmp_path / "r" / "report.json").read_text())
        # the probes' calls (the openai SDK's aiohttp) and the rewriter's and judge's (litellm) all went direct
        assert report["backend"]["traffic"]["calls"] > 0 and report["spend"]["rewriter_calls"] > 0
        assert report["spend"]["judge_calls"] > 0
    finally:
        proxy.close()
    import os

    # the user's own entries kept; no lower-case one made, which would shadow a NO_PROXY a host sets later
    assert os.environ["NO_PROXY"].split(",") == ["localhost", ".corp.example", "127.0.0.1", "::1", "0.0.0.0",
                                                 "127.0.0.0/8"]
    assert "no_proxy" not in os.environ


def test_loopback_is_added_to_no_proxy_only_where_a_proxy_is_set(clean_env):
    import os

    proxies.direct_loopback()
    assert "NO_PROXY" not in os.environ and "no_proxy" not in os.environ  # no proxy: nothing touched
    clean_env.setenv("https_proxy", "http://proxy.corp.example:3128")
    clean_env.setenv("no_proxy", "10.0.0.0/8, ::1")
    clean_env.setenv("NO_PROXY", "internal.example")
    proxies.direct_loopback()
    proxies.direct_loopback()  # idempotent
    assert os.environ["no_proxy"] == os.environ["NO_PROXY"] == ("10.0.0.0/8,::1,internal.example,localhost,"
                                                                 "127.0.0.1,0.0.0.0,127.0.0.0/8")
    # "*" in the upper-case one only: the lower-case one, read first, gets it too (loopback had been proxied)
    clean_env.setenv("NO_PROXY", "*")
    clean_env.setenv("no_proxy", ".corp.example")
    proxies.direct_loopback()
    assert os.environ["no_proxy"] == os.environ["NO_PROXY"] == ".corp.example,*"
    clean_env.delenv("no_proxy")
    clean_env.delenv("NO_PROXY")
    proxies.direct_loopback()
    assert "no_proxy" not in os.environ and os.environ["NO_PROXY"].startswith("localhost,")


@pytest.mark.parametrize("content, said", [(None, "No such file or directory"),
                                           (b"not a certificate\n", "not a CA bundle")])
def test_a_ca_bundle_that_cannot_be_loaded_is_named_in_one_line(tmp_path, clean_env, capsys, content, said):
    from benchfill.cli import main

    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_bytes(content)
    clean_env.setenv("SSL_CERT_FILE", str(path))
    rc = main(["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1",
               "--runs-dir", str(tmp_path / "runs"), "--run-id", "r", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"benchfill: error: SSL_CERT_FILE={path}: {said}") and "unset it" in err[0]
    assert not (tmp_path / "runs" / "r").exists()  # stopped before any work: no run folder left
    with pytest.raises(ConfigError, match="SSL_CERT_FILE"):
        proxies.check_ca_file()


def test_litellms_gateway_switch_is_refused_before_any_work(tmp_path, clean_env, capsys):
    from benchfill import llm
    from benchfill.cli import main

    clean_env.setenv("USE_LITELLM_PROXY", "True")
    with pytest.raises(ConfigError, match="^USE_LITELLM_PROXY is set: litellm would send the rewriter's"):
        llm._litellm()
    # at the run's start, not at the rewriter's first call after every probe rollout was spent
    assert main(["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1",
                 "--runs-dir", str(tmp_path), "--run-id", "r", "--quiet"]) == 2
    assert "USE_LITELLM_PROXY is set" in capsys.readouterr().err and not (tmp_path / "r").exists()
    for value in ("False", "1", "yes"):  # litellm itself takes only "true"
        clean_env.setenv("USE_LITELLM_PROXY", value)
        assert llm._litellm() is not None
