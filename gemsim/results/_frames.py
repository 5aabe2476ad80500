"""`load_results`: a results folder's per-commit metrics as one tidy pandas frame (and an
optional xarray view), with the derived step and token columns."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from gemsim.results._run_columns import (
    _DEFAULT_STATUSES,
    RUN_COLUMNS,
    _order,
    _run_row,
    _sweep_of,
    run_manifests,
    sweep_columns_of,
)
from gemsim.results._run_folder import METRICS_FILE
from gemsim.results._run_summary import summary_values
from gemsim.results._summary_frame import summary_columns_of
from gemsim.types import Status


def _read_metrics(path: Path, columns: Sequence[str] | None) -> pd.DataFrame:
    if columns is None:
        return pd.read_parquet(path, engine="pyarrow")
    present = set(pq.read_schema(path).names)
    wanted = list(dict.fromkeys(["commit", "worker", *columns]))
    return pd.read_parquet(path, engine="pyarrow", columns=[c for c in wanted if c in present])


_LEADING_METRICS = ("commit", "time", "worker", "step", "staleness", "batch_loss",
                    "update_norm", "weight", "pi_median", "frac_pi_zero", "frac_pi_max",
                    "frac_dtheta_zero", "proxy_energy", "target_energy",
                    "central_energy")  # fmt: skip
_EVAL_METRICS = ("train_loss", "test_loss", "test_accuracy")
_WORKER_METRICS = ("worker_loss_mean", "worker_loss_worst", "worker_loss_p90",
                   "worker_accuracy_mean", "worker_accuracy_worst",
                   "worker_accuracy_p10")  # fmt: skip
_STEP_METRICS = ("worker_step", "mean_worker_step", "tokens")
_CLASS_ACCURACY = re.compile(r"test_accuracy_class_(\d+)$")


def class_accuracy_columns(names: Iterable[str]) -> list[str]:
    """The ``test_accuracy_class_<k>`` columns among ``names``, by class."""
    found = [(int(m.group(1)), c) for c in names if (m := _CLASS_ACCURACY.match(str(c)))]
    return [c for _, c in sorted(found)]


def _metric_order(names: Iterable[str]) -> list[str]:
    """Metrics columns in a fixed order, whichever run was read first.

    Known per-commit columns, ``pi_leaf_<i>`` by i, any other column as first
    seen, then the eval columns (``test_accuracy_class_<k>`` by k, the per-worker
    summaries) and the derived step columns.
    """
    names = list(names)
    leaves = sorted((c for c in names if re.fullmatch(r"pi_leaf_\d+", c)), key=lambda c: int(c[8:]))
    classes = class_accuracy_columns(names)
    trailing = [*_EVAL_METRICS, *classes, *_WORKER_METRICS, *_STEP_METRICS]
    known = {*_LEADING_METRICS, *trailing, *leaves}
    other = [c for c in names if c not in known]
    ordered = [*_LEADING_METRICS, *leaves, *other, *trailing]
    return [c for c in ordered if c in names]


def _add_worker_steps(metrics: pd.DataFrame) -> pd.DataFrame:
    """Add ``worker_step`` and ``mean_worker_step`` (both count the current commit)."""
    if "worker" not in metrics.columns:
        return metrics
    ordered = metrics.sort_values("commit", kind="stable") if "commit" in metrics else metrics
    steps = ordered.groupby("worker", sort=False).cumcount() + 1
    # Commits so far over workers seen so far: the average progress of a worker, which
    # rises smoothly, unlike the committing worker's own count.
    seen = (~ordered["worker"].duplicated()).cumsum()
    mean = pd.Series(range(1, len(ordered) + 1), index=ordered.index) / seen
    return metrics.assign(
        worker_step=steps.reindex(metrics.index).astype("int64"),
        mean_worker_step=mean.reindex(metrics.index).astype("float64"),
    )


def _local_steps(manifest: Mapping[str, Any]) -> int:
    """Local steps a commit of the run holds: its rule's ``optimizer.window`` (1 without)."""
    window = ((manifest.get("config") or {}).get("optimizer") or {}).get("window", 1)
    return window if isinstance(window, int) and window >= 1 else 1


def _own_local_steps(run_dir: Path) -> pd.DataFrame | None:
    """The ``worker`` and ``local_steps`` columns of the run's trace where its workers take
    local steps of their own (the trace then has that column), else None."""
    path = run_dir / "trace.parquet"
    if not path.is_file() or "local_steps" not in pq.read_schema(path).names:
        return None
    return pd.read_parquet(path, engine="pyarrow", columns=["worker", "local_steps"])


def _add_tokens(metrics: pd.DataFrame, manifest: Mapping[str, Any], run_dir: Path) -> pd.DataFrame:
    """A language model's runs: add ``tokens``, the characters the workers' gradients had
    processed by each commit, this one included (its local steps x batch x context each)."""
    config = manifest.get("config") or {}
    model = (config.get("problem") or {}).get("model") or {}
    if model.get("name") != "transformer" or "commit" not in metrics.columns:
        return metrics
    per_step = config["problem"]["batch_size"] * model["context"]
    commit = metrics["commit"].astype("int64")
    own = _own_local_steps(run_dir)
    if own is None:
        return metrics.assign(tokens=(commit + 1) * _local_steps(manifest) * per_step)
    steps = own["local_steps"].to_numpy().cumsum()
    return metrics.assign(tokens=steps[commit.to_numpy()] * per_step)


def _run_frame(
    path: Path,
    manifest: Mapping[str, Any],
    columns: Sequence[str] | None,
    summary: Sequence[str] = (),
) -> pd.DataFrame:
    metrics = _add_tokens(_add_worker_steps(_read_metrics(path, columns)), manifest, path.parent)
    values = summary_values(manifest)
    row = {**_run_row(manifest), **{c: values[c] for c in summary if c in values}}
    run = pd.DataFrame(row, index=metrics.index)  # scalars broadcast
    frame = pd.concat([run, metrics], axis=1)
    frame.attrs = {"metric_columns": list(metrics.columns)}
    return frame


def load_results(
    out_dir: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    statuses: Iterable[Status | str] = _DEFAULT_STATUSES,
) -> pd.DataFrame:
    """One tidy frame over every finished run in ``out_dir``.

    Shape: one row per (run, row of its ``metrics.parquet``), i.e. per commit, so
    ``len(frame)`` is the sum of the runs' commits. Columns, in order:

    * run-level: ``run_id, name, config, status, seed, repeat``; ``config`` is a
      readable label of the sweep point (``optimizer.rule=gem, workers.count=8``;
      the scenario name when nothing is swept), shared by the repeats of one
      configuration;
    * sweep columns, sorted, one per swept dotted path (a sub-table value is its
      readable text plus one column per scalar leaf: :func:`sweep_columns`);
      missing where a run does not sweep that field;
    * metrics columns in a fixed order (``commit, time, worker, staleness,
      batch_loss, ...``); columns only some rules write are NaN elsewhere; the
      eval columns ``train_loss, test_loss, test_accuracy`` are NaN except on
      evaluation commits, and so are, for classifiers, ``test_accuracy_class_<k>``
      (the test accuracy of class k; NaN for a class the test set lacks) and, where
      the workers have data of their own (a partition, the heterogeneous
      quadratic), the central model on each worker's own data summarised across
      workers: ``worker_loss_mean, worker_loss_worst`` (largest),
      ``worker_loss_p90, worker_accuracy_mean, worker_accuracy_worst`` (smallest)
      and ``worker_accuracy_p10`` (the per-worker values: :func:`load_worker_evals`);
    * derived: ``worker_step``, commits of the committing worker so far counting
      this one (first -> 1), and ``mean_worker_step``, commits so far over the
      workers that have committed so far (steps per worker, smooth in time); for a
      language model, ``tokens``, the characters processed by each commit, counting
      it (commits x local steps x batch size x context); a text problem's evaluation
      adds ``test_bits_per_char`` and ``test_perplexity``;
    * last, the run summary columns beyond :func:`load_summary`'s ``SUMMARY_COLUMNS`` that any
      run records (one value repeated on every row of a run, NaN for a run without it; listed
      in ``frame.attrs["summary_columns"]``): ``final_test_accuracy_class_<k>``,
      ``final_worker_accuracy_worst`` and the other worker summaries, ``best_...``,
      ``time_to_accuracy_<x>...`` (:func:`load_summary` has them one row per run).

    Args:
        out_dir: a results folder of run folders.
        columns: metrics columns to read (``commit`` and ``worker`` always are), and summary
            columns to keep; None reads all. Columns a run lacks are skipped.
        statuses: run statuses to include; default ``ok`` and ``diverged`` (a
            ``failed`` run's partial metrics would bias averages).

    Returns:
        The frame (empty, with the run-level columns, when no run matches).
    """
    found = [(d, m) for d, m in run_manifests(out_dir, statuses) if (d / METRICS_FILE).is_file()]
    summary = summary_columns_of(m for _, m in found)
    if columns is not None:
        summary = [c for c in summary if c in columns]
    parts = [_run_frame(d / METRICS_FILE, m, columns, summary) for d, m in found]
    if not parts:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    metric_cols = dict.fromkeys(c for part in parts for c in part.attrs["metric_columns"])
    ordered = [*_metric_order(metric_cols), *summary]
    frame = _order(pd.concat(parts, ignore_index=True), ordered).reset_index(drop=True)
    frame.attrs = {"sweep_columns": _sweep_of(frame, ordered), "summary_columns": summary}
    return frame


def to_xarray(frame: pd.DataFrame) -> Any:
    """An ``xarray.Dataset`` view of a :func:`load_results` frame (needs the optional xarray).

    Dimensions ``run_id`` x ``commit``; every per-commit column is a data variable
    (NaN where a run has no such commit), every run-level and sweep column a
    coordinate along ``run_id``.

    Raises:
        ImportError: when xarray is not installed (``pip install gemsim[notebooks]``).
    """
    try:
        import xarray as xr  # optional extra: imported only when asked for
    except ImportError as err:
        raise ImportError("to_xarray needs xarray: pip install 'gemsim[notebooks]'") from err
    summary = [c for c in frame.attrs.get("summary_columns", ()) if c in frame.columns]
    run_level = [*(c for c in RUN_COLUMNS if c in frame.columns), *sweep_columns_of(frame)]
    run_level += summary
    per_commit = [c for c in frame.columns if c not in run_level and c != "commit"]
    data = frame.set_index(["run_id", "commit"])[per_commit]
    runs = frame[run_level].drop_duplicates("run_id").set_index("run_id")
    dataset = xr.Dataset.from_dataframe(data)
    ids = dataset["run_id"].values
    coords = {col: ("run_id", runs[col].reindex(ids).to_numpy()) for col in runs.columns}
    return dataset.assign_coords(coords)
