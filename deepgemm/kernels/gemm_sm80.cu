// The library's kernel for GPUs without wgmma: what deepgemm.gemm runs on sm_80 and newer other than
// sm_90a (Ampere, Ada, consumer Blackwell; deepgemm/plan_sm80.py plans it). It is v2_mma_sync (mma.sync
// m16n8k16 with fp32 accumulators, ldmatrix, a cp.async pipeline of NUM_STAGES k-tiles, XOR-swizzled shared
// memory), grown for the shapes models run, each addition a block marked [1] to [6];
// `python -m tutorial diff library_sm80` shows them against stages/v2_mma_sync/kernel.cu:
//   [1] either operand in either layout (A_MN_MAJOR, B_MN_MAJOR): an operand stored with M (or N)
//       contiguous, such as a row-major (K, N) b, is copied into shared memory as it lies, k-lines of M or N,
//       and read with ldmatrix's transposing form, which hands the mma the same fragments; no copy on the host.
//   [2] K of any length: a 16-byte chunk that ends past K (or past the last row of an MN-major operand) is
//       copied in part, cp.async zero-filling the rest, so the rows of an operand need only be 16-byte aligned.
//   [3] a tile for the shape: BLOCK_M and BLOCK_N any power of two from 16 to 256, any warp grid that gives
//       each warp whole m16 x (2 x n8) blocks, so that a 16-row tile serves a decode step; a tile's copies
//       need not divide evenly among the threads.
//   [4] tiles cut along K (PARTIAL_TILES 1): split-K, each tile's k-tiles cut into `splits` slices, one CTA
//       each. Every slice writes its fp32 partial and counts itself in; the CTA that arrives last adds all
//       slices in slice order and runs the epilogue: one kernel, and the same result from run to run
//       whichever slice finished last.
//   [5] the sm_90a kernel's fused epilogue: out = act(alpha * acc + bias[col]) in fp32, one rounding to
//       OUT_DTYPE (fp16, bf16 or fp32), a bias in its own type (BIAS_DTYPE), four activations, each define
//       with the codes of gemm_sm90.cu.
//   [6] a 1-D grid whose tiles run in groups of GROUP_M tile rows, so that the B tiles a group reads stay in
//       L2 while its rows of A are read; the launch facts exported for the plan.
// Runs on sm_80 and newer: nvcc -cubin -gencode=arch=compute_80,code=sm_80 gemm_sm80.cu

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif

#if DTYPE_BF16
typedef __nv_bfloat16 elem_t;
#define MMA_AB_TYPE "bf16"
#else
typedef __half elem_t;
#define MMA_AB_TYPE "f16"
#endif

#ifndef OUT_DTYPE
#define OUT_DTYPE DTYPE_BF16  // [5] 0 fp16, 1 bf16, 2 fp32; by default the input's type
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0            // [5] 1: add bias[col] (N values of BIAS_DTYPE) before the activation
#endif
#ifndef BIAS_DTYPE
#define BIAS_DTYPE 2          // [5] 0 fp16, 1 bf16, 2 fp32: the caller's bias, read in its own type (no fp32 copy)
#endif
#ifndef ACTIVATION
#define ACTIVATION 0          // [5] 0 none, 1 relu, 2 gelu (tanh approximation), 3 gelu (erf), 4 silu
#endif

#if OUT_DTYPE == 2
typedef float out_t;
typedef float2 out2_t;
__device__ __forceinline__ out_t to_out(float x) { return x; }
__device__ __forceinline__ out2_t to_out2(float lo, float hi) { return make_float2(lo, hi); }
#elif OUT_DTYPE == 1
typedef __nv_bfloat16 out_t;
typedef __nv_bfloat162 out2_t;
__device__ __forceinline__ out_t to_out(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ out2_t to_out2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half out_t;
typedef __half2 out2_t;
__device__ __forceinline__ out_t to_out(float x) { return __float2half_rn(x); }
__device__ __forceinline__ out2_t to_out2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

// [5] One bias value in fp32, read through the read-only cache as it is stored (fp16 and bf16 widen exactly).
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

#ifndef BLOCK_M
#define BLOCK_M 128    // WARPS_M warps x 64 rows; [3] 16 to 256
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
                       // one block an SM; 4 x 24 KB = 96 KB, under the 99 KB a block may use on Ada and
                       // consumer Blackwell as well as A100's 163 KB
#endif
#ifndef WARPS_M
#define WARPS_M 2      // warps along M
#endif
#ifndef WARPS_N
#define WARPS_N 4      // warps along N: 8 warps, 2 per SM sub-partition; a 64x64 warp tile is 32 mma per
                       // k16 step from 8 ldmatrix.x4, and 128 fp32 accumulators a thread
#endif
#ifndef GROUP_M
#define GROUP_M 8      // [6] tile rows per group in the launch order (L2 reuse); <= 1: plain row-major
#endif
#ifndef A_MN_MAJOR
#define A_MN_MAJOR 0   // [1] 1: A is stored K x M with M contiguous (the transposed view of a row-major (K, M))
#endif
#ifndef B_MN_MAJOR
#define B_MN_MAJOR 0   // [1] 1: B is stored K x N with N contiguous (a row-major (K, N)); 0: N x K, K contiguous
#endif
#ifndef PARTIAL_TILES
#define PARTIAL_TILES 0  // [4] 1: the plan may cut tiles along K (split-K): fp32 partials and a sum
#endif

constexpr int NUM_WARPS = WARPS_M * WARPS_N;
constexpr int NUM_THREADS = 32 * NUM_WARPS;
constexpr int WARP_TILE_M = BLOCK_M / WARPS_M;
constexpr int WARP_TILE_N = BLOCK_N / WARPS_N;
constexpr int MMA_TILES_M = WARP_TILE_M / 16;           // m16 tiles per warp
constexpr int MMA_TILES_N = WARP_TILE_N / 8;            // n8 tiles per warp
constexpr int K_STEPS = BLOCK_K / 16;                   // k16 steps per k-tile

static_assert(BLOCK_K == 32 || BLOCK_K == 64, "4 or 8 chunks a K-major row: 64- or 128-byte rows");
static_assert(K_STEPS % 2 == 0, "fragments are double-buffered by k-step parity across k-tiles");
static_assert((BLOCK_M & (BLOCK_M - 1)) == 0 && (BLOCK_N & (BLOCK_N - 1)) == 0 && BLOCK_M >= 16 && BLOCK_N >= 16
              && BLOCK_M <= 256 && BLOCK_N <= 256,
              "[3] 16 to 256, powers of two: an MN-major line is a power-of-two count of chunks");
static_assert(BLOCK_M % (16 * WARPS_M) == 0, "each warp owns whole m16 tiles");
static_assert(BLOCK_N % (16 * WARPS_N) == 0, "each warp owns whole pairs of n8 tiles (one ldmatrix.x4)");
static_assert(NUM_STAGES >= 2, "at least double buffering");
static_assert(NUM_THREADS <= 1024, "one block");

// ---------------------------------------------------------------------------------------------------
// Shared-memory layout. A stage holds one k-tile of A, then (after all A stages) one of B, each made of
// lines of 16-byte chunks:
//   K-major (v2's layout): ROWS lines of BLOCK_K elements, k contiguous;
//   [1] MN-major: BLOCK_K lines (one per k) of ROWS elements, m (or n) contiguous, as the operand lies in
//   global memory, so cp.async copies it without transposing.
// Banks are 4 bytes wide, 32 of them: a 128-byte pass holds 8 chunk slots, each a quadruple of banks. Lines
// shorter than 128 bytes share a pass (LINES_PER_PASS of them). Chunk c of line r is stored at position
// c ^ x(r), x(r) = (r % 8) / LINES_PER_PASS: the pattern repeats every 8 lines whatever the line's length
// (LINES_PER_PASS x min(CHUNKS, 8) = 8), and x < min(CHUNKS, 8), so the XOR stays inside the line and,
// for lines of 128 bytes or more, inside the line's 128-byte pass.
// ldmatrix: each 8-lane phase reads one 8x8 matrix, the same logical chunk c of 8 consecutive lines
//   r0..r0+7 (r0 a multiple of 8), which unswizzled sit in 8 / LINES_PER_PASS slot positions, 1 to 8
//   lines on the same banks. Swizzled, line r0 + i uses slot (i % LINES_PER_PASS) * CHUNKS + (c ^ x(i)):
//   8 distinct slots, all 32 banks, one wavefront. 64-byte lines (BLOCK_K 32, or 32 rows MN-major):
//   slot 4 (i % 2) + (c ^ (i / 2)); 128 bytes and more: c ^ i; 32 bytes (16 rows MN-major):
//   slot 2 (i % 4) + (c ^ (i / 4)).
// cp.async: a warp writes 32 consecutive chunks, whole lines or whole 128-byte passes of one; the XOR only
//   permutes chunks within a pass, so each pass still touches every bank once.
// ---------------------------------------------------------------------------------------------------

template <int ROWS, bool MN_MAJOR>
struct TileLayout {
    static constexpr int LINES = MN_MAJOR ? BLOCK_K : ROWS;
    static constexpr int LINE_BYTES = (MN_MAJOR ? ROWS : BLOCK_K) * (int)sizeof(elem_t);
    static constexpr int CHUNKS = LINE_BYTES / 16;
    static constexpr int LINES_PER_PASS = LINE_BYTES < 128 ? 128 / LINE_BYTES : 1;
    static constexpr int BYTES = LINES * LINE_BYTES;
    static_assert(LINES_PER_PASS * (CHUNKS < 8 ? CHUNKS : 8) == 8, "the swizzle repeats every 8 lines");

    __device__ static __forceinline__ int swizzle_term(int line) { return (line % 8) / LINES_PER_PASS; }
    __device__ static __forceinline__ unsigned offset(int line, int chunk) {
        return line * LINE_BYTES + ((chunk ^ swizzle_term(line)) << 4);
    }
};
using TileA = TileLayout<BLOCK_M, A_MN_MAJOR>;
using TileB = TileLayout<BLOCK_N, B_MN_MAJOR>;
constexpr int A_STAGE_BYTES = TileA::BYTES;
constexpr int B_STAGE_BYTES = TileB::BYTES;
constexpr int DYNAMIC_SMEM_BYTES = NUM_STAGES * (A_STAGE_BYTES + B_STAGE_BYTES);

// [6] The launch facts the plan reads back from the compiled module, so they are written only here.
extern "C" __device__ const int LAUNCH_THREADS = NUM_THREADS;
extern "C" __device__ const int LAUNCH_SMEM_BYTES = DYNAMIC_SMEM_BYTES;

// ---------------------------------------------------------------------------------------------------
// PTX helpers. Shared-memory operands are 32-bit shared-window addresses.
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous, L1 bypassed (.cg). Only the first src_bytes (0 to 16) are read
// and the rest of the 16 are zero-filled: how rows past M or N and [2] elements past K become zeros. src
// must be 16-byte aligned even when fewer bytes are read.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 16 bytes global -> shared, all of them inside the matrix: no byte count to compute or pass.
__device__ __forceinline__ void cp_async_16_whole(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
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

// [1] As ldmatrix_x4, each matrix transposed on the way: r[i] of lane l receives rows 2 (l % 4) and
// 2 (l % 4) + 1 of matrix i, column l / 4. A matrix stored as 8 k-lines of 8 m (or n) values so arrives as
// the K-major matrix would without .trans: k-pairs of one m (or n) per register, what the mma takes.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
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

// [4] The same pointer, which the compiler can no longer see through: stores and loads at constant offsets
// from it then address as [base + offset], instead of each rebuilding its own 64-bit address from the index
// sums it was computed from (a register pair per store, which spilled with 128 accumulators live).
__device__ __forceinline__ float2* opaque(float2* p) {
    asm("mov.b64 %0, %0;" : "+l"(p));
    return p;
}

// [4] atomicAdd with acquire-release semantics at GPU scope: this thread's earlier writes (and those the
// block ordered before it with __syncthreads) are visible to whoever reads the new count, and
// what was written before the counts it reads is visible to this thread afterwards. Returns the old count.
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* counter, unsigned value) {
    unsigned old;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(value) : "memory");
    return old;
}

// ---------------------------------------------------------------------------------------------------
// Tile and fragment movers.
// ---------------------------------------------------------------------------------------------------

// Global -> shared, one operand's k-tile at k0 (from `tile`'s k). Chunk q of the tile (q = thread + i *
// NUM_THREADS) is line q / CHUNKS, chunk q % CHUNKS: the CHUNKS threads of a line read its contiguous
// bytes. A thread's chunk is the same for every i and its lines are LINE_STEP apart, so it keeps one source
// pointer and adds constant multiples of the row stride. `tile` is the tile's first element (K-major: row
// tile * ROWS; [1] MN-major: column tile * ROWS), `ld` the operand's row stride in elements, `rows_left`
// how many of the tile's ROWS rows (of M or N) lie inside the matrix, K how many k from `tile`'s on.
// [2] A chunk is read as far as it lies inside the matrix: past K (K-major) or past the last row
// (MN-major) cp.async fills zeros, so the mma on them add nothing. How far is the same for all of a
// thread's lines; whether a line lies inside at all (rows past M or N, MN-major k past K) is not.
// [3] A tile smaller than one pass of the threads leaves the threads past its last line idle.
template <typename Tile, bool MN_MAJOR>
__device__ __forceinline__ void load_tile(unsigned dst, const elem_t* tile, int ld, int rows_left, int k0, int K)
{
    constexpr int LINE_STEP = NUM_THREADS / Tile::CHUNKS;  // lines one pass of all threads covers
    static_assert(NUM_THREADS % Tile::CHUNKS == 0, "every thread keeps one chunk of its lines");
    const int line0 = threadIdx.x / Tile::CHUNKS;
    const int chunk = threadIdx.x % Tile::CHUNKS;
    if (Tile::LINES < LINE_STEP && line0 >= Tile::LINES) return;
    const elem_t* p = tile + (MN_MAJOR ? (long long)(k0 + line0) * ld : (long long)line0 * ld + k0) + chunk * 8;
    // [2] A k-tile wholly inside the matrix (every line and chunk: all but the last along M, N and K) is
    // copied as v2 copies it, 16 bytes a chunk, no test per line: the tests below put about 100 integer
    // instructions a k-tile into the main loop (SASS of the default tile, beside v2's).
    const bool whole = MN_MAJOR ? K - k0 >= Tile::LINES && rows_left >= Tile::CHUNKS * 8
                                : rows_left >= Tile::LINES && K - k0 >= Tile::CHUNKS * 8;
    if (whole) {
#pragma unroll
        for (int i = 0; i < (Tile::LINES + LINE_STEP - 1) / LINE_STEP; ++i)
            cp_async_16_whole(dst + Tile::offset(line0 + i * LINE_STEP, chunk), p + (long long)i * LINE_STEP * ld);
        return;
    }
    const int along = MN_MAJOR ? rows_left - chunk * 8 : K - k0 - chunk * 8;  // elements inside from the first
    const int chunk_bytes = min(max(along, 0), 8) * (int)sizeof(elem_t);
#pragma unroll
    for (int i = 0; i < (Tile::LINES + LINE_STEP - 1) / LINE_STEP; ++i) {
        const int line = line0 + i * LINE_STEP;
        const bool line_inside = MN_MAJOR ? k0 + line < K : line < rows_left;
        const int bytes = line_inside ? chunk_bytes : 0;
        cp_async_16(dst + Tile::offset(line, chunk), bytes > 0 ? p + (long long)i * LINE_STEP * ld : tile, bytes);
    }
}

// Where one lane points its ldmatrix in an operand's stage: `base` its line's byte offset for block 0 and
// k16 step 0, `chunk0` the first chunk of its warp's columns (MN-major only), `half_swizzle` the half of
// the 16-wide block it reads (k 8-15, or rows 8-15) XOR its line's swizzle term. Every block and step
// starts on a multiple of 8 lines, so the term is the lane's for all of them; and every chunk index
// it is XORed into is even before the half is added, so (even + half) ^ x == even ^ (half ^ x).
struct FragLane {
    unsigned base;
    int chunk0;
    int half_swizzle;
};

// The lane's byte offset in a stage for 16-row block `blk` of its warp's tile in k16 step `ks`:
//   K-major, line base + 16 blk, chunk 2 ks + half: blocks move by 16 lines, steps by two chunks;
//   [1] MN-major, line 16 ks + its k-row, chunk chunk0 + 2 blk + half: steps move by 16 lines.
template <typename Tile, bool MN_MAJOR>
__device__ __forceinline__ unsigned frag_offset(const FragLane& f, int blk, int ks) {
    if constexpr (MN_MAJOR)
        return f.base + ks * 16 * Tile::LINE_BYTES + (((f.chunk0 + 2 * blk) ^ f.half_swizzle) << 4);
    else
        return f.base + blk * 16 * Tile::LINE_BYTES + (((2 * ks) ^ f.half_swizzle) << 4);
}

// Which row of the 16 x 16 block lane l supplies, and which half: matrices in register order, for A
//   (a[0..3] of mma_m16n8k16) i = l / 8 is (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
//   (rows 8-15, k 8-15); for B (b[0], b[1] of n-tile 2p, then of 2p + 1) (n 0-7, k 0-7), (n 0-7, k 8-15),
//   (n 8-15, k 0-7), (n 8-15, k 8-15). K-major the lane's line is the row and its half the k half;
//   [1] MN-major its line is the k and its half the row half.
template <typename Tile, bool MN_MAJOR, bool IS_A>
__device__ __forceinline__ FragLane frag_lane(int lane, int warp_row0) {
    const int i = lane / 8;
    const int row_half = IS_A ? i % 2 : i / 2, k_half = IS_A ? i / 2 : i % 2;
    const int line = MN_MAJOR ? lane % 8 + 8 * k_half : lane % 8 + 8 * row_half;
    const int half = MN_MAJOR ? row_half : k_half;
    const int x = Tile::swizzle_term(line);
    const unsigned base = ((MN_MAJOR ? 0 : warp_row0) + line) * Tile::LINE_BYTES;
    return {base, MN_MAJOR ? warp_row0 / 8 : 0, half ^ x};
}

// Shared -> registers, the fragments of one k16 step from one stage of A and B.
__device__ __forceinline__ void load_fragments(unsigned (&a)[MMA_TILES_M][4], unsigned (&b)[MMA_TILES_N][2],
                                               unsigned a_stage, unsigned b_stage, const FragLane& a_lane,
                                               const FragLane& b_lane, int ks)
{
#pragma unroll
    for (int mi = 0; mi < MMA_TILES_M; ++mi) {
        const unsigned addr = a_stage + frag_offset<TileA, A_MN_MAJOR>(a_lane, mi, ks);
        if constexpr (A_MN_MAJOR) ldmatrix_x4_trans(a[mi], addr);
        else ldmatrix_x4(a[mi], addr);
    }
#pragma unroll
    for (int p = 0; p < MMA_TILES_N / 2; ++p) {
        unsigned r[4];
        const unsigned addr = b_stage + frag_offset<TileB, B_MN_MAJOR>(b_lane, p, ks);
        if constexpr (B_MN_MAJOR) ldmatrix_x4_trans(r, addr);
        else ldmatrix_x4(r, addr);
        b[2 * p][0] = r[0];
        b[2 * p][1] = r[1];
        b[2 * p + 1][0] = r[2];
        b[2 * p + 1][1] = r[3];
    }
}

// ---------------------------------------------------------------------------------------------------
// [6] The tile order. Block u takes tile u (with split-K, slice u % splits of tile u / splits: a tile's
// slices run side by side, so its sum is not left to the last wave). Tiles run in groups of GROUP_M tile
// rows, column by column within a group: the group's B tiles are read by GROUP_M blocks close together in
// time and then stay in L2, instead of streaming all of B once per tile row.
// ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ void grouped_tile(int tile_idx, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
    if (GROUP_M > 1) {
        const int group_tiles = GROUP_M * tiles_n;
        const int first_m = (tile_idx / group_tiles) * GROUP_M;
        const int group_rows = min(tiles_m - first_m, GROUP_M);  // the last group may be short
        tile_m = first_m + (tile_idx % group_tiles) % group_rows;
        tile_n = (tile_idx % group_tiles) / group_rows;
    } else {
        tile_m = tile_idx / tiles_n;
        tile_n = tile_idx % tiles_n;
    }
}

// Which tile, and which slice of it, this block computes. %ctaid.x is read by a volatile asm, which the
// compiler can neither merge with another read nor move: the kernel asks twice, before and after the main
// loop, so that none of this stays in a register across it beside 128 accumulators and the fragments.
struct BlockTile {
    int tile, slice, tile_m, tile_n;
};

__device__ __forceinline__ BlockTile block_tile(int M, int N, int splits) {
    int block;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block));
    BlockTile t;
    t.tile = PARTIAL_TILES ? block / splits : block;
    t.slice = PARTIAL_TILES ? block % splits : 0;
    grouped_tile(t.tile, (M + BLOCK_M - 1) / BLOCK_M, (N + BLOCK_N - 1) / BLOCK_N, t.tile_m, t.tile_n);
    return t;
}

// ---------------------------------------------------------------------------------------------------
// [4] A tile cut into slices along K, summed without a second kernel. Each slice's CTA writes its fp32
// partial to the tile's slot for that slice, in the accumulator fragment's own order (pair p of warp w,
// lane l at float2 index (w * PAIRS + p) * 32 + l, so each store instruction covers 256 contiguous bytes),
// skipping rows past M, then counts itself in on the tile's counter. The CTA that brings the count to
// `splits` has every partial in global memory: it adds them in slice order, its own read back like the
// others, so the sum rounds the same way whichever slice finished last, puts the counter back to 0 for the
// next launch and returns true to run the epilogue. The others return false and exit: nobody waits.
// `rows_left`: how many rows of this lane's first fragment row on lie inside C (row lane / 4 of the warp).
// ---------------------------------------------------------------------------------------------------

constexpr int PAIRS = MMA_TILES_M * MMA_TILES_N * 2;               // float2s a thread holds: (mi, ni, h)
constexpr long long SLOT_PAIRS = (long long)NUM_WARPS * PAIRS * 32;  // one tile's partial: BLOCK_M x BLOCK_N / 2

__device__ __forceinline__ bool partial_sum_if_last(float (&acc)[MMA_TILES_M][MMA_TILES_N][4], float* partials,
                                                    unsigned* counters, int tile, int slice, int splits, int warp,
                                                    int lane, int rows_left) {
    float2* const first = reinterpret_cast<float2*>(partials) + (long long)tile * splits * SLOT_PAIRS +
                          (long long)warp * PAIRS * 32 + lane;
    float2* const mine = opaque(first + slice * SLOT_PAIRS);
#pragma unroll
    for (int mi = 0; mi < MMA_TILES_M; ++mi)
#pragma unroll
        for (int ni = 0; ni < MMA_TILES_N; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (16 * mi + 8 * h < rows_left)
                    __stcg(mine + ((mi * MMA_TILES_N + ni) * 2 + h) * 32,
                           make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]));
    // Every thread's partial is ordered before thread 0's release by the barrier (PTX's causality order runs
    // through bar.sync), so the count's release publishes the whole block's partial: no fence per thread.
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        last = atom_add_acq_rel_gpu(counters + tile, 1u) == (unsigned)(splits - 1);
        if (last) counters[tile] = 0u;  // no other slice of this launch touches it again
    }
    // The barrier orders thread 0's acquire before every thread's reads of the other slices' partials.
    if (!__syncthreads_or(last)) return false;
    // Row by row of the fragment (mi, h), all slices in order, so that only one row's loads (2 x
    // MMA_TILES_N floats) are in flight beside the accumulators.
#pragma unroll
    for (int mi = 0; mi < MMA_TILES_M; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (16 * mi + 8 * h >= rows_left) continue;
#pragma unroll
            for (int ni = 0; ni < MMA_TILES_N; ++ni) acc[mi][ni][2 * h] = acc[mi][ni][2 * h + 1] = 0.0f;
#pragma unroll 1
            for (int s = 0; s < splits; ++s) {
                const float2* const part = opaque(first + s * SLOT_PAIRS);
#pragma unroll
                for (int ni = 0; ni < MMA_TILES_N; ++ni) {
                    const float2 v = __ldcg(part + ((mi * MMA_TILES_N + ni) * 2 + h) * 32);  // from L2
                    acc[mi][ni][2 * h] += v.x;
                    acc[mi][ni][2 * h + 1] += v.y;
                }
            }
        }
    return true;
}

// ---------------------------------------------------------------------------------------------------
// [5] The fused activation, applied to alpha * acc + bias in fp32 before the one rounding to out_t (the
// sm_90a kernel's, gemm_sm90.cu, which says why each form is what it is).
// ---------------------------------------------------------------------------------------------------

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

// alpha * acc + bias, activated, in fp32; one rounding to out_t happens when it is stored.
__device__ __forceinline__ float epilogue_value(float acc, float alpha, float bias) {
    return activation(fmaf(alpha, acc, bias));
}

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: tiles x splits blocks of NUM_THREADS threads, 1-D ([6]); dynamic shared memory:
// LAUNCH_SMEM_BYTES. A is M x K (K-major, row stride lda) or [1] K x M (MN-major, row stride lda); B is
// N x K (K-major, ldb) or K x N (MN-major, ldb); C is M x N out_t, row stride ldc. Operand rows and bases
// are 16-byte aligned (lda and ldb multiples of 8); K any length ([2]). bias may be nullptr when HAS_BIAS is
// 0. [4] splits > 1 cuts every tile into that many slices of its k-tiles; then partials holds tiles x splits
// slots of BLOCK_M x BLOCK_N floats and counters one zero per tile (the kernel leaves them zero again);
// both may be nullptr otherwise. Warp w owns rows (w / WARPS_N) * WARP_TILE_M and columns
// (w % WARPS_N) * WARP_TILE_N of the tile.
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
gemm_kernel(const elem_t* __restrict__ A, const elem_t* __restrict__ B, out_t* __restrict__ C,
            const bias_t* __restrict__ bias, float alpha, int M, int N, int K, int lda, int ldb, int ldc,
            float* partials, unsigned* counters, int splits)
{
    // ---- prologue -----------------------------------------------------------------------------------
    extern __shared__ __align__(128) unsigned char smem_raw[];

    // [6] [4] One tile (and one slice of it) per block.
    const BlockTile start = block_tile(M, N, splits);
    const int tile_m = start.tile_m, tile_n = start.tile_n, slice = start.slice;
    // [4] The slice's k-tiles, [k_begin, k_end): as equal as integers allow, at least one each (the plan
    // keeps splits <= k-tiles). [2] The last k-tile is zero-filled past K.
    const int all_k_tiles = (K + BLOCK_K - 1) / BLOCK_K;
    const int k_begin = PARTIAL_TILES ? slice * all_k_tiles / splits : 0;
    const int k_end = PARTIAL_TILES ? (slice + 1) * all_k_tiles / splits : all_k_tiles;
    const int k_tiles = k_end - k_begin;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int warp_m = warp / WARPS_N;
    const int warp_n = warp % WARPS_N;

    const unsigned smem_a = smem_addr(smem_raw);
    const unsigned smem_b = smem_a + NUM_STAGES * A_STAGE_BYTES;

    // [1] The tile's first element, at the slice's first k: its first row (K-major) or its first column
    // (MN-major). [4] From here on k counts from the slice's start, and k_left of them lie inside K.
    const long long k_skip = (long long)k_begin * BLOCK_K;
    const elem_t* a_tile = A + (A_MN_MAJOR ? (long long)tile_m * BLOCK_M + k_skip * lda
                                           : (long long)tile_m * BLOCK_M * lda + k_skip);
    const elem_t* b_tile = B + (B_MN_MAJOR ? (long long)tile_n * BLOCK_N + k_skip * ldb
                                           : (long long)tile_n * BLOCK_N * ldb + k_skip);
    const int k_left = K - (int)k_skip;
    const int a_rows = M - tile_m * BLOCK_M;
    const int b_rows = N - tile_n * BLOCK_N;

    const FragLane a_lane = frag_lane<TileA, A_MN_MAJOR, true>(lane, warp_m * WARP_TILE_M);
    const FragLane b_lane = frag_lane<TileB, B_MN_MAJOR, false>(lane, warp_n * WARP_TILE_N);

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
            load_tile<TileA, A_MN_MAJOR>(smem_a + s * A_STAGE_BYTES, a_tile, lda, a_rows, s * BLOCK_K, k_left);
            load_tile<TileB, B_MN_MAJOR>(smem_b + s * B_STAGE_BYTES, b_tile, ldb, b_rows, s * BLOCK_K, k_left);
        }
        cp_async_commit();
    }
    cp_async_wait<NUM_STAGES - 2>();  // k-tile 0 has landed (this thread's part) ...
    __syncthreads();                  // ... and everyone's
    load_fragments(frag_a[0], frag_b[0], smem_a, smem_b, a_lane, b_lane, 0);

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
                    const int k0 = fill * BLOCK_K;
                    load_tile<TileA, A_MN_MAJOR>(smem_a + fill_stage * A_STAGE_BYTES, a_tile, lda, a_rows, k0, k_left);
                    load_tile<TileB, B_MN_MAJOR>(smem_b + fill_stage * B_STAGE_BYTES, b_tile, ldb, b_rows, k0, k_left);
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
                load_fragments(frag_a[(ks + 1) % 2], frag_b[(ks + 1) % 2], smem_a + stage * A_STAGE_BYTES,
                               smem_b + stage * B_STAGE_BYTES, a_lane, b_lane, ks + 1);
            } else if (k_tile + 1 < k_tiles) {
                load_fragments(frag_a[(ks + 1) % 2], frag_b[(ks + 1) % 2], smem_a + next_stage * A_STAGE_BYTES,
                               smem_b + next_stage * B_STAGE_BYTES, a_lane, b_lane, 0);
            }

#pragma unroll
            for (int mi = 0; mi < MMA_TILES_M; ++mi)
#pragma unroll
                for (int ni = 0; ni < MMA_TILES_N; ++ni)
                    mma_m16n8k16(acc[mi][ni], frag_a[ks % 2][mi], frag_b[ks % 2][ni]);
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // acc[mi][ni][2h + e] is D(g + 8h, 2t + e) of mma tile (mi, ni), g = lane / 4, t = lane % 4.
    const BlockTile done = block_tile(M, N, splits);  // the same as `start`, asked again (see block_tile)
    const int row0 = done.tile_m * BLOCK_M + warp_m * WARP_TILE_M + lane / 4;
    const int col0 = done.tile_n * BLOCK_N + warp_n * WARP_TILE_N + 2 * (lane % 4);
#if PARTIAL_TILES
    // [4] A cut tile is left to the last of its slices to finish.
    if (splits > 1 &&
        !partial_sum_if_last(acc, partials, counters, done.tile, done.slice, splits, warp, lane, M - row0))
        return;
#endif

    // ---- [5] epilogue: out = act(alpha * acc + bias[col]) in fp32, one rounding, straight from registers --
#pragma unroll
    for (int ni = 0; ni < MMA_TILES_N; ++ni) {
        const int col = col0 + 8 * ni;
        const float bias_lo = HAS_BIAS && col < N ? load_bias(bias, col) : 0.0f;
        const float bias_hi = HAS_BIAS && col + 1 < N ? load_bias(bias, col + 1) : 0.0f;
#pragma unroll
        for (int mi = 0; mi < MMA_TILES_M; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 16 * mi + 8 * h;
                if (row >= M || col >= N) continue;
                const float v0 = epilogue_value(acc[mi][ni][2 * h], alpha, bias_lo);
                const float v1 = epilogue_value(acc[mi][ni][2 * h + 1], alpha, bias_hi);
                out_t* dst = C + (long long)row * ldc + col;
                if (col + 1 < N && (reinterpret_cast<unsigned long long>(dst) % sizeof(out2_t)) == 0) {
                    *reinterpret_cast<out2_t*>(dst) = to_out2(v0, v1);
                } else {
                    dst[0] = to_out(v0);
                    if (col + 1 < N) dst[1] = to_out(v1);
                }
            }
        }
    }
}
