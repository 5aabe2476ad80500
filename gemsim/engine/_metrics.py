"""Per-commit metrics: gathered from the scan's outputs chunk by chunk, returned as columns."""

from __future__ import annotations

import jax
import numpy as np

# Info fields that hold one value per parameter leaf become columns `<prefix>_<i>`.
VECTOR_COLUMNS = {"pi_median_per_leaf": "pi_leaf"}


class MetricsRecorder:
    """Collects StepOutputs (on the host) and evaluations of the central variable."""

    def __init__(self):
        self._chunks: list = []
        self.evals: dict[int, dict[str, float]] = {}

    def add(self, out, count: int | None = None) -> None:
        """Record a chunk of StepOutputs; only the first `count` (the rest is padding)."""
        out = jax.device_get(out)
        if count is not None:
            out = jax.tree.map(lambda a: a[:count], out)
        self._chunks.append(out)

    def add_eval(self, commit: int, values: dict) -> None:
        self.evals[int(commit)] = {k: float(v) for k, v in values.items()}

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
