"""Every rule and variant against its paper's numpy reference, driven as the engine drives it.

The references (``rules_reference`` and ``rules_reference_local``) are written from the
papers' pseudocode and share nothing with ``gemsim.rules``. The trace is the hand-built
``rules_harness.CHURN``: four workers, staleness from 0 to 7, a slow worker, a late join, a
restart and a plain pull that is not a restart; the harness applies each rule's pull hook
where the engine would. Every case is driven with a jitted commit, the rules with worker
state or local steps also with their local phases vmapped over workers (the batched
executor's way). ``sync`` also runs barrier rounds.
"""

import functools

import jax
import numpy as np
import optax
import pytest
import rules_reference as ref
import rules_reference_local as ref_local
from rules_harness import (
    churn_trace,
    drive,
    host_pulls,
    make_problem,
    max_abs_error,
    round_ends,
    staleness_of,
    sync_trace,
)

from gemsim import rules

N = 4
TOL = 1e-6
# Where a rule divides a cancellation by a step (GEM's pi: (kappa|m| - |theta - s|) / |dtheta|;
# Gap-Aware's G: |theta - x0| / C at momentum 0.9) or normalises by a small second moment
# (AdamW), float32 trajectories drift apart by ulps per commit whatever the order of rounding:
# the reference itself is as far from a float64 run as the rule (2e-6 to 3e-6 at commit 24).
DRIFT = {"gem": 3e-6, "gem-inside": 4e-6, "gap_aware-momentum-ema": 4e-6, "local": 2e-6}
P = functools.partial
GEM = dict(momentum=0.9, kappa=1.0, pi_max=5.0, eps=1e-12, inside=False, pulled=False)
DCASGD = dict(lam=0.04, adaptive=False, decay=0.95, lam0=2.0)

CASES = {
    "gem": (rules.gem(0.05), P(ref.ref_gem, lr=0.05, **GEM)),
    "gem-inside": (
        rules.gem(0.05, eps=1e-3, eps_placement=rules.EpsPlacement.INSIDE),
        P(ref.ref_gem, lr=0.05, **{**GEM, "eps": 1e-3, "inside": True}),
    ),
    "gem-pulled": (
        rules.gem(0.05, gradient_at=rules.GradientAt.PULLED),
        P(ref.ref_gem, lr=0.05, **{**GEM, "pulled": True}),
    ),
    "gem-inside-pulled-kappa2": (
        rules.gem(
            0.03,
            momentum=0.8,
            kappa=2.0,
            pi_max=3.0,
            eps=1e-3,
            eps_placement="inside",
            gradient_at="pulled",
        ),
        P(
            ref.ref_gem,
            lr=0.03,
            momentum=0.8,
            kappa=2.0,
            pi_max=3.0,
            eps=1e-3,
            inside=True,
            pulled=True,
        ),
    ),
    "staleness-inverse": (
        rules.staleness(0.1),
        P(ref.ref_scaled, lr=0.1, weight=lambda t: 1 / (t + 1)),
    ),
    "staleness-polynomial": (
        rules.staleness(0.1, weight=rules.Polynomial(0.5)),
        P(ref.ref_scaled, lr=0.1, weight=lambda t: (t + 1) ** -0.5),
    ),
    "staleness-hinge": (
        rules.staleness(0.1, weight=rules.Hinge(a=0.5, b=2)),
        P(ref.ref_scaled, lr=0.1, weight=lambda t: 1.0 if t <= 2 else 1 / (0.5 * (t - 2) + 1)),
    ),
    "staleness-constant": (
        rules.staleness(0.1, weight=rules.ConstantWeight()),
        P(ref.ref_scaled, lr=0.1, weight=lambda t: 1.0),
    ),
    "softsync": (rules.softsync(0.1), P(ref.ref_softsync, lr=0.1, c=1, momentum=0.0)),
    "softsync-c1-momentum": (
        rules.softsync(0.1, momentum=0.7),
        P(ref.ref_softsync, lr=0.1, c=1, momentum=0.7),
    ),
    "softsync-c3": (rules.softsync(0.1, c=3), P(ref.ref_softsync, lr=0.1, c=3, momentum=0.0)),
    "softsync-c2-momentum": (
        rules.softsync(0.1, c=2, momentum=0.5),
        P(ref.ref_softsync, lr=0.1, c=2, momentum=0.5),
    ),
    "dcasgd": (rules.dcasgd(0.1, lam=0.5), P(ref.ref_dcasgd, lr=0.1, **{**DCASGD, "lam": 0.5})),
    "dcasgd-adaptive": (
        rules.dcasgd(0.1, adaptive=True, decay=0.9, lam0=0.5),
        P(ref.ref_dcasgd, lr=0.1, **{**DCASGD, "adaptive": True, "decay": 0.9, "lam0": 0.5}),
    ),
    "sync": (rules.sync(0.1, momentum=0.8), P(ref.ref_sync, lr=0.1, momentum=0.8)),
    "delay_adaptive": (rules.delay_adaptive(0.1), P(ref.ref_delay_adaptive, lr=0.1)),
    "delay_adaptive-tau_c": (
        rules.delay_adaptive(lr=0.1, tau_c=2.5),
        P(ref.ref_delay_adaptive, lr=0.1, tau_c=2.5),
    ),
    "ringmaster": (rules.ringmaster(0.1), P(ref.ref_ringmaster, lr=0.1)),
    "ringmaster-threshold2": (
        rules.ringmaster(lr=0.1, threshold=2),
        P(ref.ref_ringmaster, lr=0.1, threshold=2),
    ),
    "ringmaster-threshold1": (
        rules.ringmaster(lr=0.1, threshold=1),
        P(ref.ref_ringmaster, lr=0.1, threshold=1),
    ),
    "rennala": (rules.rennala(0.1), P(ref.ref_rennala, lr=0.1)),
    "rennala-batch2": (rules.rennala(lr=0.1, batch=2), P(ref.ref_rennala, lr=0.1, batch=2)),
    "server_momentum": (
        rules.server_momentum(lr=0.05, momentum=0.7),
        P(ref.ref_server_momentum, lr=0.05, momentum=0.7, implicit_correction=False),
    ),
    "server_momentum-corrected": (
        rules.server_momentum(lr=0.05, momentum=0.9, implicit_correction=True),
        P(ref.ref_server_momentum, lr=0.05, momentum=0.9, implicit_correction=True),
    ),
    "gap_aware": (rules.gap_aware(0.1), P(ref.ref_gap_aware, lr=0.1)),
    "gap_aware-momentum": (
        rules.gap_aware(lr=0.1, momentum=0.5),
        P(ref.ref_gap_aware, lr=0.1, momentum=0.5),
    ),
    "gap_aware-momentum-ema": (
        rules.gap_aware(lr=0.1, momentum=0.9, ema=0.9),
        P(ref.ref_gap_aware, lr=0.1, momentum=0.9, ema=0.9),
    ),
    "downpour": (
        rules.downpour(0.05),
        P(ref_local.ref_downpour, lr=0.05, window=1, local_momentum=0.0),
    ),
    "downpour-window3-momentum": (
        rules.downpour(0.05, window=3, local_momentum=0.7),
        P(ref_local.ref_downpour, lr=0.05, window=3, local_momentum=0.7),
    ),
    "agn-window4": (rules.agn(0.05, window=4), P(ref_local.ref_agn, lr=0.05, window=4)),
    "easgd": (
        rules.easgd(0.1, alpha=0.3, window=3),
        P(ref_local.ref_easgd, lr=0.1, alpha=0.3, window=3),
    ),
    "easgd-window1": (
        rules.easgd(0.1, alpha=0.5, window=1),
        P(ref_local.ref_easgd, lr=0.1, alpha=0.5, window=1),
    ),
    "eamsgd": (
        rules.eamsgd(lr=0.05, alpha=0.3, window=3, momentum=0.9),
        P(ref_local.ref_eamsgd, lr=0.05, alpha=0.3, window=3, momentum=0.9),
    ),
    "fedbuff": (
        rules.fedbuff(lr=0.05, window=3, buffer=3, server_lr=0.8),
        P(ref_local.ref_fedbuff, lr=0.05, window=3, buffer=3, server_lr=0.8),
    ),
    "fedasync-polynomial-prox": (
        rules.fedasync(lr=0.05, alpha=0.6, rho=0.5, window=3),
        P(
            ref_local.ref_fedasync,
            lr=0.05,
            alpha=0.6,
            rho=0.5,
            window=3,
            weight=lambda t: (t + 1) ** -0.5,
        ),
    ),
    "fedasync-hinge": (
        rules.fedasync(lr=0.05, alpha=0.9, window=2, weight=rules.Hinge(a=0.5, b=2)),
        P(
            ref_local.ref_fedasync,
            lr=0.05,
            alpha=0.9,
            rho=0.0,
            window=2,
            weight=lambda t: 1.0 if t <= 2 else 1 / (0.5 * (t - 2) + 1),
        ),
    ),
    "local": (  # the defaults: DiLoCo's AdamW (weight decay 0.1) and Nesterov outer step
        rules.local(lr=0.01, window=3),
        P(
            ref_local.ref_local,
            inner=("adamw", dict(lr=0.01)),
            window=3,
            outer_lr=0.7,
            outer_momentum=0.9,
        ),
    ),
    "local-momentum-sgd": (
        rules.local(
            inner=optax.sgd(0.05, momentum=0.5),
            outer=optax.sgd(0.5, momentum=0.8, nesterov=True),
            window=2,
        ),
        P(
            ref_local.ref_local,
            inner=("momentum_sgd", dict(lr=0.05, momentum=0.5)),
            window=2,
            outer_lr=0.5,
            outer_momentum=0.8,
        ),
    ),
}

# The rules with worker state or local steps, their local phases vmapped over workers (the
# batched executor's way); the others' local phase is the plain gradient.
VMAPPED = [
    "gem",
    "gem-pulled",
    "dcasgd-adaptive",
    "softsync-c2-momentum",
    "ringmaster-threshold2",
    "rennala-batch2",
    "downpour-window3-momentum",
    "easgd",
    "eamsgd",
    "fedbuff",
    "fedasync-polynomial-prox",
    "local",
]

# pi = (kappa|m| - |d|) / |dtheta| carries ~ulp(d)/|dtheta| of float32 noise where |dtheta| is
# small, so statistics of pi are compared at 1e-4, and the clipped fractions to two parameters.
# The medians come from a histogram: within pi_max / 2048 (GEM's default pi_max is 5) more.
N_PARAMS = 701
PI_TOLERANCE = {
    "pi_median": dict(rtol=0, atol=1e-4 + 5.0 / 2048),
    "pi_median_per_leaf": dict(rtol=0, atol=1e-4 + 5.0 / 2048),
    "frac_pi_zero": dict(rtol=0, atol=2.5 / N_PARAMS),
    "frac_pi_max": dict(rtol=0, atol=2.5 / N_PARAMS),
}


@pytest.fixture(scope="module")
def churn():
    order, fresh = churn_trace()
    return order, fresh, make_problem(11, N, len(order))


def _check(driven, versions, infos, tol=TOL):
    errors = [max_abs_error(v, e) for v, e in zip(driven.versions, versions, strict=True)]
    assert len(driven.versions) == len(versions)
    assert max(errors) <= tol, f"max abs error {max(errors):.3g} at commit {np.argmax(errors)}"
    shapes = [[np.shape(v) for v in info] for info in driven.infos]
    assert all(
        type(info) is type(driven.infos[0]) and s == shapes[0]
        for info, s in zip(driven.infos, shapes, strict=True)
    )
    for k, (info, want) in enumerate(zip(driven.infos, infos, strict=True)):
        assert info._fields[:2] == ("update_norm", "weight")
        for field, value in want.items():
            tolerance = PI_TOLERANCE.get(field, dict(rtol=1e-5, atol=1e-6))
            np.testing.assert_allclose(
                np.asarray(getattr(info, field)),
                value,
                **tolerance,
                err_msg=f"info.{field} at commit {k}",
            )


def _drive(name, *args, **kw):
    """optax's own code (adamw's bias correction) needs standard dtype promotion."""
    promotion = "standard" if name.startswith("local") else "strict"
    with jax.numpy_dtype_promotion(promotion):
        return drive(CASES[name][0], *args, **kw)


def _expected(name, order, fresh, problem, n=N, round_end=None):
    if name.startswith(("local", "sync")):
        ends = [True] * len(order) if round_end is None else round_end
        return CASES[name][1](problem, order, fresh, n, round_end=ends)
    return CASES[name][1](problem, order, fresh, n)


def test_the_trace_has_churn_and_varied_staleness():
    order, fresh = churn_trace()
    assert set(staleness_of(order)) >= {0, 1, 2, 3, 4, 6, 7}
    by_version = {k + 1: ws for k, ws in host_pulls(order, fresh).items()}
    assert by_version == {5: [(3, True)], 14: [(1, True)], 20: [(3, False)]}
    assert ref.pulls(order, fresh).count("plain") == 1


def test_problem_size():
    assert sum(x.size for x in jax.tree.leaves(make_problem(0, 1, 1).params)) == N_PARAMS


@pytest.mark.parametrize("name", list(CASES))
def test_matches_numpy_reference_jitted(name, churn):
    order, fresh, problem = churn
    driven = _drive(name, problem, order, N, fresh=fresh)
    _check(driven, *_expected(name, order, fresh, problem), DRIFT.get(name, TOL))
    # The commit compiled once, at the first call, and was reused for every later commit.
    assert driven.commit_first_compiles >= 1 and driven.commit_recompiles == 0
    assert driven.commit_cache_size == 1 and driven.local_cache_size == 1


@pytest.mark.parametrize("name", VMAPPED)
def test_matches_numpy_reference_vmapped_workers(name, churn):
    order, fresh, problem = churn
    driven = _drive(name, problem, order, N, fresh=fresh, vmapped=True)
    _check(driven, *_expected(name, order, fresh, problem), DRIFT.get(name, TOL))


@pytest.mark.parametrize("name", ["sync", "local-momentum-sgd"])
def test_barrier_rounds_average_each_round(name):
    n = 3
    order = sync_trace(2, n, 5)
    problem = make_problem(5, n, len(order))
    ends = round_ends(order)
    fresh = [k < n for k in range(len(order))]
    expected = _expected(name, order, fresh, problem, n=n, round_end=ends)
    _check(_drive(name, problem, order, n, round_end=ends), *expected)
    assert sum(info["update_norm"] > 0 for info in expected[1]) == 5  # one step per round


def test_the_trace_exercises_discards_buffers_and_gaps(churn):
    """The cases above are not vacuous: gradients are discarded, buffered and penalised."""
    order, fresh, problem = churn
    for threshold in (1, 2):
        _, ring = ref.ref_ringmaster(problem, order, fresh, N, lr=0.1, threshold=threshold)
        assert 0 < sum(i["weight"] for i in ring) < len(order)
    _, ren = ref.ref_rennala(problem, order, fresh, N, lr=0.1, batch=2)
    assert 0 < sum(i["weight"] for i in ren) < len(order)
    assert sum(i["update_norm"] > 0 for i in ren) >= 3
    _, buf = ref_local.ref_fedbuff(
        problem, order, fresh, N, lr=0.05, window=3, buffer=3, server_lr=1
    )
    assert {i["delay"] for i in buf} >= {0.0, 1.0, 2.0}
    _, gap = ref.ref_gap_aware(problem, order, fresh, N, lr=0.1)
    assert max(i["frac_penalized"] for i in gap) > 0.5
    _, soft = ref.ref_softsync(problem, order, fresh, N, lr=0.1, c=3, momentum=0.0)
    assert len({i["weight"] for i in soft}) >= 2


@pytest.mark.parametrize(
    "name", ["gem", "dcasgd-adaptive", "downpour-window3-momentum", "easgd", "eamsgd", "local"]
)
def test_restart_and_join_reset_worker_state(name, churn):
    """The references with no new process (no fresh pulls) give other results: the pull hook
    matters on this trace."""
    order, fresh, problem = churn
    with_hook, _ = _expected(name, order, fresh, problem)
    no_hook, _ = _expected(name, order, [k == 0 for k in range(len(order))], problem)
    assert max_abs_error(with_hook[-1], no_hook[-1]) > 1e-4
