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

A population's trace comes with its tasks (`timing.ClientTasks`: one per task, lost ones
included, which the trace does not hold), from the same run of the timing model: they are
stored beside it as `<key>-<sha256>.tasks.parquet`, checked as a trace is, and against the
trace they are read with (each committed task is its row). A population's trace stored
without them (by an older gemsim, or a write that failed) is simulated again for them.

Nothing here changes a result: a trace read back equals the one simulated, bit for bit (the
parquet columns are the trace's own numpy columns), and so do its tasks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import secrets
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from gemsim._atomic import fsync_dir
from gemsim.trace import CommitTrace

from ._lru import Lru
from ._stored_tasks import TASKS_SUFFIX, read_tasks, task_parts, write_tasks
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
        """Whether the run is a population's (its trace comes with tasks)."""
        return self.spec.population is not None

    def simulate(self) -> CommitTrace:
        from gemsim import timing

        return timing.simulate(self.spec, seed=self.seed, schedule_seed=self.schedule_seed)

    def simulate_timed(self) -> Timed:
        """The trace and, for a population, its per-client report, from one simulation."""
        from gemsim import timing

        run = timing.simulate_run(self.spec, seed=self.seed, schedule_seed=self.schedule_seed)
        return Timed(run.trace, run.clients)

    def timed(self, trace: CommitTrace, tasks: Any) -> Timed:
        """A stored trace and its stored tasks as the simulation gave them (the speeds, not
        stored, drawn again: `timing.client_speeds`)."""
        from gemsim import timing

        if tasks is None:
            return Timed(trace)
        speeds = timing.client_speeds(self.spec.population, self.seed)
        return Timed(trace, timing.client_report(speeds, tasks))


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

    def task_files(self, key: str) -> list[Path]:
        """The stored tasks files of `key` (a population's trace's)."""
        return sorted(
            self.root / f"{k}-{digest}{TASKS_SUFFIX}"
            for k, digest in self._stored(task_parts)
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

    def read_tasks(self, key: str, trace: CommitTrace) -> tuple[Any, bool]:
        """The stored tasks of `key` (`timing.ClientTasks`) if a file passes its sha256 check
        and matches `trace`, and whether a bad copy was found (and deleted)."""
        corrupt = False
        for path in self.task_files(key):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() == task_parts(path.name)[1]:
                try:
                    return read_tasks(data, trace), corrupt
                except (ValueError, OSError, KeyError):
                    pass
            corrupt = True
            with contextlib.suppress(OSError):
                path.unlink()
        return None, corrupt

    def write(self, key: str, trace: CommitTrace, tasks: Any = None) -> Path:
        """Store `trace` under `key`, and a population's `tasks` beside it, atomically;
        raises OSError (nothing is left behind)."""
        final = self._write(key, lambda path: _write_trace(trace, path), ".parquet")
        if tasks is not None:
            self.write_tasks(key, tasks)
        return final

    def write_tasks(self, key: str, tasks: Any) -> Path:
        """Store a population's tasks under `key`, atomically; raises OSError."""
        return self._write(key, lambda path: write_tasks(tasks, path), TASKS_SUFFIX)

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
        """`trace_of`, with a population's per-client report and tasks: read from the store
        with the trace, or simulated (and stored) with it."""
        note: dict[str, Any] = {"key": inputs.key, "store": str(self.root)}
        key = inputs.key
        with self.locked(key):
            trace, corrupt = self.read(key)
            tasks, bad = (None, False)
            if trace is not None and inputs.population:
                tasks, bad = self.read_tasks(key, trace)
            if corrupt or bad:
                note["corrupt_copy"] = "deleted: it failed its sha256 check"
            if trace is not None and (tasks is not None or not inputs.population):
                return inputs.timed(trace, tasks), {"trace": READ, **note}
            timed = inputs.simulate_timed()
            try:
                if trace is None:
                    self.write(key, timed.trace, timed.tasks)
                else:  # the trace is there without its tasks
                    self.write_tasks(key, timed.tasks)
            except OSError as exc:
                note["not_stored"] = f"{type(exc).__name__}: {exc}"
        return timed, {"trace": SIMULATED, **note}

    def ensure(self, inputs: TimingInputs) -> str:
        """Simulate and store the trace of `inputs` (and a population's tasks) unless they
        are there already (what a timing process does ahead of execution): SIMULATED, or
        READ when they were there."""
        key = inputs.key
        with self.locked(key):
            if self.files(key) and (not inputs.population or self.task_files(key)):
                return READ
            timed = inputs.simulate_timed()
            self.write(key, timed.trace, timed.tasks)
        return SIMULATED


def _parts(name: str) -> tuple[str, str] | None:
    """`(key, sha256)` of a stored trace's file name, None for any other name."""
    stem, dot, suffix = name.rpartition(".")
    key, dash, digest = stem.partition("-")
    if suffix != "parquet" or not dash or len(key) != 64 or len(digest) != 64:
        return None
    return key, digest


class Traces:
    """Where the runs of one unit of work get their traces: the store if there is one (else
    simulated here), the last few kept in memory for the unit's other runs.

    Args:
        store: the sweep's store, or None (a run of `gemsim.run`, a Ray node that does not
            see the results folder).
        timing: the runs' timing inputs by identity, as the driver computed them (a run not
            in it has its inputs computed here).
        kept: the traces kept in memory, shared with the units this process executed before
            in the sweep (default: the unit's own, four at most).
    """

    def __init__(
        self,
        store: TraceStore | None = None,
        timing: Mapping[str, TimingInputs] | None = None,
        kept: Lru | None = None,
    ):
        self.store, self.timing = store, dict(timing or {})
        self._kept = Lru(4) if kept is None else kept

    def trace_for(self, who) -> tuple[CommitTrace, dict[str, Any]]:
        """The trace of a run (a `RunIdentity`) and its provenance note (a trace kept from
        another run of the unit is noted as read: `TraceNotes` settles it)."""
        timed, note = self.timed_for(who)
        return timed.trace, note

    def timed_for(self, who) -> tuple[Timed, dict[str, Any]]:
        """`trace_for`, with a population's per-client report and tasks (`Timed`)."""
        inputs = self.timing.get(who.identity) or TimingInputs.of(who.expanded.scenario)
        fetched = []
        timed, note = self._kept.get(inputs.key, lambda: fetched.append(1) or self._fetch(inputs))
        if not fetched:
            note = {"trace": READ, "key": note["key"], "store": note["store"]}
        return timed, note

    def _fetch(self, inputs: TimingInputs) -> tuple[Timed, dict[str, Any]]:
        if self.store is None:
            note = {"trace": SIMULATED, "key": inputs.key, "store": None}
            return inputs.simulate_timed(), note
        return self.store.timed_of(inputs)


class TraceNotes:
    """The driver's account of the traces of a sweep, settling each record's note as it
    arrives: `simulated` (by the process that executed the run, or ahead of it by a timing
    process), `reused from the store` (there before the sweep started) or `reused within the
    sweep` (another run of the sweep had it first).

    Args:
        stored: the keys the store held when the sweep started.
        ahead: whether timing processes simulate traces ahead of this process's execution
            (then the first run to read a trace the store did not hold was its first user).
    """

    def __init__(self, stored: set[str], *, ahead: bool = False):
        self.stored, self.ahead = set(stored), ahead
        self._seen: set[str] = set()  # keys of the records settled so far
        self._made: set[str] = set()  # keys simulated in this sweep

    def settle(self, record):
        """The record (a `RunResult`) with its `provenance.trace_store` settled."""
        prov = record.manifest.provenance
        note = prov.get("trace_store")
        if not note:
            return record
        key, first = note["key"], note["key"] not in self._seen
        self._seen.add(key)
        if note.get("trace") != READ:
            self._made.add(key)
            return record
        if key in self._made or not first and key not in self.stored:
            status = WITHIN_SWEEP
        elif key in self.stored:
            status = FROM_STORE
        elif self.ahead:  # its first user: the trace was simulated ahead of it
            status = SIMULATED
            note = {**note, "simulated_by": "a timing process, ahead of execution"}
            self._made.add(key)
        else:
            status = WITHIN_SWEEP
        manifest = dataclasses.replace(
            record.manifest, provenance={**prov, "trace_store": {**note, "trace": status}}
        )
        return dataclasses.replace(record, manifest=manifest)
