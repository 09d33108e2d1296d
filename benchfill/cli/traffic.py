"""``benchfill probes check`` and ``benchfill probes serve``: the probe panel's endpoints."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    probes = subparsers.add_parser("probes", help="the probe panel: check endpoints, serve models with vLLM")
    sub = probes.add_subparsers(dest="probes_command", metavar="SUBCOMMAND")

    check = sub.add_parser("check", help="does each endpoint answer /v1/models and serve its model?")
    _config_args(check)
    check.add_argument("--timeout", type=float, default=5.0, help="seconds per endpoint (default 5)")
    check.set_defaults(func=check_cmd)

    serve = sub.add_parser("serve", help="write and/or start one `vllm serve` per probe model (GPU host)")
    _config_args(serve)
    serve.add_argument("--write", metavar="FILE", help="write the commands as a bash script")
    serve.add_argument("--start", action="store_true", help="launch the servers and wait for /v1/models")
    serve.add_argument("--port-base", type=int, default=8000, help="first port when a probe URL names none")
    serve.add_argument("--gpus", type=int, default=0, help="GPUs to spread the models over (CUDA_VISIBLE_DEVICES)")
    serve.add_argument("--log-dir", default="vllm-logs", help="server logs with --start (default ./vllm-logs)")
    serve.add_argument("--wait", type=float, default=1800.0, help="seconds to wait for readiness with --start")
    serve.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                       help="extra argument passed to every vllm serve (repeatable)")
    serve.set_defaults(func=serve_cmd)
    probes.set_defaults(func=lambda args: probes.print_help() or 2)


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
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{'ok  ' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.base_url}  {c.model}  {c.detail}")
    bad = [c for c in checks if not c.ok]
    if bad:
        raise EndpointError(f"{len(bad)} of {len(checks)} endpoints not ready; first: {bad[0].name} "
                            f"at {bad[0].base_url}: {bad[0].detail}")
    return 0


def serve_cmd(args: argparse.Namespace) -> int:
    from benchfill.config import load_config
    from benchfill.errors import ConfigError
    from benchfill.serving import start_servers, stop_servers, vllm_commands, write_script

    cfg = load_config(args.config, args.set)
    if not cfg.probes:
        raise ConfigError(f"{args.config}: no probes to serve")
    cmds = vllm_commands(cfg, port_base=args.port_base, gpus=args.gpus, extra=args.vllm_arg)
    if args.write:
        print(f"wrote {write_script(cmds, args.write)} ({len(cmds)} servers)", file=sys.stderr)
    if not args.start:
        if not args.write:
            for c in cmds:
                print(c.shell())
        return 0
    procs = start_servers(cmds, args.log_dir, wait_s=args.wait)
    print(f"all {len(procs)} servers ready; Ctrl-C stops them", file=sys.stderr)
    try:
        for p in procs:
            p.wait()
    finally:
        stop_servers(procs)
    return 0
