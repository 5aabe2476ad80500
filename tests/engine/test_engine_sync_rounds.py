"""Synchronous SGD averages exactly the gradients of each barrier round, whatever its size.

The reference finds the rounds on its own (in a barrier protocol the commits of a round are
the ones computed on the same version) and averages their gradients with numpy; the rule is
told where rounds end by the trace's `round_end` flags. A crash or a late join makes rounds
smaller than the number of workers: before rounds were marked, the rule stepped every n
commits, mixing gradients of two versions.
"""

import dataclasses

import numpy as np
import pytest
from engine_helpers import cluster, curvature, execute, quadratic

from gemsim import rules, timing

F = np.float32
LR, MOMENTUM = 0.1, 0.5


def noise_of(problem, w: int, step: int) -> np.ndarray:
    """The quadratic's gradient noise z for worker w's mini-batch `step` (its data)."""
    return np.asarray(problem.batch(w, step).x, dtype=F)


def reference(trace, problem) -> np.ndarray:
    h = curvature(problem)
    theta = np.ones_like(h)
    v = np.zeros_like(h)
    versions, steps = [theta], {}
    k = 0
    while k < len(trace):
        members = [k]
        while k + len(members) < len(trace) and (
            trace.pulled_version[k + len(members)] == trace.pulled_version[k]
        ):
            members.append(k + len(members))
        grads = []
        for j in members:
            w = int(trace.worker[j])
            x = versions[int(trace.pulled_version[j])]
            grads.append(h * x + noise_of(problem, w, steps.get(w, 0)))
            steps[w] = steps.get(w, 0) + 1
        complete = trace.round_end[members[-1]]  # the budget may cut the last round short
        if complete:
            v = (F(MOMENTUM) * v + np.mean(np.stack(grads), axis=0)).astype(F)
            theta = (theta - F(LR) * v).astype(F)
        versions += [theta] * len(members)
        k += len(members)
    return theta


def barrier_trace(**kw):
    spec = cluster(4, compute=timing.Constant(0.1), synchronous=True, budget=40, **kw)
    return timing.simulate(spec, seed=0)


@pytest.mark.parametrize(
    "case",
    ["crash", "join", "restart"],
)
def test_sync_averages_each_round_as_the_numpy_reference(case):
    kw = {
        "crash": dict(failures={3: [timing.Failure(at=0.35)]}),
        "join": dict(joins={3: 0.25}),
        "restart": dict(failures={2: [timing.Failure(at=0.15, restart_after=0.3)]}),
    }[case]
    trace = barrier_trace(**kw)
    sizes = np.diff(np.flatnonzero(np.r_[True, np.diff(trace.pulled_version) != 0, True]))
    assert 3 in sizes and 4 in sizes  # rounds of both sizes
    assert trace.round_end.sum() == np.count_nonzero(np.diff(trace.pulled_version)) + (
        1 if trace.round_end[-1] else 0
    )
    problem = quadratic(dim=6, condition=10.0, noise=0.3)
    out = execute(rules.sync(LR, momentum=MOMENTUM), problem, trace)
    np.testing.assert_allclose(out.params["theta"], reference(trace, problem), rtol=2e-6, atol=1e-7)


def round_end_reference(trace, problem) -> np.ndarray:
    """Sync SGD over the rounds the trace's `round_end` flags close: each commit's gradient
    at the version it was computed on (a K-async round mixes versions), averaged at the
    round's last commit; an unfinished last round is not applied."""
    h = curvature(problem)
    theta = np.ones_like(h)
    v = np.zeros_like(h)
    versions, steps, grads = [theta], {}, []
    for j in range(len(trace)):
        w = int(trace.worker[j])
        x = versions[int(trace.pulled_version[j])]
        grads.append(h * x + noise_of(problem, w, steps.get(w, 0)))
        steps[w] = steps.get(w, 0) + 1
        if trace.round_end[j]:
            v = (F(MOMENTUM) * v + np.mean(np.stack(grads), axis=0)).astype(F)
            theta = (theta - F(LR) * v).astype(F)
            grads = []
        versions.append(theta)
    return theta


@pytest.mark.parametrize("protocol", [timing.KSync(2), timing.KAsync(3)], ids=repr)
def test_sync_follows_the_rounds_of_k_protocols(protocol):
    spec = dataclasses.replace(
        cluster(4, compute=timing.Exponential(0.1), budget=100), protocol=protocol
    )
    trace = timing.simulate(spec, seed=3)
    ends = np.flatnonzero(trace.round_end)
    assert len(ends) == 100 // protocol.k and np.all(np.diff(np.r_[-1, ends]) == protocol.k)
    rounds = np.split(trace.pulled_version, ends[:-1] + 1)
    mixed = [len(set(r.tolist())) > 1 for r in rounds]
    # K-sync's rounds share their version; K-async's mix versions (stale contributions).
    assert not any(mixed) if isinstance(protocol, timing.KSync) else any(mixed)
    problem = quadratic(dim=6, condition=10.0, noise=0.3)
    out = execute(rules.sync(LR, momentum=MOMENTUM), problem, trace)
    np.testing.assert_allclose(
        out.params["theta"], round_end_reference(trace, problem), rtol=2e-6, atol=1e-7
    )


def test_sync_follows_the_rounds_of_a_grace_period():
    spec = dataclasses.replace(
        cluster(4, compute=timing.LogNormal(0.1, 0.5), budget=100), protocol=timing.Grace(0.04)
    )
    trace = timing.simulate(spec, seed=3)
    sizes = np.diff(np.r_[-1, np.flatnonzero(trace.round_end)])
    assert sizes.min() == 1 and sizes.max() > 1  # windows of one commit and of several
    problem = quadratic(dim=6, condition=10.0, noise=0.3)
    out = execute(rules.sync(LR, momentum=MOMENTUM), problem, trace)
    # rounds of 1 to 4 commits sum in other orders than the reference's: float32 rounding,
    # grown along the stiffest coordinate over 100 commits (6e-6 of it here)
    np.testing.assert_allclose(
        out.params["theta"], round_end_reference(trace, problem), rtol=2e-5, atol=1e-6
    )
