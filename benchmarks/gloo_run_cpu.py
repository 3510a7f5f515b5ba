"""What the phantom runs themselves spend in CPU a gloo message, from their records.

    python benchmarks/gloo_run_cpu.py docs/results/phantom-13 docs/results/phantom-14

Each record's load meter (``real.records.load``: the run time of every thread of a rank,
from ``/proc/PID/task/TID/schedstat``, over the rank's window) gives a rank's CPU; divided
by the run's steps, its CPU a step. The gloo messages a rank sends and receives a step are
gloo's ring as ``libraries.gloo.gloo_ring_lengths`` cuts it (allreduce: one ring a tensor of
the workload; ddp: one ring over the gradients, the CNN's one bucket), empty segments left
out. Per scheme and shaped rate, a line of the CPU a step against the messages a step over
the P run: its slope is what a run spends a message (its intercept what a step spends
beside them: the phantom step's autograd, the loop, the update). Printed beside it, the
folder's calibrated ``cpu_per_message`` (``calibrate.link``). Faithful records only (not
disturbed, not testbed-bound), as ``simulator.compare`` takes them. Reads records only.

Imports: numpy, contracts (record_archive, cluster, workload), libraries.gloo.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import cli
from contracts import record_archive
from contracts.cluster import load_link_calibration
from contracts.workload import load_workload
from libraries.gloo import gloo_ring_lengths

PROG = "python benchmarks/gloo_run_cpu.py"
SCHEMES = ("allreduce", "ddp")


def messages_a_step(scheme: str, p: int, tensors: list[int]) -> int:
    """gloo messages rank 0 sends and receives a step: a ring a tensor (allreduce) or
    one ring over all (ddp's one bucket: the CNN's 39 kB fit DDP's first 1 MiB bucket)."""
    buffers = tensors if scheme == "allreduce" else [sum(tensors)]
    return sum((send > 0) + (recv > 0) for n in buffers
               for phase in gloo_ring_lengths(p, 0, n) for send, recv in phase)


def run_rows(folder: Path) -> list[dict]:
    """One row per faithful gloo-ring record of the folder: P, rate, CPU a rank a step."""
    workload = load_workload(next((folder / "workloads").glob("cnn*.toml")))
    tensors = [t.bytes for t in workload.tensors]
    rows = []
    with record_archive.unpacked(folder) as runs:
        for path in sorted(runs.glob("cnn*/*/*/record.json")):
            r = json.loads(path.read_text())
            scheme, p = r["config"]["algorithm"], int(r["environment"]["workers"])
            if (scheme not in SCHEMES or r["status"] != "completed" or r.get("disturbed")
                    or r.get("testbed_bound")):
                continue
            steps = int(r["config"]["train_size"]) // (int(r["config"]["batch_size"]) * p)
            cpu_s = np.mean([x["cpu_percent"] / 100 * x["window_s"] for x in r["load"]["per_rank"]])
            rows.append({"scheme": scheme, "workers": p,
                         "mbit": r["environment"]["cluster"]["bandwidth_bits_per_s"] // 10**6,
                         "messages": messages_a_step(scheme, p, tensors),
                         "cpu_step_s": float(cpu_s) / steps,
                         "busy_cores": r["testbed"]["checks"]["cpu"]["machines"][0]["busy_cores"]})
    return rows


def report(rows: list[dict]) -> list[str]:
    """The per-point medians, then the line over P per scheme and rate."""
    out = ["scheme     rate  P  runs  messages  CPU a step (ms)  per message (us)  busy cores"]
    keys = sorted({(r["scheme"], r["mbit"], r["workers"]) for r in rows})
    for s, m, p in keys:
        g = [r for r in rows if (r["scheme"], r["mbit"], r["workers"]) == (s, m, p)]
        cpu = float(np.median([r["cpu_step_s"] for r in g]))
        out.append(f"{s:9s} {m:5d} {p:2d} {len(g):5d} {g[0]['messages']:9d} {cpu * 1e3:16.2f} "
                   f"{cpu / g[0]['messages'] * 1e6:17.1f} "
                   f"{np.median([r['busy_cores'] for r in g]):11.2f}")
    out.append("line over P (all runs): CPU a step = intercept + slope x messages")
    for s, m in sorted({k[:2] for k in keys}):
        g = [r for r in rows if (r["scheme"], r["mbit"]) == (s, m)]
        if len({r["workers"] for r in g}) < 2:
            continue
        slope, intercept = np.polyfit([r["messages"] for r in g], [r["cpu_step_s"] for r in g], 1)
        out.append(f"  {s} at {m} Mbit/s, P = {sorted({r['workers'] for r in g})}: "
                   f"{slope * 1e6:.1f} us a message, {intercept * 1e3:.2f} ms a step beside")
    return out


def main(argv=None) -> int:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=cli.input_folder,
                   help="phantom validation folders (docs/results/phantom-N)")
    a = p.parse_args(argv)
    rows = []
    for f in map(Path, a.folders):
        if not (f / "workloads").is_dir() or not (f / "link.toml").is_file():
            return cli.usage_error(PROG, f"{f} is not a phantom validation folder "
                                         "(workloads/ and link.toml)")
        try:
            found = run_rows(f)
        except record_archive.ArchiveError as e:
            return cli.usage_error(PROG, str(e))
        c = load_link_calibration(f / "link.toml").cpu_s_per_message
        print(f"{f}: {len(found)} gloo-ring records; calibrated cpu_per_message {c * 1e6:.1f} us")
        rows += found
    if not rows:
        return cli.usage_error(PROG, "no faithful allreduce or ddp record in the folders")
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
