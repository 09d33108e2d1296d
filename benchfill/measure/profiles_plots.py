"""Plots of a benchmark's profiles: flagged items' trajectories, position and width histograms.

matplotlib is imported inside the functions: importing this module costs nothing. Files are
written to a temporary name and renamed, so a failure leaves no half-written PNG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchfill.measure.profiles import BenchmarkProfile, ItemProfile
from benchfill.plots import literal_text, new_figure, save_png


@literal_text
def plot_trajectories(bp: BenchmarkProfile, path: str | Path, *, items: Sequence[ItemProfile] | None = None,
                      top: int = 12) -> Path:
    """One small panel per item: correctness (dots), isotonic fit (line), entropy when known."""
    chosen = list(items if items is not None else bp.flagged()[:top])
    cols = min(4, max(1, len(chosen)))
    rows = max(1, math.ceil(len(chosen) / cols))
    fig = new_figure(figsize=(3.2 * cols, 2.4 * rows), dpi=110)
    axes = fig.subplots(rows, cols, squeeze=False)
    pos = bp.axis.positions
    for ax in axes.ravel()[len(chosen):]:
        ax.axis("off")
    if not chosen:
        axes[0, 0].text(0.5, 0.5, "no flagged items", ha="center", va="center")
    for ax, p in zip(axes.ravel(), chosen, strict=False):
        c, f = np.array(p.correctness), np.array(p.fitted)
        ax.plot(pos, c, "o", ms=3, color="black", label="correctness")
        ax.plot(pos[np.isfinite(f)], f[np.isfinite(f)], "-", color="tab:red", lw=1.4, label="isotonic fit")
        if p.entropy is not None:
            ax.plot(pos, p.entropy, ":", color="tab:blue", lw=1.0, label="entropy")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlim(-0.03, 1.03)
        ax.set_title(f"{p.item_id[:28]}  o={p.order_consistency:.3f}", fontsize=8)
        ax.tick_params(labelsize=7)
    if axes[0, 0].get_legend_handles_labels()[0]:  # nothing flagged, nothing drawn: no legend to give
        axes[0, 0].legend(fontsize=6, frameon=False, loc="upper left")
    fig.supxlabel("model axis position (weakest -> strongest)", fontsize=8)
    fig.tight_layout()
    return save_png(fig, path)


@literal_text
def plot_histograms(bp: BenchmarkProfile, path: str | Path, *, bins: int = 20) -> Path:
    """Position and width of the rising items, validity of all items (section 3.3)."""
    rising = [p for p in bp.items if not p.flat]
    fig = new_figure(figsize=(10, 3.0), dpi=110)
    axes = fig.subplots(1, 3)
    edges = np.linspace(0, 1, bins + 1)
    for ax, values, label in (
        (axes[0], [p.position for p in rising], f"boundary position x (n={len(rising)} rising)"),
        (axes[1], [p.width for p in rising], "boundary width w"),
        (axes[2], [p.validity for p in bp.items], f"validity v (all {len(bp.items)})"),
    ):
        ax.hist(np.clip(values, 0, 1), bins=edges, color="0.35")
        ax.set_xlabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
    rate = bp.order_anomaly_rate
    fig.suptitle(f"{Path(bp.source).parent.name or 'benchmark'}: order-anomaly rate {rate:.1%}, "
                 f"flat {1 - len(rising) / max(len(bp.items), 1):.1%}", fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)
