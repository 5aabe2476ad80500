"""`problem.partition` — how the training set is split among the workers — and a worker
group's `data` (the classes it alone holds). Left out, every worker streams the whole training
set, as before these fields existed. A bare name (`partition: iid`) means `{name: iid}`.

What needs the data (labels, the user's file, a shard at least a batch long) is checked when
the problem is built, before any run (`app.preflight`); the blocks check their own fields.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._block import ADDED, Block
from ._dist_blocks import Dist, with_file_digest

SizeFunction = Literal["linear", "square", "exponential"]
Alpha = PositiveFloat | Annotated[list[PositiveFloat], Field(min_length=1)]
"""One concentration, or one per worker (`dirichlet`) or per class (`inner_dirichlet`)."""


class BySpeedOrder(Block):
    """`{by_speed: rho}`: the shards matched to the workers' speeds with a rank correlation
    of strength rho, through a Gaussian copula (`problems.BySpeed`): 1 is `by_speed`'s
    assignment, 0 independent of speed, -1 the most skewed (largest) shards to the fastest."""

    by_speed: Annotated[float, Field(ge=-1.0, le=1.0)]


Order = Literal["drawn", "by_speed"] | BySpeedOrder
ORDERS = "drawn, by_speed or {by_speed: rho} with rho a number from -1 to 1"


def checked_order(value: Any) -> Any:
    """`order` as given, refused with one message (not one per member of the union) when it
    is none of `ORDERS`: a bool or a string is not a rho."""
    if isinstance(value, BySpeedOrder) or value in ("drawn", "by_speed"):
        return value
    if isinstance(value, dict) and set(value) == {"by_speed"}:
        rho = value["by_speed"]
        number = isinstance(rho, int | float) and not isinstance(rho, bool)
        if not number or not -1.0 <= rho <= 1.0:  # NaN fails the comparison too
            raise ValueError(
                f"by_speed: rho must be a number from -1 to 1 (the strength of the tie between "
                f"speed and data: 1 by_speed, 0 none, -1 reversed), got {rho!r}"
            )
        return {"by_speed": float(rho)}
    raise ValueError(f"must be {ORDERS}")


class _PartitionBlock(Block):
    order: Order = "drawn"
    """`by_speed`: the most skewed (label partitions) or largest (others) shards go to the
    slowest workers (by mean compute time per mini-batch); `{by_speed: rho}`: the same tie
    with a rank correlation of strength rho (1: `by_speed`, 0: none, -1: reversed)."""

    @field_validator("order", mode="before")
    @classmethod
    def _order(cls, value: Any) -> Any:
        return checked_order(value)

    def problem_order(self):
        """The order as `gemsim.problems` takes it: a name, or a `problems.BySpeed`."""
        if isinstance(self.order, BySpeedOrder):
            from gemsim.problems import BySpeed

            return BySpeed(self.order.by_speed)
        return self.order


class IidPartition(_PartitionBlock):
    """Equal disjoint shards of a shuffled training set; with `samples`, each worker (client)
    draws that many examples of its own, with replacement (shards overlap: for populations
    larger than the training set)."""

    name: Literal["iid"]
    samples: PositiveInt | None = None

    def spec(self):
        from gemsim.problems import Iid

        return Iid(order=self.problem_order(), samples=self.samples)


class DirichletPartition(_PartitionBlock):
    """Each class split across the workers in Dirichlet(alpha) proportions (Hsu et al. 2019;
    Flower's DirichletPartitioner): small alpha, few classes per worker. `alpha`: one number,
    or a list of one per worker (data owner). `self_balancing`: Flower's option (a worker
    above the average shard size gets none of the next classes). Drawn again, at most 11
    times, until every shard holds max(`min_size`, the batch size)."""

    name: Literal["dirichlet"]
    alpha: Alpha
    min_size: PositiveInt = 10
    samples: PositiveInt | None = None
    """Deprecated (alpha means something else with it: Dirichlet(alpha p), concentrations
    summing to alpha): write `inner_dirichlet` with `samples`. Each worker (client) draws
    this many examples with its own class proportions, with replacement (shards overlap)."""
    self_balancing: Annotated[bool, ADDED] = False

    @model_validator(mode="after")
    def _modes(self):
        if self.samples is not None:
            if self.self_balancing or isinstance(self.alpha, list):
                field = "self_balancing" if self.self_balancing else "alpha"
                raise ValueError(
                    f"{field}: needs disjoint shards (one alpha per worker, self-balancing); "
                    "leave out `samples`"
                )
            _deprecated(
                "partition dirichlet with samples draws Dirichlet(alpha p) mixes, whose "
                "concentrations sum to alpha (not alpha per class, as without samples): write "
                "{name: inner_dirichlet, alpha, samples} (alpha / classes for the same law "
                "on balanced labels)"
            )
        return self

    def spec(self):
        from gemsim.problems import Dirichlet

        alpha = tuple(self.alpha) if isinstance(self.alpha, list) else self.alpha
        return Dirichlet(
            alpha=alpha,
            min_size=self.min_size,
            order=self.problem_order(),
            samples=self.samples,
            self_balancing=self.self_balancing,
        )


class InnerDirichletPartition(_PartitionBlock):
    """Every worker draws its own label mix from Dirichlet(alpha) over the classes (Flower's
    InnerDirichletPartitioner; label and quantity skew together) and fills a shard of its
    size with it: equal sizes, or drawn from `dist`, or Flower's `law` (linear, square,
    exponential in the worker's id). `alpha`: one number, or one per class of the data set.
    With `samples`, each worker draws that many examples from its mix, with replacement
    (shards overlap: for populations larger than the training set)."""

    name: Literal["inner_dirichlet"]
    alpha: Alpha
    dist: Dist | None = None
    law: SizeFunction | None = None
    samples: PositiveInt | None = None

    @model_validator(mode="after")
    def _sizes(self):
        _one_size_law(self, required=False)
        if self.samples is not None and (self.dist is not None or self.law is not None):
            raise ValueError(
                "samples: every worker then holds `samples` examples: leave out "
                f"{'dist' if self.dist is not None else 'law'}"
            )
        return self

    def spec(self):
        from gemsim.problems import InnerDirichlet

        alpha = tuple(self.alpha) if isinstance(self.alpha, list) else self.alpha
        return InnerDirichlet(
            alpha=alpha, sizes=_sizes(self), samples=self.samples, order=self.problem_order()
        )


class ShardsPartition(_PartitionBlock):
    """McMahan et al. 2017's shards (Flower's ShardPartitioner): the training set sorted by
    label, cut into shards of `shard_size` examples (default: n_train / (workers x
    `per_worker`)), `per_worker` of them dealt to each worker at random."""

    name: Literal["shards"]
    per_worker: PositiveInt = 2
    shard_size: PositiveInt | None = None

    def spec(self):
        from gemsim.problems import LabelShards

        return LabelShards(
            per_worker=self.per_worker, shard_size=self.shard_size, order=self.problem_order()
        )


class PathologicalPartition(_PartitionBlock):
    """Each worker holds exactly `per_worker` classes (Flower's PathologicalPartitioner):
    `random` (drawn for each worker), `deterministic` (classes w, w+1, ... of the sorted
    classes) or `first-deterministic` (class w, the others drawn); each class is then split
    evenly among its holders."""

    name: Literal["pathological"]
    per_worker: PositiveInt
    mode: Literal["random", "deterministic", "first-deterministic"] = "random"

    def spec(self):
        from gemsim.problems import Pathological

        return Pathological(per_worker=self.per_worker, mode=self.mode, order=self.problem_order())


class RoundRobinPartition(_PartitionBlock):
    """Each worker holds `per_worker` classes, dealt round a random permutation of the
    classes (worker w: classes perm[(w per_worker + j) mod C]); with per_worker dividing C,
    that is C / per_worker fixed blocks of classes."""

    name: Literal["round_robin"]
    per_worker: PositiveInt

    def spec(self):
        from gemsim.problems import RoundRobin

        return RoundRobin(per_worker=self.per_worker, order=self.problem_order())


class ClassesPartition(_PartitionBlock):
    """Deprecated name of `round_robin` (the same draws): it is neither McMahan et al.'s
    shards (`shards`) nor Flower's PathologicalPartitioner (`pathological`)."""

    name: Literal["classes"]
    per_worker: PositiveInt

    @model_validator(mode="after")
    def _renamed(self):
        _deprecated(
            "partition classes is deprecated: write round_robin (the same shards), or shards "
            "(McMahan et al.) or pathological (Flower) for the partitions it was taken for"
        )
        return self

    def spec(self):
        from gemsim.problems import RoundRobin

        return RoundRobin(per_worker=self.per_worker, order=self.problem_order())


class QuantityPartition(_PartitionBlock):
    """IID labels, shard sizes in proportion to draws of `dist` (quantity skew), or Flower's
    deterministic `law` (linear, square, exponential in the worker's id)."""

    name: Literal["quantity"]
    dist: Dist | None = None
    law: Annotated[SizeFunction | None, ADDED] = None

    @model_validator(mode="after")
    def _sizes(self):
        _one_size_law(self, required=True)
        return self

    def spec(self):
        from gemsim.problems import Quantity

        return Quantity(sizes=_sizes(self), order=self.problem_order())


def _one_size_law(block, *, required: bool) -> None:
    if block.dist is not None and block.law is not None:
        raise ValueError("give `dist` (a random law) or `law` (a deterministic one), not both")
    if required and block.dist is None and block.law is None:
        raise ValueError("dist: required (a <dist> block), or `law`: linear, square or exponential")


def _sizes(block):
    from gemsim.problems import IdSizes

    if block.law is not None:
        return IdSizes(block.law)
    return None if block.dist is None else block.dist.build()


def _deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=3)


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

        return FromFile(path=self.path, sha256=self.sha256, order=self.problem_order())


class GroupsPartition(_PartitionBlock):
    """The data set's natural groups (an `arrays` file's `groups` array, `synthetic_fed`'s
    devices, a play's roles): one per worker, or with more groups than workers consecutive
    runs of the sorted ids, as Flower's GroupedNaturalIdPartitioner groups them."""

    name: Literal["groups"]

    def spec(self):
        from gemsim.problems import Groups

        return Groups(order=self.problem_order())


PartitionBlock = Annotated[
    IidPartition
    | DirichletPartition
    | InnerDirichletPartition
    | ShardsPartition
    | PathologicalPartition
    | RoundRobinPartition
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
