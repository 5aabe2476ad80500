"""JAX's persistent compilation cache (gemsim/app/_compile_cache.py): on by default in the user's
cache folder, moved or switched off by GEMSIM_CACHE_DIR, the caller's own setting kept, an
unwritable folder a warning and no cache, recorded in provenance, and no result changed by a
cold or a warm cache (two runs in fresh processes against one folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from scenario_docs import quadratic_doc, write_doc

from gemsim.app.execute import _compile_cache
from gemsim.app.execute._compile_cache import (
    CACHE_ENV,
    JAX_DIR,
    JAX_MAX_SIZE,
    JAX_MIN_TIME,
    MAX_BYTES,
    setup_compilation_cache,
)


def test_on_by_default_in_the_users_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(_compile_cache, "_user_cache", lambda: tmp_path / "user")
    env: dict[str, str] = {}
    setting = setup_compilation_cache(env)
    assert setting.dir == str(tmp_path / "user" / "jax") == env[JAX_DIR]
    assert env[JAX_MAX_SIZE] == str(MAX_BYTES) and float(env[JAX_MIN_TIME]) >= 0
    assert (tmp_path / "user" / "jax").is_dir()
    assert setup_compilation_cache(env).dir == setting.dir  # once: the next call keeps it


def test_moved_switched_off_or_the_callers_own(tmp_path):
    moved = {CACHE_ENV: str(tmp_path / "elsewhere")}
    assert setup_compilation_cache(moved).dir == str(tmp_path / "elsewhere" / "jax")
    for off in ("off", "OFF", "0", "false", "none"):
        env = {CACHE_ENV: off}
        assert setup_compilation_cache(env).dir is None and JAX_DIR not in env
    theirs = {JAX_DIR: "/their/cache", CACHE_ENV: str(tmp_path)}
    assert setup_compilation_cache(theirs).dir == "/their/cache"
    assert theirs == {JAX_DIR: "/their/cache", CACHE_ENV: str(tmp_path)}  # nothing added
    disabled = {"JAX_ENABLE_COMPILATION_CACHE": "false"}
    assert setup_compilation_cache(disabled).dir is None and JAX_DIR not in disabled


def test_an_unwritable_folder_is_a_warning_and_no_cache(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {CACHE_ENV: str(blocker / "below")}
    with pytest.warns(RuntimeWarning, match="cannot be written.*compiling without it"):
        assert setup_compilation_cache(env).dir is None
    assert JAX_DIR not in env


def _run_in_a_fresh_process(path, out, env) -> dict:
    cmd = [sys.executable, "-m", "gemsim", "run", str(path), "--out", str(out), "--json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[-1])["run_id"]
    return json.loads((out / run_id / "manifest.json").read_text())


@pytest.mark.bitexact
def test_the_same_bits_with_the_cache_cold_and_warm(tmp_path):
    path = write_doc(tmp_path, quadratic_doc(name="cached"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env[CACHE_ENV] = str(tmp_path / "cache")
    entries = lambda: sorted(p.name for p in (tmp_path / "cache" / "jax").glob("*-cache"))
    cold = _run_in_a_fresh_process(path, tmp_path / "cold", env)
    compiled = entries()
    warm = _run_in_a_fresh_process(path, tmp_path / "warm", env)
    assert compiled and entries() == compiled  # the second process compiled nothing new
    for key in ("trace_sha256", "params_sha256", "final"):
        assert warm[key] == cold[key], key
    for m in (cold, warm):
        cache = m["provenance"]["compilation_cache"]
        assert cache == {"enabled": True, "dir": str(tmp_path / "cache" / "jax"),
                         "max_bytes": MAX_BYTES}  # fmt: skip


def test_setting_the_cache_up_imports_no_jax(tmp_path):
    code = (
        "import sys; from gemsim.app.execute._compile_cache import setup_compilation_cache; "
        "print(setup_compilation_cache().dir, 'jax' in sys.modules)"
    )
    env = {**os.environ, CACHE_ENV: str(tmp_path)}
    env.pop(JAX_DIR, None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.split() == [str(tmp_path / "jax"), "False"], done.stderr
