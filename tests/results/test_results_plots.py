"""Every plot returns an Axes on synthetic results; plot_run_folder writes PNGs."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from results_fakes import fake_manifest, fake_metrics, fake_trace

from gemsim.results import _folder_plots as folder_plots
from gemsim.results import (
    load_results,
    plot_class_accuracy,
    plot_energy_ratio,
    plot_final_vs_workers,
    plot_loss,
    plot_pi_heatmap,
    plot_pi_median,
    plot_run_folder,
    plot_staleness_hist,
    plot_worker_accuracy,
    run_manifests,
    write_run,
)
from gemsim.results._plot_common import short_labels

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
    assert ax.get_legend() is not None and ax.get_yscale() == "log"
    # Curves are means over repeats: at each eval index, the mean of both runs' losses.
    config = {v: k for k, v in short_labels(results).items()}[ax.lines[0].get_label()]
    evals = results[results["config"] == config].dropna(subset=["train_loss"])
    first = evals.groupby("run_id")["train_loss"].first().mean()
    assert ax.lines[0].get_ydata()[0] == pytest.approx(first)


def test_short_labels_name_only_what_differs(results):
    labels = short_labels(results)
    assert labels["optimizer={lr: 0.1, rule: gem}, workers.count=4"] == (
        "optimizer.rule=gem, workers.count=4"  # lr is 0.1 everywhere: left out
    )
    one = results[results["workers.count"] == 4]
    assert set(short_labels(one).values()) == {"optimizer.rule=downpour", "optimizer.rule=gem"}
    single = results[results["config"] == results["config"].iloc[0]]
    assert short_labels(single) == {single["config"].iloc[0]: single["config"].iloc[0]}


def test_plot_loss_by_hue_and_on_a_new_figure(results):
    import matplotlib.pyplot as plt

    ax = plot_loss(results, hue="optimizer.rule", y="test_accuracy", logy=False, lw=2)
    try:
        assert isinstance(ax, Axes) and len(ax.lines) == 2
        assert ax.get_yscale() == "linear" and ax.lines[0].get_linewidth() == 2
    finally:
        plt.close(ax.figure)


def test_plot_final_vs_workers(results, ax):
    out = plot_final_vs_workers(results, ax=ax)
    assert out is ax
    labels = sorted(line.get_label() for line in ax.containers)
    assert labels == ["optimizer.rule=downpour", "optimizer.rule=gem"]  # what differs
    # The diverged run at 8 workers is marked with an x instead of a finite mean.
    markers = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(markers) == 1 and list(markers[0].get_xdata()) == [8]
    by_rule = plot_final_vs_workers(results, hue="optimizer.rule", ax=Figure().add_subplot())
    assert isinstance(by_rule, Axes)


def test_plot_pi_median_and_energy_ratio(results, ax):
    assert plot_pi_median(results, smooth=5, ax=ax) is ax
    assert len(ax.lines) == 1 + 2  # the pi = 1 reference + two gem configurations
    ratio_ax = plot_energy_ratio(results, x="time", ax=Figure().add_subplot())
    curves = [line for line in ratio_ax.lines if line.get_label().startswith("optimizer")]
    assert len(curves) == 2
    ys = np.concatenate([line.get_ydata() for line in curves])
    assert np.allclose(ys[np.isfinite(ys)], 0.75)  # central over target energy
    # Runs written before target_energy existed: their proxy_energy held the target.
    older = results.drop(columns="target_energy").assign(proxy_energy=results.target_energy)
    old_ax = plot_energy_ratio(older, x="time", ax=Figure().add_subplot())
    old_ys = [line.get_ydata() for line in old_ax.lines if line.get_label().startswith("opt")]
    np.testing.assert_allclose(np.concatenate(old_ys), ys)


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


def _geometric_line(ax):
    return [line for line in ax.lines if line.get_label().startswith("geometric")]


def test_plot_staleness_hist(results, ax):
    subset = results[results["workers.count"] == 4]
    assert plot_staleness_hist(subset, n_workers=4, ax=ax) is ax
    (theory,) = _geometric_line(ax)
    k = theory.get_xdata()
    np.testing.assert_allclose(theory.get_ydata(), 0.25 * 0.75**k)
    heights = ax.patches[0].get_data().values  # the observed fractions sum to one
    assert heights.sum() == pytest.approx(1.0)
    # Without n and without a compute column nothing says the law holds: no curve.
    plain = plot_staleness_hist(subset, ax=Figure().add_subplot())
    assert isinstance(plain, Axes) and not _geometric_line(plain)
    assert not _geometric_line(plot_staleness_hist(subset, 4, geometric=False, ax=Figure().gca()))


def test_plot_staleness_hist_draws_the_law_for_exponential_compute(results):
    four = results[results["workers.count"] == 4]
    subset = four.assign(**{"workers.compute.dist": "exponential"})
    (theory,) = _geometric_line(plot_staleness_hist(subset, ax=Figure().add_subplot()))
    assert theory.get_label() == "geometric law, n = 4"  # n from the workers.count column
    lognormal = subset.assign(**{"workers.compute.dist": "lognormal"})
    assert not _geometric_line(plot_staleness_hist(lognormal, ax=Figure().add_subplot()))
    grouped = subset.assign(**{"workers.groups": "[{count: 2, speed: 2.0}]"})
    assert not _geometric_line(plot_staleness_hist(grouped, ax=Figure().add_subplot()))
    # geometric=True with no workers.count column: n is the highest worker id + 1.
    bare = subset.drop(columns=["workers.count"])
    (forced,) = _geometric_line(plot_staleness_hist(bare, geometric=True, ax=Figure().gca()))
    assert forced.get_label() == f"geometric law, n = {bare['worker'].max() + 1}"


def test_plots_name_missing_columns(results):
    with pytest.raises(ValueError, match="pi_median"):
        plot_pi_median(results.drop(columns=["pi_median"]))
    with pytest.raises(ValueError, match="workers.n"):
        plot_final_vs_workers(results, workers_col="workers.n")
    with pytest.raises(ValueError, match="pi_leaf_0"):
        plot_pi_heatmap(results.drop(columns=[c for c in results if c.startswith("pi_leaf")]))


def test_plot_run_folder_writes_pngs(sweep_dir, tmp_path):
    written = plot_run_folder(sweep_dir)
    names = {path.name for path in written}
    assert names == {
        "loss_vs_commits.png",
        "loss_vs_worker_steps.png",
        "loss_vs_time.png",
        "final_vs_workers.png",
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


def _exponential_config(n_workers: int) -> dict:
    compute = {"dist": "exponential", "mean": 0.1}
    return {"name": "unit", "workers": {"count": n_workers, "compute": compute, "groups": []}}


def _lines_in(draw) -> list[str]:
    ax = Figure().add_subplot()
    draw(ax)
    return [line.get_label() for line in ax.lines]


def test_plot_run_folder_law_per_timing_setting(tmp_path, make_run):
    out = tmp_path / "out"
    make_run(out, "exp-a", n_workers=4, config=_exponential_config(4), repeat=0)
    make_run(out, "exp-b", n_workers=4, config=_exponential_config(4), repeat=1)
    lognormal = {"name": "unit", "workers": {"count": 4, "compute": {"dist": "lognormal"}}}
    make_run(out, "logn", n_workers=4, config=lognormal)
    names = {path.name for path in plot_run_folder(out)}
    # Two timing settings share n = 4: one histogram each, named by their first run.
    assert {"staleness_n4_exp-a.png", "staleness_n4_logn.png"} <= names
    assert "final_vs_workers.png" not in names  # workers.count was not swept
    results = load_results(out)
    runs = {m["run_id"]: (path, m) for path, m in run_manifests(out)}
    jobs = dict(folder_plots._staleness_jobs(results, runs))
    assert "geometric law, n = 4" in _lines_in(jobs["staleness_n4_exp-a.png"])
    labels = _lines_in(jobs["staleness_n4_logn.png"])
    assert labels and not any(label.startswith("geometric") for label in labels)


def test_plot_run_folder_of_one_run_names_leaves(tmp_path, make_run):
    out = tmp_path / "out"
    make_run(out, "other", n_workers=2)
    trace = fake_trace(40, 4, seed=3)
    params = {f"['layer{i}']['w']": np.ones((2, 2), np.float32) for i in range(3)}
    manifest = fake_manifest("one", params, sweep={}, n_commits=40)
    run_dir = write_run(out, "one", manifest, trace, fake_metrics(trace, gem=True), params)
    written = plot_run_folder(run_dir)
    assert {p.parent for p in written} == {run_dir / "plots"}
    names = {p.name for p in written}
    assert "pi_heatmap_one.png" in names and "staleness_n4.png" in names
    assert not any("other" in name for name in names)  # the sibling run is left out
    runs = {m["run_id"]: (path, m) for path, m in run_manifests(out)}
    jobs = dict(folder_plots._folder_jobs(load_results(out).query("run_id == 'one'"), runs))
    ax = Figure().add_subplot()
    jobs["pi_heatmap_one.png"](ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["layer0/w", "layer1/w", "layer2/w"]


def test_plot_run_folder_skips_absent_columns(tmp_path, make_run):
    out = tmp_path / "out"
    make_run(out, "plain", gem=False)
    names = {path.name for path in plot_run_folder(out, tmp_path / "pngs")}
    assert names == {"loss_vs_commits.png", "loss_vs_worker_steps.png", "loss_vs_time.png",
                     "staleness_n4.png"}  # fmt: skip
    (tmp_path / "empty").mkdir()
    assert plot_run_folder(tmp_path / "empty") == []


def test_cli_plot_writes_into_out(sweep_dir, tmp_path):
    from typer.testing import CliRunner

    from gemsim.cli import app

    out = tmp_path / "figures"
    result = CliRunner().invoke(app, ["plot", str(sweep_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "final_vs_workers.png").read_bytes()[:4] == b"\x89PNG"
    missing = CliRunner().invoke(app, ["plot", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "nowhere" in missing.output


def test_plot_class_accuracy_draws_a_line_per_class(ax):
    """Two repeats of one configuration: each class's line is their mean, evaluation by
    evaluation."""
    rows = [
        {"run_id": r, "commit": k, "time": 0.5 * k + r_i, "test_accuracy_class_0": 0.1 * k,
         "test_accuracy_class_1": 0.5 + 0.1 * r_i, "test_accuracy_class_10": np.nan}
        for r_i, r in enumerate(("a", "b")) for k in range(3)
    ]  # fmt: skip
    frame = pd.DataFrame(rows).assign(config="c")
    out = plot_class_accuracy(frame, ax=ax)
    assert out is ax and [line.get_label() for line in ax.lines] == ["0", "1"]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [0.55] * 3)
    np.testing.assert_allclose(ax.lines[0].get_xdata(), [0.5, 1.0, 1.5])  # mean times
    with pytest.raises(ValueError, match="test_accuracy_class_<k>"):
        plot_class_accuracy(frame.drop(columns=[c for c in frame if "class" in c]))


def test_plot_worker_accuracy_takes_each_runs_last_evaluation(ax):
    rows = [
        {"run_id": r, "config": cfg, "commit": k, "worker": w, "accuracy": 0.1 * k + 0.01 * w,
         "mean_compute_time": 0.1 * (w + 1)}
        for r, cfg in (("a", "gem"), ("b", "sync")) for k in (9, 19) for w in range(4)
    ]  # fmt: skip
    out = plot_worker_accuracy(pd.DataFrame(rows), ax=ax)
    assert out is ax and len(ax.collections) == 2
    points = ax.collections[0].get_offsets()
    np.testing.assert_allclose(points[:, 1], [1.9, 1.91, 1.92, 1.93])  # commit 19 only
    np.testing.assert_allclose(points[:, 0], [0.1, 0.2, 0.3, 0.4])
