"""What a new user tripped on (issue 11, point 6): each item, checked."""

from __future__ import annotations

import json
import re
import stat
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from test_review_support import make_run

from benchfill.cli import main
from benchfill.errors import DataError

ROOT = Path(__file__).resolve().parent.parent


def _all_solved(tmp_path: Path) -> tuple[Path, Path]:
    items, responses = tmp_path / "items.jsonl", tmp_path / "responses.csv"
    items.write_text("".join(json.dumps({"id": f"i{k}", "problem": f"p{k}", "answer": "1"}) + "\n" for k in range(6)))
    responses.write_text("model,item_id,correct,trials\n" + "".join(f"m{j},i{k},4,4\n" for j in range(3) for k in range(6)))
    return items, responses


def test_a_matrix_every_model_solves_gets_one_line_and_no_gap_figures(tmp_path, capsys):
    items, responses = _all_solved(tmp_path)
    assert main(["diagnose", "--items", str(items), "--responses", str(responses)]) == 2
    out, err = capsys.readouterr()
    assert "gap" not in out
    assert len(err.strip().splitlines()) == 1 and "all 6 items are solved by every model" in err
    assert "coverage gaps are undefined" in err


def test_a_fit_with_equal_difficulties_is_refused_by_the_library():
    from benchfill.coverage import diagnose
    from benchfill.irt import IrtFit

    b = 0.3 + np.array([0.0, 1e-12, -1e-12, 0.0])  # floating-point noise, no spread
    f = IrtFit(model="1pl", engine="map", models=("a",), item_ids=tuple("wxyz"), ability=np.zeros(1),
               ability_se=np.ones(1), difficulty=b, difficulty_se=np.ones(4), chance=np.zeros(4))
    with pytest.raises(DataError, match="all 4 fitted difficulties are equal"):
        diagnose(f)


def test_diagnose_with_nuts_prints_rhat_bulk_ess_and_divergences(tmp_path, capsys):
    args = ["diagnose", "--benchmark", "demo", "--engine", "nuts", "--chains", "2", "--warmup", "150", "--draws", "100"]
    assert main(args) == 0
    got = capsys.readouterr()
    line = next(x for x in got.out.splitlines() if "NUTS convergence" in x)
    assert re.search(r"max R-hat 1\.\d+, min bulk ESS \d+(\.\d+)?, divergences \d+ \(2 chains x 100 draws\)", line)
    # 2 x 100 draws cannot reach a bulk ESS of 400: the figures were printed as if they could be trusted
    warning = r"benchfill: warning: the NUTS chains have not converged \(.*min bulk ESS \d+ < 400.*\); the posterior "
    assert re.search(warning + "figures are not to be trusted", got.err)
    # with --json, and from `fit`, whose fit then feeds a run: the same line
    assert main([*args, "--json"]) == 0 and re.search(warning, capsys.readouterr().err)
    fit_args = ["fit", "--benchmark", "demo", "--engine", "nuts", "--chains", "2", "--warmup", "150", "--draws", "100"]
    assert main([*fit_args, "--out", str(tmp_path / "f.json")]) == 0 and re.search(warning, capsys.readouterr().err)


def test_more_gaps_than_the_benchmark_has_are_refused_at_the_start(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1000", "--runs-dir", str(runs), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--gaps 1000: demo has 48 items, so at most 49 gaps") and len(err.splitlines()) == 1
    assert not runs.exists()  # refused before any work


def test_review_import_with_empty_decisions_gives_a_hint_and_help_lists_the_words(tmp_path, shared_data, capsys):
    from benchfill.cli.review import DECISION_WORDS
    from benchfill.review import DECISIONS

    assert DECISION_WORDS == DECISIONS
    run = make_run(tmp_path, shared_data)
    assert main(["review", "export", str(run)]) == 0
    capsys.readouterr()
    assert main(["review", "import", str(run / "review" / "review_queue.csv")]) == 0  # nobody filled a cell
    out = capsys.readouterr().out
    assert "recorded 0 decision(s)" in out and "hint:" in out
    assert all(word in out for word in DECISIONS)
    with pytest.raises(SystemExit):
        main(["review", "import", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(word in help_text for word in DECISIONS)


def test_plots_review_files_and_selections_are_readable_by_others(tmp_path, shared_data, capsys):
    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    plot, kept = tmp_path / "ecdf.png", tmp_path / "kept.jsonl"
    assert main(["diagnose", "--benchmark", "demo", "--plot", str(plot)]) == 0
    assert main(["calibrate", "--benchmark", "demo", "--size", "20", "--out", str(kept)]) == 0
    run = make_run(tmp_path, shared_data)
    assert main(["review", "export", str(run)]) == 0
    files = [plot, kept, *(run / "review").iterdir()]
    assert len(files) >= 4 and {p.name: mode(p) for p in files} == {p.name: 0o644 for p in files}


def test_the_readme_says_to_activate_the_virtualenv_before_bare_python():
    text = (ROOT / "README.md").read_text()
    first_bare = text.index("$ python -m benchfill")
    assert "source .venv/bin/activate" in text[:first_bare]


def test_every_extra_named_in_the_dependencies_is_one_the_package_provides():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    checked = 0
    for dep in deps:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*\[([^\]]+)\]", dep)
        if not m:
            continue
        provided = set(metadata.metadata(m.group(1)).get_all("Provides-Extra") or [])
        for extra in (e.strip() for e in m.group(2).split(",")):
            assert extra in provided, f"{m.group(1)} provides no extra {extra!r} (it has {sorted(provided)})"
            checked += 1
    assert not any(d.startswith("math-verify[") for d in deps) or checked


def test_a_run_stopped_while_drawing_its_plots_leaves_no_report_naming_them(tmp_path, monkeypatch):
    # report.json and report.md are written last: a stop during the plots left a whole-looking report.md
    # whose plots were never drawn. A rerun writes it all.
    import benchfill.report as report

    args = ["run", "--benchmark", "demo", "--backend", "sim", "--gaps", "1", "--rounds", "1", "--parents", "2",
            "--children", "2", "--runs-dir", str(tmp_path / "runs"), "--run-id", "r", "--quiet"]
    drawn = report._plots

    def stopped(folder, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "_plots", stopped)
    assert main(args) == 130
    run = tmp_path / "runs" / "r"
    assert not (run / "report.md").exists() and not (run / "report.json").exists()
    monkeypatch.setattr(report, "_plots", drawn)
    assert main(args) == 0
    assert (run / "report.json").is_file() and (run / "plots" / "ecdf_before_after.png").is_file()


def test_a_run_beside_a_users_own_prompts_and_evaluators_folders_uses_benchfills(tmp_path):
    # `python -m` puts the working folder first on the import path: benchfill's templates and graders were
    # top-level packages named prompts and evaluators, and a user's own (both common names in LLM projects)
    # took their place ("no file solver_math.txt in the defaults", or an ImportError)
    import os
    import subprocess
    import sys

    for name in ("prompts", "evaluators"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-m", "benchfill", "run", "--benchmark", "demo", "--gaps", "1", "--rounds",
                           "1", "--parents", "1", "--children", "2", "--sim-probes", "4", "--references", "4",
                           "--runs-dir", "runs", "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / done.stdout.strip() / "report.json").read_text())
    assert report["backend"]["backend"] == "sim" and report["gaps_filled"] + report["gaps_outside"] <= 1 and report["gaps"]


def test_a_team_sharing_runs_by_group_can_write_each_others_files(tmp_path, shared_data, capsys):
    # umask 002: the store was made 0644 by SQLite and every sheet forced to 0644, so a second member of the
    # group could not resume, import into, edit or release the first one's run
    import os

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    old = os.umask(0o002)
    try:
        runs = tmp_path / "runs"
        assert main(["run", "--benchmark", "demo", "--gaps", "1", "--rounds", "1", "--parents", "2", "--children",
                     "2", "--quiet", "--runs-dir", str(runs)]) == 0
        run = next(runs.iterdir())
        assert main(["review", "export", str(run)]) == 0
        files = [run / "store.db", run / "fit.json", *(run / "review").iterdir()]
        assert {p.name: mode(p) for p in files} == {p.name: 0o664 for p in files}
        locks = [p for p in run.iterdir() if p.name.endswith(".lock")]
        assert locks and all(mode(p) == 0o664 for p in locks)
        os.umask(0o077)  # a private umask: a run's unreleased items stay its user's, as its store does
        assert main(["review", "export", str(run), "--out", str(tmp_path / "private")]) == 0
        assert {mode(p) for p in (tmp_path / "private").iterdir()} == {0o600}
    finally:
        os.umask(old)
    capsys.readouterr()
