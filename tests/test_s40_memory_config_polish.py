"""QA polish (s40): memory look-ups that write nothing, endpoint URLs checked at load, the rewriter's knobs,
the simulated world's state path, and a key's fragments kept out of printed errors."""

from __future__ import annotations

import sqlite3

from benchfill.cli import main
from benchfill.store import Store


def test_memory_list_makes_no_store_of_an_empty_file_nor_writes_to_a_foreign_one(tmp_path, capsys):
    # `: > empty.db; memory list --store empty.db` said "the memory holds nothing" and left a 120 KB store there
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    run = tmp_path / "run"
    run.mkdir()
    (run / "store.db").write_bytes(b"")
    for where in (str(empty), f"sqlite:///{empty}", str(run)):
        for cmd in (["list"], ["forget", "--run", "x", "--dry-run"]):
            assert main(["memory", *cmd, "--store", where]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "holds no benchfill store (an empty file or database)" in err[0], err
    assert empty.stat().st_size == 0 and (run / "store.db").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "run"]  # no -runs.lock, -wal, -shm
    # another application's database: refused as before, and no longer switched to WAL on the way
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE x (a)")
    con.commit()
    con.close()
    before = foreign.read_bytes()
    assert main(["memory", "list", "--store", str(foreign)]) == 2
    assert "holds tables that are not a benchfill store's (x)" in capsys.readouterr().err
    assert foreign.read_bytes() == before
    text = tmp_path / "text.db"
    text.write_text("hello\n")
    assert main(["memory", "list", "--store", str(text)]) == 2
    assert "DatabaseError: file is not a database" in capsys.readouterr().err
    # a store a run wrote is read as before
    Store(tmp_path / "real.db").close()
    assert main(["memory", "list", "--store", str(tmp_path / "real.db")]) == 0
    assert "the memory holds nothing" in capsys.readouterr().out


def _holder(code: str, arg: str):
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", code, arg], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def _kid(cid: str):
    from benchfill.search.annotate import Annotation
    from benchfill.search.loop import Child
    from benchfill.search.services import Verdict

    ann = Annotation(difficulty=0.0, se=0.3, z=0.5, z_se=0.05, rollouts=40,
                     results=[{"probe": "p0", "ability": 0.0, "correct": 3, "trials": 8}])
    return Child(cid, "q1", "q1", 1, {"id": cid, "problem": f"text {cid}", "answer": "1"},
                 Verdict(True, "ok", "judge"), ann, [])


def test_memory_forget_dry_run_counts_for_a_run_in_progress_and_says_so(tmp_path, capsys):
    # a dry run writes nothing, and was refused as the real forget is while the run works
    from benchfill.engine.memory_store import SharedMemory
    from benchfill.run import LOCK_FILE

    own = tmp_path / "demo-benchfill-0123456789"
    own.mkdir()
    shared = tmp_path / "shared.db"
    for store in (Store(shared, run_id="r1"), Store(own / "store.db")):
        mem = SharedMemory(store, "toy", ["q0", "q1", "q2"], [0.2, 0.5, 0.8])
        mem.record_originals()
        mem.record_child(0, _kid("kid"))
        store.close()
    hold = ("import sys; from benchfill.store import Store; s = Store(sys.argv[1], run_id='r1'); "
            "let_go = s.hold_run(); print('held', flush=True); sys.stdin.read()")
    lock_own = ("import sys; from pathlib import Path; from benchfill import locks; "
                "fd = locks.hold(Path(sys.argv[1]), wait=False); print('held', flush=True); sys.stdin.read()")
    for code, arg, args, run in ((hold, str(shared), ["--store", str(shared)], "r1"),
                                 (lock_own, str(own / LOCK_FILE), ["--store", str(own)], own.name)):
        holder = _holder(code, arg)
        try:
            assert main(["memory", "forget", *args, "--run", run]) == 2
            assert "that run is in progress (another process holds it)" in capsys.readouterr().err
            assert main(["memory", "forget", *args, "--run", run, "--dry-run"]) == 0
            assert capsys.readouterr().out == (f"would forget 1 entry of run {run}; that run is in progress (another "
                                               "process holds it), so forget would be refused until it ends\n")
        finally:
            holder.communicate("")
        assert main(["memory", "forget", *args, "--run", run, "--dry-run"]) == 0  # ended: no word of it
        assert capsys.readouterr().out == f"would forget 1 entry of run {run}\n"


def test_an_endpoint_url_that_no_client_can_use_is_refused_at_load_naming_its_field(tmp_path):
    import pytest

    from benchfill.config import load_config
    from benchfill.errors import ConfigError

    cfg = tmp_path / "panel.toml"
    cfg.write_text('[[probes]]\nname = "p1"\nbase_url = "http://127.0.0.1:8001/v1/"\nmodel = "m"\n'
                   '[[probes]]\nname = "p2"\nreplicas = ["http://a:8000/v1", "http://[::1]:8000/v1"]\nmodel = "m"\n'
                   '[rewriter]\nmodel = "openai/r"\napi_base = "https://h.example/v1"\n')
    good = load_config(cfg)
    assert good.probes[0].base_url == "http://127.0.0.1:8001/v1" and good.rewriter.api_base == "https://h.example/v1"
    bad = {"ftp://127.0.0.1:1/v1": "scheme ftp: only http and https are served",
           "127.0.0.1:18431/v1": "no scheme; write http://127.0.0.1:18431/v1",
           "http://": "no host",
           "http://127.0.0.1:99999/v1": "Port out of range",
           "http://[::1/v1": "Invalid IPv6 URL",
           "http://h:0/v1": "port 0"}
    for url, said in bad.items():
        for field, where in (("probes.p1.base_url", "probes.0.base_url"),
                             ("probes.p2.replicas.1", "probes.1.replicas.1.base_url"),
                             ("rewriter.api_base", "rewriter.api_base"), ("judge.api_base", "judge.api_base")):
            extra = [] if field != "judge.api_base" else ["judge.model=openai/j"]
            with pytest.raises(ConfigError) as exc:
                load_config(cfg, [f"{field}={url}", *extra])
            line = str(exc.value)
            assert "\n" not in line and f"field {where}: {url}: " in line and said in line, line


def test_the_simulated_rewriter_refuses_a_knob_that_is_not_a_finite_number_for_every_caller():
    # `run` refused bias=nan (run.py's own check); `sim serve` and a library caller built a world on it
    import subprocess
    import sys

    import pytest

    from benchfill.errors import ConfigError
    from benchfill.sim.rewriter import RewriterModel, rewriter_model

    for knob, value in (("bias", "nan"), ("warp", "inf"), ("drift", "-inf"), ("perception_noise", "nan"),
                        ("anchor_reach", "nan")):
        with pytest.raises(ConfigError, match=f"^sim rewriter: {knob} must be a finite number, got "):
            rewriter_model("realistic", **{knob: float(value)})
    # a process of its own: the old code served on (a timeout, killed, fails the test)
    r = subprocess.run([sys.executable, "-m", "benchfill", "sim", "serve", "--benchmark", "demo", "--port", "0",
                        "--rewriter-knobs", "bias=nan"], capture_output=True, text=True, timeout=90)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "benchfill: error: sim rewriter: bias must be a finite number, got nan"], r.stderr
    assert rewriter_model("realistic", bias=0.1).bias == 0.1 and RewriterModel(anchor=0).anchor == 0


def test_sim_serve_refuses_a_state_path_it_could_never_write_at_start(tmp_path):
    # a state path under a regular file started a server whose first rewrite failed with HTTP 507, "...: File exists"
    import subprocess
    import sys

    import pytest

    from benchfill.errors import ConfigError
    from benchfill.sim import World

    spec = tmp_path / "spec.toml"
    spec.write_text("x = 1\n")
    items = [{"id": "a", "problem": "1 + 1", "answer": "2"}, {"id": "b", "problem": "2 + 2", "answer": "4"}]
    for state, said in ((spec / "state.jsonl", f"{spec} is a file, not a folder"),
                        (spec / "a" / "b" / "state.jsonl", f"{spec} is a file, not a folder"),
                        (tmp_path, "is a folder; name a file")):
        with pytest.raises(ConfigError, match=f"^sim: state file {state}: .*{said}"):
            World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", state_path=state)
    r = subprocess.run([sys.executable, "-m", "benchfill", "sim", "serve", "--benchmark", "demo", "--port", "0",
                        "--state", str(spec / "state.jsonl")], capture_output=True, text=True, timeout=90)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"benchfill: error: sim: state file {spec / 'state.jsonl'}: {spec} is a file, not a folder"], r.stderr
    # a state file in folders not made yet is made by the first write, as before
    World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                     state_path=tmp_path / "new" / "state.jsonl")
    assert spec.read_text() == "x = 1\n" and not (tmp_path / "new").exists()


def test_memory_forget_dry_run_of_a_run_in_progress_with_no_children_yet_says_it_is_in_progress(tmp_path, capsys):
    # (a run still fitting has written no child: "no children of that run" alone read as a run not there)
    from benchfill.engine.memory_store import SharedMemory

    shared = tmp_path / "shared.db"
    store = Store(shared, run_id="r0")
    SharedMemory(store, "toy", ["q0", "q1", "q2"], [0.2, 0.5, 0.8]).record_originals()
    store.close()
    hold = ("import sys; from benchfill.store import Store; s = Store(sys.argv[1], run_id='r1'); "
            "let_go = s.hold_run(); print('held', flush=True); sys.stdin.read()")
    holder = _holder(hold, str(shared))
    try:
        assert main(["memory", "forget", "--store", str(shared), "--run", "r1", "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert "no children of that run" in err and "; that run is in progress (another process holds it)" in err
    finally:
        holder.communicate("")
    assert main(["memory", "forget", "--store", str(shared), "--run", "r1", "--dry-run"]) == 2
    assert "in progress" not in capsys.readouterr().err
