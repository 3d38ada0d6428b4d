// The L2 request coalescer, probed. Not a stage: the kernels behind `python -m lab coalescer`, which
// asks which SMs' identical reads the L2 merges before they reach a slice, and for how long a request
// waits to be merged. Needs sm_90 (clusters, bulk TMA copies, mbarriers).

constexpr int SLOTS = 4;  // bulk copies in flight per reading CTA

__device__ __forceinline__ unsigned smid() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

// Reads `bytes` of src once with plain loads, so that the next kernel finds them in L2.
extern "C" __global__ void warm_l2(const int4* src, int count, int* sink) {
    int x = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) x ^= src[i].x;
    if (x == 0x5eed5eed) sink[0] = x;  // keeps the loads; practically never true
}

// One CTA per SM; only those on SMs sm_a and sm_b do anything. Their first threads meet at a counter in
// global memory (zeroed before the launch), the one on sm_b then waits `delay` cycles, and each streams
// the same `chunks` x `chunk_bytes` of src into its shared memory with bulk TMA copies, SLOTS in flight,
// each completing on its own mbarrier. cycles[sm] receives the streaming time of each reader.
extern "C" __global__ void twin_reads(const char* src, int chunks, int chunk_bytes, int sm_a, int sm_b,
                                      int delay, unsigned* counter, long long* cycles) {
    extern __shared__ __align__(128) unsigned char buffer[];
    __shared__ __align__(8) unsigned long long full[SLOTS];
    const unsigned sm = smid();
    if ((sm != (unsigned)sm_a && sm != (unsigned)sm_b) || threadIdx.x != 0) return;
    const unsigned base = (unsigned)__cvta_generic_to_shared(buffer);
    for (int s = 0; s < SLOTS; ++s) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&full[s])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    atomicAdd(counter, 1u);
    while (atomicAdd(counter, 0u) < 2u) {
    }
    if (sm == (unsigned)sm_b) {
        const long long start = clock64();
        while (clock64() - start < delay) {
        }
    }
    const long long start = clock64();
    for (int i = 0; i < chunks + SLOTS; ++i) {
        const int s = i % SLOTS;
        const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[s]);
        if (i >= SLOTS) {  // the copy issued SLOTS chunks ago into this slot has landed
            const unsigned parity = (unsigned)((i / SLOTS - 1) & 1);
            unsigned done = 0;
            while (!done) {
                asm volatile(
                    "{\n.reg .pred p;\n"
                    "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                    "selp.u32 %0, 1, 0, p;\n}\n"
                    : "=r"(done) : "r"(bar), "r"(parity) : "memory");
            }
        }
        if (i < chunks) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(chunk_bytes)
                         : "memory");
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                ::"r"(base + s * chunk_bytes), "l"(src + (long long)i * chunk_bytes), "r"(chunk_bytes), "r"(bar)
                : "memory");
        }
    }
    cycles[sm] = clock64() - start;
}
