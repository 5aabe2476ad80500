"""Loading a results folder into tidy pandas frames (and an optional xarray view)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from gemsim.results._files import WORKER_EVALS_FILE, WORKER_SUMMARY_FILE
from gemsim.results._run_folder import (
    MANIFEST_FILE,
    METRICS_FILE,
    read_manifest,
)
from gemsim.results._run_summary import TIME_TO, extra_final_keys, summary_column, summary_values
from gemsim.types import Status

RUN_COLUMNS = ("run_id", "name", "config", "status", "seed", "repeat")
"""Run-level columns that start every frame, in this order."""

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

_DEFAULT_STATUSES = (Status.OK, Status.DIVERGED)


# --------------------------------------------------------------------------- sweep values


def format_value(value: Any) -> str:
    """Short readable text for a sweep value: scalars as themselves, tables as ``{k: v, ...}``."""
    if isinstance(value, Mapping):
        inner = ", ".join(f"{key}: {format_value(value[key])}" for key in sorted(value))
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _scalar(value: Any) -> Any:
    # Lists cannot sit in a column that pandas groups or compares, so they become text.
    return format_value(value) if isinstance(value, list | tuple) else value


def _flatten(prefix: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(table):
        path = f"{prefix}.{key}"
        value = table[key]
        out.update(_flatten(path, value) if isinstance(value, Mapping) else {path: _scalar(value)})
    return out


def sweep_columns(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """Columns for one run's sweep point.

    Every swept dotted path gets a column of that name. A scalar value is kept
    as is; a sub-table value (e.g. a whole ``optimizer`` block) becomes its
    readable text (:func:`format_value`) so that the column still identifies the
    configuration, and each of its scalar leaves also gets a column named by its
    full dotted path (``optimizer.rule``, ``optimizer.lr``) for filtering. Lists
    become text. A leaf column never overrides a column swept explicitly.
    """
    leaves: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for path in sorted(sweep):
        value = sweep[path]
        if isinstance(value, Mapping):
            own[path] = format_value(value)
            leaves.update(_flatten(path, value))
        else:
            own[path] = _scalar(value)
    return {**leaves, **own}


def config_label(manifest: Mapping[str, Any]) -> str:
    """Readable label of a run's configuration: ``path=value, ...`` or the scenario name.

    A swept ``seed`` is left out, so that repeats with different seeds share a label.
    """
    sweep = {k: v for k, v in (manifest.get("sweep") or {}).items() if k != "seed"}
    if not sweep:
        return str(manifest.get("name", ""))
    return ", ".join(f"{path}={format_value(sweep[path])}" for path in sorted(sweep))


# --------------------------------------------------------------------------- run discovery


def _status_values(statuses: Iterable[Status | str]) -> set[str]:
    return {Status(s).value for s in statuses}


def run_manifests(
    out_dir: str | os.PathLike[str], statuses: Iterable[Status | str] = _DEFAULT_STATUSES
) -> list[tuple[Path, dict[str, Any]]]:
    """Run folders of ``out_dir`` with a readable manifest whose status is in ``statuses``.

    Hidden folders (temporary or set-aside writes), folders without a manifest and
    folders whose manifest does not parse are skipped. Sorted by run id.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise FileNotFoundError(f"results folder {out_dir} does not exist")
    wanted = _status_values(statuses)
    found = []
    for child in sorted(out_dir.iterdir()):
        if child.name.startswith(".") or not (child / MANIFEST_FILE).is_file():
            continue
        try:
            manifest = read_manifest(child)
        except (OSError, ValueError):
            continue
        if manifest.get("status") in wanted:
            found.append((child, manifest))
    return found


def _run_row(manifest: Mapping[str, Any]) -> dict[str, Any]:
    row = {
        "run_id": manifest.get("run_id"),
        "name": manifest.get("name"),
        "config": config_label(manifest),
        "status": manifest.get("status"),
        "seed": manifest.get("seed"),
        "repeat": manifest.get("repeat"),
    }
    return {**row, **sweep_columns(manifest.get("sweep") or {})}


def _sweep_of(frame: pd.DataFrame, others: Iterable[str]) -> list[str]:
    skip = {*RUN_COLUMNS, *others}
    return [c for c in frame.columns if c not in skip]


def sweep_columns_of(frame: pd.DataFrame) -> list[str]:
    """The sweep columns of a frame from :func:`load_results` or :func:`load_summary`.

    Read from ``frame.attrs["sweep_columns"]`` (kept by most pandas operations);
    when the attribute was lost, the dotted column names are taken, since every
    sweep column but a top-level field is a dotted path and no metric is.
    """
    known = frame.attrs.get("sweep_columns")
    if known is not None:
        return [c for c in known if c in frame.columns]
    return [c for c in frame.columns if "." in str(c) and not str(c).startswith(TIME_TO)]


def _order(frame: pd.DataFrame, middle: Sequence[str]) -> pd.DataFrame:
    """Columns: run-level, then sweep columns (sorted), then ``middle`` in the given order."""
    sweep = sorted(c for c in frame.columns if c not in RUN_COLUMNS and c not in middle)
    return frame[[*RUN_COLUMNS, *sweep, *[c for c in middle if c in frame.columns]]]


# --------------------------------------------------------------------------- frames


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


def summary_columns_of(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    """The run summary columns beyond `SUMMARY_COLUMNS` that any of ``manifests`` records
    (the heterogeneity measures of their `final` blocks: `gemsim.results.summary_column`)."""
    return [summary_column(k) for k in extra_final_keys(manifests)]


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
