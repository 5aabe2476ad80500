"""`gemsim.run`: timing -> engine -> record, for one run (simulated, replayed or real), the
checks made on every expanded run before the first one starts, and writing a result's folder
(deprecated). Sweeps of runs are driven by _run_sweep.py."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path

from gemsim import config
from gemsim.config import ExpandedRun, Scenario, ScenarioError
from gemsim.results import RunResult
from gemsim.trace import CommitTrace
from gemsim.types import BACKENDS, Progress

from ..execute._real import real_run
from ..execute._simulated import simulated_run
from ..execute._stages import check_problem
from ..record._identity import RunIdentity, RunKind, expanded_of
from ..record._provenance import api_call
from ..record._record import record_of


@api_call("gemsim.run")
def run(
    scenario: Scenario | ExpandedRun,
    *,
    progress: Progress | None = None,
    trace: CommitTrace | None = None,
    trace_path: str | None = None,
    backend: str = "sim",
    address: str | None = None,
) -> RunResult:
    """Simulate the timing, execute the trace with real gradients, and collect the results.

    With `trace`, the timing model is skipped and that trace is replayed (e.g. one recorded
    by a real backend, or saved by `gemsim trace --out`): the run's kind is then `replay`
    and its identity includes the trace's hash. With `backend="process"` or `"ray"` the
    scenario runs for real instead (gemsim.real) and its recorded trace is returned;
    `address` joins an existing Ray cluster.
    """
    from ..execute._compile_cache import setup_compilation_cache

    setup_compilation_cache()
    expanded = expanded_of(scenario)
    if backend not in BACKENDS:
        raise ScenarioError(
            expanded.scenario.name, [f"backend: {backend!r} is not one of {BACKENDS}"]
        )
    if backend != "sim" and trace is not None:
        raise ValueError("a real backend records its own trace; give no `trace`")
    if backend != "sim":
        who = RunIdentity.of(expanded, RunKind(backend))
        return record_of(who, real_run(who, progress, address))
    kind = RunKind.REPLAY if trace is not None else RunKind.SIM
    who = RunIdentity.of(expanded, kind, trace=trace, trace_path=trace_path)
    return record_of(who, simulated_run(who, trace, progress))


def preflight(
    runs: list[ExpandedRun], source: str, *, needs: Iterable[str], backend: str = "sim"
) -> list[str]:
    """Every check that can fail before running, on every expanded run, before the first
    starts: the blocks running needs, the rule's hyperparameters, the problem's data (its
    files exist and give its sizes, its training set holds a batch), how much work the
    timing model would do (churn and slowdowns), the memory a rule's per-client state takes,
    and on a real `backend` what it cannot run. Raises one ScenarioError listing every
    problem; returns the notes to print before running (each once: the per-client state)."""
    from ._timing_only import check_batch_size, checked_cluster

    notes: list[str] = []
    problems: list[str] = []
    done: set[tuple[str, str]] = set()  # the checks passed, by what they depend on
    for i, expanded in enumerate(runs):
        scenario = expanded.scenario
        where = f"run {i + 1}/{len(runs)}" + (
            f" {expanded.sweep_values}" if expanded.sweep_values else ""
        )
        for block in needs:
            if getattr(scenario, block) is None:
                problems.append(f"{block}: required by this command (add a `{block}:` block)")
        try:
            if scenario.optimizer is not None:
                config.build_rule(scenario)
            problem_key, cluster_key = _check_keys(scenario)
            if scenario.problem is not None and ("problem", problem_key) not in done:
                check_problem(scenario)
                check_batch_size(scenario)
                done.add(("problem", problem_key))
            if scenario.optimizer is not None and scenario.problem is not None:
                note = config.check_client_state(scenario)
                if note is not None and note not in notes:
                    notes.append(note)
            if ("cluster", cluster_key) not in done:
                checked_cluster(scenario, model_bytes=False)
                done.add(("cluster", cluster_key))
            if backend != "sim":
                config.check_real_backend(scenario)
        except (ValueError, OSError, TypeError) as exc:
            problems.append(f"{where}: {exc}")
    if problems:
        raise ScenarioError(source, list(dict.fromkeys(problems)))
    return notes


def _check_keys(scenario: Scenario) -> tuple[str, str]:
    """What `preflight`'s problem and cluster checks of a run depend on, so that the runs of a
    sweep that share it are checked once (a sweep's learning rates, a cluster's repeats: the
    cluster check bisects every worker's law, 0.15 s at n = 256). The problem's: everything
    but the name, the budget, the network, the server and the optimizer; the cluster's:
    everything but the name and the optimizer's floats (no float of it reaches the cluster),
    and the seed unless an epochs budget sizes the cluster from the data set."""
    resolved = scenario.model_dump(mode="json", by_alias=True, exclude={"name"})
    rest = {k: v for k, v in resolved.items() if k not in ("budget", "network", "server")}
    rest.pop("optimizer", None)
    cluster = dict(resolved)
    cluster["optimizer"] = _without_floats(cluster.get("optimizer"))
    if scenario.budget.epochs_per_worker is None or scenario.problem is None:
        cluster.pop("seed", None)
    return _dump(rest), _dump(cluster)


def _dump(config_part: dict) -> str:
    return json.dumps(config_part, sort_keys=True, default=str)


def _without_floats(value):
    if isinstance(value, float):
        return "<float>"
    if isinstance(value, dict):
        return {k: _without_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_floats(v) for v in value]
    return value


def write_result(out_dir: Path, result: RunResult) -> Path:
    """Deprecated: `result.write(out_dir)`."""
    warnings.warn(
        "gemsim.app.write_result is deprecated; use RunResult.write(out_dir)",
        DeprecationWarning,
        stacklevel=2,
    )
    return result.write(out_dir)
