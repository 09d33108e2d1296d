"""A release's card says what made the run: its settings with the library's ``extra``, the sha256 of every
file it read (the panel config too), the models a real run asked, the earlier runs whose children its search
read from a shared store, and templates of the user's own (BENCHFILL_PROMPTS_DIR), which are part of the run id."""

from __future__ import annotations

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.errors import ConfigError
from benchfill.release import _card_meta, release
from benchfill.review import ReviewBoard
from benchfill.run import RunOptions, _same_run, run_id_for
from benchfill.store import Store


def test_the_card_carries_extra_the_config_the_models_and_the_search_memory(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    store = Store(run / "store.db")
    store.set_meta("options", {"benchmark": "aime24", "gaps": 3, "config": "/home/me/panel.toml",
                               "extra": {"anchor_items": 20}})
    store.set_meta("inputs_sha256", {"benchmark_items": "a" * 64})
    store.set_meta("config_sha256", "c" * 64)
    store.set_meta("backend", "openai")
    store.set_meta("config", {"probes": [{"name": "p1", "model": "qwen", "base_url": "http://10.0.0.7:8000/v1",
                                          "temperature": 0.6, "top_p": 0.95, "max_tokens": 4096, "trials": 8}],
                              "rewriter": {"model": "openai/gpt-x", "api_base": "http://gw.internal/v1",
                                           "temperature": 0.7, "max_tokens": 4096}})
    store.set_meta("memory", {"earlier_runs": ["run-a", "run-b"], "entries_from_earlier_runs": 5, "gaps_reused": 1})
    store.set_meta("code", {"version": "0.1.0", "git_commit": "f" * 40, "git_dirty": True})
    store.close()
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    made = release(run, "1.0.0")
    meta = _card_meta(made.path / "README.md")
    assert meta["run_options"]["extra"] == {"anchor_items": 20} and meta["run_options"]["config"] == "panel.toml"
    assert meta["inputs_sha256"] == {"benchmark_items": "a" * 64, "config": "c" * 64}
    assert meta["run_code"] == {"version": "0.1.0", "git_commit": "f" * 40, "git_dirty": True}
    assert meta["models"] == {"probes": [{"name": "p1", "model": "qwen", "temperature": 0.6, "top_p": 0.95,
                                          "max_tokens": 4096, "trials": 8}],
                              "rewriter": {"model": "openai/gpt-x", "temperature": 0.7, "max_tokens": 4096}}
    card = (made.path / "README.md").read_text()
    assert "10.0.0.7" not in card and "gw.internal" not in card  # no endpoint of the user's own network
    assert meta["search_memory"] == {"earlier_runs": ["run-a", "run-b"], "entries_from_earlier_runs": 5,
                                     "gaps_reused": 1}
    assert ("The search read the children of earlier runs from a shared store (`run-a`, `run-b`: 5 of them), so its "
            "settings (`run_options`) alone do not make this run again.") in card


def test_prompt_templates_of_ones_own_are_part_of_the_run_id_and_a_resume_refuses_others(tmp_path, monkeypatch,
                                                                                           caplog):
    import logging

    from benchfill.run import PROMPTS_META
    from benchfill.schema import RunMeta

    opts = RunOptions(benchmark="demo", gaps=2)
    monkeypatch.delenv("BENCHFILL_PROMPTS_DIR", raising=False)
    built_in = run_id_for(opts)
    own = tmp_path / "prompts"
    own.mkdir()
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(own))
    assert run_id_for(opts) == built_in  # a folder with no template in it changes nothing
    (own / "notes.txt").write_text("what I tried")  # nor a file no run reads
    assert run_id_for(opts) == built_in
    (own / "rewriter.txt").write_text("Be creative. {parent}")
    mine = run_id_for(opts)
    assert mine != built_in and "prompts_sha256" in opts.identity()
    (own / "rewriter.txt").write_text("Be bold. {parent}")
    assert run_id_for(opts) not in (built_in, mine)
    # one run id given to both (--run-id): the resume is refused, either way round
    store = Store(tmp_path / "store.db")

    def made_with(identity):
        store.set_meta("options", identity)
        store.set_meta(PROMPTS_META, {"sha256": identity.get("prompts_sha256")})

    made_with(opts.identity())
    (own / "rewriter.txt").write_text("Be creative. {parent}")
    with pytest.raises(ConfigError, match="was made with other prompt templates than this command's"):
        _same_run(store, opts, "r", {})
    monkeypatch.delenv("BENCHFILL_PROMPTS_DIR")
    with pytest.raises(ConfigError, match="was made with prompt templates of its own; this command has the built-in"):
        _same_run(store, opts, "r", {})
    made_with(opts.identity())
    _same_run(store, opts, "r", {})
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(own))
    with pytest.raises(ConfigError, match=r"was made with the built-in prompts; .* \(BENCHFILL_PROMPTS_DIR\)"):
        _same_run(store, opts, "r", {})
    # a run made before the templates were recorded: resumed, with a note that says nothing can check them
    store.set_meta("options", {k: v for k, v in opts.identity().items() if k != "prompts_sha256"})
    with store.session() as s:
        s.delete(s.get(RunMeta, (store.run_id, PROMPTS_META)))
    with caplog.at_level(logging.WARNING, logger="benchfill"):
        _same_run(store, opts, "r", {})
    assert any("was made before benchfill recorded its prompt templates; it is resumed with the templates of "
               "BENCHFILL_PROMPTS_DIR" in r.getMessage() for r in caplog.records)
    store.close()


def test_a_run_holds_its_templates_as_they_were_when_it_began(tmp_path, monkeypatch):
    # edited during a run, a template reached its later calls, and its id changed between its folder and report
    from benchfill.prompts import held_overrides, load_prompt, overrides_digest

    own = tmp_path / "prompts"
    own.mkdir()
    (own / "rewriter.txt").write_text("Be creative. {parent}")
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(own))
    before = overrides_digest()
    with held_overrides():
        (own / "rewriter.txt").write_text("Be bold. {parent}")
        (own / "judge.txt").write_text("Judge. {item}")
        assert overrides_digest() == before and load_prompt("rewriter") == "Be creative. {parent}"
        assert load_prompt("judge") != "Judge. {item}"  # a file added meanwhile is not read either
        with held_overrides():  # a second run at once shares the hold
            assert load_prompt("rewriter") == "Be creative. {parent}"
        assert load_prompt("rewriter") == "Be creative. {parent}"
    assert overrides_digest() != before and load_prompt("rewriter") == "Be bold. {parent}"
    # a held folder removed (or renamed) meanwhile is still the run's
    import shutil

    before = overrides_digest()
    with held_overrides():
        shutil.rmtree(own)
        assert overrides_digest() == before and load_prompt("rewriter") == "Be bold. {parent}"
    assert overrides_digest() is None


def test_diff_says_which_items_are_placed_otherwise(tmp_path, shared_data):
    # a reproduction diffed against the original release said "0 changed" of originals measured elsewhere
    from benchfill.irt.fit import IrtFit
    from benchfill.release import diff_releases

    first, second = make_run(tmp_path / "a", shared_data), make_run(tmp_path / "b", shared_data)
    fit = IrtFit.load(second / "fit.json")
    moved = IrtFit.from_dict({**fit.to_dict(), "difficulty": [b + (0.5 if k == 3 else 0.0)
                                                              for k, b in enumerate(fit.difficulty)]})
    store = Store(second / "store.db")
    store.set_meta("fit", moved.to_dict())
    store.close()
    made = []
    for run in (first, second):
        with ReviewBoard(run) as b:
            b.decide(CHILD_IDS[0], "ann", "accept")
        made.append(release(run, "1.0.0", out=run.parent / "rel").path)
    d = diff_releases(*made)
    assert not d.added and not d.removed and not d.changed
    assert fit.item_ids[3] in d.placed_otherwise
    assert d.lines()[-1].startswith(f"placed otherwise: {len(d.placed_otherwise)} item(s) in both have another "
                                    "difficulty or z (measured anew, not edited): ")
    same = diff_releases(made[0], made[0])
    assert same.placed_otherwise == [] and len(same.lines()) == 1


def test_a_simulated_runs_card_names_the_rewriter_preset_it_ran_with(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)  # a simulated run
    store = Store(run / "store.db")
    store.set_meta("options", {"benchmark": "aime24", "sim_rewriter": None})  # None: the default preset
    store.close()
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    meta = _card_meta(release(run, "1.0.0").path / "README.md")
    assert meta["run_options"]["sim_rewriter"] == "realistic" and meta["models"] is None


def test_the_code_identity_is_the_checkouts_commit_and_none_for_a_copy_outside_git(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import benchfill
    from benchfill.source import code_identity

    here = Path(benchfill.__file__).parent
    head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True)
    got = code_identity()
    assert got["version"] == benchfill.__version__
    if head.returncode == 0:  # (CI runs a clean checkout: a commit, and nothing changed from it)
        assert got["git_commit"] == head.stdout.strip() and got["git_dirty"] in (False, True)
    shutil.copytree(here, tmp_path / "benchfill", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-c", "from benchfill.source import code_identity as c; print(c())"],
                         capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                                                                            "PYTHONPATH": str(tmp_path)})
    want = {"version": benchfill.__version__, "git_commit": None, "git_dirty": None}
    assert out.stdout.strip() == repr(want), out.stderr


def test_a_run_and_a_sweep_hold_their_templates_before_any_work(tmp_path, monkeypatch):
    import contextlib

    import benchfill.prompts
    from benchfill.run import run
    from benchfill.sweep import load_sweep, run_sweep

    class Held(Exception):
        pass

    @contextlib.contextmanager
    def held(user_dir=None):
        raise Held
        yield

    monkeypatch.setattr(benchfill.prompts, "held_overrides", held)
    with pytest.raises(Held):
        run(RunOptions(benchmark="demo", gaps=1, runs_dir=str(tmp_path / "runs")))
    (tmp_path / "sweep.toml").write_text('[[benchmarks]]\nname = "demo"\n')
    with pytest.raises(Held):
        run_sweep(load_sweep(tmp_path / "sweep.toml"))
    assert not (tmp_path / "runs").exists()
