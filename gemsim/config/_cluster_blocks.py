"""Blocks that describe the cluster: workers, network, parameter server, budget."""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from gemsim.timing import check_compute

from ._block import ADDED, Block
from ._churn_blocks import AvailabilityBlock, ChurnBlock, SlowdownsBlock
from ._dist_blocks import Dist
from ._partition_blocks import GroupData
from ._protocol_blocks import Protocol, named

MAX_WORKERS = 10**6
"""The most workers a scenario may have: the timing model holds about 6.5 kB of state a
worker (three seeded generators, a process), so 10^6 workers take about 6.5 GB before a
single commit."""
WORKER_BYTES = 6.5e3


class WorkerGroup(Block):
    """`count` workers (taken in index order) with their own compute law and/or speed factor,
    optionally their own churn and slowdowns (instead of the workers' ones), the classes
    they alone hold (`data`), and their own local steps per commit (`window`, for a rule
    with a window)."""

    count: PositiveInt
    compute: Dist | None = None
    speed: PositiveFloat = 1.0
    churn: ChurnBlock | None = None
    slowdowns: SlowdownsBlock | None = None
    data: Annotated[GroupData | None, ADDED] = None
    window: Annotated[PositiveInt | None, ADDED] = None


class FailureBlock(Block):
    worker: Annotated[int, Field(ge=0)]
    at: NonNegativeFloat
    restart_after: PositiveFloat | None = None


class FailuresBlock(Block):
    """`workers.failures` as a mapping: scheduled crashes (`crashes`, the list form's items)
    and pushes lost in the network (`drop_push`: each push reaching the server is lost with
    this probability, DiLoCo's robustness study; the worker pulls and computes again)."""

    crashes: list[FailureBlock] = []
    drop_push: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0


FORM_TAGS = ("list-form", "mapping-form")
"""The tags of a field that takes a list or a mapping (left out of error messages' paths)."""


def _failures_form(value: Any) -> str:
    return FORM_TAGS[0] if isinstance(value, list | tuple) else FORM_TAGS[1]


Failures = Annotated[
    Annotated[list[FailureBlock], Tag(FORM_TAGS[0])] | Annotated[FailuresBlock, Tag(FORM_TAGS[1])],
    Discriminator(_failures_form),
]
"""`workers.failures`: a list of crashes, or `{crashes: [...], drop_push: p}`."""


class JoinBlock(Block):
    worker: Annotated[int, Field(ge=0)]
    at: NonNegativeFloat


class WorkersBlock(Block):
    count: PositiveInt
    compute: Dist
    groups: list[WorkerGroup] = []
    failures: Failures = []
    joins: list[JoinBlock] = []
    churn: ChurnBlock | None = None
    availability: AvailabilityBlock | None = None
    slowdowns: SlowdownsBlock | None = None
    # Real backends only: each commit's compute lasts at least the time the timing model
    # draws for it (the worker sleeps the rest), so one machine can follow the scenario.
    emulate_latency: bool = False

    @model_validator(mode="after")
    def _consistent(self):
        if self.count > MAX_WORKERS:
            raise ValueError(
                f"count {self.count} would need about {self.count * WORKER_BYTES / 1e9:.3g} GB "
                f"for the timing model alone (about {WORKER_BYTES / 1e3:g} kB a worker); "
                f"allowed: at most {MAX_WORKERS:,} workers (lower workers.count)"
            )
        grouped = sum(g.count for g in self.groups)
        if grouped > self.count:
            raise ValueError(f"groups hold {grouped} workers but workers.count is {self.count}")
        for kind, items in (("failures", self.crashes), ("joins", self.joins)):
            for item in items:
                if item.worker >= self.count:
                    raise ValueError(
                        f"{kind}: worker {item.worker} does not exist "
                        f"(workers are 0..{self.count - 1})"
                    )
        for i, group in enumerate(self.groups):
            law = group.compute.build() if group.compute else self.compute.build()
            try:
                check_compute(law, group.speed)  # the time of a batch is law / speed
            except ValueError as exc:
                raise ValueError(f"groups[{i}]: {exc}") from None
        joined = [j.worker for j in self.joins]
        if len(set(joined)) != len(joined):
            raise ValueError("joins: a worker may join only once")
        if self.availability is not None:
            outside = [w for w in self.availability.intervals() if w >= self.count]
            if outside:
                raise ValueError(
                    f"availability: {self.availability.file!r} names worker {min(outside)}, "
                    f"which does not exist (workers are 0..{self.count - 1})"
                )
        return self

    @property
    def crashes(self) -> list[FailureBlock]:
        """The scheduled crashes, of either form of `failures`."""
        failures = self.failures
        return failures.crashes if isinstance(failures, FailuresBlock) else failures

    @property
    def drop_push(self) -> float:
        """The probability that a push is lost (0 with the list form of `failures`)."""
        failures = self.failures
        return failures.drop_push if isinstance(failures, FailuresBlock) else 0.0


class NetworkBlock(Block):
    """Pull and push latency; with a bandwidth, model_bytes / bandwidth is added to each."""

    pull: Dist | None = None
    push: Dist | None = None
    bandwidth_bytes_per_s: PositiveFloat | None = None
    # Pushes and pulls queue on the server's link (full duplex) instead of each worker's own.
    shared_link: bool = False

    @model_validator(mode="after")
    def _link_has_a_speed(self):
        if self.shared_link and self.bandwidth_bytes_per_s is None:
            raise ValueError("shared_link: true needs bandwidth_bytes_per_s (the link's speed)")
        return self


class ServerBlock(Block):
    """Service time, discipline and protocol (left out: async, or sync for the sync rule);
    `pull`: the version a committing worker is sent, the one its commit creates
    (`after_apply`) or the one before (`before_apply`, Mishchenko et al. 2022's notebook; async
    only); `ties`: the order of gradients reaching the server at one instant, by the start of
    their computations (`by_start`) or by worker index (`by_worker`, the authors' event loops).
    See `gemsim.timing._server_options`."""

    service: Dist | None = None
    discipline: Literal["fifo", "random"] = "fifo"
    protocol: Protocol | None = None
    pull: Annotated[Literal["after_apply", "before_apply"], ADDED] = "after_apply"
    ties: Annotated[Literal["by_start", "by_worker"], ADDED] = "by_start"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and "protocol" in data:
            data = {**data, "protocol": named(data["protocol"])}
        return data


class BudgetBlock(Block):
    """Exactly one of: total commits, mini-batch epochs per worker, virtual seconds."""

    commits: PositiveInt | None = None
    epochs_per_worker: PositiveFloat | None = None
    seconds: PositiveFloat | None = None

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [
            k for k in ("commits", "epochs_per_worker", "seconds") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of commits, epochs_per_worker, seconds (got {given or 'none'})"
            )
        return self


class EvalBlock(Block):
    """When the central variable is evaluated (every `every` commits, or every `every_seconds`
    of virtual time: after the last commit made by each multiple of it; and at the last) and on
    what: `subset` training examples for the training loss; where workers hold data of their
    own, at most `per_worker` examples of each worker's shard (a fixed sample chosen from the
    seed; all of a smaller shard); with a population, on at most `clients` of its clients'
    data (a fixed sample chosen from the seed: evaluating every client of a large population
    would cost more than the training)."""

    every: PositiveInt = 100
    every_seconds: Annotated[PositiveFloat | None, ADDED] = None
    subset: PositiveInt = 1000
    per_worker: Annotated[PositiveInt, ADDED] = 256
    clients: Annotated[PositiveInt, ADDED] = 100
    # Test accuracies whose first time reached a run records (`time_to_accuracy_<x>`).
    targets: Annotated[tuple[float, ...] | None, ADDED] = None

    @field_validator("targets")
    @classmethod
    def _accuracies(cls, targets):
        bad = [t for t in targets or () if not 0 < t <= 1]
        if targets is not None and (bad or not targets):
            what = f"{bad[0]:g} is not an accuracy" if bad else "no target given"
            raise ValueError(f"{what}; allowed: a list of test accuracies in (0, 1]")
        return targets

    @model_validator(mode="after")
    def _one_period(self):
        if self.every_seconds is not None and "every" in self.model_fields_set:
            raise ValueError(
                f"every ({self.every}) and every_seconds ({self.every_seconds:g}) both given; "
                f"allowed: one of them (commits, or virtual seconds between evaluations)"
            )
        return self


class EngineBlock(Block):
    """How runs execute. `executor`: the sequential loop or the wavefront (vmapped waves of
    gradients), `auto` picking by device. `many_runs`: runs of a sweep that share every shape
    execute together in one compiled program (`auto`: where that is measured to pay, up to a
    size that fits in memory; `off`; or at most N runs at once). It says how runs execute, not
    what they are: it is not part of a run's identity. 0.2's names `batch_runs` and
    `executor: batched` are read as these, with a DeprecationWarning."""

    executor: Literal["auto", "sequential", "wavefront"] = "auto"
    chunk: PositiveInt = 512
    many_runs: Literal["auto", "off"] | PositiveInt = "auto"
    # The most memory a rule's state per client may take (MIFA's and CA2FL's N cached
    # updates), in GiB; None: half of this machine's memory. A run past it is refused.
    client_state_gib: Annotated[PositiveFloat | None, ADDED] = None

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "batch_runs" in data:
            _deprecated("engine.batch_runs", "engine.many_runs")
            if "many_runs" in data:
                raise ValueError("give engine.many_runs, not also its old name batch_runs")
            data["many_runs"] = data.pop("batch_runs")
        if data.get("executor") == "batched":
            _deprecated("engine.executor: batched", "engine.executor: wavefront")
            data["executor"] = "wavefront"
        return data

    @field_validator("many_runs", mode="before")
    @classmethod
    def _yaml_off(cls, value):
        """YAML reads a bare `off` as false."""
        return "off" if value is False else value


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: write {new}", DeprecationWarning, stacklevel=2)
