// Where clusters land. Not a stage: the kernel behind deepgemm/gpc.py, which learns which SMs share a GPC
// (CUDA does not say) and where the clusters of a persistent grid run. Needs sm_90 (clusters).

#ifndef CLUSTER_SIZE
#define CLUSTER_SIZE 8  // CTAs per cluster; a cluster never spans two GPCs
#endif

__device__ __forceinline__ unsigned smid() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

// Each CTA writes the SM it runs on. Launched with one CTA per SM (the dynamic shared memory sees to it) and
// clusters of CLUSTER_SIZE: the SMs of one cluster are in one GPC. The spin keeps every CTA resident until
// the whole wave is placed, so that no SM runs two CTAs of one launch.
extern "C" __global__ void __cluster_dims__(CLUSTER_SIZE, 1, 1) where_am_i(int* sm_of_block) {
    extern __shared__ unsigned char hold[];
    if (threadIdx.x == 0) {
        sm_of_block[blockIdx.x] = (int)smid();
        hold[0] = 1;
    }
    const long long start = clock64();
    while (clock64() - start < 2000000) {
    }
}
