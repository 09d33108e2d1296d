"""The NUTS hot path compiled with numba, specialised to the Laplace-whitened 1PL posterior.

Same sampler as ``benchfill.irt.nuts`` (Stan's multinomial NUTS: biased progressive sampling
at the top, uniform multinomial within subtrees, the generalised U-turn criterion with the two
extra checks across merged subtrees, divergence at an energy error of 1000), but one leapfrog
costs a few compiled passes over the models x items matrix instead of ~20 numpy calls, and the
tree is built iteratively (a stack of one pending left subtree per level), so no Python runs
between gradient evaluations. The 1PL needs no transcendental per matrix element in the
gradient: sigmoid(theta_j - b_i) = 1 / (1 + exp(b_i) exp(-theta_j)); the log density takes one
log per element (two with a guessing floor).

Imported only by the NUTS engine, so nothing else pays numba's import; ``cache=True`` keeps the
compiled code on disk, so only the first run on a machine pays the compilation.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

MAX_DELTA_H = 1000.0  # energy error that marks a divergent transition, as in Stan
_FLAGS = {"reassoc", "contract", "nsz"}  # vectorise the sums; keep inf/nan semantics exact
# error_model="numpy": a float division must not test for zero (Python's ZeroDivisionError),
# or no loop with a division vectorises.
_JIT = {"cache": True, "error_model": "numpy"}

# fdlibm's log (e_log.c, error < 1 ulp), written so the loop vectorises: numba's math.log is a
# scalar libm call, which alone cost more than the rest of a gradient.
_LG1, _LG2, _LG3 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01
_LG4, _LG5 = 2.222219843214978396e-01, 1.818357216161805012e-01
_LG6, _LG7 = 1.531383769920937332e-01, 1.479819860511658591e-01
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_MANTISSA, _ONE_BITS, _TWO52_BITS = 0x000FFFFFFFFFFFFF, 0x3FF0000000000000, 0x4330000000000000
_TWO52_PLUS_BIAS = 4503599627371519.0  # 2^52 + 1023


@nb.njit(**_JIT)
def log_into(x, out, mant, expo):
    """out = log(x) elementwise (mant, expo: scratch arrays of x's size)."""
    n = x.size
    xb, mb, eb = x.view(np.int64), mant.view(np.int64), expo.view(np.int64)
    lo, hi = 0x7FF, 0
    for i in range(n):
        bits = xb[i]
        mb[i] = (bits & _MANTISSA) | _ONE_BITS  # 1 <= mantissa < 2
        top = bits >> 52  # sign and exponent
        eb[i] = (top & 0x7FF) | _TWO52_BITS  # the exponent as a double, offset by 2^52
        lo = min(lo, top)
        hi = max(hi, top)
    for i in range(n):
        m = mant[i]
        k = expo[i] - _TWO52_PLUS_BIAS
        big = m > 1.4142135623730951  # reduce to sqrt(1/2) <= m < sqrt(2)
        m = m * 0.5 if big else m
        k = k + 1.0 if big else k
        f = m - 1.0
        s = f / (2.0 + f)
        z = s * s
        w = z * z
        r = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7))) + w * (_LG2 + w * (_LG4 + w * _LG6))
        hfsq = 0.5 * f * f
        out[i] = k * _LN2_HI + (f - (hfsq - (s * (hfsq + r) + k * _LN2_LO)))
    if lo < 1 or hi > 0x7FE:  # zero, subnormal, negative, inf or nan somewhere: libm for those
        for i in range(n):
            top = xb[i] >> 52
            if top < 1 or top > 0x7FE:
                out[i] = math.log(x[i]) if x[i] >= 0.0 else math.nan

# data = (mode_theta, mode_b, chol_inv, wd, inv_sqrt_d, trials, correct, wrong, chance,
#         log1m_chance, correct_model, correct_item, wrong_model, wrong_item, guessing)
# chol_inv: inverse Cholesky factor of the m x m Schur complement; wd = W / d_b (m x n).


@nb.njit(fastmath=_FLAGS, **_JIT)
def logp_grad(y, grad, data):
    """Log posterior at x(y) = mode + L^-T y and its gradient in y (written into ``grad``)."""
    (mode_theta, mode_b, chol_inv, wd, inv_sqrt_d, trials, correct, wrong, chance,
     log1m_chance, correct_model, correct_item, wrong_model, wrong_item, guessing) = data
    m, n = wd.shape
    theta = np.empty(m)
    d_theta = np.zeros(m)
    for k in range(m):
        for j in range(m):
            d_theta[j] += chol_inv[k, j] * y[k]
    for j in range(m):
        theta[j] = mode_theta[j] + d_theta[j]
    b = np.empty(n)
    for i in range(n):
        b[i] = mode_b[i] + inv_sqrt_d[i] * y[m + i]
    for j in range(m):
        dj = d_theta[j]
        row = wd[j]
        for i in range(n):
            b[i] += dj * row[i]
    eb = np.exp(b)
    col = np.zeros(n)  # d ll / d b_i, negated
    g_theta = np.empty(m)
    ll = 0.0
    u = np.empty(n)
    p = np.empty(n)
    log_u = np.empty(n)
    log_p = np.empty(n)
    s1 = np.empty(n)
    s2 = np.empty(n)
    for j in range(m):
        ea = math.exp(-theta[j])
        t_row, c_row = trials[j], correct[j]
        acc_s, acc_log, acc_logp = 0.0, 0.0, 0.0
        if not guessing:
            for i in range(n):
                u[i] = 1.0 + ea * eb[i]
                ts = t_row[i] / u[i]
                acc_s += ts
                col[i] += ts
            log_into(u, log_u, s1, s2)
            for i in range(n):
                acc_log += t_row[i] * log_u[i]
            g_theta[j] = correct_model[j] - acc_s - theta[j]
            ll -= acc_log
        else:
            w_row = wrong[j]
            for i in range(n):
                u[i] = 1.0 + ea * eb[i]
                s = 1.0 / u[i]
                p[i] = chance[i] + (1.0 - chance[i]) * s
                r = (c_row[i] / p[i] - t_row[i]) * s
                acc_s += r
                col[i] -= r
            log_into(u, log_u, s1, s2)
            log_into(p, log_p, s1, s2)
            for i in range(n):
                acc_log += w_row[i] * log_u[i]
                # zero counts add nothing, even where p underflowed to 0 (0 * -inf would be nan)
                acc_logp += c_row[i] * log_p[i] if c_row[i] > 0.0 else 0.0
            g_theta[j] = acc_s - theta[j]
            ll += acc_logp - acc_log
    lin = 0.0
    for j in range(m):
        lin -= wrong_model[j] * theta[j]
    for i in range(n):
        lin += wrong_item[i] * (b[i] + log1m_chance[i])
    prior = 0.0
    for j in range(m):
        prior += theta[j] * theta[j]
    for i in range(n):
        prior += b[i] * b[i]
    # Gradient in y: g_b scaled by 1/sqrt(d_b); g_theta + W (g_b / d_b) through L^-1.
    for i in range(n):
        g_b = col[i] - correct_item[i] - b[i] if not guessing else col[i] - b[i]
        col[i] = g_b
        grad[m + i] = inv_sqrt_d[i] * g_b
    for j in range(m):
        row = wd[j]
        acc = 0.0
        for i in range(n):
            acc += row[i] * col[i]
        g_theta[j] += acc
    for k in range(m):
        acc = 0.0
        for j in range(m):
            acc += chol_inv[k, j] * g_theta[j]
        grad[k] = acc
    return ll + lin - 0.5 * prior


@nb.njit(**_JIT)
def seed_generator(value):
    np.random.seed(value)


@nb.njit(fastmath=_FLAGS, **_JIT)
def _no_uturn(v_beg, v_end, rho):
    a, b = 0.0, 0.0
    for k in range(rho.size):
        a += v_beg[k] * rho[k]
        b += v_end[k] * rho[k]
    return a > 0.0 and b > 0.0


@nb.njit(fastmath=_FLAGS, **_JIT)
def _merge_ok(p_beg_a, v_beg_a, p_end_a, v_end_a, rho_a, p_beg_b, v_beg_b, v_end_b, rho_b, rho_ab):
    """The U-turn checks of Stan when tree b follows tree a in the build direction; rho_ab = rho_a + rho_b."""
    if not _no_uturn(v_beg_a, v_end_b, rho_ab):
        return False
    if not _no_uturn(v_beg_a, v_beg_b, rho_a + p_beg_b):
        return False
    return _no_uturn(v_end_a, v_end_b, rho_b + p_end_a)


@nb.njit(fastmath=_FLAGS, **_JIT)
def transition(x, g, lp, eps, inv_mass, max_depth, data):
    """One NUTS draw from state (x, g = grad, lp). Returns (x', g', lp', accept stat, divergent,
    depth, leapfrogs); x' is a fresh array."""
    dim = x.size
    p0 = np.random.standard_normal(dim) / np.sqrt(inv_mass)
    h0 = -lp + 0.5 * np.sum(inv_mass * p0 * p0)
    # Trajectory ends: index 0 = minus, 1 = plus.
    ex = np.empty((2, dim))
    ep = np.empty((2, dim))
    ev = np.empty((2, dim))
    eg = np.empty((2, dim))
    elp = np.array([lp, lp])
    for s in range(2):
        ex[s] = x
        ep[s] = p0
        ev[s] = inv_mass * p0
        eg[s] = g
    rho = p0.copy()
    sample_x, sample_g, sample_lp = x.copy(), g.copy(), lp
    log_w = 0.0
    # Per-level storage of the pending first half of a subtree (oriented in the build direction).
    L = max_depth + 1
    st_rho = np.empty((L, dim))
    st_pb = np.empty((L, dim))
    st_vb = np.empty((L, dim))
    st_pe = np.empty((L, dim))
    st_ve = np.empty((L, dim))
    st_x = np.empty((L, dim))
    st_g = np.empty((L, dim))
    st_lp = np.empty(L)
    st_w = np.empty(L)
    # The subtree being assembled.
    c_rho = np.empty(dim)
    c_pb = np.empty(dim)
    c_vb = np.empty(dim)
    c_x = np.empty(dim)
    c_g = np.empty(dim)
    zx, zp, zg = np.empty(dim), np.empty(dim), np.empty(dim)
    sum_accept, n_leapfrog, divergent, depth = 0.0, 0, False, 0
    while depth < max_depth:
        side = 1 if np.random.random() < 0.5 else 0
        sign = 1.0 if side == 1 else -1.0
        step = sign * eps
        zx[:] = ex[side]
        zp[:] = ep[side]
        zg[:] = eg[side]
        zlp = elp[side]
        valid = True
        c_w, c_lp = 0.0, 0.0
        for k in range(1 << depth):
            # Leapfrog, in place on the edge state z.
            for q in range(dim):
                zp[q] += 0.5 * step * zg[q]
                zx[q] += step * inv_mass[q] * zp[q]
            zlp = logp_grad(zx, zg, data)
            kin = 0.0
            for q in range(dim):
                zp[q] += 0.5 * step * zg[q]
                kin += inv_mass[q] * zp[q] * zp[q]
            n_leapfrog += 1
            h = -zlp + 0.5 * kin
            if math.isnan(h):
                h = math.inf
            delta = h0 - h
            sum_accept += 1.0 if delta > 0.0 else math.exp(delta)
            if -delta > MAX_DELTA_H:
                divergent = True
                valid = False
                break
            # A one-state tree; its end (p, v) is the edge z itself.
            c_w = delta
            c_rho[:] = zp
            c_pb[:] = zp
            for q in range(dim):
                c_vb[q] = inv_mass[q] * zp[q]
            c_x[:] = zx
            c_g[:] = zg
            c_lp = zlp
            level, kk = 0, k
            while kk & 1:  # merge with the pending first half at this level
                w_tot = np.logaddexp(st_w[level], c_w)
                # Within a subtree: uniform multinomial choice between the two halves.
                if not (np.random.random() < math.exp(c_w - w_tot)):
                    c_x[:] = st_x[level]
                    c_g[:] = st_g[level]
                    c_lp = st_lp[level]
                rho_ab = st_rho[level] + c_rho
                ok = _merge_ok(st_pb[level], st_vb[level], st_pe[level], st_ve[level], st_rho[level],
                               c_pb, c_vb, inv_mass * zp, c_rho, rho_ab)
                c_rho[:] = rho_ab
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
            if level < depth:  # first half of the next level up: park it
                st_rho[level] = c_rho
                st_pb[level] = c_pb
                st_vb[level] = c_vb
                st_pe[level] = zp
                for q in range(dim):
                    st_ve[level, q] = inv_mass[q] * zp[q]
                st_x[level] = c_x
                st_g[level] = c_g
                st_lp[level] = c_lp
                st_w[level] = c_w
        if not valid:
            break
        depth += 1
        # Top level: biased progressive sampling toward the new subtree.
        if c_w > log_w or np.random.random() < math.exp(c_w - log_w):
            sample_x[:] = c_x
            sample_g[:] = c_g
            sample_lp = c_lp
        log_w = np.logaddexp(log_w, c_w)
        # The old trajectory, oriented in the build direction: beg = far end, end = near end.
        far, near = 1 - side, side
        rho_ab = rho + c_rho
        zv = inv_mass * zp
        ok = _merge_ok(ep[far], ev[far], ep[near], ev[near], rho, c_pb, c_vb, zv, c_rho, rho_ab)
        rho = rho_ab
        ex[side] = zx
        ep[side] = zp
        ev[side] = zv
        eg[side] = zg
        elp[side] = zlp
        if not ok:
            break
    return sample_x, sample_g, sample_lp, sum_accept / max(n_leapfrog, 1), divergent, depth, n_leapfrog


def warm_up(data: tuple, dim: int) -> None:
    """Compile (or load from the on-disk cache) the kernels for ``data``'s types, e.g. before forking."""
    y, g = np.zeros(dim), np.empty(dim)
    transition(y, g, logp_grad(y, g, data), 0.1, np.ones(dim), 0, data)


def _python_logp_grad(data: tuple):
    def f(y: np.ndarray) -> tuple[float, np.ndarray]:
        g = np.empty_like(y)
        return float(logp_grad(y, g, data)), g

    return f


def sample_chain_compiled(
    data: tuple,
    x0: np.ndarray,
    *,
    seed: int | tuple[int, ...],
    warmup: int = 1000,
    draws: int = 1000,
    target_accept: float = 0.95,
    max_depth: int = 10,
):
    """``nuts.sample_chain`` for the whitened 1PL posterior ``data`` with the compiled tree."""
    from benchfill.irt.nuts import _Point, _Sampler, run_chain

    class _Compiled(_Sampler):
        def transition(self, z: _Point) -> tuple[_Point, float, bool, int, int]:
            x, g, lp, accept, divergent, depth, n_lf = transition(
                z.x, z.grad, z.logp, self.eps, self.inv_mass, self.max_depth, data
            )
            return _Point(x, None, g, lp), accept, divergent, depth, n_lf

    rng = np.random.default_rng(seed)
    seed_generator(int(rng.integers(2**31)))  # numba's own generator drives the tree; seeded from ours
    return run_chain(_Compiled(_python_logp_grad(data), rng, max_depth), x0, warmup, draws, target_accept)
