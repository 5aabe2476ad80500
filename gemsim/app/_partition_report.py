"""The partition of a scenario's training set among its workers, as `gemsim trace` and
`gemsim show` print it: shard sizes, each worker's classes and its label distribution's
distance from the training set's (`problems.describe`, `problems.format_summary`).

It is computed from the training labels alone (host numpy: no model is built and JAX is not
imported), the very partition a run would use (`problems.split_shards` with the run's seed and
worker slowness). A scenario without a partition loads nothing.
"""

from __future__ import annotations

from gemsim import config
from gemsim.config import Scenario, ScenarioError

from ._stages import split_field


def partition_text(scenario: Scenario) -> str | None:
    """The scenario's partition as a short table (quantiles beyond 20 workers), or None when
    every worker streams the whole training set.

    Raises:
        ScenarioError: an impossible partition, naming its field (as a run would).
    """
    from gemsim import problems

    if config.data_split(scenario) is None or scenario.problem is None:
        return None
    if scenario.problem.dataset is None:
        return "the model's factory brings its data: the partition is drawn when it is built"
    try:
        computed = config.scenario_shards(scenario)
    except problems.PartitionError as exc:
        raise ScenarioError(scenario.name, [split_field(scenario, exc)]) from None
    if computed is None:
        return None
    shards, labels, n_classes = computed
    _, dataset = config.problem_args(scenario)
    if isinstance(dataset, problems.Shakespeare | problems.Text):
        text = problems.load_dataset(dataset, scenario.seed)  # the corpus, kept per process
        return problems.format_text_partition(shards, text.corpus, text.windows)
    return problems.format_summary(problems.describe(shards, labels, n_classes))
