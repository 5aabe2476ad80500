"""The quadratic scenario the tests share, as a plain mapping: a cheap problem for the tests
of timing, processes, sweeps and the command line, where the model is not the point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

QUADRATIC_PROBLEM = {
    "model": {"name": "quadratic", "dim": 8, "condition": 10.0, "noise": 0.1},
    "batch_size": 1,
}


def quadratic_doc(
    *,
    name: str = "quad",
    seed: int = 11,
    workers: int = 4,
    commits: int = 200,
    dim: int = 8,
    every: int = 50,
    **blocks: Any,
) -> dict[str, Any]:
    """GEM on the noisy quadratic with exponential compute; `blocks` replace whole blocks or
    add top-level fields (`engine`, `repeats`, `sweep`, ...)."""
    problem = {**QUADRATIC_PROBLEM, "model": {**QUADRATIC_PROBLEM["model"], "dim": dim}}
    doc = {
        "name": name,
        "seed": seed,
        "workers": {"count": workers, "compute": {"dist": "exponential", "mean": 0.1}},
        "budget": {"commits": commits},
        "problem": problem,
        "optimizer": {"rule": "gem", "lr": 0.05},
        "eval": {"every": every},
    }
    return {**doc, **blocks}


def write_doc(folder: Path, doc: dict[str, Any], name: str = "s.yaml") -> Path:
    """The scenario written as a YAML file in `folder`."""
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(doc))
    return path
