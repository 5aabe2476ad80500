"""Provenance: what a run needs to be reproduced elsewhere, recorded in its manifest.

gemsim's version and, when it runs from a git checkout, the commit and whether the tree had
changes; Python, platform and CPU; JAX's backend and device, and its compilation cache
(`_compile_cache.py`); the version of every runtime
dependency declared by the installed package; UTC start and end; the command line (or the
Python call) that started the run.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from ..execute._compile_cache import cache_in_use

F = TypeVar("F", bound=Callable[..., Any])

# Packages whose version matters to a result even if the metadata of gemsim does not list
# them (the compiled half of JAX).
_ALWAYS = ("jax", "jaxlib", "numpy", "simpy", "optax", "pydantic")


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@functools.cache
def package_versions() -> dict[str, str]:
    """gemsim and every runtime dependency it declares, with the installed versions."""
    names = ["gemsim", *_ALWAYS]
    try:
        for requirement in metadata.requires("gemsim") or ():
            if "extra ==" in requirement:
                continue
            match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
            if match:
                names.append(match.group(0))
    except metadata.PackageNotFoundError:
        pass
    found = {}
    for name in dict.fromkeys(n.lower() for n in names):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


@functools.cache
def git_state() -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the checkout gemsim runs from; None values outside one."""
    here = Path(__file__).resolve().parents[3]  # gemsim/app/record/ -> the checkout
    try:
        top = _git(here, "rev-parse", "--show-toplevel")
        if Path(top).resolve() != here:  # gemsim is installed, not run from its checkout
            return {"commit": None, "dirty": None}
        commit = _git(here, "rev-parse", "HEAD")
        dirty = bool(_git(here, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout.strip()


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device() -> dict[str, Any]:
    """JAX's default backend and device kind, if JAX is loaded (a timing-only run has none)."""
    if "jax" not in sys.modules:
        return {"jax_backend": None, "device_kind": None, "device_count": None}
    import jax

    devices = jax.devices()
    return {
        "jax_backend": jax.default_backend(),
        "device_kind": devices[0].device_kind if devices else None,
        "device_count": len(devices),
    }


_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("gemsim_call", default=None)


def api_call(name: str) -> Callable[[F], F]:
    """Mark a public API function (``@api_call("gemsim.run")``): while it runs, and unless the
    `gemsim` command called it, `command_line` is the call, e.g. ``gemsim.run_sweep('study.yaml',
    jobs=2)``. Only the outermost marked call counts (``run_sweep`` calls ``run``)."""

    def mark(func: F) -> F:
        @functools.wraps(func)
        def marked(*args: Any, **kwargs: Any) -> Any:
            if _CALL.get() is not None:
                return func(*args, **kwargs)
            token = _CALL.set(render_call(name, args, kwargs))
            try:
                return func(*args, **kwargs)
            finally:
                _CALL.reset(token)

        return marked  # type: ignore[return-value]

    return mark


def render_call(name: str, args: tuple, kwargs: dict[str, Any]) -> str:
    """``name(arg, key=value)`` with each argument's repr (paths as strings, a scenario by its
    name, anything long cut), as a reader would type it again."""
    shown = [_argument(a) for a in args] + [f"{k}={_argument(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(shown)})"


def _argument(value: Any, limit: int = 120) -> str:
    if isinstance(value, Path):
        return repr(str(value))
    scenario = getattr(value, "scenario", value)  # an expanded run: its scenario
    if type(scenario).__name__ == "Scenario" and hasattr(scenario, "name"):
        return f"<{type(value).__name__} {scenario.name!r}>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _from_the_command() -> bool:
    """Whether the `gemsim` command is running (its process, or a click invocation of it)."""
    # A click context is active inside a command (also under typer's CliRunner in tests);
    # recent typer releases carry their own copy of click.
    for name in ("typer._click.globals", "click.globals"):
        module = sys.modules.get(name)
        if module is not None and module.get_current_context(silent=True) is not None:
            return True
    first = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    return first is not None and (
        first.name == "gemsim"
        or (first.parent.name == "gemsim" and first.name in ("cli.py", "__main__.py"))
    )


def command_line() -> str:
    """How this run was started: the `gemsim` command (also as `python -m gemsim`), the API
    call marked with `api_call` that is running, or else the Python program."""
    call = _CALL.get()
    if call is not None and not _from_the_command():
        return call
    argv = list(sys.argv)
    if not argv or not argv[0]:
        return "python (interactive)"
    first = Path(argv[0])
    ours = first.parent.name == "gemsim" and first.name in ("cli.py", "__main__.py")
    if first.name == "gemsim" or ours:
        argv[0] = "gemsim"
    return " ".join(argv)


def provenance(*, started_at: str, ended_at: str, call: str | None = None) -> dict[str, Any]:
    """Everything above as one plain mapping; ``call`` names a Python API call (by default
    the one `api_call` marked, or the command line)."""
    return {
        "gemsim": package_versions().get("gemsim"),
        **git_state(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        **device(),
        "compilation_cache": cache_in_use(),
        "packages": package_versions(),
        "started_at": started_at,
        "ended_at": ended_at,
        "command": call or command_line(),
    }
