#!/usr/bin/env bash
# The recording runs, parts that each fit one device call:
#   scripts/h200_record.sh bench    progression (4096^3, 8192^3; with v5 and cuBLAS alternated six times each),
#                                   the epilogue suite, the lab's v5_grid sweep, then the GPU tests
#   scripts/h200_record.sh progression  the progression and its pairs alone, then the GPU tests
#   scripts/h200_record.sh smoke    a few GPU tests of v5, the library and the call, then v5 and cuBLAS in two pairs
#   scripts/h200_record.sh sanitize compute-sanitizer on v3-v5 and on the library kernel where a CTA runs several
#                                   tiles, with split-K and with swap AB (sanitizer.txt, sanitizer_library.txt)
#   scripts/h200_record.sh sanitize-streamk  compute-sanitizer on the library kernel's stream-K (swap AB at odd M,
#                                   clusters of 4, one and two rounds cut, 256-row tiles), split-K with swap AB at odd M
#                                   and splits in the cluster (CLUSTER_K 2 swapped at odd M, 4 over several rounds)
#                                   (sanitizer_library_streamk.txt)
#   scripts/h200_record.sh sanitize-pingpong  compute-sanitizer on the library kernel's ping-pong (64- and 128-row
#                                   tiles, swap AB at odd M, clusters, odd tile counts per CTA, PDL)
#                                   (sanitizer_library_pingpong.txt)
#   scripts/h200_record.sh callhost the library call's host side against the tree in .old (lab's call_host.json)
#   scripts/h200_record.sh profile  Nsight Compute per stage at 4096^3 FP16, compute-sanitizer on v3-v5, then
#                                   the lab's v5_cluster and v5_group_m sweeps
#   scripts/h200_record.sh call     the call suite (deepgemm.gemm beside torch.matmul, every layout, host us per
#                                   call, first call cold and warm: call.json, about 3.5 minutes), then the
#                                   call's GPU tests (tests/test_gpu_call.py)
#   scripts/h200_record.sh tests    the whole test suite on the GPU (results/h200/gpu_tests.txt; TESTS and
#                                   TESTS_APPEND split it over device calls, see gpu_tests)
#   scripts/h200_record.sh pairs    v5 and cuBLAS alternated six times per shape and dtype, then the GPU tests
#   scripts/h200_record.sh verify   after changes outside the kernels: GPU tests, sanitizer, the lab's v5_group_m sweep
#   scripts/h200_record.sh coalescer  the lab's L2 coalescer probe (coalescer.json, gpc_map.json), then the GPU tests
#   scripts/h200_record.sh gpc      the lab's map of where v5's clusters land (gpc_placement.json), then the GPU tests
#   scripts/h200_record.sh autotune the autotune table at the shape table's shapes (autotune.json; DTYPE=fp16,
#                                   bf16 or both; SHAPES a comma-separated subset; AUTOTUNE_S its limit, 560)
#   scripts/h200_record.sh shapes   the shape table (102 problems) and the Llama-3-8B decoder block: deepgemm.gemm
#                                   beside torch.matmul in CUDA graphs and per call, the table's pick and the
#                                   heuristic's, merged into shapes.json; DTYPE=fp16, then DTYPE=bf16 (about 3
#                                   minutes each), or DTYPE=both in one call (about 6); PART=table or block for
#                                   one part; then the shape table's GPU tests. Between two calls, unpack the
#                                   first call's results_<gpu>.tgz here, so that the second merges into its record.
#   scripts/h200_record.sh stability  v5 for a minute per dtype at 4096^3, then on four streams (stability.json)
#   scripts/h200_record.sh soak     the library at every configuration its autotune table picks, both dtypes, on
#                                   four streams from two threads, each result compared bit for bit with its
#                                   first (stability.json; SOAK_S seconds, 620); longer than a device call:
#                                   `scripts/background.sh start soak scripts/h200_record.sh soak`, then
#                                   `scripts/background.sh wait soak 590` in the next call
#   scripts/h200_record.sh library-records  autotune FP16 at the shape table's shapes (its table goes into the
#                                   package), the shape table with it (both dtypes), then the soak, sanitize-streamk
#                                   and library-tests at once: every record the shapes issue asks of one commit
#                                   (about 28 minutes: through scripts/background.sh, started in the first call;
#                                   SOAK_S=0 leaves the soak out, about 16 minutes)
#   scripts/h200_record.sh gemv     a CUDA-core matrix-vector kernel at M = 1, 2 and 4 beside the library's pick and
#                                   torch.matmul, in graphs (lab's gemv.json; about two minutes)
#   scripts/h200_record.sh call-regime  ours and torch per call settled, as a burst, hot, and in graphs, at six shapes
#                                   above M = 500 (lab's call_regime.json; about a minute)
#   scripts/h200_record.sh two-ctas  the library kernel patched for two CTAs an SM and a CTA per tile, beside the
#                                   shipped one and the table's entry at three M <= 16 shapes (lab's
#                                   kernel_probe_two_ctas.json; about three minutes, most of it compiling)
#   scripts/h200_record.sh l2-prefetch  the library kernel patched to prefetch its first k-tiles into L2 before
#                                   griddepcontrol.wait, timed with PDL beside the shipped kernel with PDL and
#                                   without, at five M <= 16 shapes (lab's kernel_probe_l2_prefetch.json; about
#                                   five minutes, most of it compiling); then the table's tile at 1 x 28672 x
#                                   4096 stamped without PDL and with it, the last of three launches in a row
#                                   (kernel_probe_stamps_pdl.json: where PDL's 5 us there go)
#   scripts/h200_record.sh torch    the torch operator: its C++ call path's GPU tests (gpu_fast.txt), its GPU
#                                   tests (opcheck, gradients, compile, graphs; gpu_torch.txt), its host cost
#                                   (lab's op_host.json), then the training run (train.json)
#   scripts/h200_record.sh library-tests  the library's GPU tests (kernel, call, shape table, C++ path, torch op,
#                                   soak) in SHARDS pytest processes at once (gpu_library.txt)
#   scripts/h200_record.sh sm80     the sm_80 library kernel on this GPU (DEEPGEMM_FORCE_SM80=1): its GPU tests
#                                   (gpu_sm80.txt; SHARDS pytest processes at once, 6), then the call's GPU tests
#   scripts/h200_record.sh sm80-table  the sm_80 library kernel (DEEPGEMM_FORCE_SM80=1) beside v2 and cuBLAS at
#                                   4096^3 (sm80_vs_v2.txt), then its shape table beside torch.matmul
#                                   (shapes_sm80.json; DTYPE, default fp16; about 4 minutes)
#   scripts/h200_record.sh forced   what a reader's GPU runs, all at once (nothing is timed for a record):
#                                   scripts/forced_cc.sh at 8.0, 8.9 and 12.0, the sm_80 kernel's GPU tests
#                                   (gpu_sm80.txt) and the torch operator's (gpu_torch.txt), in parallel;
#                                   PARTS=tests runs one part of forced_cc.sh (its log forced_cc_<cc>_tests.txt)
#   scripts/h200_record.sh train-gemms  the training step's GEMMs alone beside torch.matmul, and each model's step
#                                   profiled (lab's train_gemms.json)
#   scripts/h200_record.sh space    the library kernel's tile widths, clusters, swap AB and stream-K under test
#                                   (tests/test_gpu_library.py), then the lab's sweep of its configuration space
#                                   beside torch.matmul (lab/results/h200/library_space.json; DTYPE, SHAPES)
#   scripts/h200_record.sh source   stall samples per SASS instruction and kernel.cu line, every stage, 4096^3
#                                   FP16 (profile_source.json)
#   scripts/h200_record.sh kernels  every kernel deepgemm.gemm launches, first call included, under Nsight Compute
#                                   (gemm_kernels.txt)
#   scripts/h200_record.sh timeline v4's and v5's pipeline over time from clock stamps compiled in (TIMELINE=1),
#                                   4096^3 FP16 (timeline.json), then its GPU tests
#   scripts/h200_record.sh ablation each stage with its technique switched off, timed beside cuBLAS and profiled,
#                                   FP16 (ablation.json, about 3 minutes)
#   scripts/h200_record.sh timeline-ablation  the same with an ablation built in: v4 without a swizzle, v5
#                                   without a wgmma batch in flight (timeline_ablation.txt)
#   scripts/h200_record.sh nbval    the notebooks live under nbval (nbval_live.txt; NBVAL=0 leaves it out), then
#                                   with NOTEBOOKS=1 every notebook (or those NB names) executed into
#                                   $OUT/notebooks.tgz; needs the wheels of `make wheels` carried in .whl
# Everything lands in results/<gpu>/ or lab/results/<gpu>/, results/h200/ on the H200 (and is copied to $OUT
# when set).
set -uo pipefail
export PYTHONUNBUFFERED=1
# The device gets the work tree without .git: pass the commit, e.g. DEEPGEMM_COMMIT=$(git rev-parse HEAD)
export DEEPGEMM_COMMIT=${DEEPGEMM_COMMIT:-unknown}
part=${1:-bench}

# The whole suite on the GPU, its tail kept with the GPU, date and commit. It outgrows one device call:
# TESTS="tests/test_gpu_stages.py" runs one part, TESTS_APPEND=1 adds a part to the file instead of replacing it
# (each device call starts from this tree again: join the parts returned by each call here).
# A test log's first line: what ran, on which GPU and driver, when, from which commit: test_header WHAT [NOTE]
test_header() {
  echo "# python3 -m pytest $1 on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $DEEPGEMM_COMMIT${DEEPGEMM_FORCE_SM80:+, DEEPGEMM_FORCE_SM80=1}${2:+, $2}"
}

gpu_tests() {
  local paths=${TESTS:-tests lab/tests} file=$rec/gpu_tests.txt
  [ "${TESTS_APPEND:-0}" = 1 ] || : > $file
  test_header "$paths" >> $file
  # shellcheck disable=SC2086  # paths is a list
  timeout 540 python3 -m pytest $paths -q -rfE -p no:cacheprovider --durations=5 2>&1 | tail -40 | tee -a $file
}

# One test file's run with its tail kept beside the GPU, date and commit: tested_file FILE SECONDS PATHS...
tested_file() {
  local file=$1 seconds=$2; shift 2
  test_header "$*" > "$file"
  timeout "$seconds" python3 -m pytest "$@" -q -rfE -p no:cacheprovider --durations=8 2>&1 | tail -40 | tee -a "$file"
}

# The same, its tests dealt round-robin to SHARDS pytest processes at once (the sm_80 kernel's tests spend most
# of their time compiling, one core each): sharded_file FILE SECONDS SHARDS PATHS...
sharded_file() {
  local file=$1 seconds=$2 shards=$3; shift 3
  local dir ids i
  dir=$(mktemp -d)
  python3 -m pytest "$@" --collect-only -q -p no:cacheprovider 2>/dev/null | grep '::' > "$dir/ids"
  test_header "$*" "$(wc -l < "$dir/ids") tests in $shards shards run at once" > "$file"
  for ((i = 0; i < shards; i++)); do
    mapfile -t ids < <(awk -v n="$shards" -v i="$i" '(NR - 1) % n == i' "$dir/ids")
    timeout "$seconds" python3 -m pytest "${ids[@]}" -q -rfE -p no:cacheprovider --durations=3 > "$dir/log$i" 2>&1 &
  done
  wait
  for ((i = 0; i < shards; i++)); do echo "## shard $((i + 1)) of $shards"; tail -12 "$dir/log$i"; done | tee -a "$file"
}

# compute-sanitizer on the library kernel, one log for several "SHAPES KNOBS" specs, then its summary lines:
# sanitized_specs FILE SPEC...
sanitized_specs() {
  local file=$1 append=0 spec; shift
  for spec in "$@"; do
    set -- $spec
    STAGES=library SHAPES=$1 KNOBS=$2 APPEND=$append timeout 300 bash scripts/sanitize.sh "$file" > /dev/null
    append=1
  done
  grep -E '^# (stages|commit)|^## |^exit|SUMMARY' "$file"
}

# Each GPU's records in its own folder, as tutorial.results and the lab keep them: results/h200 on the H200
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
slug=$(python3 -c 'import sys; from deepgemm.heuristic import gpu_slug; print(gpu_slug(sys.argv[1]))' \
  "${gpu_name:-NVIDIA H200}") || exit 1
rec=results/$slug
export REC_DIR=$rec  # scripts/forced_cc.sh writes its logs there too
out=${OUT:-/tmp/out}; mkdir -p "$out" $rec
if [ "$part" = bench ]; then  # the tests last: one of them checks that the kernels are the recorded ones
  python3 -m tutorial bench --suite progression --shapes 4096,8192 --dtype both --record 2>&1 | tail -42
  python3 -m tutorial bench --suite epilogue --shapes 4096,8192 --dtype both --record 2>&1 | tail -20
  python3 -m lab sweep v5_grid --shapes 4096,8192 --dtype both --record 2>&1 | tail -16
  gpu_tests
elif [ "$part" = smoke ]; then
  timeout 300 python3 -m pytest tests/test_gpu_call.py tests/test_gpu_stages.py tests/test_gpu_library.py -x -q -rfE \
    -p no:cacheprovider -k "one_plan or split_k_plans or undescribable or tma_cannot or v5_ or checks_its_config or swap_ab_fuses" 2>&1 | tail -25
  timeout 200 python3 -m tutorial bench --suite pairs --shapes 4096 --dtype fp16 --settle 0.5 2>&1 | tail -6
elif [ "$part" = sanitize ]; then
  STAGES=v3,v4,v5 timeout 250 bash scripts/sanitize.sh $rec/sanitizer.txt
  # The library kernel: 64-row tiles at 1024 x 1024 (two rounds of tiles per CTA), split-K 4 over four rounds
  # of units, swap AB with split-K at an odd M, and the default 128 x 256 tiles in clusters of two
  sanitized_specs $rec/sanitizer_library.txt "1024x1024x256 BLOCK_M=64,BLOCK_N=64,CLUSTER_M=1" \
    "256x2048x1024 BLOCK_M=64,BLOCK_N=64,CLUSTER_M=1,SPLIT_K=4" \
    "17x1000x1024 BLOCK_N=32,BLOCK_M=64,CLUSTER_M=1,SPLIT_K=3,SWAP_AB=1,NUM_STAGES=8" \
    "1024x2048x256 CLUSTER_M=2"
elif [ "$part" = sanitize-streamk ]; then  # the schedules that cut tiles, at odd M and odd tile counts
  sanitized_specs $rec/sanitizer_library_streamk.txt \
    "777x4096x520,33x1000x1000 SWAP_AB=1,BLOCK_N=200,BLOCK_M=128,CLUSTER_M=1,CLUSTER_N=4,STREAM_K=1,NUM_STAGES=5" \
    "1000x4096x4160,129x7000x520 BLOCK_M=128,BLOCK_N=176,CLUSTER_M=1,STREAM_K=1" \
    "2500x3000x200 BLOCK_M=64,BLOCK_N=128,CLUSTER_M=2,CLUSTER_N=2,STREAM_K=2" \
    "17x1000x1024 BLOCK_N=32,BLOCK_M=64,CLUSTER_M=1,SPLIT_K=3,SWAP_AB=1,NUM_STAGES=8" \
    "777x2112x1000,300x520x200 BLOCK_M=256,BLOCK_N=112,CLUSTER_M=2,STREAM_K=1,SWAP_AB=1,NUM_STAGES=4" \
    "1000x4096x1040 BLOCK_M=256,BLOCK_N=128,CLUSTER_M=2,STREAM_K=1,NUM_STAGES=4" \
    "17x2112x7168,9x5000x1000 BLOCK_M=64,BLOCK_N=24,CLUSTER_M=1,CLUSTER_K=2,SWAP_AB=1,NUM_STAGES=8" \
    "300x7000x4160 BLOCK_M=128,BLOCK_N=128,CLUSTER_M=1,CLUSTER_K=4,NUM_STAGES=4"
elif [ "$part" = sanitize-pingpong ]; then  # two warpgroups taking a CTA's tiles in turn, odd tile counts per CTA
  sanitized_specs $rec/sanitizer_library_pingpong.txt \
    "1000x3000x1000,129x7000x64 BLOCK_M=128,BLOCK_N=128,CLUSTER_M=2,PINGPONG=1" \
    "777x2112x1500,300x1000x520 BLOCK_M=128,BLOCK_N=144,CLUSTER_M=1,PINGPONG=1,NUM_STAGES=4" \
    "777x4100x264 BLOCK_M=64,BLOCK_N=48,CLUSTER_M=2,SWAP_AB=1,PINGPONG=1" \
    "1000x3000x1000 BLOCK_M=64,BLOCK_N=224,CLUSTER_M=2,PINGPONG=1,PDL=1"
elif [ "$part" = two-ctas ]; then  # two CTAs an SM, a CTA per tile, against the streaming tail at small M
  timeout 400 python3 -m lab.kernel_probe --variants two_ctas --shapes 1x28672x4096,16x28672x4096,16x24576x1536 \
    --name kernel_probe_two_ctas --record 2>&1 | tail -12
elif [ "$part" = l2-prefetch ]; then  # the next call's first k-tiles into L2 while the one before still runs
  timeout 480 python3 -m lab.kernel_probe --variants l2_prefetch,l2_prefetch_2x,l2_prefetch_early \
    --shapes 1x4096x4096,1x6144x4096,1x28672x4096,16x28672x4096,16x24576x1536 \
    --name kernel_probe_l2_prefetch --record 2>&1 | tail -12
  timeout 120 python3 -m lab.kernel_probe --variants stamps --shapes 1x28672x4096 \
    --config 'swap m256 n8 c1 s1 st6 jit,swap m256 n8 c1 s1 st6 pdl jit' --name kernel_probe_stamps_pdl --record \
    2>&1 | tail -8
elif [ "$part" = gemv ]; then  # the M = 1 rows at 32 and 48 MB: the wgmma kernel's start, or HBM?
  timeout 300 python3 -m lab.gemv --dtype "${DTYPE:-fp16}" --record 2>&1 | tail -30
elif [ "$part" = call-regime ]; then  # per call against the clock's state, at six shapes above M = 500
  timeout 300 python3 -m lab.call_regime --record 2>&1 | tail -40
elif [ "$part" = callhost ]; then
  timeout 300 python3 -m lab.call_host --against .old --record 2>&1 | tail -12
elif [ "$part" = progression ]; then
  python3 -m tutorial bench --suite progression --shapes 4096,8192 --dtype both --record 2>&1 | tail -42
  gpu_tests
elif [ "$part" = pairs ]; then
  python3 -m tutorial bench --suite pairs --shapes 4096,8192 --dtype both --record 2>&1 | tail -8
  gpu_tests
elif [ "$part" = coalescer ]; then
  timeout 300 python3 -m lab coalescer --record 2>&1 | tail -24
  gpu_tests
elif [ "$part" = gpc ]; then
  timeout 120 python3 -m lab gpc --record 2>&1 | tail -6
  gpu_tests
elif [ "$part" = shapes ]; then  # the whole log to $out, its summary here (the table is in shapes.json)
  dtype=${DTYPE:-fp16}
  timeout "${SHAPES_S:-600}" python3 -m tutorial bench --suite shapes --dtype "$dtype" --part "${PART:-both}" --record \
    > "$out/shapes_$dtype.log" 2>&1
  grep -v '^[a-z0-9]*16  ' "$out/shapes_$dtype.log" | tail -70
  timeout 60 python3 -m pytest tests/test_gpu_shapes.py -q -rfE -p no:cacheprovider 2>&1 | tail -5
elif [ "$part" = autotune ]; then  # longer than a device call: run it through scripts/background.sh
  timeout "${AUTOTUNE_S:-560}" python3 -m tutorial autotune --dtype "${DTYPE:-both}" ${SHAPES:+--shapes "$SHAPES"} \
    --record 2>&1 | tail -110
elif [ "$part" = space ]; then
  timeout "${TEST_S:-240}" python3 -m pytest tests/test_gpu_library.py -q -rfE -p no:cacheprovider -x \
    -k "${TESTS_K:-steps_of or stream_k or narrow_store or swap_ab or split_k or programmatic}" 2>&1 | tail -25
  timeout "${SWEEP_S:-300}" python3 -m lab.library_space --dtype "${DTYPE:-fp16}" ${SHAPES:+--shapes "$SHAPES"} \
    --record 2>&1 | tail -80
elif [ "$part" = torch ]; then  # the C++ call path built first (about a minute), outside every timing
  python3 -c "import torch; from deepgemm import fast; print('C++ call path:', fast.module())" 2>&1 | tail -3
  tested_file $rec/gpu_fast.txt 150 tests/test_gpu_fast.py
  tested_file $rec/gpu_torch.txt "${TEST_S:-200}" tests/test_gpu_torch.py
  timeout 100 python3 -m lab.op_host --rounds 3 --record 2>&1 | tail -26
  timeout 240 python3 -m tutorial.train --record 2>&1 | tail -16
elif [ "$part" = library-tests ]; then  # the library's GPU tests, SHARDS pytest processes at once (gpu_library.txt)
  sharded_file $rec/gpu_library.txt "${TEST_S:-500}" "${SHARDS:-6}" tests/test_gpu_library.py \
    tests/test_gpu_call.py tests/test_gpu_shapes.py tests/test_gpu_fast.py tests/test_gpu_torch.py tests/test_soak.py
elif [ "$part" = sm80 ]; then
  DEEPGEMM_FORCE_SM80=1 sharded_file $rec/gpu_sm80.txt "${TEST_S:-300}" "${SHARDS:-6}" tests/test_gpu_sm80.py
  timeout 200 python3 -m pytest tests/test_gpu_call.py -q -rfE -p no:cacheprovider 2>&1 | tail -12
elif [ "$part" = sm80-table ]; then
  { echo "# DEEPGEMM_FORCE_SM80=1 python -m tutorial bench --suite progression --stages v2,library_sm80 --shapes" \
      "4096 --dtype both on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
      "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $DEEPGEMM_COMMIT"
    DEEPGEMM_FORCE_SM80=1 timeout 120 python3 -m tutorial bench --suite progression --stages v2,library_sm80 \
      --shapes 4096 --dtype both 2>&1 | tail -12
  } > $rec/sm80_vs_v2.txt
  cat $rec/sm80_vs_v2.txt
  DEEPGEMM_FORCE_SM80=1 timeout 420 python3 -m tutorial bench --suite shapes --part table --dtype "${DTYPE:-fp16}" \
    --record > "$out/shapes_sm80.log" 2>&1
  tail -30 "$out/shapes_sm80.log"
elif [ "$part" = forced ]; then  # correctness only, so the runs share the GPU; each part under its own limit
  make --no-print-directory .nbval-site/.installed WHEELS=.whl  # once, before three runs would race to install
  for cc in 8.0 8.9 12.0; do
    PART=${PARTS:-bench tests nbval} BENCH_S=90 TEST_S=${TEST_S:-270} NBVAL_S=${NBVAL_S:-200} bash scripts/forced_cc.sh "$cc" > "$out/forced_$cc.log" 2>&1 &
  done
  DEEPGEMM_FORCE_SM80=1 sharded_file $rec/gpu_sm80.txt 400 "${SHARDS:-4}" tests/test_gpu_sm80.py > /dev/null &
  tested_file $rec/gpu_torch.txt 500 tests/test_gpu_torch.py > /dev/null &
  wait
  for f in $rec/forced_cc_*.txt; do echo "== $f"; grep -E '^## |passed|failed|error' "$f" | tail -12; done
  tail -n 3 $rec/gpu_sm80.txt $rec/gpu_torch.txt
elif [ "$part" = train-gemms ]; then
  timeout 200 python3 -m lab.train_gemms --record 2>&1 | tail -50
elif [ "$part" = stability ]; then
  timeout 300 python3 -m tutorial stability --m 4096 --dtype both --seconds 60 --streams 4 --record 2>&1 | tail -6
elif [ "$part" = soak ]; then  # ten minutes and more: run it through scripts/background.sh
  timeout $((${SOAK_S:-620} + 300)) python3 -m tutorial soak --seconds "${SOAK_S:-620}" --streams 4 --threads 2 \
    --dtype both --record 2>&1 | tail -40
elif [ "$part" = library-records ]; then  # the library's records from one commit, as one background job
  DTYPE=fp16 AUTOTUNE_S=${AUTOTUNE_S:-660} bash "$0" autotune | tail -25
  export DEEPGEMM_COMMIT=$DEEPGEMM_COMMIT+autotune-table-of-this-run  # the package's table is now this run's
  DTYPE=both bash "$0" shapes | tail -40
  # correctness only from here, so the three share the GPU
  [ "${SOAK_S:-610}" != 0 ] && { SOAK_S=${SOAK_S:-610} bash "$0" soak > "$out/soak.log" 2>&1 & }
  bash "$0" sanitize-streamk > "$out/sanitize_streamk.log" 2>&1 &
  bash "$0" library-tests | tail -30
  wait
  grep -E '^## |SUMMARY' "$out/sanitize_streamk.log" | sort | uniq -c
  [ "${SOAK_S:-610}" != 0 ] && grep -E 'soak:|merged' "$out/soak.log"
elif [ "$part" = kernels ]; then
  { echo "# ncu on scripts/gemm_kernels.py: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
      "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $DEEPGEMM_COMMIT"
    timeout 240 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
      env PYTHONPATH="$PWD" python3 scripts/gemm_kernels.py 2>&1 | grep -v '^==PROF== Connected'
  } > $rec/gemm_kernels.txt
  cat $rec/gemm_kernels.txt
elif [ "$part" = source ]; then
  timeout 500 python3 -m tutorial profile --source --stages all --shapes 4096 --dtype fp16 --record 2>&1 | tail -90
elif [ "$part" = timeline ]; then
  timeout 200 python3 -m tutorial timeline --stages v4,v5 --m 4096 --dtype fp16 --record 2>&1 | tail -20
  timeout 200 python3 -m pytest tests/test_timeline.py -q -rfE -p no:cacheprovider 2>&1 | tail -5
elif [ "$part" = timeline-ablation ]; then
  { echo "# python -m tutorial timeline --m 4096 --dtype fp16 --stages v4 --knobs BOX_K=8, then --stages v5" \
      "--knobs WGMMA_IN_FLIGHT=0, on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
      "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $DEEPGEMM_COMMIT"
    timeout 100 python3 -m tutorial timeline --stages v4 --m 4096 --dtype fp16 --knobs BOX_K=8 2>&1
    timeout 100 python3 -m tutorial timeline --stages v5 --m 4096 --dtype fp16 --knobs WGMMA_IN_FLIGHT=0 2>&1
  } > $rec/timeline_ablation.txt
  cat $rec/timeline_ablation.txt
elif [ "$part" = ablation ]; then
  timeout 560 python3 -m tutorial bench --suite ablation --dtype fp16 --record 2>&1 | tail -40
elif [ "$part" = nbval ]; then
  [ "${NBVAL:-1}" = 1 ] && { echo "# make nbval WHEELS=.whl (live: every if-LIVE cell runs) on" \
      "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u '+%Y-%m-%d %H:%M UTC')," \
      "commit $DEEPGEMM_COMMIT"
    timeout 480 make --no-print-directory nbval WHEELS=.whl NBVAL_ARGS="-q --durations=15" 2>&1 | tail -40
  } > $rec/nbval_live.txt && cat $rec/nbval_live.txt
  if [ "${NOTEBOOKS:-0}" = 1 ]; then
    timeout 400 make --no-print-directory notebooks WHEELS=.whl NB="${NB:-}" 2>&1 | tail -5
    tar czf "$out/notebooks.tgz" -C out notebooks  # one file: the device tool returns only a few files a call
  fi
elif [ "$part" = tests ]; then
  gpu_tests
elif [ "$part" = call ]; then
  timeout 330 python3 -m tutorial bench --suite call --record 2>&1 | tail -100
  timeout 200 python3 -m pytest tests/test_gpu_call.py -q -rfE -p no:cacheprovider 2>&1 | tail -25
elif [ "$part" = verify ]; then  # after harness-only changes: the tests, the sanitizer, a small sweep
  gpu_tests
  STAGES=v3,v4,v5 timeout 200 bash scripts/sanitize.sh $rec/sanitizer.txt
  python3 -m lab sweep v5_group_m --shapes 4096,8192 --dtype fp16 --record 2>&1 | tail -10
else
  timeout 300 python3 -m tutorial profile --stages all --shapes 4096 --dtype fp16 --record 2>&1 | tail -8
  STAGES=v3,v4,v5 timeout 280 bash scripts/sanitize.sh $rec/sanitizer.txt
  python3 -m lab sweep v5_cluster --shapes 4096,8192 --dtype both --record 2>&1 | tail -16
  python3 -m lab sweep v5_group_m --shapes 4096,8192 --dtype fp16 --record 2>&1 | tail -10
fi
tar czf "$out/results_$slug.tgz" $rec $(ls -d "lab/$rec" 2>/dev/null)  # one file back: everything this part wrote, and the rest
tar tzf "$out/results_$slug.tgz"
