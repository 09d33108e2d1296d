"""Configuration: TOML/YAML, overrides, one-line errors naming the field, no literal credentials."""

from __future__ import annotations

import pytest

from benchfill.config import load_config
from benchfill.errors import ConfigError

TOML = """
seed = 3
[[probes]]
name = "p1"
base_url = "http://127.0.0.1:8001/v1/"
model = "Qwen/Qwen2.5-0.5B-Instruct"
trials = 8
concurrency = 4
api_key_env = "VLLM_API_KEY"

[[probes]]
name = "p2"
base_url = "http://127.0.0.1:8002/v1"
model = "other"

[rewriter]
model = "openai/sim-rewriter"
api_base = "http://127.0.0.1:9000/v1"
api_key_env = "REWRITER_KEY"

[judge]
model = "openai/sim-judge"
temperature = 0.0

[benchmark]
name = "aime24"
"""


def write(tmp_path, text, name="cfg.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_toml_loads_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, TOML))
    assert [p.name for p in cfg.probes] == ["p1", "p2"]
    assert cfg.probes[0].base_url == "http://127.0.0.1:8001/v1"  # trailing slash dropped
    assert cfg.probes[0].api_key_env == "VLLM_API_KEY" and cfg.probes[1].trials == 8
    assert cfg.rewriter.model == "openai/sim-rewriter" and cfg.judge.temperature == 0.0
    assert cfg.seed == 3 and cfg.benchmark_spec().name == "aime24"


def test_yaml_equivalent(tmp_path):
    text = "probes:\n  - {name: p1, base_url: 'http://h/v1', model: m, top_p: 0.9}\njudge: {model: openai/j}\n"
    cfg = load_config(write(tmp_path, text, "cfg.yaml"))
    assert cfg.probes[0].top_p == 0.9 and cfg.judge.model == "openai/j" and cfg.rewriter is None


def test_overrides_by_index_name_and_new_key(tmp_path):
    cfg = load_config(write(tmp_path, TOML), ["probes.p2.trials=32", "probes.0.temperature=1.0",
                                               "judge.model=openai/x", "seed=11"])
    assert cfg.probes[1].trials == 32 and cfg.probes[0].temperature == 1.0
    assert cfg.judge.model == "openai/x" and cfg.seed == 11
    with pytest.raises(ConfigError, match="no element 'p9'"):
        load_config(write(tmp_path, TOML), ["probes.p9.trials=2"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(write(tmp_path, TOML), ["seed"])


@pytest.mark.parametrize("line", [
    'api_key = "abc123"',
    'token = "whatever"',
])
def test_literal_credential_fields_are_rejected(tmp_path, line):
    text = TOML.replace('api_key_env = "VLLM_API_KEY"', line)
    with pytest.raises(ConfigError, match=r"cfg.toml: field probes\[0\]\.\w+: literal credentials"):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("value", ["sk-proj-abcdefghijklmnop1234", "http://user:pw@host:80/v1",
                                   "hf_abcdefghijklmnopqrstuvwxyz"])
def test_values_that_look_like_keys_are_rejected(tmp_path, value):
    text = TOML.replace('api_base = "http://127.0.0.1:9000/v1"', f'api_base = "{value}"')
    with pytest.raises(ConfigError, match=r"field rewriter.api_base: looks like a literal credential"):
        load_config(write(tmp_path, text))


def test_errors_name_file_and_field(tmp_path):
    with pytest.raises(ConfigError, match=r"cfg.toml: field probes.0.trials: .*greater than or equal to 1"):
        load_config(write(tmp_path, TOML.replace("trials = 8", "trials = 0")))
    with pytest.raises(ConfigError, match=r"field probes.1.model: Field required \(and 1 more\)"):
        load_config(write(tmp_path, TOML.replace('model = "other"', 'modle = "other"')))
    with pytest.raises(ConfigError, match=r"field probes: .*appears twice"):
        load_config(write(tmp_path, TOML.replace('name = "p2"', 'name = "p1"')))
    with pytest.raises(ConfigError, match=r"bad.toml: cannot parse config"):
        load_config(write(tmp_path, "probes = [", "bad.toml"))
    with pytest.raises(ConfigError, match=r"bad.yaml:3: cannot parse config"):
        load_config(write(tmp_path, "a: 1\nb: [\n", "bad.yaml"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="unknown config format"):
        load_config(write(tmp_path, "{}", "cfg.ini"))
    with pytest.raises(ConfigError, match="unknown benchmark 'nope'; known: aime24"):
        load_config(write(tmp_path, TOML.replace('name = "aime24"', 'name = "nope"'))).benchmark_spec()
