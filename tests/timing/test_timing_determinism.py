"""One seed, one trace; each worker's draws belong to that worker alone."""

import numpy as np
import pytest
from timing_helpers import cluster, rows_of

from gemsim.timing import (
    ClusterSpec,
    CommitBudget,
    Constant,
    Failure,
    LogNormal,
    Mixture,
    Pareto,
    SecondsBudget,
    WorkerSpec,
    simulate,
)
from gemsim.timing._draws import (
    FIRST_BLOCK,
    seed_sequence,
    service_draw,
    uniform_draw,
    worker_draws,
)

NETWORK = {
    "pull": LogNormal(0.05, 0.5),
    "push": LogNormal(0.05, 0.5),
    "service": LogNormal(0.01, 1),
}


def _rich_spec(n=6):
    straggler = Mixture(((0.9, LogNormal(1.0, 0.3)), (0.1, Pareto(scale=3.0, alpha=1.5))))
    workers = [WorkerSpec(straggler, speed=1.0 + 0.1 * w) for w in range(n)]
    workers[1] = WorkerSpec(straggler, failures=(Failure(at=7.3, restart_after=2.0),))
    workers[2] = WorkerSpec(straggler, join_at=4.2)
    return ClusterSpec(workers=tuple(workers), budget=CommitBudget(3000), **NETWORK)


def test_same_scenario_twice_gives_the_same_sha256():
    first, second = simulate(_rich_spec(), seed=123), simulate(_rich_spec(), seed=123)
    assert first.sha256() == second.sha256()
    assert first == second
    assert simulate(_rich_spec(), seed=124).sha256() != first.sha256()


def _per_worker_compute(trace, w):
    return trace.compute_time[rows_of(trace, w)]


@pytest.mark.parametrize("n", [3, 10])
def test_adding_a_worker_leaves_earlier_workers_draws_unchanged(n):
    law = LogNormal(1.0, 0.5)
    small = simulate(cluster(n, law, SecondsBudget(100.0), **NETWORK), seed=7)
    big = simulate(cluster(n + 1, law, SecondsBudget(100.0), **NETWORK), seed=7)
    assert small.sha256() != big.sha256()  # the timing changes ...
    for w in range(n):  # ... but worker w's gradients take the same compute times in order
        a, b = _per_worker_compute(small, w), _per_worker_compute(big, w)
        m = min(len(a), len(b))
        assert m > 50
        np.testing.assert_array_equal(a[:m], b[:m])


def test_worker_streams_do_not_depend_on_cluster_size_or_other_kinds():
    law = LogNormal(1.0, 0.5)
    small = cluster(3, law, pull=LogNormal(0.1, 0.2))
    big = cluster(9, law, pull=LogNormal(0.1, 0.2), push=Constant(0.3))
    for w in range(3):
        a, b = worker_draws(small, 5, w), worker_draws(big, 5, w)
        for kind in ("compute", "pull"):
            draws_a = [getattr(a, kind)() for _ in range(3 * FIRST_BLOCK + 5)]
            draws_b = [getattr(b, kind)() for _ in range(3 * FIRST_BLOCK + 5)]
            assert draws_a == draws_b


def test_stream_seeds_are_the_spawned_children_of_the_worker_sequence():
    seed, w = 99, 4
    parent = np.random.SeedSequence(seed, spawn_key=(0, w))
    for kind, child in enumerate(parent.spawn(3)):
        ours = seed_sequence(seed, 0, w, kind)
        np.testing.assert_array_equal(ours.generate_state(4), child.generate_state(4))
    server = np.random.SeedSequence(seed, spawn_key=(1,)).spawn(2)
    np.testing.assert_array_equal(
        seed_sequence(seed, 1, 0).generate_state(4), server[0].generate_state(4)
    )


def test_every_stream_draws_from_its_documented_seed_sequence():
    """Compute, push, pull, service and the RANDOM discipline's uniforms each draw from the
    spawned child the module docstring names (seed 7, worker 2), whatever the stream."""
    seed, w, n = 7, 2, 64
    push, pull, service = LogNormal(0.1, 0.3), Pareto(0.05, 2.5), LogNormal(0.01, 0.2)
    spec = cluster(3, LogNormal(1.0, 0.5), push=push, pull=pull, service=service)
    child = lambda *key: np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
    draws = worker_draws(spec, seed, w)
    expected = {
        draws.compute: spec.workers[w].compute.sample(child(0, w, 0), n),
        draws.push: push.sample(child(0, w, 1), n),
        draws.pull: pull.sample(child(0, w, 2), n),
        service_draw(spec, seed): service.sample(child(1, 0), n),
        uniform_draw(seed): child(1, 1).random(n),
    }
    for draw, values in expected.items():
        np.testing.assert_array_equal([draw() for _ in range(n)], values)


def test_block_boundaries_do_not_change_a_stream():
    # Each value is drawn from its stream in fixed blocks (64, 128, ...); the concatenation
    # equals one large draw for laws that consume the generator sequentially.
    law = LogNormal(1.0, 0.5)
    spec = cluster(1, law)
    draw = worker_draws(spec, 3, 0).compute
    ours = np.array([draw() for _ in range(1000)])
    rng = np.random.default_rng(seed_sequence(3, 0, 0, 0))
    np.testing.assert_array_equal(ours, law.sample(rng, 1000))


@pytest.mark.parametrize("seed", [-1, 1.5, True, "1"])
def test_bad_seed_is_rejected(seed):
    with pytest.raises(ValueError, match="seed"):
        simulate(cluster(2, Constant(1.0)), seed)


def test_simulate_needs_a_cluster_spec():
    with pytest.raises(ValueError, match="ClusterSpec"):
        simulate({"workers": 2}, 0)
