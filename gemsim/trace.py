"""`CommitTrace`: the one data structure joining timing, engine and real backends.

Row k is commit k (0-based), which creates PS version k + 1 (version 0 is the initial
parameters). ``pulled_version[k]`` is the version commit k's gradient was computed on
and ``staleness[k] = k - pulled_version[k]``.

Two flag columns say what the protocol did besides committing: ``fresh`` marks the first
commit of a worker's life (its first commit in the run, and its first after a restart or a
late join: a new process that pulled the parameters and whose rule state starts anew), and
``round_end`` marks the commits at which the server closes a round (every commit of an
asynchronous protocol; the last commit of each barrier round). Both have defaults that the
other columns imply (first commit of each worker; every commit), and a trace whose flags are
at their defaults hashes and reads exactly as a trace of format 1, which had no flags.

A population's run (K slots serving N clients, `gemsim.timing.Population`) adds a ``client``
column: ``worker`` is then the slot (``n_workers`` = K) and ``client`` the client whose task
the commit ends, in ``[0, n_clients)``. A trace without it (persistent workers) hashes and is
written exactly as before the column existed; one with it is written as format 3.

A run whose workers take their own number of local steps (per group, or DyLU's from their
speeds) adds a ``local_steps`` column: the mini-batches commit k holds. A trace without it
(every commit holds the rule's one window) hashes and is written as before the column
existed; one with it is written as format 4.

A run whose network loses pushes (`workers.failures.drop_push`) adds a ``dropped`` column: the
pushes commit k's worker lost since its previous commit (format 4 too; hashed only where
present).

A run of FedCompass's scheduler (`gemsim.timing.Compass`) adds a ``buffer`` column: where the
server put commit k: 0 applied alone, 1 the general buffer, 2 its arrival group's buffer
(aggregated with the general buffer at the group's last row, which closes the round). Format
5; hashed only where present.

The columns' names, dtypes and checks are gemsim/_trace_columns.py; the parquet format (the
only reader and writer of trace files) is gemsim/_trace_parquet.py.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gemsim import _trace_parquet
from gemsim._atomic import atomic_write_bytes
from gemsim._checks import check_int
from gemsim._trace_columns import BUFFER as BUFFER
from gemsim._trace_columns import BUFFERS as BUFFERS
from gemsim._trace_columns import CLIENT as CLIENT
from gemsim._trace_columns import COLUMN_NAMES as COLUMN_NAMES
from gemsim._trace_columns import COLUMNS as COLUMNS
from gemsim._trace_columns import (
    COUNTS,
    checked_column,
    checked_flag,
    checked_seconds,
    default_fresh,
    first_bad,
)
from gemsim._trace_columns import DROPPED as DROPPED
from gemsim._trace_columns import FLAGS as FLAGS
from gemsim._trace_columns import LOCAL_STEPS as LOCAL_STEPS

if TYPE_CHECKING:
    import pandas as pd

_HASH_HEADER = b"gemsim.CommitTrace/v1\x00"
_ENCODED = "_encoded_file"  # where a trace keeps its parquet bytes (`CommitTrace.to_parquet`)


@dataclass(frozen=True, eq=False, repr=False)
class CommitTrace:
    """Equal-length, read-only numpy columns describing every commit of a run.

    Attributes:
        commit: int64, ``0..len-1``.
        time: float64, virtual (or wall) seconds of the commit, non-decreasing.
        worker: int64, committing worker in ``[0, n_workers)``.
        pulled_version: int64, version the gradient was computed on, ``<= commit``.
        staleness: int64, ``commit - pulled_version``.
        compute_time: float64 seconds spent computing the gradient (all its batches).
        queue_time: float64 seconds between arrival at the PS and start of service.
        service_time: float64 seconds of service at the PS.
        n_workers: workers in the cluster (including any that never committed).
        duration: seconds simulated (or run), ``>= time[-1]``.
        busy_time: seconds the PS spent serving within ``[0, duration]``; None if unknown.
        fresh: bool, the first commit of a worker's life (see the module docstring); None
            gives the default, each worker's first commit.
        round_end: bool, the server closes a round at this commit; None gives the default,
            every commit (asynchronous).
        client: int64, with a population: the client whose task the commit ends (``worker``
            is then its slot); None for persistent workers.
        n_clients: with a client column, the population's size N; None without.
        local_steps: int64 >= 1, the mini-batches commit k holds where workers take their own
            number of local steps; None where every commit holds the rule's window.
        dropped: int64 >= 0, the pushes commit k's worker lost in the network since its
            previous commit, where the network loses pushes; None where it loses none.
        buffer: int64 in {0, 1, 2}, where a FedCompass server put commit k (module
            docstring); None for every other protocol.

    The three duration columns may hold NaN where a real backend could not measure them.
    """

    commit: np.ndarray
    time: np.ndarray
    worker: np.ndarray
    pulled_version: np.ndarray
    staleness: np.ndarray
    compute_time: np.ndarray
    queue_time: np.ndarray
    service_time: np.ndarray
    n_workers: int
    duration: float
    busy_time: float | None = None
    fresh: np.ndarray | None = None
    round_end: np.ndarray | None = None
    client: np.ndarray | None = None
    n_clients: int | None = None
    local_steps: np.ndarray | None = None
    dropped: np.ndarray | None = None
    buffer: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name, dtype in COLUMNS:
            object.__setattr__(self, name, checked_column(name, getattr(self, name), dtype))
        n = len(self.commit)
        fresh = default_fresh(self.worker) if self.fresh is None else self.fresh
        round_end = np.ones(n, dtype=bool) if self.round_end is None else self.round_end
        object.__setattr__(self, "fresh", checked_flag("fresh", fresh, n))
        object.__setattr__(self, "round_end", checked_flag("round_end", round_end, n))
        n_workers = check_int("CommitTrace.n_workers", self.n_workers, 1)
        object.__setattr__(self, "n_workers", n_workers)
        object.__setattr__(self, "duration", checked_seconds("duration", self.duration))
        if self.busy_time is not None:
            object.__setattr__(self, "busy_time", checked_seconds("busy_time", self.busy_time))
        if (self.client is None) != (self.n_clients is None):
            raise ValueError(
                f"CommitTrace.client and n_clients come together (a population's trace), got "
                f"{'no' if self.client is None else 'a'} client column and n_clients "
                f"{self.n_clients!r}"
            )
        if self.client is not None:
            n_clients = check_int("CommitTrace.n_clients", self.n_clients, 1)
            client = checked_column(CLIENT, self.client, np.dtype(np.int64))
            first_bad(
                CLIENT, (client < 0) | (client >= n_clients), client, f"must be in [0, {n_clients})"
            )
            object.__setattr__(self, "n_clients", n_clients)
            object.__setattr__(self, "client", client)
        for name, least in COUNTS:
            if getattr(self, name) is not None:
                counts = checked_column(name, getattr(self, name), np.dtype(np.int64))
                first_bad(name, counts < least, counts, f"must be >= {least}")
                object.__setattr__(self, name, counts)
        if self.buffer is not None:
            first_bad(BUFFER, self.buffer >= BUFFERS, self.buffer, "must be 0, 1 or 2")
        self._validate_rows()

    def _validate_rows(self) -> None:
        n = len(self.commit)
        for name, column in self.columns().items():
            if len(column) != n:
                raise ValueError(
                    f"CommitTrace columns must have equal lengths: commit has {n}, "
                    f"{name} has {len(column)}"
                )
        if n == 0:
            return
        first_bad("commit", self.commit != np.arange(n), self.commit, "must equal 0..len-1")
        first_bad(
            "time", ~np.isfinite(self.time) | (self.time < 0), self.time, "must be finite and >= 0"
        )
        first_bad("time", np.diff(self.time, prepend=0.0) < 0, self.time, "must not decrease")
        if self.time[-1] > self.duration:
            raise ValueError(
                f"CommitTrace.duration ({self.duration!r}) must be >= the last commit time "
                f"({self.time[-1]!r})"
            )
        outside = (self.worker < 0) | (self.worker >= self.n_workers)
        first_bad("worker", outside, self.worker, f"must be in [0, {self.n_workers})")
        pv = self.pulled_version
        first_bad("pulled_version", pv < 0, pv, "must be >= 0")
        first_bad("pulled_version", pv > self.commit, pv, "must be <= commit")
        first_bad(
            "staleness",
            self.staleness != self.commit - pv,
            self.staleness,
            "must equal commit - pulled_version",
        )
        for name in ("compute_time", "queue_time", "service_time"):
            values = getattr(self, name)
            first_bad(name, np.isinf(values) | (values < 0), values, "must be >= 0 or NaN")
        first = default_fresh(self.worker)
        first_bad(
            "fresh", first & ~self.fresh, self.fresh, "must be True at a worker's first commit"
        )

    @classmethod
    def from_columns(
        cls,
        *,
        time: Any,
        worker: Any,
        pulled_version: Any,
        compute_time: Any,
        queue_time: Any,
        service_time: Any,
        n_workers: int,
        duration: float,
        commit: Any = None,
        staleness: Any = None,
        busy_time: float | None = None,
        fresh: Any = None,
        round_end: Any = None,
        client: Any = None,
        n_clients: int | None = None,
        local_steps: Any = None,
        dropped: Any = None,
        buffer: Any = None,
    ) -> CommitTrace:
        """Build and validate a trace; ``commit`` and ``staleness`` are derived if omitted,
        and the flags take their defaults.

        Raises:
            ValueError: naming the column, the rule and the first offending row.
        """
        time = checked_column("time", time, np.dtype(np.float64))
        n = len(time)
        if commit is None:
            commit = np.arange(n, dtype=np.int64)
        if staleness is None:
            pulled = checked_column("pulled_version", pulled_version, np.dtype(np.int64))
            if len(pulled) != n:
                raise ValueError(
                    f"CommitTrace columns must have equal lengths: time has {n}, "
                    f"pulled_version has {len(pulled)}"
                )
            staleness = np.arange(n, dtype=np.int64) - pulled
        return cls(
            commit=commit,
            time=time,
            worker=worker,
            pulled_version=pulled_version,
            staleness=staleness,
            compute_time=compute_time,
            queue_time=queue_time,
            service_time=service_time,
            n_workers=n_workers,
            duration=duration,
            busy_time=busy_time,
            fresh=fresh,
            round_end=round_end,
            client=client,
            n_clients=n_clients,
            local_steps=local_steps,
            dropped=dropped,
            buffer=buffer,
        )

    def __len__(self) -> int:
        return len(self.commit)

    def __repr__(self) -> str:
        clients = "" if self.n_clients is None else f", n_clients={self.n_clients}"
        return (
            f"CommitTrace(commits={len(self)}, n_workers={self.n_workers}{clients}, "
            f"duration={self.duration!r}, busy_time={self.busy_time!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommitTrace):
            return NotImplemented
        mine, theirs = self.columns(), other.columns()
        return (
            self._attributes() == other._attributes()
            and mine.keys() == theirs.keys()
            and all(np.array_equal(mine[k], theirs[k], equal_nan=True) for k in mine)
        )

    __hash__ = None  # type: ignore[assignment]  # equality is by value; arrays are large

    def _attributes(self) -> dict[str, Any]:
        attributes = {"n_workers": self.n_workers, "duration": self.duration}
        attributes["busy_time"] = self.busy_time
        if self.n_clients is not None:  # absent for persistent workers, as before it existed
            attributes["n_clients"] = self.n_clients
        return attributes

    def columns(self) -> dict[str, np.ndarray]:
        """The columns by name, in canonical order (then ``client`` and ``local_steps``, where
        the trace has them)."""
        columns = {name: getattr(self, name) for name in COLUMN_NAMES}
        if self.client is not None:
            columns[CLIENT] = self.client
        for name, _ in COUNTS:
            if getattr(self, name) is not None:
                columns[name] = getattr(self, name)
        return columns

    def sha256(self) -> str:
        """Hex sha256 over ``n_workers``, the row count and every column, canonically.

        Columns are hashed in `COLUMNS` order as little-endian int64/float64 bytes, with
        ``-0.0`` written as ``0.0`` and every NaN as the same quiet NaN, so equal traces
        hash equally on every platform; then each flag column that differs from its
        default (so a trace without restarts, joins or rounds hashes as format 1 did); then,
        for a population, ``n_clients`` and the client column (a trace without one hashes as
        before the column existed); then the local_steps and dropped columns where there are.
        ``duration`` and ``busy_time`` are not included.
        """
        digest = hashlib.sha256(_HASH_HEADER)
        digest.update(np.array([self.n_workers, len(self)], dtype="<i8").tobytes())
        for name, dtype in COLUMNS:
            values = getattr(self, name)
            if dtype.kind == "f":
                values = np.where(np.isnan(values), np.nan, values + 0.0)
            digest.update(name.encode("ascii") + b"\x00")
            digest.update(values.astype(dtype.newbyteorder("<"), copy=False).tobytes())
        defaults = {"fresh": default_fresh(self.worker), "round_end": np.ones(len(self), bool)}
        for name in FLAGS:
            values = getattr(self, name)
            if not np.array_equal(values, defaults[name]):
                digest.update(name.encode("ascii") + b"\x00" + values.astype(np.uint8).tobytes())
        if self.client is not None:
            digest.update(CLIENT.encode("ascii") + b"\x00")
            digest.update(np.array([self.n_clients], dtype="<i8").tobytes())
            digest.update(self.client.astype("<i8", copy=False).tobytes())
        for name, _ in COUNTS:
            if getattr(self, name) is not None:
                digest.update(name.encode("ascii") + b"\x00")
                digest.update(getattr(self, name).astype("<i8", copy=False).tobytes())
        return digest.hexdigest()

    def to_pandas(self) -> pd.DataFrame:
        """A DataFrame of the columns; ``attrs`` holds n_workers, duration and busy_time."""
        import pandas as pd

        frame = pd.DataFrame({name: np.array(values) for name, values in self.columns().items()})
        frame.attrs.update(self._attributes())
        return frame

    def to_parquet(self, path: str | os.PathLike[str]) -> None:
        """Write the trace to a parquet file, atomically (the one trace format: a run folder's
        trace.parquet and `gemsim trace --out` both come from here)."""
        atomic_write_bytes(path, self._parquet_bytes())

    def __getstate__(self) -> dict[str, Any]:
        # A trace sent to another process goes without its encoded file (`_parquet_bytes`).
        return {k: v for k, v in self.__dict__.items() if k != _ENCODED}

    def _parquet_bytes(self) -> bytes:
        """The file's bytes, encoded once per trace (its columns are read-only): the runs of
        a sweep that share a trace each write it into their folder. Two threads may both
        encode it the first time; they get the same bytes."""
        encoded = self.__dict__.get(_ENCODED)
        if encoded is None:
            encoded = self._encode()
            object.__setattr__(self, _ENCODED, encoded)  # a cache, not a field
        return encoded

    def _encode(self) -> bytes:
        return _trace_parquet.encode(self.columns(), self._attributes())

    @classmethod
    def from_parquet(
        cls, path: str | os.PathLike[str], *, n_workers: int | None = None
    ) -> CommitTrace:
        """Read a trace written by `to_parquet` (also a run folder's trace.parquet written by
        gemsim 0.1, whose attributes pandas kept), validated like `from_columns`.

        Args:
            path: the parquet file.
            n_workers: for a table that carries no gemsim metadata at all (a trace made by
                another tool): its worker count; its duration is then its last commit time.

        Raises:
            ValueError: if the file is not a commit trace or is inconsistent (the message
                says what is wrong; callers name the file).
        """

        return cls(**_trace_parquet.read(path, n_workers))
