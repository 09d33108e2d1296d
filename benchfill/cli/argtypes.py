"""argparse types that refuse out-of-range numbers at the command line, with argparse's one-line usage error.

A negative seed, zero repeats or a NaN threshold would otherwise reach numpy and come back as a traceback,
or run to the end and print nan.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def finite_float(text: str) -> float:
    """A finite number (not nan or inf)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return v


def _bounded(read: Callable[[str], float], ok: Callable[[float], bool], rule: str, name: str):
    """A type reading with ``read`` and refusing values ``ok`` rejects, saying ``rule``."""

    def parse(text: str):
        v = read(text)
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text.strip()}")
        return v

    parse.__name__ = name  # argparse names the type in some of its messages
    return parse


nonneg_int = _bounded(_int, lambda v: v >= 0, "0 or more", "nonneg_int")  # a seed, a count that may be zero
positive_int = _bounded(_int, lambda v: v >= 1, "at least 1", "positive_int")
folds = _bounded(_int, lambda v: v >= 2, "at least 2", "folds")  # K of K-fold cross-validation
port = _bounded(_int, lambda v: 0 <= v <= 65535, "a port, 0 to 65535", "port")  # 0: any free one
nonneg_float = _bounded(finite_float, lambda v: v >= 0, "0 or more", "nonneg_float")
unit_float = _bounded(finite_float, lambda v: 0 <= v <= 1, "a share in [0, 1]", "unit_float")  # a rate
positive_float = _bounded(finite_float, lambda v: v > 0, "more than 0", "positive_float")  # a timeout
# NUTS draws per chain: split R-hat halves each chain and takes a variance in each half, so it needs two draws
# a half (benchfill.irt.convergence.MIN_DRAWS, not imported here: numpy would slow every --help).
mcmc_draws = _bounded(_int, lambda v: v >= 4, "at least 4 (split R-hat needs two draws in each half of a chain)",
                      "mcmc_draws")


def _auto_or_sd(hi: float, what: str, name: str) -> Callable[[str], float | str]:
    """An option that takes ``auto`` or an sd in [0, ``hi``] (``what``: the sd of what)."""
    def parse(text: str) -> float | str:
        if text.strip().lower() == "auto":
            return "auto"
        v = finite_float(text)
        if not 0.0 <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be auto or an sd of {what} in [0, {hi:g}], got {text.strip()}")
        return v
    parse.__name__ = name  # argparse names the type in its own messages
    return parse


misfit_sd = _auto_or_sd(2.0, "log discrimination", "misfit_sd")  # --misfit
pair_sd = _auto_or_sd(6.0, "the (probe, item) offsets in logits", "pair_sd")  # --pair-allowance
