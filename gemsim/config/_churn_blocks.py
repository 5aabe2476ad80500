"""`workers.churn`, `workers.availability` and `workers.slowdowns` (see gemsim.timing._churn).

- `churn: {uptime: <dist>, downtime: <dist>}`: each worker alternates up and down periods
  drawn from its own streams, up first from t = 0.
- `availability: {file: trace.csv}`: a device availability trace, rows `worker,down_at,up_at`
  (seconds; a header line is allowed; an empty `up_at` or `inf` means gone for good); the
  path is relative to the scenario file, and the file's sha256 is recorded beside it.
- `slowdowns: {every: <dist>, factor: <dist>, duration: <dist>}`: episodes during which a
  worker computes `factor` times slower, `every` seconds of normal speed between them.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gemsim import timing

from ._block import Block
from ._dist_blocks import Dist, recorded_sha256, resolve_path

Intervals = dict[int, list[tuple[float, float]]]


class ChurnBlock(Block):
    uptime: Dist
    downtime: Dist

    @model_validator(mode="after")
    def _buildable(self):
        self.build()
        return self

    def build(self) -> timing.Churn:
        return timing.Churn(self.uptime.build(), self.downtime.build())


class SlowdownsBlock(Block):
    every: Dist
    factor: Dist
    duration: Dist

    @model_validator(mode="after")
    def _buildable(self):
        self.build()
        return self

    def build(self) -> timing.Slowdowns:
        return timing.Slowdowns(self.every.build(), self.factor.build(), self.duration.build())


class AvailabilityBlock(Block):
    """A CSV file of down intervals, `worker,down_at,up_at` per row; its sha256 is recorded
    (`recorded_sha256`), so that the run's identity changes with the file."""

    file: str
    sha256: str | None = Field(None, validate_default=True)

    @field_validator("file")
    @classmethod
    def _readable(cls, value: str, info: ValidationInfo) -> str:
        path = resolve_path(value, info.context)
        if not path.is_file():
            raise ValueError(f"file {str(path)!r} does not exist")
        read_availability(path)  # fail at load time, not mid-run
        # Absolute: a resolved config is validated again (sweeps) with the same base folder.
        return str(path.resolve())

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str | None, info: ValidationInfo) -> str | None:
        file = info.data.get("file")
        return None if file is None else recorded_sha256(Path(file), value)

    def intervals(self) -> Intervals:
        """Each worker's down intervals ``(down_at, up_at)`` from the file."""
        return read_availability(Path(self.file))


def read_availability(path: Path) -> Intervals:
    """Parse an availability file; a ValueError names the file, the row and the rule."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.reader(handle) if row and any(c.strip() for c in row)]
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc}") from None
    if rows and rows[0][0].strip().lower() == "worker":
        rows = rows[1:]
    out: Intervals = {}
    for i, row in enumerate(rows, start=1):
        where = f"{str(path)!r} row {i} ({','.join(row)})"
        if len(row) != 3:
            raise ValueError(f"{where}: expected worker,down_at,up_at")
        try:
            worker = int(row[0])
            down = float(row[1])
            up = float(row[2]) if row[2].strip() else math.inf
        except ValueError:
            raise ValueError(f"{where}: worker must be an integer, times numbers") from None
        if worker < 0 or not (math.isfinite(down) and down >= 0) or not up > down:
            raise ValueError(
                f"{where}: allowed: worker >= 0, 0 <= down_at < up_at (up_at empty or inf: "
                f"gone for good)"
            )
        out.setdefault(worker, []).append((down, up))
    return out
