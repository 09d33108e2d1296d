"""Configuration: the probe panel, the rewriter, the judge and the benchmark, from TOML or YAML.

Credentials never live in a config: each endpoint names the environment variable that holds its key
(``api_key_env = "VLLM_API_KEY"``), and a config that carries something that looks like a literal key
is rejected, so a shared config file can never leak one: a secret-named field, a value shaped like a
provider key, an endpoint URL with user-info (``http://TOKEN@host/v1``, ``http://user:pw@host/v1``) or a
secret-looking query parameter (``?api_key=...``, ``?token=...``; ``benchfill.redact``), a URL anywhere
else with a password, and an ``api_key_env`` that looks like a key pasted where its variable's name goes.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchfill.data import read_mapping
from benchfill.errors import ConfigError, validation_line
from benchfill.redact import SECRET_VALUE, redact_url, text_credentials, url_credentials

if TYPE_CHECKING:
    from benchfill.benchmarks import BenchmarkSpec

# Field names that would hold a secret in other tools' configs; we refuse them outright.
_SECRET_FIELDS = {"api_key", "apikey", "key", "token", "secret", "password", "access_token", "auth"}
# The fields that hold an endpoint's URL: no user-info of any kind there (a token as the user name is one).
_ENDPOINT_FIELDS = {"base_url", "api_base", "replicas"}
# A key pasted where its variable's name goes: a part of the name (between underscores) of 20 characters
# or more with letters and digits, or of 32 or more in mixed case (the odds that a random 32-character key
# has no digit are 1 in 300; a camel-case name that long is as rare). Real names are words joined by
# underscores: OPENAI_API_KEY, MY_PROBE_KEY_2, HF_TOKEN.
_KEY_LIKE_DIGITS, _KEY_LIKE_CASE = 20, 32


# An environment variable's name as a shell reads it: "PANEL-KEY" would be ${PANEL-KEY}, a default-value
# expansion, in a written serve script, and no variable at all.
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

def check_endpoint_url(v: str) -> str:
    """An endpoint's URL (a probe's ``base_url``, a replica's, the rewriter's or judge's ``api_base``) as the
    clients can use it: http or https, a host, a port in range; else a ``ValueError`` that says which. It had
    been taken as written and failed at the first call as "unreachable: UnsupportedProtocol", "Connection
    refused" (port 99999) or "InvalidURL", without naming the field. Returns ``v`` unchanged."""
    from urllib.parse import urlsplit

    shown = redact_url(v)
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018  (raises for a port out of range or not a number)
        host = parts.hostname
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", "Port could not be cast ..."
        raise ValueError(f"{shown}: not a URL ({exc}); write http://host:port/v1") from None
    if "://" not in v:
        raise ValueError(f"{shown}: no scheme; write http://{v} (or https://)")
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{shown}: scheme {parts.scheme}: only http and https are served")
    if not host:
        raise ValueError(f"{shown}: no host; write http://host:port/v1")
    if parts.port == 0:
        raise ValueError(f"{shown}: port 0 is no port to connect to")
    return v


class RetryConfig(BaseModel):
    """How hard to retry what is worth retrying (429, 5xx, timeouts, dropped connections)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "8" for 8: a mistake to name; inf too
    max_attempts: int = Field(default=6, ge=1, le=50)
    initial_wait_s: float = Field(default=0.5, ge=0)
    max_wait_s: float = Field(default=30.0, ge=0)
    jitter_s: float = Field(default=0.5, ge=0)


class ReplicaConfig(BaseModel):
    """One replica of a probe fleet: an endpoint serving the same model, with its own bound."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "8" for 8: a mistake to name; inf too
    base_url: str = Field(min_length=1, description="endpoint URL ending in /v1")
    concurrency: int | None = Field(default=None, ge=1, description="requests in flight to this replica "
                                    "(default: the probe's concurrency)")

    @field_validator("base_url")
    @classmethod
    def _strip(cls, v: str) -> str:
        return check_endpoint_url(v).rstrip("/")


class FleetPolicy(BaseModel):
    """When a replica of a fleet is taken out of service and when it is asked again (docs/fleets.md)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "8" for 8: a mistake to name; inf too
    eject_after: int = Field(default=5, ge=1, description="consecutive failed attempts that take a replica out")
    error_rate: float = Field(default=0.5, gt=0, le=1, description="share of failed attempts in the window that "
                              "takes a replica out")
    window: int = Field(default=20, ge=2, description="latest attempts the error rate is taken over (only when full)")
    # Above 0: a replica whose health check fails at once would otherwise be checked in a tight loop.
    cooldown_s: float = Field(default=10.0, gt=0, description="time out of service before a health check")
    max_cooldown_s: float = Field(default=120.0, gt=0, description="cap of the cool-down, which doubles each time "
                                  "a replica is taken out again without having served in between")
    health_timeout_s: float = Field(default=10.0, gt=0, description="seconds a health check (/v1/models) may take")


class ProbeConfig(BaseModel):
    """One probe model behind an OpenAI-compatible endpoint (vLLM in real use), or behind a fleet of
    replicas: ``replicas = ["http://a:8000/v1", {base_url = "http://b:8000/v1", concurrency = 64}]``.

    Exactly one of ``base_url`` and ``replicas``. A request's cache key names the probe's
    ``key_endpoint``, never the replica that served it: ``fleet_id`` when it is set, else the URL for
    one endpoint (as before fleets) and ``fleet:<name>`` for a fleet.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "8" for 8: a mistake to name; inf too
    name: str = Field(min_length=1)
    base_url: str | None = Field(default=None, min_length=1, description="endpoint URL ending in /v1")
    replicas: list[ReplicaConfig] | None = Field(default=None, min_length=1, description="endpoints serving the "
                                                 "same model, instead of base_url")
    fleet_id: str | None = Field(default=None, min_length=1, description="the model's identity in cache keys "
                                 "(default: the URL of a single endpoint, fleet:<name> for replicas)")
    model: str = Field(min_length=1, description="served model name")
    temperature: float = Field(default=0.6, ge=0, le=2)  # OpenAI's range: a 5 is a typo, refused by the server at run time
    top_p: float = Field(default=0.95, gt=0, le=1)
    max_tokens: int = Field(default=4096, ge=1)
    trials: int = Field(default=8, ge=1, description="samples per item")
    concurrency: int = Field(default=16, ge=1, description="requests in flight to this endpoint")
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME, description="environment variable holding the key")
    timeout_s: float = Field(default=600.0, gt=0)
    supports_n: bool = Field(default=True, description="false: ask one sample per request")
    # Serving on a GPU host (benchfill/placement.py): max_model_len = max_prompt_tokens + max_tokens.
    max_prompt_tokens: int = Field(default=2048, ge=1, description="room for the prompt, tokens")
    gpu_memory_gb: float | None = Field(default=None, gt=0, description="GiB the server needs when the model's "
                                        "config is not in the local Hugging Face cache")

    @field_validator("base_url")
    @classmethod
    def _strip(cls, v: str | None) -> str | None:
        return check_endpoint_url(v).rstrip("/") if v is not None else None

    @field_validator("replicas", mode="before")
    @classmethod
    def _plain_urls(cls, v: Any) -> Any:
        # a replica may be given as its URL alone
        return [{"base_url": r} if isinstance(r, str) else r for r in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _one_form(self) -> ProbeConfig:
        if (self.base_url is None) == (self.replicas is None):
            raise ValueError("give exactly one of base_url (one endpoint) and replicas (a fleet)")
        if self.replicas is not None:
            urls = [r.base_url for r in self.replicas]
            dup = next((u for u in urls if urls.count(u) > 1), None)
            if dup is not None:
                raise ValueError(f"replica {dup} appears twice")
        return self

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        """(URL, bound on requests in flight) of each endpoint serving this probe, in config order."""
        if self.replicas is None:
            return [(self.base_url or "", self.concurrency)]
        return [(r.base_url, r.concurrency or self.concurrency) for r in self.replicas]

    @property
    def is_fleet(self) -> bool:
        return self.replicas is not None

    @property
    def key_endpoint(self) -> str:
        """What cache keys name in place of an endpoint: never a replica (see the class docstring)."""
        if self.fleet_id is not None:
            return self.fleet_id
        return f"fleet:{self.name}" if self.replicas is not None else (self.base_url or "")


class LLMConfig(BaseModel):
    """The rewriter or the judge: a litellm model string and its settings."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "8" for 8: a mistake to name; inf too
    model: str = Field(min_length=1, description="litellm model string, e.g. openai/gpt-4o")
    api_base: str | None = None
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=4096, ge=1)
    timeout_s: float = Field(default=600.0, gt=0)
    max_repairs: int = Field(default=2, ge=0, description="extra calls after a malformed reply")
    # A search asks gaps x parents x children of these at once; the provider sees at most this many.
    concurrency: int = Field(default=8, ge=1, description="requests in flight to this endpoint (benchfill.limits)")

    @field_validator("api_base")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        # checked, not changed: the URL as given is what litellm is handed and what its limits are keyed by
        return check_endpoint_url(v) if v is not None else None


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "8" for 8: a mistake to name; inf too
    probes: list[ProbeConfig] = Field(default_factory=list)
    rewriter: LLMConfig | None = None
    judge: LLMConfig | None = None
    benchmark: dict[str, Any] | None = Field(default=None, description="a BenchmarkSpec or {name = ...}")
    retry: RetryConfig = Field(default_factory=RetryConfig)
    fleets: FleetPolicy = Field(default_factory=FleetPolicy, description="replica ejection (probe fleets)")
    seed: int = Field(default=0, ge=0)  # as --seed: the probes' vLLM servers are started with it
    source: str = Field(default="", exclude=True)

    @field_validator("probes")
    @classmethod
    def _unique_names(cls, v: list[ProbeConfig]) -> list[ProbeConfig]:
        seen: set[str] = set()
        alike: dict[tuple, str] = {}
        for p in v:
            if p.name in seen:
                raise ValueError(f"probe name {p.name!r} appears twice")
            seen.add(p.name)
            # One model on one server with one sampling: the same answers under two names (the call cache
            # even shares them), which the IRT fit would count as two models agreeing on everything. Another
            # key may reach another model behind a gateway that routes by key: not the same probe.
            same = (p.key_endpoint, p.model, p.api_key_env, p.temperature, p.top_p, p.max_tokens)
            if same in alike:
                raise ValueError(f"probes {alike[same]!r} and {p.name!r} are one model ({p.model}) served at one "
                                 "endpoint with the same key and sampling: their answers are one model's; keep one")
            alike[same] = p.name
        return v

    def benchmark_spec(self) -> BenchmarkSpec | None:
        """The benchmark section as a BenchmarkSpec (a registered name or a full spec)."""
        from benchfill.benchmarks import BenchmarkSpec, registered_spec

        if not self.benchmark:
            return None
        if set(self.benchmark) == {"name"}:
            return registered_spec(self.benchmark["name"])
        try:
            return BenchmarkSpec.model_validate(self.benchmark)
        except ValidationError as exc:
            raise ConfigError(validation_line(self.source or "config", exc, prefix="benchmark")) from exc

    def redacted(self) -> dict[str, Any]:
        """What a run records: everything (there is no secret in a config by construction)."""
        return self.model_dump(mode="json")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read a TOML (.toml) or YAML (.yaml/.yml) config and apply ``a.b=value`` overrides.

    Override values are parsed as JSON when they can be (numbers, booleans, lists), else kept as text;
    list elements are addressed by index or by probe name: ``probes.p1.trials=16``.
    """
    data: dict[str, Any] = {}
    src = str(path) if path else "<overrides>"
    if path is not None:
        data = read_mapping(Path(path))
    for ov in overrides or []:
        _apply_override(data, ov, src)
    _reject_secrets(data, src)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_line(src, exc)) from exc
    cfg.source = src
    return cfg


def key_from_env(var: str | None, sent_to: str | None = None) -> str | None:
    """The credential named by a config, read at call time and never stored. ``sent_to``: the endpoint it
    will be sent to; a plain ``http://`` one beyond this machine is warned of (``warn_clear_text``)."""
    key = os.environ.get(var) if var else None
    if key and sent_to:
        warn_clear_text(sent_to, var)
    return key


_CLEAR_WARNED: set[tuple[str, str | None]] = set()


def warn_clear_text(url: str, var: str | None) -> None:
    """Warn, once per endpoint and key in a process, that the key in ``var`` goes to ``url`` unencrypted.

    A bearer key over plain http can be read, and reused, by anything on the network path; on loopback it
    never leaves the machine (the simulated world, a vLLM started here), so only other hosts are warned of.
    A warning, not a refusal: a vLLM on a cluster's private network is often served this way on purpose.
    The message names the variable and the URL (its secrets masked), never the key."""
    from urllib.parse import urlsplit

    from benchfill.netguard import on_this_machine

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:  # a malformed URL: the call itself will say so
        return
    if parts.scheme.lower() != "http" or on_this_machine(host):
        return
    seen = (f"{parts.scheme.lower()}://{parts.netloc}{parts.path.rstrip('/')}", var)  # ".../v1" and ".../v1/" alike
    if seen in _CLEAR_WARNED:
        return
    _CLEAR_WARNED.add(seen)
    logging.getLogger("benchfill.config").warning(
        "the key in %s is sent to %s over plain http, unencrypted: anyone on the network path can read it; use "
        "https, or reach the server through an SSH tunnel to localhost", var, redact_url(url))


# -- helpers ---------------------------------------------------------------------------------------
def _apply_override(data: dict[str, Any], override: str, src: str) -> None:
    # An error names the override by its key alone: its value may be a key pasted where a name was meant
    # (probes.q9.api_key=sk-...), and the error line goes to the terminal and the logs
    if "=" not in override:  # its dotted key only, up to the first other character (a colon, a space)
        from benchfill.redact import scrub

        head = scrub(re.match(r"[\w.\-]*", override.strip()).group())  # (a key pasted alone is a key's shape)
        raise ConfigError(f"override {head!r}{' ...' if head != override.strip() else ''}: expected KEY=VALUE, "
                          "e.g. probes.0.trials=16")
    dotted, raw = override.split("=", 1)
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    parts = dotted.strip().split(".")
    node: Any = data
    i = 0
    while i < len(parts):
        if isinstance(node, list):
            idx, i = _list_index(node, parts, i, dotted.strip())
            if i == len(parts):
                node[idx] = value
            else:
                node = node[idx]
            continue
        part, last = parts[i], i == len(parts) - 1
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted.strip()!r}: {'.'.join(parts[:i])} is not a section")
        if last:
            node[part] = value
        else:
            node = node.setdefault(part, {})
        i += 1


def _list_index(node: list, parts: list[str], i: int, dotted: str) -> tuple[int, int]:
    """(index of the element ``parts[i:]`` begins with, where the rest of the key starts). An element is named by
    its index or by its name, which may hold dots itself (probes.qwen3-1.7b.trials, as the example panel names
    its probes): the longest name that matches is taken."""
    if parts[i].isdigit() and int(parts[i]) < len(node):
        return int(parts[i]), i + 1
    for end in range(len(parts), i, -1):
        name = ".".join(parts[i:end])
        for j, el in enumerate(node):
            if isinstance(el, dict) and el.get("name") == name:
                return j, end
    names = [str(el["name"]) for el in node if isinstance(el, dict) and "name" in el]
    raise ConfigError(f"override {dotted!r}: no element {'.'.join(parts[i:-1]) or parts[i]!r} (use an index or a "
                      f"probe name{': ' + ', '.join(names) if names else ''})")


def _reject_secrets(node: Any, src: str, path: str = "", endpoint: bool = False) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{path}.{k}" if path else str(k)
            if str(k).lower() in _SECRET_FIELDS and v not in (None, ""):
                raise ConfigError(
                    f"{src}: field {where}: literal credentials are not allowed; "
                    "name an environment variable with api_key_env instead"
                )
            if str(k) == "api_key_env" and isinstance(v, str) and looks_like_key(v):
                raise ConfigError(
                    f"{src}: field {where}: looks like a key, not the name of an environment variable; "
                    "put the key in a variable (e.g. VLLM_API_KEY) and name that variable here"
                )
            # a replica given as {base_url = ...} is an endpoint by its own key
            _reject_secrets(v, src, where, str(k) in _ENDPOINT_FIELDS or endpoint)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _reject_secrets(v, src, f"{path}[{i}]", endpoint)
    elif isinstance(node, str):
        # an endpoint's URL: no user-info of any kind; any other URL: no password; either: no secret in
        # its query string (?token=, ?api_key=, ...)
        what = (url_credentials(node.strip(), user=True) if endpoint else None) or text_credentials(node)
        if what or SECRET_VALUE.search(node):
            raise ConfigError(
                f"{src}: field {path}: looks like a literal credential{f' (the URL carries {what})' if what else ''}; "
                "put it in an environment variable and name it with api_key_env"
            )


def looks_like_key(name: str) -> bool:
    """Whether an ``api_key_env`` value looks like a key rather than a variable's name (see
    ``_KEY_LIKE_DIGITS``): a generated key is long, without underscores, and mixes its characters."""
    for part in name.split("_"):
        letters, digits = any(c.isalpha() for c in part), any(c.isdigit() for c in part)
        mixed_case = any(c.islower() for c in part) and any(c.isupper() for c in part)
        if (len(part) >= _KEY_LIKE_DIGITS and letters and digits) or (len(part) >= _KEY_LIKE_CASE and mixed_case):
            return True
    return False
