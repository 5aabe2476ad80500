"""`gemsim calibrate`: a scenario whose latency laws are fitted to a finished run's trace.

The calibrated scenario is the run's own configuration (its problem, optimizer, seed,
eval and engine blocks, its workers' failures, joins, churn and availability, and its
server protocol) with the timing laws replaced: ``workers.compute`` (and
``workers.groups`` when workers differ) and ``server.service`` come from
`gemsim.timing.calibrate_trace`, ``network`` is left out (a trace holds no network
measurement) and the budget is the run's commit count.
Simulating it should reproduce the run's staleness distribution; docs/design.md §6.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gemsim import timing
from gemsim._atomic import atomic_write_text
from gemsim._checks import UserError
from gemsim.config import parse_scenario, window_of
from gemsim.results import MANIFEST_FILE, TRACE_FILE
from gemsim.trace import CommitTrace

CALIBRATED_FILE = "calibrated.yaml"
SUFFIX = "-calibrated"
_NAME_MAX = 120  # Scenario.name's limit


@dataclass(frozen=True)
class CalibratedRun:
    """A run folder's calibration: the fits and the scenario they make.

    Attributes:
        run_dir: the run folder it came from.
        run_id: that run's id (from its manifest; the folder name if absent).
        config: the calibrated scenario as a plain mapping, already validated.
        calibration: the fitted laws (per-commit seconds) behind ``config``.
    """

    run_dir: Path
    run_id: str
    config: dict[str, Any]
    calibration: timing.Calibration

    def fit_rows(self) -> list[dict[str, Any]]:
        """One plain row per fit (what, law, n, KS p-value, why), for tables and JSON."""
        return [
            {
                "what": label,
                "family": fit.family,
                "law": fit.describe(),
                "n": fit.n,
                "ks_pvalue": None if math.isnan(fit.ks_pvalue) else fit.ks_pvalue,
                "reason": fit.reason,
            }
            for label, fit in self.calibration.fits()
        ]

    def to_yaml(self) -> str:
        """The scenario as YAML, after a comment saying where each law came from."""
        lines = [
            f"# Calibrated by `gemsim calibrate` from run {self.run_id} ({self.run_dir}).",
            "# Fitted laws (per-commit seconds; KS p = Kolmogorov-Smirnov p-value of the fit):",
        ]
        for row in self.fit_rows():
            p = "n/a" if row["ks_pvalue"] is None else f"{row['ks_pvalue']:.3g}"
            lines.append(
                f"#   {row['what']}: {row['law']}; KS p={p}, n={row['n']}; {row['reason']}"
            )
        if self.calibration.window > 1:
            lines.append(
                f"# A commit holds {self.calibration.window} mini-batches; the compute laws "
                "below are per batch."
            )
        lines.append("# No network block: the run measured no network latency.")
        body = yaml.dump(self.config, Dumper=_Dumper, sort_keys=False, width=100)
        return "\n".join(lines) + "\n" + body

    def write(self, out: str | os.PathLike[str] | None = None) -> Path:
        """Write the YAML to ``out`` (default `CALIBRATED_FILE` in the run folder), atomically.

        Raises:
            UserError: naming ``out`` when it cannot be written.
        """
        path = Path(out) if out is not None else self.run_dir / CALIBRATED_FILE
        try:
            return atomic_write_text(path, self.to_yaml())
        except OSError as exc:
            raise UserError(str(path), f"cannot write file: {exc.strerror or exc}") from None


def calibrate_folder(run_dir: str | os.PathLike[str]) -> CalibratedRun:
    """Read a run folder's manifest and trace and fit its latency laws.

    Raises:
        UserError: naming the folder or file that is missing, unreadable or inconsistent,
            or the trace that holds nothing to calibrate (a ScenarioError when the
            manifest's configuration is not a valid scenario).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(str(run_dir), "no such run folder (give a folder written by a run)")
    manifest_path = run_dir / MANIFEST_FILE
    manifest = _read_json(manifest_path)
    config = manifest.get("config")
    if not isinstance(config, dict):
        raise UserError(
            str(manifest_path), "config: missing or not a mapping (not a gemsim run manifest?)"
        )
    original = parse_scenario(config, str(manifest_path))
    trace_path = run_dir / TRACE_FILE
    trace = _read_trace(trace_path, original.workers.count)
    if trace.n_workers != original.workers.count:
        raise UserError(
            str(trace_path),
            f"has {trace.n_workers} workers but the manifest's workers.count is "
            f"{original.workers.count}",
        )
    window = window_of(original.optimizer) if original.optimizer is not None else 1
    if trace.local_steps is not None:
        raise UserError(
            str(trace_path),
            "has a local_steps column (workers with windows of their own): calibrating "
            "per-batch laws from such a trace is not supported; allowed: a run whose workers "
            "share the rule's window",
        )
    try:
        calibration = timing.calibrate_trace(trace, window=window)
    except ValueError as exc:
        raise UserError(str(trace_path), str(exc)) from None
    data = calibrated_config(config, calibration, commits=len(trace))
    parse_scenario(data, f"calibration of {run_dir}")
    run_id = str(manifest.get("run_id") or run_dir.name)
    return CalibratedRun(run_dir, run_id, data, calibration)


def calibrate_run(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The calibrated scenario of a run folder, as a validated plain mapping."""
    return calibrate_folder(run_dir).config


def write_calibrated(
    run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> Path:
    """Calibrate a run folder and write the scenario YAML (default `CALIBRATED_FILE` in it)."""
    return calibrate_folder(run_dir).write(out)


def calibrated_config(
    config: dict[str, Any], calibration: timing.Calibration, *, commits: int
) -> dict[str, Any]:
    """The run's configuration with its timing laws replaced by ``calibration``.

    Kept: seed, problem, optimizer, eval, engine, the workers' failures, joins, churn and
    availability and the server's discipline and protocol. Replaced: workers
    count/compute/groups, server service, the budget (``commits``). Dropped: network (not
    measured), slowdowns (the fitted compute law holds them) and unset (None) fields.
    """
    workers = calibration.workers_block()
    old_workers = config.get("workers") or {}
    for key in ("failures", "joins", "churn", "availability"):
        if old_workers.get(key):
            workers[key] = _without_none(old_workers[key])
    server = calibration.server_block()
    for key in ("discipline", "protocol"):
        value = (config.get("server") or {}).get(key)
        if value is not None:
            server[key] = _without_none(value)
    out: dict[str, Any] = {
        "name": str(config.get("name", "run"))[: _NAME_MAX - len(SUFFIX)] + SUFFIX,
        "seed": config.get("seed"),
        "workers": workers,
    }
    if server:
        out["server"] = server
    out["budget"] = {"commits": commits}
    for key in ("problem", "optimizer", "eval", "engine"):
        if config.get(key) is not None:
            out[key] = _without_none(config[key])
    return out


class _Dumper(yaml.SafeDumper):
    """Block style, except ``<dist>`` blocks and lists of numbers, which stay on one line
    as in the bundled scenario files."""


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    flow = "dist" in data and not any(isinstance(v, dict) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(not isinstance(v, dict | list) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(list, _represent_list)


def _without_none(value: Any) -> Any:
    """Drop None entries of mappings: every optional field's default is None."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(str(path), f"cannot read file: {exc.strerror or exc}") from None
    except ValueError as exc:  # malformed JSON or text
        raise UserError(str(path), f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(str(path), f"holds a {type(data).__name__}, not a JSON object")
    return data


def _read_trace(path: Path, n_workers: int) -> CommitTrace:
    """A run folder's trace (any table with the trace's columns; one without gemsim's
    metadata takes the manifest's worker count and its last commit time as duration)."""
    try:
        trace = CommitTrace.from_parquet(path, n_workers=n_workers)
    except (OSError, ValueError) as exc:
        raise UserError(str(path), f"not a readable commit trace: {exc}") from None
    if len(trace) == 0:
        raise UserError(str(path), "the trace has no commits; nothing to calibrate")
    return trace
