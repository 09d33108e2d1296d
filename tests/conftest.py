"""Test-wide guards: no test reaches the internet or a paid API.

Sockets may connect, send datagrams and look names up on loopback only; anything else that goes through
Python's ``socket`` module fails loudly (``_socket`` called directly, or a C library's own sockets, would go
around it). Tests that need a live endpoint carry the ``live`` marker and are deselected
(``-m "not live"`` in pyproject's addopts; ``pytest -m live`` runs them).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import tempfile

import pytest

from benchfill import netguard
from benchfill.netguard import NetworkBlocked  # noqa: F401  (the tests take it from here)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# No test writes to the user's caches: Hugging Face (datasets, hub), matplotlib, inspect_ai get a temp
# folder for this test process and the processes it starts, removed at exit.
_CACHE_ROOT = tempfile.mkdtemp(prefix="benchfill-tests-")
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)
os.environ["HF_HOME"] = os.path.join(_CACHE_ROOT, "hf")
for _var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_MODULES_CACHE"):
    os.environ.pop(_var, None)
os.environ["MPLCONFIGDIR"] = os.path.join(_CACHE_ROOT, "matplotlib")
os.environ["BENCHFILL_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "benchfill")  # order-test calibrations (search screen)
# inspect_ai keeps traces and sample buffers in the XDG data folder; arviz its daily warning, dconf and
# chromium their state in the cache and config folders; PyTensor (pymc's backend) compiles under ~/.pytensor.
# HOME itself is a temp folder too, for whatever else writes under ~ (it had: ~/.pytensor, ~/.cache/arviz,
# ~/.config/chromium, ~/.cache/dconf).
for _var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
    os.environ[_var] = os.path.join(_CACHE_ROOT, _var.lower())
os.environ["HOME"] = os.path.join(_CACHE_ROOT, "home")
os.makedirs(os.environ["HOME"])
os.environ["PYTENSOR_FLAGS"] = f"base_compiledir={os.path.join(_CACHE_ROOT, 'pytensor')}"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Processes the tests start (the CLI, probe workers) hold themselves to loopback too (benchfill.netguard).
os.environ["BENCHFILL_LOOPBACK_ONLY"] = "1"
# Provider keys from the developer's shell must never be used by a test.
for _key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "TOGETHER_API_KEY", "HF_TOKEN"):
    os.environ.pop(_key, None)
# Nor its proxy, its LiteLLM gateway switch or its CA bundle: a forwarding proxy on loopback would carry a
# test's requests past the socket guard below, which sees only the proxy. The tests that check how
# benchfill meets them set them for themselves.
for _key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "USE_LITELLM_PROXY", "SSL_CERT_FILE",
             "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
    os.environ.pop(_key, None)
    os.environ.pop(_key.lower(), None)

# Held for the whole test process, from here on: a module- or session-scoped fixture runs outside any
# test's own fixtures, and a function-scoped guard had left such fixtures (probe traffic among them) free.
# It is benchfill.netguard's own guard, so a CLI called in process (which installs it when
# BENCHFILL_LOOPBACK_ONLY is set) finds it in place and leaves it alone.
netguard.install()
_real_connect = netguard.REAL[(socket.socket, "connect")]  # (a test that must reach past the guard on purpose)


@pytest.fixture(autouse=True)
def _no_network(request, monkeypatch):
    if request.node.get_closest_marker("live"):  # (none in CI) the real functions, for this test alone
        for (owner, name), real in netguard.REAL.items():
            monkeypatch.setattr(owner, name, real)
    yield


_ROOT_HANDLERS = list(logging.getLogger().handlers)


@pytest.fixture(autouse=True)
def _root_logger_as_it_was():
    """Every test ends with the root logger's own handlers as the session began (pytest's come and go with
    each test). inspect_ai's eval(), which the importer tests run to make their logs, puts its rich handler
    on the root logger and leaves it there: the CLI then took every later test's process for a host that
    shows log records itself and printed none of its warnings (a NUTS warning went missing in the suite)."""
    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler not in _ROOT_HANDLERS and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """All state a test writes goes under its own temp dir."""
    monkeypatch.setenv("BENCHFILL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BENCHFILL_HOME", str(tmp_path / "home"))
    yield


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data beside the checkout (real public evaluation data, read-only)."""
    from pathlib import Path

    here = Path(__file__).resolve().parent.parent
    for cand in (os.environ.get("BENCHFILL_SHARED_DATA"), here.parent / "shared" / "data", here / "shared" / "data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    raise RuntimeError("../shared/data not found; set BENCHFILL_SHARED_DATA")


def ctrl_c_as_at_a_terminal():
    """In the child, before exec: SIGINT back to its default. Run as a background job, the suite starts
    with SIGINT ignored, which its children would inherit: Python then never raises KeyboardInterrupt, and
    bash cannot trap a signal ignored on entry, so the Ctrl-C these tests send would go unseen."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
