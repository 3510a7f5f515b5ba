"""One validation point broken down, measured against predicted: where a ddp miss lies.

    python benchmarks/ddp_breakdown.py RECORD_FOLDER... --compare COMPARE.csv
                                       --workload WORKLOAD.toml [--out X.json]

The measured figure of ``simulator.compare`` is a run's steady time per epoch
(``compare.steady_epoch_s``: ``train_wall_s`` less the slowest worker's first row, scaled by
n / (n - 1) to the n steps of an epoch). Written as rank 0's timeline, exactly:

    steady = (setup + loop + rows + skew) n / (n - 1)

* *setup* and *loop* as ``real.records.timing.window_parts`` splits rank 0's window:
  ``train_wall_s`` less rank 0's ``epoch_s`` (before rank 0's first step, DDP's
  constructor: its weights broadcast; the ranks' uneven start; and after its last), and
  rank 0's ``epoch_s`` less the sum of its rows (the loop's Python);
* *rows*: rank 0's rows after its first (each step's forward, backward with the buckets'
  all-reduces, the tail the last bucket leaves, the update);
* *skew*: rank 0's first row less the slowest rank's first row.

The simulator predicts the rows alone (per step: the compute slept, then the tail of the
buckets' all-reduces). Per step, the rows are split into the compute the workload slept
(its forward, backward and update) and the rest, the exposed tail; the buckets are DDP's
(``simulator.model.workload.ddp_buckets``: bytes, and when in the step each is ready, from
the step's start), with the measured ``ddp_first_bucket_lead_s`` beside. The predicted side
is the compare row of the records' scheme, P and rate; its time beyond its compute, per step,
holds the constructor's weights broadcast the model charges before the first step
(``model.schemes.collective.ddp_rank``) spread over the steps. Reads records only (no runs);
records that ``simulator.compare`` leaves out (disturbed, testbed-bound) are left out here.
"""
from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

import cli

PROG = "python benchmarks/ddp_breakdown.py"


def epoch_parts(rec: dict, rows: list[dict], server: bool = False) -> dict:
    """One record's steady epoch split into setup, loop, rows and skew (seconds, each already
    scaled by n / (n - 1), n the steps), and *once*: what the workers do once after their
    steps (rows of ``iteration`` -1, the slowest worker's: psgd's closing average), taken
    out of the loop and not scaled, as ``compare.steady_epoch_s`` does (``server``: rank 0
    is a server, whose rows are not a worker's); and rank 0's rows per step after its first."""
    from real.records.timing import window_parts
    by_rank: dict[str, list[float]] = {}
    once: dict[str, float] = {}
    for r in rows:
        row_s = float(r["compute_s"]) + float(r["comm_s"]) + float(r["wait_s"])
        if int(r["iteration"]) >= 0:
            by_rank.setdefault(r["rank"], []).append(row_s)
        elif not (server and r["rank"] == "0"):
            once[r["rank"]] = once.get(r["rank"], 0.0) + row_s
    once_s = max(once.values(), default=0.0)
    mine = by_rank["0"]
    n = max(len(v) for v in by_rank.values())
    if n < 3:
        raise ValueError("fewer than 3 steps a rank: no steady epoch")
    scale = n / (n - 1)
    window = window_parts(rec["timings"], [r for r in rows if r["rank"] == "0"
                                           and int(r["iteration"]) >= 0])
    first_max_s = max(v[0] for v in by_rank.values())
    parts = {"setup_s": window["setup_s"], "loop_s": window["loop_s"] - once_s,
             "rows_s": sum(mine[1:]), "skew_s": mine[0] - first_max_s}
    out = {k: v * scale for k, v in parts.items()} | {"once_s": once_s}
    out["steady_s"] = sum(out.values())
    out["steps"] = n
    out["step_rows_s"] = statistics.fmean(mine[1:])
    return out


def cpu_per_step_s(rec: dict, steps: int) -> float:
    """A rank's CPU a step (all its threads; mean over the ranks) from the record's load
    meter: its CPU share of its window times the window, over the steps."""
    per_rank = rec["load"]["per_rank"]
    return statistics.fmean(r["cpu_percent"] / 100 * r["window_s"] for r in per_rank) / steps


def core_wait_per_step_s(rec: dict, steps: int) -> float:
    """A rank's threads' time runnable without a core a step (summed over its threads; mean
    over the ranks) from the record's CPU check (``testbed.checks.cpu.thread_waits``);
    NaN where the record has none."""
    waits = [sum(w for w, _n in r) for r in rec["testbed"]["checks"]["cpu"].get("thread_waits")
             or () if r is not None]
    return statistics.fmean(waits) / steps if waits else float("nan")


def predicted_row(compare_csv: Path, scheme: str, workers: int, bits_per_s: float) -> dict:
    """The compare row of (scheme, P, rate)."""
    with open(compare_csv) as f:
        for r in csv.DictReader(f):
            if (r["scheme"] == scheme and int(r["workers"]) == workers
                    and abs(float(r["bandwidth_bits_per_s"]) - bits_per_s) < 1):
                return r
    raise ValueError(f"{compare_csv}: no row for {scheme} at P = {workers}, "
                     f"{bits_per_s / 1e6:g} Mbit/s")


def buckets_of(workload_file: Path) -> list[dict]:
    """DDP's buckets for the workload: bytes, and ms from the step's start when ready."""
    from contracts.workload import load_workload, model_cost
    from simulator.model.workload import ddp_buckets
    w = load_workload(workload_file)
    fwd_s, bwd_s = w.forward_s, w.backward_s
    out, share = [], 0.0
    for nbytes, s in ddp_buckets(model_cost(w)):
        share += s
        out.append({"bytes": nbytes, "ready_ms": (fwd_s + share * bwd_s) * 1e3})
    return out


def breakdown(folders: list[Path], compare_csv: Path, workload_file: Path) -> dict:
    """Measured (mean over the records) against predicted, per epoch and per step (ms)."""
    from contracts import record
    from contracts.workload import load_workload
    recs, left_out = [], []
    for folder in folders:
        rec = record.read(folder)
        why = record.left_out_reason(rec, keep=("phantom",))   # as compare leaves it out
        if why:
            left_out.append(f"{folder.name}: {why}")
            continue
        with open(folder / "iterations.csv") as f:
            recs.append((rec, epoch_parts(rec, list(csv.DictReader(f)))))
    if not recs:
        raise ValueError("every record is one compare leaves out: " + "; ".join(left_out))
    first = recs[0][0]
    scheme, workers = first["config"]["algorithm"], first["environment"]["ranks"]
    bits = first["identity"]["settings"]["cluster"]["bandwidth_bits_per_s"]
    row = predicted_row(compare_csv, scheme, workers, bits)
    n = recs[0][1]["steps"]
    slept_ms = load_workload(workload_file).step_s * 1e3
    mean = {k: statistics.fmean(p[k] for _, p in recs) * 1e3
            for k in ("setup_s", "loop_s", "rows_s", "skew_s", "once_s", "steady_s",
                      "step_rows_s")}
    pred_ms, pred_compute_ms = float(row["predicted_s"]) * 1e3, float(row["predicted_compute_s"]) * 1e3
    return {
        "point": {"scheme": scheme, "workers": workers, "mbit": bits / 1e6, "steps": n,
                  "records": [r["run_id"] for r, _ in recs], "left_out": left_out},
        "per_record_ms": [{k: round(v * 1e3, 2) for k, v in p.items() if k.endswith("_s")}
                          for _, p in recs],
        "epoch_ms": {"measured": round(mean["steady_s"], 1), "predicted": round(pred_ms, 1),
                     "rel_error": round((pred_ms - mean["steady_s"]) / mean["steady_s"], 4),
                     "gap": {k[:-2]: round(mean[k], 1) for k in ("setup_s", "loop_s", "skew_s")}
                     | {"rows": round(mean["rows_s"] + mean["once_s"] - pred_ms, 1)}},
        "step_ms": {"measured_rows": round(mean["step_rows_s"], 2), "slept": round(slept_ms, 2),
                    "measured_tail": round(mean["step_rows_s"] - slept_ms, 2),
                    "predicted": round(pred_ms / n, 2),
                    "predicted_compute": round(pred_compute_ms / n, 2),
                    "predicted_tail": round((pred_ms - pred_compute_ms) / n, 2)},
        "buckets": buckets_of(workload_file),
        "cpu_ms_per_rank_step": round(statistics.fmean(cpu_per_step_s(r, p["steps"])
                                                        for r, p in recs) * 1e3, 2),
        "first_bucket_lead_ms": [round(r["extra"].get("ddp_first_bucket_lead_s", float("nan")) * 1e3, 3)
                                 for r, _ in recs],
    }


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=cli.input_folder, metavar="RECORD_FOLDER",
                    help="run folders of one point (record.json and iterations.csv each)")
    ap.add_argument("--compare", required=True, type=cli.input_file,
                    help="the validation's compare.csv")
    ap.add_argument("--workload", required=True, type=cli.input_file,
                    help="the workload file the runs slept")
    ap.add_argument("--out", type=cli.output_file(".json"), help="JSON to write (default: none)")
    return ap


def run(a) -> int:
    from contracts.files import atomic_write_text
    b = breakdown([Path(f) for f in a.records], Path(a.compare), Path(a.workload))
    if a.out:
        atomic_write_text(a.out, json.dumps(b, indent=1) + "\n")
    e, s = b["epoch_ms"], b["step_ms"]
    p = b["point"]
    cli.print_out(
        f"{p['scheme']} P = {p['workers']} at {p['mbit']:g} Mbit/s, {len(p['records'])} records",
        f"epoch: measured {e['measured']} ms, predicted {e['predicted']} ms "
        f"({100 * e['rel_error']:+.1f}%)",
        "the gap (ms an epoch): " + ", ".join(f"{k} {v:+.1f}" for k, v in e["gap"].items()),
        f"a step: rows {s['measured_rows']} ms = slept {s['slept']} + tail {s['measured_tail']}; "
        f"predicted {s['predicted']} = compute {s['predicted_compute']} + tail {s['predicted_tail']}",
        "buckets: " + ", ".join(f"{x['bytes']} B ready at {x['ready_ms']:.2f} ms" for x in b["buckets"])
        + f"; first bucket's lead (measured, ms): {b['first_bucket_lead_ms']}",
        f"a rank's CPU a step (measured, all threads): {b['cpu_ms_per_rank_step']} ms",
        *(f"left out (as compare does): {x}" for x in p["left_out"]))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv, usage=(ValueError, KeyError))


if __name__ == "__main__":
    sys.exit(main())
