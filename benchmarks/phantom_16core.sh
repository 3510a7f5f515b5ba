#!/usr/bin/env bash
# Phantom against real runs with a core for every rank: python -m real.phantom_check on one
# host of 16 cores, ddp and mpi_allreduce at P = 15, 8, 4, 2 (the largest first: the time
# limit cuts the smallest), each rank bound to a core of its own (mpirun -bind-to core), two
# runs of each mode alternating. The CNN's workload is measured as the ranks compute: P
# calibrate.workload processes at once under the same mpirun and binding, two sets per P,
# and each phantom rank sleeps its own process's measurement (a step's time differs between
# processes, and between 2 and 15 busy cores: turbo, shared caches, hyperthread siblings).
# Every step says how it ended; a failed step does not stop the next, and the check itself
# stops starting runs in time to judge what ran, so the script ends in under 6 minutes.
# Everything goes under $OUT: env.txt (the machine: cores, their siblings and caches),
# install.log, check.txt (the table: real against phantom per scheme and P), check.err
# (each run as it ended), check/ (records, logs, workload files) and run.log (all of it).
#
# Run from the repository root:
#     OUT=/tmp/out bash benchmarks/phantom_16core.sh
# Needs python 3.10+ with torch (CPU or GPU build), numpy, pandas, scipy, psutil and tqdm.
# What a torch image lacks (the mpich wheel's mpirun, mpi4py, simpy) is installed offline
# from $WHEELS (default .device-wheels/, git-ignored), made on a machine with internet for
# the target's python (here 3.12):
#     pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#         --platform manylinux2014_x86_64 -d .device-wheels mpich mpi4py simpy
# No network namespaces: the machine this was written for has no iproute2; the ranks talk
# over loopback. Overrides for a smaller machine: PH16_SCHEMES, PH16_WORKERS, PH16_TRAIN_SIZE,
# PH16_BUDGET_S (the whole script's seconds, default 340), PYTHON.
set -uo pipefail
OUT=${OUT:?set OUT to the folder that receives the results}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.device-wheels}
SCHEMES=${PH16_SCHEMES:-ddp,mpi_allreduce}
WORKERS=${PH16_WORKERS:-2,4,8,15}
TRAIN_SIZE=${PH16_TRAIN_SIZE:-30720}       # 240 / 120 / 60 / 32 iterations at P = 2 / 4 / 8 / 15
BUDGET_S=${PH16_BUDGET_S:-340}
START=$(date +%s)
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PIP_DISABLE_PIP_VERSION_CHECK=1 \
       PIP_ROOT_USER_ACTION=ignore
elapsed() { echo $(( $(date +%s) - START )); }
step() {                        # step NAME CMD...: run it, say how it ended, never stop here
  local name=$1; shift
  echo "== $name (at $(elapsed) s)"
  "$@"; local rc=$?
  if [ $rc -eq 0 ]; then echo "== $name: ok"; else echo "!! $name: exit $rc"; fi
  return $rc
}

environment() {
  echo "date $(date -u +%FT%TZ); $(nproc) cores; $(uname -srm)"
  echo "python $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)')"
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  grep -m1 "model name" /proc/cpuinfo
  free -g | head -2
  lscpu | grep -E "^(Thread|Core|Socket|NUMA node\(s\)|L2|L3|CPU max|CPU min)" || true
  echo "hyperthread siblings: $(cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -u | tr '\n' ' ')"
  lscpu -e=CPU,CORE,SOCKET,NODE,MAXMHZ 2>/dev/null | head -20 || true
}

install() {
  # The python's own environment first; where pip may not write there, a venv beside it.
  local missing
  missing=$($PY - <<'EOF'
import importlib.util as u, os, sys
need = [p for p in ("mpi4py", "simpy") if u.find_spec(p) is None]
spec = u.find_spec("mpi4py")                # mpi4py's own wheel loads any MPI (MPI.mpich*.so);
if spec and not any(f.startswith("MPI.mpich") # one built against another MPI is replaced
                    for f in os.listdir(os.path.dirname(spec.origin))):
    need.append("mpi4py")
if not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpirun")):
    need.append("mpich")        # real.sweep takes the mpirun beside python first
print(" ".join(need))
EOF
)
  [ -z "$missing" ] && { echo "nothing to install"; return 0; }
  [ -d "$WHEELS" ] || { echo "missing: $missing, and no $WHEELS to install them from"; return 2; }
  echo "installing from $WHEELS: $missing"
  if ! $PY -m pip install -q --no-index --no-deps --ignore-installed --find-links "$WHEELS" \
       $missing >"$OUT/install.log" 2>&1
  then
    echo "pip into $($PY -c 'import sys; print(sys.prefix)') failed ($(tail -1 "$OUT/install.log"));" \
         "trying a venv with its packages"
    $PY -m venv --system-site-packages /tmp/ph16-venv &&
      /tmp/ph16-venv/bin/python -m pip install -q --no-index --no-deps --ignore-installed \
          --find-links "$WHEELS" $missing >>"$OUT/install.log" 2>&1 || { tail -3 "$OUT/install.log"; return 1; }
    PY=/tmp/ph16-venv/bin/python
  fi
}

use_wheel_mpi() {               # mpi4py loads the mpich wheel's library, not another MPI's
  local lib
  lib=$($PY -c 'import sys; print(sys.prefix)')/lib/libmpi.so.12
  if [ -e "$lib" ]; then export MPI4PY_LIBMPI=$lib; echo "MPI4PY_LIBMPI=$lib"; fi
}

mpi_smoke() {                   # two ranks say hello through the MPI the runs will use
  local mpirun
  mpirun=$(dirname "$($PY -c 'import sys; print(sys.executable)')")/mpirun
  [ -x "$mpirun" ] || mpirun=$(command -v mpirun) || { echo "no mpirun"; return 2; }
  echo "mpirun: $mpirun ($("$mpirun" --version 2>&1 | grep -m1 -i -E 'version|hydra'))"
  timeout 60 "$mpirun" -bind-to core -n 2 $PY -c \
    'from mpi4py import MPI; c = MPI.COMM_WORLD; import os
print(c.Get_rank(), c.allreduce(1), MPI.Get_library_version().split(chr(10))[0], "cores", sorted(os.sched_getaffinity(0)))
raise SystemExit(0 if c.Get_size() == 2 else "not one world of 2 ranks: mpi4py and mpirun are of different MPIs")'
}

check() {       # the time left goes to the check; its last run starts a run's timeout before
  local left=$(( BUDGET_S - $(elapsed) ))
  [ $left -gt 60 ] || { echo "only $left s left: no runs"; return 1; }
  timeout $(( left - 5 )) $PY -m real.phantom_check --out "$OUT/check" --schemes "$SCHEMES" \
      --workers "$WORKERS" --bind-to-core --repeats 2 --measurements 2 \
      --train-size "$TRAIN_SIZE" --time-limit $(( left - 60 )) --timeout 45 \
      >"$OUT/check.txt" 2>"$OUT/check.err"
  local rc=$?
  tail -n 60 "$OUT/check.err"; cat "$OUT/check.txt"
  return $rc                    # 1: some scheme missed the bar; 124: timed out
}

step environment environment | tee "$OUT/env.txt"
step install install
use_wheel_mpi
step "mpi smoke test" mpi_smoke
step "phantom check" check
echo "== done in $(elapsed) s; the table is in $OUT/check.txt"
exit 0
