"""The partitions against their references: McMahan et al. 2017's shards, and Flower Datasets'
Shard, Dirichlet (self-balancing, one alpha per partition), Pathological, InnerDirichlet,
GroupedNaturalId and linear / square / exponential partitioners.

Each reference below is written from the paper and Flower's documented semantics, with lists
and loops over partitions (not from gemsim's vectorised code). Where gemsim makes Flower's
draws ("same draws" in docs/heterogeneity.md), the reference runs on gemsim's partition
generator and the per-(worker, class) counts must be equal; where it has Flower's law drawn
otherwise, statistics over seeds must agree within ``Z`` standard errors (``Z`` = 4.9, a
false alarm about once in a million per assertion for a correct implementation).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from gemsim.config._partition_blocks import PartitionBlock
from gemsim.problems.partitions._partitions import (
    MAX_DIRICHLET_ATTEMPTS,
    PARTITION_KEY,
    Classes,
    Dirichlet,
    Groups,
    IdSizes,
    InnerDirichlet,
    LabelShards,
    PartitionError,
    Pathological,
    Quantity,
    RoundRobin,
    describe,
    partition,
)

Z = 4.9
C = 10
BALANCED = np.random.default_rng(11).permutation(np.repeat(np.arange(C), 120))
# Class k has 15 (k + 1)^1.3 examples: unequal classes, shards straddling two of them.
UNEVEN = np.random.default_rng(12).permutation(
    np.repeat(np.arange(C), (15 * np.arange(1, C + 1) ** 1.3).astype(int))
)


def _generator(seed: int) -> np.random.Generator:
    """gemsim's partition generator of a seed (the first draws are the spec's)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PARTITION_KEY,)))


def _counts(spec, labels, n, seed, **kw) -> np.ndarray:
    """int [n, C]: gemsim's examples per (worker, class)."""
    shards = partition(spec, labels, n, seed, n_classes=C, **kw)
    return describe(shards, labels, C).histogram


def _hist(parts: list[list[int]], labels: np.ndarray) -> np.ndarray:
    return np.array([np.bincount(labels[p], minlength=C) for p in parts]).reshape(len(parts), C)


# ----------------------------------------------------------------------------- shards


def _flower_shards(labels, n, per, size, rng) -> list[list[int]]:
    """ShardPartitioner: sort by label, shards of `size` consecutive examples (default
    int(N / (n per))), permutation(usable shards)[: n per] split into n runs of `per`."""
    order = sorted(range(labels.size), key=lambda i: labels[i])  # stable sort by label
    size = size or int(labels.size / (n * per))
    usable = labels.size // size
    dealt = rng.permutation(usable)[: n * per]
    parts = []
    for w in range(n):
        part = []
        for shard in dealt[w * per : (w + 1) * per]:
            part += order[shard * size : (shard + 1) * size]
        parts.append(part)
    return parts


@pytest.mark.parametrize(
    ("n", "per", "size"), [(10, 2, None), (12, 3, None), (7, 2, 40), (30, 1, 33)]
)
@pytest.mark.parametrize("labels", [BALANCED, UNEVEN], ids=["balanced", "uneven"])
def test_shards_deal_mcmahans_shards_with_flowers_draws(n, per, size, labels):
    for seed in range(4):
        expected = _hist(_flower_shards(labels, n, per, size, _generator(seed)), labels)
        got = _counts(LabelShards(per, size), labels, n, seed)
        np.testing.assert_array_equal(got, expected)


def test_mcmahans_split_gives_each_client_two_shards_of_one_or_two_classes():
    """McMahan et al.: 200 shards of 300 for 100 clients (here 20 of 60 for 10)."""
    counts = _counts(LabelShards(), BALANCED, 10, 0)
    assert (counts.sum(axis=1) == 120).all()  # 2 shards of 60
    assert ((counts > 0).sum(axis=1) <= 2).all()


def test_shards_refuse_more_shards_than_the_examples_hold():
    with pytest.raises(PartitionError, match="need 1220, but 1200 are shared") as e:
        partition(LabelShards(2, 61), BALANCED, 10, 0, n_classes=C)
    assert e.value.field == "shard_size"
    with pytest.raises(PartitionError, match="lower per_worker") as e:
        partition(LabelShards(200), BALANCED, 10, 0, n_classes=C)
    assert e.value.field == "per_worker"


# ----------------------------------------------------------------------------- dirichlet


def _flower_dirichlet(labels, alpha, min_size, balancing, rng):
    """DirichletPartitioner: per attempt, for each class in increasing order, p ~ Dir(alpha);
    with self-balancing, p zeroed for partitions above n_train / n and renormalised; the
    class (in index order) split at int(cumsum(p) * n_k)[:-1]; 11 attempts at most.
    Returns (counts or None, the smallest shard of each attempt)."""
    n = len(alpha)
    smallest = []
    for _ in range(11):
        parts = [[] for _ in range(n)]
        for k in sorted(set(labels.tolist())):
            members = np.nonzero(labels == k)[0]
            p = rng.dirichlet(alpha)
            if balancing:
                p = np.array([0.0 if len(parts[i]) > labels.size / n else p[i] for i in range(n)])
                p = p / p.sum()
            cuts = (np.cumsum(p) * len(members)).astype(int)[:-1]
            for i, piece in enumerate(np.split(members, cuts)):
                parts[i] += piece.tolist()
        smallest.append(min(len(p) for p in parts))
        if smallest[-1] >= min_size:
            return _hist(parts, labels), smallest
    return None, smallest


@pytest.mark.parametrize("labels", [BALANCED, UNEVEN], ids=["balanced", "uneven"])
@pytest.mark.parametrize(
    ("alpha", "balancing"),
    [(0.5, True), (0.1, True), ((0.2, 0.5, 1.0, 2.0) * 3, False), ((0.3,) * 6 + (3.0,) * 6, True)],
    ids=["0.5-balanced", "0.1-balanced", "vector", "vector-balanced"],
)
def test_dirichlet_self_balancing_and_vector_alpha_make_flowers_draws(alpha, balancing, labels):
    n = 12
    vector = alpha if isinstance(alpha, tuple) else (alpha,) * n
    spec = Dirichlet(alpha, min_size=5, self_balancing=balancing)
    for seed in range(4):
        expected, _ = _flower_dirichlet(labels, np.array(vector), 5, balancing, _generator(seed))
        np.testing.assert_array_equal(_counts(spec, labels, n, seed), expected)


def test_self_balancing_keeps_shards_near_the_average():
    """A worker stops receiving once above n_train / n: it ends at most one class above."""

    def sizes(balancing):
        spec = Dirichlet(0.3, 1, self_balancing=balancing)
        return np.array([_counts(spec, UNEVEN, 10, s).sum(axis=1) for s in range(20)])

    balanced, plain = sizes(True), sizes(False)
    most = UNEVEN.size / 10 + np.bincount(UNEVEN).max()
    assert balanced.max() <= most < plain.max()
    assert balanced.std() < 0.8 * plain.std()


def test_dirichlet_draws_as_often_as_flower_and_reports_the_best_draw():
    n, alpha = 12, (0.05,) * 12  # a vector: Flower's order, so the reference draws the same
    spec = Dirichlet(alpha, min_size=60)
    expected, smallest = _flower_dirichlet(BALANCED, np.array(alpha), 60, False, _generator(0))
    assert expected is None and len(smallest) == MAX_DIRICHLET_ATTEMPTS == 11
    with pytest.raises(PartitionError) as e:
        partition(spec, BALANCED, n, 0, n_classes=C)
    assert f"the smallest shard reached {max(smallest)} at best" in str(e.value)
    assert e.value.field == "min_size" and "one per worker, 0.05 to 0.05" not in str(e.value)


def test_a_per_worker_alpha_weighs_its_worker():
    """Worker w's share of a class is Beta(alpha_w, sum - alpha_w), mean alpha_w / sum:
    a smaller alpha gives a smaller and more skewed shard."""
    alpha = (0.5,) * 5 + (5.0,) * 5
    counts = np.array([_counts(Dirichlet(alpha, 1), BALANCED, 10, s) for s in range(20)])
    sizes, held = counts.sum(axis=2).mean(axis=0), (counts > 0).sum(axis=2).mean(axis=0)
    expected = 1200 * np.array(alpha) / sum(alpha)
    np.testing.assert_allclose(sizes, expected, rtol=0.25)
    assert held[:5].max() < 8 < 9.9 < held[5:].min()


def test_a_per_worker_alpha_needs_one_per_worker():
    with pytest.raises(PartitionError, match="3 values for 4 workers") as e:
        partition(Dirichlet((1.0, 2.0, 3.0)), BALANCED, 4, 0, n_classes=C)
    assert e.value.field == "alpha"


def test_min_size_rises_to_the_batch_size_and_changes_only_refused_draws():
    """A shard below the batch size is refused when the problem is built: the draw is
    repeated instead. A draw whose shards all hold a batch is the same with or without."""
    changed = kept = 0
    for seed in range(30):
        plain = partition(Dirichlet(0.3, 10), BALANCED, 10, seed, n_classes=C)
        floor = partition(Dirichlet(0.3, 10), BALANCED, 10, seed, n_classes=C, batch_size=40)
        assert floor.sizes.min() >= 40
        if plain.sizes.min() >= 40:
            np.testing.assert_array_equal(plain.indices, floor.indices)
            kept += 1
        else:
            changed += 1
    assert kept and changed
    with pytest.raises(PartitionError, match=r"min_size=200 \(the batch size") as e:
        partition(Dirichlet(1.0, 10), BALANCED, 10, 0, n_classes=C, batch_size=200)
    assert "lower the batch size" in str(e.value)


# ----------------------------------------------------------------------------- pathological


def _flower_pathological_counts(labels, n, p, classes_of) -> np.ndarray:
    """PathologicalPartitioner's split: each class (index order) np.array_split among the
    partitions holding it, in increasing partition order."""
    parts = [[] for _ in range(n)]
    for k in sorted(set(labels.tolist())):
        holders = [w for w in range(n) if k in classes_of[w]]
        if holders:
            pieces = np.array_split(np.nonzero(labels == k)[0], len(holders))
            for w, piece in zip(holders, pieces, strict=True):
                parts[w] += piece.tolist()
    return _hist(parts, labels)


@pytest.mark.parametrize(("n", "p"), [(10, 2), (7, 3), (25, 4), (3, 1)])
@pytest.mark.parametrize("labels", [BALANCED, UNEVEN], ids=["balanced", "uneven"])
def test_pathological_deterministic_gives_flowers_counts(n, p, labels):
    classes_of = [[(w + i) % C for i in range(p)] for w in range(n)]
    expected = _flower_pathological_counts(labels, n, p, classes_of)
    np.testing.assert_array_equal(_counts(Pathological(p, "deterministic"), labels, n, 0), expected)


def _reference_classes(mode, n, p, rng) -> list[list[int]]:
    """Flower's class choice: `random`, p classes without replacement per partition;
    `first-deterministic`, class w % C then random distinct ones until p."""
    if mode == "random":
        return [rng.choice(C, size=p, replace=False).tolist() for _ in range(n)]
    out = []
    for w in range(n):
        chosen = [w % C]
        while len(chosen) < p:
            k = int(rng.choice(C))
            if k not in chosen:
                chosen.append(k)
        out.append(chosen)
    return out


@pytest.mark.parametrize("mode", ["random", "first-deterministic"])
def test_pathological_random_modes_have_flowers_law(mode):
    """Over seeds: every worker holds exactly p classes (its first w % C in
    first-deterministic), and the number of holders of each class has the reference's mean
    and variance; each worker's largest piece too."""
    n, p, seeds = 12, 3, 300
    rng = np.random.default_rng(99)
    ours, ref = [], []
    for seed in range(seeds):
        counts = _counts(Pathological(p, mode), BALANCED, n, seed)
        assert ((counts > 0).sum(axis=1) == p).all()
        if mode == "first-deterministic":
            assert (counts[np.arange(n), np.arange(n) % C] > 0).all()
        ours.append(counts)
        ref.append(_flower_pathological_counts(BALANCED, n, p, _reference_classes(mode, n, p, rng)))
    ours, ref = np.array(ours), np.array(ref)
    for stat in (lambda h: (h > 0).sum(axis=1), lambda h: h.max(axis=2)):  # holders, largest
        a, b = stat(ours).astype(float), stat(ref).astype(float)
        se = math.sqrt(a.var(axis=0).mean() / seeds + b.var(axis=0).mean() / seeds)
        assert np.abs(a.mean(axis=0) - b.mean(axis=0)).max() < Z * se  # every class / worker


def test_pathological_refuses_too_many_classes_or_holders():
    with pytest.raises(PartitionError, match="allowed 1 to 10") as e:
        partition(Pathological(11), BALANCED, 4, 0, n_classes=C)
    assert e.value.field == "per_worker"
    few = np.repeat(np.arange(C), 3)
    with pytest.raises(PartitionError, match="training examples but .* workers hold it") as e:
        partition(Pathological(2, "deterministic"), few, 20, 0, n_classes=C)
    assert e.value.field == "per_worker"


def test_round_robin_is_the_former_classes():
    assert Classes is RoundRobin
    a = partition(Classes(2), UNEVEN, 8, 3, n_classes=C)
    b = partition(RoundRobin(2), UNEVEN, 8, 3, n_classes=C)
    np.testing.assert_array_equal(a.indices, b.indices)
    # Its pathology: with per_worker dividing C, 10 classes in 5 fixed pairs.
    pairs = {frozenset(np.flatnonzero(row)) for row in _counts(RoundRobin(2), BALANCED, 100, 0)}
    assert len(pairs) == 5


# ----------------------------------------------------------------------------- inner dirichlet


def _flower_inner(labels, sizes, alpha, rng) -> np.ndarray:
    """InnerDirichletPartitioner, example by example: mixes ~ Dir(alpha 1_C) per partition;
    until every partition is full, a partition chosen uniformly among those not full takes
    one example of a class drawn from its mix, a used-up class zeroed and the mixes
    renormalised."""
    n = len(sizes)
    mixes = rng.dirichlet(np.full(C, alpha), size=n)
    left = np.bincount(labels, minlength=C)
    need = list(sizes)
    counts = np.zeros((n, C), int)
    open_ = [w for w in range(n) if need[w]]
    while open_:
        w = open_[rng.integers(len(open_))]
        mix = mixes[w] * (left > 0)
        k = rng.choice(C, p=mix / mix.sum())
        left[k] -= 1
        counts[w, k] += 1
        need[w] -= 1
        if not need[w]:
            open_.remove(w)
    return counts


@pytest.mark.parametrize(
    ("alpha", "law"), [(0.1, None), (0.5, None), (0.3, "linear")], ids=["0.1", "0.5", "linear"]
)
def test_inner_dirichlet_has_flowers_law(alpha, law):
    labels = np.repeat(np.arange(C), 40)  # 400 examples, 8 workers
    n, seeds = 8, 150
    sizes = IdSizes(law) if law else None
    shard = [50] * n if law is None else [int(v) for v in _flower_sizes(law, 400, n)]
    rng = np.random.default_rng(5)
    ours = np.array([_counts(InnerDirichlet(alpha, sizes), labels, n, s) for s in range(seeds)])
    ref = np.array([_flower_inner(labels, shard, alpha, rng) for _ in range(seeds)])
    assert (ours.sum(axis=2) == np.array(shard)).all()
    for stat in (lambda h: (h > 0).sum(axis=2), lambda h: h.max(axis=2) / h.sum(axis=2)):
        a, b = stat(ours).astype(float).mean(axis=1), stat(ref).astype(float).mean(axis=1)
        se = math.sqrt(a.var() / seeds + b.var() / seeds)
        assert abs(a.mean() - b.mean()) < Z * se


def test_inner_dirichlet_mixes_are_the_first_draw():
    """Each worker's mix is the generator's first draw, Dirichlet(alpha 1_C) per worker, as
    Flower's: with many samples, a worker's label shares are its mix."""
    mixes = _generator(4).dirichlet(np.full(C, 2.0), size=5)
    shares = _counts(InnerDirichlet(2.0, samples=40_000), BALANCED, 5, 4) / 40_000
    np.testing.assert_allclose(shares, mixes, atol=Z * 0.5 / math.sqrt(40_000))


def test_inner_dirichlet_samples_are_dirichlet_multinomial():
    """With samples m: shares h of a client, E[h_c] = 1/C and Var[h_c] = (1/C)(1 - 1/C)
    (m + A) / (m (A + 1)), A = C alpha (balanced labels, no class runs out)."""
    n, m, alpha = 4000, 20, 0.3
    counts = _counts(InnerDirichlet(alpha, samples=m), BALANCED, n, 0)
    shares = counts / m
    a = C * alpha
    variance = (1 / C) * (1 - 1 / C) * (m + a) / (m * (a + 1))
    assert abs(shares.mean(axis=0) - 1 / C).max() < Z * math.sqrt(variance / n)
    assert shares.var(axis=0).mean() == pytest.approx(variance, rel=0.06)


def test_alpha_means_the_same_with_and_without_samples():
    """At alpha 0.1: classes per worker close across the modes, the deprecated
    dirichlet-with-samples reading far below (its concentrations sum to alpha)."""
    labels = np.repeat(np.arange(C), 600)

    def held(spec):
        return np.mean([(_counts(spec, labels, 60, s) > 0).sum(axis=1).mean() for s in range(4)])

    cut, inner, sampled = (
        held(Dirichlet(0.1, 1)),
        held(InnerDirichlet(0.1)),
        held(InnerDirichlet(0.1, samples=100)),
    )
    assert max(cut, inner, sampled) < 1.25 * min(cut, inner, sampled)
    assert held(Dirichlet(0.1, samples=100)) < 0.5 * min(cut, inner, sampled)


def test_inner_dirichlet_alpha_per_class():
    alpha = (50.0,) * 5 + (0.01,) * 5
    counts = _counts(InnerDirichlet(alpha, samples=200), BALANCED, 300, 0)
    assert counts[:, :5].sum() > 20 * counts[:, 5:].sum()
    with pytest.raises(PartitionError, match="3 values for the data set's 10 classes") as e:
        partition(InnerDirichlet((1.0, 2.0, 3.0)), BALANCED, 4, 0, n_classes=C)
    assert e.value.field == "alpha"


# ----------------------------------------------------------------------------- sizes, groups


def _flower_sizes(law, n_train, n) -> list[int]:
    """IdToSizeFncPartitioner: f(1..n) as shares, int(share * N) each, the rest to the last."""
    f = {"linear": lambda x: x, "square": lambda x: x * x, "exponential": math.exp}[law]
    units = [f(float(i)) for i in range(1, n + 1)]
    sizes = [int(u / sum(units) * n_train) for u in units]
    sizes[-1] += n_train - sum(sizes)
    return sizes


@pytest.mark.parametrize("law", ["linear", "square", "exponential"])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_size_laws_give_flowers_sizes(law, n):
    shards = partition(Quantity(IdSizes(law)), UNEVEN, n, 0, n_classes=C)
    assert shards.sizes.tolist() == _flower_sizes(law, UNEVEN.size, n)


def test_an_exponential_law_with_many_workers_leaves_some_empty():
    with pytest.raises(PartitionError, match="exponential sizes give worker 0 no example") as e:
        partition(Quantity(IdSizes("exponential")), BALANCED, 20, 0, n_classes=C)
    assert e.value.field == "law"
    with pytest.raises(PartitionError, match="unknown size law 'cubic'"):
        Quantity(IdSizes("cubic"))


@pytest.mark.parametrize(("n_groups", "n"), [(40, 10), (41, 10), (40, 7), (12, 12), (13, 4)])
def test_grouped_natural_ids_are_runs_of_the_sorted_ids(n_groups, n):
    """GroupedNaturalIdPartitioner(sort_unique_ids=True, mode="allow-bigger") split into n
    groups: np.array_split of the sorted ids."""
    ids = np.array([f"writer{g:03d}" for g in range(n_groups)])
    groups = np.random.default_rng(1).permutation(np.resize(ids, BALANCED.size))
    runs = np.array_split(np.sort(ids), n)
    expected = [np.flatnonzero(np.isin(groups, run)) for run in runs]
    shards = partition(Groups(), BALANCED, n, 0, n_classes=C, groups=groups)
    assert [sorted(shards.shard(w).tolist()) for w in range(n)] == [e.tolist() for e in expected]


# ----------------------------------------------------------------------------- scenario blocks


def _block(data):
    return TypeAdapter(PartitionBlock).validate_python(data)


def test_fields_added_to_existing_partitions_leave_their_dump_alone():
    assert _block({"name": "dirichlet", "alpha": 1}).model_dump() == {
        "order": "drawn",
        "name": "dirichlet",
        "alpha": 1.0,
        "min_size": 10,
        "samples": None,
    }
    quantity = {"name": "quantity", "dist": {"dist": "constant", "value": 1.0}}
    assert set(_block(quantity).model_dump()) == {"order", "name", "dist"}


def test_deprecated_spellings_warn_and_keep_their_draws():
    with pytest.warns(DeprecationWarning, match="write round_robin"):
        old = _block({"name": "classes", "per_worker": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = _block({"name": "round_robin", "per_worker": 2})
    assert old.spec() == new.spec() == RoundRobin(2)
    with pytest.warns(DeprecationWarning, match="inner_dirichlet"):
        _block({"name": "dirichlet", "alpha": 0.3, "samples": 8})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "shards", "per_worker": 0}, "per_worker"),
        ({"name": "shards", "shard_size": -3}, "shard_size"),
        ({"name": "pathological", "per_worker": 2, "mode": "sideways"}, "mode"),
        ({"name": "pathological"}, "per_worker"),
        ({"name": "round_robin", "per_worker": 1.5}, "per_worker"),
        ({"name": "inner_dirichlet", "alpha": 0}, "alpha"),
        ({"name": "inner_dirichlet", "alpha": [1.0, -1.0]}, "alpha"),
        ({"name": "inner_dirichlet", "alpha": 1.0, "law": "cubic"}, "law"),
        ({"name": "dirichlet", "alpha": 1.0, "self_balancing": "maybe"}, "self_balancing"),
        ({"name": "dirichlet", "alpha": []}, "alpha"),
        ({"name": "quantity", "law": "steep"}, "law"),
    ],
)
def test_new_fields_are_checked_by_name(data, field):
    with pytest.raises(ValidationError) as e:
        _block(data)
    assert any(field in map(str, err["loc"]) for err in e.value.errors()), e.value.errors()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"name": "quantity"}, "dist: required"),
        (
            {"name": "quantity", "law": "linear", "dist": {"dist": "constant", "value": 1.0}},
            "not both",
        ),
        ({"name": "inner_dirichlet", "alpha": 1.0, "law": "linear", "samples": 4}, "samples:"),
        ({"name": "dirichlet", "alpha": [1.0], "samples": 4}, "alpha:"),
        ({"name": "dirichlet", "alpha": 1.0, "self_balancing": True, "samples": 4}, "self_bal"),
    ],
)
def test_exclusive_fields_are_refused_naming_them(data, words):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValidationError, match=words):
            _block(data)


def test_blocks_build_their_specs():
    assert _block({"name": "shards"}).spec() == LabelShards(2, None)
    assert _block({"name": "pathological", "per_worker": 2, "mode": "deterministic"}).spec() == (
        Pathological(2, "deterministic")
    )
    inner = _block({"name": "inner_dirichlet", "alpha": [1, 2], "law": "square"}).spec()
    assert inner == InnerDirichlet((1.0, 2.0), IdSizes("square"))
    spec = _block({"name": "dirichlet", "alpha": [1, 2], "self_balancing": True}).spec()
    assert spec == Dirichlet((1.0, 2.0), self_balancing=True)
    assert _block({"name": "quantity", "law": "linear"}).spec() == Quantity(IdSizes("linear"))
