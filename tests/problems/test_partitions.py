"""Partitions of a training set among workers: invariants of every spec, statistics against
their laws, the user's files, claims, the speed order and scale (numpy only, no JAX)."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from gemsim.problems.partitions._partitions import (
    MAX_DIRICHLET_ATTEMPTS,
    PARTITION_KEY,
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
    check_shards,
    describe,
    format_summary,
    partition,
)
from gemsim.timing._distributions import LogNormal

N_CLASSES = 10
N_WORKERS = 16
# 500 examples of each class, in a shuffled order.
BALANCED = np.random.default_rng(1).permutation(np.repeat(np.arange(N_CLASSES), 500))
# Class k has 20 (k + 1)^1.5 examples; class 7 has none (a class the training set lacks).
_COUNTS = (20 * np.arange(1, N_CLASSES + 1) ** 1.5).astype(int)
_COUNTS[7] = 0
UNBALANCED = np.random.default_rng(2).permutation(np.repeat(np.arange(N_CLASSES), _COUNTS))
LABEL_SETS = {"balanced": BALANCED, "unbalanced": UNBALANCED}


class Fixed:
    """A size law that draws given values (in order, cycling), consuming no randomness."""

    def __init__(self, *values: float):
        self.values = np.array(values, dtype=np.float64)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        del rng
        return np.resize(self.values, size)


def _sets(shards: Shards) -> list[frozenset[int]]:
    return [frozenset(shards.shard(w).tolist()) for w in range(shards.n_workers)]


def _assert_disjoint(shards: Shards, n_train: int, *, covering: bool = True) -> None:
    assert shards.indices.dtype == np.int64 and shards.offsets.dtype == np.int64
    assert shards.offsets[0] == 0 and (np.diff(shards.offsets) >= 0).all()
    counts = np.bincount(shards.indices, minlength=n_train)
    assert counts.max() <= 1, "an example is in two shards"
    if covering:
        assert counts.min() == 1, "an example is in no shard"


def _hist(shards: Shards, labels: np.ndarray) -> np.ndarray:
    return describe(shards, labels, N_CLASSES).histogram


SPECS = {
    "iid": Iid(),
    "dirichlet": Dirichlet(alpha=0.5, min_size=5),
    "classes": Classes(per_worker=2),
    "quantity": Quantity(LogNormal(median=1.0, sigma=1.0)),
}


# ----------------------------------------------------------------------------- all specs


@pytest.mark.parametrize("labels_name", sorted(LABEL_SETS))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_shards_are_disjoint_and_cover(name, labels_name):
    labels = LABEL_SETS[labels_name]
    shards = partition(SPECS[name], labels, N_WORKERS, 0, n_classes=N_CLASSES)
    assert shards.n_workers == N_WORKERS and shards.sizes.sum() == labels.size
    _assert_disjoint(shards, labels.size)
    assert (shards.sizes >= 1).all()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_same_seed_same_shards_other_seed_other_shards(name):
    spec = SPECS[name]
    first = partition(spec, BALANCED, N_WORKERS, 3, n_classes=N_CLASSES)
    other = partition(spec, BALANCED, N_WORKERS, 4, n_classes=N_CLASSES)
    # A call in between changes nothing: no state is shared between calls.
    partition(spec, UNBALANCED, 5, 3, n_classes=N_CLASSES)
    again = partition(spec, BALANCED, N_WORKERS, 3, n_classes=N_CLASSES)
    np.testing.assert_array_equal(first.indices, again.indices)
    np.testing.assert_array_equal(first.offsets, again.offsets)
    assert _sets(first) != _sets(other)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_shards_are_in_a_random_order(name):
    shards = partition(SPECS[name], BALANCED, 4, 0, n_classes=N_CLASSES)
    for w in range(4):
        shard = shards.shard(w)
        assert not (np.diff(shard) > 0).all(), "a shard is sorted"
        assert not (np.diff(BALANCED[shard]) >= 0).all(), "a shard is grouped by class"


def test_the_generator_is_the_partition_stream_of_the_seed():
    """Iid's shuffle is the first draw of SeedSequence(seed, spawn_key=(PARTITION_KEY,))."""
    rng = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(PARTITION_KEY,)))
    perm = rng.permutation(BALANCED.size)
    shards = partition(Iid(), BALANCED, 4, 7, n_classes=N_CLASSES)
    expected = [frozenset(piece.tolist()) for piece in np.array_split(perm, 4)]
    assert _sets(shards) == expected


# ----------------------------------------------------------------------------- iid


@pytest.mark.parametrize("n", [1, 3, 16, 4999, 5000])
def test_iid_sizes_differ_by_at_most_one(n):
    shards = partition(Iid(), BALANCED, n, 0, n_classes=N_CLASSES)
    assert shards.sizes.max() - shards.sizes.min() <= 1
    _assert_disjoint(shards, BALANCED.size)


def test_iid_refuses_more_workers_than_examples():
    with pytest.raises(PartitionError, match="5001 workers share 5000 training examples") as e:
        partition(Iid(), BALANCED, 5001, 0, n_classes=N_CLASSES)
    assert e.value.field == "n_workers"


# ----------------------------------------------------------------------------- dirichlet


def _flower_dirichlet(labels: np.ndarray, n: int, alpha: float, seed: int) -> list[frozenset]:
    """Flower Datasets' DirichletPartitioner (no self-balancing, one attempt), written from its
    code with lists and np.split, on our generator and with our shuffle of each class."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PARTITION_KEY,)))
    shards: list[list[int]] = [[] for _ in range(n)]
    for k in np.unique(labels):
        members = rng.permutation(np.nonzero(labels == k)[0])
        proportions = rng.dirichlet(np.full(n, alpha))
        cuts = (np.cumsum(proportions) * len(members)).astype(int)[:-1]
        for w, piece in enumerate(np.split(members, cuts)):
            shards[w].extend(piece.tolist())
    return [frozenset(s) for s in shards]


@pytest.mark.parametrize("labels_name", sorted(LABEL_SETS))
@pytest.mark.parametrize("alpha", [0.3, 1.0, 100.0])
def test_dirichlet_cuts_each_class_as_flower_does(alpha, labels_name):
    labels = LABEL_SETS[labels_name]
    shards = partition(Dirichlet(alpha, min_size=1), labels, N_WORKERS, 5, n_classes=N_CLASSES)
    assert _sets(shards) == _flower_dirichlet(labels, N_WORKERS, alpha, 5)


@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_dirichlet_shares_follow_their_beta_law(alpha):
    """A worker's share of a class is Beta(alpha, (n - 1) alpha): mean 1/n, variance
    (n - 1) / (n^2 (n alpha + 1)); min_size=1 is (almost) never resampled here."""
    n, seeds = N_WORKERS, 300
    shares = np.stack(
        [
            _hist(partition(Dirichlet(alpha, 1), BALANCED, n, s, n_classes=N_CLASSES), BALANCED)
            / 500.0
            for s in range(seeds)
        ]
    )  # [seeds, n, classes]
    variance = (n - 1) / (n**2 * (n * alpha + 1))
    # Classes are drawn independently: each worker's mean over seeds and classes has standard
    # error sqrt(variance / 3000); the cut rounds down, moving the end workers' by <= 1/500.
    mean_error = np.sqrt(variance / (seeds * N_CLASSES))
    np.testing.assert_array_less(
        np.abs(shares.mean(axis=(0, 2)) - 1 / n), 4.5 * mean_error + 1 / 500
    )
    # Each (worker, class) cell's variance over 300 seeds, averaged over the 160 cells: the
    # Monte-Carlo error is about 1.5 % here.
    assert shares.var(axis=0).mean() == pytest.approx(variance, rel=0.05)


def test_dirichlet_small_alpha_is_more_skewed():
    def mean_distance(alpha: float) -> float:
        return np.mean(
            [
                np.nanmean(
                    describe(
                        partition(Dirichlet(alpha, 1), BALANCED, N_WORKERS, s, n_classes=10),
                        BALANCED,
                        N_CLASSES,
                    ).distance
                )
                for s in range(10)
            ]
        )

    tight, middle, loose = mean_distance(0.1), mean_distance(1.0), mean_distance(100.0)
    assert tight > middle > loose
    assert loose < 0.1 < 0.5 < tight


def test_dirichlet_resamples_until_min_size():
    # Alpha 0.3 over 16 workers often leaves a shard below 150 at the first draw.
    shards = partition(Dirichlet(0.3, min_size=150), BALANCED, N_WORKERS, 0, n_classes=10)
    assert shards.sizes.min() >= 150
    _assert_disjoint(shards, BALANCED.size)


def test_dirichlet_gives_up_naming_what_to_change():
    with pytest.raises(PartitionError) as e:
        partition(Dirichlet(0.01, min_size=100), BALANCED, 40, 0, n_classes=N_CLASSES)
    assert e.value.field == "min_size"
    message = str(e.value)
    assert f"{MAX_DIRICHLET_ATTEMPTS} draws" in message and "alpha=0.01" in message
    assert "min_size=100" in message and "smallest shard reached" in message
    assert "raise alpha, lower min_size or use fewer workers" in message


def test_dirichlet_refuses_an_impossible_min_size_upfront():
    with pytest.raises(PartitionError, match=r"need 5100, but 5000 are shared") as e:
        partition(Dirichlet(1.0, min_size=300), BALANCED, 17, 0, n_classes=N_CLASSES)
    assert e.value.field == "min_size"


# ----------------------------------------------------------------------------- classes


@pytest.mark.parametrize("labels_name", sorted(LABEL_SETS))
@pytest.mark.parametrize(("n", "per_worker"), [(16, 2), (16, 1), (5, 2), (7, 3), (16, 9)])
def test_classes_each_worker_holds_per_worker_classes(n, per_worker, labels_name):
    labels = LABEL_SETS[labels_name]
    present = np.unique(labels)
    shards = partition(Classes(per_worker), labels, n, 0, n_classes=N_CLASSES)
    hist = _hist(shards, labels)
    assert ((hist > 0).sum(axis=1) == per_worker).all()
    holders = (hist[:, present] > 0).sum(axis=0)
    slots = n * per_worker
    assert set(holders.tolist()) <= {slots // present.size, -(-slots // present.size)}
    assert holders.sum() == slots
    for k in present:  # a class's holders split it into pieces differing by at most 1
        pieces = hist[hist[:, k] > 0, k]
        assert pieces.max() - pieces.min() <= 1
    _assert_disjoint(shards, labels.size)


def test_classes_drops_the_classes_nobody_holds():
    shards = partition(Classes(2), BALANCED, 3, 0, n_classes=N_CLASSES)
    _assert_disjoint(shards, BALANCED.size, covering=False)
    summary = describe(shards, BALANCED, N_CLASSES)
    assert summary.held == 6 * 500
    text = format_summary(summary)
    assert "3 workers hold 3000 of 5000 training examples" in text
    assert "classes held by no worker:" in text and "(2000 examples never trained on)" in text


def test_classes_refuses_more_classes_than_present():
    with pytest.raises(PartitionError, match=r"10 classes per worker.* only 9 classes") as e:
        partition(Classes(10), UNBALANCED, 4, 0, n_classes=N_CLASSES)
    assert e.value.field == "per_worker" and "allowed 1 to 9" in str(e.value)


# ----------------------------------------------------------------------------- quantity


def _largest_remainder_reference(draws: list[float], n_train: int) -> list[int]:
    """One example each, then n_train - n shared by largest remainder, in exact fractions."""
    n, spare = len(draws), n_train - len(draws)
    total = sum(Fraction(d) for d in draws)
    quotas = [Fraction(d) / total * spare for d in draws]
    sizes = [int(q) for q in quotas]
    by_remainder = sorted(range(n), key=lambda i: (-(quotas[i] - sizes[i]), i))
    for i in by_remainder[: spare - sum(sizes)]:
        sizes[i] += 1
    return [1 + s for s in sizes]


@pytest.mark.parametrize(
    "draws", [(1.0,), (1.0, 2.0, 3.0), (5.0, 0.001, 1.0, 1.0, 2.5, 7.0, 0.2), (1.0, 1e6)]
)
def test_quantity_sizes_are_the_largest_remainder_of_the_draws(draws):
    n = len(draws) * 3  # the law cycles through the draws
    shards = partition(Quantity(Fixed(*draws)), BALANCED, n, 0, n_classes=N_CLASSES)
    expected = _largest_remainder_reference(list(np.resize(draws, n)), BALANCED.size)
    assert shards.sizes.tolist() == expected
    _assert_disjoint(shards, BALANCED.size)


def test_quantity_with_a_constant_law_gives_equal_sizes():
    shards = partition(Quantity(Fixed(2.0)), BALANCED, 7, 0, n_classes=N_CLASSES)
    assert shards.sizes.max() - shards.sizes.min() <= 1
    assert shards.sizes.sum() == BALANCED.size


def test_quantity_labels_are_iid():
    shards = partition(Quantity(Fixed(1.0, 4.0)), BALANCED, 4, 0, n_classes=N_CLASSES)
    hist = describe(shards, BALANCED, N_CLASSES).histogram
    expected = hist.sum(axis=1, keepdims=True) / N_CLASSES
    # Pearson's statistic over 4 shards of 10 classes: about chi-square(36) or less (drawn
    # without replacement); 75 is its 0.02 % quantile.
    assert ((hist - expected) ** 2 / expected).sum() < 75


@pytest.mark.parametrize("bad", [0.0, -1.0, np.inf, np.nan])
def test_quantity_refuses_a_law_of_non_positive_sizes(bad):
    with pytest.raises(PartitionError, match="drew") as e:
        partition(Quantity(Fixed(1.0, bad)), BALANCED, 4, 0, n_classes=N_CLASSES)
    assert e.value.field == "sizes"


def test_quantity_refuses_more_workers_than_examples():
    with pytest.raises(PartitionError, match="every worker needs at least one"):
        partition(Quantity(Fixed(1.0)), BALANCED[:10], 11, 0, n_classes=N_CLASSES)


# ----------------------------------------------------------------------------- files

N_FILE = 40
FILE_LABELS = np.arange(N_FILE) % N_CLASSES
FILE_OWNER = np.random.default_rng(3).permutation(np.arange(N_FILE) % 4)  # 4 workers


def _expected_sets(owner: np.ndarray, n: int) -> list[frozenset[int]]:
    return [frozenset(np.flatnonzero(owner == w).tolist()) for w in range(n)]


def _write(tmp_path, kind: str, owner: np.ndarray = FILE_OWNER, name: str = "parts"):
    if kind == "npz-aligned":
        path = tmp_path / f"{name}.npz"
        np.savez(path, worker=owner)
    elif kind == "npz-named":
        path = tmp_path / f"{name}.npz"
        np.savez(path, **{f"worker_{w}": np.flatnonzero(owner == w) for w in range(4)})
    elif kind == "npz-positional":
        path = tmp_path / f"{name}.npz"
        np.savez(path, *[np.flatnonzero(owner == w)[::-1] for w in range(4)])
    elif kind == "csv":
        path = tmp_path / f"{name}.csv"
        pd.DataFrame({"example": np.arange(owner.size), "worker": owner}).to_csv(path)
    else:
        path = tmp_path / f"{name}.parquet"
        pd.DataFrame({"worker": owner}).to_parquet(path)
    return str(path)


@pytest.mark.parametrize("kind", ["npz-aligned", "npz-named", "npz-positional", "csv", "parquet"])
def test_from_file_round_trips(tmp_path, kind):
    path = _write(tmp_path, kind)
    shards = partition(FromFile(path), FILE_LABELS, 4, 0, n_classes=N_CLASSES)
    assert _sets(shards) == _expected_sets(FILE_OWNER, 4)


def test_from_file_checks_the_digest(tmp_path):
    from gemsim._user_code import file_sha256

    path = _write(tmp_path, "npz-aligned")
    good = partition(FromFile(path, sha256=file_sha256(path)), FILE_LABELS, 4, 0, n_classes=10)
    assert _sets(good) == _expected_sets(FILE_OWNER, 4)
    with pytest.raises(PartitionError, match="changed since its sha256") as e:
        partition(FromFile(path, sha256="0" * 64), FILE_LABELS, 4, 0, n_classes=N_CLASSES)
    assert e.value.field == "sha256"


def _aligned_with(changes: dict[int, object]) -> np.ndarray:
    owner = FILE_OWNER.astype(
        object if any(isinstance(v, str) for v in changes.values()) else float
    )
    for i, v in changes.items():
        owner[i] = v
    return owner


def _per_worker(arrays: list) -> dict:
    return {f"worker_{w}": np.asarray(a) for w, a in enumerate(arrays)}


_SPLIT = [np.flatnonzero(np.equal(FILE_OWNER, w)) for w in range(4)]
BAD_FILES = {
    "three workers for four": ("npz", _per_worker(_SPLIT[:3]), r"index arrays for 3 workers"),
    "a missing number": (
        "npz",
        {"worker_0": _SPLIT[0], "worker_1": _SPLIT[1], "worker_2": _SPLIT[2], "worker_5": [1]},
        r"worker_3 is missing",
    ),
    "unknown names": ("npz", {"owner": FILE_OWNER}, r"holds arrays owner; allowed: one array"),
    "short column": ("npz", {"worker": FILE_OWNER[:-1]}, r"has 39 entries, the training set 40"),
    "negative id": ("npz", {"worker": _aligned_with({5: -1})}, r"entry 5 is worker -1"),
    "too-large id": ("csv", _aligned_with({6: 4}), r"entry 6 is worker 4; allowed 0 to 3"),
    "non-integer": ("npz", {"worker": _aligned_with({2: 1.5})}, r"entry 2 is 1\.5.*integers"),
    "text in csv": ("csv", _aligned_with({3: "two"}), r"entry 3 is 'two'.*integers"),
    "empty worker (aligned)": (
        "parquet",
        np.where(FILE_OWNER == 3, 2, FILE_OWNER),
        r"worker 3 holds no example",
    ),
    "out of range": (
        "npz",
        _per_worker([*_SPLIT[:3], [*_SPLIT[3], 40]]),
        r"worker_3 holds index 40; allowed 0 to 39",
    ),
    "overlap": (
        "npz",
        _per_worker([_SPLIT[0], _SPLIT[1], _SPLIT[2], [*_SPLIT[3], _SPLIT[1][0]]]),
        rf"index {_SPLIT[1][0]} is held by worker_1 and worker_3",
    ),
    "not covering": (
        "npz",
        _per_worker([_SPLIT[0], _SPLIT[1], _SPLIT[2], _SPLIT[3][1:]]),
        rf"index {_SPLIT[3][0]} is held by no worker",
    ),
    "empty shard": (
        "npz",
        _per_worker([_SPLIT[0], _SPLIT[1], np.concatenate(_SPLIT[2:]), np.array([], int)]),
        r"worker_3 is empty",
    ),
    "float indices": ("npz", _per_worker([*_SPLIT[:3], _SPLIT[3] + 0.5]), r"worker_3 entry 0"),
    "no worker column": ("csv-other", FILE_OWNER, r"no `worker` column \(it has owner\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_from_file_refuses_a_bad_file(tmp_path, case):
    kind, content, match = BAD_FILES[case]
    if kind == "npz":
        path = tmp_path / "bad.npz"
        np.savez(path, **content)
    elif kind == "csv":
        path = tmp_path / "bad.csv"
        pd.DataFrame({"worker": content}).to_csv(path, index=False)
    elif kind == "csv-other":
        path = tmp_path / "bad.csv"
        pd.DataFrame({"owner": content}).to_csv(path, index=False)
    else:
        path = tmp_path / "bad.parquet"
        pd.DataFrame({"worker": content}).to_parquet(path)
    with pytest.raises(PartitionError, match=match) as e:
        partition(FromFile(str(path)), FILE_LABELS, 4, 0, n_classes=N_CLASSES)
    assert e.value.field == "path"
    assert str(e.value).startswith(f"path: {path}: ")


def test_from_file_refuses_a_missing_or_unknown_file(tmp_path):
    with pytest.raises(PartitionError, match="no such file"):
        partition(FromFile(str(tmp_path / "nope.npz")), FILE_LABELS, 4, 0, n_classes=10)
    other = tmp_path / "parts.json"
    other.write_text("{}")
    with pytest.raises(PartitionError, match=r"unknown kind of file '\.json'"):
        partition(FromFile(str(other)), FILE_LABELS, 4, 0, n_classes=N_CLASSES)
    broken = tmp_path / "broken.npz"
    broken.write_text("not a zip")
    with pytest.raises(PartitionError, match="not a readable .npz file"):
        partition(FromFile(str(broken)), FILE_LABELS, 4, 0, n_classes=N_CLASSES)


# ----------------------------------------------------------------------------- groups


@pytest.mark.parametrize(
    ("ids", "dtype"), [([7, 3, 5], int), (["c", "a", "b"], str), (["c", "a", "b"], object)]
)
def test_groups_map_sorted_ids_to_workers(ids, dtype):
    groups = np.array(ids, dtype=dtype)[np.arange(N_FILE) % 3]
    shards = partition(Groups(), FILE_LABELS, 3, 0, n_classes=N_CLASSES, groups=groups)
    order = np.argsort(ids)  # worker w holds the w-th smallest id
    assert _sets(shards) == [frozenset(np.flatnonzero(groups == ids[i]).tolist()) for i in order]


def test_groups_refuse_a_wrong_count_or_no_groups():
    groups = np.arange(N_FILE) % 3
    with pytest.raises(PartitionError, match="has 3 groups but there are 4 workers") as e:
        partition(Groups(), FILE_LABELS, 4, 0, n_classes=N_CLASSES, groups=groups)
    assert e.value.field == "groups"
    with pytest.raises(PartitionError, match="no groups array"):
        partition(Groups(), FILE_LABELS, 3, 0, n_classes=N_CLASSES)


# ----------------------------------------------------------------------------- claims


@pytest.mark.parametrize("spec", [Iid(), Dirichlet(1.0, 5), Classes(2)], ids=repr)
def test_claimed_classes_are_only_on_their_workers(spec):
    claims = [Claim((14, 15), (0, 1)), Claim((3,), (9,))]
    shards = partition(spec, BALANCED, N_WORKERS, 0, n_classes=N_CLASSES, claims=claims)
    _assert_disjoint(shards, BALANCED.size)
    hist = _hist(shards, BALANCED)
    others = [w for w in range(N_WORKERS) if w not in (3, 14, 15)]
    assert hist[others][:, [0, 1, 9]].sum() == 0
    # The claim's 1,000 examples are shuffled and halved, whatever their classes.
    assert hist[[14, 15]].sum(axis=1).tolist() == [500, 500]
    assert hist[[14, 15]][:, 2:].sum() == 0 and hist[3].tolist() == [0] * 9 + [500]


def test_claims_split_their_examples_evenly():
    shards = partition(Iid(), BALANCED, 8, 0, n_classes=N_CLASSES, claims=[Claim((0, 1, 2), (4,))])
    assert shards.sizes[:3].tolist() == [167, 167, 166]


def test_claims_with_no_partition_overlap():
    claims = [Claim((3,), (0, 1))]
    shards = partition(None, BALANCED, 4, 0, n_classes=N_CLASSES, claims=claims)
    claimed = np.flatnonzero(BALANCED < 2)
    for w in range(3):
        np.testing.assert_array_equal(shards.shard(w), np.flatnonzero(BALANCED >= 2))
    np.testing.assert_array_equal(shards.shard(3), claimed)


def test_no_partition_gives_everyone_everything():
    shards = partition(None, BALANCED, 3, 0, n_classes=N_CLASSES)
    for w in range(3):
        np.testing.assert_array_equal(shards.shard(w), np.arange(BALANCED.size))


def test_claims_of_every_worker_drop_the_rest():
    claims = [Claim((0, 1), (2,)), Claim((2,), (5, 6))]
    shards = partition(Iid(), BALANCED, 3, 0, n_classes=N_CLASSES, claims=claims)
    assert shards.sizes.tolist() == [250, 250, 1000]
    assert describe(shards, BALANCED, N_CLASSES).held == 1500


BAD_CLAIMS = {
    "class out of range": ([Claim((0,), (10,))], "classes", r"10 is out of range: allowed 0 to 9"),
    "absent class": ([Claim((0,), (7,))], "classes", r"class 7 has no training example"),
    "class twice": (
        [Claim((0,), (1, 2)), Claim((1,), (2,))],
        "classes",
        r"claims 0 and 1 both name class 2",
    ),
    "worker twice": (
        [Claim((0, 1), (1,)), Claim((1,), (2,))],
        "workers",
        r"claims 0 and 1 both name worker 1",
    ),
    "worker out of range": ([Claim((4,), (1,))], "workers", r"4 is out of range: allowed 0 to 3"),
    "no classes": ([Claim((0,), ())], "classes", r"non-empty list of integers"),
    "everything claimed": (
        [Claim((0,), (0, 1, 2, 3, 4)), Claim((1,), (5, 6, 8, 9))],
        "classes",
        r"leaving none for the 2 workers in no claim \(worker 2 first\)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CLAIMS))
def test_bad_claims_are_refused(case):
    claims, field, match = BAD_CLAIMS[case]
    with pytest.raises(PartitionError, match=match) as e:
        partition(Iid(), UNBALANCED, 4, 0, n_classes=N_CLASSES, claims=claims)
    assert e.value.field == field
    if case != "everything claimed":  # that one is no single claim's fault
        assert e.value.claim is not None


def test_claims_cannot_combine_with_a_file_or_groups():
    groups = np.arange(N_FILE) % 3
    with pytest.raises(PartitionError, match="Groups assigns every example itself"):
        partition(
            Groups(), FILE_LABELS, 4, 0, n_classes=10, groups=groups, claims=[Claim((3,), (0,))]
        )


# ----------------------------------------------------------------------------- by speed


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        (Dirichlet(0.3, 5, order="by_speed"), "distance"),
        (Classes(3, order="by_speed"), "distance"),
        (Quantity(LogNormal(1.0, 1.0), order="by_speed"), "sizes"),
        (Iid(order=Order.BY_SPEED), "sizes"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_by_speed_gives_the_slowest_the_most_skewed_or_largest(spec, key):
    slowness = np.random.default_rng(4).permutation(N_WORKERS).astype(float)
    drawn_spec = type(spec)(**{**spec.__dict__, "order": "drawn"})
    drawn = partition(drawn_spec, UNBALANCED, N_WORKERS, 0, n_classes=N_CLASSES)
    ordered = partition(spec, UNBALANCED, N_WORKERS, 0, n_classes=N_CLASSES, slowness=slowness)
    assert sorted(map(sorted, _sets(drawn))) == sorted(map(sorted, _sets(ordered)))
    values = getattr(describe(ordered, UNBALANCED, N_CLASSES), key)
    by_slowness = values[np.argsort(-slowness)]
    assert (np.diff(by_slowness) <= 1e-12).all()
    assert values[np.argmax(slowness)] == values.max()


def test_by_speed_ranks_only_the_workers_in_no_claim():
    slowness = np.arange(8, dtype=float)  # worker 7 slowest, but it is in a claim
    claims = [Claim((7,), (0,))]
    spec = Dirichlet(0.3, 5, order="by_speed")
    shards = partition(spec, BALANCED, 8, 0, n_classes=10, slowness=slowness, claims=claims)
    hist = _hist(shards, BALANCED)[:7, 1:]  # skew within the pool of classes 1..9
    pool = hist.sum(axis=0) / hist.sum()
    skew = 0.5 * np.abs(hist / hist.sum(axis=1, keepdims=True) - pool).sum(axis=1)
    assert (np.diff(skew[::-1]) <= 1e-12).all()  # worker 6 most skewed, worker 0 least


def test_by_speed_needs_slowness():
    with pytest.raises(PartitionError, match="by_speed needs each worker's slowness") as e:
        partition(Iid(order="by_speed"), BALANCED, 4, 0, n_classes=N_CLASSES)
    assert e.value.field == "order"
    with pytest.raises(PartitionError, match="must be 4 finite numbers") as e:
        partition(Iid(order="by_speed"), BALANCED, 4, 0, n_classes=10, slowness=[1.0, np.nan])
    assert e.value.field == "slowness"


# ----------------------------------------------------------------------------- scale


def test_large_populations_partition_quickly():
    labels = np.random.default_rng(5).integers(0, N_CLASSES, 60_000)
    slowness = np.random.default_rng(6).random(100_000)
    for spec, n in [
        (Iid(order="by_speed"), 50_000),
        (Quantity(LogNormal(1.0, 1.0)), 60_000),
        (Classes(2, order="by_speed"), 100_000),
        (Dirichlet(1000.0, min_size=1), 5_000),
    ]:
        shards = partition(spec, labels, n, 0, n_classes=N_CLASSES, slowness=slowness[:n])
        assert shards.n_workers == n and shards.sizes.sum() == labels.size
        _assert_disjoint(shards, labels.size)
    text = format_summary(describe(shards, labels, N_CLASSES), max_rows=20)
    assert "median" in text and len(text.splitlines()) == 7


# ----------------------------------------------------------------------------- summary, checks


def test_describe_counts_and_distances():
    shards = Shards(np.array([0, 1, 2, 3, 4, 5]), np.array([0, 2, 2, 6]))
    labels = np.array([0, 0, 1, 1, 0, 1])
    summary = describe(shards, labels, 2)
    assert summary.sizes.tolist() == [2, 0, 4]
    assert summary.histogram.tolist() == [[2, 0], [0, 0], [1, 3]]
    assert summary.histogram.dtype == np.int64
    assert summary.distance[0] == pytest.approx(0.5) and summary.distance[2] == 0.25
    assert np.isnan(summary.distance[1])
    lines = format_summary(summary).splitlines()
    assert lines[0] == "3 workers hold 6 of 6 training examples" and len(lines) == 5
    assert lines[2].split()[:4] == ["0", "2", "1", "0.500"] and lines[2].endswith("0:100%")


def test_check_shards_names_the_first_small_worker():
    shards = Shards(np.arange(10), np.array([0, 5, 7, 10]))
    check_shards(shards, 2)
    with pytest.raises(
        PartitionError,
        match=r"worker 1 holds 2 examples, fewer than the batch "
        r"size 4 \(2 of the 3 workers below it\): lower the batch size, raise min_size",
    ):
        check_shards(shards, 4)


@pytest.mark.parametrize(
    ("make", "field", "match"),
    [
        (lambda: Dirichlet(0.0), "alpha", "must be a finite number > 0, got 0.0"),
        (lambda: Dirichlet(-1.0), "alpha", "got -1.0"),
        (lambda: Dirichlet(1.0, min_size=0), "min_size", "an integer >= 1, got 0"),
        (lambda: Classes(0), "per_worker", "an integer >= 1"),
        (lambda: Quantity(3.0), "sizes", "a law with sample"),
        (lambda: FromFile(""), "path", "non-empty path"),
        (lambda: Iid(order="fastest"), "order", "'by_speed'"),
    ],
)
def test_specs_are_checked_when_built(make, field, match):
    with pytest.raises(PartitionError, match=match) as e:
        make()
    assert e.value.field == field and str(e.value).startswith(f"{field}: ")
    assert isinstance(e.value, ValueError)


def test_specs_are_values():
    assert Dirichlet(1, order="by_speed") == Dirichlet(1.0, 10, Order.BY_SPEED)
    assert len({Iid(), Iid(), Classes(2), Classes(2)}) == 2
    assert Dirichlet(1).alpha == 1.0 and isinstance(Dirichlet(1).alpha, float)


def test_bad_arguments_are_refused():
    with pytest.raises(PartitionError, match="example 2 has class 10"):
        partition(Iid(), np.array([0, 1, 10]), 1, 0, n_classes=N_CLASSES)
    with pytest.raises(PartitionError, match="n_workers: must be an integer >= 1"):
        partition(Iid(), BALANCED, 0, 0, n_classes=N_CLASSES)
    with pytest.raises(PartitionError, match="spec: must be a partition spec"):
        partition("iid", BALANCED, 2, 0, n_classes=N_CLASSES)


def test_importing_partitions_loads_neither_jax_nor_pandas():
    probe = (
        "import sys, json\nimport gemsim.problems.partitions._partitions\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert not loaded & {"jax", "pandas", "pyarrow", "scipy"}
