"""Text corpora as token arrays and the windows a language model reads from them (no JAX
here: the timing side sizes a text problem from this alone).

A corpus is a list of *segments*, each a run of text that windows never cross, each owned by
a natural group; where the segments' text comes from (the plays of Shakespeare, a user's
files) is ``_text_sources.py``. Characters are tokens numbered in sorted order of the
training text's characters (``vocab: chars``), or the UTF-8 bytes themselves (``vocab:
bytes``, 256 tokens).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ._text_sources import Source, TextError, shakespeare_source, user_source

__all__ = [
    "Corpus",
    "TextData",
    "corpus_windows",
    "format_text_partition",
    "read_corpus",
    "spec_text",
    "text_data",
]


class Corpus(NamedTuple):
    """Tokens of a corpus's training and test text, segment by segment."""

    train: np.ndarray
    """int32 tokens of the training segments, concatenated."""
    train_offsets: np.ndarray
    """int64 ``[S + 1]``: segment s is ``train[offsets[s]:offsets[s + 1]]``."""
    test: np.ndarray
    test_offsets: np.ndarray
    segment_group: np.ndarray
    """int64 ``[S]``: each training segment's natural group (an index into ``group_names``)."""
    group_names: tuple[str, ...]
    vocab: str | None
    """The characters tokens 0, 1, ... stand for; None for bytes (token = byte value)."""
    sha256: str
    """Digest of the source files' bytes (with their names), what the corpus was read from."""

    @property
    def vocab_size(self) -> int:
        return 256 if self.vocab is None else len(self.vocab)

    def decode(self, tokens) -> str:
        """The text tokens stand for (bytes decoded as UTF-8, invalid ones replaced)."""
        tokens = np.asarray(tokens, np.int64)
        if self.vocab is None:
            return bytes(tokens.astype(np.uint8).tolist()).decode("utf-8", errors="replace")
        return "".join(self.vocab[t] for t in tokens)

    def encode(self, text: str) -> np.ndarray:
        """Tokens of ``text`` (a character outside the vocabulary is a TextError)."""
        if self.vocab is None:
            return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)
        index = {c: i for i, c in enumerate(self.vocab)}
        missing = sorted(set(text) - set(index))
        if missing:
            raise TextError("text", f"characters outside the vocabulary: {missing!r}")
        return np.fromiter((index[c] for c in text), np.int32, len(text))


# ----------------------------------------------------------------------------- tokens


def _concat(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    sizes = [len(p) for p in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    tokens = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    return tokens, offsets


def _tokenise(source: Source, as_bytes: bool, name: str) -> Corpus:
    names = list(dict.fromkeys(source.groups))
    index = {g: i for i, g in enumerate(names)}
    segment_group = np.array([index[g] for g in source.groups], np.int64)
    if as_bytes:
        to_tokens = lambda b: np.frombuffer(b, np.uint8)
        vocab = None
    else:
        vocab = "".join(sorted(set().union(*map(set, source.train)))) if source.train else ""
        table = {c: i for i, c in enumerate(vocab)}
        for s, text in enumerate(source.test):
            unknown = sorted(set(text) - set(table))
            if unknown:
                raise TextError(
                    name,
                    f"held-out text (segment {s}) has characters the training text lacks: "
                    f"{unknown[:10]!r}; the vocabulary is the training text's characters "
                    "(dataset.vocab: chars); give dataset.vocab: bytes to use every byte",
                )
        to_tokens = lambda t: np.fromiter((table[c] for c in t), np.int32, len(t))
    train, train_offsets = _concat([to_tokens(t) for t in source.train])
    test, test_offsets = _concat([to_tokens(t) for t in source.test])
    return Corpus(
        train, train_offsets, test, test_offsets, segment_group, tuple(names), vocab,
        source.sha256,
    )  # fmt: skip


@functools.lru_cache(maxsize=4)
def read_corpus(spec) -> Corpus:
    """The corpus a ``Shakespeare`` or ``Text`` spec names (kept per process: every run of a
    sweep, and the timing side's sizes, read it once)."""
    from ._specs import Shakespeare

    as_bytes = spec.vocab == "bytes"
    if isinstance(spec, Shakespeare):
        source = shakespeare_source(spec.groups, as_bytes, spec.min_chars)
        name = "dataset shakespeare"
    else:
        source = user_source(spec.path, spec.groups == "by_file", as_bytes, spec.test_fraction)
        name = f"text {spec.path}"
    return _tokenise(source, as_bytes, name)


class Windows(NamedTuple):
    """The windows of ``context + 1`` tokens a corpus offers."""

    starts: np.ndarray
    """int64: training windows' first positions in ``Corpus.train`` (every position whose
    window stays inside its segment), segment by segment."""
    groups: np.ndarray
    """int64: each training window's natural group."""
    test_starts: np.ndarray
    """int64: non-overlapping test windows' first positions in ``Corpus.test`` (each test
    character predicted once)."""


def _starts(offsets: np.ndarray, context: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """First positions of the windows inside each segment, and each window's segment."""
    lengths = np.diff(offsets)
    counts = np.maximum(0, (lengths - context - 1) // stride + 1)
    segment = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    first = np.concatenate([[0], np.cumsum(counts)])[:-1]
    rank = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first, counts)
    return offsets[:-1][segment] + rank * stride, segment


def corpus_windows(corpus: Corpus, context: int, name: str) -> Windows:
    """Every training window and the test windows, for sequences of ``context`` tokens.

    Raises:
        TextError: no training or no test window fits (the text is shorter than
            ``context + 1`` characters).
    """
    starts, segment = _starts(corpus.train_offsets, context, 1)
    test_starts, _ = _starts(corpus.test_offsets, context, context)
    for what, found in (("training", starts), ("held-out", test_starts)):
        if not len(found):
            raise TextError(
                name,
                f"the {what} text holds no window of context + 1 = {context + 1} characters "
                "(model.context); give more text or a smaller context",
            )
    return Windows(starts, corpus.segment_group[segment], test_starts)


def format_text_partition(shards, corpus: Corpus, windows: Windows, max_rows: int = 20) -> str:
    """A text partition as ``gemsim trace`` prints it: per owner its windows, the natural
    groups (roles, plays, files) it holds windows of and those groups' characters; one line
    each, or quantiles beyond ``max_rows`` owners."""
    n, sizes = shards.n_workers, shards.sizes
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    n_names = len(corpus.group_names)
    # (owner, group) pairs held, as one sorted key: a 1-D unique, not one over columns
    keys = np.unique(owner * n_names + windows.groups[shards.indices])
    pairs = np.stack([keys // n_names, keys % n_names])
    n_groups = np.bincount(pairs[0], minlength=n)
    group_chars = np.bincount(
        corpus.segment_group,
        weights=np.diff(corpus.train_offsets),
        minlength=len(corpus.group_names),
    )
    chars = np.bincount(pairs[0], weights=group_chars[pairs[1]], minlength=n).astype(np.int64)
    first = {int(w): int(g) for w, g in zip(pairs[0][::-1], pairs[1][::-1], strict=True)}
    name = lambda w: corpus.group_names[first[w]] if w in first else "-"
    lines = [
        f"{n} owners hold {int(sizes.sum())} of {len(windows.starts)} training windows "
        f"({len(corpus.group_names)} natural groups, {len(corpus.train)} characters)"
    ]
    header = f"{'windows':>9} {'groups':>7} {'characters':>11}"
    if n <= max_rows:
        lines.append(f"{'owner':>8} {header}  first group")
        for w in range(n):
            lines.append(f"{w:>8} {sizes[w]:>9} {n_groups[w]:>7} {chars[w]:>11}  {name(w)}")
    else:
        lines.append(f"{'quantile':>8} {header}")
        for q, label in ((0.0, "min"), (0.1, "10%"), (0.5, "median"), (0.9, "90%"), (1.0, "max")):
            v = [np.quantile(a, q) for a in (sizes, n_groups, chars)]
            lines.append(f"{label:>8} {v[0]:>9.0f} {v[1]:>7.0f} {v[2]:>11.0f}")
        top = np.argsort(-sizes, kind="stable")[:3]
        lines.append("largest: " + ", ".join(f"{w} ({name(int(w))})" for w in top))
    return "\n".join(lines)


class TextData(NamedTuple):
    """A corpus and its windows for one context, on the device or the host."""

    corpus: Corpus
    windows: Windows
    context: int

    @property
    def n_train(self) -> int:
        return len(self.windows.starts)


@functools.lru_cache(maxsize=2)
def spec_text(spec) -> TextData:
    """The corpus a ``Shakespeare`` or ``Text`` spec names with its windows for the spec's
    context (kept per process: sizing a run, its partition and its problem all need them)."""
    return text_data(read_corpus(spec), spec.context, f"dataset {spec!r}")


def text_data(corpus: Corpus, context: int, name: str) -> TextData:
    """The corpus with its windows of ``context + 1`` tokens (TextError if none fits)."""
    return TextData(corpus, corpus_windows(corpus, context, name), context)
