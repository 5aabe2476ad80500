"""The scenario: the root of the schema. Field names here are gemsim's public interface."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PositiveInt, model_validator

from ._block import ADDED, Block
from ._cluster_blocks import (
    BudgetBlock,
    EngineBlock,
    EvalBlock,
    NetworkBlock,
    ServerBlock,
    WorkersBlock,
)
from ._optimizer import Optimizer
from ._population_blocks import ClientsBlock
from ._problem_blocks import ProblemBlock
from ._protocol_blocks import resolve_protocol

# Fields a sweep may not vary: they define the sweep itself.
UNSWEEPABLE = ("name", "sweep", "repeats", "seeds")


class Scenario(Block):
    name: Annotated[str, Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.\-]+$")]
    seed: Annotated[int, Field(ge=0, lt=2**32)]
    workers: WorkersBlock
    network: NetworkBlock = NetworkBlock()
    server: ServerBlock = ServerBlock()
    budget: BudgetBlock
    clients: Annotated[ClientsBlock | None, ADDED] = None
    problem: ProblemBlock | None = None
    optimizer: Optimizer | None = None
    eval: EvalBlock = EvalBlock()
    engine: EngineBlock = EngineBlock()
    sweep: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    repeats: PositiveInt = 1
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _slots(cls, data: Any) -> Any:
        """With `clients`, `workers.count` (the slots) may be left out: it is the
        concurrency."""
        if not isinstance(data, dict) or not isinstance(data.get("clients"), dict):
            return data
        workers, k = data.get("workers"), data["clients"].get("concurrency")
        if isinstance(workers, dict) and "count" not in workers and k is not None:
            return {**data, "workers": {**workers, "count": k}}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if self.budget.epochs_per_worker is not None and self.problem is None:
            raise ValueError("budget.epochs_per_worker needs a `problem` block (its train size)")
        if self.seeds is not None and self.repeats != 1:
            raise ValueError("give `repeats` or `seeds`, not both")
        for path in self.sweep:
            if path.split(".")[0] in UNSWEEPABLE:
                raise ValueError(f"sweep path {path!r} cannot be swept")
        if self.clients is not None:
            _check_population(self)
        return self


def _check_population(scenario: Scenario) -> None:
    """What a population's slots cannot have (the clients have it instead)."""
    clients, workers = scenario.clients, scenario.workers
    if workers.count != clients.concurrency:
        raise ValueError(
            f"workers.count ({workers.count}) is the number of slots, clients.concurrency "
            f"({clients.concurrency}): make them equal, or leave workers.count out"
        )
    own = [
        name
        for name in ("groups", "failures", "joins", "churn", "availability", "slowdowns")
        if getattr(workers, name)
    ]
    if own and own[0] == "groups":
        raise ValueError(
            "workers.groups: with `clients`, the slots have no groups of their own; give the "
            "clients groups (clients.groups: a fraction of the clients each, with its speed "
            "law and data)"
        )
    if own:
        raise ValueError(
            f"workers.{own[0]}: with `clients`, the slots have no {own[0]} of their own; give "
            "the clients churn or an availability file (clients.churn, clients.availability)"
        )
    if "clients" in scenario.eval.model_fields_set and scenario.eval.clients > clients.population:
        raise ValueError(
            f"eval.clients: {scenario.eval.clients} exceeds the population's "
            f"{clients.population} clients (clients.population); allowed: 1 to "
            f"{clients.population}"
        )
    if scenario.budget.epochs_per_worker is not None:
        raise ValueError(
            "budget.epochs_per_worker: a population's slots change client at every task; "
            "give budget.commits or budget.seconds"
        )
    protocol = resolve_protocol(scenario)
    if protocol.name == "compass":  # its scheduler over the population's clients
        if clients.churn is not None or clients.availability is not None:
            raise ValueError(
                "clients: rule 'fedcompass' groups clients that stay up (a group waits for "
                "its members); allowed: no clients.churn and no clients.availability"
            )
        return
    if protocol.name != "async":
        given = "" if scenario.server.protocol is not None else " (the default for this rule)"
        raise ValueError(
            f"server.protocol: a population runs the async protocol only, got "
            f"{protocol.name!r}{given}; allowed: async"
        )
