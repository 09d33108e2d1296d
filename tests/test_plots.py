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
