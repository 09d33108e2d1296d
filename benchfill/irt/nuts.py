"""A No-U-Turn sampler (Stan's variant) for smooth log densities given as ``logp_grad(x)``.

Multinomial sampling over the trajectory with biased progressive sampling at the top level,
the generalised U-turn criterion with Stan's extra checks across merged subtrees, a diagonal
mass matrix learned in Stan's expanding windows, and dual-averaging step-size adaptation
(Hoffman & Gelman 2014; Betancourt 2017). One chain per call; chains run in parallel processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LogpGrad = Callable[[np.ndarray], tuple[float, np.ndarray]]
MAX_DELTA_H = 1000.0  # energy error that marks a divergent transition, as in Stan


@dataclass
class _Point:
    x: np.ndarray
    p: np.ndarray
    grad: np.ndarray
    logp: float
    v: np.ndarray | None = None  # velocity M^-1 p, kept for the U-turn checks


@dataclass
class _Tree:
    minus: _Point
    plus: _Point
    proposal: _Point
    log_w: float  # log sum of exp(-H + H0) over the tree's states
    rho: np.ndarray  # sum of momenta
    sum_accept: float
    n_leapfrog: int
    divergent: bool = False
    turning: bool = False


@dataclass
class ChainResult:
    draws: np.ndarray  # (draws, dim)
    step_size: float
    inv_mass: np.ndarray
    divergences: int  # after warm-up
    mean_tree_depth: float
    n_leapfrog: int


class _Sampler:
    def __init__(self, logp_grad: LogpGrad, rng: np.random.Generator, max_depth: int) -> None:
        self.f = logp_grad
        self.rng = rng
        self.max_depth = max_depth
        self.inv_mass: np.ndarray | None = None
        self.eps = 1.0

    def kinetic(self, p: np.ndarray) -> float:
        return 0.5 * float(np.dot(self.inv_mass * p, p))

    def leapfrog(self, z: _Point, eps: float) -> _Point:
        p = z.p + 0.5 * eps * z.grad
        x = z.x + eps * self.inv_mass * p
        with np.errstate(all="ignore"):
            logp, grad = self.f(x)
        p += 0.5 * eps * grad
        return _Point(x, p, grad, logp, self.inv_mass * p)

    @staticmethod
    def _criterion(v_minus: np.ndarray, v_plus: np.ndarray, rho: np.ndarray) -> bool:
        """True while the trajectory has not turned back on itself (no U-turn)."""
        return float(np.dot(v_plus, rho)) > 0 and float(np.dot(v_minus, rho)) > 0

    def build(self, z: _Point, direction: int, depth: int, h0: float) -> _Tree:
        if depth == 0:
            new = self.leapfrog(z, direction * self.eps)
            h = -new.logp + 0.5 * float(np.dot(new.v, new.p))
            if not np.isfinite(h):
                h = np.inf
            delta = h0 - h
            return _Tree(
                new, new, new, delta if np.isfinite(delta) else -np.inf, new.p.copy(),
                min(1.0, float(np.exp(min(delta, 0.0)))) if np.isfinite(delta) else 0.0, 1,
                divergent=(h - h0) > MAX_DELTA_H,
            )
        first = self.build(z, direction, depth - 1, h0)
        if first.divergent or first.turning:
            return first
        edge = first.plus if direction > 0 else first.minus
        second = self.build(edge, direction, depth - 1, h0)
        tree = self._merge(first, second, direction, uniform=True)
        tree.divergent = second.divergent
        tree.turning = second.turning or tree.turning
        return tree

    def _merge(self, old: _Tree, new: _Tree, direction: int, *, uniform: bool) -> _Tree:
        log_w = float(np.logaddexp(old.log_w, new.log_w))
        # Within a subtree: multinomial (uniform) choice; at the top level: biased toward the new half.
        log_accept = new.log_w - log_w if uniform else new.log_w - old.log_w
        proposal = new.proposal if np.log(self.rng.uniform()) < log_accept else old.proposal
        a, b = (old, new) if direction > 0 else (new, old)  # a on the minus side, b on the plus side
        rho = a.rho + b.rho
        turning = not (
            self._criterion(a.minus.v, b.plus.v, rho)
            and self._criterion(a.minus.v, b.minus.v, a.rho + b.minus.p)
            and self._criterion(a.plus.v, b.plus.v, b.rho + a.plus.p)
        )
        return _Tree(
            a.minus, b.plus, proposal, log_w, rho,
            old.sum_accept + new.sum_accept, old.n_leapfrog + new.n_leapfrog, turning=turning,
        )

    def transition(self, z: _Point) -> tuple[_Point, float, bool, int, int]:
        """One NUTS draw: (next point, mean acceptance statistic, divergent, depth, leapfrogs)."""
        p0 = self.rng.standard_normal(z.x.shape) / np.sqrt(self.inv_mass)
        start = _Point(z.x, p0, z.grad, z.logp, self.inv_mass * p0)
        h0 = -z.logp + self.kinetic(p0)
        tree = _Tree(start, start, start, 0.0, p0.copy(), 0.0, 0)
        sum_accept, n_leapfrog, divergent, depth = 0.0, 0, False, 0
        while depth < self.max_depth:
            direction = 1 if self.rng.uniform() < 0.5 else -1
            sub = self.build(tree.plus if direction > 0 else tree.minus, direction, depth, h0)
            sum_accept += sub.sum_accept
            n_leapfrog += sub.n_leapfrog
            depth += 1
            if sub.divergent:
                divergent = True
                break
            if sub.turning:
                break
            tree = self._merge(tree, sub, direction, uniform=False)
            if tree.turning:
                break
        return tree.proposal, sum_accept / max(n_leapfrog, 1), divergent, depth, n_leapfrog

    def reasonable_step(self, z: _Point) -> float:
        """Double or halve the step until one leapfrog's acceptance crosses 1/2 (Hoffman & Gelman)."""
        eps = self.eps
        p0 = self.rng.standard_normal(z.x.shape) / np.sqrt(self.inv_mass)
        start = _Point(z.x, p0, z.grad, z.logp)
        h0 = -z.logp + self.kinetic(p0)

        def log_ratio(e: float) -> float:
            new = self.leapfrog(start, e)
            d = h0 - (-new.logp + self.kinetic(new.p))
            return d if np.isfinite(d) else -np.inf

        direction = 1.0 if log_ratio(eps) > np.log(0.5) else -1.0
        for _ in range(50):
            if (log_ratio(eps) > np.log(0.5)) != (direction > 0):
                break
            eps = eps * 2.0 if direction > 0 else eps / 2.0
        return eps


def _windows(warmup: int) -> list[int]:
    """Iterations (0-based) at which a mass-matrix window closes, Stan's schedule."""
    if warmup < 20:
        return []
    init, term, base = (75, 50, 25) if warmup >= 150 else (int(0.15 * warmup), int(0.1 * warmup), 0)
    if base == 0:
        return [warmup - term - 1]
    ends, start, size = [], init, base
    while True:
        end = start + size
        if end + 2 * size > warmup - term:  # the next window would not fit: stretch this one
            ends.append(warmup - term - 1)
            return ends
        ends.append(end - 1)
        start, size = end, size * 2


def sample_chain(
    logp_grad: LogpGrad,
    x0: np.ndarray,
    *,
    seed: int | tuple[int, ...],
    warmup: int = 1000,
    draws: int = 1000,
    target_accept: float = 0.95,
    max_depth: int = 10,
) -> ChainResult:
    return run_chain(_Sampler(logp_grad, np.random.default_rng(seed), max_depth), x0, warmup, draws, target_accept)


def run_chain(s: _Sampler, x0: np.ndarray, warmup: int, draws: int, target_accept: float) -> ChainResult:
    """Warm-up (dual averaging, windowed diagonal metric) then sampling with sampler ``s``;
    ``s.transition`` may be the pure-Python tree or a compiled one with the same contract."""
    s.inv_mass = np.ones_like(x0)
    logp, grad = s.f(x0)
    z = _Point(x0.copy(), np.zeros_like(x0), grad, logp)
    s.eps = s.reasonable_step(z)
    window_ends = set(_windows(warmup))
    window_start = 75 if warmup >= 150 else int(0.15 * warmup)
    term_start = warmup - (50 if warmup >= 150 else int(0.1 * warmup))
    gamma, t0, kappa = 0.05, 10.0, 0.75
    mu, h_bar, log_eps_bar, m = np.log(10 * s.eps), 0.0, 0.0, 0
    window: list[np.ndarray] = []
    out = np.empty((draws, x0.size))
    divergences, depth_sum, leapfrogs = 0, 0, 0
    for it in range(warmup + draws):
        z, accept, divergent, depth, n_lf = s.transition(z)
        leapfrogs += n_lf
        if it < warmup:
            m += 1
            h_bar += ((target_accept - accept) - h_bar) / (m + t0)
            log_eps = mu - np.sqrt(m) / gamma * h_bar
            w = m**-kappa
            log_eps_bar = w * log_eps + (1 - w) * log_eps_bar
            s.eps = float(np.exp(log_eps))
            if window_start <= it < term_start:
                window.append(z.x)
            if it in window_ends and len(window) > 1:
                n = len(window)
                var = np.var(np.asarray(window), axis=0, ddof=1)
                # Stan's regularisation toward unit scale for short windows.
                s.inv_mass = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))
                window = []
                s.eps = s.reasonable_step(z)
                mu, h_bar, log_eps_bar, m = np.log(10 * s.eps), 0.0, 0.0, 0
            if it == warmup - 1:
                s.eps = float(np.exp(log_eps_bar))
        else:
            out[it - warmup] = z.x
            divergences += int(divergent)
            depth_sum += depth
    return ChainResult(out, s.eps, s.inv_mass, divergences, depth_sum / max(draws, 1), leapfrogs)
