// v4_pipeline_swizzle: a real pipeline. Over v3 (lock-step double buffer, two 64-byte swizzled boxes),
// this stage
//   - specialises warpgroups: warpgroup 0 is the producer (one thread issues all TMA loads), warpgroups
//     1 and 2 are consumers that only wait, multiply and release. Each stage has a "full" mbarrier (TMA
//     bytes landed) and an "empty" one (both consumers done reading), so the producer runs up to
//     NUM_STAGES k-tiles ahead and nobody ever waits on a __syncthreads;
//   - hands the registers to the consumers with setmaxnreg (producer 40, consumers 232): each consumer
//     holds 64x256 fp32 accumulators (128 per thread, m64n256k16); ptxas fits this kernel within the 168
//     a thread gets at launch, so the consumers' larger allotment is headroom, not a speedup;
//   - loads each operand's k-tile as one 128-byte-wide TMA box with the 128B swizzle, which wgmma reads
//     without bank conflicts, instead of two boxes with the 64-byte swizzle;
//   - walks the tiles in GROUP_M-row groups so that CTAs running together share A rows and B columns
//     in L2.
// What still limits it: one CTA per tile, so every CTA pays its own prologue (barrier init, pipeline
// fill) and its epilogue, which stores scattered 4-byte fragment pairs, leaves the tensor cores idle; and
// the consumers wait for each k-tile's wgmma to finish (wait_group<0>) before the next batch can be
// issued. v5 makes the grid persistent, keeps one batch in flight, and fuses and vectorises the epilogue.
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
__device__ __forceinline__ elem_t to_elem(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
#define WGMMA_AB_TYPE "f16"
__device__ __forceinline__ elem_t to_elem(float x) { return __float2half_rn(x); }
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
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
#define BOX_K 64       // the whole k-tile in one box per operand (128 bytes, the 128B swizzle span);
                       // the swizzle's ablation: 32, two 64-byte boxes with the 64B swizzle (v3's);
                       // 8, eight 16-byte boxes with no swizzle
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4   // 4 x 48 KB = 192 KB of the 227 KB a CTA may use: deep enough to hide HBM latency
#endif
#ifndef GROUP_M
#define GROUP_M 8      // tile rows per group in the launch order (L2 reuse); <= 1: plain row-major
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
constexpr int BOXES = BLOCK_K / BOX_K;                           // boxes per operand per k-tile (1)
constexpr bool SWIZZLED = SWIZZLE_ROW_BYTES >= 32;               // 16-byte boxes: no swizzle
constexpr int PRODUCER_REGS = 40;   // the producer thread only computes coordinates
constexpr int CONSUMER_REGS = 232;  // 128 accumulators + descriptors + epilogue; 40 + 2 x 232 <= 512

// Launch facts the launcher reads back from the compiled module (dynamic smem: + 1024 of alignment slack).
extern "C" __device__ const int LAUNCH_THREADS = NUM_THREADS;
extern "C" __device__ const int LAUNCH_SMEM_BYTES = NUM_STAGES * STAGE_BYTES + 1024;

static_assert(BLOCK_M == NUM_CONSUMERS * WG_ROWS, "two consumer warpgroups of 64 rows");
static_assert(BLOCK_N == 256, "the wgmma below is m64n256k16");
static_assert(NUM_STAGES >= 1, "at least one stage of shared memory");
static_assert((SWIZZLE_ROW_BYTES == 128 || SWIZZLE_ROW_BYTES == 64 || SWIZZLE_ROW_BYTES == 16) && BOXES * BOX_K == BLOCK_K,
              "one 128-byte or two 64-byte swizzled boxes, or eight 16-byte plain ones, per operand per k-tile");
static_assert(A_TILE_BYTES % 1024 == 0 && B_TILE_BYTES % 1024 == 0,
              "every tile starts on a 1024-byte boundary, where the 8-row swizzle pattern restarts");

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

// Spins until the phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait_parity(unsigned bar, unsigned parity) {
    unsigned done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// A box of the tensor map at element coordinates (k, row) -> shared memory at dst; completes on bar.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar)
        : "memory");
}

// wgmma shared-memory matrix descriptor (PTX ISA, "matrix descriptor format"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset (LBO) >> 4
//   bits 32-45  stride dimension byte offset (SBO) >> 4
//   bits 49-51  base offset (0: every tile starts 1024-aligned, where the swizzle pattern starts)
//   bits 62-63  layout type: 1 = 128-byte swizzle (2 = 64-byte, BOX_K 32; 0 = none, BOX_K 8)
// For a K-major swizzled operand whose k16 slice (32 bytes) lies inside one 128-byte row, LBO is not
// used; SBO is the distance between 8-row groups of core matrices along M (or N). Without a swizzle a
// core matrix is 8 rows x 16 bytes, contiguous; LBO steps to the next 16 bytes of K, SBO to the next 8 rows.
__device__ __forceinline__ unsigned long long make_smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return  (unsigned long long)((addr >> 4) & 0x3FFF)
         | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32)
         | ((SWIZZLE_ROW_BYTES == 128 ? 1ull : SWIZZLE_ROW_BYTES == 64 ? 2ull : 0ull) << 62);  // layout type
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
    "%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_REGS_64_127 \
    "%64, %65, %66, %67, %68, %69, %70, %71, " \
    "%72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, " \
    "%104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, " \
    "%120, %121, %122, %123, %124, %125, %126, %127"

// D(64xN, fp32) += A(64x16) * B(16xN), A and B read from shared memory through their descriptors, both
// K-major (imm-trans-a = imm-trans-b = 0), imm-scale-a = imm-scale-b = 1, D kept when scale_d != 0.
// Accumulator fragment, thread t of the warpgroup, warp w = t / 32, lane l = t % 32, j = 0 .. N/8 - 1:
//   d[4j+0] = D(16w + l/4,     8j + 2(l%4))     d[4j+1] = D(16w + l/4,     8j + 2(l%4) + 1)
//   d[4j+2] = D(16w + l/4 + 8, 8j + 2(l%4))     d[4j+3] = D(16w + l/4 + 8, 8j + 2(l%4) + 1)
// So n128's fragment is the first half of n256's: d may be either half of a 128-column accumulator array.
template <int N>
__device__ __forceinline__ void wgmma_m64nNk16(float* d, unsigned long long desc_a, unsigned long long desc_b,
                                               int scale_d) {
    static_assert(N == 128 || N == 256, "the instruction shapes this kernel issues");
    if constexpr (N == 256) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " "
                     "{" WGMMA_REGS_0_63 ", " WGMMA_REGS_64_127 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_D64(0), WGMMA_D64(64)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " "
                     "{" WGMMA_REGS_0_63 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : WGMMA_D64(0)
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    }
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
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ void grouped_tile(int tile_idx, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
#if GROUP_M > 1
    const int group_tiles = GROUP_M * tiles_n;
    const int first_m = (tile_idx / group_tiles) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);  // the last group may be short
    tile_m = first_m + (tile_idx % group_tiles) % group_rows;
    tile_n = (tile_idx % group_tiles) / group_rows;
#else
    tile_m = tile_idx / tiles_n;
    tile_n = tile_idx % tiles_n;
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

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: ceil(M / BLOCK_M) * ceil(N / BLOCK_N) CTAs of NUM_THREADS threads, tiles in
// grouped order. Dynamic shared memory: NUM_STAGES * STAGE_BYTES + 1024 (slack to align to 1024).
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ TmaDesc tma_b,
            elem_t* C, int M, int N, int K, int ldc)
{
    // ---- prologue -----------------------------------------------------------------------------------
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[NUM_STAGES];
    __shared__ __align__(8) unsigned long long empty_bar[NUM_STAGES];

    const int tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    int tile_m, tile_n;
    grouped_tile(blockIdx.x, tiles_m, tiles_n, tile_m, tile_n);
    const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;  // the last one is zero-filled past K by TMA
    const int warpgroup = threadIdx.x / 128;

    // Stage s holds A at smem_base + s * STAGE_BYTES, then B; both 1024-aligned. TMA writes row r of a
    // tile at r * 128 bytes with its eight 16-byte chunks permuted (chunk c lands at c ^ (r % 8)).
    const unsigned smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;

    if (threadIdx.x == 0) {
        for (int s = 0; s < NUM_STAGES; ++s) {
            mbarrier_init(smem_addr(&full_bar[s]), 1);                   // the producer's arrival
            mbarrier_init(smem_addr(&empty_bar[s]), NUM_CONSUMERS * 4);  // one arrival per consumer warp
        }
        fence_mbarrier_init();
    }
    __syncthreads();  // barriers initialised before anyone waits on them; no CTA-wide barrier after this

    if (warpgroup == 0) {
        // ---- producer: one thread keeps up to NUM_STAGES k-tiles in flight ---------------------------
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int stage = 0;
            unsigned phase = 0;
            int stamps = 0;  // the timeline's
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
                // fp16), zero-filled past M, N or K and counted in full either way.
                mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
                tma_load_2d(a_dst, &tma_a, bar, k_tile * BLOCK_K, tile_m * BLOCK_M);
                tma_load_2d(b_dst, &tma_b, bar, k_tile * BLOCK_K, tile_n * BLOCK_N);
#pragma unroll
                for (int box = 1; box < BOXES; ++box) {  // BOX_K 32 or 8: the other boxes of each, in order
                    const int k = k_tile * BLOCK_K + box * BOX_K;
                    tma_load_2d(a_dst + box * BLOCK_M * SWIZZLE_ROW_BYTES, &tma_a, bar, k, tile_m * BLOCK_M);
                    tma_load_2d(b_dst + box * BLOCK_N * SWIZZLE_ROW_BYTES, &tma_b, bar, k, tile_n * BLOCK_N);
                }
                timeline_stamp(true, 0, Stamp::handoff, stage, stamps);
                if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
            }
        }
    } else {
        // ---- consumers: wait for a stage, multiply, release it -------------------------------------
        setmaxnreg_inc<CONSUMER_REGS>();
        const int consumer = warpgroup - 1;
        const bool stamper = threadIdx.x % 128 == 0;  // the timeline's
        int stamps = 0;

        float acc[BLOCK_N / 2];
#pragma unroll
        for (int i = 0; i < BLOCK_N / 2; ++i) acc[i] = 0.0f;

        // ---- main loop over K -----------------------------------------------------------------------
        int stage = 0;
        unsigned phase = 0;  // parity of the full-barrier phase this pass over the stages waits for
        for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
            timeline_stamp(stamper, 1 + consumer, Stamp::wait, stage, stamps);
            mbarrier_wait_parity(smem_addr(&full_bar[stage]), phase);
            timeline_stamp(stamper, 1 + consumer, Stamp::go, stage, stamps);

            // This consumer's 64 rows of A are 64 x 128 bytes (8 swizzle patterns) into the A tile.
            const unsigned a_base = smem_base + stage * STAGE_BYTES + consumer * WG_ROWS * SWIZZLE_ROW_BYTES;
            const unsigned b_base = smem_base + stage * STAGE_BYTES + A_TILE_BYTES;

            wgmma_fence();  // acc was written by ordinary instructions (zeroing) or by the last batch
#pragma unroll
            for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
                // k16 step kk is the 32-byte column kk of every 128-byte row: advance the start address
                // by 32 bytes; the hardware applies the same XOR as TMA, from the address bits. SBO =
                // 1024 bytes (8 rows x 128 B) between 8-row groups; LBO unused for this layout (16 B,
                // field value 1). BOX_K 32: step kk is column kk % 2 of box kk / 2. BOX_K 8: step kk is
                // boxes 2 kk and 2 kk + 1, one box apart (LBO), each row 16 bytes after the last.
                const int box = kk * 16 / BOX_K, column = kk * 16 % BOX_K * (int)sizeof(elem_t);
                const unsigned lbo_a = SWIZZLED ? 16 : BLOCK_M * SWIZZLE_ROW_BYTES;
                const unsigned lbo_b = SWIZZLED ? 16 : BLOCK_N * SWIZZLE_ROW_BYTES;
                const unsigned long long desc_a = make_smem_desc(a_base + box * BLOCK_M * SWIZZLE_ROW_BYTES + column,
                                                                 lbo_a, 8 * SWIZZLE_ROW_BYTES);
                const unsigned long long desc_b = make_smem_desc(b_base + box * BLOCK_N * SWIZZLE_ROW_BYTES + column,
                                                                 lbo_b, 8 * SWIZZLE_ROW_BYTES);
                wgmma_m64nNk16<BLOCK_N>(acc, desc_a, desc_b, 1);
            }
            wgmma_commit_group();
            wgmma_wait_group<0>();  // this warp's share of the batch has read the stage: release it
            if (threadIdx.x % 32 == 0) mbarrier_arrive(smem_addr(&empty_bar[stage]));
            timeline_stamp(stamper, 1 + consumer, Stamp::handoff, stage, stamps);

            if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
        }
        acc_register_fence(acc);
        timeline_stamp(stamper, 1 + consumer, Stamp::epilogue, 0, stamps);

        // ---- epilogue: fp32 accumulators -> elem_t, straight from registers, predicated -------------
        const int warp = (threadIdx.x % 128) / 32;
        const int lane = threadIdx.x % 32;
        const int row0 = tile_m * BLOCK_M + consumer * WG_ROWS + warp * 16 + lane / 4;
        const int col0 = tile_n * BLOCK_N + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 8 * h;
                const int col = col0 + 8 * j;
                const float v0 = acc[4 * j + 2 * h];
                const float v1 = acc[4 * j + 2 * h + 1];
                if (row >= M || col >= N) continue;
                elem_t* dst = C + (long long)row * ldc + col;
                if (col + 1 < N && (reinterpret_cast<unsigned long long>(dst) % sizeof(elem2_t)) == 0) {
                    *reinterpret_cast<elem2_t*>(dst) = to_elem2(v0, v1);
                } else {
                    dst[0] = to_elem(v0);
                    if (col + 1 < N) dst[1] = to_elem(v1);
                }
            }
        }
    }
}
