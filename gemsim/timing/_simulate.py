"""`simulate`: run the timing model of a cluster and return its commit trace."""

from __future__ import annotations

import numbers

import simpy
from simpy.core import StopSimulation

from gemsim.trace import CommitTrace

from ._cluster import ClusterSpec
from ._processes import failure_process, server_process, worker_process
from ._state import SimState


def simulate(spec: ClusterSpec, seed: int) -> CommitTrace:
    """Simulate ``spec`` in virtual time and return the trace of its commits.

    The same ``(spec, seed)`` always gives the same trace (see `CommitTrace.sha256`).
    All randomness comes from ``numpy.random.SeedSequence(seed)`` streams (see
    `gemsim.timing._draws`); the tie order of simultaneous events is described in
    `gemsim.timing._processes`.

    Args:
        spec: the cluster, its network, server and budget.
        seed: non-negative integer seed of the run.

    Returns:
        The commits in order. With a CommitBudget it has exactly ``commits`` rows unless
        every worker crashed for good before; ``duration`` is the time of the last
        commit, or the horizon of a SecondsBudget.

    Raises:
        ValueError: if ``spec`` is not a ClusterSpec or ``seed`` is not an integer >= 0.
    """
    if not isinstance(spec, ClusterSpec):
        raise ValueError(f"simulate() needs a ClusterSpec, got {type(spec).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    env = simpy.Environment()
    state = SimState(env, spec, int(seed))
    server = env.process(server_process(env, state))
    # The run ends when the server returns (budget spent) or, with a StepsBudget or
    # when every worker is gone, when no event is left.
    server.callbacks.append(StopSimulation.callback)
    workers = [env.process(worker_process(env, state, w)) for w in range(spec.n_workers)]
    for worker, worker_spec in zip(workers, spec.workers, strict=True):
        if worker_spec.failures:
            env.process(failure_process(env, worker, worker_spec.failures))
    env.run()
    return state.to_trace()
