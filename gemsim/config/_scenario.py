"""The scenario: the root of the schema. Field names here are gemsim's public interface."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PositiveInt, model_validator

from ._block import Block
from ._cluster_blocks import (
    BudgetBlock,
    EngineBlock,
    EvalBlock,
    NetworkBlock,
    ServerBlock,
    WorkersBlock,
)
from ._optimizer import Optimizer
from ._problem_blocks import ProblemBlock

# Fields a sweep may not vary: they define the sweep itself.
UNSWEEPABLE = ("name", "sweep", "repeats", "seeds")


class Scenario(Block):
    name: Annotated[str, Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.\-]+$")]
    seed: Annotated[int, Field(ge=0, lt=2**32)]
    workers: WorkersBlock
    network: NetworkBlock = NetworkBlock()
    server: ServerBlock = ServerBlock()
    budget: BudgetBlock
    problem: ProblemBlock | None = None
    optimizer: Optimizer | None = None
    eval: EvalBlock = EvalBlock()
    engine: EngineBlock = EngineBlock()
    sweep: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    repeats: PositiveInt = 1
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _consistent(self):
        if self.budget.epochs_per_worker is not None and self.problem is None:
            raise ValueError("budget.epochs_per_worker needs a `problem` block (its train size)")
        if self.seeds is not None and self.repeats != 1:
            raise ValueError("give `repeats` or `seeds`, not both")
        for path in self.sweep:
            if path.split(".")[0] in UNSWEEPABLE:
                raise ValueError(f"sweep path {path!r} cannot be swept")
        return self
