"""Expanding `sweep` x `repeats` (or `seeds`) into runs, each with a stable id."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._block import Block
from ._errors import ScenarioError
from ._loader import parse_scenario, set_path
from ._scenario import Scenario


@dataclass(frozen=True)
class ExpandedRun:
    """One run of a sweep: a scenario with no sweep left in it, and where it came from."""

    scenario: Scenario
    sweep_values: dict[str, Any]
    repeat: int
    config_hash: str

    @property
    def config(self) -> dict[str, Any]:
        return resolved_config(self.scenario)


def resolved_config(scenario: Scenario) -> dict[str, Any]:
    """Every field with its default filled in, as plain JSON values."""
    return scenario.model_dump(mode="json", by_alias=True, exclude={"sweep", "repeats", "seeds"})


def config_hash(scenario: Scenario) -> str:
    """The sha256 of what a run is: its resolved configuration, less how it executes beside
    other runs (`engine.many_runs`, like `--jobs`)."""
    config = resolved_config(scenario)
    config["engine"] = {k: v for k, v in config["engine"].items() if k != "many_runs"}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def repeat_seeds(scenario: Scenario, seed: int | None = None) -> list[int]:
    """Repeat r uses seed + r unless an explicit list of `seeds` is given."""
    if scenario.seeds is not None:
        return list(scenario.seeds)
    seed = scenario.seed if seed is None else seed
    return [seed + r for r in range(scenario.repeats)]


def expand(scenario: Scenario, source: str = "<scenario>", base_dir: Path | None = None):
    """All runs of a scenario, in grid order (first sweep path varies slowest), then repeats.

    Every expanded configuration is validated before any run starts; a bad sweep path or
    value raises a ScenarioError naming it.
    """
    base = scenario.model_dump(mode="python", exclude_unset=True, by_alias=True)
    base = {k: v for k, v in _plain(base).items() if k not in ("sweep", "repeats", "seeds")}
    paths = list(scenario.sweep)
    # The blocks no sweep path enters are passed as the validated blocks they are (pydantic
    # does not validate a block's instance again; the checks across blocks still run): a
    # workers block of 256 groups took 5 ms a run to validate anew.
    touched = {path.split(".")[0] for path in paths}
    kept = {
        name: getattr(scenario, name)
        for name in base
        if name not in touched and isinstance(getattr(scenario, name, None), Block)
    }
    grid = itertools.product(*(scenario.sweep[p] for p in paths))
    runs = []
    for values in grid:
        point = dict(zip(paths, values, strict=True))
        data = base
        for path, value in point.items():
            try:
                data = set_path(data, path, value)
            except ValueError as exc:
                raise ScenarioError(source, [f"sweep.{path}: {exc}"]) from None
        seeds = repeat_seeds(
            scenario, point.get("seed") if isinstance(point.get("seed"), int) else None
        )
        for repeat, seed in enumerate(seeds):
            where = f"{source} (sweep point {point}, seed {seed})" if point else source
            run = parse_scenario({**data, **kept, "seed": seed}, where, base_dir=base_dir)
            runs.append(ExpandedRun(run, point, repeat, config_hash(run)))
    return runs


def _plain(value: Any) -> Any:
    """Pydantic models dumped in python mode may still hold tuples; keep plain dicts/lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
