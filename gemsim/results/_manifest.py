"""The run manifest: its public keys, validation and strict, stable JSON."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from gemsim.types import Status

MANIFEST_FILE = "manifest.json"
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
FINAL_KEYS = ("train_loss", "test_loss", "test_accuracy")
STALENESS_KEYS = ("mean", "var", "max")
FINISHED = frozenset({Status.OK.value, Status.DIVERGED.value})


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


def validate_manifest(manifest: Mapping[str, Any]) -> None:
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
