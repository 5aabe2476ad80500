"""What identifies a run in every results frame: the run-level columns, the sweep columns
(a run's sweep point as columns, `config_label`), their order, and the run folders of a
results folder (`run_manifests`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemsim.results._run_folder import MANIFEST_FILE, read_manifest
from gemsim.results._run_summary import TIME_TO
from gemsim.types import Status

if TYPE_CHECKING:
    import pandas as pd

RUN_COLUMNS = ("run_id", "name", "config", "status", "seed", "repeat")
"""Run-level columns that start every frame, in this order."""

_DEFAULT_STATUSES = (Status.OK, Status.DIVERGED)


# --------------------------------------------------------------------------- sweep values


def format_value(value: Any) -> str:
    """Short readable text for a sweep value: scalars as themselves, tables as ``{k: v, ...}``."""
    if isinstance(value, Mapping):
        inner = ", ".join(f"{key}: {format_value(value[key])}" for key in sorted(value))
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _scalar(value: Any) -> Any:
    # Lists cannot sit in a column that pandas groups or compares, so they become text.
    return format_value(value) if isinstance(value, list | tuple) else value


def _flatten(prefix: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(table):
        path = f"{prefix}.{key}"
        value = table[key]
        out.update(_flatten(path, value) if isinstance(value, Mapping) else {path: _scalar(value)})
    return out


def sweep_columns(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """Columns for one run's sweep point.

    Every swept dotted path gets a column of that name. A scalar value is kept
    as is; a sub-table value (e.g. a whole ``optimizer`` block) becomes its
    readable text (:func:`format_value`) so that the column still identifies the
    configuration, and each of its scalar leaves also gets a column named by its
    full dotted path (``optimizer.rule``, ``optimizer.lr``) for filtering. Lists
    become text. A leaf column never overrides a column swept explicitly.
    """
    leaves: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for path in sorted(sweep):
        value = sweep[path]
        if isinstance(value, Mapping):
            own[path] = format_value(value)
            leaves.update(_flatten(path, value))
        else:
            own[path] = _scalar(value)
    return {**leaves, **own}


def config_label(manifest: Mapping[str, Any]) -> str:
    """Readable label of a run's configuration: ``path=value, ...`` or the scenario name.

    A swept ``seed`` is left out, so that repeats with different seeds share a label.
    """
    sweep = {k: v for k, v in (manifest.get("sweep") or {}).items() if k != "seed"}
    if not sweep:
        return str(manifest.get("name", ""))
    return ", ".join(f"{path}={format_value(sweep[path])}" for path in sorted(sweep))


# --------------------------------------------------------------------------- run discovery


def _status_values(statuses: Iterable[Status | str]) -> set[str]:
    return {Status(s).value for s in statuses}


def run_manifests(
    out_dir: str | os.PathLike[str], statuses: Iterable[Status | str] = _DEFAULT_STATUSES
) -> list[tuple[Path, dict[str, Any]]]:
    """Run folders of ``out_dir`` with a readable manifest whose status is in ``statuses``.

    Hidden folders (temporary or set-aside writes), folders without a manifest and
    folders whose manifest does not parse are skipped. Sorted by run id.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise FileNotFoundError(f"results folder {out_dir} does not exist")
    wanted = _status_values(statuses)
    found = []
    for child in sorted(out_dir.iterdir()):
        if child.name.startswith(".") or not (child / MANIFEST_FILE).is_file():
            continue
        try:
            manifest = read_manifest(child)
        except (OSError, ValueError):
            continue
        if manifest.get("status") in wanted:
            found.append((child, manifest))
    return found


def _run_row(manifest: Mapping[str, Any]) -> dict[str, Any]:
    row = {
        "run_id": manifest.get("run_id"),
        "name": manifest.get("name"),
        "config": config_label(manifest),
        "status": manifest.get("status"),
        "seed": manifest.get("seed"),
        "repeat": manifest.get("repeat"),
    }
    return {**row, **sweep_columns(manifest.get("sweep") or {})}


def _sweep_of(frame: pd.DataFrame, others: Iterable[str]) -> list[str]:
    skip = {*RUN_COLUMNS, *others}
    return [c for c in frame.columns if c not in skip]


def sweep_columns_of(frame: pd.DataFrame) -> list[str]:
    """The sweep columns of a frame from :func:`load_results` or :func:`load_summary`.

    Read from ``frame.attrs["sweep_columns"]`` (kept by most pandas operations);
    when the attribute was lost, the dotted column names are taken, since every
    sweep column but a top-level field is a dotted path and no metric is.
    """
    known = frame.attrs.get("sweep_columns")
    if known is not None:
        return [c for c in known if c in frame.columns]
    return [c for c in frame.columns if "." in str(c) and not str(c).startswith(TIME_TO)]


def _order(frame: pd.DataFrame, middle: Sequence[str]) -> pd.DataFrame:
    """Columns: run-level, then sweep columns (sorted), then ``middle`` in the given order."""
    sweep = sorted(c for c in frame.columns if c not in RUN_COLUMNS and c not in middle)
    return frame[[*RUN_COLUMNS, *sweep, *[c for c in middle if c in frame.columns]]]
