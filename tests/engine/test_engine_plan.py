"""The execution plan: which snapshot each commit reads and when slots are filled."""

import numpy as np
import pytest
from engine_helpers import assert_same, cluster

from gemsim import engine, problems, rules, timing
from gemsim.engine import make_plan


def test_pull_at_commit_fills_own_slot():
    # round robin of 3 workers: each commit's next pull is the version it creates
    worker = np.array([0, 1, 2, 0, 1, 2])
    pulled = np.array([0, 0, 0, 1, 2, 3])
    plan = make_plan(worker, pulled, 3)
    assert plan.fill_self.tolist() == [True, True, True, False, False, False]
    assert plan.host_fills == {}
    assert plan.staleness.tolist() == [0, 1, 2, 2, 2, 2]


def test_late_join_and_restart_are_host_fills():
    # worker 2 joins and pulls version 2; worker 0 restarts and pulls version 3
    worker = np.array([0, 1, 2, 1, 0])
    pulled = np.array([0, 0, 2, 2, 3])
    plan = make_plan(worker, pulled, 3)
    assert {k: v.tolist() for k, v in plan.host_fills.items()} == {1: [2], 2: [0]}
    assert plan.fill_self.tolist() == [False, True, False, False, False]


def test_synchronous_rounds_fill_everyone_at_the_barrier():
    worker = np.array([0, 1, 1, 0])
    pulled = np.array([0, 0, 2, 2])
    plan = make_plan(worker, pulled, 2)
    assert plan.fill_self.tolist() == [False, True, False, False]
    assert {k: v.tolist() for k, v in plan.host_fills.items()} == {1: [0]}


def test_first_step_counts_window_batches_per_worker():
    plan = make_plan(np.array([0, 1, 0, 0]), np.array([0, 0, 1, 3]), 2, window=4)
    assert plan.first_step.tolist() == [0, 0, 4, 8]


def test_pull_before_own_previous_commit_is_rejected():
    with pytest.raises(ValueError, match="older than the one its previous commit 2 was"):
        make_plan(np.array([0, 1, 0, 0]), np.array([0, 0, 2, 1]), 2)


def test_segments_split_at_evals_and_host_fills():
    worker = np.array([0, 1, 2, 1, 0, 1, 2, 0])
    pulled = np.array([0, 0, 2, 2, 3, 4, 3, 5])
    plan = make_plan(worker, pulled, 3, eval_every=3)
    segs = plan.segments(max_len=512)
    cuts = sorted({*plan.host_fills, *plan.evals.tolist()})
    assert [b - 1 for _, b in segs] == cuts
    assert segs[0][0] == 0 and segs[-1][1] == len(plan)
    assert all(a < b for a, b in segs)
    assert all(b == c for (_, b), (c, _) in zip(segs, segs[1:], strict=False))


@pytest.mark.bitexact
def test_one_compiled_loop_serves_segments_of_every_length():
    """Evaluations every 37 commits and a 32-commit chunk cut the plan into segments of 32, 5
    and 9 commits: one program runs them all, and its results equal a run of one
    segment per commit (each loop's padding changes nothing)."""
    prob = problems.make_problem(problems.Quadratic(dim=6, noise=0.1), None, 1, seed=2)
    rule = rules.gem(lr=0.05)
    trace = timing.simulate(cluster(3, budget=120), seed=4)
    plan = engine.plan_of(trace, eval_every=37)
    assert {b - a for a, b in plan.segments(32)} == {32, 5, 9}
    kw = dict(params=prob.init_params, n_workers=3, evals_in_loop=False)  # segments cut by evals
    chunked = engine.SequentialExecutor(rule, prob, chunk=32, **kw)
    one_by_one = engine.SequentialExecutor(rule, prob, chunk=1, **kw)
    a, b = chunked.execute(plan), one_by_one.execute(plan)
    assert chunked.compiled_programs() == 1 == one_by_one.compiled_programs()
    assert a.n_commits == b.n_commits == 120
    # Parameters and the rule's state are the same bits (the design's guarantee). Sums that
    # are only reported (the batch loss, GEM's energies, the evaluations) are fused into
    # each loop body as XLA sees fit, and XLA's reduction code differs by instruction set
    # (AVX and AVX2 round a 32-commit loop's batch loss one ulp off a 1-commit loop's):
    # they agree within the documented 1e-6 relative.
    assert_same(a, b, metrics_rtol=1e-6)
