"""FADAS (Wang, Wang, Lu & Chen, ICML 2024, arXiv 2407.18365) against a numpy replay of its
pseudocode, on real asynchronous traces.

The reference, :func:`algorithm_1`, is written from the paper's Algorithm 1 and shares
nothing with ``gemsim.rules``: a client receives the global model ``x_{t - tau}`` of round
``t - tau`` and runs K local SGD steps, ``x_{k+1} = x_k - eta_l g(x_k)``; it sends
``Delta^i = x_K - x_{t - tau}``; the server adds it to its buffer and, once M updates are in,
sets ``Delta_t = (1/M) sum_i Delta^i``, ``m_t = beta1 m_{t-1} + (1 - beta1) Delta_t``,
``v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2``, ``v_hat_t = max(v_hat_{t-1}, v_t)`` and
``x_{t+1} = x_t + eta_t m_t / (sqrt(v_hat_t) + eps)``, empties the buffer and starts round
``t + 1``. The delay-adaptive learning rate: ``eta_t = eta`` while the largest delay of the
round's updates ``tau_t^max <= tau_c``, ``min(eta, 1 / tau_t^max)`` beyond. Delays count
global rounds: ``tau = (t - 1) - (the round the client's model came from)``. The authors'
code (``yujiaw98/FADAS``, ``update.py``'s ``fedams`` driven by ``g_delay_adaptive.py``)
instead scales by ``1 / tau_t^max`` and applies Adam's bias corrections ``1 - beta1^t`` and
``sqrt(1 - beta2^t)``; the reference does that with ``authors=True``.

The engine runs a simulated trace (a straggler five times slower, so its rounds' largest
delay passes the threshold) on a quadratic whose clients each have their own optimum; the
jitted commit, driven by the rule harness, runs the hand-built churn trace on a pytree of
four leaves (a join, a restart, a plain pull). A scenario with ``rule: fadas`` loads and
runs, also as a population (``clients:``).
"""

import jax
import numpy as np
import pytest
import yaml
from rules_harness import churn_trace, drive, make_problem, max_abs_error, np_grad

from gemsim import engine, problems, rules, timing
from gemsim.app import run_file
from gemsim.config import (
    Scenario,
    ScenarioError,
    build_rule,
    lifted_rule,
    load_scenario,
    many_runs_signature,
)
from gemsim.config import resolved_config as resolved
from gemsim.results import load_results, load_summary

F = np.float32
# AMSGrad divides by the root of a second moment of displacements, each a small difference of
# parameters of order 1: the float32 reference itself is 0.7e-6 (simulated trace) and 1.8e-6
# (churn trace) away from a float64 replay of it, which bounds how close two float32 runs
# can be.
TOL = 1e-5
N_WORKERS, COMMITS, DIM = 4, 59, 6  # 59: 19 full rounds and 2 updates left in the buffer


def algorithm_1(x0, order, grad, *, eta_l, eta, K, M, beta1, beta2, eps, tau_c, authors=False):
    """The versions, per-commit facts and final server state of FADAS on ``order`` (worker,
    pulled version).

    ``grad(w, k, i, x)`` is the gradient of local step ``i`` of commit ``k`` by worker ``w``
    at leaves ``x``; leaves are float32 numpy arrays. ``tau_c`` None: constant ``eta``."""
    zeros = lambda: [np.zeros_like(a) for a in x0]
    x, versions, rounds = [a.copy() for a in x0], [[a.copy() for a in x0]], [0]
    m, v, v_hat, buf, n, delays, t = zeros(), zeros(), zeros(), zeros(), 0, [], 1
    facts = []
    for k, (w, pv) in enumerate(order):
        start = versions[pv]
        local = [a.copy() for a in start]
        for i in range(K):
            local = [a - F(eta_l) * g for a, g in zip(local, grad(w, k, i, local), strict=True)]
        buf = [b + (a - s) for b, a, s in zip(buf, local, start, strict=True)]
        n += 1
        delays.append((t - 1) - rounds[pv])
        fact = dict(delay=delays[-1], server_lr_t=0.0, update_norm=0.0)
        if n == M:
            big_delta = [b / F(M) for b in buf]
            m = [F(beta1) * a + F(1 - beta1) * d for a, d in zip(m, big_delta, strict=True)]
            v = [F(beta2) * a + F(1 - beta2) * (d * d) for a, d in zip(v, big_delta, strict=True)]
            v_hat = [np.maximum(a, b) for a, b in zip(v_hat, v, strict=True)]
            tau_max = max(delays)
            if tau_c is None or tau_max <= tau_c:
                eta_t = eta
            else:
                eta_t = eta / tau_max if authors else min(eta, 1.0 / tau_max)
            if authors:
                first, root = 1 - beta1**t, np.sqrt(1 - beta2**t)
                step = [
                    F(eta_t) * ((a / F(first)) / (np.sqrt(b) / F(root) + F(eps)))
                    for a, b in zip(m, v_hat, strict=True)
                ]
            else:
                step = [
                    F(eta_t) * (a / (np.sqrt(b) + F(eps))) for a, b in zip(m, v_hat, strict=True)
                ]
            x = [a + s for a, s in zip(x, step, strict=True)]
            norm = np.sqrt(sum(np.sum(s.astype(np.float64) ** 2) for s in step))
            fact.update(server_lr_t=eta_t, update_norm=norm, tau_max=tau_max)
            buf, n, delays, t = zeros(), 0, [], t + 1
        versions.append([a.copy() for a in x])
        rounds.append(t - 1)
        facts.append(fact)
    state = dict(m=m, v=v, v_hat=v_hat, buffer=buf, count=n, rounds=t - 1, delays=delays)
    return versions, facts, state


# --- the engine on a simulated asynchronous trace ---------------------------------------

SPEC = problems.Quadratic(dim=DIM, condition=5.0, heterogeneity=1.0)
HYPER = dict(eta_l=0.05, eta=0.25, K=3, M=3, beta1=0.9, beta2=0.99, eps=1e-8, tau_c=2)


def fadas_rule(hyper, authors=False):
    return rules.fadas(
        lr=hyper["eta_l"],
        server_lr=hyper["eta"],
        window=hyper["K"],
        buffer=hyper["M"],
        beta1=hyper["beta1"],
        beta2=hyper["beta2"],
        eps=hyper["eps"],
        tau_c=hyper["tau_c"],
        authors_code=authors,
    )


@pytest.fixture(scope="module")
def trace():
    workers = tuple(
        timing.WorkerSpec(compute=timing.LogNormal(0.1, 0.3), speed=s)
        for s in (1.0, 1.3, 0.8, 0.2)  # worker 3 is the straggler
    )
    spec = timing.ClusterSpec(
        workers=workers,
        pull=None,
        push=None,
        bandwidth_bytes_per_s=None,
        model_bytes=0,
        service=None,
        discipline=timing.Discipline.FIFO,
        window=HYPER["K"],
        budget=timing.CommitBudget(COMMITS),
    )
    return timing.simulate(spec, seed=2)


@pytest.fixture(scope="module")
def problem():
    return problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=N_WORKERS)


def replay(problem, trace, hyper, authors=False):
    """The reference on the engine's trace, with the problem's own gradient written out:
    worker w's is ``h * (x - c_w)`` (noiseless)."""
    h = problems.quadratic_curvature(SPEC)
    centres = problems.worker_optima(SPEC, 0, N_WORKERS)
    order = list(zip(trace.worker.tolist(), trace.pulled_version.tolist(), strict=True))
    x0 = [np.asarray(problem.init_params["theta"], F)]
    grad = lambda w, k, i, x: [h * (x[0] - centres[w])]
    return algorithm_1(x0, order, grad, authors=authors, **hyper)


@pytest.fixture(scope="module")
def engine_run(problem, trace):
    """The engine's result on the simulated trace, each (tau_c, authors_code) run once."""
    cache = {}

    def run(tau_c=HYPER["tau_c"], authors=False):
        if (tau_c, authors) not in cache:
            rule = fadas_rule(dict(HYPER, tau_c=tau_c), authors)
            cache[tau_c, authors] = run_engine(problem, trace, rule)
        return cache[tau_c, authors]

    return run


def run_engine(problem, trace, rule):
    # The engine packs int32 worker state (the timestamps) into float32 rows, a promotion
    # this folder's strict-numerics fixture forbids; runs use the standard rules.
    with jax.numpy_dtype_promotion("standard"):
        executor = engine.SequentialExecutor(
            rule, problem, params=problem.init_params, n_workers=N_WORKERS, chunk=16
        )
        return executor.execute(engine.plan_of(trace, window=rule.window))


@pytest.mark.parametrize("authors", [False, True], ids=["paper", "authors_code"])
def test_engine_equals_the_papers_replay_on_a_simulated_trace(problem, trace, engine_run, authors):
    """Final parameters, the server's moments and buffer, and every commit's delay, eta_t
    and update norm."""
    out = engine_run(authors=authors)
    versions, facts, state = replay(problem, trace, HYPER, authors)
    assert out.n_commits == len(trace) == COMMITS
    np.testing.assert_allclose(out.params["theta"], versions[-1][0], atol=TOL)
    assert not np.allclose(versions[-1][0], versions[0][0], atol=0.1)  # the run moved
    server = out.server_state
    for name, got in [("m", server.m), ("v", server.v), ("v_hat", server.v_hat)]:
        np.testing.assert_allclose(got["theta"], state[name][0], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(server.delta_sum["theta"], state["buffer"][0], atol=TOL)
    counters = (int(server.timestamp), int(server.count), int(server.delay_max))
    assert counters == (state["rounds"], state["count"], max(state["delays"]))
    for field in ("delay", "server_lr_t", "update_norm"):
        want = np.array([f[field] for f in facts])
        np.testing.assert_allclose(out.metrics[field], want, rtol=1e-5, atol=1e-6, err_msg=field)
    np.testing.assert_array_equal(out.metrics["weight"], np.ones(COMMITS, np.float32))


def test_the_trace_passes_the_threshold_and_the_buffer_flushes_every_m_commits(
    problem, trace, engine_run
):
    """The comparison above is not vacuous: some rounds' largest delay is past tau_c, where
    the paper's step min(eta, 1 / tau_max) is shorter than eta, and some are not; the model
    moves exactly at every M-th commit, and the server counts its rounds."""
    _, facts, state = replay(problem, trace, HYPER)
    flushes = [f for f in facts if "tau_max" in f]
    assert len(flushes) == state["rounds"] == COMMITS // HYPER["M"] and state["count"] == 2
    beyond = [f for f in flushes if f["tau_max"] > HYPER["tau_c"]]
    assert 0 < len(beyond) < len(flushes)
    assert any(f["server_lr_t"] < HYPER["eta"] for f in beyond)
    assert any(f["server_lr_t"] == HYPER["eta"] for f in beyond)  # min(eta, 1/tau) = eta
    out = engine_run()
    moved = np.nonzero(out.metrics["update_norm"] > 0)[0]
    np.testing.assert_array_equal(moved, np.arange(HYPER["M"] - 1, COMMITS, HYPER["M"]))
    moved = np.nonzero(out.metrics["server_lr_t"] > 0)[0]
    np.testing.assert_array_equal(moved, np.arange(HYPER["M"] - 1, COMMITS, HYPER["M"]))


def test_no_threshold_is_the_constant_eta_and_authors_code_steps_eta_over_tau_max(
    problem, trace, engine_run
):
    """Read from the engine's own diagnostics: without tau_c every flush steps at eta; the
    authors' code steps at eta / tau_max past tau_c, tau_max the largest delay the engine
    reports for the round's M commits."""
    plain = dict(HYPER, tau_c=None)
    out = engine_run(tau_c=None)
    versions, _, _ = replay(problem, trace, plain)
    np.testing.assert_allclose(out.params["theta"], versions[-1][0], atol=TOL)
    ends = np.arange(HYPER["M"] - 1, COMMITS, HYPER["M"])
    np.testing.assert_allclose(out.metrics["server_lr_t"][ends], plain["eta"], rtol=1e-7)
    out = engine_run(authors=True)
    tau_max = out.metrics["delay"][: ends[-1] + 1].reshape(-1, HYPER["M"]).max(axis=1)
    want = np.where(tau_max > HYPER["tau_c"], HYPER["eta"] / np.maximum(tau_max, 1), HYPER["eta"])
    assert np.any(tau_max > HYPER["tau_c"])
    np.testing.assert_allclose(out.metrics["server_lr_t"][ends], want, rtol=1e-6)


# --- the jitted commit on a pytree, with joins, restarts and plain pulls ---------------


@pytest.mark.parametrize("authors", [False, True], ids=["paper", "authors_code"])
def test_commit_on_a_pytree_equals_the_replay_with_churn(authors):
    order, fresh = churn_trace()
    hyper = dict(eta_l=0.1, eta=0.6, K=2, M=3, beta1=0.8, beta2=0.95, eps=1e-6, tau_c=1)
    problem = make_problem(seed=7, n_workers=N_WORKERS, n_commits=len(order))
    run = drive(fadas_rule(hyper, authors), problem, order, N_WORKERS, fresh=fresh)
    x0 = [np.asarray(a, F) for a in jax.tree.leaves(problem.params)]
    grad = lambda w, k, i, x: np_grad(problem, x, w, k, i)
    versions, facts, _ = algorithm_1(x0, order, grad, authors=authors, **hyper)
    assert max(f.get("tau_max", 0) for f in facts) > hyper["tau_c"]  # the branch is taken
    for k, (got, want) in enumerate(zip(run.versions, versions, strict=True)):
        assert max_abs_error(got, want) < TOL, k
    for field in ("delay", "server_lr_t"):
        got = [float(getattr(info, field)) for info in run.infos]
        np.testing.assert_allclose(got, [f[field] for f in facts], rtol=1e-6, err_msg=field)
    assert run.commit_recompiles == 0


# --- bad parameters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        (dict(lr=0.0), "lr"),
        (dict(lr=float("nan")), "lr"),
        (dict(server_lr=-0.1), "server_lr"),
        (dict(window=0), "window"),
        (dict(window=2.5), "window"),
        (dict(buffer=0), "buffer"),
        (dict(beta1=1.0), "beta1"),
        (dict(beta2=-0.1), "beta2"),
        (dict(eps=0.0), "eps"),
        (dict(tau_c=-1), "tau_c"),
        (dict(tau_c=1.5), "tau_c"),
        (dict(authors_code="yes"), "authors_code"),
    ],
)
def test_bad_hyperparameter_raises_naming_it(kwargs, param):
    with pytest.raises(ValueError, match=rf"fadas: {param} must be") as err:
        rules.fadas(**{"lr": 0.1, "server_lr": 0.01, **kwargs})
    assert repr(kwargs[param]) in str(err.value)


def scenario_doc(optimizer, **extra) -> dict:
    return {
        "name": "fadas",
        "seed": 1,
        "workers": {"count": 3, "compute": {"dist": "exponential", "mean": 0.1}},
        "budget": {"commits": 24},
        "problem": {"model": {"name": "quadratic", "dim": 4, "noise": 0.1}},
        "optimizer": optimizer,
        "eval": {"every": 12},
        **extra,
    }


BLOCK = {"rule": "fadas", "lr": 0.05, "server_lr": 0.01, "window": 2, "buffer": 3, "tau_c": 1}


def test_block_round_trips_and_builds_the_rule_with_the_papers_defaults():
    first = Scenario.model_validate(scenario_doc(BLOCK))
    again = Scenario.model_validate(resolved(first))
    assert again.optimizer == first.optimizer
    rule = build_rule(again)
    assert rule.name == "fadas" and rule.window == 2
    minimal = Scenario.model_validate(scenario_doc({"rule": "fadas", "lr": 0.1, "server_lr": 0.1}))
    block = minimal.optimizer
    defaults = (block.window, block.buffer, block.beta1, block.beta2, block.eps, block.tau_c)
    assert defaults == (8, 5, 0.9, 0.99, 1e-8, None) and block.authors_code is False


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"server_lr": 0.0}, "server_lr"),
        ({"buffer": 0}, "buffer"),
        ({"beta2": 1.0}, "beta2"),
        ({"tau_c": -2}, "tau_c"),
        ({"eps": -1.0}, "eps"),
    ],
)
def test_bad_block_values_are_scenario_errors_naming_the_field(tmp_path, change, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(scenario_doc({**BLOCK, **change})))
    with pytest.raises(ScenarioError, match=rf"optimizer\.{field}") as err:
        load_scenario(path)
    assert "bad.yaml" in str(err.value)


def test_a_missing_server_lr_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    block = {k: v for k, v in BLOCK.items() if k != "server_lr"}
    path.write_text(yaml.safe_dump(scenario_doc(block)))
    with pytest.raises(ScenarioError, match="server_lr"):
        load_scenario(path)


def test_scenarios_with_rule_fadas_run_with_workers_and_with_a_population(tmp_path):
    population = {"population": 30, "concurrency": 3}
    runs = {"workers": scenario_doc(BLOCK), "clients": scenario_doc(BLOCK, clients=population)}
    for name, doc in runs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        # The engine packs int32 worker state (the timestamps) into float32 rows, a promotion
        # this folder's strict-numerics fixture forbids; runs use the standard rules.
        with jax.numpy_dtype_promotion("standard"):
            run_file(path, out=tmp_path / name, quiet=True)
        assert list(load_summary(tmp_path / name)["status"]) == ["ok"]
        frame = load_results(tmp_path / name)
        assert len(frame) == 24 and {"delay", "server_lr_t"} <= set(frame.columns)
        flushes = frame["update_norm"].to_numpy() > 0
        np.testing.assert_array_equal(np.nonzero(flushes)[0], [2, 5, 8, 11, 14, 17, 20, 23])
        # eta = 0.01: the paper's min(eta, 1 / tau_max) shortens no step before tau_max = 100
        np.testing.assert_allclose(frame["server_lr_t"][flushes], 0.01, rtol=1e-6)


# --- the other executors ----------------------------------------------------------------


def test_wavefront_executor_equals_the_sequential_one(problem, trace, engine_run):
    rule = fadas_rule(HYPER)
    plan = engine.plan_of(trace, window=rule.window)
    kw = dict(params=problem.init_params, n_workers=N_WORKERS, chunk=16)
    seq = engine_run()
    with jax.numpy_dtype_promotion("standard"):
        bat = engine.WavefrontExecutor(rule, problem, **kw).execute(plan)
    np.testing.assert_allclose(bat.params["theta"], seq.params["theta"], atol=TOL)
    for key in ("update_norm", "delay", "server_lr_t"):
        np.testing.assert_allclose(bat.metrics[key], seq.metrics[key], rtol=1e-5, err_msg=key)


@pytest.mark.bitexact
@pytest.mark.parametrize(
    "variant",
    [
        pytest.param({"tau_c": None}, id="plain"),
        # the same program but for the bias corrections: slow, the plain one being quick
        pytest.param({"tau_c": 1, "authors_code": True}, id="authors", marks=pytest.mark.slow),
    ],
)
def test_runs_executed_together_with_lifted_hyperparameters_equal_each_run_alone(trace, variant):
    """`engine: {many_runs}` traces the block's floats (lr, server_lr, beta1, beta2, eps): a
    batch of two runs with their own values gives each run's parameters and server state
    bit for bit as the run executed alone with its constants."""
    values = [(0.05, 0.25, 0.9, 0.99), (0.08, 0.4, 0.5, 0.9)]
    blocks = [
        {**BLOCK, **variant, "lr": lr, "server_lr": eta, "beta1": b1, "beta2": b2, "window": 3}
        for lr, eta, b1, b2 in values
    ]
    scenarios = [Scenario.model_validate(scenario_doc(b)) for b in blocks]
    lifted = ("beta1", "beta2", "eps", "lr", "server_lr")
    plan = engine.plan_of(trace, window=3)
    runs = []
    for s in scenarios:
        prob = problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=N_WORKERS)
        floats = many_runs_signature(s)[1]
        runs.append(engine.RunInputs(plan, prob, prob.init_params, {p: floats[p] for p in lifted}))
    with jax.numpy_dtype_promotion("standard"):
        many = engine.ManyRunsExecutor(lifted_rule(scenarios[0], lifted), runs[0], n_workers=4)
        results = many.execute(runs)
        for s, run, got in zip(scenarios, runs, results, strict=True):
            ex = engine.SequentialExecutor(
                build_rule(s), run.problem, params=run.params, n_workers=N_WORKERS
            )
            alone = ex.execute(run.plan, problem=run.problem, params=run.params)
            for tree in ("params", "server_state"):
                got_leaves = jax.tree.leaves(getattr(got, tree))
                for a, b in zip(got_leaves, jax.tree.leaves(getattr(alone, tree)), strict=True):
                    np.testing.assert_array_equal(a, b, err_msg=tree)
    assert not np.array_equal(results[0].params["theta"], results[1].params["theta"])
