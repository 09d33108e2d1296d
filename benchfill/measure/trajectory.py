"""Trajectories of one item along an ordered model axis (BSDProbe, section 3.1 and Appendix A).

The probe models are ordered once, weakest to strongest, and every item is read along that
same axis: its correctness trajectory ``c_i = k_i / T_i``, the non-decreasing (isotonic) fit of
that trajectory, where the fit crosses a given share of its rise, and, when the answers each
response gave are known, the normalized entropy of those answers at every model.

Everything here works on many items at once (rows of a 2-D array): a benchmark of 12,000
items is profiled in one pass, and the order test's Monte Carlo draws use the same code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchfill.errors import DataError
from benchfill.irt.engine import require_matrix
from benchfill.irt.fit import IrtFit
from benchfill.matrix import ResponseMatrix

VECTORISED_MAX_MODELS = 16  # above this, or above VECTORISED_MAX_ROWS rows, the compiled PAVA runs
VECTORISED_MAX_ROWS = 2000  # (see isotonic_fit)


@dataclass(frozen=True)
class ModelAxis:
    """Probe models ordered weakest to strongest; model i sits at position (i - 1) / (n - 1)."""

    models: tuple[str, ...]
    score: tuple[float, ...]  # what the order comes from: mean correctness or fitted ability
    basis: str  # "performance", "ability" or "given"

    @property
    def n(self) -> int:
        return len(self.models)

    @property
    def positions(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.n) if self.n > 1 else np.zeros(1)

    def to_dict(self) -> dict:
        return {"basis": self.basis, "models": list(self.models), "score": [round(s, 6) for s in self.score]}


def model_axis(
    matrix: ResponseMatrix,
    *,
    fit: IrtFit | None = None,
    order: Sequence[str] | None = None,
    fit_source: str | Path | None = None,
) -> ModelAxis:
    """The shared model axis of a benchmark.

    By default models are ordered by empirical performance on the benchmark (pooled correct /
    pooled trials over the items each model tried), as the paper does; with ``fit`` by fitted
    ability; with ``order`` exactly as given (weakest first). Ties keep the matrix's order, so
    the axis is deterministic. ``fit_source`` names the fit's file in messages.
    """
    require_matrix(matrix)  # profile's matrix too: None had failed here as an AttributeError, naming nothing
    if order is not None:
        unknown = [m for m in order if m not in matrix.models]
        if unknown:
            raise DataError(f"{matrix.source or 'responses'}: model axis names unknown model {unknown[0]!r}")
        if len(set(order)) != len(order):
            raise DataError("model axis: a model is named twice")
        return ModelAxis(tuple(order), tuple(float(i) for i in range(len(order))), "given")
    if fit is not None:
        ability = dict(zip(fit.models, np.asarray(fit.ability, dtype=float), strict=True))
        missing = [m for m in matrix.models if m not in ability]
        if missing:
            raise DataError(f"{fit_source or 'fit'}: no ability for model {missing[0]!r} of "
                            f"{matrix.source or 'the responses'} (the fit has {len(fit.models)} models)")
        score = np.array([ability[m] for m in matrix.models])
        basis = "ability"
    else:
        tried = matrix.trials.sum(axis=1)
        score = np.where(tried > 0, matrix.correct.sum(axis=1) / np.maximum(tried, 1), np.nan)
        basis = "performance"
    keep = np.flatnonzero(np.isfinite(score))
    idx = keep[np.argsort(score[keep], kind="stable")]
    return ModelAxis(tuple(matrix.models[i] for i in idx), tuple(float(score[i]) for i in idx), basis)


def isotonic_fit(correct: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """The non-decreasing binomial maximum-likelihood fit of each row's correctness.

    Weighted by trials, so that with a common budget T it is the paper's equal-weight fit
    (each pooled block gets the mean of its c_i, Appendix D.1), and with unequal budgets it is
    still the monotone MLE. Every entry of ``trials`` must be positive.

    Small batches on short axes use the min-max formula
    c~_i = max_{j<=i} min_{k>=i} (sum_j..k k)/(sum_j..k T), O(n^2) per row but vectorised over
    rows and free of numba's import (~0.5 s); long axes and big batches (the order test's ~10^5
    Monte Carlo rows) use a compiled PAVA (trajectory_pava). Measured on 10^5 rows, contended
    2-core machine: at n = 8 the min-max form takes ~0.4 s, the compiled PAVA well under 0.1 s;
    at n = 58 min-max ~16 s, scipy's isotonic_regression called per row ~1.3 s, compiled ~0.3 s.
    """
    k = np.atleast_2d(np.asarray(correct, dtype=float))
    t = np.atleast_2d(np.asarray(trials, dtype=float))
    t = np.broadcast_to(t, k.shape)
    m, n = k.shape
    if n > VECTORISED_MAX_MODELS or m > VECTORISED_MAX_ROWS:
        try:
            from benchfill.measure.trajectory_pava import pava_rows
        except ImportError:  # numba is the optional `nuts` extra: scipy per row, ~4x slower, same fit
            return _scipy_rows(k, t)
        return pava_rows(np.ascontiguousarray(k), np.ascontiguousarray(t, dtype=float))
    out = np.empty((m, n))
    # Chunk so that the (rows, n, n) block means stay around 32 MB.
    step = max(1, (4_000_000 // max(n * n, 1)))
    upper = np.triu(np.ones((n, n), dtype=bool))
    for s in range(0, m, step):
        kk = np.concatenate([np.zeros((min(step, m - s), 1)), np.cumsum(k[s:s + step], axis=1)], axis=1)
        tt = np.concatenate([np.zeros((min(step, m - s), 1)), np.cumsum(t[s:s + step], axis=1)], axis=1)
        # block[r, j, k] = mean over models j..k (k >= j); +inf below the diagonal so that the
        # suffix minimum over k >= i ignores blocks that would end before they start.
        num = kk[:, None, 1:] - kk[:, :-1, None]
        den = tt[:, None, 1:] - tt[:, :-1, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            block = np.where(upper, num / den, np.inf)
        # suffix min over k >= i, then prefix max over j <= i (entries j > i are -inf).
        smin = np.minimum.accumulate(block[:, :, ::-1], axis=2)[:, :, ::-1]
        smin = np.where(upper, smin, -np.inf)
        out[s:s + step] = smin.max(axis=1)
    return out


def _scipy_rows(k: np.ndarray, t: np.ndarray) -> np.ndarray:
    from scipy.optimize import isotonic_regression

    return np.array([isotonic_regression(kr / tr, weights=tr).x for kr, tr in zip(k, t, strict=True)])


def crossings(fitted: np.ndarray, positions: np.ndarray, shares: Sequence[float]) -> np.ndarray:
    """Positions where each non-decreasing row first reaches c~_1 + share * (c~_n - c~_1).

    The fitted trajectory is read as the piecewise-linear curve through (position_i, c~_i);
    the crossing is its left generalized inverse (the first point at or above the level), so a
    plateau exactly at the level counts from its start. Rows with no rise give NaN.
    Returns shape (rows, len(shares)).
    """
    f = np.atleast_2d(np.asarray(fitted, dtype=float))
    pos = np.asarray(positions, dtype=float)
    lo, hi = f[:, :1], f[:, -1:]
    gain = (hi - lo)[:, 0]
    out = np.full((f.shape[0], len(shares)), np.nan)
    rows = np.flatnonzero(gain > 1e-12)
    if rows.size == 0:
        return out
    fr = f[rows]
    for j, share in enumerate(shares):
        level = fr[:, 0] + share * gain[rows]
        # first index whose fitted value reaches the level (tolerance for float sums)
        reach = fr >= level[:, None] - 1e-12
        i = reach.argmax(axis=1)
        prev = np.maximum(i - 1, 0)
        y0, y1 = fr[np.arange(rows.size), prev], fr[np.arange(rows.size), i]
        x0, x1 = pos[prev], pos[i]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(y1 > y0, (level - y0) / (y1 - y0), 0.0)
        out[rows, j] = np.where(i == 0, pos[0], x0 + np.clip(frac, 0.0, 1.0) * (x1 - x0))
    return out


def answer_entropy(counts: Mapping[str, int], n_states: int | None = None) -> float:
    """Normalized entropy H(p) / log M of one model's answers to one item (section 3.1).

    ``counts`` maps each answer state (the final answer a response gave, an invalid-format
    marker, ...) to how many of the T responses gave it. M is ``n_states`` when the item's
    answer-state space is known (the options of a multiple-choice item, plus invalid); else the
    caller passes the number of states observed for the item across all models.
    Returns NaN when nothing was counted; 0 when M < 2 (one state leaves nothing to disperse).
    """
    c = np.array([v for v in counts.values() if v > 0], dtype=float)
    total = c.sum()
    if total <= 0:
        return float("nan")
    m = n_states if n_states is not None else len(c)
    if m < 2:
        return 0.0
    if len(c) > m:
        raise DataError(f"{len(c)} distinct answers but only {m} answer states")
    p = c / total
    return float(-(p * np.log(p)).sum() / np.log(m))


def read_answers(path: str | Path, matrix: ResponseMatrix | None = None) -> dict[tuple[str, str], dict[str, int]]:
    """Answer states per (model, item): a long file with one row per response or per count.

    Columns ``model,item_id,answer`` and an optional ``count`` (default 1, a non-negative integer);
    CSV with a header or JSONL, by suffix. The answer is the response's final answer as the grader
    extracted it (an option letter, a normalized number, "invalid" for an unparseable reply).
    With ``matrix`` (the responses the answers belong to), a row that brings its pair's answers
    above the pair's trials is refused, naming its line; ``match_answers`` then says how many pairs
    the responses know.
    """
    from benchfill.data import jsonl_objects

    path = Path(path)
    rows = jsonl_objects(path) if path.suffix.lower() in (".jsonl", ".json") else _csv_dicts(path)
    trials = _PairTrials(matrix) if matrix is not None else None
    out: dict[tuple[str, str], dict[str, int]] = {}
    for lineno, row in rows:
        missing = [f for f in ("model", "item_id", "answer") if row.get(f) in (None, "")]
        if missing:
            raise DataError(f"{path}:{lineno}: missing field {missing[0]!r}")
        count = _count(row.get("count"), f"{path}:{lineno}")
        pair = (str(row["model"]), str(row["item_id"]))
        states = out.setdefault(pair, {})
        states[str(row["answer"])] = states.get(str(row["answer"]), 0) + count
        if trials is not None and pair in trials and sum(states.values()) > trials[pair]:
            raise DataError(f"{path}:{lineno}: {sum(states.values())} answers for model {pair[0]!r}, item "
                            f"{pair[1]!r}, which has {trials[pair]} trials in {matrix.source or 'the responses'}")
    if not out:
        raise DataError(f"{path}: no answers (empty file)")
    return out


def match_answers(
    answers: Mapping[tuple[str, str], Mapping[str, int]],
    matrix: ResponseMatrix,
    source: str | Path = "answers",
) -> str | None:
    """Check answer states against the responses they belong to; a note when only some pairs match.

    Refused (DataError): no (model, item) pair of ``answers`` is in the responses, or a pair has
    more answers than trials. When some pairs match and others do not, the others are ignored and
    the returned line says how many; None when every pair matches.
    """
    trials = _PairTrials(matrix)
    resp = matrix.source or "the responses"
    matched = [pair for pair in answers if pair in trials]
    for pair in matched:
        total = sum(answers[pair].values())
        if total > trials[pair]:
            raise DataError(f"{source}: {total} answers for model {pair[0]!r}, item {pair[1]!r}, which has "
                            f"{trials[pair]} trials in {resp}")
    if not matched:
        ours, theirs = next(iter(answers), ("?", "?")), trials.example
        raise DataError(f"{source}: none of its {len(answers)} (model, item) pairs is in {resp} (answers name "
                        f"model {ours[0]!r}, item {ours[1]!r}; responses name model {theirs[0]!r}, item "
                        f"{theirs[1]!r})")
    if len(matched) < len(answers):
        other = next(pair for pair in answers if pair not in trials)
        return (f"{source}: {len(matched)} of {len(answers)} (model, item) pairs match {resp}; the other "
                f"{len(answers) - len(matched)} are ignored (e.g. model {other[0]!r}, item {other[1]!r})")
    return None


class _PairTrials:
    """Trials of a matrix by (model, item) pair, without a dict over every pair (mmlu-pro has 10^5-10^6)."""

    def __init__(self, matrix: ResponseMatrix):
        self._model = {m: j for j, m in enumerate(matrix.models)}
        self._item = {item: i for i, item in enumerate(matrix.item_ids)}
        self._trials = np.asarray(matrix.trials)
        self.example = (matrix.models[0], matrix.item_ids[0]) if matrix.models and matrix.item_ids else ("?", "?")

    def __contains__(self, pair: tuple[str, str]) -> bool:
        return pair[0] in self._model and pair[1] in self._item

    def __getitem__(self, pair: tuple[str, str]) -> int:
        return int(self._trials[self._model[pair[0]], self._item[pair[1]]])


def _count(raw: object, where: str) -> int:
    """A row's ``count``: absent is 1; a bool, a fraction or text that is not a whole number is refused."""
    if raw is None or raw == "":
        return 1
    value: int | None = None
    if isinstance(raw, bool):
        pass  # JSON true is not a count, though Python would read it as 1
    elif isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)  # 2.0, as some writers put an integer column
    elif isinstance(raw, str):
        try:
            value = int(raw)
        except ValueError:
            value = None
    if value is None:
        raise DataError(f"{where}: field 'count' is not an integer: {raw!r}")
    if value < 0:
        raise DataError(f"{where}: field 'count' is negative")
    return value


def _csv_dicts(path: Path):
    import csv

    from benchfill.data import check_header

    try:
        # utf-8-sig: Excel's "CSV UTF-8" starts with a byte-order mark, which read as part of the first
        # column's name ("\ufeffmodel"), so every row "lacked" it (the responses and sheets read it so already)
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            # a column twice: DictReader kept its last copy without a word
            check_header([k.strip() for k in reader.fieldnames or []], f"{path}:1")
            for row in reader:
                if any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    yield reader.line_num, {k.strip(): (v or "").strip() for k, v in row.items() if k}
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot read ({exc.__class__.__name__})") from None
