"""Run folders: one self-describing directory per run, written atomically, and `RunResult`,
the one record type of a finished run, which a folder holds.

Layout of ``OUT/<run_id>/``::

    manifest.json    what ran and how it ended (keys in ``MANIFEST_KEYS``)
    trace.parquet    the commit trace (one row per commit)
    metrics.parquet  per-commit metrics written by the engine
    params.npz       final central parameters, one array per leaf, keyed by its path
    worker_summary.parquet  one row per worker: its commits, what it holds (optional)
    workers.parquet  the central variable on each worker's own data at each evaluation,
                     where workers have data of their own (optional)
    clients_tasks.parquet  a population's tasks, one row each (optional)

A folder under its final name is always complete: ``write_run`` builds it
under a hidden temporary name and renames it into place, so a run killed
half-way leaves only a hidden folder that every reader skips.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import secrets
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gemsim._atomic import atomic_write_bytes, atomic_write_text, fsync_dir
from gemsim.results._files import (
    CLIENT_TASKS_FILE,
    METRICS_FILE,
    PARAMS_FILE,
    RUN_FILES,
    TRACE_FILE,
    WORKER_EVALS_FILE,
    WORKER_SUMMARY_FILE,
)
from gemsim.results._manifest import (
    FINISHED,
    MANIFEST_FILE,
    MANIFEST_KEYS,
    Manifest,
    check_manifest,
    kind_of,
    manifest_fields,
    manifest_to_json,
    read_manifest,
)
from gemsim.trace import CommitTrace
from gemsim.types import PyTree, Status

if TYPE_CHECKING:  # pandas is imported where a frame is written or read
    import pandas as pd

__all__ = [
    "MANIFEST_KEYS",
    "RunResult",
    "atomic_write_bytes",
    "atomic_write_text",
    "is_finished",
    "manifest_to_json",
    "params_sha256",
    "read_manifest",
    "read_params",
    "read_run",
    "check_manifest",
    "worker_optima",
    "write_run",
]


def is_finished(run_dir: str | os.PathLike[str], identity: str, kind: str = "sim") -> bool:
    """Whether ``run_dir`` holds a finished run of exactly this identity and kind.

    Finished means: every run file exists, the manifest parses, its status is ``ok`` or
    ``diverged`` (a diverged run is a result), and its identity and kind are the ones asked
    for. A ``failed`` run is not finished, so ``--resume`` retries it. Folders written by
    gemsim 0.1 have no identity: theirs is their ``config_hash``, and a replay is told by
    its ``replayed_trace`` key.
    """
    run_dir = Path(run_dir)
    if not all((run_dir / name).is_file() for name in RUN_FILES):
        return False
    try:
        manifest = read_manifest(run_dir)
    except (OSError, ValueError):
        return False
    found_kind = kind_of(manifest)
    found_identity = manifest.get("identity") or manifest.get("config_hash")
    return manifest.get("status") in FINISHED and found_identity == identity and found_kind == kind


# --------------------------------------------------------------------------- the record

_PATH_PART = re.compile(r"\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]|\.(\w+)")


@dataclasses.dataclass(frozen=True, eq=False)
class RunResult:
    """A finished run: its manifest, trace, metrics and final parameters, as its folder holds
    them (plain numpy and pandas, so that it pickles between processes and machines).

    Attributes:
        manifest: what ran and how it ended (`manifest.json`).
        trace: the commit trace (``.to_pandas()`` for a frame).
        metrics: per-commit metrics, one row per executed commit (a pandas DataFrame).
        params: the final central parameters, one array per leaf keyed by its path
            (``"['conv1']['w']"``, as ``params.npz`` holds them); :meth:`tree` nests them.
        worker_evals: where the workers have data of their own, the central variable on each
            worker's data at each evaluation (``workers.parquet``: ``commit, time, worker,
            loss, accuracy``); None otherwise.
        worker_summary: one row per worker (``worker_summary.parquet``: ``worker, commits,
            commit_share, accepted, accepted_share, mean_compute_time``, and ``shard_size``,
            ``optimum_<i>`` where the workers hold them); None for a failed run.
        tasks: a population's tasks, one row each (``clients_tasks.parquet``: ``task, client,
            slot, start, end, outcome, commit, staleness``); None for other runs.
    """

    manifest: Manifest
    trace: CommitTrace
    metrics: Any  # pandas.DataFrame
    params: dict[str, np.ndarray]
    worker_evals: Any = None  # pandas.DataFrame | None
    worker_summary: Any = None  # pandas.DataFrame | None
    tasks: Any = None  # pandas.DataFrame | None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def status(self) -> Status:
        return Status(self.manifest.status)

    def worker_optima(self) -> np.ndarray | None:
        """The heterogeneous quadratic's optima c_w, float ``[n_workers, dim]``, or None."""
        return None if self.worker_summary is None else worker_optima(self.worker_summary)

    def tree(self) -> PyTree:
        """The parameters nested by their leaf paths: dicts for keys and attributes, lists for
        indices (the built-in models' own pytrees, whose parameters are dicts)."""
        return nest(self.params)

    def placed(self, placement: Mapping[str, Any], *, command: str | None = None) -> RunResult:
        """The result with where it ran (`provenance.placement`) and the command that started
        the sweep (a job process knows only its own) recorded in its manifest."""
        prov = dict(self.manifest.provenance)
        prov["placement"] = {**prov.get("placement", {}), **placement}
        if command is not None:
            prov["command"] = command
        manifest = dataclasses.replace(self.manifest, provenance=prov)
        return dataclasses.replace(self, manifest=manifest)

    def write(self, out_dir: str | Path) -> Path:
        """The run folder ``out_dir/<run_id>/``, written atomically (`write_run`)."""
        return write_run(
            out_dir,
            self.run_id,
            self.manifest,
            self.trace,
            self.metrics,
            self.params,
            worker_evals=self.worker_evals,
            worker_summary=self.worker_summary,
            tasks=self.tasks,
        )


_OPTIMUM = re.compile(r"optimum_(\d+)$")


def worker_optima(summary: pd.DataFrame) -> np.ndarray | None:
    """The ``optimum_<i>`` columns of a worker summary (one run's, rows in worker order) as
    float ``[n_workers, dim]``; None when it has none (not a heterogeneous quadratic)."""
    found = sorted((int(m.group(1)), c) for c in summary.columns if (m := _OPTIMUM.match(str(c))))
    if not found:
        return None
    rows = summary.sort_values("worker") if "worker" in summary.columns else summary
    return rows[[c for _, c in found]].to_numpy()


def nest(flat: Mapping[str, np.ndarray]) -> PyTree:
    """Leaf paths (``jax.tree_util.keystr``'s form) nested into dicts and lists."""
    root: dict[Any, Any] = {}
    for path, leaf in flat.items():
        parts = [m.group(1) or m.group(3) or int(m.group(2)) for m in _PATH_PART.finditer(path)]
        if not parts:
            root[path] = leaf
            continue
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = leaf
    return _lists(root)


def _lists(node: Any) -> Any:
    """Dicts whose keys are 0..n-1 (sequence indices) as lists."""
    if not isinstance(node, dict):
        return node
    node = {k: _lists(v) for k, v in node.items()}
    if node and all(isinstance(k, int) for k in node) and sorted(node) == list(range(len(node))):
        return [node[i] for i in range(len(node))]
    return node


# --------------------------------------------------------------------------- params


def _little_endian(array: Any) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise TypeError(f"parameter arrays must be numeric, got dtype {array.dtype}")
    # Not np.ascontiguousarray: it turns 0-d arrays into shape (1,).
    return array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)


def params_sha256(params: Mapping[str, Any]) -> str:
    """sha256 of parameters over canonical bytes, independent of dict order and host endianness.

    For each key in sorted order: the key (utf-8), the dtype as little-endian
    ``numpy`` descriptor, the shape and the little-endian data, each
    length-prefixed so that no two different inputs share a byte stream.
    """
    digest = hashlib.sha256()

    def put(chunk: bytes) -> None:
        digest.update(len(chunk).to_bytes(8, "little"))
        digest.update(chunk)

    for key in sorted(params):
        array = _little_endian(params[key])
        put(key.encode("utf-8"))
        put(array.dtype.str.encode("ascii"))
        put(",".join(str(n) for n in array.shape).encode("ascii"))
        put(array.tobytes())
    return digest.hexdigest()


def _write_params(path: Path, params: Mapping[str, Any]) -> None:
    # Written entry by entry rather than with np.savez, whose keyword arguments
    # would collide with leaves named "file" or "allow_pickle".
    with path.open("wb") as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as archive:
            for key in sorted(params):
                with archive.open(f"{key}.npy", "w", force_zip64=True) as entry:
                    np.lib.format.write_array(
                        entry, _little_endian(params[key]), allow_pickle=False
                    )
        fh.flush()
        os.fsync(fh.fileno())


def read_params(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read a ``params.npz`` into a dict, leaf path -> array (no pickles allowed)."""
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


# --------------------------------------------------------------------------- run folders


def _write_frame(path: Path, frame: pd.DataFrame) -> None:
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(
            f"{path.name} needs a pandas DataFrame, got {type(frame).__name__}; "
            "convert first (e.g. CommitTrace.to_pandas())"
        )
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The bytes of `frame.to_parquet(path, index=False, use_dictionary=False)`, converted in
    # this thread: pyarrow otherwise starts and stops a thread pool per frame (above 100 rows
    # per CPU), 3x slower for a 3,000-row frame. No dictionary encoding: per-commit metrics
    # are floats that rarely repeat, for which it doubled the write's time and made the file
    # a fifth larger.
    table = pa.Table.from_pandas(frame, preserve_index=False, nthreads=1)
    pq.write_table(table, path, use_dictionary=False)
    with path.open("rb+") as fh:
        os.fsync(fh.fileno())


def _write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    atomic_write_text(path, manifest_to_json(manifest))


def _check_params_hash(manifest: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    actual = params_sha256(params)
    if manifest["params_sha256"] != actual:
        raise ValueError(
            f"manifest['params_sha256'] = {manifest['params_sha256']!r} does not match the "
            f"params being written ({actual}); compute it with gemsim.results.params_sha256"
        )


def _swap_into_place(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` is moved aside first, then removed."""
    aside = None
    if final.exists():
        aside = final.with_name(f".{final.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.rename(final, aside)
    try:
        os.rename(tmp, final)
    except BaseException:
        if aside is not None:
            os.rename(aside, final)  # put the previous finished run back
        raise
    fsync_dir(final.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def write_run(
    out_dir: str | os.PathLike[str],
    run_id: str,
    manifest: Manifest | Mapping[str, Any],
    trace: CommitTrace,
    metrics: pd.DataFrame,
    params: Mapping[str, np.ndarray],
    *,
    worker_evals: pd.DataFrame | None = None,
    worker_summary: pd.DataFrame | None = None,
    tasks: pd.DataFrame | None = None,
) -> Path:
    """Write ``out_dir/<run_id>/`` atomically and return its path.

    All four files are written and fsynced inside a hidden folder
    ``out_dir/.<run_id>.tmp-<pid>-<random>`` (manifest last), which is then
    renamed into place. A previous folder of the same run is renamed aside
    before and deleted after, so it is never half-replaced. If anything fails,
    the hidden folder is removed and the error propagates; if the process is
    killed, the hidden folder stays behind and readers ignore it.

    Args:
        out_dir: the results folder (created if missing).
        run_id: folder name; must equal ``manifest['run_id']``.
        manifest: a :class:`Manifest` (or a mapping with every key in ``MANIFEST_KEYS``);
            ``params_sha256`` must equal ``params_sha256(params)``.
        trace: the commit trace, written in its one parquet format (`CommitTrace.to_parquet`).
        metrics: the per-commit metrics frame.
        params: final parameters, leaf path -> numeric array.
        worker_evals: per-worker evaluations (``workers.parquet``), or None (not written).
        worker_summary: the per-worker table (``worker_summary.parquet``), or None.
        tasks: a population's tasks (``clients_tasks.parquet``), or None.

    Raises:
        ValueError: a missing or bad manifest key, or a params hash mismatch.
    """
    manifest = manifest_fields(manifest)
    check_manifest(manifest)
    if not isinstance(trace, CommitTrace):
        raise TypeError(f"trace must be a CommitTrace, got {type(trace).__name__}")
    if manifest["run_id"] != run_id:
        raise ValueError(
            f"run_id {run_id!r} differs from manifest['run_id'] {manifest['run_id']!r}"
        )
    _check_params_hash(manifest, params)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{run_id}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        trace.to_parquet(tmp / TRACE_FILE)
        _write_frame(tmp / METRICS_FILE, metrics)
        _write_params(tmp / PARAMS_FILE, params)
        for name, frame in (
            (WORKER_EVALS_FILE, worker_evals),
            (WORKER_SUMMARY_FILE, worker_summary),
            (CLIENT_TASKS_FILE, tasks),
        ):
            if frame is not None:
                _write_frame(tmp / name, frame)
        _write_manifest(tmp / MANIFEST_FILE, manifest)
        fsync_dir(tmp)
        _swap_into_place(tmp, out_dir / run_id)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir / run_id


def read_run(run_dir: str | os.PathLike[str]) -> RunResult:
    """Read every file of a run folder back into a :class:`RunResult`."""
    import pandas as pd

    run_dir = Path(run_dir)
    optional = {
        name: pd.read_parquet(run_dir / name, engine="pyarrow")
        if (run_dir / name).is_file()
        else None
        for name in (WORKER_EVALS_FILE, WORKER_SUMMARY_FILE, CLIENT_TASKS_FILE)
    }
    return RunResult(
        manifest=Manifest.from_dict(read_manifest(run_dir)),
        trace=CommitTrace.from_parquet(run_dir / TRACE_FILE),
        metrics=pd.read_parquet(run_dir / METRICS_FILE, engine="pyarrow"),
        params=read_params(run_dir / PARAMS_FILE),
        worker_evals=optional[WORKER_EVALS_FILE],
        worker_summary=optional[WORKER_SUMMARY_FILE],
        tasks=optional[CLIENT_TASKS_FILE],
    )
