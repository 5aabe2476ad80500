"""Server protocols: when the parameter server closes a round and which work it waits for.

A protocol decides only *when* commits happen, which version each gradient is computed on
and where rounds end (the trace's ``round_end`` column); what a round does to the parameters
is the update rule's business. Versions count commits, so a rule that updates by rounds sees
equal parameters at every version inside a round.

- `Async` (the default): every commit is applied at once and its worker pulls the new
  version with it; every commit closes a round.
- `Sync`: barrier rounds; every live worker computes one gradient on the round's version,
  and the round closes when all of them are committed (or lost to a crash).
- `Ssp` (stale synchronous parallel; Ho et al. 2013, "More Effective Distributed ML via a
  Stale Synchronous Parallel Parameter Server", NeurIPS): a worker's clock is the number of
  commits it has made; a worker starts its next gradient only while its clock leads the
  slowest live worker's by at most ``bound``, and otherwise blocks until it does. Every commit
  closes a round. ``bound = 0`` is lock-step rounds; ``bound = inf`` is `Async`.
- `KSync` and `KAsync` (Dutta, Joshi, Ghosh, Dube & Nagpurkar 2018, "Slow and Stale
  Gradients Can Win the Race", AISTATS, https://arxiv.org/abs/1803.01113): the server
  updates after the first ``k`` gradients. `KSync` starts every live worker on the round's
  version and cancels the work of the others when the k-th gradient arrives; with ``k = n`` it
  is `Sync`. `KAsync` takes the next ``k`` gradients from distinct workers, whatever version
  they were computed on: the contributors wait for the round to close and then pull, the
  others keep computing on their old version; with ``k = 1`` it is `Async`.
- `Grace` (the grace period of Liu, Douillard et al. 2024, "Asynchronous Local-SGD Training
  for Language Modeling", arXiv 2401.09135, Algorithm 2): workers compute asynchronously;
  the first commit after a round closed opens a window of ``seconds`` virtual seconds, and
  every commit made in it joins the round. Its workers wait; the round closes when the window
  ends or when no gradient is in flight any more (every live worker has joined), and they all
  pull its version and go on from the same model. ``seconds = 0`` is `Async`; a window longer
  than any worker's delay makes every round hold every worker, as `Sync` does. The paper and
  its public toy apply each member's pseudo-gradient as it arrives; here a rule that updates
  by rounds (`local`) averages a round's, as synchronous DiLoCo does, and a rule that applies
  each commit as it comes cannot follow rounds of several commits.
- `Compass` (the scheduler of FedCompass; Li, Chaturvedi, He, Chen, Singh, Kindratenko,
  Huerta, Kim & Madduri 2024, "FedCompass: Efficient Cross-Silo Federated Learning on
  Heterogeneous Client Devices Using a Computing Power-Aware Scheduler", ICLR,
  https://arxiv.org/abs/2309.14675): the server estimates each worker's seconds per local
  step from its arrivals and gives each task a number of local steps (between ``q_min`` and
  ``q_max``) so that the workers of an arrival group finish together; a group is aggregated
  when its last member arrives or at its latest arrival time (``latest`` times its expected
  one), members arriving later wait in a general buffer. `gemsim.timing._compass_run`; over
  a population's clients (estimates per client), `gemsim.timing._compass_population`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from gemsim._checks import check_int, is_real


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class Async:
    """Fully asynchronous: each commit is its own round."""

    name: ClassVar[str] = "async"


@dataclass(frozen=True)
class Sync:
    """Barrier rounds of every live worker, all on the round's version."""

    name: ClassVar[str] = "sync"


@dataclass(frozen=True)
class Ssp:
    """Stale synchronous parallel: no worker computes while its clock leads the slowest live
    worker's by more than ``bound`` (an integer >= 0, or ``math.inf``)."""

    bound: float
    name: ClassVar[str] = "ssp"

    def __post_init__(self) -> None:
        bound = self.bound
        if is_real(bound) and math.isinf(float(bound)) and float(bound) > 0:
            _set(self, "bound", math.inf)
        else:
            _set(self, "bound", check_int("Ssp.bound", bound, 0))


@dataclass(frozen=True)
class KSync:
    """The first ``k`` gradients of a round computed on its version; the rest cancelled."""

    k: int
    name: ClassVar[str] = "k_sync"

    def __post_init__(self) -> None:
        _set(self, "k", check_int("KSync.k", self.k, 1))


@dataclass(frozen=True)
class KAsync:
    """The next ``k`` gradients of distinct workers, whatever their version."""

    k: int
    name: ClassVar[str] = "k_async"

    def __post_init__(self) -> None:
        _set(self, "k", check_int("KAsync.k", self.k, 1))


@dataclass(frozen=True)
class Grace:
    """Rounds of the commits made within ``seconds`` (a finite number > 0) of the round's
    first; the round's workers then pull together."""

    seconds: float
    name: ClassVar[str] = "grace"

    def __post_init__(self) -> None:
        ok = is_real(self.seconds) and math.isfinite(self.seconds) and self.seconds > 0
        if not ok:
            raise ValueError(
                f"Grace.seconds must be a finite number > 0 (0 is Async), got {self.seconds!r}"
            )
        _set(self, "seconds", float(self.seconds))


@dataclass(frozen=True)
class Compass:
    """FedCompass's arrival groups: ``q_min <= q_max`` local steps a task (integers >= 1),
    groups aggregated by ``latest`` (>= 1) times their expected arrival at the latest,
    speed estimates averaged with weight ``speed_momentum`` (in (0, 1]) on the newest."""

    q_max: int
    q_min: int
    latest: float = 1.5
    speed_momentum: float = 0.9
    name: ClassVar[str] = "compass"

    def __post_init__(self) -> None:
        _set(self, "q_max", check_int("Compass.q_max", self.q_max, 1))
        _set(self, "q_min", check_int("Compass.q_min", self.q_min, 1))
        if self.q_min > self.q_max:
            raise ValueError(
                f"Compass.q_min {self.q_min} exceeds q_max {self.q_max}; allowed: "
                f"1 <= q_min <= q_max"
            )
        latest = self.latest
        if not (is_real(latest) and math.isfinite(latest) and latest >= 1.0):
            raise ValueError(f"Compass.latest must be a finite number >= 1, got {latest!r}")
        _set(self, "latest", float(latest))
        m = self.speed_momentum
        if not (is_real(m) and 0.0 < m <= 1.0):
            raise ValueError(f"Compass.speed_momentum must be in (0, 1], got {m!r}")
        _set(self, "speed_momentum", float(m))


ServerProtocol: TypeAlias = Async | Sync | Ssp | KSync | KAsync | Grace | Compass
"""Any protocol of the parameter server."""

PROTOCOL_TYPES: tuple[type, ...] = (Async, Sync, Ssp, KSync, KAsync, Grace, Compass)


def one_commit_rounds(protocol: ServerProtocol) -> bool:
    """Whether every round of ``protocol`` holds a single commit, so that a rule which applies
    each commit as it comes (rather than by rounds) still follows the protocol."""
    if isinstance(protocol, Async | Ssp):
        return True
    if isinstance(protocol, KSync | KAsync):
        return protocol.k == 1
    return False
