"""Configuration: TOML/YAML, overrides, one-line errors naming the field, no literal credentials."""

from __future__ import annotations

import re

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




def test_an_override_names_a_probe_whose_name_holds_dots(tmp_path):
    # the example panel's own probes are named so (qwen3-1.7b, llama-3.1-8b): the key was split at their dots
    named = TOML.replace('name = "p1"', 'name = "qwen3-1.7b"').replace('name = "p2"', 'name = "llama-3.1-8b"')
    assert 'name = "llama-3.1-8b"' in named
    cfg = load_config(write(tmp_path, named), ["probes.qwen3-1.7b.trials=16", "probes.llama-3.1-8b.temperature=0.5"])
    assert cfg.probes[0].trials == 16 and cfg.probes[1].temperature == 0.5
    with pytest.raises(ConfigError, match=r"no element 'qwen3-1\.8b' \(use an index or a probe name: qwen3-1\.7b, "):
        load_config(write(tmp_path, named), ["probes.qwen3-1.8b.trials=2"])


@pytest.mark.parametrize("override, said", [
    ("probes.q9.api_key=LEAKTESTpanelDDDDDDDDzz", "override 'probes.q9.api_key': no element 'q9'"),
    ("seed.x.y=LEAKTESTpanelDDDDDDDDzz", "override 'seed.x.y': seed is not a section"),
    ("rewriter.api_key LEAKTESTpanelDDDDDDDDzz", "override 'rewriter.api_key' ...: expected KEY=VALUE"),
    ("probes.x.apikey:LEAKTESTpanelDDDDDDDDzz", "override 'probes.x.apikey' ...: expected KEY=VALUE"),
    ("sk-proj-LEAKTEST123DEF456ghi789JKL", "override '***' ...: expected KEY=VALUE"),  # a key pasted alone
])
def test_an_override_that_fails_is_named_by_its_key_not_its_value(tmp_path, override, said):
    # the value may be a key pasted where a name was meant: the error line reaches the terminal and the logs
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, TOML + "seed = 3\n"), [override])
    assert said in str(err.value) and "LEAKTEST" not in str(err.value)


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
    with pytest.raises(ConfigError, match=r"field probes.1.modle: not a field here \(is it model, which is missing\?\)$"):
        load_config(write(tmp_path, TOML.replace('model = "other"', 'modle = "other"')))
    # the two clients' names for an endpoint: one given where the other is meant is named as such
    with pytest.raises(ConfigError, match=r"field rewriter.base_url: not a field here \(the rewriter and judge name "
                                          r"their endpoint api_base, as litellm does\)$"):
        load_config(write(tmp_path, TOML.replace('api_base = "http://127.0.0.1:9000/v1"',
                                                 'base_url = "http://127.0.0.1:9000/v1"', 1)))
    with pytest.raises(ConfigError, match=r"field probes: .*appears twice"):
        load_config(write(tmp_path, TOML.replace('name = "p2"', 'name = "p1"')))
    with pytest.raises(ConfigError, match=r"bad.toml: cannot parse config"):
        load_config(write(tmp_path, "probes = [", "bad.toml"))
    with pytest.raises(ConfigError, match=r"bad.yaml:3: cannot parse config"):
        load_config(write(tmp_path, "a: 1\nb: [\n", "bad.yaml"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"a folder, not a config file"):
        load_config(tmp_path)
    # YAML kept the last of a key given twice, where TOML refuses it: the second model replaced the first
    dup = "probes:\n  - name: p1\n    base_url: http://h:1/v1\n    model: first\n    model: second\n"
    with pytest.raises(ConfigError, match=r"dup.yaml:5: cannot parse config: key 'model' given twice \(first on line 4\)"):
        load_config(write(tmp_path, dup, "dup.yaml"))
    with pytest.raises(ConfigError, match=r"key 'x' given twice"):
        load_config(write(tmp_path, "benchmark: {x: 1, x: 2}\n", "flow.yaml"))
    # a string where a number belongs is named, not read as the number
    with pytest.raises(ConfigError, match=r"field probes.0.trials: Input should be a valid integer"):
        load_config(write(tmp_path, TOML.replace("trials = 8", 'trials = "8"')))
    with pytest.raises(ConfigError, match="unknown config format"):
        load_config(write(tmp_path, "{}", "cfg.ini"))
    with pytest.raises(ConfigError, match="unknown benchmark 'nope'; known: aime24"):
        load_config(write(tmp_path, TOML.replace('name = "aime24"', 'name = "nope"'))).benchmark_spec()


@pytest.mark.parametrize("where, value, what", [
    ("probes[0].base_url", "http://s3cret-tok@127.0.0.1:8001/v1", "a name or token before '@'"),
    ("probes[0].base_url", "http://127.0.0.1:8001/v1?token=s3cret-q", "a secret in its query string: token"),
    ("probes[0].base_url", "http://127.0.0.1:8001/v1?api_key=s3cret-q", "a secret in its query string: api_key"),
    ("probes[0].base_url", "http://127.0.0.1:8001/v1?api-version=1&key=s3cret-q", "a secret in its query string: key"),
    ("probes[0].base_url", "https://h.example/v1?sig=s3cret-q", "a secret in its query string: sig"),
    ("probes[0].base_url", "http://u:pw/s3cret@127.0.0.1:8001/v1", "a password"),  # an unescaped '/' in it
    ("probes[1].replicas[1]", "http://s3cret-tok@127.0.0.1:8003/v1", "a name or token before '@'"),
    ("probes[1].replicas[0].base_url", "http://127.0.0.1:8002/v1?access_token=s3cret-q",
     "a secret in its query string: access_token"),
    ("rewriter.api_base", "http://s3cret-tok@127.0.0.1:9000/v1", "a name or token before '@'"),
    ("rewriter.api_base", "http://127.0.0.1:9000/v1?token=s3cret-q", "a secret in its query string: token"),
])
def test_endpoint_urls_with_user_info_or_secret_query_parameters_are_refused(tmp_path, where, value, what):
    """Such a URL would reach the report, the store's recorded config, fleet warnings and errors."""
    text = TOML.replace('base_url = "http://127.0.0.1:8002/v1"',
                        'replicas = [{base_url = "http://127.0.0.1:8002/v1"}, "http://127.0.0.1:8003/v1"]')
    old = {"probes[0].base_url": 'base_url = "http://127.0.0.1:8001/v1/"',
           "probes[1].replicas[1]": '"http://127.0.0.1:8003/v1"',
           "probes[1].replicas[0].base_url": '{base_url = "http://127.0.0.1:8002/v1"}',
           "rewriter.api_base": 'api_base = "http://127.0.0.1:9000/v1"'}[where]
    new = old.split('"')[0] + f'"{value}"' + ("}" if old.endswith("}") else "")
    assert load_config(write(tmp_path, text)).probes[1].is_fleet  # the file is good before
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text.replace(old, new)))
    assert str(err.value) == (f"{tmp_path / 'cfg.toml'}: field {where}: looks like a literal credential (the URL "
                              f"carries {what}); put it in an environment variable and name it with api_key_env")
    with pytest.raises(ConfigError, match=rf"<overrides>: field rewriter\.api_base: .*\(the URL carries {re.escape(what)}\)"):
        load_config(None, ["rewriter.model=openai/x", f"rewriter.api_base={value}"])


def test_urls_without_credentials_load(tmp_path):
    text = TOML.replace('api_base = "http://127.0.0.1:9000/v1"',
                        'api_base = "https://h.example/openai/v1?api-version=2024-06-01"')
    text = text.replace('name = "aime24"', 'name = "aime24"\nsource = "https://medium.com/@someone/aime-notes"')
    cfg = load_config(write(tmp_path, text))
    assert cfg.rewriter.api_base == "https://h.example/openai/v1?api-version=2024-06-01"


@pytest.mark.parametrize("name", ["AUDITSECRET0123456789abcdef", "a3f9c0d1e2b4a5968778c0ffee", "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5",
                                  "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"])
def test_a_key_pasted_into_api_key_env_is_refused(tmp_path, name):
    # each is a valid variable name, which a serve script would print as "${NAME:?set NAME ...}"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, TOML.replace('api_key_env = "VLLM_API_KEY"', f'api_key_env = "{name}"')))
    assert str(err.value) == (f"{tmp_path / 'cfg.toml'}: field probes[0].api_key_env: looks like a key, not the name "
                              "of an environment variable; put the key in a variable (e.g. VLLM_API_KEY) and name "
                              "that variable here")


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "VLLM_API_KEY", "MY_PROBE_KEY_2", "HF_TOKEN", "AUDIT_KEY",
                                  "AZURE_OPENAI_API_KEY_2024", "BENCHFILL_SCORER_API_KEY", "panelKey",
                                  "HUGGINGFACEHUBAPITOKEN", "OpenRouterApiKeyForTheProbes"])
def test_real_variable_names_in_api_key_env_load(tmp_path, name):
    text = TOML.replace('api_key_env = "VLLM_API_KEY"', f'api_key_env = "{name}"')
    assert load_config(write(tmp_path, text)).probes[0].api_key_env == name


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    # the duplicate-key check reads the keys as written: a key a merge ("<<") brings in may be set again
    text = ("x-probe: &probe {base_url: 'http://h:1/v1', model: m, trials: 8}\n"
            "probes:\n  - <<: *probe\n    name: p1\n    trials: 4\n")
    cfg = load_config(write(tmp_path, text.replace("x-probe", "benchmark"), "merge.yaml"))
    assert cfg.probes[0].trials == 4 and cfg.probes[0].model == "m"
    # a merge of a mapping that itself merges, anchored deeper than its alias (once read as a duplicate)
    nested = "benchmark:\n  base: &base {k: 0}\n  a: {b: {c: &x {<<: *base, k: 1}}}\n  d: {<<: *x, k: 2}\n"
    assert load_config(write(tmp_path, nested, "nested.yaml")).benchmark["d"] == {"k": 2}


def test_an_infinite_number_and_two_probes_that_are_one_model_are_refused(tmp_path):
    """timeout_s = inf passed the check and ended the run in a traceback from aiohttp; two names for one
    model at one endpoint with one sampling gave the fit the same answers twice (the call cache shares them)."""
    inf = tmp_path / "inf.toml"
    inf.write_text('[[probes]]\nname = "p1"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\ntimeout_s = inf\n')
    with pytest.raises(ConfigError, match=r"^.*inf\.toml: field probes\.0\.timeout_s: Input should be a finite number$"):
        load_config(inf)
    probe = '[[probes]]\nname = "{}"\nbase_url = "http://127.0.0.1:1/v1{}"\nmodel = "m"\n{}'
    dup = tmp_path / "dup.toml"
    dup.write_text(probe.format("p1", "", "") + probe.format("p2", "/", "trials = 4\n"))
    with pytest.raises(ConfigError, match=r"field probes: probes 'p1' and 'p2' are one model \(m\) served at one "
                                          r"endpoint with the same key and sampling"):
        load_config(dup)
    for other in ("temperature = 1.0\n", 'api_key_env = "BF_OTHER_KEY"\n'):  # another sampling, or a key a
        dup.write_text(probe.format("p1", "", "") + probe.format("p2", "", other))  # gateway may route elsewhere
        assert [p.name for p in load_config(dup).probes] == ["p1", "p2"]


def test_a_yaml_error_says_what_is_wrong_and_a_temperature_past_two_is_refused(tmp_path):
    # the YAML line kept only its context ("while scanning for the next token"), not the tab it found
    with pytest.raises(ConfigError, match=r"tabs\.yaml:2: cannot parse config: found character '\\t' that cannot "
                                          r"start any token"):
        load_config(write(tmp_path, "probes:\n\t- name: p1\n", "tabs.yaml"))
    # OpenAI's range is [0, 2]: a 5 was planned, and refused by the server at every call
    with pytest.raises(ConfigError, match=r"field probes.0.temperature: Input should be less than or equal to 2"):
        load_config(write(tmp_path, TOML.replace("trials = 8", "trials = 8\ntemperature = 5")))
    with pytest.raises(ConfigError, match=r"field judge.temperature: Input should be less than or equal to 2"):
        load_config(write(tmp_path, TOML.replace("temperature = 0.0", "temperature = 2.5")))


def test_a_bare_yaml_on_or_off_is_read_as_meant():
    # YAML 1.1 reads off as false: "False is neither on nor off"
    from benchfill.run import RunOptions

    opts = RunOptions(benchmark="demo", steering=False, prescreen=True)
    opts.check()
    assert (opts.steering, opts.prescreen) == ("off", "on")


def test_a_single_probes_table_is_told_to_repeat(tmp_path):
    with pytest.raises(ConfigError, match=r"field probes: Input should be a valid list \(in TOML, a list of tables "
                                          r"is written \[\[probes\]\], once per entry\)"):
        load_config(write(tmp_path, '[probes]\nname = "p1"\nbase_url = "http://127.0.0.1:8001/v1"\nmodel = "m"\n'))


def test_a_negative_seed_is_refused_as_the_cli_refuses_it(tmp_path):
    # it went on into the written vLLM script as --seed -5
    with pytest.raises(ConfigError, match="seed"):
        load_config(write(tmp_path, TOML.replace("seed = 3", "seed = -5")))
    with pytest.raises(ConfigError, match="seed"):
        load_config(write(tmp_path, TOML), ["seed=-5"])
