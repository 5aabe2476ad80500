"""load_results / load_summary / to_xarray over synthetic results folders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gemsim.results import (
    RUN_COLUMNS,
    SUMMARY_COLUMNS,
    config_label,
    load_results,
    load_summary,
    sweep_columns,
    sweep_columns_of,
    to_xarray,
)
from gemsim.types import Status

SWEEP = ["optimizer", "optimizer.lr", "optimizer.rule", "workers.count"]
GEM_ONLY = ["pi_median", "proxy_energy", "central_energy", "pi_leaf_0", "pi_leaf_2"]


def test_columns_follow_the_documented_shape(sweep_dir):
    frame = load_results(sweep_dir)
    cols = list(frame.columns)
    assert cols[: len(RUN_COLUMNS)] == list(RUN_COLUMNS)
    assert cols[len(RUN_COLUMNS) : len(RUN_COLUMNS) + len(SWEEP)] == SWEEP
    metrics = cols[len(RUN_COLUMNS) + len(SWEEP) :]
    leading = ["commit", "time", "worker", "staleness", "batch_loss", "update_norm", "weight"]
    gem = ["pi_median", "frac_pi_zero", "frac_pi_max", "frac_dtheta_zero", "proxy_energy"]
    gem += ["target_energy", "central_energy"]
    leaves = ["pi_leaf_0", "pi_leaf_1", "pi_leaf_2"]
    trailing = ["train_loss", "test_loss", "test_accuracy", "worker_step", "mean_worker_step"]
    assert metrics == [*leading, *gem, *leaves, *trailing]
    assert sweep_columns_of(frame) == SWEEP


def test_rows_are_runs_times_commits(sweep_dir):
    frame = load_results(sweep_dir)
    # 8 ok runs with 50 or 70 commits, one diverged run with 40; failed/hidden/corrupt skipped.
    assert len(frame) == 2 * 2 * (50 + 70) + 40
    assert frame["run_id"].nunique() == 9
    assert set(frame["status"]) == {"ok", "diverged"}
    counts = frame.groupby("run_id").size()
    assert counts["gem-4-1"] == 70 and counts["downpour-2-0"] == 50
    run = frame[frame["run_id"] == "gem-4-1"]
    assert run["workers.count"].eq(4).all() and run["optimizer.rule"].eq("gem").all()
    assert run["optimizer.lr"].eq(0.1).all() and run["repeat"].eq(1).all()
    assert run["optimizer"].iloc[0] == "{lr: 0.1, rule: gem}"
    assert run["config"].iloc[0] == "optimizer={lr: 0.1, rule: gem}, workers.count=4"
    assert frame.groupby("config")["run_id"].nunique().max() == 2  # repeats share a config
    downpour = frame[frame["optimizer.rule"] == "downpour"]
    assert downpour[GEM_ONLY].isna().all().all()
    assert frame["seed"].dtype == np.int64 and frame["workers.count"].dtype == np.int64


def test_worker_step_counts_each_workers_commits(sweep_dir):
    frame = load_results(sweep_dir)
    for _, run in frame.groupby("run_id"):
        run = run.sort_values("commit")
        for _, rows in run.groupby("worker"):
            np.testing.assert_array_equal(rows["worker_step"], np.arange(1, len(rows) + 1))
        assert run["worker_step"].max() <= len(run)
        seen = np.array([len(set(run["worker"].iloc[: i + 1])) for i in range(len(run))])
        np.testing.assert_allclose(run["mean_worker_step"], np.arange(1, len(run) + 1) / seen)


def test_statuses_and_columns_selection(sweep_dir):
    every = load_results(sweep_dir, statuses=tuple(Status))
    assert len(every) == 2 * 2 * (50 + 70) + 40 + 40
    assert "gem-8-0" in set(every["run_id"])
    small = load_results(sweep_dir, columns=["train_loss", "pi_median", "absent"])
    metric_cols = list(small.columns[len(RUN_COLUMNS) + len(SWEEP) :])
    assert metric_cols == [
        "commit",
        "worker",
        "pi_median",
        "train_loss",
        "worker_step",
        "mean_worker_step",
    ]
    assert len(small) == 2 * 2 * (50 + 70) + 40


def test_existing_step_column_is_kept(tmp_path, make_run):
    run_dir = make_run(tmp_path, "r", n_workers=3)
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    metrics.assign(step=np.zeros(len(metrics), dtype=np.int64)).to_parquet(
        run_dir / "metrics.parquet"
    )
    frame = load_results(tmp_path)
    assert frame["step"].eq(0).all() and frame["worker_step"].min() == 1
    assert frame["config"].eq("unit").all()  # no sweep: the scenario name
    assert sweep_columns_of(frame) == []


def test_sweep_columns_flatten_tables_and_lists():
    columns = sweep_columns(
        {
            "optimizer": {"rule": "gem", "gem": {"kappa": 2.0}},
            "workers.count": 8,
            "problem.mlp.hidden": [64, 32],
            "optimizer.rule": "explicit",
        }  # fmt: skip
    )
    assert columns == {
        "optimizer.gem.kappa": 2.0,
        "optimizer.rule": "explicit",  # an explicitly swept path wins over a leaf
        "optimizer": "{gem: {kappa: 2}, rule: gem}",
        "problem.mlp.hidden": "[64, 32]",
        "workers.count": 8,
    }


def test_config_label_groups_repeats():
    manifest = {"name": "demo", "sweep": {"seed": 3, "workers.count": 8, "optimizer": {"lr": 0.5}}}
    assert config_label(manifest) == "optimizer={lr: 0.5}, workers.count=8"
    assert config_label({"name": "demo", "sweep": {"seed": 4}}) == "demo"


def test_load_summary(sweep_dir):
    summary = load_summary(sweep_dir)
    assert len(summary) == 10 and summary["run_id"].is_unique
    assert list(summary.columns) == [*RUN_COLUMNS, *SWEEP, *SUMMARY_COLUMNS]
    row = summary.set_index("run_id").loc["gem-8-0"]
    assert row["status"] == "failed" and row["error"] == "boom"
    ok = summary.set_index("run_id").loc["gem-2-0"]
    assert ok["final_train_loss"] == 0.5 and np.isnan(ok["final_test_accuracy"])
    assert ok["staleness_max"] == 17 and ok["n_commits"] == 50 and ok["wall_seconds"] == 1.25
    finished = load_summary(sweep_dir, statuses=["ok"])
    assert len(finished) == 8


def test_empty_and_missing_folders(tmp_path):
    assert list(load_results(tmp_path).columns) == list(RUN_COLUMNS)
    assert load_summary(tmp_path).empty
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_results(tmp_path / "nope")


def test_to_xarray(sweep_dir):
    pytest.importorskip("xarray")  # an optional extra
    frame = load_results(sweep_dir)
    dataset = to_xarray(frame)
    assert dict(dataset.sizes) == {"run_id": 9, "commit": 70}
    assert "workers.count" in dataset.coords and "train_loss" in dataset.data_vars
    gem = dataset.sel(run_id="gem-2-0")
    assert int(gem["workers.count"]) == 2
    assert np.isnan(gem["batch_loss"].sel(commit=60))  # that run has 50 commits
