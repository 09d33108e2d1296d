"""The panel's endpoints: check that each serves its model, and write or start the ``vllm serve`` commands.

vLLM is an optional extra for GPU hosts; nothing here imports it: the commands run it as a program.
Where each server goes (GPUs, memory share, context) is benchfill/placement.py's plan; this module turns
the plan into commands, starts them and waits until each answers, or writes the same as a bash script.
Keys stay in the environment: vLLM reads ``VLLM_API_KEY`` itself, so no key is ever an argument (every
process on the machine can read command lines from /proc), and a written script refers to ``$VAR`` only.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from benchfill.config import Config, key_from_env
from benchfill.errors import ConfigError, EndpointError
from benchfill.placement import Plan
from benchfill.redact import SECRET_VALUE, scrub


@dataclass
class EndpointCheck:
    name: str  # probe (or "rewriter"/"judge")
    base_url: str
    model: str
    reachable: bool
    serves_model: bool
    detail: str
    replica: int = 0  # 1-based place in the probe's fleet; 0: a probe with one endpoint, rewriter, judge
    replicas: int = 1
    # not reachable, but another replica of the same probe is ok: the fleet ejects a dead replica and
    # serves the probe. One that answers but refuses the key or lacks the model is never spare.
    spare: bool = False
    skipped: bool = False  # a hosted provider's model (no api_base): not asked, and said so
    # the model is benchfill's simulated world (`sim serve`, which lists it as owned by SIM_OWNER): a run
    # on it is a simulated run, whatever its backend is called
    simulated: bool = False
    # failed for the configuration's sake, not the endpoint's (its key's variable unset): exit 2, not 3
    config_fault: bool = False

    @property
    def status(self) -> str:
        return "skip" if self.skipped else "ok" if self.ok else "FAIL"

    @property
    def ok(self) -> bool:
        return self.reachable and self.serves_model

    @property
    def label(self) -> str:
        return f"{self.name} [{self.replica}/{self.replicas}]" if self.replica else self.name


def check_endpoints(cfg: Config, timeout_s: float = 5.0) -> list[EndpointCheck]:
    """Ask every endpoint of the config for ``/v1/models`` and look for the model it should serve;
    each replica of a probe fleet is one check of its own."""
    import httpx

    targets = []
    for p in cfg.probes:
        fleet = p.endpoints if p.replicas is not None else []
        targets += [(p.name, url, p.model, p.api_key_env, i + 1 if fleet else 0, max(len(fleet), 1))
                    for i, (url, _) in enumerate(p.endpoints)]
    hosted = []
    for role in ("rewriter", "judge"):
        llm = getattr(cfg, role)
        if llm is not None and llm.api_base:
            served = llm.model.split("/", 1)[1] if "/" in llm.model else llm.model
            targets.append((role, llm.api_base.rstrip("/"), served, llm.api_key_env, 0, 1))
        elif llm is not None:  # a hosted provider's: no /v1/models worth asking, but not passed over in silence
            hosted.append(EndpointCheck(role, "(hosted)", llm.model, False, False, "hosted provider (no api_base): "
                                        "not checked; its first call will tell", skipped=True))
    listed: dict[tuple[str, str | None], tuple[bool, set[str], str]] = {}
    out = []
    from benchfill import proxies

    proxies.prepare()
    with httpx.Client(timeout=timeout_s) as client:
        for name, url, model, key_env, replica, replicas in targets:
            if key_env and not key_from_env(key_env):  # asked without it, the server's 401 would not say why
                out.append(EndpointCheck(name, url, model, True, False, f"api_key_env: environment variable "
                                         f"{key_env} is not set", replica, replicas, config_fault=True))
                continue
            if (url, key_env) not in listed:
                listed[(url, key_env)] = _models(client, url, key_from_env(key_env, sent_to=url))
            reachable, ids, detail = listed[(url, key_env)]
            serves = ids is not None and model in ids
            simulated = serves and ids[model] == SIM_OWNER
            if ids is not None and not serves:
                shown = ", ".join(sorted(ids)[:8]) + (" ..." if len(ids) > 8 else "")
                detail = f"does not serve {model!r} (serves: {shown or 'nothing'})"
            out.append(EndpointCheck(name, url, model, reachable, serves, detail if not serves else "ok",
                                     replica, replicas, simulated=simulated))
    served = {c.name for c in out if c.replica and c.ok}
    for c in out:
        c.spare = bool(c.replica) and not c.reachable and c.name in served
    return out + hosted


SIM_OWNER = "benchfill-sim"  # the owned_by of every model the simulated world's server lists (sim/server.py's OWNER)


def _models(client, url: str, key: str | None) -> tuple[bool, dict[str, str | None] | None, str]:
    """(reachable, the models listed, each with its owner, or None, detail). Unreachable: no answer, or a 5xx (a sick server,
    or a proxy before a dead one), which the fleet ejects and checks again. A 4xx or a body that is not
    a model list is an answer: that server refuses the key or serves something else, and stays so."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = client.get(f"{url}/models", headers=headers)
    except Exception as exc:  # noqa: BLE001  (refused, DNS, timeout: all mean "not answering")
        return False, None, f"unreachable: {exc.__class__.__name__}: {scrub(str(exc), values=[key])[:120]}"
    if r.status_code != 200:
        why = {401: " (the key was refused" + ("" if key else ": none was sent; set the probe's api_key_env") + ")",
               403: " (the key was refused)",
               404: " (no /models here: does the base_url end in /v1?)"}.get(r.status_code, "")
        from urllib.parse import urlsplit

        return r.status_code < 500, None, f"{urlsplit(url).path}/models answered HTTP {r.status_code}{why}"
    try:
        return True, {m["id"]: m.get("owned_by") for m in r.json()["data"]}, "ok"
    except (ValueError, KeyError, TypeError):
        return True, None, "/v1/models answered something that is not a model list"


# -- vLLM ---------------------------------------------------------------------------------------------
KEY_VAR = "VLLM_API_KEY"  # the variable vLLM's server reads its key from (vllm/envs.py)
LOG_TAIL = 20  # lines of a failed server's log shown with its one-line error


@dataclass
class ServeCommand:
    model: str
    port: int
    argv: list[str]  # never holds a key
    gpus: tuple[int, ...]
    wave: int  # servers sharing a GPU start in successive waves (Plan.waves)
    key_env: str | None
    env: dict[str, str] = field(default_factory=dict)  # GPU pinning, added to the caller's environment
    host: str = "127.0.0.1"  # where it listens

    @property
    def reach(self) -> str:
        """The address to check it at: its own, or loopback for one listening on every address."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)

    @property
    def base_url(self) -> str:
        return f"http://{url_host(self.reach)}:{self.port}"

    @property
    def log_name(self) -> str:
        return f"vllm-{self.port}.log"

    def shell(self, prefix: str = "") -> str:
        """The command as one shell line, through env(1), after ``prefix`` (``$SETSID``).

        The key travels by reference, in the environment only: the script holds a variable's name, and
        ``VLLM_API_KEY="$PANEL_KEY"`` is the shell's own assignment before the whole command (prefix
        included), never an argument of setsid or env, whose argument lists every process can read in
        /proc while they start.
        """
        assigns = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        key, unset = [], []
        if self.key_env is None:
            unset = ["-u", KEY_VAR]  # a probe without a key must not meet a server that wants one
        elif self.key_env != KEY_VAR:
            key = [f'{KEY_VAR}="${self.key_env}"']
        return " ".join([*key, *([prefix] if prefix else []), "env", *unset, *assigns,
                         *(shlex.quote(a) for a in self.argv)])


def url_host(host: str) -> str:
    """A host as a URL names it: an IPv6 address in brackets (http://[::1]:8000)."""
    return f"[{host}]" if ":" in host else host


# The flags each planned command sets, and where their values come from. vLLM's parser keeps the last of a
# repeated flag, so a --vllm-arg setting one (appended after them) would silently overrule the plan: a share
# over what the GPU has left, a port the probes do not call, a name they do not ask for.
PLANNED_FLAGS = {
    "--host": "the probe's base_url", "--port": "the probe's base_url", "--served-model-name": "the probe's model",
    "--seed": "the config's seed", "--max-num-seqs": "the probes' concurrency x trials",
    "--gpu-memory-utilization": "the plan's share of the GPU",
    "--max-model-len": "the probes' max_prompt_tokens + max_tokens",
    "--tensor-parallel-size": "the plan's GPUs per server",
    # each would have a server use more GPUs than the plan gives it (CUDA_VISIBLE_DEVICES holds tp of them)
    "--data-parallel-size": "the plan's GPUs per server", "--pipeline-parallel-size": "the plan's GPUs per server",
    "--model": "the probe's model",  # (vllm serve takes the model as its argument)
    # each would overrule the plan's memory split: a KV cache sized in bytes ignores the share; another dtype or
    # weights offloaded change the weights the plan sized from the model's config
    "--kv-cache-memory": "the plan's share of the GPU", "--kv-cache-memory-bytes": "the plan's share of the GPU",
    "--dtype": "the model's own dtype, whose weights the plan sized",
    "--cpu-offload-gb": "the plan's share of the GPU",
}
# where vLLM (through huggingface_hub) finds a Hub token: its value is masked in the log lines shown
HUB_TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# vLLM's short spellings
_SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-dp": "--data-parallel-size", "-pp": "--pipeline-parallel-size"}


def check_vllm_args(extra: list[str]) -> None:
    """Refuse a --vllm-arg that passes a key or sets a flag the plan sets; named without its value."""
    for a in extra:
        # vLLM's parser takes --api_key and unique prefixes (--api-k) as --api-key too; "--flag value"
        # arrives as one argument when quoted so
        opt = a.strip().split("=", 1)[0].split(" ", 1)[0]
        opt = _SHORT_FLAGS.get(opt, opt.replace("_", "-"))
        if len(opt) > len("--api-") and "--api-key".startswith(opt):
            raise ConfigError(f"--vllm-arg {opt}: a key on the command line is readable by every process and "
                              "would be written into the script; set the probe's api_key_env instead (each "
                              "server gets that key as VLLM_API_KEY)")
        if len(opt) > len("--hf-") and "--hf-token".startswith(opt):
            raise ConfigError(f"--vllm-arg {opt}: a token on the command line is readable by every process and "
                              "would be written into the script; vLLM reads HF_TOKEN from its environment, "
                              "which the servers inherit")
        if SECRET_VALUE.search(a):  # a key's shape under any flag (a model's own --hf-overrides, a typo)
            raise ConfigError(f"--vllm-arg {opt}: its value looks like a key or token, which would be written "
                              "into the script and shown in every process list; pass it through the environment")
        owned = [f for f in PLANNED_FLAGS if len(opt) > 2 and f.startswith(opt)]
        if owned:
            raise ConfigError(f"--vllm-arg {opt}: sets {owned[0]}, which the plan sets from "
                              f"{PLANNED_FLAGS[owned[0]]}; vLLM would keep the last value and overrule the plan; "
                              "change it there instead")


def vllm_commands(plan: Plan, seed: int = 0, extra: list[str] | None = None) -> list[ServeCommand]:
    """The plan as ``vllm serve`` commands, in the plan's order."""
    check_vllm_args(extra or [])
    wave_of = {id(p): w for w, wave in enumerate(plan.waves()) for p in wave}
    out = []
    for p in plan.placements:
        s = p.server
        argv = ["vllm", "serve", s.model, "--host", s.host, "--port", str(s.port),
                "--served-model-name", s.model, "--seed", str(seed), "--max-num-seqs", str(s.max_num_seqs),
                "--gpu-memory-utilization", f"{p.share:.3f}", "--max-model-len", str(s.max_model_len)]
        if p.tp > 1:
            argv += ["--tensor-parallel-size", str(p.tp)]
        # PCI_BUS_ID: CUDA's own order (fastest first) may differ from nvidia-smi's numbering.
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, p.gpus))}
        out.append(ServeCommand(s.model, s.port, argv + list(extra or []), p.gpus, wave_of[id(p)], s.key_env, env,
                                s.host))
    return out


def child_env(cmd: ServeCommand, base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment one server starts with: the caller's, its GPUs, and its key as VLLM_API_KEY."""
    env = {**base, **cmd.env}
    if cmd.key_env is None:
        env.pop(KEY_VAR, None)
    elif not base.get(cmd.key_env):
        raise ConfigError(f"api_key_env: environment variable {cmd.key_env} is not set (the key {cmd.model} "
                          "is served with)")
    else:
        env[KEY_VAR] = base[cmd.key_env]
    return env


# The waiting, in bash: the same checks start_servers makes. The key reaches curl on its standard input
# (--config -, from printf, a shell builtin), never as an argument.
_BASH_HELPERS = r'''
LOG_DIR="${LOG_DIR:-$DEFAULT_LOG_DIR}"
WAIT_S="${WAIT_S:-__WAIT_S__}"
POLL_S="${POLL_S:-2}"
# bash's arithmetic knows whole numbers only: WAIT_S=1.5 would end the script in a syntax error
[[ $WAIT_S =~ ^[1-9][0-9]*$ ]] || { echo "serve.sh: WAIT_S=$WAIT_S: expected whole seconds, more than 0" >&2; exit 2; }
[[ $POLL_S =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "serve.sh: POLL_S=$POLL_S: expected seconds, e.g. 2 or 0.5" >&2; exit 2; }
{ mkdir -p "$LOG_DIR" && : >"$LOG_DIR/.serve-write-check" && rm -f "$LOG_DIR/.serve-write-check"; } 2>/dev/null \
  || { echo "serve.sh: LOG_DIR=$LOG_DIR: cannot write the servers' logs there" >&2; exit 2; }
command -v curl >/dev/null || { echo "serve.sh: curl not found (needed to wait for the servers)" >&2; exit 2; }
command -v vllm >/dev/null || { echo "serve.sh: vllm not found on PATH; pip install vllm" >&2; exit 2; }
# Each server in a process group of its own (setsid), so that stopping it stops the workers it spawned.
SETSID=$(command -v setsid || true)
pids=()
stop_all() {  # TERM to every server's group, then KILL after 30 s, as --start does
  trap - INT TERM EXIT
  [ ${#pids[@]} -eq 0 ] && return 0
  local p end=$((SECONDS + 30))
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
  while [ -n "$(jobs -rp)" ] && (( SECONDS < end )); do sleep 1; done
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap 'stop_all' EXIT
trap 'echo "stopping ${#pids[@]} servers" >&2; exit 130' INT TERM

ready() {  # url-host port model key-variable: /health answers and /v1/models lists the model
  local body key="${!4:-}"  # -g: the brackets of an IPv6 host are no curl glob
  # --noproxy: a server of this host is asked directly, never through http_proxy (which would see the key)
  curl -sfg --noproxy '*' -o /dev/null --max-time 5 "http://$1:$2/health" || return 1
  key=${key//\\/\\\\}; key=${key//\"/\\\"}  # curl's config syntax: a quote or backslash in the key, escaped
  body=$(printf 'header = "Authorization: Bearer %s"\n' "$key" \
         | curl -sfg --noproxy '*' --max-time 5 --config - "http://$1:$2/v1/models") || return 1
  [[ $body == *"\"$3\""* ]]
}

refuse_taken() {  # host port: a port that already answers is refused, as --start refuses it
  if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then
    echo "serve.sh: port $2 on $1 already answers (a server left from an earlier run?)" >&2; exit 3
  fi
}

show_tail() {  # log key-variable: its last lines, the key and the Hub tokens masked, as --start shows them
  local text k="${!2:-}"
  text=$(tail -n __TAIL__ "$1" 2>/dev/null || true)
  [ -n "$k" ] && text=${text//"$k"/***}
  local v
  for v in __HUB_TOKENS__; do [ -n "${!v:-}" ] && text=${text//"${!v}"/***}; done
  printf '%s\n' "$text" | sed 's/^/  | /' >&2
}

running=()  # the servers of the waves before: one that exits while a later wave loads stops the script at once
check_running() {  # what: "while a later wave loaded" or "after all were ready"
  local spec pid host port model key log
  for spec in ${running[@]+"${running[@]}"}; do
    IFS=$'\x1f' read -r pid host port model key log <<<"$spec"
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "vllm for $model on port $port exited $1; last lines of $log:" >&2
      show_tail "$log" "$key"; exit 3
    fi
  done
}

wait_wave() {  # started, then one "pid<US>url-host<US>port<US>model<US>key-variable<US>log" per server of the wave
  local t0=$1 last=$SECONDS spec pid host port model key log; shift
  local pending=("$@") still
  while (( ${#pending[@]} )); do
    check_running "while a later wave loaded"
    still=()
    for spec in "${pending[@]}"; do  # every server of the wave at each poll: a crash is seen at once
      IFS=$'\x1f' read -r pid host port model key log <<<"$spec"
      if ready "$host" "$port" "$model" "$key"; then
        echo "ready: $model on http://$host:$port/v1 ($(( SECONDS - t0 )) s)" >&2; continue
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "vllm for $model on port $port exited before it was ready; last lines of $log:" >&2
        show_tail "$log" "$key"; exit 3
      fi
      if (( SECONDS - t0 > WAIT_S )); then
        echo "vllm for $model on port $port not ready after ${WAIT_S} s; last lines of $log:" >&2
        show_tail "$log" "$key"; exit 3
      fi
      still+=("$spec")
    done
    pending=(${still[@]+"${still[@]}"})
    (( ${#pending[@]} )) || break
    if (( SECONDS - last >= 30 )); then echo "waiting for ${#pending[@]} server(s) ($(( SECONDS - t0 )) s)" >&2; last=$SECONDS; fi
    sleep "$POLL_S"
  done
  running+=("$@")
}
'''


def write_script(cmds: list[ServeCommand], path: str | Path, table: str = "", log_dir: str = "vllm-logs",
                 wait_s: float = 1800.0) -> Path:
    """A bash script that starts the servers wave by wave, waits for each as ``--start`` does, and keeps
    them running until Ctrl-C (written atomically)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--write {path}: a folder; give the script's file name")
    keys = sorted({c.key_env for c in cmds if c.key_env})
    lines = ["#!/usr/bin/env bash", "# Written by `benchfill probes serve`: one vLLM server per probe model.", "#"]
    lines += [f"# {ln}" for ln in table.splitlines()]
    lines += ["set -euo pipefail"]
    lines += [f': "${{{k}:?set {k} (the key the probes send) before running this script}}"' for k in keys]
    lines += [f"DEFAULT_LOG_DIR={shlex.quote(log_dir)}"]  # quoted: a --log-dir is data, never shell code
    lines += [_BASH_HELPERS.replace("__WAIT_S__", str(math.ceil(wait_s))).replace("__TAIL__", str(LOG_TAIL))
              .replace("__HUB_TOKENS__", " ".join(HUB_TOKEN_ENV))]  # (the same names fail() masks)
    lines += [f"refuse_taken {shlex.quote(c.reach)} {c.port}" for c in cmds]
    for w in range(max((c.wave for c in cmds), default=-1) + 1):
        wave = [c for c in cmds if c.wave == w]
        lines.append(f"# wave {w + 1}: " + ("servers on separate GPUs start together" if w == 0
                                             else "servers sharing a GPU with an earlier one start once it is ready"))
        lines.append("t0=$SECONDS")
        for c in wave:
            lines += [f'{c.shell("$SETSID")} >"$LOG_DIR/{c.log_name}" 2>&1 </dev/null &', f"pid_{c.port}=$!",
                      f"pids+=($pid_{c.port})"]
        specs = []
        for c in wave:  # literal fields single-quoted; only the pid and the log folder expand
            fields = [f'"$pid_{c.port}"', shlex.quote(url_host(c.reach)), str(c.port), shlex.quote(c.model),
                      c.key_env or KEY_VAR, f'"$LOG_DIR"/{shlex.quote(c.log_name)}']
            specs.append('"$US"'.join(fields))
        lines.append("US=$'\\x1f'")
        lines.append(f'wait_wave "$t0" {" ".join(specs)}')
        lines.append("")
    lines += [f'echo "all {len(cmds)} servers ready; Ctrl-C stops them" >&2',
              # polled, not `wait -n`, so that the one that exited is named, with its log (bash 4 has no wait -p)
              'while sleep "$POLL_S"; do check_running "after all were ready"; done', ""]
    path.parent.mkdir(parents=True, exist_ok=True)  # as the other writers do: a new folder is made
    from benchfill.outputs import named, temp_path

    tmp = temp_path(path.parent, path.name)  # its own name: a user's "<script>.tmp" was written over and removed
    try:
        tmp.write_text("\n".join(lines))
        tmp.chmod(0o755)
        tmp.replace(path)
    except OSError as exc:
        named(exc, path)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return path


def start_servers(cmds: list[ServeCommand], log_dir: str | Path, wait_s: float = 1800.0, poll_s: float = 2.0,
                  progress_s: float = 30.0, out: TextIO | None = None) -> list[subprocess.Popen]:
    """Launch the servers wave by wave and return once each answers ``/health`` and lists its model on
    ``/v1/models``. A server that exits or misses its deadline stops them all: its log's last lines go to
    ``out`` (stderr) and an EndpointError names it."""
    import shutil

    out = out or sys.stderr
    if cmds and shutil.which(cmds[0].argv[0]) is None:
        raise EndpointError(f"{cmds[0].argv[0]}: not found on PATH; install the extra: pip install 'benchfill[vllm]'")
    envs = [child_env(c) for c in cmds]  # a missing key is found before anything starts
    for c in cmds:  # else a server left running would be taken for this one as ready, and this one's bind fail
        if _answers(c.reach, c.port):
            raise EndpointError(f"port {c.port} on {c.reach} already answers (a server left from an earlier run?); "
                                f"stop it before serving {c.model} there")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    ready: list[tuple[ServeCommand, subprocess.Popen]] = []  # the servers of the waves before, which may exit too
    try:
        for w in range(max((c.wave for c in cmds), default=-1) + 1):
            wave = []
            for c, env in zip(cmds, envs, strict=True):
                if c.wave == w:
                    # "wb": a failure shows this start's lines only; the child keeps its own descriptor
                    with open(log_dir / c.log_name, "wb") as log:
                        # its own session: Ctrl-C reaches benchfill only, which stops each whole group
                        procs.append(subprocess.Popen(c.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                      stdin=subprocess.DEVNULL, start_new_session=True))
                    wave.append((c, procs[-1]))
            _wait_ready(wave, log_dir, wait_s, poll_s, progress_s, out, earlier=ready)
            ready += wave
    except BaseException:
        stop_servers(procs)
        raise
    return procs


def _answers(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _wait_ready(wave, log_dir: Path, wait_s: float, poll_s: float, progress_s: float, out: TextIO,
                earlier=()) -> None:
    """Until each server of ``wave`` is ready; a server of an ``earlier`` wave that exits meanwhile stops it
    too (one had gone unseen until every later wave had loaded, minutes of a 70B model)."""
    import httpx

    from benchfill import proxies

    proxies.prepare()
    started = last = time.monotonic()
    pending = list(wave)
    with httpx.Client(timeout=5) as client:
        while pending:
            for c, proc in earlier:
                if proc.poll() is not None:
                    fail(c, log_dir, f"exited with code {proc.returncode} while a later wave loaded", out)
            for c, proc in list(pending):
                if proc.poll() is not None:
                    fail(c, log_dir, f"exited with code {proc.returncode} before it was ready", out)
                if _ready(client, c):
                    pending.remove((c, proc))
                    print(f"ready: {c.model} on {c.base_url}/v1 ({time.monotonic() - started:.0f} s)",
                          file=out, flush=True)
            if not pending:
                break
            now = time.monotonic()
            if now - started > wait_s:
                fail(pending[0][0], log_dir, f"not ready after {wait_s:.0f} s", out)
            if now - last >= progress_s:
                names = ", ".join(f"{c.model} (port {c.port})" for c, _ in pending)
                print(f"waiting {now - started:.0f} s for {len(pending)} server(s) to load: {names}", file=out,
                      flush=True)
                last = now
            time.sleep(poll_s)


def _ready(client, c: ServeCommand) -> bool:
    try:
        if client.get(f"{c.base_url}/health").status_code != 200:
            return False
    except Exception:  # noqa: BLE001  (not listening yet: still loading)
        return False
    _, ids, _ = _models(client, f"{c.base_url}/v1", key_from_env(c.key_env))
    return ids is not None and c.model in ids


def fail(c: ServeCommand, log_dir: Path, what: str, out: TextIO) -> None:
    """The last lines of the server's log, then one line naming it."""
    log = Path(log_dir) / c.log_name
    try:
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:]
    except OSError:
        tail = []
    for line in tail:  # a server's own words: its key (and a token it was given) masked, as every echo is
        print(f"  | {scrub(line, env=[c.key_env, *HUB_TOKEN_ENV])}", file=out)
    gpus = ",".join(map(str, c.gpus))
    raise EndpointError(f"vllm for {c.model} on port {c.port} (GPU {gpus}) {what}; log: {log}"
                        + (" (last lines above)" if tail else " (empty)"))


def watch(cmds: list[ServeCommand], procs: list[subprocess.Popen], log_dir: str | Path, poll_s: float = 1.0,
          out: TextIO | None = None) -> None:
    """Block while every server runs; the first one to exit is reported (log tail, one-line error)."""
    while True:
        for c, p in zip(cmds, procs, strict=True):
            if p.poll() is not None:
                fail(c, Path(log_dir), f"exited with code {p.returncode}", out or sys.stderr)
        time.sleep(poll_s)


def stop_servers(procs: list[subprocess.Popen], grace_s: float = 30.0) -> None:
    """SIGTERM each server's process group (vLLM's engine runs in child processes), SIGKILL after grace_s.

    A second Ctrl-C (or SIGTERM) while they stop means "now": every group still running gets SIGKILL at
    once. The servers run in sessions of their own, out of the terminal's reach: that Ctrl-C had left them
    all running, holding their ports and GPU memory, and nothing said so."""
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
    except BaseException:
        for p in procs:
            if p.poll() is None:
                _signal_group(p, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        raise


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)  # started with start_new_session: its group id is its pid
    except (ProcessLookupError, PermissionError):
        pass
