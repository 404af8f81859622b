/* Row softmax of the GEMM attention path (cuda_attn_gemm.c): fp32 scores in, probabilities
 * out (F32, may be in place, or BF16), with the key mask and the causal limit applied. */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

/* One block per query row r (query index q0 + r): an online max / sum over the visible keys,
 * then p = exp(scale * s - max) / sum, 0 for masked keys; no visible key: a zero row.
 * In place (p == s) is safe: every read of the first pass precedes the block reductions, and
 * the second pass rewrites each element from the thread that reads it. */
template <typename P>
__global__ void k_attn_softmax(P *p, int64_t ldp, const float *s, int64_t lds, int64_t Sk, float scale,
                               const uint8_t *mask, int causal, int64_t q0) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float *sr = s + r * lds;
  P *pr = p + r * ldp;
  int64_t nk = Sk;
  if (causal && q0 + r + 1 < nk) nk = q0 + r + 1; /* keys j <= i */
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    if (mask && !mask[j]) continue;
    float x = sr[j] * scale;
    if (x > m) {
      l = (m == -INFINITY ? 0.0f : l * expf(m - x)) + 1.0f;
      m = x;
    } else {
      l += expf(x - m);
    }
  }
  const float M = cu_block_max(m, sh);
  if (M == -INFINITY) { /* no visible key (uniform over the block) */
    for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) cu_st(pr, j, 0.0f);
    return;
  }
  const float L = cu_block_sum(m == -INFINITY ? 0.0f : l * expf(m - M), sh);
  const float inv = 1.0f / L;
  for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) {
    bool vis = j < nk && (!mask || mask[j]);
    cu_st(pr, j, vis ? expf(sr[j] * scale - M) * inv : 0.0f);
  }
}

extern "C" cudaError_t cuk_attn_softmax(void *p, int pdt, int64_t ldp, const float *s, int64_t lds, int64_t rows,
                                        int64_t Sk, float scale, const uint8_t *mask, int causal, int64_t q0,
                                        cudaStream_t st) {
  if (rows <= 0 || Sk <= 0) return cudaSuccess;
  if (rows > 0x7fffffff || (pdt != CU_DT_F32 && pdt != CU_DT_BF16)) return cudaErrorInvalidValue;
  const int threads = Sk >= 8192 ? 512 : 256;
  CU_DISPATCH(pdt, T, k_attn_softmax<T><<<(unsigned)rows, threads, 0, st>>>((T *)p, ldp, s, lds, Sk, scale, mask,
                                                                             causal, q0));
  return cudaGetLastError();
}
