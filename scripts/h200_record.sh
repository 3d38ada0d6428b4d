#!/usr/bin/env bash
# The recording run, in two parts that each fit one device call:
#   scripts/h200_record.sh bench    GPU tests, then progression (4096^3, 8192^3), raster and epilogue suites
#   scripts/h200_record.sh profile  Nsight Compute per stage at 4096^3 FP16, compute-sanitizer on v3-v5
# Everything lands in results/h200/ (and is copied to $OUT when set).
set -uo pipefail
export PYTHONUNBUFFERED=1
# The device gets the work tree without .git: pass the commit, e.g. DEEPGEMM_COMMIT=$(git rev-parse HEAD)
export DEEPGEMM_COMMIT=${DEEPGEMM_COMMIT:-unknown}
part=${1:-bench}
out=${OUT:-/tmp/out}; mkdir -p "$out" results/h200
if [ "$part" = bench ]; then
  timeout 420 python3 -m pytest tests -q -p no:cacheprovider 2>&1 | tail -15 | tee results/h200/gpu_tests.txt
  python3 -m deepgemm bench --suite progression --shapes 4096,8192 --dtype both --record 2>&1 | tail -32
  python3 -m deepgemm bench --suite raster --shapes 4096 --dtype both --record 2>&1 | tail -8
  python3 -m deepgemm bench --suite epilogue --shapes 4096,8192 --dtype both --record 2>&1 | tail -20
else
  timeout 300 python3 -m deepgemm profile --stages all --shapes 4096 --dtype fp16 --record 2>&1 | tail -8
  STAGES=v3,v4,v5 timeout 280 bash scripts/sanitize.sh results/h200/sanitizer.txt
fi
cp results/h200/* "$out/" 2>/dev/null
ls "$out"
