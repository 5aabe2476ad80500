"""The timing stage stands alone: no JAX, no sibling stages (docs/design.md §2)."""

import ast
from pathlib import Path

import gemsim.timing

FORBIDDEN = ("jax", "jaxlib", "optax", "gemsim.rules", "gemsim.problems", "gemsim.results")
FORBIDDEN += ("gemsim.engine", "gemsim.scenario", "gemsim.real", "gemsim.cli")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_timing_modules_import_neither_jax_nor_sibling_stages():
    files = sorted(Path(gemsim.timing.__file__).parent.glob("*.py"))
    assert len(files) > 5
    for path in files:
        for name in _imports(path):
            assert not any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN), (
                f"{path.name} imports {name}"
            )


def test_public_names_are_exported():
    expected = {
        "simulate",
        "ClusterSpec",
        "WorkerSpec",
        "Failure",
        "Discipline",
        "CommitBudget",
        "StepsBudget",
        "SecondsBudget",
        "CommitTrace",
        "staleness_summary",
        "format_histogram",
        "geometric_pmf",
        "expected_worker_staleness",
        "total_variation",
        "Constant",
        "Uniform",
        "Exponential",
        "LogNormal",
        "Gamma",
        "Weibull",
        "Pareto",
        "Empirical",
        "Mixture",
    }
    assert expected <= set(dir(gemsim.timing))
