"""Every plot returns an Axes on synthetic results; plot_run_folder writes PNGs."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gemsim.results import (
    load_results,
    plot_energy_ratio,
    plot_final_loss_vs_workers,
    plot_loss,
    plot_pi_heatmap,
    plot_pi_median,
    plot_run_folder,
    plot_staleness_histogram,
)

matplotlib.use("Agg")


@pytest.fixture
def results(sweep_dir):
    return load_results(sweep_dir)


@pytest.fixture
def ax():
    return Figure().add_subplot()


@pytest.mark.parametrize("x", ["commit", "worker_step", "mean_worker_step", "time"])
def test_plot_loss(results, ax, x):
    out = plot_loss(results, x=x, ax=ax)
    assert out is ax and len(ax.lines) == 5  # 4 configurations + the diverged one
    assert ax.get_legend() is not None
    # Curves are means over repeats: at each eval index, the mean of both runs' losses.
    evals = results[results["config"] == ax.lines[0].get_label()].dropna(subset=["train_loss"])
    first = evals.groupby("run_id")["train_loss"].first().mean()
    assert ax.lines[0].get_ydata()[0] == pytest.approx(first)


def test_plot_loss_by_hue_and_on_a_new_figure(results):
    import matplotlib.pyplot as plt

    ax = plot_loss(results, hue="optimizer.rule", y="test_accuracy", logy=True, lw=2)
    try:
        assert isinstance(ax, Axes) and len(ax.lines) == 2
        assert ax.get_yscale() == "log" and ax.lines[0].get_linewidth() == 2
    finally:
        plt.close(ax.figure)


def test_plot_final_loss_vs_workers(results, ax):
    out = plot_final_loss_vs_workers(results, ax=ax)
    assert out is ax
    labels = sorted(line.get_label() for line in ax.containers)
    assert labels == ["optimizer={lr: 0.1, rule: downpour}", "optimizer={lr: 0.1, rule: gem}"]
    # The diverged run at 8 workers is marked with an x instead of a finite mean.
    markers = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(markers) == 1 and list(markers[0].get_xdata()) == [8]
    by_rule = plot_final_loss_vs_workers(results, hue="optimizer.rule", ax=Figure().add_subplot())
    assert isinstance(by_rule, Axes)


def test_plot_pi_median_and_energy_ratio(results, ax):
    assert plot_pi_median(results, smooth=5, ax=ax) is ax
    assert len(ax.lines) == 1 + 2  # the pi = 1 reference + two gem configurations
    ratio_ax = plot_energy_ratio(results, x="time", ax=Figure().add_subplot())
    curves = [line for line in ratio_ax.lines if line.get_label().startswith("optimizer")]
    assert len(curves) == 2
    ys = np.concatenate([line.get_ydata() for line in curves])
    assert np.allclose(ys[np.isfinite(ys)], 0.75)


def test_plot_pi_heatmap(results, ax):
    assert plot_pi_heatmap(results, ax=ax, bins=7) is ax
    image = ax.images[0].get_array()
    assert image.shape == (3, 7)
    assert image[2, 0] > image[0, 0]  # leaf 2 has the larger pi in the fake data
    other = Figure().add_subplot()
    plot_pi_heatmap(results, "gem-4-1", leaf_names=["w", "b", "v"], ax=other)
    assert [t.get_text() for t in other.get_yticklabels()] == ["w", "b", "v"]
    with pytest.raises(ValueError, match="downpour-2-0"):
        plot_pi_heatmap(results, "downpour-2-0")


def test_plot_staleness_histogram(results, ax):
    subset = results[results["workers.count"] == 4]
    assert plot_staleness_histogram(subset, n_workers=4, ax=ax) is ax
    (theory,) = [line for line in ax.lines if line.get_label().startswith("geometric")]
    k = theory.get_xdata()
    np.testing.assert_allclose(theory.get_ydata(), 0.25 * 0.75**k)
    heights = ax.patches[0].get_data().values  # the observed fractions sum to one
    assert heights.sum() == pytest.approx(1.0)
    assert isinstance(plot_staleness_histogram(subset, ax=Figure().add_subplot()), Axes)


def test_plots_name_missing_columns(results):
    with pytest.raises(ValueError, match="pi_median"):
        plot_pi_median(results.drop(columns=["pi_median"]))
    with pytest.raises(ValueError, match="workers.n"):
        plot_final_loss_vs_workers(results, workers_col="workers.n")
    with pytest.raises(ValueError, match="pi_leaf_0"):
        plot_pi_heatmap(results.drop(columns=[c for c in results if c.startswith("pi_leaf")]))


def test_plot_run_folder_writes_pngs(sweep_dir, tmp_path):
    written = plot_run_folder(sweep_dir)
    names = {path.name for path in written}
    assert names == {
        "loss_vs_commits.png",
        "loss_vs_worker_steps.png",
        "loss_vs_time.png",
        "final_loss_vs_workers.png",
        "pi_median.png",
        "energy_ratio.png",
        "pi_heatmap_gem-2-0.png",
        "pi_heatmap_gem-4-0.png",
        "staleness_n2.png",
        "staleness_n4.png",
        "staleness_n8.png",
    }
    for path in written:
        assert path.parent == sweep_dir / "plots"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert load_results(sweep_dir)["run_id"].nunique() == 9  # plots/ is not a run
    with pytest.raises(FileNotFoundError):
        plot_run_folder(tmp_path / "missing")


def test_plot_run_folder_skips_absent_columns(tmp_path, make_run):
    out = tmp_path / "out"
    make_run(out, "plain", gem=False)
    names = {path.name for path in plot_run_folder(out, tmp_path / "pngs")}
    assert names == {"loss_vs_commits.png", "loss_vs_worker_steps.png", "loss_vs_time.png",
                     "staleness_n4.png"}  # fmt: skip
    (tmp_path / "empty").mkdir()
    assert plot_run_folder(tmp_path / "empty") == []
