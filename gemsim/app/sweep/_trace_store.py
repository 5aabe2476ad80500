"""The trace store: one simulated trace per distinct timing, shared by the runs of a sweep,
its job processes and Ray tasks, and later invocations into the same results folder.

A simulated run's trace is a function of its timing inputs alone (`_timing_key.py`), so runs
that differ only in what the timing model does not read (the rule, a learning rate, the
problem) share one. Traces live in `OUT/.traces/` as `<key>-<sha256>.parquet`: the key names
the timing inputs, the sha256 is the file's own bytes. A file appears under that name only
once it is complete (it is written under a hidden temporary name and renamed), and a reader
checks the sha256 before using it: a corrupt or truncated file is deleted and its trace
simulated again, never used. A process simulates a key while holding a lock on it
(`.traces/.locks/`), so concurrent job processes simulate each trace once; a store that
cannot be written (a full disk, a read-only folder) only costs time: the run uses the trace
it simulated, and the store keeps what it had. Deleting the folder costs nothing but time.

A population's trace comes with its per-client report (`timing.ClientReport`: each client's
speed and time up, and its tasks, lost ones included, which the trace does not hold), from
the same run of the timing model: it is stored beside the trace as
`<key>-<sha256>.clients.npz` (`_stored_clients.py`), checked as a trace is, and against the
trace it is read with (each committed task is its row). A population's trace stored without
it (by an older gemsim, or a write that failed) is simulated again for it.

Nothing here changes a result: a trace read back equals the one simulated, bit for bit (the
parquet columns are the trace's own numpy columns), and so does its per-client report.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from gemsim._atomic import fsync_dir
from gemsim.trace import CommitTrace

from ._stored_clients import (
    CLIENTS_SUFFIX,
    client_report_parts,
    read_client_report,
    write_client_report,
)
from ._timing_key import timing_key

STORE_FOLDER = ".traces"
"""The store's folder inside a results folder (hidden: `gemsim ls` and `load_results` skip
it)."""
LOCK_STRIPES = 2
"""Hex digits of a key naming its lock file: 256 lock files at most, and two keys sharing one
only wait for each other."""

LEFTOVER_S = 3600.0
"""A temporary file this old is what a killed writer left behind."""

SIMULATED = "simulated"
READ = "read from the store"
FROM_STORE = "reused from the store"
WITHIN_SWEEP = "reused within the sweep"


class Timed(NamedTuple):
    """What the timing model's one run gives a run's record: the trace and, for a
    population, its per-client report (`timing.ClientReport`, its tasks with it)."""

    trace: CommitTrace
    clients: Any = None  # timing.ClientReport | None

    @property
    def tasks(self) -> Any:  # timing.ClientTasks | None
        return None if self.clients is None else self.clients.tasks


@dataclass(frozen=True)
class TimingInputs:
    """What a simulated run's trace is made from: `timing.simulate(spec, seed,
    schedule_seed=schedule_seed)`, and its key in the store."""

    spec: Any  # timing.ClusterSpec
    seed: int
    schedule_seed: int | None = None
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            key = timing_key(self.spec, self.seed, self.schedule_seed)
            object.__setattr__(self, "key", key)

    @staticmethod
    def of(scenario) -> TimingInputs:
        """A scenario's timing inputs (`config.build_cluster`, its seed)."""
        from gemsim import config

        return TimingInputs(config.build_cluster(scenario), scenario.seed)

    @property
    def population(self) -> bool:
        """Whether the run is a population's (its trace comes with a per-client report)."""
        return self.spec.population is not None

    def simulate(self) -> CommitTrace:
        from gemsim import timing

        return timing.simulate(self.spec, seed=self.seed, schedule_seed=self.schedule_seed)

    def simulate_timed(self) -> Timed:
        """The trace and, for a population, its per-client report, from one simulation."""
        from gemsim import timing

        run = timing.simulate_run(self.spec, seed=self.seed, schedule_seed=self.schedule_seed)
        return Timed(run.trace, run.clients)


def _write_trace(trace: CommitTrace, path: Path) -> None:
    """Write a trace's file (a seam: the tests make it fail as a full disk does)."""
    trace.to_parquet(path)


@dataclass(frozen=True)
class TraceStore:
    """The store at `root` (`OUT/.traces`, created with its first trace), made on `host`."""

    root: Path
    host: str = ""

    @staticmethod
    def of(out_dir: str | os.PathLike[str]) -> TraceStore:
        """The store of a results folder (an absolute path: job processes and Ray tasks may
        run elsewhere)."""
        return TraceStore(Path(out_dir).absolute() / STORE_FOLDER, socket.gethostname())

    def seen_here(self) -> bool:
        """Whether this process sees the store: on its host, or where the results folder is
        shared (a Ray node that does not see it simulates its traces itself)."""
        return self.host == socket.gethostname() or self.root.parent.is_dir()

    def keys(self) -> set[str]:
        """The keys with a stored trace (not checked: reading checks)."""
        return {key for key, _ in self._stored()}

    def files(self, key: str) -> list[Path]:
        """The stored files of `key` (one, unless writers disagreed on its bytes)."""
        return sorted(
            self.root / f"{k}-{digest}.parquet" for k, digest in self._stored() if k == key
        )

    def client_files(self, key: str) -> list[Path]:
        """The stored per-client report files of `key` (a population's trace's)."""
        return sorted(
            self.root / f"{k}-{digest}{CLIENTS_SUFFIX}"
            for k, digest in self._stored(client_report_parts)
            if k == key
        )

    def _stored(self, parts=None) -> list[tuple[str, str]]:
        try:
            names = os.listdir(self.root)
        except OSError:
            return []
        return [found for found in map(parts or _parts, names) if found is not None]

    def read(self, key: str) -> tuple[CommitTrace | None, bool]:
        """The stored trace of `key` if one passes its sha256 check, and whether a corrupt
        copy was found (and deleted)."""
        corrupt = False
        for path in self.files(key):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() == _parts(path.name)[1]:
                try:
                    return CommitTrace.from_parquet(io.BytesIO(data)), corrupt
                except (ValueError, OSError, KeyError):
                    pass  # complete but not a trace: written by something else
            corrupt = True
            with contextlib.suppress(OSError):
                path.unlink()
        return None, corrupt

    def read_clients(self, key: str, trace: CommitTrace) -> tuple[Any, bool]:
        """The stored per-client report of `key` (`timing.ClientReport`) if a file passes its
        sha256 check and matches `trace`, and whether a bad copy was found (and deleted)."""
        corrupt = False
        for path in self.client_files(key):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() == client_report_parts(path.name)[1]:
                try:
                    return read_client_report(data, trace), corrupt
                except (ValueError, OSError, KeyError):
                    pass
            corrupt = True
            with contextlib.suppress(OSError):
                path.unlink()
        return None, corrupt

    def write(self, key: str, trace: CommitTrace, clients: Any = None) -> Path:
        """Store `trace` under `key`, and a population's per-client report `clients` beside
        it, atomically; raises OSError (nothing is left behind)."""
        final = self._write(key, lambda path: _write_trace(trace, path), ".parquet")
        if clients is not None:
            self.write_clients(key, clients)
        return final

    def write_clients(self, key: str, clients: Any) -> Path:
        """Store a population's per-client report under `key`, atomically; raises OSError."""
        write = lambda path: write_client_report(clients, path)
        return self._write(key, write, CLIENTS_SUFFIX)

    def _write(self, key: str, write, suffix: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            write(tmp)
            data = tmp.read_bytes()
            final = self.root / f"{key}-{hashlib.sha256(data).hexdigest()}{suffix}"
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.root)
        return final

    def remove_leftovers(self, older_than_s: float = LEFTOVER_S) -> None:
        """Delete temporary files of writes that never finished (a process killed while it
        wrote) once they are old enough that no writer can still be at work on them."""
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return
        now = time.time()
        for entry in entries:
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if now - entry.stat().st_mtime > older_than_s:
                        os.unlink(entry.path)

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold the lock of `key` (other processes simulating it wait); without one where the
        store cannot be written."""
        try:
            import filelock

            locks = self.root / ".locks"
            locks.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(str(locks / f"{key[:LOCK_STRIPES]}.lock"))
            lock.acquire()
        except (ImportError, OSError):
            yield
            return
        try:
            yield
        finally:
            lock.release()

    def trace_of(self, inputs: TimingInputs) -> tuple[CommitTrace, dict[str, Any]]:
        """The trace of `inputs`, read from the store or simulated (and stored), and a note
        for the run's provenance (`provenance.trace_store`)."""
        timed, note = self.timed_of(inputs)
        return timed.trace, note

    def timed_of(self, inputs: TimingInputs) -> tuple[Timed, dict[str, Any]]:
        """`trace_of`, with a population's per-client report (its tasks with it): read from
        the store with the trace, or simulated (and stored) with it."""
        note: dict[str, Any] = {"key": inputs.key, "store": str(self.root)}
        key = inputs.key
        with self.locked(key):
            trace, corrupt = self.read(key)
            clients, bad = (None, False)
            if trace is not None and inputs.population:
                clients, bad = self.read_clients(key, trace)
            if corrupt or bad:
                note["corrupt_copy"] = "deleted: it failed its sha256 check"
            if trace is not None and (clients is not None or not inputs.population):
                return Timed(trace, clients), {"trace": READ, **note}
            timed = inputs.simulate_timed()
            try:
                if trace is None:
                    self.write(key, timed.trace, timed.clients)
                else:  # the trace is there without its per-client report
                    self.write_clients(key, timed.clients)
            except OSError as exc:
                note["not_stored"] = f"{type(exc).__name__}: {exc}"
        return timed, {"trace": SIMULATED, **note}

    def ensure(self, inputs: TimingInputs) -> str:
        """Simulate and store the trace of `inputs` (and a population's per-client report)
        unless they are there already (what a timing process does ahead of execution): SIMULATED, or
        READ when they were there."""
        key = inputs.key
        with self.locked(key):
            if self.files(key) and (not inputs.population or self.client_files(key)):
                return READ
            timed = inputs.simulate_timed()
            self.write(key, timed.trace, timed.clients)
        return SIMULATED


def _parts(name: str) -> tuple[str, str] | None:
    """`(key, sha256)` of a stored trace's file name, None for any other name."""
    stem, dot, suffix = name.rpartition(".")
    key, dash, digest = stem.partition("-")
    if suffix != "parquet" or not dash or len(key) != 64 or len(digest) != 64:
        return None
    return key, digest
