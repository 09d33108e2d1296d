"""The model-by-item response matrix: the one input every measurement starts from."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from benchfill.errors import DataError

MAX_COUNT = 10**9  # trials of one model on one item; far beyond any real evaluation, and no int64 sum overflows


@dataclass(frozen=True)
class ResponseMatrix:
    """Aggregated binomial responses.

    ``correct[j, i]`` and ``trials[j, i]`` count the correct answers and the
    attempts of model ``j`` on item ``i``; a pair never attempted has
    ``trials == 0`` and contributes nothing to any likelihood.
    ``chance[i]`` is the guessing floor of item ``i`` (0 for free-response).
    ``untried`` names items the source file listed only with trials 0, left out of the matrix:
    with no attempt they have no difficulty, and the prior alone would place them. ``untried_models``
    names such models: with no attempt they have no ability, yet would count towards the models IRT needs.
    ``repeated`` counts the source's rows that named a pair an earlier row named, whose counts were added.
    """

    models: tuple[str, ...]
    item_ids: tuple[str, ...]
    correct: np.ndarray  # int64, shape (n_models, n_items)
    trials: np.ndarray  # int64, shape (n_models, n_items)
    chance: np.ndarray | None = field(default=None)  # float64, shape (n_items,); zeros once made
    source: str = ""  # file the matrix was read from, for messages and reports
    untried: tuple[str, ...] = ()  # items of the source with trials 0 only, not in item_ids
    untried_models: tuple[str, ...] = ()  # models of the source with trials 0 only, not in models
    repeated: int = 0  # rows of the source that named a (model, item) pair an earlier row named: counts added

    def __post_init__(self) -> None:
        # A user's error (a library caller builds one from their own arrays): DataError, one line naming
        # the field, like a file read through data.read_responses
        where = f"{self.source}: " if self.source else "ResponseMatrix: "
        for name, ids in (("models", self.models), ("item_ids", self.item_ids)):
            twice = first_repeat(ids)
            if twice is not None:  # the columns would merge in every dict keyed by id; a saved fit is refused
                raise DataError(f"{where}{name} names {twice!r} twice")
        shape = (len(self.models), len(self.item_ids))
        counts = {}
        for name in ("correct", "trials"):
            a = np.asarray(getattr(self, name))
            if a.shape != shape:
                raise DataError(f"{where}{name} must have shape {shape} (models x items), got {a.shape}")
            if a.dtype.kind not in "iu":
                if a.dtype.kind not in "fb" or not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
                    raise DataError(f"{where}{name} must hold whole numbers of answers")
            if a.size and a.min() < 0:
                raise DataError(f"{where}{name} must not be negative")
            # checked before the cast: 1e300 or a uint64 past 2**63 wrapped to a negative int64 (then called
            # negative), or passed and left the fit with no Newton step (a raw TypeError)
            if a.size and a.max() > MAX_COUNT:
                raise DataError(f"{where}{name} holds {a.max()}, implausibly large (at most {MAX_COUNT} a cell)")
            a = a.astype(np.int64)
            counts[name] = a
            object.__setattr__(self, name, a)
        if np.any(counts["correct"] > counts["trials"]):
            j, i = np.argwhere(counts["correct"] > counts["trials"])[0]
            raise DataError(f"{where}correct > trials for model {self.models[j]!r} on item {self.item_ids[i]!r}")
        if self.chance is None:
            object.__setattr__(self, "chance", np.zeros(len(self.item_ids)))
        chance = np.asarray(self.chance, dtype=float)
        if chance.shape != (len(self.item_ids),):
            raise DataError(f"{where}chance must hold one guessing floor per item, shape {(len(self.item_ids),)}, "
                             f"got {chance.shape}")
        bad = np.flatnonzero(~((chance >= 0) & (chance < 1)))  # NaN fails both
        if bad.size:
            i = int(bad[0])
            raise DataError(f"{where}item {self.item_ids[i]!r}: guessing floor {chance[i]} is not in [0, 1) "
                             "(a floor of 1 means every answer is right, which says nothing about difficulty)")
        object.__setattr__(self, "chance", chance)

    def __repr__(self) -> str:  # the default printed every id and count: 99,000 characters on mmlu-pro
        where = f", source={self.source!r}" if self.source else ""
        return (f"ResponseMatrix({self.n_models} models x {self.n_items} items, {int(self.trials.sum())} trials"
                f"{where})")

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def success_rate(self) -> np.ndarray:
        """Empirical p_ji = correct / trials, NaN where a pair was never tried."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.trials > 0, self.correct / np.maximum(self.trials, 1), np.nan)

    def with_chance(self, chance: np.ndarray | float) -> ResponseMatrix:
        c = np.broadcast_to(np.asarray(chance, dtype=float), (self.n_items,)).copy()
        return replace(self, chance=c)

    def drop_models(self, keep: np.ndarray) -> ResponseMatrix:
        """A copy with only the models where ``keep`` is true (used by leave-one-model-out)."""
        keep = np.asarray(keep, dtype=bool)
        models = tuple(m for m, k in zip(self.models, keep, strict=True) if k)
        return replace(self, models=models, correct=self.correct[keep], trials=self.trials[keep])

    def select_items(self, idx: np.ndarray) -> ResponseMatrix:
        idx = np.asarray(idx)
        ids = tuple(self.item_ids[i] for i in idx)
        return replace(self, item_ids=ids, correct=self.correct[:, idx], trials=self.trials[:, idx],
                       chance=self.chance[idx])


def first_repeat(names: tuple[str, ...]) -> str | None:
    """The first name that appears a second time, or None."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None
