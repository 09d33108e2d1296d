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


def test_a_code_run_grades_under_bubblewrap_and_records_it(shared_data, tmp_path):
    import json

    from benchfill.store import Store

    items = tmp_path / "items.jsonl"
    items.write_text("".join((shared_data / "humaneval" / "items.jsonl").read_text().splitlines(True)[:16]))
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "tiny-code"\ntext_field = "prompt"\nanswer_field = "canonical_solution"\n'
                    'tests_field = "test"\nentry_point_field = "entry_point"\nevaluator = "code"\n'
                    'solver_prompt = "code"\n')
    runs = tmp_path / "runs"
    # Four children, not one: a lone child placed beyond the benchmark's range is never chosen, and the
    # review queue this test reads would be empty.
    assert main(["run", "--items", str(items), "--spec", str(spec), "--gaps", "1", "--rounds", "1", "--parents", "1",
                 "--children", "4", "--sim-probes", "4", "--no-confirm", "--quiet", "--runs-dir", str(runs)]) == 0
    (run_dir,) = runs.iterdir()
    assert json.loads((run_dir / "report.json").read_text())["isolation"] == "bubblewrap"
    assert "Generated programs ran under bubblewrap." in (run_dir / "report.md").read_text()
    queue = [json.loads(line) for line in (run_dir / "review_queue.jsonl").read_text().splitlines()]
    assert queue and all(q["isolation"] == "bubblewrap" for q in queue)
    store = Store(run_dir / "store.db")
    assert store.get_meta("isolation") == "bubblewrap"
    store.close()
