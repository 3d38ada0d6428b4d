// v0_naive: the plainest correct GEMM, and the reference every later stage is checked against.
//   - one thread computes one element of C: a dot product of a row of A and a column of B over all of K,
//     accumulated in FP32 and rounded to elem_t once, at the store;
//   - A and B are read through general element strides, so any layout works without a copy.
// What limits it: nothing is reused on chip. Every multiply-add loads one element of A and one of B
// (4 bytes of loads per 2 flops), so the kernel is bound by L1/L2 traffic and load latency, far below
// the FP32 peak and further still below the tensor cores. The measured time is in README.md.
// Runs on sm_80 and newer: nvcc -cubin -gencode=arch=compute_90a,code=sm_90a kernel.cu

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif

#if DTYPE_BF16
typedef __nv_bfloat16 elem_t;
__device__ __forceinline__ float to_float(elem_t x) { return __bfloat162float(x); }
__device__ __forceinline__ elem_t to_elem(float x) { return __float2bfloat16_rn(x); }
#else
typedef __half elem_t;
__device__ __forceinline__ float to_float(elem_t x) { return __half2float(x); }
__device__ __forceinline__ elem_t to_elem(float x) { return __float2half_rn(x); }
#endif

#ifndef BLOCK_X
#define BLOCK_X 32     // threads along N: one warp, so a warp's C stores (and its B loads when b is
                       // N-major, stride_bn == 1) are 32 consecutive elements, 64 bytes, two sectors
#endif
#ifndef BLOCK_Y
#define BLOCK_Y 8      // threads along M: 8 warps, 256 threads a block; each warp reads one row of A, so
                       // its A load is a single broadcast element
#endif

constexpr int NUM_THREADS = BLOCK_X * BLOCK_Y;

static_assert(NUM_THREADS <= 1024, "a block holds at most 1024 threads");

// ---------------------------------------------------------------------------------------------------
// The kernel. Grid: (ceil(N / BLOCK_X), ceil(M / BLOCK_Y)) blocks of (BLOCK_X, BLOCK_Y) threads; each
// block covers a BLOCK_Y x BLOCK_X tile of C, one element per thread. No shared memory.
// ---------------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
gemm_kernel(const elem_t* __restrict__ A, const elem_t* __restrict__ B, elem_t* __restrict__ C,
            int M, int N, int K,
            long long stride_am, long long stride_ak, long long stride_bk, long long stride_bn, int ldc)
{
    // ---- prologue -----------------------------------------------------------------------------------
    const int tile_n = blockIdx.x;
    const int tile_m = blockIdx.y;
    const int row = tile_m * BLOCK_Y + threadIdx.y;
    const int col = tile_n * BLOCK_X + threadIdx.x;
    if (row >= M || col >= N) return;  // the tails of M and N: this thread owns no element of C

    const elem_t* a = A + row * stride_am;  // row of A, walked with stride_ak
    const elem_t* b = B + col * stride_bn;  // column of B, walked with stride_bk

    // ---- main loop over K ---------------------------------------------------------------------------
    // One element of K at a time: no tiles, nothing staged on chip. Both loads go to L1/L2 every time.
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc = fmaf(to_float(a[k * stride_ak]), to_float(b[k * stride_bk]), acc);
    }

    // ---- epilogue: fp32 accumulator -> elem_t, one store per thread ----------------------------------
    C[(long long)row * ldc + col] = to_elem(acc);
}
