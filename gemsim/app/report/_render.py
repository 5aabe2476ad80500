"""Text the command line prints: summary tables, reports, listings (JSON comes from
`_output`)."""

from __future__ import annotations

import math
from typing import Any

from gemsim.timing import format_histogram

from ..verbs._ls import render_listing as render_listing
from ..verbs._show import run_summary_lines
from ._population_report import population_lines

BASE = ("train_loss", "test_loss", "test_accuracy")  # the final line's; the others follow it


def render_summary(rows) -> str:
    header = (
        f"{'run id':<12}  {'kind':<7}  {'status':<8}  {'train loss':>10}  {'test acc':>8}  "
        f"{'staleness':>9}  {'wall s':>7}  sweep"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        status = r.status + ("*" if r.skipped else "")
        lines.append(
            f"{r.run_id:<12}  {r.kind:<7}  {status:<8}  {r.train_loss:>10.4f}  "
            f"{r.test_accuracy:>8.4f}  {r.staleness_mean:>9.2f}  {r.wall_seconds:>7.1f}  "
            f"{_sweep(r.sweep)}"
        )
    if any(r.skipped for r in rows):
        lines.append("* finished earlier; skipped by --resume")
    return "\n".join(lines)


def render_validation(report) -> str:
    verdict = {True: "ok", False: "FAILED"}
    c = report.checks
    lines = [
        f"replay      max |diff| {report.replay_max_abs_diff:.3g} "
        f"(bar {report.replay_bar:.3g})  {verdict[c['replay']]}",
        f"staleness   TV {report.staleness_tv:.3f} "
        f"(threshold {report.staleness_tv_threshold:.3f})  {verdict[c['staleness']]}",
        f"throughput  real/sim {report.throughput_ratio:.3f} "
        f"({report.real_commits_per_s:.1f} vs {report.simulated_commits_per_s:.1f} commits/s, "
        f"band {report.throughput_band[0]}-{report.throughput_band[1]})  "
        f"{verdict[c['throughput']]}",
        f"{'passed' if report.passed else 'FAILED'}; real run {report.real_run}, "
        f"calibrated scenario {report.calibrated_scenario}",
    ]
    return "\n".join(lines)


def render_fits(rows) -> str:
    header = f"{'what':<24}  {'n':>7}  {'KS p':>8}  law"
    lines = [header, "-" * len(header)]
    for r in rows:
        p = "-" if r["ks_pvalue"] is None else f"{r['ks_pvalue']:.3g}"
        lines.append(f"{r['what']:<24}  {r['n']:>7}  {p:>8}  {r['law']}")
        if r["family"] == "empirical":
            lines.append(f"{'':<24}  {'':>7}  {'':>8}  ({r['reason']})")
    return "\n".join(lines)


def render_trace_report(report: dict) -> str:
    head = f"run {report['run_id']}  seed {report['seed']}" if "seed" in report else ""
    head = head or f"run {report['run_id']}"
    head += f"  sweep {report['sweep']}" if report["sweep"] else ""
    lines = [
        head,
        f"  commits             {report['commits']}",
        f"  virtual seconds     {report['duration']:.6g}",
        f"  commits / second    {_g(report['commits_per_second'])}",
        f"  PS utilisation      {_g(report['ps_utilisation'], '.3f')}",
        f"  staleness mean      {_g(report['staleness_mean'])}   var {_g(report['staleness_var'])}",
        f"  staleness p50/p99   {_g(report['staleness_p50'])} / {_g(report['staleness_p99'])}"
        f"   max {report['staleness_max']}",
    ]
    lines += _protocol_lines(report)
    lines += population_lines(report.get("population"))
    workers = report["per_worker"]
    shown = workers if len(workers) <= 16 else workers[:8] + workers[-8:]
    extra = [c for c in _WORKER_COLUMNS if _shows(report, c[0])]
    lines.append(
        ("    slot" if report.get("population") else "  worker")
        + "  commits  mean staleness"
        + "".join(f"  {title:>{width}}" for _, title, width, _ in extra)
        + ("  (first and last 8)" if shown != workers else "")
    )
    lines += [
        f"  {w['worker']:>6}  {w['commits']:>7}  {_g(w['staleness_mean']):>14}"
        + "".join(f"  {_g(w.get(key), spec):>{width}}" for key, _, width, spec in extra)
        for w in shown
    ]
    lines.append("  staleness histogram")
    lines.append(format_histogram(report["histogram"]))
    if report.get("partition"):
        lines.append("  partition of the training set")
        lines += [f"  {line}" for line in report["partition"].splitlines()]
    if report.get("trace_path"):
        lines.append(f"  trace written to {report['trace_path']}")
    if report.get("clients_path"):
        lines.append(f"  clients written to {report['clients_path']}")
    return "\n".join(lines)


# Per-worker columns of `gemsim trace` shown when they hold anything: (key, title, width, format)
_WORKER_COLUMNS = (
    ("availability", "up %", 6, ".1%"),
    ("waited_seconds", "waited s", 9, ".4g"),
    ("lost", "lost", 5, "d"),
    ("lost_compute_seconds", "lost s", 8, ".4g"),
    ("cancelled", "cancelled", 9, "d"),
    ("cancelled_compute_seconds", "cancel s", 8, ".4g"),
)


def _shows(report: dict, key: str) -> bool:
    """Whether a per-worker column says anything: availability below 1, other figures > 0."""
    values = [w.get(key) for w in report["per_worker"]]
    if key == "availability":
        return any(v is not None and not math.isnan(v) and v < 1.0 for v in values)
    return any(v for v in values)


def _protocol_lines(report: dict) -> list[str]:
    """Protocol, availability, time held by the protocol and work lost or cancelled."""
    if "protocol" not in report:
        return []
    lines = [f"  protocol            {report['protocol']}"]
    if _shows(report, "availability"):
        lines.append(f"  availability mean   {_g(report['availability_mean'], '.2%')}")
    if report["waited_seconds"]:
        lines.append(f"  waited (protocol)   {_g(report['waited_seconds'])} worker-seconds")
    if report["lost"]:
        lines.append(
            f"  lost (going down)   {report['lost']} gradients, "
            f"{_g(report['lost_compute_seconds'])} s of compute"
        )
    if report["cancelled"]:
        # by k_sync's k-th arrival, or by the server's stops (`optimizer.stops`, `restarts`)
        label = "cancelled (k_sync)" if report["protocol"] == "k_sync" else "cancelled (stops)"
        lines.append(
            f"  {label:<18}  {report['cancelled']} gradients, "
            f"{_g(report['cancelled_compute_seconds'])} s of compute"
        )
    return lines


def render_show_file(shown: dict[str, Any]) -> str:
    import yaml

    lines = [
        f"# {shown['file']}: the resolved scenario",
        yaml.safe_dump(shown["scenario"], sort_keys=False).rstrip(),
    ]
    lines.append(
        f"# {len(shown['runs'])} run(s); --resume in {shown['results']} would skip those marked *"
    )
    for r in shown["runs"]:
        mark = "*" if r["resume_skips"] else " "
        lines.append(f"{mark} {r['run_id']}  seed {r['seed']:<6} {_sweep(r['sweep'])}")
    return "\n".join(lines + _partitions(shown["runs"]))


def _partitions(runs: list[dict[str, Any]]) -> list[str]:
    """Each distinct partition of the runs' training sets, with the runs that share it."""
    shared: dict[str, list[str]] = {}
    for r in runs:
        if r.get("partition"):
            shared.setdefault(r["partition"], []).append(r["run_id"])
    lines = []
    for text, ids in shared.items():
        who = "every run" if len(ids) == len(runs) else "run(s) " + ", ".join(ids)
        lines.append(f"# partition of the training set among the workers ({who})")
        lines += [f"  {line}" for line in text.splitlines()]
    return lines


def render_show_run(manifest: dict[str, Any]) -> str:
    prov = manifest.get("provenance") or {}
    final = manifest.get("final") or {}
    m = manifest
    lines = [
        f"run {m.get('run_id')}  ({m.get('kind') or m.get('backend')}, "
        f"{m.get('status')})  {m.get('name')}",
        f"  identity        {m.get('identity') or m.get('config_hash')}",
        f"  sweep           {_sweep(m.get('sweep') or {}) or '-'}   seed {m.get('seed')}",
        f"  commits         {m.get('n_commits')}   wall {_g(m.get('wall_seconds'))} s",
        "  final           " + ", ".join(f"{k} {_g(v)}" for k, v in final.items() if k in BASE),
        *run_summary_lines(manifest),
        f"  trace sha256    {manifest.get('trace_sha256')}",
        f"  params sha256   {manifest.get('params_sha256')}",
    ]
    if manifest.get("replayed_trace_sha256"):
        sha, where = m["replayed_trace_sha256"], m.get("replayed_trace")
        lines.append(f"  replays trace   {sha} ({where})")
    lines += _trace_store(prov.get("trace_store"))
    if manifest.get("error"):
        lines.append(f"  error           {manifest['error'].splitlines()[0]}")
    if not prov:
        lines.append("  provenance      (none: written by gemsim 0.1)")
        return "\n".join(lines)
    lines += [
        "  provenance",
        f"    gemsim        {prov.get('gemsim')}  git {prov.get('commit') or '-'}"
        + (" (dirty)" if prov.get("dirty") else ""),
        f"    python        {prov.get('python')}  {prov.get('platform')}",
        f"    cpu           {prov.get('cpu')}",
        f"    jax           {prov.get('jax_backend') or '-'} {prov.get('device_kind') or ''}",
        *_compilation_cache(prov.get("compilation_cache")),
        f"    started       {prov.get('started_at')}  ended {prov.get('ended_at')}",
        f"    command       {prov.get('command')}",
        *_placement(prov.get("placement")),
        "    packages      "
        + ", ".join(f"{k} {v}" for k, v in sorted((prov.get("packages") or {}).items())),
    ]
    return "\n".join(lines)


def _trace_store(note: dict[str, Any] | None) -> list[str]:
    """Where a simulated run's trace came from (written since the trace store exists)."""
    if not note:
        return []
    store = f"store {note['store']}" if note.get("store") else "not stored"
    extra = [note[k] for k in ("simulated_by", "corrupt_copy", "not_stored") if note.get(k)]
    lines = [f"  trace           {note.get('trace')} ({store}, key {str(note.get('key'))[:12]})"]
    return lines + [f"                  {e}" for e in extra]


def _compilation_cache(cache: dict[str, Any] | None) -> list[str]:
    """The compilation cache the run's process used (written since gemsim keeps one)."""
    if not cache:
        return []
    if not cache.get("enabled"):
        return ["    compile cache off"]
    size = cache.get("max_bytes")
    bound = f" (at most {size / 2**30:.3g} GiB)" if size else ""
    return [f"    compile cache {cache.get('dir')}{bound}"]


def _placement(where: dict[str, Any] | None) -> list[str]:
    """Where a run of a sweep executed (written since sweeps run in several processes)."""
    if not where:
        return []
    shown = ("scheduler", "host", "pid", "cpus")
    extra = ", ".join(f"{k} {v}" for k, v in where.items() if k not in shown)
    tail = f"  ({extra})" if extra else ""
    return [f"    ran on        {where.get('host')} ({where.get('cpus')} CPUs) pid "
            f"{where.get('pid')}, {where.get('scheduler')}{tail}"]  # fmt: skip


def _sweep(sweep: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in sweep.items())


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def _g(value: Any, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)
