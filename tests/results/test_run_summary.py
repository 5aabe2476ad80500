"""The run summary values (`gemsim.results.heterogeneity_metrics`) on evaluations written by
hand, their column names, and the per-run tables over folders old and new."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gemsim.results import (
    SUMMARY_COLUMNS,
    class_groups,
    final_key,
    heterogeneity_metrics,
    load_results,
    load_summary,
    summary_column,
    summary_order,
    sweep_columns_of,
    to_xarray,
)

NAN = math.nan


def _eval(acc, classes, worst=NAN, p10=NAN, mean=NAN):
    values = {"train_loss": 1.0, "test_loss": 1.0, "test_accuracy": acc}
    values.update({f"test_accuracy_class_{k}": a for k, a in enumerate(classes)})
    if not math.isnan(worst):
        values.update(worker_accuracy_worst=worst, worker_accuracy_p10=p10)
        values.update(worker_accuracy_mean=mean, worker_loss_worst=2.0)
    return values


# three classes; a group holds class 0, whose accuracy rises last (and class 2 is missing
# from the test set at first: NaN)
EVALS = [
    (1.0, _eval(0.4, [0.0, 0.6, NAN], worst=0.1, p10=0.2, mean=0.5)),
    (2.5, _eval(0.7, [0.2, 0.9, 0.8], worst=0.4, p10=0.45, mean=0.7)),
    (4.0, _eval(0.65, [0.85, 0.7, 0.5], worst=0.3, p10=0.5, mean=0.75)),
]


def test_the_values_of_hand_written_evaluations():
    groups = class_groups([(0,)], 3)
    assert groups == {"classes_0": (0,), "other_classes": (1, 2)}
    got = heterogeneity_metrics(EVALS, EVALS[-1][1], targets=[0.6, 0.8, 0.9], groups=groups)
    assert _plain(got) == {
        "test_accuracy_class_0": 0.85,
        "test_accuracy_class_1": 0.7,
        "test_accuracy_class_2": 0.5,
        "test_accuracy_classes_0": 0.85,
        "test_accuracy_other_classes": 0.6,
        "worker_accuracy_worst": 0.3,
        "worker_accuracy_p10": 0.5,
        "worker_accuracy_mean": 0.75,
        "worker_loss_worst": 2.0,
        "best_test_accuracy": 0.7,
        "best_worker_accuracy_worst": 0.4,
        "best_worker_accuracy_p10": 0.5,
        "best_worker_accuracy_mean": 0.75,
        "time_to_accuracy_0.6": 2.5,
        "time_to_accuracy_0.6_classes_0": 4.0,
        "time_to_accuracy_0.6_other_classes": 1.0,  # class 2 missing: the mean of class 1
        "time_to_accuracy_0.8": None,
        "time_to_accuracy_0.8_classes_0": 4.0,
        "time_to_accuracy_0.8_other_classes": 2.5,  # (0.9 + 0.8) / 2
        "time_to_accuracy_0.9": None,
        "time_to_accuracy_0.9_classes_0": None,
        "time_to_accuracy_0.9_other_classes": None,
    }


def _plain(values: dict) -> dict:
    """NaN as None (NaN equals nothing), other values rounded off their last bits."""
    return {k: None if math.isnan(v) else round(v, 12) for k, v in values.items()}


def test_never_reached_is_nan_and_not_measured_is_absent():
    got = heterogeneity_metrics(EVALS, EVALS[-1][1], targets=[0.9])
    assert math.isnan(got["time_to_accuracy_0.9"])
    assert not [k for k in got if "classes" in k]  # no group, no per-group value
    # a problem without accuracy (the quadratic): no time to a target, its best accuracy NaN
    quadratic = [(1.0, {"train_loss": 1.0, "test_loss": 1.0, "test_accuracy": NAN})]
    got = heterogeneity_metrics(quadratic, quadratic[0][1], targets=[0.5])
    assert _plain(got) == {"best_test_accuracy": None}
    # evaluations out of time order: the earliest evaluation at the target counts
    shuffled = [EVALS[2], EVALS[0], EVALS[1]]
    got = heterogeneity_metrics(shuffled, EVALS[2][1], targets=[0.6])
    assert got["time_to_accuracy_0.6"] == 2.5


def test_groups_without_claims_or_with_every_class_claimed():
    assert class_groups([], 10) == {}
    assert class_groups([(1, 0), (2,)], 3) == {"classes_0_1": (0, 1), "classes_2": (2,)}


def test_column_names_round_trip_and_read_in_order():
    keys = ["time_to_accuracy_0.8", "worker_accuracy_worst", "test_accuracy_class_10",
            "time_to_accuracy_0.5_other_classes", "test_accuracy_class_2", "best_test_accuracy",
            "time_to_accuracy_0.5", "test_accuracy_other_classes", "test_accuracy_classes_0",
            "time_to_accuracy_0.5_classes_0", "best_worker_accuracy_worst"]  # fmt: skip
    assert summary_order(keys) == [
        "best_test_accuracy",
        "test_accuracy_class_2",
        "test_accuracy_class_10",
        "test_accuracy_classes_0",
        "test_accuracy_other_classes",
        "worker_accuracy_worst",
        "best_worker_accuracy_worst",
        "time_to_accuracy_0.5",
        "time_to_accuracy_0.5_classes_0",
        "time_to_accuracy_0.5_other_classes",
        "time_to_accuracy_0.8",
    ]
    for key in keys:
        assert final_key(summary_column(key)) == key
    assert summary_column("worker_accuracy_worst") == "final_worker_accuracy_worst"
    assert summary_column("time_to_accuracy_0.8") == "time_to_accuracy_0.8"


NEW_FINAL = {
    "train_loss": 0.5,
    "test_loss": 0.6,
    "test_accuracy": 0.9,
    "test_accuracy_class_0": 0.8,
    "worker_accuracy_worst": 0.25,
    "time_to_accuracy_0.8": None,  # never reached
}


def test_summary_tables_over_old_and_new_runs(tmp_path, make_run):
    sweep = {"optimizer.lr": 0.1}
    make_run(tmp_path, "new", sweep=sweep, final=NEW_FINAL)
    make_run(tmp_path, "old", sweep={"optimizer.lr": 0.2})  # the three values only
    summary = load_summary(tmp_path).set_index("run_id")
    extra = ["final_test_accuracy_class_0", "final_worker_accuracy_worst", "time_to_accuracy_0.8"]
    assert list(summary.columns[-len(extra) :]) == extra
    assert summary.attrs["summary_columns"] == extra
    assert summary.attrs["sweep_columns"] == ["optimizer.lr"]
    assert summary.loc["new", "final_worker_accuracy_worst"] == 0.25
    assert np.isnan(summary.loc["new", "time_to_accuracy_0.8"])
    assert summary.loc[["old"], extra].isna().all().all()
    frame = load_results(tmp_path)
    assert list(frame.columns[-len(extra) :]) == extra
    assert frame.groupby("run_id")["final_test_accuracy_class_0"].first()["new"] == 0.8
    frame.attrs = {}  # lost: the dotted time_to_ names are still not sweep columns
    assert sweep_columns_of(frame) == ["optimizer.lr"]


def test_a_folder_of_old_runs_has_the_columns_it_had(tmp_path, make_run):
    make_run(tmp_path, "old")
    summary = load_summary(tmp_path)
    assert list(summary.columns)[-len(SUMMARY_COLUMNS) :] == list(SUMMARY_COLUMNS)
    assert summary.attrs["summary_columns"] == []


def test_xarray_holds_summary_columns_as_run_coordinates(tmp_path, make_run):
    pytest.importorskip("xarray")
    make_run(tmp_path, "new", final=NEW_FINAL)
    dataset = to_xarray(load_results(tmp_path))
    assert "final_worker_accuracy_worst" in dataset.coords
    assert float(dataset["final_worker_accuracy_worst"].sel(run_id="new")) == 0.25
