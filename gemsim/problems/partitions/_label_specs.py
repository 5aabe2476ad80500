"""The class-based partition specs: McMahan et al.'s shards, Flower's pathological classes,
the round robin of classes (formerly ``Classes``) and the inner Dirichlet (label and quantity
skew together). Their drawing is in ``_classes.py`` and ``_dirichlet.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gemsim._checks import check_enum, check_int

from ._partition_base import (
    IdSizes,
    Order,
    PartitionError,
    SizeLaw,
    SpeedOrder,
    check_alpha,
    checked,
    set_order,
    set_samples,
)

__all__ = [
    "Classes",
    "ClassMode",
    "InnerDirichlet",
    "LabelShards",
    "Pathological",
    "RoundRobin",
]


@dataclass(frozen=True)
class RoundRobin:
    """Each worker holds ``per_worker`` distinct classes, dealt round a random permutation.

    With ``perm`` a random permutation of the C classes present, worker w holds classes
    ``perm[(w * per_worker + j) % C]`` for ``j < per_worker``, so each class has
    ``floor`` or ``ceil(n * per_worker / C)`` holders, who split its shuffled examples into
    consecutive pieces whose sizes differ by at most 1. When ``per_worker`` divides C this
    makes C / per_worker fixed blocks of classes (no two blocks share a class); when
    ``n * per_worker < C`` the classes nobody holds are dropped. Neither McMahan et al.'s
    shards (`LabelShards`) nor Flower's ``PathologicalPartitioner`` (`Pathological`): it is
    kept, under the deprecated name ``Classes`` too, so that earlier runs draw the same
    shards.
    """

    per_worker: int
    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        checked("per_worker", check_int, self.per_worker, 1)
        set_order(self)


Classes = RoundRobin
"""The deprecated name of `RoundRobin` (the same spec, the same draws)."""


@dataclass(frozen=True)
class LabelShards:
    """McMahan et al. 2017's pathological non-IID shards (arXiv:1602.05629, §3: sort by label,
    cut into 2n shards, deal 2 at random), Flower Datasets' ``ShardPartitioner`` with
    ``num_shards_per_partition=per_worker`` and ``keep_incomplete_shard=False``.

    The training set, sorted by label (each class in a random order), is cut into shards of
    ``shard_size`` consecutive examples (default ``floor(n_train / (n * per_worker))``); the
    incomplete last shard is dropped. ``permutation(n_shards)[:n * per_worker]``, the first
    draw of the generator, deals ``per_worker`` shards to each worker in turn, as Flower does:
    handed this generator, Flower's partitioner deals the same shards, so the same per-class
    counts. A shard straddling two classes gives its worker both; examples in no dealt shard
    are dropped.
    """

    per_worker: int = 2
    shard_size: int | None = None
    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        checked("per_worker", check_int, self.per_worker, 1)
        if self.shard_size is not None:
            checked("shard_size", check_int, self.shard_size, 1)
        set_order(self)


class ClassMode(StrEnum):
    """How `Pathological` chooses each worker's classes (Flower's ``class_assignment_mode``)."""

    RANDOM = "random"
    """``per_worker`` classes drawn uniformly without replacement, for each worker."""
    DETERMINISTIC = "deterministic"
    """Worker w holds classes ``(w + i) % C``, ``i < per_worker`` (of the sorted classes)."""
    FIRST_DETERMINISTIC = "first-deterministic"
    """The first class ``w % C``, the others drawn uniformly from the rest (Li et al.)."""


@dataclass(frozen=True)
class Pathological:
    """Each worker holds exactly ``per_worker`` classes (Li, Diao, Chen & He 2021, arXiv:
    2102.02079's "#C = k" label skew), Flower Datasets' ``PathologicalPartitioner`` with
    ``num_classes_per_partition=per_worker`` and ``class_assignment_mode=mode``.

    Once every worker's classes are chosen (`ClassMode`; C counts the classes present, in
    increasing order), each class's shuffled examples are split among its holders, in
    increasing worker order, into pieces whose sizes differ by at most 1 (the larger first,
    as Flower's ``np.array_split``). Classes nobody holds are dropped. ``deterministic`` needs
    no draw and gives Flower's counts exactly; ``random`` and ``first-deterministic`` have
    Flower's law, drawn vectorised over workers (one uniform key per worker and class) rather
    than one ``choice`` per worker.
    """

    per_worker: int
    mode: ClassMode = ClassMode.RANDOM
    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        checked("per_worker", check_int, self.per_worker, 1)
        object.__setattr__(self, "mode", checked("mode", check_enum, self.mode, ClassMode))
        set_order(self)


@dataclass(frozen=True)
class InnerDirichlet:
    """Label and quantity skew together: every worker draws its own label mix
    q ~ Dirichlet(alpha) over the classes (Acar et al. 2021, arXiv:2111.04263; Hsu et al.
    2019's per-client reading with a flat prior), Flower Datasets'
    ``InnerDirichletPartitioner``. ``alpha``: one number (``alpha * ones(C)``, Flower's
    scalar) or one per class of the data set.

    Shard sizes: equal (sizes differing by at most 1) by default, or ``sizes``, a random law
    (as `Quantity`) or an `IdSizes`; they sum to the training set. The shards then take
    turns, as Flower's do, each turn filling one slot of a shard chosen uniformly among those
    not yet full, with a class drawn from that shard's mix over the classes not yet used up
    (Flower renormalises the same way): Flower's law, drawn vectorised (the turns as the
    jumps of one rate-1 Poisson process per shard; all slots drawn at once, those after the
    first class to run out drawn again, at most once per class) rather than example by
    example. The mixes are the generator's first draw, as Flower's (with equal or `IdSizes`
    sizes); which examples of a class a worker gets is drawn at random (Flower: the last
    ones first). A mix with no weight left on the classes remaining draws them uniformly
    (Flower would divide by zero).

    With ``samples``: each worker instead draws ``samples`` examples from its mix, with
    replacement (shards overlap, no class runs out): multinomial(samples, q), for
    populations larger than the training set.
    """

    alpha: float | tuple[float, ...]
    sizes: SizeLaw | IdSizes | None = None
    samples: int | None = None
    order: SpeedOrder = Order.DRAWN

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", check_alpha(self.alpha))
        if isinstance(self.sizes, IdSizes):
            self.sizes.check()
        elif self.sizes is not None and not isinstance(self.sizes, SizeLaw):
            raise PartitionError(
                "sizes", f"must be a law with sample(rng, size), a size law or None, got "
                f"{self.sizes!r}"
            )  # fmt: skip
        set_samples(self)
        if self.samples is not None and self.sizes is not None:
            raise PartitionError(
                "samples", "every worker holds `samples` examples: leave out the shard sizes"
            )
        set_order(self)
