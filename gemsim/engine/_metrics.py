"""Per-commit metrics: gathered from the scan's outputs chunk by chunk, returned as columns."""

from __future__ import annotations

import jax
import numpy as np

# Info fields that hold one value per parameter leaf become columns `<prefix>_<i>`.
VECTOR_COLUMNS = {"pi_median_per_leaf": "pi_leaf"}


WORKER_SUMMARY = (
    "worker_loss_mean",
    "worker_loss_worst",
    "worker_loss_p90",
    "worker_accuracy_mean",
    "worker_accuracy_worst",
    "worker_accuracy_p10",
)
"""The central model on the workers' own data, summarised across workers (`worker_summary`)."""


def worker_summary(workers: dict) -> dict[str, float]:
    """Per-worker ``loss`` and ``accuracy`` summarised across the workers: their mean, the
    worst (largest loss, smallest accuracy) and the 90th percentile of the loss and 10th of
    the accuracy (linear interpolation); nan where every worker's value is nan (an accuracy
    that is undefined). ``{}`` without per-worker values."""
    if not workers:
        return {}
    out = {}
    for name, worst, q in (("loss", np.max, 0.9), ("accuracy", np.min, 0.1)):
        values = np.asarray(workers[name], np.float64)
        if np.isnan(values).all():
            mean = low = tail = float("nan")
        else:
            mean, low = float(np.nanmean(values)), float(worst(values[~np.isnan(values)]))
            tail = float(np.nanquantile(values, q))
        tail_name = "p90" if name == "loss" else "p10"
        out.update({f"worker_{name}_mean": mean, f"worker_{name}_worst": low})
        out[f"worker_{name}_{tail_name}"] = tail
    return out


class MetricsRecorder:
    """Collects StepOutputs (on the host) and evaluations of the central variable: its
    scalars (`evals`, with the per-worker values summarised, `worker_summary`) and, where the
    workers have data of their own, each worker's values (`worker_evals`)."""

    def __init__(self):
        self._chunks: list = []
        self.evals: dict[int, dict[str, float]] = {}
        self.worker_evals: dict[int, dict[str, np.ndarray]] = {}

    def add(self, out, count: int | None = None) -> None:
        """Record a chunk of StepOutputs; only the first `count` (the rest is padding)."""
        out = jax.device_get(out)
        if count is not None:
            out = jax.tree.map(lambda a: a[:count], out)
        self._chunks.append(out)

    def add_eval(self, commit: int, values: dict, workers: dict | None = None) -> None:
        """The evaluation after ``commit``: scalars ``values`` and per-worker arrays
        ``workers`` (``{"loss", "accuracy"}``, ``[n_workers]`` each; None or ``{}``: none)."""
        scalars = {k: float(v) for k, v in values.items()}
        if workers:
            workers = {k: np.asarray(v, np.float32) for k, v in workers.items()}
            self.worker_evals[int(commit)] = workers
            scalars.update(worker_summary(workers))
        self.evals[int(commit)] = scalars

    def columns(self, stop: int | None = None) -> dict[str, np.ndarray]:
        """One array per metric, over commits [0, stop)."""
        if not self._chunks:
            return {}
        out = {
            "batch_loss": _cat(c.batch_loss for c in self._chunks),
            "finite": _cat(c.finite for c in self._chunks),
        }
        info0 = self._chunks[0].info
        for i, name in enumerate(info0._fields):
            values = _cat(c.info[i] for c in self._chunks)
            if values.ndim == 1:
                out[name] = values
            else:
                prefix = VECTOR_COLUMNS.get(name, name)
                for j in range(values.shape[1]):
                    out[f"{prefix}_{j}"] = values[:, j]
        return {k: v[:stop] for k, v in out.items()}


def _cat(arrays) -> np.ndarray:
    return np.concatenate([np.atleast_1d(np.asarray(a)) for a in arrays])
