"""`make_plan` is vectorised with numpy; it builds exactly the plan of the per-commit loop it
replaced (`reference_plan` below, the loop as it was), field by field: arrays with their
dtypes, the host-fill dicts with their keys, their insertion order and their arrays, and the
same error for the first commit a worker computed on a version one snapshot slot cannot hold
(older than the one its previous commit was applied to, or that one in a new life). A pull
before apply (the version the worker's previous commit was applied to) is a pre fill
(`fill_pre`). No timing is asserted."""

import dataclasses
import re

import numpy as np
import pytest
from engine_helpers import cluster

from gemsim import engine, timing
from gemsim.engine import make_plan
from gemsim.engine._plan import ExecutionPlan, _data_owners, _eval_points
from gemsim.trace import default_fresh


def reference_plan(
    worker: np.ndarray,
    pulled_version: np.ndarray,
    n_workers: int,
    *,
    window: int = 1,
    eval_every: int | None = None,
    fresh: np.ndarray | None = None,
    round_end: np.ndarray | None = None,
    client: np.ndarray | None = None,
    n_clients: int | None = None,
) -> ExecutionPlan:
    """`make_plan` as it was: one Python pass over the commits (its argument checks, which
    come before the pass and are unchanged, left out: every case here passes them)."""
    worker = np.asarray(worker, dtype=np.int64)
    pulled = np.asarray(pulled_version, dtype=np.int64)
    n = len(worker)
    commit = np.arange(n)
    owner, n_owners = _data_owners(worker, n_workers, client, n_clients)
    fresh = default_fresh(worker) if fresh is None else np.asarray(fresh, dtype=bool)
    round_end = np.ones(n, dtype=bool) if round_end is None else np.asarray(round_end, bool)

    population = client is not None
    fill_self = np.zeros(n, dtype=bool)
    fill_pre = np.zeros(n, dtype=bool)
    host: dict[int, list[tuple[int, bool]]] = {}
    last_commit = np.full(n_workers, -1, dtype=np.int64)
    counts = np.zeros(n_owners, dtype=np.int64)  # batches by data owner (N small integers)
    first_step = np.empty(n, dtype=np.int64)
    for k in range(n):  # one pass; the trace is at most a few hundred thousand rows
        w, v, o = worker[k], pulled[k], owner[k]
        first_step[k] = counts[o] * window
        counts[o] += 1
        prev = last_commit[w]
        if prev >= 0 and (v < prev or (v == prev and (fresh[k] or population))):
            what = "older than the one" if v < prev else "the one"
            where = "" if v < prev else (", in a new life" if fresh[k] else ", in a population")
            raise ValueError(
                f"commit {k}: worker {w} computed on version {v}, {what} its previous commit "
                f"{prev} was applied to{where}; one snapshot slot per worker cannot replay that"
            )
        if prev >= 0 and v == prev:
            fill_pre[prev] = True
        elif v > 0:
            if prev >= 0 and v == prev + 1 and not fresh[k]:
                fill_self[prev] = True
            else:  # a population's task always starts a fresh rule state
                host.setdefault(int(v - 1), []).append((int(w), bool(fresh[k]) or population))
        last_commit[w] = k
    evals = _eval_points(n, eval_every)
    return ExecutionPlan(
        worker=worker.astype(np.int32),
        staleness=(commit - pulled).astype(np.int32),
        fill_self=fill_self,
        first_step=first_step.astype(np.int32),
        host_fills={k: np.asarray([w for w, _ in ws], dtype=np.int32) for k, ws in host.items()},
        host_fresh={k: np.asarray([f for _, f in ws], dtype=bool) for k, ws in host.items()},
        evals=evals,
        n_workers=int(n_workers),
        round_end=round_end,
        client=owner.astype(np.int32) if population else None,
        n_clients=n_owners if population else None,
        fill_pre=fill_pre if fill_pre.any() else None,
    )


def assert_same_array(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_array_equal(a, b, strict=True)


def assert_same_plan(got: ExecutionPlan, want: ExecutionPlan):
    for name in ("worker", "staleness", "fill_self", "first_step", "evals", "round_end"):
        assert_same_array(getattr(got, name), getattr(want, name))
    for name in ("client", "fill_pre"):
        assert (getattr(got, name) is None) == (getattr(want, name) is None), name
        if getattr(want, name) is not None:
            assert_same_array(getattr(got, name), getattr(want, name))
    assert got.n_workers == want.n_workers and type(got.n_workers) is int
    assert got.n_clients == want.n_clients and type(got.n_clients) is type(want.n_clients)
    for name in ("host_fills", "host_fresh"):
        g, w = getattr(got, name), getattr(want, name)
        assert list(g) == list(w), name  # the same keys, inserted in the same order
        assert all(type(k) is int for k in g)
        for k in w:
            assert_same_array(g[k], w[k])


def columns(trace, **kw):
    """make_plan's arguments for a trace (what `plan_of` passes)."""
    return (trace.worker, trace.pulled_version, trace.n_workers), dict(
        fresh=trace.fresh,
        round_end=trace.round_end,
        client=getattr(trace, "client", None),
        n_clients=getattr(trace, "n_clients", None),
        **kw,
    )


def check_trace(trace, **kw):
    args, kwargs = columns(trace, **kw)
    want = reference_plan(*args, **kwargs)
    assert_same_plan(make_plan(*args, **kwargs), want)
    return want


def churn_spec(n, budget, seed):
    """Persistent workers with up/down periods, crashes and a late join: fresh lives."""
    rng = np.random.default_rng(seed)
    churn = timing.Churn(timing.Exponential(3.0), timing.Exponential(1.0))
    base = cluster(n, compute=timing.LogNormal(0.2, 0.6), budget=budget)
    workers = tuple(
        dataclasses.replace(
            w,
            speed=float(rng.uniform(0.3, 3.0)),
            churn=churn if i % 2 == 0 else None,
            join_at=float(rng.uniform(0.0, 2.0)) if i == n - 1 else 0.0,
        )
        for i, w in enumerate(base.workers)
    )
    return dataclasses.replace(base, workers=workers)


SEEDS = np.random.default_rng(20240601).integers(0, 2**31, size=4).tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_async_traces_with_churn_and_restarts(seed):
    trace = timing.simulate(churn_spec(5, 300, seed), seed=seed)
    assert trace.fresh.sum() > trace.n_workers  # restarts: fresh lives past the first ones
    plan = check_trace(trace, window=3, eval_every=17)
    assert plan.host_fills and plan.fill_self.any()


@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize(
    "protocol",
    [timing.Sync(), timing.KSync(2), timing.KAsync(3), timing.Ssp(2)],
    ids=repr,
)
def test_round_protocol_traces(seed, protocol):
    spec = dataclasses.replace(
        cluster(4, compute=timing.Exponential(0.1), budget=200), protocol=protocol
    )
    plan = check_trace(timing.simulate(spec, seed=seed), eval_every=50)
    if isinstance(protocol, timing.Sync | timing.KSync):
        assert len(plan.host_fills) > 10  # the barriers' fills


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_churny_synchronous_rounds(seed):
    spec = dataclasses.replace(churn_spec(4, 200, seed), protocol=timing.Sync())
    check_trace(timing.simulate(spec, seed=seed), window=2)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_population_traces(seed):
    churn = timing.Churn(timing.Exponential(4.0), timing.Exponential(1.5))
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.LogNormal(0.3, 0.5)),) * 3,
        budget=timing.CommitBudget(200),
        population=timing.Population(12, churn=churn),
    )
    trace = timing.simulate(spec, seed=seed)
    assert trace.client is not None
    plan = check_trace(trace, window=2, eval_every=40)
    assert plan.population and plan.host_fills
    assert all(f.all() for f in plan.host_fresh.values())  # a task always starts anew
    # The same trace read as persistent workers.
    check_trace(dataclasses.replace(trace, client=None, n_clients=None), window=2)


def test_plan_of_matches_the_reference():
    trace = timing.simulate(churn_spec(4, 150, SEEDS[0]), seed=SEEDS[0])
    args, kwargs = columns(trace, window=2, eval_every=10)
    assert_same_plan(
        engine.plan_of(trace, window=2, eval_every=10), reference_plan(*args, **kwargs)
    )


def random_columns(rng, n, n_workers):
    """A valid random trace: each worker pulls a version after its own previous commit."""
    worker = rng.integers(0, n_workers, size=n)
    pulled = np.empty(n, dtype=np.int64)
    last = np.full(n_workers, -1)
    for k, w in enumerate(worker):
        pulled[k] = rng.integers(last[w] + 1, k + 1)
        last[w] = k
    return worker, pulled


@pytest.mark.parametrize("n", [1, 2, 7, 60, 400])
def test_random_columns_with_random_flags(n):
    rng = np.random.default_rng(n)
    for n_workers in (1, 3, 8):
        worker, pulled = random_columns(rng, n, n_workers)
        fresh, round_end = rng.random(n) < 0.2, rng.random(n) < 0.5
        for kw in (
            {},
            dict(fresh=fresh, round_end=round_end, window=3, eval_every=5),
            dict(client=rng.integers(0, 5, size=n), n_clients=5, fresh=fresh, window=2),
        ):
            want = reference_plan(worker, pulled, n_workers, **kw)
            assert_same_plan(make_plan(worker, pulled, n_workers, **kw), want)


@pytest.mark.parametrize("n", [7, 400])
def test_random_columns_with_pulls_before_apply(n):
    """Pulls of the version the worker's previous commit was applied to, mixed with the rest."""
    rng = np.random.default_rng(n)
    for n_workers in (1, 3, 8):
        worker = rng.integers(0, n_workers, size=n)
        pulled, last = np.empty(n, np.int64), np.full(n_workers, -1)
        for k, w in enumerate(worker):
            pulled[k] = rng.integers(max(last[w], 0), k + 1)
            last[w] = k
        before, seen = np.zeros(n, bool), np.full(n_workers, -1)
        for k, w in enumerate(worker):
            before[k] = seen[w] >= 0 and pulled[k] == seen[w]
            seen[w] = k
        # new lives anywhere but at a pull before apply (refused: tested above)
        fresh = default_fresh(worker) | ((rng.random(n) < 0.2) & ~before)
        for kw in ({}, dict(fresh=fresh, round_end=fresh, window=3, eval_every=5)):
            want = reference_plan(worker, pulled, n_workers, **kw)
            assert_same_plan(make_plan(worker, pulled, n_workers, **kw), want)
            assert (want.fill_pre is not None) == bool(before.any())


def test_host_fill_keys_keep_the_order_of_their_first_commit():
    # commit 2 fills after commit 1; commit 3 (a restart of worker 2) after commit 0
    worker, pulled = np.array([0, 1, 0, 2]), np.array([0, 0, 2, 1])
    fresh = np.array([True, True, False, True])
    want = reference_plan(worker, pulled, 3, fresh=fresh)
    assert list(want.host_fills) == [1, 0]
    assert_same_plan(make_plan(worker, pulled, 3, fresh=fresh), want)


@pytest.mark.parametrize(
    "case",
    [
        dict(worker=[], pulled=[], n_workers=2),
        dict(worker=[], pulled=[], n_workers=2, eval_every=3, window=3),
        dict(worker=[], pulled=[], n_workers=2, client=np.zeros(0, int), n_clients=4),
        dict(worker=[0], pulled=[0], n_workers=1, eval_every=3),
        dict(worker=[0, 1, 2, 0, 1, 2], pulled=[0, 0, 0, 1, 2, 3], n_workers=3),
        dict(worker=[0, 1, 2, 1, 0], pulled=[0, 0, 2, 2, 3], n_workers=3, window=3),
        dict(worker=[0, 1, 1, 0], pulled=[0, 0, 2, 2], n_workers=2, eval_every=3),
        dict(worker=[0, 1, 0, 0], pulled=[0, 0, 1, 3], n_workers=2, window=4),
        dict(
            worker=[0, 1, 2, 1, 0, 1, 2, 0],
            pulled=[0, 0, 2, 2, 3, 4, 3, 5],
            n_workers=3,
            window=3,
            eval_every=3,
        ),
        dict(
            worker=[0, 1, 0, 1, 0, 1],
            pulled=[0, 0, 1, 2, 3, 4],
            n_workers=2,
            client=np.array([3, 0, 3, 1, 0, 3]),
            n_clients=4,
            window=3,
            eval_every=2,
        ),
    ],
)
def test_small_cases(case):
    case = dict(case)
    args = (np.array(case.pop("worker"), int), np.array(case.pop("pulled"), int))
    n_workers = case.pop("n_workers")
    want = reference_plan(*args, n_workers, **case)
    assert_same_plan(make_plan(*args, n_workers, **case), want)


@pytest.mark.parametrize(
    ("worker", "pulled", "fresh"),
    [
        ([0, 1, 0, 0], [0, 0, 2, 1], None),  # older than commit 2's version
        ([0, 1, 0, 1, 1], [0, 0, 0, 0, 2], [1, 1, 1, 0, 0]),  # the first of two is named
        ([0, 1, 1, 0, 1], [0, 0, 2, 3, 1], None),
        ([2, 0, 2, 1, 2], [0, 0, 0, 3, 2], [1, 1, 1, 1, 0]),  # a new life pulled before apply
    ],
)
def test_the_first_offending_commit_is_reported(worker, pulled, fresh):
    worker, pulled = np.array(worker), np.array(pulled)
    kw = {} if fresh is None else {"fresh": np.array(fresh, bool)}
    with pytest.raises(ValueError) as want:
        reference_plan(worker, pulled, 3, **kw)
    with pytest.raises(engine.UnreplayableTrace, match=re.escape(str(want.value))):
        make_plan(worker, pulled, 3, **kw)
    assert "one snapshot slot per worker cannot replay that" in str(want.value)


def test_the_error_message_names_the_commit_and_the_reason():
    message = (
        "commit 3: worker 0 computed on version 1, older than the one its previous commit 2 "
        "was applied to; one snapshot slot per worker cannot replay that"
    )
    with pytest.raises(engine.UnreplayableTrace, match=re.escape(message)):
        make_plan(np.array([0, 1, 0, 0]), np.array([0, 0, 2, 1]), 2)


def test_a_pull_before_apply_is_a_pre_fill_not_an_error():
    """The trace of `server.pull: before_apply`: each worker's next gradient on the version
    its own commit was applied to (version 0 included)."""
    spec = cluster(3, budget=40)
    trace = timing.simulate(dataclasses.replace(spec, pull_at=timing.PullAt.BEFORE_APPLY), seed=1)
    plan = check_trace(trace)
    assert plan.fill_pre is not None and plan.fill_pre.sum() == len(trace) - 3
    assert not plan.fill_self.any() and not plan.host_fills
    assert trace.staleness[3:].min() >= 1
