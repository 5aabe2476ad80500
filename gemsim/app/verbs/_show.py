"""`gemsim show`: what a scenario file expands to, or what a run folder holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gemsim import config, results
from gemsim._checks import UserError

from ..record._identity import RunIdentity, RunKind
from ..report._partition_report import partition_report
from ..report._speed_deciles import run_deciles


def show_file(
    path: str | Path,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    out: str | Path | None = None,
    backend: str = "sim",
) -> dict[str, Any]:
    """The scenario resolved (defaults filled in) and every expanded run: its id, sweep point,
    seed, whether `gemsim run --resume` into `out` (default results/<name>) would skip it, and
    the partition of its training set where it splits one among the workers (as text)."""
    path = Path(path)
    scenario = config.load_scenario(path, overrides)
    runs = config.expand(scenario, source=str(path), base_dir=path.parent)
    out_dir = Path(out) if out is not None else Path("results") / scenario.name
    kind = RunKind(backend)
    listed = []
    for expanded in runs:
        who = RunIdentity.of(expanded, kind)
        finished = results.is_finished(out_dir / who.run_id, who.identity, kind.value)
        listed.append(
            {
                "run_id": who.run_id,
                "kind": kind.value,
                "sweep": expanded.sweep_values,
                "seed": expanded.scenario.seed,
                "repeat": expanded.repeat,
                "resume_skips": finished,
            }
        )
        partition, speed_data = partition_report(expanded.scenario)
        if partition is not None:
            listed[-1]["partition"] = partition
        if speed_data is not None:
            listed[-1]["speed_data"] = speed_data
    resolved = scenario.model_dump(mode="json")
    return {"file": str(path), "results": str(out_dir), "scenario": resolved, "runs": listed}


def show_run(run_dir: str | Path) -> dict[str, Any]:
    """A run folder's manifest (provenance included) and, where the folder has a worker
    summary, ``by_speed_decile`` (computed from the folder, not stored in the manifest: the
    data owners by speed decile, `run_deciles`)."""
    run_dir = Path(run_dir)
    if not (run_dir / "manifest.json").is_file():
        raise UserError(str(run_dir), "no such run folder (no manifest.json in it)")
    try:
        manifest = results.read_manifest(run_dir)
    except (OSError, ValueError) as exc:
        raise UserError(str(run_dir / "manifest.json"), str(exc)) from None
    deciles = run_deciles(run_dir, manifest)
    return manifest if deciles is None else {**manifest, "by_speed_decile": deciles}


def run_summary_lines(shown: Mapping[str, Any]) -> list[str]:
    """The lines of `gemsim show RUN` for the heterogeneity measures of the manifest's `final`
    block and the owners by speed decile; none for a run that has neither."""
    final = shown.get("final") or {}
    return [*_measure_lines(final), *_decile_lines(shown.get("by_speed_decile"))]


def _measure_lines(final: Mapping[str, Any]) -> list[str]:
    classes = results.class_keys(final)
    groups = [k for k in results.summary_order(final) if _is_group(k)]
    worker = [k for k in ("worker_accuracy_worst", "worker_accuracy_p10", "worker_accuracy_mean")
              if k in final]  # fmt: skip
    losses = [k for k in ("worker_loss_worst", "worker_loss_p90", "worker_loss_mean") if k in final]
    times = [k for k in results.summary_order(final) if k.startswith("time_to_accuracy_")]
    lines = []
    if "best_test_accuracy" in final:
        lines.append(f"  best test acc   {_g(final['best_test_accuracy'])}")
    if classes:
        lines.append("  per class       " + "  ".join(
            f"{k.rsplit('_', 1)[1]}: {_g(final[k])}" for k in classes))  # fmt: skip
    if groups:
        lines.append("  class groups    " + ", ".join(
            f"{k.removeprefix('test_accuracy_')} {_g(final[k])}" for k in groups))  # fmt: skip
    if worker:
        lines.append("  worker acc      " + ", ".join(
            f"{k.rsplit('_', 1)[1]} {_g(final[k])} (best {_g(final.get('best_' + k))})"
            for k in worker))  # fmt: skip
    if losses:
        lines.append("  worker loss     " + ", ".join(
            f"{k.rsplit('_', 1)[1]} {_g(final[k])}" for k in losses))  # fmt: skip
    for k in times:
        value = final[k]
        shown = "never" if value is None or value != value else f"{_g(value)} s"
        lines.append(f"  {k:<40} {shown}")
    return lines


def _is_group(key: str) -> bool:
    return key.startswith("test_accuracy_") and not key.startswith("test_accuracy_class_")


def _decile_lines(deciles: Mapping[str, Any] | None) -> list[str]:
    if not deciles or not deciles.get("rows"):
        return []
    rows = deciles["rows"]
    extra = [(k, t) for k, t in (("shard_size", "shard size"), ("majority_share", "top class"),
             ("accuracy", "accuracy")) if k in rows[0]]  # fmt: skip
    owners = deciles["owners"]
    lines = [
        f"  by speed decile (0: slowest; speed: {deciles['speed']})",
        f"    decile  speed from      to  {owners:>7}  commits  mean staleness"
        + "".join(f"  {t:>10}" for _, t in extra),
    ]
    for row in rows:
        lines.append(
            f"    {row['decile']:>6}  {row['speed_low']:>10.4g}  {row['speed_high']:>6.4g}"
            f"  {row['owners']:>7,}  {row['commits']:>7,}  {_g(row['staleness_mean']):>14}"
            + "".join(f"  {_g(row[k]):>10}" for k, _ in extra)
        )
    return lines


def _g(value: Any, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, spec)
