"""A finished run's final metrics, the manifest's `final` block: the last evaluation's
losses and accuracy, and the heterogeneity measures of its evaluations
(`gemsim.results.heterogeneity_metrics`)."""

from __future__ import annotations

from collections.abc import Mapping

from gemsim import config
from gemsim.config import Scenario
from gemsim.trace import CommitTrace


def final_metrics(scenario: Scenario, trace: CommitTrace, out) -> dict[str, float]:
    """`train_loss`, `test_loss`, `test_accuracy` of the final evaluation (NaN where it has
    none), then the run's heterogeneity measures from its evaluations: per class, per
    worker, per class group (`workers.groups[].data`) and the time to each of `eval.targets`
    (`out`: the engine's `EngineResult`, or a real run's)."""
    from gemsim.results import BASE_FINAL, class_groups, heterogeneity_metrics, n_classes_of

    final = out.final
    split = config.data_split(scenario)
    claimed = [claim.classes for claim in split.claims] if split is not None else []
    extra = heterogeneity_metrics(
        run_evaluations(trace, out),
        final,
        targets=scenario.eval.targets or (),
        groups=class_groups(claimed, n_classes_of(final)),
    )
    return {**{k: final.get(k, float("nan")) for k in BASE_FINAL}, **extra}


def run_evaluations(trace: CommitTrace, out) -> list[tuple[float, Mapping[str, float]]]:
    """The run's evaluations as (virtual time, values), in commit order: each evaluation
    commit's (at that commit's time), then the final one where no evaluation was at the last
    applied commit (at its time; 0 before any commit)."""
    last = out.n_commits - 1
    found = {k: v for k, v in out.evals.items() if 0 <= k <= last}
    if out.final and last not in found:
        found[last] = out.final
    return [(float(trace.time[k]) if k >= 0 else 0.0, found[k]) for k in sorted(found)]
