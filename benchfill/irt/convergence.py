"""MCMC convergence diagnostics of Vehtari et al. (2021): rank-normalised split R-hat and bulk ESS.

Both take draws shaped (chains, draws, parameters) and return one value per parameter.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# Draws per chain split R-hat needs: each chain is split in two halves, and each half takes a variance.
MIN_DRAWS = 4


def _split(draws: np.ndarray) -> np.ndarray:
    """Split every chain in two halves (dropping a middle draw if odd): (2 chains, n/2, p)."""
    n = draws.shape[1] // 2
    return np.concatenate([draws[:, :n], draws[:, -n:]], axis=0)


def _rank_normalize(draws: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks (average ranks for ties), per parameter."""
    from scipy.special import ndtri

    c, n, p = draws.shape
    # One argsort per parameter on contiguous rows: scipy's rankdata along axis 0 took most of the
    # diagnostics' time on a 1,311-parameter posterior. Average ranks are needed only where values
    # tie (rare for continuous draws); those rows go through rankdata.
    rows = np.ascontiguousarray(draws.reshape(c * n, p).T)
    order = np.argsort(rows, axis=1)
    ranks = np.empty(rows.shape)
    np.put_along_axis(ranks, order, np.arange(1.0, c * n + 1.0)[None, :], axis=1)
    ordered = np.take_along_axis(rows, order, axis=1)
    tied = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
    if tied.size:
        from scipy.stats import rankdata  # a heavy import (~1 s), paid only when ties exist

        ranks[tied] = rankdata(rows[tied], axis=1, method="average")
    return ndtri((ranks.T - 0.375) / (c * n + 0.25)).reshape(c, n, p)


def _rhat_basic(draws: np.ndarray) -> np.ndarray:
    n = draws.shape[1]
    chain_var = draws.var(axis=1, ddof=1)
    w = chain_var.mean(axis=0)
    b = n * draws.mean(axis=1).var(axis=0, ddof=1)
    var_hat = (n - 1) / n * w + b / n
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(var_hat / w)


def rhat(draws: np.ndarray) -> np.ndarray:
    """max(bulk R-hat, tail R-hat): split chains, rank-normalised draws and folded draws."""
    split = _split(np.asarray(draws, dtype=float))
    bulk = _rhat_basic(_rank_normalize(split))
    folded = np.abs(split - np.median(split.reshape(-1, split.shape[2]), axis=0))
    tail = _rhat_basic(_rank_normalize(folded))
    return np.fmax(bulk, tail)


def _autocov(x: np.ndarray) -> np.ndarray:
    """Biased autocovariance along axis 1 by FFT: x (chains, n, p) -> (chains, n, p)."""
    n = x.shape[1]
    centered = x - x.mean(axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(centered, n=size, axis=1)
    return np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :n] / n


def ess(draws: np.ndarray) -> np.ndarray:
    """Effective sample size with Geyer's initial monotone sequence (Stan / ArviZ estimator)."""
    x = np.asarray(draws, dtype=float)
    m, n, p = x.shape
    acov = _autocov(x)
    mean_var = acov[:, 0].mean(axis=0) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n + (x.mean(axis=1).var(axis=0, ddof=1) if m > 1 else 0.0)
    acov_mean = acov.mean(axis=0)  # (n, p)
    out = np.empty(p)
    for k in range(p):
        if not var_plus[k] > 0:
            out[k] = np.nan
            continue
        rho = 1.0 - (mean_var[k] - acov_mean[:, k]) / var_plus[k]
        rho_t = np.zeros(n)
        rho_t[0] = 1.0
        even, odd = 1.0, rho[1]
        rho_t[1] = odd
        t = 1
        while t < n - 3 and even + odd > 0.0:
            even, odd = rho[t + 1], rho[t + 2]
            if even + odd >= 0:
                rho_t[t + 1], rho_t[t + 2] = even, odd
            t += 2
        max_t = t - 2
        if even > 0:
            rho_t[max_t + 1] = even
        t = 1
        while t <= max_t - 2:  # make the sums of pairs monotone
            if rho_t[t + 1] + rho_t[t + 2] > rho_t[t - 1] + rho_t[t]:
                rho_t[t + 1] = rho_t[t + 2] = (rho_t[t - 1] + rho_t[t]) / 2.0
            t += 2
        total = m * n
        tau = -1.0 + 2.0 * rho_t[: max_t + 1].sum() + rho_t[max_t + 1 : max_t + 2].sum()
        out[k] = total / max(tau, 1.0 / np.log10(total))
    return out


def ess_bulk(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS: the ESS of rank-normalised split chains."""
    return ess(_rank_normalize(_split(np.asarray(draws, dtype=float))))


def shortfall(diagnostics: dict[str, Any]) -> str:
    """What falls short of the paper's bar for trusting a posterior (max R-hat <= 1.01, min bulk ESS >= 400,
    no divergences), or "" where nothing does (or it could not be computed)."""
    short = []
    rhat, ess, div = diagnostics.get("max_rhat"), diagnostics.get("min_ess_bulk"), diagnostics.get("divergences")
    if isinstance(rhat, (int, float)) and rhat == rhat and rhat > 1.01:
        short.append(f"max R-hat {rhat:.3f} > 1.01")
    if isinstance(ess, (int, float)) and ess == ess and ess < 400:
        short.append(f"min bulk ESS {ess:.0f} < 400")
    if isinstance(div, int) and div > 0:
        short.append(f"{div} divergent transitions")
    return ", ".join(short)


def warn_unconverged(diagnostics: dict[str, Any]) -> None:
    """One warning (``logging``, as every warning of the library) where a NUTS fit's chains fall short: its
    posterior figures, printed or written, are not to be trusted. Both the CLI's reader and a library caller
    see it, so it names the flags and the keywords."""
    unsure = shortfall(diagnostics)
    if unsure:
        log.warning("the NUTS chains have not converged (%s); the posterior figures are not to be "
                    "trusted: fit again with longer chains (more draws and warmup: --draws and --warmup, or draws and "
                    "warmup from Python)", unsure)
