"""Calibration: latency laws fitted back from their own samples, worker grouping, and the
staleness total-variation distance."""

import math

import numpy as np
import pytest

from gemsim.timing import (
    CommitTrace,
    Exponential,
    Gamma,
    LogNormal,
    Mixture,
    Pareto,
    Weibull,
    batch_block,
    calibrate_trace,
    fit_distribution,
    group_workers,
    staleness_tv,
)
from gemsim.timing._fit import KS_ALPHA, MAX_EMPIRICAL, MIN_SAMPLES

N = 4000

RECOVERY = [
    (Exponential(0.2), "exponential", {"mean": 0.2}),
    (LogNormal(0.1, 0.4), "lognormal", {"median": 0.1, "sigma": 0.4}),
    (Gamma(0.3, 4.0), "gamma", {"mean": 0.3, "shape": 4.0}),
    (Gamma(0.3, 0.4), "gamma", {"mean": 0.3, "shape": 0.4}),
    (Weibull(0.5, 3.0), "weibull", {"scale": 0.5, "shape": 3.0}),
    (Weibull(0.5, 0.6), "weibull", {"scale": 0.5, "shape": 0.6}),
    (Pareto(0.05, 2.5), "pareto", {"scale": 0.05, "alpha": 2.5}),
]


@pytest.mark.parametrize(("law", "family", "params"), RECOVERY, ids=lambda v: repr(v))
def test_each_family_is_recovered_from_its_own_samples(law, family, params):
    samples = law.sample(np.random.default_rng(20240), N)
    fit = fit_distribution(samples)
    assert fit.family == family, fit
    assert fit.n == N
    assert fit.params.keys() == params.keys()
    for name, true in params.items():
        assert fit.params[name] == pytest.approx(true, rel=0.10), name
    assert fit.ks_pvalue >= KS_ALPHA
    assert math.isfinite(fit.loglik)
    block = fit.to_block()
    assert block["dist"] == family
    assert block.keys() == {"dist", *params}


def test_one_parameter_family_wins_a_tie_on_bic():
    # exact exponential quantiles fit a gamma of shape ~1 as well: the gamma's likelihood
    # gain is far below the ln(n)/2 units of log-likelihood BIC charges for its extra parameter
    samples = -0.2 * np.log1p(-(np.arange(N) + 0.5) / N)
    assert fit_distribution(samples, ("gamma", "exponential")).family == "exponential"
    assert fit_distribution(samples, ("gamma",)).family == "gamma"


def test_equal_samples_are_a_constant_law():
    samples = np.r_[np.full(200, 0.25), np.nan]
    fit = fit_distribution(samples)
    assert (fit.family, fit.params, fit.n) == ("constant", {"value": 0.25}, 200)
    assert fit.to_block() == {"dist": "constant", "value": 0.25}
    assert math.isnan(fit.ks_pvalue)


def test_too_few_samples_are_used_as_they_are():
    samples = LogNormal(0.1, 0.3).sample(np.random.default_rng(1), MIN_SAMPLES - 1)
    fit = fit_distribution(samples)
    assert fit.family == "empirical" and "too few" in fit.reason
    assert fit.n == MIN_SAMPLES - 1
    np.testing.assert_allclose(fit.samples, np.sort(samples), rtol=1e-5)
    assert fit.to_block() == {"dist": "empirical", "samples": list(fit.samples)}


def test_two_mode_mixture_falls_back_to_reduced_empirical_law():
    slow = Mixture(((0.9, LogNormal(0.1, 0.1)), (0.1, LogNormal(1.0, 0.1))))
    samples = slow.sample(np.random.default_rng(2), N)
    fit = fit_distribution(samples)
    assert fit.family == "empirical" and "rejected" in fit.reason
    assert fit.n == N and len(fit.samples) == MAX_EMPIRICAL
    assert list(fit.samples) == sorted(fit.samples)
    assert samples.min() <= fit.samples[0] and fit.samples[-1] <= samples.max()
    for q in (0.1, 0.5, 0.95):  # the quantiles survive the reduction
        assert np.quantile(fit.samples, q) == pytest.approx(np.quantile(samples, q), rel=0.02)


def test_unmeasured_and_impossible_samples_are_dropped():
    good = Exponential(0.2).sample(np.random.default_rng(3), 500)
    fit = fit_distribution(np.r_[good, np.nan, np.inf, -1.0])
    assert fit.n == 500 and fit.family == "exponential"
    for bad in ([], [np.nan, np.nan], [-1.0, np.inf]):
        with pytest.raises(ValueError, match="no usable times"):
            fit_distribution(bad)
    with pytest.raises(ValueError, match="families must be"):
        fit_distribution(good, ("normal",))


def _trace(compute_laws, *, per_worker=1000, seed=0, service=None, nan_every=0):
    """Round-robin commits; compute times drawn per worker from its law."""
    rng = np.random.default_rng(seed)
    n_workers = len(compute_laws)
    worker = np.arange(per_worker * n_workers) % n_workers
    compute = np.empty(worker.size)
    for w, law in enumerate(compute_laws):
        compute[worker == w] = law.sample(rng, per_worker)
    if nan_every:
        compute[::nan_every] = np.nan
    service_time = None if service is None else service.sample(rng, worker.size)
    return _trace_of(compute, worker, n_workers, service_time)


def _trace_of(compute, worker, n_workers, service_time=None):
    n = len(compute)
    time = np.cumsum(np.full(n, 0.01))
    return CommitTrace.from_columns(
        time=time,
        worker=worker,
        pulled_version=np.maximum(0, np.arange(n) - n_workers + 1),
        compute_time=compute,
        queue_time=np.full(n, np.nan),
        service_time=np.full(n, np.nan) if service_time is None else service_time,
        n_workers=n_workers,
        duration=float(time[-1]),
    )


def test_heterogeneous_workers_become_groups():
    fast, slow = LogNormal(0.1, 0.3), LogNormal(0.3, 0.3)
    calibration = calibrate_trace(_trace([fast, fast, slow, slow], nan_every=7))
    assert [g.workers for g in calibration.groups] == [range(0, 2), range(2, 4)]
    medians = [g.fit.params["median"] for g in calibration.groups]
    assert medians == pytest.approx([0.1, 0.3], rel=0.10)
    block = calibration.workers_block()
    assert block["count"] == 4
    assert [g["count"] for g in block["groups"]] == [2]
    assert block["groups"][0]["compute"]["median"] == pytest.approx(0.1, rel=0.10)
    assert block["compute"]["median"] == pytest.approx(0.3, rel=0.10)
    assert calibration.service is None and calibration.server_block() == {}


def test_homogeneous_workers_share_one_law_and_the_service_is_fitted():
    law = Gamma(0.2, 3.0)
    calibration = calibrate_trace(_trace([law] * 6, service=Exponential(0.002)))
    assert [g.workers for g in calibration.groups] == [range(0, 6)]
    block = calibration.workers_block()
    assert "groups" not in block and block["compute"]["dist"] == "gamma"
    assert block["compute"]["mean"] == pytest.approx(0.2, rel=0.10)
    assert calibration.server_block()["service"]["dist"] == "exponential"
    assert calibration.service.params["mean"] == pytest.approx(0.002, rel=0.10)
    labels = [label for label, _ in calibration.fits()]
    assert labels == ["workers 0-5 compute", "server service"]


def test_grouping_tolerates_tiny_differences_but_not_real_ones():
    rng = np.random.default_rng(4)
    base = LogNormal(0.1, 0.2)
    near = LogNormal(0.1 * 1.015, 0.2)  # 1.5% slower: irrelevant to staleness
    far = LogNormal(0.1 * 1.3, 0.2)
    samples = [law.sample(rng, 20000) for law in (base, near, far, far)]
    assert group_workers(samples) == (range(0, 2), range(2, 4))
    assert group_workers(samples, tolerance=0.0) == (range(0, 1), range(1, 2), range(2, 4))
    assert group_workers([np.zeros(0), samples[0], np.zeros(0)]) == (range(0, 3),)


def test_window_splits_a_gamma_law_into_batches():
    # a commit is two gamma(0.1, shape 3) batches: its time is gamma(0.2, shape 6)
    rng = np.random.default_rng(6)
    per_commit = Gamma(0.1, 3.0).sample(rng, 2 * N).reshape(N, 2).sum(axis=1)
    calibration = calibrate_trace(_trace_of(per_commit, np.zeros(N, int), 1), window=2)
    compute = calibration.workers_block()["compute"]
    assert compute["dist"] == "gamma"
    assert compute["mean"] == pytest.approx(0.1, rel=0.10)
    assert compute["shape"] == pytest.approx(3.0, rel=0.10)
    with pytest.raises(ValueError, match="no exact split"):
        batch_block(fit_distribution(LogNormal(0.1, 0.3).sample(rng, N)), 2)
    with pytest.raises(ValueError, match="window must be"):
        calibrate_trace(_trace([Exponential(1.0)], per_worker=10), window=0)


def test_a_trace_without_compute_times_cannot_be_calibrated():
    trace = _trace([Exponential(0.1)] * 2, per_worker=10, nan_every=1)
    with pytest.raises(ValueError, match="no measured compute_time"):
        calibrate_trace(trace)


def test_staleness_tv_on_hand_computed_cases():
    assert staleness_tv([0, 0, 1, 1], [0, 1, 1, 1]) == pytest.approx(0.25)
    assert staleness_tv([0, 0], [3]) == pytest.approx(1.0)
    assert staleness_tv([0, 1, 2], [2, 1, 0]) == 0.0
    assert staleness_tv([0], [0, 1]) == pytest.approx(0.5)  # sizes may differ
    assert staleness_tv(np.array([2, 0, 5, 5]), np.array([1, 1, 2, 4])) == pytest.approx(0.75)


def test_staleness_tv_is_a_symmetric_distance_in_unit_interval():
    rng = np.random.default_rng(7)
    for _ in range(20):
        a = rng.geometric(rng.uniform(0.05, 0.9), rng.integers(1, 300)) - 1
        b = rng.geometric(rng.uniform(0.05, 0.9), rng.integers(1, 300)) - 1
        d = staleness_tv(a, b)
        assert 0.0 <= d <= 1.0
        assert d == staleness_tv(b, a)
        assert staleness_tv(a, a) == 0.0
        assert staleness_tv(a, rng.permutation(a)) == 0.0


@pytest.mark.parametrize("bad", [[], [0, -1], [0.5, 1.0]])
def test_staleness_tv_rejects_non_staleness_input(bad):
    with pytest.raises(ValueError, match="staleness_tv: a"):
        staleness_tv(bad, [0, 1])
