"""GEM's properties: pi's range, energy matching, the variants, kappa, the diagnostics (zero
dtheta left out, the energies, one worker's speed) and gem_optax."""

import doctest

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rules_harness import async_trace, drive, jax_grad, leaves_np, make_problem

from gemsim import rules
from gemsim.rules import _gem, _gem_optax

SHAPES = [(7,), (3, 4), (2, 2, 5)]


def _inputs(seed, d_scale, shapes=SHAPES):
    """theta, m, s, g as lists of float32 leaves, with |d| about d_scale."""
    rng = np.random.default_rng(seed)
    draw = lambda scale: [jnp.asarray(rng.normal(0, scale, s), jnp.float32) for s in shapes]
    theta, m, g = draw(1.0), draw(0.1), draw(1.0)
    s = [t - jnp.asarray(rng.normal(0, d_scale, t.shape), jnp.float32) for t in theta]
    return theta, m, s, g


def _step(seed, d_scale, **hyper):
    defaults = dict(
        lr=0.1,
        momentum=0.9,
        kappa=1.0,
        pi_max=5.0,
        eps=1e-12,
        eps_placement=rules.EpsPlacement.OUTSIDE,
    )
    cfg = _gem.make_config(**{**defaults, **hyper})
    theta, m, s, g = _inputs(seed, d_scale)
    step = _gem.gem_step(cfg, theta, m, s, g)
    return cfg, [np.asarray(x) for x in jax.tree.leaves(step.pi)], step, (theta, m, s, g)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lr=st.floats(1e-3, 1.0),
    momentum=st.floats(0.0, 0.99),
    kappa=st.floats(0.5, 4.0),
    pi_max=st.floats(0.1, 10.0),
    eps=st.sampled_from([1e-12, 1e-6, 1e-3]),
    placement=st.sampled_from(list(rules.EpsPlacement)),
    d_scale=st.floats(1e-4, 10.0),
)
def test_pi_in_range_and_energy_matched_inside(
    seed, lr, momentum, kappa, pi_max, eps, placement, d_scale
):
    cfg, pis, step, _ = _step(
        seed,
        d_scale,
        lr=lr,
        momentum=momentum,
        kappa=kappa,
        pi_max=pi_max,
        eps=eps,
        eps_placement=placement,
    )
    for pi, m, d, dth in zip(
        pis, *(leaves_np(t) for t in (step.m, step.d, step.dtheta)), strict=True
    ):
        assert np.all(np.isfinite(pi))
        assert np.all(pi >= 0) and np.all(pi <= np.float32(pi_max))
        inner = (pi > 0) & (pi < np.float32(pi_max))
        lhs = np.abs(d) + pi * np.abs(dth)
        rhs = kappa * np.abs(m)
        slack = pi * eps + 1e-6 * (rhs + np.abs(d) + pi * np.abs(dth)) + 1e-30
        assert np.all(np.abs(lhs - rhs)[inner] <= slack[inner])
        # Where pi is matched, the central motion has at most the proxy's energy.
        assert np.all(np.abs(d + pi * dth)[inner] <= (rhs + slack)[inner])


def test_pi_clips_at_both_ends():
    _, pis, _, _ = _step(3, 0.3)
    pi = np.concatenate([p.ravel() for p in pis])
    assert np.any(pi == 0) and np.any(pi == np.float32(5.0)) and np.any((pi > 0) & (pi < 5))


def test_eps_placement_differs_exactly_where_dtheta_is_negative():
    eps = 1e-2  # large enough to see at float32
    _, outside, step, _ = _step(5, 0.1, eps=eps, eps_placement=rules.EpsPlacement.OUTSIDE)
    _, inside, _, _ = _step(5, 0.1, eps=eps, eps_placement=rules.EpsPlacement.INSIDE)
    dth = np.concatenate([x.ravel() for x in leaves_np(step.dtheta)])
    out = np.concatenate([p.ravel() for p in outside])
    ins = np.concatenate([p.ravel() for p in inside])
    nonneg = dth >= 0
    np.testing.assert_array_equal(ins[nonneg], out[nonneg])
    # |dtheta + eps| < |dtheta| + eps where dtheta < 0: a larger pi unless clipped.
    free = ~nonneg & (out > 0) & (out < 5.0)
    assert np.all(ins[~nonneg] >= out[~nonneg]) and np.all(ins[free] > out[free])
    assert nonneg.sum() > 0 and free.sum() > 0


def test_gradient_at_changes_only_where_the_gradient_is_taken():
    post = rules.gem(0.05)
    pulled = rules.gem(0.05, gradient_at=rules.GradientAt.PULLED)
    theta, m, s, g = _inputs(0, 0.1)
    ws = rules.GemWorkerState(m=m, s=s)
    assert post.start(theta, ws) is theta and pulled.start(theta, ws) is s
    args = (
        theta,
        jnp.zeros((), jnp.int32),
        ws,
        rules.Work(theta, theta, g),
        rules.commit_context(2),
    )
    for a, b in zip(
        jax.tree.leaves(post.commit(*args)), jax.tree.leaves(pulled.commit(*args)), strict=True
    ):
        np.testing.assert_array_equal(a, b)

    # Driven: identical until some worker commits for the second time, different after.
    order = async_trace(1, 4, 24)
    problem = make_problem(7, 4, 24)
    a = drive(post, problem, order, 4).versions
    b = drive(pulled, problem, order, 4).versions
    workers = [w for w, _ in order]
    first_repeat = next(k for k, w in enumerate(workers) if w in workers[:k])
    for k in range(first_repeat + 1):  # versions 0..first_repeat: only first commits so far
        for x, y in zip(leaves_np(a[k]), leaves_np(b[k]), strict=True):
            np.testing.assert_array_equal(x, y)
    for k in range(first_repeat + 1, len(a)):
        assert any(np.any(x != y) for x, y in zip(leaves_np(a[k]), leaves_np(b[k]), strict=True))


def test_proxy_energy_is_free_of_kappa_and_the_target_scales_by_kappa_squared():
    theta, m, s, g = _inputs(1, 0.2)
    ws = rules.GemWorkerState(m=m, s=s)
    infos = {}
    for kappa in (1.0, 2.0, 3.5):
        rule = rules.gem(0.1, kappa=kappa)
        _, _, new_ws, info = jax.jit(rule.commit)(
            theta,
            jnp.zeros((), jnp.int32),
            ws,
            rules.Work(theta, theta, g),
            rules.commit_context(1),
        )
        infos[kappa] = (info, leaves_np(new_ws.m))
    for kappa, (info, new_m) in infos.items():
        # Eq. 25: the proxy's own kinetic energy, 0.5 * sum(m**2), with the updated m.
        want = 0.5 * sum(float(np.sum(x.astype(np.float64) ** 2)) for x in new_m)
        np.testing.assert_allclose(info.proxy_energy, want, rtol=1e-6)
        np.testing.assert_allclose(info.target_energy, kappa**2 * want, rtol=1e-6)
        for x, y in zip(new_m, infos[1.0][1], strict=True):
            np.testing.assert_array_equal(x, y)  # the proxy itself does not depend on kappa
    assert infos[1.0][0].target_energy == infos[1.0][0].proxy_energy


def test_zero_gradient_leaves_theta_unchanged_and_pi_statistics_undefined():
    for placement in rules.EpsPlacement:
        rule = rules.gem(0.1, eps_placement=placement)
        theta, m, s, g = _inputs(2, 0.1)
        zeros = [jnp.zeros_like(x) for x in g]
        new, _, _, info = jax.jit(rule.commit)(
            theta,
            jnp.zeros((), jnp.int32),
            rules.GemWorkerState(m, s),
            rules.Work(theta, theta, zeros),
            rules.commit_context(0),
        )
        for x, y in zip(new, theta, strict=True):
            np.testing.assert_array_equal(x, y)
        # Every entry is excluded: the statistics of pi are over no entries.
        assert info.frac_dtheta_zero == 1.0
        for name in ("weight", "pi_median", "frac_pi_zero", "frac_pi_max"):
            assert np.isnan(getattr(info, name)), name
        assert np.all(np.isnan(info.pi_median_per_leaf))
        for name in ("update_norm", "proxy_energy", "target_energy", "central_energy"):
            assert np.isfinite(getattr(info, name)), name
        assert info.update_norm == 0.0


def _np_info(step, kappa, pi_max):
    """GEM's diagnostics from a step's own arrays, in numpy (exact medians)."""
    leaf = lambda t: [np.asarray(x) for x in jax.tree.leaves(t)]
    pi, dth, m, d, upd = (leaf(getattr(step, k)) for k in ("pi", "dtheta", "m", "d", "update"))
    keep = [x != 0 for x in dth]
    kept = np.concatenate([p[k] for p, k in zip(pi, keep, strict=True)])
    n = sum(p.size for p in pi)
    energy = lambda xs: 0.5 * sum(float(np.sum(x.astype(np.float64) ** 2)) for x in xs)
    nan_median = lambda x: np.median(x) if x.size else np.nan
    return dict(
        weight=kept.mean() if kept.size else np.nan,
        pi_median=nan_median(kept),
        frac_pi_zero=np.mean(kept == 0) if kept.size else np.nan,
        frac_pi_max=np.mean(kept == np.float32(pi_max)) if kept.size else np.nan,
        frac_dtheta_zero=1 - kept.size / n,
        proxy_energy=energy(m),
        target_energy=kappa**2 * energy(m),
        central_energy=energy([a + b for a, b in zip(d, upd, strict=True)]),
        pi_median_per_leaf=np.array([nan_median(p[k]) for p, k in zip(pi, keep, strict=True)]),
    )


# 1,048 parameters: medians from the histogram (within half a bin); 248: exact.
@pytest.mark.parametrize(("rows", "bound"), [(40, 5.0 / 2048 + 5.0 * 2**-20), (8, 0.0)])
def test_diagnostics_leave_out_zero_dtheta_against_numpy(rows, bound):
    # Zero gradients on a third of one leaf and on the whole of another: there pi is 0 or
    # pi_max by eps alone, which would otherwise shift every statistic of pi.
    cfg = _gem.make_config(0.1, 0.9, 2.0, 5.0, 1e-12, rules.EpsPlacement.OUTSIDE)
    theta, m, s, g = _inputs(7, 0.05, shapes=[(30,), (3, 4), (rows, 25), (6,)])
    rng = np.random.default_rng(7)
    g[2] = jnp.where(jnp.asarray(rng.random((rows, 25)) < 1 / 3), 0.0, g[2])
    g[1] = jnp.zeros_like(g[1])
    step = _gem.gem_step(cfg, theta, m, s, g)
    info = jax.jit(lambda st: _gem.gem_info(cfg, st))(step)
    want = _np_info(step, 2.0, 5.0)
    pis = np.concatenate([np.ravel(p) for p in jax.tree.leaves(step.pi)])
    zero = np.concatenate([np.ravel(x) == 0 for x in jax.tree.leaves(step.dtheta)])
    # The excluded entries really are biased: their pi sits at the ends only.
    assert zero.sum() > 6 * rows and set(np.unique(pis[zero])) <= {0.0, 5.0}
    assert np.isnan(want["pi_median_per_leaf"][1]) and np.isnan(info.pi_median_per_leaf[1])
    for name, value in want.items():
        got = np.asarray(getattr(info, name))
        if name.startswith("pi_median"):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(value))
            ok = ~np.isnan(value)
            assert np.all(np.abs(got[ok] - value[ok]) <= bound), name
        else:
            np.testing.assert_allclose(got, value, rtol=2e-6, atol=1e-7, err_msg=name)


def test_central_energy_exceeds_the_target_only_through_pi_clipped_at_zero():
    cfg = _gem.make_config(0.1, 0.9, 1.5, 5.0, 1e-12, rules.EpsPlacement.OUTSIDE)

    @jax.jit
    def diagnose(theta, m, s, g):
        step = _gem.gem_step(cfg, theta, m, s, g)
        return step, _gem.gem_info(cfg, step)

    for seed, d_scale in [(0, 1e-3), (1, 0.02), (2, 0.3)]:
        theta, m, s, g = _inputs(seed, d_scale)
        step, info = diagnose(theta, m, s, g)
        pi = jax.tree.leaves(step.pi)
        # Without the entries clipped at 0, the rest moves with at most the target energy.
        rest = zip(pi, *(jax.tree.leaves(t) for t in (step.d, step.update, step.m)), strict=True)
        kept = [((d + u)[p > 0], (cfg.kappa * mm)[p > 0]) for p, d, u, mm in rest]
        central = sum(float(jnp.sum(c**2)) for c, _ in kept)
        target = sum(float(jnp.sum(t**2)) for _, t in kept)
        assert central <= target * (1 + 1e-5)
        if float(info.frac_pi_zero) == 0:
            assert info.central_energy <= info.target_energy * (1 + 1e-5)
    assert info.frac_pi_zero > 0 and info.central_energy > info.target_energy  # d_scale 0.3


def test_one_worker_settles_at_half_the_speed_of_momentum_sgd():
    # A constant gradient (a linear loss): momentum SGD's step tends to dtheta / (1 - mu).
    # GEM's d is the worker's own last update pi' * dtheta, so pi = |m|/|dtheta| - pi' and
    # pi + pi' -> 1 / (1 - mu): pi settles at 1 / (2 (1 - mu)) = 5 for mu = 0.9, exactly
    # pi_max, and the central variable moves at half the speed of momentum SGD.
    mu, lr = 0.9, 0.1
    for pi_max, settled in [(5.0, 5.0), (100.0, None)]:
        cfg = _gem.make_config(lr, mu, 1.0, pi_max, 1e-12, rules.EpsPlacement.OUTSIDE)
        theta = m = jnp.zeros(3)
        s, g = theta, jnp.array([1.0, -2.0, 0.5])
        pis = []
        for _ in range(300):
            step = _gem.gem_step(cfg, theta, m, s, g)
            theta, m, s = theta + step.update, step.m, theta
            pis.append(np.asarray(step.pi))
        pis = np.array(pis)
        momentum_step = 1 / (1 - mu)  # in units of dtheta
        if settled is not None:
            np.testing.assert_allclose(pis[-50:], settled, rtol=1e-5)
        # Two consecutive pi add up to momentum SGD's step: on average half of it each.
        np.testing.assert_allclose(pis[-50:] + pis[-51:-1], momentum_step, rtol=1e-4)
        np.testing.assert_allclose(pis[-50:].mean(axis=0), momentum_step / 2, rtol=1e-2)
    assert pis[-50:, 0].std() > 0.2  # without the clip (pi_max 100) pi oscillates around 5


def test_per_leaf_median_has_one_value_per_leaf_in_tree_order():
    params = {"z": jnp.ones((3, 2)), "a": jnp.ones(5), "m": {"k": jnp.ones((2, 2, 2))}}
    rule = rules.gem(0.1)
    state = rule.init(params, 3)
    ws = jax.tree.map(lambda x: x[1], state.workers)
    g = {"z": jnp.full((3, 2), 1.0), "a": jnp.full(5, 2.0), "m": {"k": jnp.full((2, 2, 2), 3.0)}}
    theta = jax.tree.map(lambda x: x + 0.01, params)
    commit = jax.jit(rule.commit)
    _, _, _, info = commit(
        theta, state.server, ws, rules.Work(params, params, g), rules.commit_context(0)
    )
    assert info.pi_median_per_leaf.shape == (3,)
    # leaves order: a, m/k, z; m = -0.1*g, d = 0.01: pi = (0.1 g - 0.01) / (0.1 g)
    expected = [(0.1 * v - 0.01) / (0.1 * v) for v in (2.0, 3.0, 1.0)]
    # Each leaf's pi is constant: its median is read from a histogram bin (half a bin wide).
    np.testing.assert_allclose(info.pi_median_per_leaf, expected, rtol=0, atol=5.0 / 2048)


def test_gem_optax_in_a_chain_equals_the_rules_commit():
    n, order = 3, async_trace(4, 3, 24)
    problem = make_problem(9, n, len(order))
    hyper = dict(
        lr=0.05,
        momentum=0.8,
        kappa=1.5,
        pi_max=4.0,
        eps=1e-6,
        eps_placement=rules.EpsPlacement.INSIDE,
    )
    expected = drive(rules.gem(**hyper), problem, order, n).versions

    tx = optax.chain(optax.clip_by_global_norm(1e6), rules.gem_optax(**hyper))
    update = jax.jit(tx.update)
    theta = problem.params
    states = [tx.init(theta) for _ in range(n)]
    versions = [theta]
    for k, (w, pv) in enumerate(order):
        g = jax_grad(problem, versions[pv], w, k, 0)
        updates, states[w] = update(g, states[w], theta)
        theta = optax.apply_updates(theta, updates)
        versions.append(theta)
    for got, want in zip(versions, expected, strict=True):
        for x, y in zip(leaves_np(got), leaves_np(want), strict=True):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


def test_gem_optax_requires_params():
    tx = rules.gem_optax(0.1)
    params = {"w": jnp.ones(3)}
    try:
        tx.update(params, tx.init(params))
    except ValueError as err:
        assert "params" in str(err)
    else:
        raise AssertionError("update without params must raise")


def test_gem_optax_docstring_example_runs():
    result = doctest.testmod(_gem_optax, raise_on_error=False)
    assert result.attempted > 0 and result.failed == 0


def test_diagnostics_every_computes_everything_on_every_kth_commit():
    key = jax.random.key(0)
    params = {"a": jax.random.normal(key, (40, 3)), "b": jnp.arange(7, dtype=jnp.float32)}
    every, full = rules.gem(lr=0.1, diagnostics_every=3), rules.gem(lr=0.1)
    state_e, state_f = every.init(params, 2), full.init(params, 2)
    ws = jax.tree.map(lambda a: a[0], state_e.workers)
    commit_e, commit_f = jax.jit(every.commit), jax.jit(full.commit)
    theta, server_e, server_f = params, state_e.server, state_f.server
    for k in range(7):
        g = jax.tree.map(lambda a, k=k: jnp.cos(a * (k + 1)), params)
        t_e, server_e, ws_e, info_e = commit_e(
            theta, server_e, ws, rules.Work(params, params, g), rules.commit_context(k)
        )
        t_f, server_f, ws_f, info_f = commit_f(
            theta, server_f, ws, rules.Work(params, params, g), rules.commit_context(k)
        )
        for a, b in zip(jax.tree.leaves((t_e, ws_e)), jax.tree.leaves((t_f, ws_f)), strict=True):
            # the diagnostics never change the math (up to XLA fusing the two programs apart)
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        pi = np.concatenate([np.ravel(p) for p in jax.tree.leaves(_pi(full, theta, ws, g))])
        if k % 3 == 0:
            assert abs(float(info_e.pi_median) - float(np.median(pi))) <= 5.0 / 2048 + 1e-5
            for name in info_f._fields:
                np.testing.assert_allclose(
                    getattr(info_e, name), getattr(info_f, name), rtol=1e-5, err_msg=name
                )
        else:
            assert np.isnan(info_e.pi_median) and np.all(np.isnan(info_e.pi_median_per_leaf))
            for name in info_f._fields[1:-1]:
                assert np.isnan(getattr(info_e, name)), name
        np.testing.assert_allclose(info_e.update_norm, info_f.update_norm, rtol=1e-6)
        theta, ws = t_f, ws_f
    assert int(server_e) == 7


def _pi(rule, theta, ws, g):
    from gemsim.rules._gem import gem_step, make_config

    cfg = make_config(0.1, 0.9, 1.0, 5.0, 1e-12, rules.EpsPlacement.OUTSIDE)
    return gem_step(cfg, theta, ws.m, ws.s, g).pi
