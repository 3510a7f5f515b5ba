#!/usr/bin/env bash
# The input pipeline's CPU an image on a many-core host, in one call of about 2-3 minutes:
# python -m benchmarks.dle.input_probe at 1, 2, 4, 8, 12 and all of the host's CPUs decoding
# at once (DeepLearningExamples' PyTorch loader worker, ImageNet-like JPEGs; no GPU used).
#
# Run from the repository root:
#     OUT=/tmp/out bash benchmarks/dle/input_probe_device.sh
# Needs python 3.10+ with numpy and Pillow (torch for the example's fast_collate, optional).
# The same Pillow as the project's machine (13.0.0, libjpeg-turbo 3.2.0) is installed
# offline from $WHEELS (default .device-wheels/, git-ignored), made on a machine with
# internet for the target's python (here 3.12):
#     pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#         -d .device-wheels pillow
# Without the wheel the host's own Pillow is used and the output says so; without either,
# the script says Pillow is missing and stops. Everything goes under $OUT: machine.txt (the
# CPU, its cores and siblings, the Pillow used), input_probe.json and input_probe.txt.
set -uo pipefail
OUT=${OUT:?set OUT to the folder that receives the results}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.device-wheels}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PIP_DISABLE_PIP_VERSION_CHECK=1 \
       PIP_ROOT_USER_ACTION=ignore
SITE=$(mktemp -d)
if ls "$WHEELS"/pillow-*.whl >/dev/null 2>&1 \
   && $PY -m pip install -q --no-deps --no-index --target "$SITE" "$WHEELS"/pillow-*.whl \
      > "$OUT/install.log" 2>&1; then
    export PYTHONPATH=$SITE:$PYTHONPATH
    PILLOW="the wheel from $WHEELS"
else
    PILLOW="the host's own (no wheel installed: see install.log)"
fi
if ! $PY -c "import PIL, numpy" 2>>"$OUT/install.log"; then
    echo "input_probe_device: Pillow or numpy is missing on this host and no wheel installed:" \
         "put a Pillow wheel for this python in $WHEELS (see the header)" | tee "$OUT/input_probe.txt"
    exit 2
fi
CPUS=$(nproc)
LEVELS=$(for n in 1 2 4 8 12; do [ "$n" -lt "$CPUS" ] && printf '%s,' "$n"; done)$CPUS
{
    echo "Command:  OUT=\$OUT bash benchmarks/dle/input_probe_device.sh"
    echo "Date:     $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "Pillow:   $PILLOW: $($PY -c 'import PIL, PIL.features as f; print(PIL.__version__, "libjpeg-turbo", f.version("libjpeg_turbo"))')"
    echo "Python:   $($PY -V 2>&1); torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo absent)"
    echo "Levels:   $LEVELS"
    echo; lscpu 2>/dev/null || grep -m1 "model name" /proc/cpuinfo
    echo; echo "thread siblings of cpu0: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null)"
    echo "governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"
timeout 280 $PY -m benchmarks.dle.input_probe --out "$OUT" --workers "$LEVELS" \
    2>&1 | tee "$OUT/input_probe.txt"
rc=${PIPESTATUS[0]}
rm -rf "$SITE"
exit "$rc"
