// Kernel entry points of the raw CUDA split-K/V decode (decode.cuh), instantiated by name through
// cupy.RawModule(name_expressions=...) as flash_fwd.cu is:
//   decode_split<128, 128, 4, 4, DType::BF16, true, true, true>   (D, TILE_N, HG, SQP, dtype,
//                                                                   causal, bottom-right, split)
//   decode_combine<128, DType::BF16>
// Plain scalar parameters (what the prepared launch's parameter block holds), the seven
// pointers first: the host writes only those per call (cuda_baseline.host.decode).
#include "decode.cuh"

template <int D, int TILE_N, int HG, int SQP, DType DT, bool CAUSAL, bool BOTTOM_RIGHT,
          bool SPLIT>
__global__ void __launch_bounds__(32 * DECODE_WARPS, 1)
    decode_split(const unsigned short* q, const unsigned short* k, const unsigned short* v,
                 unsigned short* o, const int* kv_len, float* opart, float* lpart, long long q_sb,
                 long long q_sh, long long q_ss, long long k_sb, long long k_sh, long long k_ss,
                 long long v_sb, long long v_sh, long long v_ss, long long o_sb, long long o_sh,
                 long long o_ss, int B, int H, int H_kv, int S_q, int S_kv, int n_hc, int splits,
                 int chunk, float scale_log2) {
    const DecodeParams p{q,    k,    v,    o,    kv_len, opart, lpart, q_sb, q_sh, q_ss,
                         k_sb, k_sh, k_ss, v_sb, v_sh,   v_ss,  o_sb,  o_sh, o_ss, B,
                         H,    H_kv, S_q,  S_kv, n_hc,   splits, chunk, scale_log2};
    decode_split_impl<D, TILE_N, HG, SQP, DT, CAUSAL, BOTTOM_RIGHT, SPLIT>(p);
}

template <int D, DType DT>
__global__ void __launch_bounds__(128)
    decode_combine(const float* opart, const float* lpart, unsigned short* o, long long o_sb,
                   long long o_sh, long long o_ss, int B, int H, int S_q, int splits) {
    decode_combine_impl<D, DT>(opart, lpart, o, o_sb, o_sh, o_ss, B, H, S_q, splits);
}
