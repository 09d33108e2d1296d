"""What a sweep's table says, and what a sweep refuses, as a reviewer found them.

A run against `sim serve`'s endpoints is simulated whatever the sweep's backend is called, and its table says
so; rows of different k (an entry's own gaps) each name theirs and are averaged apart; endpoints that cannot
be reached end the sweep as they end a run (exit 3), before any folder; a run that has another store refuses
it before that store is made; and docs/fleets.md shows what `probes check` prints.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_fleet import dead_url
from test_sweep_config import GOOD, _report  # the smallest sweep that runs; a report as a run writes it

from benchfill.cli import main
from benchfill.errors import ConfigError
from benchfill.sweep import load_sweep
from benchfill.sweep_table import collect, markdown, write_table

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _write(folder: Path, body: str, name: str = "sweep.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(body)
    return path


def _reports(sweep, simulated=lambda plan: False) -> None:
    """Each run's report.json, as the run writes it (top_k: its gaps), the reduction 1 - 1.0 / 2.0 * k."""
    for p in sweep.runs:
        p.run_dir.mkdir(parents=True, exist_ok=True)
        rep = _report(p.run_dir.name, p.seed, 2.0 * p.opts.gaps, 1.0, 0.01, 10, 100)
        rep.update(top_k=p.opts.gaps, simulated=simulated(p))
        (p.run_dir / "report.json").write_text(json.dumps(rep))


def test_runs_against_sim_serve_endpoints_make_a_simulated_table_whatever_the_backend(tmp_path):
    # backend openai with a panel pointed at `sim serve`: every run's report said simulated, the table did not
    body = GOOD.replace('runs_dir = "runs"', 'runs_dir = "runs"\nbackend = "openai"\nconfig = "panel.toml"') \
        .replace("sim_probes = 6\n", "").replace('[{name = "demo"}]', '[{name = "demo"}, {name = "aime24"}]')
    sweep = load_sweep(_write(tmp_path, body))
    _reports(sweep, simulated=lambda p: True)
    table = write_table(sweep)
    assert table["simulated"] is True and table["real_runs"] == []
    assert json.loads(Path(table["paths"]["table.json"]).read_text())["simulated"] is True
    md = Path(table["paths"]["table.md"]).read_text()
    assert md.startswith("**SIMULATED SWEEP**: the configured endpoints serve benchfill's simulated world "
                         "(`sim serve`); no real LLM answered (backend openai).\n"), md
    # One benchmark's runs simulated, the other's real: the table says which
    _reports(sweep, simulated=lambda p: p.row == "aime24")
    table = collect(sweep)
    assert table["simulated"] is True
    assert table["simulated_runs"] == ["aime24/benchfill/seed0"] and table["real_runs"] == ["demo/benchfill/seed0"]
    assert markdown(table).startswith("**PARTLY SIMULATED SWEEP**: these runs' endpoints served benchfill's "
                                      "simulated world (`sim serve`), no real LLM answering them: "
                                      "aime24/benchfill/seed0; the rest ran against real endpoints")
    _reports(sweep)  # real endpoints throughout: no banner
    table = collect(sweep)
    assert table["simulated"] is False and not markdown(table).startswith("**")


def test_rows_of_different_k_each_name_theirs_and_are_averaged_apart(tmp_path):
    # demo with the sweep's gaps = 1, d2 with its own gaps = 2: d2's top-2 sum once sat under "top-1 before",
    # and the average mixed top-1 and top-2 reductions
    body = GOOD.replace('[{name = "demo"}]', '[{name = "demo"}, {name = "demo", label = "d2", gaps = 2}, '
                                            '{name = "aime24", gaps = 2}]')
    sweep = load_sweep(_write(tmp_path, body))
    _reports(sweep)  # reductions: 1 - 1/2 = 0.5 at k = 1, 1 - 1/4 = 0.75 at k = 2
    table = collect(sweep)
    assert [r["top_k"] for r in table["rows"]] == [1, 2, 2]
    assert table["average_reduction"] == {"benchfill": None}  # no one figure over different k
    assert table["average_reduction_by_k"] == {"1": {"benchfill": pytest.approx(0.5)},
                                               "2": {"benchfill": pytest.approx(0.75)}}
    md = markdown(table)
    assert "# Sweep sweep: top-k gap sum before and after gap filling" in md
    assert "| benchmark | items | k | top-k before | benchfill after | benchfill reduction |" in md
    assert "| demo | 10 | 1 | 2.0000 | 1.0000 | 50.00% |" in md
    assert "| d2 | 10 | 2 | 4.0000 | 1.0000 | 75.00% |" in md
    assert "| average |  | 1 |  |  | 50.00% |" in md and "| average |  | 2 |  |  | 75.00% |" in md
    # one k throughout: the table as it always was
    sweep = load_sweep(_write(tmp_path / "one", GOOD))
    _reports(sweep)
    md = markdown(collect(sweep))
    assert "| benchmark | items | top-1 before |" in md and "| average |  |  |  | 50.00% |" in md


def test_endpoints_that_cannot_be_reached_end_the_sweep_as_a_run_before_any_folder(tmp_path, capsys):
    url = dead_url()
    (tmp_path / "panel.toml").write_text(
        f'[[probes]]\nname = "p1"\nbase_url = "{url}"\nmodel = "m"\n'
        f'[rewriter]\nmodel = "openai/r"\napi_base = "{url}"\n[judge]\nmodel = "openai/j"\napi_base = "{url}"\n')
    path = _write(tmp_path, GOOD.replace('runs_dir = "runs"', 'runs_dir = "runs"\nbackend = "openai"\n'
                                         'config = "panel.toml"').replace("sim_probes = 6\n", ""))
    assert main(["sweep", "--config", str(path), "--quiet"]) == 3  # as `benchfill run`: README's exit status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"benchfill: error: {path}: field config: {tmp_path / 'panel.toml'}: "
                                               f"p1 at {url}: unreachable: "), err
    assert not (tmp_path / "runs").exists()


def test_a_run_with_another_store_refuses_the_sweep_before_the_store_is_made(tmp_path, capsys, monkeypatch):
    # The reviewer's steps: one sweep with --store sqlite:///rel.db from one folder, the same from another;
    # the second was refused rightly, but only after it had made s1/rel.db.
    path = _write(tmp_path, GOOD.replace('runs_dir = "runs"\n', ""))
    runs = tmp_path / "abs"
    monkeypatch.chdir(tmp_path)
    plan = load_sweep(path, store="sqlite:///rel.db", runs_dir=str(runs)).runs[0]
    plan.run_dir.mkdir(parents=True)  # as the first sweep left it (its store.url)
    (plan.run_dir / "store.url").write_text(f"sqlite:///{tmp_path / 'rel.db'}\n{plan.run_dir.name}\n")
    (tmp_path / "s1").mkdir()
    monkeypatch.chdir(tmp_path / "s1")
    assert main(["sweep", "--config", str(path), "--runs-dir", str(runs), "--store", "sqlite:///rel.db",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"benchfill: error: {plan.run_dir / 'store.url'}: this run already uses another store "
                   f"(sqlite:///{tmp_path / 'rel.db'})"]
    assert list((tmp_path / "s1").iterdir()) == []  # no rel.db
    assert sorted(p.name for p in runs.iterdir()) == [plan.run_dir.name]  # no sweep folder either


def test_a_run_with_its_own_store_tells_the_sweep_what_a_sweep_can_do(tmp_path, capsys):
    # A sweep has no --run-id: the refusal said "rerun without --store, or give another --run-id".
    path = _write(tmp_path, GOOD)
    plan = load_sweep(path).runs[0]
    plan.run_dir.mkdir(parents=True)
    (plan.run_dir / "store.db").write_bytes(b"")  # an earlier sweep's run, made without a shared store
    assert main(["sweep", "--config", str(path), "--store", f"sqlite:///{tmp_path / 'shared.db'}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # (not "another label": a registered benchmark's runs are named by their settings, not by their label)
    assert err == [f"benchfill: error: {plan.run_dir / 'store.db'}: this run already has its own store; run the "
                   "sweep without a store (neither the file's store nor --store), or give it another --runs-dir"]
    assert not (tmp_path / "shared.db").exists()


def test_two_entries_labelled_alike_are_asked_for_another_label(tmp_path):
    path = _write(tmp_path, 'benchmarks = [{name = "demo", label = "x"}, {name = "aime24", label = "x"}]\n')
    with pytest.raises(ConfigError, match=re.escape(f"{path}: field benchmarks.1: 'x' appears twice "
                                                    "(give one another label)")):
        load_sweep(path)
    path = _write(tmp_path, 'benchmarks = [{name = "demo"}, {name = "demo"}]\n')
    with pytest.raises(ConfigError, match=re.escape("'demo' appears twice (give one a label)")):
        load_sweep(path)


def test_a_sweep_named_after_its_file_keeps_the_rule_for_names(tmp_path):
    body = GOOD
    path = _write(tmp_path, body, name="my stem!.toml")
    with pytest.raises(ConfigError) as got:
        load_sweep(path)
    assert str(got.value) == (f"{path}: field name: the file's name 'my stem!' (the sweep's name when none is "
                              "given) may hold only letters, digits, '.', '_' and '-'; add name = \"my_stem\"")
    assert not (tmp_path / "runs").exists()
    path.write_text('name = "my_stem"\n' + body)
    assert load_sweep(path).out_dir.name == "sweep-my_stem"
    assert load_sweep(_write(tmp_path, body, name="a-b_c.1.toml")).name == "a-b_c.1"  # a good stem is its name


def test_fleets_doc_shows_what_probes_check_prints(tmp_path, capsys):
    """docs/fleets.md's sample is the command's own output against `sim serve` on loopback (its ports aside)."""
    from benchfill.benchmarks import get_benchmark
    from benchfill.sim import SimServer, World

    doc = (DOCS / "fleets.md").read_text()
    block = doc.split("nothing serves:\n\n```text\n", 1)[1].split("```", 1)[0].splitlines()
    bench = get_benchmark("demo")
    world = World.from_items(bench.items, evaluator=bench.spec.evaluator, text_field=bench.spec.text_field,
                             answer_field=bench.spec.answer_field, matrix=bench.matrix, n_probes=4, seed=0)
    with SimServer(world) as srv:
        gone = dead_url()
        u = srv.base_url
        cfg = tmp_path / "panel.toml"
        cfg.write_text(f'[[probes]]\nname = "p1"\nmodel = "sim-probe-01"\nbase_url = "{u}"\n'
                       f'[[probes]]\nname = "p2"\nmodel = "sim-probe-02"\nreplicas = ["{u}", "{gone}"]\n'
                       f'[[probes]]\nname = "p3"\nmodel = "sim-probe-03"\nbase_url = "{u}"\n'
                       f'[rewriter]\nmodel = "openai/sim-rewriter"\napi_base = "{u}"\n'
                       f'[judge]\nmodel = "openai/sim-judge"\napi_base = "{u}"\n')
        assert main(["probes", "check", "--config", str(cfg)]) == 3
    cap = capsys.readouterr()
    said = (cap.out + cap.err).replace(u, "http://127.0.0.1:18431/v1").replace(gone, "http://127.0.0.1:18432/v1")
    assert said.splitlines() == block


def test_anchor_items_at_its_default_names_the_run_benchfill_run_makes(tmp_path):
    # docs/sweep-shared-data.toml spelt out anchor_items = 300, the default: its mmlu-pro runs got ids of their
    # own, so a `benchfill run` of the same settings (which has no such flag) was another run, paid again.
    from benchfill.engine.backend import ANCHOR_ITEMS

    def ids(extra: str, folder: str) -> list[str]:
        body = GOOD.replace('benchmarks = [{name = "demo"}]', f'benchmarks = [{{name = "demo"{extra}}}]')
        return [p.run_dir.name for p in load_sweep(_write(tmp_path / folder, body)).runs]

    plain = ids("", "plain")
    assert ids(f", anchor_items = {ANCHOR_ITEMS}", "spelt") == plain
    assert ids(", anchor_items = 200", "other") != plain  # a cap of its own is another run
    # one the sweep made before keeps its folder: the same file resumes it there
    plan = load_sweep(tmp_path / "spelt" / "sweep.toml").runs[0]
    given = plan.opts.identity(idle_at_defaults=False)
    assert given["extra"] == {"anchor_items": ANCHOR_ITEMS}
    import hashlib

    old = f"demo-benchfill-{hashlib.sha256(json.dumps(given, sort_keys=True).encode()).hexdigest()[:10]}"
    assert old != plan.run_dir.name
    (plan.run_dir.parent / old).mkdir(parents=True)
    (plan.run_dir.parent / old / "store.db").write_bytes(b"")
    assert load_sweep(tmp_path / "spelt" / "sweep.toml").runs[0].run_dir.name == old
    assert load_sweep(tmp_path / "plain" / "sweep.toml").runs[0].run_dir.name == plan.run_dir.name


def test_a_sweep_names_an_earlier_run_beside_one_it_starts_anew_as_run_does(tmp_path, capsys):
    # after an upgrade that added a setting, a sweep's rerun made new runs beside the old and wrote over the
    # table without a word, where `benchfill run` names the earlier run
    from benchfill.store import Store

    path = _write(tmp_path, 'benchmarks = [{name = "demo"}]\nstrategies = ["oracle"]\ngaps = 1\nruns_dir = "runs"\n')
    assert main(["sweep", "--config", str(path), "--quiet"]) == 0
    made = load_sweep(path).runs[0].run_dir
    old = made.with_name("demo-oracle-0123456789")  # as an earlier benchfill named it, without a later setting
    made.rename(old)
    store = Store(old / "store.db")
    options = store.get_meta("options")
    del options["misfit"]
    store.set_meta("options", options)
    store.close()
    capsys.readouterr()
    assert main(["sweep", "--config", str(path)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if ": note: " in line]
    assert len(notes) == 1 and f"{old} is an earlier finished run of this benchmark and strategy (settings that " \
                               "differ: misfit); this run starts anew beside it" in notes[0]
    assert main(["sweep", "--config", str(path)]) == 0  # resumed: nothing starts anew, nothing to name
    assert ": note: " not in capsys.readouterr().err
