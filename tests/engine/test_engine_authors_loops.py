"""gemsim against the event loops of the methods' own code, on fixed compute times.

Each reference below is a float64 numpy loop written from its authors' description, sharing
nothing with gemsim: a list of the times each worker's computation is due, the earliest
taken first and, among equal times, the lowest worker index (the authors' heaps of
``(time, worker)``), gradients of the noiseless quadratic (``h * x``) at the point each
worker was given. gemsim runs the same scenario end to end (scenario file -> timing model ->
engine, float32) with `server.ties: by_worker`. Compared: the sequence of workers whose
gradients were applied (the same updates in the same order, ties included: the compute times
are small integers and halves, so that many arrivals coincide) and the final point.

- Ringmaster ASGD with calculation stops (Maranjyan, Tyurin & Richtárik 2025; the authors'
  `RingmasterASGD`): every arriving gradient is applied and its worker restarts on the new
  point; then every worker whose computation has seen ``R`` updates since it started stops
  and restarts on the new point. Against gemsim's `{rule: ringmaster, stops: true}`; without
  stops, gemsim's paper variant finishes and discards those computations, and the updates
  differ (checked too: the two variants are not the same method).
- Rennala SGD as its authors' `RennalaSGD` runs it: at each step every worker starts on the
  current point; the server takes the first ``S`` gradients to arrive (a fast worker
  restarts on the same point and may give several), steps with their mean, and every worker
  restarts on the new point, the work in flight dropped. Against `{rule: rennala, restarts:
  true}`.
- The server loop of Mishchenko, Bach, Even & Woodworth 2022's notebook (in the repository
  konstmish/asynchronous_sgd): the worker whose gradient arrived is sent the current point
  *before* the gradient is applied, and the step is `lr` (plain) or `lr * n / max(n, delay)`
  (delay-adaptive) with `delay` the iterations since the worker's previous gradient. Against
  `server.pull: before_apply` with `downpour` and `delay_adaptive` (its default `tau_c` is n).
"""

from __future__ import annotations

import numpy as np
import pytest

from gemsim import problems
from gemsim.app import run
from gemsim.config import parse_scenario

DIM, CONDITION = 6, 10.0
TIMES = [1.0, 1.0, 1.5, 2.0, 3.0, 3.5]  # seconds per gradient, worker by worker
SECONDS = 24.0
N = len(TIMES)
H = problems.quadratic_curvature(problems.Quadratic(dim=DIM, condition=CONDITION)).astype(float)


def scenario(optimizer: dict, **server):
    return parse_scenario(
        {
            "name": "authors-loop",
            "seed": 0,
            "workers": {
                "count": N,
                "compute": {"dist": "constant", "value": 1.0},
                "groups": [
                    {"count": 1, "compute": {"dist": "constant", "value": t}} for t in TIMES
                ],
            },
            "server": {"ties": "by_worker", **server},
            "budget": {"seconds": SECONDS},
            "problem": {"model": {"name": "quadratic", "dim": DIM, "condition": CONDITION}},
            "optimizer": optimizer,
            "eval": {"every": 10_000},
        },
        "authors-loop.yaml",
    )


def gemsim_run(optimizer: dict, **server):
    result = run(scenario(optimizer, **server))
    theta = np.concatenate([np.ravel(v) for v in result.params.values()])
    applied = result.metrics["weight"].to_numpy() > 0
    return theta, result.trace.worker[applied].tolist(), result.trace


def earliest(due: list[float]) -> int:
    """The worker whose computation is due first; the lowest index among equal times."""
    return min(range(len(due)), key=lambda i: (due[i], i))


def ringmaster_with_stops(lr: float, R: int):
    x, k = np.ones(DIM), 0
    point, started = [x.copy() for _ in TIMES], [0] * N
    due, order = list(TIMES), []
    while True:
        i = earliest(due)
        t = due[i]
        if t > SECONDS:
            return x, order
        x = x - lr * (H * point[i])
        k += 1
        order.append(i)
        point[i], started[i], due[i] = x.copy(), k, t + TIMES[i]
        for j in range(N):  # stop what has seen R updates, restart it on x
            if k - started[j] >= R:
                point[j], started[j], due[j] = x.copy(), k, t + TIMES[j]


def rennala_restarting(lr: float, S: int):
    x, t, order = np.ones(DIM), 0.0, []
    while True:
        due = [t + c for c in TIMES]  # every worker starts on x
        total, count = np.zeros(DIM), 0
        while count < S:
            i = earliest(due)
            t = due[i]
            if t > SECONDS:
                return x, order
            total, count = total + H * x, count + 1
            order.append(i)
            due[i] = t + TIMES[i]  # a fast worker goes again on the same x
        x = x - lr * total / S


def notebook_loop(lr: float, adaptive: bool):
    x, it, order = np.ones(DIM), 0, []
    point, last, due = [x.copy() for _ in TIMES], [0] * N, list(TIMES)
    while True:
        i = earliest(due)
        t = due[i]
        if t > SECONDS:
            return x, order
        g = H * point[i]
        point[i], due[i] = x.copy(), t + TIMES[i]  # sent x before the gradient is applied
        delay = it - last[i]
        step = lr * N / max(N, delay) if adaptive else lr
        x = x - step * g
        last[i] = it
        order.append(i)
        it += 1


def assert_matches(got, want):
    theta, order, _ = got
    x, want_order = want
    assert order == want_order
    np.testing.assert_allclose(theta, x, rtol=2e-6, atol=1e-7)
    assert np.max(np.abs(x - 1.0)) > 0.05 and np.max(np.abs(x)) < 1  # it moved, and converges


@pytest.mark.parametrize("R", [1, 2, 4])
def test_ringmaster_with_stops_equals_the_authors_loop(R):
    lr = 0.03
    got = gemsim_run({"rule": "ringmaster", "lr": lr, "threshold": R, "stops": True})
    assert_matches(got, ringmaster_with_stops(lr, R))
    trace = got[2]
    assert trace.staleness.max() < R  # no gradient arrives with a delay >= R
    # The paper's variant without stops is another method on the same workers: it computes
    # the stale gradients to the end and discards them (at R = 1 only worker 0's count).
    without = gemsim_run({"rule": "ringmaster", "lr": lr, "threshold": R})
    assert len(without[2]) > len(without[1])
    assert (without[1], len(without[2])) != (got[1], len(trace))


@pytest.mark.parametrize("S", [2, 6])
def test_rennala_restarting_equals_the_authors_loop(S):
    lr = 0.05
    got = gemsim_run({"rule": "rennala", "lr": lr, "batch": S, "restarts": True})
    x, order = rennala_restarting(lr, S)
    theta, _, trace = got
    assert trace.worker.tolist() == order  # every gradient counts: none is discarded
    assert_matches(got, (x, order))
    paper = gemsim_run({"rule": "rennala", "lr": lr, "batch": S})
    assert len(paper[1]) < len(order)  # the paper's loop discards stale gradients instead


@pytest.mark.parametrize("rule", ["downpour", "delay_adaptive"])
def test_pull_before_apply_equals_the_notebooks_loop(rule):
    lr = 0.02
    got = gemsim_run({"rule": rule, "lr": lr}, pull="before_apply")
    assert_matches(got, notebook_loop(lr, adaptive=rule == "delay_adaptive"))
    trace = got[2]
    first = np.unique(trace.worker, return_index=True)[1]
    later = np.setdiff1d(np.arange(len(trace)), first)
    assert trace.staleness[later].min() >= 1  # every delay >= 1
