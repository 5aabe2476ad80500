"""Run folders: round trip, strict manifests, atomicity, resume semantics, params hash."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from results_fakes import fake_manifest, fake_metrics, fake_params, fake_trace

from gemsim.results import (
    MANIFEST_KEYS,
    atomic_write_text,
    is_finished,
    load_results,
    params_sha256,
    read_manifest,
    read_run,
    write_run,
)
from gemsim.results import _run_folder as run_folder
from gemsim.types import Status


def _parts(run_id="r1", scale=1.0, **over):
    trace = fake_trace(25, 3, seed=1)
    params = fake_params(scale)
    manifest = fake_manifest(run_id, params, n_commits=len(trace), **over)
    return manifest, trace, fake_metrics(trace, gem=True), params


def _strict(text: str):
    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _hidden(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


def test_round_trip_keeps_values_dtypes_and_params(tmp_path):
    manifest, trace, metrics, params = _parts(status=Status.DIVERGED, wall_seconds=np.float32(2))
    run_dir = write_run(tmp_path, "r1", manifest, trace, metrics, params)
    assert run_dir == tmp_path / "r1"
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(run_folder.RUN_FILES)
    record = read_run(run_dir)
    assert record.trace == trace and record.trace.sha256() == trace.sha256()
    pd.testing.assert_frame_equal(record.metrics, metrics)
    assert record.metrics["train_loss"].isna().sum() == metrics["train_loss"].isna().sum()
    assert list(record.params) == sorted(params)
    for key, value in params.items():
        assert record.params[key].dtype == value.dtype
        assert record.params[key].shape == value.shape
        np.testing.assert_array_equal(record.params[key], value)
    assert params_sha256(record.params) == manifest["params_sha256"]
    assert record.run_id == "r1" and record.status is Status.DIVERGED
    assert record.manifest["status"] == "diverged" and record.manifest["wall_seconds"] == 2.0


def test_frames_are_the_files_pandas_writes(tmp_path):
    """A run's frames are converted in the writing thread (no pyarrow thread pool per frame),
    yet their files hold the bytes of ``DataFrame.to_parquet`` (no index, no dictionary
    encoding), above pyarrow's threshold for its pool (100 rows per CPU) too."""
    import io

    trace = fake_trace(100 * (os.cpu_count() or 1) + 50, 3, seed=2)
    params = fake_params(1.0)
    metrics = fake_metrics(trace, gem=True)
    run_dir = write_run(
        tmp_path, "r1", fake_manifest("r1", params, n_commits=len(trace)), trace, metrics, params
    )
    expected = io.BytesIO()
    metrics.to_parquet(expected, index=False, engine="pyarrow", use_dictionary=False)
    assert (run_dir / run_folder.METRICS_FILE).read_bytes() == expected.getvalue()
    pd.testing.assert_frame_equal(read_run(run_dir).metrics, metrics)


def test_manifest_is_strict_stable_json(tmp_path):
    manifest, trace, metrics, params = _parts(
        staleness={"mean": float("inf"), "var": np.float64("nan"), "max": np.int64(9)},
        sweep={"optimizer": {"rule": "gem", "lr": 0.1}, "workers.count": 8},
    )
    write_run(tmp_path, "r1", manifest, trace, metrics, params)
    text = (tmp_path / "r1" / "manifest.json").read_text()
    data = _strict(text)
    assert "NaN" not in text and "Infinity" not in text
    assert data["final"]["test_accuracy"] is None
    assert data["staleness"] == {"mean": None, "var": None, "max": 9}
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert set(MANIFEST_KEYS) <= set(data)
    assert read_manifest(tmp_path / "r1") == data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": None}, "seed"),
        ({"status": "done"}, "status"),
        ({"final": {"train_loss": 1.0}}, "final"),
        ({"staleness": {"mean": 1.0, "var": 1.0}}, "staleness"),
        ({"params_sha256": "0" * 64}, "params_sha256"),
        ({"run_id": "other"}, "run_id"),
        ({"repeat": True}, "repeat"),
        ({"error": 3}, "error"),
        ({"sweep": None}, "sweep"),
        ({"config": {"bad": object()}}, "config.bad"),
    ],
)
def test_write_refuses_bad_manifests(tmp_path, change, message):
    manifest, trace, metrics, params = _parts()
    with pytest.raises((ValueError, TypeError), match=message):
        write_run(tmp_path, "r1", manifest | change, trace, metrics, params)
    assert not (tmp_path / "r1").exists() and _hidden(tmp_path) == []


def test_write_refuses_missing_key(tmp_path):
    manifest, trace, metrics, params = _parts()
    del manifest["config_hash"]
    with pytest.raises(ValueError, match="config_hash"):
        write_run(tmp_path, "r1", manifest, trace, metrics, params)


def test_crash_mid_write_leaves_nothing_and_keeps_previous_run(tmp_path, monkeypatch):
    def crash(path, params):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(run_folder, "_write_params", crash)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_run(tmp_path, "new", *_parts("new"))
    assert list(tmp_path.iterdir()) == []

    monkeypatch.undo()
    old = _parts("r1")
    write_run(tmp_path, "r1", *old)
    monkeypatch.setattr(run_folder, "_write_params", crash)
    with pytest.raises(RuntimeError):
        write_run(tmp_path, "r1", *_parts("r1", scale=3.0))
    assert [p.name for p in tmp_path.iterdir()] == ["r1"]
    assert is_finished(tmp_path / "r1", old[0]["config_hash"])
    assert params_sha256(read_run(tmp_path / "r1").params) == old[0]["params_sha256"]


def test_failed_swap_puts_previous_run_back(tmp_path, monkeypatch):
    old = _parts("r1")
    write_run(tmp_path, "r1", *old)
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst) == tmp_path / "r1" and ".tmp-" in Path(src).name:
            raise OSError("rename failed")
        real_rename(src, dst)

    monkeypatch.setattr(run_folder.os, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        write_run(tmp_path, "r1", *_parts("r1", scale=3.0))
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["r1"]
    assert read_manifest(tmp_path / "r1")["params_sha256"] == old[0]["params_sha256"]


def test_rewrite_replaces_whole_folder(tmp_path):
    write_run(tmp_path, "r1", *_parts("r1"))
    new = _parts("r1", scale=5.0)
    write_run(tmp_path, "r1", *new)
    assert [p.name for p in tmp_path.iterdir()] == ["r1"]
    assert read_manifest(tmp_path / "r1")["params_sha256"] == new[0]["params_sha256"]


def test_killed_process_leaves_only_a_hidden_folder(tmp_path):
    write_run(tmp_path, "done", *_parts("done"))
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from results_fakes import fake_manifest, fake_metrics, fake_params, fake_trace
        from gemsim.results import _run_folder as run_folder

        def die(path, manifest):
            os._exit(3)  # killed after the data files, before the manifest

        run_folder._write_manifest = die
        trace = fake_trace(10, 2, seed=0)
        params = fake_params()
        manifest = fake_manifest("r1", params)
        run_folder.write_run({str(tmp_path)!r}, "r1", manifest, trace,
                             fake_metrics(trace, gem=False), params)
        """
    )
    # It imports gemsim and writes a tiny folder (seconds); the bound allows a machine 3x
    # slower and loaded, with margin, and only limits how long a hung child is waited for.
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stderr
    assert not (tmp_path / "r1").exists()
    (left,) = _hidden(tmp_path)
    assert left.startswith(".r1.tmp-")
    assert not is_finished(tmp_path / left, "hash-r1")
    assert set(load_results(tmp_path)["run_id"]) == {"done"}


def test_is_finished_semantics(tmp_path):
    write_run(tmp_path, "ok", *_parts("ok"))
    write_run(tmp_path, "div", *_parts("div", status="diverged"))
    write_run(tmp_path, "bad", *_parts("bad", status="failed", error="boom"))
    assert is_finished(tmp_path / "ok", "hash-ok")
    assert is_finished(tmp_path / "div", "hash-div")
    assert not is_finished(tmp_path / "ok", "hash-other")
    assert not is_finished(tmp_path / "bad", "hash-bad")
    assert not is_finished(tmp_path / "missing", "hash-ok")

    (tmp_path / "div" / "params.npz").unlink()
    assert not is_finished(tmp_path / "div", "hash-div")
    manifest = tmp_path / "ok" / "manifest.json"
    manifest.write_text("[1, 2]")
    assert not is_finished(tmp_path / "ok", "hash-ok")
    manifest.write_text('{"status": "ok", "config_hash": ')
    assert not is_finished(tmp_path / "ok", "hash-ok")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_manifest(tmp_path / "ok")
    manifest.unlink()
    assert not is_finished(tmp_path / "ok", "hash-ok")


def test_params_sha256_is_canonical():
    params = fake_params()
    digest = params_sha256(params)
    assert digest == params_sha256(dict(reversed(list(params.items()))))
    assert digest == params_sha256({k: v.copy() for k, v in params.items()})
    swapped = params | {"conv/0/b": params["conv/0/b"].astype(">f4")}
    assert digest == params_sha256(swapped)  # byte order of the host does not matter
    strided = params | {"conv/0/w": np.asfortranarray(params["conv/0/w"])}
    assert digest == params_sha256(strided)
    changes = [
        params | {"conv/0/b": params["conv/0/b"] + 1},
        params | {"conv/0/b": params["conv/0/b"].astype(np.float64)},
        params | {"conv/0/w": params["conv/0/w"].reshape(3, 2)},
        {("x" + k): v for k, v in params.items()},
        {k: v for k, v in params.items() if k != "file"},
    ]
    assert len({digest, *(params_sha256(p) for p in changes)}) == 1 + len(changes)


def test_params_sha256_matches_documented_bytes():
    tiny = {"b": np.array([1, 2], dtype=np.int32), "a": np.array(0.5, dtype=np.float32)}
    chunks = [b"a", b"<f4", b"", struct.pack("<f", 0.5)]  # key, dtype, shape, data
    chunks += [b"b", b"<i4", b"2", struct.pack("<2i", 1, 2)]
    expected = hashlib.sha256(b"".join(struct.pack("<Q", len(c)) + c for c in chunks))
    assert params_sha256(tiny) == expected.hexdigest()
    # Pinned so that the canonical byte format cannot drift between versions.
    assert params_sha256(tiny) == (
        "5497d235bc4f3c484217edc2279d0b4733e8cdf5d5406f8defe79af61aacc506"
    )


def test_atomic_write_text(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "note.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"

    def fail(src, dst):
        raise OSError("no replace")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write_text(target, "three")
    monkeypatch.undo()
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["note.txt"]
