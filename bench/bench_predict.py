"""Ex-ante difficulty prediction on real data (issue 13), side by side with the paper's figures.

mmlu-pro (12,032 questions, 29 models) under leave-one-category-out and 10-fold, humaneval (164) under
10-fold: Spearman rho and within-benchmark pairwise accuracy (mean ± sd over folds) for the random
control, the length baseline, each feature family and all combined; the response AUC of section 4.2;
how long embedding 12,032 items takes; and what scoring one new item costs next to grading one probe
rollout. Paper (17 agentic benchmarks, ridge): full set rho 0.399 K-fold, 0.225 LOBO; length 0.086 / 0.101.

    nice -n 10 .venv/bin/python bench/bench_predict.py --embedder minilm --cache /tmp/bf-embed
    (--embedder hashing needs no extra; --scorer MODEL@URL adds the entropy family from a served model)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchfill.predict.embed import CachedEmbedder, get_embedder
from benchfill.predict.entropy import EntropyFeatures, Scorer
from benchfill.predict.evaluate import auc_table, cross_validate, make_splits
from benchfill.predict.features import build_blocks
from benchfill.predict.predictor import train
from benchfill.predict.target import load_targets

PAPER = {"kfold": {"random": "~0", "length": "0.086", "all": "0.399"},
         "lobo": {"random": "~0", "length": "0.101", "all": "0.225"}}


def table(title: str, labelled, blocks, split: str, folds: int, groups=None) -> None:
    splits = make_splits(split, len(labelled), groups=groups, folds=folds, seed=0)
    fam = {b.family: b for b in blocks}
    sets = [[f] for f in fam] + [[f for f in fam if f != "random"]]
    paper = PAPER["kfold" if split == "kfold" else "lobo"]
    print(f"\n{title}: {len(labelled)} items, {split} ({len(splits)} folds), ridge; mean ± sd over folds")
    print(f"  {'features':<40} {'rho':>15} {'pairwise acc':>15}   paper rho ({'KF' if split == 'kfold' else 'LOBO'})")
    last = None
    for s in sets:
        t0 = time.perf_counter()
        cv = cross_validate([fam[f] for f in s], labelled.z, labelled.benchmark, splits, split_name=split)
        name = "+".join(s) if len(s) > 1 else s[0]
        ref = paper.get("all" if len(s) > 1 else s[0], "")
        print(f"  {name:<40} {cv.rho[0]:>7.3f} ± {cv.rho[1]:.3f} {cv.pacc[0]:>7.3f} ± {cv.pacc[1]:.3f}   {ref:<6}"
              f" ({time.perf_counter() - t0:.1f} s)")
        last = cv
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("BENCHFILL_SHARED_DATA", "../shared/data"))
    ap.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    ap.add_argument("--cache", metavar="DIR", help="keep embeddings here between runs (the timing is kept with them)")
    ap.add_argument("--scorer", action="append", default=[], metavar="MODEL@URL")
    ap.add_argument("--folds", type=int, default=10)
    args = ap.parse_args()
    entropy = EntropyFeatures([Scorer.parse(s) for s in args.scorer]) if args.scorer else None
    families = ["random", "length", "structural", "embedding"] + (["entropy"] if entropy else [])
    if not entropy:
        print("entropy family: not run (no --scorer: it needs a served model that returns logprobs)")

    results = {}
    for name in ("mmlu-pro", "humaneval"):
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
        blocks = build_blocks(lab.texts, families, embedder=emb, entropy=entropy)
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
        results[name] = lab

    # what the pre-screen would pay per child: one item's features and prediction, model already loaded
    lab = results["humaneval"]
    from evaluators import get_evaluator

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
        pred, _ = train(lab, [f for f in families if f != "random"], embedder=emb_name, scorers=args.scorer,
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
