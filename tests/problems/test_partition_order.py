"""The strength of the tie between speed and data, `order=BySpeed(rho)`: rho = 1 is
`by_speed`'s assignment exactly and -1 its reverse, the shards drawn are those of the drawn
order (only their owners move), the achieved rank correlation follows the Gaussian copula's
Spearman's rho, and the draws are a function of the seed (numpy only, no JAX).

Statistical bounds. For the copula (`_partition_order`), Spearman's rho between slowness and
the ordered quantity has mean (6/pi) asin(rho/2) as m grows, and standard deviation at most
1/sqrt(m - 1), its value at rho = 0 (the variance falls as |rho| grows, as Pearson's does
for a bivariate normal). A mean over K seeds is within ``Z / sqrt((m - 1) K)`` of it with
false-alarm probability about `LEVEL` (``Z``: the two-sided normal quantile), plus
``BIAS`` for the finite-m offset of the mean (below 0.003 at m = 200 for every rho: 4,000
draws per rho, well under the bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from gemsim.problems.partitions._order import speed_ranking
from gemsim.problems.partitions._partitions import (
    BySpeed,
    Claim,
    Dirichlet,
    Iid,
    InnerDirichlet,
    LabelShards,
    Order,
    PartitionError,
    Pathological,
    Quantity,
    RoundRobin,
    copula_spearman,
    describe,
    partition,
    spearman,
    speed_data,
)
from gemsim.timing._distributions import Gamma, LogNormal, Uniform

LEVEL = 1e-6
Z = float(stats.norm.isf(LEVEL / 2))  # 4.89
BIAS = 0.005
N_CLASSES = 10
LABELS = np.random.default_rng(1).permutation(np.repeat(np.arange(N_CLASSES), 800))
SPEED_LAWS = {
    "lognormal": LogNormal(1.0, 1.0),
    "uniform": Uniform(0.5, 2.0),
    "gamma": Gamma(2.0, 1.5),
}


def _slowness(law, m: int, seed: int = 9) -> np.ndarray:
    return np.asarray(law.sample(np.random.default_rng(seed), m), np.float64)


def _rows(shards) -> list[tuple[int, ...]]:
    return [tuple(sorted(shards.shard(w).tolist())) for w in range(shards.n_workers)]


# ----------------------------------------------------------------------------- rho = 1, -1


@pytest.mark.parametrize(
    "make",
    [
        lambda order: Dirichlet(0.3, 5, order=order),
        lambda order: RoundRobin(3, order=order),
        lambda order: LabelShards(2, order=order),
        lambda order: Pathological(2, order=order),
        lambda order: InnerDirichlet(0.5, order=order),
        lambda order: Quantity(LogNormal(1.0, 1.0), order=order),
        lambda order: Iid(order=order),
        lambda order: Dirichlet(0.5, samples=30, order=order),
        lambda order: InnerDirichlet(0.5, samples=30, order=order),
    ],
    ids=lambda f: (
        repr(f(Order.DRAWN)).split("(")[0]
        + ("-samples" if "samples=30" in repr(f(Order.DRAWN)) else "")
    ),
)
def test_rho_one_is_by_speed_exactly_and_minus_one_its_reverse(make):
    """The same shards, index for index, as the string order; rho = -1 hands them out in the
    reverse ranking: the worker ranked i-th slowest under `by_speed` takes what the i-th
    fastest takes there."""
    n = 24
    slowness = np.random.default_rng(4).permutation(n).astype(float)  # no ties
    kw = {"n_classes": N_CLASSES, "slowness": slowness}
    by_speed = partition(make(Order.BY_SPEED), LABELS, n, 3, **kw)
    one = partition(make(BySpeed(1.0)), LABELS, n, 3, **kw)
    np.testing.assert_array_equal(one.indices, by_speed.indices)
    np.testing.assert_array_equal(one.offsets, by_speed.offsets)
    reverse = partition(make(BySpeed(-1.0)), LABELS, n, 3, **kw)
    slowest_first = np.argsort(-slowness)
    held = _rows(by_speed)
    flipped = _rows(reverse)
    for i, w in enumerate(slowest_first):
        assert flipped[slowest_first[n - 1 - i]] == held[w]


def test_rho_one_keeps_ties_as_by_speed_breaks_them_and_ranks_only_the_pool():
    """Tied slowness and a claim: rho = 1 still equals the string order's shards."""
    n = 30
    slowness = np.random.default_rng(5).integers(0, 4, n).astype(float)
    claims = [Claim((0, 1, 2), (0,))]
    kw = {"n_classes": N_CLASSES, "slowness": slowness, "claims": claims}
    a = partition(Dirichlet(0.4, 3, order="by_speed"), LABELS, n, 8, **kw)
    b = partition(Dirichlet(0.4, 3, order=BySpeed(1)), LABELS, n, 8, **kw)
    np.testing.assert_array_equal(a.indices, b.indices)


def test_speed_ranking_reverses_exactly_at_minus_one():
    slowness = np.random.default_rng(6).random(1000)
    first = speed_ranking(slowness, BySpeed(1.0), 0)
    np.testing.assert_array_equal(first, np.argsort(-slowness))
    np.testing.assert_array_equal(speed_ranking(slowness, BySpeed(-1.0), 0), first[::-1])


# ----------------------------------------------------------------------------- the shards


@pytest.mark.parametrize("rho", [-0.7, 0.0, 0.4])
def test_only_the_owners_move_and_the_seed_fixes_them(rho):
    """Whatever rho, the shards are the drawn order's (the copula draws from a stream of
    its own); the same seed gives the same owners, another seed other owners."""
    n = 40
    slowness = _slowness(SPEED_LAWS["lognormal"], n)
    drawn = partition(Dirichlet(0.5, 5), LABELS, n, 11, n_classes=N_CLASSES)
    spec = Dirichlet(0.5, 5, order=BySpeed(rho))
    tied = partition(spec, LABELS, n, 11, n_classes=N_CLASSES, slowness=slowness)
    assert sorted(_rows(tied)) == sorted(_rows(drawn))
    again = partition(spec, LABELS, n, 11, n_classes=N_CLASSES, slowness=slowness)
    np.testing.assert_array_equal(again.indices, tied.indices)
    other = partition(spec, LABELS, n, 12, n_classes=N_CLASSES, slowness=slowness)
    assert not np.array_equal(other.indices, tied.indices)


# ----------------------------------------------------------------------------- the statistics


def _mean_spearman(spec, slowness, seeds, labels=LABELS):
    values = []
    for seed in seeds:
        shards = partition(
            spec, labels, slowness.size, seed, n_classes=N_CLASSES, slowness=slowness
        )
        values.append(speed_data(spec, (), slowness, shards, labels, N_CLASSES).spearman)
    return float(np.mean(values)), values


@pytest.mark.parametrize("law", SPEED_LAWS, ids=str)
@pytest.mark.parametrize("rho", [-0.9, -0.4, 0.0, 0.3, 0.7])
def test_the_achieved_rank_correlation_is_the_copulas(rho, law):
    """200 clients drawing 50 examples each with their own Dirichlet(0.5) label mix, the
    shards tied to the clients' slowness with strength rho: Spearman's rho between slowness
    and label skew, over 12 seeds, against (6/pi) asin(rho/2)."""
    m, seeds = 200, range(12)
    slowness = _slowness(SPEED_LAWS[law], m)
    spec = InnerDirichlet(0.5, samples=50, order=BySpeed(rho))
    mean, values = _mean_spearman(spec, slowness, seeds)
    bound = Z / math.sqrt((m - 1) * len(seeds)) + BIAS
    assert abs(mean - copula_spearman(rho)) < bound
    # Each run alone within Z standard errors (at most 1/sqrt(m - 1)).
    assert max(abs(v - copula_spearman(rho)) for v in values) < Z / math.sqrt(m - 1)


@pytest.mark.parametrize("rho", [-0.5, 0.5, 0.95])
def test_disjoint_shards_reach_the_same_correlation(rho):
    """Disjoint Dirichlet shards (label skew) and quantity skew (sizes): 200 workers, 6
    seeds each."""
    m, seeds = 200, range(6)
    slowness = _slowness(SPEED_LAWS["gamma"], m)
    labels = np.random.default_rng(2).permutation(np.repeat(np.arange(N_CLASSES), 4000))
    bound = Z / math.sqrt((m - 1) * len(seeds)) + BIAS
    for spec in (
        Dirichlet(0.5, min_size=1, order=BySpeed(rho)),
        Quantity(LogNormal(1.0, 1.0), order=BySpeed(rho)),
    ):
        mean, _ = _mean_spearman(spec, slowness, seeds, labels)
        assert abs(mean - copula_spearman(rho)) < bound, type(spec).__name__


def test_the_copula_ranking_alone_matches_the_theory_tightly():
    """The ranking the shards follow, over 400 seeds at m = 200: the mean within
    Z / sqrt(199 x 400) (0.012) plus BIAS of (6/pi) asin(rho/2), the spread at most the
    null's 1/sqrt(m - 1); at rho = 0 the ranking is a uniform permutation, whose Spearman has
    mean 0 and variance exactly 1/(m - 1)."""
    m, seeds = 200, range(400)
    slowness = _slowness(SPEED_LAWS["uniform"], m)
    slow_rank = np.argsort(np.argsort(-slowness))  # 0 = slowest
    null_sd = 1.0 / math.sqrt(m - 1)
    sd_error = Z * null_sd / math.sqrt(2 * len(seeds))  # a deviation's sampling error
    for rho in (-0.6, 0.0, 0.5, 0.9):
        values = []
        for seed in seeds:
            takes = np.empty(m, np.int64)  # the shard rank (0 = most skewed) each worker takes
            takes[speed_ranking(slowness, BySpeed(rho), seed)] = np.arange(m)
            values.append(spearman(slow_rank, takes))
        target = copula_spearman(rho)
        assert abs(np.mean(values) - target) < Z * null_sd / math.sqrt(len(seeds)) + BIAS
        assert np.std(values) < null_sd + sd_error
        if rho == 0.0:
            assert abs(np.std(values) - null_sd) < sd_error


def test_spearman_is_scipys_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 6, 80).astype(float)
        y = x + rng.integers(0, 4, 80)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert math.isnan(spearman(np.ones(5), np.arange(5.0)))


def test_speed_data_names_the_ordered_quantity_and_the_ranked_pool():
    """Label partitions and claims: label skew; other specs: size. With a claim, the order
    ranks the workers outside it by skew against the unclaimed labels."""
    n = 30
    slowness = _slowness(SPEED_LAWS["lognormal"], n)
    claims = (Claim((0, 1, 2, 3), (0, 1)),)
    spec = Dirichlet(0.4, 3, order=BySpeed(0.5))
    shards = partition(spec, LABELS, n, 2, n_classes=N_CLASSES, slowness=slowness, claims=claims)
    data = speed_data(spec, claims, slowness, shards, LABELS, N_CLASSES)
    assert (data.quantity, data.owners, data.rho, data.ranked) == ("label skew", n, 0.5, 26)
    summary = describe(shards, LABELS, N_CLASSES)
    assert data.spearman == pytest.approx(stats.spearmanr(slowness, summary.distance).statistic)
    pool = summary.histogram[4:, 2:]
    reference = np.bincount(LABELS, minlength=N_CLASSES)[2:]
    skew = 0.5 * np.abs(pool / pool.sum(1, keepdims=True) - reference / reference.sum()).sum(1)
    expected = stats.spearmanr(slowness[4:], skew).statistic
    assert data.ranked_spearman == pytest.approx(expected)
    sizes = Quantity(LogNormal(1.0, 1.0))
    shards = partition(sizes, LABELS, n, 2, n_classes=N_CLASSES)
    data = speed_data(sizes, (), slowness, shards, LABELS, N_CLASSES)
    assert (data.quantity, data.rho, data.ranked) == ("size", None, 0)
    assert math.isnan(data.ranked_spearman)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [1.5, -1.01, math.nan, math.inf, "0.5", True, None])
def test_rho_outside_minus_one_one_or_not_a_number_is_refused(bad):
    with pytest.raises(PartitionError, match=r"by_speed must be a finite number in \[-1") as e:
        Dirichlet(1.0, order=BySpeed(bad))
    assert e.value.field == "order" and repr(bad) in e.value.message
    with pytest.raises(PartitionError):
        Iid(order={"by_speed": bad})


def test_a_mapping_order_is_read_as_by_speed():
    assert Iid(order={"by_speed": 0.25}) == Iid(order=BySpeed(0.25))
    assert Iid(order=BySpeed(1)).order.rho == 1.0 and isinstance(
        Iid(order=BySpeed(1)).order.rho, float
    )
    with pytest.raises(PartitionError, match="order"):
        Iid(order={"by_speed": 0.5, "other": 1})
