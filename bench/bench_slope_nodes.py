"""How far the annotation's per-slope Newton (``Annotator._slopes_of``) lands from the root it solves for.

For each node of log a the annotator finds b_a, the difficulty an item of that slope must have to expect the
answers the 1PL expects at b. To s54 it ran at most 30 Newton steps, each clipped at 2 logits; on steep nodes the
curve is a near-step and Newton overshot, so some ended unconverged (186 of 1,646 calls on the demo, a node off by
1.1 logits at the median). Since s55 Newton runs inside a bracket and bisects where a step would leave it, and
this prints no call off its root (docs/sim-rewriter.md, "The slope nodes bracketed"). This runs benchfill's search on the
demo in-process (bench_search.run_seed) and, at every call, solves the same equations by bisection (monotone
in b_a, so the bracket [-200, 200] holds the root), and prints how far the nodes, and what the annotation takes
from them (the prior-weighted centre and sd over the Gauss-Hermite nodes), lie from the converged values.

    python bench/bench_slope_nodes.py [--preset kind] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import numpy as np
from _common import ROOT

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def bisected(annotator, b: float, n: np.ndarray, x: np.ndarray) -> np.ndarray:
    """b_a per design and node to 1e-13 logits: the same equation as ``_slopes_of``, by bisection."""
    from scipy.special import expit

    theta = np.array([p.ability for p in annotator.probes])
    g = annotator.chance
    target = n @ (g + (1 - g) * expit(theta - b))
    a = np.exp(annotator.misfit * x)
    lo = np.full((n.shape[0], a.size), -200.0)
    hi = np.full_like(lo, 200.0)
    for _ in range(60):  # 400 logits halved 60 times: 3.5e-16
        mid = (lo + hi) / 2
        s = expit(a[None, :, None] * (theta[None, None, :] - mid[:, :, None]))
        f = (n[:, None, :] * (g + (1 - g) * s)).sum(axis=2) - target[:, None]
        lo, hi = np.where(f > 0, mid, lo), np.where(f > 0, hi, mid)
    return (lo + hi) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="kind", choices=("kind", "realistic", "hostile"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args()

    import bench_search

    from benchfill.search import annotate

    newton = annotate.Annotator._slopes_of
    calls, off, node_err, centre_err, sd_err = 0, 0, [], [], []

    def checked(self, b, n, weights, x=annotate._GH_X):
        nonlocal calls, off
        got = newton(self, b, n, weights, x)
        exact = bisected(self, b, n, x)
        calls += 1
        err = np.abs(got - exact)
        if err.max() > 1e-6:
            off += 1
            node_err.append(float(err.max()))
            if x is annotate._GH_X:  # the prior-weighted centre and sd (``_unlean`` without answers, ``_misfit``)
                w = annotate._GH_W
                c_got, c_exact = got @ w, exact @ w
                centre_err.append(float(np.abs(c_got - c_exact).max()))
                sd_got = np.sqrt(((got - c_got[:, None]) ** 2) @ w)
                sd_exact = np.sqrt(((exact - c_exact[:, None]) ** 2) @ w)
                sd_err.append(float(np.abs(sd_got - sd_exact).max()))
        return got

    annotate.Annotator._slopes_of = checked
    bench = bench_search.load_set("demo", 60, 0)[0]
    for seed in args.seeds:
        asyncio.run(bench_search.run_seed(bench, args.preset, {}, seed, 3, 0.0, ("benchfill",)))

    def q(v: list[float]) -> str:
        return "-" if not v else " / ".join(f"{x:.4f}" for x in np.percentile(v, [50, 90, 100]))

    print(f"demo, {args.preset}, seeds {args.seeds}: {calls} calls of _slopes_of, {off} with a node off its root by "
          f"more than 1e-6 logits")
    print(f"  node error (logits), median / p90 / max:            {q(node_err)}")
    print(f"  prior-weighted centre error (logits), same:         {q(centre_err)}")
    print(f"  prior-weighted sd error (logits), same:             {q(sd_err)}")


if __name__ == "__main__":
    main()
