"""A prediction's outputs: its metadata (``predictions.json``'s ``meta``: what the header
and the figure's title say in words), the files and what stdout shows.

``metadata(q, rows, elapsed_s, ranks_per_host)`` reads the resolved question
(``simulator.question.Question``) and the rows the engine made; ``written(args, rows,
meta)`` writes ``predictions.csv``, ``predictions.json`` and ``speedup.png`` to ``--out``
and prints what ``--format`` asks for, each text made once.

Imports: contracts (cluster, files, quality), simulator.engine.machine,
simulator.output (header, tables; plots, lazily).
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from contracts import quality
from contracts.cluster import GrowingCluster
from contracts.files import atomic_write_text
from simulator.engine.machine import provenance_line
from simulator.engine.mechanisms import by_workers, mechanisms
from simulator.output import header
from simulator.output.tables import full_table, summary_table, to_csv, to_json


def metadata(q, rows: list[dict], elapsed_s: float,
             ranks_per_host: int | None) -> dict:
    """The prediction's metadata (``predictions.json``'s ``meta``): what the header and the
    figure's title say in words."""
    job, measured = q.sweep, q.measured
    return {"profile": q.origin, "profile_note": job.profile.provenance.note,
            "profile_host": f"{measured.provenance.host}, {measured.cores} cores",
            "profile_created": job.profile.provenance.created_utc,
            "workload": asdict(job.workload),
            "dataset": "--dataset-size" if q.own_dataset_size else q.dataset,
            "dataset_default": q.dataset_default,
            "cluster": asdict(q.largest), "ranks_per_host": ranks_per_host, "seed": job.seed,
            "heterogeneity": asdict(job.heterogeneity), "simulated_in_s": round(elapsed_s, 3),
            "kind": "predicted (simulator)", "provenance": list(q.provenance),
            "provenance_line": provenance_line(q.provenance) if q.described else "",
            "machine": q.setting.machine, "network": q.setting.network,
            "hosts": hosts_range(q.setting, q.largest, q.workers),
            "overrides": list(q.overrides),
            "baseline": baseline_of(rows, job.baseline),
            "profile_quality": profile_quality(q),
            "mechanisms": mechanisms(job, q.largest, q.provenance),
            "mechanisms_by_workers": by_workers(job, q.setting.at, q.provenance)}


def profile_quality(q) -> str:
    """The profile's quality line (``contracts.quality.warning``); on accelerator hosts its
    note of weak fits the prediction does not use is left out (the device's costs are the
    preset's and the workload file's), its WARNING kept."""
    line = quality.warning(q.measured, q.sweep.workload.model)
    return "" if q.largest.device is not None and line.startswith("Note:") else line


def mechanism_text(meta: dict, full: bool) -> str:
    """What the accelerator hosts' mechanisms cost (``engine.mechanisms``): one line of
    names, or with ``full`` each with its cost at each P asked for (one line where it is
    the same at every P), the schemes that pay it and its source ("" on CPU hosts)."""
    rows = meta.get("mechanisms") or []
    if not rows:
        return ""
    p = meta["hosts"]["at_max"][0]
    if not full:
        return (f"mechanisms applied at P = {p}: "
                + ", ".join(r["mechanism"] for r in rows if not r["cost"].startswith("not "))
                + " (each with its cost at each P and its source: --full)\n")
    by_p = meta.get("mechanisms_by_workers") or {str(p): rows}
    out = ["mechanisms (cost at each P; schemes that pay it; source, in full in "
           "predictions.json):"]
    for r in rows:
        costs = {k: next((m["cost"] for m in v if m["mechanism"] == r["mechanism"]), None)
                 for k, v in by_p.items()}
        shown = {k: c for k, c in costs.items() if c is not None}
        if len(set(shown.values())) <= 1:
            out.append(f"  {r['mechanism']}: {r['cost']}")
        else:
            out += [f"  {r['mechanism']}:"] + [f"    P = {k}: {c}" for k, c in shown.items()]
        source = r["source"] if len(r["source"]) <= 160 else r["source"][:157] + "..."
        out.append(f"    {r['schemes']}; source: {source}")
    return "\n".join(out) + "\n"


def hosts_range(setting, largest, workers) -> dict:
    """How many hosts the smallest and the largest P take, and ranks per host."""
    low = setting.at(min(workers))
    return {"grows": isinstance(setting.cluster, GrowingCluster),
            "at_min": [min(workers), low.hosts],
            "at_max": [max(workers), largest.hosts],
            "ranks_per_host": largest.ranks_per_host or largest.cores_per_host,
            "cores_per_host": largest.cores_per_host,
            "device": largest.device.name if largest.device else None}


def baseline_of(rows: list[dict], p0: int) -> dict:
    """The row every speedup is against: the fastest at P0."""
    best = min((r for r in rows if r["workers"] == p0), key=lambda r: r["epoch_s"])
    return {"workers": p0, "scheme": best["scheme"], "epoch_s": best["epoch_s"],
            "time_s": best["time_s"]}


def written(args, rows: list[dict], meta: dict) -> None:
    """Files first (a reader piping the table into ``head`` still gets them), then what
    ``--format`` asks for on stdout; each text is made once."""
    out = Path(args.out)
    head, subtitle = "\n".join(header.lines(meta)), header.subtitle(meta)
    baseline = header.baseline_words(meta).split(",")[0]
    csv_text, json_text = to_csv(rows), to_json(rows, meta)
    if args.format == "table":
        shown = (summary_table(rows, head, out, meta) if not args.full
                 else full_table(rows, head)) + "\n"
        if meta.get("provenance_line"):
            shown += meta["provenance_line"] + " (every number and its source: predictions.json)\n"
        shown += mechanism_text(meta, args.full)
    else:
        shown = csv_text if args.format == "csv" else json_text + "\n"
    atomic_write_text(out / "predictions.csv", csv_text)
    atomic_write_text(out / "predictions.json", json_text)
    if not args.no_plot:
        from simulator.output.plots import speedup_plot
        path = speedup_plot(rows, out / "speedup.png", subtitle=subtitle, baseline=baseline,
                            p0=args.baseline)
        print(f"wrote {path}", file=sys.stderr)
    print(shown, end="")
