"""Partition specs, as small frozen values validated when built; the shards a partition
gives; and the error every impossible partition raises.

The drawing is in ``_partitions.py`` (which re-exports these names), the reading of a user's
file in ``_partition_files.py``, the summaries in ``_partition_summary.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from gemsim._checks import check_enum, check_int, check_positive

__all__ = [
    "MAX_DIRICHLET_ATTEMPTS",
    "Claim",
    "Classes",
    "Dirichlet",
    "FromFile",
    "Groups",
    "Iid",
    "Order",
    "PartitionError",
    "PartitionSpec",
    "Quantity",
    "Shards",
    "SizeLaw",
    "check_labels",
    "checked",
]

MAX_DIRICHLET_ATTEMPTS = 10
"""Dirichlet draws tried before giving up on ``min_size`` (Flower's limit)."""


class PartitionError(ValueError):
    """An impossible partition: a bad spec field, file, claim or worker count.

    ``str(error)`` is ``"field: message"``, so a caller prefixes its own path, e.g.
    ``f"problem.partition.{error}"``. Fields that are not a spec's name an argument of
    :func:`partition` (``n_workers``, ``labels``, ``groups``, ``slowness``, ``shards``).

    Attributes:
        field: the field at fault, e.g. ``"alpha"``, ``"per_worker"``, ``"path"``.
        message: what is wrong: the value and what is allowed.
        claim: the index of the claim at fault (in ``partition``'s ``claims``), if any.
    """

    def __init__(self, field: str, message: str, *, claim: int | None = None):
        self.field = field
        self.message = message
        self.claim = claim
        super().__init__(f"{field}: {message}")


def checked(field: str, check, value: object, *args, **kwargs):
    """A `gemsim._checks` check whose ``ValueError`` becomes a `PartitionError` on ``field``."""
    try:
        return check(field, value, *args, **kwargs)
    except ValueError as exc:
        raise PartitionError(field, str(exc).removeprefix(f"{field} ")) from None


# ----------------------------------------------------------------------------- specs


class Order(StrEnum):
    """Which worker gets which drawn shard."""

    DRAWN = "drawn"
    """Shard ``i`` of the draw goes to the ``i``-th worker."""
    BY_SPEED = "by_speed"
    """The most skewed (Dirichlet, Classes) or largest (others) shards go to the slowest."""


def _set_order(spec: object) -> None:
    object.__setattr__(spec, "order", checked("order", check_enum, spec.order, Order))


def _set_samples(spec: object) -> None:
    if spec.samples is not None:
        checked("samples", check_int, spec.samples, 1)


@dataclass(frozen=True)
class Iid:
    """Equal disjoint shards of the shuffled training set (sizes differ by at most 1).

    With ``samples`` (for populations larger than the training set): each worker draws its
    own ``samples`` examples uniformly, with replacement; shards overlap.
    """

    order: Order = Order.DRAWN
    samples: int | None = None

    def __post_init__(self) -> None:
        _set_order(self)
        _set_samples(self)


@dataclass(frozen=True)
class Dirichlet:
    """Label skew: each class split across workers in Dirichlet(alpha) proportions.

    For each class k present (in increasing order), its shuffled examples are cut at
    ``floor(cumsum(p)[:-1] * n_k)`` with ``p ~ Dirichlet(alpha * ones(n))``, as Flower's
    ``DirichletPartitioner`` does (without its optional self-balancing). If a shard ends
    below ``min_size`` everything is drawn again, at most `MAX_DIRICHLET_ATTEMPTS` times.
    Small alpha: few classes per worker; large alpha: close to IID.

    With ``samples`` (for populations larger than the training set, where disjoint shards
    cannot all be filled): each worker's class proportions are drawn from Dirichlet(alpha p),
    ``p`` the training set's class frequencies (Hsu, Qi & Brown 2019's per-client reading),
    and it draws ``samples`` examples with those proportions, with replacement; shards
    overlap, and ``min_size`` does not apply.
    """

    alpha: float
    min_size: int = 10
    """Fewest examples any worker may hold."""
    order: Order = Order.DRAWN
    samples: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", checked("alpha", check_positive, self.alpha))
        checked("min_size", check_int, self.min_size, 1)
        _set_order(self)
        _set_samples(self)


@dataclass(frozen=True)
class Classes:
    """Each worker holds exactly ``per_worker`` distinct classes (McMahan et al.'s shards).

    With ``perm`` a random permutation of the C classes present, worker w holds classes
    ``perm[(w * per_worker + j) % C]`` for ``j < per_worker``, so each class has
    ``floor`` or ``ceil(n * per_worker / C)`` holders, who split its shuffled examples into
    consecutive pieces whose sizes differ by at most 1. When ``n * per_worker < C`` the
    classes nobody holds are dropped.
    """

    per_worker: int
    order: Order = Order.DRAWN

    def __post_init__(self) -> None:
        checked("per_worker", check_int, self.per_worker, 1)
        _set_order(self)


@runtime_checkable
class SizeLaw(Protocol):
    """A law of positive numbers (gemsim.timing's distributions are ones)."""

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray: ...


@dataclass(frozen=True)
class Quantity:
    """Quantity skew: IID labels, shard sizes in proportion to n draws of ``sizes``.

    Every worker first gets one example; the other ``n_train - n`` are shared in proportion
    to the draws by the largest-remainder method (ties to the lower worker), so the sizes sum
    to ``n_train``. The shuffled training set is then cut into shards of those sizes.
    """

    sizes: SizeLaw
    order: Order = Order.DRAWN

    def __post_init__(self) -> None:
        if not isinstance(self.sizes, SizeLaw):
            raise PartitionError(
                "sizes", f"must be a law with sample(rng, size), got {self.sizes!r}"
            )
        _set_order(self)


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
    order: Order = Order.DRAWN

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise PartitionError("path", f"must be a non-empty path, got {self.path!r}")
        if self.sha256 is not None and (not isinstance(self.sha256, str) or not self.sha256):
            raise PartitionError("sha256", f"must be a hex digest or None, got {self.sha256!r}")
        _set_order(self)


@dataclass(frozen=True)
class Groups:
    """The data set's natural groups (writer, user, device): one group per worker.

    The distinct ids of the ``groups`` array, sorted, are workers ``0 .. n-1``.
    """

    order: Order = Order.DRAWN

    def __post_init__(self) -> None:
        _set_order(self)


PartitionSpec = Iid | Dirichlet | Classes | Quantity | FromFile | Groups


class Claim(NamedTuple):
    """A group of workers that alone holds some classes (speed-data correlation)."""

    workers: tuple[int, ...]
    classes: tuple[int, ...]


class Shards(NamedTuple):
    """Each worker's training-set indices, concatenated (CSR layout): worker w holds
    ``indices[offsets[w]:offsets[w + 1]]``, in a seeded random order."""

    indices: np.ndarray  # int64 [total]
    offsets: np.ndarray  # int64 [n_workers + 1], offsets[0] == 0, nondecreasing

    @property
    def n_workers(self) -> int:
        return self.offsets.size - 1

    @property
    def sizes(self) -> np.ndarray:
        """int64 [n_workers]: examples per worker."""
        return np.diff(self.offsets)

    def shard(self, worker: int) -> np.ndarray:
        return self.indices[self.offsets[worker] : self.offsets[worker + 1]]


def check_labels(labels: np.ndarray, n_classes: int) -> np.ndarray:
    n_classes = checked("n_classes", check_int, n_classes, 1)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise PartitionError(
            "labels",
            f"must be a 1-D integer array of classes, got {labels.dtype} of shape {labels.shape}",
        )
    bad = np.flatnonzero((labels < 0) | (labels >= n_classes))
    if bad.size:
        raise PartitionError(
            "labels",
            f"example {bad[0]} has class {labels[bad[0]]}, allowed 0 to {n_classes - 1}",
        )
    return labels.astype(np.int64, copy=False)
