"""The ECDF plot's gap labels: narrow neighbouring gaps used to print their widths on top of each other."""

from __future__ import annotations

import numpy as np

import benchfill.plots as plots


def test_label_rows_put_a_label_a_row_up_only_where_it_would_touch_its_neighbour():
    assert plots._label_rows([0.1, 0.5, 0.9]) == [0, 0, 0]
    assert plots._label_rows([0.50, 0.53, 0.56, 0.70]) == [0, 1, 0, 0]  # 0.56 is 0.06 from 0.50: row 0 again
    assert plots._label_rows([0.56, 0.50, 0.53]) == [0, 0, 1]  # rows follow x, not the order of the gaps


def test_gap_labels_of_adjacent_narrow_gaps_and_the_title_do_not_overlap(tmp_path, monkeypatch):
    boxes = {}
    real = plots.save_figure

    def measure(fig, path, fmt=None):
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        ax = fig.axes[0]
        boxes["labels"] = [t.get_window_extent(r) for t in ax.texts]
        boxes["title"] = ax.title.get_window_extent(r)
        return real(fig, path, fmt)

    monkeypatch.setattr(plots, "save_figure", measure)
    # five gaps of 0.05 side by side between two dense runs: the five widest, their labels 0.05 apart
    z = np.r_[np.linspace(0, 0.4, 60), 0.45, 0.5, 0.55, 0.6, 0.65, 0.70, np.linspace(0.74, 1, 40)]
    plots.plot_ecdf(z, tmp_path / "ecdf.png", title="a benchmark")
    labels = boxes["labels"]
    assert len(labels) == 5
    assert not any(a.overlaps(b) for i, a in enumerate(labels) for b in labels[:i])
    assert not any(a.overlaps(boxes["title"]) for a in labels)


_KEEPS_BACKEND = r"""
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("svg")  # a caller's own backend (a notebook's inline one, a GUI's)
import matplotlib.pyplot as plt

from benchfill import report, sweep_table
from benchfill.plots import plot_ecdf
from benchfill.review.card import ecdf_plot

out = Path(sys.argv[1])
plot_ecdf([0.1, 0.4, 0.9], out / "ecdf.png", k=2, target="uniform")
ecdf_plot([0.1, 0.5], [0.1, 0.3, 0.5], out / "card.png", "card")
gap = SimpleNamespace(left=0.1, right=0.4)
result = SimpleNamespace(deviations_by_round={1: [0.1, 0.2]}, gap_index=0)
report._plots(out / "plots", [0.1, 0.4, 0.9], [0.1, 0.25, 0.4, 0.9], [gap], [result],
              {"benchmark": "b", "max_gap_before": 0.5, "max_gap_after": 0.3, "simulated": True})
sweep_table._plot({"rows": [{"benchmark": "b", "top_k": 3, "strategies": {"benchfill": {"reduction": 0.2}}}],
                   "strategies": ["benchfill"], "sweep": "s", "simulated": False, "backend": "sim"}, out / "sweep.png")
print(matplotlib.get_backend(), plt.get_fignums())
"""


def test_plotting_leaves_the_callers_matplotlib_backend_and_pyplot_as_they_were(tmp_path):
    # matplotlib.use("Agg") in a run's or a release's plotting switched a notebook's backend for good
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _KEEPS_BACKEND, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "svg []"
    for name in ("ecdf.png", "card.png", "plots/ecdf_before_after.png", "plots/target_deviation.png", "sweep.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


_GLYPHS = r"""
import sys
import warnings
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchfill.plots import plot_ecdf

out = Path(sys.argv[1])
with warnings.catch_warnings(record=True) as seen:
    plot_ecdf([0.1, 0.4, 0.9], out / "回答.png", k=2, title="回答.csv")  # a file named in another script
    ours = [str(w.message) for w in seen]
    fig = Figure()
    FigureCanvasAgg(fig)
    fig.suptitle("回答")  # the caller's own figure: its warning is the caller's to see
    fig.savefig(out / "mine.png")
    print(len(ours), any("Glyph" in str(w.message) for w in seen[len(ours):]))
"""


def test_a_name_in_another_script_draws_without_warnings_and_the_callers_own_figures_still_warn(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-W", "default", "-c", _GLYPHS, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True"], done.stdout + done.stderr
