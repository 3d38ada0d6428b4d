// v2_mma_sync: the multiply moves to the tensor cores. Over v1 (fp32 FFMA on CUDA cores, tiles staged
// through registers and converted to fp32), this stage
//   - multiplies with mma.sync.m16n8k16 (one warp: a 16x16 by 16x8 product, fp32 accumulators), each warp
//     owning a WARP_TILE_M x WARP_TILE_N block of C;
//   - keeps A and B in shared memory as elem_t and loads the operand fragments with ldmatrix.x4, four
//     8x8 matrices a warp instruction;
//   - copies global -> shared with cp.async (16 bytes a thread, no registers, zero-fill past the edges),
//     NUM_STAGES - 1 k-tiles in flight while the tensor cores work on the current one;
//   - XOR-swizzles the 16-byte chunks of every shared-memory row so that both the cp.async stores and the
//     ldmatrix reads are free of bank conflicts, and loads the next k-step's fragments while the current
//     k-step's mma run.
// B is read K-major (the N x K matrix b.T, row stride ldb); K, lda and ldb are multiples of 8 and the
// base pointers 16-byte aligned.
// What still limits it: mma.sync is Ampere's instruction. Every operand passes through registers
// (ldmatrix), a warp's mma are m16n8k16 small, and the issue slots, register file and shared-memory
// bandwidth they need cap it well below Hopper's dense peak. The measured number is in README.md. v3
// replaces it with wgmma, which reads its operands straight from shared memory, fed by TMA.
// Runs on sm_80 and newer: nvcc -cubin -gencode=arch=compute_90a,code=sm_90a kernel.cu

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif

#if DTYPE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
#define MMA_AB_TYPE "bf16"
__device__ __forceinline__ elem_t to_elem(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
#define MMA_AB_TYPE "f16"
__device__ __forceinline__ elem_t to_elem(float x) { return __float2half_rn(x); }
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

#ifndef BLOCK_M
#define BLOCK_M 128    // WARPS_M warps x 64 rows
#endif
#ifndef BLOCK_N
#define BLOCK_N 256    // WARPS_N warps x 64 columns; 128x256 loads (128 + 256) x 2 bytes per k for
                       // 65536 flops, a quarter less global and shared traffic per flop than 128x128
#endif
#ifndef BLOCK_K
#define BLOCK_K 32     // 64-byte shared-memory rows, two to a 128-byte pass over the 32 banks; 2 k16
                       // steps per barrier; 24 KB a stage (64 gives 128-byte rows and 48 KB stages)
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 4   // 3 k-tiles in flight while the 4th is multiplied, to cover global latency with
                       // one block an SM; 4 x 24 KB = 96 KB, under A100's 163 KB as well as Hopper's 227
#endif
#ifndef WARPS_M
#define WARPS_M 2      // warps along M
#endif
#ifndef WARPS_N
#define WARPS_N 4      // warps along N: 8 warps, 2 per SM sub-partition; a 64x64 warp tile is 32 mma per
                       // k16 step from 8 ldmatrix.x4, and 128 fp32 accumulators a thread
#endif
#ifndef SMEM_SWIZZLE
#define SMEM_SWIZZLE 1 // 0 stores the chunks unswizzled: the ablation that shows the bank conflicts it removes
#endif

constexpr int NUM_THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WARP_TILE_M = BLOCK_M / WARPS_M;
constexpr int WARP_TILE_N = BLOCK_N / WARPS_N;
constexpr int MMA_TILES_M = WARP_TILE_M / 16;           // m16 tiles per warp
constexpr int MMA_TILES_N = WARP_TILE_N / 8;            // n8 tiles per warp
constexpr int K_STEPS = BLOCK_K / 16;                   // k16 steps per k-tile
constexpr int CHUNKS = BLOCK_K / 8;                     // 16-byte chunks per shared-memory row
constexpr int ROW_BYTES = BLOCK_K * (int)sizeof(elem_t);
constexpr int ROWS_PER_BANK_SWEEP = 128 / ROW_BYTES;    // rows sharing one 128-byte pass over the banks
constexpr int A_STAGE_BYTES = BLOCK_M * ROW_BYTES;
constexpr int B_STAGE_BYTES = BLOCK_N * ROW_BYTES;
constexpr int ROW_STEP = NUM_THREADS / CHUNKS;          // rows one pass of all threads' cp.async covers

static_assert(BLOCK_K == 32 || BLOCK_K == 64, "4 or 8 chunks a row: the swizzle below needs 64- or 128-byte rows");
static_assert(K_STEPS % 2 == 0, "fragments are double-buffered by k-step parity across k-tiles");
static_assert(BLOCK_M % (16 * WARPS_M) == 0, "each warp owns whole m16 tiles");
static_assert(BLOCK_N % (16 * WARPS_N) == 0, "each warp owns whole pairs of n8 tiles (one ldmatrix.x4)");
static_assert(BLOCK_M % ROW_STEP == 0 && BLOCK_N % ROW_STEP == 0, "every thread issues the same number of cp.async");
static_assert(ROW_STEP % 8 == 0, "a thread's rows share one swizzle term");
static_assert(NUM_STAGES >= 2, "at least double buffering");
static_assert(NUM_THREADS <= 1024, "one block");

// ---------------------------------------------------------------------------------------------------
// Shared-memory layout. Stage s of A is BLOCK_M rows of ROW_BYTES (k contiguous), at
// smem + s * A_STAGE_BYTES; the B stages follow all A stages, BLOCK_N rows each.
// Banks are 4 bytes wide, 32 of them: a 128-byte pass holds 8 chunk slots of 16 bytes, each slot one
// quadruple of banks (slot j: banks 4j..4j+3). Row r, chunk c sits in slot (r % ROWS_PER_BANK_SWEEP) *
// CHUNKS + position, where the stored position is c ^ ((r / ROWS_PER_BANK_SWEEP) % CHUNKS):
//   BLOCK_K = 32 (64-byte rows, 2 a pass): slot 4 (r % 2) + (c ^ ((r / 2) % 4));
//   BLOCK_K = 64 (128-byte rows, 1 a pass): slot c ^ (r % 8), the classic form.
// ldmatrix: each 8-lane phase reads one 8x8 matrix, the same logical chunk c of 8 consecutive rows
//   r0..r0+7 (r0 a multiple of 8). Unswizzled, those 8 rows use only 2 slots (64-byte rows) or 1 slot
//   (128-byte rows): a 4- or 8-way conflict. Swizzled, row r0 + i uses slot 4 (i % 2) + (c ^ (i / 2)),
//   resp. c ^ i: 8 distinct slots, all 32 banks, one wavefront.
// cp.async: a warp writes 32 consecutive chunks, 512 contiguous bytes of whole rows; the XOR only
//   permutes chunks within a row, so each 128-byte pass still touches every bank once.
// ---------------------------------------------------------------------------------------------------

// SMEM_SWIZZLE 0 multiplies the XOR term by 0: every chunk stays where it is.
__device__ __forceinline__ unsigned swizzle(int row, int chunk) {
    return row * ROW_BYTES + ((chunk ^ (SMEM_SWIZZLE * ((row / ROWS_PER_BANK_SWEEP) % CHUNKS))) << 4);
}

// ---------------------------------------------------------------------------------------------------
// PTX helpers. Shared-memory operands are 32-bit shared-window addresses.
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous, L1 bypassed (.cg). With src-size 0 nothing is read and the
// 16 bytes are zero-filled: how rows past M or N and chunks past K become zeros.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// Closes this thread's cp.async issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's groups are still in flight. Other threads' copies become
// visible only after a __syncthreads that follows.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// Four 8x8 b16 matrices. Lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i (16 bytes each);
// r[i] of lane l receives matrix i, row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (low half first).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// D(16x8, fp32) += A(16x16, row) * B(16x8, col). With g = lane / 4, t = lane % 4 (PTX ISA, "matrix
// fragments for mma.m16n8k16"), each register holding two elements, low half first:
//   a[0] = A(g,     2t..2t+1)   a[1] = A(g + 8, 2t..2t+1)   a[2] = A(g, 2t+8..2t+9)   a[3] = A(g + 8, 2t+8..2t+9)
//   b[0] = B(2t..2t+1, g)       b[1] = B(2t+8..2t+9, g)
//   d[0], d[1] = D(g, 2t), D(g, 2t+1)                         d[2], d[3] = D(g + 8, 2t), D(g + 8, 2t+1)
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." MMA_AB_TYPE "." MMA_AB_TYPE ".f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---------------------------------------------------------------------------------------------------
// Tile and fragment movers.
// ---------------------------------------------------------------------------------------------------

// Global -> shared, one k-tile of ROWS rows. Chunk q of the tile (q = thread + i * NUM_THREADS) is
// row q / CHUNKS, chunk q % CHUNKS: the CHUNKS threads of a row read its BLOCK_K * 2 contiguous bytes.
// A thread's chunk is the same for every i and its rows are ROW_STEP apart, a multiple of 8, so the
// swizzle term is the same too: one source pointer and one destination address, plus constant strides.
// Rows past the matrix (rows_left) and chunks past K are zero-filled (K % 8 == 0: a chunk is all in or
// all out), so the mma on them add nothing.
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned dst, const elem_t* src, int ld, int rows_left, int k0, int K)
{
    const int row = threadIdx.x / CHUNKS;
    const int chunk = threadIdx.x % CHUNKS;
    const int k = k0 + chunk * 8;
    const elem_t* p = src + (long long)row * ld + k;
    dst += swizzle(row, chunk);
#pragma unroll
    for (int i = 0; i < ROWS / ROW_STEP; ++i) {
        const bool valid = row + i * ROW_STEP < rows_left && k < K;
        cp_async_16(dst + i * ROW_STEP * ROW_BYTES, valid ? p + (long long)i * ROW_STEP * ld : src, valid);
    }
}

// Shared -> registers, the fragments of one k16 step. a_base / b_base: this lane's ldmatrix row in
// the warp's first 16-row block of the stage; a_chunk / b_chunk: the swizzled position of the lane's 16
// bytes of K (see the kernel). Each x4 covers a 16 (rows) x 16 (k) block, matrices in register order:
//   A (rows = m), lanes 0-7 rows 0-7 / k 0-7, lanes 8-15 rows 8-15 / k 0-7, lanes 16-23 rows 0-7 /
//     k 8-15, lanes 24-31 rows 8-15 / k 8-15: exactly a[0..3] of mma_m16n8k16.
//   B (rows = n, K-major, so no .trans; row l / 4 of a matrix is column g of B), lanes 0-7 rows 0-7 /
//     k 0-7, lanes 8-15 rows 0-7 / k 8-15, lanes 16-23 rows 8-15 / k 0-7, lanes 24-31 rows 8-15 / k 8-15:
//     b[0], b[1] of n-tile 2p, then b[0], b[1] of n-tile 2p + 1. Each n-tile's pair lands in two
//     consecutive registers, the aligned pair HMMA takes, so no moves are needed.
__device__ __forceinline__ void load_fragments(unsigned (&a)[MMA_TILES_M][4], unsigned (&b)[MMA_TILES_N][2],
                                               unsigned a_base, unsigned b_base, int a_chunk, int b_chunk)
{
#pragma unroll
    for (int mi = 0; mi < MMA_TILES_M; ++mi) ldmatrix_x4(a[mi], a_base + mi * 16 * ROW_BYTES + (a_chunk << 4));
#pragma unroll
    for (int p = 0; p < MMA_TILES_N / 2; ++p) {
        unsigned r[4];
        ldmatrix_x4(r, b_base + p * 16 * ROW_BYTES + (b_chunk << 4));
        b[2 * p][0] = r[0];
        b[2 * p][1] = r[1];
        b[2 * p + 1][0] = r[2];
        b[2 * p + 1][1] = r[3];
    }
}

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: (ceil(N / BLOCK_N), ceil(M / BLOCK_M)) blocks of NUM_THREADS threads, 1-D.
// Dynamic shared memory: NUM_STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * sizeof(elem_t) bytes.
// Warp w owns rows (w / WARPS_N) * WARP_TILE_M and columns (w % WARPS_N) * WARP_TILE_N of the tile.
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const elem_t* __restrict__ A, const elem_t* __restrict__ B, elem_t* __restrict__ C,
            int M, int N, int K, int lda, int ldb, int ldc)
{
    // ---- prologue -----------------------------------------------------------------------------------
    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tile_n = blockIdx.x;
    const int tile_m = blockIdx.y;
    const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;  // the last one is zero-filled past K
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int warp_m = warp / WARPS_N;
    const int warp_n = warp % WARPS_N;

    const unsigned smem_a = smem_addr(smem_raw);
    const unsigned smem_b = smem_a + NUM_STAGES * A_STAGE_BYTES;

    const elem_t* a_tile = A + (long long)tile_m * BLOCK_M * lda;
    const elem_t* b_tile = B + (long long)tile_n * BLOCK_N * ldb;
    const int a_rows = M - tile_m * BLOCK_M;
    const int b_rows = N - tile_n * BLOCK_N;

    // ldmatrix addressing (see load_fragments). For k16 step ks, lane l supplies
    //   A: row l % 16 of each 16-row block, logical chunk 2 * ks + l / 16;
    //   B: row l % 8 + 8 * (l / 16) of each 16-row block, logical chunk 2 * ks + (l / 8) % 2.
    // Every block starts at a multiple of 16 rows, so in both cases the row's swizzle term
    // (row / ROWS_PER_BANK_SWEEP) % CHUNKS is ((l % 8) / ROWS_PER_BANK_SWEEP) % CHUNKS; and since 2 * ks
    // is even, (2 * ks + h) ^ x == (2 * ks) ^ h ^ x for h = 0, 1: one per-lane term, XORed with 2 * ks.
    const int frag_swizzle = SMEM_SWIZZLE * (((lane % 8) / ROWS_PER_BANK_SWEEP) % CHUNKS);
    const unsigned a_frag = (warp_m * WARP_TILE_M + lane % 16) * ROW_BYTES;
    const unsigned b_frag = (warp_n * WARP_TILE_N + lane % 8 + 8 * (lane / 16)) * ROW_BYTES;
    const int a_chunk = (lane / 16) ^ frag_swizzle;
    const int b_chunk = ((lane / 8) % 2) ^ frag_swizzle;

    float acc[MMA_TILES_M][MMA_TILES_N][4];
#pragma unroll
    for (int mi = 0; mi < MMA_TILES_M; ++mi)
#pragma unroll
        for (int ni = 0; ni < MMA_TILES_N; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

    // Fragments of two k16 steps: the mma of step ks read buffer ks % 2 while step ks + 1 loads into
    // the other.
    unsigned frag_a[2][MMA_TILES_M][4];
    unsigned frag_b[2][MMA_TILES_N][2];

    // Fill NUM_STAGES - 1 stages. Every thread commits exactly one group per k-tile slot, empty or
    // not, so "group j holds k-tile j" and the wait counts below stay exact.
#pragma unroll
    for (int s = 0; s < NUM_STAGES - 1; ++s) {
        if (s < k_tiles) {
            load_tile<BLOCK_M>(smem_a + s * A_STAGE_BYTES, a_tile, lda, a_rows, s * BLOCK_K, K);
            load_tile<BLOCK_N>(smem_b + s * B_STAGE_BYTES, b_tile, ldb, b_rows, s * BLOCK_K, K);
        }
        cp_async_commit();
    }
    cp_async_wait<NUM_STAGES - 2>();  // k-tile 0 has landed (this thread's part) ...
    __syncthreads();                  // ... and everyone's
    load_fragments(frag_a[0], frag_b[0], smem_a + a_frag, smem_b + b_frag, a_chunk, b_chunk);

    // ---- main loop over K ---------------------------------------------------------------------------
    for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
        const int stage = k_tile % NUM_STAGES;
        const int next_stage = (k_tile + 1) % NUM_STAGES;

#pragma unroll
        for (int ks = 0; ks < K_STEPS; ++ks) {
            if (ks == 0) {
                // Refill the stage k-tile - 1 used. Its last ldmatrix ran before the __syncthreads of
                // the previous iteration (issued at its step K_STEPS - 2), which every thread has passed.
                const int fill = k_tile + NUM_STAGES - 1;
                if (fill < k_tiles) {
                    const int fill_stage = fill % NUM_STAGES;
                    load_tile<BLOCK_M>(smem_a + fill_stage * A_STAGE_BYTES, a_tile, lda, a_rows, fill * BLOCK_K, K);
                    load_tile<BLOCK_N>(smem_b + fill_stage * B_STAGE_BYTES, b_tile, ldb, b_rows, fill * BLOCK_K, K);
                }
                cp_async_commit();
            }
            if (ks == K_STEPS - 1) {
                // Groups committed so far: NUM_STAGES - 1 + k_tile + 1. Leaving NUM_STAGES - 2 in flight
                // means groups 0..k_tile + 1 are done: k-tile k_tile + 1 is in shared memory.
                cp_async_wait<NUM_STAGES - 2>();
                __syncthreads();
            }

            // Fragments for the next step, from this stage, or from the next k-tile's stage at the last
            // step, so the first mma of the next k-tile does not wait on ldmatrix.
            if (ks < K_STEPS - 1) {
                load_fragments(frag_a[(ks + 1) % 2], frag_b[(ks + 1) % 2],
                               smem_a + stage * A_STAGE_BYTES + a_frag, smem_b + stage * B_STAGE_BYTES + b_frag,
                               (2 * (ks + 1)) ^ a_chunk, (2 * (ks + 1)) ^ b_chunk);
            } else if (k_tile + 1 < k_tiles) {
                load_fragments(frag_a[(ks + 1) % 2], frag_b[(ks + 1) % 2],
                               smem_a + next_stage * A_STAGE_BYTES + a_frag,
                               smem_b + next_stage * B_STAGE_BYTES + b_frag, a_chunk, b_chunk);
            }

#pragma unroll
            for (int mi = 0; mi < MMA_TILES_M; ++mi)
#pragma unroll
                for (int ni = 0; ni < MMA_TILES_N; ++ni)
                    mma_m16n8k16(acc[mi][ni], frag_a[ks % 2][mi], frag_b[ks % 2][ni]);
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // ---- epilogue: fp32 accumulators -> elem_t, straight from registers, predicated -----------------
    // acc[mi][ni][2h + e] is D(g + 8h, 2t + e) of mma tile (mi, ni), g = lane / 4, t = lane % 4.
    const int row0 = tile_m * BLOCK_M + warp_m * WARP_TILE_M + lane / 4;
    const int col0 = tile_n * BLOCK_N + warp_n * WARP_TILE_N + 2 * (lane % 4);
#pragma unroll
    for (int mi = 0; mi < MMA_TILES_M; ++mi) {
#pragma unroll
        for (int ni = 0; ni < MMA_TILES_N; ++ni) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 16 * mi + 8 * h;
                const int col = col0 + 8 * ni;
                const float v0 = acc[mi][ni][2 * h];
                const float v1 = acc[mi][ni][2 * h + 1];
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
