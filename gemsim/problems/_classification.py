"""Classification problems: a model, a data set on device, streams and evaluation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from gemsim.types import PyTree

from ._batch import Batch
from ._datasets import Dataset
from ._keys import KeyTag, derive_key, host_rng
from ._layers import Model, cross_entropy
from ._models import build_model
from ._specs import ModelSpec
from ._streams import batch_positions, step_key

if TYPE_CHECKING:
    from ._problem import Problem

EVAL_CHUNK = 1000
"""Examples per evaluation call: bounds the memory of the im2col patches."""


def _chunked(x: np.ndarray, y: np.ndarray) -> dict[str, jax.Array]:
    # Pads to whole chunks; padded rows get weight 0 and so count for nothing.
    n = len(y)
    chunk = min(EVAL_CHUNK, n)
    n_chunks = math.ceil(n / chunk)
    pad = n_chunks * chunk - n
    weight = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
    x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), np.float32)])
    y = np.concatenate([y, np.zeros(pad, np.int32)])
    return {
        "x": jnp.asarray(x.reshape(n_chunks, chunk, *x.shape[1:])),
        "y": jnp.asarray(y.reshape(n_chunks, chunk)),
        "w": jnp.asarray(weight.reshape(n_chunks, chunk)),
    }


def eval_indices(seed: int, train_size: int, eval_subset: int) -> np.ndarray:
    """The fixed training examples ``evaluate`` measures (sorted; all if the subset is larger)."""
    k = min(eval_subset, train_size)
    return np.sort(host_rng(seed, KeyTag.EVAL).choice(train_size, k, replace=False))


def build(
    spec: ModelSpec, data: Dataset, batch_size: int, seed: int, eval_subset: int
) -> dict[str, Any]:
    """The fields of a classification :class:`Problem` but ``init_params`` (arrays on device)."""
    input_shape = tuple(data.x_train.shape[1:])
    model = build_model(spec, input_shape, data.n_classes)
    shapes = jax.eval_shape(model.init, derive_key(seed, KeyTag.INIT))
    chosen = eval_indices(seed, len(data.y_train), eval_subset)
    arrays = {
        "x_train": jnp.asarray(data.x_train, jnp.float32),
        "y_train": jnp.asarray(data.y_train, jnp.int32),
        "eval": _chunked(data.x_train[chosen], data.y_train[chosen]),
        "test": _chunked(data.x_test, data.y_test),
        "stream_key": derive_key(seed, KeyTag.STREAM),
        "dropout_key": derive_key(seed, KeyTag.DROPOUT),
    }
    return dict(
        train_size=len(data.y_train),
        test_size=len(data.y_test),
        eval_size=len(chosen),
        n_params=sum(leaf.size for leaf in jax.tree.leaves(shapes)),
        input_shape=input_shape,
        n_classes=data.n_classes,
        data=arrays,
    )


def _model(problem: Problem) -> Model:
    return build_model(problem.model, problem.input_shape, problem.n_classes)


def init(problem: Problem, key: jax.Array) -> PyTree:
    """Fresh parameters from ``key``."""
    return _model(problem).init(key)


def loss(problem: Problem, params: PyTree, batch: Batch, key: jax.Array) -> jax.Array:
    """Training-mode mean cross-entropy (``key`` drives dropout)."""
    return cross_entropy(_model(problem).apply(params, batch.x, key), batch.y)


def batch(problem: Problem, worker: jax.Array, step: jax.Array) -> Batch:
    """Worker ``worker``'s mini-batch number ``step`` and its dropout key."""
    data = problem.data
    idx = batch_positions(data["stream_key"], worker, step, problem.train_size, problem.batch_size)
    key = step_key(data["dropout_key"], worker, step)
    return Batch(data["x_train"][idx], data["y_train"][idx], key)


def _split_metrics(model: Model, params: PyTree, split: dict[str, jax.Array], n: int):
    def one_chunk(totals: jax.Array, chunk: tuple[jax.Array, ...]) -> tuple[jax.Array, None]:
        x, y, w = chunk
        logits = model.apply(params, x, None)
        log_p = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(log_p, y[:, None], axis=1)[:, 0]
        correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
        return totals + jnp.stack([jnp.sum(nll * w), jnp.sum(correct * w)]), None

    totals, _ = lax.scan(one_chunk, jnp.zeros(2, jnp.float32), (split["x"], split["y"], split["w"]))
    return totals[0] / n, totals[1] / n


def evaluate(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """Evaluation mode (no dropout): loss on the fixed training subset, test loss and accuracy."""
    model = _model(problem)
    train_loss, _ = _split_metrics(model, params, problem.data["eval"], problem.eval_size)
    test_loss, test_accuracy = _split_metrics(
        model, params, problem.data["test"], problem.test_size
    )
    return {"train_loss": train_loss, "test_loss": test_loss, "test_accuracy": test_accuracy}
