"""The HTTP environment a run inherits: loopback traffic goes direct, and a broken CA setting is named.

benchfill talks on loopback to the simulated world, to ``sim serve`` and to vLLM servers on this machine.
httpx, aiohttp and litellm read ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` (either case) and send even
a request for 127.0.0.1 through the proxy unless ``NO_PROXY`` names it. A shell set up for a corporate
proxy sent every prompt of an offline simulated run (the benchmark's items) to that proxy, and the run
failed with errors that blamed the simulated world, or hung. A proxy cannot reach this machine's loopback
on our behalf, so wherever a proxy variable is set the loopback hosts are added to ``NO_PROXY`` (both
spellings, their entries merged). Requests to other hosts still follow the proxy settings as given.

The clients also load ``SSL_CERT_FILE`` when they are made, before any request, https or not: a path that
is not a readable CA bundle crashed even a run whose every URL is plain http. It is named in one line.
"""

from __future__ import annotations

import os

from benchfill.errors import ConfigError

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
NO_PROXY_VARS = ("no_proxy", "NO_PROXY")
# 0.0.0.0 as vLLM prints its address; 127.0.0.0/8 for the clients that read CIDR (httpx, urllib)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "127.0.0.0/8")
_LOADED: set[str] = set()


def direct_loopback() -> None:
    """Add the loopback hosts to ``NO_PROXY`` / ``no_proxy`` where a proxy variable is set (idempotent;
    nothing changes where none is set).

    The variables that exist get the union of both (the clients read the lower-case one first where both
    are set); where neither does, only ``NO_PROXY`` is made: a ``no_proxy`` made here would shadow a
    ``NO_PROXY`` a library host sets later."""
    if not any(os.environ.get(v, "").strip() for v in PROXY_VARS):
        return
    present = [v for v in NO_PROXY_VARS if v in os.environ] or ["NO_PROXY"]
    have: list[str] = []
    for var in present:
        for host in os.environ.get(var, "").split(","):
            if host.strip() and host.strip() not in have:
                have.append(host.strip())
    merged = ",".join(have + [h for h in LOOPBACK_HOSTS if h not in have and "*" not in have])
    for var in present:
        os.environ[var] = merged


def check_ca_file() -> None:
    """``SSL_CERT_FILE``, where set, must be a CA bundle this process can load: one line if it is not."""
    path = os.environ.get("SSL_CERT_FILE")
    if not path or path in _LOADED:
        return
    import ssl

    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as exc:  # (an OSError too: first)
        why = f"not a CA bundle ({exc.reason or exc})"
    except OSError as exc:
        why = exc.strerror or str(exc)
    else:
        _LOADED.add(path)  # checked once per process and path: every model call passes here
        return
    raise ConfigError(f"SSL_CERT_FILE={path}: {why}; the HTTP clients load it before any request, https or "
                      "not: point it at a CA bundle (PEM) or unset it")


def check_gateway_switch() -> None:
    """litellm's ``USE_LITELLM_PROXY`` (read before any argument of a call, and true only as "true") would
    send the rewriter's and the judge's calls to a LiteLLM gateway instead of the endpoints a run names:
    refused before any work (the simulated world's answer had been "model does not exist", after every probe
    rollout was spent)."""
    if os.environ.get("USE_LITELLM_PROXY", "").strip().lower() == "true":
        raise ConfigError("USE_LITELLM_PROXY is set: litellm would send the rewriter's and the judge's calls to "
                          "a LiteLLM proxy instead of the endpoints this run names; unset it for benchfill (to "
                          "use a LiteLLM proxy, name it as the rewriter's or judge's api_base)")


def prepare() -> None:
    """All three, before the first client is made."""
    direct_loopback()
    check_ca_file()
    check_gateway_switch()
