"""Fetching the full MNIST IDX files, verified against known sha256 digests.

The files are the four gzipped IDX files of LeCun, Cortes and Burges' MNIST,
byte-identical on the mirrors below. A file is only ever written after its
digest matched, and it is written atomically (temporary file + rename), so an
interrupted download never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

__all__ = ["MNIST_FILES", "MNIST_MIRRORS", "download_mnist"]

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


def _urlopen(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fetch_verified(name: str, sha256: str, mirrors: tuple[str, ...], fetch: Fetch) -> bytes:
    failures = []
    for base in mirrors:
        url = base + name
        try:
            data = fetch(url)
        except OSError as err:  # URLError and HTTPError are OSErrors
            failures.append(f"{url}: {err}")
            continue
        got = hashlib.sha256(data).hexdigest()
        if got == sha256:
            return data
        failures.append(f"{url}: sha256 {got} does not match the expected {sha256}")
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
      dest: directory to fill (created if missing); point ``Mnist(data_dir=...)``
        or ``$GEMSIM_DATA`` at it afterwards.
      mirrors: base URLs to try in order (any scheme urllib opens, file:// too).
      files: file name -> expected sha256 hex digest.
      fetch: downloads one URL; defaults to ``urllib.request.urlopen``.

    Returns:
      The directory, as a Path.

    Raises:
      RuntimeError: some file could not be fetched with the right digest from
        any mirror; the message lists every attempt. Nothing partial is left.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    fetch = _urlopen if fetch is None else fetch
    for name, sha256 in files.items():
        target = dest / name
        if target.is_file() and _sha256_file(target) == sha256:
            continue
        _write_atomic(target, _fetch_verified(name, sha256, mirrors, fetch))
    return dest
