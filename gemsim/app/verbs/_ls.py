"""`gemsim ls`: one row per run of a results folder, from the manifests alone, sortable by
any of its columns: the fixed ones and every run summary column a manifest's `final` block
holds (the heterogeneity measures: `gemsim.results.summary_column`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gemsim import results
from gemsim._checks import UserError

LIST_COLUMNS = (
    "run_id",
    "kind",
    "status",
    "sweep",
    "final_train_loss",
    "final_test_accuracy",
    "staleness_mean",
    "wall_seconds",
)
"""The columns every listing has."""
_WORKER = ("worker_accuracy_worst", "worker_accuracy_p10", "worker_accuracy_mean")
KNOWN_SUMMARY = (
    "final_test_loss",
    "best_test_accuracy",
    *(f"{prefix}{k}" for k in _WORKER for prefix in ("final_", "best_")),
    *(f"final_worker_loss_{k}" for k in ("worst", "p90", "mean")),
)
"""Summary columns `--sort` accepts even where no run of the folder records them (their
values are then all missing)."""
WORST_WORKER = "final_worker_accuracy_worst"
"""The summary column the table shows whenever a run has it."""


def list_runs(results_dir: str | Path, *, sort: str | None = None) -> list[dict[str, Any]]:
    """Every run folder of ``results_dir`` (any status), sorted by ``sort`` (a column name, or
    a key of the manifests' `final` block; default the run id). Missing values (NaN) sort
    last. Each row has `LIST_COLUMNS`, the summary columns any run records (NaN where a run
    lacks one, as a run written before they existed does), and the failed runs' `error`."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "no such results folder")
    manifests = [
        m for _, m in results.run_manifests(results_dir, statuses=("ok", "diverged", "failed"))
    ]
    summary = results.summary_columns_of(manifests)
    key = sort_column(sort, summary)
    rows = [_row(m, summary) for m in manifests]
    return sorted(rows, key=lambda r: _sort_key(r.get(key)))


def sort_column(sort: str | None, summary: list[str]) -> str:
    """The column ``--sort`` names: a column of the listing, or a `final` key (``test_loss``,
    ``worker_accuracy_worst``: its summary column).

    Raises:
        UserError: any other name, listing the allowed ones.
    """
    if sort is None:
        return "run_id"
    allowed = list(dict.fromkeys([*LIST_COLUMNS, *summary, *KNOWN_SUMMARY]))
    for name in (sort, results.summary_column(sort)):
        if name in allowed:
            return name
    raise UserError(
        "--sort",
        f"{sort!r} is not a column; allowed: {', '.join(allowed)} (or the key of a manifest's "
        "final block, as worker_accuracy_worst for final_worker_accuracy_worst)",
    )


def _row(manifest: dict[str, Any], summary: list[str]) -> dict[str, Any]:
    final, stale = manifest.get("final") or {}, manifest.get("staleness") or {}
    values = results.summary_values(manifest)
    return {
        "run_id": manifest.get("run_id"),
        "kind": manifest.get("kind") or manifest.get("backend", "sim"),
        "status": manifest.get("status"),
        "sweep": manifest.get("sweep") or {},
        "final_train_loss": _num(final.get("train_loss")),
        "final_test_accuracy": _num(final.get("test_accuracy")),
        "staleness_mean": _num(stale.get("mean")),
        "wall_seconds": _num(manifest.get("wall_seconds")),
        "final_test_loss": _num(final.get("test_loss")),
        **{c: values.get(c) for c in summary},  # None: not recorded; NaN: never reached
        "error": manifest.get("error"),
    }


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _sort_key(value: Any) -> tuple:
    if _missing(value):
        return (2, 0)
    if isinstance(value, int | float):
        return (0, value)
    return (1, str(value))


# --------------------------------------------------------------------------- the table


def render_listing(rows: list[dict[str, Any]], sort: str | None = None) -> str:
    """The listing as a table: the fixed columns, the worst worker's final accuracy where any
    run has one, and the column sorted by (``sort``) where the table would not show it."""
    extra = [c for c in (WORST_WORKER,) if any(not _missing(r.get(c)) for r in rows)]
    if sort is not None and rows:
        column = sort if sort in rows[0] else results.summary_column(sort)
        if column in rows[0] and column not in (*LIST_COLUMNS, *extra):
            extra.append(column)
    titles = {WORST_WORKER: "worst wkr"}
    widths = {c: max(len(titles.get(c, c)), 9) for c in extra}
    header = (
        f"{'run id':<12}  {'kind':<7}  {'status':<8}  {'train loss':>10}  {'test acc':>8}  "
        + "".join(f"{titles.get(c, c):>{widths[c]}}  " for c in extra)
        + f"{'staleness':>9}  {'wall s':>7}  sweep"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['run_id']:<12}  {r['kind']:<7}  {r['status']:<8}  {r['final_train_loss']:>10.4f}  "
            f"{r['final_test_accuracy']:>8.4f}  "
            + "".join(f"{_cell(r.get(c), c):>{widths[c]}}  " for c in extra)
            + f"{r['staleness_mean']:>9.2f}  {r['wall_seconds']:>7.1f}  {_sweep(r['sweep'])}"
        )
    return "\n".join(lines)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _cell(value: Any, column: str) -> str:
    if isinstance(value, float) and math.isnan(value) and column.startswith("time_to_"):
        return "never"  # recorded, not reached
    if _missing(value):
        return "-"
    return format(value, ".4g") if isinstance(value, int | float) else str(value)


def _sweep(sweep: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in sweep.items())


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)
