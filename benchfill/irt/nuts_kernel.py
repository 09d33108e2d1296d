"""The log density of the Laplace-whitened 1PL posterior, compiled with numba for the NUTS tree.

With it the tree of ``benchfill.irt.nuts`` runs compiled end to end: one leapfrog costs a few
compiled passes over the models x items matrix instead of ~20 numpy calls and no Python runs
between gradient evaluations. The 1PL needs no transcendental per matrix element in the
gradient: sigmoid(theta_j - b_i) = 1 / (1 + exp(b_i) exp(-theta_j)); the log density takes one
log per element (two with a guessing floor).

Imported only by the NUTS engine, so nothing else pays numba's import; ``cache=True`` keeps the
compiled code on disk, so only the first run on a machine pays the compilation.
"""

from __future__ import annotations

import math

import numpy as np

from benchfill.irt.nuts import tree_for
from benchfill.jit import njit

_FLAGS = {"reassoc", "contract", "nsz"}  # vectorise the sums; keep inf/nan semantics exact
# error_model="numpy": a float division must not test for zero (Python's ZeroDivisionError),
# or no loop with a division vectorises.
_JIT = {"cache": True, "error_model": "numpy"}

# fdlibm's log (e_log.c, error < 1 ulp), written so the loop vectorises: numba's math.log is a
# scalar libm call, which alone cost more than the rest of a gradient. Measured on the paper's
# 1,299 x 12 x 4 matrix, CPU per leapfrog: 26 us with it vs 61 us with math.log; with a guessing
# floor of 0.25, 39 us vs 117 us (docs/nuts.md).
_LG1, _LG2, _LG3 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01
_LG4, _LG5 = 2.222219843214978396e-01, 1.818357216161805012e-01
_LG6, _LG7 = 1.531383769920937332e-01, 1.479819860511658591e-01
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_MANTISSA, _ONE_BITS, _TWO52_BITS = 0x000FFFFFFFFFFFFF, 0x3FF0000000000000, 0x4330000000000000
_TWO52_PLUS_BIAS = 4503599627371519.0  # 2^52 + 1023


@njit(**_JIT)
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
#         log1m_chance, correct_model, correct_item, wrong_model, wrong_item, guessing, b_mean, b_prec)
# b_mean, b_prec: the difficulties' prior N(b_mean, 1 / b_prec) (N(0, 1), or the hierarchical fit's estimate).
# chol_inv: inverse Cholesky factor of the m x m Schur complement; wd = W / d_b (m x n).


@njit(fastmath=_FLAGS, **_JIT)
def logp_grad(y, grad, data):
    """Log posterior at x(y) = mode + L^-T y and its gradient in y (written into ``grad``)."""
    (mode_theta, mode_b, chol_inv, wd, inv_sqrt_d, trials, correct, wrong, chance,
     log1m_chance, correct_model, correct_item, wrong_model, wrong_item, guessing, b_mean, b_prec) = data
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
        d = b[i] - b_mean
        prior += b_prec * d * d
    # Gradient in y: g_b scaled by 1/sqrt(d_b); g_theta + W (g_b / d_b) through L^-1.
    for i in range(n):
        g_b = (col[i] - correct_item[i] if not guessing else col[i]) - b_prec * (b[i] - b_mean)
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


# The NUTS tree with this density: the whole trajectory compiled, no Python between leapfrogs.
transition = tree_for(logp_grad, compiled=True)


def warm_up(data: tuple, dim: int) -> None:
    """Compile (or load from numba's on-disk cache) the density and the tree for ``data``'s types,
    once in the parent process rather than once per chain."""
    y, g = np.zeros(dim), np.empty(dim)
    transition(y, g, logp_grad(y, g, data), 0.1, np.ones(dim), 0, data, np.random.default_rng(0))
