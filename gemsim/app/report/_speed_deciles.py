"""A finished run by speed decile of its data owners (`gemsim show RUN`): commits and mean
staleness (as `gemsim trace` reports a population's), beside what the owners hold (mean shard
size, mean share of a shard's most common class) and how the final model does on their data
(mean accuracy at the last evaluation).

Read from the run folder: `worker_summary.parquet` (the owners, their speed or mean compute
time, shard sizes), `trace.parquet` (each commit's owner and staleness), `workers.parquet`
(the per-owner evaluations); the class mix of each shard is recomputed from the manifest's
scenario and the training labels (host numpy; left out where that cannot be done or does not
give the run's shard sizes back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gemsim import results

SPEED_FACTOR = "speed factor"
COMMIT_RATE = "1 / mean compute time per commit (1/s)"


def decile_of(speeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each owner's speed decile (0: the slowest tenth) and the 11 decile edges, cut as
    `gemsim.timing.staleness_by_speed_decile` cuts a population's."""
    edges = np.quantile(speeds, np.linspace(0.0, 1.0, 11))
    return np.clip(np.searchsorted(edges[1:-1], speeds, side="right"), 0, 9), edges


def run_deciles(run_dir: str | Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The run's owners by speed decile (`decile_rows`), or None where the folder has no
    worker summary (a failed run, or one written before gemsim 0.3)."""
    import pandas as pd

    run_dir = Path(run_dir)
    path = run_dir / results.WORKER_SUMMARY_FILE
    if not path.is_file() or not (run_dir / results.TRACE_FILE).is_file():
        return None
    summary = pd.read_parquet(path).sort_values("worker")
    clients = "speed" in summary.columns
    if clients:
        speeds = summary["speed"].to_numpy(np.float64)
    else:  # a worker that never committed: the slowest
        with np.errstate(divide="ignore"):
            speeds = np.nan_to_num(1.0 / summary["mean_compute_time"].to_numpy(np.float64))
    trace = _trace_columns(run_dir / results.TRACE_FILE)
    owner = trace["client"] if "client" in trace else trace["worker"]
    sizes = summary["shard_size"].to_numpy() if "shard_size" in summary.columns else None
    return {
        "owners": "clients" if clients else "workers",
        "speed": SPEED_FACTOR if clients else COMMIT_RATE,
        "rows": decile_rows(
            speeds,
            owner.to_numpy(np.int64),
            trace["staleness"].to_numpy(np.float64),
            shard_size=sizes,
            majority_share=majority_shares(manifest, sizes),
            accuracy=final_accuracy(run_dir / results.WORKER_EVALS_FILE, len(speeds)),
        ),
    }


def decile_rows(
    speeds: np.ndarray,
    owner: np.ndarray,
    staleness: np.ndarray,
    *,
    shard_size: np.ndarray | None = None,
    majority_share: np.ndarray | None = None,
    accuracy: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """One row per speed decile that holds an owner: its speed range, owners, commits, mean
    staleness of their commits, and, where given (one value per owner; NaN: not measured),
    the owners' mean shard size, majority-class share and final accuracy."""
    decile, edges = decile_of(np.asarray(speeds, np.float64))
    of_commit = decile[owner]
    commits = np.bincount(of_commit, minlength=10)
    stale = np.bincount(of_commit, weights=staleness, minlength=10)
    members = np.bincount(decile, minlength=10)
    per_owner = {"shard_size": shard_size, "majority_share": majority_share, "accuracy": accuracy}
    rows = []
    for d in np.flatnonzero(members):
        row = {
            "decile": int(d),
            "speed_low": float(edges[d]),
            "speed_high": float(edges[d + 1]),
            "owners": int(members[d]),
            "commits": int(commits[d]),
            "staleness_mean": float(stale[d] / commits[d]) if commits[d] else None,
        }
        for name, values in per_owner.items():
            if values is not None:
                row[name] = _mean(np.asarray(values, np.float64)[decile == d])
        rows.append(row)
    return rows


def final_accuracy(path: Path, n_owners: int) -> np.ndarray | None:
    """Each owner's accuracy on its own data at the run's last evaluation (NaN for an owner
    not evaluated: a population's unsampled clients), or None without `workers.parquet`."""
    import pandas as pd

    if not path.is_file():
        return None
    evals = pd.read_parquet(path, columns=["commit", "worker", "accuracy"])
    last = evals[evals["commit"] == evals["commit"].max()]
    out = np.full(n_owners, np.nan)
    out[last["worker"].to_numpy(np.int64)] = last["accuracy"].to_numpy(np.float64)
    return None if np.isnan(out).all() else out


def majority_shares(manifest: dict[str, Any], sizes: np.ndarray | None) -> np.ndarray | None:
    """Each owner's share of its shard in its most common class, from the partition of the
    manifest's scenario; None where the run holds no shards of classes, or where the
    partition cannot be recomputed or gives other shard sizes than the run's."""
    from gemsim import config, problems

    if sizes is None or not manifest.get("config"):
        return None
    try:
        scenario = config.parse_scenario(manifest["config"], "manifest.json")
        computed = config.scenario_shards(scenario)
    except (ValueError, OSError, ImportError, KeyError, TypeError):
        return None
    if computed is None or computed[2] < 2 or not np.array_equal(computed[0].sizes, sizes):
        return None
    shards, labels, n_classes = computed
    hist = problems.describe(shards, labels, n_classes).histogram
    with np.errstate(invalid="ignore", divide="ignore"):
        return hist.max(axis=1) / hist.sum(axis=1)


def _trace_columns(path: Path):
    import pandas as pd
    import pyarrow.parquet as pq

    present = set(pq.read_schema(path).names)
    wanted = [c for c in ("worker", "client", "staleness") if c in present]
    return pd.read_parquet(path, columns=wanted)


def _mean(values: np.ndarray) -> float | None:
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else None
