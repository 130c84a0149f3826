"""Does the L2 merge a convoy's concurrent requests for a line whose fill is pending? (H100)

The cuTile Static launch of the sawtooth study misses 17-30x what the timed simulator predicts,
with real DRAM refetches, while the L2 request coalescer merges only 4.8% of its (TMA) load
sectors against 35% of the CUDA build's (REPORT.md 7d). The simulator lets a request for a tile
already in flight wait for that fill and counts it as a hit. This probe measures what the
hardware does: ``N`` persistent CTAs (one per SM) sweep the same ``tiles`` x ``TILE_BYTES`` of a
buffer in the same order, each tile copied into shared memory either by every thread's 16-byte
loads (``ld``: the path of the CUDA kernel's loads, through L1 and the coalescer) or by one bulk
asynchronous copy (``bulk``: ``cp.async.bulk``, the TMA engine's path, as the cuTile kernel's
loads), and CTA ``i`` starts ``i x skew_ns`` late. With the buffer larger than the L2, each tile
of a sweep is absent when the convoy reaches it: one fill per sector if concurrent requests are
merged, up to ``N`` if not. Run under ncu (``--kernel-name regex:convoy``) with the tex lookup
counters and DRAM bytes; the script prints the launches in order so that ncu's rows can be named.

    ncu --clock-control none --kernel-name regex:convoy --metrics \\
        lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_tex_lookup_miss.sum,\\
        dram__bytes_read.sum,lrc__lrc2xbar_sectors_op_read.sum,\\
        l1tex__m_xbar2l1tex_read_sectors.sum python -m explorations.convoy_probe
"""
from __future__ import annotations

TILE_BYTES = 16384
THREADS = 256

SOURCE = r"""
extern "C" __global__ void convoy(const char* __restrict__ buf, long long tiles, int bulk,
                                  long long skew_ns, unsigned long long* sink) {
    extern __shared__ __align__(128) char smem[];
    __shared__ __align__(8) unsigned long long bar;
    const int tile_bytes = %(tile)d;
    unsigned long long t0;
    asm volatile("mov.u64 %%0, %%globaltimer;" : "=l"(t0));
    const unsigned long long until = t0 + (unsigned long long)(skew_ns * blockIdx.x);
    unsigned long long now = t0;
    while (now < until) asm volatile("mov.u64 %%0, %%globaltimer;" : "=l"(now));
    unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%%0], 1;" :: "r"(bar_addr));
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    unsigned long long acc = 0;
    for (long long t = 0; t < tiles; ++t) {
        const char* src = buf + t * tile_bytes;
        if (bulk) {
            if (threadIdx.x == 0) {
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;"
                             :: "r"(bar_addr), "r"(tile_bytes) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                             "[%%0], [%%1], %%2, [%%3];"
                             :: "r"(dst), "l"(src), "r"(tile_bytes), "r"(bar_addr) : "memory");
            }
            unsigned parity = (unsigned)(t & 1), done = 0;
            while (!done) {
                asm volatile("{ .reg .pred p; "
                             "mbarrier.try_wait.parity.shared::cta.b64 p, [%%1], %%2; "
                             "selp.u32 %%0, 1, 0, p; }"
                             : "=r"(done) : "r"(bar_addr), "r"(parity) : "memory");
            }
        } else {
            for (int o = threadIdx.x * 16; o < tile_bytes; o += blockDim.x * 16) {
                uint4 v = *reinterpret_cast<const uint4*>(src + o);
                *reinterpret_cast<uint4*>(smem + o) = v;
            }
        }
        __syncthreads();
        acc += reinterpret_cast<const unsigned long long*>(smem)[threadIdx.x];
        __syncthreads();
    }
    if (acc == 0x5eed) sink[blockIdx.x] = acc;   // keeps the loads; never true for these inputs
}
""" % {"tile": TILE_BYTES}

# (mode, CTAs, skew in ns): one CTA as the baseline, the full convoy with no skew, and skews
# around the L2 fill latency (~350 ns for a DRAM fill on the H100, latency-20261123)
LAUNCHES = [(m, n, s) for m in ("ld", "bulk") for n, s in
            ((1, 0), (132, 0), (132, 100), (132, 1000), (132, 10000))]


def main() -> None:
    import cupy
    buf_bytes = 192 << 20                     # 3.8x the H100's 50 MiB L2
    tiles = buf_bytes // TILE_BYTES
    buf = cupy.arange(buf_bytes // 8, dtype=cupy.uint64) + 1
    sink = cupy.zeros(1024, dtype=cupy.uint64)
    flush = cupy.zeros(256 << 20, dtype=cupy.uint8)
    fn = cupy.RawModule(code=SOURCE, options=("-arch=sm_90", "-std=c++17")).get_function("convoy")
    fn.max_dynamic_shared_size_bytes = TILE_BYTES
    for i, (mode, n, skew) in enumerate(LAUNCHES):
        flush.fill(i & 0xFF)                  # evict the buffer from the L2
        fn((n,), (THREADS,), (buf, cupy.int64(tiles), cupy.int32(mode == "bulk"),
                              cupy.int64(skew), sink), shared_mem=TILE_BYTES)
        cupy.cuda.runtime.deviceSynchronize()
        print(f"launch {i}: mode={mode} ctas={n} skew_ns={skew} tiles={tiles} "
              f"sectors_per_cta={tiles * TILE_BYTES // 32}", flush=True)


if __name__ == "__main__":
    main()
