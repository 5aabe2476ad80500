"""Reading and writing IDX files (the MNIST container format), numpy only.

An IDX file is: two zero bytes, one type byte, one byte with the number of
dimensions ``ndim``; then ``ndim`` big-endian uint32 sizes; then the values,
big-endian, in C order. Files may be gzip-compressed (detected from the
content, not the name).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

__all__ = ["read_idx", "read_idx_shape", "write_idx"]

_GZIP_MAGIC = b"\x1f\x8b"

# IDX type byte -> big-endian numpy dtype.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES = {dtype.newbyteorder("="): code for code, dtype in _IDX_DTYPES.items()}


def _read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(
            f"{path}: corrupt gzip data ({err}); delete the file and fetch it again"
        ) from err


def _header(raw: bytes, path: Path) -> tuple[int, tuple[int, ...], int]:
    """(type byte, shape, header length) of the IDX bytes ``raw`` (at least the header)."""
    if len(raw) < 4:
        raise ValueError(
            f"{path}: not an IDX file: {len(raw)} bytes, shorter than the 4-byte magic"
        )
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(
            f"{path}: not an IDX file: magic starts with {raw[:2].hex()}, expected 0000 "
            "(is it an HTML error page or a different format?)"
        )
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise ValueError(f"{path}: unknown IDX type byte 0x{code:02X} (known: {known})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header: {ndim} dimensions need {header} bytes")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    return code, shape, header


def read_idx_shape(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """The shape an IDX file declares, from its header alone (the data is not read)."""
    path = Path(path)
    with path.open("rb") as fh:
        gz = fh.read(2) == _GZIP_MAGIC
    try:
        with gzip.open(path, "rb") if gz else path.open("rb") as fh:
            head = fh.read(4)
            head += fh.read(4 * head[3]) if len(head) == 4 else b""
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(
            f"{path}: corrupt gzip data ({err}); delete the file and fetch it again"
        ) from err
    return _header(head, path)[1]


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Reads one IDX file (plain or gzipped) into a native-endian numpy array.

    Args:
      path: the file.

    Returns:
      The array, with the file's shape and dtype (uint8 for MNIST).

    Raises:
      FileNotFoundError: the file does not exist.
      ValueError: the file is not a well-formed IDX file; the message names the
        file and what is wrong with it.
    """
    path = Path(path)
    raw = _read_bytes(path)
    code, shape, header = _header(raw, path)
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found != expected:
        raise ValueError(
            f"{path}: IDX data size mismatch: shape {shape} of {dtype.newbyteorder('=')} needs "
            f"{expected} bytes after the header, found {found} (truncated or corrupt file)"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Writes an array as an IDX file, gzipped when the name ends in ``.gz``.

    Args:
      path: the destination file.
      array: uint8, int8, int16, int32, float32 or float64 values, at most 255
        dimensions, each smaller than 2**32.

    Raises:
      ValueError: the dtype or shape cannot be stored as IDX.
    """
    path = Path(path)
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _IDX_CODES:
        raise ValueError(f"{path}: IDX cannot store dtype {array.dtype}")
    if array.ndim > 255 or any(s >= 2**32 for s in array.shape):
        raise ValueError(f"{path}: IDX cannot store shape {array.shape}")
    code = _IDX_CODES[native]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + np.ascontiguousarray(array, dtype=_IDX_DTYPES[code]).tobytes()
    if path.name.endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)
    path.write_bytes(payload)
