"""The typed description of a simulated cluster: workers, network, server and budget.

These frozen dataclasses are what the timing model receives; the scenario loader
builds them from YAML. Every value is validated in ``__post_init__`` and a bad one
raises ``ValueError`` naming the field, the value and what is allowed: each field here,
the checks across fields (windows, protocol, population, size) in `_cluster_checks.py`, a
worker's own in `_worker_spec.py`, a budget's in `_budget.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gemsim._checks import check_enum, check_instance

from ._budget import Budget, CommitBudget, SecondsBudget, StepsBudget
from ._cluster_checks import (
    check_compass,
    check_drop_push,
    check_dynamic_window,
    check_population,
    check_protocol,
    check_size,
    check_windows,
)
from ._distributions import Distribution
from ._fields import distribution, integer, real, set_field
from ._population import Population
from ._server_options import STOP_TYPES, Discipline, PullAt, Stops, Ties, check_options
from ._server_protocols import Async, Compass, ServerProtocol
from ._worker_spec import WorkerSpec


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
        set_field(self, "workers", tuple(workers))
        if not isinstance(self.budget, CommitBudget | StepsBudget | SecondsBudget):
            raise ValueError(
                f"ClusterSpec.budget must be a CommitBudget, StepsBudget or SecondsBudget, "
                f"got {self.budget!r}"
            )
        for name in ("pull", "push", "service"):
            distribution("ClusterSpec", name, getattr(self, name), optional=True)
        if self.bandwidth_bytes_per_s is not None:
            bandwidth = real(
                "ClusterSpec", "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, positive=True
            )
            set_field(self, "bandwidth_bytes_per_s", bandwidth)
        set_field(
            self, "model_bytes", integer("ClusterSpec", "model_bytes", self.model_bytes, minimum=0)
        )
        try:
            set_field(self, "discipline", Discipline(self.discipline))
        except ValueError:
            allowed = ", ".join(d.value for d in Discipline)
            raise ValueError(
                f"ClusterSpec.discipline must be one of {allowed}, got {self.discipline!r}"
            ) from None
        set_field(self, "window", integer("ClusterSpec", "window", self.window, minimum=1))
        check_windows(self)
        check_protocol(self)
        if not isinstance(self.shared_link, bool):
            raise ValueError(f"ClusterSpec.shared_link must be a bool, got {self.shared_link!r}")
        if self.shared_link and self.bandwidth_bytes_per_s is None:
            raise ValueError(
                "ClusterSpec.shared_link needs bandwidth_bytes_per_s (the link's speed), got None"
            )
        check_population(self)
        check_dynamic_window(self)
        set_field(self, "pull_at", check_enum("ClusterSpec.pull_at", self.pull_at, PullAt))
        set_field(self, "ties", check_enum("ClusterSpec.ties", self.ties, Ties))
        check_instance("ClusterSpec.stops", self.stops, STOP_TYPES, optional=True)
        check_drop_push(self)
        check_compass(self)
        check_options(self)
        check_size(self)

    @property
    def batch_draws(self) -> bool:
        """Whether each compute draw is one mini-batch (a task summing as many as it holds:
        a population's own local steps), else one whole commit of ``window_of`` batches."""
        return self.dynamic_window is not None or isinstance(self.protocol, Compass)

    def window_of(self, worker: int) -> int:
        """Mini-batches a commit of ``worker`` holds."""
        return self.window if self.windows is None else self.windows[worker]

    def commit_quotas(self, budget: StepsBudget) -> list[int]:
        """Commits each worker makes under a steps budget: ``ceil(steps / its window)``."""
        return [budget.commits_per_worker(self.window_of(w)) for w in range(self.n_workers)]

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
