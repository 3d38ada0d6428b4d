#!/usr/bin/env bash
# What a reader's GPU runs, run on the H200: the compute capability the code reads is overridden (DEEPGEMM_CC),
# so every capability branch (the library's choice of kernel, the stages' checks, bench, the notebooks' LIVE
# cells, the GPU tests' skips) takes the path of that GPU. Kernels still compile for the GPU's own architecture
# (deepgemm.jit.device_arch): sm_90a code, which runs the same v0..v2 and sm_80 kernel sources an 8.x card runs.
#
#   DEEPGEMM_COMMIT=$(git rev-parse HEAD) scripts/forced_cc.sh 8.9     bench, GPU tests and nbval (7.3 minutes at most)
#   PART=tests scripts/forced_cc.sh 12.0                                one part (bench, tests or nbval)
#
# 8.0 is an A100, 8.9 an RTX 4090 or L40, 12.0 an RTX 5090: v0..v2, cuBLAS and the library's sm_80 kernel run
# live, v3..v5 and the sm_90a library kernel are shown from the H200 record or skipped. The parts:
#   bench  python -m tutorial bench at 1024^3 and a tail shape, both dtypes: v0..v2 and cuBLAS verified and
#          timed, then one line saying why v3..v5 are not, and their rows from results/h200/progression.json
#   tests  the GPU tests (pytest -m gpu, tests and lab/tests): what the capability cannot run skips by the one
#          rule (tests/gpu.py); the call, torch and shape tests run deepgemm.gemm on the sm_80 kernel. The sm_80
#          kernel's own sweeps (test_sm80_*) are left out: compiled for sm_90a either way, they are the code
#          `h200_record.sh sm80` tests (gpu_sm80.txt); their dispatch test stays. TESTS_K="" runs them too.
#   nbval  the notebooks under nbval (make nbval; needs the wheels of `make wheels` carried in .whl): live where
#          the capability runs a notebook's stage, the record with one line saying why where it does not
# Limits per part in seconds: BENCH_S (60), TEST_S (200), NBVAL_S (180). Nothing is recorded under an
# overridden capability (tutorial.results refuses); the log is results/h200/forced_cc_<cc>.txt, headed by the
# GPU, driver, date, commit (DEEPGEMM_COMMIT: the device gets the tree without .git) and the capability, and
# copied to $OUT when set. The exit status is the first failing part's.
set -uo pipefail
cc=${1:?usage: scripts/forced_cc.sh CC, e.g. 8.0, 8.9 or 12.0}
export DEEPGEMM_CC=$cc PYTHONUNBUFFERED=1
export DEEPGEMM_COMMIT=${DEEPGEMM_COMMIT:-unknown}
unset DEEPGEMM_FORCE_SM80  # the capability alone picks the library's kernel
# A malformed capability stops here, named by the one function that reads it
python3 -c "from deepgemm.driver import capability_override; capability_override()" 2>&1 | tail -1 || exit 2
parts=${PART:-bench tests nbval}
suffix=""; [ "$parts" = "bench tests nbval" ] || suffix="_${parts// /_}"  # a part's log beside the whole run's
log=${REC_DIR:-results/h200}/forced_cc_$cc$suffix.txt
mkdir -p "${REC_DIR:-results/h200}"

{
  echo "# scripts/forced_cc.sh $cc ($parts) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $DEEPGEMM_COMMIT"
  echo "# DEEPGEMM_CC=$cc: the code reads compute capability $cc; kernels compile for the GPU's own architecture"
  python3 -m deepgemm 2>&1 | grep '^GPU: '  # the capability the library reads, and the kernel it runs
} > "$log"

# One part: its command under a limit, its output into the log, its exit status after it. run_part NAME SECONDS CMD...
run_part() {
  local name=$1 seconds=$2; shift 2
  echo "## $name: $*" >> "$log"
  timeout "$seconds" "$@" >> "$log" 2>&1
  local status=$?
  echo "## $name: exit $status$([ $status = 124 ] && echo " (over its ${seconds} s)")" >> "$log"
  return $status
}

status=0
for part in $parts; do
  case $part in
    bench) run_part bench "${BENCH_S:-60}" python3 -m tutorial bench --shapes 1024,257x300x136 --dtype both \
             --pairs 0 --settle 0.2 ;;
    tests) run_part tests "${TEST_S:-200}" python3 -m pytest tests lab/tests -m gpu -k "${TESTS_K-not test_sm80_}" \
             -q -rfEs -p no:cacheprovider --durations=8 ;;
    nbval) run_part nbval "${NBVAL_S:-180}" make --no-print-directory nbval WHEELS=.whl NBVAL_ARGS="-q --durations=8" ;;
    *) echo "unknown part $part: the parts are bench, tests and nbval" >&2; exit 2 ;;
  esac
  part_status=$?
  [ $status = 0 ] && status=$part_status
done

[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$log" "$OUT/"
cat "$log"
exit $status
