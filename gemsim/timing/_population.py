"""A population of clients served by K slots: the typed description (`Population`).

Asynchronous federated training keeps K trainings in flight and, each time one returns,
starts another on a client drawn from a population of N. With a population, a
`ClusterSpec`'s ``workers`` are the K *slots*: their compute law, speed and network are the
cluster's, a client's compute time is the slot's draw divided by the client's speed factor,
and the clients' availability (churn, an availability file) is the population's. How a run
of it is simulated is `gemsim.timing._population_run`'s; the clients' calendars and speeds
are `gemsim.timing._calendar`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np

from gemsim._checks import check_enum, check_instance, check_int

from ._churn import Churn, check_intervals
from ._distributions import DISTRIBUTION_TYPES, Distribution, Uniform


class Selection(StrEnum):
    """How a free slot chooses its next client among those up and not in another slot's task.

    UNIFORM: uniformly at random. ROUND_ROBIN: the next client id after the last one chosen,
    cyclically, skipping those down or busy. WEIGHTED: with probability proportional to
    `Population.weights` (e.g. each client's data size); a client of weight 0 is never chosen.
    """

    UNIFORM = "uniform"
    ROUND_ROBIN = "round_robin"
    WEIGHTED = "weighted"


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


Intervals = tuple[tuple[float, float], ...]


class ClientIntervals(Mapping[int, Intervals]):
    """A read-only mapping of client id to its down intervals, in id order: equal, hashed and
    pickled by value (a spec travels to other processes)."""

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[int, Intervals] | Sequence[tuple[int, Intervals]]) -> None:
        self._data = dict(sorted(dict(items).items()))

    def __getitem__(self, client: int) -> Intervals:
        return self._data[client]

    def __iter__(self) -> Iterator[int]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __reduce__(self):
        return (ClientIntervals, (tuple(self._data.items()),))

    def __repr__(self) -> str:
        return f"ClientIntervals({self._data!r})"


class ClientGroup(NamedTuple):
    """Clients ``first .. first + count - 1`` and the law of their speed factors (None: 1)."""

    first: int
    count: int
    speed: Distribution | None


@dataclass(frozen=True)
class Population:
    """N clients, each with its own speed factor, churn and availability.

    Attributes:
        n_clients: N, the number of clients (ids ``0..N-1``), at least the slots' number.
        speed: the law of each client's speed factor (a client's compute time is its slot's
            draw divided by it), drawn once per client; None: 1 for every client. Its draws
            must be > 0: a law that can draw 0 or less is refused.
        churn: each client's alternating up and down periods (drawn from its own streams),
            or None.
        availability: down intervals ``(down_at, up_at)`` per client id (``up_at`` may be
            ``inf``), as an availability file gives them; clients not named are never down
            but for churn. Ids must lie in ``[0, n_clients)``.
        selection: how a free slot chooses its next client (`Selection`).
        weights: with `Selection.WEIGHTED`, one weight >= 0 per client (their sum > 0);
            None otherwise.
        groups: runs of consecutive clients whose speed factors follow a law of their own
            (`ClientGroup`, in increasing id order, disjoint); the clients in no group follow
            ``speed``. Empty: every client follows ``speed``.

    A population whose clients are all down for good from some time on ends its run then
    (a CommitBudget may not be reached), as persistent workers that are all gone do; one whose
    clients are all down for good from t = 0 is refused.
    """

    n_clients: int
    speed: Distribution | None = None
    churn: Churn | None = None
    availability: Mapping[int, Intervals] | None = None
    selection: Selection = Selection.UNIFORM
    weights: tuple[float, ...] | None = None
    groups: tuple[ClientGroup, ...] = ()

    def __post_init__(self) -> None:
        n = check_int("Population.n_clients", self.n_clients, 1)
        _set(self, "n_clients", n)
        _check_speed_law("Population.speed", self.speed)
        _set(self, "groups", _checked_groups(self.groups, n))
        check_instance("Population.churn", self.churn, (Churn,), optional=True)
        _set(self, "selection", check_enum("Population.selection", self.selection, Selection))
        if self.availability is not None:
            _set(self, "availability", _checked_availability(self.availability, n))
        _set(self, "weights", self._checked_weights())

    @property
    def draws_speeds(self) -> bool:
        """Whether any client's speed factor is drawn (else every one is 1)."""
        return self.speed is not None or any(g.speed is not None for g in self.groups)

    def speed_segments(self) -> list[tuple[int, int, Distribution | None]]:
        """``(start, stop, law)`` runs covering the client ids in order: the groups' and, in
        between, the population's own law."""
        segments, at = [], 0
        for group in self.groups:
            if group.first > at:
                segments.append((at, group.first, self.speed))
            at = group.first + group.count
            segments.append((group.first, at, group.speed))
        if at < self.n_clients:
            segments.append((at, self.n_clients, self.speed))
        return segments

    def _checked_weights(self) -> tuple[float, ...] | None:
        weights = self.weights
        if self.selection is not Selection.WEIGHTED:
            if weights is not None:
                raise ValueError(
                    f"Population.weights are only for selection {Selection.WEIGHTED.value!r}, "
                    f"got weights with selection {self.selection.value!r}"
                )
            return None
        if weights is None or isinstance(weights, str | bytes):
            raise ValueError(
                f"Population.weights: selection {Selection.WEIGHTED.value!r} needs one weight "
                f"per client ({self.n_clients}), got {weights!r}"
            )
        array = np.asarray(weights)
        if array.ndim != 1 or len(array) != self.n_clients or array.dtype.kind not in "iuf":
            raise ValueError(
                f"Population.weights must be {self.n_clients} numbers (one per client), got "
                f"{array.dtype} of shape {array.shape}"
            )
        array = array.astype(np.float64)
        bad = ~np.isfinite(array) | (array < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"Population.weights[{i}] must be a finite number >= 0, got {array[i]!r}"
            )
        if not array.sum() > 0:
            raise ValueError("Population.weights must not all be 0 (no client could be chosen)")
        return tuple(array.tolist())


def _check_speed_law(name: str, law: object) -> None:
    check_instance(name, law, DISTRIBUTION_TYPES, optional=True)
    # A uniform law from 0 has no atom at 0 but draws 0.0 itself (and speeds near 0).
    zero_low = isinstance(law, Uniform) and law.low == 0.0
    if law is not None and (zero_low or law.survival(0.0) < 1.0):
        raise ValueError(
            f"{name} must draw values > 0 only (a client of speed 0 would never finish a "
            f"task), got {law!r}, which can draw 0; allowed: a law of positive support (e.g. "
            f"lognormal, gamma, a uniform from low > 0)"
        )


def _checked_groups(groups: object, n: int) -> tuple[ClientGroup, ...]:
    """The groups as `ClientGroup`s: consecutive ids inside ``[0, n)``, increasing, disjoint."""
    if not isinstance(groups, Sequence) or isinstance(groups, str | bytes):
        raise ValueError(f"Population.groups must be a sequence of ClientGroup, got {groups!r}")
    out, end = [], 0
    for i, group in enumerate(groups):
        name = f"Population.groups[{i}]"
        if not isinstance(group, tuple) or len(group) != 3:
            raise ValueError(f"{name} must be a ClientGroup(first, count, speed), got {group!r}")
        first = check_int(f"{name}.first", group[0], end)  # after the previous group
        count = check_int(f"{name}.count", group[1], 1, n - first)
        _check_speed_law(f"{name}.speed", group[2])
        out.append(ClientGroup(first, count, group[2]))
        end = first + count
    return tuple(out)


def _checked_availability(value: object, n: int) -> ClientIntervals:
    """Per-client down intervals as a read-only mapping of sorted, checked tuples; refuses ids
    outside ``[0, n)`` and a population whose every client is down for good from t = 0."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"Population.availability must be a mapping of client id to (down_at, up_at) "
            f"pairs, got {type(value).__name__}"
        )
    out: dict[int, Intervals] = {}
    for client, intervals in value.items():
        ok = isinstance(client, int | np.integer) and not isinstance(client, bool)
        if not ok or not 0 <= client < n:
            raise ValueError(
                f"Population.availability names client {client!r}; allowed: client ids in "
                f"[0, {n}) (n_clients = {n})"
            )
        out[int(client)] = check_intervals(f"Population.availability[{int(client)}]", intervals)
    if len(out) == n and all(_down_for_good_from_zero(ivs) for ivs in out.values()):
        raise ValueError(
            f"Population.availability holds all {n} clients down for good from t = 0: no "
            f"client can ever be selected; allowed: at least one client up at some time"
        )
    return ClientIntervals(out)


def _down_for_good_from_zero(intervals: Sequence[tuple[float, float]]) -> bool:
    """Whether sorted down intervals cover ``[0, inf)``."""
    reach = 0.0
    for start, end in intervals:
        if start > reach:
            return False
        reach = max(reach, end)
        if math.isinf(reach):
            return True
    return False
