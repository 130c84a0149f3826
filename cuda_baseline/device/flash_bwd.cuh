// Split-KV FlashAttention backward for Hopper-class GPUs on the sm_80 instruction set, the twin of
// flash_fwd.cuh (its PTX wrappers, swizzle and tile copies are reused). Three kernels per call:
//
//   flash_bwd_delta  Δ = rowsum(dO ∘ O) in fp32, one value per query row; zeroes the fp32 dQ
//                    accumulator.
//   flash_bwd_dkdv   one work item = one K/V tile of one K/V head (and one chunk of its group of
//                    query heads): K_j, V_j stay in shared memory while the CTA streams every Q,
//                    dO, LSE and Δ tile the K/V tile is visible to (double-buffered cp.async);
//                    dK_j, dV_j accumulate in registers; dQ_i += dS K_j goes to an fp32 buffer by
//                    vector reductions (red.global.add), one per 8 bytes (16 with BWD_DQ_V4).
//   flash_bwd_dq     dQ = scale · dQaccum, converted to 16-bit.
//
// The locality argument. A K/V tile is read once per work item; the Q-side stream (Q, dO: twice
// the bytes of the forward's K/V stream per step, plus LSE and Δ) is what concurrent CTAs of one
// head share in L2. A CTA owning several work items (persistent schedule) can walk the Q tiles of
// alternate items in opposite directions (the sawtooth, spec ScanOrder.reversed_for), as the
// forward alternates its K/V scan, so the tail of one scan is the head of the next.
//
// Warp layout. Warp w owns keys 16w .. 16w+15 of the K/V tile (TILE_N = 16 · warps). It computes
// Sᵀ = K_w Qᵀ [16 keys, TILE_M queries] directly (A = K rows, B = Q rows: the forward's Q Kᵀ with
// the roles swapped), so Pᵀ and dSᵀ are born in the accumulator layout that is the A operand of
// dV += Pᵀ dO and dK += dSᵀ Q: neither P nor dS goes through shared memory for those products
// (FlashAttention 2 stages both). Only dS is staged, once, for dQ = dS K, whose warps split the
// query rows (and D when there are more warps than 16-row query slices).
#pragma once

#include "flash_fwd.cuh"

struct BwdParams {
    const unsigned short* q;
    const unsigned short* k;
    const unsigned short* v;
    const unsigned short* dout;
    const float* lse;        // [B*H, lse_stride]: rows padded to 16 B, log2-domain log-sum-exp of the scaled scores
    const float* delta;      // [B*H, lse_stride]: rowsum(dO ∘ O)
    float* dq_acc;           // [B, H, S_q, D] fp32, zeroed before the launch
    void* dk;                // [B, H_kv, S_kv, D] 16-bit, or fp32 partials [B, H_kv*n_chunks, S_kv, D]
    void* dv;
    long long q_sb, q_sh, q_ss;
    long long k_sb, k_sh, k_ss;
    long long v_sb, v_sh, v_ss;
    long long do_sb, do_sh, do_ss;
    int H, H_kv, S_q, S_kv;
    int n_q, n_kv, n_work;   // Q tiles per head, K/V tiles per head, B * H_kv * n_chunks * n_kv
    int heads_per_cta;       // query heads of a K/V head's group one work item covers
    int n_chunks;            // (H / H_kv) / heads_per_cta; > 1: dK, dV are fp32 partials
    int sawtooth_group;
    int lse_stride;
    float scale_log2;        // scale · log2(e)
    float scale;
    // Trace build only (flash_bwd_dkdv_trace; the fields after the ones every build reads, so
    // the other builds' parameters and code stay as they are): per CTA and step of its scan, the
    // (b, query head, Q tile, K/V tile) it reads, trace_visits[4 (cta trace_steps + step) + i],
    // steps past trace_steps not recorded: the layout of spec.Visits.table().
    int* trace_visits = nullptr;
    int trace_steps = 0;
};

// Opt-in build options of flash_bwd_dkdv (its last template parameter, a bit set; 0 = the default
// build). BWD_ONE_PART: at D = 128, the whole Q tile in one part (QP = TILE_M), so the A
// fragments of K_w and V_w are read from shared memory once per step instead of once per part.
// BWD_DQ_V4: dQ reduced by 16-byte red.global.add.v4.f32 (lane pairs swap one row's pair so that
// each lane holds four consecutive columns): half the reduction instructions of .v2.
// BWD_DQ_SQUARE: at D = 64, dQ = dS K with twice the query slices per warp and half the columns,
// so each K fragment a warp reads serves two slices: 32 ldmatrix per warp and step instead of
// 40. No effect at D = 128, where the second slice's dS fragments do not fit beside dK and dV.
constexpr int BWD_ONE_PART = 1;
constexpr int BWD_DQ_V4 = 2;
constexpr int BWD_DQ_SQUARE = 4;

template <int TILE_M, int TILE_N, int D, int OPT = 0>
struct BwdShape {
    static_assert(TILE_M % 64 == 0 && TILE_N % 16 == 0, "TILE_M a multiple of 64 (the dS "
                  "swizzle), TILE_N of 16");
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static constexpr int WARPS = TILE_N / 16;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int KS = D / 16;         // k-steps of K Qᵀ, V dOᵀ
    static constexpr int DB = D / 8;          // 8-column blocks of dK, dV
    // Query parts per step (each QP queries): 2 at D = 128, where the dK and dV accumulators
    // leave no room for scores and dP of all TILE_M queries at once.
    static constexpr int QP = D == 128 && !(OPT & BWD_ONE_PART) ? 32 : 64;
    static constexpr int QPARTS = TILE_M / QP;
    static constexpr int PK = TILE_N / 16;    // k-steps of dS K
    // dQ = dS K: QSL 16-row query slices; warps split them, then D.
    static constexpr int QSL = TILE_M / 16;
    static constexpr int QPW1 = QSL > WARPS ? QSL / WARPS : 1;
    static constexpr int QPW = (OPT & BWD_DQ_SQUARE) && D == 64 ? 2 * QPW1 : QPW1;   // per warp
    static constexpr int QGROUPS = QSL / QPW;                           // warps along queries
    static constexpr int DSPLIT = WARPS / QGROUPS;                      // D parts
    static constexpr int DBW = DB / DSPLIT;                             // 8-column blocks per warp
    static_assert(QSL % QPW == 0 && WARPS % QGROUPS == 0 && DB % DSPLIT == 0,
                  "warps tile the dQ product");
    static_assert(DBW % 2 == 0, "a warp's dQ columns come in 16-column ldmatrix pairs");
    static constexpr int KV_BYTES = TILE_N * D * 2;
    static constexpr int Q_BYTES = TILE_M * D * 2;
    static constexpr int ROW_BYTES = TILE_M * 4;                   // LSE or Δ of one Q tile
    // K, V, then per stage (2): Q, dO, LSE, Δ; then dSᵀ [TILE_N, TILE_M] 16-bit.
    static constexpr int STAGE_BYTES = 2 * Q_BYTES + 2 * ROW_BYTES;
    static constexpr int DS_BYTES = TILE_N * TILE_M * 2;
    static constexpr int SMEM_BYTES = 2 * KV_BYTES + 2 * STAGE_BYTES + DS_BYTES;
};

// 16- and 8-byte vectors (no CUDA header is included: NVRTC and nvcc build the same text).
struct alignas(16) U4 { unsigned x, y, z, w; };
struct alignas(16) F4 { float x, y, z, w; };
struct alignas(8) F2 { float x, y; };

template <DType DT>
__device__ __forceinline__ float to_float(unsigned short x) {
    if constexpr (DT == DType::FP16) {
        float r;
        asm("cvt.f32.f16 %0, %1;\n" : "=f"(r) : "h"(x));
        return r;
    } else {
        return __uint_as_float(static_cast<unsigned>(x) << 16);
    }
}

// A 16-byte fp32 reduction when `ok` (a predicated instruction, not a branch).
__device__ __forceinline__ void red_add_v4_if(bool ok, float* addr, float a, float b, float c,
                                              float d) {
#if __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
                 " @p red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n"
                 ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d), "r"(static_cast<int>(ok))
                 : "memory");
#else
    if (ok) {
        asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(a) : "memory");
        asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr + 1), "f"(b) : "memory");
        asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr + 2), "f"(c) : "memory");
        asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr + 3), "f"(d) : "memory");
    }
#endif
}

__device__ __forceinline__ void red_add_v2(float* addr, float a, float b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
#else
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(a) : "memory");
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr + 1), "f"(b) : "memory");
#endif
}

// One float of LSE or Δ by a 4-byte cp.async (.ca: the only kind that copies 4 bytes); zero past
// the end of the rows. The rows are [B*H, S_q] with no padding, so not 16-byte aligned.
__device__ __forceinline__ void cp_async_4(unsigned dst, const float* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0));
}

// ------------------------------------------------------------------------------------------------
// One work item of flash_bwd_dkdv: K/V tile `kv_tile` of K/V head `bh_kv` (= b * H_kv + h_kv),
// query heads chunk * heads_per_cta .. of its group, their Q tiles in the scan direction given.
// `step` is the CTA's step counter over all its work items (trace builds record it, as the
// forward's attend_q_tile does).
template <int TILE_M, int TILE_N, int D, bool CAUSAL, DType DT, int OPT, bool TRACE>
__device__ __forceinline__ void dkdv_tile(const BwdParams& p, unsigned char* smem, int bh_kv,
                                          int chunk, int kv_tile, bool backward, int& step) {
    using S = BwdShape<TILE_M, TILE_N, D, OPT>;
    constexpr int KS = S::KS, DB = S::DB;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int b = bh_kv / p.H_kv, h_kv = bh_kv % p.H_kv;
    const int group = p.H / p.H_kv;
    const int h_first = h_kv * group + chunk * p.heads_per_cta;
    const int k0 = kv_tile * TILE_N;
    // Q tiles that see this K/V tile: i_first .. n_q - 1
    const int i_first = first_q_tile_of_kv_tile<TILE_M, CAUSAL>(k0, p.n_q);
    const int per_head = p.n_q - i_first;
    const int n_steps = per_head * p.heads_per_cta;

    const unsigned sK = smem_addr(smem);
    const unsigned sV = sK + S::KV_BYTES;
    const unsigned sStage = sV + S::KV_BYTES;   // stage st: Q, dO, LSE, Δ
    const unsigned sdS = sStage + 2 * S::STAGE_BYTES;

    // Step s of the scan -> (query head, Q tile).
    auto head_of = [&](int s) { return h_first + (backward ? n_steps - 1 - s : s) / per_head; };
    auto tile_of = [&](int s) { return i_first + (backward ? n_steps - 1 - s : s) % per_head; };
    auto issue_q = [&](int s, int st) {
        const int h = head_of(s), q0 = tile_of(s) * TILE_M;
        const unsigned base = sStage + st * S::STAGE_BYTES;
        load_tile_async<TILE_M, D, S::THREADS>(base, p.q + b * p.q_sb + h * p.q_sh + q0 * p.q_ss,
                                               p.q_ss, p.S_q - q0);
        load_tile_async<TILE_M, D, S::THREADS>(base + S::Q_BYTES,
                                               p.dout + b * p.do_sb + h * p.do_sh + q0 * p.do_ss,
                                               p.do_ss, p.S_q - q0);
        const long long row = static_cast<long long>(b * p.H + h) * p.lse_stride + q0;
        const int tid = threadIdx.x;
        static_assert(2 * TILE_M <= S::THREADS, "one thread per LSE and per Δ value");
        if (tid < TILE_M) {
            const bool ok = q0 + tid < p.S_q;
            cp_async_4(base + 2 * S::Q_BYTES + 4 * tid, p.lse + row + (ok ? tid : 0), ok);
        } else if (tid < 2 * TILE_M) {
            const int i = tid - TILE_M;
            const bool ok = q0 + i < p.S_q;
            cp_async_4(base + 2 * S::Q_BYTES + S::ROW_BYTES + 4 * i,
                       p.delta + row + (ok ? i : 0), ok);
        }
    };

    __syncthreads();   // the previous work item is done with every shared-memory buffer
    load_tile_async<TILE_N, D, S::THREADS>(sK, p.k + b * p.k_sb + h_kv * p.k_sh + k0 * p.k_ss,
                                           p.k_ss, p.S_kv - k0);
    load_tile_async<TILE_N, D, S::THREADS>(sV, p.v + b * p.v_sb + h_kv * p.v_sh + k0 * p.v_ss,
                                           p.v_ss, p.S_kv - k0);
    if (n_steps > 0) issue_q(0, 0);
    cp_async_commit();

    float dk[DB][4], dv[DB][4];
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
        for (int e = 0; e < 4; ++e) { dk[db][e] = 0.f; dv[db][e] = 0.f; }

    // Lane offsets: A fragments of this warp's 16 K (V) rows; B fragments from Q/dO rows
    // (non-transposed, as K in the forward) and from Q/dO/K rows transposed (as V in the forward).
    const unsigned a_lane = swizzle<D>(warp * 16 + lane % 16, lane / 16);
    const unsigned k_lane = swizzle<D>((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
    const unsigned v_lane = swizzle<D>(((lane / 8) % 2) * 8 + lane % 8, lane / 16);
    // dQ: this warp's query slices and D columns; A = dS (transposed read of dSᵀ).
    const int qs0 = (warp % S::QGROUPS) * S::QPW;
    const int dpart = warp / S::QGROUPS;
    const unsigned ds_lane = swizzle<TILE_M>((lane / 16) * 8 + lane % 8, (lane / 8) % 2);

    for (int s = 0; s < n_steps; ++s) {
        const int st = s & 1;
        const int h = head_of(s), q0 = tile_of(s) * TILE_M;
        if constexpr (TRACE) {
            if (threadIdx.x == 0 && step < p.trace_steps) {
                int* rec = p.trace_visits
                           + 4 * (static_cast<long long>(blockIdx.x) * p.trace_steps + step);
                rec[0] = b; rec[1] = h; rec[2] = tile_of(s); rec[3] = kv_tile;
            }
        }
        ++step;
        cp_async_wait_all();
        __syncthreads();   // tile s visible; every warp left step s-1 (its stage and dS free)
        if (s + 1 < n_steps) issue_q(s + 1, st ^ 1);
        cp_async_commit();
        const unsigned sQ = sStage + st * S::STAGE_BYTES, sdO = sQ + S::Q_BYTES;
        const float* lse_s = reinterpret_cast<const float*>(
            smem + 2 * S::KV_BYTES + st * S::STAGE_BYTES + 2 * S::Q_BYTES);
        const float* dlt_s = lse_s + TILE_M;

        const bool edge = k0 + TILE_N > p.S_kv || q0 + TILE_M > p.S_q
                          || (CAUSAL && k0 + TILE_N - 1 > q0);
        const int key_base = k0 + warp * 16 + g;
        // The Q tile in QPARTS parts of QP queries: the score and dP accumulators of one part
        // are live at a time (at D = 128 the dK, dV accumulators already take 128 registers).
#pragma unroll
        for (int part = 0; part < S::QPARTS; ++part) {
            constexpr int NB = S::QP / 8, PP = S::QP / 16;
            const int nb0 = part * NB;   // first 8-query block of the part
            // acc = A_w Bᵀ [16 keys, QP queries]: this warp's 16 rows of the K/V-side tile at sA
            // against the part's QP rows of the Q-side tile at sB (Sᵀ = K_w Qᵀ, dPᵀ = V_w dOᵀ)
            auto rows_by_part = [&](float (&acc)[NB][4], unsigned sA, unsigned sB) {
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[nb][e] = 0.f;
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) {
                    unsigned a[4];
                    ldmatrix_x4(a, sA + kstep(a_lane, ks));
#pragma unroll
                    for (int np = 0; np < NB / 2; ++np) {
                        unsigned bq[4];
                        ldmatrix_x4(bq, sB + (nb0 / 2 + np) * 16 * (D * 2) + kstep(k_lane, ks));
                        mma_b_pair<DT>(acc, np, a, bq);
                    }
                }
            };
            // ---- Sᵀ = K_w Qᵀ [16 keys, QP queries] ------------------------------------------------
            float sc[NB][4];
            rows_by_part(sc, sK, sQ);
            // ---- Pᵀ = exp2(Sᵀ scale log2e - LSE[query]); masked: keys past S_kv, queries past
            // S_q, (causal) keys after the query. Element (nb, e): key k0 + 16 w + g + 8 (e/2),
            // query q0 + 8 (nb0 + nb) + 2 t + e%2.
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int qc = (nb0 + nb) * 8 + 2 * t + (e & 1);
                    float pe = fast_exp2(fmaf(sc[nb][e], p.scale_log2, -lse_s[qc]));
                    if (edge) {
                        const int key = key_base + 8 * (e >> 1), qr = q0 + qc;
                        if (key >= p.S_kv || qr >= p.S_q || (CAUSAL && key > qr)) pe = 0.f;
                    }
                    sc[nb][e] = pe;
                }
            // ---- dV_w += Pᵀ dO --------------------------------------------------------------------
#pragma unroll
            for (int kk = 0; kk < PP; ++kk) {
                unsigned a[4];
                a[0] = pack2<DT>(sc[2 * kk][0], sc[2 * kk][1]);
                a[1] = pack2<DT>(sc[2 * kk][2], sc[2 * kk][3]);
                a[2] = pack2<DT>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                a[3] = pack2<DT>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < DB / 2; ++dp) {
                    unsigned bv[4];
                    ldmatrix_x4_trans(bv, sdO + (nb0 / 2 + kk) * 16 * (D * 2) + kstep(v_lane, dp));
                    mma_b_pair<DT>(dv, dp, a, bv);
                }
            }
            // ---- dPᵀ = V_w dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ - Δ[query]) --------------------------------------
            float dp_acc[NB][4];
            rows_by_part(dp_acc, sV, sdO);
            unsigned ds_pk[NB][2];   // dSᵀ in 16-bit: rows g and g+8, queries 8 nb + 2t, +1
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                const float d0 = dlt_s[(nb0 + nb) * 8 + 2 * t];
                const float d1 = dlt_s[(nb0 + nb) * 8 + 2 * t + 1];
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    ds_pk[nb][r] = pack2<DT>(sc[nb][2 * r] * (dp_acc[nb][2 * r] - d0),
                                             sc[nb][2 * r + 1] * (dp_acc[nb][2 * r + 1] - d1));
            }
            // dSᵀ to shared memory for dQ (row = key, 16-byte chunk = 8 queries, swizzled)
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const unsigned at = sdS + swizzle<TILE_M>(warp * 16 + g + 8 * r, nb0 + nb)
                                        + 4 * t;
                    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at), "r"(ds_pk[nb][r]));
                }
            // ---- dK_w += dSᵀ Q --------------------------------------------------------------------
#pragma unroll
            for (int kk = 0; kk < PP; ++kk) {
                const unsigned a[4] = {ds_pk[2 * kk][0], ds_pk[2 * kk][1], ds_pk[2 * kk + 1][0],
                                       ds_pk[2 * kk + 1][1]};
#pragma unroll
                for (int dp = 0; dp < DB / 2; ++dp) {
                    unsigned bq[4];
                    ldmatrix_x4_trans(bq, sQ + (nb0 / 2 + kk) * 16 * (D * 2) + kstep(v_lane, dp));
                    mma_b_pair<DT>(dk, dp, a, bq);
                }
            }
        }
        __syncthreads();   // dSᵀ complete
        // ---- dQ_i += dS K_j (unscaled), reduced into the fp32 buffer ---------------------------
        // (QPW query slices per warp: each K fragment read serves all of them)
        float dq_all[S::QPW][S::DBW][4];
#pragma unroll
        for (int qi = 0; qi < S::QPW; ++qi)
#pragma unroll
            for (int db = 0; db < S::DBW; ++db)
#pragma unroll
                for (int e = 0; e < 4; ++e) dq_all[qi][db][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < S::PK; ++kk) {
            unsigned a[S::QPW][4];
#pragma unroll
            for (int qi = 0; qi < S::QPW; ++qi)
                ldmatrix_x4_trans(a[qi], sdS + kk * 16 * (TILE_M * 2)
                                             + (ds_lane ^ ((2 * (qs0 + qi)) << 4)));
#pragma unroll
            for (int dp = 0; dp < S::DBW / 2; ++dp) {
                unsigned bk[4];
                ldmatrix_x4_trans(bk, sK + kk * 16 * (D * 2)
                                          + kstep(v_lane, dpart * (S::DBW / 2) + dp));
                mma_b_pair<DT>(dq_all, dp, a, bk);
            }
        }
#pragma unroll
        for (int qi = 0; qi < S::QPW; ++qi) {
            const int qs = qs0 + qi;
            float (&dq)[S::DBW][4] = dq_all[qi];
            float* dqg = p.dq_acc + ((static_cast<long long>(b) * p.H + h) * p.S_q + q0) * D
                         + dpart * (S::DBW * 8);
            if constexpr (OPT & BWD_DQ_V4) {
                // Lanes t, t^1 swap a pair: even t keeps row g (columns 2t .. 2t+3), odd t row
                // g+8 (columns 2t-2 .. 2t+1); one 16-byte reduction per 8-column block.
                const bool odd = t & 1;
                const int row = qs * 16 + g + 8 * odd;
                const bool ok = q0 + row < p.S_q;
                float* dst = dqg + row * D + 4 * (t >> 1);   // 16-byte aligned
#pragma unroll
                for (int db = 0; db < S::DBW; ++db) {
                    // even t keeps (0, 1) and sends (2, 3); odd t keeps (2, 3) and sends (0, 1)
                    float k0 = dq[db][0], k1 = dq[db][1], s0 = dq[db][2], s1 = dq[db][3];
                    if (odd) { k0 = s0; k1 = s1; s0 = dq[db][0]; s1 = dq[db][1]; }
                    s0 = __shfl_xor_sync(0xffffffffu, s0, 1);
                    s1 = __shfl_xor_sync(0xffffffffu, s1, 1);
                    if (odd) { float x = k0; k0 = s0; s0 = x; x = k1; k1 = s1; s1 = x; }
                    red_add_v4_if(ok, dst + db * 8, k0, k1, s0, s1);
                }
            } else {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int row = qs * 16 + g + 8 * r;
                    if (q0 + row < p.S_q) {
#pragma unroll
                        for (int db = 0; db < S::DBW; ++db)
                            red_add_v2(dqg + row * D + db * 8 + 2 * t, dq[db][2 * r],
                                       dq[db][2 * r + 1]);
                    }
                }
            }
        }
    }
    cp_async_wait_all();   // no copy of this item may land in the next item's buffers

    // ---- epilogue: dK (scaled), dV from registers ----------------------------------------------
    const int rows = p.S_kv - k0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = warp * 16 + g + 8 * r;
        if (row >= rows) continue;
        const long long kv_row = k0 + row;
        if (p.n_chunks == 1) {
            unsigned short* dkg = static_cast<unsigned short*>(p.dk)
                + ((static_cast<long long>(bh_kv)) * p.S_kv + kv_row) * D;
            unsigned short* dvg = static_cast<unsigned short*>(p.dv)
                + ((static_cast<long long>(bh_kv)) * p.S_kv + kv_row) * D;
#pragma unroll
            for (int db = 0; db < DB; ++db) {
                *reinterpret_cast<unsigned*>(dkg + db * 8 + 2 * t) =
                    pack2<DT>(dk[db][2 * r] * p.scale, dk[db][2 * r + 1] * p.scale);
                *reinterpret_cast<unsigned*>(dvg + db * 8 + 2 * t) =
                    pack2<DT>(dv[db][2 * r], dv[db][2 * r + 1]);
            }
        } else {
            const long long part = static_cast<long long>(bh_kv) * p.n_chunks + chunk;
            float* dkg = static_cast<float*>(p.dk) + (part * p.S_kv + kv_row) * D;
            float* dvg = static_cast<float*>(p.dv) + (part * p.S_kv + kv_row) * D;
#pragma unroll
            for (int db = 0; db < DB; ++db) {
                *reinterpret_cast<F2*>(dkg + db * 8 + 2 * t) =
                    F2{dk[db][2 * r] * p.scale, dk[db][2 * r + 1] * p.scale};
                *reinterpret_cast<F2*>(dvg + db * 8 + 2 * t) = F2{dv[db][2 * r], dv[db][2 * r + 1]};
            }
        }
    }
}

// The CTA schedule of flash_bwd_dkdv: GRID (one work item per CTA) or PERSISTENT (gridDim.x CTAs
// taking items iter * P + cta; the scan direction of the iter-th is reversed_for(iter)).
// Full attention: items are ordered K/V tile fastest within a (K/V head, chunk), so CTAs that
// run together are one head's neighbouring K/V tiles, sharing its Q-side stream in L2; every
// item is equally long. Causal: K/V tile slowest, so items are issued longest first (tile j sees
// n_q - j·TILE_N/TILE_M Q tiles) and the short ones fill the tail; CTAs that run together are
// then neighbouring tiles j of every (K/V head, chunk), which still read the same Q tiles of
// their head (tile j's scan is a suffix of tile j-1's), so the Q-side sharing in L2 remains.
// The trace build (TRACE) records each step's visit (BwdParams); the spec's model of this deal is
// cuda_baseline.host.training.dkdv_spec_schedule.
template <OrderKind ORDER, ScheduleKind SCHEDULE, int TILE_M, int TILE_N, int D, bool CAUSAL,
          DType DT, int OPT = 0, bool TRACE = false>
__device__ __forceinline__ void flash_bwd_dkdv_impl(const BwdParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int cta = blockIdx.x;
    const int n_rest = p.n_work / p.n_kv;   // (K/V head, chunk) pairs
    int step = 0;
    auto item = [&](int w, int iter) {
        const int j = CAUSAL ? w / n_rest : w % p.n_kv;
        const int rest = CAUSAL ? w % n_rest : w / p.n_kv;
        dkdv_tile<TILE_M, TILE_N, D, CAUSAL, DT, OPT, TRACE>(
            p, smem, rest / p.n_chunks, rest % p.n_chunks, j,
            reversed_for<ORDER>(iter, cta, p.sawtooth_group), step);
    };
    for_each_strided_item<SCHEDULE>(p.n_work, item);
}

// Δ = rowsum(dO ∘ O): D/8 threads per row, 16-byte loads, fp32 sum. The same threads zero the
// row's fp32 dQ accumulator (8 floats each), so the backward needs no separate memset launch.
template <int D, DType DT>
__device__ __forceinline__ void flash_bwd_delta_impl(
        const unsigned short* o, const unsigned short* dout, float* delta, float* dq_acc,
        long long o_sb,
        long long o_sh, long long o_ss, long long do_sb, long long do_sh, long long do_ss, int H,
        int S_q, int lse_stride, long long n_rows) {
    constexpr int TPR = D / 8;
    const long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / TPR;
    const int c = threadIdx.x % TPR;
    float acc = 0.f;
    long long bh = 0, s = 0;
    if (r < n_rows) {
        bh = r / S_q; s = r % S_q;
        F4* z = reinterpret_cast<F4*>(dq_acc + r * D + 8 * c);
        z[0] = F4{0.f, 0.f, 0.f, 0.f};
        z[1] = F4{0.f, 0.f, 0.f, 0.f};
        const long long b = bh / H, h = bh % H;
        const U4 x = *reinterpret_cast<const U4*>(o + b * o_sb + h * o_sh + s * o_ss + 8 * c);
        const U4 y = *reinterpret_cast<const U4*>(dout + b * do_sb + h * do_sh + s * do_ss
                                                        + 8 * c);
        const unsigned xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc += to_float<DT>(xs[i] & 0xffff) * to_float<DT>(ys[i] & 0xffff);
            acc += to_float<DT>(xs[i] >> 16) * to_float<DT>(ys[i] >> 16);
        }
    }
#pragma unroll
    for (int off = 1; off < TPR; off *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (r < n_rows && c == 0) delta[bh * lse_stride + s] = acc;
}

// dQ = scale · dQaccum in 16-bit, 8 elements per thread; dq is [B, H, S_q, D] contiguous.
template <int D, DType DT>
__device__ __forceinline__ void flash_bwd_dq_impl(const float* dq_acc, unsigned short* dq,
                                                  float scale, long long n_elems) {
    const long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
    if (i >= n_elems) return;
    const F4 a = *reinterpret_cast<const F4*>(dq_acc + i);
    const F4 c = *reinterpret_cast<const F4*>(dq_acc + i + 4);
    U4 out;
    out.x = pack2<DT>(a.x * scale, a.y * scale);
    out.y = pack2<DT>(a.z * scale, a.w * scale);
    out.z = pack2<DT>(c.x * scale, c.y * scale);
    out.w = pack2<DT>(c.z * scale, c.w * scale);
    *reinterpret_cast<U4*>(dq + i) = out;
}
