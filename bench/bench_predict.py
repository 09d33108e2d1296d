"""Ex-ante difficulty prediction on real data (issue 13), side by side with the paper's figures.

mmlu-pro (12,032 questions, 29 models) under leave-one-category-out and 10-fold, humaneval (164) under
10-fold: Spearman rho and within-benchmark pairwise accuracy (mean ± sd over folds) for the random
control, the length baseline, each feature family and all combined; the response AUC of section 4.2;
how long embedding 12,032 items takes; and what scoring one new item costs next to grading one probe
rollout. Paper (17 agentic benchmarks, ridge): full set rho 0.399 K-fold, 0.225 LOBO; length 0.086 / 0.101.

    nice -n 10 .venv/bin/python bench/bench_predict.py --embedder minilm --cache /tmp/bf-embed
    (--embedder hashing needs no extra; --scorer MODEL@URL adds the entropy family from a served model)

A real scorer on CPU answers an item in seconds, so with --scorer the entropy family is measured on a
stratified sample of mmlu-pro (--scorer-sample items, spread evenly over its 14 categories, seed 0) and on
all of humaneval, with every other family beside it on the same items; the full-set tables run as well,
without it. Trajectories are kept in --scorer-cache (default: entropy.jsonl in --cache), so a stopped run
resumes. bench/scorer/serve.sh serves Gemma 3 270M on llama.cpp's server offline (docs/predict.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchfill.predict.embed import CachedEmbedder, get_embedder
from benchfill.predict.entropy import EntropyFeatures, Scorer, progress_lines
from benchfill.predict.evaluate import auc_table, cross_validate, make_splits
from benchfill.predict.features import build_blocks
from benchfill.predict.predictor import train
from benchfill.predict.target import load_targets

# section 5.1: the entropy family from Qwen3-8B-Base over a reasoning trace; its embeddings are another model's
PAPER = {"kfold": {"random": "~0", "length": "0.086", "embedding": "0.107", "entropy": "0.193", "all": "0.399"},
         "lobo": {"random": "~0", "length": "0.101", "embedding": "0.017", "entropy": "0.137", "all": "0.225"}}


def table(title: str, labelled, blocks, split: str, folds: int, groups=None) -> None:
    splits = make_splits(split, len(labelled), groups=groups, folds=folds, seed=0)
    fam = {b.family: b for b in blocks}
    sets = [[f] for f in fam] + [[f for f in fam if f != "random"]]
    if "entropy" in fam:  # what the entropy family adds to the others
        sets.insert(-1, [f for f in fam if f not in ("random", "entropy")])
    paper = PAPER["kfold" if split == "kfold" else "lobo"]
    print(f"\n{title}: {len(labelled)} items, {split} ({len(splits)} folds), ridge; mean ± sd over folds")
    print(f"  {'features':<40} {'rho':>15} {'pairwise acc':>15}   paper rho ({'KF' if split == 'kfold' else 'LOBO'})")
    last = None
    for s in sets:
        t0 = time.perf_counter()
        cv = cross_validate([fam[f] for f in s], labelled.z, labelled.benchmark, splits, split_name=split)
        name = "+".join(s) if len(s) > 1 else s[0]
        ref = paper.get(s[0], "") if len(s) == 1 else paper["all"] if s is sets[-1] else ""  # the paper's full set
        print(f"  {name:<40} {cv.rho[0]:>7.3f} ± {cv.rho[1]:.3f} {cv.pacc[0]:>7.3f} ± {cv.pacc[1]:.3f}   {ref:<6}"
              f" ({time.perf_counter() - t0:.1f} s)")
        last = cv
    return last


def stratified_sample(lab, n: int, seed: int = 0):
    """n items spread evenly over the categories (all of a category smaller than its share), sorted.

    Each category's items are put in one seeded order and the first n/14 taken, so a larger sample holds
    a smaller one: a second run with a larger n asks the scorer only for the items it adds.
    """
    if n >= len(lab):  # the whole benchmark
        return np.arange(len(lab))
    cats = sorted(set(lab.category))
    per = n // len(cats)
    idx = []
    for k, c in enumerate(cats):
        members = np.flatnonzero(np.array(lab.category) == c)
        idx += np.random.default_rng([seed, k]).permutation(members)[:per].tolist()
    return np.sort(np.array(idx))


def scored_tables(name: str, lab, blocks, entropy, args) -> None:
    """Every family beside the entropy family, on the items the scorer answered."""
    idx = stratified_sample(lab, args.scorer_sample) if name == "mmlu-pro" else np.arange(len(lab))
    sub = lab.subset(idx)
    t0 = time.perf_counter()
    asked = entropy.computed
    (eblock,) = build_blocks(sub.texts, ["entropy"], entropy=entropy)
    took = time.perf_counter() - t0
    n_new = entropy.computed - asked
    lengths = np.rint(np.expm1(eblock.X[:, [k for k, nm in enumerate(eblock.names) if nm.endswith(":n_tokens")]]))
    print(f"\n{name}: the scorer answered {len(sub)} items ({n_new} this run in {took:.0f} s"
          + (f", {took / n_new:.2f} s of wall time per item at concurrency {args.scorer_concurrency}" if n_new else
             ", all from the cache") + f"); answer length median "
          f"{np.median(lengths):.0f} tokens, {np.mean(lengths >= args.scorer_max_tokens):.0%} cut at max_tokens")
    sub_blocks = [b.rows(idx) for b in blocks] + [eblock]
    label = f"{name}, scored sample"
    if name == "mmlu-pro":
        table(label, sub, sub_blocks, "category", args.folds, groups=sub.category)
    table(label, sub, sub_blocks, "kfold", args.folds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("BENCHFILL_SHARED_DATA", "../shared/data"))
    ap.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    ap.add_argument("--cache", metavar="DIR", help="keep embeddings here between runs (the timing is kept with them)")
    ap.add_argument("--scorer", action="append", default=[], metavar="MODEL@URL")
    ap.add_argument("--scorer-sample", type=int, default=1400, metavar="N",
                    help="mmlu-pro items the scorer answers, spread evenly over the categories (default 1400; "
                         "12032: all of them, about 7 hours on 2 cores; 0: humaneval only)")
    ap.add_argument("--scorer-max-tokens", type=int, default=256, metavar="N")
    ap.add_argument("--scorer-cache", metavar="FILE", help="trajectories kept between runs (JSON lines)")
    ap.add_argument("--scorer-concurrency", type=int, default=4, metavar="N",
                    help="items asked at a time (default 4, serve.sh's slots; 1 makes the answers repeatable)")
    ap.add_argument("--benchmarks", nargs="+", choices=("mmlu-pro", "humaneval"), default=["mmlu-pro", "humaneval"])
    ap.add_argument("--folds", type=int, default=10)
    args = ap.parse_args()
    entropy = None
    if args.scorer:
        cache = args.scorer_cache or (str(Path(args.cache) / "entropy.jsonl") if args.cache else None)
        entropy = EntropyFeatures([Scorer.parse(s, max_tokens=args.scorer_max_tokens) for s in args.scorer],
                                  concurrency=args.scorer_concurrency, timeout_s=600, cache=cache,
                                  on_progress=progress_lines(lambda m: print(f"  {m}", file=sys.stderr, flush=True)))
        on = {"mmlu-pro": f"{min(args.scorer_sample, 12032)} mmlu-pro items", "humaneval": "all of humaneval"}
        print(f"entropy family: scorers {', '.join(args.scorer)}, max_tokens {args.scorer_max_tokens}, "
              f"top_logprobs 20; on {' and '.join(on[b] for b in args.benchmarks)}")
    else:
        print("entropy family: not run (no --scorer: it needs a served model that returns logprobs)")
    families = ["random", "length", "structural", "embedding"]

    results = {}
    for name in args.benchmarks:
        t0 = time.perf_counter()
        lab = load_targets([name], args.data_dir)
        fit_s = time.perf_counter() - t0
        inner = get_embedder(args.embedder)
        cache = None
        if args.cache:
            Path(args.cache).mkdir(parents=True, exist_ok=True)
            cache = str(Path(args.cache) / f"{name}-{args.embedder}.npz")
        timing_file = Path(cache + ".timing.json") if cache else None
        emb = CachedEmbedder(inner, cache)
        t0 = time.perf_counter()
        if args.embedder == "minilm":
            inner.load()
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        blocks = build_blocks(lab.texts, families, embedder=emb)
        feat_s = time.perf_counter() - t0
        if emb.computed == len(set(lab.texts)):  # embedded from scratch: this run's time is the figure
            shown = {"seconds": emb.seconds}
            if timing_file:
                timing_file.write_text(json.dumps(shown))
        else:
            shown = json.loads(timing_file.read_text()) if timing_file.exists() else {"seconds": float("nan")}
        print(f"\n{name}: IRT fit {fit_s:.1f} s; {args.embedder} model load {load_s:.1f} s; features of "
              f"{len(lab)} items {feat_s:.1f} s this run" + (
              f"; embedding all {len(lab)} items ({'this run' if emb.computed else 'an earlier run, cached'}): "
              f"{shown['seconds']:.1f} s, {shown['seconds'] / len(lab) * 1e3:.1f} ms/item"))
        if name == "mmlu-pro":
            table("mmlu-pro", lab, blocks, "category", args.folds, groups=lab.category)
            cv = table("mmlu-pro", lab, blocks, "kfold", args.folds)
        else:
            cv = table("humaneval", lab, blocks, "kfold", args.folds)
        print("  response AUC (section 4.2): a constant prediction keeps most of the oracle's AUC")
        for a in auc_table(lab, cv.oof):
            print(f"    {a['predictor']:<44} AUC {a['auc']:.3f}  rho {a['rho']:.3f}  pacc {a['pacc']:.3f}")
        if entropy and (name != "mmlu-pro" or args.scorer_sample > 0):  # after the AUC of the full set's table
            scored_tables(name, lab, blocks, entropy, args)
        results[name] = lab

    if "humaneval" not in results:
        return 0
    # what the pre-screen would pay per child: one item's features and prediction, model already loaded
    lab = results["humaneval"]
    from benchfill.evaluators import get_evaluator

    code = get_evaluator("code")
    code.grade("    pass\n", lab.items[0])
    t0 = time.perf_counter()
    for it in lab.items[:10]:
        code.grade(it["canonical_solution"], it)
    grade_s = (time.perf_counter() - t0) / 10
    print(f"\nscoring new items (features + ridge, model loaded) vs grading one HumanEval probe rollout in the "
          f"sandbox alone, no generation ({grade_s * 1e3:.0f} ms):")
    n = 50
    for emb_name in dict.fromkeys([args.embedder, "hashing"]):
        pred, _ = train(lab, [f for f in families if f != "random"], embedder=emb_name,
                        text_field="prompt")
        pred.warm_up()
        t0 = time.perf_counter()
        for it in lab.items[:n]:
            pred.predict_item(it)
        one = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        pred.predict_items(lab.items[:n])
        batch = (time.perf_counter() - t0) / n
        p = pred.predict_item(lab.items[0])
        print(f"  {emb_name:<8} one at a time {one * 1e3:6.1f} ms/item ({grade_s / one:4.0f}x under grading), "
              f"in a batch of {n} {batch * 1e3:6.1f} ms/item ({grade_s / batch:4.0f}x); "
              f"{lab.ids[0]}: z {p.z:+.2f} ± {p.sd:.2f}, axis {p.axis:.3f} ± {p.axis_sd:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
