"""What a run's timed window holds beyond its iteration rows, per scheme, on one host.

    python benchmarks/outside_rows.py --out outside-rows.json        # runs, then reads
    python benchmarks/outside_rows.py --read RUNS... --out x.json     # reads records only

A record's ``train_wall_s`` runs from the first rank's start of training to the last rank's
end; its rows (``iterations.csv``) hold each step's compute, communication and waiting.
What lies between is, per record (``real.records.timing.window_parts``):

* *setup* (``train_wall_s`` less rank 0's ``epoch_s``): what runs before rank 0's first
  step (DDP's constructor: its weights broadcast and its own work) and the ranks'
  uneven start and end;
* *the loop's Python*, per step (rank 0's ``epoch_s`` less the sum of its rows, over its
  steps): fetching the next batch, the progress line, the curve's bookkeeping.

With ``--run`` (the default) it first makes phantom runs on this host (``real.train
--compute phantom``: the compute slept, every message real; ``--workload``, the CNN of
the phantom validations by default; ``--compute real``: the one-host validations' CNN
on Fashion-MNIST) of ``--schemes`` at P = 2 (the parameter server at
P = 1: a worker and its server, a core each), ``--repeats`` each, into ``OUT.runs/``.
mpi_allreduce builds nothing before its first step, so its setup is the ranks' uneven
start and end alone; ddp's less that is its constructor. Run it on a quiet machine.

Written: per scheme, the medians over its records, in ms. Imports: real (mpirun, records).
"""
from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import cli
from contracts.record import read as read_record
from real.records.timing import window_parts

PROG = "python benchmarks/outside_rows.py"
ROOT = Path(__file__).resolve().parents[1]
SCHEMES = "mpi_allreduce,allreduce,ddp,ps_sync,ps_async"


def outside(record: Path) -> dict | None:
    """One record's setup (ms) and the loop's Python per step (ms), or None."""
    rec = read_record(record.parent)
    t = rec.get("timings") or {}
    rows_path = record.with_name("iterations.csv")
    if not t.get("epoch_s") or not rows_path.is_file():
        return None
    with open(rows_path) as f:
        rows = [r for r in csv.DictReader(f) if r["rank"] == "0" and int(r["iteration"]) >= 0]
    if not rows:
        return None
    parts = window_parts(t, rows)
    return {"scheme": rec["config"].get("algorithm") or rec["config"].get("scheme"),
            "workers": (rec.get("environment") or {}).get("workers"), "disturbed": bool(rec.get("disturbed")),
            "setup_ms": parts["setup_s"] * 1e3,
            "loop_ms_per_step": parts["loop_s"] / len(rows) * 1e3, "steps": len(rows)}


def summary(records: list[Path]) -> dict:
    """Per scheme and P: the undisturbed records' medians (disturbed ones are counted)."""
    found: dict[str, list[dict]] = {}
    for r in records:
        o = outside(r)
        if o is not None:
            found.setdefault(f"{o['scheme']} P={o['workers']}", []).append(o)
    out = {}
    for key, rows in sorted(found.items()):
        quiet = [r for r in rows if not r["disturbed"]]
        out[key] = {"records": len(rows), "disturbed": len(rows) - len(quiet)}
        if quiet:
            out[key].update({k: round(statistics.median(r[k] for r in quiet), 3)
                             for k in ("setup_ms", "loop_ms_per_step")})
    return out


def make_runs(schemes: list[str], repeats: int, workload: str, runs: Path,
              compute: str = "phantom") -> list[Path]:
    """Runs of each scheme on this host, phantom (the validations' CNN slept, 768 samples
    in batches of 32) or real (the one-host validations' CNN on Fashion-MNIST, 7,680
    samples in batches of 64, a thread a rank); the records written."""
    mpirun = str(Path(sys.executable).parent / "mpirun")
    how = (["--compute", "phantom", "--workload", workload, "--train-size", "768",
            "--batch-size", "32"] if compute == "phantom" else
           ["--dataset", "fashion-mnist", "--train-size", "7680", "--batch-size", "64",
            "--threads", "1"])
    for scheme in schemes:
        for r in range(repeats):        # 2 ranks: the parameter server's are a worker and it
            cmd = [mpirun, "-n", "2", sys.executable, "-m", "real.train", "--schemes",
                   scheme, *how, "--out", str(runs), "--run-id", f"{scheme}-r{r}"]
            subprocess.run(cmd, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
                           check=True, timeout=600, stdout=subprocess.DEVNULL)
    return sorted(runs.glob("*/record.json"))


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--read", nargs="+", type=cli.input_folder, metavar="RUNS",
                    help="only read the records under these folders (no runs)")
    ap.add_argument("--schemes", default=SCHEMES, help="schemes to run, comma-separated")
    ap.add_argument("--repeats", default=3, type=cli.positive_int, help="runs per scheme")
    ap.add_argument("--compute", default="phantom", choices=("phantom", "real"),
                    help="phantom runs (the workload slept) or real ones (Fashion-MNIST)")
    ap.add_argument("--workload", default="docs/results/phantom-6/workloads/cnn.toml",
                    type=cli.input_file, help="the phantom's workload file")
    ap.add_argument("--out", required=True, type=cli.output_file(".json"), help="JSON to write")
    return ap


def run(a) -> int:
    from contracts.files import atomic_write_text
    if a.read:
        records = sorted(p for f in a.read for p in Path(f).rglob("record.json"))
    else:
        runs = Path(a.out).with_suffix(".runs")
        records = make_runs(a.schemes.split(","), a.repeats, str(Path(a.workload).resolve()),
                            runs, a.compute)
    result = summary(records)
    atomic_write_text(a.out, json.dumps(result, indent=1) + "\n")
    lines = [f"{'scheme':<22}{'records':>8}{'setup ms':>10}{'loop ms/step':>14}"]
    for key, v in result.items():
        lines.append(f"{key:<22}{v['records']:>8}{v.get('setup_ms', float('nan')):>10.2f}"
                     f"{v.get('loop_ms_per_step', float('nan')):>14.3f}"
                     + (f"  ({v['disturbed']} disturbed, left out)" if v["disturbed"] else ""))
    cli.print_out(*lines)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
