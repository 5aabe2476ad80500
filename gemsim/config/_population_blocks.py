"""`clients:` — a population of N clients of which K train at a time (asynchronous federated
training: FedBuff, FedAsync, Papaya). Left out, the workers are persistent: N = K = the
number of workers. With it, `workers.count` is K, the number of slots (it may be left out),
and the workers block gives the slots' compute law and network; each client has its own
speed factor, availability, data shard (the partition applies to the N clients) and random
streams, and the server starts a task on a client drawn among those available whenever a
slot frees.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, ValidationInfo, field_validator, model_validator

from ._block import ADDED, Block
from ._churn_blocks import AvailabilityBlock, ChurnBlock
from ._dist_blocks import Dist
from ._partition_blocks import GroupData

MAX_CLIENTS = 10**7
"""The most clients a population may have (the timing model keeps about 65 bytes a client)."""


class WeightedSelection(Block):
    """Clients drawn with probability proportional to their data size (the size of their
    shard of the partition)."""

    name: Literal["weighted"]
    by: Literal["data_size"] = "data_size"


Selection = Literal["uniform", "round_robin"] | WeightedSelection


class ClientGroup(Block):
    """A share of the population's clients, with its own speed law and the classes it alone
    holds (as `workers.groups[i]` for persistent workers). The groups take the client ids in
    order, `fraction` x N (rounded) each; the clients after them (1 - the fractions' sum) are
    the population's own, with `clients.speed`."""

    fraction: Annotated[float, Field(gt=0.0, le=1.0, strict=True)]
    """The share of the clients in the group (the rest, 1 - the sum, form the default
    group)."""
    speed: Dist | None = None
    """The law of the group's speed factors, drawn once per client; left out, `clients.speed`
    (or 1)."""
    data: GroupData | None = None
    """The classes the group's clients alone hold (split among them, or drawn by each with a
    partition's `samples`); the other clients hold none of them."""

    @field_validator("speed")
    @classmethod
    def _positive(cls, speed: Dist | None) -> Dist | None:
        """A law that can draw 0 is refused here, naming this field, as `clients.speed`."""
        from gemsim import timing

        if speed is not None:
            try:
                timing.Population(n_clients=1, speed=speed.build())
            except ValueError as exc:
                raise ValueError(str(exc).removeprefix("Population.speed ")) from None
        return speed


def group_ranges(fractions: list[float], population: int) -> list[tuple[int, int]]:
    """``(first, count)`` of each group: consecutive ids, group i ending at
    ``round(population x (fraction_0 + ... + fraction_i))`` (at most `population`)."""
    ranges, first = [], 0
    for i in range(len(fractions)):
        end = min(population, round(population * math.fsum(fractions[: i + 1])))
        ranges.append((first, end - first))
        first = end
    return ranges


class ClientsBlock(Block):
    population: Annotated[int, Field(ge=1, le=MAX_CLIENTS)]
    """N, the clients."""
    concurrency: PositiveInt
    """K, the tasks in flight (the slots): at most N."""
    selection: Selection = "uniform"
    """Which available idle client a freed slot takes: `uniform`, `round_robin` (client ids in
    turn, skipping the unavailable and the busy), or `{name: weighted, by: data_size}`."""
    speed: Dist | None = None
    """Each client's speed factor (its compute time is the slot's draw divided by it), drawn
    once per client; left out, 1."""
    churn: ChurnBlock | None = None
    """Each client's alternating up and down times (its own streams)."""
    availability: AvailabilityBlock | None = None
    """A CSV of down intervals per client (`worker,down_at,up_at`, the worker column holding
    the client id)."""
    groups: Annotated[list[ClientGroup], ADDED] = []
    """Shares of the clients with their own speed law and classes (`ClientGroup`)."""

    @field_validator("groups")
    @classmethod
    def _shares(cls, groups: list[ClientGroup], info: ValidationInfo) -> list[ClientGroup]:
        fractions = [g.fraction for g in groups]
        total = math.fsum(fractions)
        if total > 1.0 + 1e-9:
            terms = " + ".join(f"{f:g}" for f in fractions)
            raise ValueError(
                f"the groups' fraction fields sum to {total:g} ({terms}), more than all the "
                "clients; allowed: fractions > 0 summing to at most 1 (the rest, 1 - the sum, "
                "is the population's own group)"
            )
        n = info.data.get("population")
        if n is None:  # the population itself was refused
            return groups
        for i, (first, count) in enumerate(group_ranges(fractions, n)):
            if count < 1:
                raise ValueError(
                    f"groups[{i}].fraction: {fractions[i]:g} of the {n} clients is no client "
                    f"(rounded, the group would take ids {first} to {first - 1}); allowed: a "
                    f"fraction of at least 1 / {n} = {1 / n:.3g}"
                )
        return groups

    @model_validator(mode="after")
    def _consistent(self):
        if self.concurrency > self.population:
            raise ValueError(
                f"concurrency {self.concurrency} exceeds the population {self.population}: "
                "at most one task per client is in flight (lower concurrency)"
            )
        if self.churn is not None and self.availability is not None:
            raise ValueError("give the clients `churn` or an `availability` file, not both")
        if self.availability is not None:
            outside = [c for c in self.availability.intervals() if c >= self.population]
            if outside:
                raise ValueError(
                    f"availability: {self.availability.file!r} names client {min(outside)}, "
                    f"outside the population (clients are 0..{self.population - 1})"
                )
        self.build(weights=None, check_only=True)  # the timing model's own checks
        return self

    @property
    def weighted(self) -> bool:
        """Whether clients are drawn by weight (their data sizes: the app gives them)."""
        return isinstance(self.selection, WeightedSelection)

    def build(self, weights=None, *, check_only: bool = False):
        """The timing model's `Population`; `weights` (one per client, e.g. their data sizes)
        for a weighted selection (`check_only`: without them, to check the rest)."""
        from gemsim import timing

        selection = "weighted" if self.weighted else self.selection
        if check_only and self.weighted:
            selection, weights = "uniform", None
        speed = self.speed.build() if self.speed is not None else None
        return timing.Population(
            n_clients=self.population,
            speed=speed,
            churn=self.churn.build() if self.churn is not None else None,
            availability=self.availability.intervals() if self.availability else None,
            selection=timing.Selection(selection),
            weights=None if weights is None else tuple(float(w) for w in weights),
            groups=self._timing_groups(speed),
        )

    def group_ranges(self) -> list[tuple[int, int]]:
        """``(first, count)`` of each of `groups` (`group_ranges`)."""
        return group_ranges([g.fraction for g in self.groups], self.population)

    def _timing_groups(self, speed: Any) -> tuple:
        from gemsim import timing

        return tuple(
            timing.ClientGroup(first, count, g.speed.build() if g.speed is not None else speed)
            for g, (first, count) in zip(self.groups, self.group_ranges(), strict=True)
        )
