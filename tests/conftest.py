"""Shared fixtures, and one JAX compilation cache for the whole test session.

XLA compiling small programs takes a third of the test processes' time (about 2,300
compilations of 1,600 distinct programs in one run), and many tests compile the same ones
(the same problem and rule in several files; every worker process of a real backend
compiles the server's programs). The session points JAX's persistent compilation cache at a
fresh temporary folder (through the environment, so worker processes, notebook kernels and
`gemsim` subprocesses share it) and caches every program. A cache hit returns the executable
XLA compiled for the same program, options and `XLA_FLAGS`, so no result changes; the folder
is removed when the session ends. Nothing else changes process-wide JAX settings.

Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, as on some CI images) the session
writes gemsim's once and removes it at the end (`_write_bytecode`).

Property tests draw their examples from a fixed seed, so the suite gives one result on every
run and a landing is never blocked by an example nobody's change produced. To search afresh
(and find new failures), run with `HYPOTHESIS_PROFILE=explore`.
"""

import contextlib
import fcntl
import importlib.util
import os
import pickle
import py_compile
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parents[1]

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # set here: before anything imports JAX
    _CACHE = tempfile.mkdtemp(prefix="gemsim-tests-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
else:
    _CACHE = None  # the caller's own cache: left as it is


_BYTECODE: list[Path] = []  # what this session wrote (`_write_bytecode`), removed at its end


def pytest_configure(config):
    if sys.dont_write_bytecode and "PYTEST_XDIST_WORKER" not in os.environ:
        _BYTECODE.extend(_write_bytecode())


def pytest_sessionfinish(session, exitstatus):
    if _CACHE is not None:
        shutil.rmtree(_CACHE, ignore_errors=True)
    for pyc in _BYTECODE:
        pyc.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            pyc.parent.rmdir()  # the __pycache__ folder, if nothing else is in it


def _write_bytecode() -> list[Path]:
    """gemsim's bytecode, for a session run where Python writes none (PYTHONDONTWRITEBYTECODE
    is set, as on some CI images): it still reads bytecode, so writing it once here spares the
    suite's 200-odd Python processes (test processes, workers, commands, kernels) compiling
    gemsim's sources each time (0.1 s apiece, benchmarks/RESULTS.md). Only missing files are
    written, and they are removed when the session ends."""
    spec = importlib.util.find_spec("gemsim")  # where it is imported from; not imported here
    written = []
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        for source in sorted(Path(folder).rglob("*.py")):
            pyc = Path(importlib.util.cache_from_source(str(source)))
            if pyc.exists():
                continue
            try:
                py_compile.compile(str(source), str(pyc), doraise=True)
            except (OSError, py_compile.PyCompileError):
                continue  # a read-only checkout, or a source its import will report on
            written.append(pyc)
    return written


def pytest_xdist_auto_num_workers(config):
    """One test process more than there are cores, at most 4. A third of the suite's time is
    tests that wait on the clock (real runs that emulate compute times, churn schedules,
    processes starting and stopping) with a core idle; the extra process fills it. On two
    cores: 484 s with three processes, 502-511 s with two. More cost time: every process
    compiles its own programs (four: 509 s and 905 s of CPU against 491 s and 854 s for
    three, the same session), and the real-backend tests start several JAX processes each."""
    del config
    return max(1, min(len(os.sched_getaffinity(0)) + 1, 4))


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def computed_once(tmp_path_factory) -> Callable:
    """`computed_once(key, compute)`: `compute()`'s value, computed by one test process of the
    session and read back (pickled) by the others. For expensive module fixtures: the default
    distribution keeps a module's tests in one process, but `--dist worksteal` or `load`
    (given on the command line) spread them, and each process would build the fixture."""
    base = tmp_path_factory.getbasetemp()
    # Every xdist worker's base folder sits in one folder of the session.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def get(key: str, compute: Callable):
        path = root / f"computed-once-{key}.pickle"
        with open(root / f"computed-once-{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait for the one computing
            if path.exists():
                return pickle.loads(path.read_bytes())
            value = compute()
            partial = path.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(value))
            partial.replace(path)
            return value

    return get
