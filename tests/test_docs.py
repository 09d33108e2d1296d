"""The examples the README and docs show must stay true."""

from pathlib import Path

from benchfill.config import load_config

ROOT = Path(__file__).resolve().parent.parent


def test_example_panel_config_loads():
    cfg = load_config(ROOT / "docs" / "panel.example.toml")
    assert [p.name for p in cfg.probes] == ["qwen3-1.7b", "qwen3-8b", "llama-3.1-8b"]
    assert cfg.rewriter.model == "openai/gpt-4o" and cfg.judge.temperature == 0.0
    assert cfg.benchmark_spec().name == "aime24"


def test_readme_commands_name_existing_subcommands():
    from benchfill.cli import build_parser

    parser = build_parser()
    text = (ROOT / "README.md").read_text()
    commands = {
        line.split("python -m benchfill ")[1].split()[0]
        for line in text.splitlines()
        if "python -m benchfill " in line and "..." not in line.split("python -m benchfill ")[1].split()[0]
    }
    assert commands >= {"run", "diagnose", "fit", "calibrate", "review", "release", "probes", "sim"}
    sub = next(a for a in parser._actions if a.dest == "command")
    assert commands <= set(sub.choices), commands - set(sub.choices)


def test_every_public_name_resolves_and_import_stays_light():
    import subprocess
    import sys

    import benchfill

    for name in benchfill.__all__:
        assert getattr(benchfill, name) is not None, name
    # `import benchfill` alone must not pull in the heavy stack (CLI start-up depends on it).
    code = "import sys, benchfill; print(sorted(m for m in ('numpy', 'scipy', 'litellm', 'openai', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
