"""`gemsim plot`: the standard figures that fit a results folder (or one run folder)."""

from __future__ import annotations

from pathlib import Path

from gemsim._checks import UserError


def plot_results(results_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Write every figure that fits the runs found to PNG files; returns their paths."""
    from gemsim.results import plot_run_folder

    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "no such results folder")
    return plot_run_folder(results_dir, Path(out) if out is not None else results_dir / "plots")
