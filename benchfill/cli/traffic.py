"""``benchfill probes check`` and ``benchfill probes serve``: the probe panel's endpoints."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchfill.cli.argtypes import positive_float


def register(subparsers: Any) -> None:
    probes = subparsers.add_parser("probes", help="the probe panel: check endpoints, serve models with vLLM")
    sub = probes.add_subparsers(dest="probes_command", metavar="ACTION", required=True)

    check = sub.add_parser("check", help="does each endpoint (each replica of a fleet) answer /v1/models "
                           "and serve its model?")
    _config_args(check)
    check.add_argument("--timeout", type=positive_float, default=5.0, help="seconds per endpoint (default 5)")
    check.set_defaults(func=check_cmd)

    serve = sub.add_parser("serve", help="plan, write and/or start one `vllm serve` per probe model (GPU host)",
                           description="Plans where each probe model's vLLM server goes (GPUs, memory share, "
                           "context), prints the plan, then writes it as a bash script and/or starts it.")
    _config_args(serve)
    serve.add_argument("--write", metavar="FILE", help="write the plan as a bash script that starts and waits")
    serve.add_argument("--start", action="store_true", help="start the servers, wait until each is ready, "
                       "keep them until Ctrl-C")
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--gpus", metavar="SPEC", help="plan for these GPUs instead of asking nvidia-smi: "
                       "8x80 (count x GiB), 141, or 80,80,24")
    where.add_argument("--nvidia-smi", metavar="FILE", help="plan from a recorded `nvidia-smi --query-gpu="
                       "index,name,memory.total,memory.used --format=csv,noheader,nounits` output")
    serve.add_argument("--log-dir", default="vllm-logs", help="one log per server (default ./vllm-logs)")
    serve.add_argument("--wait", type=positive_float, default=1800.0,
                       help="seconds each server may take to be ready (default 1800)")
    serve.add_argument("--poll", type=positive_float, default=2.0,
                       help="seconds between readiness checks (default 2)")
    serve.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                       help="extra argument passed to every vllm serve (repeatable)")
    # a closed terminal (SIGHUP) stops the servers as Ctrl-C does: they run in sessions of their own,
    # so nothing else would
    serve.set_defaults(func=serve_cmd, stop_on_hangup=True)


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="config file (TOML or YAML) with the probe panel")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. probes.p1.trials=16 (repeatable)")


def check_cmd(args: argparse.Namespace) -> int:
    from benchfill.config import load_config
    from benchfill.errors import ConfigError, EndpointError
    from benchfill.serving import check_endpoints

    cfg = load_config(args.config, args.set)
    if not cfg.probes and cfg.rewriter is None and cfg.judge is None:
        raise ConfigError(f"{args.config}: no probes, rewriter or judge to check")
    checks = check_endpoints(cfg, timeout_s=args.timeout)
    width = max(len(c.label) for c in checks)
    for c in checks:
        print(f"{c.status:<4}  {c.label:<{width}}  {c.base_url}  {c.model}  {c.detail}")
    bad = [c for c in checks if not c.ok and not c.skipped]
    if bad:
        # A fleet that keeps one replica still serves its probe; say so, but a check is a check.
        spare = sum(c.spare for c in bad)
        still = f" ({spare} of them replicas whose fleet is still served)" if spare else ""
        # only the configuration at fault (a key's variable unset): exit 2, as a run with it gives
        error = ConfigError if all(c.config_fault for c in bad) else EndpointError
        raise error(f"{len(bad)} of {len(checks)} endpoints not ready{still}; first: {bad[0].label} "
                    f"at {bad[0].base_url}: {bad[0].detail}")
    return 0


def serve_cmd(args: argparse.Namespace) -> int:
    from pathlib import Path

    from benchfill import placement
    from benchfill.cli.output import check_out_file
    from benchfill.config import load_config
    from benchfill.errors import ConfigError
    from benchfill.serving import (
        check_vllm_args,
        start_servers,
        stop_servers,
        vllm_commands,
        watch,
        write_script,
    )

    # refused before the plan is made (an nvidia-smi call, a walk of the HF cache): the script's path, and a
    # --vllm-arg that would overrule the plan or pass a key
    check_out_file(args.write, "--write", {"--config": args.config, "--nvidia-smi": args.nvidia_smi})
    check_vllm_args(args.vllm_arg)
    cfg = load_config(args.config, args.set)
    if not cfg.probes:
        raise ConfigError(f"{args.config}: no probes to serve")
    if args.gpus:
        gpus = placement.parse_gpus_option(args.gpus)
    elif args.nvidia_smi:
        if not Path(args.nvidia_smi).is_file():
            raise ConfigError(f"{args.nvidia_smi}: file not found")
        gpus = placement.parse_nvidia_smi(Path(args.nvidia_smi).read_text(), args.nvidia_smi)
    else:
        gpus = placement.visible(placement.query_gpus())
    try:
        servers = placement.servers(cfg)
    except ConfigError as exc:  # it names the probes; the config they come from is the user's to open
        raise ConfigError(f"{args.config}: {exc}") from None
    for w in placement.sampling_warnings(cfg, servers):
        print(f"benchfill: warning: {w}", file=sys.stderr)
    plan = placement.plan(servers, gpus)
    table = plan.table()
    print(table, flush=True)
    cmds = vllm_commands(plan, seed=cfg.seed, extra=args.vllm_arg)
    if args.write:
        path = write_script(cmds, args.write, table=table, log_dir=args.log_dir, wait_s=args.wait)
        print(f"wrote {path} ({len(cmds)} servers)", file=sys.stderr)
    if not args.start:
        if not args.write:
            print()
            for c in cmds:
                print(c.shell())
        return 0
    procs = []
    try:  # the print inside: a Ctrl-C right after "ready" must still stop the servers
        procs = start_servers(cmds, args.log_dir, wait_s=args.wait, poll_s=args.poll)  # stops its own on failure
        print(f"all {len(procs)} servers ready; Ctrl-C stops them", file=sys.stderr, flush=True)
        watch(cmds, procs, args.log_dir)
    except KeyboardInterrupt:
        if procs:
            print(f"stopping {len(procs)} servers", file=sys.stderr)
        # raised on past the cleanup below: the exit status says the command was stopped (130, or 128 + the
        # signal for SIGTERM/SIGHUP), not that it finished, for a script or scheduler that reads it
        raise
    finally:
        stop_servers(procs)
    return 0
