"""The ``Problem`` value: its fields, its pytree and its methods, each jitted and sent to the
problem's kind (``_supervised.py``, ``_quadratic.py``, ``_text.py``). It is built by
``make_problem`` (``_make.py``), its only constructor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import numpy as np

from gemsim.types import PyTree

from . import _quadratic, _supervised, _text
from .data._specs import DatasetSpec
from .models._specs import ModelSpec, Quadratic, Transformer
from .models._user import UserModel
from .streams._batch import Batch

__all__ = ["Problem"]


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
