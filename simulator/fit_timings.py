"""Fit the unknowns a few timings determine, starting from a preset (``calibrate.fit --timings``).

    python -m calibrate.fit --timings my_timings.csv --preset cpu-25gbe --workload my_model.toml

``my_timings.csv`` has one row per measurement: ``scheme, workers, hosts,
time_s`` (seconds per training step, e.g. the median of a run; ``workers`` may
be written ``P``). Every row is predicted by the simulator (the scheme on
``workers`` ranks packed on ``hosts`` hosts of the preset's or file's kind,
the workload's model) and the parameters are moved, in log space, to
minimise the squared relative errors (``scipy.optimize.least_squares``):

* ``compute``: a factor on the workload's step time (your machine's speed);
* ``latency``, ``bandwidth``: the network link's per-message latency and
  payload bandwidth between hosts;
* ``intra_latency``, ``intra_bandwidth``: inside a host, the devices' link
  (accelerator hosts) or the backend's shared-memory transport (CPU hosts);
* ``call_latency``: a collective call's fixed cost (NCCL's base latency, or
  gloo's / MPI's per-call library cost).

Which parameters the data pin down is read from the Jacobian at the fit: a
parameter whose column is (numerically) zero changes no prediction; one that
moves with others (a direction of near-zero singular value) cannot be told
apart from them; and a 95% interval from the residuals' spread that spans
more than a factor of two is reported as not determined. ``--out DIR`` writes
the fitted cluster (``cluster.toml``, each fitted value with its source) and
workload (``workload.toml``).
Imports: ``contracts``, ``simulator.engine``, ``model.config`` (a tool), scipy.
"""
from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import cli
from contracts.checks import ConfigError
from contracts.cluster import Cluster, Hardware, Link, load_cluster, load_preset
from contracts.profile import Profile, ProfileError, load, load_default
from contracts.workload import Workload, load_workload
from simulator.engine.machine import machine
from simulator.engine.run import simulate
from simulator.model.config import SchemeConfig
from simulator.model.schemes import SCHEMES

PROG = "python -m calibrate.fit --timings"
PARAMETERS = ("compute", "latency", "bandwidth", "intra_latency", "intra_bandwidth",
              "call_latency")
ITERATIONS = 6                   # steps simulated per timing (their mean is compared)


@dataclass(frozen=True)
class Timing:
    scheme: str
    workers: int
    hosts: int
    time_s: float


def read_timings(path: str | Path) -> list[Timing]:
    """Rows of the timings CSV; a bad row raises ConfigError naming file, line and fix."""
    path = Path(path)
    try:
        rows = list(csv.DictReader(path.read_text().splitlines()))
    except OSError as e:
        raise ConfigError(f"timings file {path} cannot be read: {e.strerror}") from None
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"timings file {path}, line {i}"
        row = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
        if "p" in row and "workers" not in row:
            row["workers"] = row["p"]
        missing = [k for k in ("scheme", "workers", "hosts", "time_s") if not row.get(k)]
        if missing:
            raise ConfigError(f"{where}: column {', '.join(missing)} missing (write scheme, "
                              "workers, hosts, time_s: seconds per step)")
        if row["scheme"] not in SCHEMES:
            raise ConfigError(f"{where}: unknown scheme {row['scheme']!r}")
        try:
            workers, hosts, t = int(row["workers"]), int(row["hosts"]), float(row["time_s"])
        except ValueError:
            raise ConfigError(f"{where}: workers and hosts must be whole numbers and time_s "
                              "seconds") from None
        if workers < 1 or hosts < 1 or hosts > workers or not t > 0 or not math.isfinite(t):
            raise ConfigError(f"{where}: need 1 <= hosts <= workers and time_s above 0")
        out.append(Timing(row["scheme"], workers, hosts, t))
    if not out:
        raise ConfigError(f"timings file {path} has no rows (scheme, workers, hosts, time_s)")
    return out


class Model:
    """Predicted time per step of each timing, as a function of the parameters."""

    def __init__(self, base: Cluster, profile: Profile, model: str, batch: int,
                 names: tuple[str, ...], backend: str = ""):
        self.base, self.profile, self.model, self.batch = base, profile, model, batch
        self.names, self.backend = names, backend
        self.start = {n: self.value(n) for n in names}

    def value(self, name: str) -> float:
        """The parameter's value in the base cluster and profile."""
        link, hw = self.base.link, self.base.hardware
        shm = self.profile.transport("nccl" if self._devices() else "mpi")
        intra = hw.intra if hw is not None and hw.intra is not None else None
        return {"compute": 1.0,
                "latency": link.latency_s if link else 20e-6,
                "bandwidth": link.bandwidth_bytes_per_s if link else 1.25e9,
                "intra_latency": intra.latency_s if intra else shm.alpha_s,
                "intra_bandwidth": (intra.bandwidth_bytes_per_s if intra
                                    else 1.0 / max(shm.beta_s_per_byte, 1e-15)),
                "call_latency": hw.call_latency_s if hw is not None else 0.0}[name]

    def _devices(self) -> bool:
        return self.base.device is not None

    def setup(self, values: dict) -> tuple[Cluster, Profile]:
        """The cluster and profile with ``values`` in place."""
        v = {**{n: self.value(n) for n in PARAMETERS}, **values}
        hw = self.base.hardware or Hardware()
        intra = hw.intra
        if self._devices():
            intra = Link(v["intra_bandwidth"], v["intra_latency"])
        hw = replace(hw, intra=intra, call_latency_s=v["call_latency"])
        cluster = replace(self.base, link=Link(v["bandwidth"], v["latency"]), hardware=hw)
        prof = self.profile
        cost = prof.model(self.model)
        steps = tuple(replace(s, step_intercept_s=s.step_intercept_s * v["compute"],
                              step_s_per_sample=s.step_s_per_sample * v["compute"])
                      for s in cost.steps)
        transports = tuple(
            t if self._devices() else replace(
                t, alpha_s=v["intra_latency"], beta_s_per_byte=1.0 / v["intra_bandwidth"],
                collective_alpha_s={k: a - t.alpha_s + v["intra_latency"]
                                    for k, a in t.collective_alpha_s.items()},
                call_latency_s=v["call_latency"])
            for t in prof.transports)
        models = tuple(replace(m, steps=steps) if m.model == self.model else m
                       for m in prof.models)
        return cluster, replace(prof, models=models, transports=transports)

    def predict(self, timings: list[Timing], values: dict) -> np.ndarray:
        cluster, prof = self.setup(values)
        work = Workload(model=self.model, batch_per_worker=self.batch, iterations=ITERATIONS,
                        threads_per_worker=None)
        out = []
        for t in timings:
            per_host = -(-t.workers // t.hosts)
            on = replace(cluster, hosts=t.hosts, placement="packed", ranks_per_host=per_host,
                         link=cluster.link if t.hosts > 1 else None,
                         cores_per_host=max(cluster.cores_per_host, per_host)
                         if self._devices() else cluster.cores_per_host)
            cfg = SchemeConfig(t.scheme, backend=self.backend
                               if SCHEMES[t.scheme].chosen_backend else "")
            out.append(simulate(cfg, t.workers, work, on, prof).time_s / ITERATIONS)
        return np.array(out)


@dataclass(frozen=True)
class Fit:
    names: tuple[str, ...]
    start: dict
    fitted: dict
    ci_factor: dict            # 95% interval as a factor (x/ this), inf where undetermined
    determined: dict           # name -> (bool, why)
    residuals: np.ndarray      # log(predicted / measured) per timing
    predicted_s: np.ndarray


def fit(model: Model, timings: list[Timing]) -> Fit:
    """Least squares in log space from the model's start; identifiability from the Jacobian."""
    from scipy.optimize import least_squares
    names = model.names
    measured = np.log([t.time_s for t in timings])
    x0 = np.log([max(model.start[n], 1e-12) for n in names])

    def resid(x):
        pred = model.predict(timings, dict(zip(names, np.exp(x))))
        return np.log(pred) - measured
    res = least_squares(resid, x0, diff_step=1e-3, x_scale=1.0, max_nfev=200)
    fitted = dict(zip(names, np.exp(res.x)))
    determined, ci = identifiability(res.jac, res.fun, names, len(timings))
    return Fit(names, dict(model.start), fitted, ci, determined, res.fun,
               model.predict(timings, fitted))


def identifiability(jac: np.ndarray, residuals: np.ndarray, names, n: int):
    """Which parameters the data determine: a zero column (changes nothing), a null
    direction of the Jacobian it takes part in (cannot be told apart), or a 95% interval
    wider than a factor of two."""
    from scipy import stats
    k = len(names)
    scale = np.abs(jac).max() or 1.0
    col = np.linalg.norm(jac, axis=0)
    _u, sv, vt = np.linalg.svd(jac, full_matrices=True)
    tol = 1e-6 * max(sv.max() if sv.size else 0.0, scale)
    null = [vt[i] for i in range(k) if i >= sv.size or sv[i] <= tol]
    dof = max(1, n - k)
    sigma2 = float(residuals @ residuals) / dof
    determined, ci = {}, {}
    try:
        cov = np.linalg.pinv(jac.T @ jac) * max(sigma2, 1e-12)
    except np.linalg.LinAlgError:
        cov = np.full((k, k), np.inf)
    t = stats.t.ppf(0.975, dof)
    for j, name in enumerate(names):
        half = t * math.sqrt(max(cov[j, j], 0.0))
        ci[name] = math.exp(half) if math.isfinite(half) else math.inf
        if col[j] <= tol:
            determined[name] = (False, "no timing depends on it")
        elif any(abs(v[j]) > 0.1 for v in null):
            partners = sorted({names[i] for v in null for i in range(k)
                               if abs(v[i]) > 0.1 and i != j})
            determined[name] = (False, "moves with " + (", ".join(partners) or "others")
                                + " (the Jacobian's rank is below the parameters')")
        elif n <= k and sigma2 <= 1e-12:
            determined[name] = (True, "exactly fitted (as many timings as parameters)")
        elif ci[name] > 2.0:
            determined[name] = (False, f"95% interval x/ {ci[name]:.3g}")
        else:
            determined[name] = (True, f"95% interval x/ {ci[name]:.3g}")
    return determined, ci


UNITS = {"compute": ("x", 1.0), "latency": ("us", 1e6), "bandwidth": ("Gbit/s", 8e-9),
         "intra_latency": ("us", 1e6), "intra_bandwidth": ("Gbit/s", 8e-9),
         "call_latency": ("us", 1e6)}


def report(f: Fit, timings: list[Timing]) -> str:
    lines = [f"{'parameter':<16}{'start':>12}{'fitted':>12}  unit     determined by the timings"]
    for n in f.names:
        unit, k = UNITS[n]
        ok, why = f.determined[n]
        lines.append(f"{n:<16}{f.start[n] * k:>12.4g}{f.fitted[n] * k:>12.4g}  {unit:<8} "
                     f"{'yes' if ok else 'NO'}: {why}")
    lines.append("")
    lines.append(f"{'scheme':<15}{'P':>5}{'hosts':>6}{'measured s':>12}{'predicted s':>13}"
                 f"{'error':>8}")
    for t, p in zip(timings, f.predicted_s):
        lines.append(f"{t.scheme:<15}{t.workers:>5}{t.hosts:>6}{t.time_s:>12.5g}{p:>13.5g}"
                     f"{100 * (p / t.time_s - 1):>7.1f}%")
    return "\n".join(lines)


def write_fitted(f: Fit, model: Model, out: Path, timings_path: str) -> list[Path]:
    """The fitted cluster and workload, each fitted value with its source."""
    from contracts.files import atomic_write_text
    from contracts.tomlw import dumps
    from contracts.units import duration_text, rate_text
    cluster, prof = model.setup(f.fitted)
    src = f"fitted by {PROG} {timings_path}"

    def val(value, name):
        ok, why = f.determined.get(name, (None, ""))
        if ok is None:
            return value
        return {"value": value, "source": f"{src} ({'determined' if ok else 'NOT determined'}:"
                                          f" {why})"}
    data = {"#": f"cluster fitted from {timings_path} by {PROG}", "name": "fitted",
            "cluster": {"hosts": cluster.hosts,
                        ("devices_per_host" if cluster.device else "cores_per_host"):
                        cluster.cores_per_host, "placement": cluster.placement}}
    if cluster.link:
        data["link"] = {"bandwidth": val(rate_text(cluster.link.bandwidth_bytes_per_s),
                                         "bandwidth"),
                        "latency": val(duration_text(cluster.link.latency_s), "latency")}
    hw = cluster.hardware
    if hw is not None and hw.device is not None:
        data["device"] = {"name": hw.device.name, "flops": f"{hw.device.flops_per_s:.9g}FLOP/s"}
        data["intra"] = {"bandwidth": val(rate_text(hw.intra.bandwidth_bytes_per_s),
                                          "intra_bandwidth"),
                         "latency": val(duration_text(hw.intra.latency_s), "intra_latency")}
        data["nccl"] = {"call_latency": val(duration_text(hw.call_latency_s), "call_latency"),
                        "channels": hw.channels} | _nccl_kept(hw)
    paths = [atomic_write_text(out / "cluster.toml", dumps(data))]
    from contracts.workload import save_workload, workload_of_cost
    w = workload_of_cost(prof.model(model.model), device=cluster.device.name
                         if cluster.device else "cpu", batch_size=model.batch,
                         provenance={"source": "fitted", "command": src})
    paths.append(save_workload(w, out / "workload.toml", comment=src))
    return paths


def _nccl_kept(hw) -> dict:
    """The starting point's NCCL values that no fit moves: the channel cap, the protocol
    (with its size rule's threshold), the LL and LL128 protocols' costs, the release."""
    from contracts.units import duration_text, rate_text
    kept = {"protocol": hw.protocol}
    if hw.channel_bytes_per_s:
        kept["channel_bandwidth"] = rate_text(hw.channel_bytes_per_s)
    for name, ll in (("ll", hw.ll), ("ll128", hw.ll128)):
        if ll is not None:
            kept |= {f"{name}_call_latency": duration_text(ll.call_latency_s),
                     f"{name}_intra_latency": duration_text(ll.intra_latency_s),
                     f"{name}_link_latency": duration_text(ll.link_latency_s),
                     f"{name}_bandwidth_share": ll.bandwidth_share}
            if ll.max_bus_bytes_per_s:
                kept[f"{name}_max_bandwidth"] = rate_text(ll.max_bus_bytes_per_s)
    if hw.release:
        kept["release"] = hw.release
    if hw.ring_plateau != 1.0:
        kept["ring_plateau"] = hw.ring_plateau
        kept["ring_plateau_bytes_per_rank"] = f"{hw.ring_plateau_bytes:.0f}B"
    if hw.protocol == "nccl-2.2":
        kept["ll_threshold"] = f"{hw.ll_threshold_bytes:.0f}B"
    if hw.protocol == "nccl-2.3":
        kept["ll_thread_threshold"] = f"{hw.ll_thread_bytes:.0f}B"
    return kept


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--timings", required=True, help="CSV: scheme, workers, hosts, time_s")
    c = p.add_mutually_exclusive_group()
    c.add_argument("--preset", help="the starting point's cluster (a preset)")
    c.add_argument("--cluster", type=cli.input_file,
                   help="the starting point's cluster (a cluster TOML)")
    p.add_argument("--workload", help="the model's workload file (default: --model of the "
                                      "profile)")
    p.add_argument("--model", default="cnn", help="a model of the profile")
    p.add_argument("--batch-size", type=cli.positive_int, default=64,
                   help="samples per step per worker of the timings")
    p.add_argument("--profile", type=cli.input_file,
                   help="profile JSON for what the cluster does not decide "
                                     "(default: the shipped one)")
    p.add_argument("--backend", choices=("gloo", "mpi", "nccl"),
                   help="library of ddp, allreduce and horovod rows")
    p.add_argument("--params", default="compute,latency,bandwidth",
                   type=cli.choice_list(PARAMETERS, allow_all=True),
                   help=f"parameters to fit: {', '.join(PARAMETERS)} or all")
    p.add_argument("--out", type=cli.output_folder,
                   help="folder for the fitted cluster.toml and workload.toml")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv, (ProfileError, ValueError))


def run(args) -> int:
    timings = read_timings(args.timings)
    base = (load_preset(args.preset) if args.preset else
            load_cluster(args.cluster) if args.cluster else load_preset("cpu-25gbe"))
    prof = load(args.profile) if args.profile else load_default()
    workloads = [(load_workload(args.workload), args.workload)] if args.workload else []
    mach = machine(prof, args.profile or "embedded", base, workloads)
    name = workloads[0][0].name if workloads else args.model
    mach.profile.model(name)
    model = Model(base, mach.profile, name, args.batch_size, tuple(args.params),
                  args.backend or "")
    result = fit(model, timings)
    print(report(result, timings))
    if args.out:
        paths = write_fitted(result, model, Path(args.out), args.timings)
        print(f"\nwrote {', '.join(map(str, paths))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
