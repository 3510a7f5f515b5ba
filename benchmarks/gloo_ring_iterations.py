"""gloo's ring allreduce a ring iteration: the phantom runs against the model, part by part.

    python -m benchmarks.gloo_ring_iterations docs/results/phantom-13 docs/results/phantom-14 \
        docs/results/phantom-16 docs/results/phantom-17 [--mbit 1000] [--cpu-per-message US] \
        [--chain docs/results/phantom-17/link] [--out iterations.csv]

A ring iteration is one step of a phase of gloo's ring (``gloo/allreduce.cc``, ``ring``: a
segment sent to ``rank - 1`` and one received from ``rank + 1``); a call runs
``2 (S - S / P)`` of them (``libraries.gloo.gloo_ring_lengths``: S = 2P segments for the
CNN's tensors, empty ones included), the allreduce scheme one call a tensor a step.

*Measured*: a rank's ``comm_s`` a step (its eight calls and the divisions, from the records'
``iterations.csv``, the first step left out), mean over the ranks, median over a point's
faithful runs; divided by the ring iterations a step. Beside it, from the same records, a
rank's CPU (all its threads, the load meter: the whole window, the steps' CPU outside the
calls included) and its threads' waits for a core (the CPU check's ``thread_waits``), each
a step over the ring iterations a step.

*Model*: each call as the prediction prices it (``costs.simulated_alone_s``: the call's
messages alone in SimPy, from time 0 on every rank, the record's link and token buckets),
with every yield of ``comm.gloo.ring_allreduce`` timed on each rank and put in one part:

* ``cpu_own``: the message CPU ``c(n)`` (``comm.gloo.message_cpu_s`` at share 1);
* ``cpu_stretch``: what ``max(1, P / C)`` adds to it (the P ranks on C shared cores);
* ``reduce``: adding the received segment (the profile's gamma);
* ``upstream``: waiting on an arrival before the neighbour ``rank + 1`` posted its send
  (its own CPU and its own waits: the ring's chain);
* ``wire``: waiting on an arrival after the send was posted (bytes, framing, token
  buckets, latency, hand-off);
* ``sent``: waiting for its own send of k - 2 to be delivered.

and ``latency``: the profile's gloo latency a step beyond its ping-pong
(``Transport.step_extra_s``, fitted on one host at P = 2) times the closed form's
``2 (P - 1)`` steps, which the price adds to the ring's messages. Mean over the ranks, a
ring iteration; the parts add up to ``simulator.compare``'s predicted comm of the point.

``--chain LINK_DIR``: a candidate, not the model: a ring whose rank-iterations take times
drawn from a link calibration's small gloo ping-pongs (``chain_rate_s``), its time an
iteration at each P over P = 2. Reads records only; about 3 s for four folders.

Imports: numpy, pandas, simpy (through the model), contracts, libraries.gloo, simulator.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

import cli
from libraries.gloo import gloo_ring_lengths

PROG = "python -m benchmarks.gloo_ring_iterations"
PARTS = ("cpu_own", "cpu_stretch", "reduce", "upstream", "wire", "sent")


def ring_iterations(p: int, n_bytes: float) -> int:
    """Ring iterations of one call (both phases; empty segments' iterations counted)."""
    return sum(len(phase) for phase in gloo_ring_lengths(p, 0, n_bytes))


class _Timed:
    """A ``MessageComm`` seen by one rank's ring: every event it hands out is labelled,
    and each send's posting time kept (for ``upstream`` against ``wire``)."""

    def __init__(self, comm, labels: dict, posted: dict):
        self._comm, self._labels, self._posted = comm, labels, posted
        self.env = _TimedEnv(comm.env, labels)

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def recv(self, dst, src, tag):
        ev = self._comm.recv(dst, src, tag)
        self._labels[ev] = ("arrival", (src, dst, tag))
        return ev

    def isend(self, src, dst, n_bytes, tag):
        self._posted[(src, dst, tag)] = self._comm.env.now
        ev = self._comm.isend(src, dst, n_bytes, tag)
        self._labels[ev] = ("sent", None)
        return ev

    def reduce(self, n_bytes):
        ev = self._comm.reduce(n_bytes)
        self._labels[ev] = ("reduce", None)
        return ev


class _TimedEnv:
    """The SimPy environment with its timeouts labelled as the ring's CPU."""

    def __init__(self, env, labels: dict):
        self._env, self._labels = env, labels

    def __getattr__(self, name):
        return getattr(self._env, name)

    def timeout(self, delay, value=None):
        ev = self._env.timeout(delay, value)
        self._labels[ev] = ("cpu", None)
        return ev


def timed_ring(parts: dict):
    """``comm.gloo.ring_allreduce`` with each rank's time put into ``parts[rank]`` by part
    (``PARTS``, before the CPU's split: ``cpu``)."""
    from simulator.model.comm import gloo
    labels: dict = {}
    posted: dict = {}

    def ring(p2p, ranks, i, n_bytes, tag):
        env = p2p.env
        inner = gloo.ring_allreduce(_Timed(p2p, labels, posted), ranks, i, n_bytes, tag)
        mine = parts[ranks[i]]
        try:
            ev = next(inner)
            while True:
                start = env.now
                value = yield ev
                kind, key = labels.pop(ev, ("other", None))
                if kind == "arrival":
                    before = min(max(posted.get(key, start), start), env.now)
                    mine["upstream"] += before - start
                    mine["wire"] += env.now - before
                else:
                    mine[kind] += env.now - start
                ev = inner.send(value)
        except StopIteration:
            return
    return ring


def predicted_parts(folder: Path, runs: Path, link_values: dict) -> tuple[dict, pd.DataFrame]:
    """The folder's records under ``runs`` predicted as ``benchmarks.repredict`` predicts
    them (``pipelines.validate_phantom.compared``), with every gloo allreduce call the
    prediction prices (``engine.fast.collective_s``) taken apart: {(P, bytes): its price,
    the ring's messages alone (``call_s``) and their parts (``timed_ring``, mean over the
    ranks)}, and the comparison's rows. The ring is priced message by message where the
    recurrence would do (``gloo_schedule.ring_alone_s``, equal within 1e-9)."""
    from unittest import mock

    from benchmarks.repredict import calibrate_workers_of
    from pipelines.validate_phantom import compared
    from simulator.engine import fast
    from simulator.model.comm import collectives, costs
    priced: dict = {}
    current: list = []

    def ring(p2p, ranks, i, n_bytes, tag):
        yield from timed_ring(current[-1])(p2p, ranks, i, n_bytes, tag)

    price_of = fast.collective_s

    def price(run, kind, ranks, n, algorithm="ring"):
        current.append(defaultdict(lambda: defaultdict(float)))
        total_s = price_of(run, kind, ranks, n, algorithm)
        parts = current.pop()
        if kind == "allreduce" and parts and (len(ranks), n) not in priced:
            priced[(len(ranks), n)] = {"price_s": total_s,
                                       **mean_parts(parts, run.routes, ranks)}
        return total_s
    shipped = pd.read_csv(folder / "compare.csv")
    with mock.patch.dict(collectives.ALLREDUCE, {"gloo_ring": ring}), \
            mock.patch.object(costs, "ring_alone_s", lambda *a, **k: None), \
            mock.patch.object(fast, "collective_s", price):
        df, why = compared(folder, folder / "profile.json", calibrate_workers_of(shipped),
                           runs=runs, link_values=link_values)
    if df is None:
        raise ValueError(why)
    return priced, df


def ring_parts(routes, ranks, n_bytes: float, gamma_s_per_byte: float) -> tuple[float, dict]:
    """One gloo ring allreduce alone on ``routes`` (``costs.simulated_alone_s``): when it
    ends, and each rank's time by part (``timed_ring``)."""
    from unittest import mock

    from simulator.model.comm import collectives, costs
    parts: dict = defaultdict(lambda: defaultdict(float))
    with mock.patch.dict(collectives.ALLREDUCE, {"gloo_ring": timed_ring(parts)}):
        end_s = costs.simulated_alone_s("allreduce", ranks, n_bytes, routes, gamma_s_per_byte,
                                        "gloo_ring", 0)
    return end_s, parts


def mean_parts(parts: dict, routes, ranks) -> dict:
    """One priced ring's parts, mean over its ranks (s), and their sum (``call_s``); the
    CPU split into ``c(n)`` and what ``max(1, P / C)`` adds to it (``comm.gloo.message_cpu_s``)."""
    from simulator.model.comm.gloo import cpu_share
    share = cpu_share(routes.link, len(ranks))
    out = dict.fromkeys(PARTS, 0.0)
    for rank in ranks:
        got = parts[rank]
        out["cpu_own"] += got["cpu"] / share / len(ranks)
        out["cpu_stretch"] += got["cpu"] * (1 - 1 / share) / len(ranks)
        for part in PARTS[2:]:
            out[part] += got[part] / len(ranks)
    out["call_s"] = sum(out.values())
    return out


def measured_point(recs: list[dict]) -> dict:
    """A point's figures a step, the median over its runs: ``comm_s`` (each rank's
    communication a step after its first, mean over the ranks), ``cpu_s`` (a rank's CPU,
    all its threads: the load meter over the rank's window, mean over the ranks, over the
    steps) and ``core_wait_s`` (a rank's threads' time runnable without a core, summed over
    its threads: the CPU check's ``thread_waits``, mean over the ranks, over the steps);
    and ``steps``, the steps a rank made."""
    from benchmarks.ddp_breakdown import core_wait_per_step_s, cpu_per_step_s
    from simulator.compare import iterations_of
    runs = []
    for rec in recs:
        it = iterations_of(rec)
        steps = int(it.groupby("rank").size().max())
        later = it[it["iteration"] > it.groupby("rank")["iteration"].transform("min")]
        runs.append({"comm_s": float(later.groupby("rank")["comm_s"].mean().mean()),
                     "cpu_s": cpu_per_step_s(rec, steps),
                     "core_wait_s": core_wait_per_step_s(rec, steps),
                     "steps": steps})
    return {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def allreduce_runs(runs: Path, mbit: int, into: Path) -> None:
    """Copies in ``into`` of the allreduce records of ``runs`` at ``mbit`` Mbit/s."""
    import shutil
    for d in sorted(runs.glob(f"*/{mbit}mbit/allreduce-P*")):
        shutil.copytree(d, into / d.relative_to(runs))


def folder_rows(folder: Path, mbit: int, link_values: dict) -> list[dict]:
    """One row a P of the folder's allreduce at ``mbit``: measured and modelled, a step and
    a ring iteration, the model's parts a ring iteration (``latency``: the profile's gloo
    latency a closed-form step, ``Transport.step_extra_s``, which the price adds to the
    ring's messages)."""
    import tempfile

    from contracts import record_archive
    from contracts.workload import load_workload
    from simulator.compare import usable_records
    files = sorted((folder / "workloads").glob("cnn*.toml"))
    if not files or not (folder / "profile.json").is_file():
        raise ValueError("not a phantom validation of the CNN (workloads/cnn*.toml, profile.json)")
    workload = load_workload(files[0])
    tensors = [float(t.bytes) for t in workload.tensors]
    with record_archive.unpacked(folder) as runs, tempfile.TemporaryDirectory() as tmp:
        allreduce_runs(runs, mbit, Path(tmp))
        if not any(Path(tmp).iterdir()):
            return []
        priced, df = predicted_parts(folder, Path(tmp), link_values)
        groups, _left_out = usable_records(Path(tmp), keep=("phantom",))
        measured = {key[1]: (measured_point(recs), len(recs)) for key, recs in groups.items()}
    rows = []
    for p, (got, runs_kept) in sorted(measured.items()):
        comm_s, steps = got["comm_s"], int(got["steps"])
        iterations = sum(ring_iterations(p, n) for n in tensors)
        calls = [priced[(p, n)] for n in tensors]
        compared_s = float(df.loc[df["workers"] == p, "predicted_comm_s"].iloc[0]) / steps
        row = {"folder": folder.name, "mbit": mbit, "workers": p, "runs": runs_kept,
               "ring_iterations_a_step": iterations,
               "measured_comm_ms_a_step": comm_s * 1e3,
               "model_comm_ms_a_step": sum(c["price_s"] for c in calls) * 1e3,
               "compare_comm_ms_a_step": compared_s * 1e3,
               "measured_us_an_iteration": comm_s * 1e6 / iterations,
               "model_us_an_iteration": sum(c["price_s"] for c in calls) * 1e6 / iterations,
               "measured_cpu_us_an_iteration": got["cpu_s"] * 1e6 / iterations,
               "measured_core_wait_us_an_iteration": got["core_wait_s"] * 1e6 / iterations,
               "latency_us": sum(c["price_s"] - c["call_s"] for c in calls) * 1e6 / iterations}
        for part in PARTS:
            row[f"{part}_us"] = sum(c[part] for c in calls) * 1e6 / iterations
        rows.append(row)
    return rows


def report(df: pd.DataFrame) -> str:
    """The table: a row a point; ms a step, then us a ring iteration with the model's parts."""
    cols = ["measured_us_an_iteration", "measured_cpu_us_an_iteration",
            "measured_core_wait_us_an_iteration", "model_us_an_iteration", "latency_us",
            *(f"{p}_us" for p in PARTS)]
    lines = ["folder       P runs iter/step | ms a step: measured  model | us a ring iteration: "
             "measured (its rank's CPU, core waits)  model = latency + " + " + ".join(PARTS)]
    for r in df.itertuples():
        figures = " ".join(f"{getattr(r, c):7.1f}" for c in cols)
        lines.append(f"{r.folder:11s} {r.workers:2d} {r.runs:4d} {r.ring_iterations_a_step:9d} | "
                     f"{r.measured_comm_ms_a_step:8.1f} {r.model_comm_ms_a_step:6.1f} | {figures}")
    return "\n".join(lines)


def chain_rate_s(work_s: np.ndarray, p: int, iterations: int, rng) -> float:
    """Time a ring iteration of a ring of ``p`` ranks in lock step with two segments in
    flight (``gloo/allreduce.cc``, ``ring``: iteration k waits for its own iteration k - 1
    and for the neighbour ``rank + 1``'s iteration k - 2), each rank-iteration taking a
    time drawn from ``work_s``: ``t_i(k) = max(t_i(k - 1), t_{i+1}(k - 2)) + W_ik``, the
    rate over the last three quarters of ``iterations``. With every draw alike it is that
    draw (the model's ring: no rank waits on its neighbour); with a spread a late rank
    holds up the ones behind it on the ring, more of them the more ranks there are."""
    before, last = np.zeros(p), np.zeros(p)       # t(k - 2), t(k - 1)
    start = iterations // 4
    for k in range(iterations):
        now = np.maximum(last, np.roll(before, -1)) + rng.choice(work_s, size=p)
        before, last = last, now
        if k == start:
            mark = float(now.max())
    return (float(last.max()) - mark) / (iterations - 1 - start)


def chain_growth(work_s: np.ndarray, ps, iterations: int = 4000, seed: int = 0) -> dict:
    """``chain_rate_s`` at each P over its rate at P = 2 (the P a link calibration sees)."""
    rng = np.random.default_rng(seed)
    rates = {p: chain_rate_s(work_s, p, iterations, rng) for p in sorted({2, *ps})}
    return {p: rates[p] / rates[2] for p in ps}


def pingpong_times_s(link_dir: Path, max_bytes: int = 4096) -> np.ndarray:
    """gloo's small half round trips of a link calibration (``link_pingpong.csv.xz``)."""
    rows = pd.read_csv(link_dir / "link_pingpong.csv.xz")
    rows = rows[(rows["backend"] == "gloo") & (rows["bytes"] <= max_bytes)]
    if rows.empty:
        raise ValueError(f"{link_dir} has no gloo rows of at most {max_bytes} bytes")
    return rows["time_s"].to_numpy(float)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=cli.input_folder,
                    help="phantom validation folders (records.tar.xz, profile.json, link.toml)")
    ap.add_argument("--mbit", type=cli.positive_int, default=1000,
                    help="the shaped rate of the points, Mbit/s")
    ap.add_argument("--cpu-per-message", type=cli.nonnegative_float, metavar="US",
                    help="the links' CPU a gloo message, microseconds, instead of each folder's "
                         "calibrated one")
    ap.add_argument("--out", type=cli.output_file(".csv"), help="also write the rows as CSV")
    ap.add_argument("--chain", type=cli.input_folder, metavar="LINK_DIR",
                    help="also print a ring's time an iteration at each P over P = 2 with each "
                         "rank-iteration drawn from this link calibration's gloo ping-pong "
                         "(link_pingpong.csv.xz): a candidate, not the model")
    return ap


def run(a) -> int:
    from contracts.files import atomic_write_text
    values = {} if a.cpu_per_message is None else {"cpu_s_per_message": a.cpu_per_message * 1e-6}
    try:
        work_s = pingpong_times_s(Path(a.chain)) if a.chain else None
    except (ValueError, OSError, KeyError) as e:
        return cli.usage_error(PROG, f"--chain {a.chain}: {e}")
    rows = []
    for folder in a.folders:
        try:
            rows += folder_rows(Path(folder), a.mbit, values)
        except ValueError as e:
            return cli.usage_error(PROG, f"{folder}: {e}")
    if not rows:
        return cli.usage_error(PROG, f"no faithful allreduce records at {a.mbit} Mbit/s")
    df = pd.DataFrame(rows)
    if a.out:
        atomic_write_text(a.out, df.to_csv(index=False))
    cli.print_out(report(df))
    if work_s is not None:
        growth = chain_growth(work_s, sorted(set(df["workers"])))
        cli.print_out("ring chain of the ping-pong's times, an iteration over P = 2: " + ", ".join(
            f"P = {p} x{g:.2f}" for p, g in growth.items()))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
