// v3_wgmma_tma: Hopper's own path. Over v2 (mma.sync fed by ldmatrix and cp.async), this stage
//   - multiplies with wgmma.mma_async: one warpgroup (4 warps) issues a 64x128x16 product whose A and B
//     operands the tensor cores read straight from shared memory; no ldmatrix, no operand registers;
//   - loads A and B with TMA (cp.async.bulk.tensor): one thread hands the copy engine a tensor map and a
//     tile coordinate, and the bytes, zero-filled past the matrix edges, complete on an mbarrier.
// A 128x128 C tile per CTA, two consumer warpgroups of 64x128 each, two shared-memory stages.
// The tiles land with TMA's 64-byte swizzle, the layout wgmma reads without bank conflicts: two 64-byte
// wide boxes per operand per k-tile. (Unswizzled, wgmma needs 16-byte wide boxes, eight per operand, and
// the copy engine moves such narrow rows several times slower: the tensor cores then mostly wait.)
// What still limits it: the pipeline is lock-step. Every k-tile ends with wgmma_wait_group<0> and a
// __syncthreads before thread 0 may refill the stage, and only one k-tile of loads is in flight.
// v4 adds a producer warpgroup, 4 stages and 128-byte boxes.
// Needs sm_90a (wgmma): nvcc -cubin -gencode=arch=compute_90a,code=sm_90a kernel.cu

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
#define BLOCK_N 128    // the N of wgmma m64n128k16: 64 fp32 accumulators per thread
#endif
#ifndef BLOCK_K
#define BLOCK_K 64     // 4 wgmma k16 steps per barrier wait; 16 KB of A + 16 KB of B per stage (fp16)
#endif
#ifndef BOX_K
#define BOX_K 32       // 64 bytes: one row of the 64-byte swizzle; two boxes per operand per k-tile
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 2   // double buffer: TMA fills one stage while the tensor cores read the other
#endif

constexpr int NUM_THREADS = 256;  // 2 warpgroups, both consumers; thread 0 also issues the TMA loads
constexpr int WG_ROWS = 64;       // rows of C per warpgroup: the M of every wgmma
constexpr int A_TILE_BYTES = BLOCK_M * BLOCK_K * (int)sizeof(elem_t);
constexpr int B_TILE_BYTES = BLOCK_N * BLOCK_K * (int)sizeof(elem_t);
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;  // what one stage's full barrier expects
constexpr int SWIZZLE_ROW_BYTES = 64;                     // one box row = one 64-byte swizzle row
constexpr int K_STEPS_PER_BOX = BOX_K / 16;               // wgmma k16 steps inside one box row

// Launch facts the launcher reads back from the compiled module (dynamic smem: + 1024 of alignment slack).
extern "C" __device__ const int LAUNCH_THREADS = NUM_THREADS;
extern "C" __device__ const int LAUNCH_SMEM_BYTES = NUM_STAGES * STAGE_BYTES + 1024;

static_assert(BLOCK_M == 2 * WG_ROWS, "two consumer warpgroups of 64 rows");
static_assert(BLOCK_N == 128, "the wgmma below is m64n128k16");
static_assert(BOX_K * (int)sizeof(elem_t) == SWIZZLE_ROW_BYTES, "a box row is one 64-byte swizzle row");
static_assert(BLOCK_K % 16 == 0 && BLOCK_K % BOX_K == 0, "whole k16 steps, whole boxes");
static_assert(NUM_STAGES >= 1, "at least one stage of shared memory");

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
//   bits 49-51  base offset (0: every box starts 512-aligned, where the 8-row swizzle pattern starts)
//   bits 62-63  layout type: 2 = 64-byte swizzle
// For a K-major swizzled operand whose k16 slice (32 bytes) lies inside one 64-byte row, LBO is not
// used; SBO is the distance between 8-row groups of core matrices along M (or N).
__device__ __forceinline__ unsigned long long make_smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return  (unsigned long long)((addr >> 4) & 0x3FFF)
         | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32)
         | (2ull << 62);
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

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: ceil(M / BLOCK_M) * ceil(N / BLOCK_N) CTAs of NUM_THREADS threads, tiles in
// row-major order. Dynamic shared memory: NUM_STAGES * STAGE_BYTES + 1024 (slack to align to 1024).
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ TmaDesc tma_b,
            elem_t* C, int M, int N, int K, int ldc)
{
    // ---- prologue -----------------------------------------------------------------------------------
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long full_bar[NUM_STAGES];

    const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    const int tile_m = blockIdx.x / tiles_n;
    const int tile_n = blockIdx.x % tiles_n;
    const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;  // the last one is zero-filled past K by TMA
    const int warpgroup = threadIdx.x / 128;

    // Stage s holds A at smem_base + s * STAGE_BYTES, then B. Within each operand, box j (K elements
    // 32j..32j+31) is rows x 64 bytes, row r at r * 64 with its four 16-byte chunks permuted by TMA's
    // 64-byte swizzle (chunk c lands at c ^ ((r / 2) % 4)).
    const unsigned smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;

    // The stage's bytes: BLOCK_K / BOX_K boxes of A (BLOCK_M x 64 bytes each) and as many of B. TMA
    // counts the full box, zero-filled elements included, so the expected byte count never changes.
    auto load_stage = [&](int k_tile, int stage) {
        const unsigned bar = smem_addr(&full_bar[stage]);
        const unsigned a_dst = smem_base + stage * STAGE_BYTES;
        const unsigned b_dst = a_dst + A_TILE_BYTES;
        mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
#pragma unroll
        for (int j = 0; j < BLOCK_K / BOX_K; ++j) {
            const int k = k_tile * BLOCK_K + j * BOX_K;
            tma_load_2d(a_dst + j * BLOCK_M * SWIZZLE_ROW_BYTES, &tma_a, bar, k, tile_m * BLOCK_M);
            tma_load_2d(b_dst + j * BLOCK_N * SWIZZLE_ROW_BYTES, &tma_b, bar, k, tile_n * BLOCK_N);
        }
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < NUM_STAGES; ++s) mbarrier_init(smem_addr(&full_bar[s]), 1);  // thread 0's arrival
        fence_mbarrier_init();
        for (int k_tile = 0; k_tile < NUM_STAGES && k_tile < k_tiles; ++k_tile) load_stage(k_tile, k_tile);
    }
    __syncthreads();  // barriers initialised before anyone waits on them

    float acc[BLOCK_N / 2];
#pragma unroll
    for (int i = 0; i < BLOCK_N / 2; ++i) acc[i] = 0.0f;

    // ---- main loop over K ---------------------------------------------------------------------------
    int stage = 0;
    unsigned phase = 0;  // parity of the full-barrier phase this pass over the stages waits for
    for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
        mbarrier_wait_parity(smem_addr(&full_bar[stage]), phase);

        // This warpgroup's 64 rows of A are 64 x 64 bytes (8 swizzle patterns) into every box.
        const unsigned a_base = smem_base + stage * STAGE_BYTES + warpgroup * WG_ROWS * SWIZZLE_ROW_BYTES;
        const unsigned b_base = smem_base + stage * STAGE_BYTES + A_TILE_BYTES;

        wgmma_fence();  // acc was written by ordinary instructions (zeroing) or by the last batch
#pragma unroll
        for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
            // k16 step kk is the 32-byte column kk % 2 of box kk / 2: advance the start address to the
            // box, then by 32 bytes; the hardware applies the same XOR as TMA, from the address bits.
            // SBO = 512 bytes (8 rows x 64 B) between 8-row groups; LBO unused (16 B, field value 1).
            const int box = kk / K_STEPS_PER_BOX, column = (kk % K_STEPS_PER_BOX) * 32;
            const unsigned long long desc_a = make_smem_desc(a_base + box * BLOCK_M * SWIZZLE_ROW_BYTES + column,
                                                             16, 8 * SWIZZLE_ROW_BYTES);
            const unsigned long long desc_b = make_smem_desc(b_base + box * BLOCK_N * SWIZZLE_ROW_BYTES + column,
                                                             16, 8 * SWIZZLE_ROW_BYTES);
            wgmma_m64nNk16<BLOCK_N>(acc, desc_a, desc_b, 1);
        }
        wgmma_commit_group();
        wgmma_wait_group<0>();  // this warpgroup's reads of the stage are done ...
        __syncthreads();        // ... and so are the other warpgroup's: the stage may be refilled

        if (threadIdx.x == 0 && k_tile + NUM_STAGES < k_tiles) load_stage(k_tile + NUM_STAGES, stage);

        if (++stage == NUM_STAGES) { stage = 0; phase ^= 1; }
    }
    acc_register_fence(acc);

    // ---- epilogue: fp32 accumulators -> elem_t, straight from registers, predicated -----------------
    const int warp = (threadIdx.x % 128) / 32;
    const int lane = threadIdx.x % 32;
    const int row0 = tile_m * BLOCK_M + warpgroup * WG_ROWS + warp * 16 + lane / 4;
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
