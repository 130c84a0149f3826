// Kernel entry points of the raw CUDA FlashAttention backward (flash_bwd.cuh), instantiated by
// name through cupy.RawModule(name_expressions=...) as flash_fwd.cu is:
//   flash_bwd_dkdv<OrderKind::SAWTOOTH, ScheduleKind::PERSISTENT, 64, 128, 64, true, DType::BF16>
//   flash_bwd_delta<64, DType::BF16>, flash_bwd_dq<64, DType::BF16>
// An optional last argument of flash_bwd_dkdv selects opt-in build options (BWD_ONE_PART,
// BWD_DQ_V4, BWD_DQ_SQUARE in flash_bwd.cuh; 0, the default build, is left out of the name).
// The scan order of the Q loop and the CTA schedule are template parameters named like the spec's
// enums, as in the forward. flash_bwd_dkdv_trace<same arguments> is its trace build: two more
// kernel parameters (the record and its steps per CTA, BwdParams), so every other build keeps its
// name and its code.
#include "flash_bwd.cuh"

// Both dK/dV entry points take the same plain scalar parameters (what cupy.RawKernel passes)
// and read them as one BwdParams (BWD_FIELDS: the same names in BwdParams order).
#define BWD_PARAMS                                                                              \
    const unsigned short *q, const unsigned short *k, const unsigned short *v,                  \
        const unsigned short *dout, const float *lse, const float *delta, float *dq_acc,        \
        void *dk, void *dv, long long q_sb, long long q_sh, long long q_ss, long long k_sb,     \
        long long k_sh, long long k_ss, long long v_sb, long long v_sh, long long v_ss,         \
        long long do_sb, long long do_sh, long long do_ss, int H, int H_kv, int S_q, int S_kv,  \
        int n_q, int n_kv, int n_work, int heads_per_cta, int n_chunks, int sawtooth_group,     \
        int lse_stride, float scale_log2, float scale
#define BWD_FIELDS                                                                              \
    q, k, v, dout, lse, delta, dq_acc, dk, dv, q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, v_sb, v_sh,   \
        v_ss, do_sb, do_sh, do_ss, H, H_kv, S_q, S_kv, n_q, n_kv, n_work, heads_per_cta,        \
        n_chunks, sawtooth_group, lse_stride, scale_log2, scale

template <OrderKind ORDER, ScheduleKind SCHEDULE, int TILE_M, int TILE_N, int D, bool CAUSAL,
          DType DT, int OPT = 0>
__global__ void __launch_bounds__(BwdShape<TILE_M, TILE_N, D, OPT>::THREADS, 1)
flash_bwd_dkdv(BWD_PARAMS) {
    const BwdParams p{BWD_FIELDS};
    flash_bwd_dkdv_impl<ORDER, SCHEDULE, TILE_M, TILE_N, D, CAUSAL, DT, OPT>(p);
}

template <OrderKind ORDER, ScheduleKind SCHEDULE, int TILE_M, int TILE_N, int D, bool CAUSAL,
          DType DT, int OPT = 0>
__global__ void __launch_bounds__(BwdShape<TILE_M, TILE_N, D, OPT>::THREADS, 1)
flash_bwd_dkdv_trace(BWD_PARAMS, int* trace_visits, int trace_steps) {
    const BwdParams p{BWD_FIELDS, trace_visits, trace_steps};
    flash_bwd_dkdv_impl<ORDER, SCHEDULE, TILE_M, TILE_N, D, CAUSAL, DT, OPT, true>(p);
}

template <int D, DType DT>
__global__ void flash_bwd_delta(const unsigned short* o, const unsigned short* dout,
                                float* delta, float* dq_acc, long long o_sb, long long o_sh,
                                long long o_ss, long long do_sb, long long do_sh, long long do_ss,
                                int H, int S_q, int lse_stride, long long n_rows) {
    flash_bwd_delta_impl<D, DT>(o, dout, delta, dq_acc, o_sb, o_sh, o_ss, do_sb, do_sh, do_ss,
                                H, S_q, lse_stride, n_rows);
}

template <int D, DType DT>
__global__ void flash_bwd_dq(const float* dq_acc, unsigned short* dq, float scale,
                             long long n_elems) {
    flash_bwd_dq_impl<D, DT>(dq_acc, dq, scale, n_elems);
}
