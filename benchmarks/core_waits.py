"""Testbed or model? What a validation point's records say about the two cores beside its error.

    python -m benchmarks.core_waits RUNS_FOLDER... [--compare COMPARE.csv]
                                    [--schemes NAMES] [--out X.json]
    python -m benchmarks.core_waits --rows RUN_FOLDER   # one run: each rank's rows

On the emulated cluster every host is a namespace of one 2-core machine, so a point can miss
because the model lacks a mechanism or because the ranks queued for the cores, which the
hosts it stands for would not. Each record's testbed section
(``real.records.testbed``) holds what decides it; this prints it per point (scheme, P,
rate; the mean over its records), beside the compare row's error:

* *bar*: the CPU check's figure, the largest share of its window one thread of a rank waited
  for a core (a thread's waits count where they average more than ``WAKEUP_WAIT_S`` a time it
  ran; the limit ``THRESHOLDS['cpu_wait_share']``), and the check's verdict;
* *all waits*: every thread's time runnable without a core, summed over a rank's threads, as
  a share of the window (mean over the ranks), and per wake-up (µs: waits over the times put
  on a core): the waits the bar counts and the wake-up path's, which it does not;
* *CPU*: a rank's CPU a step, all its threads (the load meter, as ``benchmarks/ddp_breakdown``),
  and the cores the machine kept busy (the CPU check's ``busy_cores``);
* *step*: rank 0's rows after its first, mean (ms).

A point whose figures match those of the same scheme and P at a rate the model predicts well
is not set apart by the cores; one whose bar fails is testbed-bound and compare leaves it out.
Reads records only (no runs); disturbed and testbed-bound records are counted, not used.
``--rows`` prints one run's iteration rows rank by rank (compute + wait + communication, ms),
which says where in the run a rank waited: at every step or at one exchange, and which rank
a collective let go first.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import cli
from contracts import record
from benchmarks.ddp_breakdown import cpu_per_step_s, predicted_row

PROG = "python -m benchmarks.core_waits"


def core_figures(rec: dict, rank0_rows_s: list[float]) -> dict:
    """One record's figures of the cores (see the module's docstring); ``rank0_rows_s``: rank
    0's rows (compute + comm + wait) in step order."""
    cpu = rec["testbed"]["checks"]["cpu"]
    wall = rec["timings"]["train_wall_s"]
    ranks = [w for w in cpu["thread_waits"] if w is not None]
    waits = [sum(w for w, _ in r) for r in ranks]
    wakeups = sum(n for r in ranks for _, n in r)
    steps = len(rank0_rows_s)
    return {"verdict": cpu["verdict"],
            "bar_share": max(m["max_wait_share"] for m in cpu["machines"]),
            "waits_share": statistics.fmean(waits) / wall,
            "wait_per_wakeup_s": sum(waits) / wakeups if wakeups else 0.0,
            "cpu_per_rank_step_s": cpu_per_step_s(rec, steps),
            "busy_cores": max(m.get("busy_cores", float("nan")) for m in cpu["machines"]),
            "step_s": statistics.fmean(rank0_rows_s[1:])}


def rank0_rows(folder: Path) -> list[float]:
    it = record.read_iterations(folder)
    it = it[(it["rank"] == 0) & (it["iteration"] >= 0)].sort_values(["epoch", "iteration"])
    return list(it["compute_s"] + it["comm_s"] + it["wait_s"])


def rows_by_rank(folder: Path) -> list[str]:
    """One line a rank: its rows in step order as compute+wait+comm (ms: the compute, the
    wait for the other ranks to arrive, the communication after they did),
    a communication-only phase after the steps (``iteration`` -1: an exchange at the end)
    last, marked ``end``."""
    it = record.read_iterations(folder)
    it = it.assign(end=it["iteration"] < 0).sort_values(["rank", "epoch", "end", "iteration"])
    out = []
    for k, mine in it.groupby("rank", sort=True):
        out.append(f"rank {k}: " + " ".join(
            ("end " if r.end else "")
            + "+".join(f"{v * 1e3:.1f}" for v in (r.compute_s, r.wait_s, r.comm_s))
            for r in mine.itertuples()))
    return out


def points(folders: list[Path], schemes: set[str] | None) -> dict[tuple, dict]:
    """(scheme, P, bits/s) -> figures averaged over its usable records, and what was left out."""
    from simulator.compare import workers_of
    out: dict[tuple, dict] = {}
    for run in (d for f in folders for d in record.find_runs(f)):
        rec = record.read(run)
        scheme = rec["config"]["algorithm"]
        if rec["status"] != "completed" or (schemes and scheme not in schemes):
            continue
        bits = rec["identity"]["settings"]["cluster"]["bandwidth_bits_per_s"]
        key = (scheme, workers_of(rec), bits)
        p = out.setdefault(key, {"records": [], "left_out": []})
        why = record.left_out_reason(rec, keep=("phantom",))    # as compare leaves it out
        if why:
            p["left_out"].append(why)
            continue
        p["records"].append(core_figures(rec, rank0_rows(run)))
    for p in out.values():
        recs = p["records"]
        p["mean"] = {k: statistics.fmean(r[k] for r in recs) for k in recs[0]
                     if k != "verdict"} if recs else {}
        p["verdicts"] = sorted({r["verdict"] for r in recs})
    return out


def table(pts: dict[tuple, dict], compare_csv: Path | None) -> list[str]:
    lines = ["| scheme | P | Mbit/s | runs (left out) | error | bar: max thread wait | all waits "
             "| a wake-up | CPU a rank-step | busy cores | step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (scheme, workers, bits), p in sorted(pts.items()):
        m = p["mean"]
        err = ""
        if compare_csv is not None and m:
            try:
                err = f"{100 * float(predicted_row(compare_csv, scheme, workers, bits)['rel_error']):+.1f}%"
            except ValueError:
                err = "-"
        figs = (f"{100 * m['bar_share']:.1f}% ({'/'.join(p['verdicts'])}) | "
                f"{100 * m['waits_share']:.0f}% | {m['wait_per_wakeup_s'] * 1e6:.0f} µs | "
                f"{m['cpu_per_rank_step_s'] * 1e3:.2f} ms | {m['busy_cores']:.2f} | "
                f"{m['step_s'] * 1e3:.1f} ms") if m else "| | | | |"
        lines.append(f"| {scheme} | {workers} | {bits / 1e6:g} | {len(p['records'])} "
                     f"({len(p['left_out'])}) | {err} | {figs} |")
    return lines


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=cli.input_folder, metavar="RUNS_FOLDER",
                    help="folders searched for run records (a validation's runs/)")
    ap.add_argument("--rows", type=cli.input_folder, metavar="RUN_FOLDER",
                    help="print this run's iteration rows rank by rank instead")
    ap.add_argument("--compare", type=cli.input_file, help="the validation's compare.csv "
                    "(its errors beside the figures)")
    ap.add_argument("--schemes", help="only these schemes, comma-separated (default: all)")
    ap.add_argument("--out", type=cli.output_file(".json"), help="JSON to write (default: none)")
    return ap


def run(a) -> int:
    from contracts.files import atomic_write_text
    if a.rows:
        cli.print_out(*rows_by_rank(Path(a.rows)))
        return 0
    if not a.runs:
        raise ValueError("give RUNS_FOLDER... or --rows RUN_FOLDER")
    pts = points([Path(f) for f in a.runs], set(a.schemes.split(",")) if a.schemes else None)
    if not pts:
        raise ValueError("no completed run records of these schemes under the folders given")
    if a.out:
        atomic_write_text(a.out, json.dumps(
            [{"scheme": s, "workers": w, "mbit": b / 1e6, **p} for (s, w, b), p in
             sorted(pts.items())], indent=1) + "\n")
    cli.print_out(*table(pts, Path(a.compare) if a.compare else None))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv, usage=(ValueError, KeyError))


if __name__ == "__main__":
    raise SystemExit(main())
