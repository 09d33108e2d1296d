"""A fitted IRT scale: abilities, difficulties, and the map from b to z in [0, 1].

The normalization is fixed by the benchmark the scale was fitted on, so that a
new item calibrated later lands on the same axis (possibly outside [0, 1]).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class IrtFit:
    model: str  # "1pl" or "2pl"
    engine: str  # "map" or "nuts"
    models: tuple[str, ...]
    item_ids: tuple[str, ...]
    ability: np.ndarray  # theta_j, shape (n_models,)
    ability_se: np.ndarray  # posterior sd (nuts) or Laplace standard error (map)
    difficulty: np.ndarray  # b_i, shape (n_items,)
    difficulty_se: np.ndarray
    chance: np.ndarray  # guessing floor g_i, shape (n_items,)
    discrimination: np.ndarray | None = None  # a_i for 2PL
    b_min: float = field(default=float("nan"))
    b_max: float = field(default=float("nan"))
    # Posterior draws (nuts only): shape (n_draws, n_items) / (n_draws, n_models).
    difficulty_draws: np.ndarray | None = None
    ability_draws: np.ndarray | None = None
    log_likelihood: float = float("nan")  # at the point estimate, for BIC
    diagnostics: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    def __post_init__(self) -> None:
        if np.isnan(self.b_min) or np.isnan(self.b_max):
            self.b_min = float(np.min(self.difficulty))
            self.b_max = float(np.max(self.difficulty))

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_models(self) -> int:
        return len(self.models)

    def normalize(self, b: np.ndarray | float) -> np.ndarray:
        """z = (b - b_min) / (b_max - b_min) on this benchmark's scale; not clipped."""
        span = self.b_max - self.b_min
        if span <= 0:
            # Every item at one difficulty: the scale degenerates; put them all mid-axis.
            return np.full(np.shape(b), 0.5)
        return (np.asarray(b, dtype=float) - self.b_min) / span

    def denormalize(self, z: np.ndarray | float) -> np.ndarray:
        return self.b_min + np.asarray(z, dtype=float) * (self.b_max - self.b_min)

    @property
    def z(self) -> np.ndarray:
        return self.normalize(self.difficulty)

    @property
    def z_draws(self) -> np.ndarray | None:
        """Each posterior draw normalized by its own min and max, as in Appendix C.6."""
        if self.difficulty_draws is None:
            return None
        d = self.difficulty_draws
        lo = d.min(axis=1, keepdims=True)
        span = d.max(axis=1, keepdims=True) - lo
        return np.where(span > 0, (d - lo) / np.where(span > 0, span, 1.0), 0.5)

    # -- persistence -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def arr(x: np.ndarray | None) -> list | None:
            return None if x is None else np.asarray(x).tolist()

        return {
            "model": self.model,
            "engine": self.engine,
            "models": list(self.models),
            "item_ids": list(self.item_ids),
            "ability": arr(self.ability),
            "ability_se": arr(self.ability_se),
            "difficulty": arr(self.difficulty),
            "difficulty_se": arr(self.difficulty_se),
            "chance": arr(self.chance),
            "discrimination": arr(self.discrimination),
            "b_min": self.b_min,
            "b_max": self.b_max,
            "log_likelihood": self.log_likelihood,
            "diagnostics": self.diagnostics,
            "seed": self.seed,
        }

    def save(self, path: str | Path) -> None:
        """Write the fit as JSON (and its posterior draws, if any, as ``<path>.draws.npz``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        if self.difficulty_draws is not None:
            draws = path.with_name(path.name + ".draws.npz")
            with open(draws.with_suffix(".tmp"), "wb") as fh:
                np.savez_compressed(fh, difficulty=self.difficulty_draws, ability=self.ability_draws)
            draws.with_suffix(".tmp").replace(draws)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> IrtFit:
        path = Path(path)
        draws = path.with_name(path.name + ".draws.npz")
        kw: dict[str, Any] = {}
        if draws.exists():
            with np.load(draws) as z:
                kw["difficulty_draws"] = z["difficulty"]
                kw["ability_draws"] = z["ability"]
        return cls.from_dict(json.loads(path.read_text()), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any], **kw: Any) -> IrtFit:
        """The fit ``to_dict`` wrote (``kw``: its posterior draws, kept apart)."""
        return cls(
            model=d["model"],
            engine=d["engine"],
            models=tuple(d["models"]),
            item_ids=tuple(d["item_ids"]),
            ability=np.asarray(d["ability"], dtype=float),
            ability_se=np.asarray(d["ability_se"], dtype=float),
            difficulty=np.asarray(d["difficulty"], dtype=float),
            difficulty_se=np.asarray(d["difficulty_se"], dtype=float),
            chance=np.asarray(d["chance"], dtype=float),
            discrimination=None if d.get("discrimination") is None else np.asarray(d["discrimination"]),
            b_min=d["b_min"],
            b_max=d["b_max"],
            log_likelihood=d.get("log_likelihood", float("nan")),
            diagnostics=d.get("diagnostics", {}),
            seed=d.get("seed"),
            **kw,
        )
