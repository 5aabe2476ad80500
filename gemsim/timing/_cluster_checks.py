"""The checks of a `ClusterSpec` across its fields, run by its ``__post_init__`` once each
field has its type: per-worker windows, DyLU's dynamic window, the protocol, a population's
slots, FedCompass, lost pushes, and the size of the trace. Each raises ``ValueError`` naming
the field, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gemsim._checks import check_instance

from ._budget import CommitBudget, StepsBudget
from ._fields import integer, real, set_field
from ._population import Population
from ._server_options import Discipline, PullAt
from ._server_protocols import PROTOCOL_TYPES, Async, Compass, KAsync, KSync, Sync
from ._worker_spec import lives_given

if TYPE_CHECKING:
    from ._cluster import ClusterSpec

MAX_COMMITS = 10**8
"""The most commits a simulated trace may hold."""


def check_windows(spec: ClusterSpec) -> None:
    windows = spec.windows
    if windows is None:
        return
    if isinstance(windows, str | bytes) or not isinstance(windows, Sequence):
        raise ValueError(f"ClusterSpec.windows must be a sequence of ints, got {windows!r}")
    if len(windows) != spec.n_workers:
        raise ValueError(
            f"ClusterSpec.windows: {len(windows)} windows for {spec.n_workers} workers; "
            f"allowed: one per worker"
        )
    checked = tuple(
        integer("ClusterSpec", f"windows[{w}]", v, minimum=1) for w, v in enumerate(windows)
    )
    set_field(spec, "windows", checked)
    if spec.population is not None:
        raise ValueError(
            "ClusterSpec.windows: a population's slots take the rule's window; allowed: None"
        )


def check_dynamic_window(spec: ClusterSpec) -> None:
    h = spec.dynamic_window
    if h is None:
        return
    h = integer("ClusterSpec", "dynamic_window", h, minimum=1)
    set_field(spec, "dynamic_window", h)
    if spec.population is None:
        raise ValueError(
            "ClusterSpec.dynamic_window: for a population's clients; persistent workers "
            "take their DyLU counts as `windows`"
        )
    if h != spec.window:
        raise ValueError(
            f"ClusterSpec.dynamic_window {h} differs from window {spec.window}; allowed: "
            f"the window H (the most local steps a task holds)"
        )


def check_compass(spec: ClusterSpec) -> None:
    """FedCompass's scheduler (`_compass_run.py`, `_compass_population.py`) on what it is
    defined for: workers, or a population's clients, that stay up, a server without
    queueing, its local steps the protocol's own."""
    protocol = spec.protocol
    if not isinstance(protocol, Compass):
        return
    where = "ClusterSpec.protocol Compass"
    population = spec.population
    if population is not None and (population.churn is not None or population.availability):
        raise ValueError(
            f"{where}: a population's clients that stay up (its groups wait for their "
            f"members); got churn {population.churn!r} and availability "
            f"{'given' if population.availability else None}; allowed: neither"
        )
    if spec.dynamic_window is not None:
        raise ValueError(
            f"{where}: dynamic_window {spec.dynamic_window!r}; allowed: None (the "
            f"scheduler gives each task its steps)"
        )
    for i, ws in enumerate(spec.workers):
        # A slowdown only stretches a task: the scheduler's estimates follow it.
        given = [name for name in lives_given(ws) if name != "slowdowns"]
        if given:
            name = given[0]
            raise ValueError(
                f"{where}: workers[{i}].{name} {getattr(ws, name)!r}; its groups are "
                f"modelled for workers that stay up from the start (allowed: none)"
            )
    if spec.service is not None:
        raise ValueError(f"{where}: service {spec.service!r}; allowed: None (no queueing)")
    if isinstance(spec.budget, StepsBudget):
        raise ValueError(
            f"{where}: budget {spec.budget!r}; allowed: commits or seconds (each task's "
            f"steps are the scheduler's)"
        )
    if spec.windows is not None or spec.window != protocol.q_max:
        raise ValueError(
            f"{where}: window {spec.window} and windows {spec.windows!r}; allowed: window "
            f"= q_max ({protocol.q_max}) and no windows of the workers' own"
        )
    if spec.pull_at is not PullAt.AFTER_APPLY or spec.stops is not None:
        raise ValueError(f"{where}: pull_at after_apply and no stops only")
    if spec.drop_push > 0 or spec.shared_link:
        raise ValueError(f"{where}: no lost pushes and no shared link")
    if spec.discipline is not Discipline.FIFO:  # a group's rows go in in arrival order
        raise ValueError(f"{where}: discipline {spec.discipline.value}; allowed: fifo")


def check_drop_push(spec: ClusterSpec) -> None:
    p = real("ClusterSpec", "drop_push", spec.drop_push, positive=False)
    if not p < 1.0:
        raise ValueError(f"ClusterSpec.drop_push must be in [0, 1), got {p!r}")
    set_field(spec, "drop_push", p)
    if p > 0 and (spec.population is not None or not isinstance(spec.protocol, Async | Sync)):
        raise ValueError(
            f"ClusterSpec.drop_push {p!r}: lost pushes are modelled for persistent workers "
            f"under the async and sync protocols; got protocol {spec.protocol!r}"
            + (" and a population" if spec.population is not None else "")
        )


def check_population(spec: ClusterSpec) -> None:
    """A population's slots: no more than its clients, no lives of their own, and only
    what the population model supports (`gemsim.timing._population_run`)."""
    population = spec.population
    check_instance("ClusterSpec.population", population, (Population,), optional=True)
    if population is None:
        return
    k, n = spec.n_workers, population.n_clients
    if k > n:
        raise ValueError(
            f"ClusterSpec.workers: {k} slots (the concurrency K) for a population of {n} "
            f"clients; allowed: K <= Population.n_clients"
        )
    for i, slot in enumerate(spec.workers):
        given = lives_given(slot)
        if given:
            name = given[0]
            raise ValueError(
                f"ClusterSpec.workers[{i}].{name}: a population's slots have no "
                f"{name} of their own, got {getattr(slot, name)!r}; allowed: the "
                f"default (give the clients' churn and availability in the Population)"
            )
    if not isinstance(spec.protocol, Async | Compass):
        raise ValueError(
            f"ClusterSpec.protocol: a population runs under the async protocol (or "
            f"FedCompass's scheduler) only, got "
            f"{spec.protocol!r}"
        )
    if isinstance(spec.budget, StepsBudget):
        raise ValueError(
            f"ClusterSpec.budget: a population's budget is commits or seconds, got "
            f"{spec.budget!r} (steps per worker mean nothing for slots that change client)"
        )
    if spec.shared_link:
        raise ValueError("ClusterSpec.shared_link: not supported with a population; allowed: False")


def check_protocol(spec: ClusterSpec) -> None:
    check_instance("ClusterSpec.protocol", spec.protocol, PROTOCOL_TYPES)
    if not isinstance(spec.synchronous, bool):
        raise ValueError(f"ClusterSpec.synchronous must be a bool, got {spec.synchronous!r}")
    if spec.synchronous:
        if not isinstance(spec.protocol, Async | Sync):
            raise ValueError(
                f"ClusterSpec.synchronous=True means protocol=Sync(), but protocol is "
                f"{spec.protocol!r}; give one of them"
            )
        set_field(spec, "protocol", Sync())
    set_field(spec, "synchronous", isinstance(spec.protocol, Sync))
    if isinstance(spec.protocol, KSync | KAsync) and spec.protocol.k > spec.n_workers:
        raise ValueError(
            f"ClusterSpec.protocol {spec.protocol!r}: k must be <= the number of workers "
            f"({spec.n_workers})"
        )


def check_size(spec: ClusterSpec) -> None:
    """Refuse budgets whose trace could not be held in memory (about 64 bytes a commit,
    more while it is simulated): a typo such as `seconds: 1e9` must fail here, not after
    hours. A seconds budget is judged by its expected number of commits."""
    budget = spec.budget
    if isinstance(budget, CommitBudget):
        commits = float(budget.commits)
    elif isinstance(budget, StepsBudget):
        commits = float(sum(spec.commit_quotas(budget)))
    else:
        rate = sum(
            ws.speed / (spec.window_of(w) * ws.compute.mean()) for w, ws in enumerate(spec.workers)
        )
        service = spec.service.mean() if spec.service is not None else 0.0
        if service > 0:
            rate = min(rate, 1.0 / service)
        commits = budget.seconds * rate
    if commits > MAX_COMMITS:
        raise ValueError(
            f"ClusterSpec.budget {budget!r} means about {commits:.3g} commits; allowed: at "
            f"most {MAX_COMMITS:.0e} (a trace must fit in memory)"
        )
