"""Problems on text: a character-level language model's batches, loss and evaluation.

A training example is a window of ``context + 1`` tokens inside one segment of the corpus
(``data/_text_corpus.py``); example ``i`` starts at ``starts[i]``. Batches pick examples exactly as
the classifiers' streams pick images (epochs of keyed permutations over all windows, or over a
worker's shard of them: ``streams/_streams.py``), so a batch is a pure function of (seed, worker,
step) and costs O(batch): the tokens are gathered from the one corpus array by position.
``x`` is the window's first ``context`` tokens and ``y`` the next token at each position.

Evaluation reports nats per character: ``train_loss`` on a fixed sample of ``eval_size``
training windows (chosen from the seed), ``test_loss`` on the held-out text's
non-overlapping windows (at most ``eval_size`` of them, evenly spaced, the same for every
seed), ``test_bits_per_char`` (``test_loss / ln 2``), ``test_perplexity`` (``exp
test_loss``) and ``test_accuracy`` (the next character's argmax). ``evaluate_workers``
measures each worker's fixed sample of its own windows.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from ._keys import KeyTag, derive_key
from ._supervised import _shard_batch, eval_indices, map_chunks, owner_means, shard_arrays
from .data._text_corpus import TextData
from .models._transformer import token_nll, transformer_model
from .streams._batch import Batch
from .streams._streams import batch_positions, step_key

if TYPE_CHECKING:
    from ._problem import Problem
    from .partitions._specs import Shards

TEXT_CHUNK = 64
"""Windows per evaluation call: bounds the memory of one forward pass (attention is
``chunk x heads x context^2``)."""

TEXT_METRICS = ("test_bits_per_char", "test_perplexity")
"""What a text problem's evaluation adds to ``train_loss, test_loss, test_accuracy``."""


def _chunks(indices: np.ndarray) -> dict[str, jax.Array]:
    """Whole chunks of TEXT_CHUNK indices (or fewer: all of them) and the remainder."""
    chunk = max(1, min(TEXT_CHUNK, len(indices)))
    n_full = len(indices) // chunk
    return {
        "full": jnp.asarray(indices[: n_full * chunk].reshape(n_full, chunk), jnp.int32),
        "rest": jnp.asarray(indices[n_full * chunk :], jnp.int32),
    }


def held_out_windows(n_test: int, eval_subset: int) -> np.ndarray:
    """Which held-out windows evaluation measures: all, or ``eval_subset`` evenly spaced."""
    if n_test <= eval_subset:
        return np.arange(n_test)
    return np.unique(np.linspace(0, n_test - 1, eval_subset).round().astype(np.int64))


def build(
    text: TextData,
    batch_size: int,
    seed: int,
    eval_subset: int,
    n_params: int,
    shards: Shards | None = None,
    per_worker: int = 256,
    owners: np.ndarray | None = None,
) -> dict[str, Any]:
    """The fields of a text :class:`Problem` but ``init_params`` (as
    ``_supervised.build``: ``shards`` over the training windows)."""
    corpus, windows = text.corpus, text.windows
    chosen = eval_indices(seed, text.n_train, eval_subset)
    tested = windows.test_starts[held_out_windows(len(windows.test_starts), eval_subset)]
    arrays = {
        "tokens": jnp.asarray(corpus.train, jnp.int32),
        "starts": jnp.asarray(windows.starts, jnp.int32),
        "test_tokens": jnp.asarray(corpus.test, jnp.int32),
        "eval": _chunks(chosen),
        "test": _chunks(tested),
        "stream_key": derive_key(seed, KeyTag.STREAM),
        "dropout_key": derive_key(seed, KeyTag.DROPOUT),
    }
    if shards is not None:
        arrays.update(shard_arrays(shards, seed, per_worker, owners, _chunks))
    return dict(
        train_size=text.n_train,
        test_size=len(tested),
        eval_size=len(chosen),
        n_params=n_params,
        input_shape=(text.context,),
        n_classes=0,
        vocab_size=corpus.vocab_size,
        data=arrays,
    )


def _model(problem: Problem):
    return transformer_model(problem.model, problem.vocab_size)


def _windows(tokens: jax.Array, starts: jax.Array, context: int) -> tuple[jax.Array, jax.Array]:
    """``(x, y)`` int32 ``[B, context]`` of the windows starting at ``starts``."""
    tokens_at = tokens[starts[:, None] + jnp.arange(context + 1, dtype=jnp.int32)[None, :]]
    return tokens_at[:, :-1], tokens_at[:, 1:]


def init(problem: Problem, key: jax.Array) -> PyTree:
    return _model(problem).init(key)


def loss(problem: Problem, params: PyTree, batch: Batch, key: jax.Array) -> jax.Array:
    """Training-mode mean next-character cross-entropy of the batch (nats)."""
    from .models._transformer import lm_loss

    return lm_loss(_model(problem).apply(params, batch.x, key), batch.y)


def batch(problem: Problem, worker: jax.Array, step: jax.Array) -> Batch:
    """Worker ``worker``'s windows number ``step``: from every training window, or from the
    worker's own shard of them."""
    data = problem.data
    if "shard_offsets" in data:
        idx = _shard_batch(data, worker, step, problem.batch_size)
    else:
        idx = batch_positions(
            data["stream_key"], worker, step, problem.train_size, problem.batch_size
        )
    x, y = _windows(data["tokens"], data["starts"][idx], problem.input_shape[0])
    return Batch(x, y, step_key(data["dropout_key"], worker, step))


def _window_scores(problem: Problem, params, tokens, starts) -> tuple[jax.Array, jax.Array]:
    """Per window: mean nll over its positions and the share of positions predicted."""
    x, y = _windows(tokens, starts, problem.input_shape[0])
    logits = _model(problem).apply(params, x, None)
    nll = token_nll(logits, y)
    hit = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    return jnp.mean(nll, axis=-1), jnp.mean(hit, axis=-1)


def _scores(problem: Problem, params, tokens, starts_of, chunks) -> tuple[jax.Array, jax.Array]:
    """Per-window ``(nll, accuracy)`` of every window the chunks index, in order."""
    return map_chunks(lambda idx: _window_scores(problem, params, tokens, starts_of(idx)), chunks)


def evaluate(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """Evaluation mode (no dropout), in nats per character; windows all have ``context``
    positions, so the mean over windows is the mean over characters."""
    data = problem.data
    train, _ = _scores(problem, params, data["tokens"], lambda i: data["starts"][i], data["eval"])
    test, hit = _scores(problem, params, data["test_tokens"], lambda s: s, data["test"])
    test_loss = jnp.mean(test)
    return {
        "train_loss": jnp.mean(train),
        "test_loss": test_loss,
        "test_accuracy": jnp.mean(hit),
        "test_bits_per_char": test_loss / math.log(2.0),
        "test_perplexity": jnp.exp(test_loss),
    }


def evaluate_workers(problem: Problem, params: PyTree) -> dict[str, jax.Array]:
    """Each worker's loss (nats per character) and next-character accuracy on its fixed
    sample of its own windows, float32 ``[n_workers]``; ``{}`` without shards."""
    data = problem.data
    if "worker_eval" not in data:
        return {}
    starts = lambda i: data["starts"][i]
    nll, hit = _scores(problem, params, data["tokens"], starts, data["worker_eval"])
    return owner_means(data, nll, hit, accuracy=True)


def sample_text(
    problem: Problem, params: PyTree, prompt: str, length: int, key: jax.Array,
    temperature: float = 1.0,
) -> str:  # fmt: skip
    """``prompt`` followed by ``length`` characters drawn from the model at ``params`` (each
    from its softmax at ``temperature``, the last ``context`` tokens as input).

    Args:
      problem: a text problem (its model and vocabulary).
      params: the model's parameters (e.g. a run's final ones, ``RunResult.tree()``).
      prompt: the text to continue (at least one character of the vocabulary).
      length: characters to draw.
      key: the draws' key.
    """
    from .data._text_corpus import read_corpus

    corpus = read_corpus(problem.dataset)
    tokens = [int(t) for t in corpus.encode(prompt)]
    if not tokens:
        raise ValueError("sample_text: the prompt must hold at least one character")
    context = problem.input_shape[0]
    step = _sampler(problem)
    for i in range(length):
        window = tokens[-context:]
        padded = jnp.asarray(window + [0] * (context - len(window)), jnp.int32)
        draw = step(params, padded, len(window) - 1, jax.random.fold_in(key, i), temperature)
        tokens.append(int(draw))
    return corpus.decode(np.asarray(tokens))


def _sampler(problem: Problem):
    model = _model(problem)

    @jax.jit
    def step(params, window, last, key, temperature):
        logits = model.apply(params, window[None], None)[0, last]
        return jax.random.categorical(key, logits / temperature)

    return step
