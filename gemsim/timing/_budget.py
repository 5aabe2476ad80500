"""When a simulation stops: after a number of commits, of mini-batches per worker, or of
virtual seconds. Frozen dataclasses, validated in ``__post_init__`` as the cluster's specs are
(`_cluster.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from ._fields import integer, real, set_field


@dataclass(frozen=True)
class CommitBudget:
    """Stop after exactly ``commits`` commits (fewer only if every worker is gone)."""

    commits: int

    def __post_init__(self) -> None:
        set_field(self, "commits", integer("CommitBudget", "commits", self.commits, minimum=1))


@dataclass(frozen=True)
class StepsBudget:
    """Each worker stops after committing ``steps_per_worker`` mini-batches.

    A worker makes ``ceil(steps_per_worker / window)`` commits and every commit holds a
    full ``window`` of mini-batches, so a worker processes ``window`` batches too many
    at most; this keeps every commit the same shape for update rules with a static window.
    """

    steps_per_worker: int

    def __post_init__(self) -> None:
        value = integer("StepsBudget", "steps_per_worker", self.steps_per_worker, minimum=1)
        set_field(self, "steps_per_worker", value)

    def commits_per_worker(self, window: int) -> int:
        """Commits each worker makes: ``ceil(steps_per_worker / window)``."""
        return -(-self.steps_per_worker // window)


@dataclass(frozen=True)
class SecondsBudget:
    """Keep every commit at virtual time ``<= seconds`` and none after."""

    seconds: float

    def __post_init__(self) -> None:
        set_field(self, "seconds", real("SecondsBudget", "seconds", self.seconds, positive=True))


Budget: TypeAlias = CommitBudget | StepsBudget | SecondsBudget
"""When a simulation stops."""
