"""`problem.partition` — how the training set is split among the workers — and a worker
group's `data` (the classes it alone holds). Left out, every worker streams the whole training
set, as before these fields existed. A bare name (`partition: iid`) means `{name: iid}`.

What needs the data (labels, the user's file, a shard at least a batch long) is checked when
the problem is built, before any run (`app.preflight`); the blocks check their own fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationInfo, model_validator

from ._block import Block
from ._dist_blocks import Dist, with_file_digest

Order = Literal["drawn", "by_speed"]


class _PartitionBlock(Block):
    order: Order = "drawn"
    """`by_speed`: the most skewed (label partitions) or largest (others) shards go to the
    slowest workers (by mean compute time per mini-batch)."""


class IidPartition(_PartitionBlock):
    """Equal disjoint shards of a shuffled training set; with `samples`, each worker (client)
    draws that many examples of its own, with replacement (shards overlap: for populations
    larger than the training set)."""

    name: Literal["iid"]
    samples: PositiveInt | None = None

    def spec(self):
        from gemsim.problems import Iid

        return Iid(order=self.order, samples=self.samples)


class DirichletPartition(_PartitionBlock):
    """Each class split across the workers in Dirichlet(alpha) proportions (Hsu et al. 2019;
    Flower's DirichletPartitioner): small alpha, few classes per worker."""

    name: Literal["dirichlet"]
    alpha: PositiveFloat
    min_size: PositiveInt = 10
    samples: PositiveInt | None = None
    """Each worker (client) draws this many examples with its own Dirichlet(alpha p) class
    proportions, with replacement (shards overlap: for populations larger than the training
    set); left out, each class is split among the workers (disjoint shards)."""

    def spec(self):
        from gemsim.problems import Dirichlet

        return Dirichlet(
            alpha=self.alpha, min_size=self.min_size, order=self.order, samples=self.samples
        )


class ClassesPartition(_PartitionBlock):
    """Each worker holds `per_worker` classes (McMahan et al. 2017's shards)."""

    name: Literal["classes"]
    per_worker: PositiveInt

    def spec(self):
        from gemsim.problems import Classes

        return Classes(per_worker=self.per_worker, order=self.order)


class QuantityPartition(_PartitionBlock):
    """IID labels, shard sizes in proportion to draws of `dist` (quantity skew)."""

    name: Literal["quantity"]
    dist: Dist

    def spec(self):
        from gemsim.problems import Quantity

        return Quantity(sizes=self.dist.build(), order=self.order)


class FilePartition(_PartitionBlock):
    """The user's mapping: an `.npz` (a `worker` array aligned with the training set, or one
    index array per worker), or a `.csv` / `.parquet` with a `worker` column. Its sha256 is
    recorded, so that a changed file changes the run's identity."""

    name: Literal["file"]
    path: str
    sha256: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _digest(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return data
        return with_file_digest(data, info.context)

    def spec(self):
        from gemsim.problems import FromFile

        return FromFile(path=self.path, sha256=self.sha256, order=self.order)


class GroupsPartition(_PartitionBlock):
    """The data set's natural groups, one per worker (an `arrays` file's `groups` array, or
    `synthetic_fed`'s devices)."""

    name: Literal["groups"]

    def spec(self):
        from gemsim.problems import Groups

        return Groups(order=self.order)


PartitionBlock = Annotated[
    IidPartition
    | DirichletPartition
    | ClassesPartition
    | QuantityPartition
    | FilePartition
    | GroupsPartition,
    Field(discriminator="name"),
]


def partition_shorthand(value: Any) -> Any:
    """`iid` for `{name: iid}`."""
    return {"name": value} if isinstance(value, str) else value


class GroupData(Block):
    """What a worker group's data is: the classes it alone holds (speed-data correlation made
    explicit), split among its workers; the other workers hold none of them."""

    classes: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
