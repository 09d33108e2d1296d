"""``benchfill fit | diagnose | calibrate``: measure a benchmark on the difficulty axis.

Only argparse is imported here; numpy, scipy, matplotlib and the IRT engine are
imported inside the handlers so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from benchfill.cli.argtypes import mcmc_draws, nonneg_int, positive_int
from benchfill.untrusted import terminal as shown


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("fit", help="fit IRT on a response matrix and save the fit")
    _input_args(p, saved_fit=False)
    _fit_args(p)
    p.add_argument("--out", default="fit.json", help="where to write the fit (default: fit.json)")
    p.add_argument("--bic", action="store_true", help="compare 1PL and 2PL by BIC")
    p.add_argument("--spread", action="store_true",
                   help="estimate how item discrimination spreads (sd of log a, empirical-Bayes 2PL): what "
                        "`run --misfit auto` allows for")
    p.add_argument("--loo", action="store_true", help="leave-one-model-out robustness of the difficulties")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_fit)

    p = subparsers.add_parser("diagnose", help="coverage diagnostics: DDM, max gap, top-k gaps, uncertainty")
    _input_args(p)
    _fit_args(p)
    _target_arg(p)
    p.add_argument("--k", type=int, help="number of largest gaps summed and listed (default 5, or all when "
                   "fewer); at most the number of items + 1")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--plot", metavar="FILE", help="write an ECDF plot with the largest gaps shaded, as the name's "
                   "ending says: .png, .pdf or .svg")
    p.set_defaults(func=cmd_diagnose)

    p = subparsers.add_parser("calibrate", help="prune to k items matching a target distribution (Appendix D)")
    _input_args(p)
    _fit_args(p)
    _target_arg(p)
    p.add_argument("--size", type=positive_int, required=True, metavar="K", help="number of items to keep")
    p.add_argument("--reference", metavar="FILE", help="reference model scores (JSON {model: score} or CSV model,score); "
                   "default: the full benchmark")
    p.add_argument("--n-random", type=positive_int, default=30, help="random subsets for the baseline (default 30)")
    p.add_argument("--out", metavar="FILE", help="write the kept items as JSONL: their lines from the --items file "
                   "as written there, a benchmark's items as JSON, else {\"id\": ...} lines; not the --items "
                   "file itself (pruned in place, the full benchmark would be gone)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_calibrate)


def _input_args(p: argparse.ArgumentParser, saved_fit: bool = True) -> None:
    g = p.add_argument_group("input")
    g.add_argument("--benchmark", metavar="NAME", help="a registered benchmark ('demo' is built in)")
    g.add_argument("--data-dir", metavar="DIR", help="where registered benchmarks' files live (default $BENCHFILL_DATA_DIR)")
    g.add_argument("--responses", metavar="FILE", help="responses: model,item_id,correct,trials (CSV or JSONL)")
    g.add_argument("--items", metavar="FILE", help="items JSONL; responses are checked against it")
    g.add_argument("--spec", metavar="FILE", help="the benchmark spec of --items (TOML/JSON/YAML, as `run` takes it): "
                   "its id_field, and its guessing floor (chance, options_field) as a run fits it")
    g.add_argument("--guessing-options", type=int, metavar="N",
                   help="chance 1/N on every item, in place of the per-item floors that --items or --benchmark give "
                   "(1 / each item's number of options; mmlu-pro's items have 2 to 10)")
    if saved_fit:
        g.add_argument("--fit", dest="fit_path", metavar="FILE", help="use a saved fit instead of fitting")
    else:  # `fit` makes the fit it would read
        p.set_defaults(fit_path=None)


# The options that shape a fit, with their defaults: a saved fit (--fit) settles them itself. argparse
# gives them None, so that one given at its default value is still seen as given (fit_options).
FIT_DEFAULTS = {"engine": "map", "model": "1pl", "no_guessing": False, "chains": 4, "warmup": 1000, "draws": 1000,
                "prior": "normal"}
NUTS_OPTIONS = ("chains", "warmup", "draws")


def _fit_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("IRT fit")
    g.add_argument("--engine", choices=("map", "nuts"), default=None, help="map (default) or nuts (posterior draws)")
    g.add_argument("--model", choices=("1pl", "2pl"), default=None, help="1pl (default) or 2pl")
    g.add_argument("--no-guessing", action="store_true", default=None, help="ignore the per-item guessing floor")
    g.add_argument("--prior", choices=("normal", "hierarchical"), default=None,
                   help="the difficulties' prior: normal, the paper's N(0, 1) (default), or hierarchical, "
                        "N(mu, sigma^2) estimated from the items, which leaves the ends as far out as the "
                        "benchmark's own spread warrants (1PL only; with --engine nuts, the draws are taken under the "
                        "estimated prior; bench/bench_gap_bias.py)")
    g.add_argument("--seed", type=nonneg_int, default=0, help="seed of every random draw: NUTS chains, --spread's replicates, calibrate's random subsets (default 0)")
    g.add_argument("--chains", type=positive_int, default=None, help="NUTS chains (default 4)")
    g.add_argument("--warmup", type=nonneg_int, default=None, help="NUTS warm-up draws per chain (default 1000)")
    g.add_argument("--draws", type=mcmc_draws, default=None,
                   help="NUTS draws per chain, at least 4 for split R-hat (default 1000)")


def fit_options(args: argparse.Namespace) -> None:
    """Refuse options that would be ignored without a word, then give those not given their defaults."""
    from benchfill.errors import ConfigError

    given = [k for k in (*FIT_DEFAULTS, "guessing_options") if getattr(args, k) is not None]
    if args.fit_path and given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag}: --fit {args.fit_path} is a saved fit with its own engine and settings; "
                          "give one or the other")
    if args.no_guessing and args.guessing_options is not None:
        raise ConfigError(f"--guessing-options {args.guessing_options}: --no-guessing turns the guessing floor off; "
                          "give one or the other")
    nuts = [k for k in NUTS_OPTIONS if k in given]
    if nuts and (args.engine or FIT_DEFAULTS["engine"]) != "nuts":
        raise ConfigError(f"--{nuts[0]}: sets the NUTS sampler, and --engine {args.engine or FIT_DEFAULTS['engine']} "
                          "does not sample; give --engine nuts or leave it out")
    for k, d in FIT_DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, d)
    if args.prior == "hierarchical" and args.model != "1pl":
        raise ConfigError(f"--prior hierarchical: fitted for --model 1pl only, not --model {args.model}")


def _target_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="uniform",
                   help="uniform (default), beta:A,B, or a file of m numbers in [0, 1]: the target's quantiles at "
                   "the levels (i - 1/2)/m, i = 1..m, linear in between")


# -- shared steps ---------------------------------------------------------------------------------


def load_matrix(args: argparse.Namespace) -> tuple[Any, list[dict] | None]:
    """The response matrix (and items, when known) named by --benchmark or --responses/--items."""
    from benchfill.cli.output import warn_untried
    from benchfill.data import read_responses
    from benchfill.errors import ConfigError, DataError

    if args.benchmark and args.responses:
        raise ConfigError("give either --benchmark or --responses, not both")
    if args.benchmark and args.items:  # the benchmark brings its own items; --items would be dropped or mixed in
        raise ConfigError(f"--items {args.items}: --benchmark {args.benchmark} brings its own items; "
                          "give --items with --responses")
    spec = _spec_arg(args)
    items = _items_arg(args, spec)
    if args.benchmark == "demo":
        from benchfill.demo import demo_benchmark

        demo = demo_benchmark()
        matrix, items = demo.matrix, demo.items
    elif args.benchmark:
        try:
            from benchfill.benchmarks import get_benchmark
        except ImportError:
            raise ConfigError(f"--benchmark {args.benchmark!r}: unknown benchmark (only 'demo' is built in)") from None
        bench = get_benchmark(args.benchmark, args.data_dir)
        if getattr(bench, "matrix", None) is not None:
            matrix, items = bench.matrix, list(bench.items)
        else:
            if not bench.responses_path:
                # --responses goes with its items file, not with --benchmark (refused above)
                from benchfill.hub import HubRef

                spec = bench.spec
                where = bench.items_path or HubRef(spec.hf_dataset or "ORG/NAME", spec.hf_config, spec.hf_split)
                raise DataError(f"benchmark {args.benchmark}: no responses file; pass --responses FILE "
                                f"--items {where} instead of --benchmark")
            items = list(bench.items)
            matrix = read_responses(bench.responses_path, items=items, items_source=bench.items_path)
            chance = dict(zip((it["id"] for it in bench.items), bench.chance, strict=True))
            matrix = matrix.with_chance([chance.get(i, 0.0) for i in matrix.item_ids])
    elif args.responses:
        matrix = read_responses(args.responses, items=items, items_source=args.items)
        if spec is not None and items is not None:  # the floor a run of this spec fits with, not the field guess
            chance = {str(it["id"]): spec.chance_of(it) for it in items}
            matrix = matrix.with_chance([chance.get(i, 0.0) for i in matrix.item_ids])
    else:
        raise ConfigError("no input: give --responses FILE or --benchmark NAME")
    warn_untried(matrix)
    if args.guessing_options is not None:
        if args.guessing_options < 2:
            raise ConfigError(f"--guessing-options must be at least 2, got {args.guessing_options}")
        matrix = matrix.with_chance(1.0 / args.guessing_options)
    return matrix, items


def fit_or_load(args: argparse.Namespace, matrix: Any) -> Any:
    from benchfill.irt.fit import IrtFit

    if args.fit_path:
        from benchfill.errors import DataError

        f = IrtFit.load(args.fit_path)  # a malformed file: DataError naming it
        if matrix is not None and tuple(f.item_ids) != tuple(matrix.item_ids):
            if sorted(f.item_ids) != sorted(matrix.item_ids):
                ours, theirs = set(f.item_ids), set(matrix.item_ids)
                odd = sorted(theirs - ours) or sorted(ours - theirs)
                raise DataError(f"{args.fit_path}: the fit's items differ from the responses' items "
                                f"({len(ours)} against {len(theirs)}; e.g. {odd[0]!r} is in only one)")
            f = f.in_order(matrix.item_ids)  # the same items in another order
        return f
    from benchfill.irt import fit

    progress = (lambda msg: print(msg, file=sys.stderr)) if args.engine == "nuts" else None
    return fit(
        matrix, engine=args.engine, model=args.model, guessing=not args.no_guessing, seed=args.seed,
        chains=args.chains, warmup=args.warmup, draws=args.draws, progress=progress, prior=args.prior,
    )


def _spec_arg(args: argparse.Namespace) -> Any:
    """The spec of --spec (which goes with --items), or None."""
    if not getattr(args, "spec", None):
        return None
    from benchfill.errors import ConfigError

    if args.benchmark:
        raise ConfigError(f"--spec {args.spec}: --benchmark {args.benchmark} brings its own spec; give --spec with "
                          "--items and --responses")
    if not args.items:
        raise ConfigError(f"--spec {args.spec}: describes the items of --items; give that file too")
    from benchfill.benchmarks import BenchmarkSpec

    return BenchmarkSpec.from_file(args.spec)


def _items_arg(args: argparse.Namespace, spec: Any = None) -> list[dict] | None:
    """The items of --items (a JSONL file, or hf:ORG/NAME), or None; read by ``spec`` where given."""
    if not args.items:
        return None
    if args.items.startswith("hf:"):  # a Hugging Face dataset (benchfill.hub)
        from benchfill.hub import load_items

        return load_items(args.items, spec, data_dir=args.data_dir or os.environ.get("BENCHFILL_DATA_DIR"))
    from benchfill.data import read_items

    if spec is None:
        return read_items(args.items)
    return read_items(args.items, required=spec.required_fields(), spec_name=spec.name, text_field=spec.text_field,
                      id_field=spec.id_field)


def _inputs(args: argparse.Namespace) -> tuple[Any, list[dict] | None, Any]:
    if args.fit_path and not (args.responses or args.benchmark):
        f = fit_or_load(args, None)
        items = _items_arg(args, _spec_arg(args))
        if items is not None:  # the file must be the fit's: it names and writes out the fit's items
            from benchfill.errors import DataError

            have = {it["id"] for it in items}
            odd = [i for i in f.item_ids if i not in have]
            if odd:
                raise DataError(f"--items {args.items}: {len(odd)} of the fit's {len(f.item_ids)} items are not in "
                                f"it (e.g. {odd[0]!r}); give the items file the fit was made from")
            extra = sorted(have - set(f.item_ids))
            if extra:  # measured nowhere: said, not dropped quietly from every figure
                import sys

                print(f"benchfill: warning: --items {args.items}: {len(extra)} of its items are not in the fit "
                      f"{args.fit_path} and are left out: {', '.join(extra[:10])}"
                      + (f" ... (+{len(extra) - 10})" if len(extra) > 10 else ""), file=sys.stderr)  # fmt: skip
        return None, items, f
    matrix, items = load_matrix(args)
    return matrix, items, fit_or_load(args, matrix)


def _input_files(args: argparse.Namespace) -> dict[str, str | None]:
    """The files a command reads, by option: an output must not be one of them."""
    files = {"--responses": args.responses, "--items": args.items, "--fit": args.fit_path,
             "--reference": getattr(args, "reference", None), "--spec": getattr(args, "spec", None)}
    target = getattr(args, "target", None)
    if target and target != "uniform" and not target.startswith("beta:"):  # a file of quantiles
        files["--target"] = target
    # the files --benchmark reads its items and responses from (`calibrate --benchmark aime25 --out
    # aime25/items.jsonl` pruned the benchmark in place)
    root = getattr(args, "data_dir", None) or os.environ.get("BENCHFILL_DATA_DIR")
    if getattr(args, "benchmark", None) and root:
        for what, name in (("items", "items.jsonl"), ("responses", "responses.csv")):
            files[f"--benchmark {args.benchmark} {what}"] = os.path.join(root, args.benchmark, name)
    return files


def _source(args: argparse.Namespace, matrix: Any) -> str:
    return args.benchmark or (matrix.source if matrix is not None else args.fit_path)


def _dump(obj: Any) -> None:
    from benchfill.cli.output import dumps

    print(dumps(obj, indent=1))  # dumps makes numpy values plain


# -- fit ------------------------------------------------------------------------------------------


def cmd_fit(args: argparse.Namespace) -> int:
    from benchfill.cli.output import check_out_file
    from benchfill.data import extreme_items, extreme_models
    from benchfill.errors import ConfigError
    from benchfill.irt import compare_models, leave_one_model_out, matrix_checks

    fit_options(args)
    if not args.out:
        raise ConfigError(f"--out {args.out!r}: give a file to write the fit to")
    check_out_file(args.out, "--out", _input_files(args))
    matrix, items = load_matrix(args)
    f = fit_or_load(args, matrix)
    summary: dict[str, Any] = {
        "source": _source(args, matrix),
        "n_models": matrix.n_models,
        "n_items": matrix.n_items,
        "engine": f.engine,
        "model": f.model,
        "guessing": not args.no_guessing and bool(matrix.chance.any()),
        "seed": args.seed,
        "out": args.out,
        "matrix_checks": matrix_checks(matrix),
        "extreme_items": extreme_items(matrix, items),
        "extreme_models": extreme_models(matrix),
        "fit_diagnostics": f.diagnostics,
    }
    # each of these refits the matrix (tens of seconds on mmlu-pro together): said as it starts, on stderr,
    # once what can be refused at once has been (an error stays one line)
    if args.loo:
        from benchfill.irt.checks import check_loo

        check_loo(matrix)

    def say(what: str) -> None:  # on stderr with --json too: the JSON is on stdout, alone
        print(f"{what} ...", file=sys.stderr, flush=True)

    if args.bic:
        say("fitting the 2PL beside the 1PL (--bic)")
        summary["bic"] = compare_models(matrix, guessing=not args.no_guessing)
    if args.spread:
        from benchfill.irt.spread import discrimination_spread

        say("estimating how item discrimination spreads (--spread)")
        summary["discrimination_spread"] = discrimination_spread(matrix, guessing=not args.no_guessing,
                                                                 seed=args.seed).to_dict()
    if args.loo:
        say(f"refitting without each of the {matrix.n_models} models in turn (--loo)")
        loo = leave_one_model_out(matrix, engine="map", model=args.model, guessing=not args.no_guessing,
                                  progress=lambda line: print(line, file=sys.stderr, flush=True))
        summary["leave_one_model_out"] = loo
    f.save(args.out)  # last: a command that fails on the way writes nothing
    if args.json:
        _dump(summary)
        return 0
    prior = f.diagnostics.get("prior") == "hierarchical"
    print(f"{summary['source']}: {matrix.n_models} models x {matrix.n_items} items; "
          f"{f.engine} {f.model}, guessing floor {'on' if summary['guessing'] else 'off'}, seed {args.seed}"
          + (f"; hierarchical prior N({f.diagnostics['difficulty_prior_mean']:+.2f}, "
             f"{f.diagnostics['difficulty_prior_sd']:.2f}^2) on the difficulties" if prior else ""))
    print("response-matrix checks:")
    for name, c in summary["matrix_checks"].items():
        op = ">=" if "information" in name else "<="
        print(f"  {name:<24} {c['value']:.3f}  ({op} {c['threshold']})  {'pass' if c['passed'] else 'FAIL'}")
    _print_extremes(summary["extreme_items"], prior)
    _print_extreme_models(summary["extreme_models"])
    if f.diagnostics:
        print("fit diagnostics: " + ", ".join(f"{k}={_fmt(v)}" for k, v in f.diagnostics.items()
                                               if not isinstance(v, (dict, list))))
    if args.bic:
        b = summary["bic"]
        print(f"BIC: 1pl {b['bic_1pl']:.1f}, 2pl {b['bic_2pl']:.1f} -> {b['selected']} preferred")
    if args.spread:
        sp = summary["discrimination_spread"]
        print(f"item discrimination: sd of log a {sp['sd']:.3f} (Laplace EM {sp['raw_sd']:.3f}, bootstrap-corrected; "
              f"{sp['models']} models x {sp['items']} items with both right and wrong answers; "
              f"the data determine {100 * sp['information']:.0f}% of it)")
    if args.loo:
        lo = summary["leave_one_model_out"]
        undefined = (f"; {lo['undefined']} of {lo['refits']} refits left out, without a correlation "
                     "(difficulties all equal)" if lo["undefined"] else "")
        print(f"leave-one-model-out: pearson mean {_corr(lo['pearson_mean'])} (min {_corr(lo['pearson_min'])}), "
              f"spearman mean {_corr(lo['spearman_mean'])} (min {_corr(lo['spearman_min'])}){undefined}; each refit "
              "against the full fit: how stable the difficulties are to one model less, not how near the truth "
              "(on 5 simulated models x 30 items it read 0.94 where the fit's own correlation with the true "
              "difficulties was 0.71)")
    print(f"fit written to {args.out}")
    return 0


def _fmt(v: Any) -> str:
    if v is None:  # a figure a saved fit holds as null: it did not exist (NaN)
        return "undefined"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _corr(v: float) -> str:
    return "undefined" if v != v else f"{v:.3f}"  # NaN: no refit had a correlation


# No answer places an item every model solves (or none does): the N(0, 1) prior does. It draws every weakly
# measured item at the ends in toward the middle, these most of all, and the gaps there with them: on matrices
# drawn as wide as real fits come out, the fitted max gap was half the true one, with such items or without
# them (bench/bench_gap_bias.py).
PRIOR_PLACED = "; no answer places them: the prior does, and draws them (and the gaps at that end) in toward the middle"
# under the hierarchical prior they are drawn in only as far as the items' own estimated spread
PRIOR_PLACED_HIER = "; no answer places them: the prior does, as far out as the items' estimated spread"


def _print_extremes(ext: dict[str, list[str]], hierarchical: bool = False) -> None:
    tail = PRIOR_PLACED_HIER if hierarchical else PRIOR_PLACED
    labels = (("all_correct", "solved by every model", tail), ("none_correct", "solved by no model", tail),
              ("no_responses", "without responses, not on the scale", ""))
    for key, label, tail in labels:
        _print_names(f"items {label}", ext.get(key) or [], tail)


def _print_extreme_models(ext: dict[str, list[str]]) -> None:
    for key, label in (("all_correct", "solved every item they tried"), ("none_correct", "solved no item")):
        _print_names(f"models that {label}", ext.get(key) or [], "; only the prior holds their abilities finite")


def _print_names(what: str, ids: list[str], tail: str = "") -> None:
    """``what (n): the first ten, ... (+rest)``; nothing for no names."""
    if ids:
        more = f" ... (+{len(ids) - 10})" if len(ids) > 10 else ""
        print(f"{what} ({len(ids)}): {', '.join(map(shown, ids[:10]))}{more}{tail}")


# -- diagnose -------------------------------------------------------------------------------------

NUTS_CHECKS = ("max_rhat", "min_ess_bulk", "divergences", "chains", "draws")


def cmd_diagnose(args: argparse.Namespace) -> int:
    from benchfill.cli.output import check_out_file
    from benchfill.coverage import check_spread, diagnose, parse_target
    from benchfill.data import extreme_items, extreme_models
    from benchfill.errors import ConfigError

    if args.k is not None and args.k < 1:
        raise ConfigError(f"--k must be at least 1, got {args.k}")
    fit_options(args)
    check_out_file(args.plot, "--plot", _input_files(args))
    if args.plot is not None:
        from benchfill.plots import PLOT_FORMATS, plot_format

        if plot_format(args.plot) is None:
            raise ConfigError(f"--plot {args.plot!r}: the name's ending gives the format; give one ending in "
                              + ", ".join(f".{s}" for s in PLOT_FORMATS[:-1]) + f" or .{PLOT_FORMATS[-1]}")

    target = parse_target(args.target)
    matrix, items, f = _inputs(args)
    check_spread(f, matrix, fit_source=args.fit_path)
    if args.k is not None and args.k > f.n_items + 1:  # as run refuses --gaps beyond them
        raise ConfigError(f"--k {args.k}: {_source(args, matrix)} has {f.n_items} items, so at most "
                          f"{f.n_items + 1} gaps")
    report = diagnose(f, k=args.k, target=target, seed=args.seed)
    report.notes = {  # after the fit's own notes (coverage.fit_notes: difficulty_sd, the gaps it cannot see)
        "source": _source(args, matrix),
        "fit": {"engine": f.engine, "model": f.model, "seed": f.seed},
        "guessing": bool(f.chance.any()),
        **report.notes,
    }
    if f.engine == "nuts":  # the sampler's convergence, as the README promises
        report.notes["fit"]["convergence"] = {k: f.diagnostics.get(k) for k in NUTS_CHECKS}
        if args.fit_path:  # a fit made here warned as it was made; a saved one is read back unchecked
            from benchfill.irt.convergence import warn_unconverged

            warn_unconverged(f.diagnostics)
    if matrix is not None:
        report.notes["extreme_items"] = extreme_items(matrix, items)
        report.notes["extreme_models"] = extreme_models(matrix)
    if args.plot:
        from benchfill.plots import plot_ecdf

        plot_ecdf(f.z, args.plot, k=report.k, target=target, title=str(report.notes["source"]))
        report.notes["plot"] = args.plot
    if args.json:
        _dump(report.to_dict())
        return 0
    _print_report(report)
    return 0


def _print_report(r: Any) -> None:
    n = r.notes
    models = f"{r.n_models} models x " if r.n_models else ""
    print(f"{n['source']}: {models}{r.n_items} items; fit {n['fit']['engine']} {n['fit']['model']}, "
          f"guessing floor {'on' if n['guessing'] else 'off'}")
    for label, value in ((f"DDM (W1 to {r.target})", r.ddm), ("max gap", r.max_gap), (f"top-{r.k} gap sum", r.top_k_sum)):
        print(f"  {label:<26} {value:.4f}")
    u = r.uniform
    # Name the max gap the ratio divides when it is not the one printed above (NUTS: the posterior mean's).
    of = f" ({u['ratio_of']} {u['observed_max_gap']:.4f})" if u.get("ratio_of", "max gap") != "max gap" else ""
    print(f"  vs {u.get('baseline', f'{r.n_items} uniform points')}: expected max gap {u['expected_max_gap']:.4f} "
          f"({u['expected_method']}), "
          f"ratio {u['ratio']:.2f}x{of}, P(observed > uniform) {u['p_observed_exceeds']:.3f} ({u['p_method']})")
    conv = n["fit"].get("convergence")
    if conv:
        print(f"  NUTS convergence: max R-hat {_fmt(conv['max_rhat'])}, min bulk ESS {_fmt(conv['min_ess_bulk'])}, "
              f"divergences {conv['divergences']} ({conv['chains']} chains x {conv['draws']} draws)")

    if r.posterior:
        for key, label in (("ddm", "DDM"), ("max_gap", "max gap")):
            s = r.posterior[key]
            print(f"  posterior {label:<8} mean {s['mean']:.4f} sd {s['sd']:.4f} "
                  f"90% [{s['q05']:.4f}, {s['q95']:.4f}] over {s['n_draws']} draws")
    if r.out_of_range:
        print(f"  {r.out_of_range} items fall outside [0, 1] on this scale")
    if n.get("resolution"):
        print(f"  {n['resolution']['said']}")
    if n.get("wide_spread"):
        said = n["wide_spread"].replace("prior='hierarchical'", "--prior hierarchical")
        print(f"  {said} (in simulation at a fitted spread of 1.6, the max gap came out at 0.44 of the truth under "
              "N(0, 1) and 0.72 under the hierarchical prior; bench/bench_gap_bias.py)")
    if n.get("difficulty_prior"):
        p = n["difficulty_prior"]
        print(f"  difficulties under the hierarchical prior N({p['mean']:+.2f}, {p['sd']:.2f}^2), its spread estimated "
              "from the items")
    ties = (n.get("resolution") or {}).get("ties")
    print(f"largest gaps (of {r.n_items + 1}" + (f"; {ties} of them are ties of width 0, and an item named at an edge "
          "may be one of several tied there" if ties else "") + "):")
    print(f"  {'#':>2}  {'left':>6}  {'right':>6}  {'width':>6}  left item -> right item")
    for i, g in enumerate(r.gaps, start=1):
        print(f"  {i:>2}  {g.left:6.3f}  {g.right:6.3f}  {g.width:6.3f}  "
              f"{shown(g.left_item or '(0)')} -> {shown(g.right_item or '(1)')}")
    narrow = n.get("narrower_than_confirmation") or {}
    if narrow.get("gaps"):
        print(f"  {'all' if len(narrow['gaps']) == len(r.gaps) else len(narrow['gaps'])} of these "
              f"{'are' if len(narrow['gaps']) > 1 else 'is'} narrower than a run's confirmation resolves (half-width "
              f"below its z se, {narrow['confirm_se']:g}): an item confirmed inside would lie there little more "
              "often than one confirmed just outside; run --confirm-se tightens it, at more rollouts")
    beyond = n.get("beyond_models") or {}
    if beyond.get("gaps"):
        lo, hi = beyond["ability_z"]
        print(f"  {'all' if len(beyond['gaps']) == len(r.gaps) else len(beyond['gaps'])} of these "
              f"lie{'' if len(beyond['gaps']) > 1 else 's'} beyond every model here (their abilities span z {lo:.2f} "
              f"to {hi:.2f}): a run's probes would all sit on one side of an item placed there, whose unknown "
              "slope then leans its placement far; a probe model of matching strength resolves it, more rollouts "
              "do not")
    if "extreme_items" in n:
        _print_extremes(n["extreme_items"], bool(n.get("difficulty_prior")))
    if "extreme_models" in n:
        _print_extreme_models(n["extreme_models"])
    if "plot" in n:
        print(f"plot written to {n['plot']}")


# -- calibrate ------------------------------------------------------------------------------------


def cmd_calibrate(args: argparse.Namespace) -> int:
    from benchfill.cli.output import check_out_file
    from benchfill.coverage import check_spread, parse_target
    from benchfill.data import read_reference_scores
    from benchfill.errors import ConfigError
    from benchfill.pruning import calibrate

    fit_options(args)
    check_out_file(args.out, "--out", _input_files(args))
    target = parse_target(args.target)
    if args.reference:  # a bad line named before the fit, not after it
        read_reference_scores(args.reference)
    matrix, items, f = _inputs(args)
    check_spread(f, matrix, fit_source=args.fit_path)  # as diagnose does: no ranking on a scale of noise
    if args.size > f.n_items:  # named by its flag, as --k and --gaps are (the library names its keyword, k)
        raise ConfigError(f"--size {args.size}: {_source(args, matrix)} has {f.n_items} items, so at most "
                          f"{f.n_items}")
    result = calibrate(
        f, args.size, target=target, matrix=matrix, reference=args.reference, n_random=args.n_random, seed=args.seed
    )
    if args.out:
        local = args.items if args.items and not args.items.startswith("hf:") else None  # hf: has no lines
        spec = _spec_arg(args)
        _write_selection(args.out, result.selected, items, local, spec.id_field if spec is not None else None)
    if args.json:
        _dump(result.to_dict())
        return 0
    print(f"{_source(args, matrix)}: kept {result.k} of {result.n_items} items toward {result.target} "
          f"(seed {result.seed})")
    print(f"  DDM  full {result.ddm_before:.4f}   calibrated {result.ddm_after:.4f}   "
          f"random (mean of {args.n_random}) {result.ddm_random:.4f}")
    if result.ranking:
        rk = result.ranking
        rnd = rk["random"] or {"spearman": float("nan"), "kendall": float("nan")}
        print(f"  ranking agreement with {rk['reference']}:")
        for key in ("spearman", "kendall"):
            print(f"    {key:<9} full {_figure(rk['full'][key])}   calibrated {_figure(rk['calibrated'][key])}   "
                  f"random {_figure(rnd[key])}")
    for note in result.notes:  # why a figure is missing or undefined
        print(f"  note: {note}")
    if args.out:
        print(f"kept items written to {args.out}")
    return 0


def _figure(x: float) -> str:
    """A correlation to three places, or a word where it is undefined (the notes say why)."""
    return "undefined" if x is None or x != x else f"{x:.3f}"


def _write_selection(path: str, selected: list[str], items: list[dict] | None, items_file: str | None,
                     id_field: str | None = None) -> None:
    """The kept items as JSONL: from ``items_file``, their lines as written there (read_items made every id a
    string and may have added fields; a copy is what the help promises)."""
    import os
    from pathlib import Path

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = {it["id"]: json.dumps(it) for it in items or []}
    if items_file is not None:
        from benchfill.data import read_text

        for line in read_text(items_file).split("\n"):  # read_items read it whole: every line is an object
            if line.strip():  # keyed as read_items keys it: by id, else the spec's id_field
                row = json.loads(line)
                lines[str(row["id"] if "id" in row or not id_field else row[id_field]).strip()] = line.rstrip("\r")
    from benchfill.outputs import named, shared_mode, temp_path

    tmp = temp_path(out.parent, out.name)  # a killed write's is removed by the next
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for i in selected:
                fh.write(lines.get(i, json.dumps({"id": i})) + "\n")
        os.chmod(tmp, shared_mode())  # mkstemp makes 0600
        os.replace(tmp, out)
    except OSError as exc:
        named(exc, out)
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
