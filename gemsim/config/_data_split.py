"""Who owns which data: the data owners (the workers, or a population's clients), how the
training set is split among them (`problem.partition`, the classes groups alone hold), and
the shards themselves where the timing needs them (a population drawn by data size).

Shards are computed from the training labels alone (host numpy, no JAX), the very partition a
run uses (`problems.split_shards` with the run's seed and the owners' slowness).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from gemsim import timing

from ._dataset_blocks import dataset_spec
from ._problem_blocks import model_context
from ._scenario import Scenario
from ._worker_specs import worker_specs

if TYPE_CHECKING:
    import numpy as np

    from gemsim import problems


def data_owners(scenario: Scenario) -> int:
    """How many hold data of their own: a population's clients (N), else the workers."""
    if scenario.clients is not None:
        return scenario.clients.population
    return scenario.workers.count


def data_split(scenario: Scenario) -> problems.DataSplit | None:
    """How the scenario splits its training set among its data owners: `problem.partition`,
    the classes worker groups alone hold (`workers.groups[i].data`, or a population's
    `clients.groups[i].data`), and each owner's slowness (its compute law's mean per
    mini-batch over its speed; a client's over its speed factor) for `order: by_speed`. None
    when every owner streams the whole training set."""
    from gemsim import problems

    block = scenario.problem
    spec = block.partition.spec() if block is not None and block.partition is not None else None
    claims = tuple(
        problems.Claim(tuple(range(first, first + count)), tuple(classes))
        for _, first, count, classes in _data_groups(scenario)
    )
    if spec is None and not claims:
        return None
    ranked = spec is not None and problems.ranks_by_speed(spec.order)
    # A population's N slownesses are drawn only for an order that needs them.
    slowness = owner_slowness(scenario) if ranked or scenario.clients is None else None
    return problems.DataSplit(spec, claims, slowness)


def _data_groups(scenario: Scenario) -> list[tuple[str, int, int, list[int]]]:
    """``(field, first owner, owners, classes)`` of each group that alone holds classes, in
    the order of the split's claims; `field` is the group's path in the scenario."""
    if scenario.clients is not None:
        groups = scenario.clients.groups
        ranges, where = scenario.clients.group_ranges(), "clients.groups"
    else:
        groups = scenario.workers.groups
        starts = [0, *itertools.accumulate(g.count for g in groups)][: len(groups)]
        ranges, where = (
            [(s, g.count) for s, g in zip(starts, groups, strict=True)],
            "workers.groups",
        )
    return [
        (f"{where}[{i}]", first, count, group.data.classes)
        for i, (group, (first, count)) in enumerate(zip(groups, ranges, strict=True))
        if group.data is not None
    ]


def claim_field(scenario: Scenario, claim: int) -> str:
    """The scenario path of the group behind the split's claim ``claim`` (an index into
    `data_split`'s claims), e.g. ``workers.groups[2]`` or ``clients.groups[0]``."""
    return _data_groups(scenario)[claim][0]


def owner_slowness(scenario: Scenario) -> tuple[float, ...]:
    """Each data owner's slowness: a worker's mean compute time per mini-batch (its law's
    mean over its speed), a client's the slots' over its speed factor."""
    workers = worker_specs(scenario)
    if scenario.clients is None:
        return tuple(w.compute.mean() / w.speed for w in workers)
    slot = workers[0].compute.mean() / workers[0].speed  # the slots share one law
    speeds = timing.client_speeds(scenario.clients.build(check_only=True), scenario.seed)
    return tuple((slot / speeds).tolist())


def scenario_shards(scenario: Scenario) -> tuple[problems.Shards, np.ndarray, int] | None:
    """``(shards, labels, n_classes)`` of the scenario's partition, computed from the training
    labels alone; None when every owner streams the whole training set or the model's factory
    brings its data (its partition is drawn when it is built).

    Raises:
        problems.PartitionError: an impossible partition (the field it is about), or a shard
            smaller than the batch (field ``shards``), as building the problem would.
    """
    import numpy as np

    from gemsim import problems

    split = data_split(scenario)
    block = scenario.problem
    if split is None or block is None or block.dataset is None:
        return None
    dataset = dataset_spec(block.dataset, data_owners(scenario), model_context(block))
    labels, n_classes, groups = problems.training_labels(dataset, scenario.seed)
    if n_classes < 1:  # float targets: sizes only, as `make_problem` splits them
        if split.claims or isinstance(split.spec, problems.LABEL_SPECS):
            raise problems.PartitionError(
                "name", "splits by class need class labels; this data set has float targets"
            )
        labels, n_classes = np.zeros(len(labels), np.int64), 1
    owners, batch = data_owners(scenario), block.batch_size
    shards = problems.split_shards(
        split, labels, owners, scenario.seed, n_classes=n_classes, groups=groups, batch_size=batch
    )
    # What building the problem refuses, refused here too: trace and show agree with run.
    problems.check_shards(shards, batch)
    return shards, labels, n_classes


def client_weights(scenario: Scenario) -> tuple[float, ...]:
    """A population's selection weights by data size: each client's shard size.

    Raises:
        ValueError: the clients hold no shards of their own (no partition; naming the field).
    """
    shards = scenario_shards(scenario)
    if shards is None:
        raise ValueError(
            "clients.selection: weighted by data_size needs the clients to hold shards of their "
            "own: give problem.partition (with a problem.dataset), or select uniform"
        )
    return tuple(float(s) for s in shards[0].sizes)
