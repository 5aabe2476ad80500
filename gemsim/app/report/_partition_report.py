"""The partition of a scenario's training set among its workers, as `gemsim trace` and
`gemsim show` print it: shard sizes, each worker's classes and its label distribution's
distance from the training set's (`problems.describe`, `problems.format_summary`), and the
rank correlation achieved between the data owners' slowness and their shards
(`problems.speed_data`).

It is computed from the training labels alone (host numpy: no model is built and JAX is not
imported), the very partition a run would use (`problems.split_shards` with the run's seed and
worker slowness). A scenario without a partition loads nothing.
"""

from __future__ import annotations

import math
from typing import Any

from gemsim import config
from gemsim.config import Scenario, ScenarioError

from ..execute._stages import split_field


def partition_text(scenario: Scenario) -> str | None:
    """The scenario's partition as a short table (quantiles beyond 20 workers), or None when
    every worker streams the whole training set.

    Raises:
        ScenarioError: an impossible partition, naming its field (as a run would).
    """
    return partition_report(scenario)[0]


def partition_report(scenario: Scenario) -> tuple[str | None, dict[str, Any] | None]:
    """`partition_text` and the speed-data figures (`speed_data_figures`), computed once.

    Raises:
        ScenarioError: an impossible partition, naming its field (as a run would).
    """
    from gemsim import problems

    split = config.data_split(scenario)
    if split is None or scenario.problem is None:
        return None, None
    if scenario.problem.dataset is None:
        return "the model's factory brings its data: the partition is drawn when it is built", None
    try:
        computed = config.scenario_shards(scenario)
    except problems.PartitionError as exc:
        raise ScenarioError(scenario.name, [split_field(scenario, exc)]) from None
    if computed is None:
        return None, None
    shards, labels, n_classes = computed
    _, dataset = config.problem_args(scenario)
    if isinstance(dataset, problems.Shakespeare | problems.Text):
        text = problems.load_dataset(dataset, scenario.seed)  # the corpus, kept per process
        table = problems.format_text_partition(shards, text.corpus, text.windows)
    else:
        table = problems.format_summary(problems.describe(shards, labels, n_classes))
    slowness = split.slowness if split.slowness is not None else config.owner_slowness(scenario)
    measured = problems.speed_data(split.spec, split.claims, slowness, shards, labels, n_classes)
    figures = speed_data_figures(measured)
    if figures is None:
        return table, None
    return table + "\n" + "\n".join(speed_data_lines(figures)), figures


def speed_data_figures(measured) -> dict[str, Any] | None:
    """A `problems.SpeedData` as plain values: ``spearman`` (over every data owner) against
    ``quantity``, ``owners``; with a speed order, its ``rho``, the copula's ``target``
    ((6/pi) asin(rho/2)), ``ranked_spearman`` over the ``ranked`` owners it ranks and
    ``standard_error`` (at most 1/sqrt(ranked - 1)). None where every owner is as slow (no
    rank correlation to measure) and the order ranks nobody."""
    from gemsim import problems

    if math.isnan(measured.spearman) and measured.rho is None:
        return None
    figures: dict[str, Any] = {
        "spearman": _number(measured.spearman),
        "quantity": measured.quantity,
        "owners": measured.owners,
    }
    if measured.rho is not None:
        figures.update(
            rho=measured.rho,
            target=problems.copula_spearman(measured.rho),
            ranked_spearman=_number(measured.ranked_spearman),
            ranked=measured.ranked,
            standard_error=1.0 / math.sqrt(measured.ranked - 1) if measured.ranked > 1 else None,
        )
    return figures


def speed_data_lines(figures: dict[str, Any]) -> list[str]:
    """The figures as the lines under the partition's table: one, or two where the order
    ranks only some of the owners (the others being in groups that hold classes)."""
    line = (
        f"speed-data rank correlation {_text(figures['spearman'])}: Spearman's, of the "
        f"{figures['owners']} workers' slowness and their shards' {figures['quantity']}"
    )
    if "rho" not in figures:
        return [line]
    error = figures["standard_error"]
    target = f"(6/pi) asin(rho/2) = {figures['target']:.3f}" + (
        "" if error is None else f", standard error at most {error:.3f}"
    )
    order = f"order by_speed, rho {figures['rho']:g}"
    if figures["ranked"] == figures["owners"]:
        return [line, f"  {order}: the copula's {target}"]
    return [
        line,
        f"  {order}: {_text(figures['ranked_spearman'])} over the {figures['ranked']} workers "
        f"it ranks (in no group that holds classes); the copula's {target}",
    ]


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def _text(value: float | None) -> str:
    return "n/a (slowness or the quantity constant)" if value is None else f"{value:.3f}"
