"""Options of the parameter server beside its protocol: the order it serves waiting commits
in, which version a committing worker is sent, the order of simultaneous arrivals, and stops
of computations in flight.

Published asynchronous methods and their authors' code differ in details that change which
gradients are applied and in what order; each option names one of those details, and its
default is the behaviour gemsim always had.

- `PullAt`: ``AFTER_APPLY`` (the default) sends the committing worker the version its commit
  creates, atomically with the commit; ``BEFORE_APPLY`` sends it the version the server
  held just before applying its gradient, as the server loop of Mishchenko, Bach, Even &
  Woodworth 2022 ("Asynchronous SGD Beats Minibatch SGD Under Arbitrary Delays", NeurIPS;
  the authors' notebook in the repository konstmish/asynchronous_sgd) does: it hands the
  worker ``x`` and only then applies the gradient that arrived, so every delay is >= 1. The
  pull happens when the commit completes in both cases; only the version differs.
- `Ties`: ``BY_START`` (the default) takes gradients that reach the server at the same
  instant in the order their computations were started (SimPy's order of scheduling:
  `_processes.py`); ``BY_WORKER`` takes them in worker index order, as the event loops of
  the Ringmaster and Rennala authors and of Mishchenko et al.'s notebook do (a heap of
  ``(time, worker)``). Both are legitimate; a run has one.
- `DelayStops`: Ringmaster ASGD with calculation stops (Maranjyan, Tyurin & Richtárik 2025,
  "Ringmaster ASGD: The First Asynchronous SGD with Optimal Time Complexity", ICML,
  https://arxiv.org/abs/2501.16168; the authors' `RingmasterASGD` in the repository
  vectozavr/ringmaster-lmo): after each commit, every
  worker whose gradient in flight has reached a delay of ``threshold`` updates stops it and
  starts again, at once, on the version just created. No gradient ever arrives with a delay
  >= ``threshold``, so every commit is applied and versions count applied updates. Without
  stops (gemsim's `ringmaster` rule alone) such a gradient is computed to the end and
  discarded on arrival.
- `BatchRestarts`: Rennala SGD as its authors' `RennalaSGD` (same repository) runs it: the
  server steps once every ``batch`` gradients, and at each step every worker drops the
  computation in flight and starts again on the new point. Every gradient is then computed
  at the current point and none is discarded. The paper's server loop (Tyurin & Richtárik
  2023; gemsim's `rennala` rule alone) lets the workers finish and discards stale gradients
  on arrival instead.

Stopped work is counted as cancelled in the per-worker report, as a K-sync straggler's is.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, TypeAlias

from gemsim._checks import check_int

from ._server_protocols import Async


class Discipline(StrEnum):
    """Order in which the parameter server takes waiting commits.

    FIFO is the default: the GEM authors found that unfair service starves workers.
    RANDOM picks uniformly among the waiting commits with the server's own stream.
    """

    FIFO = "fifo"
    RANDOM = "random"


class PullAt(StrEnum):
    """The version a committing worker is sent: the one its commit creates, or the one before."""

    AFTER_APPLY = "after_apply"
    BEFORE_APPLY = "before_apply"


class Ties(StrEnum):
    """The order of gradients that reach the server at the same instant: by the start of their
    computations (the default), or by worker index."""

    BY_START = "by_start"
    BY_WORKER = "by_worker"


@dataclass(frozen=True)
class DelayStops:
    """Stop and restart, on the current version, each computation whose delay (commits since
    its worker's pull) reaches ``threshold`` (an integer >= 1)."""

    threshold: int
    name: ClassVar[str] = "delay_stops"

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", check_int("DelayStops.threshold", self.threshold, 1))


@dataclass(frozen=True)
class BatchRestarts:
    """Every ``batch`` commits (an integer >= 1), stop every computation in flight and restart
    every worker on the version just created."""

    batch: int
    name: ClassVar[str] = "batch_restarts"

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", check_int("BatchRestarts.batch", self.batch, 1))


Stops: TypeAlias = DelayStops | BatchRestarts
"""Stops of computations in flight that the server orders."""

STOP_TYPES: tuple[type, ...] = (DelayStops, BatchRestarts)


def check_options(spec) -> None:
    """Refuse combinations the timing model does not define, naming the field (a
    `ClusterSpec`'s ``pull_at``, ``ties`` and ``stops``, already of their types).

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    needs_async = []
    if spec.pull_at is PullAt.BEFORE_APPLY:
        needs_async.append(f"pull_at={spec.pull_at.value}")
    if spec.stops is not None:
        needs_async.append(f"stops={spec.stops!r}")
    for what in needs_async:
        if not isinstance(spec.protocol, Async):
            raise ValueError(
                f"ClusterSpec.{what} needs the async protocol, got {spec.protocol!r}; allowed: "
                f"Async() (other protocols decide themselves when workers pull)"
            )
        if spec.population is not None:
            raise ValueError(
                f"ClusterSpec.{what}: not supported with a population; allowed: the defaults"
            )
    if spec.stops is not None and spec.pull_at is PullAt.BEFORE_APPLY:
        raise ValueError(
            f"ClusterSpec.stops {spec.stops!r} restarts workers on the version after a commit; "
            f"allowed with pull_at=after_apply only, got {spec.pull_at.value}"
        )
    if spec.ties is Ties.BY_WORKER and spec.population is not None:
        raise ValueError(
            "ClusterSpec.ties=by_worker: a population's slots are not ordered workers; "
            "allowed: by_start"
        )
