"""Residual flags: items whose observed difficulty is far from the text-based prediction (section 5.3).

r_t = z(beta_t) - zhat_t with zhat_t an out-of-fold prediction (an in-sample prediction has already
seen the item's own difficulty and shrinks its residual). r > 0: harder than its text suggests (look for
an infeasible item, a wrong reference answer, a strict or broken evaluator). r < 0: easier than its text
suggests (look for familiarity or contamination, or a shortcut). Flags are ranked by |r| / sd(r).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from benchfill.untrusted import terminal

HARDER = "harder than predicted: infeasible item, wrong answer key or strict evaluator?"
EASIER = "easier than predicted: familiarity, contamination or a shortcut?"


@dataclass
class ResidualFlag:
    rank: int
    item_id: str
    benchmark: str
    z: float  # observed, standardized within the benchmark
    z_hat: float  # predicted out of fold
    residual: float
    score: float  # residual / sd of the residuals
    reading: str
    excerpt: str

    def to_dict(self) -> dict:
        return asdict(self)


def residual_flags(labelled, oof: np.ndarray, *, threshold: float = 1.5, top: int | None = None,
                   excerpt_chars: int = 240) -> list[ResidualFlag]:
    """Items with |r| >= threshold * sd(r), largest first (``top`` caps the list)."""
    oof = np.asarray(oof, float)
    r = labelled.z - oof
    ok = ~np.isnan(r)
    sd = float(np.std(r[ok])) if ok.any() else float("nan")
    if not sd > 0:
        return []
    score = r / sd
    order = [int(i) for i in np.argsort(-np.abs(np.nan_to_num(score))) if ok[i] and abs(score[i]) >= threshold]
    if top is not None:
        order = order[:top]
    flags = []
    for rank, i in enumerate(order, 1):
        text = " ".join(labelled.texts[i].split())
        flags.append(ResidualFlag(
            rank=rank, item_id=labelled.ids[i], benchmark=labelled.benchmark[i], z=float(labelled.z[i]),
            z_hat=float(oof[i]), residual=float(r[i]), score=float(score[i]),
            reading=HARDER if r[i] > 0 else EASIER,
            excerpt=text if len(text) <= excerpt_chars else text[: excerpt_chars - 3] + "...",
        ))
    return flags


def format_flags(flags: list[ResidualFlag]) -> str:
    if not flags:
        return "no item past the threshold"
    lines = [f"{'#':>3} {'item':<16} {'z':>6} {'z_hat':>6} {'r':>6} {'r/sd':>5}  reading / text"]
    for f in flags:
        lines.append(f"{f.rank:>3} {terminal(f.item_id):<16} {f.z:>6.2f} {f.z_hat:>6.2f} {f.residual:>+6.2f} "
                     f"{f.score:>+5.1f}  {f.reading}")
        lines.append(f"{'':>4}{terminal(f.excerpt)}")
    return "\n".join(lines)
