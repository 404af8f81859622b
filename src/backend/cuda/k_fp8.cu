/* fp8 compute (DIT_GPU_PRECISION_FP8): the activations of a linear quantized to
 * float8_e4m3, one scale per row, right before the fp8 GEMM. Row r's scale is
 * s = amax(|x_r|) / 448 (1 for an all-zero row) and its codes e4m3(x / s), the division
 * IEEE-rounded and the conversion nearest-even, saturating at +-448 (x / s can exceed 448 by
 * an ulp); NaN stays NaN and an infinite x gives an infinite s, so a bad value still shows in
 * the GEMM's output. The GEMM multiplies row r of its product by s and column n by the
 * weight's row scale (cuBLASLt's outer-vector scaling); a per-tensor-scaled weight has no
 * such vector, so the kernel also fills one (with the value the caller gives: 1, the
 * per-tensor scale being the GEMM's alpha). */
#include <cuda_fp8.h>

#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

#define Q_THREADS 256

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/* One block per row (blocks past the rows only help fill ws). Row r = p * M + m of x starts
 * at element p * ps + m * rs; xq is contiguous [P * M, K]. VEC: 8 elements per access (K % 8
 * == 0, 16-byte aligned rows). */
template <typename T, bool VEC>
__global__ void __launch_bounds__(Q_THREADS) k_quant_rows(uint8_t *xq, float *xs, const T *x, int64_t M, int64_t K,
                                                          int64_t ps, int64_t rs, int64_t rows, float *ws, int64_t N,
                                                          float wscale) {
  __shared__ float sh[32];
  for (int64_t i = (int64_t)blockIdx.x * Q_THREADS + threadIdx.x; ws && i < N; i += (int64_t)gridDim.x * Q_THREADS)
    ws[i] = wscale;
  const int64_t r = blockIdx.x;
  if (r >= rows) return;
  const T *row = x + (r / M) * ps + (r % M) * rs;
  uint8_t *out = xq + r * K;
  float amax = 0.0f;
  if (VEC) {
    for (int64_t k = (int64_t)threadIdx.x * 8; k < K; k += Q_THREADS * 8) {
      const uint4 u = *(const uint4 *)(row + k);
      const T *e = (const T *)&u;
#pragma unroll
      for (int j = 0; j < 8; j++) amax = fmaxf(amax, fabsf(cu_ld(e, j)));
    }
  } else {
    for (int64_t k = threadIdx.x; k < K; k += Q_THREADS) amax = fmaxf(amax, fabsf(cu_ld(row, k)));
  }
  amax = cu_block_max(amax, sh);
  const float s = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  if (threadIdx.x == 0) xs[r] = s;
  if (VEC) {
    for (int64_t k = (int64_t)threadIdx.x * 8; k < K; k += Q_THREADS * 8) {
      const uint4 u = *(const uint4 *)(row + k);
      const T *e = (const T *)&u;
      uint2 q;
      uint8_t *qb = (uint8_t *)&q;
#pragma unroll
      for (int j = 0; j < 8; j++) qb[j] = to_e4m3(__fdiv_rn(cu_ld(e, j), s));
      *(uint2 *)(out + k) = q;
    }
  } else {
    for (int64_t k = threadIdx.x; k < K; k += Q_THREADS) out[k] = to_e4m3(__fdiv_rn(cu_ld(row, k), s));
  }
}

extern "C" cudaError_t cuk_quant_rows_e4m3(void *xq, float *xs, const void *x, int xdt, int64_t P, int64_t M,
                                           int64_t K, int64_t ps, int64_t rs, float *ws, int64_t N, float wscale,
                                           cudaStream_t s) {
  const int64_t rows = P * M;
  if (rows <= 0 || K <= 0) return cudaSuccess;
  const int64_t wblocks = ws ? (N + Q_THREADS - 1) / Q_THREADS : 0;
  const unsigned grid = (unsigned)(rows > wblocks ? rows : wblocks);
  const size_t es = xdt == CU_DT_F32 ? 4 : 2;
  const bool vec = K % 8 == 0 && ps % 8 == 0 && rs % 8 == 0 && ((uintptr_t)x % 16) == 0 && es == 2;
  CU_DISPATCH(xdt, T, {
    if (vec)
      k_quant_rows<T, true><<<grid, Q_THREADS, 0, s>>>((uint8_t *)xq, xs, (const T *)x, M, K, ps, rs, rows, ws, N,
                                                       wscale);
    else
      k_quant_rows<T, false><<<grid, Q_THREADS, 0, s>>>((uint8_t *)xq, xs, (const T *)x, M, K, ps, rs, rows, ws, N,
                                                        wscale);
  });
  return cudaGetLastError();
}
