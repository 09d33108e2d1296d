"""``benchfill sim serve``: the simulated world as an OpenAI-compatible server on loopback."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from benchfill.cli.argtypes import nonneg_int, port, unit_float

HOST = "127.0.0.1"  # loopback only: the simulated world is never exposed to a network


def register(subparsers: Any) -> None:
    sim = subparsers.add_parser("sim", help="the simulated world (offline OpenAI-compatible backend)")
    sub = sim.add_subparsers(dest="sim_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="serve a seeded simulated world on 127.0.0.1")
    src = serve.add_argument_group("benchmark (one of --benchmark or --items)")
    src.add_argument("--benchmark", help="a registered benchmark name (or 'demo')")
    src.add_argument("--data-dir", help="directory holding <benchmark>/items.jsonl (default $BENCHFILL_DATA_DIR)")
    src.add_argument("--items", help="items JSONL file")
    src.add_argument("--evaluator", choices=("math", "multiple_choice", "code"), help="answer format of --items")
    src.add_argument("--responses", help="responses file (model,item_id,correct,trials) to fit the truth from")
    src.add_argument("--text-field", help="item field holding the text (default by evaluator)")
    src.add_argument("--answer-field", help="item field holding the reference answer (default by evaluator)")
    serve.add_argument("--port", type=port, default=8000, help="port on 127.0.0.1 (default 8000; 0: any free port)")
    serve.add_argument("--probes", type=int, default=12, help="number of simulated probe models (default 12)")
    serve.add_argument("--seed", type=nonneg_int, default=0, help="seed of the simulated world (default 0)")
    serve.add_argument("--latency-ms", type=float, default=0.0,
                       help="milliseconds each reply waits before it is sent, as a real server's would (default 0)")
    serve.add_argument("--latency-jitter-ms", type=float, default=0.0,
                       help="spread of that wait, in milliseconds (default 0)")
    serve.add_argument("--fault-rate", type=float, default=0.0,
                       help="share of attempts answered with a fault (429, 500, a timeout, a malformed body; default 0)")
    serve.add_argument("--retry-after-s", type=float, default=1.0,
                       help="Retry-After sent with simulated 429s (default 1)")
    add_rewriter_arguments(serve)
    serve.add_argument("--rewriter-malformed-rate", type=float, default=0.0,
                       help="share of rewriter replies cut off, which a caller must repair or retry (default 0)")
    serve.add_argument("--reply-habits", type=unit_float, default=0.3, metavar="RATE",
                       help="share of replies written in a real model's habits: reasoning blocks, bold labels, "
                            "extra fences, LaTeX left single in JSON, replies cut short (form only; default 0.3)")
    serve.add_argument("--pair-sd", type=float, default=5.0, metavar="SD",
                       help="sd, in logits, of each probe's own offset on an item (default 5, which matches the "
                            "published matrices; 0: its answers are independent draws about the curve, kinder "
                            "than real data)")
    serve.add_argument("--pair-curve", choices=("average", "added"), default="average",
                       help="how those offsets meet the IRT curve: 'average' (default) keeps the world's curve as "
                            "their average; 'added' puts them on it, which flattens it (the world before s48)")
    serve.add_argument("--state", help="JSONL registry of generated children (kept across restarts)")
    serve.add_argument("--api-key-env", help="require 'Authorization: Bearer $VAR' (the key is read from this env var)")
    serve.set_defaults(func=serve_cmd)


def add_rewriter_arguments(parser: Any) -> None:
    """The simulated rewriter and judge (docs/sim-rewriter.md), shared by ``sim serve`` and ``run``."""
    g = parser.add_argument_group("simulated rewriter and judge (docs/sim-rewriter.md)")
    g.add_argument("--rewriter", choices=("kind", "realistic", "hostile"), default=None,
                   help="preset of the simulated rewriter's sense of difficulty (default realistic)")
    g.add_argument("--rewriter-knobs", metavar="K=V,...",
                   help="override knobs of the preset, e.g. 'bias=0.1,share=0.4,noise=0.8,anchor=0'")
    g.add_argument("--invalid-rate", type=float,
                   help="share of invalid children at no change (knob invalid_base; default the preset's)")
    g.add_argument("--judge-recall", type=float,
                   help="share of invalid children the judge catches (default the preset's)")
    g.add_argument("--judge-fpr", type=float, help="share of valid children the judge rejects (default the preset's)")


def rewriter_knobs(args: argparse.Namespace) -> dict[str, float]:
    from benchfill.sim.rewriter import parse_knobs

    knobs = parse_knobs(getattr(args, "rewriter_knobs", None))
    for flag, knob in (("invalid_rate", "invalid_base"), ("judge_recall", "judge_recall"), ("judge_fpr", "judge_fpr")):
        if getattr(args, flag, None) is not None:
            knobs[knob] = getattr(args, flag)
    return knobs


_DEFAULT_FIELDS = {"math": ("problem", "answer"), "multiple_choice": ("question", "answer"),
                   "code": ("prompt", "canonical_solution")}


def _benchmark_inputs(args: argparse.Namespace) -> tuple[list[dict], dict[str, Any], Any]:
    """Items, the World field arguments, and a response matrix (or None)."""
    from benchfill.errors import ConfigError

    if bool(args.benchmark) == bool(args.items):
        raise ConfigError("sim serve: give exactly one of --benchmark NAME or --items FILE")
    if args.benchmark:
        from benchfill.benchmarks import get_benchmark
        from benchfill.data import read_responses

        bench = get_benchmark(args.benchmark, args.data_dir)
        spec = bench.spec
        fields: dict[str, Any] = {"evaluator": spec.evaluator, "text_field": spec.text_field,
                                  "answer_field": spec.answer_field}
        for name in ("options_field", "tests_field", "entry_point_field"):
            if getattr(spec, name, None):
                fields[name] = getattr(spec, name)
        items = bench.items
        matrix = bench.matrix
        if matrix is None and bench.responses_path is not None:
            matrix = read_responses(bench.responses_path, items=items)
        return items, fields, matrix
    from benchfill.data import read_items, read_responses

    if not args.evaluator:
        raise ConfigError("sim serve: --items needs --evaluator (math, multiple_choice or code)")
    text_field, answer_field = _DEFAULT_FIELDS[args.evaluator]
    items = read_items(args.items)
    matrix = read_responses(args.responses, items=items) if args.responses else None
    return items, {"evaluator": args.evaluator, "text_field": args.text_field or text_field,
                   "answer_field": args.answer_field or answer_field}, matrix


def serve_cmd(args: argparse.Namespace) -> int:
    import re
    import socket

    from benchfill.config import ENV_NAME, looks_like_key
    from benchfill.errors import ConfigError
    from benchfill.sim import SimApp, World
    from benchfill.sim.server import sim_uvicorn_server

    if getattr(args, "sim_command", None) != "serve":
        raise ConfigError("sim: missing subcommand; try 'benchfill sim serve --help'")
    api_key = None
    if args.api_key_env:
        # as a config's api_key_env is checked, and never echoed: a key pasted in place of the name would
        # otherwise land in the terminal and its scrollback
        if looks_like_key(args.api_key_env):
            raise ConfigError("sim serve: --api-key-env: looks like a key, not the name of an environment variable; "
                              "put the key in a variable (e.g. SIM_API_KEY) and name that variable here")
        if not re.fullmatch(ENV_NAME, args.api_key_env):
            raise ConfigError("sim serve: --api-key-env: not an environment variable's name (letters, digits and "
                              "underscores, not starting with a digit)")
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(f"sim serve: --api-key-env {args.api_key_env}: that environment variable is not set")
    items, fields, matrix = _benchmark_inputs(args)
    world = World.from_items(
        items, **fields, matrix=matrix, n_probes=args.probes, seed=args.seed, state_path=args.state,
        rewriter=args.rewriter, rewriter_knobs=rewriter_knobs(args), rewriter_malformed_rate=args.rewriter_malformed_rate,
        latency_ms=args.latency_ms, latency_jitter_ms=args.latency_jitter_ms, fault_rate=args.fault_rate,
        retry_after_s=args.retry_after_s, api_key=api_key, reply_habits=args.reply_habits, pair_sd=args.pair_sd,
        pair_curve=args.pair_curve,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, args.port))
    except OSError as exc:
        raise ConfigError(f"sim serve: --port {args.port}: cannot bind {HOST}:{args.port} ({exc.strerror})") from None
    port = sock.getsockname()[1]
    sock.listen(2048)  # connections queue from the moment the URL is printed
    print(f"benchfill sim (SIMULATED world, seed {args.seed}, truth from {world.latent_origin}, "
          f"rewriter {world.rewriter_preset}): "
          f"{len(items)} items, {len(world.abilities)} probes, rewriter {world.rewriter_model}, "
          f"judge {world.judge_model}", flush=True)
    print(f"serving http://{HOST}:{port}/v1", flush=True)
    sim_uvicorn_server(SimApp(world)).run(sockets=[sock])
    print("benchfill sim: stopped", file=sys.stderr)
    return 0
