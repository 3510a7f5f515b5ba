"""How precisely a phantom step sleeps: four ways to sleep a workload's chain of layer times.

A phantom step is a chain of sleeps: each layer's forward, each layer's backward,
the update (``real.phantom``). This times ``--steps`` such chains of a workload file
with each way of sleeping and reports, per way, how late a single sleep woke (p50,
p99), how much longer the whole step took than asked (mean and p99 over steps, in
microseconds and as a share of the step) and the CPU the sleeping process used:

* ``plain``: ``time.sleep(d)`` with the thread's default timer slack (50 us);
* ``slack``: the timer slack set to 1 ns (``prctl(PR_SET_TIMERSLACK)``);
* ``slack+carry``: and each sleep's lateness taken off the next (what phantom runs do);
* ``slack+spin``: sleep until 200 us before the deadline, then spin;
* ``stand-in``: the whole phantom step as a run takes it (``real.phantom``'s stand-in
  model: forward, ``backward()`` through autograd, the update), sleeping the third way.

    python benchmarks/phantom_sleep.py --workload cnn.toml --steps 300
    python benchmarks/phantom_sleep.py --steps 300      # the seed-000 CNN's layers, measured here

A step's time is from the first sleep's start to the last one's end. Run it on a quiet
machine (``/work/bin/quiet`` here); docs/phantom.md quotes its output.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cli  # noqa: E402
from real.phantom.plan import load_plan
from real.phantom.sleep import Sleeper

PROG = "python benchmarks/phantom_sleep.py"

WAYS = {"plain": {"carry": False, "slack": False}, "slack": {"carry": False},
        "slack+carry": {}, "slack+spin": {"carry": False, "spin_s": 200e-6}, "stand-in": {}}


def chain(plan) -> list[float]:
    """The sleeps of one step, in order: forward (forward order), backward, update."""
    layers = plan.workload.layers
    return ([lay.forward_s for lay in reversed(layers)] + [lay.backward_s for lay in layers]
            + [plan.update_s])


def stand_in_step(plan, sleeper: Sleeper):
    """One phantom step of ``plan`` through the stand-in model, as ``real.train`` runs it."""
    import torch

    from real.phantom.compute import PhantomCompute
    compute = PhantomCompute(plan, sleeper)
    model = compute.model()
    batch = plan.workload.batch_size
    x, y = torch.empty(batch, 0), torch.zeros(batch)
    return lambda: compute.step(model, None, x, y)


def measure(sleeps: list[float], steps: int, plan=None, **way) -> dict:
    """``plan`` given: the stand-in's steps; else the chain ``sleeps`` slept one by one."""
    import threading
    done = {}

    def run():                  # a thread of its own: the timer slack is per thread
        sleeper = Sleeper(**way)
        asked = sum(sleeps)
        step = stand_in_step(plan, sleeper) if plan else None
        over, cpu0 = [], time.process_time()
        for _ in range(steps):
            t0 = time.monotonic()
            if step:
                step()
            else:
                for s in sleeps:
                    sleeper.sleep(s)
            over.append(time.monotonic() - t0 - asked)
        done.update(cpu_s=time.process_time() - cpu0, over=over, summary=sleeper.summary(),
                    asked=asked)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    over = sorted(done["over"])
    return {"p50_late_us": done["summary"]["p50_s"] * 1e6,
            "p99_late_us": done["summary"]["p99_s"] * 1e6,
            "step_over_us": statistics.mean(over) * 1e6,
            "step_over_p99_us": over[int(0.99 * (len(over) - 1))] * 1e6,
            "step_over_share": statistics.mean(over) / done["asked"],
            "cpu_share": done["cpu_s"] / (steps * done["asked"])}


def cnn_workload(path: Path) -> Path:
    """The seed-000 CNN measured here at batch 64, one thread (calibrate.workload)."""
    from calibrate.probes import workload
    workload.main(["--model", "cnn", "--input-shape", "1,28,28", "--batch-size", "64",
                   "--out", str(path)])
    return path


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--workload", default=None, help="workload TOML (default: measure the CNN)")
    p.add_argument("--steps", type=int, default=300, help="steps per way of sleeping")
    p.add_argument("--repeats", type=int, default=3, help="rounds over the ways")
    return p


def run(args) -> int:
    if args.workload is None:
        import tempfile
        args.workload = str(cnn_workload(Path(tempfile.mkdtemp()) / "cnn.toml"))
    plan = load_plan(args.workload)
    sleeps = chain(plan)
    print(f"workload {plan.workload.name}: {len(sleeps)} sleeps a step, "
          f"{sum(sleeps) * 1e3:.3f} ms asked; {args.steps} steps x {args.repeats} rounds; "
          f"{time.strftime('%Y-%m-%d')}")
    print(f"{'way':<12} {'p50 late':>9} {'p99 late':>9} {'step over':>10} {'p99':>8} "
          f"{'share':>7} {'CPU':>6}")
    rows = {w: [] for w in WAYS}
    for _ in range(args.repeats):             # rounds: drift falls on every way alike
        for name, way in WAYS.items():
            rows[name].append(measure(sleeps, args.steps,
                                      plan if name == "stand-in" else None, **way))
    for name, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{name:<12} {med['p50_late_us']:>7.0f}us {med['p99_late_us']:>7.0f}us "
              f"{med['step_over_us']:>8.0f}us {med['step_over_p99_us']:>6.0f}us "
              f"{med['step_over_share']:>7.2%} {med['cpu_share']:>6.1%}")
    print("(medians over the rounds; late: one sleep past its deadline; step over: a step "
          "longer than asked; CPU: the sleeper's CPU time per second of sleep asked)")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
