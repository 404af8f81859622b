/* 16-byte vectorized variants of the hot elementwise kernels (8 elements per thread:
 * add/mul/swiglu/scale/activation (also over rows of strided views, with a scalar variant),
 * modulate, gated_add, interleaved RoPE; RMSNorm is in
 * k_fused.cu). Used when the backend's `vec` switch is on (default; env DIT_CUDA_VEC=0 off), the element count (or row
 * length) is a multiple of 8 and the pointers are 16-byte aligned. Math in fp32. */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cu_vec.cuh"
#include "backend/cuda/cuda_internal.h"

#define GS_LOOP(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
                           i += (int64_t)gridDim.x * blockDim.x)

/* op: 0 add, 1 mul, 2 swiglu, 3 scale (by sc), 4 activation act (b unused for 3, 4). */
template <typename T>
__global__ void k8_ew(T *y, const T *a, const T *b, int64_t n8, int op, float sc, int act) {
  GS_LOOP(i, n8) {
    float u[8], w[8];
    ld8(a + i * 8, u);
    if (op <= 2) ld8(b + i * 8, w);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      float r;
      if (op == 0) r = u[k] + w[k];
      else if (op == 1) r = u[k] * w[k];
      else if (op == 2) r = u[k] / (1.0f + expf(-u[k])) * w[k];
      else if (op == 3) r = u[k] * sc;
      else r = cu_act(u[k], act);
      u[k] = r;
    }
    st8(y + i * 8, u);
  }
}

extern "C" cudaError_t cuk_v8_ew(void *y, const void *a, const void *b, int dt, int64_t n, int op, float sc,
                                 int act, cudaStream_t s) {
  int64_t n8 = n / 8;
  if (n8 <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k8_ew<T><<<cu_blocks(n8, 256), 256, 0, s>>>((T *)y, (const T *)a, (const T *)b, n8, op, sc,
                                                                  act));
  return cudaGetLastError();
}

/* add / mul / swiglu (op 0, 1, 2) over rows of strided views: element (r, c) of y, a, b at
 * r * ld + c. V = 8: 16-byte accesses (cols and every ld multiples of 8, aligned pointers);
 * V = 1: any. */
template <typename T, int V>
__global__ void k_ew_rows(T *y, int64_t ldy, const T *a, int64_t lda, const T *b, int64_t ldb, int64_t rows,
                          int64_t cols, int op) {
  const int64_t cv = cols / V;
  GS_LOOP(i, rows * cv) {
    const int64_t r = i / cv, c = (i % cv) * V;
    float u[V], w[V];
    if (V == 8) {
      ld8(a + r * lda + c, u);
      ld8(b + r * ldb + c, w);
    } else {
      u[0] = cu_ld(a, r * lda + c), w[0] = cu_ld(b, r * ldb + c);
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
      if (op == 0) u[k] = u[k] + w[k];
      else if (op == 1) u[k] = u[k] * w[k];
      else u[k] = u[k] / (1.0f + expf(-u[k])) * w[k];
    }
    if (V == 8) st8(y + r * ldy + c, u);
    else cu_st(y, r * ldy + c, u[0]);
  }
}

extern "C" cudaError_t cuk_ew_rows(void *y, int64_t ldy, const void *a, int64_t lda, const void *b, int64_t ldb,
                                   int dt, int64_t rows, int64_t cols, int op, int vec8, cudaStream_t s) {
  const int64_t n = rows * (vec8 ? cols / 8 : cols);
  if (n <= 0) return cudaSuccess;
  if (vec8) {
    CU_DISPATCH(dt, T, k_ew_rows<T, 8><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, ldy, (const T *)a, lda,
                                                                           (const T *)b, ldb, rows, cols, op));
  } else {
    CU_DISPATCH(dt, T, k_ew_rows<T, 1><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, ldy, (const T *)a, lda,
                                                                           (const T *)b, ldb, rows, cols, op));
  }
  return cudaGetLastError();
}

/* mode 0: y = x * (1 + scale) + shift; mode 1: x += g * y (g = gate, tanh(gate) or 1). */
template <typename T>
__global__ void k8_mod(T *out, const T *x, const T *y, int64_t S, int64_t D, int64_t n8, const void *v1,
                       const void *v2, int vdt, int64_t vbs, int mode, int tg) {
  GS_LOOP(i, n8) {
    int64_t e = i * 8, d = e % D, bi = e / (S * D), vo = bi * vbs + d;
    float u[8];
    ld8(x + e, u);
    if (mode == 0) {
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float r = u[k] * (1.0f + cu_ldw(v1, vdt, vo + k));
        if (v2) r += cu_ldw(v2, vdt, vo + k);
        u[k] = r;
      }
    } else {
      float w[8];
      ld8(y + e, w);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float g = 1.0f;
        if (v1) {
          g = cu_ldw(v1, vdt, vo + k);
          if (tg) g = tanhf(g);
        }
        u[k] += g * w[k];
      }
    }
    st8(out + e, u);
  }
}

extern "C" cudaError_t cuk_v8_modulate(void *y, const void *x, int dt, int64_t B, int64_t S, int64_t D,
                                       const void *scale, const void *shift, int sdt, int64_t sbs, cudaStream_t s) {
  int64_t n8 = B * S * D / 8;
  if (n8 <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k8_mod<T><<<cu_blocks(n8, 256), 256, 0, s>>>((T *)y, (const T *)x, NULL, S, D, n8, scale,
                                                                   shift, sdt, sbs, 0, 0));
  return cudaGetLastError();
}

extern "C" cudaError_t cuk_v8_gated_add(void *x, const void *y, int dt, int64_t B, int64_t S, int64_t D,
                                        const void *gate, int gdt, int64_t gbs, int tanh_gate, cudaStream_t s) {
  int64_t n8 = B * S * D / 8;
  if (n8 <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k8_mod<T><<<cu_blocks(n8, 256), 256, 0, s>>>((T *)x, (const T *)x, (const T *)y, S, D, n8,
                                                                   gate, NULL, gdt, gbs, 1, tanh_gate));
  return cudaGetLastError();
}

/* Interleaved RoPE, 4 pairs per thread; cos/sin rows of D/2 floats (D % 8 == 0). */
template <typename T>
__global__ void k8_rope(T *x, int64_t S, int64_t H, int64_t D, const float *cos, const float *sin, int64_t csb,
                        int64_t n8) {
  GS_LOOP(i, n8) {
    int64_t e = i * 8, row = e / D, p0 = (e % D) / 2;
    int64_t sidx = (row / H) % S, b = row / (H * S);
    int64_t ci = b * csb + sidx * (D / 2) + p0;
    float4 c = *reinterpret_cast<const float4 *>(cos + ci), sn = *reinterpret_cast<const float4 *>(sin + ci);
    float cc[4] = {c.x, c.y, c.z, c.w}, ss[4] = {sn.x, sn.y, sn.z, sn.w};
    float u[8];
    ld8(x + e, u);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float x0 = u[2 * k], x1 = u[2 * k + 1];
      u[2 * k] = x0 * cc[k] - x1 * ss[k];
      u[2 * k + 1] = x0 * ss[k] + x1 * cc[k];
    }
    st8(x + e, u);
  }
}

extern "C" cudaError_t cuk_v8_rope(void *x, int dt, int64_t B, int64_t S, int64_t H, int64_t D, const float *cos,
                                   const float *sin, int64_t csb, cudaStream_t s) {
  int64_t n8 = B * S * H * D / 8;
  if (n8 <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k8_rope<T><<<cu_blocks(n8, 256), 256, 0, s>>>((T *)x, S, H, D, cos, sin, csb, n8));
  return cudaGetLastError();
}

/* y[r, :] = x[r, :] * (sc * g[r]) over rows of D; V = 8: 16-byte accesses (D % 8 == 0, aligned), V = 1: any. */
template <typename T, int V>
__global__ void k_mul_rows(T *y, const T *x, const void *g, int gdt, int64_t n, int64_t D, float sc) {
  GS_LOOP(i, n / V) {
    const int64_t e = i * V;
    const float f = sc * cu_ldw(g, gdt, e / D);
    if (V == 8) {
      float u[8];
      ld8(x + e, u);
#pragma unroll
      for (int k = 0; k < 8; k++) u[k] *= f;
      st8(y + e, u);
    } else {
      cu_st(y, e, cu_ld(x, e) * f);
    }
  }
}

extern "C" cudaError_t cuk_mul_rows(void *y, const void *x, int dt, const void *g, int gdt, int64_t n, int64_t D,
                                    float sc, int vec, cudaStream_t s) {
  if (n <= 0 || D <= 0) return cudaSuccess;
  if (vec && D % 8 == 0)
    CU_DISPATCH(dt, T, k_mul_rows<T, 8><<<cu_blocks(n / 8, 256), 256, 0, s>>>((T *)y, (const T *)x, g, gdt, n, D, sc));
  else
    CU_DISPATCH(dt, T, k_mul_rows<T, 1><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, g, gdt, n, D, sc));
  return cudaGetLastError();
}
