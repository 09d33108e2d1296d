"""ECDF plots of normalized difficulties against a target, largest gaps shaded (paper, Figure 3).

matplotlib is imported inside the function: importing this module costs nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.coverage import Target, gaps, parse_target

GAP_COLORS = ("#e41a1c", "#ff7f00", "#4daf4a", "#377eb8", "#984ea3")
PLOT_FORMATS = ("png", "pdf", "svg")  # what a plot file's name may end in; the ending names the format


def plot_format(path: str | Path) -> str | None:
    """The format that ``path``'s ending names; PNG for a name without one (as before formats were read from
    the ending); None for an ending that names none of ``PLOT_FORMATS``."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if not fmt:
        return "png"
    return fmt if fmt in PLOT_FORMATS else None


def literal_text(draw: Callable) -> Callable:
    """Make ``draw`` set its text as written: an item id or a file name may hold '$', which matplotlib
    otherwise takes for the start of a formula, and fails on when it does not parse as one."""

    @functools.wraps(draw)
    def drawn(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        # Text objects read the setting when made (tick labels: when drawn), so the saving is inside too
        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn


# Gap labels: narrow neighbouring gaps put their widths side by side, and a label is about 0.05 of the axis
# wide at this size; one that would touch the label before it in its row goes a row up.
LABEL_ROW = 0.045  # in data units of the ECDF axis, one label's height and a little
LABEL_SPACING = 0.06  # in z, a label's width and a little, on the axis of about 1.04


def _label_rows(xs: list[float]) -> list[int]:
    """For labels centred at ``xs``, the row each goes in (0 the lowest): the lowest row whose last label,
    left to right, lies at least ``LABEL_SPACING`` away."""
    rows = [0] * len(xs)
    last: list[float] = []  # the rightmost label's x in each row
    for i in sorted(range(len(xs)), key=lambda i: xs[i]):
        row = next((r for r, x in enumerate(last) if xs[i] - x >= LABEL_SPACING), len(last))
        if row == len(last):
            last.append(xs[i])
        last[row] = xs[i]
        rows[i] = row
    return rows


@literal_text
def plot_ecdf(
    z: Any,
    path: str | Path,
    *,
    k: int = 5,
    target: Target | str | None = None,
    title: str = "",
    after: Any = None,
) -> Path:
    """Write a plot, as ``path``'s ending says (``PLOT_FORMATS``): the items' ECDF, the target's CDF, and the k widest gaps shaded with their widths.

    ``after`` (optional) draws a second ECDF, e.g. the benchmark after gap filling.
    The file is written to a temporary name and renamed, so a failure leaves no half file.
    """
    z = np.sort(np.asarray(z, dtype=float))
    tgt = parse_target(target)
    fig = new_figure(figsize=(5.5, 4.0), dpi=120)
    ax = fig.subplots()
    widest = gaps(z, k=k)
    rows = _label_rows([(g.left + g.right) / 2 for g in widest])
    for i, (g, row) in enumerate(zip(widest, rows, strict=True)):
        color = GAP_COLORS[i % len(GAP_COLORS)]
        ax.axvspan(g.left, g.right, color=color, alpha=0.18, lw=0)
        ax.text((g.left + g.right) / 2, 1.02 + LABEL_ROW * row, f"{g.width:.2f}", ha="center", va="bottom",
                fontsize=7, color=color, clip_on=False)
    grid = np.linspace(0, 1, 201)
    ax.plot(grid, _target_cdf(tgt, grid), "--", color="grey", lw=1.2, label=f"target ({tgt.describe()})")
    n = z.size
    ax.step(np.concatenate(([min(0.0, z[0])], z, [max(1.0, z[-1])])),
            np.concatenate(([0.0], np.arange(1, n + 1) / n, [1.0])),
            where="post", color="black", lw=1.5, label=f"benchmark (n={n})")
    if after is not None:
        za = np.sort(np.asarray(after, dtype=float))
        ax.step(np.concatenate(([min(0.0, za[0])], za, [max(1.0, za[-1])])),
                np.concatenate(([0.0], np.arange(1, za.size + 1) / za.size, [1.0])),
                where="post", color="tab:blue", lw=1.5, label=f"after (n={za.size})")
    ax.set_xlim(min(0.0, z[0]) - 0.02, max(1.0, z[-1]) + 0.02)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("normalized difficulty z")
    ax.set_ylabel("ECDF")
    if title:
        ax.set_title(title, fontsize=10, pad=14 + 10 * max(rows, default=0))  # above the labels' rows
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    return save_figure(fig, path)


def new_figure(**kw: Any) -> Any:
    """A matplotlib Figure drawn by Agg, made without pyplot: making one neither switches the process's backend
    (a notebook's inline one, a GUI's; ``matplotlib.use("Agg")`` did, for the rest of the process) nor leaves
    a figure open in pyplot's list. ``kw``: as ``Figure``'s (figsize, dpi)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    _quiet_missing_glyphs()
    fig = Figure(**kw)
    FigureCanvasAgg(fig)  # (the figure's canvas from here on; saving to SVG or PDF still picks their own)
    return fig


@functools.cache
def _quiet_missing_glyphs() -> None:
    """A name in another script (a CJK file or item id) is drawn in boxes where the font has no glyph, and
    matplotlib warned once a character, with its source line, among benchfill's own lines. Ignored for the
    warnings it attributes to benchfill's modules only (matplotlib names the first caller outside itself):
    a host's own figures still warn. A filter added once, not a catch_warnings, which two threads undo."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from (current )?font", category=UserWarning,
                            module=r"benchfill(\.|$)")


def save_png(fig: Any, path: str | Path) -> Path:
    """``save_figure`` as PNG, whatever the name."""
    return save_figure(fig, path, "png")


def save_figure(fig: Any, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``fig`` in ``fmt`` (default: the format ``path``'s ending names) through a temporary file and
    a rename (no half-written plot after a kill), readable by others (mkstemp makes 0600; a plot is for
    sharing)."""
    path = Path(path)
    fmt = fmt or plot_format(path)
    if fmt is None:
        from benchfill.errors import ConfigError

        raise ConfigError(f"{path}: a plot's name must end in "
                          + ", ".join(f".{s}" for s in PLOT_FORMATS[:-1]) + f" or .{PLOT_FORMATS[-1]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    from benchfill.outputs import named, shared_mode, temp_path

    tmp = str(temp_path(path.parent, path.name, suffix=f".{fmt}"))  # a killed save's is removed by the next
    try:
        fig.savefig(tmp, format=fmt)
        os.chmod(tmp, shared_mode())
        os.replace(tmp, path)
    except OSError as exc:
        named(exc, path)
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _target_cdf(tgt: Target, x: np.ndarray) -> np.ndarray:
    if tgt.name == "uniform":
        return x
    if tgt.name == "beta":
        from scipy.stats import beta

        return beta.cdf(x, *tgt.params)
    # The CDF of the quantile function the DDM uses (Target.quantile), inverted on a fine grid of levels.
    q = tgt.grid(2000)
    return np.searchsorted(q, x, side="right") / q.size
