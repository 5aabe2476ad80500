"""Many runs in one program (`engine.ManyRunsExecutor`) against the same runs executed one by
one by the sequential executor: every result bit for bit where XLA computes a run's
arithmetic the same way vmapped (elementwise problems: the quadratic), within 1e-6 relative
where it does not (matrix products whose kernel XLA picks by size), and a function of the run
and the batch size only, never of the other runs in the batch.
"""

import numpy as np
import pytest
from engine_helpers import assert_same, leaves

from gemsim import config, engine, rules, timing
from gemsim.app.execute._stages import build_problem

pytestmark = pytest.mark.bitexact

N_WORKERS = 4


def scenario(seed, *, optimizer, budget=None, problem=None, workers=None, server=None):
    data = {
        "name": "many",
        "seed": seed,
        "workers": workers
        or {
            "count": N_WORKERS,
            "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.5},
            # A late join and a crash with a restart: host fills (fresh pulls) mid-run.
            "joins": [{"worker": 3, "at": 0.3}],
            "failures": [{"worker": 1, "at": 0.5, "restart_after": 0.2}],
        },
        # Virtual seconds: every seed's trace has its own length (padded in the batch).
        "budget": budget or {"seconds": 4.0},
        "problem": problem or {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
        "optimizer": optimizer,
        "eval": {"every": 25},
    }
    if server is not None:
        data["server"] = server
    return config.parse_scenario(data, "test")


def prepared(scenarios, lifted=()):
    runs = []
    for s in scenarios:
        problem = build_problem(s)
        trace = timing.simulate(config.build_cluster(s), seed=s.seed)
        rule = config.build_rule(s)
        plan = engine.plan_of(trace, window=rule.window, eval_every=s.eval.every)
        floats = config.many_runs_signature(s)[1]
        runs.append(
            engine.RunInputs(plan, problem, problem.init_params, {p: floats[p] for p in lifted})
        )
    return runs


def alone(s, run):
    ex = engine.SequentialExecutor(
        config.build_rule(s), run.problem, params=run.params, n_workers=run.plan.n_workers
    )
    return ex.execute(run.plan, problem=run.problem, params=run.params)


OPTIMIZERS = {
    "gem": {"rule": "gem", "lr": 0.05, "momentum": 0.9},
    "downpour-window": {"rule": "downpour", "lr": 0.05, "window": 2, "local_momentum": 0.5},
    "easgd": {"rule": "easgd", "lr": 0.05, "alpha": 0.3, "window": 2},
    "fedbuff": {"rule": "fedbuff", "lr": 0.05, "window": 2, "buffer": 3},
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_batch_gives_each_run_its_result_alone(name):
    """Seeds differ: traces (of unequal lengths, with a join and a restart), initial values,
    noise streams. Every result of the batch equals the run's own, bit for bit."""
    scenarios = [scenario(seed, optimizer=OPTIMIZERS[name]) for seed in range(3)]
    runs = prepared(scenarios)
    assert len({len(r.plan) for r in runs}) > 1  # padding is exercised
    assert all(r.plan.host_fills for r in runs)  # so are host fills
    many = engine.ManyRunsExecutor(lambda h: config.build_rule(scenarios[0]), runs[0], n_workers=4)
    for s, run, got in zip(scenarios, runs, many.execute(runs), strict=True):
        assert_same(got, alone(s, run))


def test_rounds_of_a_barrier_protocol_in_a_batch():
    """`sync` follows each run's own barrier rounds (its trace's round_end)."""
    scenarios = [
        scenario(seed, optimizer={"rule": "sync", "lr": 0.05}, server={"protocol": "sync"})
        for seed in range(2)
    ]
    runs = prepared(scenarios)
    many = engine.ManyRunsExecutor(lambda h: config.build_rule(scenarios[0]), runs[0], n_workers=4)
    for s, run, got in zip(scenarios, runs, many.execute(runs), strict=True):
        assert_same(got, alone(s, run))


def test_each_run_is_evaluated_on_its_own_workers_data():
    """The heterogeneous quadratic: each run's workers have their own optima (from its seed);
    the per-worker losses at every evaluation are the run's own (parameters bit for bit; a
    reported norm, whose sum XLA fuses otherwise vmapped, within 1e-6)."""
    problem = {"model": {"name": "quadratic", "dim": 8, "noise": 0.1, "heterogeneity": 1.0}}
    optimizer = {"rule": "downpour", "lr": 0.05}
    scenarios = [scenario(seed, optimizer=optimizer, problem=problem) for seed in range(2)]
    runs = prepared(scenarios)
    many = engine.ManyRunsExecutor(lambda h: config.build_rule(scenarios[0]), runs[0], n_workers=4)
    results = many.execute(runs)
    for s, run, got in zip(scenarios, runs, results, strict=True):
        assert got.worker_evals.keys() == set(run.plan.evals.tolist())
        assert_same(got, alone(s, run), metrics_rtol=1e-6)
    assert not np.array_equal(
        results[0].worker_facts["optimum"], results[1].worker_facts["optimum"]
    )


def test_lifted_hyperparameters_reach_each_run():
    """Learning rates and kappas differ between the runs: traced in one program, each run's
    result equals the run executed alone with its constants."""
    opts = [
        {"rule": "gem", "lr": lr, "kappa": kappa, "momentum": 0.9}
        for lr, kappa in ((0.02, 1.0), (0.05, 2.0), (0.1, 1.5))
    ]
    scenarios = [scenario(0, optimizer=o) for o in opts]
    lifted = ("kappa", "lr")
    runs = prepared(scenarios, lifted)
    rule_of = config.lifted_rule(scenarios[0], lifted)
    many = engine.ManyRunsExecutor(rule_of, runs[0], n_workers=4)
    for s, run, got in zip(scenarios, runs, many.execute(runs), strict=True):
        assert_same(got, alone(s, run))


def test_a_diverging_run_ends_at_its_own_commit_and_the_others_go_on():
    opts = [{"rule": "downpour", "lr": lr} for lr in (0.005, 400.0, 0.01)]
    scenarios = [
        scenario(
            0, optimizer=o, problem={"model": {"name": "quadratic", "dim": 8, "condition": 100.0}}
        )
        for o in opts
    ]
    runs = prepared(scenarios, ("lr",))
    many = engine.ManyRunsExecutor(config.lifted_rule(scenarios[0], ("lr",)), runs[0], n_workers=4)
    results = many.execute(runs)
    assert [r.status.value for r in results] == ["ok", "diverged", "ok"]
    assert 0 < results[1].diverged_at < len(runs[1].plan) - 1
    for s, run, got in zip(scenarios, runs, results, strict=True):
        assert_same(got, alone(s, run))


def test_gem_at_a_batch_size_where_xla_fuses_otherwise():
    """48 runs of a 100-dimensional quadratic: at this size XLA splits GEM's diagnostics into
    their own kernels, which once changed how theta + pi * dtheta was rounded (one fused
    multiply-add alone, two roundings in the batch); `rules.stored` fixes the rounding. The
    parameters are the same bits; sums reported as metrics (the batch loss) are vectorized
    across the runs in the batch, so they may differ in the last bits."""
    opt = {"rule": "gem", "lr": 0.05, "momentum": 0.9}
    quad = {"model": {"name": "quadratic", "dim": 100, "noise": 0.1}}
    scenarios = [
        scenario(seed, optimizer=opt, problem=quad, budget={"commits": 40}) for seed in range(48)
    ]
    runs = prepared(scenarios)
    many = engine.ManyRunsExecutor(lambda h: config.build_rule(scenarios[0]), runs[0], n_workers=4)
    results = many.execute(runs)
    for i in (0, 23, 47):
        assert_same(results[i], alone(scenarios[i], runs[i]), metrics_rtol=1e-6)


@pytest.fixture(scope="module")
def logistic_runs():
    """Logistic regression on mnist-5k (b = 64): matrix products whose kernel XLA picks by
    size, so that a vmapped product may sum in another order than one alone."""
    opt = {"rule": "downpour", "lr": 0.05}
    prob = {"model": "logistic", "dataset": "mnist-5k", "batch_size": 64}
    scenarios = [
        scenario(seed, optimizer=opt, problem=prob, budget={"commits": 30}) for seed in range(12)
    ]
    runs = prepared(scenarios)
    many = engine.ManyRunsExecutor(lambda h: config.build_rule(scenarios[0]), runs[0], n_workers=4)
    return scenarios, runs, many, many.execute(runs)


def test_where_vmapped_arithmetic_differs_it_is_within_1e6_relative(logistic_runs):
    """DOWNPOUR (which does not amplify a perturbation: no energy matching) over 30 commits:
    each run's parameters within 1e-6 of their largest magnitude of the run alone."""
    scenarios, runs, _, results = logistic_runs
    for s, run, got in zip(scenarios[:4], runs[:4], results[:4], strict=True):
        ref = alone(s, run)
        for x, y in zip(leaves(ref.params), leaves(got.params), strict=True):
            assert np.max(np.abs(x - y)) <= 1e-6 * np.max(np.abs(x))


def test_results_depend_on_the_batch_size_alone(logistic_runs):
    """Which runs share a batch, and in which order, never changes a run's result: a batch of
    12 padded with copies gives each run what it got beside eleven others."""
    _, runs, many, results = logistic_runs
    for subset in ([3, 0, 7], [11]):
        batch = [runs[i] for i in subset]
        batch += [batch[0]] * (len(runs) - len(batch))
        got = many.execute(batch)
        for j, i in enumerate(subset):
            assert_same(got[j], results[i])


def test_a_batch_uses_one_copy_of_the_data_set(logistic_runs):
    _, runs, _, _ = logistic_runs
    import jax

    from gemsim.engine._many_inputs import split_problems

    shared, stacked, mask = split_problems(
        [r.problem for r in runs], jax.tree.structure(runs[0].problem)
    )
    x_train = runs[0].problem.data["x_train"]
    assert any(leaf is x_train for leaf in shared)
    assert all(leaf.nbytes < 2**16 * len(runs) for leaf in stacked)


def test_rules_take_their_floats_traced_or_refuse_them_as_the_app_expects():
    """Each built-in rule's factory takes its float hyperparameters traced (a batch of runs
    with different values), or raises one of the tracer errors on which the app batches only
    the runs with equal values (`_many_runs.execute_many`): a float that decides a state's
    structure (DOWNPOUR's local momentum: zero or not) cannot be traced."""
    import jax

    traced_ok, refused = [], []
    params = {"w": np.zeros(3, np.float32)}
    for name in ("gem", "downpour", "staleness", "softsync", "easgd", "dcasgd", "sync"):
        opt = {"rule": name, "lr": 0.05, **({"alpha": 0.5} if name == "easgd" else {})}
        s = scenario(0, optimizer=opt)
        _, floats = config.many_runs_signature(s)
        rule_of = config.lifted_rule(s, tuple(floats))
        assert isinstance(rule_of(floats), rules.Rule)
        shape = {k: jax.ShapeDtypeStruct((), np.float32) for k in floats}
        try:
            jax.eval_shape(lambda h, rule_of=rule_of: rule_of(h).init(params, 2), shape)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError):
            refused.append(name)
        else:
            traced_ok.append(name)
    assert "gem" in traced_ok and "downpour" in refused
