"""Compiled programs kept between invocations: JAX's persistent compilation cache, on by
default, in the user's cache folder.

`setup_compilation_cache()` runs at the start of what compiles (`gemsim run`, `replay`,
`validate`; `gemsim.run`, `run_file` and `run_sweep` from Python; a Ray task), never when
gemsim is imported. It chooses, once per process:

- a caller who set `JAX_COMPILATION_CACHE_DIR` (or JAX's `jax_compilation_cache_dir`, or
  switched the cache off with `JAX_ENABLE_COMPILATION_CACHE=false`) keeps that choice;
- `GEMSIM_CACHE_DIR=off` (or `0`, `false`, `no`, `none`): no cache;
- otherwise `$GEMSIM_CACHE_DIR/jax`, by default `<user cache folder>/jax`
  (`platformdirs.user_cache_dir("gemsim")`: ~/.cache/gemsim/jax on Linux), bounded to
  `MAX_BYTES` (JAX evicts the least recently used programs past it).

The choice is set in the environment (`JAX_COMPILATION_CACHE_DIR` and friends), so the job
processes of `--jobs`, a local Ray instance's tasks and the worker processes of a real backend
inherit it, and in JAX's configuration where JAX is already imported. A folder that cannot be
written means a warning and no cache, never a failed run. A cache hit returns the executable
XLA compiled for the same program, options and flags: results are bit-identical with the
cache cold and warm (tests/app/test_app_compile_cache.py). Each run's manifest records the
cache in use (`provenance.compilation_cache`).

Deleting the folder only costs compilation time.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import warnings
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "GEMSIM_CACHE_DIR"
OFF_VALUES = ("off", "0", "false", "no", "none")
MAX_BYTES = 2 * 2**30
"""The cache's bound (JAX's `jax_compilation_cache_max_size`)."""
MIN_COMPILE_S = 0.0
"""Programs that took at least this long to compile are kept (JAX's default, 1 s, leaves out
the many programs of a run that compile in less and add up: benchmarks/RESULTS.md, "Figures
the code cites")."""

JAX_DIR = "JAX_COMPILATION_CACHE_DIR"
JAX_ENABLE = "JAX_ENABLE_COMPILATION_CACHE"
JAX_MAX_SIZE = "JAX_COMPILATION_CACHE_MAX_SIZE"
JAX_MIN_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


@dataclass(frozen=True)
class CacheSetting:
    """The compilation cache a process uses: its folder (None: no cache) and why."""

    dir: str | None
    why: str


def setup_compilation_cache(environ: MutableMapping[str, str] | None = None) -> CacheSetting:
    """Choose the compilation cache (see the module docstring) and set it up; what was chosen.

    Args:
        environ: the environment to read and set (default `os.environ`).
    """
    env = os.environ if environ is None else environ
    mine = environ is None or environ is os.environ
    kept = _callers(env, jax_loaded=mine and "jax" in sys.modules)
    if kept is not None:
        return kept
    value = env.get(CACHE_ENV, "").strip()
    if value.lower() in OFF_VALUES:
        return CacheSetting(None, f"off ({CACHE_ENV}={value})")
    folder = (Path(value).expanduser() if value else _user_cache()) / "jax"
    problem = _unwritable(folder)
    if problem is not None:
        warnings.warn(
            f"gemsim: the compilation cache folder {folder} cannot be written ({problem}): "
            f"compiling without it (set {CACHE_ENV} to another folder, or to 'off')",
            RuntimeWarning,
            stacklevel=2,
        )
        return CacheSetting(None, f"off ({folder} cannot be written: {problem})")
    settings = {JAX_DIR: str(folder), JAX_MIN_TIME: repr(MIN_COMPILE_S)}
    if importlib.util.find_spec("filelock") is not None:  # JAX's eviction needs it
        settings[JAX_MAX_SIZE] = str(MAX_BYTES)
    for name, setting in settings.items():
        env.setdefault(name, setting)
    if mine and "jax" in sys.modules:
        _configure_jax(env)
    return CacheSetting(str(folder), f"{CACHE_ENV}" if value else "the user's cache folder")


def _callers(env, *, jax_loaded: bool) -> CacheSetting | None:
    """The caller's own choice, if they made one."""
    if env.get(JAX_ENABLE, "").strip().lower() in ("0", "false", "no", "off"):
        return CacheSetting(None, f"off ({JAX_ENABLE}={env[JAX_ENABLE]})")
    if env.get(JAX_DIR):
        return CacheSetting(env[JAX_DIR], f"{JAX_DIR} (set before gemsim started)")
    if jax_loaded:
        import jax

        if jax.config.jax_compilation_cache_dir:
            return CacheSetting(jax.config.jax_compilation_cache_dir, "jax_compilation_cache_dir")
    return None


def _user_cache() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("gemsim"))


def _unwritable(folder: Path) -> str | None:
    """Why `folder` cannot hold the cache (None: it can)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _configure_jax(env) -> None:
    """JAX read the environment when it was imported: set its configuration too."""
    import jax

    jax.config.update("jax_compilation_cache_dir", env[JAX_DIR])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(env[JAX_MIN_TIME]))
    if JAX_MAX_SIZE in env:
        jax.config.update("jax_compilation_cache_max_size", int(env[JAX_MAX_SIZE]))


def cache_in_use() -> dict[str, object]:
    """The compilation cache of this process, as a run's provenance records it."""
    if "jax" in sys.modules:
        import jax

        folder = jax.config.jax_compilation_cache_dir
        enabled = bool(folder) and jax.config.jax_enable_compilation_cache
        size = jax.config.jax_compilation_cache_max_size
    else:
        folder = os.environ.get(JAX_DIR) or None
        enabled = bool(folder) and os.environ.get(JAX_ENABLE, "").lower() not in ("0", "false")
        size = int(os.environ.get(JAX_MAX_SIZE, "-1"))
    return {"enabled": enabled, "dir": folder, "max_bytes": None if size < 0 else size}
