"""Figures that cannot mislead: every standard figure of a results folder, drawn, gives each
configuration its own colour and style (for any number of them), keeps series that coincide
visible, and labels its axes with what it plots."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from gemsim.results import _folder_plots as folder_plots
from gemsim.results import load_results, plot_loss, plot_worker_accuracy
from gemsim.results._plot_common import X_LABELS


def _look(line) -> tuple:
    return (to_hex(line.get_color()), line.get_linestyle(), line.get_marker())


def _drawn(draw) -> Figure:
    fig = Figure()
    draw(fig.add_subplot())
    return fig


def test_every_standard_figure_gives_each_configuration_its_own_look(sweep_dir):
    results = load_results(sweep_dir)
    runs = {str(m.get("run_id")): (p, m) for p, m in folder_plots.run_manifests(sweep_dir)}
    jobs = folder_plots._folder_jobs(results, runs)
    assert len(jobs) >= 8
    for name, draw in jobs:
        ax = _drawn(draw).axes[0]
        labelled = [line for line in ax.lines if not line.get_label().startswith("_")]
        looks = [_look(line) for line in labelled]
        assert len(set(looks)) == len(looks), name
        assert ax.get_xlabel() and ax.get_ylabel(), name
        if name.startswith("loss_vs_"):
            x = {"commits": "commit", "worker_steps": "mean_worker_step", "time": "time"}
            assert ax.get_xlabel() == X_LABELS[x[name[8:-4]]]
            assert ax.get_ylabel() == "train loss"


def _frame(n_configs: int, same: tuple[int, int]) -> pd.DataFrame:
    rows = []
    for c in range(n_configs):
        source = same[0] if c == same[1] else c  # one configuration repeats another's values
        for k in range(40):
            rows.append({"run_id": f"r{c}", "config": f"c{c:02d}", "commit": k,
                         "train_loss": 1.0 / (1 + k) + 0.01 * source})  # fmt: skip
    return pd.DataFrame(rows)


def test_many_configurations_never_share_a_look_and_equal_series_both_show():
    ax = Figure().add_subplot()
    plot_loss(_frame(45, same=(3, 7)), "commit", ax=ax)
    looks = [_look(line) for line in ax.lines]
    assert len(looks) == 45 and len(set(looks)) == 45
    a, b = ax.lines[3], ax.lines[7]
    np.testing.assert_array_equal(a.get_ydata(), b.get_ydata())
    # the later one thinner on top, its marks elsewhere along the line
    assert b.get_linewidth() < a.get_linewidth()
    assert a.get_markevery() != b.get_markevery()


def test_worker_speed_is_per_local_step_by_default():
    rows = [
        {"run_id": r, "config": cfg, "commit": 9, "worker": w, "accuracy": 0.5,
         "mean_compute_time": window * 0.1 * (w + 1), "mean_step_time": 0.1 * (w + 1)}
        for r, cfg, window in (("a", "fedbuff", 8), ("b", "gem", 1)) for w in range(3)
    ]  # fmt: skip
    ax = Figure().add_subplot()
    plot_worker_accuracy(pd.DataFrame(rows), ax=ax)
    assert ax.get_xlabel() == "worker's mean compute time per local step (s)"
    a, b = (c.get_offsets()[:, 0] for c in ax.collections)
    np.testing.assert_allclose(a, b)  # the same speeds, whatever the local steps
    assert ax.collections[0].get_sizes()[0] > ax.collections[1].get_sizes()[0]
    ax = Figure().add_subplot()
    plot_worker_accuracy(pd.DataFrame(rows), x="mean_compute_time", ax=ax)
    assert ax.get_xlabel().startswith("worker's mean compute time per commit")
