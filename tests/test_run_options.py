"""A run's options: refused before any work when no run can use them, and never mixed on resume."""

from __future__ import annotations

import re

import numpy as np
import pytest

from benchfill.errors import ConfigError, DataError
from benchfill.run import RunOptions, dry_run, flag_names, run, run_id_for

# Plumbing: probes that answer independently about the curve (sim_pair_sd 0), so that one round through six of
# them queues a child; the default world's offsets are run by test_report_claims.py and test_readme_demo.py.
FAST = dict(gaps=1, rounds=1, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_rewriter="kind",
            sim_pair_sd=0.0)


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ({"children": 0}, r"^--children: must be at least 1, got 0$"),
        ({"rounds": -1}, r"^--rounds: must be at least 1"),
        ({"gaps": -2}, r"^--gaps: must be at least 1"),
        ({"near_duplicate": 140.0}, r"^--near-duplicate: a number in \[0, 100\]"),
        ({"confirm_se": float("nan")}, r"^--confirm-se: a z standard error in \(0, 1\)"),
        ({"confirm_cap": True}, r"^--confirm-cap: a positive number of fixed-protocol budgets, got True"),
        ({"rounds": "two"}, r"^--rounds: a whole number, got 'two'"),
        # Refused only once the run was under way, or never: a typo, or a string where a bool goes
        # ("no" and "false" are truthy: confirmation on, unconfined code allowed).
        ({"annotation": "fixd"}, r"^--annotation: unknown protocol 'fixd' \(choose from fixed, adaptive\)$"),
        ({"confirm": "no"}, r"^confirm \(--no-confirm\): true or false, got 'no'$"),
        ({"allow_unconfined": "false"}, r"^--allow-unconfined: true or false, got 'false'$"),
        ({"progress": 0}, r"^progress \(--quiet\): true or false, got 0$"),
        ({"sim_rewriter": "kindd"}, r"^--rewriter: unknown preset 'kindd' \(choose from kind, realistic, hostile\)$"),
        ({"sim_rewriter_knobs": {"driftt": 1.0}}, r"^--rewriter-knobs: unknown knob 'driftt' \(knobs: bias, "),
        ({"sim_rewriter_knobs": {"drift": "1"}}, r"^--rewriter-knobs: drift must be a number, got '1'$"),
        ({"sim_rewriter_knobs": {"judge_fpr": 2.0}}, r"^--rewriter-knobs: judge_fpr must lie in \[0, 1\], got 2\.0$"),
        # the run's folder is <runs dir>/<run id>: these once wrote it outside the runs dir, or nested
        ({"run_id": "../evil"}, r"^--run-id: a plain folder name \(no '/', not '\.' or '\.\.', no control character\), got '\.\./evil'$"),
        ({"run_id": " "}, r"^--run-id: a plain folder name"),
        ({"run_id": ""}, r"^--run-id: a plain folder name"),  # it had quietly named the default id
        # the run was named after the benchmark and made of the items
        ({"items": "mine.jsonl", "spec": "mine.toml"}, r"^--benchmark demo with --items/--spec: name a registered"),
        ({"run_id": "a/b"}, r"^--run-id: a plain folder name"),
        ({"extra": {"anchor_itemz": 5}}, r"^extra: unknown \['anchor_itemz'\] \(it takes anchor_items\)$"),
        ({"run_id": ".."}, r"^--run-id: a plain folder name"),
    ],
)
def test_options_no_run_can_use_are_refused_by_run_and_dry_run_alike(tmp_path, bad, pattern):
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **{**FAST, **bad})
    for call in (run, dry_run):
        with flag_names(), pytest.raises(ConfigError, match=pattern):  # (named as the CLI names them)
            call(opts)
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(("bad", "pattern"), [
    ({"children": 0}, r"^children: must be at least 1, got 0$"),
    ({"sim_rewriter": "kindd"}, r"^sim_rewriter: unknown preset 'kindd'"),
    ({"sim_rewriter_knobs": {"driftt": 1.0}}, r"^sim_rewriter_knobs: unknown knob 'driftt'"),
    ({"confirm": "no"}, r"^confirm: true or false, got 'no'$"),
    ({"items": "mine.jsonl", "spec": "mine.toml"}, r"^benchmark demo with items/spec: name a registered"),
    ({"gaps": 1000}, r"^gaps 1000: demo has 48 items"),
])
def test_a_library_caller_is_told_the_field_it_set_not_the_cli_flag(tmp_path, bad, pattern):
    # RunOptions(sim_rewriter="nice") was refused as "--rewriter: unknown preset"
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **{**FAST, **bad})
    for call in (run, dry_run):
        with pytest.raises(ConfigError, match=pattern):
            call(opts)


def test_the_cli_names_the_flags_it_was_given(tmp_path, capsys):
    from benchfill.cli import main

    assert main(["run", "--benchmark", "demo", "--children", "0", "--runs-dir", str(tmp_path), "--quiet"]) == 2
    assert capsys.readouterr().err == "benchfill: error: --children: must be at least 1, got 0\n"
    assert main(["run", "--benchmark", "demo", "--near-duplicate", "140", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("benchfill: error: --near-duplicate: a number in [0, 100]")


def test_the_rewriter_with_real_endpoints_is_refused_naming_both_flags(tmp_path):
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), backend="openai", config=str(tmp_path / "p.toml"),
                      **{**FAST, "sim_rewriter": None, "sim_rewriter_knobs": {"drift": 1.0}})
    with flag_names(), pytest.raises(ConfigError, match=r"^--rewriter-knobs: sets the simulated world's rewriter, "
                                                       r"which does nothing with --backend openai$"):
        opts.check()


def test_real_endpoints_without_a_config_say_so_not_none(tmp_path, capsys):
    from benchfill.cli import main

    for extra in ([], ["--dry-run"]):  # the error named the missing file as "None"
        assert main(["run", "--benchmark", "demo", "--backend", "openai", "--runs-dir", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("benchfill: error: backend 'openai' needs a config naming the probe panel") and "None" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_reused_run_id_with_an_option_left_out_of_the_id_at_its_old_value_is_refused_too(tmp_path):
    """The world's offsets and the annotator's allowance are left out of a run's id at the value every earlier run
    had (0): a run resumed with either set had gone on in another world, or under another annotator."""
    old_world = FAST  # sim_pair_sd 0: the world of every run before the offsets' default was 3.5 (5 since s48)
    first = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **old_world)
    assert "sim_pair_sd" not in first.identity() and RunOptions(benchmark="demo").identity()["sim_pair_sd"] == 5.0
    run(first)
    for change, said in (({"sim_pair_sd": 3.5}, "sim_pair_sd = 0.0; this command asks 3.5"),
                         ({"pair_allowance": 0.0}, "pair_allowance = 'auto'; this command asks 0.0")):
        other = RunOptions(benchmark="demo", runs_dir=str(tmp_path), run_id=run_id_for(first), **{**old_world, **change})
        with pytest.raises(ConfigError, match=re.escape(said)):
            run(other)


def test_dry_run_refuses_more_gaps_than_the_benchmark_has(tmp_path):
    with flag_names(), pytest.raises(ConfigError, match=r"--gaps 1000: demo has 48 items, so at most 49 gaps"):
        dry_run(RunOptions(benchmark="demo", runs_dir=str(tmp_path), **{**FAST, "gaps": 1000}))


def test_a_reused_run_id_with_other_settings_is_refused_not_mixed(tmp_path):
    first = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **FAST)
    d = run(first)
    report = (d / "report.json").read_text()
    queue = (d / "review_queue.jsonl").read_text()
    other = RunOptions(benchmark="demo", runs_dir=str(tmp_path), run_id=run_id_for(first), **{**FAST, "seed": 1})
    with pytest.raises(ConfigError, match=r"was made with seed = 0; this command asks 1"):
        run(other)
    assert (d / "report.json").read_text() == report  # the first run is untouched
    again = RunOptions(benchmark="demo", runs_dir=str(tmp_path), run_id=run_id_for(first), **FAST)
    assert run(again) == d  # its own settings resume it
    assert (d / "review_queue.jsonl").read_text() == queue  # proposed when first proposed, not at each resume


def test_a_config_edited_in_place_is_refused_on_resume_and_its_benchmark_section_is_used(tmp_path):
    cfg = tmp_path / "panel.toml"
    cfg.write_text('[benchmark]\nname = "demo"\n')
    opts = RunOptions(benchmark=None, config=str(cfg), backend="sim", runs_dir=str(tmp_path), **FAST)
    plan = dry_run(opts)  # [benchmark] names the benchmark when --benchmark does not
    assert plan["run_id"].startswith("demo-")
    with pytest.raises(ConfigError, match=r"^benchmark aime24 but .*panel\.toml names \[benchmark\] demo"):
        dry_run(RunOptions(benchmark="aime24", config=str(cfg), backend="sim", runs_dir=str(tmp_path), **FAST))
    cfg.write_text('[benchmark]\nnmae = "demo"\n')
    with pytest.raises(ConfigError, match=r"panel\.toml: field benchmark"):
        dry_run(RunOptions(benchmark="demo", config=str(cfg), backend="sim", runs_dir=str(tmp_path), **FAST))
    cfg.write_text('seed = 0\n[benchmark]\nname = "demo"\n')
    opts = RunOptions(benchmark=None, config=str(cfg), backend="sim", runs_dir=str(tmp_path / "runs"), **FAST)
    d = run(opts)
    cfg.write_text('seed = 0\n[benchmark]\nname = "demo"\n[retry]\nmax_attempts = 9\n')  # the same path, edited
    with pytest.raises(ConfigError, match=r"panel\.toml: changed since run .* started"):
        run(RunOptions(benchmark=None, config=str(cfg), backend="sim", runs_dir=str(tmp_path / "runs"), **FAST))
    assert d.is_dir()


def test_a_key_variable_that_is_not_set_is_named_before_any_call(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHFILL_NO_SUCH_KEY", raising=False)
    cfg = tmp_path / "panel.toml"
    url = "http://127.0.0.1:9/v1"
    cfg.write_text(f'[[probes]]\nname = "p1"\nbase_url = "{url}"\nmodel = "m"\napi_key_env = "BENCHFILL_NO_SUCH_KEY"\n'
                   f'[rewriter]\nmodel = "openai/r"\napi_base = "{url}"\n[judge]\nmodel = "openai/j"\napi_base = "{url}"\n')
    opts = RunOptions(benchmark="demo", config=str(cfg), backend="openai", runs_dir=str(tmp_path / "runs"), **{
        k: v for k, v in FAST.items() if k not in ("sim_rewriter", "sim_probes", "sim_pair_sd")})  # (the world's: refused here)
    for call in (dry_run, run):
        with pytest.raises(ConfigError, match=r"probes\.p1\.api_key_env: environment variable BENCHFILL_NO_SUCH_KEY "
                                              r"is not set"):
            call(opts)
    assert not (tmp_path / "runs").exists()  # nor the runs dir the run made for itself


def _custom(folder, problems):
    import json

    folder.mkdir(parents=True)
    with (folder / "items.jsonl").open("w") as fh:
        for i, p in enumerate(problems):
            fh.write(json.dumps({"id": f"q{i:02d}", "problem": p, "answer": str(i)}) + "\n")
    (folder / "spec.toml").write_text('[benchmark]\nname = "mine"\ntext_field = "problem"\nanswer_field = "answer"\n'
                                      'evaluator = "math"\n')


def test_two_benchmarks_run_with_one_relative_command_on_one_store_are_not_mixed(tmp_path, monkeypatch):
    import json

    from benchfill.schema import Item
    from benchfill.store import Store

    _custom(tmp_path / "A", [f"What is {i} plus {i}?" for i in range(24)])
    _custom(tmp_path / "B", [f"How many sides has a polygon with {i} corners?" for i in range(24)])
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    opts = dict(items="items.jsonl", spec="spec.toml", benchmark=None, backend="sim", store=url, **FAST)
    monkeypatch.chdir(tmp_path / "A")
    d = run(RunOptions(**opts))
    run_id = d.name
    monkeypatch.chdir(tmp_path / "B")  # the same command, another benchmark: another run (its files' paths)
    assert run_id_for(RunOptions(**opts)) != run_id
    # and given the first run's id, refused by the files' content
    opts["run_id"] = run_id
    with pytest.raises(ConfigError, match=r"^items items\.jsonl: not the file run .* was made with .*another run_id"):
        run(RunOptions(**opts))
    store = Store(url, run_id=run_id)
    try:
        assert set(store.get_meta("inputs_sha256")) == {"items", "spec"}
        store.set_meta("inputs_sha256", None)  # as a run made before the hashes were recorded
    finally:
        store.close()
    monkeypatch.chdir(tmp_path / "A")
    assert run(RunOptions(**opts)) == d  # resumed as before, and the hashes recorded on the way
    monkeypatch.chdir(tmp_path / "B")
    with flag_names(), pytest.raises(ConfigError, match=r"^--items items\.jsonl: not the file run .* was made with"):
        run(RunOptions(**opts))
    store = Store(url, run_id=run_id)
    try:
        items = {json.loads(r.data_json)["problem"] for r in store.all(Item) if r.origin == "original"}
    finally:
        store.close()
    assert items == {f"What is {i} plus {i}?" for i in range(24)}  # none of B's rows
    assert run(RunOptions(**{**opts, "run_id": None})).name != run_id  # a run of its own
    # a run made before paths were resolved recorded them as typed: it resumes under its id all the same
    store = Store(url, run_id=run_id)
    try:
        store.set_meta("options", {**store.get_meta("options"), "items": "items.jsonl", "spec": "spec.toml"})
    finally:
        store.close()
    monkeypatch.chdir(tmp_path / "A")
    assert run(RunOptions(**opts)) == d


def test_a_run_in_progress_in_another_process_is_refused_and_left_alone(tmp_path):
    import os
    import subprocess
    import sys

    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **FAST)
    d = tmp_path / run_id_for(opts)
    d.mkdir()
    # Another process holds the run (as a run does, till it dies): an flock on the run's lock file.
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(d / '.run.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('held', flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"^run {d.name} is in progress in another process \(pid {holder.pid}\)"):
            run(opts)
        assert os.listdir(d) == [".run.lock"]  # nothing written
    finally:
        holder.kill()  # the kernel drops its lock
        holder.wait()
    assert run(opts) == d and (d / "report.json").is_file()


def test_a_library_run_that_names_no_benchmark_takes_its_items_or_config_and_else_the_demo(tmp_path, capsys):
    # RunOptions once defaulted benchmark to "demo": a caller's own items, or a config naming its benchmark,
    # were refused for a --benchmark they never gave
    import json

    from benchfill.cli import main

    (tmp_path / "spec.toml").write_text('[benchmark]\nname = "mine"\ntext_field = "q"\nanswer_field = "a"\n'
                                        'evaluator = "math"\n')
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "q": f"{i} + {i}?", "a": str(2 * i)})
                                                 + "\n" for i in range(12)))
    plan = dry_run(RunOptions(items=str(tmp_path / "mine.jsonl"), spec=str(tmp_path / "spec.toml"),
                              runs_dir=str(tmp_path), **FAST))
    assert plan["run_id"].startswith("mine-")
    cfg = tmp_path / "panel.toml"
    cfg.write_text('[benchmark]\nname = "demo"\n')
    assert dry_run(RunOptions(config=str(cfg), backend="sim", runs_dir=str(tmp_path), **FAST))["run_id"].startswith("demo-")
    assert dry_run(RunOptions(runs_dir=str(tmp_path), **FAST))["run_id"].startswith("demo-")  # nothing named
    # the command line names what it runs
    assert main(["run", "--dry-run", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "name a benchmark (--benchmark NAME; demo is built in)" in err


def test_a_registered_benchmarks_files_edited_since_the_run_began_are_refused_on_resume(tmp_path, shared_data):
    # The run id names a registered benchmark by its name only: its items edited in the data folder were
    # rerun in the same run folder, silently, mixing two benchmarks' work
    import shutil

    data = tmp_path / "data"
    shutil.copytree(shared_data / "aime25", data / "aime25")
    opts = dict(benchmark="aime25", data_dir=str(data), runs_dir=str(tmp_path / "runs"), **FAST)
    d = run(RunOptions(**opts))
    assert run(RunOptions(**opts)) == d  # untouched: it resumes (here: it is done)
    items = data / "aime25" / "items.jsonl"
    kept = items.read_bytes()
    items.write_bytes(kept.replace(b'"answer": "', b'"answer": "1', 1))
    with pytest.raises(ConfigError, match=r"aime25/items\.jsonl: benchmark aime25's items are not those run "
                                          r"aime25-benchfill-\w+ was made with .*restore them to resume"):
        run(RunOptions(**opts))
    items.write_bytes(kept)
    responses = data / "aime25" / "responses.csv"
    responses.write_text(responses.read_text() + "\n")
    with pytest.raises(ConfigError, match=r"responses\.csv: benchmark aime25's responses are not those"):
        run(RunOptions(**opts))


def test_a_dry_run_reads_the_responses_it_names(tmp_path):
    # --dry-run planned from a responses file the run itself refuses (correct = -1); and the demo's own matrix,
    # in memory, was used in place of a responses file given for it, by the run too
    bad = tmp_path / "r.csv"
    bad.write_text("model,item_id,correct,trials\nm1,demo-001,1,2\nm2,demo-001,-1,2\n")
    with pytest.raises(DataError, match=r"r\.csv:3: field 'correct' is negative"):
        dry_run(RunOptions(benchmark="demo", responses=str(bad), runs_dir=str(tmp_path), **FAST))


def test_one_file_however_its_path_is_spelt_is_one_run(tmp_path, monkeypatch):
    # the run id hashed the path as typed: items.jsonl, ./items.jsonl and its absolute path were three runs,
    # and the same command from another folder a fourth
    sub = tmp_path / "b" / "sub"
    sub.mkdir(parents=True)
    (sub / "items.jsonl").write_text('{"id": "q1", "problem": "What is 1 plus 1?", "answer": "2"}\n')
    (sub / "spec.toml").write_text('[benchmark]\nname = "mine"\n')
    monkeypatch.chdir(sub)
    ids = {run_id_for(RunOptions(items=p, spec="spec.toml", **FAST))
           for p in ("items.jsonl", "./items.jsonl", str(sub / "items.jsonl"), "../sub/items.jsonl")}
    monkeypatch.chdir(tmp_path / "b")
    ids.add(run_id_for(RunOptions(items="sub/items.jsonl", spec="sub/spec.toml", **FAST)))
    assert len(ids) == 1


def _earlier(runs, name: str, finished: bool = False, **meta) -> None:
    """An earlier run's folder: its store with the given run meta, and a report if it finished."""
    from benchfill.store import Store

    (runs / name).mkdir(parents=True)
    store = Store(runs / name / "store.db")
    for key, value in meta.items():
        store.set_meta(key, value)
    store.close()
    if finished:
        (runs / name / "report.json").write_text("{}")


def test_an_earlier_unfinished_run_beside_a_new_one_is_named_with_what_differs(tmp_path):
    # "rerun the same command to resume" started a new run beside an older version's interrupted one, silently
    from benchfill.run import earlier_runs

    runs = tmp_path / "runs"
    now = RunOptions(benchmark="demo", **FAST).identity()
    _earlier(runs, "demo-benchfill-0000000001", options={**now, "seed": 5})
    _earlier(runs, "demo-benchfill-0000000002", True, options={k: v for k, v in now.items() if k != "misfit"})
    _earlier(runs, "demo-benchfill-0000000003", True, options={**now, "seed": 9})  # chosen: not named
    _earlier(runs, "demo-baseline-0000000004", options={**now, "seed": 5})  # another strategy
    # the same, finished: the same run under an id an earlier benchfill made (one whose id carried an option its
    # strategy never reads), named with the way to resume it
    _earlier(runs, "demo-benchfill-0000000005", True, options=now)
    before = sorted(p.name for p in runs.rglob("*"))
    lines = earlier_runs(runs / "demo-benchfill-ffffffffff", now)
    # only read: no -wal or -shm file left in the earlier runs' folders (a read-only connection to a WAL store
    # made them, in every sibling a new run looked at)
    assert sorted(p.name for p in runs.rglob("*")) == before
    said = " is an earlier {} run of this benchmark and strategy ({}); this run starts anew beside it"
    assert sorted(lines) == sorted([
        f"{runs / 'demo-benchfill-0000000001'}" + said.format("unfinished", "settings that differ: seed"),
        f"{runs / 'demo-benchfill-0000000002'}" + said.format("finished", "settings that differ: misfit")
        + ", and its review decisions stay there",
        f"{runs / 'demo-benchfill-0000000005'}" + said.format("finished", "the same settings and files")
        # (a library caller is named the field; `benchfill run` says --run-id)
        + ", and its review decisions stay there (run_id demo-benchfill-0000000005 resumes it instead)"])
    # a file of the same name with other content differs; one whose content was not recorded is said so
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "q1", "problem": "1 + 1?", "answer": "2"}\n')
    mine = RunOptions(items=str(items), spec=str(tmp_path / "s.toml"), benchmark=None, **FAST).identity()
    elsewhere = {**mine, "items": "elsewhere/items.jsonl", "spec": "s.toml"}
    _earlier(runs, "items-benchfill-0000000006", options=elsewhere, inputs_sha256={"items": "0" * 64})
    _earlier(runs, "items-benchfill-0000000007", options=elsewhere, inputs_sha256={})
    assert sorted(earlier_runs(runs / "items-benchfill-ffffffffff", mine)) == sorted([
        f"{runs / 'items-benchfill-0000000006'}" + said.format("unfinished", "settings that differ: items"),
        f"{runs / 'items-benchfill-0000000007'}"
        + said.format("unfinished", "the same settings; the content of its items, spec was not recorded")])
    # the panel config's content is recorded apart (config_sha256): another content is a difference
    panel = tmp_path / "panel.toml"
    panel.write_text("seed = 1\n")
    cfg = RunOptions(benchmark="demo", config=str(panel), **FAST).identity()
    _earlier(runs, "demo-benchfill-0000000008", options=cfg, config_sha256="1" * 64)
    assert earlier_runs(runs / "demo-benchfill-ffffffffff", cfg)[0] == (
        f"{runs / 'demo-benchfill-0000000008'}" + said.format("unfinished", "settings that differ: config"))


def test_a_long_items_file_stem_is_cut_in_the_run_id_and_folders_are_named_as_folders(tmp_path, capsys):
    # a 240-character stem made "File name too long"; --items or --spec given a folder said "not found"
    from benchfill.cli import main

    stem = "x" * 240
    rid = run_id_for(RunOptions(items=str(tmp_path / f"{stem}.jsonl"), spec="s.toml", benchmark=None, **FAST))
    assert rid.startswith("x" * 64 + "-benchfill-") and len(rid) < 100
    (tmp_path / "folder").mkdir()
    (tmp_path / "spec.toml").write_text('[benchmark]\nname = "mine"\n')
    (tmp_path / "items.jsonl").write_text('{"id": "q1", "problem": "1 + 1?", "answer": "2"}\n')
    for args, said in ((["--items", str(tmp_path / "folder"), "--spec", str(tmp_path / "spec.toml")],
                        f"{tmp_path / 'folder'}: a folder, not an items file"),
                       (["--items", str(tmp_path / "items.jsonl"), "--spec", str(tmp_path / "folder")],
                        f"{tmp_path / 'folder'}: a folder, not a spec file")):
        assert main(["run", *args, "--runs-dir", str(tmp_path / "runs"), "--dry-run"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"benchfill: error: {said}"


def test_a_file_given_to_one_run_and_not_to_the_other_is_refused_on_resume(tmp_path, monkeypatch):
    # files are compared by content on resume, not by path; a --responses dropped had then passed unseen and
    # the run's report was rewritten from another fit
    import random

    _custom(tmp_path / "A", [f"What is {i} plus {i}?" for i in range(24)])
    rng = random.Random(1)
    rows = [f"m{m},q{i:02d},{rng.randint(0, 4)},4" for m in range(8) for i in range(24)]
    (tmp_path / "A" / "resp.csv").write_text("model,item_id,correct,trials\n" + "\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path / "A")
    opts = dict(items="items.jsonl", spec="spec.toml", benchmark=None, backend="sim", runs_dir=str(tmp_path / "runs"),
                **FAST)
    d = run(RunOptions(**opts, responses="resp.csv"))
    with pytest.raises(ConfigError, match=rf"^run {d.name} was made with responses = '.*resp\.csv'; this command "
                                          r"asks None\."):
        run(RunOptions(**opts, run_id=d.name))


def test_a_run_held_by_another_thread_of_this_process_says_so(tmp_path):
    # a host's two threads on one run id were told "another process", naming the host's own pid
    from benchfill import locks
    from benchfill.run import _hold_run

    d = tmp_path / "r"
    d.mkdir()
    fd = _hold_run(d, "r")
    try:
        with pytest.raises(ConfigError, match=r"^run r is in progress in this process, in another thread; wait"):
            _hold_run(d, "r")
    finally:
        locks.release(fd)


def test_a_store_is_a_path_or_a_url():
    from benchfill.store import Store

    with pytest.raises(ConfigError, match=r"^store: expected a path or a URL, got int 3$"):
        Store(3)


def test_the_library_doors_say_what_they_expect():
    # a raw TypeError or AttributeError came out of these
    from benchfill.demo import demo_benchmark
    from benchfill.probes import collect_responses
    from benchfill.review import ReviewBoard
    from benchfill.sweep import run_sweep

    with pytest.raises(ConfigError, match=r"^run_dir: expected a run folder's path, got int 3$"):
        ReviewBoard(3)
    with pytest.raises(ConfigError, match=r"^seed: expected a whole number >= 0, got str 'x'$"):
        demo_benchmark("x")
    with pytest.raises(ConfigError, match=r"^store: expected a benchfill.store.Store, got NoneType$"):
        collect_responses(None, None, [], None)
    with pytest.raises(ConfigError, match=r"^sweep: expected a Sweep \(benchfill.sweep.load_sweep\(path\)\), got NoneType$"):
        run_sweep(None)


def _qid_benchmark(tmp_path):
    """A benchmark of one's own whose ids are in the column qid (the spec's id_field): its folder."""
    import json

    folder = tmp_path / "mine"
    folder.mkdir()
    with (folder / "items.jsonl").open("w") as fh:
        for i in range(24):
            fh.write(json.dumps({"qid": f"q{i:02d}", "problem": f"What is {i} plus {i + 3}?", "answer": str(2 * i + 3)})
                     + "\n")
    (folder / "spec.toml").write_text('[benchmark]\nname = "mine"\ntext_field = "problem"\nanswer_field = "answer"\n'
                                      'evaluator = "math"\nid_field = "qid"\n')
    return folder


def test_a_benchmark_with_its_own_id_field_gets_children_named_by_their_own_ids(tmp_path):
    # the rewriter was shown the parent's own id column and copied it: the release held two rows with
    # qid "q00", the parent's and its child's
    import json

    from benchfill.release import release
    from benchfill.review import ReviewBoard
    from benchfill.schema import ModelCall
    from benchfill.store import Store

    folder = _qid_benchmark(tmp_path)
    d = run(RunOptions(items=str(folder / "items.jsonl"), spec=str(folder / "spec.toml"), benchmark=None,
                       backend="sim", runs_dir=str(tmp_path / "runs"), **FAST))
    queue = [json.loads(line) for line in (d / "review_queue.jsonl").read_text().splitlines()]
    assert queue and all(e["child"]["qid"] == e["item_id"] for e in queue)
    store = Store(d / "store.db")
    try:
        prompts = [json.loads(c.request_json) for c in store.all(ModelCall)]
    finally:
        store.close()
    shown = [m["content"] for p in prompts for m in p.get("messages", []) if "<parent>" in m.get("content", "")]
    assert shown and not any('"qid"' in text for text in shown)  # no id column in what the rewriter reads
    with ReviewBoard(d) as b:
        b.decide(queue[0]["item_id"], "ann", "accept")
    rows = [json.loads(line) for line in (release(d, "1.0.0").path / "data" / "test.jsonl").read_text().splitlines()]
    assert len({r["qid"] for r in rows}) == len(rows) == 25


def test_an_item_the_given_responses_never_name_is_said_at_the_start_and_in_the_report(tmp_path, caplog):
    # a maintainer who forgot to evaluate an item was not told: the panel alone placed it, without a word
    import json
    import logging

    _custom(tmp_path / "A", [f"What is {i} plus {i}?" for i in range(24)])
    rng = np.random.default_rng(0)
    lines = ["model,item_id,correct,trials"] + [f"m{m},q{i:02d},{rng.integers(0, 5)},4"
                                                for m in range(6) for i in range(23)]  # not q23
    (tmp_path / "A" / "responses.csv").write_text("\n".join(lines) + "\n")
    opts = RunOptions(items=str(tmp_path / "A" / "items.jsonl"), spec=str(tmp_path / "A" / "spec.toml"),
                      responses=str(tmp_path / "A" / "responses.csv"), benchmark=None, backend="sim",
                      runs_dir=str(tmp_path / "runs"), **FAST)
    with caplog.at_level(logging.WARNING, logger="benchfill"):
        d = run(opts)
    said = [r.getMessage() for r in caplog.records if "no responses in the given matrix" in r.getMessage()]
    assert said == ["1 item(s) of the benchmark have no responses in the given matrix; placed by the probe "
                    "panel's rollouts alone: q23"]
    report = json.loads((d / "report.json").read_text())
    assert report["items_without_responses"] == {"placed_by_panel": ["q23"], "off_the_scale": []}
    assert "placed by the probe panel's rollouts alone: `q23`" in (d / "report.md").read_text()


def test_id_columns_stay_unique_across_runs_and_an_id_field_naming_the_text_stays_content(tmp_path):
    # a second run's child of the same name took the id <id>@<run> in the release, but its qid stayed the
    # first's; and an id_field naming the text hid the text from the rewriter and overwrote it in every child
    import json

    from benchfill.release import release
    from benchfill.review import ReviewBoard

    folder = _qid_benchmark(tmp_path)
    spec = folder / "spec.toml"
    base = dict(items=str(folder / "items.jsonl"), spec=str(spec), benchmark=None, backend="sim",
                runs_dir=str(tmp_path / "runs"), **FAST)
    for n in range(2):  # the same search twice under two run ids: the same child names, so they collide
        d = run(RunOptions(**{**base, "rounds": 1, "run_id": f"r{n}"}))
        with ReviewBoard(d) as b:
            for e in b.entries:
                b.decide(e.item_id, "ann", "accept")
        res = release(d, f"1.{n}.0", out=tmp_path / "releases")
    rows = [json.loads(x) for x in (res.path / "data" / "test.jsonl").read_text().splitlines()]
    assert len({r["qid"] for r in rows}) == len(rows)
    assert any("@" in r["id"] and r["qid"] == r["id"] for r in rows)  # the renamed one, in both columns
    # an id_field that is the text itself: the text stays content, the children keep theirs
    spec.write_text('[benchmark]\nname = "mine2"\ntext_field = "problem"\nanswer_field = "answer"\n'
                    'evaluator = "math"\nid_field = "problem"\n')
    (folder / "items2.jsonl").write_text("".join(
        json.dumps({k: v for k, v in json.loads(x).items() if k != "qid"}) + "\n"
        for x in (folder / "items.jsonl").read_text().splitlines()))
    d = run(RunOptions(**{**base, "items": str(folder / "items2.jsonl"), "runs_dir": str(tmp_path / "runs2")}))
    queue = [json.loads(x) for x in (d / "review_queue.jsonl").read_text().splitlines()]
    assert queue and all(e["child"]["problem"] != e["item_id"] and "plus" in e["child"]["problem"] for e in queue)


def test_a_run_id_naming_a_folder_of_the_users_files_is_refused(tmp_path):
    # the user's own fit.json there became the run's, without a word
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "fit.json").write_text('{"mine": 1}')
    (folder / "notes.txt").write_text("kept")
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), run_id="proj", **FAST)
    with pytest.raises(ConfigError, match=r"proj: holds no run \(no store\.db\), yet files a run writes \(fit\.json\)"):
        run(opts)
    assert (folder / "fit.json").read_text() == '{"mine": 1}'
    (folder / "fit.json").unlink()  # a folder of other files only: the run goes there, the files stay
    assert run(opts) == folder and (folder / "notes.txt").read_text() == "kept"
    assert run(opts) == folder  # and resumes there


def test_a_datasets_own_id_column_reaches_no_rewriter_or_judge_through_the_run(tmp_path):
    # the run stripped only "id" before building the prompts, so the prompts could no longer tell that
    # task_id held the item's id: every parent and reference showed it to the rewriter
    import json

    from benchfill.schema import ModelCall
    from benchfill.store import Store

    folder = tmp_path / "mine"
    folder.mkdir()
    with (folder / "items.jsonl").open("w") as fh:
        for i in range(24):
            fh.write(json.dumps({"id": f"t{i:02d}", "task_id": f"t{i:02d}", "problem": f"What is {i} plus {i + 3}?",
                                 "answer": str(2 * i + 3)}) + "\n")
    (folder / "spec.toml").write_text('[benchmark]\nname = "mine"\ntext_field = "problem"\nanswer_field = "answer"\n'
                                      'evaluator = "math"\n')
    d = run(RunOptions(items=str(folder / "items.jsonl"), spec=str(folder / "spec.toml"), benchmark=None,
                       backend="sim", runs_dir=str(tmp_path / "runs"), **FAST))
    store = Store(d / "store.db")
    try:
        asked = [m["content"] for c in store.all(ModelCall) for m in json.loads(c.request_json).get("messages", [])
                 if "<parent>" in m.get("content", "") or "<item>" in m.get("content", "")]
    finally:
        store.close()
    assert asked and not any("task_id" in text for text in asked)


def test_run_and_dry_run_leave_the_callers_options_as_given(tmp_path):
    # run() set the demo as the benchmark on the caller's own options, and reusing them with items and a spec
    # was then refused for a benchmark the caller never named
    import copy

    opts = RunOptions(gaps=1, rounds=1, runs_dir=str(tmp_path / "runs"), steering=True)
    given = copy.deepcopy(opts)
    dry_run(opts)
    assert opts == given and opts.benchmark is None


@pytest.mark.parametrize("n, said", [(1, "one item"), (2, "2 items, which the min-max scale puts at 0 and 1")])
def test_a_benchmark_of_one_or_two_items_is_refused_before_any_model_call(tmp_path, n, said):
    # a run of the README's one-item quiz spent 232 model calls and reported confirmed z of 4e8, exit 0
    import json

    items = tmp_path / "quiz.jsonl"
    items.write_text("".join(json.dumps({"id": f"uq-{i}", "question": f"How many grams are in {i + 2} kg?",
                                         "answer": str(1000 * (i + 2))}) + "\n" for i in range(n)))
    spec = tmp_path / "quiz.toml"
    spec.write_text('[benchmark]\nname = "unitquiz"\ntext_field = "question"\nanswer_field = "answer"\n'
                    'evaluator = "math"\n')
    opts = RunOptions(items=str(items), spec=str(spec), gaps=1, runs_dir=str(tmp_path / "runs"), steering=True)
    for call in (dry_run, run):
        with pytest.raises(DataError, match=f"^{items}: {said}.*; coverage gaps need at least three$"):
            call(opts)
        assert opts.steering is True  # checked on a copy: the caller's options as given (check() sets "on")
    assert not (tmp_path / "runs").exists()


def test_a_path_of_the_wrong_type_or_a_runs_dir_that_cannot_be_made_is_named_by_its_field(tmp_path):
    # pathlib's TypeError and a bare FileNotFoundError came out of the run, naming no field
    import benchfill

    with pytest.raises(ConfigError, match=r"^runs_dir: a path or name \(str\), got int 123$"):
        dry_run(RunOptions(runs_dir=123))
    with pytest.raises(ConfigError, match=r"^runs_dir /proc/nope: cannot make the run's folder there"):
        run(RunOptions(runs_dir="/proc/nope", gaps=1, rounds=1))
    with pytest.raises(ConfigError, match=r"^path: a file path \(str or Path\), got int 123$"):
        benchfill.read_responses(123)
    with pytest.raises(ConfigError, match=r"^min_models: a whole number of at least 1, got '2'$"):
        benchfill.read_responses(tmp_path / "r.csv", min_models="2")


def test_options_the_strategy_never_reads_do_not_change_the_runs_id(tmp_path):
    # a rerun without the idle option started a second run rather than resume the first
    base = dict(benchmark="demo", runs_dir=str(tmp_path))
    for strategy, idle in (("oracle", {"rounds": 3}), ("benchfill", {"rounds_matched": 3}),
                           ("benchfill", {"confirm": False, "confirm_se": 0.1, "confirm_cap": 2.0})):
        plain = {**base, "strategy": strategy, **({"confirm": False} if "confirm" in idle else {})}
        assert run_id_for(RunOptions(**plain, **{k: v for k, v in idle.items() if k != "confirm"})) \
            == run_id_for(RunOptions(**plain)), (strategy, idle)
    oracle = RunOptions(**base, strategy="oracle")
    for idle in ({"confirm": False}, {"parents": 2}, {"steering": "off"}, {"annotation": "fixed"}, {"tolerance": 0.05},
                 {"prescreen": "on"}, {"references": 4}):  # nothing of the search: the oracle does none
        assert run_id_for(RunOptions(**base, strategy="oracle", **idle)) == run_id_for(oracle), idle
    # ... while an option it does read still does
    assert run_id_for(RunOptions(**base, strategy="baseline", rounds_matched=3)) != \
        run_id_for(RunOptions(**base, strategy="baseline"))
    assert run_id_for(RunOptions(**base, rounds=3)) != run_id_for(RunOptions(**base))


@pytest.mark.parametrize("knob, value", [("sim_probes", 6), ("sim_latency_ms", 5.0), ("sim_discrimination", 0.0),
                                         ("sim_reply_habits", 1.0), ("sim_pair_sd", 0.0)])
def test_the_worlds_knobs_with_real_endpoints_are_refused(tmp_path, knob, value):
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), backend="openai", config=str(tmp_path / "p.toml"),
                      **{knob: value})
    with flag_names(), pytest.raises(ConfigError, match=rf"^--{knob.replace('_', '-')}: sets the simulated world, "
                                                       r"which does nothing with --backend openai$"):
        opts.check()


def test_a_run_made_with_an_option_its_strategy_never_reads_resumes_with_or_without_it(tmp_path):
    # its stored options held the idle value, which the id now leaves at its default: a run made so before
    # (or with the option) was refused on resume as "made with rounds = 3; this command asks 8"
    from benchfill.run import _same_run
    from benchfill.store import Store

    store = Store(tmp_path / "store.db")
    made = RunOptions(benchmark="demo", runs_dir=str(tmp_path), strategy="oracle", rounds=3)
    store.set_meta("options", {**made.identity(), "rounds": 3, "parents": 2})  # as an earlier version stored them
    for again in (made, RunOptions(benchmark="demo", runs_dir=str(tmp_path), strategy="oracle")):
        _same_run(store, again, "X", {})
    with pytest.raises(ConfigError, match="was made with seed = 0; this command asks 1"):
        _same_run(store, RunOptions(benchmark="demo", runs_dir=str(tmp_path), strategy="oracle", seed=1), "X", {})
    store.close()


def test_a_reused_run_id_with_another_strategy_names_the_strategy(tmp_path):
    # the options idle for the oracle are at their defaults on its side only: the first of them, "children", was
    # named with a default (4) the command never asked (it asked 2), where the strategy is what differs
    from benchfill.run import _same_run
    from benchfill.store import Store

    store = Store(tmp_path / "store.db")
    made = RunOptions(benchmark="demo", runs_dir=str(tmp_path), children=2, run_id="R")
    store.set_meta("options", made.identity())
    with pytest.raises(ConfigError, match=r"was made with strategy = 'benchfill'; this command asks 'oracle'"):
        _same_run(store, RunOptions(benchmark="demo", runs_dir=str(tmp_path), children=2, run_id="R",
                                    strategy="oracle"), "R", {})
    store.close()


def test_a_run_an_earlier_benchfill_made_with_an_idle_option_is_resumed_in_its_folder(tmp_path):
    # its id carried the option (rounds = 3 for the oracle): the same command named a new folder and redid the run
    import hashlib
    import json

    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), strategy="oracle", rounds=3)
    given = hashlib.sha256(json.dumps(opts.identity(idle_at_defaults=False), sort_keys=True).encode()).hexdigest()[:10]
    old = f"demo-oracle-{given}"
    new = run_id_for(opts)
    assert new != old and new == run_id_for(RunOptions(benchmark="demo", runs_dir=str(tmp_path), strategy="oracle"))
    (tmp_path / old).mkdir()
    assert run_id_for(opts) == new  # a folder without a store holds no run
    (tmp_path / old / "store.db").write_bytes(b"")
    assert run_id_for(opts) == old
    # ... whatever the new id's folder holds (a sweep plans its folders before any run: the same command, the same
    # folder, before and after another entry's run made the new one)
    (tmp_path / new).mkdir()
    (tmp_path / new / "store.db").write_bytes(b"")
    assert run_id_for(opts) == old
    # the command without the option names the run of its own id (it cannot know the old one)
    assert run_id_for(RunOptions(benchmark="demo", runs_dir=str(tmp_path), strategy="oracle")) == new


def test_how_a_run_is_shown_is_no_part_of_its_id_and_a_world_knob_none_of_a_real_runs(tmp_path):
    base = dict(benchmark="demo", runs_dir=str(tmp_path))
    # --quiet (progress off) resumes the run it was begun as
    assert RunOptions(**base, progress=False).identity() == RunOptions(**base, progress=True).identity()
    # a simulated world's knob decides a simulated run, and no real one (real runs keep the ids they had)
    sim = [RunOptions(**base, backend="sim", sim_discrimination=s).identity() for s in (0.0, 0.5)]
    assert sim[0] != sim[1]
    real = RunOptions(**base, backend="openai", config=str(tmp_path / "p.toml")).identity()
    assert "sim_discrimination" not in real
    # the probes' offsets, added later: at 0 a run keeps the id it had; set (5 by default), another world and
    # another run
    assert "sim_pair_sd" not in RunOptions(**base, backend="sim", sim_pair_sd=0.0).identity()
    assert RunOptions(**base, backend="sim").identity()["sim_pair_sd"] == 5.0
    assert "sim_pair_sd" not in real
    # how they meet the curve, added later still: about it now, added to it before (those runs keep their ids);
    # without offsets, or in a real run, it decides nothing
    assert RunOptions(**base, backend="sim").identity()["sim_pair_curve"] == "average"
    assert "sim_pair_curve" not in RunOptions(**base, backend="sim", sim_pair_curve="added").identity()
    assert "sim_pair_curve" not in RunOptions(**base, backend="sim", sim_pair_sd=0.0).identity()
    assert "sim_pair_curve" not in real
    with pytest.raises(ConfigError, match="sim_pair_curve: 'flat' unknown"):
        RunOptions(**base, sim_pair_curve="flat").check()
    # the annotator's allowance for them: runs before it had none, so at 0 a run keeps the id it had, and at
    # the default (auto) it is another run, whose annotator is another
    assert "pair_allowance" not in RunOptions(**base, pair_allowance=0.0).identity()
    assert RunOptions(**base).identity()["pair_allowance"] == "auto"


@pytest.mark.parametrize("value, ok", [("auto", True), (0.0, True), (3.5, True), (6.0, True), (6.5, False),
                                       (-0.1, False), ("3", False), (True, False)])
def test_the_pair_allowance_is_auto_or_an_sd_up_to_six_logits(tmp_path, value, ok):
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), pair_allowance=value)
    if ok:
        opts.check()
    else:
        with flag_names(), pytest.raises(ConfigError, match=r"^--pair-allowance: a number in \[0, 6\] or auto, got "):
            opts.check()


def test_the_pair_allowance_flag_says_what_it_takes(capsys):
    from benchfill.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--benchmark", "demo", "--pair-allowance", "7"])
    assert exc.value.code == 2
    assert "--pair-allowance: must be auto or an sd of the (probe, item) offsets in logits in [0, 6], got 7" in \
        capsys.readouterr().err
