"""Partition specs, as small frozen values validated when built: IID, Dirichlet label skew,
quantity skew, the user's file and the data set's natural groups here; the class-based ones
(shards, pathological, round robin, inner Dirichlet) in ``_label_specs.py``.

The drawing is in ``_partitions.py`` (which re-exports these names), the reading of a user's
file in ``_partition_files.py``, the summaries in ``_summary.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gemsim._checks import check_bool, check_int

from ._label_specs import Classes, InnerDirichlet, LabelShards, Pathological, RoundRobin
from ._partition_base import (
    BySpeed,
    Claim,
    IdSizes,
    Order,
    PartitionError,
    Shards,
    SizeLaw,
    SpeedOrder,
    check_alpha,
    check_labels,
    checked,
    set_order,
    set_samples,
)

__all__ = [
    "LABEL_SPECS",
    "MAX_DIRICHLET_ATTEMPTS",
    "BySpeed",
    "Claim",
    "Classes",
    "Dirichlet",
    "FromFile",
    "Groups",
    "Iid",
    "IdSizes",
    "InnerDirichlet",
    "LabelShards",
    "Order",
    "PartitionError",
    "PartitionSpec",
    "Pathological",
    "Quantity",
    "RoundRobin",
    "Shards",
    "SizeLaw",
    "check_labels",
    "checked",
]

MAX_DIRICHLET_ATTEMPTS = 11
"""Dirichlet draws tried before giving up on ``min_size`` (Flower's: a first draw and ten
more)."""


@dataclass(frozen=True)
class Iid:
    """Equal disjoint shards of the shuffled training set (sizes differ by at most 1).

    With ``samples`` (for populations larger than the training set): each worker draws its
    own ``samples`` examples uniformly, with replacement; shards overlap.
    """

    order: SpeedOrder = Order.DRAWN
    samples: int | None = None

    def __post_init__(self) -> None:
        set_order(self)
        set_samples(self)


@dataclass(frozen=True)
class Dirichlet:
    """Label skew: each class split across workers in Dirichlet(alpha) proportions (Hsu, Qi
    & Brown 2019, arXiv:1909.06335; Yurochkin et al. 2019's code), Flower Datasets'
    ``DirichletPartitioner``.

    For each class k present (in increasing order), its examples are cut at
    ``floor(cumsum(p)[:-1] * n_k)`` with ``p ~ Dirichlet(alpha)``: ``alpha`` one number
    (``alpha * ones(n)``) or one per worker. With ``self_balancing``, as Flower's option, a
    worker already holding more than ``n_train / n`` examples gets none of the next classes
    (its share is zeroed and the others renormalised). If a shard ends below ``min_size``
    (raised to the batch size where the caller gives one) everything is drawn again, at most
    `MAX_DIRICHLET_ATTEMPTS` times as Flower does. Small alpha: few classes per worker; large
    alpha: close to IID. Each worker's label mix is then close to Dirichlet(alpha * ones(C)),
    the law `InnerDirichlet` draws directly: alpha means the same in both.

    Draws: with a vector alpha or self-balancing, the Dirichlet draws come first and alone
    from the generator, in Flower's order (per attempt, one per class), and the examples of
    each class are shuffled after: Flower's partitioner handed this generator gives the same
    per-class counts. A single alpha without self-balancing keeps the order of earlier
    releases (each class shuffled just before its draw), so its shards are unchanged.

    With ``samples`` (deprecated: alpha there means something else): each worker's class
    proportions are drawn from Dirichlet(alpha p), ``p`` the training set's class
    frequencies, concentrations summing to alpha (Hsu et al.'s per-client reading), and it
    draws ``samples`` examples with those proportions, with replacement; shards overlap and
    ``min_size`` does not apply. ``InnerDirichlet(alpha / C, samples=...)`` is the same law
    on balanced labels, with alpha meaning what it means everywhere else.
    """

    alpha: float | tuple[float, ...]
    min_size: int = 10
    """Fewest examples any worker may hold (at least the batch size, where one is given)."""
    order: SpeedOrder = Order.DRAWN
    samples: int | None = None
    self_balancing: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", check_alpha(self.alpha))
        checked("min_size", check_int, self.min_size, 1)
        set_order(self)
        set_samples(self)
        checked("self_balancing", check_bool, self.self_balancing)
        if self.samples is not None and self.self_balancing:
            raise PartitionError(
                "self_balancing", "balances disjoint shards: leave out `samples` or it"
            )
        if self.samples is not None and isinstance(self.alpha, tuple):
            raise PartitionError(
                "alpha", "one alpha per worker needs disjoint shards: leave out `samples`"
            )

    @property
    def flower_order(self) -> bool:
        """Whether the draws come in Flower's order (see the class docstring)."""
        return self.self_balancing or isinstance(self.alpha, tuple)


@dataclass(frozen=True)
class Quantity:
    """Quantity skew: IID labels, shard sizes from a law.

    ``sizes`` a random law: every worker first gets one example; the other ``n_train - n``
    are shared in proportion to n draws of the law by the largest-remainder method (ties to
    the lower worker), so the sizes sum to ``n_train``. ``sizes`` an `IdSizes`: Flower's
    deterministic sizes (linear, square, exponential in the worker's id). The shuffled
    training set is then cut into shards of those sizes.
    """

    sizes: SizeLaw | IdSizes
    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        if isinstance(self.sizes, IdSizes):
            self.sizes.check()
        elif not isinstance(self.sizes, SizeLaw):
            raise PartitionError(
                "sizes", f"must be a law with sample(rng, size), got {self.sizes!r}"
            )
        set_order(self)


@dataclass(frozen=True)
class FromFile:
    """The user's own mapping of training examples to workers.

    ``.npz``: one integer array ``worker`` aligned with the training set (a worker id per
    example), or one index array per worker, ``worker_0`` ... ``worker_{n-1}`` (numpy's
    ``arr_0`` ... ``arr_{n-1}`` too); ``.csv`` or ``.parquet``: a ``worker`` column aligned
    with the training set. The shards must be disjoint, non-empty and cover the training
    set. ``sha256`` is the file's digest when the spec was made (a changed file is an error).
    """

    path: str
    sha256: str | None = None
    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise PartitionError("path", f"must be a non-empty path, got {self.path!r}")
        if self.sha256 is not None and (not isinstance(self.sha256, str) or not self.sha256):
            raise PartitionError("sha256", f"must be a hex digest or None, got {self.sha256!r}")
        set_order(self)


@dataclass(frozen=True)
class Groups:
    """The data set's natural groups (writer, user, device), as Flower Datasets'
    ``NaturalIdPartitioner`` and ``GroupedNaturalIdPartitioner``.

    The distinct ids of the ``groups`` array, sorted, are cut into n consecutive runs whose
    lengths differ by at most one (the longer first, ``np.array_split``), worker w holding
    the w-th run: one group per worker when there are as many groups as workers, else
    several writers per worker. That is GroupedNaturalIdPartitioner's grouping with
    ``sort_unique_ids=True`` whenever it makes n groups (``group_size = G / n`` when n
    divides the G ids; ``mode="allow-bigger"`` with ``group_size = G // n`` otherwise, where
    that gives n groups); Flower's group count follows its ``group_size``, ours the workers.
    """

    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        set_order(self)


PartitionSpec = (
    Iid
    | Dirichlet
    | RoundRobin
    | LabelShards
    | Pathological
    | InnerDirichlet
    | Quantity
    | FromFile
    | Groups
)

LABEL_SPECS = (Dirichlet, RoundRobin, LabelShards, Pathological, InnerDirichlet)
"""The specs that split by class: they need class labels, and ``by_speed`` ranks their
shards by label skew (the others by size)."""
