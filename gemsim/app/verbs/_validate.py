"""`gemsim validate`: a real run, the replay of its trace, and the simulation of the cluster
calibrated from it (docs/design.md, "Real backends"). The simulator is right when

1. the replay reproduces the real run's parameters: max |theta_real - theta_replay| <=
   1e-5 * (1 + max |theta_real|) (the engine computes what the processes computed);
2. the simulated staleness distribution matches the real one: their total-variation
   distance is within what sampling alone gives, the 95th percentile of the distances
   between the first and each of `NULL_SEEDS` other seeds of the calibrated simulation
   (equal length), plus `TV_MODEL_SLACK` for what a fitted law cannot capture;
3. the simulated throughput (commits per second) is within `THROUGHPUT_BAND` of the real
   one (the median over the same simulations).

The simulations keep the real run's own schedule: the calibrated scenario keeps its churn,
availability, failures and joins, and every simulation draws its down intervals from the
real run's seed (`timing.simulate(..., schedule_seed=seed)`), so the real processes were
killed and restarted at the very times the simulated workers go down and up. Only the
compute, network and service draws vary, from the seeds `seed + 1` to `seed + NULL_SEEDS +
1`, never the real run's own (under `emulate_latency` it drew its compute from that seed).
Both checks then measure the simulator, not luck: against other schedules a run whose churn
happened to be rare or frequent leaves the throughput band by chance (12 of 50 seeds of a
4-worker scenario down 30 % of the time; none against its own schedule). Slowdowns are not
simulated again: the compute law fitted to the real run's measured times holds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from gemsim import config, results, timing
from gemsim.config import Scenario, ScenarioError
from gemsim.trace import CommitTrace

from ..execute._compile_cache import setup_compilation_cache
from ..report._progress import ProgressBar
from ._calibrate import CALIBRATED_FILE, calibrate_folder
from ._run import preflight, run, write_result

REPLAY_TOLERANCE = 1e-5
NULL_SEEDS = 20
TV_MODEL_SLACK = 0.05
THROUGHPUT_BAND = (0.8, 1.25)


@dataclass(frozen=True)
class ValidationReport:
    """What `gemsim validate --json` prints (the first four keys are the contract)."""

    replay_max_abs_diff: float
    staleness_tv: float
    throughput_ratio: float
    passed: bool
    replay_bar: float
    staleness_tv_threshold: float
    throughput_band: tuple[float, float]
    real_commits_per_s: float
    simulated_commits_per_s: float
    backend: str
    real_run: str
    replay_run: str
    calibrated_scenario: str
    checks: dict[str, bool]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def validate_file(
    path: str | Path,
    *,
    backend: str = "process",
    out: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    address: str | None = None,
    quiet: bool = False,
) -> ValidationReport:
    """Run the scenario (one configuration) on a real backend, then check the simulator."""
    setup_compilation_cache()
    path = Path(path)
    scenario = config.load_scenario(path, overrides)
    if scenario.sweep or scenario.repeats > 1 or scenario.seeds:
        raise ScenarioError(
            str(path), ["sweep/repeats: validate runs one configuration; pick it with --set"]
        )
    if backend not in ("process", "ray"):
        raise ScenarioError(str(path), [f"--backend: {backend!r} is not process or ray"])
    expanded = config.expand(scenario, source=str(path))
    preflight(expanded, str(path), needs=("problem", "optimizer"), backend=backend)
    _check_one_window(str(path), config.build_cluster(scenario), scenario.seed)
    out_dir = Path(out) if out is not None else Path("results") / f"{scenario.name}-validate"

    bar = ProgressBar(f"{backend} run", quiet=quiet)
    real = run(scenario, progress=bar, backend=backend, address=address)
    bar.close()
    write_result(out_dir, real)
    real_dir = out_dir / real.run_id

    bar = ProgressBar("replay", quiet=quiet)
    replay = run(scenario, progress=bar, trace=real.trace, trace_path=str(real_dir))
    bar.close()
    write_result(out_dir, replay)

    calibrated = calibrate_folder(real_dir)
    calibrated_file = calibrated.write(out_dir / CALIBRATED_FILE)
    report = compare(scenario, real, replay, Scenario.model_validate(calibrated.config))
    report = ValidationReport(
        **{
            **report,
            "backend": backend,
            "real_run": str(real_dir),
            "replay_run": str(out_dir / replay.run_id),
            "calibrated_scenario": str(calibrated_file),
        }
    )
    results.atomic_write_text(
        out_dir / "validation.json", results.manifest_to_json(report.to_json())
    )
    return report


def compare(scenario: Scenario, real, replay, calibrated: Scenario) -> dict[str, Any]:
    """The three checks on a real run, its replay and the calibrated scenario (whose budget
    is the real run's number of commits)."""
    a, b = _flat(real.params), _flat(replay.params)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    bar = REPLAY_TOLERANCE * (1.0 + float(np.max(np.abs(a))) if a.size else 1.0)

    spec = config.build_cluster(calibrated)
    sims = simulations(spec, scenario.seed)
    tv = timing.staleness_tv(real.trace.staleness, sims[0].staleness)
    null = [timing.staleness_tv(sims[0].staleness, s.staleness) for s in sims[1:]]
    threshold = float(np.quantile(null, 0.95)) + TV_MODEL_SLACK

    real_rate = _rate(real.trace)
    sim_rate = float(np.median([_rate(s) for s in sims]))
    ratio = real_rate / sim_rate if sim_rate > 0 else float("nan")
    checks = {
        "replay": diff <= bar,
        "staleness": tv <= threshold,
        "throughput": THROUGHPUT_BAND[0] <= ratio <= THROUGHPUT_BAND[1],
    }
    return {
        "replay_max_abs_diff": diff,
        "staleness_tv": float(tv),
        "throughput_ratio": float(ratio),
        "passed": all(checks.values()),
        "replay_bar": bar,
        "staleness_tv_threshold": threshold,
        "throughput_band": THROUGHPUT_BAND,
        "real_commits_per_s": real_rate,
        "simulated_commits_per_s": sim_rate,
        "checks": checks,
    }


def simulations(spec: timing.ClusterSpec, seed: int) -> list[CommitTrace]:
    """The `NULL_SEEDS + 1` simulations a run of seed ``seed`` is compared with: its own
    down intervals and slowdown episodes, other compute, network and service draws."""
    return [
        timing.simulate(spec, seed=seed + 1 + i, schedule_seed=seed) for i in range(NULL_SEEDS + 1)
    ]


def _rate(trace: CommitTrace) -> float:
    return len(trace) / trace.duration if trace.duration > 0 else float("nan")


def _flat(params) -> np.ndarray:
    leaves = [np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)]
    return np.concatenate(leaves) if leaves else np.zeros(0)


def _check_one_window(source: str, spec: timing.ClusterSpec, seed: int) -> None:
    """Refuse, before anything runs, a cluster whose tasks hold local steps of their own
    (the real run's trace then has a `local_steps` column, from which calibration cannot fit
    per-batch laws: `gemsim calibrate` refuses it)."""
    own = timing.owner_windows(spec, seed) is not None
    if own or isinstance(spec.protocol, timing.Compass):
        what = "FedCompass's scheduler" if not own else "local steps of the workers' own"
        raise ScenarioError(
            source,
            [
                f"optimizer: {what} gives each task its own local steps, and calibrating "
                f"per-batch laws from such a trace is not supported; allowed in validate: "
                f"workers that share the rule's window (run it with --backend and replay "
                f"its trace instead)"
            ],
        )
