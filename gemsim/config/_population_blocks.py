"""`clients:` — a population of N clients of which K train at a time (asynchronous federated
training: FedBuff, FedAsync, Papaya). Left out, the workers are persistent: N = K = the
number of workers. With it, `workers.count` is K, the number of slots (it may be left out),
and the workers block gives the slots' compute law and network; each client has its own
speed factor, availability, data shard (the partition applies to the N clients) and random
streams, and the server starts a task on a client drawn among those available whenever a
slot frees.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from ._block import Block
from ._churn_blocks import AvailabilityBlock, ChurnBlock
from ._dist_blocks import Dist

MAX_CLIENTS = 10**7
"""The most clients a population may have (the timing model keeps about 65 bytes a client)."""


class WeightedSelection(Block):
    """Clients drawn with probability proportional to their data size (the size of their
    shard of the partition)."""

    name: Literal["weighted"]
    by: Literal["data_size"] = "data_size"


Selection = Literal["uniform", "round_robin"] | WeightedSelection


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
        return timing.Population(
            n_clients=self.population,
            speed=self.speed.build() if self.speed is not None else None,
            churn=self.churn.build() if self.churn is not None else None,
            availability=self.availability.intervals() if self.availability else None,
            selection=timing.Selection(selection),
            weights=None if weights is None else tuple(float(w) for w in weights),
        )
