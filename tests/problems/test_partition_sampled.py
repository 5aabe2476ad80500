"""Shards drawn with replacement (`Iid(samples=m)`, `Dirichlet(alpha, samples=m)`): every
client holds exactly m training indices, for populations larger than the training set.

Shapes, the seed, the label statistics against their laws, the speed order, bad input and a
million clients (numpy only, no JAX).

Statistical tolerances. Every draw is seeded, so each test is deterministic; a tolerance
says how unlikely a correct implementation would be to miss it. Each statistic is compared
with its exact expectation under the documented law, with a bound whose false-alarm
probability, for a correct implementation, is at most about `LEVEL` (1e-6) per assertion:
chi-square statistics against ``chi2.isf(LEVEL, df)``, means against ``Z`` (= 4.9) standard
errors, ``Z`` being the two-sided normal quantile of `LEVEL`. The laws:

- ``Iid(samples=m)``: the n * m indices are i.i.d. uniform over the n_train examples, so the
  pooled class counts are multinomial(n m, p) and the pooled index counts
  multinomial(n m, 1 / n_train).
- ``Dirichlet(alpha, samples=m)``: client i draws q_i ~ Dirichlet(alpha p) over the classes
  present (p: the training set's class frequencies, so the concentration is alpha), then
  counts ~ multinomial(m, q_i), then within each class examples uniform with replacement.
  Its label shares h = counts / m are Dirichlet-multinomial:
  E[h_c] = E[q_c] = p_c, Var[q_c] = p_c (1 - p_c) / (alpha + 1) and
  Var[h_c] = Var[q_c] + E[q_c (1 - q_c)] / m = p_c (1 - p_c) (m + alpha) / (m (alpha + 1)).
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError
from scipy import stats

from gemsim.config._partition_blocks import PartitionBlock
from gemsim.problems.partitions._partitions import (
    Claim,
    Classes,
    Dirichlet,
    FromFile,
    Groups,
    Iid,
    Order,
    PartitionError,
    Quantity,
    Shards,
    describe,
    partition,
)

LEVEL = 1e-6
"""False-alarm probability of each statistical assertion for a correct implementation."""
Z = float(stats.norm.isf(LEVEL / 2))  # 4.89

N_CLASSES = 12
# Class k has 20 (k + 1)^1.5 examples for k < 10; classes 7, 10 and 11 have none.
_COUNTS = np.zeros(N_CLASSES, np.int64)
_COUNTS[:10] = (20 * np.arange(1, 11) ** 1.5).astype(int)
_COUNTS[7] = 0
UNBALANCED = np.random.default_rng(2).permutation(np.repeat(np.arange(N_CLASSES), _COUNTS))
P = _COUNTS / _COUNTS.sum()
PRESENT = np.flatnonzero(_COUNTS)
ABSENT = np.flatnonzero(_COUNTS == 0)
# 1,000 examples, 10 balanced classes (for the shape tests: n_workers >> n_train).
SMALL = np.random.default_rng(3).permutation(np.repeat(np.arange(10), 100))


def _hist(shards: Shards, labels: np.ndarray, n_classes: int = N_CLASSES) -> np.ndarray:
    return describe(shards, labels, n_classes).histogram


def _rows(shards: Shards, m: int) -> np.ndarray:
    return shards.indices.reshape(shards.n_workers, m)


def _sorted_rows(rows: np.ndarray) -> np.ndarray:
    """The rows (each sorted) in lexicographic order: the multiset of shards."""
    rows = np.sort(rows, axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def _assert_shape(shards: Shards, n: int, m: int, n_train: int) -> None:
    assert isinstance(shards, Shards)
    assert shards.indices.dtype == np.int64 and shards.offsets.dtype == np.int64
    assert shards.n_workers == n and shards.indices.shape == (n * m,)
    np.testing.assert_array_equal(shards.offsets, np.arange(n + 1, dtype=np.int64) * m)
    assert (shards.sizes == m).all()
    assert shards.indices.min() >= 0 and shards.indices.max() < n_train


def _slowness(n: int, seed: int = 5) -> np.ndarray:
    """Slowness with many ties (50 distinct values), as measured compute times can have."""
    return np.random.default_rng(seed).integers(0, 50, n).astype(np.float64)


SPECS = {
    "iid": Iid(samples=7),
    "dirichlet": Dirichlet(0.3, samples=7),
    "dirichlet-by-speed": Dirichlet(0.3, samples=7, order="by_speed"),
    "iid-by-speed": Iid(samples=7, order=Order.BY_SPEED),
}


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_client_holds_samples_indices_of_the_training_set(name):
    """20,000 clients of a 1,000-example training set: 20 times more clients than examples."""
    spec, n = SPECS[name], 20_000
    slowness = _slowness(n) if spec.order is Order.BY_SPEED else None
    shards = partition(spec, SMALL, n, 0, n_classes=10, slowness=slowness)
    _assert_shape(shards, n, 7, SMALL.size)
    # Shards overlap (140,000 indices of 1,000 examples), and nearly every example is held.
    assert describe(shards, SMALL, 10).held > 0.99 * SMALL.size


@pytest.mark.parametrize("spec", [Iid(), Dirichlet(0.3)], ids=["iid", "dirichlet"])
def test_without_samples_the_population_cannot_exceed_the_training_set(spec):
    """What `samples` is for: the disjoint partitions refuse 20,000 clients of 1,000."""
    with pytest.raises(PartitionError):
        partition(spec, SMALL, 20_000, 0, n_classes=10)


@pytest.mark.parametrize("name", ["iid", "dirichlet", "dirichlet-by-speed"])
def test_sampled_shards_are_a_pure_function_of_the_seed(name):
    spec, n = SPECS[name], 20_000
    slowness = _slowness(n) if spec.order is Order.BY_SPEED else None

    def draw(seed: int) -> Shards:
        return partition(spec, SMALL, n, seed, n_classes=10, slowness=slowness)

    first, other = draw(3), draw(4)
    # A call in between (other labels, other population) changes nothing.
    partition(spec, UNBALANCED, 17, 3, n_classes=N_CLASSES, slowness=_slowness(17))
    again = draw(3)
    np.testing.assert_array_equal(first.indices, again.indices)
    np.testing.assert_array_equal(first.offsets, again.offsets)
    assert (first.indices != other.indices).mean() > 0.9


def test_a_single_client_and_a_single_example():
    shards = partition(Iid(samples=5), np.array([3]), 1, 0, n_classes=4)
    np.testing.assert_array_equal(shards.indices, np.zeros(5, np.int64))
    shards = partition(Dirichlet(0.1, samples=5), np.array([3]), 3, 0, n_classes=4)
    _assert_shape(shards, 3, 5, 1)


def test_dirichlet_samples_ignores_min_size():
    """The docstring: with ``samples``, ``min_size`` does not apply (every shard holds
    ``samples``), so a min_size that the disjoint draw could never meet is no error."""
    spec = Dirichlet(0.5, min_size=10_000, samples=3)
    _assert_shape(partition(spec, SMALL, 50, 0, n_classes=10), 50, 3, SMALL.size)


def test_order_drawn_ignores_slowness():
    """``order="drawn"``: shard i goes to worker i, whatever slowness is given."""
    spec = Dirichlet(0.3, samples=7)
    plain = partition(spec, SMALL, 500, 1, n_classes=10)
    given = partition(spec, SMALL, 500, 1, n_classes=10, slowness=_slowness(500))
    np.testing.assert_array_equal(plain.indices, given.indices)


# ----------------------------------------------------------------------------- iid


def test_iid_samples_pooled_labels_follow_the_training_distribution():
    """Pooled class counts are multinomial(n m, p): a chi-square test over the classes
    present (df = 8), and no example of an absent class."""
    n, m = 20_000, 10
    shards = partition(Iid(samples=m), UNBALANCED, n, 0, n_classes=N_CLASSES)
    counts = _hist(shards, UNBALANCED).sum(axis=0)
    assert (counts[ABSENT] == 0).all()
    expected = n * m * P[PRESENT]
    chi2 = (((counts[PRESENT] - expected) ** 2) / expected).sum()
    assert chi2 < stats.chi2.isf(LEVEL, PRESENT.size - 1), chi2


def test_iid_samples_indices_are_uniform_over_the_training_set():
    """Pooled index counts are multinomial(n m, 1 / n_train): chi-square with df = 999."""
    n, m = 20_000, 10
    shards = partition(Iid(samples=m), SMALL, n, 1, n_classes=10)
    counts = np.bincount(shards.indices, minlength=SMALL.size)
    expected = n * m / SMALL.size
    chi2 = (((counts - expected) ** 2) / expected).sum()
    assert chi2 < stats.chi2.isf(LEVEL, SMALL.size - 1), chi2
    # Every position of a shard is uniform too (no position favours some examples).
    for j in (0, m - 1):
        column = np.bincount(_rows(shards, m)[:, j], minlength=SMALL.size)
        chi2 = (((column - n / SMALL.size) ** 2) / (n / SMALL.size)).sum()
        assert chi2 < stats.chi2.isf(LEVEL, SMALL.size - 1), (j, chi2)


def test_iid_samples_each_client_draws_with_replacement():
    """m = N draws of N = 50 examples: a client's number of distinct examples D has
    E[D] = N (1 - (1 - 1/N)^m) (31.8, not 50 as without replacement) and the exact variance
    Var[D] = N (N-1) (1 - 2/N)^m + N (1 - 1/N)^m - N^2 (1 - 1/N)^(2m); the mean over 20,000
    clients is within Z standard errors of E[D]."""
    big_n, m, n = 50, 50, 20_000
    labels = np.arange(big_n) % 5
    shards = partition(Iid(samples=m), labels, n, 2, n_classes=5)
    rows = np.sort(_rows(shards, m), axis=1)
    distinct = 1 + (np.diff(rows, axis=1) != 0).sum(axis=1)
    mean = big_n * (1 - (1 - 1 / big_n) ** m)
    var = (
        big_n * (big_n - 1) * (1 - 2 / big_n) ** m
        + big_n * (1 - 1 / big_n) ** m
        - big_n**2 * (1 - 1 / big_n) ** (2 * m)
    )
    assert abs(distinct.mean() - mean) < Z * np.sqrt(var / n), (distinct.mean(), mean)


# ----------------------------------------------------------------------------- dirichlet


def _var_h(alpha: float, m: int, p: np.ndarray) -> np.ndarray:
    """Var[h_c] of a Dirichlet-multinomial share (see the module docstring)."""
    return p * (1 - p) * (m + alpha) / (m * (alpha + 1))


@pytest.mark.parametrize("alpha", [0.2, 1.0, 10.0])
def test_dirichlet_samples_shares_have_the_dirichlet_mean_and_variance(alpha):
    """E[h_c] = p_c and Var[h_c] = p_c (1-p_c) (m + alpha) / (m (alpha + 1)) per class present.

    m = 100 makes the Dirichlet part p_c (1-p_c) / (alpha + 1) most of the variance (at
    alpha = 1: 0.500 of 0.505 p(1-p)), so a wrong concentration (e.g. Dirichlet(alpha * ones)
    or Dirichlet(alpha * C * p)) fails it. Standard errors over n = 10,000 clients: the mean's
    sqrt(Var[h_c] / n); the sample variance's sqrt((mu4 - s^4) / n) (its asymptotic law), mu4
    the sample's fourth central moment (heavy for small alpha, so measured, not assumed)."""
    n, m = 10_000, 100
    shards = partition(Dirichlet(alpha, samples=m), UNBALANCED, n, 0, n_classes=N_CLASSES)
    h = _hist(shards, UNBALANCED) / m
    assert (h[:, ABSENT] == 0).all(), "a client drew a class the training set lacks"
    var = _var_h(alpha, m, P)
    for c in PRESENT:
        mean, s2 = h[:, c].mean(), h[:, c].var(ddof=1)
        assert abs(mean - P[c]) < Z * np.sqrt(var[c] / n), (c, mean, P[c])
        mu4 = ((h[:, c] - mean) ** 4).mean()
        se = np.sqrt(max(mu4 - s2**2, 0.0) / n)
        assert abs(s2 - var[c]) < Z * se, (c, s2, var[c], se)
    # The Dirichlet's own variance, p(1-p)/(alpha+1), from the unbiased moment estimate
    # Var[q_c] = Var[h_c] - E[h_c (1 - h_c)] / (m - 1): within 10 % for the largest class.
    c = PRESENT[np.argmax(P[PRESENT])]
    var_q = h[:, c].var(ddof=1) - (h[:, c] * (1 - h[:, c])).mean() / (m - 1)
    assert var_q == pytest.approx(P[c] * (1 - P[c]) / (alpha + 1), rel=0.1)


def test_dirichlet_samples_within_a_class_examples_are_uniform_with_replacement():
    """Pooled over clients, each class's examples are drawn uniformly: per class a
    chi-square over its members, summed (df = n_train - classes present)."""
    n, m = 20_000, 20
    labels = SMALL
    shards = partition(Dirichlet(1.0, samples=m), labels, n, 3, n_classes=10)
    counts = np.bincount(shards.indices, minlength=labels.size)
    chi2, df = 0.0, 0
    for k in range(10):
        members = counts[labels == k]
        expected = members.sum() / members.size
        chi2 += (((members - expected) ** 2) / expected).sum()
        df += members.size - 1
    assert chi2 < stats.chi2.isf(LEVEL, df), chi2


def test_dirichlet_samples_one_class_present_draws_with_replacement():
    """A training set of 10 examples of class 2 (the only class present): q = (1), every
    client holds 30 of the 10 examples, so repeats."""
    labels = np.full(10, 2)
    shards = partition(Dirichlet(0.1, samples=30), labels, 1_000, 0, n_classes=3)
    _assert_shape(shards, 1_000, 30, 10)
    counts = np.bincount(shards.indices, minlength=10)
    expected = 30_000 / 10
    assert (((counts - expected) ** 2) / expected).sum() < stats.chi2.isf(LEVEL, 9)


def test_dirichlet_samples_large_alpha_is_close_to_the_training_distribution():
    """alpha = 1000: each client's shares are within Z' standard deviations of p, per class
    (Var[h_c] above; Z' Bonferroni-corrected over the 1,000 x 6 comparisons; m = 400 keeps the
    smallest class's count, mean 20, near normal). The mean total-variation distance from p
    is below 0.5 sum_c sd(h_c) (E|h_c - p_c| <= sd(h_c), Jensen; the expected mean is about
    0.8 of that, and 1,000 clients average it within a few percent), while alpha = 0.1's
    concentrated clients, mostly of one class k (distance 1 - p_k >= 0.7), average above 0.5."""
    n, m, alpha = 1_000, 400, 1000.0
    counts = np.array([300, 200, 200, 150, 100, 50])
    labels = np.random.default_rng(4).permutation(np.repeat(np.arange(6), counts))
    p = counts / counts.sum()
    shards = partition(Dirichlet(alpha, samples=m), labels, n, 0, n_classes=6)
    h = _hist(shards, labels, 6) / m
    z = stats.norm.isf(LEVEL / (2 * n * p.size))
    assert (np.abs(h - p) < z * np.sqrt(_var_h(alpha, m, p))).all()
    near = describe(shards, labels, 6).distance.mean()
    assert near < 0.5 * np.sqrt(_var_h(alpha, m, p)).sum(), near
    far = describe(partition(Dirichlet(0.1, samples=m), labels, n, 0, n_classes=6), labels, 6)
    assert far.distance.mean() > 0.5


def test_dirichlet_samples_small_alpha_concentrates_each_client():
    """alpha = 0.1: a client's largest share is at least its sum of squared shares (shares
    sum to 1), whose mean is E[sum h_c^2] = sum p_c^2 + (1 - sum p_c^2) (m + alpha) /
    (m (alpha + 1)) (= 0.92 for ten balanced classes, m = 50), far above max(p) = 0.1; the
    mean over 5,000 clients is checked against that bound within Z standard errors (the
    largest share lies in [0, 1]: standard deviation <= 0.5)."""
    n, m, alpha = 5_000, 50, 0.1
    labels = np.random.default_rng(5).permutation(np.repeat(np.arange(10), 500))
    shards = partition(Dirichlet(alpha, samples=m), labels, n, 0, n_classes=10)
    h = _hist(shards, labels, 10) / m
    sum_p2 = 10 * 0.1**2
    bound = sum_p2 + (1 - sum_p2) * (m + alpha) / (m * (alpha + 1))
    top = h.max(axis=1).mean()
    assert top > bound - Z * 0.5 / np.sqrt(n), (top, bound)
    assert top > 8 * 0.1
    # For contrast, Iid(samples): the largest share stays near max(p).
    iid = _hist(partition(Iid(samples=m), labels, n, 0, n_classes=10), labels, 10) / m
    assert iid.max(axis=1).mean() < 0.3


def test_dirichlet_samples_shards_are_in_a_random_order():
    """Shards' docstring: each worker's indices 'in a seeded random order' (as
    test_partitions.test_shards_are_in_a_random_order asserts for the disjoint specs)."""
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(10), 500))
    shards = partition(Dirichlet(5.0, samples=40), labels, 4, 0, n_classes=10)
    for w in range(4):
        assert not (np.diff(labels[shards.shard(w)]) >= 0).all(), "a shard is grouped by class"


# ----------------------------------------------------------------------------- by_speed


def test_by_speed_gives_the_slowest_clients_the_most_skewed_shards():
    """Skew is the total-variation distance between a shard's label distribution and the
    training set's (what `describe` reports and `_by_speed` ranks by). Ranking the workers
    from slowest to fastest (ties included), their shards' distances never increase; the
    shards are the drawn ones (same seed), only who holds which changes."""
    n, m = 2_000, 30
    slowness = _slowness(n)
    drawn = partition(Dirichlet(0.5, samples=m), UNBALANCED, n, 6, n_classes=N_CLASSES)
    spec = Dirichlet(0.5, samples=m, order="by_speed")
    fast = partition(spec, UNBALANCED, n, 6, n_classes=N_CLASSES, slowness=slowness)
    _assert_shape(fast, n, m, UNBALANCED.size)
    distance = describe(fast, UNBALANCED, N_CLASSES).distance
    slowest_first = np.argsort(-slowness, kind="stable")
    assert (np.diff(distance[slowest_first]) <= 1e-12).all()
    # Tied slowness: the tied workers' shards are still ranked (no tie breaks the order).
    assert np.unique(slowness).size < n
    np.testing.assert_array_equal(_sorted_rows(_rows(fast, m)), _sorted_rows(_rows(drawn, m)))
    # Not merely the same multiset of index sets: each shard row moves whole.
    assert {tuple(r) for r in _rows(fast, m)} == {tuple(r) for r in _rows(drawn, m)}
    assert distance[slowest_first[0]] == describe(drawn, UNBALANCED, N_CLASSES).distance.max()


def test_by_speed_keeps_equal_iid_sample_shards_in_drawn_order():
    """Iid(samples) shards are all m long: 'largest to the slowest' leaves them as drawn."""
    n, m = 1_000, 9
    drawn = partition(Iid(samples=m), SMALL, n, 7, n_classes=10)
    spec = Iid(samples=m, order="by_speed")
    fast = partition(spec, SMALL, n, 7, n_classes=10, slowness=_slowness(n))
    np.testing.assert_array_equal(fast.indices, drawn.indices)
    np.testing.assert_array_equal(fast.offsets, drawn.offsets)


@pytest.mark.parametrize(
    "spec", [Iid(samples=3, order="by_speed"), Dirichlet(1.0, samples=3, order="by_speed")]
)
def test_by_speed_samples_needs_valid_slowness(spec):
    with pytest.raises(PartitionError, match="by_speed needs each worker's slowness") as e:
        partition(spec, SMALL, 4, 0, n_classes=10)
    assert e.value.field == "order"
    for bad in (np.ones(3), np.array([1.0, np.nan, 2.0, 3.0])):
        with pytest.raises(PartitionError, match="must be 4 finite numbers") as e:
            partition(spec, SMALL, 4, 0, n_classes=10, slowness=bad)
        assert e.value.field == "slowness"


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", 10**6 + 0.5])
@pytest.mark.parametrize("make", [lambda s: Iid(samples=s), lambda s: Dirichlet(1.0, samples=s)])
def test_samples_must_be_a_positive_integer(make, bad):
    with pytest.raises(PartitionError, match=r"must be an integer >= 1, got") as e:
        make(bad)
    assert e.value.field == "samples" and str(e.value).startswith("samples: ")
    assert repr(bad) in e.value.message


@pytest.mark.parametrize("make", [lambda: Iid(samples=40), lambda: Dirichlet(1.0, samples=40)])
def test_samples_with_claims_draws_each_claim_from_its_classes(make):
    """A claim's clients draw their `samples` uniformly from the claim's examples alone
    (pooled index counts: a chi-square against the uniform law over them); the other
    clients draw from the unclaimed classes only; every shard is `samples` long."""
    n, m = 300, 40
    claims = [Claim(tuple(range(0, 60)), (3,)), Claim(tuple(range(60, 90)), (0, 5))]
    shards = partition(make(), SMALL, n, 4, n_classes=10, claims=claims)
    _assert_shape(shards, n, m, SMALL.size)
    rows = _rows(shards, m)
    for claim in claims:
        members = np.flatnonzero(np.isin(SMALL, claim.classes))
        drawn = rows[list(claim.workers)].ravel()
        assert np.isin(drawn, members).all()
        counts = np.bincount(np.searchsorted(members, drawn), minlength=members.size)
        chi2 = ((counts - drawn.size / members.size) ** 2).sum() / (drawn.size / members.size)
        assert chi2 < stats.chi2.isf(LEVEL, members.size - 1)
    rest = rows[90:].ravel()
    assert not np.isin(SMALL[rest], [0, 3, 5]).any()
    assert np.unique(SMALL[rest]).size == 7
    again = partition(make(), SMALL, n, 4, n_classes=10, claims=claims)
    np.testing.assert_array_equal(again.indices, shards.indices)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Classes(2, samples=4),
        lambda: Quantity(sizes=None, samples=4),
        lambda: FromFile("x.npz", samples=4),
        lambda: Groups(samples=4),
    ],
    ids=["classes", "quantity", "file", "groups"],
)
def test_only_iid_and_dirichlet_take_samples(make):
    """The other specs have no `samples` field: the dataclass refuses the keyword (a
    TypeError, not a PartitionError; the scenario file's blocks refuse it by name, below)."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'samples'"):
        make()


@pytest.mark.parametrize("name", ["classes", "quantity", "file", "groups"])
def test_the_scenario_blocks_refuse_samples_on_other_partitions(name, tmp_path):
    (tmp_path / "mapping.npz").write_bytes(b"")  # the file block first reads its digest
    extra = {
        "classes": {"per_worker": 2},
        "quantity": {"dist": {"dist": "constant", "value": 1.0}},
        "file": {"path": str(tmp_path / "mapping.npz")},
        "groups": {},
    }[name]
    with pytest.raises(ValidationError) as e:
        TypeAdapter(PartitionBlock).validate_python({"name": name, "samples": 4, **extra})
    assert any(
        err["loc"][-1] == "samples" and err["type"] == "extra_forbidden" for err in e.value.errors()
    ), e.value.errors()


@pytest.mark.parametrize("name", ["iid", "dirichlet"])
def test_the_scenario_blocks_take_positive_samples(name):
    extra = {"alpha": 0.5} if name == "dirichlet" else {}
    block = TypeAdapter(PartitionBlock).validate_python({"name": name, "samples": 8, **extra})
    assert block.spec().samples == 8
    with pytest.raises(ValidationError) as e:
        TypeAdapter(PartitionBlock).validate_python({"name": name, "samples": 0, **extra})
    assert any(err["loc"][-1] == "samples" for err in e.value.errors())


@pytest.mark.parametrize(
    "spec", [Iid(samples=3), Dirichlet(1.0, samples=3)], ids=["iid", "dirichlet"]
)
def test_samples_of_an_empty_training_set_is_a_partition_error(spec):
    with pytest.raises(PartitionError):
        partition(spec, np.array([], np.int64), 5, 0, n_classes=2)


# ----------------------------------------------------------------------------- scale


@pytest.mark.parametrize(
    "spec",
    [Iid(samples=8), Dirichlet(0.3, samples=8, order="by_speed")],
    ids=["iid", "dirichlet-by-speed"],
)
def test_a_million_clients_of_five_thousand_examples(spec):
    """Vectorised over clients: 8,000,000 indices in about 0.4 s (iid), 2 s (dirichlet with
    the speed order) on one core. Only the shape is asserted."""
    n, labels = 1_000_000, np.random.default_rng(0).integers(0, 10, 5_000)
    slowness = np.random.default_rng(1).random(n) if spec.order is Order.BY_SPEED else None
    shards = partition(spec, labels, n, 0, n_classes=10, slowness=slowness)
    _assert_shape(shards, n, 8, labels.size)
