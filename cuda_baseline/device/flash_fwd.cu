// Kernel entry points of the raw CUDA split-Q FlashAttention family.
//
// One template, instantiated per variant: the Python side (cuda_baseline/host/backend.py) asks NVRTC for
//   flash_fwd<OrderKind::SAWTOOTH, ScheduleKind::PERSISTENT, WorkOrder::Q_MAJOR,
//             128, 64, 64, false, DType::FP16, false>
// through cupy.RawModule(name_expressions=...); CI compiles the same names with nvcc as explicit
// instantiations. Scan order, CTA schedule, tile shape, head dim, causal mask, element type and
// the trace build are all compile-time: nothing switches at run time inside the K/V loop.
//
// The K/V pipeline depth is a template parameter too. flash_fwd is the default double buffer
// (DEFAULT_STAGES); flash_fwd_staged<..., STAGES> builds the other depths (1: no prefetch,
// 3: two tiles ahead). Two entry points rather than one more template parameter on flash_fwd
// keep every default build's name expression as it was before the knob. `trace_every` (the
// stride of the trace build's stamps) is read only by trace builds.
#include "flash_fwd.cuh"

// Every entry point takes the same plain scalar parameters (what cupy.RawKernel passes) and
// reads them as one FwdParams: the tensors, then the strides, sizes and scale (FWD_PARAMS), the
// same names in FwdParams order (FWD_FIELDS), the launch bounds of a tile shape.
#define FWD_PARAMS                                                                              \
    const unsigned short *q, const unsigned short *k, const unsigned short *v, unsigned short *o
#define FWD_SCALARS                                                                             \
    long long q_sb, long long q_sh, long long q_ss, long long k_sb, long long k_sh,             \
        long long k_ss, long long v_sb, long long v_sh, long long v_ss, long long o_sb,         \
        long long o_sh, long long o_ss, int H, int H_kv, int S_q, int S_kv, int n_q, int n_kv,  \
        int n_work, int tiles_per_cta, int section, int sawtooth_group, float scale_log2
#define FWD_FIELDS                                                                              \
    q, k, v, o, q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, v_sb, v_sh, v_ss, o_sb, o_sh, o_ss, H, H_kv, \
        S_q, S_kv, n_q, n_kv, n_work, tiles_per_cta, section, sawtooth_group, scale_log2
#define FWD_TRACE_PARAMS                                                                        \
    int *trace_visits, unsigned long long *trace_ns, int trace_steps, int trace_every
#define FWD_BOUNDS                                                                              \
    __launch_bounds__(FwdShape<TILE_M, TILE_N, D>::THREADS, FwdShape<TILE_M, TILE_N, D>::MIN_CTAS)

template <OrderKind ORDER, ScheduleKind SCHEDULE, WorkOrder WORK, int TILE_M, int TILE_N, int D,
          bool CAUSAL, DType DT, bool TRACE>
__global__ void FWD_BOUNDS flash_fwd(FWD_PARAMS, FWD_SCALARS, FWD_TRACE_PARAMS) {
    const FwdParams p{FWD_FIELDS, trace_visits, trace_ns, trace_steps, trace_every};
    flash_fwd_impl<ORDER, SCHEDULE, WORK, TILE_M, TILE_N, D, CAUSAL, DT, TRACE, DEFAULT_STAGES>(p);
}

template <OrderKind ORDER, ScheduleKind SCHEDULE, WorkOrder WORK, int TILE_M, int TILE_N, int D,
          bool CAUSAL, DType DT, bool TRACE, int STAGES>
__global__ void FWD_BOUNDS flash_fwd_staged(FWD_PARAMS, FWD_SCALARS, FWD_TRACE_PARAMS) {
    static_assert(STAGES != DEFAULT_STAGES, "the default depth is the flash_fwd entry point");
    const FwdParams p{FWD_FIELDS, trace_visits, trace_ns, trace_steps, trace_every};
    flash_fwd_impl<ORDER, SCHEDULE, WORK, TILE_M, TILE_N, D, CAUSAL, DT, TRACE, STAGES>(p);
}

// The training forward: the default build that also writes, per query row, the log-sum-exp the
// backward (flash_bwd.cu) recomputes P from. A separate entry point, so an inference call pays
// nothing for it; no trace build.
template <OrderKind ORDER, ScheduleKind SCHEDULE, WorkOrder WORK, int TILE_M, int TILE_N, int D,
          bool CAUSAL, DType DT>
__global__ void FWD_BOUNDS flash_fwd_lse(FWD_PARAMS, float* lse, FWD_SCALARS, int lse_stride) {
    const FwdParams p{FWD_FIELDS, nullptr, nullptr, 0, 1, lse, lse_stride};
    flash_fwd_impl<ORDER, SCHEDULE, WORK, TILE_M, TILE_N, D, CAUSAL, DT, false, DEFAULT_STAGES,
                   true>(p);
}
