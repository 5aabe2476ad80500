"""The ``Problem`` value and ``make_problem``, its only constructor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from . import _quadratic, _supervised, _text
from ._batch import Batch
from ._datasets import Dataset, load_dataset
from ._keys import KeyTag, derive_key, host_rng
from ._model_imports import ModelError
from ._models import build_model
from ._npz import DataError, check_arrays, npz_headers
from ._partitions import (
    LABEL_SPECS,
    DataSplit,
    PartitionError,
    check_shards,
    split_shards,
)
from ._sizes import DataShape, data_shape, param_count
from ._specs import (
    DATASET_SPECS,
    Arrays,
    Cnn,
    DatasetSpec,
    Imported,
    Logistic,
    Mlp,
    ModelSpec,
    Quadratic,
    Resnet,
    Shakespeare,
    Text,
    Transformer,
    spec_names,
)
from ._text_corpus import TextData, spec_text
from ._user import UserModel, as_user_model, check_user_model, load_model

__all__ = ["Problem", "imported_sizes", "make_problem"]

_BUILT_IN = (Cnn, Mlp, Logistic, Resnet)


@dataclass(frozen=True, eq=False)
class Problem:
    """A model, its data and its per-worker batch streams, as pure functions.

    Build it with :func:`make_problem`. The contract the engine relies on:

    - ``init(key) -> params``: a pytree of float32 arrays (built-in models: dicts).
    - ``loss(params, batch, key) -> scalar``: training mode (``key`` drives dropout;
      pass ``batch.key``).
    - ``batch(worker, step) -> Batch``: pure and jit/vmap-able; a function of
      (seed, worker, step) only, so independent of how many workers exist.
    - ``evaluate(params) -> {"train_loss", "test_loss", "test_accuracy", ...}``:
      float32 scalars in evaluation mode (no dropout); ``train_loss`` is on the
      fixed subset of ``eval_size`` training examples chosen from the seed;
      accuracy is nan where undefined (quadratic); a classifier adds each class's
      test accuracy, ``test_accuracy_class_<k>`` for k < ``n_classes``.
    - ``evaluate_workers(params) -> {"loss", "accuracy"}``: float32 ``[n_workers]``, the
      central model on each worker's own data (a fixed sample of its shard; the
      heterogeneous quadratic's own loss), where the workers have data of their own
      (``has_worker_data``); else ``{}``.

    A Problem is a JAX pytree: its arrays (``data``, ``init_params``) are leaves
    and everything else is static metadata compared by value. Passing it as an
    argument to a jitted function therefore hands the data set to the compiled
    program as an input (closing over it instead bakes the arrays into the
    program as constants, which is slow to compile for full MNIST), and two
    problems that differ only in seed share compiled code. The four methods are
    themselves jitted the same way, so eager calls are fast too.
    """

    model: ModelSpec | UserModel
    """A built-in model's spec, or the user's model (an ``Imported`` spec is loaded into one)."""
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
    """Number of classes (quadratic and float targets: 0)."""
    data: dict[str, Any] = field(repr=False)
    """Device arrays and keys (training set, evaluation chunks, stream keys)."""
    init_params: PyTree = field(repr=False)
    """``init`` applied to the seed's initialisation key: the run's starting point."""
    vocab_size: int = 0
    """Tokens of a text problem's vocabulary (0 for the others)."""

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

    @property
    def has_worker_data(self) -> bool:
        """Whether the workers have data of their own: shards of the training set, or the
        heterogeneous quadratic's optima."""
        return "worker_eval" in self.data or "centres" in self.data

    def evaluate_workers(self, params: PyTree) -> dict[str, jax.Array]:
        """The central model ``params`` on each worker's own data: ``{"loss", "accuracy"}``,
        float32 ``[n_workers]`` (accuracy nan where undefined); ``{}`` without
        `has_worker_data`."""
        if not self.has_worker_data:
            return {}
        return _evaluate_workers_jit(self, params)

    def worker_facts(self) -> dict[str, np.ndarray]:
        """What each worker holds, on the host: ``shard_size`` (int64 ``[n]``) where the
        workers hold shards, ``optimum`` (float32 ``[n, dim]``, the c_w) for the
        heterogeneous quadratic; ``{}`` otherwise."""
        facts = {}
        owners = self.data.get("eval_owners")
        if owners is None and "worker_eval" in self.data:
            owners = self.data["worker_eval"].get("owners")
        if owners is not None:  # the owners `evaluate_workers` measures, when not all
            facts["eval_owners"] = np.asarray(owners, np.int64)
        if "shard_offsets" in self.data:
            facts["shard_size"] = np.diff(np.asarray(self.data["shard_offsets"], np.int64))
        if "centres" in self.data:
            facts["optimum"] = np.asarray(self.data["centres"], np.float32)
        return facts


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
        "vocab_size",
    ],
)


class _Kind(NamedTuple):
    init: Callable[..., PyTree]
    loss: Callable[..., jax.Array]
    batch: Callable[..., Batch]
    evaluate: Callable[..., dict[str, jax.Array]]
    evaluate_workers: Callable[..., dict[str, jax.Array]]


_SUPERVISED = _Kind(
    _supervised.init,
    _supervised.loss,
    _supervised.batch,
    _supervised.evaluate,
    _supervised.evaluate_workers,
)
_QUADRATIC = _Kind(
    _quadratic.init,
    _quadratic.loss,
    _quadratic.batch,
    _quadratic.evaluate,
    _quadratic.evaluate_workers,
)

_TEXT = _Kind(_text.init, _text.loss, _text.batch, _text.evaluate, _text.evaluate_workers)


def _kind(problem: Problem) -> _Kind:
    if isinstance(problem.model, Quadratic):
        return _QUADRATIC
    return _TEXT if isinstance(problem.model, Transformer) else _SUPERVISED


_init_jit = jax.jit(lambda p, key: _kind(p).init(p, key))
_loss_jit = jax.jit(lambda p, params, batch, key: _kind(p).loss(p, params, batch, key))
_batch_jit = jax.jit(lambda p, worker, step: _kind(p).batch(p, worker, step))
_evaluate_jit = jax.jit(lambda p, params: _kind(p).evaluate(p, params))
_evaluate_workers_jit = jax.jit(lambda p, params: _kind(p).evaluate_workers(p, params))


def _check_text_args(model: object, dataset: object, data: object) -> None:
    text = isinstance(dataset, Shakespeare | Text) or isinstance(data, TextData)
    if isinstance(model, Transformer) and not text:
        raise ValueError(
            f"model Transformer needs a text dataset (Shakespeare or Text), got {dataset!r}"
        )
    if text and not isinstance(model, Transformer):
        raise ValueError(f"a text dataset ({dataset!r}) needs model Transformer, got {model!r}")
    context = data.context if isinstance(data, TextData) else getattr(dataset, "context", 0)
    if text and context != model.context:
        raise ValueError(
            f"the text dataset's windows hold context {context} tokens, the model's context is "
            f"{model.context}: give both the same context"
        )


def _check_args(
    model: object,
    dataset: object,
    batch_size: object,
    seed: object,
    eval_subset: object,
    data: object = None,
    eval_per_worker: object = 256,
) -> None:
    _check_text_args(model, dataset, data)
    if isinstance(model, Quadratic) and dataset is not None:
        raise ValueError(f"model quadratic takes no dataset (pass None), got {dataset!r}")
    if isinstance(model, _BUILT_IN) and data is None and not isinstance(dataset, DATASET_SPECS):
        raise ValueError(
            f"model {type(model).__name__} needs a dataset ({spec_names(DATASET_SPECS)}), "
            f"got {dataset!r}"
        )
    if dataset is not None and not isinstance(dataset, DATASET_SPECS):
        raise ValueError(f"make_problem: dataset must be a dataset spec or None, got {dataset!r}")
    for name, value, low, high in (
        ("batch_size", batch_size, 1, None),
        ("seed", seed, 0, 2**32 - 1),
        ("eval_subset", eval_subset, 1, None),
        ("eval_per_worker", eval_per_worker, 1, None),
    ):
        bad = isinstance(value, bool) or not isinstance(value, int)
        if bad or value < low or (high is not None and value > high):
            allowed = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")
            raise ValueError(f"make_problem: {name} must be {allowed}, got {value!r}")


def resolve_model(model: object) -> tuple[ModelSpec | UserModel, object]:
    """``(model, data its factory returned or None)``: built-in specs as they are, an
    :class:`Imported` spec loaded, any other object checked against the contract."""
    if isinstance(model, (*_BUILT_IN, Quadratic, Transformer, UserModel)):
        return model, None
    if isinstance(model, Imported):
        return load_model(model)
    return as_user_model(model), None


def _resolve_data(model, dataset, seed: int, data, factory_data) -> Dataset:
    if factory_data is not None and (dataset is not None or data is not None):
        raise ModelError(
            model.name, "the factory returned data and a dataset is given too: keep one"
        )
    if factory_data is not None:
        data = Dataset(**check_arrays(factory_data, f"data returned by {model.name}"))
    elif data is None:
        if dataset is None:
            raise DataError(
                model.name if isinstance(model, UserModel) else repr(model),
                "no data: give a dataset, or return (model, data) from the factory",
            )
        data = load_dataset(dataset, seed)
    elif not isinstance(data, Dataset):
        data = Dataset(**check_arrays(data, "make_problem(data=...)"))
    return data


def _n_params(model, data: Dataset, batch_size: int) -> int:
    shape = DataShape(
        len(data.y_train), len(data.y_test), tuple(data.x_train.shape[1:]), data.n_classes
    )
    if isinstance(model, UserModel):
        y = (tuple(data.y_train.shape[1:]), data.y_train.dtype)
        return check_user_model(model, shape.input_shape, y, batch_size, data.n_classes)
    if data.n_classes < 1:
        raise DataError(
            repr(model),
            f"model {type(model).__name__.lower()} needs integer class "
            "labels; this data set has float targets",
        )
    build_model(model, shape.input_shape, shape.n_classes)  # checks the input shape
    return param_count(model, shape)


def _supervised_fields(
    model, dataset, batch_size: int, seed: int, eval_subset: int, data, split, n_workers, sample
):
    model, factory_data = resolve_model(model)
    data = _resolve_data(model, dataset, seed, data, factory_data)
    if batch_size > len(data.y_train):
        raise ValueError(
            f"make_problem: batch_size {batch_size} exceeds the {len(data.y_train)} training "
            f"examples of {dataset if dataset is not None else 'the data'!r}"
        )
    n_params = _n_params(model, data, batch_size)
    shards = _shards(data, split, n_workers, seed, batch_size)
    per, owners = sample
    return model, _supervised.build(
        data, batch_size, seed, eval_subset, n_params, shards, per, owners
    )


def _text_fields(
    model: Transformer, dataset, batch_size: int, seed: int, eval_subset: int, data, split,
    n_workers, sample,
):  # fmt: skip
    if data is None:
        data = spec_text(dataset)
    if batch_size > data.n_train:
        raise ValueError(
            f"make_problem: batch_size {batch_size} exceeds the {data.n_train} training "
            f"windows of {dataset!r}"
        )
    n_params = param_count(model, _text_shape(data))
    shards = None
    if split is not None and split.splits:
        if n_workers is None:
            raise ValueError("make_problem: splitting the data among workers needs n_workers")
        if split.claims or isinstance(split.spec, LABEL_SPECS):
            raise PartitionError(
                "name", "splits by class need class labels; a text data set has none"
            )
        labels = np.zeros(data.n_train, np.int64)
        groups = data.windows.groups
        shards = split_shards(
            split, labels, n_workers, seed, n_classes=1, groups=groups, batch_size=batch_size
        )
        check_shards(shards, batch_size)
    per, owners = sample
    return _text.build(data, batch_size, seed, eval_subset, n_params, shards, per, owners)


def _text_shape(data) -> DataShape:
    windows = data.windows
    shape = (len(windows.starts), len(windows.test_starts), (data.context,), 0)
    return DataShape(*shape, vocab_size=data.corpus.vocab_size)


def eval_owner_ids(seed: int, n_owners: int | None, most: int | None) -> np.ndarray | None:
    """The data owners `evaluate_workers` measures when they are fewer than all: ``most`` of
    them, drawn once from the seed, increasing; None when every owner is measured."""
    if most is None or n_owners is None or most >= n_owners:
        return None
    chosen = host_rng(seed, KeyTag.EVAL_OWNERS).choice(n_owners, size=most, replace=False)
    return np.sort(chosen).astype(np.int32)


def _shards(data: Dataset, split: DataSplit | None, n_workers, seed: int, batch_size: int):
    """The workers' shards of the training set, or None when they all stream all of it."""
    if split is None or not split.splits:
        return None
    if n_workers is None:
        raise ValueError("make_problem: splitting the data among workers needs n_workers")
    classes = data.n_classes >= 1
    if not classes and (split.claims or isinstance(split.spec, LABEL_SPECS)):
        raise PartitionError(
            "name", "splits by class need class labels; this data set has float targets"
        )
    labels = np.asarray(data.y_train) if classes else np.zeros(len(data.y_train), np.int64)
    shards = split_shards(
        split,
        labels,
        n_workers,
        seed,
        n_classes=max(data.n_classes, 1),
        groups=data.groups,
        batch_size=batch_size,
    )
    check_shards(shards, batch_size)
    return shards


def make_problem(
    model: ModelSpec | UserModel | object,
    dataset: DatasetSpec | None,
    batch_size: int,
    seed: int,
    eval_subset: int = 1000,
    *,
    data: Dataset | dict | None = None,
    split: DataSplit | None = None,
    n_workers: int | None = None,
    eval_per_worker: int = 256,
    eval_owners: int | None = None,
) -> Problem:
    """Builds a problem: loads the data onto the device and fixes every random stream.

    Args:
      model: ``Cnn()``, ``Mlp(hidden)``, ``Logistic()``, ``Resnet(depth)`` or
        ``Quadratic(...)``; ``Imported("module:factory", kwargs)``; or a model object (any
        object with ``init`` and ``loss``, see docs/problems.md; a :class:`UserModel`).
      dataset: ``Mnist5k()``, ``Digits()``, ``Mnist(data_dir)``, ``FashionMnist()``,
        ``Cifar10(data_dir)``, ``Arrays(path)`` or ``Synthetic(...)``; None for
        ``Quadratic`` and for a model whose factory returns its data.
      batch_size: mini-batch size b (at most the training-set size).
      seed: in ``[0, 2**32)``; fixes the initial parameters, every worker's
        shuffling and dropout, the quadratic's noise, the evaluation subset and
        synthetic data (JAX keys would silently collide above 32 bits).
      eval_subset: training examples ``evaluate`` measures (capped at the
        training-set size).
      data: the data set's arrays, already loaded (a :class:`Dataset`, whose arrays may be
        on the device: problems built with the same ``Dataset`` share one copy), or a
        mapping of ``x_train, y_train, x_test, y_test`` (checked); None: load ``dataset``.
      split: how the training set is split among the workers (`DataSplit`: a partition and
        the classes groups of workers alone hold); None: every worker streams all of it.
      n_workers: the run's number of workers (needed by ``split`` and by a quadratic with
        heterogeneity).
      eval_per_worker: examples of each worker's shard that ``evaluate_workers`` measures
        at most (a fixed sample chosen from the seed; all of a smaller shard).
      eval_owners: how many data owners ``evaluate_workers`` measures at most (a
        population's clients: a fixed sample chosen from the seed); None: every one.

    Returns:
      The :class:`Problem`.

    Raises:
      ValueError / TypeError: a bad argument (the message names it and what is allowed).
      ModelError / DataError: a user model or data set breaks the contract.
      PartitionError: an impossible split (the message names the field, value and what is
        allowed), or a shard smaller than the batch.
      FileNotFoundError: data files are missing (the message says how to get them).
    """
    _check_args(model, dataset, batch_size, seed, eval_subset, data, eval_per_worker)
    owners = eval_owner_ids(seed, n_workers, eval_owners)
    if isinstance(model, Quadratic):
        if split is not None and split.splits:
            raise ValueError("make_problem: the quadratic has no data set to split")
        fields = _quadratic.build(model, batch_size, seed, n_workers, owners)
    elif isinstance(model, Transformer):
        fields = _text_fields(
            model, dataset, batch_size, seed, eval_subset, data, split, n_workers,
            (eval_per_worker, owners),
        )  # fmt: skip
    else:
        model, fields = _supervised_fields(
            model,
            dataset,
            batch_size,
            seed,
            eval_subset,
            data,
            split,
            n_workers,
            (eval_per_worker, owners),
        )
    problem = Problem(
        model=model, dataset=dataset, batch_size=batch_size, init_params=None, **fields
    )
    # Through the jitted method, so that problems with the same static fields
    # share one compiled initialiser.
    return replace(problem, init_params=problem.init(derive_key(seed, KeyTag.INIT)))


def _label_example(dataset: DatasetSpec) -> tuple[tuple[int, ...], Any]:
    """Shape of one label and its dtype, without loading the data."""
    if isinstance(dataset, Arrays):
        shape, dtype = npz_headers(dataset)["y_train"]
        return shape[1:], jnp.int32 if dtype.kind in "biu" else jnp.float32
    return (), jnp.int32


def imported_sizes(
    model: Imported,
    dataset: DatasetSpec | None,
    batch_size: int,
    *,
    params: bool = True,
    seed: int = 0,
) -> tuple[int, int]:
    """``(training examples, parameters)`` of an imported model without building the
    problem: the factory runs (its data, if it brings some, is checked) and its functions are
    traced on abstract batches; ``params=False`` skips the tracing (0 parameters); ``seed``
    sizes a generated data set."""
    user, factory_data = load_model(model)
    if factory_data is not None:
        data = Dataset(**check_arrays(factory_data, f"data returned by {user.name}"))
        x, y = tuple(data.x_train.shape[1:]), (tuple(data.y_train.shape[1:]), data.y_train.dtype)
        n_train, n_classes = len(data.y_train), data.n_classes
    elif dataset is not None:
        shape = data_shape(dataset, seed)
        x, y = shape.input_shape, _label_example(dataset)
        n_train, n_classes = shape.n_train, shape.n_classes
    else:
        raise DataError(
            user.name, "no data: give a dataset, or return (model, data) from the factory"
        )
    n_params = check_user_model(user, x, y, batch_size, n_classes) if params else 0
    return n_train, n_params
