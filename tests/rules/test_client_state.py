"""Rules that remember clients, MIFA (Gu et al., NeurIPS 2021, arXiv 2106.04159) and CA2FL
(Wang et al., ICLR 2024, openreview 4aywmeb97I), against numpy replays of their papers'
Algorithm 1 on a population trace, and the per-client state they keep (`rules.with_clients`).

The references share nothing with ``gemsim.rules``. Each commit of the trace is a client's
update computed from the version it pulled: K local SGD steps ``x <- x - eta_l g(x)`` from
``x_pulled`` on the client's own objective, ``Delta = x_K - x_pulled``.

- MIFA, Algorithm 1: the server memorises ``G^i``, client i's latest update, zero before its
  first, and each round steps ``x <- x - eta_t (1/N) sum_i G^i`` with ``G^i = -Delta^i /
  eta_t``, that is ``x + (1/N) sum_i Delta^i``; a round is ``buffer`` arrivals (the
  asynchronous reading: ``gemsim.rules.mifa``'s docstring), scaled by ``server_lr``.
- CA2FL, Algorithm 1: caches ``h^i`` (zero at the start) and ``h_t`` their mean over all N
  clients; on an arrival it adds ``Delta^j - h^j`` to the round's sum and caches
  ``h^j <- Delta^j``; after M arrivals ``v_t = h_t + (1/M) sum (Delta^j - h^j)``,
  ``x <- x + eta v_t`` and ``h_{t+1} = (1/N) sum_{i in [N]} h^i`` (summed afresh here, where
  the rule keeps a running sum).

The engine runs a population trace of N = 12 clients on K = 3 slots (churn loses tasks;
clients return, some twice within a round, some late); the quadratic gives each client its
own optimum, so a cache that held the wrong client's update, or was reset per task, moves the
result by orders of magnitude more than the tolerance (checked).
"""

import dataclasses

import jax
import numpy as np
import pytest
import yaml

from gemsim import engine, problems, rules, timing
from gemsim.app import run_file
from gemsim.config import (
    Scenario,
    ScenarioError,
    build_rule,
    check_client_state,
    lifted_rule,
    load_scenario,
    many_runs_signature,
)
from gemsim.results import load_results, load_summary

F = np.float32
TOL = 2e-6  # float32: the references sum the cache afresh, the rules keep a running sum
N_CLIENTS, N_SLOTS, COMMITS, DIM = 12, 3, 90, 5
SPEC = problems.Quadratic(dim=DIM, condition=5.0, heterogeneity=1.0)
HYPER = dict(eta_l=0.05, eta=0.8, K=3, M=4)


def local_updates(x_start, client, grad, eta_l, K):
    local = x_start.copy()
    for _ in range(K):
        local = local - F(eta_l) * grad(client, local)
    return local - x_start


def mifa_algorithm_1(x0, order, grad, *, eta_l, eta, K, M, N):
    """Versions and memories of MIFA on ``order`` ((client, pulled version) per commit)."""
    x, versions = x0.copy(), [x0.copy()]
    memory = np.zeros((N, *x0.shape), F)  # G^i, as displacements -eta_t G^i
    arrivals = 0
    for client, pulled in order:
        memory[client] = local_updates(versions[pulled], client, grad, eta_l, K)
        arrivals += 1
        if arrivals == M:
            x = x + F(eta) * (memory.sum(axis=0) / F(N))
            arrivals = 0
        versions.append(x.copy())
    return versions, memory


def ca2fl_algorithm_1(x0, order, grad, *, eta_l, eta, K, M, N):
    """Versions, caches and the cached mean of CA2FL on ``order``."""
    x, versions = x0.copy(), [x0.copy()]
    cache, cache_mean = np.zeros((N, *x0.shape), F), np.zeros_like(x0)
    calibration, arrivals = np.zeros_like(x0), 0
    for client, pulled in order:
        delta = local_updates(versions[pulled], client, grad, eta_l, K)
        calibration = calibration + (delta - cache[client])
        cache[client] = delta
        arrivals += 1
        if arrivals == M:
            v = cache_mean + calibration / F(M)
            x = x + F(eta) * v
            cache_mean = cache.sum(axis=0) / F(N)
            calibration, arrivals = np.zeros_like(x0), 0
        versions.append(x.copy())
    return versions, cache, cache_mean


REFERENCES = {"mifa": mifa_algorithm_1, "ca2fl": ca2fl_algorithm_1}


def make_rule(name, hyper=HYPER):
    factory = {"mifa": rules.mifa, "ca2fl": rules.ca2fl}[name]
    return factory(lr=hyper["eta_l"], window=hyper["K"], buffer=hyper["M"], server_lr=hyper["eta"])


@pytest.fixture(scope="module")
def trace():
    churn = timing.Churn(timing.Exponential(4.0), timing.Exponential(1.5))
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.LogNormal(0.3, 0.5)),) * N_SLOTS,
        budget=timing.CommitBudget(COMMITS),
        population=timing.Population(N_CLIENTS, churn=churn),
        window=HYPER["K"],
    )
    return timing.simulate(spec, seed=3)


@pytest.fixture(scope="module")
def problem():
    return problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=N_CLIENTS)


def replay(name, problem, trace, hyper=HYPER, *, owner=None):
    """The paper's reference on the trace; ``owner``: whose objective each commit reads
    (default: its client)."""
    h = problems.quadratic_curvature(SPEC)
    centres = problems.worker_optima(SPEC, 0, N_CLIENTS)
    owner = trace.client if owner is None else owner
    order = list(zip(owner.tolist(), trace.pulled_version.tolist(), strict=True))
    x0 = np.asarray(problem.init_params["theta"], F)
    grad = lambda c, x: h * (x - centres[c])
    return REFERENCES[name](x0, order, grad, N=N_CLIENTS, **hyper)


def executed(rule, problem, trace, kind=engine.SequentialExecutor):
    # The engine packs int32 worker state (the timestamps) into float32 rows, a promotion
    # this folder's strict-numerics fixture forbids; runs use the standard rules.
    with jax.numpy_dtype_promotion("standard"):
        ex = kind(rule, problem, params=problem.init_params, n_workers=N_SLOTS, chunk=16)
        return ex.execute(engine.plan_of(trace, window=rule.window))


@pytest.fixture(scope="module")
def engine_runs(problem, trace):
    return {
        name: executed(rules.with_clients(make_rule(name), N_CLIENTS), problem, trace)
        for name in REFERENCES
    }


def test_the_trace_has_what_the_caches_are_for(trace):
    """Clients return (their cache is replaced), some twice within one round of M arrivals,
    and some only late (their cache is zero in the early rounds' means)."""
    clients = trace.client
    assert trace.n_clients == N_CLIENTS and len(trace) == COMMITS
    assert len(np.unique(clients)) == N_CLIENTS
    rounds = clients[: COMMITS - COMMITS % HYPER["M"]].reshape(-1, HYPER["M"])
    assert any(len(np.unique(r)) < HYPER["M"] for r in rounds)
    first = [int(np.argmax(clients == c)) for c in range(N_CLIENTS)]
    assert max(first) > 2 * HYPER["M"]


@pytest.mark.parametrize("name", list(REFERENCES))
def test_engine_equals_the_papers_replay_on_a_population_trace(problem, trace, engine_runs, name):
    """The final parameters and every client's cached update (the rule's server state)."""
    out = engine_runs[name]
    versions, cache, *rest = replay(name, problem, trace)
    assert out.status.value == "ok" and out.n_commits == COMMITS
    np.testing.assert_allclose(out.params["theta"], versions[-1], atol=TOL)
    assert not np.allclose(versions[-1], versions[0], atol=0.1)  # the run moved
    server = out.server_state
    assert isinstance(server, rules.ClientServer)
    np.testing.assert_allclose(server.clients["theta"], cache, atol=TOL)
    if name == "ca2fl":
        np.testing.assert_allclose(server.rule.cache_mean["theta"], rest[0], atol=TOL)
        np.testing.assert_allclose(server.rule.cache_sum["theta"], cache.sum(axis=0), atol=TOL)
    else:
        np.testing.assert_allclose(server.rule.memory_sum["theta"], cache.sum(axis=0), atol=TOL)
    moved = np.nonzero(out.metrics["update_norm"] > 0)[0]
    np.testing.assert_array_equal(moved, np.arange(HYPER["M"] - 1, COMMITS, HYPER["M"]))
    # What the comparison catches: the slot's cache instead of the client's.
    wrong = replay(name, problem, trace, owner=trace.worker)[0][-1]
    assert np.abs(wrong - out.params["theta"]).max() > 100 * TOL


def test_ca2fl_with_an_empty_cache_is_fedbuff_undamped_and_differs_once_clients_return(
    problem, trace, engine_runs
):
    """CA2FL's first round has only zero caches (each client's first update): it is
    FedBuff's first step without the staleness damping; later rounds differ."""
    out = engine_runs["ca2fl"]
    versions, _, _ = replay("ca2fl", problem, trace)
    first_round = trace.client[: HYPER["M"]]
    assert len(np.unique(first_round)) == HYPER["M"]
    M = HYPER["M"]
    assert (
        np.abs(out.metrics["update_norm"][M - 1] - np.linalg.norm(versions[M] - versions[0])) < 1e-5
    )
    mifa = replay("mifa", problem, trace)[0]
    assert np.abs(mifa[-1] - versions[-1]).max() > 1e-3


@pytest.mark.parametrize("name", list(REFERENCES))
def test_wavefront_executor_equals_the_sequential_one(problem, trace, engine_runs, name):
    rule = rules.with_clients(make_rule(name), N_CLIENTS)
    wave = executed(rule, problem, trace, engine.WavefrontExecutor)
    seq = engine_runs[name]
    for a, b in zip(
        jax.tree.leaves((wave.params, wave.server_state)),
        jax.tree.leaves((seq.params, seq.server_state)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_persistent_workers_are_their_own_clients(problem, trace):
    """Without a population every worker is its own client (N = K): a worker's cache holds
    its last update, and the reference with the workers as clients agrees."""
    plain = dataclasses.replace(trace, client=None, n_clients=None)
    prob = problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=N_SLOTS)
    rule = rules.with_clients(make_rule("ca2fl"), N_SLOTS)
    out = executed(rule, prob, plain)
    h = problems.quadratic_curvature(SPEC)
    centres = problems.worker_optima(SPEC, 0, N_SLOTS)
    order = list(zip(plain.worker.tolist(), plain.pulled_version.tolist(), strict=True))
    x0 = np.asarray(prob.init_params["theta"], F)
    versions, cache, _ = ca2fl_algorithm_1(
        x0, order, lambda c, x: h * (x - centres[c]), N=N_SLOTS, **HYPER
    )
    np.testing.assert_allclose(out.params["theta"], versions[-1], atol=TOL)
    np.testing.assert_allclose(out.server_state.clients["theta"], cache, atol=TOL)


def test_memory_is_n_times_the_declared_row(problem):
    rule = make_rule("ca2fl")
    params = problem.init_params
    row = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(params))
    assert rules.client_state_bytes(rule, params, 1000) == 1000 * row
    with jax.numpy_dtype_promotion("standard"):
        state = rules.with_clients(rule, 1000).init(params, N_SLOTS)
    stored = sum(a.nbytes for a in jax.tree.leaves(state.server.clients))
    assert stored == 1000 * row
    assert rules.with_clients(rule, 1000).client_init is None
    with pytest.raises(ValueError, match="keeps no state per client"):
        rules.with_clients(rules.fedbuff(lr=0.1), 10)
    with pytest.raises(ValueError, match="n_clients must be an integer >= 1"):
        rules.with_clients(rule, 0)


@pytest.mark.parametrize("name", ["mifa", "ca2fl"])
@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        (dict(lr=0.0), "lr"),
        (dict(window=0), "window"),
        (dict(buffer=0), "buffer"),
        (dict(buffer=1.5), "buffer"),
        (dict(server_lr=-1.0), "server_lr"),
    ],
)
def test_bad_hyperparameter_raises_naming_it(name, kwargs, param):
    factory = {"mifa": rules.mifa, "ca2fl": rules.ca2fl}[name]
    with pytest.raises(ValueError, match=rf"{name}: {param} must be") as err:
        factory(**{"lr": 0.1, **kwargs})
    assert repr(kwargs[param]) in str(err.value)


# --- scenarios -----------------------------------------------------------------------------


def scenario_doc(optimizer, **extra) -> dict:
    return {
        "name": "memory",
        "seed": 1,
        "workers": {"count": 3, "compute": {"dist": "exponential", "mean": 0.1}},
        "clients": {"population": 40, "concurrency": 3},
        "budget": {"commits": 24},
        "problem": {"model": {"name": "quadratic", "dim": 4, "noise": 0.1}},
        "optimizer": optimizer,
        "eval": {"every": 12},
        **extra,
    }


@pytest.mark.parametrize("name", ["mifa", "ca2fl"])
def test_scenario_runs_with_the_populations_clients_and_reports_the_memory(tmp_path, name):
    doc = scenario_doc({"rule": name, "lr": 0.05, "window": 2, "buffer": 3})
    scenario = Scenario.model_validate(doc)
    rule = build_rule(scenario)
    with jax.numpy_dtype_promotion("standard"):
        state = rule.init({"theta": np.zeros(4, F)}, 3)
    assert jax.tree.leaves(state.server.clients)[0].shape == (40, 4)
    note = check_client_state(scenario)
    assert "40 clients x 16 B = 640 B" in note
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with jax.numpy_dtype_promotion("standard"):
        run_file(path, out=tmp_path / "out", quiet=True)
    assert list(load_summary(tmp_path / "out")["status"]) == ["ok"]
    frame = load_results(tmp_path / "out")
    assert len(frame) == 24
    np.testing.assert_array_equal(
        np.nonzero(frame["update_norm"].to_numpy() > 0)[0], range(2, 24, 3)
    )


def test_a_state_over_the_bound_is_refused_before_any_run(tmp_path):
    doc = scenario_doc({"rule": "ca2fl", "lr": 0.05}, engine={"client_state_gib": 1e-7})
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match=r"40 clients x 16 B = 640 B, over the bound of 107 B"):
        run_file(path, out=tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("manifest.json"))
    plain = scenario_doc({"rule": "fedbuff", "lr": 0.05}, engine={"client_state_gib": 1e-7})
    assert check_client_state(Scenario.model_validate(plain)) is None  # keeps no client state
    assert "over the bound" in "; ".join(_errors(load_scenario(path)))


def _errors(scenario):
    try:
        check_client_state(scenario)
    except ValueError as exc:
        return [str(exc)]
    return []


@pytest.mark.bitexact
@pytest.mark.parametrize("name", ["mifa", "ca2fl"])
def test_runs_executed_together_equal_each_run_alone(trace, name):
    """`engine: {many_runs}`: each run's caches stacked per run, its floats traced."""
    blocks = [
        {"rule": name, "lr": lr, "server_lr": eta, "window": 3, "buffer": 4}
        for lr, eta in [(0.05, 0.8), (0.08, 0.5)]
    ]
    scenarios = [
        Scenario.model_validate(
            scenario_doc(b, clients={"population": N_CLIENTS, "concurrency": 3})
        )
        for b in blocks
    ]
    lifted = ("lr", "server_lr")
    plan = engine.plan_of(trace, window=3)
    runs = []
    for s in scenarios:
        prob = problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=N_CLIENTS)
        floats = many_runs_signature(s)[1]
        runs.append(engine.RunInputs(plan, prob, prob.init_params, {p: floats[p] for p in lifted}))
    with jax.numpy_dtype_promotion("standard"):
        many = engine.ManyRunsExecutor(lifted_rule(scenarios[0], lifted), runs[0], n_workers=3)
        results = many.execute(runs)
        for s, run, got in zip(scenarios, runs, results, strict=True):
            ex = engine.SequentialExecutor(
                build_rule(s), run.problem, params=run.params, n_workers=3
            )
            alone = ex.execute(run.plan, problem=run.problem, params=run.params)
            for a, b in zip(
                jax.tree.leaves((got.params, got.server_state)),
                jax.tree.leaves((alone.params, alone.server_state)),
                strict=True,
            ):
                np.testing.assert_array_equal(a, b)
    assert not np.array_equal(results[0].params["theta"], results[1].params["theta"])


def test_replaying_a_trace_without_client_ids_on_a_population_is_refused(tmp_path):
    """A persistent run's trace names no client: a population scenario whose rule keeps
    state per client cannot know whose rows its commits touch (exit 2 from the CLI)."""
    from gemsim.app import replay_file

    persistent = scenario_doc({"rule": "ca2fl", "lr": 0.05, "window": 2, "buffer": 3})
    persistent.pop("clients")
    path = tmp_path / "persistent.yaml"
    path.write_text(yaml.safe_dump(persistent))
    with jax.numpy_dtype_promotion("standard"):
        run_file(path, out=tmp_path / "p", quiet=True)
    (folder,) = [m.parent for m in (tmp_path / "p").rglob("manifest.json")]
    population = tmp_path / "population.yaml"
    population.write_text(yaml.safe_dump(scenario_doc(persistent["optimizer"])))
    with pytest.raises(ScenarioError, match="keeps state per client, and the trace") as err:
        replay_file(folder, population, out=tmp_path / "r", quiet=True)
    assert "no client column" in str(err.value)


# --- rows for only the clients a trace names ------------------------------------------------

WIDE = 200  # clients; a trace of 60 commits on 3 slots names at most 60 of them


def wide_plan(seed):
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.LogNormal(0.3, 0.5)),) * N_SLOTS,
        budget=timing.CommitBudget(60),
        population=timing.Population(WIDE),
        window=HYPER["K"],
    )
    return engine.plan_of(timing.simulate(spec, seed=seed), window=HYPER["K"])


def test_client_rows_number_the_named_clients_in_first_commit_order():
    plan = wide_plan(5)
    compact, named = engine.client_rows(plan)
    order = list(dict.fromkeys(plan.client.tolist()))  # clients by their first commit
    assert named == len(order) < WIDE
    np.testing.assert_array_equal(compact.client_row, [order.index(c) for c in plan.client])
    assert compact.truncated(10).client_row.tolist() == compact.client_row[:10].tolist()
    assert [engine.kept_rows(n, 10_000) for n in (1, 64, 65, 600)] == [64, 64, 128, 1024]
    assert engine.kept_rows(600, 700) == 700 and engine.kept_rows(3, 40) == 40


@pytest.mark.bitexact
@pytest.mark.parametrize("kind", [engine.SequentialExecutor, engine.WavefrontExecutor])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_rows_for_the_named_clients_only_give_the_same_bits(name, kind):
    """The rows of clients that never commit are never read: keeping only the named ones
    (first-commit order) changes no bit of the parameters or of the rule's own state, and
    each kept row is its client's row of the full table; the others stayed zero."""
    prob = problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=WIDE)
    plan = wide_plan(5)
    compact, named = engine.client_rows(plan)
    order = list(dict.fromkeys(plan.client.tolist()))

    def run(rule, p):
        with jax.numpy_dtype_promotion("standard"):
            ex = kind(rule, prob, params=prob.init_params, n_workers=N_SLOTS, chunk=16)
            return ex.execute(p)

    full = run(rules.with_clients(make_rule(name), WIDE), plan)
    small = run(rules.with_clients(make_rule(name), WIDE, rows=named), compact)
    np.testing.assert_array_equal(small.params["theta"], full.params["theta"])
    leaves = jax.tree.leaves(small.server_state.rule), jax.tree.leaves(full.server_state.rule)
    for a, b in zip(*leaves, strict=True):
        np.testing.assert_array_equal(a, b)
    rows, table = small.server_state.clients["theta"], full.server_state.clients["theta"]
    assert rows.shape == (named, DIM) and table.shape == (WIDE, DIM)
    np.testing.assert_array_equal(rows, table[order])
    assert not table[np.setdiff1d(np.arange(WIDE), order)].any()
    assert np.abs(rows).max() > 0


@pytest.mark.bitexact
def test_runs_together_keep_the_rows_the_most_named_need():
    """Runs of two traces (naming different clients) executed together in the rows of the
    larger: each run's bits are those of its run alone with every client's row."""
    prob = problems.make_problem(SPEC, None, batch_size=1, seed=0, n_workers=WIDE)
    plans = [engine.client_rows(wide_plan(seed)) for seed in (5, 6)]
    rows = max(named for _, named in plans)
    rule = make_rule("ca2fl")
    with jax.numpy_dtype_promotion("standard"):
        many = engine.ManyRunsExecutor(
            lambda _: rules.with_clients(rule, WIDE, rows=rows),
            engine.RunInputs(plans[0][0], prob, prob.init_params, {}),
            n_workers=N_SLOTS,
        )
        together = many.execute([engine.RunInputs(p, prob, prob.init_params, {}) for p, _ in plans])
        for (plan, _), got in zip(plans, together, strict=True):
            plain = dataclasses.replace(plan, client_row=None)
            alone = engine.SequentialExecutor(
                rules.with_clients(rule, WIDE), prob, params=prob.init_params, n_workers=N_SLOTS
            ).execute(plain)
            np.testing.assert_array_equal(got.params["theta"], alone.params["theta"])


def test_fewer_rows_need_the_commits_row_and_a_count_in_range(problem):
    rule = make_rule("ca2fl")
    with pytest.raises(ValueError, match=r"rows must be at most n_clients \(12\), got 13"):
        rules.with_clients(rule, N_CLIENTS, rows=13)
    with pytest.raises(ValueError, match="rows must be an integer >= 1, got 0"):
        rules.with_clients(rule, N_CLIENTS, rows=0)
    fewer = rules.with_clients(rule, N_CLIENTS, rows=4)
    with jax.numpy_dtype_promotion("standard"):
        state = fewer.init(problem.init_params, N_SLOTS)
        assert state.server.clients["theta"].shape == (4, DIM)
        x = problem.init_params
        ws = jax.tree.map(lambda a: a[0], state.workers)
        with pytest.raises(ValueError, match=r"keeps 4 of 12 clients' rows.*ctx\.row"):
            fewer.commit(x, state.server, ws, rules.Work(x, x, x), rules.commit_context(0))


def test_a_run_keeps_the_rows_of_the_clients_its_trace_names(tmp_path, monkeypatch):
    """Through `gemsim run` (one by one and executed together): a population of 300 whose
    trace names at most 24 clients keeps 64 rows; its results are those of every row kept."""
    from gemsim.app.execute import _simulated

    doc = scenario_doc(
        {"rule": "ca2fl", "lr": 0.05, "window": 2, "buffer": 3},
        clients={"population": 300, "concurrency": 3},
        sweep={"optimizer.lr": [0.05, 0.08]},
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    kept = []
    named_rows = _simulated.named_rows
    monkeypatch.setattr(
        _simulated, "named_rows", lambda *a: kept.append(named_rows(*a)[1]) or named_rows(*a)
    )
    frames = {}
    for rows in ("named", "all"):
        if rows == "all":
            monkeypatch.setattr(engine, "kept_rows", lambda named, n: n)
        for together in ("off", 2):
            doc["engine"] = {"many_runs": together}
            path.write_text(yaml.safe_dump(doc))
            out = tmp_path / f"{rows}-{together}"
            with jax.numpy_dtype_promotion("standard"):
                run_file(path, out=out, quiet=True)
            frames[rows, together] = load_results(out).sort_values(["run_id", "commit"])
    assert 64 in kept and None in kept
    cols = ["run_id", "commit", "batch_loss", "update_norm", "train_loss"]
    want = frames["all", "off"][cols].reset_index(drop=True)
    for key, frame in frames.items():
        assert len(frame) == 48, key
        assert frame[cols].reset_index(drop=True).equals(want), key


def test_a_compiled_rule_of_one_population_serves_no_other(tmp_path, monkeypatch):
    """N is in a per-client rule's program (its rows, its mean's divisor): a process that ran
    a population of 40 runs one of 30 with the same optimizer as a fresh process does."""
    from gemsim.app.execute import _simulated, _stages

    optimizer = {"rule": "mifa", "lr": 0.05, "window": 2, "buffer": 3}
    frames = []
    for population in (40, 30, 30):
        if len(frames) == 2:  # the last run of 30 compiles afresh
            monkeypatch.setattr(_simulated, "EXECUTORS", _stages.ExecutorCache())
        doc = scenario_doc(optimizer, clients={"population": population, "concurrency": 3})
        path = tmp_path / f"{population}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out = tmp_path / f"out-{len(frames)}"
        with jax.numpy_dtype_promotion("standard"):
            run_file(path, out=out, quiet=True)
        frames.append(load_results(out)[["commit", "batch_loss", "update_norm", "train_loss"]])
    assert frames[1].equals(frames[2])
    assert not frames[0].equals(frames[1])
