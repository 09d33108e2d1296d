"""argparse types that refuse out-of-range numbers at the command line, with argparse's one-line usage error.

A negative seed, zero repeats or a NaN threshold would otherwise reach numpy and come back as a traceback,
or run to the end and print nan.
"""

from __future__ import annotations

import argparse
import math


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def nonneg_int(text: str) -> int:
    """An integer >= 0 (a seed, a count that may be zero)."""
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {v}")
    return v


def positive_int(text: str) -> int:
    """An integer >= 1."""
    v = _int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def folds(text: str) -> int:
    """A K of K-fold cross-validation: at least 2."""
    v = _int(text)
    if v < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {v}")
    return v


def finite_float(text: str) -> float:
    """A finite number (not nan or inf)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return v


def nonneg_float(text: str) -> float:
    """A finite number >= 0."""
    v = finite_float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return v


def positive_float(text: str) -> float:
    """A finite number > 0 (a timeout)."""
    v = finite_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return v


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    v = _int(text)
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {v}")
    return v
