"""One simulated worker: its compute law per mini-batch, speed, join time, crashes, churn,
availability trace and slowdowns. Frozen dataclasses, validated in ``__post_init__`` as the
cluster's specs are (`_cluster.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gemsim._checks import check_instance

from ._churn import Churn, Slowdowns, check_intervals
from ._distributions import Distribution
from ._fields import distribution, real, set_field

TINY_SECONDS = 1e-300
"""A compute law must draw more than this with probability at least one half."""


@dataclass(frozen=True)
class Failure:
    """A crash at virtual time ``at``; the worker restarts ``restart_after`` s later.

    ``restart_after=None`` means the worker is gone for good.
    """

    at: float
    restart_after: float | None = None

    def __post_init__(self) -> None:
        set_field(self, "at", real("Failure", "at", self.at, positive=False))
        if self.restart_after is not None:
            value = real("Failure", "restart_after", self.restart_after, positive=False)
            set_field(self, "restart_after", value)


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
        distribution("WorkerSpec", "compute", self.compute, optional=False)
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
        set_field(self, "speed", real("WorkerSpec", "speed", self.speed, positive=True))
        set_field(self, "join_at", real("WorkerSpec", "join_at", self.join_at, positive=False))
        set_field(self, "failures", self._checked_failures())
        check_instance("WorkerSpec.churn", self.churn, (Churn,), optional=True)
        check_instance("WorkerSpec.slowdowns", self.slowdowns, (Slowdowns,), optional=True)
        set_field(
            self, "availability", check_intervals("WorkerSpec.availability", self.availability)
        )

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


def lives_given(ws: WorkerSpec) -> list[str]:
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
