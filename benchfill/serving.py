"""The panel's endpoints: check that each serves its model, and write or start the ``vllm serve`` commands.

vLLM is an optional extra for GPU hosts; nothing here imports it: the commands run it as a program.
Keys stay in the environment: a written script refers to ``$VAR``, never to the value.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from benchfill.config import Config, key_from_env
from benchfill.errors import ConfigError, EndpointError


@dataclass
class EndpointCheck:
    name: str  # probe (or "rewriter"/"judge")
    base_url: str
    model: str
    reachable: bool
    serves_model: bool
    detail: str

    @property
    def ok(self) -> bool:
        return self.reachable and self.serves_model


def check_endpoints(cfg: Config, timeout_s: float = 5.0) -> list[EndpointCheck]:
    """Ask every endpoint of the config for ``/v1/models`` and look for the model it should serve."""
    import httpx

    targets = [(p.name, p.base_url, p.model, p.api_key_env) for p in cfg.probes]
    for role in ("rewriter", "judge"):
        llm = getattr(cfg, role)
        if llm is not None and llm.api_base:  # hosted providers have no /v1/models worth asking
            served = llm.model.split("/", 1)[1] if "/" in llm.model else llm.model
            targets.append((role, llm.api_base.rstrip("/"), served, llm.api_key_env))
    listed: dict[tuple[str, str | None], tuple[bool, set[str], str]] = {}
    out = []
    with httpx.Client(timeout=timeout_s) as client:
        for name, url, model, key_env in targets:
            if (url, key_env) not in listed:
                listed[(url, key_env)] = _models(client, url, key_from_env(key_env))
            reachable, ids, detail = listed[(url, key_env)]
            serves = model in ids
            if reachable and not serves:
                shown = ", ".join(sorted(ids)[:8]) + (" ..." if len(ids) > 8 else "")
                detail = f"does not serve {model!r} (serves: {shown or 'nothing'})"
            out.append(EndpointCheck(name, url, model, reachable, serves, detail if not serves else "ok"))
    return out


def _models(client, url: str, key: str | None) -> tuple[bool, set[str], str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = client.get(f"{url}/models", headers=headers)
    except Exception as exc:  # noqa: BLE001  (refused, DNS, timeout: all mean "not answering")
        return False, set(), f"unreachable: {exc.__class__.__name__}: {str(exc)[:120]}"
    if r.status_code != 200:
        return False, set(), f"/v1/models answered HTTP {r.status_code}"
    try:
        return True, {m["id"] for m in r.json()["data"]}, "ok"
    except (ValueError, KeyError, TypeError):
        return False, set(), "/v1/models answered something that is not a model list"


# -- vLLM ---------------------------------------------------------------------------------------------
@dataclass
class ServeCommand:
    model: str
    port: int
    argv: list[str]
    gpu: int | None
    key_env: str | None

    def shell(self) -> str:
        env = f"CUDA_VISIBLE_DEVICES={self.gpu} " if self.gpu is not None else ""
        args = " ".join(shlex.quote(a) for a in self.argv)
        # The key is passed by reference: the script holds the variable's name, not its value.
        key = f' --api-key "${self.key_env}"' if self.key_env else ""
        return f"{env}{args}{key}"


def vllm_commands(cfg: Config, port_base: int = 8000, gpus: int = 0, extra: list[str] | None = None,
                  seed: int | None = None) -> list[ServeCommand]:
    """One ``vllm serve`` per served model, on the port its probe's URL names (else port_base + i)."""
    cmds: dict[str, ServeCommand] = {}
    for p in cfg.probes:
        if p.model in cmds:
            continue
        parts = urlsplit(p.base_url)
        if parts.hostname not in ("127.0.0.1", "localhost", "0.0.0.0", None) and not parts.port:
            raise ConfigError(f"probes.{p.name}.base_url: {p.base_url} names no port for a local vllm server")
        port = parts.port or port_base + len(cmds)
        argv = ["vllm", "serve", p.model, "--host", "127.0.0.1", "--port", str(port),
                "--served-model-name", p.model, "--seed", str(cfg.seed if seed is None else seed),
                "--max-num-seqs", str(max(p.concurrency * p.trials, 16)), *(extra or [])]
        cmds[p.model] = ServeCommand(p.model, port, argv, len(cmds) % gpus if gpus else None, p.api_key_env)
    ports = [c.port for c in cmds.values()]
    if len(set(ports)) != len(ports):
        raise ConfigError("probes: two served models share a port; give each probe its own base_url port")
    return list(cmds.values())


def write_script(cmds: list[ServeCommand], path: str | Path) -> Path:
    """A bash script starting every server in the background and waiting on them (written atomically)."""
    path = Path(path)
    lines = ["#!/usr/bin/env bash", "# Written by `benchfill probes serve`: one vLLM server per probe model.",
             "set -euo pipefail", 'trap "kill 0" EXIT', ""]
    lines += [f"{c.shell()} &" for c in cmds]
    lines += ["", "wait", ""]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines))
    tmp.chmod(0o755)
    tmp.replace(path)
    return path


def start_servers(cmds: list[ServeCommand], log_dir: str | Path, wait_s: float = 1800.0,
                  poll_s: float = 2.0) -> list[subprocess.Popen]:
    """Launch the servers and return once each answers ``/v1/models`` (or raise, stopping them all)."""
    import os
    import shutil

    import httpx

    if cmds and shutil.which(cmds[0].argv[0]) is None:
        raise EndpointError(f"{cmds[0].argv[0]}: not found on PATH; install the extra: pip install 'benchfill[vllm]'")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        for c in cmds:
            env = dict(os.environ)
            if c.gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = str(c.gpu)
            argv = list(c.argv)
            if c.key_env:
                if not env.get(c.key_env):
                    raise ConfigError(f"api_key_env: environment variable {c.key_env} is not set")
                argv += ["--api-key", env[c.key_env]]  # argv of a child, never a file
            log = open(log_dir / f"vllm-{c.port}.log", "ab")  # noqa: SIM115  (lives as long as the server)
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + wait_s
        pending = list(zip(cmds, procs, strict=True))
        with httpx.Client(timeout=5) as client:
            while pending:
                for c, proc in list(pending):
                    if proc.poll() is not None:
                        raise EndpointError(f"vllm for {c.model} on port {c.port} exited with {proc.returncode}; "
                                            f"see {log_dir / f'vllm-{c.port}.log'}")
                    key = key_from_env(c.key_env)
                    ok, ids, _ = _models(client, f"http://127.0.0.1:{c.port}/v1", key)
                    if ok and c.model in ids:
                        pending.remove((c, proc))
                        print(f"ready: {c.model} on http://127.0.0.1:{c.port}/v1", file=sys.stderr)
                if pending and time.monotonic() > deadline:
                    raise EndpointError(f"vllm for {pending[0][0].model} not ready after {wait_s:.0f} s")
                if pending:
                    time.sleep(poll_s)
    except BaseException:
        stop_servers(procs)
        raise
    return procs


def stop_servers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
