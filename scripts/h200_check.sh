#!/usr/bin/env bash
# One device call: the GPU tests stage by stage (each in its own process, under a time limit, so a hang
# or a broken context costs one stage only), then the bench, not recorded (scripts/h200_record.sh records).
# Logs go to $OUT.
# Usage: scripts/h200_check.sh [stages for the bench, default all] [extra bench args...]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STAGES=${1:-all}; shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
for stage in v0 v1 v2 v3 v4 v5; do
  timeout 240 python3 -m pytest tests/test_gpu_stages.py -q -x -k "$stage" -p no:cacheprovider 2>&1 \
    | tail -25 | tee -a "$OUT/gpu_tests.log"
  echo "== $stage rc=${PIPESTATUS[0]}" | tee -a "$OUT/gpu_tests.log"
done
timeout 120 python3 -m pytest tests/test_gpu_stages.py -q -k "torch or poison or unwritten" -p no:cacheprovider 2>&1 \
  | tail -5 | tee -a "$OUT/gpu_tests.log"
timeout 400 python3 -m tutorial bench --stages "$STAGES" "$@" 2>&1 | tee "$OUT/bench.log"
grep -E "^== |passed|failed" "$OUT/gpu_tests.log"
