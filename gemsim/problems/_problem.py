"""The ``Problem`` value and ``make_problem``, its only constructor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import jax

from gemsim.types import PyTree

from . import _classification, _quadratic
from ._batch import Batch
from ._datasets import load_dataset
from ._keys import KeyTag, derive_key
from ._specs import (
    Cnn,
    DatasetSpec,
    Digits,
    Logistic,
    Mlp,
    Mnist,
    Mnist5k,
    ModelSpec,
    Quadratic,
    Synthetic,
)

__all__ = ["Problem", "make_problem"]

_MODEL_TYPES = (Cnn, Mlp, Logistic, Quadratic)
_DATASET_TYPES = (Mnist5k, Digits, Mnist, Synthetic)


@dataclass(frozen=True, eq=False)
class Problem:
    """A model, its data and its per-worker batch streams, as pure functions.

    Build it with :func:`make_problem`. The contract the engine relies on:

    - ``init(key) -> params``: a dict pytree of float32 arrays.
    - ``loss(params, batch, key) -> scalar``: training mode (``key`` drives dropout;
      pass ``batch.key``).
    - ``batch(worker, step) -> Batch``: pure and jit/vmap-able; a function of
      (seed, worker, step) only, so independent of how many workers exist.
    - ``evaluate(params) -> {"train_loss", "test_loss", "test_accuracy"}``:
      float32 scalars in evaluation mode (no dropout); ``train_loss`` is on the
      fixed subset of ``eval_size`` training examples chosen from the seed;
      accuracy is nan where undefined (quadratic).

    A Problem is a JAX pytree: its arrays (``data``, ``init_params``) are leaves
    and everything else is static metadata compared by value. Passing it as an
    argument to a jitted function therefore hands the data set to the compiled
    program as an input (closing over it instead bakes the arrays into the
    program as constants, which is slow to compile for full MNIST), and two
    problems that differ only in seed share compiled code. The four methods are
    themselves jitted the same way, so eager calls are fast too.
    """

    model: ModelSpec
    dataset: DatasetSpec | None
    batch_size: int
    train_size: int
    """Training examples (quadratic: ``batch_size``, i.e. one step per epoch)."""
    test_size: int
    eval_size: int
    """Training examples that ``evaluate`` measures ``train_loss`` on."""
    n_params: int
    input_shape: tuple[int, ...]
    """Shape of one input example (quadratic: ``(dim,)``)."""
    n_classes: int
    """Number of classes (quadratic: 0)."""
    data: dict[str, Any] = field(repr=False)
    """Device arrays and keys (training set, evaluation chunks, stream keys)."""
    init_params: PyTree = field(repr=False)
    """``init`` applied to the seed's initialisation key: the run's starting point."""

    @property
    def steps_per_epoch(self) -> int:
        """Steps of one worker per pass over the training set: ``train_size // batch_size``."""
        return self.train_size // self.batch_size

    @property
    def model_bytes(self) -> int:
        """Size of the parameters in float32 (what a push or pull transfers)."""
        return 4 * self.n_params

    def init(self, key: jax.Array) -> PyTree:
        """Fresh parameters from ``key`` (quadratic: always ones)."""
        return _init_jit(self, key)

    def loss(self, params: PyTree, batch: Batch, key: jax.Array) -> jax.Array:
        """Training-mode mini-batch loss (float32 scalar)."""
        return _loss_jit(self, params, batch, key)

    def batch(self, worker: jax.Array | int, step: jax.Array | int) -> Batch:
        """Worker ``worker``'s mini-batch number ``step`` (its own counter, from 0)."""
        return _batch_jit(self, worker, step)

    def evaluate(self, params: PyTree) -> dict[str, jax.Array]:
        """Evaluation-mode metrics of ``params``."""
        return _evaluate_jit(self, params)


jax.tree_util.register_dataclass(
    Problem,
    data_fields=["data", "init_params"],
    meta_fields=[
        "model",
        "dataset",
        "batch_size",
        "train_size",
        "test_size",
        "eval_size",
        "n_params",
        "input_shape",
        "n_classes",
    ],
)


class _Kind(NamedTuple):
    init: Callable[..., PyTree]
    loss: Callable[..., jax.Array]
    batch: Callable[..., Batch]
    evaluate: Callable[..., dict[str, jax.Array]]


_CLASSIFIER = _Kind(
    _classification.init, _classification.loss, _classification.batch, _classification.evaluate
)
_QUADRATIC = _Kind(_quadratic.init, _quadratic.loss, _quadratic.batch, _quadratic.evaluate)


def _kind(problem: Problem) -> _Kind:
    return _QUADRATIC if isinstance(problem.model, Quadratic) else _CLASSIFIER


_init_jit = jax.jit(lambda p, key: _kind(p).init(p, key))
_loss_jit = jax.jit(lambda p, params, batch, key: _kind(p).loss(p, params, batch, key))
_batch_jit = jax.jit(lambda p, worker, step: _kind(p).batch(p, worker, step))
_evaluate_jit = jax.jit(lambda p, params: _kind(p).evaluate(p, params))


def _check_args(
    model: object, dataset: object, batch_size: object, seed: object, eval_subset: object
) -> None:
    if not isinstance(model, _MODEL_TYPES):
        raise TypeError(f"model must be Cnn, Mlp, Logistic or Quadratic, got {model!r}")
    if isinstance(model, Quadratic) and dataset is not None:
        raise ValueError(f"model quadratic takes no dataset (pass None), got {dataset!r}")
    if not isinstance(model, Quadratic) and not isinstance(dataset, _DATASET_TYPES):
        raise ValueError(
            f"model {type(model).__name__} needs a dataset (Mnist5k, Digits, Mnist or "
            f"Synthetic), got {dataset!r}"
        )
    for name, value, low, high in (
        ("batch_size", batch_size, 1, None),
        ("seed", seed, 0, 2**32 - 1),
        ("eval_subset", eval_subset, 1, None),
    ):
        bad = isinstance(value, bool) or not isinstance(value, int)
        if bad or value < low or (high is not None and value > high):
            allowed = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")
            raise ValueError(f"make_problem: {name} must be {allowed}, got {value!r}")


def make_problem(
    model: ModelSpec,
    dataset: DatasetSpec | None,
    batch_size: int,
    seed: int,
    eval_subset: int = 1000,
) -> Problem:
    """Builds a problem: loads the data onto the device and fixes every random stream.

    Args:
      model: ``Cnn()``, ``Mlp(hidden)``, ``Logistic()`` or ``Quadratic(...)``.
      dataset: ``Mnist5k()``, ``Digits()``, ``Mnist(data_dir)`` or ``Synthetic(...)``;
        None for ``Quadratic``.
      batch_size: mini-batch size b (at most the training-set size).
      seed: in ``[0, 2**32)``; fixes the initial parameters, every worker's
        shuffling and dropout, the quadratic's noise, the evaluation subset and
        synthetic data (JAX keys would silently collide above 32 bits).
      eval_subset: training examples ``evaluate`` measures (capped at the
        training-set size).

    Returns:
      The :class:`Problem`.

    Raises:
      ValueError / TypeError: a bad argument (the message names it and what is allowed).
      FileNotFoundError: MNIST files are missing (the message says how to get them).
    """
    _check_args(model, dataset, batch_size, seed, eval_subset)
    if isinstance(model, Quadratic):
        fields = _quadratic.build(model, batch_size, seed)
    else:
        data = load_dataset(dataset, seed)
        if batch_size > len(data.y_train):
            raise ValueError(
                f"make_problem: batch_size {batch_size} exceeds the {len(data.y_train)} training "
                f"examples of {dataset!r}"
            )
        fields = _classification.build(model, data, batch_size, seed, eval_subset)
    problem = Problem(
        model=model, dataset=dataset, batch_size=batch_size, init_params=None, **fields
    )
    # Through the jitted method, so that problems with the same static fields
    # share one compiled initialiser.
    return replace(problem, init_params=problem.init(derive_key(seed, KeyTag.INIT)))
