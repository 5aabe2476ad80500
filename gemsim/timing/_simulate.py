"""`simulate`: run the timing model of a cluster and return its commit trace."""

from __future__ import annotations

import numbers

import simpy

from gemsim.trace import CommitTrace

from ._cluster import ClusterSpec
from ._compass_population import CompassPopulationRun
from ._compass_run import CompassRun
from ._link import SharedLink
from ._lives import down_intervals
from ._outcome import Simulation, worker_report
from ._population import Population
from ._population_run import PopulationRun
from ._processes import worker_process
from ._restart_runs import server_run
from ._server import Server
from ._server_protocols import Compass
from ._state import SimState


def simulate(spec: ClusterSpec, seed: int, *, schedule_seed: int | None = None) -> CommitTrace:
    """Simulate ``spec`` in virtual time and return the trace of its commits.

    The same ``(spec, seed)`` always gives the same trace (see `CommitTrace.sha256`).
    All randomness comes from ``numpy.random.SeedSequence(seed)`` streams (see
    `gemsim.timing._draws`); the tie order of simultaneous events is described in
    `gemsim.timing._processes`.

    Args:
        spec: the cluster, its network, server, protocol and budget.
        seed: non-negative integer seed of the run.
        schedule_seed: the seed of the workers' down intervals (churn) and slowdown
            episodes, if not ``seed``: the same schedule under other compute, network and
            service draws (what `gemsim validate` compares a real run's schedule with).

    Returns:
        The commits in order. With a CommitBudget it has exactly ``commits`` rows unless
        every worker is gone for good before; ``duration`` is the time of the last
        commit, or the horizon of a SecondsBudget.

    Raises:
        ValueError: if ``spec`` is not a ClusterSpec or a seed is not an integer >= 0.
    """
    return simulate_run(spec, seed, schedule_seed=schedule_seed).trace


def simulate_run(spec: ClusterSpec, seed: int, *, schedule_seed: int | None = None) -> Simulation:
    """`simulate`, with the per-worker report (availability, waits, lost and cancelled work)
    beside the trace; with a population, the workers are its slots and the per-client report
    (`ClientReport`) comes too. The seed draws the slots' compute and network, the clients'
    speeds and the selections; ``schedule_seed`` the clients' churn."""
    if not isinstance(spec, ClusterSpec):
        raise ValueError(f"simulate() needs a ClusterSpec, got {type(spec).__name__}")
    seed = _seed("seed", seed)
    schedule = seed if schedule_seed is None else _seed("schedule_seed", schedule_seed)
    env = simpy.Environment()
    state = SimState(env, spec, seed, schedule)
    if isinstance(spec.protocol, Compass):
        return _compass_run(env, state, spec.protocol, spec.population, seed, schedule)
    if spec.population is not None:
        return _population_run(env, state, spec.population, seed, schedule)
    if spec.shared_link:
        SharedLink(state).install()
    protocol = server_run(state, spec)  # after the link: a stop wraps the link's cycles
    # The run ends when the server stops it (budget spent) or, with a StepsBudget or when
    # every worker is gone, when no event is left.
    Server(env, state, protocol)
    for w, worker in enumerate(spec.workers):
        downs = down_intervals(worker, schedule, w, until=state.horizon)
        env.process(worker_process(env, state, protocol, w, downs))
    env.run()
    duration = state.duration()
    protocol.finish(duration)
    return Simulation(state.to_trace(), worker_report(state, duration))


def _population_run(
    env: simpy.Environment, state: SimState, population: Population, seed: int, schedule: int
) -> Simulation:
    """K slots serving a population's clients (`gemsim.timing._population_run`); the run
    ends when the server stops it or, when every client is gone for good, when no event is
    left."""
    run = PopulationRun(state, population, seed, schedule)
    Server(env, state, run)
    run.begin()
    env.run()
    duration = state.duration()
    run.finish(duration)
    trace = state.to_trace(run.clients, population.n_clients, run.local_steps())
    return Simulation(trace, worker_report(state, duration), run.report(duration))


def _compass_run(
    env: simpy.Environment,
    state: SimState,
    protocol: Compass,
    population: Population | None,
    seed: int,
    schedule: int,
) -> Simulation:
    """FedCompass's scheduler over persistent workers (`_compass_run.py`) or a population's
    clients (`_compass_population.py`), who stay up."""
    if population is None:
        run = CompassRun(state, protocol)
    else:
        run = CompassPopulationRun(state, protocol, population, seed, schedule)
    Server(env, state, run)
    run.begin()
    env.run()
    duration = state.duration()
    run.finish(duration)
    steps, buffer = run.columns()
    if population is None:
        trace = state.to_trace(local_steps=steps, buffer=buffer)
        return Simulation(trace, worker_report(state, duration))
    trace = state.to_trace(run.clients, population.n_clients, steps, buffer)
    return Simulation(trace, worker_report(state, duration), run.report(duration))


def _seed(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)
