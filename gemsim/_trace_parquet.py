"""The one file format of a `CommitTrace` (gemsim/trace.py): a parquet table of its
columns whose schema metadata holds the format number and the trace's attributes, and the
reader of every format gemsim ever wrote (and of a plain table with a worker count). pyarrow
is imported only when a file is written or read.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from gemsim._trace_columns import BUFFER, CLIENT, COLUMN_NAMES, COLUMNS, COUNTS

_METADATA_KEY = b"gemsim.commit_trace"
_FORMAT_VERSION = 2
_CLIENT_FORMAT = 3  # a trace with a client column (older readers must refuse it)
_LOCAL_STEPS_FORMAT = 4  # with a local_steps or dropped column (older readers refuse it)
_BUFFER_FORMAT = 5  # with a buffer column (a reader of format 4 would ignore it)
_READABLE_FORMATS = (1, 2, 3, 4, 5)  # format 1 had no flag columns: they take their defaults


def encode(columns: dict[str, Any], attributes: dict[str, Any]) -> bytes:
    """The file's bytes for a trace's ``columns()`` and attributes: format 2, 3 with a client
    column, 4 with a local_steps or dropped column, 5 with a buffer column."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays([_arrow(v) for v in columns.values()], names=list(columns))
    version = _FORMAT_VERSION if CLIENT not in columns else _CLIENT_FORMAT
    if any(name in columns for name, _ in COUNTS):
        version = _LOCAL_STEPS_FORMAT
    if BUFFER in columns:
        version = _BUFFER_FORMAT
    meta = {"format": version, **attributes}
    table = table.replace_schema_metadata({_METADATA_KEY: json.dumps(meta).encode()})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def read(path: str | os.PathLike[str], n_workers: int | None) -> dict[str, Any]:
    """The `CommitTrace` arguments a file holds (see `CommitTrace.from_parquet`)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as file:  # not `read_table`, which imports pandas
        table = file.read()
    meta = _trace_metadata(table, n_workers)
    required = [name for name, _ in COLUMNS]
    missing = [name for name in required if name not in table.column_names]
    if missing:
        raise ValueError(f"lacks columns {missing}")
    present = [
        name
        for name in (*COLUMN_NAMES, CLIENT, *(name for name, _ in COUNTS))
        if name in table.column_names
    ]
    columns = {name: _numpy(table.column(name)) for name in present}
    return dict(
        **columns,
        n_workers=meta["n_workers"],
        duration=meta["duration"],
        busy_time=meta.get("busy_time"),
        n_clients=meta.get("n_clients"),
    )


# pyarrow's own conversions between numpy and arrow (`pa.array`, `to_numpy`) import pandas
# to check for its types: 0.2-0.3 s of every command that writes or reads a trace, before
# its runs can start. A trace's columns are numbers and booleans without nulls, converted
# here from and to their buffers; anything else goes through pyarrow's.


def _arrow(values: Any) -> Any:
    """A column as an arrow array, its buffer shared (booleans packed as arrow's bits)."""
    import pyarrow as pa

    values = np.asarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    if values.dtype.kind not in "iuf" or not values.dtype.isnative:
        return pa.array(values)
    values = np.ascontiguousarray(values)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def _numpy(column: Any) -> np.ndarray:
    """A column read back as numpy: numbers and booleans without nulls from their buffers."""
    import pyarrow as pa

    kind = column.type
    if column.null_count or not (
        pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
    ):
        return column.to_numpy(zero_copy_only=False)
    dtype = np.dtype(bool) if pa.types.is_boolean(kind) else _NUMPY_DTYPES[str(kind)]
    parts = [_chunk_numpy(chunk, dtype) for chunk in column.chunks]
    return np.concatenate(parts) if parts else np.empty(0, dtype)


_NUMPY_DTYPES = {
    **{f"{s}int{b}": np.dtype(f"{s}int{b}") for s in ("", "u") for b in (8, 16, 32, 64)},
    "halffloat": np.dtype(np.float16),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
}


def _chunk_numpy(chunk: Any, dtype: np.dtype) -> np.ndarray:
    n, start = len(chunk), chunk.offset
    if n == 0:
        return np.empty(0, dtype)
    data = chunk.buffers()[1]
    if dtype == np.bool_:
        bits = np.unpackbits(np.frombuffer(data, np.uint8), count=start + n, bitorder="little")
        return bits[start:].astype(bool)
    return np.frombuffer(data, dtype, count=n, offset=start * dtype.itemsize).copy()


def _trace_metadata(table: Any, n_workers: int | None) -> dict[str, Any]:
    """The trace's attributes: gemsim's metadata, else pandas' (0.1 run folders), else the
    caller's worker count with the last commit time as duration."""
    schema_meta = table.schema.metadata or {}
    raw = schema_meta.get(_METADATA_KEY)
    if raw is None and b"pandas" in schema_meta:
        attrs = json.loads(schema_meta[b"pandas"]).get("attributes", {})
        if "n_workers" in attrs and "duration" in attrs:
            raw = json.dumps({"format": _FORMAT_VERSION, **attrs})
    if raw is None:
        if n_workers is None:
            raise ValueError(
                f"not a gemsim commit trace (no {_METADATA_KEY!r} metadata "
                "and no n_workers/duration attributes)"
            )
        times = _numpy(table.column("time")) if "time" in table.column_names else []
        last = float(max(times)) if len(times) else 0.0
        return {"n_workers": n_workers, "duration": last, "busy_time": None}
    meta = json.loads(raw)
    if meta.get("format") not in _READABLE_FORMATS:
        raise ValueError(
            f"unsupported commit trace format {meta.get('format')!r}, expected one of "
            f"{_READABLE_FORMATS}"
        )
    return meta
