"""Rule state at joins and restarts, through the engine.

A worker's new life (a late join, a restart: the trace's `fresh` flag) is a new process that
pulls the central variable: GEM's `s` is that value and its proxy starts at zero, EASGD's
local variable starts at the centre, and every state that lives in a worker process starts
anew, exactly as if the life belonged to a worker that never committed before.
"""

import numpy as np
import pytest
from engine_helpers import curvature, execute, quadratic

from gemsim import rules
from gemsim.trace import CommitTrace

F = np.float32


def trace_of(workers, pulled, n_workers, fresh=None) -> CommitTrace:
    n = len(workers)
    return CommitTrace.from_columns(
        time=np.arange(n, dtype=float),
        worker=workers,
        pulled_version=pulled,
        compute_time=np.ones(n),
        queue_time=np.zeros(n),
        service_time=np.zeros(n),
        n_workers=n_workers,
        duration=float(n),
        fresh=fresh,
    )


def late_join(alone=30, after=10):
    """Worker 0 commits alone `alone` times (pull at commit); worker 1 joins on version
    `alone`; then they alternate, each pulling at its own commit."""
    workers, pulled = [0] * alone, list(range(alone))
    last = {0: alone - 1}
    for k in range(alone, alone + after):
        w = 1 if (k - alone) % 2 == 0 else 0
        workers.append(w)
        pulled.append(last[w] + 1 if w in last else alone)
        last[w] = k
    return trace_of(workers, pulled, 2)


def test_a_late_joiner_s_first_gem_commit_is_not_discarded():
    trace = late_join()
    k = 30
    assert trace.worker[k] == 1 and trace.pulled_version[k] == 30 and trace.fresh[k]
    out = execute(rules.gem(lr=0.05), quadratic(dim=8, condition=10.0), trace)
    # s is the value the joiner pulled, so d = theta - s = 0 and pi = kappa|m|/(|dtheta| + eps)
    # = 1 up to eps: the joiner's first step is plain SGD (before: s = theta0, so |d| >
    # kappa|m| and pi = 0 on every parameter: the gradient was thrown away).
    assert out.metrics["frac_pi_zero"][k] == 0.0
    # The median comes from a histogram: within pi_max / 2048 (pi_max = 5 by default).
    np.testing.assert_allclose(out.metrics["pi_median"][k], 1.0, atol=5.0 / 2048)
    assert out.metrics["update_norm"][k] > 0


def test_an_easgd_joiner_starts_from_the_centre():
    lr, alpha, window = 0.05, 0.4, 3
    trace = late_join(alone=12, after=1)
    problem = quadratic(dim=8, condition=10.0)  # noiseless: the gradient is h * x
    h = curvature(problem)
    out12 = execute(
        rules.easgd(lr, alpha, window),
        problem,
        trace_of(trace.worker[:12], trace.pulled_version[:12], 2),
    )
    out13 = execute(rules.easgd(lr, alpha, window), problem, trace)
    centre = np.asarray(out12.params["theta"], dtype=F)
    x = centre.copy()
    for _ in range(window):
        x = (x - F(lr) * (h * x)).astype(F)
    expected = centre + F(alpha) * (x - centre)
    np.testing.assert_allclose(out13.params["theta"], expected, rtol=1e-6, atol=1e-7)


STATEFUL = {
    "gem": rules.gem(lr=0.02),
    "gem-pulled": rules.gem(lr=0.02, gradient_at="pulled"),
    "easgd": rules.easgd(0.05, 0.3, window=2),
    "downpour-momentum": rules.downpour(0.05, window=2, local_momentum=0.8),
    "dcasgd-adaptive": rules.dcasgd(0.05, adaptive=True),
    "softsync-c2": rules.softsync(0.05, c=2, momentum=0.5),
}


@pytest.mark.bitexact
@pytest.mark.parametrize("name", list(STATEFUL))
def test_a_restarted_life_is_a_worker_that_never_committed(name):
    """Worker 1 restarts after commit 5 and pulls version 7; relabelling that new life as
    worker 2 (present from the start but idle until then) must give the same parameters bit
    for bit: a restart keeps nothing of the old process."""
    rule = STATEFUL[name]
    workers = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    pulled = [0, 0, 1, 2, 3, 4, 5, 7, 7, 8, 9, 10]
    fresh = [True, True] + [False] * 5 + [True] + [False] * 4
    restarted = trace_of(workers, pulled, 3, fresh=fresh)
    relabelled = trace_of(
        [2 if (w == 1 and k >= 7) else w for k, w in enumerate(workers)], pulled, 3
    )
    problem = quadratic(dim=6, condition=10.0)  # noiseless: batches do not depend on the worker
    a = execute(rule, problem, restarted, chunk=4)
    b = execute(rule, problem, relabelled, chunk=4)
    np.testing.assert_array_equal(a.params["theta"], b.params["theta"])
    kept = execute(rule, problem, trace_of(workers, pulled, 3), chunk=4)  # no restart flag
    if name != "softsync-c2":  # its worker state, a timestamp, is set by any pull
        # the old process's state would have made a difference
        assert not np.array_equal(kept.params["theta"], a.params["theta"])
