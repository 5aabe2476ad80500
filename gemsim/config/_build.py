"""From a validated Scenario to the typed values the stages take (the schema ends here).

Nothing here loads data, compiles a model or imports JAX: the timing model's input needs
only the problem's sizes (steps per epoch, parameter bytes), which the problem specs know
without being built (`gemsim.problems.data_shape` and `param_count`). A model imported by
path is the exception: its parameter count (and, when its factory brings the data, its data
set's size) is known only by calling its factory, which happens only when the timing needs
that number (a bandwidth; an epochs budget).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gemsim import timing

from ._data_split import client_weights, data_owners
from ._dataset_blocks import dataset_spec
from ._errors import ScenarioError
from ._model_blocks import model_spec
from ._optimizer import stops_of, window_of
from ._problem_blocks import model_context
from ._protocol_blocks import check_protocol, resolve_protocol
from ._scenario import Scenario
from ._windows import client_dynamic_window, worker_windows
from ._worker_specs import worker_specs

if TYPE_CHECKING:
    from gemsim import problems, rules


def build_cluster(
    scenario: Scenario, *, sizes: tuple[int, int] | None = None
) -> timing.ClusterSpec:
    """The timing model's input. Steps per epoch and model bytes come from the problem block
    (`problem_sizes`) when the budget or the network needs them; `sizes` gives them instead
    (checks that must not touch data files pass placeholders)."""
    net, server = scenario.network, scenario.server
    needs_bytes = net.bandwidth_bytes_per_s is not None and scenario.problem is not None
    needs_steps = scenario.budget.epochs_per_worker is not None
    if sizes is None and (needs_bytes or needs_steps):
        sizes = problem_sizes(scenario, model_bytes=needs_bytes)
    steps_per_epoch = sizes[0] if sizes is not None else None
    workers = worker_specs(scenario)
    return timing.ClusterSpec(
        workers=workers,
        population=_population(scenario, weigh=sizes is None),
        pull=net.pull.build() if net.pull else None,
        push=net.push.build() if net.push else None,
        bandwidth_bytes_per_s=net.bandwidth_bytes_per_s,
        model_bytes=sizes[1] if sizes is not None and needs_bytes else 0,
        shared_link=net.shared_link,
        service=server.service.build() if server.service else None,
        discipline=timing.Discipline[server.discipline.upper()],
        window=window_of(scenario.optimizer) if scenario.optimizer else 1,
        windows=worker_windows(scenario, workers),
        dynamic_window=client_dynamic_window(scenario),
        protocol=resolve_protocol(scenario),
        budget=_budget(scenario, steps_per_epoch),
        pull_at=timing.PullAt(server.pull),
        ties=timing.Ties(server.ties),
        stops=_stops(scenario),
        drop_push=drop_push_of(scenario),
    )


def drop_push_of(scenario: Scenario) -> float:
    """`workers.failures.drop_push`, refused where the timing model has no lost pushes.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    p = scenario.workers.drop_push
    protocol = resolve_protocol(scenario).name
    if p > 0 and (scenario.clients is not None or protocol not in ("async", "sync")):
        where = (
            "a population"
            if scenario.clients is not None
            else (f"server.protocol {resolve_protocol(scenario).name!r}")
        )
        raise ValueError(
            f"workers.failures.drop_push: {p:g} with {where}; allowed: lost pushes for "
            f"persistent workers under the async or sync protocol (0 elsewhere)"
        )
    return p


def _stops(scenario: Scenario) -> timing.Stops | None:
    """The computations in flight the server stops for the scenario's rule (None for most)."""
    if scenario.optimizer is None:
        return None
    return stops_of(scenario.optimizer, scenario.workers.count)


def problem_sizes(scenario: Scenario, *, model_bytes: bool = True) -> tuple[int, int]:
    """``(steps_per_epoch, model_bytes)`` of the scenario's problem, without building it
    (``model_bytes=False``: 0 bytes, and an imported model is not built for them)."""
    from gemsim import problems

    block = scenario.problem
    if block is None:
        raise ValueError("the scenario has no `problem` block")
    model, data = problem_args(scenario)
    if isinstance(model, problems.Imported):
        return _imported_sizes(model, data, block.batch_size, model_bytes, scenario.seed)
    shape = problems.data_shape(data, scenario.seed) if data is not None else None
    # The quadratic has no data set: an epoch is one step (see problems._quadratic).
    train_size = shape.n_train if shape is not None else block.batch_size
    if block.partition is not None:
        # A worker's epoch is a pass over its share of the training set (n_train / n).
        train_size = max(block.batch_size, train_size // data_owners(scenario))
    n_bytes = 4 * problems.param_count(model, shape) if model_bytes else 0
    return train_size // block.batch_size, n_bytes


def _imported_sizes(model, data, batch_size: int, model_bytes: bool, seed: int) -> tuple[int, int]:
    from gemsim import problems

    if data is not None and not model_bytes:
        return problems.data_shape(data, seed).n_train // batch_size, 0
    # The factory must run: for its data's size, or for its parameter count (from the shapes
    # its init would give; nothing is computed).
    n_train, n_params = problems.imported_sizes(
        model, data, batch_size, params=model_bytes, seed=seed
    )
    return n_train // batch_size, 4 * n_params


def problem_args(scenario: Scenario) -> tuple[problems.ModelSpec, problems.DatasetSpec | None]:
    """The problem stage's specs of the scenario's model and data set."""
    block = scenario.problem
    if block is None:
        raise ValueError("the scenario has no `problem` block")
    dataset = dataset_spec(block.dataset, data_owners(scenario), model_context(block))
    return model_spec(block.model), dataset


def build_rule(scenario: Scenario, rows: int | None = None) -> rules.Rule:
    """The scenario's update rule (imports JAX), checked against the server protocol;
    `rows`: a rule with per-client state keeps that many rows (`with_scenario_clients`).

    Raises:
        ScenarioError: the scenario has no `optimizer` block.
    """
    if scenario.optimizer is None:
        raise ScenarioError(
            scenario.name,
            ["optimizer: required to run (gemsim trace needs only workers and budget)"],
        )
    check_protocol(scenario)
    return with_scenario_clients(scenario.optimizer.build(), scenario, rows)


def client_state_memory(
    scenario: Scenario, model_bytes: int | None = None
) -> tuple[int, int, int] | None:
    """``(bytes, bound, n_clients)`` of the server's per-client state for the scenario's rule,
    from its row's shapes on the model's parameters (nothing is built or allocated); None when
    the rule keeps none. The bound is `engine.client_state_gib`, or half of this machine's
    memory. `model_bytes`: the model's, where the caller has `problem_sizes`' already."""
    if scenario.optimizer is None:
        return None
    rule = scenario.optimizer.build()
    if rule.client_init is None:
        return None
    import jax
    import jax.numpy as jnp

    from gemsim import rules

    n_params = (problem_sizes(scenario)[1] if model_bytes is None else model_bytes) // 4
    # The built-in rules' rows are shaped like the parameters, whose leaves do not matter.
    params = {"params": jax.ShapeDtypeStruct((n_params,), jnp.float32)}
    n_clients = data_owners(scenario)
    size = rules.client_state_bytes(rule, params, n_clients)
    return size, client_state_bound(scenario), n_clients


def client_state_bound(scenario: Scenario) -> int:
    """The most bytes a rule's per-client state may take (see `client_state_memory`)."""
    gib = scenario.engine.client_state_gib
    if gib is not None:
        return int(gib * 2**30)
    return machine_memory() // 2


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_client_state(scenario: Scenario) -> str | None:
    """A line reporting the per-client state the scenario's rule keeps (None if none).

    Raises:
        ValueError: it exceeds the bound, naming the size, the bound and what is allowed.
    """
    memory = client_state_memory(scenario)
    if memory is None:
        return None
    size, bound, n_clients = memory
    rule = scenario.optimizer.rule
    row = size // n_clients
    said = (
        f"optimizer.rule {rule!r} keeps state per client: {n_clients:,} clients x "
        f"{_bytes(row)} = {_bytes(size)}"
    )
    if size > bound:
        origin = (
            "engine.client_state_gib"
            if scenario.engine.client_state_gib is not None
            else f"half of this machine's {_bytes(machine_memory())}; engine.client_state_gib"
        )
        raise ValueError(
            f"{said}, over the bound of {_bytes(bound)} ({origin}); allowed: fewer clients, "
            f"a smaller model, or a larger engine.client_state_gib"
        )
    return f"{said} of server memory (bound {_bytes(bound)})"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def with_scenario_clients(
    rule: rules.Rule, scenario: Scenario, rows: int | None = None
) -> rules.Rule:
    """A rule that keeps state per client, given the scenario's clients (a population's N,
    or the workers), in `rows` rows where fewer (a simulator's, for the clients its trace
    names: `engine.client_rows`); any other rule as it is."""
    if rule.client_init is None:
        return rule
    from gemsim import rules

    n = data_owners(scenario)
    return rules.with_clients(rule, n, None if rows is None or rows >= n else rows)


def keeps_client_state(scenario: Scenario) -> bool:
    """Whether the scenario's rule keeps state per client (nothing is built but the rule)."""
    return scenario.optimizer is not None and scenario.optimizer.build().client_init is not None


def reads_every_client(scenario: Scenario) -> bool:
    """Whether the scenario's rule reads every client's row at some commits
    (`Rule.client_table`: FedCompass's general buffer, at a group's close)."""
    return scenario.optimizer is not None and scenario.optimizer.build().client_table


def _population(scenario: Scenario, *, weigh: bool) -> timing.Population | None:
    """A population's timing model; weighted by data size, the clients' shard sizes (`weigh`
    False: checks that must not touch data files draw uniformly instead)."""
    clients = scenario.clients
    if clients is None:
        return None
    if not clients.weighted:
        return clients.build()
    if not weigh:
        return clients.build(check_only=True)
    return clients.build(weights=client_weights(scenario))


def _budget(scenario: Scenario, steps_per_epoch: int | None) -> timing.Budget:
    budget = scenario.budget
    if budget.commits is not None:
        return timing.CommitBudget(budget.commits)
    if budget.seconds is not None:
        return timing.SecondsBudget(budget.seconds)
    if steps_per_epoch is None:
        raise ValueError("an epochs_per_worker budget needs the problem's steps per epoch")
    return timing.StepsBudget(max(1, math.ceil(budget.epochs_per_worker * steps_per_epoch)))


def eval_period(scenario: Scenario) -> dict[str, float | int | None]:
    """The engine plan's evaluation keywords (`engine.plan_of`): every `eval.every` commits,
    or every `eval.every_seconds` of virtual time where that is given."""
    block = scenario.eval
    if block.every_seconds is not None:
        return {"eval_every": None, "eval_every_seconds": block.every_seconds}
    return {"eval_every": block.every}
