"""Synthetic run data for the results tests: small frames built here, no engine.

A uniquely named module (not conftest) so that tests and subprocesses can import
it without clashing with other stages' conftest files.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from gemsim.results import params_sha256
from gemsim.trace import CommitTrace


def fake_params(scale: float = 1.0) -> dict[str, np.ndarray]:
    return {
        "conv/0/w": np.arange(6, dtype=np.float32).reshape(2, 3) * scale,
        "conv/0/b": np.array([0.5, -1.5], dtype=np.float32),
        "count": np.array(7, dtype=np.int64),
        "file": np.zeros(0, dtype=np.float64),  # a leaf name np.savez could not take
    }


def fake_trace(n_commits: int, n_workers: int, seed: int) -> CommitTrace:
    rng = np.random.default_rng(seed)
    commit = np.arange(n_commits, dtype=np.int64)
    staleness = np.minimum(rng.geometric(1 / n_workers, n_commits) - 1, commit)
    time = np.cumsum(rng.exponential(1.0 / n_workers, n_commits))
    return CommitTrace.from_columns(
        time=time,
        worker=rng.integers(0, n_workers, n_commits).astype(np.int64),
        pulled_version=commit - staleness,
        compute_time=np.full(n_commits, 0.1),
        queue_time=np.zeros(n_commits),
        service_time=np.zeros(n_commits),
        n_workers=n_workers,
        duration=float(time[-1]) if n_commits else 0.0,
    )


def fake_metrics(trace: CommitTrace, gem: bool, n_leaves: int = 3, every: int = 10):
    n = len(trace)
    commit = trace.commit
    loss = 2.0 * np.exp(-commit / max(n, 1)) + 0.1
    is_eval = (commit + 1) % every == 0
    columns: dict[str, Any] = {
        "commit": commit,
        "time": trace.time,
        "worker": trace.worker,
        "staleness": trace.staleness,
        "batch_loss": loss + 0.05,
        "update_norm": np.full(n, 0.1),
        "weight": np.ones(n),
    }
    if gem:
        columns |= {
            "pi_median": 1.0 + 0.5 * np.sin(commit / 7.0),
            "frac_pi_zero": np.full(n, 0.1),
            "frac_pi_max": np.full(n, 0.05),
            "frac_dtheta_zero": np.full(n, 0.02),
            "proxy_energy": np.where(commit == 3, 0.0, 0.5),
            "target_energy": np.where(commit == 3, 0.0, 2.0),  # one zero: ratio undefined
            "central_energy": np.full(n, 1.5),
        }
        columns |= {f"pi_leaf_{i}": 0.5 + i + 0.01 * commit for i in range(n_leaves)}
    columns["train_loss"] = np.where(is_eval, loss, np.nan)
    columns["test_loss"] = np.where(is_eval, loss + 0.2, np.nan)
    columns["test_accuracy"] = np.where(is_eval, 1.0 - loss / 3, np.nan)
    return pd.DataFrame(columns)


def fake_manifest(run_id: str, params: dict[str, np.ndarray], **over: Any) -> dict[str, Any]:
    manifest = {
        "name": "unit",
        "run_id": run_id,
        "config": {"name": "unit", "workers": {"count": 4}, "optimizer": {"rule": "gem"}},
        "config_hash": f"hash-{run_id}",
        "seed": 0,
        "status": "ok",
        "versions": {"gemsim": "0.1.0", "numpy": np.__version__},
        "wall_seconds": 1.25,
        "n_commits": 0,
        "final": {"train_loss": 0.5, "test_loss": 0.6, "test_accuracy": math.nan},
        "staleness": {"mean": 3.0, "var": 12.0, "max": 17},
        "trace_sha256": "0" * 64,
        "params_sha256": params_sha256(params),
        "sweep": {},
        "repeat": 0,
        "error": None,
    }
    return manifest | over
