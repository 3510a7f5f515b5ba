#!/usr/bin/env bash
# gather_scatter's phantom runs with TCP's slow start after idle on (1, the kernel's default)
# and off (0) in every host namespace, alternating: does the root's port serve the scatter's
# messages in turn (as at P <= 4) once an idle socket keeps its window? The runs are
# phantom-3's and -5's (the CNN's workload file, 12 steps, batch 32, one rank a host, 20 Mbit/s,
# the switch-like 1 MB queues) at P = 4, 6, 8, SSAI_REPEATS runs a point (default 2), each run
# of the one setting followed by the other's (the order flipped every repeat), the cluster
# brought up anew for each (python -m real.cluster up --tcp-slow-start-after-idle 0|1) and
# torn down after. Records go to $OUT/ssai1/ and $OUT/ssai0/ (real.sweep folders, resumable);
# read them with python -m benchmarks.core_waits --rows RUN. Needs root (network namespaces).
#
# Run from the repository root, as root:
#     OUT=ssai bash benchmarks/slow_start_idle.sh
set -uo pipefail
OUT=${OUT:?set OUT to the folder that receives the records}
PY=${PYTHON:-.venv/bin/python}
WORKERS=${SSAI_WORKERS:-4 6 8}
REPEATS=${SSAI_REPEATS:-2}
RATE=${SSAI_RATE:-20mbit}
WORKLOAD=${SSAI_WORKLOAD:-docs/results/phantom-3/workloads/cnn.toml}
STEPS=12
BATCH=32
mkdir -p "$OUT"
trap '"$PY" -m real.cluster down > /dev/null 2>&1' EXIT

point() {   # point SETTING P REPEATS
    local s=$1 p=$2 n=$3 hosts=$(( $2 + 1 ))
    "$PY" -m real.cluster up --hosts "$hosts" --bandwidth "$RATE" \
        --tcp-slow-start-after-idle "$s" > "$OUT/cluster-ssai$s.log" 2>&1 || return 1
    "$PY" -m real.sweep --cluster --resume --schemes gather_scatter --workers "$p-$p" \
        --repeats "$n" --retry-testbed-bound 1 --retry-disturbed 1 --compute phantom \
        --workload "$WORKLOAD" --time-scale 1 --dataset synthetic --epochs 1 \
        --batch-size "$BATCH" --train-size $(( STEPS * BATCH * p )) --test-size 64 \
        --timeout 255 --out "$OUT/ssai$s" -- --threads 1 >> "$OUT/sweep-ssai$s.log" 2>&1
    local rc=$?
    "$PY" -m real.cluster down >> "$OUT/cluster-ssai$s.log" 2>&1
    echo "$(date -u +%H:%M:%S) tcp_slow_start_after_idle=$s P=$p runs=$n: exit $rc" \
        | tee -a "$OUT/campaign.log"
}

for n in $(seq 1 "$REPEATS"); do
    order="1 0"; [ $(( n % 2 )) -eq 0 ] && order="0 1"
    for p in $WORKERS; do
        for s in $order; do point "$s" "$p" "$n"; done
    done
done
