"""Which runs of a sweep may execute together in one compiled program (`engine.many_runs`),
and the rule of such a group, built from each run's own hyperparameter values.

Runs execute together when everything their compiled code depends on is equal: the problem
block, the number of workers, the evaluation and engine settings, and the optimizer block up
to its float values. What shapes only a run's trace or its random streams may differ (the
seed, the workers' laws, churn and slowdowns, the network, the server, the budget), and so
may the optimizer's floats (a learning rate, kappa, a momentum): those reach the rule as
traced scalars (`lifted_rule`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ._build import with_scenario_clients
from ._scenario import Scenario
from ._sweep import resolved_config

FLOAT = "<float>"
"""What stands for a float value of the optimizer block in a many-runs signature."""


def many_runs_signature(scenario: Scenario) -> tuple[str, dict[str, float]]:
    """``(signature, floats)``: runs with equal signatures may execute together; ``floats``
    holds the optimizer block's float values by dotted path (e.g. ``lr``, ``inner.b1``)."""
    config = resolved_config(scenario)
    for field in ("name", "seed", "network", "server", "budget"):
        config.pop(field, None)
    workers = config["workers"]
    config["workers"] = {"count": workers["count"]}
    windows = [g.get("window") for g in workers.get("groups", [])]
    if any(w is not None for w in windows):  # own local steps: their programs differ
        config["workers"]["windows"] = windows
    config["engine"] = {k: v for k, v in config["engine"].items() if k != "many_runs"}
    floats: dict[str, float] = {}
    config["optimizer"] = _strip_floats(config.get("optimizer"), (), floats)
    return json.dumps(config, sort_keys=True, separators=(",", ":")), floats


def lifted_rule(
    scenario: Scenario, paths: tuple[str, ...], rows: int | None = None
) -> Callable[[Mapping[str, Any]], Any]:
    """``rule_of(values)``: the scenario's rule with the optimizer fields at ``paths`` set
    to ``values[path]`` (floats, or traced scalars inside a compiled many-runs program), its
    per-client state in ``rows`` rows where given (`with_scenario_clients`). The
    blocks are copied without validation: each run's own values were checked when it was
    loaded, and a traced value cannot be compared."""
    block = scenario.optimizer
    if block is None:
        raise ValueError("the scenario has no `optimizer` block")

    def rule_of(values: Mapping[str, Any]):
        if set(values) != set(paths):
            raise ValueError(f"expected values for {sorted(paths)}, got {sorted(values)}")
        replaced = block
        for path, value in values.items():
            replaced = _with_value(replaced, path.split("."), value)
        return with_scenario_clients(replaced.build(), scenario, rows)

    return rule_of


def _strip_floats(value: Any, path: tuple[str, ...], floats: dict[str, float]) -> Any:
    if isinstance(value, float):
        floats[".".join(path)] = value
        return FLOAT
    if isinstance(value, dict):
        return {k: _strip_floats(v, (*path, str(k)), floats) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_floats(v, (*path, str(i)), floats) for i, v in enumerate(value)]
    return value


def _with_value(node: Any, path: list[str], value: Any) -> Any:
    """A copy of a block (a pydantic model, a dict or a list) with the field at `path` set."""
    head, rest = path[0], path[1:]
    if isinstance(node, BaseModel):
        name = _field_name(node, head)
        child = getattr(node, name)
        return node.model_copy(update={name: _with_value(child, rest, value) if rest else value})
    if isinstance(node, dict):
        key = head if head in node else _int_key(node, head)
        return {**node, key: _with_value(node[key], rest, value) if rest else value}
    if isinstance(node, list | tuple):
        i = int(head)
        items = list(node)
        items[i] = _with_value(items[i], rest, value) if rest else value
        return type(node)(items)
    raise ValueError(f"no field {head!r} in {type(node).__name__}")


def _field_name(model: BaseModel, key: str) -> str:
    """The attribute behind a dumped key (dumps use aliases)."""
    for name, info in type(model).model_fields.items():
        if key in (name, info.alias):
            return name
    if key in (model.model_extra or {}):
        return key  # a keyword argument of an optax or import-path block
    raise ValueError(f"no field {key!r} in {type(model).__name__}")


def _int_key(node: dict, key: str) -> Any:
    for k in node:
        if str(k) == key:
            return k
    raise ValueError(f"no key {key!r}")
