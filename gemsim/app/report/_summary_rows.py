"""A run's line in the summary table `gemsim run` and `gemsim replay` print (and their
`--json` lines), from its manifest alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gemsim.results import Manifest


@dataclass(frozen=True)
class SweepRow:
    """One line of the summary table `gemsim run` prints (and one `--json` line)."""

    run_id: str
    kind: str
    sweep: dict[str, Any]
    status: str
    train_loss: float
    test_accuracy: float
    staleness_mean: float
    wall_seconds: float
    skipped: bool = False
    error: str | None = None


def summary_row(manifest: Manifest | Mapping[str, Any], skipped: bool = False) -> SweepRow:
    """A manifest as a line of the summary table."""
    m = manifest.to_dict() if isinstance(manifest, Manifest) else manifest
    final, stale = m.get("final") or {}, m.get("staleness") or {}
    return SweepRow(
        run_id=m["run_id"],
        kind=m.get("kind") or m.get("backend", "sim"),
        sweep=dict(m.get("sweep") or {}),
        status=m["status"],
        train_loss=_num(final.get("train_loss")),
        test_accuracy=_num(final.get("test_accuracy")),
        staleness_mean=_num(stale.get("mean")),
        wall_seconds=_num(m.get("wall_seconds")),
        skipped=skipped,
        error=m.get("error"),
    )


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)
