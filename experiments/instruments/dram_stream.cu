// The DRAM streamer of the miss-cost study (experiments/streamer.py): every thread reads
// 16-byte vectors of a buffer 8x the L2 with an evict_first L2 policy until the stop flag is set.
extern "C" __global__ void dram_stream(const uint4* __restrict__ buf, long long n_vec,
                                       const volatile int* stop, unsigned long long* rec,
                                       long long max_ns) {
    // rec[4 * blockIdx.x + {0, 1, 2, 3}] = bytes read, first %globaltimer, last, %smid
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    unsigned long long loads = 0;
    for (int it = 0;; ++it) {
        unsigned v[4][4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            long long j = i + u * stride;         // 4 stride < n_vec: one wrap at most
            if (j >= n_vec) j -= n_vec;
            const uint4* p = buf + j;
            asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 "
                         "{%0, %1, %2, %3}, [%4], %5;"
                         : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3])
                         : "l"(p), "l"(policy));
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) acc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
        loads += 4;
        i += 4 * stride;
        if (i >= n_vec) i -= n_vec;
        if ((it & 7) == 7) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (*stop != 0 || (long long)(t - t0) > max_ns) break;
        }
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    atomicAdd(rec + 4 * blockIdx.x, loads * 16ull);
    if (threadIdx.x == 0) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        rec[4 * blockIdx.x + 1] = t0;
        rec[4 * blockIdx.x + 3] = smid;
    }
    atomicMax(rec + 4 * blockIdx.x + 2, t);
    if (acc == 0x9E3779B9u) rec[4 * blockIdx.x + 3] |= 1ull << 40;   // never true in practice
}
