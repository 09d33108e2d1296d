"""A difficulty signal of a set strength in the simulated items' text (docs/sim-rewriter.md).

Real item text says something about difficulty (the predictors of ``benchfill.predict`` find
Spearman 0.1-0.4 on real benchmarks); the simulated world's invented texts say nothing unless told
to. With ``World(text_signal=rho)``, every item, original or child, carries a latent text score

    s = rho * zstd(b) + sqrt(1 - rho^2) * eps,    eps ~ N(0, 1) drawn once per item,

where zstd(b) = (b - mean) / sd standardizes its TRUE latent difficulty by the original items' mean
and sd. Over the originals, corr(s, zstd) = rho exactly (in expectation): ``rho`` is the signal's
strength, 0 = no signal (the text is left untouched: nothing else changes), 1 = the text tells
the difficulty outright. The text shows s as a number of "complication" sentences,
n = max(0, round(BASE + SCALE * s)): a few on an easy item, many on a hard one. The rounding and the
floor at 0 (below s = -2.25) cost a little: corr(n, s) is about 0.98, so corr(n, zstd) is about
0.98 rho (tests/test_prescreen.py measures it). The sentences carry no digits, so the rewriter's
number shifts never touch them, and they are removed from a parent before it is rewritten: a
child's sentences are drawn from its own truth, never inherited.
"""

from __future__ import annotations

import math
import random
import re

BASE = 4.5
SCALE = 2.0
CUES = (
    "Every condition above must hold at once.",
    "Keep track of each intermediate quantity.",
    "Mind the constraint stated last.",
    "Watch for the case that breaks the pattern.",
    "Justify each step before moving on.",
    "The obvious approach is not enough here.",
    "Check the boundary cases separately.",
    "Combine the conditions before simplifying.",
)
_CODE_PREFIX = "# Hint: "
_CUE = "|".join(re.escape(c) for c in CUES)
_PROSE = re.compile(rf" ?(?:{_CUE})")
_CODE = re.compile(rf"^{re.escape(_CODE_PREFIX)}(?:{_CUE})\n", re.M)


def score(zstd: float, strength: float, eps: float) -> float:
    """The latent text score s of an item whose standardized true difficulty is ``zstd``."""
    return strength * zstd + math.sqrt(max(0.0, 1.0 - strength * strength)) * eps


def cue_count(s: float) -> int:
    return max(0, int(round(BASE + SCALE * s)))


def mark(text: str, n: int, evaluator: str, rng: random.Random) -> str:
    """``text`` with ``n`` cue sentences: appended to prose, as leading comment lines to code."""
    if n <= 0:
        return text
    cues = [CUES[rng.randrange(len(CUES))] for _ in range(n)]
    if evaluator == "code":
        return "".join(f"{_CODE_PREFIX}{c}\n" for c in cues) + text
    return f"{text.rstrip()} {' '.join(cues)}"


def unmark(text: str) -> str:
    """``text`` without any cue sentence (a no-op on text that never had one)."""
    return _PROSE.sub("", _CODE.sub("", text))


def count(text: str) -> int:
    """How many cue sentences ``text`` carries (what a reader of the text could count)."""
    return len(_CODE.findall(text)) + len(_PROSE.findall(_CODE.sub("", text)))
