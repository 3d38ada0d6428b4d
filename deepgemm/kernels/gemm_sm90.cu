// The library's kernel: what deepgemm.gemm runs on sm_90a (deepgemm/plan.py plans it). It is v5_fused, the
// tutorial's last stage ([1] persistent tiles, [2] clusters with TMA multicast, [3] one wgmma batch in
// flight, [4] the fused epilogue with TMA stores), grown for the shapes models run, each addition a block
// marked, from [5] on; `python -m tutorial diff library` shows them against stages/v5_fused/kernel.cu:
//   [5] either operand in either layout (A_MN_MAJOR, B_MN_MAJOR): an operand stored with M (or N)
//       contiguous, such as a row-major (K, N) b, is read as it is, in 64 x 64 boxes, and wgmma's
//       transpose bit tells the tensor cores it is MN-major; no copy on the host.
//   [6] tiles cut along K (PARTIAL_TILES 1), where whole tiles leave SMs idle: stream-K (the last,
//       partial round of tiles cut into equal runs of k-tiles, one per persistent worker, so every SM
//       does the same work) and split-K (every tile cut into equal slices), one tile scheduler for both.
//       Each warp writes its part's fp32 partial and counts itself in; the warp that arrives last adds
//       all parts in worker order and runs the epilogue: one kernel, and a result that is the same from
//       run to run whichever part finished last.
//   [7] a tile for the shape: BLOCK_M 64, 128 or 256 (one or two consumer warpgroups, 256 rows as two
//       wgmma m64 each, BLOCK_N at most 128), BLOCK_N any multiple of 16 up to 256 (8 when swapped:
//       wgmma m64nNk16 takes every multiple of 8), so that the last tile is nearly full, with the
//       pipeline depth, cluster and split the library call picks per problem
//       (an autotune table, else a cost model); any output type (OUT_DTYPE), a bias in its own type
//       (BIAS_DTYPE) and four activations.
//   [8] swap AB (SWAP_AB 1), for the token dimension as wgmma's N: the plan passes b's (N, K) as A and
//       a's (M, K) as B, so the kernel computes C^T and C's M rows are tiled in steps of 8 (777 rows are
//       4 x 200, not 7 x 128); stmatrix's transpose form writes a warp's rows of C^T as columns of C into
//       its store boxes (16-bit C; fp32, small tiles in clusters and rows TMA cannot write go by pointer).
//   [9] clusters of up to 4 along either side (CLUSTER_M, CLUSTER_N; 8 CTAs at most): CTAs on
//       neighbouring tile columns share A, those on neighbouring tile rows B, each loading a part.
//  [10] programmatic dependent launch: the prologue (barriers, tensor maps) overlaps the end of the kernel
//       before it in the stream, where the plan launches with the attribute.
//  [11] the per-shape JIT (FIXED_M, FIXED_N, FIXED_K): the weight's dimensions compiled in, so that tile
//       counts, the scheduler's divisions and the k-loop's bounds are constants; the tokens stay a parameter.
//  [12] split-K inside a cluster (CLUSTER_K): the cluster's CTAs take one tile, each a slice of K, and
//       sum their parts through distributed shared memory, never through global memory, whose round trips
//       cost microseconds while HBM streams; the parts are added in rank order, so the result is the same
//       run to run.
//  [13] ping-pong (PINGPONG 1): the two consumer warpgroups take a CTA's tiles in turn, each a whole
//       BLOCK_M x BLOCK_N tile, and their main loops take turns on the tensor cores, so one warpgroup's
//       epilogue runs while the other's wgmma do; with both on one tile, the tensor cores wait out every
//       epilogue.
// v5's ablation switch (WGMMA_IN_FLIGHT), its ablation diff and its timeline stamps are not here.
// Needs sm_90a (wgmma, setmaxnreg): nvcc -cubin -gencode=arch=compute_90a,code=sm_90a gemm_sm90.cu

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif

#if DTYPE_BF16
typedef __nv_bfloat16 elem_t;
#define WGMMA_AB_TYPE "bf16"
#else
typedef __half elem_t;
#define WGMMA_AB_TYPE "f16"
#endif

#ifndef OUT_DTYPE
#define OUT_DTYPE DTYPE_BF16  // 0 fp16, 1 bf16, 2 fp32; by default the input's type
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0            // 1: add bias[col] (N values of BIAS_DTYPE) before the activation
#endif
#ifndef BIAS_DTYPE
#define BIAS_DTYPE 2          // 0 fp16, 1 bf16, 2 fp32: the caller's bias, read in its own type (no fp32 copy)
#endif
#ifndef ACTIVATION
#define ACTIVATION 0          // 0 none, 1 relu, 2 gelu (tanh approximation), 3 gelu (erf), 4 silu
#endif

#if OUT_DTYPE == 2
typedef float out_t;
typedef float2 out2_t;
__device__ __forceinline__ out2_t to_out2(float lo, float hi) { return make_float2(lo, hi); }
#elif OUT_DTYPE == 1
typedef __nv_bfloat16 out_t;
typedef __nv_bfloat162 out2_t;
__device__ __forceinline__ out2_t to_out2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half out_t;
typedef __half2 out2_t;
__device__ __forceinline__ out2_t to_out2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

// One bias value in fp32, read through the read-only cache as it is stored: every fp16 and bf16 value is
// exactly an fp32 one, so the epilogue's fp32 sum is the same as with an fp32 copy of the bias.
#if BIAS_DTYPE == 2
typedef float bias_t;
__device__ __forceinline__ float load_bias(const bias_t* bias, int i) { return __ldg(bias + i); }
#elif BIAS_DTYPE == 1
typedef __nv_bfloat16 bias_t;
__device__ __forceinline__ float load_bias(const bias_t* bias, int i) { return __bfloat162float(__ldg(bias + i)); }
#else
typedef __half bias_t;
__device__ __forceinline__ float load_bias(const bias_t* bias, int i) { return __half2float(__ldg(bias + i)); }
#endif

#if OUT_DTYPE != 2
// Two 16-bit outputs as the 32-bit register stmatrix takes.
__device__ __forceinline__ unsigned pack_out2(float lo, float hi) {
    const out2_t v = to_out2(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}
#endif

#ifndef BLOCK_M
#define BLOCK_M 128    // consumer warpgroups x the 64 rows of one wgmma m64; [7] 64, 128 or 256
#endif
#ifndef BLOCK_N
#define BLOCK_N 256    // the N of wgmma m64nNk16: N / 2 fp32 accumulators per consumer thread; [7] 16 to 256
#endif
#ifndef BLOCK_K
#define BLOCK_K 64     // 64 fp16 = 128 bytes: exactly one 128B-swizzle row; 4 wgmma k16 steps
#endif
#ifndef BOX_K
#define BOX_K 64       // the whole k-tile in one box per operand (128 bytes, the 128B swizzle span)
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4   // 4 x 48 KB = 192 KB of the 227 KB a CTA may use: deep enough to hide HBM latency
#endif
#ifndef GROUP_M
#define GROUP_M 16     // tile rows per group in the launch order (L2 reuse); <= 1: plain row-major
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 2    // CTAs per cluster, on neighbouring tile rows: they share B, each loading 1/CLUSTER_M
#endif
#ifndef A_MN_MAJOR
#define A_MN_MAJOR 0   // [5] 1: A is stored K x M with M contiguous (the transposed view of a row-major (K, M))
#endif
#ifndef B_MN_MAJOR
#define B_MN_MAJOR 0   // [5] 1: B is stored K x N with N contiguous (a row-major (K, N)); 0: N x K, K contiguous
#endif
#ifndef PARTIAL_TILES
#define PARTIAL_TILES 0  // [6] 1: the plan may cut tiles along K (stream-K, split-K): fp32 partials and a sum
#endif
#ifndef SWAP_AB
#define SWAP_AB 0      // [8] 1: A is b's (N, K), B is a's (M, K); C^T is computed and stored transposed
#endif
#ifndef CLUSTER_N
#define CLUSTER_N 1    // [9] CTAs per cluster, on neighbouring tile columns: they share A, each loading 1/CLUSTER_N
#endif
#ifndef CLUSTER_K
#define CLUSTER_K 1    // [12] CTAs per cluster on one tile, each computing a slice of K; 1: none
#endif
#ifndef PINGPONG
#define PINGPONG 0     // [13] 1: the two consumer warpgroups take alternate tiles, each its own epilogue
#endif
#ifndef FIXED_M
#define FIXED_M 0      // [11] the kernel's M' (swapped: the weight's N), compiled in; 0: the parameter M
#endif
#ifndef FIXED_N
#define FIXED_N 0      // [11] the kernel's N' (plain: the weight's N), compiled in; 0: the parameter N
#endif
#ifndef FIXED_K
#define FIXED_K 0      // [11] K compiled in; 0: the parameter K
#endif
#ifndef C_UNALIGNED
#define C_UNALIGNED 0  // [8] 1: C's rows are not whole 16-byte vectors (N = 4097 fp16), which TMA cannot write
#endif
// [8] Swapped 16-bit tiles go out through store boxes and TMA (6 to 9% faster than a 2-byte store per value
// in 16-byte runs at 32 to 192 rows of C, 1.00 at 8 to 24), but clusters of tiles under 96 rows of C ran
// 2 to 13% slower so (lab/results/h200/kernel_probe_swap_tma.json): those, fp32 and rows TMA cannot
// describe store by pointer, in place.
#define C_BY_POINTER (SWAP_AB && (OUT_DTYPE == 2 || C_UNALIGNED || (CLUSTER_M * CLUSTER_N > 1 && BLOCK_N < 96)))
constexpr int WG_ROWS = 64;       // rows of C per wgmma: its M
// [7] Consumer warpgroups; those on a tile release each of its stages once per warp. Two at most: 40 + 2 x 232
// registers per thread fill the SM's 512, so 256 rows are two warpgroups of two m64 wgmma each (BLOCK_N x 2 / 2
// fp32 accumulators per thread, 128 at BLOCK_N 128, as many as one m64n256). [13] With ping-pong, two, each
// on tiles of its own.
constexpr int NUM_CONSUMERS = PINGPONG || BLOCK_M == 256 ? 2 : BLOCK_M / WG_ROWS;
constexpr int TILE_CONSUMERS = PINGPONG ? 1 : NUM_CONSUMERS;  // [13] consumer warpgroups on one tile
constexpr int CONSUMER_ROWS = BLOCK_M / TILE_CONSUMERS;  // rows of C per consumer warpgroup
constexpr int M_WGMMAS = CONSUMER_ROWS / WG_ROWS;       // [7] wgmma m64 per k16 step and consumer: 1 or 2
constexpr int NUM_THREADS = 128 * (1 + NUM_CONSUMERS);  // warpgroup 0 produces, warpgroups 1 (and 2) consume
constexpr int A_TILE_BYTES = BLOCK_M * BLOCK_K * (int)sizeof(elem_t);
constexpr int B_TILE_BYTES = BLOCK_N * BLOCK_K * (int)sizeof(elem_t);
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;  // what one stage's full barrier expects
// Rank r: tile row r % CLUSTER_M, column r / CLUSTER_M; [12] with CLUSTER_K, the slice of K r.
constexpr int CLUSTER_SIZE = CLUSTER_M * CLUSTER_N * CLUSTER_K;
constexpr int A_BOX_ROWS = BLOCK_M / CLUSTER_N;           // the rows of A one CTA loads and multicasts
constexpr int A_BOX_BYTES = A_BOX_ROWS * BLOCK_K * (int)sizeof(elem_t);
constexpr int B_BOX_ROWS = BLOCK_N / CLUSTER_M;           // the rows of B one CTA loads and multicasts
constexpr int B_BOX_BYTES = B_BOX_ROWS * BLOCK_K * (int)sizeof(elem_t);
constexpr int GROUP_ROWS = GROUP_M / CLUSTER_M;           // the tile order walks cluster rows
constexpr int SWIZZLE_ROW_BYTES = 128;                    // one tile row = one 128B-swizzle row
// [5] An MN-major operand arrives in boxes of 64 (M or N) x 64 (K): 64 rows of K, each 128 bytes of M or N,
// 8 KB, the same bytes per 64 rows of the tile as the K-major box, so every offset into a tile is unchanged.
constexpr int MN_BOX_COLS = SWIZZLE_ROW_BYTES / (int)sizeof(elem_t);  // 64 elements of M or N per box
constexpr int MN_BOX_BYTES = BLOCK_K * SWIZZLE_ROW_BYTES;              // 8 KB
// A k16 step of the descriptor's start address, in its 16-byte units: 32 bytes along a K-major row, or
// 16 rows of 128 bytes down an MN-major box.
constexpr int K_MAJOR_STEP = 16 * (int)sizeof(elem_t) / 16, MN_MAJOR_STEP = 16 * SWIZZLE_ROW_BYTES / 16;
constexpr int A_K_STEP = A_MN_MAJOR ? MN_MAJOR_STEP : K_MAJOR_STEP;
constexpr int B_K_STEP = B_MN_MAJOR ? MN_MAJOR_STEP : K_MAJOR_STEP;
constexpr int WG_A_STEP = WG_ROWS * SWIZZLE_ROW_BYTES / 16;  // [7] the next wgmma m64's rows of A: 8 KB on
constexpr int PRODUCER_REGS = 40;   // the producer thread only computes coordinates
constexpr int CONSUMER_REGS = 232;  // 128 accumulators + descriptors + epilogue; 40 + 2 x 232 <= 512
// Epilogue staging: each consumer warp owns 16 rows of C and stores them as boxes of 16 rows x 128 bytes
// of columns (64 fp16/bf16 or 32 fp32), the 128B swizzle span, through two buffers of its own: it fills
// one while the TMA unit is still reading the other. In the 128B-swizzled layout the 8 rows that one
// fragment store touches land in 8 different 16-byte bank groups, so the stores are conflict-free.
// [7] A BLOCK_N that is not whole 128-byte chunks is stored in 64- or 32-byte ones, with the TMA swizzle
// of that span (the plan encodes C's map from LAUNCH_STORE_COLS: span = columns x element size).
// [8] Swapped, a warp's 16 rows of C^T are 16 columns of C: boxes of 32-byte rows (the 32B span), 8 to 64
// rows of C each, the largest power-of-two multiple of 8 that divides BLOCK_N.
constexpr int EPI_ROWS = 16;                                        // rows of C (swapped, C^T) per consumer warp
constexpr int SWAP_BOX_ROWS = (BLOCK_N / 8) % 8 == 0 ? 64 : (BLOCK_N / 8) % 4 == 0 ? 32 : (BLOCK_N / 8) % 2 == 0 ? 16 : 8;
constexpr int STORE_BOX_ROWS = SWAP_AB ? SWAP_BOX_ROWS : EPI_ROWS;  // rows of C per TMA store box
constexpr int EPI_ROW_BYTES = SWAP_AB ? EPI_ROWS * (int)sizeof(out_t)
                            : (BLOCK_N * (int)sizeof(out_t)) % 128 == 0 ? 128
                            : (BLOCK_N * (int)sizeof(out_t)) % 64 == 0 ? 64 : 32;  // one chunk's row, the swizzle span
constexpr int EPI_BOX_BYTES = STORE_BOX_ROWS * EPI_ROW_BYTES;       // 2 KB (128-byte rows): one TMA store box
constexpr int EPI_BUFFERS = 2;                                      // per warp: fill one, store the other
constexpr int EPI_BYTES = C_BY_POINTER ? 0 : NUM_CONSUMERS * 4 * EPI_BUFFERS * EPI_BOX_BYTES;  // 32 KB, after the stages
constexpr int EPI_CHUNK_COLS = EPI_ROW_BYTES / (int)sizeof(out_t);  // 64 (fp16/bf16) or 32 (fp32) for 128 bytes
// [12] Split-K in a cluster: a consumer warp's 16 rows of a fragment are a strip; strip s of the tile is summed
// by the CTA of rank s % CLUSTER_K (its owner), which receives the other CTAs' fp32 parts of it in slots of
// STRIP_BYTES after the store boxes, so every CTA sums and stores 1 / CLUSTER_K of the tile.
constexpr int CTA_STRIPS = TILE_CONSUMERS * M_WGMMAS * 4;
constexpr int STRIP_BYTES = 16 * BLOCK_N * 4;
constexpr int SUM_BYTES = CLUSTER_K > 1 ? CTA_STRIPS / CLUSTER_K * (CLUSTER_K - 1) * STRIP_BYTES : 0;

static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 256, "[7] one or two consumer warpgroups of 64 or 128 rows");
static_assert(M_WGMMAS * BLOCK_N <= (PINGPONG ? 288 : 256),
              "[7] at most 128 fp32 accumulators per consumer thread: BLOCK_M 256 takes BLOCK_N <= 128; [13] 144 "
              "with ping-pong's 128-row tiles (BLOCK_N <= 144; wider ones spill in the fused epilogues)");
static_assert((CLUSTER_M == 1 || CLUSTER_M == 2 || CLUSTER_M == 4) && (CLUSTER_N == 1 || CLUSTER_N == 2 || CLUSTER_N == 4)
              && CLUSTER_SIZE <= 8, "[9] 1, 2 or 4 CTAs per side, 8 at most in all (the portable cluster size)");
static_assert(CLUSTER_K == 1 || ((CLUSTER_K == 2 || CLUSTER_K == 4) && CLUSTER_M * CLUSTER_N == 1 && !PARTIAL_TILES
                                  && BLOCK_M <= 128),
              "[12] 2 or 4 CTAs on one tile, each a slice of K: no multicast cluster, no tiles cut in global memory, "
              "BLOCK_M up to 128 (at 256 ptxas moves the main loop's descriptors out of uniform registers)");
static_assert(!PINGPONG || (BLOCK_M <= 128 && !PARTIAL_TILES && CLUSTER_K == 1),
              "[13] ping-pong: a warpgroup holds a whole tile (BLOCK_M 64, or 128 as two m64), and every tile is "
              "whole: no cut in global memory or in the cluster");
static_assert(NUM_STAGES >= 2, "a stage goes back one k-tile after its wgmma batch, while the next fills another");
static_assert(A_BOX_BYTES % 1024 == 0, "each CTA's part of the A tile starts on a 1024-byte boundary");
static_assert(B_BOX_BYTES % 1024 == 0, "each CTA's part of the B tile starts on a 1024-byte boundary");
static_assert(BLOCK_N % (SWAP_AB ? 8 : 16) == 0 && BLOCK_N <= 256,
              "[7] wgmma m64nNk16, N = BLOCK_N, stored 16 columns per stmatrix; [8] swapped, any 8 rows of C");
static_assert(BLOCK_K * (int)sizeof(elem_t) == SWIZZLE_ROW_BYTES && BOX_K == BLOCK_K,
              "one 128-byte swizzled box per operand per k-tile");
static_assert(A_TILE_BYTES % 1024 == 0 && B_TILE_BYTES % 1024 == 0,
              "every tile starts on a 1024-byte boundary, where the 8-row swizzle pattern restarts");
static_assert((227 * 1024) / 16 < (1 << 14),
              "any shared-memory address fits the descriptor's 14-bit start field, so offsets added to it never carry");
// Dynamic shared memory: the stages, then the store boxes, from a 1024-byte boundary (where the swizzle
// pattern starts; the allocation itself is only 16-byte aligned, hence the slack).
constexpr int ALIGN_SLACK_BYTES = 1024;
constexpr int DYNAMIC_SMEM_BYTES = NUM_STAGES * STAGE_BYTES + EPI_BYTES + SUM_BYTES + ALIGN_SLACK_BYTES;
static_assert(DYNAMIC_SMEM_BYTES + 2 * NUM_STAGES * 8 <= 227 * 1024,
              "a CTA may use 227 KB of shared memory: stages, store boxes, [12] slots, alignment slack, barriers");

// The launch facts the plan reads back from the compiled module, so they are written only here.
extern "C" __device__ const int LAUNCH_THREADS = NUM_THREADS;
extern "C" __device__ const int LAUNCH_SMEM_BYTES = DYNAMIC_SMEM_BYTES;
extern "C" __device__ const int LAUNCH_STORE_ROWS = C_BY_POINTER ? 0 : STORE_BOX_ROWS;  // the box of C's map: rows ([8] 0: C by pointer) ...
extern "C" __device__ const int LAUNCH_STORE_COLS = EPI_CHUNK_COLS;   // ... and columns

// The plan's CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value as a __grid_constant__
// parameter so that TMA can read it from the kernel's parameter space.
struct __align__(64) TmaDesc { unsigned long long data[16]; };

// ---------------------------------------------------------------------------------------------------
// PTX helpers. Shared-memory operands are 32-bit shared-window addresses.
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrive_count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(arrive_count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the TMA unit completes transactions on
// them), not only to the threads that pass the next __syncthreads.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival plus the number of bytes the TMA copies of this phase will deliver; the phase completes
// when all arrivals are in and all those bytes have landed.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

// A plain arrival (release semantics: this thread's earlier accesses happen before the phase completes).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

// Waits until the phase with the given parity has completed. Without a time hint, try_wait gives up after
// a short, system-dependent time and the loop spins, issuing instructions for nothing; with one, the
// thread sleeps (NANOSLEEP.SYNCS in SASS) until the barrier changes or the hint's time has passed. On a
// card held at its power limit, every instruction issued is clock taken from the tensor cores. [12] With
// ACQUIRE_CLUSTER, the wait also acquires at cluster scope what other CTAs of the cluster wrote before the
// phase completed.
constexpr unsigned WAIT_SUSPEND_HINT_NS = 10000000;  // an upper bound only: the phase change wakes the thread
template <bool ACQUIRE_CLUSTER = false>
__device__ __forceinline__ void mbarrier_wait_parity(unsigned bar, unsigned parity) {
    unsigned done = 0;
    do {
        if constexpr (ACQUIRE_CLUSTER)
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2, %3;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(bar), "r"(parity), "n"(WAIT_SUSPEND_HINT_NS) : "memory");
        else
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(bar), "r"(parity), "n"(WAIT_SUSPEND_HINT_NS) : "memory");
    } while (!done);
}

// [10] Programmatic dependent launch. Launched with the attribute, this kernel may start while the one before
// it in the stream is still running: griddepcontrol.wait holds a thread until that kernel has finished and
// its writes are visible (without the attribute it returns at once), and launch_dependents lets the next
// kernel start its own prologue on the SMs this one frees, instead of waiting for the whole grid to end. The
// next kernel is scheduled once every CTA has triggered (one thread's first call counts for its CTA) or exited.
__device__ __forceinline__ void griddepcontrol_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void griddepcontrol_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Brings a tensor map (a __grid_constant__ parameter, by its generic address) into the cache the TMA unit
// reads maps from, so that the first copy does not wait for its 128 bytes.
__device__ __forceinline__ void prefetch_tensormap(const void* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// A box of the tensor map at element coordinates (k, row) -> shared memory at dst; completes on bar.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar)
        : "memory");
}

// As tma_load_2d, but the box lands at the same shared-memory offset in every CTA of the cluster named
// in cta_mask, and completes on the barrier at bar's offset in each of them: one L2 read, several SMs.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row,
                                                      unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar), "h"(cta_mask)
        : "memory");
}

// [5] One CTA's part of an operand's k-tile: ROWS rows of M (or N) from tile row `row`, K from `k`, into
// dst, multicast to the CTAs in cta_mask when MULTICAST. K-major, that is one box of ROWS x 64; MN-major,
// ROWS / 64 boxes of 64 x 64 side by side, each at (m or n, k): a map's coordinates run contiguous first.
template <bool MN_MAJOR, int ROWS, bool MULTICAST>
__device__ __forceinline__ void tma_load_operand(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row,
                                                 unsigned short cta_mask) {
    static_assert(!MN_MAJOR || ROWS % MN_BOX_COLS == 0, "an MN-major part is whole 64-wide boxes");
    if constexpr (!MN_MAJOR) {
        if constexpr (MULTICAST) tma_load_2d_multicast(dst, map, bar, k, row, cta_mask);
        else tma_load_2d(dst, map, bar, k, row);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / MN_BOX_COLS; ++i) {
            const unsigned box = dst + i * MN_BOX_BYTES;
            if constexpr (MULTICAST) tma_load_2d_multicast(box, map, bar, row + i * MN_BOX_COLS, k, cta_mask);
            else tma_load_2d(box, map, bar, row + i * MN_BOX_COLS, k);
        }
    }
}

// atomicAdd with acquire-release semantics at GPU scope: this thread's earlier writes (and those its warp
// ordered before it with __syncwarp) are visible to whoever reads the new count, and what was written
// before the counts it reads is visible to this thread afterwards. Returns the old count.
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* counter, unsigned value) {
    unsigned old;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(value) : "memory");
    return old;
}

// The address of the same shared-memory variable in CTA `rank` of this cluster.
__device__ __forceinline__ unsigned mapa_shared(unsigned addr, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
    return out;
}

// An arrival on a barrier in any CTA of the cluster (address from mapa_shared), with the default .cta-scope
// release. PTX's memory model orders a thread of another CTA only at .cluster scope, which costs a
// MEMBAR.ALL.GPU per arrival; what a pipeline arrival hands over, this warp's wgmma reads, finished at
// wait_group before it (as in CUTLASS's pipelines). [12]'s sum hands back slots its ld.shared read, and
// notes/cluster_k_release_cluster.diff gives it the .cluster release.
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned cluster_bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(cluster_bar) : "memory");
}

// [12] The same arrival releasing at cluster scope: what it orders is this warp's ld.shared of its slots
// before another CTA's st.async into them, two threads of different CTAs, which a .cta-scope release does
// not order in PTX's memory model (the waiter acquires at .cluster too). Once per strip and tile.
__device__ __forceinline__ void mbarrier_arrive_release_cluster(unsigned cluster_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(cluster_bar) : "memory");
}

// This CTA's rank in its cluster.
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// Every thread of every CTA in the cluster: arrive and wait (the cluster's __syncthreads).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// A box of shared memory at src -> the tensor map at element coordinates (col, row). The parts of the box
// outside the tensor's bounds are not written. Tracked per thread as a bulk async-group.
__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, unsigned src, int col, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
        :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(src)
        : "memory");
}

// Closes this thread's bulk stores issued since the last commit into one group.
__device__ __forceinline__ void bulk_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's bulk groups are still reading their shared-memory source: the
// older boxes may then be overwritten (their global writes may still be in flight).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Waits until at most N of this thread's bulk groups are still running at all (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

// [7] Where byte `offset` of a store box (rows of EPI_ROW_BYTES) lies as the TMA swizzle of that span lays it
// out: the 16-byte group (address bits 4 up) XOR the 128-byte line (bits 7 up), over as many bits as a row
// has groups; with 128-byte rows, group g of row r at g ^ (r % 8). The 8 rows one stmatrix matrix writes
// then fall in 8 different bank groups for every span, so the stores are conflict-free.
__device__ __forceinline__ unsigned epi_swizzle(unsigned offset) {
    return offset ^ (((offset >> 7) & (EPI_ROW_BYTES / 16 - 1)) << 4);
}

// Ordinary stores to shared memory are made visible to the async proxy (the TMA unit) that reads them next.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Four 8x8 matrices of 16-bit elements, from the mma fragment layout to shared memory in one instruction:
// register i holds row lane/4, columns 2(lane%4) and 2(lane%4)+1 of matrix i; lane l gives the address
// of row l%8 of matrix l/8 (16 contiguous bytes). Replaces four 4-byte shared stores per thread.
// [8] Two 8x8 matrices stored transposed: lane l gives the address of row l%8 of matrix l/8 (l < 16), which
// receives column l%8 of the fragment, so register i's values land down a column, one per row.
__device__ __forceinline__ void stmatrix_x2_trans(unsigned addr, unsigned r0, unsigned r1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};"
                 :: "r"(addr), "r"(r0), "r"(r1) : "memory");
}

__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// Two adjacent fp32 values to shared memory (8 bytes).
__device__ __forceinline__ void st_shared_v2_f32(unsigned addr, float lo, float hi) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(lo), "f"(hi) : "memory");
}

// [12] Two adjacent fp32 values from shared memory.
__device__ __forceinline__ float2 ld_shared_v2_f32(unsigned addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
}

// [12] Two fp32 values into another CTA's shared memory (address from mapa_shared), completing 8 bytes of
// the transaction count of that CTA's barrier: the receiver waits on its barrier, no fence is needed. The
// values go in as fp32 registers: passed as their bits ("r"), ptxas serialised the main loop's wgmma.
__device__ __forceinline__ void st_async_v2_f32(unsigned remote, float lo, float hi, unsigned remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
                 :: "r"(remote), "f"(lo), "f"(hi), "r"(remote_bar) : "memory");
}

// wgmma shared-memory matrix descriptor (PTX ISA, "matrix descriptor format"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset (LBO) >> 4
//   bits 32-45  stride dimension byte offset (SBO) >> 4
//   bits 49-51  base offset (0: every tile starts 1024-aligned, where the swizzle pattern starts)
//   bits 62-63  layout type: 1 = 128-byte swizzle
// For a K-major swizzled operand whose k16 slice (32 bytes) lies inside one 128-byte row, LBO is not
// used; SBO is the distance between 8-row groups of core matrices along M (or N).
__device__ __forceinline__ unsigned long long make_smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return  (unsigned long long)((addr >> 4) & 0x3FFF)
         | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32)
         | (1ull << 62);
}

// Orders this thread's earlier register and shared-memory accesses before the wgmma that follow:
// needed before the first wgmma of a batch and after anything else touched the accumulators.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// Closes the batch of wgmma issued since the last commit into one group that can be waited on.
__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Waits until at most N committed groups are still running: before reading the accumulators or
// letting TMA overwrite the shared memory the wgmma read.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

// Compiler-only: the wgmma write the accumulators asynchronously, which the compiler cannot see, so
// after a wait we mark every accumulator as read and written here; no use of acc moves above the wait.
template <int N>
__device__ __forceinline__ void acc_register_fence(float (&acc)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
}

// [7] wgmma's accumulator operands, for every N from 8 to 256 in steps of 8 (4 more fp32 registers per
// thread each step). Inline PTX names operands by number only (nvcc rejects %[name]), so each N has its
// register list "%0, ..., %(N/2 - 1)" and its "+f" constraints d[0] .. d[N/2 - 1] built up 4 at a time.
#define WGMMA_R4(a, b, c, e) "%" #a ", %" #b ", %" #c ", %" #e
#define WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WGMMA_REGS_8 WGMMA_R4(0, 1, 2, 3)
#define WGMMA_REGS_16 WGMMA_REGS_8 ", " WGMMA_R4(4, 5, 6, 7)
#define WGMMA_REGS_24 WGMMA_REGS_16 ", " WGMMA_R4(8, 9, 10, 11)
#define WGMMA_REGS_32 WGMMA_REGS_24 ", " WGMMA_R4(12, 13, 14, 15)
#define WGMMA_REGS_40 WGMMA_REGS_32 ", " WGMMA_R4(16, 17, 18, 19)
#define WGMMA_REGS_48 WGMMA_REGS_40 ", " WGMMA_R4(20, 21, 22, 23)
#define WGMMA_REGS_56 WGMMA_REGS_48 ", " WGMMA_R4(24, 25, 26, 27)
#define WGMMA_REGS_64 WGMMA_REGS_56 ", " WGMMA_R4(28, 29, 30, 31)
#define WGMMA_REGS_72 WGMMA_REGS_64 ", " WGMMA_R4(32, 33, 34, 35)
#define WGMMA_REGS_80 WGMMA_REGS_72 ", " WGMMA_R4(36, 37, 38, 39)
#define WGMMA_REGS_88 WGMMA_REGS_80 ", " WGMMA_R4(40, 41, 42, 43)
#define WGMMA_REGS_96 WGMMA_REGS_88 ", " WGMMA_R4(44, 45, 46, 47)
#define WGMMA_REGS_104 WGMMA_REGS_96 ", " WGMMA_R4(48, 49, 50, 51)
#define WGMMA_REGS_112 WGMMA_REGS_104 ", " WGMMA_R4(52, 53, 54, 55)
#define WGMMA_REGS_120 WGMMA_REGS_112 ", " WGMMA_R4(56, 57, 58, 59)
#define WGMMA_REGS_128 WGMMA_REGS_120 ", " WGMMA_R4(60, 61, 62, 63)
#define WGMMA_REGS_136 WGMMA_REGS_128 ", " WGMMA_R4(64, 65, 66, 67)
#define WGMMA_REGS_144 WGMMA_REGS_136 ", " WGMMA_R4(68, 69, 70, 71)
#define WGMMA_REGS_152 WGMMA_REGS_144 ", " WGMMA_R4(72, 73, 74, 75)
#define WGMMA_REGS_160 WGMMA_REGS_152 ", " WGMMA_R4(76, 77, 78, 79)
#define WGMMA_REGS_168 WGMMA_REGS_160 ", " WGMMA_R4(80, 81, 82, 83)
#define WGMMA_REGS_176 WGMMA_REGS_168 ", " WGMMA_R4(84, 85, 86, 87)
#define WGMMA_REGS_184 WGMMA_REGS_176 ", " WGMMA_R4(88, 89, 90, 91)
#define WGMMA_REGS_192 WGMMA_REGS_184 ", " WGMMA_R4(92, 93, 94, 95)
#define WGMMA_REGS_200 WGMMA_REGS_192 ", " WGMMA_R4(96, 97, 98, 99)
#define WGMMA_REGS_208 WGMMA_REGS_200 ", " WGMMA_R4(100, 101, 102, 103)
#define WGMMA_REGS_216 WGMMA_REGS_208 ", " WGMMA_R4(104, 105, 106, 107)
#define WGMMA_REGS_224 WGMMA_REGS_216 ", " WGMMA_R4(108, 109, 110, 111)
#define WGMMA_REGS_232 WGMMA_REGS_224 ", " WGMMA_R4(112, 113, 114, 115)
#define WGMMA_REGS_240 WGMMA_REGS_232 ", " WGMMA_R4(116, 117, 118, 119)
#define WGMMA_REGS_248 WGMMA_REGS_240 ", " WGMMA_R4(120, 121, 122, 123)
#define WGMMA_REGS_256 WGMMA_REGS_248 ", " WGMMA_R4(124, 125, 126, 127)
#define WGMMA_ACC_8 WGMMA_D4(0)
#define WGMMA_ACC_16 WGMMA_ACC_8, WGMMA_D4(4)
#define WGMMA_ACC_24 WGMMA_ACC_16, WGMMA_D4(8)
#define WGMMA_ACC_32 WGMMA_ACC_24, WGMMA_D4(12)
#define WGMMA_ACC_40 WGMMA_ACC_32, WGMMA_D4(16)
#define WGMMA_ACC_48 WGMMA_ACC_40, WGMMA_D4(20)
#define WGMMA_ACC_56 WGMMA_ACC_48, WGMMA_D4(24)
#define WGMMA_ACC_64 WGMMA_ACC_56, WGMMA_D4(28)
#define WGMMA_ACC_72 WGMMA_ACC_64, WGMMA_D4(32)
#define WGMMA_ACC_80 WGMMA_ACC_72, WGMMA_D4(36)
#define WGMMA_ACC_88 WGMMA_ACC_80, WGMMA_D4(40)
#define WGMMA_ACC_96 WGMMA_ACC_88, WGMMA_D4(44)
#define WGMMA_ACC_104 WGMMA_ACC_96, WGMMA_D4(48)
#define WGMMA_ACC_112 WGMMA_ACC_104, WGMMA_D4(52)
#define WGMMA_ACC_120 WGMMA_ACC_112, WGMMA_D4(56)
#define WGMMA_ACC_128 WGMMA_ACC_120, WGMMA_D4(60)
#define WGMMA_ACC_136 WGMMA_ACC_128, WGMMA_D4(64)
#define WGMMA_ACC_144 WGMMA_ACC_136, WGMMA_D4(68)
#define WGMMA_ACC_152 WGMMA_ACC_144, WGMMA_D4(72)
#define WGMMA_ACC_160 WGMMA_ACC_152, WGMMA_D4(76)
#define WGMMA_ACC_168 WGMMA_ACC_160, WGMMA_D4(80)
#define WGMMA_ACC_176 WGMMA_ACC_168, WGMMA_D4(84)
#define WGMMA_ACC_184 WGMMA_ACC_176, WGMMA_D4(88)
#define WGMMA_ACC_192 WGMMA_ACC_184, WGMMA_D4(92)
#define WGMMA_ACC_200 WGMMA_ACC_192, WGMMA_D4(96)
#define WGMMA_ACC_208 WGMMA_ACC_200, WGMMA_D4(100)
#define WGMMA_ACC_216 WGMMA_ACC_208, WGMMA_D4(104)
#define WGMMA_ACC_224 WGMMA_ACC_216, WGMMA_D4(108)
#define WGMMA_ACC_232 WGMMA_ACC_224, WGMMA_D4(112)
#define WGMMA_ACC_240 WGMMA_ACC_232, WGMMA_D4(116)
#define WGMMA_ACC_248 WGMMA_ACC_240, WGMMA_D4(120)
#define WGMMA_ACC_256 WGMMA_ACC_248, WGMMA_D4(124)
// One wgmma of shape m64nNk16: the N / 2 accumulators, then the descriptors, scale-d and the transpose
// bits, numbered on from the accumulators (%N/2 is desc_a).
#define WGMMA_ASM(SHAPE, REGS, A, B, D, TA, TB)                                                          \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %" D ", 0;\n"                                                   \
    "wgmma.mma_async.sync.aligned." SHAPE ".f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " "                   \
    "{" REGS "}, %" A ", %" B ", p, 1, 1, %" TA ", %" TB ";\n}\n"
#define WGMMA_CASE(n, A, B, D, TA, TB)                                                                   \
    if constexpr (N == n)                                                                                \
        asm volatile(WGMMA_ASM("m64n" #n "k16", WGMMA_REGS_##n, #A, #B, #D, #TA, #TB)                    \
                     : WGMMA_ACC_##n                                                                     \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));

// D(64xN, fp32) += A(64x16) * B(16xN), A and B read from shared memory through their descriptors,
// imm-scale-a = imm-scale-b = 1, D kept when scale_d != 0. [5] TRANS_A / TRANS_B are imm-trans-a / -b:
// 0 for a K-major operand, 1 for an MN-major one (allowed for 16-bit types only).
// Accumulator fragment, thread t of the warpgroup, warp w = t / 32, lane l = t % 32, j = 0 .. N/8 - 1:
//   d[4j+0] = D(16w + l/4,     8j + 2(l%4))     d[4j+1] = D(16w + l/4,     8j + 2(l%4) + 1)
//   d[4j+2] = D(16w + l/4 + 8, 8j + 2(l%4))     d[4j+3] = D(16w + l/4 + 8, 8j + 2(l%4) + 1)
// So a narrower N's fragment is the first part of a wider one's: the epilogue indexes them alike.
// [7] N is BLOCK_N, any multiple of 8 up to 256 (wgmma's whole range): a tile as wide as the problem
// needs, so that the last tile is nearly full.
template <int N, int TRANS_A = 0, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64nNk16(float* d, unsigned long long desc_a, unsigned long long desc_b,
                                               int scale_d) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16 takes N = 8, 16, ... 256");
    WGMMA_CASE(8, 4, 5, 6, 7, 8)
    else WGMMA_CASE(16, 8, 9, 10, 11, 12)
    else WGMMA_CASE(24, 12, 13, 14, 15, 16)
    else WGMMA_CASE(32, 16, 17, 18, 19, 20)
    else WGMMA_CASE(40, 20, 21, 22, 23, 24)
    else WGMMA_CASE(48, 24, 25, 26, 27, 28)
    else WGMMA_CASE(56, 28, 29, 30, 31, 32)
    else WGMMA_CASE(64, 32, 33, 34, 35, 36)
    else WGMMA_CASE(72, 36, 37, 38, 39, 40)
    else WGMMA_CASE(80, 40, 41, 42, 43, 44)
    else WGMMA_CASE(88, 44, 45, 46, 47, 48)
    else WGMMA_CASE(96, 48, 49, 50, 51, 52)
    else WGMMA_CASE(104, 52, 53, 54, 55, 56)
    else WGMMA_CASE(112, 56, 57, 58, 59, 60)
    else WGMMA_CASE(120, 60, 61, 62, 63, 64)
    else WGMMA_CASE(128, 64, 65, 66, 67, 68)
    else WGMMA_CASE(136, 68, 69, 70, 71, 72)
    else WGMMA_CASE(144, 72, 73, 74, 75, 76)
    else WGMMA_CASE(152, 76, 77, 78, 79, 80)
    else WGMMA_CASE(160, 80, 81, 82, 83, 84)
    else WGMMA_CASE(168, 84, 85, 86, 87, 88)
    else WGMMA_CASE(176, 88, 89, 90, 91, 92)
    else WGMMA_CASE(184, 92, 93, 94, 95, 96)
    else WGMMA_CASE(192, 96, 97, 98, 99, 100)
    else WGMMA_CASE(200, 100, 101, 102, 103, 104)
    else WGMMA_CASE(208, 104, 105, 106, 107, 108)
    else WGMMA_CASE(216, 108, 109, 110, 111, 112)
    else WGMMA_CASE(224, 112, 113, 114, 115, 116)
    else WGMMA_CASE(232, 116, 117, 118, 119, 120)
    else WGMMA_CASE(240, 120, 121, 122, 123, 124)
    else WGMMA_CASE(248, 124, 125, 126, 127, 128)
    else WGMMA_CASE(256, 128, 129, 130, 131, 132)
}

// Gives this warpgroup's spare registers back to the CTA's pool (all 4 warps execute it).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(REGS));
}

// Takes registers from the pool; waits until the producer warpgroup has released enough.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(REGS));
}

// ---------------------------------------------------------------------------------------------------
// Tile order. A cluster takes CLUSTER_M x CLUSTER_N tiles at a time (a "cluster tile"); the
// clusters' i-th cluster tiles are consecutive indices, so those run together. Walking GROUP_M tile
// rows (GROUP_ROWS cluster rows) column by column makes those CTAs share GROUP_M A row-blocks and a few
// B column-blocks, which then stay in L2, instead of streaming all of B once per tile row.
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ void grouped_tile(int tile_idx, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
    if (GROUP_ROWS > 1) {
        const int group_tiles = GROUP_ROWS * tiles_n;
        const int first_m = (tile_idx / group_tiles) * GROUP_ROWS;
        const int group_rows = min(tiles_m - first_m, GROUP_ROWS);  // the last group may be short
        tile_m = first_m + (tile_idx % group_tiles) % group_rows;
        tile_n = (tile_idx % group_tiles) / group_rows;
    } else {
        tile_m = tile_idx / tiles_n;
        tile_n = tile_idx % tiles_n;
    }
}

// [6] The tile scheduler. The cluster tiles' k-tiles are laid end to end, tile t's at t * k_tiles ..
// (t + 1) * k_tiles - 1. Work unit u < dp_tiles is tile u, whole. Unit dp_tiles + w is worker w of the cut
// part: the last sk_tiles tiles' k-tiles (sk_iters of them) split into sk_workers runs as equal as integers
// allow, worker w's run [w * sk_iters / sk_workers, (w + 1) * sk_iters / sk_workers) (the plan's schedule:
// for stream-K the partial last round, for split-K every tile, SPLIT_K runs each). A run may cross from one
// tile into the next; its piece inside one tile is a Segment, and the workers whose runs cover a tile are
// its parts, first to last.
struct Schedule {
    int k_tiles, dp_tiles, sk_workers, sk_iters;
    __device__ __forceinline__ int units() const { return dp_tiles + sk_workers; }
    // Where worker w's run starts, in k-tiles of the cut part. 32-bit arithmetic (the plan keeps sk_iters x
    // sk_workers under 2^31): a 64-bit division is a call, and values live across a call leave the uniform
    // registers, the main loop's descriptors among them.
    __device__ __forceinline__ int run_begin(int w) const {
        return (int)((unsigned)w * (unsigned)sk_iters / (unsigned)sk_workers);
    }
    // The worker whose run holds k-tile i of the cut part (deepgemm.model.worker_of_k_tile).
    __device__ __forceinline__ int worker_of(int i) const {
        return (int)(((unsigned)(i + 1) * (unsigned)sk_workers + (unsigned)sk_iters - 1u) / (unsigned)sk_iters) - 1;
    }
};
struct Segment { int tile, k_begin, k_end; };  // cluster tile `tile`, its k-tiles [k_begin, k_end)

// Unit u's k-tiles, [begin, end) in the whole sequence.
__device__ __forceinline__ void unit_range(const Schedule& s, int u, int& begin, int& end) {
    if (!PARTIAL_TILES || u < s.dp_tiles) {
        begin = u * s.k_tiles;
        end = begin + s.k_tiles;
    } else {
        const int base = s.dp_tiles * s.k_tiles, w = u - s.dp_tiles;
        begin = base + s.run_begin(w);
        end = base + s.run_begin(w + 1);
    }
}

// The piece of a unit's range [i, end) that starts at k-tile i and stays inside one tile.
__device__ __forceinline__ Segment segment_at(const Schedule& s, int i, int end) {
    const int tile = i / s.k_tiles, tile_begin = tile * s.k_tiles;
    return {tile, i - tile_begin, min(end - tile_begin, s.k_tiles)};
}

// Both roles walk this cluster's segments in the same order, unit after unit (c, c + num_clusters, ...),
// piece after piece, so their stage/phase counters stay in step. Only what the next step needs is kept
// (the consumers' 128 accumulators leave few registers): the unit, the end of its range, the segment.
struct SegmentWalk {
    Schedule s;
    int u, step, end, slice;
    Segment seg;
    __device__ __forceinline__ SegmentWalk(const Schedule& sched, int first_unit, int unit_step, int k_slice)
        : s(sched), u(first_unit), step(unit_step), slice(k_slice) { enter_unit(); }
    __device__ __forceinline__ bool valid() const { return u < s.units(); }
    __device__ __forceinline__ void next() {
        const int i = seg.tile * s.k_tiles + seg.k_end;  // where this segment ended
        if (PARTIAL_TILES && i < end) {
            seg = segment_at(s, i, end);
        } else {
            u += step;
            enter_unit();
        }
    }
    __device__ __forceinline__ void enter_unit() {
        for (; u < s.units(); u += step) {  // a run of no k-tiles (more workers than k-tiles) is skipped
            int i;
            unit_range(s, u, i, end);
            if (i < end) {
                seg = segment_at(s, i, end);
                if (CLUSTER_K > 1) {  // [12] this CTA's slice of the tile's k-tiles (the plan: at least one each)
                    seg.k_begin = slice * s.k_tiles / CLUSTER_K;
                    seg.k_end = (slice + 1) * s.k_tiles / CLUSTER_K;
                }
                return;
            }
        }
    }
};

// [6] The parts of a cut tile: the workers whose runs cover it, first to last (first == last: one worker
// ran it whole, and nothing needs adding).
__device__ __forceinline__ void cut_parts(const Schedule& s, int cut_tile, int& first, int& last) {
    first = s.worker_of(cut_tile * s.k_tiles);
    last = s.worker_of(cut_tile * s.k_tiles + s.k_tiles - 1);
}

// [2] Hands a stage back to the producers: one arrival per consumer warp on the stage's empty barrier in
// every CTA whose producer writes into this one: the CTAs of this tile column (their parts of B) and of
// this tile row (their parts of A), this CTA once. empty_bar0[i] is the address of empty_bar[0] in the
// i-th of them (mapa_shared, once); the barriers are 8 bytes apart there as here.
constexpr int SENDERS = CLUSTER_M + CLUSTER_N - 1;
__device__ __forceinline__ void release_stage(const unsigned (&empty_bar0)[SENDERS], int stage) {
#if CLUSTER_M * CLUSTER_N > 1
#pragma unroll
    for (int i = 0; i < SENDERS; ++i) mbarrier_arrive_cluster(empty_bar0[i] + stage * 8);
#else
    mbarrier_arrive(empty_bar0[0] + stage * 8);
#endif
}

// [13] Named barriers between the two consumer warpgroups (0 is __syncthreads'): bar.sync waits until `count`
// threads have arrived, itself among them; bar.arrive counts this thread in and goes on.
constexpr int TURN_BARRIER = 1;  // + c: consumer c's main loop may start
constexpr int TURN_THREADS = 2 * 128;
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(count) : "memory");
}

// [13] Moves the stage and phase counters past n k-tiles (the other warpgroup's tile).
__device__ __forceinline__ void skip_stages(int& stage, unsigned& phase, int n) {
    const int passed = stage + n;
    phase ^= (unsigned)(passed / NUM_STAGES) & 1u;
    stage = passed % NUM_STAGES;
}

// [6] A tile cut between workers, summed without a second kernel. A consumer warp owns a strip of 16 rows
// of each of its fragments (STRIPS_PER_TILE strips per cluster tile); for each part it writes the strip's fp32 partial
// to the part's slot, worker + cut tile index (distinct for every part of every cut tile: a later worker
// starts after an earlier one, a later tile after an earlier one), in the accumulator fragment's own order
// (pair p of lane l at float2 index p * 32 + l, so each store instruction covers 256 contiguous bytes),
// skipping rows past M, then counts itself in on the strip's counter. The warp that brings the count to the
// number of parts has every partial in global memory: it adds them in worker order, its own read back like
// the others, so the sum rounds the same way whichever part finished last, and returns true to run the
// epilogue. It also puts the counter back to 0 for the next launch. The other warps return false and go
// on to their next segment: nobody waits. `rows` is how many of the strip's rows are inside C.
constexpr int STRIPS_PER_TILE = CLUSTER_SIZE * BLOCK_M / 16;  // 16 rows per strip
template <int N_ACC>
__device__ __forceinline__ bool partial_sum_if_last(float (&acc)[N_ACC], float* partials, unsigned* counters,
                                                    int cut_tile, int worker, int first, int last, int strip,
                                                    int rows, int lane) {
    constexpr int PAIRS = N_ACC / 2;  // pair p is row lane/4 (p even) or lane/4 + 8 (p odd) of the strip
    constexpr long long SLOT_STRIDE = (long long)STRIPS_PER_TILE * PAIRS * 32;  // float2s per slot
    const bool row_lo = lane / 4 < rows, row_hi = lane / 4 + 8 < rows;
    float2* const slot0 = reinterpret_cast<float2*>(partials) + ((long long)cut_tile * SLOT_STRIDE +
                                                                 (long long)strip * PAIRS * 32 + lane);
    float2* const mine = slot0 + worker * SLOT_STRIDE;
#pragma unroll
    for (int p = 0; p < PAIRS; ++p)
        if (p % 2 ? row_hi : row_lo) __stcg(mine + p * 32, make_float2(acc[2 * p], acc[2 * p + 1]));
    __syncwarp();  // every lane's partial is written before lane 0 releases it with the count
    unsigned* const counter = counters + cut_tile * STRIPS_PER_TILE + strip;
    unsigned arrived = 0;
    if (lane == 0) arrived = atom_add_acq_rel_gpu(counter, 1u);
    if (__shfl_sync(0xffffffffu, arrived, 0) != (unsigned)(last - first)) return false;
    __syncwarp();  // lane 0's acquire before every lane's reads of the other parts
    if (lane == 0) *counter = 0u;
#pragma unroll
    for (int i = 0; i < N_ACC; ++i) acc[i] = 0.0f;
#pragma unroll 1
    for (int w = first; w <= last; ++w) {
        const float2* const part = slot0 + w * SLOT_STRIDE;
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) {
            if (p % 2 ? row_hi : row_lo) {
                const float2 v = __ldcg(part + p * 32);  // from L2: this SM's L1 may hold nothing valid
                acc[2 * p] += v.x;
                acc[2 * p + 1] += v.y;
            }
        }
    }
    return true;
}

#if CLUSTER_K > 1
// [12] A tile's strip summed in the cluster. Every CTA computed the strip's part for its slice of K. A CTA that
// does not own the strip waits until the owner has read what it sent for the tile before (may_send, parity
// ^ 1: the first tile passes), then writes its part straight into its slot in the owner's shared memory
// (st.async, in the fragment's order, pair p of lane l at float2 p * 32 + l), each store completing bytes of
// the owner's sum_full barrier, and returns false: nobody waits on it. The owner expects those bytes, waits
// for them, adds the parts in rank order (its own from registers in its place, so the sum rounds the same
// way whoever finished first), hands the slots back to each sender, and returns true to run the epilogue.
template <int N_ACC>
__device__ __forceinline__ bool sum_in_cluster(float (&acc)[N_ACC], unsigned sum_base, unsigned sum_full0,
                                               unsigned may_send0, int strip, int rank, unsigned parity, int lane) {
    constexpr int PAIRS = N_ACC / 2;
    const int owner = strip % CLUSTER_K, owned = strip / CLUSTER_K;
    const unsigned slots = sum_base + owned * (CLUSTER_K - 1) * STRIP_BYTES + lane * 8;
    if (owner != rank) {
        mbarrier_wait_parity<true>(may_send0 + strip * 8, parity ^ 1);
        const unsigned dst = mapa_shared(slots + (rank < owner ? rank : rank - 1) * STRIP_BYTES, owner);
        const unsigned bar = mapa_shared(sum_full0 + owned * 8, owner);
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) st_async_v2_f32(dst + p * 256, acc[2 * p], acc[2 * p + 1], bar);
        return false;
    }
    if (lane == 0) mbarrier_arrive_expect_tx(sum_full0 + owned * 8, (CLUSTER_K - 1) * STRIP_BYTES);
    mbarrier_wait_parity<true>(sum_full0 + owned * 8, parity);
    // In rank order: the parts before this CTA's own summed first, then its own added (x + y is y + x in fp32),
    // then each part after it. Slot q - 1 holds part q > rank, slot q part q < rank.
#pragma unroll
    for (int p = 0; p < PAIRS; ++p) {
        float2 before = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int q = 0; q < CLUSTER_K - 1; ++q) {
            if (q < rank) {
                const float2 part = ld_shared_v2_f32(slots + q * STRIP_BYTES + p * 256);
                before = q == 0 ? part : make_float2(before.x + part.x, before.y + part.y);
            }
        }
        if (rank > 0) {
            acc[2 * p] += before.x;
            acc[2 * p + 1] += before.y;
        }
#pragma unroll
        for (int q = 1; q < CLUSTER_K; ++q) {
            if (q > rank) {
                const float2 part = ld_shared_v2_f32(slots + (q - 1) * STRIP_BYTES + p * 256);
                acc[2 * p] += part.x;
                acc[2 * p + 1] += part.y;
            }
        }
    }
    __syncwarp();  // every lane has read its slots before they go back
    if (lane == 0) {
#pragma unroll
        for (int q = 0; q < CLUSTER_K; ++q)
            if (q != rank) mbarrier_arrive_release_cluster(mapa_shared(may_send0 + strip * 8, q));
    }
    return true;
}
#endif

// ---------------------------------------------------------------------------------------------------
// The fused activation, applied to alpha * acc + bias in fp32 before the one rounding to out_t.
// ---------------------------------------------------------------------------------------------------

// GELU (tanh form) and SiLU are both 0.5 x (1 + tanh(v)): v = sqrt(2/pi) (x + 0.044715 x^3) for GELU,
// v = x / 2 for SiLU. The special-function unit does 16 operations per clock per SM, an eighth of the FMA
// rate, so at one per element it sets the epilogue's pace: 32,768 elements per 128 x 256 tile take 2,048
// clocks per special function. A 16-bit output takes tanh.approx (one MUFU.TANH, relative error about
// 2^-11): in the negative tail, where 1 + tanh(v) cancels, its error is at most 2^-12 |x|, below what
// rounding the GEMM's result to the output type before a separate activation kernel would cost (the
// bound deepgemm/check.py applies). An fp32 output keeps the accurate form x / (1 + exp(-2v)) with expf
// and IEEE division, longer instruction sequences that then cost more time in the epilogue.
#if OUT_DTYPE != 2
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

// 0.5 x (1 + tanh(v)), or x * sigmoid(2v) written as x / (1 + exp(-2v)) for an fp32 output.
__device__ __forceinline__ float x_half_one_plus_tanh(float x, float v) {
#if OUT_DTYPE == 2
    return x / (1.0f + expf(-2.0f * v));  // exp = inf (very negative x) gives -0
#else
    const float h = 0.5f * x;
    return fmaf(h, tanh_approx(v), h);
#endif
}

__device__ __forceinline__ float activation(float x) {
#if ACTIVATION == 1
    return fmaxf(x, 0.0f);
#elif ACTIVATION == 2
    return x_half_one_plus_tanh(x, 0.7978845608028654f * fmaf(0.044715f * x, x * x, x));  // GELU, tanh form
#elif ACTIVATION == 3
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));  // GELU, erf form: x * Phi(x)
#elif ACTIVATION == 4
    return x_half_one_plus_tanh(x, 0.5f * x);  // SiLU: x * sigmoid(x)
#else
    return x;
#endif
}

// alpha * acc + bias, activated, in fp32; one rounding to out_t happens when the pair is packed.
__device__ __forceinline__ float epilogue_value(float acc, float alpha, float bias) {
    return activation(fmaf(alpha, acc, bias));
}

// [8] One value to global memory, rounded once to out_t.
__device__ __forceinline__ void store_out(out_t* dst, float v) {
#if OUT_DTYPE == 2
    *dst = v;
#elif OUT_DTYPE == 1
    *dst = __float2bfloat16_rn(v);
#else
    *dst = __float2half_rn(v);
#endif
}

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: persistent CTAs of NUM_THREADS threads in clusters of CLUSTER_SIZE, as many clusters
// as there are cluster tiles or as fit on the GPU at once (the plan asks the driver), each with
// LAUNCH_SMEM_BYTES of dynamic shared memory. tma_c maps C (M x N, out_t) in boxes of STORE_BOX_ROWS x
// EPI_CHUNK_COLS with the swizzle of EPI_ROW_BYTES. bias may be nullptr when HAS_BIAS is 0. [6] The last
// sk_tiles cluster tiles are cut into sk_workers runs of k-tiles (0 and 0: every tile whole); then partials
// holds (sk_workers + sk_tiles) slots of STRIPS_PER_TILE x 16 x BLOCK_N floats and counters one zero per
// strip of every cut tile (the kernel leaves them zero again); both may be nullptr otherwise.
// ---------------------------------------------------------------------------------------------------

#if C_BY_POINTER
// [8] The plan passes the swapped problem: M is C's columns, N its rows. Where C^T's values are stored one by
// one (C_BY_POINTER), C comes as a pointer with its row stride ldc instead of a map.
extern "C" __global__ void __cluster_dims__(CLUSTER_SIZE, 1, 1) __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ TmaDesc tma_b, out_t* __restrict__ c_out,
            const bias_t* bias, float alpha, int M, int N, int K, int ldc, float* partials, unsigned* counters,
            int sk_tiles, int sk_workers)
#else
extern "C" __global__ void __cluster_dims__(CLUSTER_SIZE, 1, 1) __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ TmaDesc tma_b,
            const __grid_constant__ TmaDesc tma_c,
            const bias_t* bias, float alpha, int M, int N, int K, float* partials, unsigned* counters,
            int sk_tiles, int sk_workers)
#endif
{
    // ---- prologue -----------------------------------------------------------------------------------
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[NUM_STAGES];
    __shared__ __align__(8) unsigned long long empty_bar[NUM_STAGES];
#if CLUSTER_K > 1
    __shared__ __align__(8) unsigned long long sum_full[CTA_STRIPS / CLUSTER_K];  // [12] per owned strip
    __shared__ __align__(8) unsigned long long may_send[CTA_STRIPS];             // [12] per strip sent
#endif
    // [11] A dimension compiled in replaces its parameter (the plan passes the same value): every expression
    // of it below folds at compile time.
    if (FIXED_M) M = FIXED_M;
    if (FIXED_N) N = FIXED_N;
    if (FIXED_K) K = FIXED_K;

    const int tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    // [2] Cluster tiles: CLUSTER_M tiles stacked along M. When tiles_m is odd, the second CTA of the last
    // cluster row has no rows of C: TMA gives it zeros for A and clips its stores, and it still loads its
    // half of B for its partner.
    const int cluster_rows = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
    const int cluster_cols = (tiles_n + CLUSTER_N - 1) / CLUSTER_N;
    const int num_tiles = cluster_rows * cluster_cols;
    // [1] Persistent tiles: cluster c takes work units c, c + num_clusters, c + 2 num_clusters ...
    const int cluster_id = blockIdx.x / CLUSTER_SIZE, num_clusters = gridDim.x / CLUSTER_SIZE;
    const int rank = CLUSTER_SIZE > 1 ? (int)cluster_ctarank() : 0;  // = blockIdx.x % CLUSTER_SIZE
    const int rank_m = CLUSTER_N > 1 ? rank % CLUSTER_M : CLUSTER_K > 1 ? 0 : rank;
    const int rank_n = CLUSTER_N > 1 ? rank / CLUSTER_M : 0;
    // [12] The slice of K this CTA computes, read from lane 0: provably the same in every lane, as the
    // warpgroup index is below.
    const int rank_k = CLUSTER_K > 1 ? __shfl_sync(0xffffffffu, rank, 0) : 0;
    const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;  // the last one is zero-filled past K by TMA
    // [6] Whole tiles first, then the cut ones' workers.
    const Schedule sched = {k_tiles, PARTIAL_TILES ? num_tiles - sk_tiles : num_tiles, PARTIAL_TILES ? sk_workers : 0,
                            PARTIAL_TILES ? sk_tiles * k_tiles : 0};
    const int warpgroup = threadIdx.x / 128;

    // Stage s holds A at smem_base + s * STAGE_BYTES, then B; both 1024-aligned. TMA writes row r of a
    // tile at r * 128 bytes with its eight 16-byte chunks permuted (chunk c lands at c ^ (r % 8)). The
    // epilogue's store boxes follow the stages, each 2 KB and so 1024-aligned as the swizzle requires.
    const unsigned smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned epi_base = smem_base + NUM_STAGES * STAGE_BYTES;

    if (threadIdx.x == 0) {
        for (int s = 0; s < NUM_STAGES; ++s) {
            // full: this CTA's producer arrives; empty: every consumer warp on the stage's tile ([13] one
            // warpgroup's with ping-pong), in every CTA this CTA's producer loads into
            mbarrier_init(smem_addr(&full_bar[s]), 1);
            mbarrier_init(smem_addr(&empty_bar[s]), TILE_CONSUMERS * 4 * SENDERS);
        }
#if CLUSTER_K > 1
        for (int s = 0; s < CTA_STRIPS / CLUSTER_K; ++s) mbarrier_init(smem_addr(&sum_full[s]), 1);  // + the bytes
        for (int s = 0; s < CTA_STRIPS; ++s) mbarrier_init(smem_addr(&may_send[s]), 1);  // the owner's arrival
#endif
        fence_mbarrier_init();
    }
    // Barriers initialised before anyone waits on them or, from the other CTA, arrives, multicasts or [12] sends.
#if CLUSTER_M * CLUSTER_N * CLUSTER_K > 1
    cluster_sync();
#else
    __syncthreads();
#endif
    // [10] Up to here nothing read what the kernel before may still write (A, B, bias) or wrote what it may
    // still read (C, the partials): from here on everything may.
    griddepcontrol_wait();

    // [1] Both roles walk the same tiles and the same k-tiles, so their stage/phase counters stay in step
    // across tiles without ever being reset.
    int stage = 0;
    unsigned phase = 0;

    if (warpgroup == 0) {
        // ---- producer: one thread keeps up to NUM_STAGES k-tiles in flight, across tile boundaries ---
        setmaxnreg_dec<PRODUCER_REGS>();
        // The cluster ranks of this CTA's tile row (they share its A) and tile column (its B), as bits.
        const unsigned short row_mask = ((1u << CLUSTER_SIZE) - 1) / ((1u << CLUSTER_M) - 1) << rank_m;
        const unsigned short column_mask = ((1u << CLUSTER_M) - 1) << (CLUSTER_M * rank_n);
        if (threadIdx.x == 0) {
            // The maps live in parameter space: fetch them into the TMA unit's cache before the first copy.
            prefetch_tensormap(&tma_a);
            prefetch_tensormap(&tma_b);
#if !C_BY_POINTER
            prefetch_tensormap(&tma_c);
#endif
            for (SegmentWalk walk(sched, cluster_id, num_clusters, rank_k); walk.valid(); walk.next()) {
                const Segment& seg = walk.seg;
                int cluster_m, cluster_n;
                grouped_tile(seg.tile, cluster_rows, cluster_cols, cluster_m, cluster_n);
                const int tile_m = cluster_m * CLUSTER_M + rank_m, tile_n = cluster_n * CLUSTER_N + rank_n;
                for (int k_tile = seg.k_begin; k_tile < seg.k_end; ++k_tile) {
                    // Wait until the consumers of every CTA in the cluster (this producer's part of B
                    // lands in all of them) have released this stage's previous contents. On the
                    // first pass the wait is for parity 1, the phase "before" a fresh barrier, which
                    // counts as complete: the producer fills all stages without waiting.
                    mbarrier_wait_parity(smem_addr(&empty_bar[stage]), phase ^ 1);
                    const unsigned bar = smem_addr(&full_bar[stage]);
                    const unsigned a_dst = smem_base + stage * STAGE_BYTES;
                    const unsigned b_dst = a_dst + A_TILE_BYTES;
                    // [2] This CTA's 1/CLUSTER_N of the A tile, sent to the CTAs of its tile row, and its
                    // 1/CLUSTER_M of the B tile, sent to the CTAs of its tile column; the others send the
                    // rest. The full barrier waits for all of it (48 KB in fp16), zero-filled past M, N or K
                    // and counted in full either way.
                    mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
                    tma_load_operand<A_MN_MAJOR, A_BOX_ROWS, (CLUSTER_N > 1)>(
                        a_dst + rank_n * A_BOX_BYTES, &tma_a, bar, k_tile * BLOCK_K,
                        tile_m * BLOCK_M + rank_n * A_BOX_ROWS, row_mask);
                    tma_load_operand<B_MN_MAJOR, B_BOX_ROWS, (CLUSTER_M > 1)>(
                        b_dst + rank_m * B_BOX_BYTES, &tma_b, bar, k_tile * BLOCK_K,
                        tile_n * BLOCK_N + rank_m * B_BOX_ROWS, column_mask);
                    if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
                }
            }
            // [10] The last load is issued: let the next kernel in, to start on the SMs as this grid frees them.
            // Triggered at the start, its first CTAs waited on the SMs this grid leaves idle, and grids of 96 and
            // 112 CTAs ran 3 to 4% slower in CUDA graphs than triggered here, where none of eleven shapes lost
            // (lab/results/h200/kernel_probe_late_trigger.json).
            griddepcontrol_launch_dependents();
        }
    } else {
        // ---- consumers: wait for a stage, multiply, release it; then the fused epilogue -------------
        setmaxnreg_inc<CONSUMER_REGS>();
        // Read from lane 0, the warpgroup index is provably the same in every lane, so the compiler keeps
        // what is derived from it (the descriptors below) in uniform registers.
        const int consumer = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
        const int warp = (threadIdx.x % 128) / 32;
        const int lane = threadIdx.x % 32;
        const int part = PINGPONG ? 0 : consumer;  // [13] its rows of a tile: from part x CONSUMER_ROWS on
        // This warp's two store boxes (none where C goes by pointer); the chunk counter runs on across tiles.
        [[maybe_unused]] const unsigned epi_warp = epi_base + (consumer * 4 + warp) * EPI_BUFFERS * EPI_BOX_BYTES;
        [[maybe_unused]] int epi_chunk = 0;
        [[maybe_unused]] const unsigned sum_base = epi_base + EPI_BYTES;  // [12] the owned strips' slots
        [[maybe_unused]] unsigned sum_parity = 0;                         // [12] flips with every tile
        float acc[M_WGMMAS][BLOCK_N / 2];  // [7] a fragment per wgmma m64: the consumer's rows 64 mi to 64 mi + 63

        // The main loop's operands, built once. Stage 0's descriptors: this consumer's rows of A start
        // CONSUMER_ROWS x 128 bytes (8 swizzle patterns per 64 rows) into the A tile; SBO = 1024 bytes (8 rows x 128 B) between
        // 8-row groups; LBO unused for this layout (16 B, field value 1). Another stage or k16 step only
        // moves the start address, the descriptor's low 14 bits in 16-byte units, so the loop adds to
        // these instead of rebuilding them: half the main loop's instructions, and on this power-capped
        // card instructions cost clock. [5] MN-major, SBO = 1024 bytes is the step between 8-row groups
        // along K and LBO = 8 KB the step between 64-wide boxes along M or N.
        const unsigned long long desc_a0 =
            make_smem_desc(smem_base + part * CONSUMER_ROWS * SWIZZLE_ROW_BYTES, A_MN_MAJOR ? MN_BOX_BYTES : 16,
                           8 * SWIZZLE_ROW_BYTES);
        const unsigned long long desc_b0 =
            make_smem_desc(smem_base + A_TILE_BYTES, B_MN_MAJOR ? MN_BOX_BYTES : 16, 8 * SWIZZLE_ROW_BYTES);
        const unsigned full_bar0 = smem_addr(&full_bar[0]);
        unsigned empty_bar0[SENDERS];  // this tile column's CTAs, then the rest of this tile row's
#pragma unroll
        for (int i = 0; i < SENDERS; ++i) {
            const int sender = i < CLUSTER_M ? i + CLUSTER_M * rank_n : rank_m + CLUSTER_M * (i - CLUSTER_M + (i - CLUSTER_M >= rank_n));
            empty_bar0[i] = CLUSTER_M * CLUSTER_N > 1 ? mapa_shared(smem_addr(&empty_bar[0]), sender)
                                                      : smem_addr(&empty_bar[0]);
        }

        [[maybe_unused]] int turn = 0;  // [13] this CTA's tiles so far: tile t is consumer t % 2's
        for (SegmentWalk walk(sched, cluster_id, num_clusters, rank_k); walk.valid(); walk.next()) {
            const Segment& seg = walk.seg;
#if PINGPONG
            // [13] The other warpgroup's tile: its k-tiles pass through the stages all the same. This one's main
            // loop starts when the other's has issued its last wgmma: the tensor cores run one main loop at a time,
            // and no stage this warpgroup waits on is more than one phase ahead of its barrier (a barrier's parity
            // cannot tell two phases apart).
            if ((turn++ & 1) != consumer) {
                skip_stages(stage, phase, seg.k_end - seg.k_begin);
                continue;
            }
            if (turn > 1) named_barrier_sync(TURN_BARRIER + consumer, TURN_THREADS);
#endif
            int cluster_m, cluster_n;
            grouped_tile(seg.tile, cluster_rows, cluster_cols, cluster_m, cluster_n);
            const int tile_m = cluster_m * CLUSTER_M + rank_m, tile_n = cluster_n * CLUSTER_N + rank_n;

            // ---- main loop over K -------------------------------------------------------------------
            int prev_stage = 0;  // the stage of the previous k-tile, released one k-tile late
            for (int k_tile = seg.k_begin; k_tile < seg.k_end; ++k_tile) {
                mbarrier_wait_parity(full_bar0 + stage * 8, phase);

                const unsigned long long stage_desc = (unsigned long long)(stage * (STAGE_BYTES / 16));
                wgmma_fence();  // acc was written by ordinary instructions (the last epilogue's reads)
#pragma unroll
                for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
                    // k16 step kk is the 32-byte column kk of every 128-byte row: the start address moves
                    // by 32 bytes (2 in the descriptor); the hardware applies the same XOR as TMA, from
                    // the address bits. [5] MN-major, it is rows 16kk to 16kk + 15 of each box: 2 KB on.
                    // A tile's first step overwrites acc (scale-d 0) instead of adding.
                    // [7] The second m64 of a 128-row consumer is 64 rows (8 KB) further into the A tile,
                    // in either layout: an MN-major box is 64 rows of M too.
                    const unsigned long long step_a = stage_desc + kk * A_K_STEP, step_b = stage_desc + kk * B_K_STEP;
#pragma unroll
                    for (int mi = 0; mi < M_WGMMAS; ++mi)
                        wgmma_m64nNk16<BLOCK_N, A_MN_MAJOR, B_MN_MAJOR>(
                            acc[mi], desc_a0 + step_a + mi * WG_A_STEP, desc_b0 + step_b,
                            ((k_tile - seg.k_begin) | kk) != 0);
                }
                wgmma_commit_group();
                // [3] This batch stays in flight; the one before it (k-tile - 1) has now finished reading
                // its stage, which this warp releases.
                wgmma_wait_group<1>();
                if (lane == 0 && k_tile > seg.k_begin) release_stage(empty_bar0, prev_stage);

                prev_stage = stage;
                if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
            }
            // [13] The other warpgroup's turn, where it has a next tile: its wgmma queue behind this one's last.
            if (PINGPONG && walk.u + walk.step < sched.units())
                named_barrier_arrive(TURN_BARRIER + 1 - consumer, TURN_THREADS);
            wgmma_wait_group<0>();  // the tile's last batch: acc is final, its stage can go back
            if (lane == 0) release_stage(empty_bar0, prev_stage);
#pragma unroll
            for (int mi = 0; mi < M_WGMMAS; ++mi) acc_register_fence(acc[mi]);

            // [7] Fragment by fragment: consumer rows 64 mi to 64 mi + 63.
#pragma unroll
            for (int mi = 0; mi < M_WGMMAS; ++mi) {
                // ---- [4] epilogue: out = act(alpha * acc + bias[col]) in fp32, one rounding, TMA stores -------
                // Per chunk of EPI_CHUNK_COLS columns: fragment -> this warp's swizzled box (epi_swizzle: the
                // layout the map's swizzle expects), then one lane stores the box with TMA and the warp moves
                // on without waiting for it.
                const int warp_row0 = tile_m * BLOCK_M + part * CONSUMER_ROWS + mi * WG_ROWS + warp * EPI_ROWS;
#if PARTIAL_TILES
                // [6] A cut tile is left to the last of its parts to finish, strip by strip. A strip past M still
                // counts in (with nothing to store): a branch around it costs the main loop its uniform-register
                // descriptors.
                if (seg.tile >= sched.dp_tiles) {
                    const int cut_tile = seg.tile - sched.dp_tiles;
                    int first, last;
                    cut_parts(sched, cut_tile, first, last);
                    const int strip = ((rank * TILE_CONSUMERS + consumer) * M_WGMMAS + mi) * 4 + warp;
                    if (first != last && !partial_sum_if_last(acc[mi], partials, counters, cut_tile,
                                                              walk.u - sched.dp_tiles, first, last, strip,
                                                              M - warp_row0, lane))
                        continue;
                }
#endif
#if CLUSTER_K > 1
                // [12] Each strip is summed and stored by its owner; the others send it their parts. The answer
                // goes through a vote: provably the same in every lane, the branch keeps the main loop's
                // descriptors in uniform registers (a plain bool cost it 19 instructions a k-tile).
                const bool owns = sum_in_cluster(acc[mi], sum_base, smem_addr(&sum_full[0]), smem_addr(&may_send[0]),
                                                 (consumer * M_WGMMAS + mi) * 4 + warp, rank_k, sum_parity, lane);
                if (!__any_sync(0xffffffffu, owns)) continue;
#endif
#if C_BY_POINTER
                // [8] Row r of this tile is column r of C, column c row c: each value is stored on its own,
                // out_t at C(c, r). The 8 lanes with the same lane % 4 hold 8 neighbouring columns of one row
                // of C, so each store instruction writes 4 runs of 8 contiguous elements.
#pragma unroll
                for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = warp_row0 + lane / 4 + 8 * h;
                        const float row_bias = HAS_BIAS && row < M ? load_bias(bias, row) : 0.0f;
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int col = tile_n * BLOCK_N + 8 * j + 2 * (lane % 4) + e;
                            if (row < M && col < N)
                                store_out(c_out + (long long)col * ldc + row,
                                          epilogue_value(acc[mi][4 * j + 2 * h + e], alpha, row_bias));
                        }
                    }
                }
#elif SWAP_AB
                // [8] Per box of SWAP_BOX_ROWS rows of C: each 8 x 8 block of C^T (kernel rows h, h + 8 of this
                // warp's 16) is stored transposed, 16 bytes of one row of C per lane, both halves of the
                // 32-byte row from one stmatrix; then one lane stores the box.
                float bias_h[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = warp_row0 + lane / 4 + 8 * h;
                    bias_h[h] = HAS_BIAS && row < M ? load_bias(bias, row) : 0.0f;
                }
#pragma unroll
                for (int bx = 0; bx < BLOCK_N / SWAP_BOX_ROWS; ++bx, ++epi_chunk) {
                    const unsigned box = epi_warp + (epi_chunk % EPI_BUFFERS) * EPI_BOX_BYTES;
                    if (lane == 0) bulk_wait_group_read<EPI_BUFFERS - 1>();
                    __syncwarp();
#pragma unroll
                    for (int jj = 0; jj < SWAP_BOX_ROWS / 8; ++jj) {
                        const int j = bx * (SWAP_BOX_ROWS / 8) + jj;
                        const unsigned lo = pack_out2(epilogue_value(acc[mi][4 * j], alpha, bias_h[0]),
                                                      epilogue_value(acc[mi][4 * j + 1], alpha, bias_h[0]));
                        const unsigned hi = pack_out2(epilogue_value(acc[mi][4 * j + 2], alpha, bias_h[1]),
                                                      epilogue_value(acc[mi][4 * j + 3], alpha, bias_h[1]));
                        const int row = 8 * jj + lane % 8, half = (lane / 8) % 2;
                        stmatrix_x2_trans(box + epi_swizzle(row * EPI_ROW_BYTES + 16 * half), lo, hi);
                    }
                    fence_proxy_async_shared();
                    __syncwarp();
                    if (lane == 0) {
                        tma_store_2d(&tma_c, box, warp_row0, tile_n * BLOCK_N + bx * SWAP_BOX_ROWS);
                        bulk_commit_group();
                    }
                }
#else
                constexpr int CHUNKS = BLOCK_N / EPI_CHUNK_COLS;
#pragma unroll
                for (int chunk = 0; chunk < CHUNKS; ++chunk, ++epi_chunk) {
                    const unsigned box = epi_warp + (epi_chunk % EPI_BUFFERS) * EPI_BOX_BYTES;
                    // The store that last read this box was issued EPI_BUFFERS chunks ago; at most the
                    // newer one may still be reading.
                    if (lane == 0) bulk_wait_group_read<EPI_BUFFERS - 1>();
                    __syncwarp();
#pragma unroll
                    for (int jj = 0; jj < EPI_CHUNK_COLS / 8; jj += 2) {
                        // Column groups j and j + 1 (8 columns each) of the fragment: for each, rows lane/4
                        // (h = 0) and lane/4 + 8 (h = 1).
                        const int j = chunk * (EPI_CHUNK_COLS / 8) + jj;
                        float bias_lo[2] = {0.0f, 0.0f}, bias_hi[2] = {0.0f, 0.0f};
#if HAS_BIAS
#pragma unroll
                        for (int t = 0; t < 2; ++t) {
                            const int col = tile_n * BLOCK_N + 8 * (j + t) + 2 * (lane % 4);
                            if (col < N) bias_lo[t] = load_bias(bias, col);
                            if (col + 1 < N) bias_hi[t] = load_bias(bias, col + 1);
                        }
#endif
#if OUT_DTYPE != 2
                        // 16-bit output: one stmatrix writes the four 8x8 matrices (j, h = 0), (j, h = 1),
                        // (j + 1, h = 0), (j + 1, h = 1); lane l addresses row l % 8 of matrix l / 8.
                        unsigned packed[4];
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const int t = q / 2, h = q % 2;
                            packed[q] = pack_out2(epilogue_value(acc[mi][4 * (j + t) + 2 * h], alpha, bias_lo[t]),
                                                  epilogue_value(acc[mi][4 * (j + t) + 2 * h + 1], alpha, bias_hi[t]));
                        }
                        const int row = lane % 8 + 8 * ((lane / 8) % 2);
                        const int group = jj + lane / 16;  // the 16-byte column group within the 128-byte row
                        stmatrix_x4(box + epi_swizzle(row * EPI_ROW_BYTES + group * 16),
                                    packed[0], packed[1], packed[2], packed[3]);
#else
                        // fp32 output: each lane writes its column pairs as 8-byte stores.
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const int t = q / 2, h = q % 2;
                            const int row = lane / 4 + 8 * h;
                            const int byte = (8 * (jj + t) + 2 * (lane % 4)) * (int)sizeof(out_t);
                            const unsigned dst = box + epi_swizzle(row * EPI_ROW_BYTES + byte);
                            st_shared_v2_f32(dst, epilogue_value(acc[mi][4 * (j + t) + 2 * h], alpha, bias_lo[t]),
                                             epilogue_value(acc[mi][4 * (j + t) + 2 * h + 1], alpha, bias_hi[t]));
                        }
#endif
                    }
                    fence_proxy_async_shared();  // every lane's writes, before the TMA unit reads the box
                    __syncwarp();
                    if (lane == 0) {
                        tma_store_2d(&tma_c, box, tile_n * BLOCK_N + chunk * EPI_CHUNK_COLS, warp_row0);
                        bulk_commit_group();
                    }
                }
#endif
            }
            if (CLUSTER_K > 1) sum_parity ^= 1;
        }
        // The boxes must stay valid until the TMA unit has read them, and C complete before the kernel ends.
        if (lane == 0) bulk_wait_group<0>();
    }
#if CLUSTER_M * CLUSTER_N * CLUSTER_K > 1
    // [2] The other CTAs may still arrive on this CTA's barriers ([12] or send to it): none leaves before all
    // are done.
    __syncwarp();
    cluster_sync();
#endif
}
