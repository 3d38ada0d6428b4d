// v5_fused: the last stage. Over v4 (one CTA per 128x256 tile, C stored from registers) it adds four
// techniques, each a block of the kernel marked [1] to [4]:
//   [1] persistent tiles: one CTA per SM walks its tiles in grouped order, its counters running on across
//       tiles, so the producer fills the next tile's stages during this tile's epilogue.
//   [2] clusters of two CTAs on neighbouring tile rows (CLUSTER_M 2) share B: each loads half and TMA
//       multicasts it into both, 32 KB of L2 reads per k-tile and CTA instead of 48 (less power).
//   [3] one wgmma batch in flight: a consumer issues k-tile i, then waits only for k-tile i-1.
//   [4] the fused epilogue: out = act(alpha * acc + bias[col]) in fp32, rounded once, staged through
//       128B-swizzled shared memory and written by TMA stores that drain while the consumers go on.
// What still limits it: a tile's epilogue leaves the tensor cores idle, and the power cap holds the SM
// clock near 1500 MHz. The library's kernel grows from this one: python -m tutorial diff library.
// Needs sm_90a (wgmma, setmaxnreg): nvcc -cubin -gencode=arch=compute_90a,code=sm_90a kernel.cu

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif

#if DTYPE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
#define WGMMA_AB_TYPE "bf16"
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
#define WGMMA_AB_TYPE "f16"
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

#ifndef HAS_BIAS
#define HAS_BIAS 0     // [4] 1: add bias[col] (N floats) before the activation
#endif
#ifndef ACTIVATION
#define ACTIVATION 0   // [4] 0 none, 1 relu, 2 gelu (tanh form)
#endif

#ifndef BLOCK_M
#define BLOCK_M 128    // 2 consumer warpgroups x the 64 rows of one wgmma m64
#endif
#ifndef BLOCK_N
#define BLOCK_N 256    // the N of wgmma m64n256k16: 128 fp32 accumulators per consumer thread
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
#define CLUSTER_M 2    // [2] CTAs per cluster, on neighbouring tile rows: they share B, each loading 1/CLUSTER_M
#endif
#ifndef WGMMA_IN_FLIGHT
#define WGMMA_IN_FLIGHT 1 // [3] wgmma batches left in flight while the next k-tile is issued; 0: the ablation
#endif
#ifndef TIMELINE
#define TIMELINE 0     // 1: the first CTAs stamp their waits and hand-offs for tutorial/timeline.py
#endif

constexpr int NUM_THREADS = 384;  // warpgroup 0 produces, warpgroups 1 and 2 consume
constexpr int NUM_CONSUMERS = 2;  // consumer warpgroups; each releases a stage once per warp
constexpr int WG_ROWS = 64;       // rows of C per consumer warpgroup: the M of every wgmma
constexpr int A_TILE_BYTES = BLOCK_M * BLOCK_K * (int)sizeof(elem_t);
constexpr int B_TILE_BYTES = BLOCK_N * BLOCK_K * (int)sizeof(elem_t);
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;  // what one stage's full barrier expects
constexpr int SWIZZLE_ROW_BYTES = BOX_K * (int)sizeof(elem_t);  // one box row = one swizzle row (128 B)
constexpr int B_BOX_ROWS = BLOCK_N / CLUSTER_M;           // [2] the rows of B one CTA loads and multicasts
constexpr int B_BOX_BYTES = B_BOX_ROWS * BLOCK_K * (int)sizeof(elem_t);
[[maybe_unused]] constexpr int GROUP_ROWS = GROUP_M / CLUSTER_M;  // [2] the tile order walks cluster rows
constexpr int K_STEP = 16 * (int)sizeof(elem_t) / 16;     // a k16 step: 32 bytes along a row, 2 in descriptor units
constexpr int PRODUCER_REGS = 40;   // the producer thread only computes coordinates
constexpr int CONSUMER_REGS = 232;  // 128 accumulators + descriptors + epilogue; 40 + 2 x 232 <= 512
// [4] Each consumer warp stores its 16 rows of C in boxes of 16 rows x 128 bytes (the swizzle span, so a
// fragment's 8 rows hit 8 different bank groups), through two buffers: it fills one while TMA reads the other.
constexpr int EPI_ROWS = 16;                                        // rows of C per consumer warp
constexpr int EPI_BOX_BYTES = EPI_ROWS * SWIZZLE_ROW_BYTES;         // 2 KB: one TMA store box
constexpr int EPI_BUFFERS = 2;                                      // per warp: fill one, store the other
constexpr int EPI_BYTES = NUM_CONSUMERS * 4 * EPI_BUFFERS * EPI_BOX_BYTES;  // 32 KB, after the stages
constexpr int EPI_CHUNK_COLS = SWIZZLE_ROW_BYTES / (int)sizeof(elem_t);   // 64 columns of C

static_assert(BLOCK_M == NUM_CONSUMERS * WG_ROWS, "two consumer warpgroups of 64 rows");
static_assert(BLOCK_N == 256, "the wgmma below is m64n256k16");
static_assert(SWIZZLE_ROW_BYTES == 128 && BOX_K == BLOCK_K, "one 128-byte swizzled box per operand per k-tile");
static_assert(A_TILE_BYTES % 1024 == 0 && B_TILE_BYTES % 1024 == 0,
              "every tile starts on a 1024-byte boundary, where the 8-row swizzle pattern restarts");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "[2] one CTA, or two sharing B");
static_assert(B_BOX_BYTES % 1024 == 0, "[2] each CTA's part of the B tile starts on a 1024-byte boundary");
static_assert((227 * 1024) / 16 < (1 << 14), "a shared address fits the descriptor's 14-bit start: adding never carries");
static_assert(WGMMA_IN_FLIGHT == 0 || WGMMA_IN_FLIGHT == 1,
              "[3] a stage goes back one k-tile after its batch: with two batches in flight it would still be read");
static_assert(NUM_STAGES > WGMMA_IN_FLIGHT, "[3] a batch in flight holds its stage while the next k-tile fills another");

// Launch facts the launcher reads back from the compiled module (dynamic smem: + 1024 of alignment slack).
extern "C" __device__ const int LAUNCH_THREADS = NUM_THREADS;
extern "C" __device__ const int LAUNCH_SMEM_BYTES = NUM_STAGES * STAGE_BYTES + EPI_BYTES + 1024;
extern "C" __device__ const int LAUNCH_STORE_ROWS = EPI_ROWS;         // [4] the box of C's map: rows ...
extern "C" __device__ const int LAUNCH_STORE_COLS = EPI_CHUNK_COLS;   // ... and columns

// The launcher's CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value as a __grid_constant__
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

// Waits until the phase with the given parity has completed. With a time hint the thread sleeps
// (NANOSLEEP.SYNCS) until the barrier changes, instead of spinning and issuing instructions for nothing.
constexpr unsigned WAIT_SUSPEND_HINT_NS = 10000000;  // an upper bound only: the phase change wakes the thread
__device__ __forceinline__ void mbarrier_wait_parity(unsigned bar, unsigned parity) {
    unsigned done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done) : "r"(bar), "r"(parity), "n"(WAIT_SUSPEND_HINT_NS) : "memory");
    } while (!done);
}

// A box of the tensor map at element coordinates (k, row) -> shared memory at dst; completes on bar.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar)
        : "memory");
}

// [2] As tma_load_2d, but the box lands at the same shared-memory offset in every CTA of the cluster named
// in cta_mask, and completes on the barrier at bar's offset in each of them: one L2 read, several SMs.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row,
                                                      unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar), "h"(cta_mask)
        : "memory");
}

// [2] The address of the same shared-memory variable in CTA `rank` of this cluster.
__device__ __forceinline__ unsigned mapa_shared(unsigned addr, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
    return out;
}

// [2] An arrival on a barrier in any CTA of the cluster (address from mapa_shared), with the default .cta-scope
// release. PTX's memory model orders a thread of another CTA only at .cluster scope, which would add a
// MEMBAR.ALL.GPU per arrival; what the arrival hands over, this warp's wgmma reads, finished at wait_group
// before it, and CUTLASS's pipelines arrive the same way.
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned cluster_bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(cluster_bar) : "memory");
}

// [2] This CTA's rank in its cluster.
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// [2] Every thread of every CTA in the cluster: arrive and wait (the cluster's __syncthreads).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// [4] A box of shared memory at src -> the tensor map at (col, row), clipped to its bounds; a bulk async-group.
__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, unsigned src, int col, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
        :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(src)
        : "memory");
}

// [4] Closes this thread's bulk stores issued since the last commit into one group.
__device__ __forceinline__ void bulk_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// [4] Waits until at most N of this thread's bulk groups still read shared memory: older boxes may be reused.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// [4] Waits until at most N of this thread's bulk groups are still running at all (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

// [4] Ordinary stores to shared memory are made visible to the async proxy (the TMA unit) that reads them next.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// [4] Four 8x8 matrices of 16-bit elements from the mma fragment layout (register i: row lane/4, columns
// 2(lane%4) and 2(lane%4)+1 of matrix i) to shared memory; lane l gives the address of row l%8 of matrix l/8.
__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
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

// wgmma's accumulator operands: "+f" constraints for d[i] .. d[i + 7], and their asm names %0 .. %127.
#define WGMMA_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D64(i) WGMMA_D8(i), WGMMA_D8(i + 8), WGMMA_D8(i + 16), WGMMA_D8(i + 24), \
                     WGMMA_D8(i + 32), WGMMA_D8(i + 40), WGMMA_D8(i + 48), WGMMA_D8(i + 56)
#define WGMMA_REGS_0_63 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_REGS_64_127 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// D(64xN, fp32) += A(64x16) * B(16xN), A and B read from shared memory through their descriptors, both
// K-major (imm-trans-a = imm-trans-b = 0), imm-scale-a = imm-scale-b = 1, D kept when scale_d != 0.
// Accumulator fragment, thread t of the warpgroup, warp w = t / 32, lane l = t % 32, j = 0 .. N/8 - 1:
//   d[4j+0] = D(16w + l/4,     8j + 2(l%4))     d[4j+1] = D(16w + l/4,     8j + 2(l%4) + 1)
//   d[4j+2] = D(16w + l/4 + 8, 8j + 2(l%4))     d[4j+3] = D(16w + l/4 + 8, 8j + 2(l%4) + 1)
template <int N>
__device__ __forceinline__ void wgmma_m64nNk16(float* d, unsigned long long desc_a, unsigned long long desc_b,
                                               int scale_d) {
    static_assert(N == 256, "the instruction shape this kernel issues");
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " "
                 "{" WGMMA_REGS_0_63 ", " WGMMA_REGS_64_127 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_D64(0), WGMMA_D64(64)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
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
// Tile order. CTAs are launched roughly in blockIdx order, so consecutive indices run together. Walking
// GROUP_M tile rows column by column makes those CTAs share GROUP_M A row-blocks and a few B
// column-blocks, which then stay in L2, instead of streaming all of B once per tile row.
// [1] [2] Here an index is a cluster tile (CLUSTER_M tiles along M) and cluster c takes c, c + clusters, ...
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ void grouped_tile(int tile_idx, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
#if GROUP_M / CLUSTER_M > 1
    const int group_tiles = GROUP_ROWS * tiles_n;
    const int first_m = (tile_idx / group_tiles) * GROUP_ROWS;
    const int group_rows = min(tiles_m - first_m, GROUP_ROWS);  // the last group may be short
    tile_m = first_m + (tile_idx % group_tiles) % group_rows;
    tile_n = (tile_idx % group_tiles) / group_rows;
#else
    tile_m = tile_idx / tiles_n;
    tile_n = tile_idx % tiles_n;
#endif
}

// [2] Hands a stage back: one arrival per consumer warp on the stage's empty barrier in every CTA of the
// cluster, whose producers all write into it. empty_bar0[i] is empty_bar[0] in CTA i (mapa_shared, once).
__device__ __forceinline__ void release_stage(const unsigned (&empty_bar0)[CLUSTER_M], int stage) {
#if CLUSTER_M > 1
#pragma unroll
    for (int i = 0; i < CLUSTER_M; ++i) mbarrier_arrive_cluster(empty_bar0[i] + stage * 8);
#else
    mbarrier_arrive(empty_bar0[0] + stage * 8);
#endif
}

// ---------------------------------------------------------------------------------------------------
// The pipeline over time, for tutorial/timeline.py. With TIMELINE 1 the first TIMELINE_CTAS CTAs stamp
// the SM's clock (clock64) where a role starts to wait, goes on, hands a stage over and starts its
// epilogue: the producer thread, and thread 0 of each consumer warpgroup. A stamp packs the event, the
// stage and the clock's low 48 bits into 64 bits. With TIMELINE 0, as shipped, nothing of it is compiled.
// ---------------------------------------------------------------------------------------------------

enum class Stamp : unsigned { wait = 0, go = 1, handoff = 2, epilogue = 3 };
#if TIMELINE
constexpr int TIMELINE_CTAS = 2;
constexpr int TIMELINE_ROLES = 3;     // the producer, consumer warpgroups 0 and 1
constexpr int TIMELINE_STAMPS = 4096; // per role: 3 a k-tile, over 1,300 k-tiles
extern "C" __device__ unsigned long long timeline_stamps[TIMELINE_CTAS * TIMELINE_ROLES * TIMELINE_STAMPS];
#endif
__device__ __forceinline__ void timeline_stamp(bool stamper, int role, Stamp event, int stage, int& count) {
#if TIMELINE
    if (stamper && blockIdx.x < TIMELINE_CTAS && count < TIMELINE_STAMPS) {
        const unsigned long long clock = (unsigned long long)clock64() & ((1ull << 48) - 1);
        timeline_stamps[(blockIdx.x * TIMELINE_ROLES + role) * TIMELINE_STAMPS + count++] =
            ((unsigned long long)event << 56) | ((unsigned long long)stage << 48) | clock;
    }
#endif
}

// ---- [4] the fused epilogue's arithmetic, in fp32 before the one rounding to the input type ----------

// GELU's tanh form, 0.5 x (1 + tanh(v)), v = sqrt(2/pi) (x + 0.044715 x^3), with one MUFU.TANH: relative error
// about 2^-11, below the 16-bit output's rounding (tutorial/check.py's bound).
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float activation(float x) {
#if ACTIVATION == 1
    return fmaxf(x, 0.0f);
#elif ACTIVATION == 2
    const float v = 0.7978845608028654f * fmaf(0.044715f * x, x * x, x);
    const float h = 0.5f * x;
    return fmaf(h, tanh_approx(v), h);
#else
    return x;
#endif
}

// alpha * acc + bias, activated, in fp32.
__device__ __forceinline__ float epilogue_value(float acc, float alpha, float bias) {
    return activation(fmaf(alpha, acc, bias));
}

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: [1] as many [2] clusters as there are cluster tiles or fit on the GPU at once, each CTA
// NUM_THREADS threads with LAUNCH_SMEM_BYTES. [4] tma_c maps C in 128B-swizzled EPI_ROWS x EPI_CHUNK_COLS
// boxes; C (row stride ldc) is the same memory, for the ablation that stores from registers
// (store_from_registers.diff). bias may be nullptr.
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __cluster_dims__(CLUSTER_M, 1, 1) __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ TmaDesc tma_b,
            const __grid_constant__ TmaDesc tma_c, elem_t* __restrict__ C, const float* bias, float alpha,
            int M, int N, int K, int ldc)
{
    // ---- prologue -----------------------------------------------------------------------------------
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[NUM_STAGES];
    __shared__ __align__(8) unsigned long long empty_bar[NUM_STAGES];

    const int tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    // [2] Cluster tiles: CLUSTER_M tiles stacked along M. With tiles_m odd, the last cluster's second CTA
    // gets zeros for A and its stores are clipped, and it still loads half of B for its partner.
    const int cluster_rows = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
    const int num_tiles = cluster_rows * tiles_n;
    // [1] Persistent tiles: cluster c takes cluster tiles c, c + num_clusters, c + 2 num_clusters ...
    const int cluster_id = blockIdx.x / CLUSTER_M, num_clusters = gridDim.x / CLUSTER_M;
    const int rank = CLUSTER_M > 1 ? (int)cluster_ctarank() : 0;  // = blockIdx.x % CLUSTER_M
    const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;  // the last one is zero-filled past K by TMA
    const int warpgroup = threadIdx.x / 128;

    // Stage s holds A at smem_base + s * STAGE_BYTES, then B; both 1024-aligned. TMA writes row r of a
    // tile at r * 128 bytes with its eight 16-byte chunks permuted (chunk c lands at c ^ (r % 8)). [4] The
    // epilogue's store boxes follow the stages, each 2 KB and so 1024-aligned as the swizzle requires.
    const unsigned smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned epi_base = smem_base + NUM_STAGES * STAGE_BYTES;

    if (threadIdx.x == 0) {
        for (int s = 0; s < NUM_STAGES; ++s) {
            mbarrier_init(smem_addr(&full_bar[s]), 1);                               // the producer's arrival
            mbarrier_init(smem_addr(&empty_bar[s]), NUM_CONSUMERS * 4 * CLUSTER_M);  // [2] every consumer warp of the cluster
        }
        fence_mbarrier_init();
    }
#if CLUSTER_M > 1
    cluster_sync();  // [2] the other CTA's barriers too, before it arrives on them or multicasts into them
#else
    __syncthreads();  // barriers initialised before anyone waits on them; no CTA-wide barrier after this
#endif

    if (warpgroup == 0) {
        // ---- producer: one thread keeps up to NUM_STAGES k-tiles in flight ---------------------------
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int stage = 0;
            unsigned phase = 0;
            int stamps = 0;  // the timeline's
            for (int tile = cluster_id; tile < num_tiles; tile += num_clusters) {
                int cluster_m, tile_n;
                grouped_tile(tile, cluster_rows, tiles_n, cluster_m, tile_n);
                const int tile_m = cluster_m * CLUSTER_M + rank;
                for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
                    // Wait until the consumers have released this stage's previous contents. On the first
                    // pass the wait is for parity 1, the phase "before" a fresh barrier, which counts as
                    // complete: the producer fills all stages without waiting.
                    timeline_stamp(true, 0, Stamp::wait, stage, stamps);
                    mbarrier_wait_parity(smem_addr(&empty_bar[stage]), phase ^ 1);
                    timeline_stamp(true, 0, Stamp::go, stage, stamps);
                    const unsigned bar = smem_addr(&full_bar[stage]);
                    const unsigned a_dst = smem_base + stage * STAGE_BYTES;
                    const unsigned b_dst = a_dst + A_TILE_BYTES;
                    // One box per operand: BLOCK_M x 128 bytes of A and BLOCK_N x 128 bytes of B (48 KB in
                    // fp16), zero-filled past M, N or K and counted in full either way. [2] Each CTA loads
                    // 1/CLUSTER_M of B and multicasts it into the cluster.
                    mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
                    tma_load_2d(a_dst, &tma_a, bar, k_tile * BLOCK_K, tile_m * BLOCK_M);
                    if constexpr (CLUSTER_M > 1)
                        tma_load_2d_multicast(b_dst + rank * B_BOX_BYTES, &tma_b, bar, k_tile * BLOCK_K,
                                              tile_n * BLOCK_N + rank * B_BOX_ROWS, (1u << CLUSTER_M) - 1);
                    else
                        tma_load_2d(b_dst, &tma_b, bar, k_tile * BLOCK_K, tile_n * BLOCK_N);
                    timeline_stamp(true, 0, Stamp::handoff, stage, stamps);
                    if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
                }
            }
        }
    } else {
        // ---- consumers: wait for a stage, multiply, release it -------------------------------------
        setmaxnreg_inc<CONSUMER_REGS>();
        // Read from lane 0, the warpgroup index is provably the same in every lane, so the compiler keeps
        // what is derived from it (the descriptors below) in uniform registers.
        const int consumer = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
        const int warp = (threadIdx.x % 128) / 32;
        const int lane = threadIdx.x % 32;
        // [4] This warp's two store boxes; the chunk counter runs on across tiles.
        const unsigned epi_warp = epi_base + (consumer * 4 + warp) * EPI_BUFFERS * EPI_BOX_BYTES;
        int epi_chunk = 0;
        float acc[BLOCK_N / 2];
        const bool stamper = threadIdx.x % 128 == 0;  // the timeline's
        int stamps = 0;
        int stage = 0;
        unsigned phase = 0;  // parity of the full-barrier phase this pass over the stages waits for

        // Stage 0's descriptors, built once (this consumer's 64 rows of A 64 x 128 bytes into the A tile; SBO
        // 1024 bytes = 8 rows; LBO unused): another stage or k16 step only adds to the start address, in
        // 16-byte units, half the instructions of rebuilding them (and on this power-capped card they cost clock).
        const unsigned long long desc_a0 =
            make_smem_desc(smem_base + consumer * WG_ROWS * SWIZZLE_ROW_BYTES, 16, 8 * SWIZZLE_ROW_BYTES);
        const unsigned long long desc_b0 = make_smem_desc(smem_base + A_TILE_BYTES, 16, 8 * SWIZZLE_ROW_BYTES);
        const unsigned full_bar0 = smem_addr(&full_bar[0]);
        unsigned empty_bar0[CLUSTER_M];  // [2] empty_bar[0] in each CTA of the cluster
#pragma unroll
        for (int i = 0; i < CLUSTER_M; ++i)
            empty_bar0[i] = CLUSTER_M > 1 ? mapa_shared(smem_addr(&empty_bar[0]), i) : smem_addr(&empty_bar[0]);

        for (int tile = cluster_id; tile < num_tiles; tile += num_clusters) {
            int cluster_m, tile_n;
            grouped_tile(tile, cluster_rows, tiles_n, cluster_m, tile_n);
            const int tile_m = cluster_m * CLUSTER_M + rank;

            // ---- main loop over K -------------------------------------------------------------------
            int prev_stage = 0;  // [3] the stage of the previous k-tile, released one k-tile late
            for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
                timeline_stamp(stamper, 1 + consumer, Stamp::wait, stage, stamps);
                mbarrier_wait_parity(full_bar0 + stage * 8, phase);
                timeline_stamp(stamper, 1 + consumer, Stamp::go, stage, stamps);

                const unsigned long long stage_desc = (unsigned long long)(stage * (STAGE_BYTES / 16));
                wgmma_fence();  // acc was written by ordinary instructions (the last epilogue's reads)
#pragma unroll
                for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
                    // k16 step kk is the 32-byte column kk of every 128-byte row: the start address moves
                    // by 32 bytes (2 in the descriptor); the hardware applies the same XOR as TMA, from
                    // the address bits. A tile's first step overwrites acc (scale-d 0) instead of adding.
                    const unsigned long long step = stage_desc + kk * K_STEP;
                    wgmma_m64nNk16<BLOCK_N>(acc, desc_a0 + step, desc_b0 + step, (k_tile | kk) != 0);
                }
                wgmma_commit_group();
                // [3] This batch stays in flight; the one before it has now read its stage, which this warp
                // releases. (WGMMA_IN_FLIGHT 0, the ablation: wait for this batch too, as v4 does.)
                wgmma_wait_group<WGMMA_IN_FLIGHT>();
                const int done_stage = WGMMA_IN_FLIGHT ? prev_stage : stage;
                const bool done = !WGMMA_IN_FLIGHT || k_tile > 0;
                if (lane == 0 && done) release_stage(empty_bar0, done_stage);
                if (done) timeline_stamp(stamper, 1 + consumer, Stamp::handoff, done_stage, stamps);

                prev_stage = stage;
                if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
            }
            wgmma_wait_group<0>();  // the tile's last batch: acc is final, its stage can go back
            if (WGMMA_IN_FLIGHT) {
                if (lane == 0) release_stage(empty_bar0, prev_stage);
                timeline_stamp(stamper, 1 + consumer, Stamp::handoff, prev_stage, stamps);
            }
            timeline_stamp(stamper, 1 + consumer, Stamp::epilogue, prev_stage, stamps);
            acc_register_fence(acc);

            // ---- [4] epilogue: out = act(alpha * acc + bias[col]) in fp32, one rounding, TMA stores -------
            // Per chunk of EPI_CHUNK_COLS columns: fragment -> this warp's box, row r's 16-byte group g at
            // r * 128 + (g ^ r % 8) * 16 (the 128B swizzle); one lane stores it with TMA and nobody waits.
            const int warp_row0 = tile_m * BLOCK_M + consumer * WG_ROWS + warp * EPI_ROWS;
            constexpr int CHUNKS = BLOCK_N / EPI_CHUNK_COLS;
#pragma unroll
            for (int chunk = 0; chunk < CHUNKS; ++chunk, ++epi_chunk) {
                const unsigned box = epi_warp + (epi_chunk % EPI_BUFFERS) * EPI_BOX_BYTES;
                // The store that last read this box was issued EPI_BUFFERS chunks ago: wait until it has.
                if (lane == 0) bulk_wait_group_read<EPI_BUFFERS - 1>();
                __syncwarp();
#pragma unroll
                for (int jj = 0; jj < EPI_CHUNK_COLS / 8; jj += 2) {
                    // Column groups j and j + 1 (8 columns each): rows lane/4 (h = 0) and lane/4 + 8 (h = 1).
                    const int j = chunk * (EPI_CHUNK_COLS / 8) + jj;
                    float bias_lo[2] = {0.0f, 0.0f}, bias_hi[2] = {0.0f, 0.0f};
#if HAS_BIAS
#pragma unroll
                    for (int t = 0; t < 2; ++t) {
                        const int col = tile_n * BLOCK_N + 8 * (j + t) + 2 * (lane % 4);
                        if (col < N) bias_lo[t] = __ldg(bias + col);
                        if (col + 1 < N) bias_hi[t] = __ldg(bias + col + 1);
                    }
#endif
                    // 16-bit output: one stmatrix writes the four 8x8 matrices (j, h = 0), (j, h = 1),
                    // (j + 1, h = 0), (j + 1, h = 1); lane l addresses row l % 8 of matrix l / 8.
                    unsigned packed[4];
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const int t = q / 2, h = q % 2;
                        const elem2_t pair = to_elem2(epilogue_value(acc[4 * (j + t) + 2 * h], alpha, bias_lo[t]),
                                                      epilogue_value(acc[4 * (j + t) + 2 * h + 1], alpha, bias_hi[t]));
                        packed[q] = *reinterpret_cast<const unsigned*>(&pair);
                    }
                    const int row = lane % 8 + 8 * ((lane / 8) % 2);
                    const int group = jj + lane / 16;  // the 16-byte column group within the 128-byte row
                    stmatrix_x4(box + row * SWIZZLE_ROW_BYTES + ((group ^ (row % 8)) * 16),
                                packed[0], packed[1], packed[2], packed[3]);
                }
                fence_proxy_async_shared();  // every lane's writes, before the TMA unit reads the box
                __syncwarp();
                if (lane == 0) {
                    tma_store_2d(&tma_c, box, tile_n * BLOCK_N + chunk * EPI_CHUNK_COLS, warp_row0);
                    bulk_commit_group();
                }
            }
        }
        // [4] The boxes must stay valid until the TMA unit has read them, and C complete before the kernel ends.
        if (lane == 0) bulk_wait_group<0>();
    }
#if CLUSTER_M > 1
    // [2] The other CTA may still arrive on this CTA's barriers: none leaves before both are done.
    __syncwarp();
    cluster_sync();
#endif
}
