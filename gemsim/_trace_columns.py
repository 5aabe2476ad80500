"""The columns of a `CommitTrace` (gemsim/trace.py): their names, dtypes and order, the
flag and optional count columns, and the checks that make each one a fresh read-only array
(each error names the column as ``CommitTrace.<name>``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gemsim._checks import check_nonnegative

COLUMNS: tuple[tuple[str, np.dtype], ...] = (
    ("commit", np.dtype(np.int64)),
    ("time", np.dtype(np.float64)),
    ("worker", np.dtype(np.int64)),
    ("pulled_version", np.dtype(np.int64)),
    ("staleness", np.dtype(np.int64)),
    ("compute_time", np.dtype(np.float64)),
    ("queue_time", np.dtype(np.float64)),
    ("service_time", np.dtype(np.float64)),
)
"""Column names and dtypes, in the canonical order used by `CommitTrace.sha256`."""

FLAGS: tuple[str, ...] = ("fresh", "round_end")
"""Boolean columns, hashed after `COLUMNS` and only where they differ from their defaults."""

COLUMN_NAMES: tuple[str, ...] = (*(name for name, _ in COLUMNS), *FLAGS)

CLIENT = "client"
"""The optional int64 column of a population's traces, hashed and written after the flags."""

LOCAL_STEPS = "local_steps"
"""The optional int64 column of a trace whose workers hold windows of their own (>= 1)."""

DROPPED = "dropped"
"""The optional int64 column of a trace whose network loses pushes (>= 0)."""

BUFFER = "buffer"
"""The optional int64 column of a FedCompass trace: 0 alone, 1 general buffer, 2 group."""
BUFFERS = 3  # the values of the buffer column: 0, 1, 2

COUNTS: tuple[tuple[str, int], ...] = ((LOCAL_STEPS, 1), (DROPPED, 0), (BUFFER, 0))
"""The optional int64 count columns and their least value, in hashing and writing order."""


def default_fresh(worker: np.ndarray) -> np.ndarray:
    """The `fresh` column a trace without restarts or late joins has: each worker's first
    commit."""
    first = np.zeros(len(worker), dtype=bool)
    if len(worker):
        _, index = np.unique(worker, return_index=True)
        first[index] = True
    return first


def checked_flag(name: str, value: Any, n: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 1 or len(array) != n or (array.size and array.dtype.kind != "b"):
        raise ValueError(
            f"CommitTrace.{name} must be a 1-D bool column of length {n}, "
            f"got {array.dtype} {array.shape}"
        )
    out = np.array(array, dtype=bool, copy=True)
    out.setflags(write=False)
    return out


def checked_column(name: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """A fresh read-only 1-D array of exactly ``dtype``; integer columns stay integral."""
    array = np.asarray(value)
    if array.ndim != 1:
        raise ValueError(f"CommitTrace.{name} must be 1-D, got shape {array.shape}")
    if dtype.kind == "i" and array.size and array.dtype.kind not in "iu":
        raise ValueError(f"CommitTrace.{name} must hold integers, got dtype {array.dtype}")
    if dtype.kind == "f" and array.size and array.dtype.kind not in "iuf":
        raise ValueError(f"CommitTrace.{name} must hold numbers, got dtype {array.dtype}")
    out = np.array(array, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


def first_bad(name: str, bad: np.ndarray, values: np.ndarray, rule: str) -> None:
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"CommitTrace.{name} {rule}; row {row} has {values[row]!r}")


def checked_seconds(name: str, value: Any) -> float:
    return check_nonnegative(f"CommitTrace.{name}", value)
