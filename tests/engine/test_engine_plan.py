"""The execution plan: which snapshot each commit reads and when slots are filled."""

import numpy as np
import pytest

from gemsim.engine import chunk_sizes, make_plan


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
    with pytest.raises(ValueError, match="not after its own previous commit"):
        make_plan(np.array([0, 1, 0]), np.array([0, 0, 0]), 2)


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


@pytest.mark.parametrize("length", [0, 1, 7, 8, 63, 100, 511, 512, 1500])
def test_chunk_sizes_sum_and_come_from_few_buckets(length):
    sizes = chunk_sizes(length, 512)
    assert sum(sizes) == length
    assert set(sizes) <= {1, 8, 64, 512}
