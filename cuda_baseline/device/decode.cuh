// Split-K/V decode for Hopper-class GPUs on the sm_80 instruction set (mma.sync, ldmatrix,
// cp.async): the CUDA twin of kernels/device/decode.py, whose docstring is the design. A decode
// call has a few query rows per head (S_q <= 16) over a long K/V cache, so its time is the
// cache's bytes over the bandwidth the launch draws; everything below serves reading each K/V
// byte once, with enough bytes in flight per SM to cover the memory latency.
//
//   * Group packing. A CTA takes one K/V head and HG query heads of its GQA group times their
//     S_q rows (padded to SQP), packed as the M = HG * SQP rows (16, 32 or 64) of one Q tile,
//     so every K/V tile it loads serves the whole group: one read where a per-head kernel reads
//     the group's K/V G times. Packed row m is query head h0 + m / SQP, query row m % SQP; rows
//     with m % SQP >= S_q are zeros and never stored.
//   * Split K/V. The grid is splits x (B * H_kv * G / HG) CTAs (flattened: CTA = unit * splits +
//     split); split s scans the contiguous chunk [s * chunk, (s + 1) * chunk) of K/V tiles of the
//     cache capacity, clipped to the keys its rows see, and writes an fp32 partial output
//     normalised by its own sum and the log-sum-exp in log2 units (m * scale_log2 + log2 l); a
//     split that saw no key writes -inf and zeros. decode_combine merges them through their LSEs.
//     With one split (SPLIT false) the kernel writes the output itself.
//   * Inside a CTA the 8 warps tile [M rows] x [TILE_N keys] as WM = M / 16 row slices times
//     KW = 8 / WM key slices: each warp runs its own online softmax over its key slice of every
//     tile (S [16, TILE_N / KW] and O [16, D] in registers, P fed to P V from registers as in
//     flash_fwd.cuh), and the KW partial states of a row are merged once at the end through
//     shared memory (the K/V buffers, free by then). Splitting keys rather than rows keeps all
//     8 warps busy at M = 16, where a row split would leave one warp to issue every MMA.
//   * K/V streaming. K and V tiles of TILE_N keys (32 KB each at the host's 16384 / D keys) go
//     through DECODE_STAGES = 3 shared-memory buffers by cp.async.cg (L1 bypassed, each byte is
//     read once): while the warps compute on tile s, tiles s+1 and s+2 (128 KB) are in flight,
//     about three times what one SM's share of HBM bandwidth times latency needs. 208 KB of
//     shared memory: one CTA per SM, the slots the host's work model fills.
//   * Masks. Keys at or beyond the sequence's length L (kv_len[b] clamped to [0, S_kv]; S_kv
//     when kv_len is null) are copied as zeros (cp.async src-size 0: a cache slot past the length
//     may hold NaN, and 0 * NaN would poison the accumulator) and their scores set to -inf.
//     CAUSAL without BOTTOM_RIGHT is SDPA's top-left is_causal (row r sees keys 0..r); with it,
//     FlashAttention's kvcache alignment (row r sees keys 0..L-S_q+r). Only tiles reaching past
//     the keys every real row sees pay for the mask. A row whose running maximum stays -inf saw no
//     key: its exp2 reference is 0 (no -inf - -inf), its sum 0, and it is written dead.
#pragma once

#include "flash_fwd.cuh"   // PTX wrappers, DType, swizzle, load_tile_async, mma_16816, pack2

constexpr int DECODE_STAGES = 3;
constexpr int DECODE_WARPS = 8;

template <int D, int TILE_N, int HG, int SQP>
struct DecodeShape {
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static constexpr int M = HG * SQP;
    static_assert(M == 16 || M == 32 || M == 64, "packed rows: 16, 32 or 64");
    static_assert((SQP & (SQP - 1)) == 0 && (HG & (HG - 1)) == 0, "powers of two");
    static constexpr int THREADS = 32 * DECODE_WARPS;
    static constexpr int WM = M / 16;                  // warps along the packed rows
    static constexpr int KW = DECODE_WARPS / WM;       // warps along the keys of a tile
    static constexpr int KEYS_W = TILE_N / KW;         // keys of one warp per tile
    static_assert(TILE_N % (16 * KW) == 0, "each warp's key slice is whole 16-key k-steps");
    static constexpr int NB = KEYS_W / 8;              // 8-column blocks of S per warp
    static constexpr int KS = D / 16;                  // 16-deep k-steps of Q Kᵀ
    static constexpr int DB = D / 8;                   // 8-column blocks of O
    static constexpr int PS = KEYS_W / 16;             // 16-deep k-steps of P V
    static constexpr int Q_BYTES = M * D * 2;
    static constexpr int KV_BYTES = TILE_N * D * 2;    // one K (or V) tile
    static constexpr int SMEM_BYTES = Q_BYTES + DECODE_STAGES * 2 * KV_BYTES;
    // The end-of-scan merge of the KW warps of a row, in the K/V buffers: O [KW][M][D + 4]
    // (4 floats of padding: the eight rows a warp writes at once start in different banks), then
    // the maxima [KW][M] and the sums [KW][M].
    static constexpr int RED_PITCH = D + 4;
    static constexpr int RED_BYTES = KW * M * (RED_PITCH + 2) * 4;
    static_assert(RED_BYTES <= DECODE_STAGES * 2 * KV_BYTES, "the merge fits the K/V buffers");
};

// Everything the split kernel reads besides its template parameters (strides in elements).
struct DecodeParams {
    const unsigned short* q;
    const unsigned short* k;
    const unsigned short* v;
    unsigned short* o;            // the output [B, H, S_q, D] (one split)
    const int* kv_len;            // int32 [B] or null (every sequence S_kv long)
    float* opart;                 // fp32 [splits, B, H, S_q, D] (SPLIT)
    float* lpart;                 // fp32 [splits, B, H, S_q], log2 units (SPLIT)
    long long q_sb, q_sh, q_ss;
    long long k_sb, k_sh, k_ss;
    long long v_sb, v_sh, v_ss;
    long long o_sb, o_sh, o_ss;
    int B, H, H_kv, S_q, S_kv;
    int n_hc;                     // CTAs per K/V head and split: G / HG
    int splits;
    int chunk;                    // K/V tiles per split: ceil(n_tiles / splits)
    float scale_log2;             // log2(e) * scale
};

template <int D, int TILE_N, int HG, int SQP, DType DT, bool CAUSAL, bool BOTTOM_RIGHT,
          bool SPLIT>
__device__ __forceinline__ void decode_split_impl(const DecodeParams& p) {
    using S = DecodeShape<D, TILE_N, HG, SQP>;
    static_assert(CAUSAL || !BOTTOM_RIGHT, "bottom-right alignment is a causal mask");
    constexpr int M = S::M, KW = S::KW, NB = S::NB, KS = S::KS, DB = S::DB, PS = S::PS;
    constexpr int STAGES = DECODE_STAGES;
    extern __shared__ __align__(128) unsigned char smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;         // fragment row group / column pair
    const int mw = warp % S::WM, kw = warp / S::WM;

    const int split = blockIdx.x % p.splits;
    const int unit = blockIdx.x / p.splits;
    const int per_b = p.H_kv * p.n_hc;
    const int b = unit / per_b, hu = unit % per_b;
    const int kvh = hu / p.n_hc, h0 = hu * HG;   // the K/V head; the first packed query head

    const int L = p.kv_len == nullptr ? p.S_kv : min(max(p.kv_len[b], 0), p.S_kv);
    const int off = BOTTOM_RIGHT ? L - p.S_q : 0;          // row r sees keys 0 .. off + r
    const int kend = CAUSAL ? min(L, off + p.S_q) : L;     // keys any real row sees
    const int full = CAUSAL ? min(L, off + 1) : L;         // keys every real row sees
    const int t0 = split * p.chunk;
    const int t1 = min(t0 + p.chunk, (max(kend, 0) + TILE_N - 1) / TILE_N);
    const int n_steps = max(t1 - t0, 0);

    const unsigned sQ = smem_addr(smem);
    const unsigned sK = sQ + S::Q_BYTES;                   // K[buf] = sK + buf * KV_BYTES
    const unsigned sV = sK + STAGES * S::KV_BYTES;         // V[buf] = sV + buf * KV_BYTES
    const unsigned short* kg = p.k + b * p.k_sb + kvh * p.k_sh;
    const unsigned short* vg = p.v + b * p.v_sb + kvh * p.v_sh;
    auto issue = [&](int step, int buf) {    // K/V tile t0 + step; rows from L on are zeros
        const int k0 = (t0 + step) * TILE_N;
        load_tile_async<TILE_N, D, S::THREADS>(sK + buf * S::KV_BYTES, kg + k0 * p.k_ss, p.k_ss,
                                               L - k0);
        load_tile_async<TILE_N, D, S::THREADS>(sV + buf * S::KV_BYTES, vg + k0 * p.v_ss, p.v_ss,
                                               L - k0);
    };

    if (n_steps > 0) {
        // The packed Q tile: row m is query head h0 + m / SQP, row m % SQP (zeros past S_q).
        constexpr int CPR = D / 8;                         // 16-byte chunks per row
        constexpr int PASSES = (M * CPR + S::THREADS - 1) / S::THREADS;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            const int idx = static_cast<int>(threadIdx.x) + i * S::THREADS;
            if (M * CPR % S::THREADS == 0 || idx < M * CPR) {
                const int row = idx / CPR, c = idx % CPR, r = row % SQP;
                const bool valid = r < p.S_q;
                const unsigned short* src = p.q + b * p.q_sb + (h0 + row / SQP) * p.q_sh
                                            + (valid ? r : 0) * p.q_ss + c * 8;
                cp_async_16(sQ + swizzle<D>(row, c), src, valid ? 16 : 0);
            }
        }
        issue(0, 0);
        cp_async_commit();
#pragma unroll
        for (int ahead = 1; ahead < STAGES - 1; ++ahead) {
            if (ahead < n_steps) issue(ahead, ahead);
            cp_async_commit();
        }
    }

    // Per-thread state (m16n8k16 layout: this thread holds rows g and g + 8 of its warp's
    // 16-row slice, a row's values spread over the 4 threads of a quad).
    float o_acc[DB][4];
    float m_run[2], l_run[2];            // running max (raw score units), quad-partial sum
    unsigned q_frag[KS][4];
    int lim[2];                          // causal: the last key each of the two rows sees
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        m_run[r] = neg_inf();
        l_run[r] = 0.f;
        lim[r] = off + ((mw * 16 + g + 8 * r) % SQP);
    }
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[db][e] = 0.f;
    const unsigned k_lane = swizzle<D>((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
    const unsigned v_lane = swizzle<D>(((lane / 8) % 2) * 8 + lane % 8, lane / 16);
    const int key_w = kw * S::KEYS_W;    // this warp's first key within a tile

    for (int s = 0; s < n_steps; ++s) {
        const int buf = s % STAGES;
        // Tile s has landed (at most STAGES-2 later groups in flight); the barrier makes every
        // thread's copies visible and frees the buffer step s-1 used.
        cp_async_wait_group<STAGES - 2>();
        __syncthreads();
        if (s == 0) {
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
                ldmatrix_x4(q_frag[ks],
                            sQ + kstep(swizzle<D>(mw * 16 + lane % 16, lane / 16), ks));
        }
        if (s + STAGES - 1 < n_steps) issue(s + STAGES - 1, (s + STAGES - 1) % STAGES);
        cp_async_commit();               // every step commits a group (empty at the end)

        // ---- S = Q Kᵀ over this warp's keys [16, KEYS_W] ------------------------------------
        float s_acc[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int e = 0; e < 4; ++e) s_acc[nb][e] = 0.f;
        const unsigned kbase = sK + buf * S::KV_BYTES + key_w * (D * 2);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                unsigned bk[4];
                ldmatrix_x4(bk, kbase + np * 16 * (D * 2) + kstep(k_lane, ks));
                mma_16816<DT>(s_acc[2 * np], q_frag[ks], bk[0], bk[1]);
                mma_16816<DT>(s_acc[2 * np + 1], q_frag[ks], bk[2], bk[3]);
            }

        // ---- mask: keys from L on, and (causal) keys after the row's last ------------------
        const int tile0 = (t0 + s) * TILE_N;
        if (tile0 + TILE_N > full) {
            const int k0 = tile0 + key_w + 2 * t;          // key of element (nb 0, e 0)
            const int left = L - k0;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int kc = nb * 8 + (e & 1);
                    if (kc >= left || (CAUSAL && kc > lim[e >> 1] - k0)) s_acc[nb][e] = neg_inf();
                }
        }

        // ---- online softmax (fp32, exp2, the scale folded into scale_log2) -----------------
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = m_run[r];
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
                mx = fmaxf(mx, fmaxf(s_acc[nb][2 * r], s_acc[nb][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ref = (mx == neg_inf()) ? 0.f : mx * p.scale_log2;   // no -inf - -inf
            const float alpha = fast_exp2(m_run[r] * p.scale_log2 - ref);
            m_run[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; ++e) {
                    const float pe = fast_exp2(fmaf(s_acc[nb][e], p.scale_log2, -ref));
                    s_acc[nb][e] = pe;
                    sum += pe;
                }
            l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
            for (int db = 0; db < DB; ++db) {
                o_acc[db][2 * r] *= alpha;
                o_acc[db][2 * r + 1] *= alpha;
            }
        }

        // ---- O += P V over this warp's keys (P from registers, V by ldmatrix.trans) --------
        const unsigned vbase = sV + buf * S::KV_BYTES + key_w * (D * 2);
#pragma unroll
        for (int kk = 0; kk < PS; ++kk) {
            unsigned a[4];
            a[0] = pack2<DT>(s_acc[2 * kk][0], s_acc[2 * kk][1]);
            a[1] = pack2<DT>(s_acc[2 * kk][2], s_acc[2 * kk][3]);
            a[2] = pack2<DT>(s_acc[2 * kk + 1][0], s_acc[2 * kk + 1][1]);
            a[3] = pack2<DT>(s_acc[2 * kk + 1][2], s_acc[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < DB / 2; ++dp) {
                unsigned bv[4];
                ldmatrix_x4_trans(bv, vbase + kk * 16 * (D * 2) + kstep(v_lane, dp));
                mma_16816<DT>(o_acc[2 * dp], a, bv[0], bv[1]);
                mma_16816<DT>(o_acc[2 * dp + 1], a, bv[2], bv[3]);
            }
        }
    }

    // ---- merge the KW key-slice states of each row through shared memory -------------------
    cp_async_wait_all();
    __syncthreads();                     // every warp is done with the K/V buffers
    float* red_o = reinterpret_cast<float*>(smem + S::Q_BYTES);      // [KW][M][RED_PITCH]
    float* red_m = red_o + KW * M * S::RED_PITCH;                    // [KW][M], log2 units
    float* red_l = red_m + KW * M;                                   // [KW][M]
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int at = kw * M + mw * 16 + g + 8 * r;
        if (t == 0) {
            red_m[at] = m_run[r] == neg_inf() ? neg_inf() : m_run[r] * p.scale_log2;
            red_l[at] = l;
        }
#pragma unroll
        for (int db = 0; db < DB; ++db)
            *reinterpret_cast<float2*>(red_o + at * S::RED_PITCH + db * 8 + 2 * t) =
                make_float2(o_acc[db][2 * r], o_acc[db][2 * r + 1]);
    }
    __syncthreads();

    // Each thread finishes 4 consecutive columns of a row at a time: the weight of key slice w
    // is 2^(m_w - m), m the row's maximum over the slices; a row no slice saw (m = -inf) is dead.
    constexpr int C4 = D / 4;
    constexpr int ITEMS = M * C4;
#pragma unroll 2
    for (int i = threadIdx.x; i < ITEMS; i += S::THREADS) {
        const int row = i / C4, c = (i % C4) * 4, r = row % SQP;
        if (r >= p.S_q) continue;
        const int h = h0 + row / SQP;
        float mx = neg_inf();
#pragma unroll
        for (int w = 0; w < KW; ++w) mx = fmaxf(mx, red_m[w * M + row]);
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        float l = 0.f;
        if (mx != neg_inf()) {
#pragma unroll
            for (int w = 0; w < KW; ++w) {
                const float wt = fast_exp2(red_m[w * M + row] - mx);   // exp2(-inf) = 0
                const float4 ow = *reinterpret_cast<const float4*>(
                    red_o + (w * M + row) * S::RED_PITCH + c);
                l = fmaf(wt, red_l[w * M + row], l);
                o.x = fmaf(wt, ow.x, o.x);
                o.y = fmaf(wt, ow.y, o.y);
                o.z = fmaf(wt, ow.z, o.z);
                o.w = fmaf(wt, ow.w, o.w);
            }
        }
        const bool dead = !(l > 0.f);
        const float inv = dead ? 0.f : 1.f / l;
        o.x *= inv; o.y *= inv; o.z *= inv; o.w *= inv;
        if constexpr (SPLIT) {
            const long long at =
                ((static_cast<long long>(split) * p.B + b) * p.H + h) * p.S_q + r;
            *reinterpret_cast<float4*>(p.opart + at * D + c) = o;
            if (c == 0) p.lpart[at] = dead ? neg_inf() : mx + fast_log2(l);
        } else {
            unsigned short* og = p.o + b * p.o_sb + h * p.o_sh + r * p.o_ss + c;
            *reinterpret_cast<uint2*>(og) = make_uint2(pack2<DT>(o.x, o.y), pack2<DT>(o.z, o.w));
        }
    }
}

// Merge the splits of one (b, h): out = Σ 2^(lse_s - m) o_s / Σ 2^(lse_s - m), m = max_s lse_s;
// a split with lse = -inf weighs 0 and a row no split saw is 0. Each thread takes 4 columns of a
// row; the partials are read once and are a vanishing share of the
// traffic next to the cache: splits * S_q * D * 4 bytes per head against S_kv * D * 4 / G.
template <int D, DType DT>
__device__ __forceinline__ void decode_combine_impl(const float* __restrict__ opart,
                                                    const float* __restrict__ lpart,
                                                    unsigned short* o, long long o_sb,
                                                    long long o_sh, long long o_ss, int B, int H,
                                                    int S_q, int splits) {
    constexpr int C4 = D / 4;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const long long plane = static_cast<long long>(B) * H * S_q;   // rows of one split
    for (int i = threadIdx.x; i < S_q * C4; i += blockDim.x) {
        const int r = i / C4, c = (i % C4) * 4;
        const long long row = static_cast<long long>(bh) * S_q + r;
        float mx = neg_inf();
        for (int s = 0; s < splits; ++s) mx = fmaxf(mx, lpart[s * plane + row]);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        float l = 0.f;
        if (mx != neg_inf()) {
#pragma unroll 4
            for (int s = 0; s < splits; ++s) {
                const float ls = lpart[s * plane + row];
                if (ls == neg_inf()) continue;
                const float w = fast_exp2(ls - mx);
                const float4 os =
                    *reinterpret_cast<const float4*>(opart + (s * plane + row) * D + c);
                l += w;
                acc.x = fmaf(w, os.x, acc.x);
                acc.y = fmaf(w, os.y, acc.y);
                acc.z = fmaf(w, os.z, acc.z);
                acc.w = fmaf(w, os.w, acc.w);
            }
        }
        const float inv = l > 0.f ? 1.f / l : 0.f;
        unsigned short* og = o + b * o_sb + h * o_sh + r * o_ss + c;
        *reinterpret_cast<uint2*>(og) = make_uint2(pack2<DT>(acc.x * inv, acc.y * inv),
                                                   pack2<DT>(acc.z * inv, acc.w * inv));
    }
}
