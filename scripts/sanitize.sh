#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck on the Hopper stages at a small and a tail shape.
# Writes one log (results/h200/sanitizer.txt) headed by the GPU, driver, date and commit.
set -uo pipefail
log=${1:-results/h200/sanitizer.txt}
mkdir -p "$(dirname "$log")"
{
  echo "# compute-sanitizer on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet HEAD -- 2>/dev/null || echo +dirty)"
  echo "# $(compute-sanitizer --version | tail -1)"
} > "$log"
for stage in ${STAGES:-v3 v4 v5}; do
  for shape in "256 256 256" "129 200 72"; do
    read -r m n k <<< "$shape"
    for tool in memcheck racecheck synccheck; do
      echo "## $stage ${m}x${n}x${k} $tool" >> "$log"
      timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 \
        python3 -m deepgemm run-once --stage "$stage" --m "$m" --n "$n" --k "$k" --dtype fp16 2>&1 \
        | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|error|Hazard" | head -20 >> "$log"
      echo "exit ${PIPESTATUS[0]}" >> "$log"
    done
  done
done
cat "$log"
