"""Where runs get their traces: a unit's view of the sweep's trace store (`Traces`: the store
if there is one, else simulated here, the last few kept in memory), and the driver's account
of where each record's trace came from (`TraceNotes`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gemsim._lru import Lru
from gemsim.trace import CommitTrace

from ._trace_store import FROM_STORE, READ, SIMULATED, WITHIN_SWEEP, Timed, TimingInputs, TraceStore


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
