"""Response matrices drawn from a known IRT model: the ground truth for recovery checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchfill.matrix import ResponseMatrix


@dataclass(frozen=True)
class Simulated:
    matrix: ResponseMatrix
    ability: np.ndarray  # true theta_j
    difficulty: np.ndarray  # true b_i
    discrimination: np.ndarray  # true a_i (ones for 1PL)


def simulate_responses(
    n_models: int,
    n_items: int,
    trials: int,
    *,
    chance: float | np.ndarray = 0.0,
    discrimination: np.ndarray | None = None,
    ability_sd: float = 1.0,
    difficulty_sd: float = 1.0,
    seed: int = 0,
    difficulty_shape: str = "normal",
) -> Simulated:
    """Draw theta ~ N(0, ability_sd^2), b ~ N(0, difficulty_sd^2) (``difficulty_shape="uniform"``: evenly
    spread, uniform of that sd) and binomial counts under P = g + (1 - g) sigmoid(a (theta - b)); the seed
    fixes everything."""
    if difficulty_shape not in ("normal", "uniform"):
        raise ValueError(f"difficulty_shape: 'normal' or 'uniform', got {difficulty_shape!r}")
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, ability_sd, n_models)
    if difficulty_shape == "uniform":
        half = difficulty_sd * np.sqrt(3.0)
        b = rng.uniform(-half, half, n_items)
    else:
        b = rng.normal(0.0, difficulty_sd, n_items)
    a = np.ones(n_items) if discrimination is None else np.asarray(discrimination, dtype=float)
    g = np.broadcast_to(np.asarray(chance, dtype=float), (n_items,)).copy()
    p = g + (1.0 - g) / (1.0 + np.exp(-a[None, :] * (theta[:, None] - b[None, :])))
    t = np.full((n_models, n_items), trials, dtype=np.int64)
    c = rng.binomial(t, p).astype(np.int64)
    matrix = ResponseMatrix(
        tuple(f"model-{j}" for j in range(n_models)),
        tuple(f"item-{i}" for i in range(n_items)),
        c,
        t,
        g,
        source=f"simulated(seed={seed})",
    )
    return Simulated(matrix, theta, b, a)
