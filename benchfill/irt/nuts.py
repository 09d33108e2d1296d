"""A No-U-Turn sampler (Stan's variant) for smooth log densities ``logp_grad(y, grad, data)``.

Multinomial sampling over the trajectory with biased progressive sampling at the top level,
uniform multinomial sampling within subtrees, the generalised U-turn criterion with Stan's two
extra checks across merged subtrees, divergence at an energy error of 1000, a diagonal mass
matrix learned in Stan's expanding windows and dual-averaging step-size adaptation (Hoffman &
Gelman 2014; Betancourt 2017). One chain per call; chains run in parallel processes.

There is one tree builder, ``transition``. It is iterative (a stack of one pending first half
per level) and written in the subset of numpy that numba compiles, so where the log density is
itself a numba function (the 1PL posterior, ``benchfill.irt.nuts_kernel``) the whole trajectory runs
compiled, with no Python between gradient evaluations; any other density (the 2PL posterior, a
test's Gaussian) runs the same code as plain Python. ``logp_grad(y, grad, data)`` writes the
gradient into ``grad`` and returns the log density.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchfill.jit import njit

MAX_DELTA_H = 1000.0  # energy error that marks a divergent transition, as in Stan
LogpGrad = Callable[[np.ndarray, np.ndarray, Any], float]


@dataclass
class ChainResult:
    draws: np.ndarray  # (draws, dim)
    step_size: float
    inv_mass: np.ndarray
    divergences: int  # after warm-up
    mean_tree_depth: float
    n_leapfrog: int


# cache=True keeps the machine code on disk, so only a machine's first run pays the compile;
# error_model="numpy": a division does not test for zero, so loops with one vectorise.
_jit = njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz"})


# Small vector kernels, compiled: the compiled tree inlines them and allocates nothing per leapfrog;
# the Python tree calls them as it would numpy.
@_jit
def _dot(a, b):
    # A loop, not np.dot: numba's np.dot calls BLAS through pointers that keep a function off the cache.
    acc = 0.0
    for k in range(a.size):
        acc += a[k] * b[k]
    return acc


@_jit
def _axpy(y, a, x):
    """y += a * x."""
    for k in range(y.size):
        y[k] += a * x[k]


@_jit
def _drift(x, step, inv_mass, p):
    """x += step * M^-1 p."""
    for k in range(x.size):
        x[k] += step * inv_mass[k] * p[k]


@_jit
def _velocity(v, inv_mass, p):
    """v = M^-1 p; returns p . M^-1 p (twice the kinetic energy)."""
    acc = 0.0
    for k in range(v.size):
        v[k] = inv_mass[k] * p[k]
        acc += v[k] * p[k]
    return acc


@_jit
def _no_uturn(v_beg, v_end, r1, r2):
    """True while the trajectory from v_beg to v_end with momentum sum r1 + r2 has not turned back."""
    a, b = 0.0, 0.0
    for k in range(r1.size):
        r = r1[k] + r2[k]
        a += v_beg[k] * r
        b += v_end[k] * r
    return a > 0.0 and b > 0.0


@_jit
def _merge_ok(p_beg_a, v_beg_a, p_end_a, v_end_a, rho_a, p_beg_b, v_beg_b, v_end_b, rho_b):
    """Stan's U-turn checks when tree b follows tree a in the build direction: across the merged
    tree, and across each half extended by the nearest state of the other."""
    return (
        _no_uturn(v_beg_a, v_end_b, rho_a, rho_b)
        and _no_uturn(v_beg_a, v_beg_b, rho_a, p_beg_b)
        and _no_uturn(v_end_a, v_end_b, rho_b, p_end_a)
    )


def _transition(x, g, lp, eps, inv_mass, max_depth, data, rng):
    """One NUTS draw from state (x, g = gradient, lp). Returns (x', g', lp', mean acceptance
    statistic, divergent, depth, leapfrogs); x' and g' are fresh arrays. ``log_density`` is the
    global that ``tree_for`` binds."""
    dim = x.size
    p0 = rng.standard_normal(dim) / np.sqrt(inv_mass)
    v0 = np.empty(dim)
    h0 = -lp + 0.5 * _velocity(v0, inv_mass, p0)
    # The trajectory's two ends: row 0 = minus, row 1 = plus (position, momentum, velocity, gradient).
    ex, ep, ev, eg = np.empty((2, dim)), np.empty((2, dim)), np.empty((2, dim)), np.empty((2, dim))
    elp = np.array([lp, lp])
    for s in range(2):
        ex[s] = x
        ep[s] = p0
        ev[s] = v0
        eg[s] = g
    rho = p0.copy()
    sample_x, sample_g, sample_lp = x.copy(), g.copy(), lp
    log_w = 0.0
    # Per level, the pending first half of a subtree (oriented in the build direction): its momentum
    # sum, the momenta and velocities at both ends, its proposal and its log weight.
    n_levels = max_depth + 1
    st_rho, st_pb, st_vb = np.empty((n_levels, dim)), np.empty((n_levels, dim)), np.empty((n_levels, dim))
    st_pe, st_ve = np.empty((n_levels, dim)), np.empty((n_levels, dim))
    st_x, st_g = np.empty((n_levels, dim)), np.empty((n_levels, dim))
    st_lp, st_w = np.empty(n_levels), np.empty(n_levels)
    # The subtree being assembled, and the edge state z that the leapfrogs move.
    c_rho, c_pb, c_vb, c_x, c_g = np.empty(dim), np.empty(dim), np.empty(dim), np.empty(dim), np.empty(dim)
    zx, zp, zg, zv = np.empty(dim), np.empty(dim), np.empty(dim), np.empty(dim)
    sum_accept, n_leapfrog, divergent, depth = 0.0, 0, False, 0
    while depth < max_depth:
        side = 1 if rng.random() < 0.5 else 0
        step = eps if side == 1 else -eps
        zx[:] = ex[side]
        zp[:] = ep[side]
        zg[:] = eg[side]
        zlp = elp[side]
        valid = True
        c_w, c_lp = 0.0, 0.0
        for k in range(1 << depth):
            _axpy(zp, 0.5 * step, zg)
            _drift(zx, step, inv_mass, zp)
            zlp = log_density(zx, zg, data)  # noqa: F821 (bound by tree_for)
            _axpy(zp, 0.5 * step, zg)
            n_leapfrog += 1
            h = -zlp + 0.5 * _velocity(zv, inv_mass, zp)
            if math.isnan(h):
                h = math.inf
            delta = h0 - h
            sum_accept += 1.0 if delta > 0.0 else math.exp(delta)
            if -delta > MAX_DELTA_H:
                divergent = True
                valid = False
                break
            # A one-state tree: the edge z itself.
            c_w, c_lp = delta, zlp
            c_rho[:] = zp
            c_pb[:] = zp
            c_vb[:] = zv
            c_x[:] = zx
            c_g[:] = zg
            level, kk = 0, k
            while kk & 1:  # the second half of a subtree at this level: merge with the pending first
                w_tot = np.logaddexp(st_w[level], c_w)
                # Within a subtree: uniform multinomial choice between the two halves.
                if not (rng.random() < math.exp(c_w - w_tot)):
                    c_x[:] = st_x[level]
                    c_g[:] = st_g[level]
                    c_lp = st_lp[level]
                ok = _merge_ok(st_pb[level], st_vb[level], st_pe[level], st_ve[level], st_rho[level],
                               c_pb, c_vb, zv, c_rho)
                c_rho += st_rho[level]
                c_pb[:] = st_pb[level]
                c_vb[:] = st_vb[level]
                c_w = w_tot
                if not ok:
                    valid = False
                    break
                kk >>= 1
                level += 1
            if not valid:
                break
            if level < depth:  # the first half of a subtree one level up: park it
                st_rho[level] = c_rho
                st_pb[level] = c_pb
                st_vb[level] = c_vb
                st_pe[level] = zp
                st_ve[level] = zv
                st_x[level] = c_x
                st_g[level] = c_g
                st_lp[level] = c_lp
                st_w[level] = c_w
        if not valid:
            break
        depth += 1
        # Top level: biased progressive sampling toward the new subtree.
        if c_w > log_w or rng.random() < math.exp(c_w - log_w):
            sample_x[:] = c_x
            sample_g[:] = c_g
            sample_lp = c_lp
        log_w = np.logaddexp(log_w, c_w)
        # The old trajectory, oriented in the build direction: beg = far end, end = near end.
        far, near = 1 - side, side
        ok = _merge_ok(ep[far], ev[far], ep[near], ev[near], rho, c_pb, c_vb, zv, c_rho)
        rho += c_rho
        ex[side] = zx
        ep[side] = zp
        ev[side] = zv
        eg[side] = zg
        elp[side] = zlp
        if not ok:
            break
    return sample_x, sample_g, sample_lp, sum_accept / max(n_leapfrog, 1), divergent, depth, n_leapfrog


def tree_for(logp_grad: LogpGrad, *, compiled: bool = False) -> Callable:
    """The tree with ``logp_grad`` as its log density, as Python or compiled by numba (then
    ``logp_grad`` must be a numba function). The density is bound as a global of a copy of
    ``_transition``, not passed as an argument: numba cannot keep a function that takes another
    function on its disk cache, and inlining it instead costs a sixth of the speed. The copy is
    named after the density, so each compiled density gets cache entries of its own."""
    name = f"transition_{logp_grad.__module__.replace('.', '_')}_{logp_grad.__name__}"
    code = _transition.__code__.replace(co_name=name, co_qualname=name)
    tree = types.FunctionType(code, {**globals(), "log_density": logp_grad}, name)
    return _jit(tree) if compiled else tree


def _reasonable_step(logp_grad, data, x, g, lp, eps, inv_mass, rng) -> float:
    """Double or halve the step until one leapfrog's acceptance crosses 1/2 (Hoffman & Gelman)."""
    p0 = rng.standard_normal(x.size) / np.sqrt(inv_mass)
    h0 = -lp + 0.5 * float(np.dot(inv_mass * p0, p0))

    def log_ratio(e: float) -> float:
        p = p0 + 0.5 * e * g
        g1 = np.empty_like(x)
        with np.errstate(all="ignore"):
            lp1 = logp_grad(x + e * inv_mass * p, g1, data)
            p += 0.5 * e * g1
            d = h0 - (-lp1 + 0.5 * float(np.dot(inv_mass * p, p)))
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
    data: Any = None,
    tree: Callable | None = None,
    seed: int | tuple[int, ...],
    warmup: int = 1000,
    draws: int = 1000,
    target_accept: float = 0.95,
    max_depth: int = 10,
    on_step: Callable[[int], None] | None = None,
) -> ChainResult:
    """Warm-up (dual averaging, windowed diagonal metric), then ``draws`` draws of one chain.

    ``tree``: ``tree_for(logp_grad, compiled=True)``, made once where the density is defined (so
    that numba's cache finds it); by default the tree runs as Python. ``on_step(n)``: told every 10
    iterations how many are done (a chain on a large benchmark takes minutes).
    """
    tree = tree or tree_for(logp_grad)
    rng = np.random.default_rng(seed)
    x = np.asarray(x0, dtype=float).copy()
    g = np.empty_like(x)
    lp = float(logp_grad(x, g, data))
    inv_mass = np.ones_like(x)
    eps = _reasonable_step(logp_grad, data, x, g, lp, 1.0, inv_mass, rng)
    window_ends = set(_windows(warmup))
    window_start = 75 if warmup >= 150 else int(0.15 * warmup)
    term_start = warmup - (50 if warmup >= 150 else int(0.1 * warmup))
    gamma, t0, kappa = 0.05, 10.0, 0.75
    mu, h_bar, log_eps_bar, m = np.log(10 * eps), 0.0, 0.0, 0
    window: list[np.ndarray] = []
    out = np.empty((draws, x.size))
    divergences, depth_sum, leapfrogs = 0, 0, 0
    for it in range(warmup + draws):
        with np.errstate(all="ignore"):
            x, g, lp, accept, divergent, depth, n_lf = tree(x, g, lp, eps, inv_mass, max_depth, data, rng)
        leapfrogs += n_lf
        if on_step is not None and it % 10 == 9:
            on_step(it + 1)
        if it < warmup:
            m += 1
            h_bar += ((target_accept - accept) - h_bar) / (m + t0)
            log_eps = mu - np.sqrt(m) / gamma * h_bar
            w = m**-kappa
            log_eps_bar = w * log_eps + (1 - w) * log_eps_bar
            eps = float(np.exp(log_eps))
            if window_start <= it < term_start:
                window.append(x)
            if it in window_ends and len(window) > 1:
                n = len(window)
                var = np.var(np.asarray(window), axis=0, ddof=1)
                # Stan's regularisation toward unit scale for short windows.
                inv_mass = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))
                window = []
                eps = _reasonable_step(logp_grad, data, x, g, lp, eps, inv_mass, rng)
                mu, h_bar, log_eps_bar, m = np.log(10 * eps), 0.0, 0.0, 0
            if it == warmup - 1:
                eps = float(np.exp(log_eps_bar))
        else:
            out[it - warmup] = x
            divergences += int(divergent)
            depth_sum += depth
    return ChainResult(out, eps, inv_mass, divergences, depth_sum / max(draws, 1), leapfrogs)
