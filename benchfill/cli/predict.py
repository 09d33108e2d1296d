"""``benchfill predict train | evaluate | score | residuals``: difficulty from item text, before rollouts.

Only argparse is imported here; the prediction library is imported inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchfill.cli.argtypes import folds, nonneg_float, nonneg_int, positive_int


def _cached(args) -> bool:
    """A scorer's answers are kept in --scorer-cache: a rerun asks only for the rest."""
    return bool(getattr(args, "scorer_cache", None))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("predict", help="predict item difficulty from text (train, evaluate, score, residuals)")
    sub = p.add_subparsers(dest="predict_command", metavar="ACTION", required=True)

    t = sub.add_parser("train", help="train on benchmarks with known difficulties and save the predictor")
    _data_args(t)
    _feature_args(t)
    t.add_argument("--folds", type=folds, default=10, help="K of the K-fold run that sets the stated uncertainty (10)")
    t.add_argument("--out", required=True, metavar="FILE", help="where to write the predictor (JSON)")
    t.set_defaults(func=cmd_train, resumable=_cached)

    e = sub.add_parser("evaluate", help="cross-validated Spearman rho and pairwise accuracy, per family and combined")
    _data_args(e)
    _feature_args(e)
    e.add_argument("--split", choices=("kfold", "lobo", "category"), default="kfold",
                   help="kfold (default), leave-one-benchmark-out, or leave-one-category-out (mmlu-pro)")
    e.add_argument("--folds", type=folds, default=10, help="K for --split kfold (default 10)")
    e.add_argument("--each", action="store_true", help="also evaluate each family alone and the random control")
    e.add_argument("--json", action="store_true", help="print the results as JSON")
    e.set_defaults(func=cmd_evaluate, resumable=_cached)

    s = sub.add_parser("score", help="predict the difficulty of new items with a saved predictor")
    s.add_argument("--predictor", required=True, metavar="FILE", help="a file written by 'predict train'")
    s.add_argument("--items", required=True, metavar="FILE",
                   help="items JSONL with the predictor's text field (its training benchmark's, e.g. prompt)")
    s.add_argument("--benchmark", metavar="NAME",
                   help="put predictions on this training benchmark's scales (default: the predictor's one "
                        "benchmark, if it has one); sd is the K-fold error on that benchmark's own items, and "
                        "items of another benchmark may be off by more")
    s.add_argument("--out", metavar="FILE", help="write JSONL here instead of stdout")
    s.add_argument("--scorer-cache", metavar="FILE",
                   help="a predictor with the entropy family: keep its scorers' answers here (a rerun resumes)")
    s.add_argument("--scorer-concurrency", type=positive_int, metavar="N",
                   help="items asked of a scorer at a time (default 8; 1 makes a server's answers repeatable)")
    s.set_defaults(func=cmd_score, resumable=_cached)

    r = sub.add_parser("residuals", help="items whose observed difficulty is far from the predicted one, ranked")
    _data_args(r)
    _feature_args(r)
    r.add_argument("--folds", type=folds, default=10, help="K-fold for the out-of-fold predictions (default 10)")
    r.add_argument("--predictor", metavar="FILE", help="predict with a saved predictor trained on other benchmarks "
                   "instead of K-fold inside this one (better for a small benchmark)")
    r.add_argument("--threshold", type=nonneg_float, default=1.5, help="flag |r| >= this many sds of r (default 1.5)")
    r.add_argument("--top", type=positive_int,
                   help=f"list at most this many (default: all with --json, the first {TABLE_TOP} in the table)")
    r.add_argument("--json", action="store_true", help="print the flags as JSON")
    r.set_defaults(func=cmd_residuals, resumable=_cached)


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", required=True, nargs="+", metavar="NAME",
                   help="registered benchmarks with items and responses (e.g. humaneval mmlu-pro aime25)")
    p.add_argument("--data-dir", metavar="DIR", help="where their files live (default $BENCHFILL_DATA_DIR)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of every random draw: the folds, the features, the fits (default 0)")


def _feature_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--families", default="length,structural,embedding",
                   help="comma-separated: random,length,structural,embedding,entropy (default length,structural,embedding)")
    p.add_argument("--embedder", choices=("minilm", "hashing"), default="hashing",
                   help="minilm (all-MiniLM-L6-v2, the 'embed' extra) or hashing (no model; default)")
    p.add_argument("--scorer", action="append", default=[], metavar="MODEL@URL",
                   help="a scorer with logprobs for the entropy family (repeat for cross-scorer gaps)")
    p.add_argument("--scorer-cache", metavar="FILE",
                   help="keep the scorers' answers in this JSON-lines file; a rerun asks only for the rest")
    p.add_argument("--scorer-concurrency", type=positive_int, metavar="N",
                   help="items asked of a scorer at a time (default 8; 1 makes a server's answers repeatable)")
    p.add_argument("--regressor", choices=("ridge", "forest"), default="ridge", help="default ridge")


TABLE_TOP = 50  # residuals: flagged items the table lists without --top


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load(args):
    from benchfill.errors import ConfigError
    from benchfill.predict.target import load_targets

    # A benchmark named twice would pool its items twice: copies of an item land on both sides of a fold
    # split (a rho near 1 that means nothing), and the response AUC's shapes no longer match
    twice = next((b for k, b in enumerate(args.benchmark) if b in args.benchmark[:k]), None)
    if twice is not None:
        raise ConfigError(f"--benchmark: {twice} given twice")

    return load_targets(args.benchmark, args.data_dir, seed=args.seed, progress=_progress)


def _check_scorers(args, families) -> None:
    """The scorer options against the families, before any work (an IRT fit can take a while)."""
    from benchfill.errors import ConfigError
    from benchfill.predict.entropy import Scorer

    for s in args.scorer:  # a malformed scorer or one with credentials in its URL
        Scorer.parse(s)
    if "entropy" in families and not args.scorer:
        raise ConfigError("--families: the entropy family needs a scorer (--scorer MODEL@URL, an endpoint that "
                          "returns logprobs)")
    given = _scorer_option_given(args)
    if given and "entropy" not in families:
        raise ConfigError(f"{given}: applies only to the entropy family, which --families leaves out")


def _check_model_options(args, families, *, saving: bool = False) -> None:
    """The regressor, embedder and split against what is installed and given, before any work: found
    after the IRT fit and the cross-validation, the work would be lost."""
    from benchfill.errors import ConfigError
    from benchfill.predict.embed import check_embedder
    from benchfill.predict.models import check_regressor

    if saving and args.regressor != "ridge":
        raise ConfigError(f"--regressor {args.regressor}: only a ridge predictor can be saved (the forest is for "
                          "evaluation: predict evaluate --regressor forest)")
    check_regressor(args.regressor)
    if "embedding" in families:
        check_embedder(args.embedder)
    split = getattr(args, "split", "kfold")
    if split == "lobo" and len(args.benchmark) < 2:
        raise ConfigError(f"--split lobo: leaves one benchmark out, so it needs two or more (--benchmark A B); "
                          f"got {args.benchmark[0]}")


def _benchmark_files(args) -> dict[str, str | None]:
    """The data files the --benchmark names are read from, by option: an output must not be one of them."""
    import os

    root = args.data_dir or os.environ.get("BENCHFILL_DATA_DIR")
    if not root:
        return {}
    return {f"--benchmark {b} {what}": os.path.join(root, b, name) for b in args.benchmark
            for what, name in (("items", "items.jsonl"), ("responses", "responses.csv"))}


def _check_predictor_scorer(args, pred) -> None:
    from benchfill.errors import ConfigError

    given = _scorer_option_given(args)  # --scorer itself is refused beside --predictor before this
    if given and "entropy" not in pred.families:
        raise ConfigError(f"{given}: --predictor {args.predictor} uses no scorer")


def _check_predictor_embedder(pred, path: str) -> None:
    """A saved predictor's embedder, installed, before any work (residuals fits the benchmark first)."""
    from benchfill.errors import ConfigError
    from benchfill.predict.embed import INSTALL_MINILM, missing_module

    missing = missing_module(pred.embedder) if "embedding" in pred.families else None
    if missing:
        raise ConfigError(f"--predictor {path}: its embedder {pred.embedder} needs the 'embed' extra ({missing} is "
                          f"missing): {INSTALL_MINILM}")


def _scorer_option_given(args) -> str | None:
    """The first scorer option given on the command line (``score`` has no --scorer)."""
    return next((o for o, v in (("--scorer", getattr(args, "scorer", None)), ("--scorer-cache", args.scorer_cache),
                                ("--scorer-concurrency", args.scorer_concurrency)) if v), None)


def _blocks(args, labelled, families):
    from benchfill.predict.embed import get_embedder
    from benchfill.predict.entropy import EntropyFeatures, Scorer, progress_lines
    from benchfill.predict.features import build_blocks

    embed = get_embedder(args.embedder) if "embedding" in families else None
    entropy = None
    if "entropy" in families:
        entropy = EntropyFeatures([Scorer.parse(s) for s in args.scorer], cache=args.scorer_cache,
                                  concurrency=args.scorer_concurrency or 8, on_progress=progress_lines(_progress),
                                  on_stall=_progress)
    return build_blocks(labelled.texts, families, seed=args.seed, embedder=embed, entropy=entropy)


def cmd_train(args) -> int:
    from benchfill.benchmarks import registered_spec
    from benchfill.cli.output import check_out_file
    from benchfill.errors import ConfigError
    from benchfill.predict.features import parse_families
    from benchfill.predict.predictor import train

    if not args.out:  # refused before the training, not after it
        raise ConfigError(f"--out {args.out!r}: give a file to write the predictor to")
    check_out_file(args.out, "--out", {**_benchmark_files(args), "--scorer-cache": args.scorer_cache})
    families = parse_families(args.families)
    _check_scorers(args, families)
    _check_model_options(args, families, saving=True)
    labelled = _load(args)
    spec = registered_spec(args.benchmark[0])
    pred, cv = train(labelled, families, embedder=args.embedder, scorers=args.scorer, regressor=args.regressor,
                     folds=args.folds, seed=args.seed, text_field=spec.text_field, options_field=spec.options_field,
                     progress=_progress, scorer_cache=args.scorer_cache,
                     scorer_concurrency=args.scorer_concurrency)
    pred.save(args.out)
    rho, pacc = cv.rho, cv.pacc
    print(f"{args.out}: {len(labelled)} items, families {','.join(families)}; {len(cv.fold_names)}-fold "
          f"rho {rho[0]:.3f} ± {rho[1]:.3f}, pairwise accuracy {pacc[0]:.3f} ± {pacc[1]:.3f}, "
          f"residual sd {pred.residual_sd:.3f} (z units)")
    return 0


def cmd_evaluate(args) -> int:
    import numpy as np

    from benchfill.predict.evaluate import auc_table, cross_validate, make_splits
    from benchfill.predict.features import parse_families
    from benchfill.predict.models import DifficultyModel
    from benchfill.predict.predictor import fold_count

    families = parse_families(args.families)
    _check_scorers(args, families)
    _check_model_options(args, [*families, "random"] if args.each else families)
    labelled = _load(args)
    groups = {"kfold": None, "lobo": labelled.benchmark, "category": labelled.category}[args.split]
    folds = args.folds
    if args.split == "kfold" and len(labelled) // 3 >= 2:  # (fewer items: make_splits refuses them)
        folds = fold_count(len(labelled), folds)  # a warning when fewer, as train says it
    splits = make_splits(args.split, len(labelled), groups=groups, folds=folds, seed=args.seed)
    sets = [[f] for f in dict.fromkeys(["random", *families])] if args.each else []
    sets.append(list(families))
    all_blocks = {b.family: b for b in _blocks(args, labelled, list(dict.fromkeys([*families, *sum(sets, [])])))}
    results = []
    for fams in sets:
        # each fold said on stderr, as train says them: on mmlu-pro the folds take half a minute
        if len(sets) > 1:
            _progress(f"families {'+'.join(fams)}:")
        cv = cross_validate([all_blocks[f] for f in fams], labelled.z, labelled.benchmark, splits,
                            make_model=lambda: DifficultyModel(regressor=args.regressor, seed=args.seed),
                            split_name=args.split, progress=_progress)
        results.append(cv)
    aucs = auc_table(labelled, results[-1].oof if not np.any(np.isnan(results[-1].oof)) else None)
    if args.json:
        from benchfill.cli.output import dumps

        print(dumps({"n_items": len(labelled), "split": args.split, "results": [r.summary() for r in results],
                          "response_auc": aucs}, indent=1))
        return 0
    print(f"{'+'.join(args.benchmark)}: {len(labelled)} items, split {args.split} ({len(splits)} folds), "
          f"regressor {args.regressor}; mean ± sd over folds")
    print(f"  {'families':<36} {'rho':>15} {'pairwise acc':>15} {'pooled rho':>10}")
    for r in results:
        # pooled over held-out groups, rho mixes in each group's shifted intercept: shown for K-fold only
        pooled = f"{r.pooled_rho:>10.3f}" if args.split == "kfold" else f"{'-':>10}"
        print(f"  {'+'.join(r.families):<36} {r.rho[0]:>7.3f} ± {r.rho[1]:.3f} {r.pacc[0]:>7.3f} ± {r.pacc[1]:.3f}"
              f" {pooled}")
    print("\n".join(auc_lines(aucs)))
    return 0


def auc_lines(aucs: list[dict]) -> list[str]:
    """The response-AUC table: a constant prediction's rho (NaN: it has no rank order) said as n/a."""
    out = ["response AUC (section 4.2: high even for a constant prediction, whose rho is undefined and whose "
           "pairwise accuracy is 0: Eq. 2 counts a tie as a miss):"]
    for a in aucs:
        rho = "  n/a" if a["rho"] != a["rho"] else f"{a['rho']:.3f}"
        out.append(f"  {a['benchmark']:<12} {a['predictor']:<44} AUC {a['auc']:.3f}  rho {rho}  pacc {a['pacc']:.3f}")
    return out


def cmd_score(args) -> int:
    import os
    import warnings
    from pathlib import Path

    from benchfill.cli.output import check_out_file
    from benchfill.data import read_items
    from benchfill.errors import DataError
    from benchfill.predict.predictor import Predictor
    from benchfill.predict.target import FieldFallbackWarning, ItemFieldError

    check_out_file(args.out, "--out", {"--items": args.items, "--predictor": args.predictor,
                                       "--scorer-cache": args.scorer_cache})
    pred = Predictor.load(args.predictor)
    _check_predictor_scorer(args, pred)
    _check_predictor_embedder(pred, args.predictor)
    pred.with_scorer(args.scorer_cache, _progress, args.scorer_concurrency)
    items = read_items(args.items)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FieldFallbackWarning)
            preds = pred.predict_items(items, args.benchmark)
    except ItemFieldError as exc:  # one item's field: name its line
        raise DataError(f"{args.items}:{_line_of(args.items, exc.index)}: {exc}") from None
    except DataError as exc:  # no clear text or options field among the items: name the file they came from
        raise DataError(f"{args.items}: {exc}") from None
    for w in caught:  # a fallback to another field than the predictor's: one line naming the file
        if issubclass(w.category, FieldFallbackWarning):
            print(f"benchfill: warning: {args.items}: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    far = [(it.get("id"), p.beyond_training) for it, p in zip(items, preds, strict=True) if p.beyond_training]
    if far:
        names = sorted({n for _, fs in far for n in fs})
        print(f"benchfill: warning: {args.items}: {len(far)} of {len(items)} items lie beyond the training items' "
              f"range in {', '.join(names)} by more than 3 training sds (e.g. item {far[0][0]}): the predictor clips "
              "them there, so their error may well exceed sd (each row's beyond_training names its features)",
              file=sys.stderr)
    lines = [json.dumps({"id": it.get("id"), **p.to_dict()}) for it, p in zip(items, preds, strict=True)]
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        from benchfill.outputs import named, shared_mode, temp_path

        tmp = temp_path(out.parent, out.name)  # its own name: a user's "<out>.tmp" was written over and removed
        try:
            tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            os.chmod(tmp, shared_mode())
            os.replace(tmp, out)
        except OSError as exc:
            named(exc, out)
            raise
        finally:
            tmp.unlink(missing_ok=True)
        print(f"{out}: {len(lines)} predictions", file=sys.stderr)
    else:
        print("\n".join(lines))
    return 0


def _line_of(path: str, index: int) -> int | str:
    """The line of the ``index``-th item of a JSONL file (blank lines are skipped when reading it)."""
    from benchfill.data import jsonl_objects

    return next((n for k, (n, _) in enumerate(jsonl_objects(path)) if k == index), "?")


def cmd_residuals(args) -> int:
    from benchfill.predict.evaluate import cross_validate, make_splits, spearman
    from benchfill.predict.features import parse_families
    from benchfill.predict.models import DifficultyModel
    from benchfill.predict.predictor import Predictor
    from benchfill.predict.residuals import format_flags, residual_flags

    if args.predictor:
        from benchfill.errors import ConfigError

        # options the predictor settles itself: given anyway, they would be ignored without a word
        given = [f for f, v, d in (("--families", args.families, "length,structural,embedding"),
                                   ("--embedder", args.embedder, "hashing"), ("--scorer", args.scorer, [])) if v != d]
        if given:
            raise ConfigError(f"{given[0]}: --predictor {args.predictor} brings its own families, embedder and "
                              "scorers; give one or the other")
        pred = Predictor.load(args.predictor)
        families = pred.families
        _check_predictor_scorer(args, pred)
        _check_predictor_embedder(pred, args.predictor)
        # a predictor that saw these items predicts them in sample: its residuals shrink toward zero and its
        # rho flatters (humaneval: 0.557 in sample against 0.425 out of fold), so the flags would not be residuals
        seen = [b for b in args.benchmark if b in pred.scales]
        if seen:
            raise ConfigError(f"--predictor {args.predictor} was trained on {', '.join(seen)}: its residuals there "
                              "are in sample, not held out; leave out --predictor for out-of-fold residuals")
        pred.with_scorer(args.scorer_cache, _progress, args.scorer_concurrency)
        labelled = _load(args)
        oof = pred.predict_texts(labelled.texts)
        how = f"predictor {args.predictor} (trained on {', '.join(pred.scales)})"
    else:
        families = parse_families(args.families)
        _check_scorers(args, families)
        _check_model_options(args, families)
        labelled = _load(args)
        splits = make_splits("kfold", len(labelled), folds=min(args.folds, len(labelled)), seed=args.seed,
                             min_test=1)  # only the out-of-fold predictions are used
        oof = cross_validate(_blocks(args, labelled, families), labelled.z, labelled.benchmark, splits,
                             make_model=lambda: DifficultyModel(regressor=args.regressor, seed=args.seed),
                             progress=lambda m: _progress(m.split(":")[0])).oof  # a fold's rho: of 1-3 items
        how = f"{len(splits)}-fold out of fold"
    flags = residual_flags(labelled, oof, threshold=args.threshold, top=args.top)
    if args.json:
        from benchfill.cli.output import dumps

        print(dumps([f.to_dict() for f in flags], indent=1))
        return 0
    print(f"{'+'.join(args.benchmark)}: {len(labelled)} items, families {','.join(families)}, {how}: "
          f"rho {spearman(oof, labelled.z):.3f}; {len(flags)} flagged at |r| >= {args.threshold} sd")
    # a table for reading: on mmlu-pro 1,712 items were flagged, 3,426 lines; --top or --json gives them all
    shown = flags if args.top is not None else flags[:TABLE_TOP]
    print(format_flags(shown))
    if len(shown) < len(flags):
        print(f"... and {len(flags) - len(shown)} more, less far from their predictions (--top N lists N, "
              "--json all of them)")
    return 0
