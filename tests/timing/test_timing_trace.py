"""CommitTrace: construction, validation, hashing and parquet."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    COLUMN_NAMES,
    CommitBudget,
    CommitTrace,
    LogNormal,
    simulate,
)


def _columns(**overrides):
    columns = {
        "time": [0.5, 1.0, 1.0, 2.0],
        "worker": [0, 1, 0, 1],
        "pulled_version": [0, 0, 1, 2],
        "compute_time": [0.5, 1.0, 0.5, 1.0],
        "queue_time": [0.0, 0.0, 0.0, 0.0],
        "service_time": [0.0, 0.0, 0.0, 0.0],
        "n_workers": 2,
        "duration": 2.0,
    }
    columns.update(overrides)
    return columns


def _simulated():
    spec = cluster(
        5,
        LogNormal(1.0, 0.5),
        CommitBudget(400),
        service=LogNormal(0.05, 0.5),
        push=LogNormal(0.1, 0.5),
    )
    return simulate(spec, seed=17)


def test_from_columns_derives_commit_and_staleness():
    trace = CommitTrace.from_columns(**_columns())
    np.testing.assert_array_equal(trace.commit, [0, 1, 2, 3])
    np.testing.assert_array_equal(trace.staleness, [0, 1, 1, 1])
    assert len(trace) == 4
    assert trace.busy_time is None
    for name in COLUMN_NAMES:
        assert not getattr(trace, name).flags.writeable
    assert trace.commit.dtype == np.int64 and trace.time.dtype == np.float64


def test_columns_are_copied_not_shared():
    time = np.array([0.5, 1.0, 1.0, 2.0])
    trace = CommitTrace.from_columns(**_columns(time=time))
    time[0] = 99.0
    assert trace.time[0] == 0.5


BAD = [
    ({"time": [0.5, 1.0, 1.0]}, "equal lengths"),
    ({"commit": [0, 1, 3, 4]}, r"commit must equal 0..len-1; row 2"),
    ({"staleness": [0, 1, 1, 2]}, "staleness must equal commit - pulled_version; row 3"),
    ({"pulled_version": [0, 2, 1, 2]}, "pulled_version must be <= commit; row 1"),
    ({"pulled_version": [0, -1, 1, 2]}, "pulled_version must be >= 0"),
    ({"worker": [0, 2, 0, 1]}, r"worker must be in \[0, 2\); row 1"),
    ({"worker": [0, -1, 0, 1]}, "worker must be in"),
    ({"time": [0.5, 0.4, 1.0, 2.0]}, "time must not decrease; row 1"),
    ({"time": [-0.5, 1.0, 1.0, 2.0]}, "time must be finite and >= 0"),
    ({"time": [0.5, np.nan, 1.0, 2.0]}, "time must be finite"),
    ({"compute_time": [0.5, -1.0, 0.5, 1.0]}, "compute_time must be >= 0 or NaN; row 1"),
    ({"queue_time": [0.0, np.inf, 0.0, 0.0]}, "queue_time must be >= 0 or NaN"),
    ({"duration": 1.5}, r"duration \(1.5\) must be >= the last commit time"),
    ({"duration": -1.0}, "duration must be a finite number >= 0"),
    ({"n_workers": 0}, "n_workers must be an integer >= 1"),
    ({"n_workers": 2.0}, "n_workers must be an integer"),
    ({"busy_time": float("nan")}, "busy_time must be a finite number"),
    ({"worker": [0.0, 1.0, 0.0, 1.0]}, "worker must hold integers"),
    ({"time": [[0.5, 1.0, 1.0, 2.0]]}, "time must be 1-D"),
    ({"service_time": ["a", "b", "c", "d"]}, "service_time must hold numbers"),
]


@pytest.mark.parametrize(("override", "message"), BAD)
def test_invalid_traces_are_rejected_with_the_column_named(override, message):
    with pytest.raises(ValueError, match=message):
        CommitTrace.from_columns(**_columns(**override))


def test_nan_durations_are_allowed_for_unmeasured_columns():
    trace = CommitTrace.from_columns(**_columns(service_time=[np.nan] * 4))
    assert np.isnan(trace.service_time).all()


def test_empty_trace_is_valid():
    empty = {name: [] for name in ("time", "worker", "pulled_version")}
    empty.update(compute_time=[], queue_time=[], service_time=[])
    trace = CommitTrace.from_columns(**empty, n_workers=3, duration=0.0)
    assert len(trace) == 0
    assert trace.sha256() == CommitTrace.from_columns(**empty, n_workers=3, duration=5.0).sha256()


def test_parquet_round_trip_keeps_everything(tmp_path):
    trace = _simulated()
    path = tmp_path / "trace.parquet"
    trace.to_parquet(path)
    back = CommitTrace.from_parquet(path)
    assert back == trace
    assert back.sha256() == trace.sha256()
    assert back.duration == trace.duration and back.busy_time == trace.busy_time
    assert back.n_workers == trace.n_workers
    assert [p.name for p in tmp_path.iterdir()] == ["trace.parquet"]


def test_a_trace_is_encoded_once_and_sent_without_its_encoding(tmp_path):
    """The parquet bytes are kept on the trace (its columns are read-only) for the runs that
    write it into their folders: every write gives the bytes of a fresh encoding; a pickled
    copy (a job process's, a Ray task's) travels without them and writes the same file."""
    import dataclasses
    import pickle

    from gemsim.trace import _ENCODED

    trace = _simulated()
    trace.to_parquet(tmp_path / "a.parquet")
    trace.to_parquet(tmp_path / "b.parquet")
    copy = pickle.loads(pickle.dumps(trace))
    assert _ENCODED in vars(trace) and _ENCODED not in vars(copy)
    copy.to_parquet(tmp_path / "c.parquet")
    fresh = dataclasses.replace(trace)  # a new object of the same columns
    assert _ENCODED not in vars(fresh)
    fresh.to_parquet(tmp_path / "d.parquet")
    files = {(tmp_path / f"{n}.parquet").read_bytes() for n in "abcd"}
    assert len(files) == 1
    assert CommitTrace.from_parquet(tmp_path / "c.parquet") == trace


def test_parquet_without_gemsim_metadata_is_rejected(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"commit": [0]}), path)
    with pytest.raises(ValueError, match="not a gemsim commit trace"):
        CommitTrace.from_parquet(path)


def test_parquet_with_broken_rows_is_rejected(tmp_path):
    path = tmp_path / "trace.parquet"
    _simulated().to_parquet(path)
    table = pq.read_table(path)
    broken = table.set_column(
        table.column_names.index("staleness"), "staleness", pa.array(np.zeros(400, np.int64))
    )
    pq.write_table(broken, path)
    with pytest.raises(ValueError, match="staleness must equal"):
        CommitTrace.from_parquet(path)


def test_sha256_depends_on_every_column_and_n_workers_only():
    base = CommitTrace.from_columns(**_columns())
    digest = base.sha256()
    assert len(digest) == 64
    assert CommitTrace.from_columns(**_columns(duration=9.0)).sha256() == digest
    assert CommitTrace.from_columns(**_columns(n_workers=3)).sha256() != digest
    assert CommitTrace.from_columns(**_columns(queue_time=[0, 0, 0, 1e-12])).sha256() != digest
    assert CommitTrace.from_columns(**_columns(worker=[0, 1, 1, 1])).sha256() != digest
    # Signed zero and NaN payloads are canonical.
    signed = CommitTrace.from_columns(**_columns(queue_time=[-0.0, 0.0, 0.0, 0.0]))
    assert signed.sha256() == digest
    nan_a = np.array([np.nan, 0, 0, 0])
    nan_b = nan_a.copy()
    nan_b.view(np.int64)[0] |= 1  # a different NaN payload
    assert np.isnan(nan_b[0])
    assert (
        CommitTrace.from_columns(**_columns(service_time=nan_a)).sha256()
        == CommitTrace.from_columns(**_columns(service_time=nan_b)).sha256()
    )


def test_to_pandas_has_the_columns_in_order_and_the_attributes():
    trace = _simulated()
    frame = trace.to_pandas()
    assert isinstance(frame, pd.DataFrame)
    assert tuple(frame.columns) == COLUMN_NAMES
    assert len(frame) == len(trace)
    assert frame.attrs == {
        "n_workers": 5,
        "duration": trace.duration,
        "busy_time": trace.busy_time,
    }
    frame.loc[0, "time"] = -1.0  # the frame is a copy
    assert trace.time[0] >= 0


def test_equality_is_by_value():
    a, b = CommitTrace.from_columns(**_columns()), CommitTrace.from_columns(**_columns())
    assert a == b
    assert a != CommitTrace.from_columns(**_columns(busy_time=0.0))
    assert "commits=4" in repr(a)


def _population_trace():
    """A trace with every optional column (client, local steps, dropped, buffer) and flags."""
    rng = np.random.default_rng(3)
    n = 300
    times = np.sort(rng.random(n)) * 10
    worker = rng.integers(0, 4, n)
    fresh = rng.random(n) < 0.5
    fresh[[int(np.argmax(worker == w)) for w in range(4)]] = True  # each worker's first
    return CommitTrace.from_columns(
        time=times,
        worker=worker,
        pulled_version=np.zeros(n, np.int64),
        compute_time=rng.random(n),
        queue_time=np.zeros(n),
        service_time=np.zeros(n),
        fresh=fresh,
        client=rng.integers(0, 50, n),
        local_steps=rng.integers(1, 5, n),
        buffer=rng.integers(0, 3, n),
        n_workers=4,
        n_clients=50,
        duration=10.0,
    )


@pytest.mark.parametrize("make", [_simulated, _population_trace])
def test_a_trace_file_is_the_one_pyarrows_own_conversion_writes(tmp_path, make):
    """Columns go to arrow from their buffers, not through `pa.array` (which imports
    pandas): the file is byte for byte the one pyarrow's own conversion of the same columns
    and schema metadata writes."""
    trace = make()
    trace.to_parquet(tmp_path / "ours.parquet")
    ours = pq.ParquetFile(tmp_path / "ours.parquet").read()
    reference = pa.table({name: np.asarray(v) for name, v in trace.columns().items()})
    reference = reference.replace_schema_metadata(ours.schema.metadata)
    pq.write_table(reference, tmp_path / "reference.parquet")
    assert ours.schema == reference.schema
    assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()


@pytest.mark.parametrize("make", [_simulated, _population_trace])
def test_a_trace_reads_back_from_a_file_of_many_row_groups(tmp_path, make):
    """Read from the arrow buffers of every chunk (a row group each, booleans bit-packed at
    odd offsets): the same trace as pyarrow's own `to_numpy` of the same table gives."""
    trace = make()
    trace.to_parquet(tmp_path / "one.parquet")
    table = pq.ParquetFile(tmp_path / "one.parquet").read()
    pq.write_table(table, tmp_path / "many.parquet", row_group_size=37)
    assert pq.ParquetFile(tmp_path / "many.parquet").num_row_groups > 1
    back = CommitTrace.from_parquet(tmp_path / "many.parquet")
    assert back == trace and back.sha256() == trace.sha256()
    read = pq.read_table(tmp_path / "many.parquet")
    for name, values in back.columns().items():
        expected = read.column(name).to_numpy()
        assert values.dtype == expected.dtype and np.array_equal(values, expected), name


def test_writing_and_reading_a_trace_leaves_pandas_unimported(tmp_path):
    """`gemsim trace`, and the trace store of `gemsim run` before its runs start, need no
    pandas (0.2-0.3 s to import)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gemsim.timing import CommitBudget, LogNormal, simulate\n"
        "from gemsim.timing import ClusterSpec, WorkerSpec, CommitTrace\n"
        "spec = ClusterSpec(workers=tuple(WorkerSpec(LogNormal(1.0, 0.5)) for _ in range(3)),"
        " budget=CommitBudget(50))\n"
        "trace = simulate(spec, seed=1)\n"
        f"trace.to_parquet({str(tmp_path / 't.parquet')!r})\n"
        f"assert CommitTrace.from_parquet({str(tmp_path / 't.parquet')!r}) == trace\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
