"""`gemsim show`: what a scenario file expands to, or what a run folder holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gemsim import config, results
from gemsim._checks import UserError

from ._identity import RunKind
from ._partition_report import partition_report
from ._record import RunIdentity


def show_file(
    path: str | Path,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    out: str | Path | None = None,
    backend: str = "sim",
) -> dict[str, Any]:
    """The scenario resolved (defaults filled in) and every expanded run: its id, sweep point,
    seed, whether `gemsim run --resume` into `out` (default results/<name>) would skip it, and
    the partition of its training set where it splits one among the workers (as text)."""
    path = Path(path)
    scenario = config.load_scenario(path, overrides)
    runs = config.expand(scenario, source=str(path), base_dir=path.parent)
    out_dir = Path(out) if out is not None else Path("results") / scenario.name
    kind = RunKind(backend)
    listed = []
    for expanded in runs:
        who = RunIdentity.of(expanded, kind)
        finished = results.is_finished(out_dir / who.run_id, who.identity, kind.value)
        listed.append(
            {
                "run_id": who.run_id,
                "kind": kind.value,
                "sweep": expanded.sweep_values,
                "seed": expanded.scenario.seed,
                "repeat": expanded.repeat,
                "resume_skips": finished,
            }
        )
        partition, speed_data = partition_report(expanded.scenario)
        if partition is not None:
            listed[-1]["partition"] = partition
        if speed_data is not None:
            listed[-1]["speed_data"] = speed_data
    resolved = scenario.model_dump(mode="json")
    return {"file": str(path), "results": str(out_dir), "scenario": resolved, "runs": listed}


def show_run(run_dir: str | Path) -> dict[str, Any]:
    """A run folder's manifest (provenance included)."""
    run_dir = Path(run_dir)
    if not (run_dir / "manifest.json").is_file():
        raise UserError(str(run_dir), "no such run folder (no manifest.json in it)")
    try:
        return results.read_manifest(run_dir)
    except (OSError, ValueError) as exc:
        raise UserError(str(run_dir / "manifest.json"), str(exc)) from None
