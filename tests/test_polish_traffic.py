"""Polish on traffic: a key sent in clear text is warned of, detect's permutations are bounded and show
progress, a moved run folder resumes from its call cache."""

from __future__ import annotations

import asyncio
import logging

import pytest

from benchfill import config as config_mod
from benchfill.config import LLMConfig, ProbeConfig, RetryConfig

SECRET = "sk-polish-0123456789abcdefghijklmnop"


@pytest.fixture
def clear_warned(monkeypatch):
    monkeypatch.setattr(config_mod, "_CLEAR_WARNED", set(), raising=False)
    monkeypatch.setenv("POLISH_KEY", SECRET)


def _clear_text_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "plain http" in r.getMessage()]


def _open_probes(*urls: str) -> None:
    from benchfill.probe_http import ProbeHttp
    from benchfill.probes import ProbePanel

    panel = ProbePanel([ProbeConfig(name=f"p{i}", base_url=u, model=f"m{i}", api_key_env="POLISH_KEY")
                        for i, u in enumerate(urls)])

    async def go() -> None:
        http = ProbeHttp(panel)
        http.open()
        await http.close()

    asyncio.run(go())


def test_a_key_sent_over_plain_http_beyond_loopback_is_warned_of_once_per_endpoint(clear_warned, caplog):
    caplog.set_level(logging.WARNING, logger="benchfill")
    _open_probes("http://10.1.2.3:8000/v1", "http://10.1.2.3:8000/v1/", "https://10.1.2.3:8443/v1",
                 "http://127.0.0.1:8000/v1", "http://localhost:8001/v1", "http://[::1]:8002/v1")
    _open_probes("http://10.1.2.3:8000/v1")  # a second panel in the same process: no second line
    said = _clear_text_warnings(caplog)
    assert len(said) == 1, said
    assert "POLISH_KEY" in said[0] and "http://10.1.2.3:8000/v1" in said[0]
    assert SECRET not in caplog.text


def test_no_key_no_warning(clear_warned, caplog, monkeypatch):
    monkeypatch.delenv("POLISH_KEY")
    caplog.set_level(logging.WARNING, logger="benchfill")
    _open_probes("http://10.1.2.3:8000/v1")
    assert _clear_text_warnings(caplog) == []


def test_the_rewriter_key_sent_over_plain_http_is_warned_of_too(clear_warned, caplog):
    from benchfill import llm
    from benchfill.errors import EndpointError

    caplog.set_level(logging.WARNING, logger="benchfill")
    cfg = LLMConfig(model="openai/m", api_base="http://10.1.2.4:9/v1", api_key_env="POLISH_KEY", timeout_s=5)
    retry = RetryConfig(max_attempts=1, initial_wait_s=0, max_wait_s=0, jitter_s=0)
    with pytest.raises(EndpointError):  # the test guard refuses the connection: the warning came before it
        asyncio.run(llm._complete("rewriter", cfg, [{"role": "user", "content": "hi"}], 0, None, retry,
                                  llm.LLMStats()))
    said = _clear_text_warnings(caplog)
    assert len(said) == 1 and "POLISH_KEY" in said[0] and "10.1.2.4" in said[0], said
    assert SECRET not in caplog.text


def test_the_endpoint_check_warns_before_it_sends_the_key(clear_warned, caplog, tmp_path):
    from benchfill.config import load_config
    from benchfill.serving import check_endpoints

    caplog.set_level(logging.WARNING, logger="benchfill")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[probes]]\nname = "q"\nbase_url = "http://10.1.2.5:8000/v1"\nmodel = "m"\n'
                   'api_key_env = "POLISH_KEY"\n')
    check_endpoints(load_config(cfg), timeout_s=1)
    said = _clear_text_warnings(caplog)
    assert len(said) == 1 and "10.1.2.5" in said[0], said
    assert SECRET not in caplog.text
