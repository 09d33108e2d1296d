"""A run's options: refused before any work when no run can use them, and never mixed on resume."""

from __future__ import annotations

import pytest

from benchfill.errors import ConfigError
from benchfill.run import RunOptions, dry_run, run, run_id_for

FAST = dict(gaps=1, rounds=1, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_rewriter="kind")


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ({"children": 0}, r"--children must be at least 1, got 0"),
        ({"rounds": -1}, r"--rounds must be at least 1"),
        ({"gaps": -2}, r"--gaps must be at least 1"),
        ({"near_duplicate": 140.0}, r"--near-duplicate: a number in \[0, 100\]"),
        ({"confirm_se": float("nan")}, r"--confirm-se: a z standard error in \(0, 1\)"),
        ({"rounds": "two"}, r"--rounds: a whole number, got 'two'"),
    ],
)
def test_options_no_run_can_use_are_refused_by_run_and_dry_run_alike(tmp_path, bad, pattern):
    opts = RunOptions(benchmark="demo", runs_dir=str(tmp_path), **{**FAST, **bad})
    for call in (run, dry_run):
        with pytest.raises(ConfigError, match=pattern):
            call(opts)
    assert not any(tmp_path.iterdir())  # nothing written


def test_dry_run_refuses_more_gaps_than_the_benchmark_has(tmp_path):
    with pytest.raises(ConfigError, match=r"--gaps 1000: demo has 48 items, so at most 49 gaps"):
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
    with pytest.raises(ConfigError, match=r"--benchmark aime24 but .*panel\.toml names \[benchmark\] demo"):
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
        k: v for k, v in FAST.items() if k != "sim_rewriter"})
    for call in (dry_run, run):
        with pytest.raises(ConfigError, match=r"probes\.p1\.api_key_env: environment variable BENCHFILL_NO_SUCH_KEY "
                                              r"is not set"):
            call(opts)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
