"""A run that must execute generated code refuses without a sandbox, unless --allow-unconfined."""

from __future__ import annotations

import os
import socket

import pytest

from benchfill.cli import main
from evaluators import require_confinement
from evaluators.sandbox import ALLOW_ENV, UNCONFINED_REFUSAL, Unconfined


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    """bubblewrap made unavailable: a PATH without it (the sandbox looks it up at each call)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv(ALLOW_ENV, "0")  # restored (removed) after the test


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_code_run_without_confinement_refuses_in_one_line(no_bwrap, shared_data, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["run", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--runs-dir", str(runs),
                 "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1, err
    assert UNCONFINED_REFUSAL in err and "--allow-unconfined" in err and err.startswith("benchfill: error:")
    assert not runs.exists() or not any(runs.iterdir())  # refused before any work


def test_allow_unconfined_lets_the_run_go_on(no_bwrap, shared_data, tmp_path, capsys):
    # past the confinement check, the run stops at the next one: the configured endpoint is down
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    cfg = tmp_path / "panel.toml"
    cfg.write_text(f"[[probes]]\nname = 'p1'\nbase_url = '{url}'\nmodel = 'm'\n"
                   f"[rewriter]\nmodel = 'openai/r'\napi_base = '{url}'\n[judge]\nmodel = 'openai/j'\napi_base = '{url}'\n")
    code = main(["run", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--config", str(cfg),
                 "--runs-dir", str(tmp_path / "runs"), "--quiet", "--allow-unconfined"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "unreachable" in err and UNCONFINED_REFUSAL not in err, err
    assert os.environ[ALLOW_ENV] == "1"  # the graders of this process and its workers may run programs


def test_require_confinement_names_the_isolation(no_bwrap, monkeypatch):
    assert require_confinement("math") is None  # runs no code: nothing to confine
    with pytest.raises(Unconfined, match="code grader: code items run generated programs"):
        require_confinement("code")
    assert require_confinement("code", allow_unconfined=True) == "unconfined"
    monkeypatch.undo()  # bubblewrap back on PATH
    assert require_confinement("code") == "bubblewrap"
