"""`load_summary`: one row per run of a results folder, from the manifests only."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from gemsim.results._run_columns import RUN_COLUMNS, _order, _run_row, _sweep_of, run_manifests
from gemsim.results._run_summary import extra_final_keys, summary_column, summary_values
from gemsim.types import Status

SUMMARY_COLUMNS = (
    "final_train_loss",
    "final_test_loss",
    "final_test_accuracy",
    "staleness_mean",
    "staleness_var",
    "staleness_max",
    "wall_seconds",
    "n_commits",
    "error",
)
"""Per-run columns of :func:`load_summary` after the run-level and sweep columns."""


def summary_columns_of(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    """The run summary columns beyond `SUMMARY_COLUMNS` that any of ``manifests`` records
    (the heterogeneity measures of their `final` blocks: `gemsim.results.summary_column`)."""
    return [summary_column(k) for k in extra_final_keys(manifests)]


def _summary_row(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {**_base_summary_row(manifest), **summary_values(manifest)}


def _base_summary_row(manifest: Mapping[str, Any]) -> dict[str, Any]:
    final = manifest.get("final") or {}
    staleness = manifest.get("staleness") or {}

    def num(value: Any) -> float:
        return math.nan if value is None else float(value)

    return {
        **_run_row(manifest),
        "final_train_loss": num(final.get("train_loss")),
        "final_test_loss": num(final.get("test_loss")),
        "final_test_accuracy": num(final.get("test_accuracy")),
        "staleness_mean": num(staleness.get("mean")),
        "staleness_var": num(staleness.get("var")),
        "staleness_max": num(staleness.get("max")),
        "wall_seconds": num(manifest.get("wall_seconds")),
        "n_commits": manifest.get("n_commits"),
        "error": manifest.get("error"),
    }


def load_summary(
    out_dir: str | os.PathLike[str],
    *,
    statuses: Iterable[Status | str] = tuple(Status),
) -> pd.DataFrame:
    """One row per run, from the manifests only (no parquet is read).

    Columns: ``run_id, name, config, status, seed, repeat``, the sweep columns
    (as in :func:`load_results`), then ``SUMMARY_COLUMNS``: final train/test loss
    and test accuracy, staleness mean/var/max, wall seconds, number of commits and
    the error message of failed runs; then the heterogeneity measures any run records
    (``frame.attrs["summary_columns"]``, in reading order; NaN for a run without them, such as
    one written before they existed): ``best_test_accuracy``,
    ``final_test_accuracy_class_<k>`` (each class's final test accuracy),
    ``final_test_accuracy_classes_0_1`` (the mean over the classes a worker group alone holds;
    ``..._other_classes`` over the rest), ``final_worker_accuracy_worst``, ``..._p10``,
    ``..._mean`` and their ``best_`` (largest over the evaluations), ``final_worker_loss_*``,
    and ``time_to_accuracy_<x>`` (virtual seconds to the first evaluation at or above each
    of ``eval.targets``; ``..._classes_0_1`` for a group's classes; NaN: never reached).
    Values the manifest stored as null are NaN.

    Args:
        out_dir: a results folder of run folders.
        statuses: which run statuses to include; default all, failed runs too,
            so that the summary shows what went wrong.
    """
    manifests = [manifest for _, manifest in run_manifests(out_dir, statuses)]
    if not manifests:
        return pd.DataFrame(columns=[*RUN_COLUMNS, *SUMMARY_COLUMNS])
    summary = summary_columns_of(manifests)
    ordered = [*SUMMARY_COLUMNS, *summary]
    frame = _order(pd.DataFrame([_summary_row(m) for m in manifests]), ordered)
    frame = frame.reset_index(drop=True)
    frame.attrs["sweep_columns"] = _sweep_of(frame, ordered)
    frame.attrs["summary_columns"] = summary
    return frame
