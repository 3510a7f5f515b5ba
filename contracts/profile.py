"""The profile: what the simulator knows about one machine and its models.

A profile is written by ``calibrate`` (``python -m calibrate``) from probes and
run records, and read here. It is one JSON file with a schema version; the
loader refuses a file it cannot read and names the field that is wrong.

Cost models and the parameters they use (units in the names):

* compute, per model and thread count ``T``::

      t_step(batch) = step_intercept_s + step_s_per_sample * batch

  one forward + backward + optimizer update; ``spread_cv`` is the coefficient
  of variation of single steps, ``backward_fraction`` the share of the step
  spent in backward (DDP overlaps communication with it).
* core sharing: ``k`` runnable single-thread processes on ``cores`` cores each
  run at ``min(1, cores / k)`` of full speed times ``sharing_efficiency(k)``
  (measured; 1.0 means perfect processor sharing).
* transport, per backend (``mpi``, ``gloo``), point to point (Hockney)::

      t_msg(n_bytes) = alpha_s + beta_s_per_byte * n_bytes

  plus ``gamma_s_per_byte`` for every byte a reduction adds up, and
  ``collective_alpha_s[op]``: the latency of one step of collective ``op``
  where it exceeds the ping-pong's ``alpha_s`` (gloo hands each call to a
  worker thread and wakes threads for every message of it; fitted at P = 2
  and carried to other P by the algorithm's number of steps), and
  ``eager_max_bytes``: MPI sends larger point-to-point messages by rendezvous
  (request, clear-to-send, data), three hand-offs where an eager one needs one.
  ``cpu_fraction``: the share of a collective's time its caller spends on a
  core, measured at P = 2 (gloo: mostly kernel time of TCP loopback and
  thread wake-ups, 0.67 here). Ranks that sleep while they wait still
  need that much CPU, and on an oversubscribed host they share the cores for it.
* time slicing: ``scheduler_quantum_s``, how long the kernel lets a busy
  process run before the next one on its core (measured with two busy
  processes on one core). With more runnable processes than cores, a message
  waits for its receiver's turn (``model.hardware.timeslice``); 0 = not measured.
  ``balance_delay_s``: how long a core stays idle before it takes a process
  over from a busy core (measured with two busy processes started on one
  core); with it, ``model.hardware.cores`` keeps one run queue per core; 0 = not
  measured, the cores are shared as a fluid. ``balance_delays_s``: every try
  of that probe, which the model draws from in turn (empty: the median alone).
  ``wake_wait_s``: how long a gloo rank woken at the end of a call waits for
  a core that another process has just taken (measured with two gloo ranks
  on one core: the second leaves an allreduce this long after the first, at
  a scheduler tick); ``model.hardware.cores`` admits such ranks one per this
  interval while every core is busy; 0 = not measured, they start at once.
* collectives: fitted alpha/beta per (backend, op, algorithm, workers) and
  message-size segment, kept for reports and for checking the message model.
* parameter server: ``t_update(params) = update_intercept_s +
  update_s_per_param * params`` (``w -= lr * g`` on one flat tensor); a model's
  ``server_update_s``, where measured (the real server's update of that model:
  its tensors' gradients in, torch's SGD step, the weights out), takes its place;
  ``server_idle_s`` / ``server_update_after_idle_s``, where measured, the same update
  after the server waited idle that long (a cold update takes longer).
* the training loop (optional): ``loop_s_per_step``, the Python a worker runs each step
  outside its step and its communication (the next batch fetched, the progress line, the
  curve's bookkeeping: a run's ``epoch_s`` less its iteration rows,
  ``real.records.timing.loop_s_per_step``), fitted from the calibration's own runs; the
  model charges it once a step on the worker's core, with its step (0: not measured).
* host copies (optional): ``copy_s_per_byte``, a copy of a flat vector into memory the
  process already has, and ``fresh_copy_s_per_byte``, the same into memory the allocator
  maps afresh, its pages faulted in on first touch (glibc maps every allocation above
  32 MiB and unmaps it when freed: ``calibrate.probes.copy_probe``); the schemes' own
  copies of the flat gradient or weights (``model.schemes``) are charged at them (0: not
  measured).
* network (optional): the link between two such hosts, ``t_msg(n) = latency_s +
  n / bandwidth_bytes_per_s``, from ``calibrate.link`` (``calibrate.fit --link``).

Imports: the standard library and contracts.files only (never torch or mpi4py).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import MISSING, asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from contracts.checks import non_finite_field
from contracts.files import atomic_write_text

SCHEMA_VERSION = 1


# glibc maps every allocation above its mmap threshold afresh and unmaps it when freed; the
# threshold follows the largest chunk freed up to DEFAULT_MMAP_THRESHOLD_MAX, 4 MiB *
# sizeof(long) = 32 MiB on 64-bit hosts (malloc/malloc.c): a tensor above it is new memory
FRESH_MIN_BYTES = 32 * 2**20


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the field."""


@dataclass(frozen=True)
class StepFit:
    """t_step(batch) = step_intercept_s + step_s_per_sample * batch, at one thread count."""
    threads: int
    step_intercept_s: float
    step_s_per_sample: float
    intercept_ci_s: float = 0.0       # 95% half-width
    slope_ci_s: float = 0.0
    r2: float = 1.0
    spread_cv: float = 0.0            # std / mean of single steps
    batches: tuple[int, ...] = ()     # batch sizes measured

    def step_s(self, batch: int) -> float:
        return self.step_intercept_s + self.step_s_per_sample * batch


@dataclass(frozen=True)
class ModelCost:
    """Compute cost and shape of one model."""
    model: str
    param_count: int
    layer_param_counts: tuple[int, ...]   # forward order; per-layer allreduce and DDP buckets use it
    steps: tuple[StepFit, ...]            # one per thread count measured
    backward_fraction: float = 0.6
    eval_s_per_sample: float = 0.0
    tensor_param_counts: tuple[int, ...] = ()  # per weight / bias tensor; () = unknown (use layers)
    # (from a workload file, ``contracts.workload``) each layer's share of the backward,
    # forward order; () = in proportion to its parameters
    layer_backward_shares: tuple[float, ...] = ()
    bytes_per_param: float = 4.0               # of a gradient element (float32)
    input_s_per_sample: float = 0.0            # host CPU core-seconds the input pipeline
                                               # spends on a sample (0: not modelled)
    input_workers: int = 0                     # loader processes a rank (0: any core of the host)
    # the input pipeline's seconds a sample with ``input_busy[i]`` loader processes busy on
    # the host at once (rising counts above 1; () = ``input_s_per_sample`` at any count;
    # ``simulator.model.hardware.input_pipeline``)
    input_busy: tuple[float, ...] = ()
    input_s_per_sample_busy: tuple[float, ...] = ()
    precision: str = "fp32"                    # the step's arithmetic (contracts.workload)
    buffer_count: int = 0                      # the model's buffers (BatchNorm's running
                                               # statistics), which DDP broadcasts each forward
    # the share of a measured step that is the optimizer's update (a workload file's
    # ``measured.update`` / ``step``); 0: none measured, where a device's run models it
    # (``simulator.model.hardware.optimizer_step``)
    update_fraction: float = 0.0
    # the parameter server's update of this model as the real server runs it (the
    # probe's median of ``real.schemes.ps.server_update``); 0: not measured, the server
    # line ``ServerCost`` prices it
    server_update_s: float = 0.0
    # the same update after the server waited idle (sleeping polls) ``server_idle_s[i]``
    # seconds: ``server_update_after_idle_s[i]`` seconds (the server probe's medians, idle
    # ascending from 0); () = not measured, ``server_update_s`` at any idle time
    server_idle_s: tuple[float, ...] = ()
    server_update_after_idle_s: tuple[float, ...] = ()

    @property
    def tensor_counts(self) -> tuple[int, ...]:
        """What a per-tensor all_reduce loop sends, one call each (layers if unrecorded)."""
        return self.tensor_param_counts or self.layer_param_counts

    @property
    def grad_bytes(self) -> int:
        return int(self.bytes_per_param * self.param_count)

    def backward_shares(self) -> tuple[float, ...]:
        """Each layer's share of the backward, forward order."""
        if len(self.layer_backward_shares) == len(self.layer_param_counts):
            return self.layer_backward_shares
        total = sum(self.layer_param_counts) or 1
        return tuple(c / total for c in self.layer_param_counts)

    def server_s(self, server: "ServerCost") -> float:
        """One update of this model by the parameter server: measured, else the line."""
        return self.server_update_s or server.update_s(self.param_count)

    @property
    def server_idle_curve(self) -> tuple[tuple[float, float], ...]:
        """The update against the server's idle time before it: (idle_s, update_s) points."""
        return tuple(zip(self.server_idle_s, self.server_update_after_idle_s))

    def step_fit(self, threads: int) -> StepFit:
        """The fit for ``threads``, or the nearest measured thread count below it."""
        fits = sorted(self.steps, key=lambda s: s.threads)
        below = [s for s in fits if s.threads <= threads]
        return below[-1] if below else fits[0]


@dataclass(frozen=True)
class Transport:
    """Point-to-point cost of one backend on the calibrated host (Hockney + reduction)."""
    backend: str
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float = 0.0
    collective_alpha_s: dict[str, float] = field(default_factory=dict)   # op -> s per step
    eager_max_bytes: int = 0               # larger point-to-point messages go rendezvous (0: unknown)
    cpu_fraction: float = 0.0              # of a collective's time spent on a core (0: unknown)
    call_latency_s: float = 0.0            # once per collective call (NCCL's base latency)
    poll_s: float = 0.0                    # ranks wait in sleeping polls up to this (0: spin)

    def step_extra_s(self, op: str) -> float:
        """What one step of collective ``op`` costs beyond a ping-pong's alpha."""
        return max(0.0, self.collective_alpha_s.get(op, self.alpha_s) - self.alpha_s)

    def message_s(self, n_bytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * n_bytes


@dataclass(frozen=True)
class Segment:
    """One straight line of a collective's time against message size."""
    min_bytes: int
    max_bytes: int
    alpha_s: float
    beta_s_per_byte: float
    alpha_ci_s: float = 0.0
    beta_ci_s_per_byte: float = 0.0
    r2: float = 1.0
    n_points: int = 0


@dataclass(frozen=True)
class CollectiveFit:
    backend: str          # mpi | gloo
    op: str               # allreduce | bcast | gather | scatter | sendrecv | ...
    algorithm: str        # ring | recursive_doubling | reduce_scatter_allgather | auto | -
    workers: int
    segments: tuple[Segment, ...]
    median_rel_error: float = 0.0
    worst_rel_error: float = 0.0

    def time_s(self, n_bytes: float) -> float:
        seg = next((s for s in self.segments if s.min_bytes <= n_bytes <= s.max_bytes),
                   self.segments[-1])
        return seg.alpha_s + seg.beta_s_per_byte * n_bytes


@dataclass(frozen=True)
class ServerCost:
    """t_update(params) = update_intercept_s + update_s_per_param * params."""
    update_intercept_s: float
    update_s_per_param: float
    r2: float = 1.0

    def update_s(self, params: int) -> float:
        return self.update_intercept_s + self.update_s_per_param * params


@dataclass(frozen=True)
class NetworkLink:
    """The network between two hosts of this kind, as measured (``calibrate.link``):
    t_msg(n) = latency_s + n / bandwidth_bytes_per_s (payload rate per host and direction).
    ``python -m simulator.predict`` links hosts like the profile's with it."""
    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = ""


@dataclass(frozen=True)
class Provenance:
    host: str
    cores: int
    created_utc: str
    commands: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    runs_seen: tuple[str, ...] = ()       # run ids calibration used
    workers_seen: tuple[int, ...] = ()    # worker counts calibration saw
    note: str = ""
    bar: str = ""                         # the quality bar it was judged by ("": not judged)
    below_bar: tuple[str, ...] = ()       # its fits below that bar (written with --force)


@dataclass(frozen=True)
class Profile:
    provenance: Provenance
    cores: int                                  # of the calibrated host
    models: tuple[ModelCost, ...]
    transports: tuple[Transport, ...]
    sharing_slowdown: dict[int, float]          # k procs -> measured slowdown of each (1.0 = alone)
    server: ServerCost
    collectives: tuple[CollectiveFit, ...] = ()
    scheduler_quantum_s: float = 0.0            # time slice of a busy process (0: not measured)
    balance_delay_s: float = 0.0                # idle core takes a process over (0: fluid cores)
    wake_wait_s: float = 0.0                    # woken gloo rank waits for a busy core (0: none)
    balance_delays_s: tuple[float, ...] = ()    # the balance delay's measured spread (seconds)
    network: NetworkLink | None = None          # between two such hosts (None: not measured)
    loop_s_per_step: float = 0.0                # a worker's loop outside its rows (0: not measured)
    copy_s_per_byte: float = 0.0                # a copy into memory already mapped (0: not measured)
    fresh_copy_s_per_byte: float = 0.0          # ... into memory mapped afresh (first touch)
    schema_version: int = SCHEMA_VERSION

    def model(self, name: str) -> ModelCost:
        for m in self.models:
            if m.model == name:
                return m
        known = ", ".join(m.model for m in self.models)
        raise ProfileError(f"profile has no model {name!r} (it has: {known})")

    def transport(self, backend: str) -> Transport:
        for t in self.transports:
            if t.backend == backend:
                return t
        known = ", ".join(t.backend for t in self.transports)
        raise ProfileError(f"profile has no transport {backend!r} (it has: {known})")

    def copy_s(self, n_bytes: float, new: bool) -> float:
        """One copy of a flat vector of ``n_bytes`` on the host: into a new tensor (``new``)
        above ``FRESH_MIN_BYTES`` at ``fresh_copy_s_per_byte`` (where measured), any other
        at ``copy_s_per_byte``; 0 where neither is measured."""
        fresh = new and n_bytes > FRESH_MIN_BYTES and self.fresh_copy_s_per_byte > 0
        return n_bytes * (self.fresh_copy_s_per_byte if fresh else self.copy_s_per_byte)

    def sharing_efficiency(self, k: int) -> float:
        """Measured speed relative to ideal processor sharing for k single-thread processes."""
        if not self.sharing_slowdown:
            return 1.0
        ks = sorted(self.sharing_slowdown)
        k_near = min(ks, key=lambda x: abs(x - k))
        ideal = max(1.0, k_near / self.cores)
        return min(1.0, ideal / self.sharing_slowdown[k_near])


# ---------------------------------------------------------------- reading and writing

def to_dict(profile: Profile) -> dict[str, Any]:
    d = asdict(profile)
    d["sharing_slowdown"] = {str(k): v for k, v in profile.sharing_slowdown.items()}
    return d


def save(profile: Profile, path: str | os.PathLike) -> None:
    """Write atomically: a reader never sees half a profile."""
    atomic_write_text(path, json.dumps(to_dict(profile), indent=1, sort_keys=True))


def load(path: str | os.PathLike) -> Profile:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ProfileError(f"profile {path} does not exist") from None
    except UnicodeDecodeError:
        raise ProfileError(f"profile {path} is not a text file (a profile is JSON written by "
                           "`python -m calibrate`)") from None
    except OSError as e:
        raise ProfileError(f"profile {path} cannot be read: {e.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {path} is not valid JSON (line {e.lineno}): "
                           "re-create it with `python -m calibrate`") from None
    try:
        return from_dict(raw)
    except ProfileError as e:
        raise ProfileError(f"profile {path}: {e}") from None


def load_default() -> Profile:
    """The profile shipped with the package (made by `python -m calibrate` on a real machine)."""
    ref = resources.files("simulator") / "data" / "default_profile.json"
    with resources.as_file(ref) as p:
        return load(p)


def _get(d: dict, key: str, kind: type | tuple, where: str):
    if not isinstance(d, dict):
        raise ProfileError(f"field {where or 'top level'} must be an object")
    if key not in d:
        raise ProfileError(f"field {where + '.' if where else ''}{key} is missing")
    return _value(d[key], kind, f"{where + '.' if where else ''}{key}")


def _value(v, kind: type, name: str):
    """``v`` as ``kind``: numbers finite and at least 0, an int a whole number."""
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise ProfileError(f"field {name} has the wrong type ({type(v).__name__}: "
                           f"{repr(v)[:40]})")
    if isinstance(v, float) and not math.isfinite(v):
        raise ProfileError(f"field {name} is {v!r}, not a finite number")
    if isinstance(v, (int, float)) and v < 0:
        raise ProfileError(f"field {name} is negative ({v})")
    return v


_KINDS = {"int": int, "float": float, "str": str}


def _items(values, type_name: str, name: str):
    """The elements of a ``tuple[X, ...]`` or the values of a ``dict[str, X]`` field, checked."""
    args = [t.strip() for t in type_name[type_name.index("[") + 1:-1].split(",")]
    kind = _KINDS.get([t for t in args if t != "..."][-1])
    if type_name.startswith("dict["):
        return {str(k): (_value(v, kind, f"{name}.{k}") if kind else v)
                for k, v in values.items()}
    return tuple(_value(v, kind, f"{name}[{i}]") if kind else v for i, v in enumerate(values))


def _build(cls, d: dict, where: str, nested: dict | None = None):
    """Build a dataclass from a dict, checking every field it needs; optional fields may be
    absent."""
    nested = nested or {}
    kwargs = {}
    for name, f in cls.__dataclass_fields__.items():
        optional = f.default is not MISSING or f.default_factory is not MISSING
        if optional and isinstance(d, dict) and name not in d:
            continue
        sub = f"{where}.{name}" if where else name
        if name in nested:
            items = _get(d, name, list, where)
            kwargs[name] = tuple(nested[name](x, f"{sub}[{i}]") for i, x in enumerate(items))
        elif f.type in _KINDS:
            kwargs[name] = _get(d, name, _KINDS[f.type], where)
        elif f.type.startswith("tuple["):
            kwargs[name] = _items(_get(d, name, list, where), f.type, sub)
        elif f.type.startswith("dict["):
            kwargs[name] = _items(_get(d, name, dict, where), f.type, sub)
        else:
            kwargs[name] = _get(d, name, object, where)
    return cls(**kwargs)


def from_dict(raw: Any) -> Profile:
    """A Profile from parsed JSON, checked whole: every field there and of its kind, every
    number finite, counts positive; ProfileError names the first field that is not."""
    if not isinstance(raw, dict):
        raise ProfileError("top level must be a JSON object")
    bad = non_finite_field(raw)
    if bad:
        raise ProfileError(f"field {bad[0] or 'top level'} is {bad[1]!r}, not a finite number")
    profile = _from_checked_dict(raw)
    _check_sense(profile)
    return profile


def _check_sense(p: Profile) -> None:
    """What the types allow but no machine has: no cores, a step that costs nothing."""
    if p.cores < 1:
        raise ProfileError(f"field cores is {p.cores}: a machine has at least 1 core")
    for i, m in enumerate(p.models):
        if m.param_count < 1:
            raise ProfileError(f"field models[{i}].param_count is {m.param_count}: a model has "
                               "parameters")
        if not 0.0 <= m.backward_fraction <= 1.0:
            raise ProfileError(f"field models[{i}].backward_fraction must be between 0 and 1 "
                               f"(got {m.backward_fraction})")
        for j, fit in enumerate(m.steps):
            if fit.threads < 1:
                raise ProfileError(f"field models[{i}].steps[{j}].threads is {fit.threads}: "
                                   "at least 1 thread")
            if not fit.step_s(1) > 0:
                raise ProfileError(f"field models[{i}].steps[{j}]: step_intercept_s and "
                                   "step_s_per_sample are both 0 (a step that takes no time)")
        busy = m.input_busy
        if len(busy) != len(m.input_s_per_sample_busy) or list(busy) != sorted(set(busy)) \
                or any(n <= 1 for n in busy):
            raise ProfileError(f"field models[{i}].input_busy must rise above 1 and have one "
                               "input_s_per_sample_busy each")
        idle = m.server_idle_s
        if len(idle) != len(m.server_update_after_idle_s) or list(idle) != sorted(set(idle)):
            raise ProfileError(f"field models[{i}].server_idle_s must rise and have one "
                               "server_update_after_idle_s each (re-run the server probe)")
    for k, slowdown in p.sharing_slowdown.items():
        if k < 1 or not slowdown > 0:
            raise ProfileError(f"field sharing_slowdown maps {k} processes to {slowdown}: "
                               "process counts of at least 1 to slowdowns above 0")


def _from_checked_dict(raw: dict) -> Profile:
    version = _get(raw, "schema_version", int, "")
    if version > SCHEMA_VERSION:
        raise ProfileError(f"field schema_version is {version}, newer than this program reads "
                           f"({SCHEMA_VERSION}): upgrade the package or re-calibrate")
    if version < 1:
        raise ProfileError(f"field schema_version {version} is not a known version")
    step = lambda x, w: _build(StepFit, x, w)  # noqa: E731
    seg = lambda x, w: _build(Segment, x, w)  # noqa: E731
    models = tuple(_build(ModelCost, m, f"models[{i}]", {"steps": step})
                   for i, m in enumerate(_get(raw, "models", list, "")))
    if not models:
        raise ProfileError("field models is empty")
    for i, m in enumerate(models):
        if not m.steps:
            raise ProfileError(f"field models[{i}].steps is empty")
    slow = _get(raw, "sharing_slowdown", dict, "")
    try:
        sharing = {int(k): float(v) for k, v in slow.items()}
    except (TypeError, ValueError):
        raise ProfileError("field sharing_slowdown must map process counts to numbers") from None
    transports = tuple(_build(Transport, t, f"transports[{i}]")
                       for i, t in enumerate(_get(raw, "transports", list, "")))
    for i, t in enumerate(transports):
        for op, v in t.collective_alpha_s.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ProfileError(f"field transports[{i}].collective_alpha_s.{op} must be a "
                                   f"number of seconds >= 0 (got {v!r})")
        if not 0.0 <= t.cpu_fraction <= 1.0:
            raise ProfileError(f"field transports[{i}].cpu_fraction must be between 0 and 1 "
                               f"(got {t.cpu_fraction!r})")
    quantum = (_get(raw, "scheduler_quantum_s", float, "")
               if "scheduler_quantum_s" in raw else 0.0)
    delay = (_get(raw, "balance_delay_s", float, "") if "balance_delay_s" in raw else 0.0)
    wake = _get(raw, "wake_wait_s", float, "") if "wake_wait_s" in raw else 0.0
    loop = _get(raw, "loop_s_per_step", float, "") if "loop_s_per_step" in raw else 0.0
    copies = tuple(_get(raw, k, float, "") if k in raw else 0.0
                   for k in ("copy_s_per_byte", "fresh_copy_s_per_byte"))
    if any(not c >= 0 for c in copies):
        raise ProfileError(f"fields copy_s_per_byte and fresh_copy_s_per_byte must be seconds "
                           f">= 0 (got {copies[0]!r}, {copies[1]!r})")
    delays = raw.get("balance_delays_s", [])
    if not isinstance(delays, (list, tuple)) or any(
            isinstance(d, bool) or not isinstance(d, (int, float)) or not d >= 0 for d in delays):
        raise ProfileError("field balance_delays_s must be a list of seconds >= 0")
    return Profile(
        provenance=_build(Provenance, _get(raw, "provenance", dict, ""), "provenance"),
        cores=_get(raw, "cores", int, ""),
        models=models,
        transports=transports,
        sharing_slowdown=sharing,
        server=_build(ServerCost, _get(raw, "server", dict, ""), "server"),
        collectives=tuple(_build(CollectiveFit, c, f"collectives[{i}]", {"segments": seg})
                          for i, c in enumerate(raw.get("collectives", []))),
        scheduler_quantum_s=quantum,
        balance_delay_s=delay,
        wake_wait_s=wake,
        balance_delays_s=tuple(float(d) for d in delays),
        network=(_build(NetworkLink, raw["network"], "network") if raw.get("network") is not None
                 else None),
        loop_s_per_step=loop,
        copy_s_per_byte=copies[0],
        fresh_copy_s_per_byte=copies[1],
        schema_version=version,
    )
