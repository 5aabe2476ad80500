"""The record of a finished run: its metrics frame, its parameters by leaf path, its
manifest (or that of a run that failed), and its line in the summary table."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import pandas as pd

from gemsim import engine, results, timing
from gemsim.types import PyTree, Status

from .sweep import ExpandedRun, config_hash, resolved_config

EVAL_COLUMNS = ("train_loss", "test_loss", "test_accuracy")


@dataclass(frozen=True)
class RunResult:
    """A finished run: final central parameters, its trace and metrics, and its manifest."""

    run_id: str
    status: Status
    params: PyTree
    trace: timing.CommitTrace
    metrics: pd.DataFrame
    manifest: dict[str, Any]


def metrics_frame(trace: timing.CommitTrace, out: engine.EngineResult) -> pd.DataFrame:
    """One row per executed commit: trace columns, the worker's batch loss, the rule's info,
    and the central variable's evaluation on the commits where it was evaluated (else NaN)."""
    n = len(out.metrics.get("batch_loss", ()))
    frame = pd.DataFrame(
        {
            "commit": trace.commit[:n],
            "time": trace.time[:n],
            "worker": trace.worker[:n],
            "staleness": trace.staleness[:n],
        }
    )
    for name, values in out.metrics.items():
        frame[name] = values
    for col in EVAL_COLUMNS:
        column = np.full(n, np.nan)
        for k, values in out.evals.items():
            if k < n:
                column[k] = values[col]
        frame[col] = column
    return frame


def flat_params(params: PyTree) -> dict[str, np.ndarray]:
    """Final parameters, one array per leaf, keyed by its path (as written to params.npz)."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def run_manifest(scenario, trace, out, params, sweep_values, repeat) -> dict[str, Any]:
    """The manifest of a finished run (DESIGN.md §8); callers add backend, executor, wall time."""
    stats = timing.staleness_summary(trace)
    final = out.final
    return {
        "name": scenario.name,
        "run_id": config_hash(scenario)[:12],
        "config": resolved_config(scenario),
        "config_hash": config_hash(scenario),
        "seed": scenario.seed,
        "status": out.status.value,
        "versions": versions(),
        "n_commits": out.n_commits,
        "final": {k: final.get(k, float("nan")) for k in EVAL_COLUMNS},
        "staleness": {k: stats[f"staleness_{k}"] for k in ("mean", "var", "max")},
        "trace_sha256": trace.sha256(),
        "params_sha256": results.params_sha256(params),
        "sweep": sweep_values,
        "repeat": repeat,
        "error": None,
        "diverged_at": out.diverged_at,
    }


@dataclass(frozen=True)
class SweepRow:
    """One line of the summary table `gemsim run` prints."""

    run_id: str
    sweep: dict[str, Any]
    status: str
    train_loss: float
    test_accuracy: float
    staleness_mean: float
    wall_seconds: float
    skipped: bool = False


def failed_manifest(expanded: ExpandedRun, exc: Exception, wall: float) -> dict[str, Any]:
    """The manifest of a run that raised: status `failed`, the error, no results."""
    nan = float("nan")
    return {
        "name": expanded.scenario.name,
        "run_id": expanded.run_id,
        "config": expanded.config,
        "config_hash": expanded.config_hash,
        "seed": expanded.scenario.seed,
        "status": Status.FAILED.value,
        "versions": versions(),
        "wall_seconds": wall,
        "n_commits": 0,
        "final": dict.fromkeys(EVAL_COLUMNS, nan),
        "staleness": {"mean": nan, "var": nan, "max": nan},
        "trace_sha256": "",
        "params_sha256": results.params_sha256({}),
        "sweep": expanded.sweep_values,
        "repeat": expanded.repeat,
        "error": "".join(traceback.format_exception_only(type(exc), exc)).strip(),
    }


def summary_row(manifest: Mapping[str, Any], skipped: bool = False) -> SweepRow:
    """A manifest as a line of the summary table."""
    final, stale = manifest["final"], manifest["staleness"]
    return SweepRow(
        run_id=manifest["run_id"],
        sweep=dict(manifest["sweep"]),
        status=manifest["status"],
        train_loss=_num(final.get("train_loss")),
        test_accuracy=_num(final.get("test_accuracy")),
        staleness_mean=_num(stale.get("mean")),
        wall_seconds=_num(manifest["wall_seconds"]),
        skipped=skipped,
    )


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def versions() -> dict[str, str]:
    """Versions of gemsim and the libraries its results depend on."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("gemsim", "jax", "jaxlib", "simpy", "numpy", "optax", "pydantic"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found
