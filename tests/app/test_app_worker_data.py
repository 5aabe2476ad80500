"""Runs whose workers have data of their own record what shows the bias: per-class accuracy
and the per-worker summaries in the metrics frame, `workers.parquet` and
`worker_summary.parquet` in the run folder (round-tripped, readable from Python), the
quadratic's optima; `gemsim trace` and `gemsim show` print the partition; `gemsim plot` draws
the per-class and speed-data figures."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scenario_docs import quadratic_doc, write_doc

from gemsim import config, problems, results
from gemsim.app import render_show_file, render_trace_report, run, show_file, trace_scenario

N = 4
SPLIT_DOC = {
    "name": "split",
    "seed": 3,
    "workers": {
        "count": N,
        "compute": {"dist": "exponential", "mean": 0.1},
        # The slowest worker alone holds class 0.
        "groups": [{"count": 1, "speed": 0.2, "data": {"classes": [0]}}],
    },
    "budget": {"commits": 40},
    "problem": {
        "model": "logistic",
        "dataset": {"name": "synthetic", "n_train": 400, "n_test": 120, "dim": 6, "classes": 3},
        "batch_size": 8,
        "partition": {"name": "dirichlet", "alpha": 0.5, "min_size": 16},
    },
    "optimizer": {"rule": "downpour", "lr": 0.1},
    "eval": {"every": 20, "per_worker": 24},
}


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split")
    scenario = config.parse_scenario(SPLIT_DOC, "split")
    result = run(scenario)
    return scenario, result, result.write(folder / "out")


def test_the_frame_holds_per_class_accuracy_and_the_workers_summaries(split_run):
    _, result, _ = split_run
    frame, workers = result.metrics, result.worker_evals
    evals = frame.dropna(subset=["train_loss"])
    assert [f"test_accuracy_class_{k}" for k in range(3)] == [
        c for c in frame.columns if c.startswith("test_accuracy_class_")
    ]
    assert evals["commit"].tolist() == [19, 39] == sorted(workers["commit"].unique())
    for _, row in evals.iterrows():
        mine = workers[workers["commit"] == row["commit"]]
        assert mine["worker"].tolist() == list(range(N))
        assert row["worker_loss_mean"] == pytest.approx(mine["loss"].mean(), rel=1e-6)
        assert row["worker_loss_worst"] == pytest.approx(mine["loss"].max())
        assert row["worker_accuracy_worst"] == pytest.approx(mine["accuracy"].min())
        assert row["worker_accuracy_p10"] == pytest.approx(mine["accuracy"].quantile(0.1))


def test_the_worker_summary_counts_commits_and_holds_the_shards(split_run):
    scenario, result, _ = split_run
    summary, trace = result.worker_summary, result.trace
    np.testing.assert_array_equal(summary["commits"], np.bincount(trace.worker, minlength=N))
    assert summary["commit_share"].sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(summary["accepted"], summary["commits"])  # downpour
    compute = pd.Series(trace.compute_time).groupby(trace.worker).mean()
    np.testing.assert_allclose(summary["mean_compute_time"], compute.reindex(range(N)))
    labels = problems.load_dataset(config.problem_args(scenario)[1], scenario.seed).y_train
    shards = problems.split_shards(config.data_split(scenario), labels, N, 3, n_classes=3)
    np.testing.assert_array_equal(summary["shard_size"], shards.sizes)


def test_the_run_folder_round_trips_its_worker_files(split_run):
    _, result, folder = split_run
    assert (folder / "workers.parquet").is_file() and (folder / "worker_summary.parquet").is_file()
    back = results.read_run(folder)
    pd.testing.assert_frame_equal(back.worker_evals, result.worker_evals)
    pd.testing.assert_frame_equal(back.worker_summary, result.worker_summary)
    loaded = results.load_worker_evals(folder.parent)
    assert (loaded["run_id"] == result.run_id).all() and len(loaded) == 2 * N
    assert {"mean_compute_time", "shard_size"} <= set(loaded.columns)
    frame = results.load_results(folder.parent)
    assert "worker_accuracy_p10" in frame.columns and "test_accuracy_class_2" in frame.columns


def test_plot_draws_the_per_class_and_speed_data_figures(split_run):
    _, result, folder = split_run
    written = {p.name for p in results.plot_run_folder(folder.parent)}
    assert {f"class_accuracy_{result.run_id}.png", "worker_accuracy_vs_speed.png"} <= written


def test_accepted_commits_and_the_quadratics_optima(tmp_path):
    """Ringmaster discards the commits it finds too stale (weight 0): they count as commits,
    not as accepted ones. The optima c_w are the seed's."""
    model = {"name": "quadratic", "dim": 3, "noise": 0.1, "heterogeneity": 1.0}
    doc = quadratic_doc(
        workers=N,
        commits=120,
        problem={"model": model, "batch_size": 1},
        optimizer={"rule": "ringmaster", "lr": 0.05, "threshold": 1},
    )
    result = run(config.parse_scenario(doc, "q"))
    weight = result.metrics["weight"].to_numpy()
    assert (weight == 0).any()
    accepted = np.bincount(result.trace.worker[weight != 0], minlength=N)
    np.testing.assert_array_equal(result.worker_summary["accepted"], accepted)
    spec = problems.Quadratic(dim=3, condition=10.0, noise=0.1, heterogeneity=1.0)
    np.testing.assert_array_equal(result.worker_optima(), problems.worker_optima(spec, 11, N))
    back = results.read_run(result.write(tmp_path))
    np.testing.assert_array_equal(back.worker_optima(), result.worker_optima())
    assert np.isnan(result.worker_evals["accuracy"]).all()


def test_trace_and_show_print_the_partition(tmp_path):
    path = write_doc(tmp_path, SPLIT_DOC)
    (report,) = trace_scenario(path)
    assert report["partition"].startswith(f"{N} workers hold 400 of 400 training examples")
    assert "partition of the training set" in render_trace_report(report)
    shown = show_file(path)
    assert shown["runs"][0]["partition"] == report["partition"]
    assert "# partition of the training set among the workers (every run)" in render_show_file(
        shown
    )
    plain = write_doc(tmp_path, quadratic_doc(), "plain.yaml")
    assert "partition" not in trace_scenario(plain)[0]
    # The labels alone: no JAX, however the partition is drawn.
    code = f"import sys; from gemsim.app import trace_scenario; trace_scenario({str(path)!r}); "
    code += "assert 'jax' not in sys.modules, 'trace imported JAX'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_trace_show_and_run_refuse_the_same_small_shards(tmp_path):
    """A shard smaller than the batch: `run` refuses it when it builds the problem, and
    `trace` and `show` refuse it too, naming the batch size; a Dirichlet partition draws
    again instead (its min_size rises to the batch size)."""
    from gemsim.config import ScenarioError

    sizes = {"name": "quantity", "dist": {"dist": "lognormal", "median": 1.0, "sigma": 2.5}}
    doc = {**SPLIT_DOC, "problem": {**SPLIT_DOC["problem"], "batch_size": 32, "partition": sizes}}
    doc["workers"] = {k: v for k, v in SPLIT_DOC["workers"].items() if k != "groups"}
    path = write_doc(tmp_path, doc, "small.yaml")
    for refuse in (trace_scenario, show_file, lambda p: run(config.load_scenario(p))):
        with pytest.raises(ScenarioError, match=r"problem\.batch_size: worker \d+ holds"):
            refuse(path)
    skewed = {"name": "dirichlet", "alpha": 0.3}  # min_size 10 < the batch 32: drawn again
    doc["problem"] = {**doc["problem"], "partition": skewed}
    (report,) = trace_scenario(write_doc(tmp_path, doc, "dirichlet.yaml"))
    shards = config.scenario_shards(config.parse_scenario(doc, "d"))[0]
    assert shards.sizes.min() >= 32 and report["partition"].startswith(f"{N} workers hold 400")
