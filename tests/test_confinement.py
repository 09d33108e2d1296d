"""A run that must execute generated code refuses without a sandbox, unless --allow-unconfined."""

from __future__ import annotations

import os
import socket

import pytest

from benchfill.cli import main
from benchfill.evaluators import require_confinement
from benchfill.evaluators.sandbox import ALLOW_ENV, UNCONFINED_REFUSAL, Unconfined


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
    # the dry run's plan said nothing of it, and the real run was then refused: refused alike now
    code = main(["run", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--runs-dir", str(runs),
                 "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and UNCONFINED_REFUSAL in err, err
    code = main(["run", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--runs-dir", str(runs),
                 "--dry-run", "--allow-unconfined"])
    assert code == 0 and "isolation" in capsys.readouterr().out


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
    assert os.environ[ALLOW_ENV] == "0"  # the permission is the run's own: the process's environment is untouched


def test_an_allowed_run_does_not_allow_the_next_one_in_the_same_process(no_bwrap, shared_data, tmp_path, capsys):
    # A notebook: --allow-unconfined once must not carry over to a later run without it.
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    cfg = tmp_path / "panel.toml"
    cfg.write_text(f"[[probes]]\nname = 'p1'\nbase_url = '{url}'\nmodel = 'm'\n"
                   f"[rewriter]\nmodel = 'openai/r'\napi_base = '{url}'\n[judge]\nmodel = 'openai/j'\napi_base = '{url}'\n")
    common = ["run", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--config", str(cfg), "--quiet"]
    main([*common, "--runs-dir", str(tmp_path / "first"), "--allow-unconfined"])
    capsys.readouterr()
    code = main([*common, "--runs-dir", str(tmp_path / "second")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and UNCONFINED_REFUSAL in err, err
    with pytest.raises(Unconfined):
        require_confinement("code")


def test_the_permission_travels_with_the_grader_to_its_workers(no_bwrap):
    import pickle

    from benchfill.evaluators import evaluator_for_run

    item = {"prompt": "def f():\n", "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}
    allowed = pickle.loads(pickle.dumps(evaluator_for_run("code", allow_unconfined=True)))  # as a worker gets it
    assert allowed.grade("    return 1\n", item).correct
    with pytest.raises(Unconfined):
        evaluator_for_run("code").grade("    return 1\n", item)
    assert evaluator_for_run("math", allow_unconfined=True).grade("\\boxed{2}", {"answer": "2"}).correct


def test_a_bubblewrap_that_cannot_start_says_why_in_one_line(monkeypatch, tmp_path, capsys, shared_data):
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace, likely because the kernel "
                    "does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setenv(ALLOW_ENV, "0")
    # as a user: root starts bwrap as a throwaway uid, which could not reach a file under tmp_path
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(Unconfined) as refused:
        require_confinement("code")
    line = str(refused.value)
    assert "\n" not in line
    assert f"bubblewrap at {fake} cannot start a sandbox: No permissions to create a new namespace" in line
    assert "--allow-unconfined" in line
    code = main(["run", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--runs-dir",
                 str(tmp_path / "runs"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.splitlines() == [f"benchfill: error: {line}"], err  # and no logging warning


def test_a_code_run_grades_unconfined_when_allowed_and_records_it(shared_data, tmp_path):
    # The permission reaches the grading workers with the grader (benchfill/engine/backend.py builds it
    # with evaluator_for_run), not through the environment, which says "0" here. In a process of its
    # own: the grading workers' forkserver keeps the environment it started with (a PATH without bwrap).
    import json
    import subprocess
    import sys

    items, spec = _tiny_code(tmp_path, shared_data, 8)
    runs = tmp_path / "runs"
    (tmp_path / "bin").mkdir()
    env = {**os.environ, "PATH": str(tmp_path / "bin"), ALLOW_ENV: "0"}
    args = ["run", "--items", str(items), "--spec", str(spec), "--gaps", "1", "--rounds", "1", "--parents", "1",
            "--children", "1", "--sim-probes", "2", "--no-confirm", "--quiet", "--runs-dir", str(runs)]
    refused = subprocess.run([sys.executable, "-m", "benchfill", *args], env=env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode != 0 and UNCONFINED_REFUSAL in refused.stderr
    done = subprocess.run([sys.executable, "-m", "benchfill", *args, "--allow-unconfined"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = runs.iterdir()
    assert json.loads((run_dir / "report.json").read_text())["isolation"] == "unconfined"
    # said on the terminal, --quiet or not: the permission may come from an environment set long ago
    assert "generated programs will run UNCONFINED" in done.stderr


def test_a_code_run_grades_under_bubblewrap_and_records_it(shared_data, tmp_path):
    import json

    from benchfill.store import Store

    items, spec = _tiny_code(tmp_path, shared_data, 16)
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


def _tiny_code(tmp_path, shared_data, n: int):
    """The first ``n`` HumanEval items as a custom code benchmark: its items file and spec."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join((shared_data / "humaneval" / "items.jsonl").read_text().splitlines(True)[:n]))
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "tiny-code"\ntext_field = "prompt"\nanswer_field = "canonical_solution"\n'
                    'tests_field = "test"\nentry_point_field = "entry_point"\nevaluator = "code"\n'
                    'solver_prompt = "code"\n')
    return items, spec
