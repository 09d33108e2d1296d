"""Where the simulated world's truth comes from: a fit of a real response matrix, or a seeded draw.

With a matrix, every item the matrix covers gets its fitted difficulty and the probe
panel gets abilities spread over the fitted models' abilities; items the matrix does
not cover are drawn from the fitted difficulties' mean and spread. Without one,
``b ~ N(0, 1.3)`` and a ladder of abilities from -2.5 to 2.5.

The fit is a run's own (MAP under N(0, 1)) unless ``prior="hierarchical"``: a world whose ends are
as spread as that prior finds them (bench/bench_gap_bias.py: an N(0, 1) fit pulls a real spread's
ends in), to judge a fit of the benchmark in a world it did not make.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchfill.matrix import ResponseMatrix


@dataclass(frozen=True)
class Latent:
    difficulty: np.ndarray  # b per item, in the order of the items given
    ability: np.ndarray  # theta per probe, ascending
    source_models: tuple[str, ...]  # fitted model behind each probe ("" for a drawn ladder)
    origin: str  # "fit" or "draw"


def probe_names(n: int) -> list[str]:
    return [f"sim-probe-{k + 1:02d}" for k in range(n)]


PRIORS = ("normal", "hierarchical")


def _fit_matrix(matrix: ResponseMatrix, prior: str = "normal"):
    from benchfill.irt import fit  # MAP, 1PL with the matrix's guessing floor

    return fit(matrix) if prior == "normal" else fit(matrix, prior=prior)


def draw_latent(item_ids: Sequence[str], *, n_probes: int, seed: int, matrix: ResponseMatrix | None,
                prior: str = "normal") -> Latent:
    rng = np.random.default_rng([seed, 0x51D])
    n = len(item_ids)
    if matrix is None and prior != "normal":  # a drawn world has no fit to take a prior: refused, not ignored
        from benchfill.errors import ConfigError

        raise ConfigError(f"sim: latent_prior {prior!r} needs a response matrix to fit (this world is drawn)")
    if matrix is None:
        b = rng.normal(0.0, 1.3, size=n)
        return Latent(b, np.linspace(-2.5, 2.5, n_probes), ("",) * n_probes, "draw")

    fit = _fit_matrix(matrix, prior)
    fitted = dict(zip(fit.item_ids, np.asarray(fit.difficulty, dtype=float), strict=True))
    known = np.array([fitted[i] for i in item_ids if i in fitted])
    mu, sd = (known.mean(), max(known.std(), 0.5)) if known.size else (0.0, 1.3)
    b = np.array([fitted[i] if i in fitted else rng.normal(mu, sd) for i in item_ids])
    # Probes at evenly spaced quantiles of the fitted abilities, weakest first.
    order = np.argsort(fit.ability)
    pick = order[np.round(np.linspace(0, len(order) - 1, n_probes)).astype(int)]
    theta = np.asarray(fit.ability, dtype=float)[pick]
    return Latent(b, theta, tuple(fit.models[j] for j in pick), "fit")
