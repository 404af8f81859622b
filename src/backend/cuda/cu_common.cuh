/* Device helpers shared by the CUDA kernel files (C++ only, never included by C):
 * loads and stores of F32/BF16/F16 elements as float, activations, block reductions,
 * and the dispatch from a dit_dtype code to a template instantiation. */
#ifndef DIT_CU_COMMON_CUH
#define DIT_CU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/act_math.h"

#define CU_DT_F32 0 /* dit_dtype values */
#define CU_DT_BF16 1
#define CU_DT_F16 2
#define CU_DT_I32 8
#define CU_DT_I64 9

#define CU_ACT_NONE 0
#define CU_ACT_SILU 1
#define CU_ACT_GELU 2
#define CU_ACT_GELU_TANH 3

__device__ __forceinline__ float cu_ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float cu_ld(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float cu_ld(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void cu_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void cu_st(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void cu_st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

/* Loads element i of a weight-like array of run-time dtype dt. */
__device__ __forceinline__ float cu_ldw(const void *p, int dt, int64_t i) {
  if (dt == CU_DT_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  if (dt == CU_DT_F16) return __half2float(((const __half *)p)[i]);
  return ((const float *)p)[i];
}

__device__ __forceinline__ float cu_act(float v, int a) { return dit_act_apply(v, a); }

/* Warp-wide and block-wide (blockDim.x a multiple of 32, <= 1024) sum or max; every thread
 * gets the result. */
template <bool MAX>
__device__ __forceinline__ float cu_warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, u) : v + u;
  }
  return v;
}
template <bool MAX>
__device__ __forceinline__ float cu_block_reduce(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = cu_warp_reduce<MAX>(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : (MAX ? -INFINITY : 0.0f);
  return cu_warp_reduce<MAX>(v);
}
__device__ __forceinline__ float cu_warp_sum(float v) { return cu_warp_reduce<false>(v); }
__device__ __forceinline__ float cu_warp_max(float v) { return cu_warp_reduce<true>(v); }
__device__ __forceinline__ float cu_block_sum(float v, float *sh) { return cu_block_reduce<false>(v, sh); }
__device__ __forceinline__ float cu_block_max(float v, float *sh) { return cu_block_reduce<true>(v, sh); }

static inline unsigned cu_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b > 65535 * 16 ? 65535 * 16 : b); /* kernels use grid-stride loops */
}

/* Calls F with a typed null pointer of the activation dtype (F32, BF16 or F16). */
#define CU_DISPATCH(dt, T, ...)                       \
  do {                                                \
    if ((dt) == CU_DT_BF16) {                         \
      typedef __nv_bfloat16 T;                        \
      __VA_ARGS__;                                    \
    } else if ((dt) == CU_DT_F16) {                   \
      typedef __half T;                               \
      __VA_ARGS__;                                    \
    } else {                                          \
      typedef float T;                                \
      __VA_ARGS__;                                    \
    }                                                 \
  } while (0)

#endif
