"""Problems with a data set: built-in classifiers and user models, their per-worker batches
and their evaluation.

Both kinds of model reach the same three functions (:class:`Fns`), so streams, evaluation
and the engine treat them alike. The data set's four arrays are held once on the device and
read by index: evaluation subsets and test chunks are index arrays (a problem built for
another seed shares the same arrays, see ``make_problem(data=...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from gemsim.types import PyTree

from ._keys import KeyTag, derive_key, host_rng
from .data._datasets import Dataset
from .models._layers import Model, cross_entropy
from .models._models import build_model
from .models._user import UserModel
from .streams._batch import Batch
from .streams._streams import batch_positions, shard_batch_positions, step_key

if TYPE_CHECKING:
    from ._problem import Problem
    from .partitions._specs import Shards

EVAL_CHUNK = 1000
"""Examples per evaluation call: bounds the memory of one forward pass."""


class Fns(NamedTuple):
    """What the problem needs of a model."""

    init: Callable[[jax.Array], PyTree]
    loss: Callable[[PyTree, jax.Array, jax.Array, jax.Array], jax.Array]
    sums: Callable[[PyTree, jax.Array, jax.Array], jax.Array]
    """``[sum of the evaluation loss, number correct, number correct of class 0, 1, ...]``
    over a batch, float32 ``[2 + classes]`` (``classes``: 0 where accuracy is undefined, and
    then correct is 0)."""
    examples: Callable[[PyTree, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    """``(evaluation loss, correct)`` of each example of a batch, float32 ``[B]`` each
    (correct: 0 where accuracy is undefined)."""


def _with_classes(totals: jax.Array, correct: jax.Array, y: jax.Array, classes: int):
    """``totals`` followed by the number correct of each class (a segment sum by label)."""
    if not classes:
        return totals
    return jnp.concatenate([totals, jax.ops.segment_sum(correct, y, num_segments=classes)])


def _classifier_fns(model: Model, classes: int) -> Fns:
    def loss(params, x, y, key):
        return cross_entropy(model.apply(params, x, key), y)

    def examples(params, x, y):
        logits = model.apply(params, x, None)
        log_p = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(log_p, y[:, None], axis=1)[:, 0]
        correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
        return nll, correct

    def sums(params, x, y):
        nll, correct = examples(params, x, y)
        return _with_classes(jnp.stack([jnp.sum(nll), jnp.sum(correct)]), correct, y, classes)

    return Fns(model.init, loss, sums, examples)


def _user_fns(model: UserModel, eval_key: jax.Array, classes: int) -> Fns:
    def mean_loss(params, x, y):
        if model.eval_loss is not None:
            return model.eval_loss(params, x, y)
        return model.loss(params, x, y, eval_key)

    def hits(params, x, y):
        if not classes:
            return jnp.zeros(x.shape[0], jnp.float32)
        return (jnp.argmax(model.predict(params, x), axis=-1) == y).astype(jnp.float32)

    def sums(params, x, y):
        total = jnp.asarray(mean_loss(params, x, y), jnp.float32) * jnp.float32(x.shape[0])
        if not classes:
            return jnp.stack([total, jnp.float32(0.0)])
        correct = hits(params, x, y)
        return _with_classes(jnp.stack([total, jnp.sum(correct)]), correct, y, classes)

    def examples(params, x, y):
        # The contract gives a batch's mean loss: each example's is its batch of one.
        one = lambda xi, yi: jnp.asarray(mean_loss(params, xi[None], yi[None]), jnp.float32)
        return jax.vmap(one)(x, y), hits(params, x, y)

    return Fns(model.init, model.loss, sums, examples)


def has_accuracy(problem: Problem) -> bool:
    """Whether evaluation measures accuracy (classes and, for user models, a ``predict``)."""
    if isinstance(problem.model, UserModel):
        return problem.model.predict is not None and problem.n_classes > 0
    return True


def accuracy_classes(problem: Problem) -> int:
    """Classes whose test accuracy evaluation measures apart (0 where accuracy is undefined)."""
    return problem.n_classes if has_accuracy(problem) else 0


def fns(problem: Problem) -> Fns:
    """The model's functions (built-in specs are turned into functions here, at trace time)."""
    classes = accuracy_classes(problem)
    if isinstance(problem.model, UserModel):
        return _user_fns(problem.model, problem.data["eval_key"], classes)
    model = build_model(problem.model, problem.input_shape, problem.n_classes)
    return _classifier_fns(model, classes)


def _chunks(indices: np.ndarray) -> dict[str, jax.Array]:
    """Whole chunks of EVAL_CHUNK indices (or fewer: all of them) and the remainder."""
    chunk = min(EVAL_CHUNK, len(indices))
    n_full = len(indices) // chunk
    full = indices[: n_full * chunk].reshape(n_full, chunk)
    return {
        "full": jnp.asarray(full, jnp.int32),
        "rest": jnp.asarray(indices[n_full * chunk :], jnp.int32),
    }


def eval_indices(seed: int, train_size: int, eval_subset: int) -> np.ndarray:
    """The fixed training examples ``evaluate`` measures (sorted; all if the subset is larger)."""
    k = min(eval_subset, train_size)
    return np.sort(host_rng(seed, KeyTag.EVAL).choice(train_size, k, replace=False))


def worker_eval_sample(
    shards: Shards, seed: int, per_worker: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed sample of each worker's shard that ``evaluate_workers`` measures: at most
    ``per_worker`` of its examples, chosen from the seed (all of a smaller shard).

    Returns ``(example, worker, weight)``, flat and grouped by worker (each worker's examples
    increasing): training-set indices (int32), their worker (int32) and 1.0, padded with
    weight 0 to ``min(n_workers * per_worker, total)`` entries (``total``: the shards'
    concatenated length), a length that does not depend on the seed for the partitions that
    place every example (runs of one shape stay of one shape).
    """
    n, total = shards.n_workers, shards.indices.size
    owner = np.repeat(np.arange(n, dtype=np.int64), shards.sizes)
    keys = host_rng(seed, KeyTag.WORKER_EVAL).random(total)
    order = np.lexsort((keys, owner))  # by worker (owner is sorted already), then at random
    rank = np.arange(total) - shards.offsets[owner]
    chosen = order[rank < per_worker]
    examples, workers = shards.indices[chosen], owner[chosen]
    tidy = np.lexsort((examples, workers))
    length = min(n * per_worker, total)
    pad = length - chosen.size
    example = np.concatenate([examples[tidy], np.zeros(pad, np.int64)]).astype(np.int32)
    worker = np.concatenate([workers[tidy], np.zeros(pad, np.int64)]).astype(np.int32)
    weight = np.concatenate([np.ones(chosen.size), np.zeros(pad)]).astype(np.float32)
    return example, worker, weight


def _owners_shards(shards: Shards, owners: np.ndarray) -> Shards:
    """The shards of ``owners`` alone, in their order (owner i of the result is owners[i])."""
    from .partitions._specs import Shards

    sizes = shards.sizes[owners]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.concatenate([shards.shard(int(w)) for w in owners]) if len(owners) else []
    return Shards(np.asarray(indices, np.int64), offsets)


def shard_arrays(shards: Shards, seed: int, per_worker: int, owners, chunks) -> dict[str, Any]:
    """A problem's arrays for owners holding shards of its examples: the shards, and the
    fixed sample of each owner's shard that `evaluate_workers` measures (`worker_eval_sample`;
    of the ``owners`` only where given), cut into evaluation calls by ``chunks``."""
    # int32: indices and offsets below 2**31 (a training set of at most 2**31 examples)
    arrays: dict[str, Any] = {
        "shard_indices": jnp.asarray(shards.indices, jnp.int32),
        "shard_offsets": jnp.asarray(shards.offsets, jnp.int32),
    }
    measured = shards if owners is None else _owners_shards(shards, owners)
    example, worker, weight = worker_eval_sample(measured, seed, per_worker)
    arrays["worker_eval"] = {
        **chunks(example),
        "worker": jnp.asarray(worker),
        "weight": jnp.asarray(weight),
    }
    if owners is not None:
        arrays["worker_eval"]["owners"] = jnp.asarray(owners, jnp.int32)
    return arrays


def to_device(data: Dataset) -> Dataset:
    """The data set's arrays on the default device (arrays already there are not copied; a
    text corpus stays on the host until its problem is built)."""
    if not isinstance(data, Dataset):
        return data
    return data._replace(
        x_train=jnp.asarray(data.x_train, jnp.float32),
        y_train=jnp.asarray(data.y_train),
        x_test=jnp.asarray(data.x_test, jnp.float32),
        y_test=jnp.asarray(data.y_test),
    )


def build(
    data: Dataset,
    batch_size: int,
    seed: int,
    eval_subset: int,
    n_params: int,
    shards: Shards | None = None,
    per_worker: int = 256,
    owners: np.ndarray | None = None,
) -> dict[str, Any]:
    """The fields of a :class:`Problem` with a data set, but ``init_params``; with ``shards``
    each worker streams its own shard (`batch`), and `evaluate_workers` measures at most
    ``per_worker`` examples of each (`worker_eval_sample`), of the ``owners`` only where
    given (a population's sample of clients)."""
    device = to_device(data)
    chosen = eval_indices(seed, len(data.y_train), eval_subset)
    arrays = {
        "x_train": device.x_train,
        "y_train": device.y_train,
        "x_test": device.x_test,
        "y_test": device.y_test,
        "eval": _chunks(chosen),
        "test": _chunks(np.arange(len(data.y_test))),
        "stream_key": derive_key(seed, KeyTag.STREAM),
        "dropout_key": derive_key(seed, KeyTag.DROPOUT),
        "eval_key": derive_key(seed, KeyTag.EVAL),
    }
    if shards is not None:
        arrays.update(shard_arrays(shards, seed, per_worker, owners, _chunks))
    return dict(
        train_size=len(data.y_train),
        test_size=len(data.y_test),
        eval_size=len(chosen),
        n_params=n_params,
        input_shape=tuple(data.x_train.shape[1:]),
        n_classes=data.n_classes,
        data=arrays,
    )


def init(problem: Problem, key: jax.Array) -> PyTree:
    """Fresh parameters from ``key``."""
    return fns(problem).init(key)


def loss(problem: Problem, params: PyTree, batch: Batch, key: jax.Array) -> jax.Array:
    """Training-mode mean loss of the batch (``key`` drives dropout)."""
    return fns(problem).loss(params, batch.x, batch.y, key)


def batch(problem: Problem, worker: jax.Array, step: jax.Array) -> Batch:
    """Worker ``worker``'s mini-batch number ``step`` and its dropout key: from the whole
    training set, or from the worker's own shard when the problem has a partition."""
    data = problem.data
    if "shard_offsets" in data:
        idx = _shard_batch(data, worker, step, problem.batch_size)
    else:
        idx = batch_positions(
            data["stream_key"], worker, step, problem.train_size, problem.batch_size
        )
    key = step_key(data["dropout_key"], worker, step)
    return Batch(data["x_train"][idx], data["y_train"][idx], key)


def _shard_batch(data, worker: jax.Array, step: jax.Array, batch_size: int) -> jax.Array:
    """Training-set indices of a mini-batch from the worker's shard (epochs over its shard)."""
    start = data["shard_offsets"][worker]
    size = data["shard_offsets"][worker + 1] - start
    positions = shard_batch_positions(data["stream_key"], worker, step, size, batch_size)
    return data["shard_indices"][start + positions]


def _split_sums(
    f: Fns, params: PyTree, x: jax.Array, y: jax.Array, chunks, classes: int
) -> jax.Array:
    def one_chunk(totals: jax.Array, idx: jax.Array) -> tuple[jax.Array, None]:
        return totals + f.sums(params, x[idx], y[idx]), None

    totals = jnp.zeros(2 + classes, jnp.float32)
    if chunks["full"].shape[0]:
        totals, _ = lax.scan(one_chunk, totals, chunks["full"])
    if chunks["rest"].shape[0]:
        totals = totals + f.sums(params, x[chunks["rest"]], y[chunks["rest"]])
    return totals


def map_chunks(one, chunks) -> tuple[jax.Array, jax.Array]:
    """``one(indices) -> (loss, correct)`` (one value each per index) over every index the
    chunks hold, in order: float32 ``[T]`` each."""
    parts = []
    if chunks["full"].shape[0]:
        loss, correct = lax.map(one, chunks["full"])
        parts.append((loss.reshape(-1), correct.reshape(-1)))
    if chunks["rest"].shape[0]:
        parts.append(one(chunks["rest"]))
    loss, correct = zip(*parts, strict=True)
    return jnp.concatenate(loss), jnp.concatenate(correct)


def owner_means(data, loss: jax.Array, correct: jax.Array, accuracy: bool):
    """Each owner's mean of the per-example ``loss`` and ``correct`` of its sample
    (`shard_arrays`' ``worker_eval``; padding counts for no owner), float32 ``[n_owners]``
    each; accuracy nan throughout where undefined (``accuracy`` False)."""
    sample = data["worker_eval"]
    n = sample["owners"].shape[0] if "owners" in sample else data["shard_offsets"].shape[0] - 1
    held = sample["weight"] > 0  # padding: an example's loss counted for no worker

    def per(values: jax.Array) -> jax.Array:
        values = jnp.where(held, values, 0.0)
        return jax.ops.segment_sum(values, sample["worker"], num_segments=n)

    count = per(jnp.ones_like(loss))
    mean_correct = per(correct) / count if accuracy else jnp.full(n, jnp.nan)
    return {"loss": per(loss) / count, "accuracy": mean_correct.astype(jnp.float32)}


def evaluate(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """Evaluation mode (no dropout): loss on the fixed training subset, test loss and accuracy
    (nan where undefined: float targets, or a user model without ``predict``), and for a
    classifier the test accuracy of each class, ``test_accuracy_class_<k>`` (nan for a class
    the test set lacks), from the same pass over the test set."""
    f, data, classes = fns(problem), problem.data, accuracy_classes(problem)
    train = _split_sums(f, params, data["x_train"], data["y_train"], data["eval"], classes)
    test = _split_sums(f, params, data["x_test"], data["y_test"], data["test"], classes)
    accuracy = test[1] / problem.test_size if classes else jnp.float32(jnp.nan)
    out = {
        "train_loss": train[0] / problem.eval_size,
        "test_loss": test[0] / problem.test_size,
        "test_accuracy": accuracy,
    }
    if classes:
        ones = jnp.ones(data["y_test"].shape[0], jnp.float32)
        counts = jax.ops.segment_sum(ones, data["y_test"], num_segments=classes)
        by_class = jnp.where(counts > 0, test[2:] / jnp.maximum(counts, 1.0), jnp.nan)
        out.update({f"test_accuracy_class_{k}": by_class[k] for k in range(classes)})
    return out


def evaluate_workers(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """Each worker's evaluation loss and accuracy (nan where undefined) on its fixed sample
    of its own shard (`worker_eval_sample`), float32 ``[n_workers]`` each; ``{}`` when the
    workers do not hold shards of their own."""
    data = problem.data
    if "worker_eval" not in data:
        return {}
    f, x, y = fns(problem), data["x_train"], data["y_train"]
    loss, correct = map_chunks(lambda idx: f.examples(params, x[idx], y[idx]), data["worker_eval"])
    return owner_means(data, loss, correct, has_accuracy(problem))
