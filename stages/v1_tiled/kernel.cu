// v1_tiled: cache blocking on CUDA cores. Over v0 (one thread per element of C, every operand read
// from L1/L2 for every multiply-add), this stage
//   - stages a BLOCK_M x BLOCK_K tile of A and a BLOCK_N x BLOCK_K tile of B in shared memory, converted
//     to fp32 and stored transposed (k-major), so each element fetched from global memory is used
//     BLOCK_N (or BLOCK_M) times;
//   - gives each thread a THREAD_M x THREAD_N block of C in registers: per k it reads THREAD_M + THREAD_N
//     operands from shared memory (float4 vectors) and does THREAD_M * THREAD_N FFMAs;
//   - loads global memory 16 bytes (8 elements of K) at a time, and fetches the next tile into registers
//     while the current one is multiplied.
// B is read K-major (the N x K matrix b.T, row stride ldb); K, lda and ldb are multiples of 8.
// What still limits it: the FP32 FFMA pipe. Tensor cores are idle; the fp16 -> fp32 conversion and the
// scalar transposed stores cost issue slots too. The measured number is in README.md. v2 moves the
// multiply onto the tensor cores.
// Runs on sm_80 and newer: nvcc -cubin -gencode=arch=compute_90a,code=sm_90a kernel.cu

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif

#if DTYPE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ float2 to_float2(unsigned w) { return __bfloat1622float2(*reinterpret_cast<elem2_t*>(&w)); }
__device__ __forceinline__ elem_t to_elem(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ float2 to_float2(unsigned w) { return __half22float2(*reinterpret_cast<elem2_t*>(&w)); }
__device__ __forceinline__ elem_t to_elem(float x) { return __float2half_rn(x); }
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

#ifndef BLOCK_M
#define BLOCK_M 128    // 16 threads x 8 rows; A tile reused by all BLOCK_N columns of the block
#endif
#ifndef BLOCK_N
#define BLOCK_N 128    // 16 threads x 8 columns; 128x128 halves global traffic per flop vs 64x64
#endif
#ifndef BLOCK_K
#define BLOCK_K 32     // four 16-byte chunks of K per row, 2048 FFMAs a thread per k-tile; the fp32
                       // A + B tiles take (128 + 128) x 32 x 4 B = 32 KB: one buffer (two would pass the
                       // 48 KB static limit), two blocks an SM. With 16 the tiles are double-buffered.
#endif
#ifndef THREAD_M
#define THREAD_M 8     // rows of C per thread: 8 + 8 operand loads buy 64 FFMAs per k
#endif
#ifndef THREAD_N
#define THREAD_N 8     // columns of C per thread; 64 fp32 accumulators fit the 128 registers a thread
#endif                 // may have with two 256-thread blocks on an SM (65536 registers)
#ifndef SMEM_SWIZZLE
#define SMEM_SWIZZLE 1 // 0 stores the tiles unswizzled: the ablation that shows the bank conflicts it removes
#endif

constexpr int THREADS_M = BLOCK_M / THREAD_M;           // 16
constexpr int THREADS_N = BLOCK_N / THREAD_N;           // 16
constexpr int NUM_THREADS = THREADS_M * THREADS_N;      // 256
constexpr int CHUNKS = BLOCK_K / 8;                     // 16-byte chunks (8 elements of K) per tile row
constexpr int ROW_STEP = NUM_THREADS / CHUNKS;          // rows one pass of all threads' loads covers
// Two buffers when they fit in 48 KB of static shared memory (BLOCK_K = 16); otherwise one, refilled
// behind an extra barrier (BLOCK_K = 32): the next tile still waits in registers meanwhile.
constexpr int SMEM_STAGES = 2 * (BLOCK_M + BLOCK_N) * BLOCK_K * 4 <= 48 * 1024 ? 2 : 1;
// The transposed store swizzle: the column (m or n) of an element from chunk c is XORed with
// c * SWIZZLE. One warp stores 32 / CHUNKS consecutive rows times all CHUNKS chunks; XORing chunk c by
// c * (32 / CHUNKS) spreads them over all 32 banks (see store_tile). A multiple of 4, so that the
// float4 groups the inner loop reads stay contiguous and 16-byte aligned.
constexpr int SWIZZLE = SMEM_SWIZZLE ? 32 / CHUNKS : 0;

static_assert(BLOCK_K % 8 == 0 && CHUNKS <= 8, "whole 16-byte chunks, at most 8 per row (SWIZZLE >= 4)");
static_assert(THREAD_M % 4 == 0 && THREAD_N % 4 == 0, "operands are read as float4 vectors");
static_assert(BLOCK_M % 32 == 0 && BLOCK_N % 32 == 0, "a swizzled column stays inside its 32-wide bank row");
static_assert(BLOCK_M % ROW_STEP == 0 && BLOCK_N % ROW_STEP == 0, "every thread loads the same number of chunks");
static_assert(NUM_THREADS % 32 == 0 && NUM_THREADS <= 1024, "whole warps, one block");
static_assert(SMEM_STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 4 <= 48 * 1024, "static shared memory <= 48 KB");

// ---------------------------------------------------------------------------------------------------
// Tile movers.
// ---------------------------------------------------------------------------------------------------

// Global -> registers, one k-tile of ROWS rows, 16 bytes a load (LDG.128). Chunk q of the tile
// (q = thread + i * NUM_THREADS) is row q / CHUNKS, chunk q % CHUNKS: the CHUNKS threads of a row read
// its BLOCK_K * 2 contiguous bytes. A thread's chunk is the same for every i and its rows are ROW_STEP
// apart: one source pointer plus a constant stride. Rows past the matrix (rows_left) and chunks past K
// are zero (K % 8 == 0: a chunk is all in or all out), so the FFMAs on them add nothing.
template <int ROWS>
__device__ __forceinline__ void load_tile(uint4 (&reg)[ROWS / ROW_STEP], const elem_t* src,
                                          int ld, int rows_left, int k0, int K)
{
    const int row = threadIdx.x / CHUNKS;
    const int chunk = threadIdx.x % CHUNKS;
    const int k = k0 + chunk * 8;
    const elem_t* p = src + (long long)row * ld + k;
#pragma unroll
    for (int i = 0; i < ROWS / ROW_STEP; ++i) {
        const bool valid = row + i * ROW_STEP < rows_left && k < K;
        reg[i] = make_uint4(0u, 0u, 0u, 0u);
        if (valid) reg[i] = *reinterpret_cast<const uint4*>(p + (long long)i * ROW_STEP * ld);
    }
}

// Registers -> shared memory, converted to fp32 and transposed: element 8c + e of row r's chunk c lands
// in dst[8c + e][r ^ (c * SWIZZLE)]. The lanes of one warp hold rows r0..r0 + SWIZZLE - 1 (r0 a
// multiple of SWIZZLE) times all CHUNKS chunks, and every dst row is a multiple of 32 floats long, so a
// store's bank is its column mod 32. Unswizzled, the CHUNKS lanes of a row share a bank: a CHUNKS-way
// conflict. Swizzled, chunk c of the warp's rows sits in banks ((r0 % 32) ^ (c * SWIZZLE)) + 0 ..
// SWIZZLE - 1, a different group of SWIZZLE banks for every c: all 32 banks, one wavefront.
template <int ROWS>
__device__ __forceinline__ void store_tile(float (*dst)[ROWS], const uint4 (&reg)[ROWS / ROW_STEP])
{
    const int row = threadIdx.x / CHUNKS;
    const int chunk = threadIdx.x % CHUNKS;
#pragma unroll
    for (int i = 0; i < ROWS / ROW_STEP; ++i) {
        const int col = (row + i * ROW_STEP) ^ (chunk * SWIZZLE);
        const unsigned w[4] = {reg[i].x, reg[i].y, reg[i].z, reg[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = to_float2(w[j]);
            dst[chunk * 8 + 2 * j][col] = f.x;
            dst[chunk * 8 + 2 * j + 1][col] = f.y;
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: (ceil(N / BLOCK_N), ceil(M / BLOCK_M)) blocks of NUM_THREADS threads, 1-D.
// Static shared memory: SMEM_STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K floats.
// Thread t owns rows  4 * (t / THREADS_N) + 4 * THREADS_M * g + {0..3}, g < THREAD_M / 4, and
//              columns 4 * (t % THREADS_N) + 4 * THREADS_N * g + {0..3}, g < THREAD_N / 4, of the tile:
// groups of 4 spaced 64 apart rather than 8 contiguous, so that the 16 threads of a half-warp that share
// a k read 16 consecutive float4 of B (256 bytes, 2 wavefronts) and the 2 rows of threads in a warp
// read 2 float4 of A (broadcast).
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 2)  // two blocks an SM: <= 128 registers
gemm_kernel(const elem_t* __restrict__ A, const elem_t* __restrict__ B, elem_t* __restrict__ C,
            int M, int N, int K, int lda, int ldb, int ldc)
{
    // ---- prologue -----------------------------------------------------------------------------------
    __shared__ __align__(16) float As[SMEM_STAGES][BLOCK_K][BLOCK_M];
    __shared__ __align__(16) float Bs[SMEM_STAGES][BLOCK_K][BLOCK_N];

    const int tile_n = blockIdx.x;
    const int tile_m = blockIdx.y;
    const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;  // the last one is zero-filled past K
    const int tx = threadIdx.x % THREADS_N;
    const int ty = threadIdx.x / THREADS_N;

    const elem_t* a_tile = A + (long long)tile_m * BLOCK_M * lda;
    const elem_t* b_tile = B + (long long)tile_n * BLOCK_N * ldb;
    const int a_rows = M - tile_m * BLOCK_M;
    const int b_rows = N - tile_n * BLOCK_N;

    uint4 a_reg[BLOCK_M / ROW_STEP];  // the next k-tile, in flight while this one is multiplied
    uint4 b_reg[BLOCK_N / ROW_STEP];

    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) acc[i][j] = 0.0f;

    if (k_tiles > 0) {
        load_tile<BLOCK_M>(a_reg, a_tile, lda, a_rows, 0, K);
        load_tile<BLOCK_N>(b_reg, b_tile, ldb, b_rows, 0, K);
        store_tile<BLOCK_M>(As[0], a_reg);
        store_tile<BLOCK_N>(Bs[0], b_reg);
    }
    __syncthreads();

    // ---- main loop over K ---------------------------------------------------------------------------
    for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
        const int stage = k_tile % SMEM_STAGES;
        const bool has_next = k_tile + 1 < k_tiles;

        // Issue the next tile's global loads first: their latency hides behind the FFMAs below.
        if (has_next) {
            load_tile<BLOCK_M>(a_reg, a_tile, lda, a_rows, (k_tile + 1) * BLOCK_K, K);
            load_tile<BLOCK_N>(b_reg, b_tile, ldb, b_rows, (k_tile + 1) * BLOCK_K, K);
        }

#pragma unroll
        for (int k = 0; k < BLOCK_K; ++k) {
            const int swz = (k / 8) * SWIZZLE;  // the XOR store_tile applied to this k's chunk
            float a[THREAD_M];
            float b[THREAD_N];
#pragma unroll
            for (int g = 0; g < THREAD_M / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&As[stage][k][(g * THREADS_M * 4 + ty * 4) ^ swz]);
                a[4 * g + 0] = v.x; a[4 * g + 1] = v.y; a[4 * g + 2] = v.z; a[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int g = 0; g < THREAD_N / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[stage][k][(g * THREADS_N * 4 + tx * 4) ^ swz]);
                b[4 * g + 0] = v.x; b[4 * g + 1] = v.y; b[4 * g + 2] = v.z; b[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        if (has_next) {
            if (SMEM_STAGES == 1) __syncthreads();  // one buffer: everyone has read it before it is refilled
            store_tile<BLOCK_M>(As[(k_tile + 1) % SMEM_STAGES], a_reg);
            store_tile<BLOCK_N>(Bs[(k_tile + 1) % SMEM_STAGES], b_reg);
        }
        // The next tile is visible to all, and (two buffers) this one may be refilled next iteration.
        __syncthreads();
    }

    // ---- epilogue: fp32 accumulators -> elem_t, straight from registers, predicated -----------------
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        const int row = tile_m * BLOCK_M + (i / 4) * THREADS_M * 4 + ty * 4 + i % 4;
#pragma unroll
        for (int j = 0; j < THREAD_N; j += 2) {
            const int col = tile_n * BLOCK_N + (j / 4) * THREADS_N * 4 + tx * 4 + j % 4;
            const float v0 = acc[i][j];
            const float v1 = acc[i][j + 1];
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
