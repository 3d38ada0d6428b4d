#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck on the Hopper stages (or the library kernel, STAGES=library)
# at a small and a tail shape (SHAPES), with compile-time knobs over the defaults (KNOBS, e.g. SPLIT_K=4).
# Writes one log (results/h200/sanitizer.txt) headed by the GPU, driver, date and commit; APPEND=1 adds to it.
set -uo pipefail
log=${1:-results/h200/sanitizer.txt}
stages=${STAGES:-v3,v4,v5}
shapes=${SHAPES:-256,129x200x72}
mkdir -p "$(dirname "$log")"
[ "${APPEND:-0}" = 1 ] || : > "$log"
{
  echo "# compute-sanitizer on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit ${DEEPGEMM_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
  echo "# $(compute-sanitizer --version | tail -1)"
  echo "# stages $stages, shapes $shapes (MxNxK), knobs ${KNOBS:-none}, fp16, two launches each"
} >> "$log"
for tool in memcheck racecheck synccheck; do
  echo "## $tool" >> "$log"
  # CuPy probes driver entry points that do not exist (cuGetProcAddress answers "invalid argument"):
  # those host API errors are not kernel faults, so they are left out of the report.
  timeout 400 compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 9 \
    python3 -m tutorial.target --stage "$stages" --shapes "$shapes" --dtype fp16 ${KNOBS:+--knobs "$KNOBS"} > /tmp/san.txt 2>&1
  echo "exit $?" >> "$log"
  { grep -E "Invalid|Hazard|Race|barrier|Barrier" /tmp/san.txt | head -10; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/san.txt; } >> "$log"
done
cat "$log"
