"""Reading a user's partition file (`FromFile`) into each training example's worker.

Accepted: an ``.npz`` with one integer array ``worker`` aligned with the training set, or one
index array per worker (``worker_0`` ... or numpy's ``arr_0`` ...); a ``.csv`` or ``.parquet``
with a ``worker`` column aligned with the training set (read with pandas, imported only
here). Every failure is a `PartitionError` on ``path`` (``sha256`` for a changed file) naming
the file, the worker or entry, the value and what is allowed.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np

from ._specs import FromFile, PartitionError

__all__ = ["read_owners"]

_INTEGER_TEXT = re.compile(r"\s*[+-]?\d+\s*")
_PER_WORKER = ("worker_", "arr_")
"""Prefixes of per-worker index arrays: ours, and the names ``np.savez(path, *arrays)`` gives."""


def read_owners(spec: FromFile, n_train: int, n_workers: int) -> np.ndarray:
    """int64 [n_train]: each training example's worker, from the file; every check passed
    (workers 0..n-1 each hold at least one example, every example exactly one worker)."""
    path = _file(spec)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        arrays = _read_npz(path, spec.path)
        if list(arrays) == ["worker"]:
            return _aligned(spec.path, "array `worker`", arrays["worker"], n_train, n_workers)
        return _per_worker(spec.path, arrays, n_train, n_workers)
    if suffix in (".csv", ".parquet"):
        column = _read_table(path, spec.path)
        return _aligned(spec.path, "column `worker`", column, n_train, n_workers)
    raise PartitionError(
        "path", f"{spec.path}: unknown kind of file {suffix!r}; allowed: .npz, .csv, .parquet"
    )


def _error(source: str, message: str) -> PartitionError:
    return PartitionError("path", f"{source}: {message}")


def _file(spec: FromFile) -> Path:
    from gemsim._user_code import file_sha256  # the one memoised file digest (stdlib only)

    path = Path(spec.path).expanduser()
    if not path.is_file():
        raise _error(spec.path, "no such file")
    if spec.sha256 is not None and file_sha256(path) != spec.sha256:
        raise PartitionError(
            "sha256",
            f"{spec.path} changed since its sha256 was recorded ({spec.sha256[:12]}..., now "
            f"{file_sha256(path)[:12]}...): load the scenario again",
        )
    return path


def _read_npz(path: Path, source: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, AttributeError) as exc:
        raise _error(source, f"not a readable .npz file ({exc})") from None


def _read_table(path: Path, source: str) -> np.ndarray:
    import pandas as pd  # only for these files: importing pandas costs most of a second

    try:
        frame = pd.read_csv(path) if path.suffix.lower() == ".csv" else pd.read_parquet(path)
    except (OSError, ValueError, ImportError, pd.errors.ParserError) as exc:
        raise _error(source, f"not a readable {path.suffix} file ({exc})") from None
    if "worker" not in frame.columns:
        raise _error(
            source,
            f"no `worker` column (it has {', '.join(map(str, frame.columns)) or 'none'}); "
            "allowed: a `worker` column with each training example's worker",
        )
    return frame["worker"].to_numpy()


def _integers(source: str, what: str, values: np.ndarray) -> np.ndarray:
    """``values`` as int64, or an error naming the first entry that is not an integer."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise _error(source, f"{what} has shape {values.shape}; allowed: a 1-D array")
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
    else:  # text or objects: a table column with one bad cell is read as text
        bad = np.array([i for i, v in enumerate(values) if not _is_int(v)][:1])
    if bad.size:
        value = values[bad[0]]
        shown = value.item() if isinstance(value, np.generic) else value
        raise _error(source, f"{what} entry {bad[0]} is {shown!r}; allowed: integers only")
    return values.astype(np.int64)


def _is_int(value: object) -> bool:
    if isinstance(value, str):
        return _INTEGER_TEXT.fullmatch(value) is not None
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _aligned(source: str, what: str, values: np.ndarray, n_train: int, n: int) -> np.ndarray:
    owner = _integers(source, what, values)
    if owner.size != n_train:
        raise _error(
            source,
            f"{what} has {owner.size} entries, the training set {n_train}: allowed one worker "
            "id per training example, in the training set's order",
        )
    bad = np.flatnonzero((owner < 0) | (owner >= n))
    if bad.size:
        raise _error(
            source,
            f"{what} entry {bad[0]} is worker {owner[bad[0]]}; allowed 0 to {n - 1} "
            f"(there are {n} workers)",
        )
    empty = np.flatnonzero(np.bincount(owner, minlength=n) == 0)
    if empty.size:
        raise _error(
            source,
            f"worker {empty[0]} holds no example ({empty.size} workers empty; the file names "
            f"{n - empty.size} of the {n} workers): every worker needs at least one",
        )
    return owner


def _per_worker(source: str, arrays: dict[str, np.ndarray], n_train: int, n: int) -> np.ndarray:
    names = list(arrays)
    prefix = next(
        (p for p in _PER_WORKER if all(re.fullmatch(rf"{p}(0|[1-9]\d*)", s) for s in names)),
        None,
    )
    if prefix is None or not names:
        raise _error(
            source,
            f"holds arrays {', '.join(names) or 'none'}; allowed: one array `worker` aligned "
            "with the training set, or one index array per worker named worker_0 ... "
            f"worker_{n - 1} (or arr_0 ... arr_{n - 1})",
        )
    if len(names) != n:
        raise _error(source, f"holds index arrays for {len(names)} workers; there are {n}")
    missing = [w for w in range(n) if f"{prefix}{w}" not in arrays][:1]
    if missing:
        raise _error(source, f"{prefix}{missing[0]} is missing (arrays numbered 0 to {n - 1})")
    # One array per worker is read one by one; what follows is vectorised.
    shards = [_integers(source, f"{prefix}{w}", arrays[f"{prefix}{w}"]) for w in range(n)]
    sizes = np.array([s.size for s in shards], np.int64)
    if (sizes == 0).any():
        w = int(np.argmax(sizes == 0))
        raise _error(source, f"{prefix}{w} is empty: every worker needs at least one example")
    indices = np.concatenate(shards)
    holder = np.repeat(np.arange(n, dtype=np.int64), sizes)
    bad = np.flatnonzero((indices < 0) | (indices >= n_train))
    if bad.size:
        raise _error(
            source,
            f"{prefix}{holder[bad[0]]} holds index {indices[bad[0]]}; allowed 0 to "
            f"{n_train - 1} (the training set has {n_train} examples)",
        )
    counts = np.bincount(indices, minlength=n_train)
    twice = np.flatnonzero(counts > 1)
    if twice.size:
        both = holder[indices == twice[0]][:2]
        raise _error(
            source,
            f"index {twice[0]} is held by {prefix}{both[0]} and {prefix}{both[1]}; allowed: "
            "each example in one shard only",
        )
    nobody = np.flatnonzero(counts == 0)
    if nobody.size:
        raise _error(
            source,
            f"index {nobody[0]} is held by no worker ({nobody.size} examples uncovered); "
            "allowed: shards that cover the training set",
        )
    owner = np.empty(n_train, np.int64)
    owner[indices] = holder
    return owner
