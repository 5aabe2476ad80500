"""Every rule and variant against its plain-numpy reference, driven as the engine drives it."""

import functools

import jax
import numpy as np
import pytest
import rules_reference as ref
from rules_harness import (
    async_trace,
    drive,
    make_problem,
    max_abs_error,
    round_ends,
    staleness_of,
    sync_trace,
)

from gemsim import rules

N_ASYNC, N_SYNC, N_COMMITS = 4, 3, 24
TOL = 1e-6

CASES = {
    "gem": (
        rules.gem(0.05),
        functools.partial(
            ref.ref_gem,
            lr=0.05,
            momentum=0.9,
            kappa=1.0,
            pi_max=5.0,
            eps=1e-12,
            inside=False,
            pulled=False,
        ),
    ),
    "gem-inside": (
        rules.gem(0.05, eps=1e-3, eps_placement=rules.EpsPlacement.INSIDE),
        functools.partial(
            ref.ref_gem,
            lr=0.05,
            momentum=0.9,
            kappa=1.0,
            pi_max=5.0,
            eps=1e-3,
            inside=True,
            pulled=False,
        ),
    ),
    "gem-pulled": (
        rules.gem(0.05, gradient_at=rules.GradientAt.PULLED),
        functools.partial(
            ref.ref_gem,
            lr=0.05,
            momentum=0.9,
            kappa=1.0,
            pi_max=5.0,
            eps=1e-12,
            inside=False,
            pulled=True,
        ),
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
        functools.partial(
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
        functools.partial(ref.ref_scaled, lr=0.1, weight=lambda t: 1 / (t + 1)),
    ),
    "staleness-polynomial": (
        rules.staleness(0.1, weight=rules.Polynomial(0.5)),
        functools.partial(ref.ref_scaled, lr=0.1, weight=lambda t: (t + 1) ** -0.5),
    ),
    "staleness-hinge": (
        rules.staleness(0.1, weight=rules.Hinge(a=0.5, b=2)),
        functools.partial(
            ref.ref_scaled, lr=0.1, weight=lambda t: 1.0 if t <= 2 else 1 / (0.5 * (t - 2) + 1)
        ),
    ),
    "staleness-constant": (
        rules.staleness(0.1, weight=rules.ConstantWeight()),
        functools.partial(ref.ref_scaled, lr=0.1, weight=lambda t: 1.0),
    ),
    "softsync": (
        rules.softsync(0.1),
        functools.partial(ref.ref_scaled, lr=0.1, weight=lambda t: 1 / max(t, 1)),
    ),
    "softsync-c1-momentum": (
        rules.softsync(0.1, momentum=0.7),
        functools.partial(ref.ref_softsync, lr=0.1, c=1, momentum=0.7),
    ),
    "softsync-c3": (
        rules.softsync(0.1, c=3),
        functools.partial(ref.ref_softsync, lr=0.1, c=3, momentum=0.0),
    ),
    "softsync-c2-momentum": (
        rules.softsync(0.1, c=2, momentum=0.5),
        functools.partial(ref.ref_softsync, lr=0.1, c=2, momentum=0.5),
    ),
    "downpour": (
        rules.downpour(0.05),
        functools.partial(ref.ref_downpour, lr=0.05, window=1, local_momentum=0.0),
    ),
    "downpour-window3": (
        rules.downpour(0.05, window=3),
        functools.partial(ref.ref_downpour, lr=0.05, window=3, local_momentum=0.0),
    ),
    "downpour-window3-momentum": (
        rules.downpour(0.05, window=3, local_momentum=0.7),
        functools.partial(ref.ref_downpour, lr=0.05, window=3, local_momentum=0.7),
    ),
    "agn-window4": (
        rules.agn(0.05, window=4),
        functools.partial(ref.ref_agn, lr=0.05, window=4),
    ),
    "easgd": (
        rules.easgd(0.1, alpha=0.3, window=3),
        functools.partial(ref.ref_easgd, lr=0.1, alpha=0.3, window=3),
    ),
    "dcasgd": (
        rules.dcasgd(0.1, lam=0.5),
        functools.partial(ref.ref_dcasgd, lr=0.1, lam=0.5, adaptive=False, decay=0.95, lam0=2.0),
    ),
    "dcasgd-adaptive": (
        rules.dcasgd(0.1, adaptive=True, decay=0.9, lam0=0.5),
        functools.partial(ref.ref_dcasgd, lr=0.1, lam=0.04, adaptive=True, decay=0.9, lam0=0.5),
    ),
    "sync-n3": (
        rules.sync(0.1, momentum=0.8),
        functools.partial(ref.ref_sync, lr=0.1, momentum=0.8),
    ),
}


def _setup(name):
    rule, reference = CASES[name]
    if rule.name == "sync":
        n, order = N_SYNC, sync_trace(1, N_SYNC, N_COMMITS // N_SYNC)
    else:
        n, order = N_ASYNC, async_trace(1, N_ASYNC, N_COMMITS)
    problem = make_problem(7, n, len(order))
    return rule, reference, problem, order, n


def _drive(rule, problem, order, n, **kw):
    """Sync rounds are the runs of commits sharing a pulled version (see sync_trace)."""
    round_end = round_ends(order) if rule.name == "sync" else None
    return drive(rule, problem, order, n, round_end=round_end, **kw)


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


def _check_against_reference(driven, expected_versions, expected_infos):
    assert len(driven.versions) == len(expected_versions)
    errors = [max_abs_error(v, e) for v, e in zip(driven.versions, expected_versions, strict=True)]
    assert max(errors) <= TOL, f"max abs error {max(errors):.3g} at commit {int(np.argmax(errors))}"
    for k, (info, want) in enumerate(zip(driven.infos, expected_infos, strict=True)):
        for field, value in want.items():
            tolerance = PI_TOLERANCE.get(field, dict(rtol=1e-5, atol=1e-6))
            np.testing.assert_allclose(
                np.asarray(getattr(info, field)),
                value,
                **tolerance,
                err_msg=f"info.{field} at commit {k}",
            )


def _check_info_structure(infos):
    """Same NamedTuple, same shapes at every commit; update_norm and weight first."""
    shapes = [[np.shape(v) for v in info] for info in infos]
    assert all(type(info) is type(infos[0]) for info in infos)
    assert all(s == shapes[0] for s in shapes)
    assert infos[0]._fields[:2] == ("update_norm", "weight")


def test_problem_size():
    assert sum(x.size for x in jax.tree.leaves(make_problem(0, 1, 1).params)) == N_PARAMS


def test_traces_have_varied_staleness():
    taus = staleness_of(async_trace(1, N_ASYNC, N_COMMITS))
    assert len(set(taus)) >= 4 and len({w for w, _ in async_trace(1, N_ASYNC, N_COMMITS)}) == 4
    assert set(staleness_of(sync_trace(1, N_SYNC, 8))) == {0, 1, 2}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_numpy_reference_jitted(name):
    rule, reference, problem, order, n = _setup(name)
    driven = _drive(rule, problem, order, n)
    _check_against_reference(driven, *reference(problem, order, n))
    # The commit compiled once, at the first call, and was reused for every later commit.
    assert driven.commit_first_compiles >= 1 and driven.commit_recompiles == 0
    assert driven.commit_cache_size == 1
    assert driven.local_cache_size == 1
    _check_info_structure(driven.infos)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_numpy_reference_vmapped_workers(name):
    rule, reference, problem, order, n = _setup(name)
    driven = _drive(rule, problem, order, n, vmapped=True)
    _check_against_reference(driven, *reference(problem, order, n))
    assert driven.commit_recompiles == 0 and driven.commit_cache_size == 1
