// A matrix-vector kernel for a few tokens, on CUDA cores: y (TOKENS x N) = x (TOKENS x K) . w (N x K)^T,
// all row-major, 16-bit in and out, fp32 sums. The question (lab/gemv.py): at M = 1 to 4 the library's
// swapped wgmma tile streams the weight at 3.2 to 3.3 TB/s where it is 32 to 48 MB, 4.1 at 224 MB; a CTA
// there spends 0.8 to 1.3 us before its first TMA load (tensor maps, barriers, the pipeline's start). Here a
// warp's first weight loads issue a few instructions after it starts, on every SM.
//
// Each warp takes whole rows of w in turn (grid-stride). A lane streams its 16-byte pieces of those rows,
// row after row, through a ring of STAGES slots of its own in shared memory (cp.async), so that STAGES - 1
// loads stay in flight across row boundaries; it multiplies each piece with the same 16 bytes of each
// token's x (read through L1, where every warp of the SM finds them). At a row's last piece the lanes' sums
// meet in a shuffle tree and lane 0 stores the row's TOKENS outputs. A lane reads back only the slots it
// filled, so its own cp.async.wait_group is all the ordering it needs.
//
// Plain loads do not do it: ptxas issues each just before its first use (a warp then has one or two 16-byte
// loads in flight, a sixteenth of what HBM's latency asks of an SM), whatever order the source gives them.
//
// Built with -DTOKENS=1..8 -DSTAGES=n -DDTYPE=__half or __nv_bfloat16; K a multiple of 8, rows 16-byte aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef TOKENS
#define TOKENS 1
#endif
#ifndef STAGES
#define STAGES 8
#endif
#ifndef DTYPE
#define DTYPE __half
#endif

constexpr int WARP = 32;
constexpr int WARPS = 8;  // per CTA
constexpr int CHUNK = 8;  // 16-bit values in one 16-byte piece

// The weight is read once: past L1 (.cg), the L2 asked for 256 bytes at a time (a warp's pieces cover 512).
__device__ __forceinline__ void cp_async_cg_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");  // no read of the ring moves above it
}

// The tokens are read by every warp of the SM: through L1.
__device__ __forceinline__ uint4 ld_global_nc_v4(const void* p) {
  uint4 v;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <typename T>
__device__ __forceinline__ float2 to_float2(unsigned pair);
template <>
__device__ __forceinline__ float2 to_float2<__half>(unsigned pair) {
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}
template <>
__device__ __forceinline__ float2 to_float2<__nv_bfloat16>(unsigned pair) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
}

// acc + the dot product of 8 weights and 8 token values
__device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc) {
  const unsigned ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = to_float2<DTYPE>(ws[i]), b = to_float2<DTYPE>(xs[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

extern "C" __global__ void __launch_bounds__(WARPS * WARP) gemv_kernel(const DTYPE* __restrict__ x,
                                                                      const DTYPE* __restrict__ w,
                                                                      DTYPE* __restrict__ y, int n, int k) {
  __shared__ uint4 ring[WARPS][STAGES][WARP];
  const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
  const int warps = gridDim.x * WARPS, first_row = blockIdx.x * WARPS + warp;
  const int chunks = k / CHUNK;                      // 16-byte pieces per row
  const int passes = (chunks + WARP - 1) / WARP;     // a warp's loads per row
  const int rows = first_row < n ? (n - 1 - first_row) / warps + 1 : 0;
  const int steps = rows * passes;                   // the warp's loads, row after row

  // Step s: row first_row + (s / passes) * warps, piece (s % passes) * WARP + lane.
  auto issue = [&](int s) {
    const int row = first_row + (s / passes) * warps, piece = (s % passes) * WARP + lane;
    const bool valid = s < steps && piece < chunks;  // out of range: 16 bytes of zeros, no read
    const DTYPE* src = valid ? w + static_cast<size_t>(row) * k + piece * CHUNK : w;
    cp_async_cg_16(&ring[warp][s % STAGES][lane], src, valid);
    cp_async_commit_group();
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue(s);

  float acc[TOKENS] = {};
  for (int s = 0; s < steps; ++s) {
    issue(s + STAGES - 1);
    cp_async_wait_group<STAGES - 1>();  // this lane's piece of step s has landed
    const uint4 wv = ring[warp][s % STAGES][lane];
    const int piece = (s % passes) * WARP + lane;
    if (piece < chunks) {
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        acc[t] = dot8(wv, ld_global_nc_v4(x + static_cast<size_t>(t) * k + piece * CHUNK), acc[t]);
      }
    }
    if (s % passes == passes - 1) {  // the row's last piece: sum the lanes, store, start the next row at 0
      const int row = first_row + (s / passes) * warps;
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
#pragma unroll
        for (int offset = WARP / 2; offset > 0; offset /= 2) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], offset);
        if (lane == 0) y[static_cast<size_t>(t) * n + row] = static_cast<DTYPE>(acc[t]);
        acc[t] = 0.0f;
      }
    }
  }
  cp_async_wait_group<0>();  // nothing left in flight into shared memory when the CTA exits
}
