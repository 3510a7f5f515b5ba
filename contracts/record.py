"""Run records: one directory per run, written atomically, read by calibrate and compare.

Layout of ``RUNS/<run_id>/`` (schema version ``SCHEMA_VERSION``):

``record.json``
    ``schema_version``, ``run_id``, ``status`` (``completed`` | ``failed`` |
    ``interrupted``), ``failure`` (``{"cause": str, "rank": int | null}`` or
    null; a record written by the launcher wrapper, ``real.launch.supervise``, adds
    ``signal`` or ``exit_code`` of the rank that died, ``last_iteration`` it
    reached and ``noticed_by``, what a surviving rank saw),
    ``config`` (every flag of ``real.train``), ``environment`` (host, cores,
    ranks, ranks per host, threads per rank, launcher, library versions),
    ``timings`` (``startup_s``, ``data_load_s``, ``train_wall_s`` apart from
    both, from the first rank's start of training to the last rank's end; ``epoch_s`` list,
    ``eval_s``; ``rank_starts_s``, where written: each rank's start of training less the
    first rank's, the ranks' uneven start inside ``train_wall_s``, which no row holds). A
    rank's start of training is its exit from the barrier that starts it, everything the
    harness and the scheme set up (meters, probes, the scheme's ``prepare``) done before
    that barrier (``real.launch.runner.start_training``), so ``rank_starts_s`` is the
    barrier's exit spread; such records say so in ``rank_starts_at`` (``"start barrier's
    exit"``). Older records, without it, started each rank after its meters and the
    scheme's set-up, which their ``rank_starts_s`` and ``train_wall_s`` hold. ``results`` (``final_loss``,
    ``test_accuracy``, ``test_loss``, ``loss_curve`` as [iteration, loss]
    pairs, and the accuracy curve: see below), ``comm`` (``bytes_sent_per_rank``, and
    ``tcp``: per host, the TCP retransmission timeouts, loss probes, retransmitted and sent
    segments over training, ``real.records.tcpstats``), ``resources``
    (``cpu_util_percent_per_rank``, ``peak_rss_bytes_per_rank``) and
    ``extra`` (scheme-specific: staleness histogram, server update time, ...).
    ``environment`` also names the ``launcher`` (``mpirun``, ``torchrun``, ``srun``,
    ``python``) and every host with its ranks (``hosts``: [{"host", "ranks"}]; on the
    emulated cluster ``name/namespace``), and the ``device`` (``cpu`` or a GPU
    with its driver, CUDA and NCCL versions).

    ``compute`` (absent in older records: real): ``mode`` ``real`` or ``phantom``. A
    phantom run (``real.phantom``) slept each layer's measured time instead of computing
    it; its section also holds ``time_scale`` (S, every compute time multiplied by it),
    ``workload`` (``file``, its ``sha256``, ``name``, tensors, times and the file's own
    ``provenance``), ``batch_size``, ``batch_factor``, ``phantom_step_s`` (a step's
    sleeps), ``accuracy`` (why there is none: ``results.test_accuracy`` is null and no
    curve is kept) and ``sleep_policy``; how late each rank's sleeps woke is in
    ``testbed.checks.sleep_lateness``.

    ``disturbed`` (bool; absent in older records: not judged) and ``load``: whether
    other processes took CPU the run asked for (``real.records.load``). ``load`` holds
    ``before.load_avg`` (1, 5, 15 min, rank 0 at start), ``during`` (``load_avg_max``,
    ``load_avg_end``), ``per_rank`` (``host``, ``threads``, ``cpu_percent``,
    ``cpu_percent_of_threads``, ``served``: run time / (run + run-queue wait) of the
    rank's threads, ``window_s``: how long it was watched, from the barrier before
    training to the barrier after), ``machines`` (per kernel: ``cores``, ``ranks``, ``run_cores``,
    ``demand_cores``, ``served``, ``expected_served`` = min(1, cores / demand),
    ``others_cores``: CPU other processes used, in cores; ``disturbed``) and ``rule``
    (the criterion in words). Readers leave disturbed runs out of timing comparisons
    unless asked (``left_out_reason``).

    ``identity`` (absent in older records): ``settings``, every setting that changes
    the run's result (``RESULT_SETTINGS``, a value equal to its default left out), and
    ``digest``, a hash of them (``config_digest``). A sweep reuses a record only when
    its digest is the one the point would have; tables and comparisons group by it.

    ``testbed_bound`` (bool; absent in older records: not judged) and ``testbed``: whether
    the machine that ran the run stayed faithful to what it stands for (``real.records.testbed``):
    ``reasons`` (one line per failed check), ``thresholds``, and ``checks``, each with a
    ``verdict`` (``pass``, ``fail``, ``not judged``), ``why`` and its figures: ``cpu``
    (per machine: cores the ranks could use, the ranks' user and system CPU and the
    kernel's system and irq/softirq time in cores, the largest share of its window a rank's
    thread waited runnable for a core, counting threads whose waits average over 0.2 ms per
    time they ran), ``sleep_lateness`` (phantom runs, per rank: sleeps, p50,
    p99, max, late and asked totals), ``bytes`` (TCP payload each rank sent, what its
    scheme sends) and ``links`` (the emulated cluster, per shaper: bytes, packets, drops,
    overlimits, mean and backlogged rate as shares of the configured rate). Readers leave
    testbed-bound runs out of timing comparisons unless asked (``is_testbed_bound``).

``iterations.csv``
    one row per rank and iteration: ``rank, epoch, iteration, batch_size,
    compute_s, comm_s, wait_s, bytes_sent, loss`` (loss empty when not logged).
    ``compute_s`` is forward + backward + update. Rows with ``batch_size`` 0 are
    not training steps: ``iteration`` -1 is a communication-only phase (psgd's
    final weight averaging, the parameter server's first broadcast); with
    ``iteration`` >= 0 they are the parameter server's updates (compute = the
    update, comm = its messages). For hogwild, ``rank`` is the process index;
    for ddp ``comm_s`` is 0 because communication overlaps backward; ``wait_s`` is the part of a
    synchronising call spent waiting for the slowest rank to arrive (estimated
    from arrival times on the host's monotonic clock); ``comm_s`` is the rest.

The accuracy curve in ``results`` (``real.records.curve``; absent in older records):
``curve`` is a list of points ``{step, epoch, train_s, test_loss, test_accuracy}``
(``contracts.curve``): the initial weights at ``train_s`` 0, every
``eval_every`` iterations of the evaluating process and every epoch end, and the
final model; ``train_s`` is training time, evaluation kept out. ``curve_model``
says which model was scored (the common weights, the average of the workers'
weights, the holder's mix, the server's weights, the shared model);
``curve_eval_s`` is the scoring after training and ``curve_snapshot_s`` the
copies during it (and, with a target, the epoch-end scoring). With a target
(``--target-accuracy``): ``target_accuracy``, ``time_to_target_s`` (null when not
reached), ``target_reached``, ``target_note`` ("not reached in E epochs") and
``epochs_trained`` (the run stops at the end of the epoch in which it reached it).

**Identity.** ``RESULT_SETTINGS`` is the one list of the settings that change what a run
measures (time or accuracy): the scheme and P, model, data, batch, epochs, SGD settings,
scheme options, threads, seed, evaluation and target, device, the steps left out as
warm-up, and where the ranks ran
(the emulated cluster's link and ranks per host). Flags that only name, time out, log
or show progress (``--out``, ``--run-id``, ``--repeat``, ``--timeout``, ``--log-every``,
``--progress-file``, ``--data-dir``, ``--download``) are not in it, nor are flags that
only set others (``--preset``, ``--dry-run``). Each setting has the default its flag has
(None for those a record always names: scheme, P, model, dataset); a value equal to its
default is left out of the digest, so a
setting added later (a compute mode, say) with a default that keeps the old behaviour
leaves every older record's digest unchanged. A new result-changing flag is added here,
with its default, and nowhere else. Where the ranks ran is known to the digest only on
the emulated cluster (its link and ranks per host); a sweep with ``--hostfile`` or
``--launcher srun`` should keep each placement in a folder of its own.

**Left out.** ``left_out_reason`` is the one rule for which records a timing comparison
leaves out and why (``LEFT_OUT_MARKS``: ``phantom``, ``disturbed``, ``testbed-bound``);
every reader asks it.

Only this module decides the layout and writes a record; everything else calls ``write``
(a new record, its folder swapped in whole), ``amend`` (fields of a written one changed:
a failed run's cause, found after rank 0 wrote it) and ``read``.

Both files are checked whole when read (``check_record``, ``read_iterations``):
a field of the wrong kind, a NaN or an infinity, a truncated table raise
``RecordError`` naming the file and the field or line, so a reader drops the
record and says why instead of loading half of it. A record is replaced by
swapping the new folder with the old one in one step (``renameat2``'s
``RENAME_EXCHANGE``, where the file system has it), then removing the old.

Imports: pandas; contracts.checks, contracts.files, contracts.tables.
"""
from __future__ import annotations

import csv
import ctypes
import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection

from contracts.checks import non_finite_field
from contracts.files import atomic_write_text, read_json
from contracts.tables import TableError, read_table

SCHEMA_VERSION = 1
RECORD_FILE = "record.json"
ITER_FILE = "iterations.csv"
ITER_COLUMNS = ("rank", "epoch", "iteration", "batch_size", "compute_s", "comm_s",
                "wait_s", "bytes_sent", "loss")
REQUIRED_KEYS = ("schema_version", "run_id", "status", "config", "environment",
                 "timings", "results", "comm", "resources")
STATUSES = ("completed", "failed", "interrupted")
SECTIONS = ("config", "environment", "timings", "results", "comm", "resources")
ITER_KINDS = {"rank": "count", "epoch": "count", "iteration": "int", "batch_size": "count",
              "compute_s": "seconds", "comm_s": "seconds", "wait_s": "seconds",
              "bytes_sent": "count", "loss": "number?"}


class RecordError(ValueError):
    """A directory that is not a (readable) run record."""


@dataclass
class RunRecord:
    run_id: str
    config: dict[str, Any]
    environment: dict[str, Any]
    status: str = "completed"
    failure: dict[str, Any] | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    comm: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    iterations: list[dict[str, Any]] = field(default_factory=list)
    load: dict[str, Any] | None = None
    disturbed: bool | None = None
    testbed: dict[str, Any] | None = None
    testbed_bound: bool | None = None
    identity: dict[str, Any] | None = None
    compute: dict[str, Any] = field(default_factory=lambda: {"mode": "real"})

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, "status": self.status,
                "failure": self.failure, "config": self.config,
                "environment": self.environment, "timings": self.timings,
                "results": self.results, "comm": self.comm, "resources": self.resources,
                "extra": self.extra, "disturbed": self.disturbed, "load": self.load,
                "testbed_bound": self.testbed_bound, "testbed": self.testbed,
                "identity": self.identity, "compute": self.compute}


# ---------------------------------------------------------------- identity

# Every setting that changes a run's result, with the default its flag has (real.train).
RESULT_SETTINGS: dict[str, Any] = {
    "algorithm": None,          # the scheme
    "workers": None,            # P (hogwild's processes; ranks less the server for ps_*)
    "model": None,
    "dataset": None,            # the dataset's name, the model's own when not given
    "train_size": None,         # samples used (None: all of the dataset)
    "test_size": None,
    "epochs": 1,
    "batch_size": 64,           # per worker
    "global_batch": None,
    "lr": 0.05,
    "momentum": 0.0,
    "lr_decay": 0.0,
    "average_every": 0,         # psgd, async_avg
    "mpi_allreduce": "auto",    # mpi_allreduce's algorithm
    "device": "cpu",
    "backend": "auto",
    "threads": None,            # torch threads per rank (None: cores // ranks on the host)
    "seed": 1,
    "eval_every": 0,            # evaluation copies take time inside training
    "target_accuracy": None,    # the run stops at the epoch that reaches it
    "cluster": None,            # the emulated cluster: hosts, link rate, queue, ranks per host
    "compute": "real",          # real, or phantom: the compute slept (real.phantom)
    "workload_sha256": None,    # a phantom's workload file: its digest, not its path
    "time_scale": 1.0,          # a phantom's compute times are multiplied by it
    "warmup_steps": 1,          # steps its time per epoch leaves out (simulator.compare)
}
# Settings a table of one sweep holds several of (one row per scheme and P; threads are
# stated per row): the rest must agree for the rows to be one configuration.
PER_POINT_SETTINGS = ("algorithm", "workers", "threads")


def result_settings(config: dict[str, Any], workers: int | None,
                    cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings of ``RESULT_SETTINGS`` from a run's config (``real.train``'s flags, the
    dataset resolved), its worker count and the emulated cluster it ran on, defaults
    dropped: the dict that ``config_digest`` hashes and a record keeps."""
    values = {name: config.get(name, default) for name, default in RESULT_SETTINGS.items()}
    values["workers"] = workers
    values["cluster"] = cluster_setting(cluster)
    return {name: value for name, value in values.items()
            if value != RESULT_SETTINGS[name]}


def cluster_setting(cluster: dict[str, Any] | None) -> dict[str, Any] | None:
    """What of an emulated cluster (``real.cluster``'s state, plus the sweep's
    ``ranks_per_host``) changes a run: hosts, link rate, shaper queue, host queue, TCP's
    slow start after idle and congestion control where they were set, and how ranks are
    placed; not its names or addresses."""
    if not cluster:
        return None
    keys = ("bandwidth_bits_per_s", "burst_bytes", "queue_s", "queue_bytes",
            "host_queue_packets", "tcp_slow_start_after_idle", "tcp_congestion_control",
            "ranks_per_host", "hostfile")
    out = {k: cluster[k] for k in keys if cluster.get(k) is not None}
    out["hosts"] = len(cluster.get("namespaces") or ())
    return out


def config_digest(settings: dict[str, Any], without: Collection[str] = ()) -> str:
    """A short hash of ``settings`` (from ``result_settings``), leaving ``without`` out:
    equal settings give equal digests whatever their order."""
    kept = {k: v for k, v in settings.items() if k not in without}
    text = json.dumps(_jsonable(kept), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity(settings: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of its identity: the settings and their digest."""
    return {"digest": config_digest(settings), "settings": settings}


def settings_of(rec: dict[str, Any], default_dataset: dict[str, str] | None = None
                ) -> dict[str, Any]:
    """The result settings of a record: those it keeps, or, for an older record written
    without them, those its config and environment give (``default_dataset``: model ->
    its own dataset, where the config left the dataset to the model)."""
    ident = rec.get("identity")
    if isinstance(ident, dict) and isinstance(ident.get("settings"), dict):
        return ident["settings"]
    config, env = dict(rec.get("config") or {}), rec.get("environment") or {}
    if not config.get("dataset") and default_dataset:
        config["dataset"] = default_dataset.get(config.get("model"))
    return result_settings(config, env.get("workers", env.get("ranks")), env.get("cluster"))


def digest_of(rec: dict[str, Any], default_dataset: dict[str, str] | None = None) -> str:
    """The record's digest (computed from its config where an older record has none)."""
    ident = rec.get("identity")
    if isinstance(ident, dict) and isinstance(ident.get("digest"), str):
        return ident["digest"]
    return config_digest(settings_of(rec, default_dataset))


def settings_difference(old: dict[str, Any], new: dict[str, Any],
                        without: Collection[str] = ()) -> str:
    """How two runs' settings differ, in words: ``train_size 256 -> 2048``."""
    names = [n for n in RESULT_SETTINGS if n not in without and old.get(n, RESULT_SETTINGS[n])
             != new.get(n, RESULT_SETTINGS[n])]
    return ", ".join(f"{n} {_shown(old.get(n, RESULT_SETTINGS[n]))} -> "
                     f"{_shown(new.get(n, RESULT_SETTINGS[n]))}" for n in names) or "none"


def _shown(value) -> str:
    if value is None:
        return "default"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)


# ---------------------------------------------------------------- left out of comparisons

# Marks that leave a record out of timing comparisons, each with what it means; readers
# keep marked records only when asked (``keep``). A new mark is one entry here and one
# line in ``left_out_reason``.
LEFT_OUT_MARKS: dict[str, str] = {
    "disturbed": "other processes took CPU the run asked for",
    "testbed-bound": "the machine, not what it stands for, set the pace",
    "phantom": "compute slept, which takes no core; the model's compute takes one",
}


def left_out_reason(rec: dict[str, Any], keep: Collection[str] = ()) -> str | None:
    """The mark for which a timing comparison leaves this completed record out
    (a key of ``LEFT_OUT_MARKS``), or None when it counts; marks in ``keep`` count."""
    if is_phantom(rec) and "phantom" not in keep:
        return "phantom"
    if is_disturbed(rec) and "disturbed" not in keep:
        return "disturbed"
    if is_testbed_bound(rec) and "testbed-bound" not in keep:
        return "testbed-bound"
    return None


def left_out_note(counts: dict[str, int], total: int, flags: dict[str, str]) -> str:
    """One line: how many records of ``total`` were left out and why, by mark, with the
    flag that keeps each kind (``flags``: mark -> flag); "" when none."""
    left = sum(counts.values())
    if not left:
        return ""
    parts = [f"{n} {mark} ({LEFT_OUT_MARKS[mark]}"
             + (f"; {flags[mark]} keeps them" if mark in flags else "") + ")"
             for mark, n in sorted(counts.items()) if n]
    return f"left out {left} of {total} run(s): " + ", ".join(parts)


def write(record: RunRecord, runs_dir: str | os.PathLike) -> Path:
    """Write ``runs_dir/<run_id>/`` atomically: build it in a temporary sibling, then rename.

    An existing record with the same id is replaced only once the new one is complete.
    """
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    final = runs_dir / record.run_id
    tmp = Path(tempfile.mkdtemp(dir=runs_dir, prefix=f".{record.run_id}.", suffix=".tmp"))
    try:
        _write_rows(tmp / ITER_FILE, record.iterations)
        (tmp / RECORD_FILE).write_text(_record_text(record.to_json()))
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def amend(run_dir: str | os.PathLike, rows: list[dict[str, Any]] | None = None,
          **fields: Any) -> Path:
    """Change ``fields`` of a record already written (a failed run's ``status`` and
    ``failure``, known only after rank 0 wrote it), and its ``iterations.csv`` when ``rows``
    are given: each file replaced in one step, the result checked before it is written."""
    run_dir = Path(run_dir)
    rec = read(run_dir)
    rec.update(fields)
    check_record(rec)
    if rows:
        write_iterations(run_dir, rows)
    atomic_write_text(run_dir / RECORD_FILE, _record_text(rec))
    return run_dir


def _record_text(rec: dict[str, Any]) -> str:
    return json.dumps(_jsonable(rec), indent=1)


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ITER_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: _csv_value(row.get(k)) for k in ITER_COLUMNS})


def write_iterations(run_dir: str | os.PathLike, rows: list[dict[str, Any]]) -> None:
    """Replace a record's ``iterations.csv`` in one step (a failed run's rows, gathered
    after its record was written)."""
    run_dir = Path(run_dir)
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{ITER_FILE}.", suffix=".tmp")
    os.close(fd)
    try:
        _write_rows(Path(tmp), rows)
        os.chmod(tmp, 0o644)
        os.replace(tmp, run_dir / ITER_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_dir(new: Path, final: Path) -> None:
    """Put folder ``new`` in place of ``final``: swap the two in one step, then remove the
    old one, so a reader always finds a complete record at ``final``."""
    if not final.exists():
        os.replace(new, final)
        return
    if _exchange(new, final):
        shutil.rmtree(new, ignore_errors=True)       # ``new`` now holds the old record
        return
    old = final.with_name(f".{final.name}.old")     # no RENAME_EXCHANGE: two renames
    shutil.rmtree(old, ignore_errors=True)
    os.replace(final, old)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):          # EINVAL, ENOSYS, EOPNOTSUPP: this file system can't
        return False
    raise OSError(errno, os.strerror(errno), str(b))


def read(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The record.json of a run directory, checked; raises RecordError naming what is wrong."""
    run_dir = Path(run_dir)
    path = run_dir / RECORD_FILE
    if not path.is_file():
        raise RecordError(f"{run_dir} is not a run record (no {RECORD_FILE})")
    rec = read_json(path, RecordError)
    try:
        check_record(rec)
    except RecordError as e:
        raise RecordError(f"{path}: {e}") from None
    return rec


def compute_mode(rec: dict[str, Any]) -> str:
    """``phantom`` for a phantom run (its compute slept), else ``real`` (older records too)."""
    compute = rec.get("compute")
    return compute.get("mode", "real") if isinstance(compute, dict) else "real"


def is_phantom(rec: dict[str, Any]) -> bool:
    """Was this a phantom run (no accuracy measured; times for the workload it names)?"""
    return compute_mode(rec) == "phantom"


def is_disturbed(rec: dict[str, Any]) -> bool:
    """Was this run slowed by other processes (``disturbed``)? False where not judged."""
    return bool(rec.get("disturbed"))


def is_testbed_bound(rec: dict[str, Any]) -> bool:
    """Did the machine, not the system it stands for, set this run's pace
    (``testbed_bound``, ``real.records.testbed``)? False where not judged."""
    return bool(rec.get("testbed_bound"))


def check_record(rec: Any) -> None:
    """A record.json's content, whole: every section of the right kind, every number finite.
    Raises RecordError naming the field."""
    if not isinstance(rec, dict):
        raise RecordError("not a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        raise RecordError(f"lacks field(s): {', '.join(missing)}")
    version = rec["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordError(f"field schema_version is {version!r}, not a version number")
    if version > SCHEMA_VERSION:
        raise RecordError(f"has schema_version {version}, newer than this program reads "
                          f"({SCHEMA_VERSION})")
    if not isinstance(rec["run_id"], str) or not rec["run_id"]:
        raise RecordError(f"field run_id is {rec['run_id']!r}, not a name")
    if rec["status"] not in STATUSES:
        raise RecordError(f"field status is {rec['status']!r}, not one of {', '.join(STATUSES)}")
    for key in SECTIONS + tuple(k for k in ("extra", "compute") if k in rec):
        if not isinstance(rec[key], dict):
            raise RecordError(f"field {key} is a {type(rec[key]).__name__}, not an object")
    failure = rec.get("failure")
    if failure is not None and not (isinstance(failure, dict) and "cause" in failure):
        raise RecordError("field failure is neither null nor an object with a cause")
    ident = rec.get("identity")
    if ident is not None and not (isinstance(ident, dict) and isinstance(ident.get("digest"), str)
                                  and isinstance(ident.get("settings"), dict)):
        raise RecordError("field identity is neither null nor an object with a digest and "
                          "settings")
    bad = non_finite_field(rec)
    if bad:
        raise RecordError(f"field {bad[0]} is {bad[1]!r}, not a finite number")
    if rec["status"] == "completed":
        wall = rec["timings"].get("train_wall_s")
        if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not wall > 0:
            raise RecordError(f"field timings.train_wall_s is {wall!r}, not a positive "
                              "number of seconds")


def read_iterations(run_dir: str | os.PathLike):
    """Per-iteration, per-rank timings as a pandas DataFrame, checked whole
    (``contracts.tables``): every column there, every row complete, whole numbers where
    counts are, finite times of at least 0 (``loss`` may be empty, never infinite).
    RecordError names the file, the line and the column."""
    path = Path(run_dir) / ITER_FILE
    if not path.is_file():
        raise RecordError(f"{run_dir} is not a run record (no {ITER_FILE})")
    try:
        return read_table(path, ITER_KINDS)
    except TableError as e:
        raise RecordError(str(e)) from None


def find_runs(runs_dir: str | os.PathLike) -> list[Path]:
    """Run directories below ``runs_dir`` (temporary and hidden ones skipped)."""
    runs_dir = Path(runs_dir)
    return sorted(p.parent for p in runs_dir.rglob(RECORD_FILE)
                  if not any(part.startswith(".") for part in p.relative_to(runs_dir).parts))


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def _jsonable(obj):
    """JSON cannot hold NaN or infinity portably; write null instead."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj
