"""`gemsim ls`: one row per run of a results folder, from the manifests alone."""

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


def list_runs(results_dir: str | Path, *, sort: str | None = None) -> list[dict[str, Any]]:
    """Every run folder of ``results_dir`` (any status), sorted by ``sort`` (a column name;
    default the run id). Missing values (NaN) sort last."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "no such results folder")
    if sort is not None and sort not in LIST_COLUMNS:
        raise UserError("--sort", f"{sort!r} is not a column; allowed: {', '.join(LIST_COLUMNS)}")
    rows = [
        _row(m)
        for _, m in results.run_manifests(results_dir, statuses=("ok", "diverged", "failed"))
    ]
    key = sort or "run_id"
    return sorted(rows, key=lambda r: _sort_key(r[key]))


def _row(manifest: dict[str, Any]) -> dict[str, Any]:
    final, stale = manifest.get("final") or {}, manifest.get("staleness") or {}
    return {
        "run_id": manifest.get("run_id"),
        "kind": manifest.get("kind") or manifest.get("backend", "sim"),
        "status": manifest.get("status"),
        "sweep": manifest.get("sweep") or {},
        "final_train_loss": _num(final.get("train_loss")),
        "final_test_accuracy": _num(final.get("test_accuracy")),
        "staleness_mean": _num(stale.get("mean")),
        "wall_seconds": _num(manifest.get("wall_seconds")),
        "error": manifest.get("error"),
    }


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _sort_key(value: Any) -> tuple:
    if isinstance(value, float) and math.isnan(value):
        return (2, 0)
    if isinstance(value, int | float):
        return (0, value)
    return (1, str(value))
