"""The typed description of a simulated cluster: workers, network, server and budget.

These frozen dataclasses are what the timing model receives; the scenario loader
builds them from YAML. Every value is validated in ``__post_init__`` and a bad one
raises ``ValueError`` naming the field, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

from gemsim._checks import (
    check_enum,
    check_instance,
    check_int,
    check_nonnegative,
    check_positive,
)

from ._churn import Churn, Slowdowns, check_intervals
from ._distributions import DISTRIBUTION_TYPES, Distribution
from ._population import Population
from ._server_options import STOP_TYPES, PullAt, Stops, Ties, check_options
from ._server_protocols import (
    PROTOCOL_TYPES,
    Async,
    Compass,
    KAsync,
    KSync,
    ServerProtocol,
    Sync,
)

MAX_COMMITS = 10**8
"""The most commits a simulated trace may hold."""

TINY_SECONDS = 1e-300
"""A compute law must draw more than this with probability at least one half."""


class Discipline(StrEnum):
    """Order in which the parameter server takes waiting commits.

    FIFO is the default: the GEM authors found that unfair service starves workers.
    RANDOM picks uniformly among the waiting commits with the server's own stream.
    """

    FIFO = "fifo"
    RANDOM = "random"


def _real(owner: str, name: str, value: object, *, positive: bool) -> float:
    check = check_positive if positive else check_nonnegative
    return check(f"{owner}.{name}", value)


def _integer(owner: str, name: str, value: object, *, minimum: int) -> int:
    return check_int(f"{owner}.{name}", value, minimum)


def _distribution(owner: str, name: str, value: object, *, optional: bool) -> None:
    check_instance(f"{owner}.{name}", value, DISTRIBUTION_TYPES, optional=optional)


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class CommitBudget:
    """Stop after exactly ``commits`` commits (fewer only if every worker is gone)."""

    commits: int

    def __post_init__(self) -> None:
        _set(self, "commits", _integer("CommitBudget", "commits", self.commits, minimum=1))


@dataclass(frozen=True)
class StepsBudget:
    """Each worker stops after committing ``steps_per_worker`` mini-batches.

    A worker makes ``ceil(steps_per_worker / window)`` commits and every commit holds a
    full ``window`` of mini-batches, so a worker processes ``window`` batches too many
    at most; this keeps every commit the same shape for update rules with a static window.
    """

    steps_per_worker: int

    def __post_init__(self) -> None:
        value = _integer("StepsBudget", "steps_per_worker", self.steps_per_worker, minimum=1)
        _set(self, "steps_per_worker", value)

    def commits_per_worker(self, window: int) -> int:
        """Commits each worker makes: ``ceil(steps_per_worker / window)``."""
        return -(-self.steps_per_worker // window)


@dataclass(frozen=True)
class SecondsBudget:
    """Keep every commit at virtual time ``<= seconds`` and none after."""

    seconds: float

    def __post_init__(self) -> None:
        _set(self, "seconds", _real("SecondsBudget", "seconds", self.seconds, positive=True))


Budget: TypeAlias = CommitBudget | StepsBudget | SecondsBudget
"""When a simulation stops."""


@dataclass(frozen=True)
class Failure:
    """A crash at virtual time ``at``; the worker restarts ``restart_after`` s later.

    ``restart_after=None`` means the worker is gone for good.
    """

    at: float
    restart_after: float | None = None

    def __post_init__(self) -> None:
        _set(self, "at", _real("Failure", "at", self.at, positive=False))
        if self.restart_after is not None:
            value = _real("Failure", "restart_after", self.restart_after, positive=False)
            _set(self, "restart_after", value)


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: its compute law per mini-batch, speed factor, join time, crashes, churn,
    availability trace and slowdowns (see `gemsim.timing._churn`).

    Attributes:
        compute: seconds per mini-batch gradient at speed 1 (mean must be > 0).
        speed: the compute time of each batch is divided by ``speed``.
        join_at: virtual time the worker starts; ``0`` starts on version 0 with no
            pull latency, a later join pulls the then-current version first.
        failures: crashes in increasing time, each strictly after ``join_at`` and
            after the previous restart; nothing may follow a permanent crash.
        churn: alternating up and down periods, or None.
        availability: down intervals ``(down_at, up_at)`` (``up_at`` may be ``inf``), sorted
            by ``down_at``; they may overlap each other and the other sources of downtime.
        slowdowns: transient slowdown episodes, or None.
    """

    compute: Distribution
    speed: float = 1.0
    join_at: float = 0.0
    failures: tuple[Failure, ...] = ()
    churn: Churn | None = None
    availability: tuple[tuple[float, float], ...] = ()
    slowdowns: Slowdowns | None = None

    def __post_init__(self) -> None:
        _distribution("WorkerSpec", "compute", self.compute, optional=False)
        if not self.compute.mean() > 0:
            raise ValueError(
                f"WorkerSpec.compute must have a mean > 0 (a zero compute time never lets "
                f"virtual time advance), got {self.compute!r}"
            )
        if self.compute.survival(TINY_SECONDS) < 0.5:
            # A law with a positive mean may still draw zero (in floating point) almost
            # always, e.g. a gamma of tiny shape: time would not advance either.
            raise ValueError(
                f"WorkerSpec.compute draws less than {TINY_SECONDS:g} s with probability "
                f"{1 - self.compute.survival(TINY_SECONDS):.3g}; allowed: laws whose median "
                f"compute time is at least {TINY_SECONDS:g} s, got {self.compute!r}"
            )
        _set(self, "speed", _real("WorkerSpec", "speed", self.speed, positive=True))
        _set(self, "join_at", _real("WorkerSpec", "join_at", self.join_at, positive=False))
        _set(self, "failures", self._checked_failures())
        check_instance("WorkerSpec.churn", self.churn, (Churn,), optional=True)
        check_instance("WorkerSpec.slowdowns", self.slowdowns, (Slowdowns,), optional=True)
        _set(self, "availability", check_intervals("WorkerSpec.availability", self.availability))

    @property
    def has_downtime(self) -> bool:
        """Whether the worker can ever be down after it first comes up."""
        return bool(self.failures or self.churn or self.availability)

    def _checked_failures(self) -> tuple[Failure, ...]:
        failures = self.failures
        if isinstance(failures, str | bytes) or not isinstance(failures, Sequence):
            raise ValueError(f"WorkerSpec.failures must be a sequence of Failure, got {failures!r}")
        alive_from = self.join_at
        for i, failure in enumerate(failures):
            if not isinstance(failure, Failure):
                raise ValueError(f"WorkerSpec.failures[{i}] must be a Failure, got {failure!r}")
            if alive_from is None:
                raise ValueError(
                    f"WorkerSpec.failures[{i}] ({failure!r}) follows a crash without restart"
                )
            if failure.at <= alive_from:
                raise ValueError(
                    f"WorkerSpec.failures[{i}].at must be > {alive_from!r} (after the join or "
                    f"the previous restart), got {failure.at!r}"
                )
            restart = failure.restart_after
            alive_from = None if restart is None else failure.at + restart
        return tuple(failures)


def _lives_given(ws: WorkerSpec) -> list[str]:
    """The fields by which a worker has a life of its own beside the run's (down times,
    a late join, slowdowns), in the order the checks name them."""
    given = (
        ("churn", ws.churn is not None),
        ("failures", bool(ws.failures)),
        ("join_at", ws.join_at > 0),
        ("availability", bool(ws.availability)),
        ("slowdowns", ws.slowdowns is not None),
    )
    return [name for name, present in given if present]


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """A whole simulated cluster. Keyword-only; ``workers`` and ``budget`` are required.

    Attributes:
        workers: one `WorkerSpec` per worker, index = worker id.
        pull: latency of a pull (server -> worker), or None for zero.
        push: latency of a push (worker -> server), or None for zero.
        bandwidth_bytes_per_s: when given, ``model_bytes / bandwidth`` is added to every
            pull and push; when None the transfer itself is free.
        model_bytes: size of the parameters (and of a gradient) in bytes.
        service: time the server takes to apply one commit, or None for zero.
        discipline: order of service among waiting commits.
        window: mini-batches per commit (local steps of a rule with a window).
        windows: None, or one window per worker (its own local steps per commit: a group's
            window, or DyLU's from its speed); ``window`` is then unused. Persistent workers
            only.
        dynamic_window: None, or DyLU's H for a population's clients (`window: {dynamic:
            H}`): each task of client c holds ``max(1, floor(s_c / max s * H))`` mini-batches,
            s the clients' speed factors (`client_windows`), and its compute time is the sum
            of that many draws of its slot's per-batch law, divided by s_c. ``window`` is H.
        protocol: the server protocol (`gemsim.timing.Async` by default).
        synchronous: shorthand for ``protocol=Sync()``; after construction it says whether
            the protocol is `Sync`.
        shared_link: pushes and pulls queue on the server's network link (full duplex: pulls
            on its send side, pushes on its receive side, ``model_bytes / bandwidth`` each)
            instead of every worker having a link of its own; needs a bandwidth.
        budget: when to stop.
        population: None: the workers are persistent (each is one client for the whole
            run). A `Population`: the workers are the K slots that serve its clients one
            task at a time (K <= N); the slots have no downtime or slowdowns of their own,
            the protocol is `Async`, the budget commits or seconds, and there is no shared
            link.
        pull_at: the version a committing worker is sent: the one its commit creates
            (`PullAt.AFTER_APPLY`) or the one before (`BEFORE_APPLY`; async protocol only).
        ties: the order of gradients reaching the server at the same instant: by the start
            of their computations (`Ties.BY_START`) or by worker index (`BY_WORKER`).
        stops: computations in flight the server stops and restarts (`DelayStops`,
            `BatchRestarts`; async protocol only), or None. See `gemsim.timing._server_options`.
        drop_push: the probability that a push is lost in the network (DiLoCo's robustness
            study), in [0, 1): the server never sees it, and the worker pulls the current
            version and computes again. Persistent workers under the async protocol only.
    """

    workers: tuple[WorkerSpec, ...]
    budget: Budget
    pull: Distribution | None = None
    push: Distribution | None = None
    bandwidth_bytes_per_s: float | None = None
    model_bytes: int = 0
    service: Distribution | None = None
    discipline: Discipline = Discipline.FIFO
    window: int = 1
    windows: tuple[int, ...] | None = None
    dynamic_window: int | None = None
    protocol: ServerProtocol = Async()
    synchronous: bool = False
    shared_link: bool = False
    population: Population | None = None
    pull_at: PullAt = PullAt.AFTER_APPLY
    ties: Ties = Ties.BY_START
    stops: Stops | None = None
    drop_push: float = 0.0

    def __post_init__(self) -> None:
        workers = self.workers
        if isinstance(workers, str | bytes) or not isinstance(workers, Sequence) or not workers:
            raise ValueError(
                f"ClusterSpec.workers must be a non-empty sequence of WorkerSpec, got {workers!r}"
            )
        for i, worker in enumerate(workers):
            if not isinstance(worker, WorkerSpec):
                raise ValueError(f"ClusterSpec.workers[{i}] must be a WorkerSpec, got {worker!r}")
        _set(self, "workers", tuple(workers))
        if not isinstance(self.budget, CommitBudget | StepsBudget | SecondsBudget):
            raise ValueError(
                f"ClusterSpec.budget must be a CommitBudget, StepsBudget or SecondsBudget, "
                f"got {self.budget!r}"
            )
        for name in ("pull", "push", "service"):
            _distribution("ClusterSpec", name, getattr(self, name), optional=True)
        if self.bandwidth_bytes_per_s is not None:
            bandwidth = _real(
                "ClusterSpec", "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, positive=True
            )
            _set(self, "bandwidth_bytes_per_s", bandwidth)
        _set(
            self, "model_bytes", _integer("ClusterSpec", "model_bytes", self.model_bytes, minimum=0)
        )
        try:
            _set(self, "discipline", Discipline(self.discipline))
        except ValueError:
            allowed = ", ".join(d.value for d in Discipline)
            raise ValueError(
                f"ClusterSpec.discipline must be one of {allowed}, got {self.discipline!r}"
            ) from None
        _set(self, "window", _integer("ClusterSpec", "window", self.window, minimum=1))
        self._check_windows()
        self._check_protocol()
        if not isinstance(self.shared_link, bool):
            raise ValueError(f"ClusterSpec.shared_link must be a bool, got {self.shared_link!r}")
        if self.shared_link and self.bandwidth_bytes_per_s is None:
            raise ValueError(
                "ClusterSpec.shared_link needs bandwidth_bytes_per_s (the link's speed), got None"
            )
        self._check_population()
        self._check_dynamic_window()
        _set(self, "pull_at", check_enum("ClusterSpec.pull_at", self.pull_at, PullAt))
        _set(self, "ties", check_enum("ClusterSpec.ties", self.ties, Ties))
        check_instance("ClusterSpec.stops", self.stops, STOP_TYPES, optional=True)
        self._check_drop_push()
        self._check_compass()
        check_options(self)
        self._check_size()

    def _check_windows(self) -> None:
        windows = self.windows
        if windows is None:
            return
        if isinstance(windows, str | bytes) or not isinstance(windows, Sequence):
            raise ValueError(f"ClusterSpec.windows must be a sequence of ints, got {windows!r}")
        if len(windows) != self.n_workers:
            raise ValueError(
                f"ClusterSpec.windows: {len(windows)} windows for {self.n_workers} workers; "
                f"allowed: one per worker"
            )
        checked = tuple(
            _integer("ClusterSpec", f"windows[{w}]", v, minimum=1) for w, v in enumerate(windows)
        )
        _set(self, "windows", checked)
        if self.population is not None:
            raise ValueError(
                "ClusterSpec.windows: a population's slots take the rule's window; allowed: None"
            )

    def _check_dynamic_window(self) -> None:
        h = self.dynamic_window
        if h is None:
            return
        h = _integer("ClusterSpec", "dynamic_window", h, minimum=1)
        _set(self, "dynamic_window", h)
        if self.population is None:
            raise ValueError(
                "ClusterSpec.dynamic_window: for a population's clients; persistent workers "
                "take their DyLU counts as `windows`"
            )
        if h != self.window:
            raise ValueError(
                f"ClusterSpec.dynamic_window {h} differs from window {self.window}; allowed: "
                f"the window H (the most local steps a task holds)"
            )

    @property
    def batch_draws(self) -> bool:
        """Whether each compute draw is one mini-batch (a task summing as many as it holds:
        a population's own local steps), else one whole commit of ``window_of`` batches."""
        return self.dynamic_window is not None or isinstance(self.protocol, Compass)

    def _check_compass(self) -> None:
        """FedCompass's scheduler (`_compass_run.py`) on what it is defined for: persistent
        workers that stay up (cross-silo clients), a server without queueing, its local
        steps the protocol's own."""
        protocol = self.protocol
        if not isinstance(protocol, Compass):
            return
        where = "ClusterSpec.protocol Compass"
        if self.population is not None:
            raise ValueError(f"{where}: for persistent workers (its clients); got a population")
        for i, ws in enumerate(self.workers):
            # A slowdown only stretches a task: the scheduler's estimates follow it.
            given = [name for name in _lives_given(ws) if name != "slowdowns"]
            if given:
                name = given[0]
                raise ValueError(
                    f"{where}: workers[{i}].{name} {getattr(ws, name)!r}; its groups are "
                    f"modelled for workers that stay up from the start (allowed: none)"
                )
        if self.service is not None:
            raise ValueError(f"{where}: service {self.service!r}; allowed: None (no queueing)")
        if isinstance(self.budget, StepsBudget):
            raise ValueError(
                f"{where}: budget {self.budget!r}; allowed: commits or seconds (each task's "
                f"steps are the scheduler's)"
            )
        if self.windows is not None or self.window != protocol.q_max:
            raise ValueError(
                f"{where}: window {self.window} and windows {self.windows!r}; allowed: window "
                f"= q_max ({protocol.q_max}) and no windows of the workers' own"
            )
        if self.pull_at is not PullAt.AFTER_APPLY or self.stops is not None:
            raise ValueError(f"{where}: pull_at after_apply and no stops only")
        if self.drop_push > 0 or self.shared_link:
            raise ValueError(f"{where}: no lost pushes and no shared link")
        if self.discipline is not Discipline.FIFO:  # a group's rows go in in arrival order
            raise ValueError(f"{where}: discipline {self.discipline.value}; allowed: fifo")

    def _check_drop_push(self) -> None:
        p = _real("ClusterSpec", "drop_push", self.drop_push, positive=False)
        if not p < 1.0:
            raise ValueError(f"ClusterSpec.drop_push must be in [0, 1), got {p!r}")
        _set(self, "drop_push", p)
        if p > 0 and (self.population is not None or not isinstance(self.protocol, Async | Sync)):
            raise ValueError(
                f"ClusterSpec.drop_push {p!r}: lost pushes are modelled for persistent workers "
                f"under the async and sync protocols; got protocol {self.protocol!r}"
                + (" and a population" if self.population is not None else "")
            )

    def window_of(self, worker: int) -> int:
        """Mini-batches a commit of ``worker`` holds."""
        return self.window if self.windows is None else self.windows[worker]

    def commit_quotas(self, budget: StepsBudget) -> list[int]:
        """Commits each worker makes under a steps budget: ``ceil(steps / its window)``."""
        return [budget.commits_per_worker(self.window_of(w)) for w in range(self.n_workers)]

    def _check_population(self) -> None:
        """A population's slots: no more than its clients, no lives of their own, and only
        what the population model supports (`gemsim.timing._population_run`)."""
        population = self.population
        check_instance("ClusterSpec.population", population, (Population,), optional=True)
        if population is None:
            return
        k, n = self.n_workers, population.n_clients
        if k > n:
            raise ValueError(
                f"ClusterSpec.workers: {k} slots (the concurrency K) for a population of {n} "
                f"clients; allowed: K <= Population.n_clients"
            )
        for i, slot in enumerate(self.workers):
            given = _lives_given(slot)
            if given:
                name = given[0]
                raise ValueError(
                    f"ClusterSpec.workers[{i}].{name}: a population's slots have no "
                    f"{name} of their own, got {getattr(slot, name)!r}; allowed: the "
                    f"default (give the clients' churn and availability in the Population)"
                )
        if not isinstance(self.protocol, Async):
            raise ValueError(
                f"ClusterSpec.protocol: a population runs under the async protocol only, got "
                f"{self.protocol!r}"
            )
        if isinstance(self.budget, StepsBudget):
            raise ValueError(
                f"ClusterSpec.budget: a population's budget is commits or seconds, got "
                f"{self.budget!r} (steps per worker mean nothing for slots that change client)"
            )
        if self.shared_link:
            raise ValueError(
                "ClusterSpec.shared_link: not supported with a population; allowed: False"
            )

    def _check_protocol(self) -> None:
        check_instance("ClusterSpec.protocol", self.protocol, PROTOCOL_TYPES)
        if not isinstance(self.synchronous, bool):
            raise ValueError(f"ClusterSpec.synchronous must be a bool, got {self.synchronous!r}")
        if self.synchronous:
            if not isinstance(self.protocol, Async | Sync):
                raise ValueError(
                    f"ClusterSpec.synchronous=True means protocol=Sync(), but protocol is "
                    f"{self.protocol!r}; give one of them"
                )
            _set(self, "protocol", Sync())
        _set(self, "synchronous", isinstance(self.protocol, Sync))
        if isinstance(self.protocol, KSync | KAsync) and self.protocol.k > self.n_workers:
            raise ValueError(
                f"ClusterSpec.protocol {self.protocol!r}: k must be <= the number of workers "
                f"({self.n_workers})"
            )

    def _check_size(self) -> None:
        """Refuse budgets whose trace could not be held in memory (about 64 bytes a commit,
        more while it is simulated): a typo such as `seconds: 1e9` must fail here, not after
        hours. A seconds budget is judged by its expected number of commits."""
        budget = self.budget
        if isinstance(budget, CommitBudget):
            commits = float(budget.commits)
        elif isinstance(budget, StepsBudget):
            commits = float(sum(self.commit_quotas(budget)))
        else:
            rate = sum(
                ws.speed / (self.window_of(w) * ws.compute.mean())
                for w, ws in enumerate(self.workers)
            )
            service = self.service.mean() if self.service is not None else 0.0
            if service > 0:
                rate = min(rate, 1.0 / service)
            commits = budget.seconds * rate
        if commits > MAX_COMMITS:
            raise ValueError(
                f"ClusterSpec.budget {budget!r} means about {commits:.3g} commits; allowed: at "
                f"most {MAX_COMMITS:.0e} (a trace must fit in memory)"
            )

    @property
    def n_workers(self) -> int:
        """Number of workers (including those that join late)."""
        return len(self.workers)

    @property
    def transfer_seconds(self) -> float:
        """Seconds to move the model once: ``model_bytes / bandwidth`` (0 without bandwidth)."""
        if self.bandwidth_bytes_per_s is None:
            return 0.0
        return self.model_bytes / self.bandwidth_bytes_per_s
