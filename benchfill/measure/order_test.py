"""Order consistency: does an item's correctness rise along the model axis? (BSDProbe, Appendix D)

The statistic is the likelihood ratio of monotone against free correctness trajectories,

    D = 2 sum_i T_i KL(Bern(c_i) || Bern(c~_i)),

with c~ the monotone (isotonic) binomial MLE. Its null distribution depends on the unknown true
trajectory, so the p-value is maximised over a finite reference family of monotone profiles
(flat, linear, one-step; Appendix D.3) with the Monte Carlo add-one correction:

    o = max_theta (1 + #{b : D*_theta(b) >= D}) / (B + 1).

The null draws depend only on the trials vector (T_1..T_n along the axis), so one calibration
per trials vector serves every item that shares it: it is computed once, kept in memory, and
written under the user cache directory (``BENCHFILL_CACHE_DIR``, else ``$BENCHFILL_HOME/cache``,
else ``$XDG_CACHE_HOME/benchfill``). Probes with different trial counts simply give a different
trials vector, calibrated the same way (the statistic weights each model by its own T_i).

``pair`` (logits, 0 by default): each model's own offset on the item, N(0, pair^2) on the logit of the reference
profile in every null draw. Real models' answers to one item agree with themselves beyond any monotone curve
(bench/bench_pair_effect.py), so an item whose true trajectory is monotone in ability still shows reversals that
the binomial null calls anomalies; the search's screen of new items, which asks whether a reversal is a wrong
key, calibrates against the offsets its run allows for (search/screen.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import expit, logit, xlogy

from benchfill.irt.online import ProbeCountError
from benchfill.measure.trajectory import isotonic_fit

DEFAULT_DRAWS = 999
# o resolves to 1 / (draws + 1): 9,999 draws give 1e-4, far finer than any alpha needs.
MAX_DRAWS = 9999
# The null is simulated in batches of references of at most this many (draw, model) cells: in one batch,
# 9,999 draws on a 58-model axis held ~0.5 GB several times over (3.9 GiB on livecodebench-codegen). The
# draws are the same either way: the generator fills the cells in the same order.
BATCH_CELLS = 4_000_000
CALIBRATION_VERSION = 1  # bump when the reference family or the statistic changes

# Levels of the reference family. The least favourable monotone null for an isotonic LR test is
# flat (every adjacent pair can violate), so flat profiles get the fine grid; linear and one-step
# profiles cover nulls whose rise is partly localized, as in the paper's family.
FLAT_LEVELS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)
LINEAR_LEVELS = (0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98)
STEP_LEVELS = (0.05, 0.2, 0.5, 0.8, 0.95)
MAX_STEP_CUTS = 7


def lr_statistic(correct: np.ndarray, trials: np.ndarray, fitted: np.ndarray | None = None) -> np.ndarray:
    """D per row; ``fitted`` is the isotonic fit when the caller has it already."""
    k = np.atleast_2d(np.asarray(correct, dtype=float))
    t = np.broadcast_to(np.atleast_2d(np.asarray(trials, dtype=float)), k.shape)
    f = isotonic_fit(k, t) if fitted is None else np.atleast_2d(fitted)
    c = k / t
    miss = t - k
    # 2 [l(c) - l(c~)]; xlogy makes 0 log 0 = 0, and c~ is 0 (1) only where the whole pooled
    # block has k = 0 (k = T), so no log 0 is ever multiplied by a positive count.
    with np.errstate(divide="ignore", invalid="ignore"):
        d = 2.0 * (xlogy(k, c) - xlogy(k, f) + xlogy(miss, 1.0 - c) - xlogy(miss, 1.0 - f)).sum(axis=1)
    return np.maximum(d, 0.0)


def reference_profiles(n: int) -> np.ndarray:
    """The finite family of monotone correctness profiles the p-value is maximised over (rows)."""
    pos = np.linspace(0.0, 1.0, n)
    refs = [np.full(n, a) for a in FLAT_LEVELS]
    refs += [a + (b - a) * pos for a in LINEAR_LEVELS for b in LINEAR_LEVELS if b > a]
    cuts = np.unique(np.round(np.linspace(1, n - 1, min(MAX_STEP_CUTS, n - 1))).astype(int))
    for cut in cuts:
        refs += [np.where(np.arange(n) < cut, a, b) for a in STEP_LEVELS for b in STEP_LEVELS if b > a]
    return np.array(refs)


@dataclass(frozen=True)
class Calibration:
    """The Monte Carlo null of D for one trials vector: sorted draws per reference profile."""

    trials: tuple[int, ...]
    draws: int
    seed: int
    references: np.ndarray  # (R, n)
    null: np.ndarray  # (R, draws), each row sorted ascending
    pair: float = 0.0  # the models' own offsets on the item the null allows for (logits)

    def p_value(self, statistic: np.ndarray | float) -> np.ndarray:
        """o = max over references of (1 + #{D* >= D}) / (B + 1); ties count (inclusive)."""
        d = np.atleast_1d(np.asarray(statistic, dtype=float))
        # A relative tolerance keeps float noise from splitting ties between equal statistics.
        tol = 1e-9 * np.maximum(1.0, np.abs(d))
        below = np.stack([np.searchsorted(row, d - tol, side="left") for row in self.null])
        exceed = self.draws - below.min(axis=0)
        return (1.0 + exceed) / (self.draws + 1.0)


_MEMORY: dict[tuple, Calibration] = {}


def calibration(
    trials: Sequence[int],
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    cache_dir: str | Path | None | bool = None,
    pair: float = 0.0,
) -> Calibration:
    """The calibration for a trials vector (weakest model first), from memory, disk or fresh.

    ``cache_dir``: None for the default user cache directory, a path for another, False to keep
    it in memory only. ``pair``: the models' own offsets on the item allowed for in the null (module
    docstring), rounded to 0.01 logits; 0 keeps the binomial null (and the keys and draws it always had).
    """
    t = tuple(int(x) for x in trials)
    if len(t) < 2 or min(t) < 1:
        raise ValueError(f"order calibration needs at least two models with trials >= 1, got {t}")
    pair = round(float(pair), 2)
    if not (pair >= 0.0 and np.isfinite(pair)):
        raise ValueError(f"order calibration: pair must be a finite sd >= 0, got {pair}")
    key = _key(t, draws, seed, pair)
    hit = _MEMORY.get(key)
    if hit is not None:
        return hit
    path = None if cache_dir is False else _cache_path(key, cache_dir)
    cal = _load(path, key) if path is not None else None
    if cal is None:
        cal = _simulate(t, draws, seed, pair)
        if path is not None:
            _save(path, cal)
    _MEMORY[key] = cal
    return cal


def clear_memory_cache() -> None:
    _MEMORY.clear()


def _key(trials: tuple[int, ...], draws: int, seed: int, pair: float) -> tuple:
    """A calibration's key: with no offsets allowed for, the key (and the seed of the draws) it always had."""
    return (trials, draws, seed) if not pair else (trials, draws, seed, pair)


def _simulate(trials: tuple[int, ...], draws: int, seed: int, pair: float = 0.0) -> Calibration:
    n = len(trials)
    refs = reference_profiles(n)
    # The seed is mixed with the trials vector so that two budgets never share their draws.
    digest = hashlib.sha256(repr((trials, seed) if not pair else (trials, seed, pair)).encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    t = np.asarray(trials, dtype=np.int64)
    # references in batches: each (r * B, n) batch goes through the fit at once (no per-reference overhead),
    # and memory stays bounded whatever the draws
    per = max(1, BATCH_CELLS // max(draws * n, 1))
    parts = []
    for i in range(0, len(refs), per):
        group = refs[i : i + per]
        prob = np.broadcast_to(group[:, None, :], (len(group), draws, n))
        if pair:  # each model's own offset on the item, drawn afresh in every null draw
            prob = expit(logit(prob) + pair * rng.standard_normal((len(group), draws, n)))
        k = rng.binomial(t, prob, size=(len(group), draws, n)).reshape(-1, n)
        parts.append(lr_statistic(k, t).reshape(len(group), draws))
    null = np.sort(np.concatenate(parts), axis=1)
    return Calibration(trials, draws, seed, refs, null, pair)


def default_cache_dir() -> Path | None:
    """Where calibrations are kept on disk; None where there is no home to keep them in (a uid with no
    passwd entry and no HOME, as cron or a container's random uid gives: ``Path.home()`` raised there, and
    the run stopped mid-search), and they are then kept in memory only."""
    explicit = os.environ.get("BENCHFILL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    home = os.environ.get("BENCHFILL_HOME")
    if home:
        return Path(home) / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not xdg:
        try:
            xdg = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):
            return None
    return Path(xdg) / "benchfill"


def _cache_path(key: tuple, cache_dir: str | Path | None | bool) -> Path | None:
    base = default_cache_dir() if cache_dir in (None, True) else Path(cache_dir)
    if base is None:
        return None
    name = hashlib.sha256(repr((CALIBRATION_VERSION, key)).encode()).hexdigest()[:24]
    return base / "order-calibration" / f"{name}.npz"


def _load(path: Path, key: tuple) -> Calibration | None:
    """The cached calibration, or None: absent, stale or unreadable files are recomputed, never an error."""
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            t, draws, seed = tuple(int(x) for x in z["trials"]), int(z["draws"]), int(z["seed"])
            pair = float(z["pair"]) if "pair" in z.files else 0.0
            if _key(t, draws, seed, pair) != key or int(z["version"]) != CALIBRATION_VERSION:
                return None  # another key under the same name: _save overwrites it
            refs, null = np.asarray(z["references"], dtype=float), np.asarray(z["null"], dtype=float)
        if refs.shape != (len(refs), len(t)) or null.shape != (len(refs), draws):
            raise ValueError("calibration arrays do not fit their trials vector and draws")
        return Calibration(t, draws, seed, refs, null, pair)
    except Exception:
        # any failure here (empty file: EOFError, truncated: BadZipFile, a missing array, a wrong
        # shape) means a damaged file; a cache is never an error, so it goes and is recomputed
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def _save(path: Path, cal: Calibration) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        from benchfill.outputs import temp_path

        tmp = temp_path(path.parent, path.name, suffix=".npz")  # a killed save's is removed by the next
        with open(tmp, "wb") as fh:
            np.savez(fh, trials=np.array(cal.trials), draws=cal.draws, seed=cal.seed,
                     version=CALIBRATION_VERSION, references=cal.references, null=cal.null,
                     **({"pair": cal.pair} if cal.pair else {}))
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass  # a read-only or full cache dir costs a recomputation next time, nothing more
    finally:
        if tmp is not None:  # a write that failed part-way leaves no temp file behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _counts(value: Sequence[int], arg: str) -> np.ndarray:
    """Per-probe counts as a flat int vector, refused naming ``arg`` otherwise: the int64 cast they had cut
    1.5 to 1 without a word, and failed on NaN, None or a string with numpy's own error, naming nothing."""
    why = f"{arg}: expected whole numbers, one per probe, got {type(value).__name__}"
    if value is None or isinstance(value, (str, bytes)):
        raise ProbeCountError(why)
    try:
        v = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ProbeCountError(why) from None
    if v.ndim != 1:
        raise ProbeCountError(f"{why} of shape {v.shape}")
    whole = np.isfinite(v) & (v == np.round(v))
    if not whole.all():
        j = int(np.flatnonzero(~whole)[0])
        raise ProbeCountError(f"{arg}: every count must be a whole number; probe {j} has {float(v[j])!r}")
    return v.astype(np.int64)


@dataclass(frozen=True)
class OrderScore:
    """One item's order consistency along the probe axis."""

    statistic: float  # D
    p_value: float  # o, the Monte Carlo order-consistency score
    flagged: bool  # o <= alpha
    fitted: tuple[float, ...]  # isotonic fit of the probes' correctness (probes with trials > 0)


def order_consistency(
    correct: Sequence[int],
    trials: Sequence[int],
    *,
    alpha: float = 0.05,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    cache_dir: str | Path | None | bool = None,
    pair: float = 0.0,
) -> OrderScore:
    """Score a single item from per-probe (correct, trials), probes ordered weakest first.

    Probes with ``trials == 0`` are dropped (they say nothing); the rest keep their own trial
    counts, and the calibration for exactly that trials vector is used (computed once, cached).
    This is the cheap call for screening one new item: after the first call for a given probe
    panel and budget it costs one isotonic fit and one table look-up. ``pair``: the probes' own offsets
    on the item the null allows for (``calibration``).
    """
    k, t = _counts(correct, "correct"), _counts(trials, "trials")
    if k.shape != t.shape:
        raise ProbeCountError(f"correct and trials must have one entry per probe, got {k.size} and {t.size}")
    if (t < 0).any():
        j = int(np.flatnonzero(t < 0)[0])
        raise ProbeCountError(f"trials: must be 0 or more for every probe; probe {j} has {t[j]}")
    bad = (k < 0) | (k > t)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ProbeCountError(f"correct: need 0 <= correct <= trials for every probe; probe {j} has {k[j]} of {t[j]}")
    keep = t > 0
    if keep.sum() < 2:
        raise ProbeCountError(f"trials: order consistency needs at least two probes with trials > 0, "
                              f"got {int(keep.sum())}")
    k, t = k[keep], t[keep]
    fitted = isotonic_fit(k, t)
    d = float(lr_statistic(k, t, fitted)[0])
    o = float(calibration(t, draws=draws, seed=seed, cache_dir=cache_dir, pair=pair).p_value(d)[0])
    return OrderScore(d, o, o <= alpha, tuple(float(x) for x in fitted[0]))
