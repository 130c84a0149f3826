// Split-Q FlashAttention forward for Hopper-class GPUs, written against the sm_80 instruction set
// (mma.sync, ldmatrix, cp.async) so that its memory behaviour is set by the code below and not by a
// compiler's tiling choices. FlashAttention-2's design, one Q tile per work item:
//
//   global (HBM) --cp.async.cg, 16 B, L1 bypassed--> shared memory (swizzled, K/V double-buffered)
//                --ldmatrix--> registers --mma.sync.m16n8k16, fp32 accumulate--> registers
//
//   * A CTA keeps its Q tile [TILE_M, D] resident and streams K/V tiles [TILE_N, D] through
//     STAGES shared-memory buffers (default two): while the warps compute on tile s, tiles
//     s+1 .. s+STAGES-1 are already in flight. STAGES = 1 loads a tile, waits for it, then
//     computes on it: every L2 miss is then paid in full, which is what the miss-cost study
//     (experiments misscost) uses to expose the cost of a miss.
//   * Each warp owns WARP_M = 16 * MREP query rows. Its S = Q Kᵀ block [WARP_M, TILE_N], the
//     softmax state (m, l) and the output accumulator [WARP_M, D] live in registers for the whole
//     K/V scan; only K and V are read from shared memory (by every warp).
//   * P = softmax(S) is converted to 16-bit in registers and used directly as the A operand of
//     O += P V: the C-fragment layout of m16n8k16 is the A-fragment layout of the next product, so P
//     never touches shared memory.
//   * Online softmax in fp32 with exp2: the 1/sqrt(D) scale and log2(e) are folded into one factor.
//
// The kernel does not need any CUDA header: every instruction it uses is inline PTX, so the same
// file compiles with nvcc (CI) and NVRTC (CuPy at run time) alike.
#pragma once

// ------------------------------------------------------------------------------------------------
// Vocabulary shared with the Python side: enumerator names and values equal spec.OrderKind,
// spec.ScheduleKind, spec.WorkOrder and spec.DType (tests/cpu/cuda_baseline/test_cuda_compile.py parses this
// header and checks it).
enum class OrderKind : int { LINEAR = 0, SAWTOOTH = 1, REVERSE = 2, BLOCK_PARITY = 3 };
enum class ScheduleKind : int {
    GRID = 0, TILE_X = 1, PERSISTENT = 2, LONGEST_FIRST = 3, SECTIONED_LONGEST_FIRST = 4,
    SNAKE = 5
};
enum class WorkOrder : int { Q_MAJOR = 0, HEAD_MAJOR = 1 };
enum class DType : int { FP16 = 0, BF16 = 1 };

#include "schedule.cuh"   // the CTA scheduler: work items, tile ranges, scan direction

// Everything the kernel reads besides its template parameters. Tensors are [B, H, S, D] with the
// last dimension contiguous; strides are in elements.
struct FwdParams {
    const unsigned short* q;
    const unsigned short* k;
    const unsigned short* v;
    unsigned short* o;
    long long q_sb, q_sh, q_ss;
    long long k_sb, k_sh, k_ss;
    long long v_sb, v_sh, v_ss;
    long long o_sb, o_sh, o_ss;
    int H, H_kv, S_q, S_kv;
    int n_q, n_kv, n_work;        // Q tiles per head, K/V tiles per head, B * H * n_q
    int tiles_per_cta;            // X of the tile-X schedule
    int section;                  // G, heads per L2 section of the sectioned longest-first grid
    int sawtooth_group;           // group factor X of the sawtooth order
    float scale_log2;             // log2(e) / sqrt(D)
    // Trace build only. Per recorded step (every trace_every-th step of the CTA, counting from
    // its first: record r is step r * trace_every): visits [n_ctas, trace_steps, 4] (b, h,
    // q_tile, kv_tile) and %globaltimer at the step's start [n_ctas, trace_steps]. Stamping
    // every step perturbs the timing it measures (thread 0 reads the timer and stores 24 bytes
    // per step; the few-CTA linear launches then drift apart and miss 1.4-5.7x the plain
    // build's misses, profiles/h100/tracecost-20261125), so drift is stamped sparsely; the
    // access order needs every step (trace_every = 1). Per CTA, in the same buffers right
    // after the per-step records (so the kernel's parameters, and every non-trace build, stay as
    // they are): trace_visits[4 n_ctas trace_steps + c] = %smid, the SM CTA c ran on;
    // trace_ns[n_ctas trace_steps + c] = %globaltimer when CTA c started (before its first step)
    // and trace_ns[n_ctas (trace_steps + 1) + c] when its thread 0 finished its last work item.
    int* trace_visits;
    unsigned long long* trace_ns;
    int trace_steps;
    int trace_every;
    // Training builds (LSE = true) only: per query row the log-sum-exp of the scaled scores in
    // log2 units, lse[(b H + h) lse_stride + row] (the backward's P = exp2(s scale log2e - lse)).
    float* lse = nullptr;
    int lse_stride = 0;
};

// ------------------------------------------------------------------------------------------------
// Tile geometry, all compile-time.
template <int TILE_M, int TILE_N, int D>
struct FwdShape {
    static_assert(TILE_M % 16 == 0 && TILE_N % 16 == 0, "tiles are made of 16x16 MMA fragments");
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    // Registers per thread for the accumulators of one 16-row slice: S [16, TILE_N] and O [16, D]
    // in fp32 are TILE_N/2 + D/2 registers; the Q fragments [16, D] in 16-bit add D/4.
    static constexpr int ACC_REGS = TILE_N / 2 + D / 2;
    // A warp owning two 16-row slices (MREP = 2) reads each K/V fragment from shared memory once
    // for two MMAs, halving shared-memory traffic per FLOP; it pays with twice the accumulators,
    // so it is used only where they fit with room to spare (128 x 64 tiles at D = 64: 160
    // registers of state). Larger products spill in the persistent builds (checked with
    // -Xptxas -v), and then every warp owns one 16-row slice.
    static constexpr int MREP = (TILE_M % 32 == 0 && TILE_M >= 128 && 2 * ACC_REGS <= 128) ? 2 : 1;
    static constexpr int WARP_M = 16 * MREP;
    static constexpr int WARPS = TILE_M / WARP_M;
    // Occupancy target, given to ptxas through __launch_bounds__. The register file is split over
    // the SM's four sub-partitions (16K registers each, a CTA's warps dealt round robin), so three
    // CTAs of 4 warps, or two of 5, put 3 warps on one sub-partition: 168 registers per thread.
    // Small tiles at D = 64 need about that much; left alone, ptxas lands some of their builds
    // just above and the CTA silently drops to the next occupancy (80 x 80 measured 175 instead of
    // 254 TFLOPS at 177 registers), and linear and sawtooth builds of one shape could differ in
    // occupancy. So they ask for it (and re-read Q, below); every other shape asks for one CTA and
    // gets as many as its registers allow, the same for all its builds (checked in CI).
    static constexpr int MIN_CTAS =
        (D == 64 && TILE_N <= 80 && MREP == 1 && WARPS <= 5) ? (WARPS == 5 ? 2 : 3) : 1;
    // Q fragments stay in registers for the whole scan when accumulators plus Q take at most half
    // of the 255 registers a thread can have and no tighter cap applies; otherwise (two slices
    // per warp, 128-wide K/V tiles at D = 128, the 168-register 80-row kernel) ptxas runs out of
    // room and spills in some causal / persistent builds, so Q is re-read from shared memory at
    // every k-step instead (a quarter more shared-memory reads).
    static constexpr bool Q_IN_REGS = MREP * (ACC_REGS + D / 4) <= 128 && MIN_CTAS == 1;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int NB = TILE_N / 8;     // 8-column blocks of S (mma n = 8)
    static constexpr int KS = D / 16;         // 16-deep k-steps of Q Kᵀ
    static constexpr int DB = D / 8;          // 8-column blocks of O
    static constexpr int PS = TILE_N / 16;    // 16-deep k-steps of P V
    static constexpr int Q_BYTES = TILE_M * D * 2;
    static constexpr int KV_BYTES = TILE_N * D * 2;
    // Shared memory: Q, then K[STAGES], then V[STAGES]; SMEM_BYTES is the default double buffer.
    static constexpr int STAGE_BYTES = 2 * KV_BYTES;   // one K and one V buffer
    static constexpr int SMEM_BYTES = Q_BYTES + 4 * KV_BYTES;
};

// K/V pipeline depth: the default (double buffer) and the depths the family builds. The default
// keeps the flash_fwd entry point (flash_fwd.cu); other depths are flash_fwd_staged<..., STAGES>.
constexpr int DEFAULT_STAGES = 2;
constexpr int MAX_STAGES = 4;
template <int TILE_M, int TILE_N, int D, int STAGES>
constexpr int fwd_smem_bytes() {
    return FwdShape<TILE_M, TILE_N, D>::Q_BYTES + STAGES * FwdShape<TILE_M, TILE_N, D>::STAGE_BYTES;
}

// ------------------------------------------------------------------------------------------------
// PTX wrappers.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte global -> shared copy that skips L1 (.cg); src_bytes = 0 writes zeros (rows past S).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// C[16x8] += A[16x16] * B[16x8], fp32 accumulators.
template <DType DT>
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
    if constexpr (DT == DType::FP16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// The products of one ldmatrix_x4 B operand, which holds two 8-column blocks (b0, b1 and b2, b3):
// acc[2p] += A * (b0, b1) and acc[2p+1] += A * (b2, b3), for one A fragment or for each of the
// MREP fragments of a warp's row slices.
template <DType DT, int N>
__device__ __forceinline__ void mma_b_pair(float (&acc)[N][4], int p, const unsigned (&a)[4],
                                           const unsigned (&b)[4]) {
    mma_16816<DT>(acc[2 * p], a, b[0], b[1]);
    mma_16816<DT>(acc[2 * p + 1], a, b[2], b[3]);
}
template <DType DT, int MREP, int N>
__device__ __forceinline__ void mma_b_pair(float (&acc)[MREP][N][4], int p,
                                           const unsigned (&a)[MREP][4], const unsigned (&b)[4]) {
#pragma unroll
    for (int mi = 0; mi < MREP; ++mi) mma_b_pair<DT>(acc[mi], p, a[mi], b);
}

// Two floats -> one register of two 16-bit values, lo in the low half (round to nearest).
template <DType DT>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    if constexpr (DT == DType::FP16) {
        asm("cvt.rn.f16x2.f32 %0, %2, %1;\n" : "=r"(r) : "f"(lo), "f"(hi));
    } else {
        asm("cvt.rn.bf16x2.f32 %0, %2, %1;\n" : "=r"(r) : "f"(lo), "f"(hi));
    }
    return r;
}

__device__ __forceinline__ float fast_exp2(float x) {   // 2^x, flushes denormals; exp2(-inf) = 0
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned sm_id() {   // the SM this thread runs on
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ float fast_log2(float x) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// ------------------------------------------------------------------------------------------------
// Shared-memory layout of a [rows, D] 16-bit tile: rows of D*2 bytes, each split in 16-byte chunks.
// An ldmatrix reads one 16-byte chunk from each of 8 consecutive rows; unswizzled, those 8 chunks
// sit in the same 4 banks (the row pitch is a multiple of 128 B) and serialise 8 ways. XOR-ing the
// chunk index with (row mod 8) spreads them over all 32 banks; cp.async writes use the same map.
template <int D>
__device__ __forceinline__ unsigned swizzle(int row, int chunk) {   // byte offset in the tile
    return static_cast<unsigned>(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

// The ldmatrix addresses of one lane differ between k-steps only in the chunk bits: chunk
// 2*ks + c (c in {0,1}) swizzles to ((c ^ row%8) ^ 2*ks), and the row part of the offset is a
// multiple of the row pitch, so a lane keeps one offset and XORs the k-step in (an immediate)
// instead of holding one address register per k-step.
__device__ __forceinline__ unsigned kstep(unsigned lane_off, int ks) {
    return lane_off ^ static_cast<unsigned>(ks << 5);
}

// Issue the asynchronous copy of a [ROWS, D] tile whose first row is `g`; rows >= rows_valid are
// zero-filled (so padding keys score 0 and padding values are 0, never stale shared memory).
// Consecutive threads take consecutive 16-byte chunks of a row: fully coalesced 128-byte lines.
// A thread always copies the same chunk column, of rows row0, row0 + RPP, row0 + 2 RPP, ...
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile_async(unsigned dst, const unsigned short* g,
                                                long long row_stride, int rows_valid) {
    constexpr int CHUNKS_PER_ROW = D / 8;
    constexpr int RPP = THREADS / CHUNKS_PER_ROW;   // rows per pass of the whole CTA
    static_assert(THREADS % CHUNKS_PER_ROW == 0, "a pass covers whole rows");
    const int row0 = static_cast<int>(threadIdx.x) / CHUNKS_PER_ROW;
    const int chunk = static_cast<int>(threadIdx.x) % CHUNKS_PER_ROW;
    const unsigned short* src = g + row0 * row_stride + chunk * 8;
#pragma unroll
    for (int i = 0; i < (ROWS + RPP - 1) / RPP; ++i) {
        const int row = row0 + i * RPP;
        if (ROWS % RPP == 0 || row < ROWS) {
            const bool valid = row < rows_valid;
            cp_async_16(dst + swizzle<D>(row, chunk), valid ? src : g, valid ? 16 : 0);
        }
        src += RPP * row_stride;
    }
}

// ------------------------------------------------------------------------------------------------
// One work item: Q tile `q_tile` of batch*head `bh`, all its K/V tiles, O written once.
// `step` is the CTA's step counter over all its work items (trace builds record it).
//
// The K/V pipeline, STAGES buffers deep. Tile t of the scan goes to buffer t % STAGES in a
// cp.async group of its own (K and V of one tile share a group). Before step s computes, the
// CTA waits until at most STAGES-2 groups are in flight (tile s has landed, tiles up to
// s+STAGES-2 may still fly), then a barrier: all warps have left step s-1, so its buffer
// (the one tile s+STAGES-1 goes to) is free, and step s issues that tile before computing.
// Every step commits a group, empty near the end of the scan, so the count stays uniform.
// STAGES = 1 has no lookahead: step s waits for the barrier, issues tile s, waits for all of it.
template <int TILE_M, int TILE_N, int D, bool CAUSAL, DType DT, bool TRACE, int STAGES,
          bool LSE = false>
__device__ __forceinline__ void attend_q_tile(const FwdParams& p, unsigned char* smem, int bh,
                                              int q_tile, bool backward, int& step) {
    using S = FwdShape<TILE_M, TILE_N, D>;
    static_assert(STAGES >= 1 && STAGES <= MAX_STAGES, "1 .. MAX_STAGES K/V buffers");
    constexpr int MREP = S::MREP, NB = S::NB, KS = S::KS, DB = S::DB, PS = S::PS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;   // fragment row group / column pair of this thread

    const int b = bh / p.H, h = bh % p.H, h_kv = h / (p.H / p.H_kv);
    const int q0 = q_tile * TILE_M;
    const int q_rows = min(TILE_M, p.S_q - q0);
    const int n_steps = kv_tiles_of_q_tile<TILE_N, CAUSAL>(q0, q_rows, p.n_kv);
    const unsigned short* qg = p.q + b * p.q_sb + h * p.q_sh + q0 * p.q_ss;
    const unsigned short* kg = p.k + b * p.k_sb + h_kv * p.k_sh;
    const unsigned short* vg = p.v + b * p.v_sb + h_kv * p.v_sh;

    const unsigned sQ = smem_addr(smem);
    const unsigned sK = sQ + S::Q_BYTES;          // K[buf] = sK + buf * KV_BYTES
    const unsigned sV = sK + STAGES * S::KV_BYTES;   // V[buf] = sV + buf * KV_BYTES

    // The scan: K/V tile j0, j0 + dj, ... (forward 0 .. n_steps-1, backward n_steps-1 .. 0).
    const int j0 = backward ? n_steps - 1 : 0, dj = backward ? -1 : 1;
    auto issue_k = [&](int j, int buf) {
        load_tile_async<TILE_N, D, S::THREADS>(sK + buf * S::KV_BYTES, kg + j * TILE_N * p.k_ss,
                                               p.k_ss, p.S_kv - j * TILE_N);
    };
    auto issue_v = [&](int j, int buf) {
        load_tile_async<TILE_N, D, S::THREADS>(sV + buf * S::KV_BYTES, vg + j * TILE_N * p.v_ss,
                                               p.v_ss, p.S_kv - j * TILE_N);
    };

    __syncthreads();   // the previous work item is done with every shared-memory buffer
    load_tile_async<TILE_M, D, S::THREADS>(sQ, qg, p.q_ss, q_rows);
    issue_k(j0, 0);
    issue_v(j0, 0);
    cp_async_commit();
    if constexpr (STAGES > 2) {   // tiles 1 .. STAGES-2 in flight before the first step
#pragma unroll
        for (int ahead = 1; ahead < STAGES - 1; ++ahead) {
            if (ahead < n_steps) {
                issue_k(j0 + ahead * dj, ahead);
                issue_v(j0 + ahead * dj, ahead);
            }
            cp_async_commit();
        }
    }

    // Per-thread state. Fragment layout of m16n8k16 (g = lane/4, t = lane%4): accumulator
    // element e of an 8-column block sits at row g + 8*(e/2), column 2t + e%2. So each thread holds
    // two rows (r = 0: g, r = 1: g+8) of each 16-row slice mi, and a row's values are spread over
    // the 4 threads of a quad.
    float o_acc[MREP][DB][4];                     // O [WARP_M, D], fp32
    float m_run[MREP][2], l_run[MREP][2];         // running max (raw score units), partial row sum
    unsigned q_frag[S::Q_IN_REGS ? MREP : 1][S::Q_IN_REGS ? KS : 1][4];   // Q [WARP_M, D]
#pragma unroll
    for (int mi = 0; mi < MREP; ++mi) {
#pragma unroll
        for (int r = 0; r < 2; ++r) { m_run[mi][r] = neg_inf(); l_run[mi][r] = 0.f; }
#pragma unroll
        for (int db = 0; db < DB; ++db)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[mi][db][e] = 0.f;
    }
    // ldmatrix address of this lane for the A fragment (Q) of slice mi, k-step ks:
    // lanes 0-15 point at rows 0-15 of chunk 2ks, lanes 16-31 at rows 0-15 of chunk 2ks+1.
    auto q_frag_addr = [&](int mi, int ks) {
        return sQ + kstep(swizzle<D>(warp * S::WARP_M + mi * 16 + lane % 16, lane / 16), ks);
    };
    // B-operand lane offsets (see the ldmatrix comments below): K rows (lane/16)*8 + lane%8 at
    // chunk (lane/8)%2; V rows ((lane/8)%2)*8 + lane%8 at chunk lane/16.
    const unsigned k_lane = swizzle<D>((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
    const unsigned v_lane = swizzle<D>(((lane / 8) % 2) * 8 + lane % 8, lane / 16);

    for (int s = 0, j = j0; s < n_steps; ++s, j += dj) {
        if constexpr (TRACE) {
            if (threadIdx.x == 0 && step % p.trace_every == 0
                && step / p.trace_every < p.trace_steps) {
                const long long at = static_cast<long long>(blockIdx.x) * p.trace_steps
                                     + step / p.trace_every;
                p.trace_ns[at] = global_timer_ns();
                int* rec = p.trace_visits + 4 * at;
                rec[0] = b; rec[1] = h; rec[2] = q_tile; rec[3] = j;
            }
        }
        ++step;
        const int buf = STAGES == 2 ? (s & 1) : s % STAGES;
        if constexpr (STAGES == 1) {   // no lookahead: load tile s once every warp left step s-1
            if (s > 0) {
                __syncthreads();
                issue_k(j, 0);
                issue_v(j, 0);
                cp_async_commit();
            }
        }
        // K/V tile s has landed for this thread's copies; the barrier makes every thread's copies
        // visible and guarantees all warps left step s-1, so its buffer may be overwritten.
        if constexpr (STAGES <= 2) cp_async_wait_all();
        else cp_async_wait_group<STAGES - 2>();
        __syncthreads();
        if constexpr (S::Q_IN_REGS) {
            if (s == 0) {
#pragma unroll
                for (int mi = 0; mi < MREP; ++mi)
#pragma unroll
                    for (int ks = 0; ks < KS; ++ks) ldmatrix_x4(q_frag[mi][ks], q_frag_addr(mi, ks));
            }
        }
        // Prefetch K/V tile s+STAGES-1 into the buffer step s-1 used while this step computes;
        // K now, V after Q Kᵀ (their address registers are then never live together).
        const bool prefetch = STAGES >= 2 && s + STAGES - 1 < n_steps;
        auto next_buf = [&] { return STAGES == 2 ? (buf ^ 1) : (s + STAGES - 1) % STAGES; };
        if (prefetch) issue_k(j + (STAGES - 1) * dj, next_buf());

        // ---- S = Q Kᵀ : [WARP_M, TILE_N] per warp --------------------------------------------
        // B operand (K as "column-major" Kᵀ) straight from K's rows with a non-transposing
        // ldmatrix.x4: matrices (n-block 2np, k lo), (2np, k hi), (2np+1, k lo), (2np+1, k hi).
        float s_acc[MREP][NB][4];
#pragma unroll
        for (int mi = 0; mi < MREP; ++mi)
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 0; e < 4; ++e) s_acc[mi][nb][e] = 0.f;
        const unsigned kbase = sK + buf * S::KV_BYTES;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            unsigned a[MREP][4];   // A operand: Q rows of slice mi, k-step ks
#pragma unroll
            for (int mi = 0; mi < MREP; ++mi) {
                if constexpr (S::Q_IN_REGS) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[mi][e] = q_frag[mi][ks][e];
                } else {
                    ldmatrix_x4(a[mi], q_frag_addr(mi, ks));
                }
            }
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                unsigned bk[4];
                ldmatrix_x4(bk, kbase + np * 16 * (D * 2) + kstep(k_lane, ks));
                mma_b_pair<DT>(s_acc, np, a, bk);
            }
        }

        if (prefetch) issue_v(j + (STAGES - 1) * dj, next_buf());
        if constexpr (STAGES >= 2) cp_async_commit();

        // ---- mask: keys past S_kv, and (causal) keys after the query row -----------------------
        // Only tiles that straddle the end of the sequence or the diagonal pay for it.
        const int k0 = j * TILE_N;
        if (k0 + TILE_N > p.S_kv || (CAUSAL && k0 + TILE_N - 1 > q0)) {
            // Element (mi, nb, e) is key k0 + 2t + [nb*8 + e%2] of query row
            // q0 + warp*WARP_M + g + [mi*16 + 8*(e/2)]: one run-time term and one constant each.
            const int key_left = p.S_kv - (k0 + 2 * t);                       // key < S_kv
            const int diag = q0 + warp * S::WARP_M + g - (k0 + 2 * t);        // key <= row
#pragma unroll
            for (int mi = 0; mi < MREP; ++mi)
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int kc = nb * 8 + (e & 1), rc = mi * 16 + 8 * (e >> 1);
                        if (kc >= key_left || (CAUSAL && kc > diag + rc)) s_acc[mi][nb][e] = neg_inf();
                    }
        }

        // ---- online softmax (fp32): rescale the running state by exp2(m_old - m_new) ---------
#pragma unroll
        for (int mi = 0; mi < MREP; ++mi)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = m_run[mi][r];
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
                    mx = fmaxf(mx, fmaxf(s_acc[mi][nb][2 * r], s_acc[mi][nb][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   // the quad holds the row
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row that has seen only masked keys keeps max -inf: subtract 0 instead, so
                // exp2(-inf - (-inf)) = NaN never happens (reverse causal scans start there).
                const float ref = (mx == neg_inf()) ? 0.f : mx * p.scale_log2;
                const float alpha = fast_exp2(m_run[mi][r] * p.scale_log2 - ref);
                m_run[mi][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 2 * r; e < 2 * r + 2; ++e) {
                        const float pe = fast_exp2(fmaf(s_acc[mi][nb][e], p.scale_log2, -ref));
                        s_acc[mi][nb][e] = pe;
                        sum += pe;
                    }
                l_run[mi][r] = l_run[mi][r] * alpha + sum;   // quad-partial; reduced at the end
#pragma unroll
                for (int db = 0; db < DB; ++db) {
                    o_acc[mi][db][2 * r] *= alpha;
                    o_acc[mi][db][2 * r + 1] *= alpha;
                }
            }

        // ---- O += P V : P from registers, V via ldmatrix.trans ---------------------------------
        // The accumulators of S-blocks 2kk and 2kk+1 are exactly the A fragment of a 16x16 P
        // block. V is stored [TILE_N, D] row-major; the B operand needs it k(=key)-major, which
        // the transposing ldmatrix provides: matrices (keys lo, d-block 2dp), (keys hi, 2dp),
        // (keys lo, 2dp+1), (keys hi, 2dp+1).
        const unsigned vbase = sV + buf * S::KV_BYTES;
#pragma unroll
        for (int kk = 0; kk < PS; ++kk) {
            unsigned a[MREP][4];
#pragma unroll
            for (int mi = 0; mi < MREP; ++mi) {
                a[mi][0] = pack2<DT>(s_acc[mi][2 * kk][0], s_acc[mi][2 * kk][1]);
                a[mi][1] = pack2<DT>(s_acc[mi][2 * kk][2], s_acc[mi][2 * kk][3]);
                a[mi][2] = pack2<DT>(s_acc[mi][2 * kk + 1][0], s_acc[mi][2 * kk + 1][1]);
                a[mi][3] = pack2<DT>(s_acc[mi][2 * kk + 1][2], s_acc[mi][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < DB / 2; ++dp) {
                unsigned bv[4];
                ldmatrix_x4_trans(bv, vbase + kk * 16 * (D * 2) + kstep(v_lane, dp));
                mma_b_pair<DT>(o_acc, dp, a, bv);
            }
        }
    }

    // ---- epilogue: O / l, written straight from registers --------------------------------------
    // Each quad writes 16 contiguous bytes of a row per 8-column block; the blocks of a row fill
    // whole 32-byte sectors, which L2 merges. O is written once per work item, so this store is a
    // vanishing share of the traffic and is not staged through shared memory.
    unsigned short* og = p.o + b * p.o_sb + h * p.o_sh + q0 * p.o_ss;
#pragma unroll
    for (int mi = 0; mi < MREP; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = l_run[mi][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int row = warp * S::WARP_M + mi * 16 + g + 8 * r;
            if constexpr (LSE) {   // +inf for a row with no visible key: its P is 0
                if (t == 0 && row < q_rows)
                    p.lse[static_cast<long long>(bh) * p.lse_stride + q0 + row] =
                        l > 0.f ? fmaf(m_run[mi][r], p.scale_log2, fast_log2(l))
                                : __int_as_float(0x7f800000);
            }
            if (row < q_rows) {
#pragma unroll
                for (int db = 0; db < DB; ++db)
                    *reinterpret_cast<unsigned*>(og + row * p.o_ss + db * 8 + 2 * t) =
                        pack2<DT>(o_acc[mi][db][2 * r] * inv, o_acc[mi][db][2 * r + 1] * inv);
            }
        }
}

// ------------------------------------------------------------------------------------------------
// The kernel body: this CTA's work items (schedule.cuh), one attend_q_tile each.
template <OrderKind ORDER, ScheduleKind SCHEDULE, WorkOrder WORK, int TILE_M, int TILE_N, int D,
          bool CAUSAL, DType DT, bool TRACE, int STAGES, bool LSE = false>
__device__ __forceinline__ void flash_fwd_impl(const FwdParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];   // 128-B aligned: the swizzle's banks
    const int cta = blockIdx.x;
    int step = 0;
    // Trace build: where and when this CTA started (the per-CTA records of FwdParams).
    const long long cta_records = static_cast<long long>(gridDim.x) * p.trace_steps;
    if constexpr (TRACE) {
        if (threadIdx.x == 0) {
            p.trace_ns[cta_records + cta] = global_timer_ns();
            p.trace_visits[4 * cta_records + cta] = static_cast<int>(sm_id());
        }
    }
    // A one-item schedule calls the body directly, not through for_each_work_item's callable:
    // through a lambda the trace builds of the reverse and block-parity orders compile to
    // different SASS (the step counter, captured by reference, is promoted later), and those
    // builds keep the code they were measured with.
    if constexpr (one_item<SCHEDULE>()) {
        const WorkItem w = one_work_item<SCHEDULE>(p.n_q, p.n_work, p.section);
        attend_q_tile<TILE_M, TILE_N, D, CAUSAL, DT, TRACE, STAGES, LSE>(
            p, smem, w.bh, w.q_tile, reversed_for<ORDER>(0, cta, p.sawtooth_group), step);
    } else {
        for_each_work_item<SCHEDULE, WORK>(p.n_q, p.n_work, p.tiles_per_cta, p.section,
                                           [&](int bh, int q_tile, int iter) {
            attend_q_tile<TILE_M, TILE_N, D, CAUSAL, DT, TRACE, STAGES, LSE>(
                p, smem, bh, q_tile, reversed_for<ORDER>(iter, cta, p.sawtooth_group), step);
        });
    }
    if constexpr (TRACE) {
        if (threadIdx.x == 0) p.trace_ns[cta_records + gridDim.x + cta] = global_timer_ns();
    }
}
