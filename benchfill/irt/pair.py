"""How far one model's answers to one item stray from the IRT curve: the sd of the (model, item) offsets.

The 1PL says model j answers item i right with g + (1 - g) sigmoid(theta_j - b_i). Real models agree with
themselves on an item far beyond that: asked ten times, a model that misses an item the curve gives it at
60% mostly misses it ten times (bench/bench_pair_effect.py: the published matrices' answers scatter 4.6 to
5.4 times as much as independent draws around the curve). Write the pair's own offset e_ij ~ N(0, s^2) on
the logit. Rollouts of one probe on a new item then cannot average its offset away; only more probes can,
so a placement through k probes carries about s^2 / k of variance that no number of rollouts removes
(search/annotate.py, ``Annotator.pair``).

s is estimated from a panel's own repeated answers (cells with two or more trials) by the marginal
likelihood of their counts, the offset integrated out by Gauss-Hermite quadrature, the curve held at a 2PL
fit. The fit has taken up part of the offsets (each theta, a and b moved toward its own cells' noise), so
the raw figure understates s; it is corrected by matrices drawn from the fit at the estimate and fitted
again (a parametric bootstrap, as irt/spread.py corrects its tau).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import gammaln

from benchfill.matrix import ResponseMatrix

MAX_SD = 6.0  # logits: beyond this every pair is all right or all wrong, and the likelihood is flat
MIN_CELLS = 30  # fewer repeated cells than this say nothing useful about s
REPLICATES = 4
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(24)
_GH_W = _GH_W / _GH_W.sum()


def _log_lik(sd: float, x: np.ndarray, g: np.ndarray, c: np.ndarray, n: np.ndarray) -> float:
    eta = x[:, None] + sd * _GH_X[None, :]
    p = g[:, None] + (1 - g[:, None]) / (1 + np.exp(-eta))
    p = np.clip(p, 1e-12, 1 - 1e-12)
    log_binom = gammaln(n + 1) - gammaln(c + 1) - gammaln(n - c + 1)
    per_node = c[:, None] * np.log(p) + (n - c)[:, None] * np.log1p(-p)
    m = per_node.max(axis=1, keepdims=True)
    return float((log_binom + m[:, 0] + np.log(np.exp(per_node - m) @ _GH_W)).sum())


def _cells(matrix: ResponseMatrix, ability: dict[str, float], difficulty: dict[str, float],
           slope: dict[str, float] | None, models: list[str]) -> tuple[np.ndarray, ...]:
    rows = [matrix.models.index(m) for m in models]
    cols = [k for k, i in enumerate(matrix.item_ids) if i in difficulty]
    n = matrix.trials[np.ix_(rows, cols)].astype(float)
    c = matrix.correct[np.ix_(rows, cols)].astype(float)
    theta = np.array([ability[m] for m in models])
    b = np.array([difficulty[matrix.item_ids[k]] for k in cols])
    g = np.broadcast_to(np.asarray(matrix.chance, dtype=float)[cols], n.shape)
    a = np.ones(len(cols)) if slope is None else np.array([slope[matrix.item_ids[k]] for k in cols])
    x = np.broadcast_to(a[None, :] * (theta[:, None] - b[None, :]), n.shape)
    keep = n >= 2
    return x[keep], g[keep], c[keep], n[keep]


def raw_pair_sd(x: np.ndarray, g: np.ndarray, c: np.ndarray, n: np.ndarray) -> float:
    """The marginal-likelihood s for cells at logits ``x`` (the curve's, offsets integrated out)."""
    res = minimize_scalar(lambda s: -_log_lik(s, x, g, c, n), bounds=(0.0, MAX_SD), method="bounded",
                          options={"xatol": 1e-3})
    return float(res.x)


def pair_sd(matrix: ResponseMatrix, models: list[str], *, seed: int = 0, correct_bias: bool = True
            ) -> tuple[float, dict]:
    """s from ``models``' repeated answers in ``matrix`` (the probe panel's rows), about the curve of a 2PL
    MAP fit of the items they answered repeatedly (every model's rows of those items): the 2PL, not the
    run's 1PL, so that an item's own slope, which the misfit allowance covers, is not counted here again
    (in a world of slopes with sd 0.5 and no offsets the 1PL's curve read s = 0.17-0.24 raw, the 2PL's
    0.001). The fit takes up part of the offsets, so the raw figure is corrected by ``REPLICATES`` matrices
    drawn from the fit at the estimate and fitted again (``correct_bias``). Returns s and what it rests on."""
    from benchfill.irt.engine import fit as irt_fit

    rows = [matrix.models.index(m) for m in models if m in matrix.models]
    repeated = np.flatnonzero((matrix.trials[rows] >= 2).any(axis=0)) if rows else np.array([], dtype=int)
    sub = matrix.select_items(repeated)
    cells = int((sub.trials[rows] >= 2).sum()) if rows else 0
    info = {"cells": cells, "models": len(rows), "items": int(sub.n_items), "curve": "2pl"}
    if cells < MIN_CELLS:
        return 0.0, {**info, "sd": 0.0, "note": f"fewer than {MIN_CELLS} of the panel's cells hold repeated answers"}
    names = [matrix.models[j] for j in rows]
    f = irt_fit(sub, engine="map", model="2pl", seed=seed)
    raw = raw_pair_sd(*_cells(sub, *_curve(f), names))
    sd = raw
    if correct_bias and raw > 0:
        rng = np.random.default_rng([seed, 0x9A1])
        again = []
        for _ in range(REPLICATES):
            drawn = _draw(sub, f, raw, rng)
            again.append(raw_pair_sd(*_cells(drawn, *_curve(irt_fit(drawn, engine="map", model="2pl", seed=seed)),
                                             names)))
        sd = float(min(MAX_SD, max(0.0, raw + (raw - float(np.mean(again))))))
    # Rounded as recorded, and coarsely: a resumed run and a sweep's other units read the record, and a fit's
    # last bits differ between processes (their BLAS threads); the allowance needs no finer grain than this.
    sd = round(sd, 2)
    return sd, {**info, "sd": sd, "raw_sd": round(raw, 4)}


def _curve(f) -> tuple[dict, dict, dict]:
    ability = dict(zip(f.models, np.asarray(f.ability, dtype=float), strict=True))
    difficulty = dict(zip(f.item_ids, np.asarray(f.difficulty, dtype=float), strict=True))
    slope = dict(zip(f.item_ids, np.asarray(f.discrimination, dtype=float), strict=True))
    return ability, difficulty, slope


def _draw(m: ResponseMatrix, f, sd: float, rng: np.random.Generator) -> ResponseMatrix:
    """``m``'s trials answered by ``f``'s 2PL with offsets of sd ``sd`` on every (model, item) pair."""
    a = np.asarray(f.discrimination, dtype=float)[None, :]
    eta = a * (np.asarray(f.ability, dtype=float)[:, None] - np.asarray(f.difficulty, dtype=float)[None, :])
    eta = eta + sd * rng.standard_normal(m.trials.shape)
    g = np.asarray(m.chance, dtype=float)[None, :]
    p = g + (1 - g) / (1 + np.exp(-eta))
    return ResponseMatrix(m.models, m.item_ids, rng.binomial(m.trials, p), m.trials.copy(),
                          np.asarray(m.chance, dtype=float).copy(), m.source)


__all__ = ["pair_sd", "raw_pair_sd", "MAX_SD"]
