"""What every partition module shares: the error an impossible partition raises, the check
helpers the specs use, the speed order, the shards a partition gives, and a claim.

The specs are in ``_specs.py`` and ``_label_specs.py``; the drawing in
``_partitions.py`` and the modules it imports (which all re-export from here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from gemsim._checks import check_enum, check_int, check_positive, check_real

__all__ = [
    "PARTITION_KEY",
    "SIZE_FUNCTIONS",
    "BySpeed",
    "Claim",
    "IdSizes",
    "Order",
    "PartitionError",
    "Shards",
    "SizeLaw",
    "SpeedOrder",
    "check_alpha",
    "check_labels",
    "check_order",
    "checked",
    "set_order",
    "set_samples",
]

PARTITION_KEY = 0x9A27
"""Spawn key of the partition generator, apart from the timing model's ``(0, w)`` and ``(1,)``
and the problem's ``(0x9E, tag)`` streams (the value is part of the format)."""


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


def check_alpha(value: object) -> float | tuple[float, ...]:
    """A concentration: a finite number > 0, or a non-empty sequence of them (a tuple)."""
    if isinstance(value, list | tuple | np.ndarray):
        values = tuple(np.asarray(value, dtype=object).ravel().tolist())
        if not values:
            raise PartitionError("alpha", "must be a number > 0 or a non-empty list of them")
        for i, v in enumerate(values):
            try:
                check_positive("alpha", v)
            except ValueError:
                raise PartitionError(
                    "alpha", f"entry {i} is {v!r}; allowed: finite numbers > 0"
                ) from None
        return tuple(float(v) for v in values)
    return checked("alpha", check_positive, value)


class Order(StrEnum):
    """Which worker gets which drawn shard."""

    DRAWN = "drawn"
    """Shard ``i`` of the draw goes to the ``i``-th worker."""
    BY_SPEED = "by_speed"
    """The most skewed (label partitions) or largest (others) shards go to the slowest."""


@dataclass(frozen=True)
class BySpeed:
    """Shards matched to speeds with a rank correlation of strength ``rho`` in [-1, 1]: the
    drawn shards, most skewed (label partitions) or largest (others) first, go to the
    workers in the order of a Gaussian copula's latent ``rho s + sqrt(1 - rho^2) e``, ``s``
    the normal score of the worker's slowness rank and ``e`` a standard normal of its own
    (``_order.py``). ``rho = 1`` is `Order.BY_SPEED`'s assignment exactly, 0
    independent of speed, -1 the reverse (the most skewed shards to the fastest)."""

    rho: float

    def __post_init__(self) -> None:
        try:
            rho = check_real("by_speed", self.rho, low=-1.0, high=1.0)
        except ValueError as exc:
            raise PartitionError("order", f"{exc} (rho, the strength of the tie)") from None
        object.__setattr__(self, "rho", rho)


SpeedOrder = Order | BySpeed
"""Which worker gets which drawn shard: in drawn order, by speed, or by speed with a rank
correlation ``rho``."""


def check_order(value: object) -> Order | BySpeed:
    """An `Order`, its value string, a `BySpeed` or ``{"by_speed": rho}``."""
    if isinstance(value, BySpeed):
        return value
    if isinstance(value, Mapping) and set(value) == {"by_speed"}:
        return BySpeed(value["by_speed"])
    return checked("order", check_enum, value, Order)


def set_order(spec: object) -> None:
    object.__setattr__(spec, "order", check_order(spec.order))


def set_samples(spec: object) -> None:
    if spec.samples is not None:
        checked("samples", check_int, spec.samples, 1)


@runtime_checkable
class SizeLaw(Protocol):
    """A law of positive numbers (gemsim.timing's distributions are ones)."""

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray: ...


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


SIZE_FUNCTIONS = ("linear", "square", "exponential")
"""The deterministic size laws: worker w (1-based) weighs w, w^2 or e^w."""


class IdSizes(NamedTuple):
    """Shard sizes that are a fixed function of the worker's id (Flower Datasets'
    ``LinearPartitioner``, ``SquarePartitioner`` and ``ExponentialPartitioner``): worker w
    weighs f(w + 1), f = identity, square or exp, and holds ``floor(weight share * n)``
    examples, the last worker the rest (the same sizes as Flower's)."""

    law: str

    def check(self) -> IdSizes:
        if self.law not in SIZE_FUNCTIONS:
            raise PartitionError(
                "law", f"unknown size law {self.law!r}; allowed: {', '.join(SIZE_FUNCTIONS)}"
            )
        return self
