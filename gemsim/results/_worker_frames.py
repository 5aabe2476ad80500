"""The per-worker tables of a results folder as frames: `load_worker_summary` (one row per
run and worker) and `load_worker_evals` (one row per run, evaluation and worker)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from gemsim.results._files import WORKER_EVALS_FILE, WORKER_SUMMARY_FILE
from gemsim.results._frames import _local_steps, _own_local_steps
from gemsim.results._run_columns import (
    _DEFAULT_STATUSES,
    RUN_COLUMNS,
    _order,
    _run_row,
    _sweep_of,
    run_manifests,
)
from gemsim.results._run_folder import MANIFEST_FILE, read_manifest
from gemsim.types import Status


def _per_worker(
    out_dir: str | os.PathLike[str], name: str, statuses: Iterable[Status | str]
) -> tuple[list[pd.DataFrame], list[str]]:
    """Each run's table ``name`` (a per-worker file) with the run-level and sweep columns in
    front, and the tables' own columns; ``out_dir``: a results folder or one run folder."""
    out_dir = Path(out_dir)
    if (out_dir / MANIFEST_FILE).is_file():
        found = [(out_dir, read_manifest(out_dir))]
    else:
        found = run_manifests(out_dir, statuses)
    parts, columns = [], {}
    for run_dir, manifest in found:
        if (run_dir / name).is_file():
            table = pd.read_parquet(run_dir / name, engine="pyarrow")
            table = _with_step_time(table, manifest, run_dir)
            columns.update(dict.fromkeys(table.columns))
            run = pd.DataFrame(_run_row(manifest), index=table.index)
            parts.append(pd.concat([run, table], axis=1))
    return parts, list(columns)


def _with_step_time(
    table: pd.DataFrame, manifest: Mapping[str, Any], run_dir: Path
) -> pd.DataFrame:
    """``mean_step_time`` beside ``mean_compute_time``: per local step, the commit's time
    over the rule's local steps (``optimizer.window``, 1 for a rule without), or over the
    worker's own (the trace's ``local_steps``)."""
    if "mean_compute_time" not in table.columns:
        return table
    own = _own_local_steps(run_dir) if "worker" in table.columns else None
    if own is None:
        return table.assign(mean_step_time=table["mean_compute_time"] / _local_steps(manifest))
    windows = own.groupby("worker")["local_steps"].first()
    steps = table["worker"].map(windows).astype("float64")
    return table.assign(mean_step_time=table["mean_compute_time"] / steps)


def _joined(parts: list[pd.DataFrame], columns: list[str], first: Sequence[str]) -> pd.DataFrame:
    """The runs' tables as one frame: run-level, sweep, then the tables' ``columns`` (those in
    ``first`` in that order, then the others as found)."""
    if not parts:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    own = [*(c for c in first if c in columns), *(c for c in columns if c not in first)]
    frame = _order(pd.concat(parts, ignore_index=True), own).reset_index(drop=True)
    frame.attrs = {"sweep_columns": _sweep_of(frame, own)}
    return frame


WORKER_SUMMARY_COLUMNS = ("worker", "commits", "commit_share", "accepted", "accepted_share",
                          "mean_compute_time", "mean_step_time", "lost_pushes", "shard_size",
                          "speed", "started", "lost", "up_seconds")  # fmt: skip
"""Columns of ``worker_summary.parquet`` (``lost_pushes`` where the network loses pushes;
``shard_size`` where workers hold shards; ``speed`` to ``up_seconds`` for a population's
clients), before the heterogeneous quadratic's ``optimum_<i>``."""
WORKER_EVAL_COLUMNS = ("commit", "time", "worker", "loss", "accuracy")
"""Columns of ``workers.parquet``."""


def load_worker_summary(
    out_dir: str | os.PathLike[str], *, statuses: Iterable[Status | str] = _DEFAULT_STATUSES
) -> pd.DataFrame:
    """One row per (run, worker), from each run's ``worker_summary.parquet``.

    Columns: the run-level and sweep columns (as in :func:`load_results`), then ``worker``,
    ``commits`` (its commits), ``commit_share`` (its fraction of the run's commits),
    ``accepted`` and ``accepted_share`` (commits the rule did not discard, i.e. whose
    ``weight`` is not 0: ringmaster, rennala and malenia discard some; over the run's
    accepted commits), ``mean_compute_time`` (of its commits, from the trace; NaN for a
    worker that never committed) and ``mean_step_time`` (the same per local step: over the
    rule's ``window``), ``lost_pushes`` (the pushes it lost before its commits) where the
    network loses some (`workers.failures.drop_push`), ``shard_size`` (training examples it
    holds) where the run
    splits its data, and ``optimum_0, optimum_1, ...`` (its optimum c_w) for the
    heterogeneous quadratic (`gemsim.results.worker_optima`). A population's rows are its
    clients (``worker`` is the client id), with ``speed`` (the client's speed factor),
    ``started`` and ``lost`` (its tasks started, and lost when it went down) and
    ``up_seconds`` (its time up within the run) beside; ``plot_participation`` draws them.

    Args:
        out_dir: a results folder, or one run folder.
        statuses: run statuses to include (default ``ok`` and ``diverged``).
    """
    return _joined(*_per_worker(out_dir, WORKER_SUMMARY_FILE, statuses), WORKER_SUMMARY_COLUMNS)


def load_worker_evals(
    out_dir: str | os.PathLike[str], *, statuses: Iterable[Status | str] = _DEFAULT_STATUSES
) -> pd.DataFrame:
    """One row per (run, evaluation, worker) of the runs whose workers have data of their own
    (a partition, the heterogeneous quadratic), from each run's ``workers.parquet``.

    Columns: the run-level and sweep columns, then ``commit`` (the central variable after
    this commit; the final evaluation of a run that did not end on an evaluation commit is
    at its last commit, -1 before any), ``time`` (its virtual time), ``worker``, ``loss`` and
    ``accuracy`` (the central model on a fixed sample of the worker's shard, at most
    ``eval.per_worker`` examples; the quadratic's own loss, accuracy NaN), then the worker's
    ``commit_share``, ``accepted_share``, ``mean_compute_time`` and ``shard_size`` from
    :func:`load_worker_summary`, to plot against speed or data.

    Args:
        out_dir: a results folder, or one run folder.
        statuses: run statuses to include (default ``ok`` and ``diverged``).
    """
    evals = _joined(*_per_worker(out_dir, WORKER_EVALS_FILE, statuses), WORKER_EVAL_COLUMNS)
    if evals.empty:
        return evals
    summary = load_worker_summary(out_dir, statuses=statuses)
    wanted = ["commit_share", "accepted_share", "mean_compute_time", "mean_step_time", "shard_size"]
    extra = [c for c in wanted if c in summary.columns]
    if extra:
        joined = summary[["run_id", "worker", *extra]]
        sweep = evals.attrs["sweep_columns"]
        evals = evals.merge(joined, on=["run_id", "worker"], how="left")
        evals.attrs = {"sweep_columns": sweep}
    return evals
