"""The key of a simulated trace in the trace store: everything the trace is a function of,
written canonically and hashed.

A trace is `timing.simulate(spec, seed, schedule_seed=...)` of the `timing.ClusterSpec` that
`config.build_cluster(scenario)` returns (the cluster, network, server, protocol, budget and
the rule's window: all the timing model reads), so two runs with equal specs and seeds have
the same trace whatever else differs (the rule, its learning rate, the problem). The key is
the sha256 of:

- `canonical(spec)`: the spec as text, one way only: a dataclass as its class name and its
  compared fields in declaration order (fields left out of `==`, such as `Empirical`'s
  derived array, are left out here too: equal specs give equal text), floats by `repr`
  (which round-trips exactly), enums by name, a sequence of floats (an empirical law's
  samples) and a numpy array by the sha256 of their little-endian bytes; any other type is
  refused rather than written by an address or a hash that changes between processes;
- the seeds;
- gemsim's version, numpy's and SimPy's (the random streams and the event loop a trace
  comes from), and the sha256 of the timing model's source (`gemsim/timing/*.py`,
  `gemsim/trace.py` and `gemsim/_trace_*.py`), so a checkout whose timing code changed
  reuses no trace of the old.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from gemsim._lru import Lru

KEY_FORMAT = "gemsim.trace-store/1"
"""Changes when what goes into a key changes (every stored trace is then simulated again)."""

FLOATS_INLINE = 8
"""Sequences of floats up to this long are written number by number; longer ones (measured
samples, millions of them) by the sha256 of their bytes."""


def timing_key(spec: Any, seed: int, schedule_seed: int | None = None) -> str:
    """The hex sha256 naming the trace of `timing.simulate(spec, seed, schedule_seed=...)`."""
    text = "\n".join(
        (
            KEY_FORMAT,
            versions(),
            f"timing source {timing_source_sha256()}",
            canonical(spec),
            f"seed {seed!r}",
            f"schedule_seed {schedule_seed!r}",
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


_LONG_TUPLES = Lru(16)
"""The text of long tuples by identity (`Lru.get_for`): the runs of a sweep share one tuple
of worker specs (`config.worker_specs`), written once."""

LONG_TUPLE = 32


def canonical(value: Any) -> str:
    """`value` as canonical text (see the module docstring).

    Raises:
        TypeError: for a value of a type it does not know how to write.
    """
    parts: list[str] = []
    _write(value, parts.append)
    return "".join(parts)


def _write(value: Any, out: Callable[[str], None]) -> None:
    if isinstance(value, np.generic):  # before float: numpy's float64 is a float
        _write(value.item(), out)
    elif isinstance(value, enum.Enum):  # before str and int: a StrEnum is a str
        out(f"{type(value).__qualname__}.{value.name}")
    elif value is None or isinstance(value, bool | int | float | str):
        out(repr(value))
    elif isinstance(value, np.ndarray):
        out(_array_text(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        out(f"{type(value).__qualname__}(")
        for field in dataclasses.fields(value):
            if field.compare:
                out(f"{field.name}=")
                _write(getattr(value, field.name), out)
                out(",")
        out(")")
    elif type(value) is tuple and len(value) >= LONG_TUPLE:
        out(_LONG_TUPLES.get_for(value, None, lambda: _sequence_text(value)))
    elif isinstance(value, tuple | list):
        out(_sequence_text(value))
    elif isinstance(value, Mapping):
        out("{")
        for key in sorted(value, key=repr):
            _write(key, out)
            out(":")
            _write(value[key], out)
            out(",")
        out("}")
    else:
        raise TypeError(
            f"no canonical form for a {type(value).__qualname__} ({value!r:.80}): the trace "
            "store's key knows dataclasses, enums, numbers, strings, sequences, mappings and "
            "numpy arrays"
        )


def _sequence_text(value: tuple | list) -> str:
    if len(value) > FLOATS_INLINE and all(type(v) is float for v in value):
        return _array_text(np.asarray(value, dtype=np.float64))
    parts = ["("]
    for item in value:
        _write(item, parts.append)
        parts.append(",")
    parts.append(")")
    return "".join(parts)


def _array_text(array: np.ndarray) -> str:
    data = np.ascontiguousarray(array)
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    digest = hashlib.sha256(little.tobytes()).hexdigest()
    return f"array({little.dtype.str},{list(data.shape)},{digest})"


@functools.cache
def versions() -> str:
    """gemsim's, numpy's and SimPy's versions, as written into every key."""
    import gemsim

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return f"gemsim {gemsim.__version__} numpy {np.__version__} simpy {version('simpy')}"


@functools.cache
def timing_source_sha256() -> str:
    """The sha256 of the timing model's source files, by name and content ('' where gemsim
    runs without its sources)."""
    root = Path(__file__).resolve().parents[2]  # gemsim/app/sweep/ -> gemsim/
    files = sorted((root / "timing").glob("*.py")) + [root / "trace.py"]
    files += sorted(root.glob("_trace_*.py"))  # the trace's columns and its parquet format
    digest = hashlib.sha256()
    try:
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\x00")
            digest.update(path.read_bytes() + b"\x00")
    except OSError:
        return ""
    return digest.hexdigest()
