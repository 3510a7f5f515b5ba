"""How fast the simulator predicts: the goals of issue 39, and how the cost grows.

    python benchmarks/simulator_speed.py --out benchmarks/results/simulator-speed

1. The goals, as ratios measured in one run on one machine, each command run as a user
   types it (a new process, imports included), the commands alternating round by round and
   each ratio taken between medians of ``--repeats`` rounds:

   * the floor: importing the libraries ``simulator.predict`` uses and drawing its figure
     (``output.plots.speedup_plot`` of the first command's rows);
   * ``predict --workers 16`` (every scheme, hosts like the profile's) -- goal: 1.5 x the
     floor;
   * ``predict --workers 2^0..10`` (every scheme, hosts growing with P) -- goal: 3 x;
   * ``predict --workers 16 --hosts 1`` (the profile's one host, oversubscribed above its
     cores: per-core run queues), reported beside them;

   and, in this process, the CPU seconds (least of ``--repeats``) and SimPy events of the
   first command's predictions per scheme (one process), the figures to compare engines
   by on a shared machine;
2. the message-level ring allreduce of 40 MB at P = 64 on a star network of
   10 Gbit/s links and 20 us, against SimGrid's (``benchmarks/simgrid_ring.py``,
   run by the system Python when it has SimGrid's bindings), alternating;
3. the cost against P of each engine (vectorised closed forms, SimPy with
   closed-form collectives, SimPy message by message: mpi_allreduce, 10
   iterations, 4 ranks per host) and against iterations, with events per
   second; a log-log figure ``speed.png`` and ``speed.csv``.

The machine (CPU model, cores), the date and the load average before and after are
printed: on a machine busy with other work the figures are slower than the simulator is.
``--parts goals`` measures the first item only (a few minutes).
"""
from __future__ import annotations

import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cli  # noqa: E402
from contracts.files import save_figure  # noqa: E402

PROG = "python benchmarks/simulator_speed.py"


FLOOR = ("import json, sys, simulator.predict; from simulator.output.plots import preload, "
         "speedup_plot; preload(); speedup_plot(json.load(open(sys.argv[1]))['predictions'], "
         "sys.argv[2])")
GOALS = (("predict --workers 16", ["--workers", "16"], 1.5),
         ("predict --workers 2^0..10", ["--workers", "2^0..10"], 3.0),
         ("predict --workers 16 --hosts 1 (one host, oversubscribed)",
          ["--workers", "16", "--hosts", "1"], None))


def wall_s(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def goals(repeats: int) -> list[str]:
    """The floors and the commands, alternating round by round; medians and ratios."""
    py = [sys.executable, "-m", "simulator.predict"]
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp, "first")
        subprocess.run(py + ["--workers", "16", "--out", str(first)], cwd=ROOT, check=True,
                       capture_output=True)                               # (warms the caches)
        walls: dict[str, list[float]] = {}
        for _ in range(repeats):
            walls.setdefault("floor", []).append(wall_s(
                [sys.executable, "-c", FLOOR, str(first / "predictions.json"),
                 str(Path(tmp, "floor.png"))]))
            for label, argv, _goal in GOALS:
                walls.setdefault(label, []).append(wall_s(py + argv + ["--out", tmp]))
    med = {k: statistics.median(v) for k, v in walls.items()}
    lines = [(f"floor: import predict's libraries and draw its figure: {med['floor']:.2f} s "
              f"(medians of {repeats} rounds)")]
    for label, _argv, goal in GOALS:
        ratio = med[label] / med["floor"]
        lines.append(f"{label}: {med[label]:.2f} s = {ratio:.2f} x the floor"
                     + (f" (goal {goal:g} x: {'met' if ratio <= goal else 'NOT met'})"
                        if goal else ""))
    return lines


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"machine: {model}, {os.cpu_count()} cores; "
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")


def per_scheme(repeats: int) -> list[str]:
    """CPU seconds (least of ``repeats``) and events of each scheme's predictions in
    ``predict --workers 16`` (its schemes, P, cluster and profile), in this process."""
    from simulator import predict, question
    from simulator.engine.run import simulate
    q = question.resolve(predict.build_parser().parse_args(["--workers", "16"]))
    job = q.sweep
    lines, total_s, total_events = ["CPU s and SimPy events per scheme, P = 1..16:"], 0.0, 0
    for cfg in q.schemes:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.process_time()
            events = sum(simulate(cfg, pt.workers, job.workload, pt.cluster, job.profile,
                                  job.seed).events
                         for pt in job.points if pt.scheme == cfg)
            best = min(best, time.process_time() - t0)
        total_s, total_events = total_s + best, total_events + events
        lines.append(f"  {cfg.name:15s} {best:6.3f} s {events:9,d} events")
    lines.append(f"  {'all':15s} {total_s:6.3f} s {total_events:9,d} events")
    return lines


def ring_ours_s(p: int, n_bytes: float) -> tuple[float, float, int]:
    """(simulated s, wall s, events) of the message-level ring allreduce."""
    import simpy

    from contracts.cluster import Link
    from contracts.profile import Transport
    from simulator.model.comm import MessageComm
    from simulator.model.network import Routes
    from simulator.model.recorder import Recorder
    t0 = time.perf_counter()
    routes = Routes(tuple(range(p)), Link(1.25e9, 20e-6), Transport("mpi", 1e-6, 1e-10))
    env = simpy.Environment()
    comm = MessageComm(env, routes, routes.shm, Recorder(routes.placement))
    ranks = tuple(range(p))
    for r in ranks:
        env.process(comm.allreduce(r, ranks, n_bytes, "ring", record=False))
    env.run()
    return env.now, time.perf_counter() - t0, next(env._eid)   # noqa: SLF001


def ring_simgrid_s(p: int, n_bytes: float) -> tuple[float, float] | None:
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        return None
    done = subprocess.run([python, str(ROOT / "benchmarks" / "simgrid_ring.py"), str(p),
                           str(n_bytes)], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    _p, _n, simulated, wall = done.stdout.split()[-4:]
    return float(simulated), float(wall)


def ring_comparison(repeats: int) -> list[str]:
    ours, peer = [], []
    for _ in range(repeats):                       # alternate: drift hits both alike
        ours.append(ring_ours_s(64, 40e6))
        peer.append(ring_simgrid_s(64, 40e6))
    lines = [f"ring allreduce P = 64, 40 MB, star of 10 Gbit/s links, 20 us: "
             f"this simulator {statistics.median(w for _, w, _ in ours):.3f} s wall "
             f"(simulated {ours[0][0]:.6f} s, {ours[0][2]} events)"]
    if all(peer):
        lines.append(f"  SimGrid (CM02, no cross-traffic): "
                     f"{statistics.median(w for _, w in peer):.3f} s wall "
                     f"(simulated {peer[0][0]:.6f} s)")
    else:
        lines.append("  SimGrid: not available (apt-get install python3-simgrid)")
    return lines


def scaling(out: Path, max_p: int) -> list[str]:
    """Wall time against P per engine, and against iterations; events per second."""
    from simulator import Cluster, Link, SchemeConfig, Workload, simulate
    from contracts.profile import load_default
    prof = load_default()
    engines = {"vectorised closed forms": dict(engine="fast", fidelity="analytic"),
               "SimPy, closed-form collectives": dict(engine="des", fidelity="analytic"),
               "SimPy, message by message": dict(engine="des", fidelity="message")}
    rows = []
    counts = [2 ** k for k in range(1, max_p.bit_length()) if 2 ** k <= max_p]
    for label, kw in engines.items():
        for p in counts:
            cluster = Cluster(hosts=max(1, p // 4), cores_per_host=4, link=Link(1.25e9, 20e-6))
            cfg = SchemeConfig("mpi_allreduce", **kw)
            t0 = time.perf_counter()
            r = simulate(cfg, p, Workload(iterations=10), cluster, prof)
            wall = time.perf_counter() - t0
            rows.append({"engine": label, "workers": p, "iterations": 10, "wall_s": wall,
                         "events": r.events, "events_per_s": r.events / wall if r.events else 0})
        for it in (10, 40, 160):
            cluster = Cluster(hosts=16, cores_per_host=4, link=Link(1.25e9, 20e-6))
            t0 = time.perf_counter()
            r = simulate(SchemeConfig("mpi_allreduce", **kw), 64, Workload(iterations=it),
                         cluster, prof)
            wall = time.perf_counter() - t0
            rows.append({"engine": label, "workers": 64, "iterations": it, "wall_s": wall,
                         "events": r.events, "events_per_s": r.events / wall if r.events else 0})
    with open(out / "speed.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _figure(rows, out / "speed.png")
    lines = []
    for label in engines:
        mine = [r for r in rows if r["engine"] == label and r["iterations"] == 10]
        rate = [r["events_per_s"] for r in mine if r["events_per_s"]]
        lines.append(f"{label}: P = {mine[-1]['workers']} x 10 iterations in "
                     f"{mine[-1]['wall_s']:.3f} s" + (f", {statistics.median(rate):,.0f} "
                                                      f"events/s (median)" if rate else ""))
    return lines


def _figure(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_p, ax_i) = plt.subplots(1, 2, figsize=(10, 4))
    for label in dict.fromkeys(r["engine"] for r in rows):
        by_p = [r for r in rows if r["engine"] == label and r["iterations"] == 10]
        by_i = [r for r in rows if r["engine"] == label and r["workers"] == 64]
        ax_p.plot([r["workers"] for r in by_p], [r["wall_s"] for r in by_p], "o-", label=label)
        ax_i.plot([r["iterations"] for r in by_i], [r["wall_s"] for r in by_i], "o-",
                  label=label)
    ax_p.set(xscale="log", yscale="log", xlabel="workers P (4 per host)",
             ylabel="wall time (s)", title="mpi_allreduce, 10 iterations")
    ax_i.set(xscale="log", yscale="log", xlabel="iterations per worker",
             ylabel="wall time (s)", title="mpi_allreduce, P = 64")
    for ax in (ax_p, ax_i):
        ax.grid(alpha=0.3, which="both")
    ax_p.legend(fontsize=8)
    save_figure(fig, path)


def build_parser() -> cli.Parser:
    parser = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/simulator-speed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-p", type=int, default=1024, help="largest P of the scaling runs")
    parser.add_argument("--parts", choices=("all", "goals"), default="all",
                        help="goals: the goals' ratios and the CPU per scheme only")
    return parser


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [machine(), "load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg())]
    lines += goals(args.repeats)
    lines += per_scheme(args.repeats)
    if args.parts == "goals":
        return _report(lines, out)
    lines += ring_comparison(args.repeats)
    lines += scaling(out, args.max_p)
    return _report(lines, out)


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def _report(lines: list[str], out: Path) -> int:
    lines.append(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = "\n".join(lines)
    (out / "speed.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
