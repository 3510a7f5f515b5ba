"""Where phantom ranks' late wake-ups come from, and whether they stretch a step.

N processes stand for N phantom ranks on this machine's cores without a network: each
step all of them leave a barrier at once (the end of a synchronising call), spend
``--burst-ms`` of CPU (the scheme's work after the call: averaging, copies, Python),
then sleep a workload's chain through the phantom's ``real.phantom.sleep.Sleeper``
(update, each layer's forward, each layer's backward, times ``--time-scale``, each
sleep's lateness taken off the next) and meet at the barrier again. Optionally each
process also runs ``--meter-threads`` Python threads that wake every 50 ms and work
0.3 ms, as a rank's meters do (``real.records.load``, ``real.records.timing``).

Per configuration it reports how late sleeps woke by their place in the step (the first
after the barrier, the others, the last before it), how far behind its plan the latest
rank was as it reached the barrier (the sleeper's debt: what a synchronising call waits
for, ``real.records.testbed``'s ``behind_share``), and how much longer a step was, barrier to
barrier, than its plan (burst and sleeps): the stretch a run would measure. As root or
not:

    python benchmarks/sleep_tail.py --workload cnn.toml --ranks 2,8,16,32 --burst-ms 0,1 \\
        --steps 60
"""
from __future__ import annotations

import json
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cli  # noqa: E402
from real.phantom.plan import load_plan  # noqa: E402
from real.phantom.sleep import Sleeper  # noqa: E402

PROG = "python benchmarks/sleep_tail.py"

METER_EVERY_S, METER_WORK_S = 0.05, 0.0003


def chain_s(path: str, scale: float) -> list[float]:
    """A step's sleeps in order: update, forward (input to output), backward (ready order)."""
    plan = load_plan(path, scale)
    w, f = plan.workload, plan.factor(plan.workload.batch_size)
    return ([plan.update_s * f] + [lay.forward_s * f for lay in reversed(w.layers)]
            + [lay.backward_s * f for lay in w.layers])


def spin_cpu(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time (Python, holding the interpreter lock)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def meter(stop: threading.Event) -> None:
    while not stop.wait(METER_EVERY_S):
        spin_cpu(METER_WORK_S)


def rank(i: int, barrier, sleeps: list[float], steps: int, burst_s: float, meters: int,
         out) -> None:
    stop = threading.Event()
    for _ in range(meters):
        threading.Thread(target=meter, args=(stop,), daemon=True).start()
    sleeper, late, behind, own = Sleeper(), [], [], []
    for _ in range(steps):
        barrier.wait()
        t0 = time.monotonic()
        spin_cpu(burst_s)
        row = []
        for d in sleeps:
            before = sleeper.lateness.n
            sleeper.sleep(d)
            row.append(sleeper.debt_s if sleeper.lateness.n > before else np.nan)
        behind.append(sleeper.debt_s)
        own.append((t0, time.monotonic()))
        late.append(row)
    barrier.wait()
    stop.set()
    out.put((i, late, behind, own))


def chain_run(n: int, sleeps: list[float], steps: int, burst_s: float, meters: int) -> dict:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=rank, args=(i, barrier, sleeps, steps, burst_s, meters, out))
             for i in range(n)]
    for p in procs:
        p.start()
    got = [out.get() for _ in procs]
    for p in procs:
        p.join()
    skip = 2                                              # warm-up steps
    late = np.array([g[1][skip:] for g in got])           # rank, step, place
    behind = np.array([g[2][skip:] for g in got])         # rank, step
    step_plan = burst_s + sum(sleeps)
    t = np.array([g[3][skip:] for g in got])               # rank, step, (left, reached)
    stretch = np.diff(t[0, :, 0]) - step_plan               # barrier to barrier
    own = (t[:, :, 1] - t[:, :, 0]).max(axis=0) - step_plan  # the latest rank's compute
    meet = t[0, 1:, 0] - t[:, :-1, 1].max(axis=0)           # last arrival to release

    def p99(a):
        a = a[~np.isnan(a)]
        return float(np.quantile(a, 0.99)) if a.size else float("nan")
    return {"ranks": n, "burst_ms": burst_s * 1e3, "meter_threads": meters,
            "step_plan_ms": step_plan * 1e3,
            "p99_first_ms": p99(late[:, :, 0]) * 1e3,
            "p99_middle_ms": p99(late[:, :, 1:-1]) * 1e3,
            "p99_last_ms": p99(late[:, :, -1]) * 1e3,
            "p99_all_ms": p99(late) * 1e3,
            "behind_max_mean_ms": float(behind.max(axis=0).mean()) * 1e3,
            "stretch_max_mean_ms": float(stretch.mean()) * 1e3,
            "own_max_mean_ms": float(own.mean()) * 1e3,
            "barrier_mean_ms": float(meet.mean()) * 1e3,
            "behind_share": float(behind.max(axis=0).mean() / step_plan),
            "stretch_share": float(stretch.mean() / step_plan)}


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--workload", required=True, help="workload TOML with per-layer times")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--ranks", default="2,8,16,32")
    p.add_argument("--burst-ms", default="0,1", help="CPU each rank spends after the barrier")
    p.add_argument("--meter-threads", default="0", help="meter-like threads per rank")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--json", default=None, help="also write the rows here")
    return p


def run(args) -> int:
    sleeps = chain_s(args.workload, args.time_scale)
    rows = []
    print(f"{'N':>3} {'burst':>6} {'meters':>6} {'plan ms':>8} {'p99 first':>10} "
          f"{'p99 mid':>8} {'p99 last':>9} {'behind ms':>10} {'stretch ms':>11} "
          f"{'behind %':>9} {'stretch %':>10} {'compute ms':>11} {'barrier ms':>11}")
    for n in (int(x) for x in args.ranks.split(",")):
        for burst in (float(x) for x in args.burst_ms.split(",")):
            for meters in (int(x) for x in args.meter_threads.split(",")):
                r = chain_run(n, sleeps, args.steps, burst / 1e3, meters)
                rows.append(r)
                print(f"{n:>3} {burst:>6g} {meters:>6} {r['step_plan_ms']:>8.2f} "
                      f"{r['p99_first_ms']:>10.3f} {r['p99_middle_ms']:>8.3f} "
                      f"{r['p99_last_ms']:>9.3f} {r['behind_max_mean_ms']:>10.3f} "
                      f"{r['stretch_max_mean_ms']:>11.3f} {100 * r['behind_share']:>8.2f}% "
                      f"{100 * r['stretch_share']:>9.2f}% {r['own_max_mean_ms']:>11.3f} "
                      f"{r['barrier_mean_ms']:>11.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
