"""Evaluations inside the commit loop (`SequentialExecutor`, `evals_in_loop`): the same run as
with evaluations between segments, and used where a plan evaluates often."""

import numpy as np
import pytest
from engine_helpers import assert_same, cluster

from gemsim import engine, problems, rules, timing
from gemsim.types import Status


def both(prob, rule, plan, n_workers, chunk=16):
    """The plan executed with evaluations between segments and inside the loop."""
    kw = dict(params=prob.init_params, n_workers=n_workers, chunk=chunk)
    host = engine.SequentialExecutor(rule, prob, evals_in_loop=False, **kw)
    loop = engine.SequentialExecutor(rule, prob, evals_in_loop=True, **kw)
    a, b = host.execute(plan), loop.execute(plan)
    assert loop._eval_loop._cache_size() == 1 and loop._loop._cache_size() == 0
    return a, b


CASES = {
    "gem": (problems.Quadratic(dim=12, noise=0.1), rules.gem(lr=0.05)),
    "window": (problems.Quadratic(dim=12, noise=0.1), rules.downpour(lr=0.05, window=3)),
    # each worker's own optimum: a per-worker evaluation at every evaluation
    "per-worker": (problems.Quadratic(dim=12, noise=0.1, heterogeneity=1.0), rules.gem(lr=0.05)),
}


@pytest.mark.bitexact
@pytest.mark.parametrize("case", CASES)
def test_evaluations_in_the_loop_give_the_same_run(case):
    """Parameters and server state are the same bits; the metrics and evaluations agree
    within the reported sums' 1e-6 (`test_engine_plan`); every evaluation of the plan is
    recorded, with the per-worker values where the workers have data of their own."""
    model, rule = CASES[case]
    prob = problems.make_problem(model, None, 1, seed=3, n_workers=4)
    trace = timing.simulate(cluster(4, budget=60, window=rule.window), seed=1)
    plan = engine.plan_of(trace, window=rule.window, eval_every=2)  # cuts and chunk ends cross
    a, b = both(prob, rule, plan, 4)
    assert_same(a, b, metrics_rtol=1e-6)
    assert sorted(b.evals) == plan.evals.tolist()
    assert (len(b.worker_evals) == len(b.evals)) == (case == "per-worker")


@pytest.mark.bitexact
def test_a_divergence_keeps_the_evaluations_before_it():
    """Past a non-finite commit the host evaluates nothing: the loop's evaluations after it
    are dropped, and the last finite state is recovered as before."""
    prob = problems.make_problem(problems.Quadratic(dim=8, condition=100.0), None, 1, seed=2)
    rule = rules.downpour(lr=5.0)
    plan = engine.plan_of(timing.simulate(cluster(3, budget=80), seed=4), eval_every=3)
    a, b = both(prob, rule, plan, 3, chunk=64)
    assert a.status is Status.DIVERGED and a.diverged_at > 3
    assert_same(a, b, metrics_rtol=1e-6)
    assert max(b.evals) < b.diverged_at


def test_the_loop_evaluates_where_a_plan_evaluates_often():
    """By default: inside the loop at an evaluation every commit, between segments at one
    every 1,000 commits (and at none)."""
    prob = problems.make_problem(problems.Quadratic(dim=8), None, 1, seed=0)
    rule = rules.downpour(lr=0.01)
    ex = engine.SequentialExecutor(rule, prob, params=prob.init_params, n_workers=3, chunk=64)
    long = timing.simulate(cluster(3, budget=3000), seed=0)
    for every, in_loop in ((1, True), (1000, False), (None, False)):
        plan = engine.plan_of(long, eval_every=every)
        assert ex._evals_in_loop(prob, plan) is in_loop
    dense = engine.plan_of(timing.simulate(cluster(3, budget=200), seed=0), eval_every=1)
    result = ex.execute(dense)
    assert sorted(result.evals) == list(range(200))
    assert np.isfinite([v["train_loss"] for v in result.evals.values()]).all()


@pytest.mark.bitexact
def test_runs_executed_together_evaluate_in_the_loop_as_between_segments():
    """`ManyRunsExecutor`: seeds of unequal lengths (padded) with per-worker data, two
    learning rates lifted; each run's result the same either way (parameters bit for bit)."""
    model = problems.Quadratic(dim=12, noise=0.1, heterogeneity=1.0)
    runs = []
    for seed, lr in ((0, 0.05), (1, 0.02), (2, 0.05)):
        prob = problems.make_problem(model, None, 1, seed=seed, n_workers=4)
        trace = timing.simulate(cluster(4, budget=40 + 7 * seed), seed=seed)
        plan = engine.plan_of(trace, eval_every=3)
        runs.append(engine.RunInputs(plan, prob, prob.init_params, {"lr": lr}))

    def make(in_loop):
        rule_of = lambda h: rules.gem(lr=h["lr"])  # noqa: E731
        kw = dict(n_workers=4, chunk=16, evals_in_loop=in_loop)
        return engine.ManyRunsExecutor(rule_of, runs[0], **kw)

    loop, host = make(True), make(False)
    got, want = loop.execute(runs), host.execute(runs)
    assert loop._eval_chunk._cache_size() == 1 and loop._chunk._cache_size() == 0
    for a, b, run in zip(want, got, runs, strict=True):
        assert_same(a, b, metrics_rtol=1e-6)
        assert sorted(b.evals) == sorted(b.worker_evals) == run.plan.evals.tolist()
