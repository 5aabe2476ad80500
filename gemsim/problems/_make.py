"""``make_problem``, the only constructor of a :class:`Problem`: the arguments checked, the
model resolved, the data loaded and split among the workers, each kind's fields built; and
``imported_sizes``, an imported model's sizes without building the problem."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from . import _quadratic, _supervised, _text
from ._keys import KeyTag, derive_key, host_rng
from ._problem import Problem
from ._sizes import DataShape, data_shape, param_count
from .data._datasets import Dataset, load_dataset
from .data._npz import DataError, check_arrays, npz_headers
from .data._specs import DATASET_SPECS, Arrays, DatasetSpec, Shakespeare, Text, spec_names
from .data._text_corpus import TextData, spec_text
from .models._model_imports import ModelError
from .models._models import build_model
from .models._specs import (
    Cnn,
    Imported,
    Logistic,
    Mlp,
    ModelSpec,
    Quadratic,
    Resnet,
    Transformer,
)
from .models._user import UserModel, as_user_model, check_user_model, load_model
from .partitions._partitions import (
    LABEL_SPECS,
    DataSplit,
    PartitionError,
    check_shards,
    split_shards,
)

__all__ = ["imported_sizes", "make_problem"]

_BUILT_IN = (Cnn, Mlp, Logistic, Resnet)


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
