"""Predictors of z(beta) from feature blocks: ridge by default, a random forest as the option.

Every statistic that looks at data (column means and sds, each block's PCA, the ridge penalty) is fitted
on the training rows only, so K-fold and leave-one-group-out scores never see the held-out items.
Ridge is a few lines of numpy (closed form through the SVD, the penalty picked by generalized
cross-validation); the forest is scikit-learn's RandomForestRegressor (the paper's Appendix A.4
estimator), imported only when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchfill.errors import ConfigError
from benchfill.predict.features import FeatureBlock

REGRESSORS = ("ridge", "forest")
ALPHAS = tuple(float(a) for a in np.logspace(-3, 4, 15))
# a column is clipped this many training sds beyond its training range: far enough out that no held-out
# humaneval or mmlu-pro item of the cross-validation reaches it (their figures are unchanged), near enough
# that one text unlike every training item's cannot carry the linear model off the scale
CLIP_SDS = 3.0


@dataclass
class BlockTransform:
    """Clip a block's columns to their training range, standardize them, then (if asked) project on the
    block's first principal components."""

    mean: np.ndarray
    scale: np.ndarray
    components: np.ndarray | None = None  # shape (k, n_columns)
    # the training rows' range of each column, clipped CLIP_SDS sds beyond: a linear model extrapolates
    # without bound, and one item whose text is unlike every training item's (a 20,000-character literal:
    # mean word length 4,000 against 4.4) was predicted at z -52 with the cross-validated sd; None in a
    # predictor saved before the range was kept
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None

    @classmethod
    def fit(cls, block: FeatureBlock) -> BlockTransform:
        X = block.X
        mean = X.mean(axis=0)
        sd = X.std(axis=0)
        scale = np.where(sd > 1e-12, sd, 1.0)
        # not an embedding's columns: most are zero in most rows, so a held-out item's one unseen word lies
        # many sds out, and its projection on the components is bounded anyway
        lo, hi = (X.min(axis=0), X.max(axis=0)) if len(X) and block.components is None else (None, None)
        comps = None
        if block.components is not None:
            Xs = (X - mean) / scale
            k = max(1, min(block.components, Xs.shape[0] - 1, Xs.shape[1]))
            _, s, vt = np.linalg.svd(Xs, full_matrices=False)
            # unit variance for each component, so ridge penalizes them alike
            comps = vt[:k] / np.where(s[:k] > 1e-12, s[:k] / np.sqrt(max(Xs.shape[0], 1)), 1.0)[:, None]
        return cls(mean, scale, comps, lo, hi)

    def apply(self, X: np.ndarray) -> np.ndarray:
        if self.lo is not None:
            X = np.clip(X, self.lo - CLIP_SDS * self.scale, self.hi + CLIP_SDS * self.scale)
        Xs = (X - self.mean) / self.scale
        return Xs @ self.components.T if self.components is not None else Xs

    def beyond(self, X: np.ndarray, margin: float = CLIP_SDS) -> np.ndarray:
        """Which cells lie beyond the training range by more than ``margin`` training sds (before clipping)."""
        if self.lo is None:
            return np.zeros(X.shape, dtype=bool)
        return (X < self.lo - margin * self.scale) | (X > self.hi + margin * self.scale)

    def to_dict(self) -> dict[str, Any]:
        d = {"mean": self.mean.tolist(), "scale": self.scale.tolist(),
             "components": None if self.components is None else self.components.tolist()}
        if self.lo is not None:
            d.update(lo=self.lo.tolist(), hi=self.hi.tolist())
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BlockTransform:
        comps = d.get("components")
        lo, hi = d.get("lo"), d.get("hi")
        return cls(np.asarray(d["mean"], float), np.asarray(d["scale"], float),
                   None if comps is None else np.asarray(comps, float),
                   None if lo is None else np.asarray(lo, float), None if hi is None else np.asarray(hi, float))


@dataclass
class Ridge:
    """y ~ intercept + X w, penalty alpha * |w|^2; alpha by GCV over ALPHAS unless fixed."""

    alpha: float | None = None
    coef: np.ndarray = field(default_factory=lambda: np.zeros(0))
    intercept: float = 0.0

    def fit(self, X: np.ndarray, y: np.ndarray) -> Ridge:
        xm, ym = X.mean(axis=0), y.mean()
        Xc, yc = X - xm, y - ym
        u, s, vt = np.linalg.svd(Xc, full_matrices=False)
        uty = u.T @ yc
        n = len(y)
        alphas = ALPHAS if self.alpha is None else (self.alpha,)
        best = None
        for a in alphas:
            d = s / (s**2 + a)
            fitted = u @ (s * d * uty)
            df = float((s**2 / (s**2 + a)).sum())
            gcv = float(((yc - fitted) ** 2).sum()) / max(n - 1 - df, 1e-9) ** 2
            if best is None or gcv < best[0]:
                best = (gcv, a, vt.T @ (d * uty))
        _, self.alpha, self.coef = best
        self.intercept = float(ym - xm @ self.coef)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.intercept + X @ self.coef


def check_regressor(name: str) -> None:
    """Refuse (ConfigError) a regressor that is unknown or whose extra is not installed, before any work."""
    from importlib.util import find_spec

    if name not in REGRESSORS:
        raise ConfigError(f"--regressor: unknown {name!r}; choose from {', '.join(REGRESSORS)}")
    if name == "forest" and find_spec("sklearn") is None:
        raise ConfigError(_NO_SKLEARN)


_NO_SKLEARN = "--regressor forest needs scikit-learn: pip install 'benchfill[trees]'"


class Forest:
    """scikit-learn's random forest (the optional extra 'predict-trees')."""

    def __init__(self, n_estimators: int = 200, seed: int = 0, min_samples_leaf: int = 5):
        try:
            from sklearn.ensemble import RandomForestRegressor
        except ImportError:
            raise ConfigError(_NO_SKLEARN) from None
        self.model = RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                                           max_features=0.5, random_state=seed, n_jobs=1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> Forest:
        self.model.fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(X)


@dataclass
class DifficultyModel:
    """Block transforms plus a regressor: fit on training rows, predict z(beta) for any rows."""

    regressor: str = "ridge"
    alpha: float | None = None
    seed: int = 0
    trees: int = 200  # forest only
    transforms: list[BlockTransform] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    model: Any = None

    def _design(self, blocks: Sequence[FeatureBlock]) -> np.ndarray:
        if [b.family for b in blocks] != self.families:
            raise ConfigError(f"feature families {[b.family for b in blocks]} differ from the trained {self.families}")
        return np.hstack([t.apply(b.X) for t, b in zip(self.transforms, blocks, strict=True)])

    def fit(self, blocks: Sequence[FeatureBlock], y: np.ndarray) -> DifficultyModel:
        if self.regressor not in REGRESSORS:
            raise ConfigError(f"--regressor: unknown {self.regressor!r}; choose from {', '.join(REGRESSORS)}")
        self.families = [b.family for b in blocks]
        self.transforms = [BlockTransform.fit(b) for b in blocks]
        X = self._design(blocks)
        self.model = Ridge(self.alpha) if self.regressor == "ridge" else Forest(n_estimators=self.trees, seed=self.seed)
        self.model.fit(X, np.asarray(y, dtype=float))
        return self

    def predict(self, blocks: Sequence[FeatureBlock]) -> np.ndarray:
        return self.model.predict(self._design(blocks))

    def beyond(self, blocks: Sequence[FeatureBlock], margin: float = CLIP_SDS) -> list[list[str]]:
        """Per row, the features that lie beyond the training range by more than ``margin`` training sds:
        the prediction clips them there, so it says less about such an item than its sd suggests."""
        out: list[list[str]] = [[] for _ in range(len(blocks[0].X) if blocks else 0)]
        for t, b in zip(self.transforms, blocks, strict=True):
            for i, j in zip(*np.nonzero(t.beyond(b.X, margin)), strict=True):
                out[i].append(b.names[j])
        return out

    def to_dict(self) -> dict[str, Any]:
        if not isinstance(self.model, Ridge):
            raise ConfigError("only a ridge predictor can be saved (the forest is for evaluation)")
        return {"regressor": "ridge", "alpha": self.model.alpha, "coef": self.model.coef.tolist(),
                "intercept": self.model.intercept, "families": self.families,
                "transforms": [t.to_dict() for t in self.transforms]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DifficultyModel:
        m = cls(regressor="ridge", alpha=d["alpha"], families=list(d["families"]),
                transforms=[BlockTransform.from_dict(t) for t in d["transforms"]])
        m.model = Ridge(alpha=d["alpha"], coef=np.asarray(d["coef"], float), intercept=float(d["intercept"]))
        return m
