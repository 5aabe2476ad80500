"""Runs of a sweep executed together in one compiled program (`engine.many_runs`,
`engine.ManyRunsExecutor`): one record per run, each as if it had run alone. Which runs, and
how many at once, is `_many_runs_plan.py`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gemsim import config
from gemsim._lru import Lru
from gemsim.results import RunResult
from gemsim.types import Progress

from ..record._identity import RunIdentity
from ..record._provenance import utc_now
from ..record._record import Produced, failed_record, record_of
from ..sweep._traces import Traces
from ._one_run import execute_run
from ._simulated import inputs_of


@dataclass(frozen=True)
class _Prepared:
    who: RunIdentity
    trace: Any
    run: Any  # engine.RunInputs
    executor_key: tuple
    trace_note: Any = None
    clients: Any = None  # a population's per-client report, with the trace
    rows: int | None = None  # the rows kept for the clients its trace names (`named_rows`)


# Compiled many-runs executors, one per signature and lifted fields (per process).
MANY = Lru(4)


def execute_many(
    unit: Sequence[RunIdentity],
    progress: Progress | None = None,
    *,
    pad_to: int = 0,
    traces: Traces | None = None,
) -> list[RunResult]:
    """The runs of a unit, executed together at `pad_to` runs (copies of the first fill the
    rest; their results are dropped); one record per run, in the unit's order. Traces come
    from `traces` (the sweep's trace store), else are simulated here. A run whose
    preparation fails (its data, its trace) is a `failed` record; the others go on."""
    from jax import errors

    started, started_at = time.perf_counter(), utc_now()
    floats = [config.many_runs_signature(w.expanded.scenario)[1] for w in unit]
    lifted = tuple(sorted(p for p in floats[0] if len({f[p] for f in floats}) > 1))
    traces = traces or Traces()
    prepared: list[_Prepared | RunResult] = []
    for w, f in zip(unit, floats, strict=True):
        try:
            prepared.append(_prepare(w, {p: f[p] for p in lifted}, lifted, traces))
        except Exception as exc:  # one run's bad data must not end the others
            wall = time.perf_counter() - started
            prepared.append(failed_record(w, exc, wall_seconds=wall, started_at=started_at))
    ready = [p for p in prepared if isinstance(p, _Prepared)]
    size = max(pad_to, len(ready))
    try:
        outs = _execute(ready + ready[:1] * (size - len(ready)), lifted, progress)
    except (
        errors.ConcretizationTypeError,
        errors.TracerBoolConversionError,
        errors.TracerIntegerConversionError,
        errors.TracerArrayConversionError,
    ) as exc:
        # The rule cannot take these hyperparameters traced (its factory branches on one):
        # only the runs whose values are equal execute together.
        return _split_by_values(unit, lifted, floats, progress, exc, pad_to, traces)
    except Exception as exc:  # a bug or resource error of one run must not fail the others
        note = f"the runs together raised {type(exc).__name__}: they executed one by one"
        return [
            execute_run(w, progress=progress, traces=traces).placed({"many_runs_note": note})
            for w in unit
        ]
    wall = time.perf_counter() - started
    records, done = [], iter(outs)
    for i, p in enumerate(prepared):
        if not isinstance(p, _Prepared):
            records.append(p)
            continue
        produced = Produced(
            p.trace,
            next(done),
            started,
            started_at,
            wall_seconds=wall / len(unit),
            executor="ManyRunsExecutor",
            trace_note=p.trace_note,
            clients=p.clients,
        )
        record = record_of(p.who, produced)
        together = {"runs": size, "index": i, "lifted": list(lifted), "wall_seconds": wall}
        records.append(record.placed({"many_runs": together}))
    return records


def _prepare(who: RunIdentity, hyper: Mapping[str, float], lifted: tuple[str, ...], traces):
    from gemsim import engine

    _, problem, trace, plan, clients, note, rows = inputs_of(who, None, traces)
    run = engine.RunInputs(plan, problem, problem.init_params, dict(hyper))
    signature, floats = config.many_runs_signature(who.expanded.scenario)
    constants = tuple((p, v) for p, v in sorted(floats.items()) if p not in lifted)
    together = (signature, lifted, constants, trace.n_workers)
    return _Prepared(who, trace, run, together, note, clients, rows)


def _execute(ready: list[_Prepared], lifted: tuple[str, ...], progress):
    from gemsim import engine

    if not ready:
        return []
    first = ready[0]
    scenario = first.who.expanded.scenario
    runs, rows = _shared_rows(ready)

    def make():
        rule_of = config.lifted_rule(scenario, lifted, rows)
        return engine.ManyRunsExecutor(
            rule_of,
            runs[0],
            n_workers=first.trace.n_workers,
            chunk=scenario.engine.chunk,
        )

    executor = MANY.get((*first.executor_key, rows), make)
    return executor.execute(runs, progress=progress)


def _shared_rows(ready: list[_Prepared]):
    """The runs' inputs and the per-client rows they keep together: the most any of them
    needs, or every client's (the plans then without their row columns) where one needs all."""
    if any(p.rows is None for p in ready):
        runs = [replace(p.run, plan=replace(p.run.plan, client_row=None)) for p in ready]
        return runs, None
    return [p.run for p in ready], max(p.rows for p in ready)


def _split_by_values(unit, lifted, floats, progress, exc, pad_to, traces) -> list[RunResult]:
    """The unit again as smaller units of runs with equal lifted values (no lifting)."""
    groups: dict[tuple, list[int]] = {}
    for i, f in enumerate(floats):
        groups.setdefault(tuple(f[p] for p in lifted), []).append(i)
    records: list[Any] = [None] * len(unit)
    reason = f"{sorted(lifted)} not traced ({type(exc).__name__}): together by equal values"
    for members in groups.values():
        sub = [unit[i] for i in members]
        done = execute_many(sub, progress, pad_to=pad_to, traces=traces)
        for i, record in zip(members, done, strict=True):
            records[i] = record.placed({"many_runs_note": reason})
    return records
