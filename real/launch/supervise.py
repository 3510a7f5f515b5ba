"""The launcher wrapper of ``real.train``: every rank that dies, hangs or is stopped leaves a
record.

``python -m real.train`` (alone, under ``mpirun``, ``torchrun`` or a sweep) runs
as three processes per rank::

    W  the process the launcher started: forwards SIGINT / SIGTERM / SIGHUP to R
    |  (and SIGUSR1, hydra's notice that a peer failed, on to C),
    |  and ends as R ends (with its exit code), so the launcher sees the rank's fate
    +- R  the recorder, in a session of its own: a launcher that tears the job down
       |  kills W (hydra sends SIGKILL to every rank), never R
       +- C  the rank itself (``PSGD_SUPERVISED=1``): trains and writes the record as
             before, and reports on a pipe (``Heartbeat``) its run id and config, its
             phase and every iteration it finishes

R knows how C ended because it is C's parent (exit code or signal), knows the
last iteration C reached, and acts on what C cannot:

* C is killed or crashes: R writes its rank's note (``real.records.failures``);
* C finishes no iteration for ``--timeout`` + ``GRACE_S`` while it may be
  waiting for a peer (a blocking MPI call has no deadline of its own): from the
  moment it starts to join them (``join``: MPI_Init, the first collectives) and
  while it trains (``sync``): R stops it and notes it as hung. A rank lost
  during start-up thus ends the run within ``--timeout`` + ``GRACE_S`` of the
  moment the others reach ``join``; before that (imports) the limit is
  ``STARTUP_S``;
* W disappears (the launcher tore the job down) or a signal arrives: R stops
  C (SIGTERM, then SIGKILL after ``STOP_GRACE_S``) and notes why.

Rank 0's R then writes the run's failed (or interrupted) record from every rank's note, naming
the rank that died first, its signal or exit code and its last iteration, with the iterations
every rank completed (C hands its rows to R as it goes, ``Heartbeat.rows``; a rank killed
outright loses at most its last ``real.records.timing.STREAM_EVERY_S``); a usage error (exit
code 2) writes nothing. C dies with R (``PR_SET_PDEATHSIG``), so no rank outlives its recorder.
``PSGD_SUPERVISE=0`` turns the wrapper off (the rank then runs as W itself, as before).

Imports: the standard library; ``real.records.failures`` and ``cli`` in the recorder only (W
and C's ``Heartbeat`` stay light: no torch, no MPI).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import deque

SUPERVISED_ENV = "PSGD_SUPERVISED"       # set in C: do not wrap again
SUPERVISE_ENV = "PSGD_SUPERVISE"         # "0": run without the wrapper
HEARTBEAT_ENV = "PSGD_HEARTBEAT_FD"
POLL_S = 0.2
GRACE_S = 3.0                  # beyond --timeout: the rank's own deadlines answer first
STARTUP_S = 60.0               # imports, before the rank joins its peers (phase "join")
STOP_GRACE_S = 2.0
NOTES_WAIT_S = 1.0             # rank 0 waits this long for the notes of the others
ORPHAN_GRACE_S = 0.5           # W is gone: C may be ending on its own, let it
USAGE_EXIT = 2
WATCHED_PHASES = ("start", "join", "sync")
ROWS_KEPT = 200_000            # iteration rows a recorder keeps for a failed record (the last)
PIPE_CHUNK_BYTES = 4000        # below PIPE_BUF (4096): one write is one piece in the pipe


# ---------------------------------------------------------------- C's side

class Heartbeat:
    """What C tells its recorder: one short line per message, never blocking training.

    ``announce`` (run id, config, environment), ``phase`` (``join``, ``load``, ``sync``,
    ``eval``, ``done``), ``beat`` (an iteration finished), ``rows`` (its timing rows),
    ``failed`` (C's error)."""

    def __init__(self, fd: int | None):
        self.fd = fd
        if fd is not None:
            try:
                os.set_blocking(fd, False)
            except OSError:
                self.fd = None        # inherited the variable, not the pipe

    @classmethod
    def from_env(cls, environ=os.environ) -> "Heartbeat":
        value = environ.get(HEARTBEAT_ENV, "")
        return cls(int(value) if value.isdigit() else None)

    def _send(self, line: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, (line.replace("\n", " ") + "\n").encode())
        except BlockingIOError:
            pass                      # the recorder is behind: a later beat says as much
        except OSError:
            self.fd = None            # no recorder any more

    def announce(self, **facts) -> None:
        self._send("a " + json.dumps(facts, default=str))

    def phase(self, name: str) -> None:
        self._send(f"p {name}")

    def beat(self, iteration: int) -> None:
        self._send(f"i {iteration}")

    def alive(self) -> None:
        """Progress that is not an iteration (a holder serving its workers' last pushes)."""
        self._send("k")

    def failed(self, cause: str) -> None:
        self._send("f " + json.dumps(cause))

    def rows(self, rows: list[dict]) -> None:
        """Iteration rows (``real.records.timing.IterationLog``), one line each, in writes of at
        most PIPE_BUF bytes (whole lines, never interleaved with another writer's)."""
        if self.fd is None:
            return
        from real.records.timing import row_line
        lines = [row_line(r) for r in rows]
        chunk: list[str] = []
        for line in lines:
            if chunk and sum(map(len, chunk)) + len(line) > PIPE_CHUNK_BYTES:
                self._send_lines(chunk)
                chunk = []
            chunk.append(line)
        self._send_lines(chunk)

    def _send_lines(self, lines: list[str]) -> None:
        if self.fd is None or not lines:
            return
        try:
            os.write(self.fd, "".join(lines).encode())
        except BlockingIOError:
            pass                      # the recorder is behind: these rows are lost to it
        except OSError:
            self.fd = None


# ---------------------------------------------------------------- W: the launched process

def wanted(environ=os.environ) -> bool:
    return SUPERVISED_ENV not in environ and environ.get(SUPERVISE_ENV, "1") != "0"


def peek(argv: list[str]) -> argparse.Namespace:
    """The few flags the recorder needs, read without judging the rest (C does that)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--out", default="runs")
    p.add_argument("--run-id", default=None)
    p.add_argument("--timeout", default="120")
    p.add_argument("--schemes", "--algorithm", dest="algorithm", default="serial")
    p.add_argument("-h", "--help", action="store_true")
    try:
        opts, _ = p.parse_known_args(argv)
        opts.timeout = float(opts.timeout)
    except (SystemExit, ValueError):
        opts = argparse.Namespace(out="runs", run_id=None, timeout=120.0, algorithm="serial",
                                  help=False)
    return opts


def supervised(argv: list[str]) -> int:
    """Run ``real.train argv`` as W: start R, pass signals on, end as R ends."""
    r_fd, w_fd = os.pipe()
    w_pid = os.getpid()
    pid = os.fork()
    if pid == 0:                                  # R
        try:
            os.setsid()
            _close_inherited(keep={r_fd, w_fd})
            code = Recorder(argv, peek(argv), w_pid).run(r_fd, w_fd)
        except BaseException:                     # noqa: BLE001 - R must never raise past here
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
        os._exit(code)
    os.close(r_fd)
    os.close(w_fd)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, lambda s, _f: _forward(pid, s))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:                                  # R was killed: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _close_inherited(keep: set[int]) -> None:
    """R holds nothing of its launcher's but the PMI socket C needs (hydra's listening
    socket, inherited by every rank, stays with W)."""
    pmi = os.environ.get("PMI_FD", "")
    keep = keep | {0, 1, 2} | ({int(pmi)} if pmi.isdigit() else set())
    for fd in sorted(int(f) for f in os.listdir("/proc/self/fd") if f.isdigit()):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _forward(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------- R: the recorder

class Recorder:
    """R: starts C, watches it, and leaves the rank's note (rank 0: the run's record)."""

    def __init__(self, argv: list[str], opts: argparse.Namespace, w_pid: int):
        from cli import launched_rank
        self.argv, self.opts, self.w_pid = argv, opts, w_pid
        self.rank = launched_rank()
        self.run_id: str | None = opts.run_id
        self.facts: dict = {}
        self.phase, self.last_iteration, self.cause = "start", None, ""
        self.heard = time.monotonic()
        self.stop_signal: int | None = None
        self.lock_fd: int | None = None
        self.out_existed = True
        self.buffer = b""
        self.rows: deque[str] = deque(maxlen=ROWS_KEPT)     # C's iteration rows, as sent

    # -- C
    def start(self, w_fd: int) -> subprocess.Popen:
        env = dict(os.environ, **{SUPERVISED_ENV: "1", HEARTBEAT_ENV: str(w_fd)})
        keep = [w_fd] + [int(os.environ[v]) for v in ("PMI_FD",)
                         if os.environ.get(v, "").isdigit()]
        return subprocess.Popen([sys.executable, "-m", "real.train", *self.argv], env=env,
                                pass_fds=keep, process_group=0, preexec_fn=_die_with_parent)

    def run(self, r_fd: int, w_fd: int) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.out_existed = os.path.isdir(self.opts.out)
        child = self.start(w_fd)
        # hydra's failure notice (mpirun -disable-auto-cleanup) is for the rank itself
        signal.signal(signal.SIGUSR1, lambda s, _f: _forward(child.pid, s))
        os.close(w_fd)
        why = self.watch(child, r_fd)
        if why == "orphaned":                 # C may be dying on its own: let it say how
            try:
                child.wait(timeout=ORPHAN_GRACE_S)
                why = "exited"
            except subprocess.TimeoutExpired:
                pass
        if why != "exited":
            _stop(child)
        return self.finish(why, child.wait(), r_fd)

    def _on_signal(self, sig: int, _frame) -> None:
        self.stop_signal = sig

    def watch(self, child: subprocess.Popen, r_fd: int) -> str:
        """Until C ends, a signal arrives, W disappears, or C misses its deadline."""
        while True:
            try:
                ready, _, _ = select.select([r_fd], [], [], POLL_S)
            except InterruptedError:
                ready = []
            if ready:
                self.feed(os.read(r_fd, 1 << 16))
            if child.poll() is not None:
                return "exited"
            if self.stop_signal is not None:
                return "signal"
            if os.getppid() != self.w_pid:
                return "orphaned"
            if self.overdue():
                return "hung"

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            kind, _, rest = line.decode(errors="replace").partition(" ")
            if kind == "r":               # rows come late, from a thread: not a sign of life
                self.rows.append(rest)
                continue
            self.heard = time.monotonic()
            if kind == "i":
                self.last_iteration = int(rest) if rest.lstrip("-").isdigit() else None
            elif kind == "p":
                self.phase = rest
            elif kind == "f":
                self.cause = json.loads(rest)
            elif kind == "a":
                self.facts.update(json.loads(rest))
                self.run_id = self.run_id or self.facts.get("run_id")
                self._lock()

    def overdue(self) -> bool:
        """No word from C for longer than its deadline, while it may be waiting for a peer
        (a single process, hogwild's included, has no peer to wait for)."""
        if self.phase not in WATCHED_PHASES or self.world_size() < 2:
            return False
        limit = self.opts.timeout + GRACE_S
        if self.phase == "start":
            limit = max(self.opts.timeout, STARTUP_S) + GRACE_S
        return time.monotonic() - self.heard > limit

    def world_size(self) -> int:
        if "world_size" in self.facts:
            return int(self.facts["world_size"])
        for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"):
            if os.environ.get(var, "").isdigit():
                return int(os.environ[var])
        return 1

    def _lock(self) -> None:
        """Rank 0's recorder holds the run's lock from the moment it knows the run id."""
        from real.records import failures
        if self.rank == 0 and self.run_id and self.lock_fd is None:
            try:
                self.lock_fd = failures.hold_lock(self.opts.out, self.run_id)
            except OSError:
                pass                  # --out unusable: C says so in one line

    # -- after C
    def finish(self, why: str, code: int, r_fd: int) -> int:
        from real.records import failures
        self.drain(r_fd)
        if why == "exited" and code == 0:
            if self.rank == 0 and self.run_id:
                failures.clean(self.opts.out, self.run_id)
            return 0
        note = self.note(why, code)
        if note["kind"] == "usage" and (self.rank == 0 or self.run_id is None):
            if self.rank == 0:     # (another rank refused before the run had a name:
                self.forget()      #  every rank checks the same flags, nobody reads its note)
            return USAGE_EXIT
        if self.run_id is None:
            self.run_id = _fallback_run_id(self.opts)
        try:
            failures.write_rows(self.opts.out, self.run_id, self.rank, self.rows)
            failures.write_note(self.opts.out, self.run_id, note)
            if self.rank == 0:
                self.write_record(note)
        except OSError as e:                      # --out went away or filled up meanwhile
            print(f"real.train: error: rank {self.rank}: no record of how it ended could be "
                  f"written ({e.filename}: {e.strerror}); it: {note['cause']}", file=sys.stderr)
        return {"usage": USAGE_EXIT, "interrupted": 130}.get(
            note["kind"], 128 + (-code) if code < 0 else (code or 1))

    def forget(self) -> None:
        """A usage error leaves nothing behind: not the lock, not an --out it made."""
        from real.records import failures
        if self.run_id:
            failures.clean(self.opts.out, self.run_id)
        if not self.out_existed:
            try:
                os.rmdir(self.opts.out)
            except OSError:
                pass

    def drain(self, r_fd: int) -> None:
        while select.select([r_fd], [], [], 0)[0]:
            data = os.read(r_fd, 1 << 16)
            if not data:
                return
            self.feed(data)

    def note(self, why: str, code: int) -> dict:
        from real.records import failures
        it, phase, r = self.last_iteration, self.phase, self.rank
        if why == "signal":
            kind = "interrupted" if self.stop_signal == signal.SIGINT else "terminated"
            return failures.make_note(r, kind, it, phase, signal_number=self.stop_signal)
        if why == "orphaned" and not self.cause:
            return failures.make_note(r, "ended", it, phase)
        if why == "hung":
            quiet = time.monotonic() - self.heard
            note = failures.make_note(r, "hung", it, phase, detail=(
                f"no iteration finished for {quiet:.0f} s (--timeout {self.opts.timeout:g} s)"))
            note["since"] = note["time"] - quiet      # when it went quiet: who stopped first
            return note
        if code == USAGE_EXIT and why == "exited":
            return failures.make_note(r, "usage", it, phase, exit_code=code)
        if code < 0 and why == "exited":
            return failures.make_note(r, "died", it, phase, signal_number=-code)
        if self.cause:
            return failures.make_note(r, failures.kind_of_failure(self.cause), it, phase,
                                      exit_code=code if code >= 0 else None, cause=self.cause)
        return failures.make_note(r, "died", it, phase, exit_code=code)

    def write_record(self, own: dict) -> None:
        from real.records import failures
        time.sleep(NOTES_WAIT_S)                  # the others' notes, written as they end
        notes = failures.read_notes(self.opts.out, self.run_id)
        if any(n["kind"] == "usage" for n in notes):
            self.forget()
            return
        notes = [n for n in notes if n["rank"] != own["rank"]] + [own]
        path = failures.write_failed_record(self.opts.out, self.run_id, notes, self.facts)
        failures.clean(self.opts.out, self.run_id)
        failure = failures.failure_of(notes)
        if failure["cause"] != self.cause:        # rank 0 said its own cause already
            print(f"real.train: {failure['cause']}; record {path}", file=sys.stderr, flush=True)


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM to C's process group (its own children too), SIGKILL after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _die_with_parent() -> None:
    """In C, before exec: the kernel kills C when R dies (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _fallback_run_id(opts) -> str:
    return f"{opts.algorithm}-failed-{time.strftime('%Y%m%d-%H%M%S')}"
