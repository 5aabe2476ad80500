"""The run manifest: its public keys, validation and strict, stable JSON."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from gemsim.types import RunKind, Status

from ._files import MANIFEST_FILE

MANIFEST_KEYS = (
    "name",
    "run_id",
    "config",
    "config_hash",
    "seed",
    "status",
    "versions",
    "wall_seconds",
    "n_commits",
    "final",
    "staleness",
    "trace_sha256",
    "params_sha256",
    "sweep",
    "repeat",
    "error",
)
"""Keys every manifest has had since 0.1; readers may rely on them. 0.2 adds `kind`,
`identity` and `provenance` (see :class:`Manifest`); folders written by 0.1 lack them."""
FINAL_KEYS = ("train_loss", "test_loss", "test_accuracy")
STALENESS_KEYS = ("mean", "var", "max")
FINISHED = frozenset({Status.OK.value, Status.DIVERGED.value})


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What ran and how it ended: the `manifest.json` of a run folder, built once per run.

    Attributes:
        name, seed, repeat, sweep, config, config_hash: the run's resolved scenario and where
            it sits in its sweep.
        kind: what produced the trace (``sim``, ``replay``, ``process``, ``ray``).
        identity: hex sha256 of (config, kind, replayed trace); ``run_id`` is its first 12
            characters and names the folder.
        backend (derived from ``kind``, written to the file): ``sim`` for the simulator and
            replays, else the real backend.
        status: ``ok``, ``diverged`` or ``failed``; ``error`` is the failure's message.
        n_commits, diverged_at: commits applied; the diverging commit, if any.
        final, staleness: final evaluation of the central variable; staleness mean/var/max.
        trace_sha256, params_sha256: hashes of the trace and of the final parameters.
        wall_seconds: the run's wall time.
        executor: the engine's executor (simulated runs and replays).
        replayed_trace, replayed_trace_sha256: the trace a replay executed.
        worker_events: kills, restarts, joins and deaths of a real run's workers.
        provenance: versions of gemsim and every dependency, Python, platform, CPU, JAX
            device, git commit, UTC start and end, the command (`gemsim show RUN_DIR`).
        versions: the package versions of ``provenance`` (the 0.1 key).
    """

    name: str
    run_id: str
    identity: str
    kind: str
    config: dict[str, Any]
    config_hash: str
    seed: int
    repeat: int
    sweep: dict[str, Any]
    status: str
    error: str | None = None
    n_commits: int = 0
    diverged_at: int | None = None
    final: dict[str, float] = field(default_factory=dict)
    staleness: dict[str, float] = field(default_factory=dict)
    trace_sha256: str = ""
    params_sha256: str = ""
    wall_seconds: float = math.nan
    executor: str | None = None
    replayed_trace: str | None = None
    replayed_trace_sha256: str | None = None
    worker_events: tuple[dict[str, Any], ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def backend(self) -> str:
        """``sim`` for simulated runs and replays, else the real backend (its kind)."""
        return backend_of(self.kind)

    def __getitem__(self, key: str) -> Any:
        """Read access by key, as for a manifest read back from `manifest.json`."""
        if key not in self.__dataclass_fields__ and key != "backend":
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        known = key in self.__dataclass_fields__ or key == "backend"
        return getattr(self, key) if known else default

    def to_dict(self) -> dict[str, Any]:
        """The manifest as plain values (what `manifest.json` holds), copied."""
        return copy.deepcopy(self._fields())

    def _fields(self) -> dict[str, Any]:
        # Its own values, not copied: what is only read (written to JSON, checked) needs no
        # copy, and copying a sweep's configuration of 256 worker groups took 4 ms a run.
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["backend"] = self.backend
        out["worker_events"] = list(out["worker_events"])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        """A manifest read back from `manifest.json` (`read_manifest`): null floats as NaN;
        a folder written by gemsim 0.1 (no ``kind``, ``identity`` or ``provenance``) gets
        them from what it has; keys this version does not know are left out."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.setdefault("kind", kind_of(data))
        known.setdefault("identity", data.get("config_hash", ""))
        for block in ("final", "staleness"):
            known[block] = {k: _number(v) for k, v in (known.get(block) or {}).items()}
        known["wall_seconds"] = _number(known.get("wall_seconds"))
        known["worker_events"] = tuple(known.get("worker_events") or ())
        return cls(**known)

    def to_json(self) -> str:
        return manifest_to_json(self._fields())


def backend_of(kind: str) -> str:
    """The backend of a run of this kind: its real backend, or ``sim`` (`RunKind.backend`)."""
    return RunKind(kind).backend


def kind_of(manifest: Mapping[str, Any]) -> str:
    """A manifest's kind; a 0.1 folder has none: a replay is told by its ``replayed_trace``,
    a real run by its ``backend``."""
    return manifest.get("kind") or (
        "replay" if manifest.get("replayed_trace") else manifest.get("backend", "sim")
    )


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _jsonable(value: Any, where: str) -> Any:
    """Plain JSON value for ``value``; non-finite floats become ``None`` (strict JSON)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, np.generic | np.ndarray):
        value = value.tolist()
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"manifest key {key!r} at {where or 'top level'} must be a str")
            out[key] = _jsonable(item, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise TypeError(
        f"manifest value at {where or 'top level'} has type {type(value).__name__}, "
        "which JSON cannot hold; pass str, int, float, bool, None, lists or dicts"
    )


def manifest_to_json(manifest: Mapping[str, Any]) -> str:
    """Strict, stable JSON text for a manifest: sorted keys, indent 2, NaN/inf as null."""
    plain = _jsonable(manifest, "")
    return json.dumps(plain, sort_keys=True, indent=2, allow_nan=False) + "\n"


def _require_keys(block: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(block, Mapping):
        raise ValueError(f"manifest[{where!r}] must be a dict, got {type(block).__name__}")
    missing = [key for key in keys if key not in block]
    if missing:
        raise ValueError(f"manifest{where and f'[{where!r}]'} is missing keys {missing}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def check_manifest(manifest: Mapping[str, Any]) -> None:
    """Check that a manifest has every public key with a value of the right kind.

    Extra keys are allowed (later versions may add some); readers rely only on
    ``MANIFEST_KEYS``.

    Raises:
        ValueError: naming the first missing key or bad value.
    """
    _require_keys(manifest, MANIFEST_KEYS, "")
    _require_keys(manifest["final"], FINAL_KEYS, "final")
    _require_keys(manifest["staleness"], STALENESS_KEYS, "staleness")
    for key in ("config", "versions", "sweep"):
        _require_keys(manifest[key], (), key)
    status = manifest["status"]
    allowed = [s.value for s in Status]
    if (status.value if isinstance(status, Status) else status) not in allowed:
        raise ValueError(f"manifest['status'] = {status!r}; allowed: {allowed}")
    for key in ("seed", "repeat", "n_commits"):
        if not _is_int(manifest[key]):
            raise ValueError(f"manifest[{key!r}] = {manifest[key]!r} must be an int")
    if manifest["error"] is not None and not isinstance(manifest["error"], str):
        raise ValueError(f"manifest['error'] = {manifest['error']!r} must be a str or None")
    run_id = manifest["run_id"]
    if not isinstance(run_id, str) or not run_id or run_id.startswith(".") or "/" in run_id:
        raise ValueError(
            f"manifest['run_id'] = {run_id!r} must be a non-empty folder name "
            "that does not start with '.' and has no '/'"
        )


def manifest_dict(manifest: Manifest | Mapping[str, Any]) -> dict[str, Any]:
    """A manifest as a plain mapping, from a :class:`Manifest` or a mapping."""
    return manifest.to_dict() if isinstance(manifest, Manifest) else dict(manifest)


def manifest_fields(manifest: Manifest | Mapping[str, Any]) -> Mapping[str, Any]:
    """A manifest as a mapping to read only: its own values, not copied (`write_run`)."""
    return manifest._fields() if isinstance(manifest, Manifest) else manifest


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse ``run_dir/manifest.json``.

    Raises:
        FileNotFoundError: when there is no manifest.
        ValueError: when it is not a JSON object (naming the file).
    """
    path = Path(run_dir) / MANIFEST_FILE
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}, expected a JSON object")
    return data
