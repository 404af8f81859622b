/* 16-byte loads and stores of 8 F32/BF16/F16 elements as floats, shared by the vectorized
 * kernel files (k_vec.cu, k_fused.cu). Pointers must be 16-byte aligned. */
#ifndef DIT_CU_VEC_CUH
#define DIT_CU_VEC_CUH

#include "backend/cuda/cu_common.cuh"

__device__ __forceinline__ void ld8(const float *p, float *v) {
  float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void st8(float *p, const float *v) {
  *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4 *>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
/* 16-bit floats, 8 at a time through pairs: bf16 and fp16 differ only in the pair conversions. */
__device__ __forceinline__ float2 cu_pair_f32(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ float2 cu_pair_f32(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ void cu_f32_pair(__nv_bfloat162 *h, float a, float b) { *h = __floats2bfloat162_rn(a, b); }
__device__ __forceinline__ void cu_f32_pair(__half2 *h, float a, float b) { *h = __floats2half2_rn(a, b); }
template <typename P, typename T>
__device__ __forceinline__ void ld8_pairs(const T *p, float *v) {
  uint4 u = *reinterpret_cast<const uint4 *>(p);
  const P *h = reinterpret_cast<const P *>(&u);
  for (int k = 0; k < 4; k++) {
    float2 f = cu_pair_f32(h[k]);
    v[2 * k] = f.x, v[2 * k + 1] = f.y;
  }
}
template <typename P, typename T>
__device__ __forceinline__ void st8_pairs(T *p, const float *v) {
  uint4 u;
  P *h = reinterpret_cast<P *>(&u);
  for (int k = 0; k < 4; k++) cu_f32_pair(&h[k], v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4 *>(p) = u;
}
__device__ __forceinline__ void ld8(const __nv_bfloat16 *p, float *v) { ld8_pairs<__nv_bfloat162>(p, v); }
__device__ __forceinline__ void st8(__nv_bfloat16 *p, const float *v) { st8_pairs<__nv_bfloat162>(p, v); }
__device__ __forceinline__ void ld8(const __half *p, float *v) { ld8_pairs<__half2>(p, v); }
__device__ __forceinline__ void st8(__half *p, const float *v) { st8_pairs<__half2>(p, v); }

/* 8 elements at p[i..i+8) of a weight-like array of run-time dtype dt. */
__device__ __forceinline__ void ld8w(const void *p, int dt, int64_t i, float *v) {
  if (dt == CU_DT_BF16) ld8((const __nv_bfloat16 *)p + i, v);
  else if (dt == CU_DT_F16) ld8((const __half *)p + i, v);
  else ld8((const float *)p + i, v);
}

/* v rounded to the storage type T (what a store and a reload would give). */
__device__ __forceinline__ float cu_rnd(float v, const float *) { return v; }
__device__ __forceinline__ float cu_rnd(float v, const __nv_bfloat16 *) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float cu_rnd(float v, const __half *) { return __half2float(__float2half_rn(v)); }

#endif
