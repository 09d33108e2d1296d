"""The IRT log posterior: binomial likelihood with a guessing floor and Gaussian priors.

P(Y_ji = 1) = g_i + (1 - g_i) * sigmoid(eta_ji), with eta = theta_j - b_i (1PL) or
a_i * (theta_j - b_i) (2PL). Priors: theta_j ~ N(0, 1), b_i ~ N(0, 1) and, for 2PL,
log a_i ~ N(0, LOG_DISCRIMINATION_SD^2) (a lognormal prior on the discrimination).
Pairs with ``trials == 0`` contribute nothing.

Everything here works on whole matrices at once: one call costs a few passes over the
models x items arrays, which is what both the MAP and the NUTS engines spend their time on.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from benchfill.matrix import ResponseMatrix

# A lognormal(0, 0.5) prior keeps discriminations within about [0.37, 2.7] at two sd:
# wide enough for real items, tight enough that sparse 2PL fits do not run off to a -> inf.
LOG_DISCRIMINATION_SD = 0.5


def pair_terms(
    exp_neg_eta: np.ndarray,
    neg_eta: np.ndarray,
    correct: np.ndarray,
    trials: np.ndarray,
    chance: np.ndarray | None,
    observed: bool = False,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Log likelihood, its derivative in eta per pair, and the information per pair.

    The information is the expected (Fisher) one, or with ``observed`` the negative second
    derivative; they differ only under a guessing floor, where the observed one can be
    negative for a pair and makes Newton converge quadratically near the mode.

    ``exp_neg_eta`` is exp(-eta); the 1PL engines form it as exp(b_i) * exp(-theta_j), an
    outer product, so no exponential is taken per matrix element.
    ``chance`` None means no guessing floor (the fast, exact-Newton path).
    """
    e = exp_neg_eta
    s = 1.0 / (1.0 + e)
    if chance is None:
        # log s = -log1p(e); log(1 - s) = -eta - log1p(e)
        ll = float(np.sum((trials - correct) * neg_eta) - np.sum(trials * np.log1p(e)))
        resid = correct - trials * s
        info = trials * s * s * e  # s * (1 - s) without the cancellation of 1 - s near s = 1
        return ll, resid, info
    g = chance[None, :]
    one_minus_s = s * e
    ds = s * one_minus_s
    p = g + (1.0 - g) * s
    q = (1.0 - g) * one_minus_s
    dp = (1.0 - g) * ds
    with np.errstate(divide="ignore"):
        # (1 - p) = (1 - g) * s * e, so log(1 - p) needs no subtraction that could cancel.
        log_q = np.log1p(-g) - np.log1p(e) + neg_eta
        ll_pair = correct * np.log(p) + (trials - correct) * log_q
    ll = float(np.sum(np.where(trials > 0, ll_pair, 0.0)))
    pq = np.maximum(p * q, 1e-300)
    resid = (correct - trials * p) * dp / pq
    info = trials * dp * dp / pq
    if observed:
        d2p = dp * (1.0 - 2.0 * s)
        info = info - (correct - trials * p) * (d2p / pq - dp * dp * (q - p) / (pq * pq))
    return ll, resid, info


def log_binomial_coefficients(correct: np.ndarray, trials: np.ndarray) -> float:
    """sum log C(t, c): the constant that makes the binomial log likelihood a true one (BIC)."""
    return float(np.sum(gammaln(trials + 1) - gammaln(correct + 1) - gammaln(trials - correct + 1)))


class Posterior:
    """Log posterior of a 1PL or 2PL model on one response matrix, as a function of a flat vector.

    The vector is (theta, b) for 1PL and (theta, b, log a) for 2PL; ``logp_grad`` returns the
    unnormalised log posterior and its gradient, the interface the samplers and optimisers use.
    """

    def __init__(self, matrix: ResponseMatrix, *, model: str = "1pl", guessing: bool = True,
                 log_a_prior: tuple[float, float] = (0.0, LOG_DISCRIMINATION_SD),
                 b_prior: tuple[float, float] = (0.0, 1.0)) -> None:
        self.model = model
        # (mean, sd) of the difficulties' Gaussian prior: N(0, 1), the paper's; the hierarchical fit
        # (irt/hierarchical.py) estimates them, and the MAP 1PL and the NUTS 1PL engines read them.
        self.b_mean, self.b_prec = float(b_prior[0]), 1.0 / float(b_prior[1]) ** 2
        # (mean, sd) of the 2PL's log a_i prior: the spread estimate (irt/spread.py) varies it.
        self.log_a_mean, self.log_a_sd = float(log_a_prior[0]), float(log_a_prior[1])
        self.m, self.n = matrix.n_models, matrix.n_items
        self.correct = np.asarray(matrix.correct, dtype=float)
        self.trials = np.asarray(matrix.trials, dtype=float)
        chance = np.asarray(matrix.chance, dtype=float)
        self.chance = chance if guessing and np.any(chance > 0) else None
        self.dim = self.m + self.n + (self.n if model == "2pl" else 0)
        # Linear parts of the 1PL log likelihood, per parameter.
        self._wrong_per_model = (self.trials - self.correct).sum(axis=1)
        self._wrong_per_item = (self.trials - self.correct).sum(axis=0)
        self._wrong = self.trials - self.correct
        self._correct_per_model = self.correct.sum(axis=1)
        self._correct_per_item = self.correct.sum(axis=0)
        self._log1m_chance = np.log1p(-chance) if self.chance is not None else None

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        theta, b = x[: self.m], x[self.m : self.m + self.n]
        log_a = x[self.m + self.n :] if self.model == "2pl" else None
        return theta, b, log_a

    def terms(
        self, x: np.ndarray, observed: bool = False
    ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray | None]:
        """(log likelihood, d ll / d eta, information in eta, eta or None)."""
        theta, b, log_a = self.split(x)
        if log_a is None:
            with np.errstate(over="ignore"):
                e = np.exp(-theta)[:, None] * np.exp(b)[None, :]
            if self.chance is None:
                ll, r, w = pair_terms(e, 0.0, self.correct, self.trials, None)
                # The -eta part of the likelihood is linear: sum it per model and per item.
                ll += float(self._wrong_per_item @ b - self._wrong_per_model @ theta)
                return ll, r, w, None
            neg_eta = b[None, :] - theta[:, None]
            ll, r, w = pair_terms(e, neg_eta, self.correct, self.trials, self.chance, observed)
            return ll, r, w, None
        a = np.exp(log_a)
        eta = a[None, :] * (theta[:, None] - b[None, :])
        with np.errstate(over="ignore"):
            e = np.exp(-eta)
        ll, r, w = pair_terms(e, -eta, self.correct, self.trials, self.chance, observed)
        return ll, r, w, eta

    def log_prior(self, x: np.ndarray) -> float:
        theta, b, log_a = self.split(x)
        d = b - self.b_mean
        lp = -0.5 * float(theta @ theta + self.b_prec * float(d @ d))
        if log_a is not None:
            d = log_a - self.log_a_mean
            lp -= 0.5 * float(d @ d) / self.log_a_sd**2
        return lp

    def _logp_grad_1pl(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """The samplers' hot path: few passes over the matrix, no information, no per-element exp."""
        m = self.m
        theta, b = x[:m], x[m:]
        # One buffer, updated in place: e = exp(b_i - theta_j) -> 1 + e -> s = 1 / (1 + e).
        buf = np.multiply.outer(np.exp(-theta), np.exp(b))
        buf += 1.0
        log_one_plus = np.log(buf)
        np.reciprocal(buf, out=buf)
        grad = np.empty_like(x)
        if self.chance is None:
            # ll = sum (t - c)(b - theta) - t log(1 + e); d ll / d eta = c - t s
            ll = float(self._wrong_per_item @ b - self._wrong_per_model @ theta) - float(
                np.einsum("ji,ji->", self.trials, log_one_plus)
            )
            buf *= self.trials
            grad[:m] = self._correct_per_model - buf.sum(axis=1) - theta
            grad[m:] = buf.sum(axis=0) - self._correct_per_item - self.b_prec * (b - self.b_mean)
        else:
            g = self.chance
            p = g + (1.0 - g) * buf
            # log(1 - p) = log(1 - g) + log(e) - log(1 + e) = log(1 - g) + (b - theta) - log(1 + e)
            ll = float(
                np.einsum("ji,ji->", self.correct, np.log(p))
                + self._wrong_per_item @ (b + self._log1m_chance)
                - self._wrong_per_model @ theta
                - np.einsum("ji,ji->", self._wrong, log_one_plus)
            )
            # d ll / d eta = (c - t p) p' / (p (1 - p)) with p' / (1 - p) = s: (c / p - t) s
            r = (self.correct / p - self.trials) * buf
            grad[:m] = r.sum(axis=1) - theta
            grad[m:] = -r.sum(axis=0) - self.b_prec * (b - self.b_mean)
        d = b - self.b_mean
        return ll - 0.5 * float(theta @ theta + self.b_prec * float(d @ d)), grad

    def logp_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        if self.model == "1pl":
            return self._logp_grad_1pl(x)
        ll, r, _, eta = self.terms(x)
        theta, b, log_a = self.split(x)
        grad = np.empty_like(x)
        if log_a is None:
            grad[: self.m] = r.sum(axis=1) - theta
            grad[self.m :] = -r.sum(axis=0) - self.b_prec * (b - self.b_mean)
        else:
            a = np.exp(log_a)
            grad[: self.m] = r @ a - theta
            grad[self.m : self.m + self.n] = -a * r.sum(axis=0) - self.b_prec * (b - self.b_mean)
            grad[self.m + self.n :] = (r * eta).sum(axis=0) - (log_a - self.log_a_mean) / self.log_a_sd**2
        return ll + self.log_prior(x), grad

    def log_likelihood(self, x: np.ndarray) -> float:
        """The full binomial log likelihood (with binomial coefficients) at ``x``."""
        return self.terms(x)[0] + log_binomial_coefficients(self.correct, self.trials)
