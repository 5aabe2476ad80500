"""Fetching the data sets that have a public download, verified against known sha256 digests.

- ``mnist``: the four gzipped IDX files of LeCun, Cortes and Burges' MNIST, byte-identical
  on the mirrors below (the digest is the served file's).
- ``fashion-mnist``: Fashion-MNIST's four gzipped IDX files. Copies differ in their gzip
  wrapping (Debian's package recompresses them), so the digest is the decompressed
  content's; the files are kept as served.
- ``cifar10``: the python version's archive (its digest), unpacked into
  ``cifar-10-batches-py``; the archive itself is not kept.

A file is only ever written after its digest matched, and it is written atomically
(`gemsim._atomic`: temporary file, fsync, rename; an archive is unpacked into a temporary
folder that is then renamed), so an interrupted download never leaves a file that looks
complete. The target folder is created with the first verified file: a download that fails
from the start (offline) leaves nothing behind.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from gemsim._atomic import atomic_write_bytes, fsync_dir

from ._data_files import CIFAR10_FILES, CIFAR10_FOLDER

__all__ = [
    "DATASET_SOURCES",
    "MNIST_FILES",
    "MNIST_MIRRORS",
    "DataSource",
    "download_dataset",
    "download_mnist",
]

MNIST_FILES: Mapping[str, str] = MappingProxyType(
    {
        "train-images-idx3-ubyte.gz": (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
        ),
        "train-labels-idx1-ubyte.gz": (
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
        ),
        "t10k-images-idx3-ubyte.gz": (
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
        ),
        "t10k-labels-idx1-ubyte.gz": (
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
        ),
    }
)
"""File name -> sha256 (hex) of the gzipped file, as served by every mirror."""

MNIST_MIRRORS: tuple[str, ...] = (
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
)
"""Base URLs tried in order; a file's URL is the base followed by its name."""

Fetch = Callable[[str], bytes]
"""Downloads one URL and returns its bytes (raising OSError on failure)."""


class DataSource(NamedTuple):
    """Where a data set is published and how its files are verified."""

    files: Mapping[str, str]
    """File name -> sha256 (hex) of the file, or of its decompressed content."""
    mirrors: tuple[str, ...]
    """Base URLs tried in order; a file's URL is the base followed by its name."""
    content_digest: bool = False
    """Digests are of the gzip-decompressed content (the files are kept as served)."""
    unpack: bool = False
    """The one file is a .tar.gz archive, unpacked into ``dest`` and not kept."""


DATASET_SOURCES: Mapping[str, DataSource] = MappingProxyType(
    {
        "mnist": DataSource(MNIST_FILES, MNIST_MIRRORS),
        "fashion-mnist": DataSource(
            MappingProxyType(
                {
                    "train-images-idx3-ubyte.gz": (
                        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"
                    ),
                    "train-labels-idx1-ubyte.gz": (
                        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"
                    ),
                    "t10k-images-idx3-ubyte.gz": (
                        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"
                    ),
                    "t10k-labels-idx1-ubyte.gz": (
                        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"
                    ),
                }
            ),
            (
                "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
            ),
            content_digest=True,
        ),
        "cifar10": DataSource(
            MappingProxyType(
                {
                    "cifar-10-python.tar.gz": (
                        "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
                    )
                }
            ),
            ("https://www.cs.toronto.edu/~kriz/",),
            unpack=True,
        ),
    }
)
"""The data sets ``gemsim download`` fetches, by the name scenarios give them."""


def _urlopen(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read()


def _digest(data: bytes, content: bool) -> str:
    if content:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            return f"(not gzip data: {err})"
    return hashlib.sha256(data).hexdigest()


def _fetch_verified(
    name: str, sha256: str, mirrors: tuple[str, ...], fetch: Fetch, content: bool = False
) -> bytes:
    failures = []
    for base in mirrors:
        url = base + name
        try:
            data = fetch(url)
        except OSError as err:  # URLError and HTTPError are OSErrors
            failures.append(f"{url}: {err}")
            continue
        got = _digest(data, content)
        if got == sha256:
            return data
        what = "content sha256" if content else "sha256"
        failures.append(f"{url}: {what} {got} does not match the expected {sha256}")
    tried = "\n  ".join(failures) or "(no mirrors given)"
    raise RuntimeError(f"could not download {name} from any mirror:\n  {tried}")


def download_mnist(
    dest: str | os.PathLike[str],
    *,
    mirrors: tuple[str, ...] = MNIST_MIRRORS,
    files: Mapping[str, str] = MNIST_FILES,
    fetch: Fetch | None = None,
) -> Path:
    """Downloads the MNIST IDX files into ``dest`` and checks their sha256.

    Files already present with the right digest are kept; others are fetched
    from the first mirror that serves them with the right digest.

    Args:
      dest: directory to fill (created with its first verified file); point
        ``Mnist(data_dir=...)`` or ``$GEMSIM_DATA`` at it afterwards.
      mirrors: base URLs to try in order (any scheme urllib opens, file:// too).
      files: file name -> expected sha256 hex digest.
      fetch: downloads one URL; defaults to ``urllib.request.urlopen``.

    Returns:
      The directory, as a Path.

    Raises:
      RuntimeError: some file could not be fetched with the right digest from
        any mirror; the message lists every attempt. Nothing partial is left.
    """
    return download_dataset("mnist", dest, source=DataSource(files, mirrors), fetch=fetch)


def _unpack(archive: bytes, dest: Path) -> None:
    """Unpacks a CIFAR-10 archive's batches into ``dest / cifar-10-batches-py`` (atomically:
    into a temporary folder beside it, then renamed; only plain files, nothing outside)."""
    target = dest / CIFAR10_FOLDER
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest, prefix=f".{CIFAR10_FOLDER}."))
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                tar.extractall(tmp, filter="data")
        except tarfile.TarError as exc:
            raise RuntimeError(f"cannot unpack the archive safely: {exc}") from None
        unpacked = tmp / CIFAR10_FOLDER
        missing = [n for n in CIFAR10_FILES if not (unpacked / n).is_file()]
        if missing:
            raise RuntimeError(f"the archive lacks {', '.join(missing)}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(unpacked, target)
        fsync_dir(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _present(dest: Path, name: str, sha256: str, source: DataSource) -> bool:
    if source.unpack:
        return all((dest / CIFAR10_FOLDER / n).is_file() for n in CIFAR10_FILES)
    target = dest / name
    return target.is_file() and _digest(target.read_bytes(), source.content_digest) == sha256


def download_dataset(
    name: str,
    dest: str | os.PathLike[str],
    *,
    source: DataSource | None = None,
    fetch: Fetch | None = None,
) -> Path:
    """Downloads the data set ``name`` (a key of :data:`DATASET_SOURCES`) into ``dest``.

    Files already present and verified are kept (an unpacked CIFAR-10 folder with all its
    batches counts as present).

    Args:
      name: ``mnist``, ``fashion-mnist`` or ``cifar10``.
      dest: directory to fill (created with its first verified file); point the data
        set's ``data_dir`` at it.
      source: files, digests and mirrors (default: the published ones).
      fetch: downloads one URL; defaults to ``urllib.request.urlopen``.

    Returns:
      The directory, as a Path.

    Raises:
      KeyError: ``name`` has no public download.
      RuntimeError: some file could not be fetched with the right digest from any mirror;
        the message lists every attempt. Nothing partial is left.
    """
    if source is None:
        if name not in DATASET_SOURCES:
            raise KeyError(
                f"no public download for data set {name!r}; known: {', '.join(DATASET_SOURCES)}"
            )
        source = DATASET_SOURCES[name]
    dest = Path(dest)  # created with the first verified file: a failed download leaves none
    fetch = _urlopen if fetch is None else fetch
    for file, sha256 in source.files.items():
        if _present(dest, file, sha256, source):
            continue
        data = _fetch_verified(file, sha256, source.mirrors, fetch, source.content_digest)
        if source.unpack:
            _unpack(data, dest)
        else:
            atomic_write_bytes(dest / file, data)
    return dest
