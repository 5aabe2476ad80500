"""`server.protocol:` — the server protocol, a block tagged on `name` (a bare name as shorthand).

`{name: async}` (the default), `{name: sync}`, `{name: ssp, bound: 2}` (`bound: inf` or
YAML's `.inf` is unbounded), `{name: k_sync, k: 4}`, `{name: k_async, k: 4}`, `{name: grace,
seconds: 0.5}` (a grace period: `seconds: 0` is `async` itself); `bound` and `k` are integers
(`true` is not 1). A bare name is shorthand for a protocol without
parameters: `protocol: sync`, not `protocol: ssp`. Left out, the protocol is
`async`, or `sync` for the `sync` rule (its rounds are barriers unless a protocol is given).

Which rules accept which protocols: a rule that applies each commit as it comes (gem,
downpour, staleness, softsync, agn, easgd, dcasgd, delay_adaptive, ringmaster, rennala, malenia,
fedbuff, fadas, ca2fl, mifa, fedasync, server_momentum, gap_aware, eamsgd, and a rule by import
path whose `Rule` leaves `by_rounds` False) needs rounds of one commit: `async`, `ssp`, or
`k_sync`/`k_async` with `k: 1`. A rule that updates by rounds (`sync`, `local`, or
`by_rounds` True) accepts every protocol; under `async` and `ssp` each commit is its own
round.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, field_validator

from gemsim import timing

from ._block import Block
from ._optimizer import stops_field

if TYPE_CHECKING:
    from ._scenario import Scenario

ROUND_RULES = frozenset({"sync", "local"})
"""The built-in rules that update by rounds (their `Rule.by_rounds` is True)."""


class AsyncProtocol(Block):
    name: Literal["async"]

    def build(self) -> timing.ServerProtocol:
        return timing.Async()


class SyncProtocol(Block):
    name: Literal["sync"]

    def build(self) -> timing.ServerProtocol:
        return timing.Sync()


def _count(value: Any, field: str, minimum: int, *, infinite: bool = False) -> Any:
    """A count as JSON Schema's `integer` reads one: an integral number (2 or 2.0), never a
    bool nor a string; with ``infinite``, `inf` or YAML's `.inf` too (kept as the string
    `inf`, so that a resolved config stays plain JSON). ValueError saying what is allowed."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif infinite and (value == "inf" or (isinstance(value, float) and value == math.inf)):
        return "inf"
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        also = " or inf" if infinite else ""
        raise ValueError(f"{field} must be an integer >= {minimum}{also}")
    return value


StrictCount = Annotated[int, Field(strict=True)]

BOUND_JSON_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"const": "inf"},
        # +inf (YAML's .inf) and nothing else: the one number above the largest float.
        {"type": "number", "exclusiveMinimum": sys.float_info.max},
    ],
    "title": "Bound",
    "description": "commits of lead at most: an integer >= 0, or inf (unbounded)",
}


class SspProtocol(Block):
    """Stale synchronous parallel: `bound` commits of lead at most (an integer, or `inf`)."""

    name: Literal["ssp"]
    bound: Annotated[
        Annotated[StrictCount, Field(ge=0)] | Literal["inf"], WithJsonSchema(BOUND_JSON_SCHEMA)
    ]

    @field_validator("bound", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        return _count(value, "bound", 0, infinite=True)

    def build(self) -> timing.ServerProtocol:
        return timing.Ssp(math.inf if self.bound == "inf" else self.bound)


class KSyncProtocol(Block):
    name: Literal["k_sync"]
    k: Annotated[StrictCount, Field(gt=0)]

    @field_validator("k", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        return _count(value, "k", 1)

    def build(self) -> timing.ServerProtocol:
        return timing.KSync(self.k)


class KAsyncProtocol(Block):
    name: Literal["k_async"]
    k: Annotated[StrictCount, Field(gt=0)]

    @field_validator("k", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        return _count(value, "k", 1)

    def build(self) -> timing.ServerProtocol:
        return timing.KAsync(self.k)


class GraceProtocol(Block):
    """A grace period (Liu et al. 2024, Algorithm 2): the commits made within `seconds`
    virtual seconds of a round's first join it, and its workers pull together when it
    closes; `seconds: 0` is the asynchronous protocol itself (the same traces)."""

    name: Literal["grace"]
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]

    def build(self) -> timing.ServerProtocol:
        return timing.Grace(self.seconds) if self.seconds > 0 else timing.Async()


Protocol = Annotated[
    AsyncProtocol | SyncProtocol | SspProtocol | KSyncProtocol | KAsyncProtocol | GraceProtocol,
    Field(discriminator="name"),
]


def named(value: Any) -> Any:
    """`protocol: ssp` is shorthand for `protocol: {name: ssp}`."""
    return {"name": value} if isinstance(value, str) else value


def resolve_protocol(scenario: Scenario) -> timing.ServerProtocol:
    """The scenario's protocol: the one given, else `sync` for the sync rule, else `async`."""
    block = scenario.server.protocol
    rule = getattr(scenario.optimizer, "rule", None)
    if rule == "fedcompass":  # its scheduler is its protocol (`check_protocol` refuses others)
        return scenario.optimizer.protocol()
    if block is not None:
        return block.build()
    return timing.Sync() if rule == "sync" else timing.Async()


def check_protocol(scenario: Scenario) -> None:
    """Refuse a protocol the rule cannot follow, or a `k` larger than the cluster.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    protocol = resolve_protocol(scenario)
    if isinstance(protocol, timing.Compass):  # fedcompass's own, which it follows
        _check_compass(scenario)
        check_server_options(scenario, protocol)
        return
    count = scenario.workers.count
    if isinstance(protocol, timing.KSync | timing.KAsync) and protocol.k > count:
        raise ValueError(f"server.protocol.k: must be <= workers.count ({count}), got {protocol.k}")
    check_server_options(scenario, protocol)
    optimizer = scenario.optimizer
    if optimizer is None or timing.one_commit_rounds(protocol) or _by_rounds(optimizer):
        return
    given = "" if scenario.server.protocol is not None else " (the default for this rule)"
    raise ValueError(
        f"server.protocol: rule {_rule_name(optimizer)!r} applies each commit as it comes and "
        f"cannot follow {protocol.name!r}{given}, whose rounds hold several commits; allowed: "
        f"async, ssp, or k_sync/k_async with k: 1 (rules that update by rounds, such as "
        f"{', '.join(sorted(ROUND_RULES))}, accept every protocol)"
    )


def check_server_options(scenario: Scenario, protocol: timing.ServerProtocol) -> None:
    """Refuse `server.pull: before_apply`, `server.ties: by_worker` and a rule's stops
    (`optimizer.stops`, `optimizer.restarts`) where the timing model does not define them.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    server = scenario.server
    asked = [f"server.pull: {server.pull}"] if server.pull != "after_apply" else []
    field = stops_field(scenario.optimizer)
    if field is not None:
        asked.append(f"{field}: true")
    for what in asked:
        if not isinstance(protocol, timing.Async):
            raise ValueError(
                f"{what} needs server.protocol async, got {protocol.name!r}; allowed: async "
                f"(the other protocols decide themselves when workers pull)"
            )
        if scenario.clients is not None:
            raise ValueError(
                f"{what}: not supported with `clients:` (a population); allowed: leave it out"
            )
    if field is not None and server.pull != "after_apply":
        raise ValueError(
            f"{field}: true restarts workers on the version after a commit; allowed with "
            f"server.pull after_apply only, got {server.pull!r}"
        )
    if server.ties != "by_start" and scenario.clients is not None:
        raise ValueError(
            f"server.ties: {server.ties!r} orders workers by index, which a population's slots "
            f"do not have; allowed with `clients:`: by_start"
        )


def check_real_backend(scenario: Scenario) -> None:
    """Refuse what the real backends cannot do: a rule's stops (a real worker's computation
    in flight is not interrupted).

    Raises:
        ValueError: naming the field and what is allowed.
    """
    field = stops_field(scenario.optimizer)
    if field is not None:
        raise ValueError(
            f"{field}: true stops computations in flight, which the real backends do not do "
            f"(a worker process finishes what it computes); allowed on --backend process/ray: "
            f"false (simulate it, or replay a trace that has the stops)"
        )


def _by_rounds(optimizer: Any) -> bool:
    rule = optimizer.rule
    if isinstance(rule, str):
        return rule in ROUND_RULES
    return bool(optimizer.build().by_rounds)  # a rule by import path says it itself


def _rule_name(optimizer: Any) -> str:
    rule = optimizer.rule
    return rule if isinstance(rule, str) else rule.target


def _check_compass(scenario: Scenario) -> None:
    """FedCompass's scheduler where it is defined (`timing.Compass`): workers, or a
    population's clients, that stay up, no protocol of another kind, no queueing server."""
    given = scenario.server.protocol
    if given is not None and given.build() != timing.Async():
        raise ValueError(
            f"server.protocol: rule 'fedcompass' runs under its own scheduler (its arrival "
            f"groups), got {given.build().name!r}; allowed: server.protocol left out (or async)"
        )
    if scenario.budget.epochs_per_worker is not None:
        raise ValueError(
            "budget.epochs_per_worker: rule 'fedcompass' gives each task its own steps, so a "
            "budget per worker's steps is not defined; allowed: budget.commits or seconds"
        )
