#!/usr/bin/env bash
# Phantom against real runs at P = 2..15 on a 16-core machine: 16 emulated hosts
# (network namespaces, real.cluster), each pinned to a core of its own (taskset), so
# that the real runs' compute has the cores it stands for. Each of ddp, mpi_allreduce
# and ps_async runs once for real and once as a phantom of the CNN's workload
# (measured here, on one pinned core) at P = 2, 4, 8, 15 (ps_async: P workers + its
# server = 16 ranks at most), links of 100 Mbit/s. Everything goes under $OUT:
# cnn.toml, real/ and phantom/ (the sweeps' records and tables), summary.txt (time
# per iteration, real against phantom, per scheme and P) and the logs.
#
# Run from the repository root, as root (namespaces), in under 8 minutes:
#     OUT=/tmp/out bash benchmarks/phantom_16core.sh
# Needs: python 3.10+ with torch 2.13 (CPU or GPU build), iproute2 (ip, tc), taskset;
# the Python packages of pyproject.toml. With no internet, carry their wheels in
# shared/wheels/ (made on a machine with one: docs/phantom.md, "A 16-core machine"):
# mpich, mpi4py, simpy and, where the python lacks them, numpy, pandas, scipy,
# matplotlib, tqdm, psutil. The script installs from there only.
set -euo pipefail
OUT=${OUT:?set OUT to the folder that receives the results}
PY=${PYTHON:-python3}
PREFIX=ph16
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

if [ -d shared/wheels ]; then
  $PY -m pip install -q --no-index --find-links shared/wheels \
      mpich mpi4py simpy numpy pandas scipy matplotlib tqdm psutil || true
fi
missing=$($PY -c 'import importlib.util as u
print(" ".join(m for m in ("torch","mpi4py","simpy","numpy","pandas","scipy","matplotlib",
                           "tqdm","psutil") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then echo "missing python packages: $missing (carry their wheels)"; exit 2; fi
for tool in ip tc taskset; do command -v $tool >/dev/null || { echo "missing tool: $tool"; exit 2; }; done
[ "$(nproc)" -ge 16 ] || { echo "needs 16 cores, this machine has $(nproc)"; exit 2; }
BIN=$(dirname "$(command -v $PY)")
export PATH=$BIN:$PATH               # the mpich wheel's mpirun

echo "== $(date -u +%FT%TZ) $(nproc) cores; $($PY -c 'import torch; print("torch", torch.__version__)')"
taskset -c 0 $PY -m calibrate.workload --model cnn --input-shape 1,28,28 --batch-size 64 \
    --threads 1 --out "$OUT/cnn.toml"

cleanup() { $PY -m real.cluster down --prefix $PREFIX >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup
$PY -m real.cluster up --hosts 16 --bandwidth 100mbit --prefix $PREFIX
# Pin host i to core i: hydra starts every rank through the cluster's launcher script.
$PY - "$PREFIX" <<'EOF'
import os, shlex, sys
from real.cluster import read_state
c = read_state(sys.argv[1])
cases = "\n".join(f"    {a}) ns={shlex.quote(ns)}; cpu={i} ;;"
                  for i, (a, ns) in enumerate(zip(c.addresses, c.namespaces)))
text = f"""#!/bin/sh
[ "$1" = "-x" ] && shift
host=$1; shift
case "$host" in
{cases}
    *) echo "no host with address $host" >&2; exit 255 ;;
esac
exec taskset -c "$cpu" ip netns exec "$ns" sh -c "$*"
"""
open(c.hydra_launcher, "w").write(text)
os.chmod(c.hydra_launcher, 0o755)
print(f"pinned {c.n_hosts} hosts to cores 0..{c.n_hosts - 1}")
EOF

COMMON=(--cluster --prefix $PREFIX --schemes ddp,mpi_allreduce,ps_async --workers 2,4,8,15
        --dataset synthetic --train-size 20480 --batch-size 64 --threads 1 --timeout 120)
timeout 200 $PY -m real.sweep "${COMMON[@]}" --out "$OUT/real" || echo "real sweep: exit $?"
timeout 200 $PY -m real.sweep "${COMMON[@]}" --out "$OUT/phantom" \
    --compute phantom --workload "$OUT/cnn.toml" || echo "phantom sweep: exit $?"

$PY - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import sys
from pathlib import Path
from real.phantom_check import time_per_iteration
from simulator.contracts import record
out = Path(sys.argv[1])
print("time per iteration (ms), 5 warm-up iterations left out; 16 namespaces, a core each, "
      "100 Mbit/s")
print(f"{'scheme':<15}{'P':>3}{'real':>9}{'phantom':>9}{'diff':>8}  marks")
for d in sorted((out / "real").glob("*-P*-r0")):
    ph = out / "phantom" / d.name
    try:
        r, p = (time_per_iteration(x, 5) for x in (d, ph))
        marks = [f"{m}: {why}" for m, x in (("real", d), ("phantom", ph))
                 for why in [record.left_out_reason(record.read(x), ("phantom",))] if why]
    except (record.RecordError, ValueError, ZeroDivisionError) as e:
        print(f"{d.name}: {e}")
        continue
    alg, workers = d.name.split("-P")[0], d.name.split("-P")[1].split("-")[0]
    print(f"{alg:<15}{workers:>3}{r * 1e3:>9.3f}{p * 1e3:>9.3f}{(p - r) / r:>+8.1%}  "
          + "; ".join(marks))
EOF
echo "== done $(date -u +%FT%TZ)"
