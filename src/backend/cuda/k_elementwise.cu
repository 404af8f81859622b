/* Elementwise CUDA kernels: dtype conversion, activations, add/mul/swiglu, scale,
 * AdaLN modulate, gated residual add, bias(+activation) epilogues, nearest upsample.
 * Math in fp32 whatever the storage dtype. */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

#define GS_LOOP(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
                           i += (int64_t)gridDim.x * blockDim.x)

template <typename D, typename S>
__global__ void k_convert(D *dst, const S *src, int64_t n) {
  GS_LOOP(i, n) cu_st(dst, i, cu_ld(src, i));
}

extern "C" cudaError_t cuk_convert(void *dst, int ddt, const void *src, int sdt, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(ddt, TD, CU_DISPATCH(sdt, TS, k_convert<TD, TS><<<cu_blocks(n, 256), 256, 0, s>>>(
                                                 (TD *)dst, (const TS *)src, n)));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_act(T *y, const T *x, int64_t n, int act) {
  GS_LOOP(i, n) cu_st(y, i, cu_act(cu_ld(x, i), act));
}

extern "C" cudaError_t cuk_act(void *y, const void *x, int dt, int64_t n, int act, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_act<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, n, act));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_binary(T *y, const T *a, const T *b, int64_t n, int op) {
  GS_LOOP(i, n) {
    float u = cu_ld(a, i), v = cu_ld(b, i), r;
    if (op == 0) r = u + v;
    else if (op == 1) r = u * v;
    else r = u / (1.0f + expf(-u)) * v;
    cu_st(y, i, r);
  }
}

extern "C" cudaError_t cuk_binary(void *y, const void *a, const void *b, int dt, int64_t n, int op,
                                  cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_binary<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)a, (const T *)b, n, op));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_scale(T *y, const T *x, int64_t n, float sc) {
  GS_LOOP(i, n) cu_st(y, i, cu_ld(x, i) * sc);
}

extern "C" cudaError_t cuk_scale(void *y, const void *x, int dt, int64_t n, float sc, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_scale<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, n, sc));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_modulate(T *y, const T *x, int64_t S, int64_t D, int64_t n, const void *scale,
                           const void *shift, int sdt, int64_t sbs) {
  GS_LOOP(i, n) {
    int64_t d = i % D, b = i / (S * D);
    float v = cu_ld(x, i) * (1.0f + cu_ldw(scale, sdt, b * sbs + d));
    if (shift) v += cu_ldw(shift, sdt, b * sbs + d);
    cu_st(y, i, v);
  }
}

extern "C" cudaError_t cuk_modulate(void *y, const void *x, int dt, int64_t B, int64_t S, int64_t D,
                                    const void *scale, const void *shift, int sdt, int64_t sbs, cudaStream_t s) {
  int64_t n = B * S * D;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_modulate<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, S, D, n, scale,
                                                                      shift, sdt, sbs));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_gated_add(T *x, const T *y, int64_t S, int64_t D, int64_t n, const void *gate, int gdt,
                            int64_t gbs, int tg) {
  GS_LOOP(i, n) {
    float g = 1.0f;
    if (gate) {
      int64_t d = i % D, b = i / (S * D);
      g = cu_ldw(gate, gdt, b * gbs + d);
      if (tg) g = tanhf(g);
    }
    cu_st(x, i, cu_ld(x, i) + g * cu_ld(y, i));
  }
}

extern "C" cudaError_t cuk_gated_add(void *x, const void *y, int dt, int64_t B, int64_t S, int64_t D,
                                     const void *gate, int gdt, int64_t gbs, int tanh_gate, cudaStream_t s) {
  int64_t n = B * S * D;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_gated_add<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)x, (const T *)y, S, D, n, gate, gdt,
                                                                       gbs, tanh_gate));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_bias_act(T *y, int64_t N, int64_t n, const void *bias, int bdt, int act) {
  GS_LOOP(i, n) {
    float v = cu_ld(y, i);
    if (bias) v += cu_ldw(bias, bdt, i % N);
    cu_st(y, i, cu_act(v, act));
  }
}

extern "C" cudaError_t cuk_bias_act(void *y, int dt, int64_t M, int64_t N, const void *bias, int bdt, int act,
                                    cudaStream_t s) {
  int64_t n = M * N;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_bias_act<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, N, n, bias, bdt, act));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_bias_channel(T *y, int64_t C, int64_t P, int64_t n, const void *bias, int bdt) {
  GS_LOOP(i, n) cu_st(y, i, cu_ld(y, i) + cu_ldw(bias, bdt, (i / P) % C));
}

extern "C" cudaError_t cuk_bias_channel(void *y, int dt, int64_t B, int64_t C, int64_t P, const void *bias,
                                        int bdt, cudaStream_t s) {
  int64_t n = B * C * P;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_bias_channel<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, C, P, n, bias, bdt));
  return cudaGetLastError();
}

/* One thread per input element, writing its 2x2 block; blocks over (a stretch of an input
 * row, rows), so the only division is one per row. */
template <typename T>
__global__ void k_upsample2x(T *y, const T *x, int64_t H, int64_t W, int64_t rows) {
  const int64_t ix = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (ix >= W) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T v = x[r * W + ix];
    const int64_t bc = r / H, iy = r - bc * H;
    T *o = y + ((bc * 2 * H + 2 * iy) * 2 * W + 2 * ix);
    o[0] = v, o[1] = v, o[2 * W] = v, o[2 * W + 1] = v;
  }
}

extern "C" cudaError_t cuk_upsample2x(void *y, const void *x, int dt, int64_t BC, int64_t H, int64_t W,
                                      cudaStream_t s) {
  const int64_t rows = BC * H;
  if (rows <= 0 || W <= 0) return cudaSuccess;
  const int th = W >= 256 ? 256 : (int)((W + 31) / 32 * 32);
  const dim3 grid((unsigned)((W + th - 1) / th), (unsigned)(rows < 65535 ? rows : 65535));
  CU_DISPATCH(dt, T, k_upsample2x<T><<<grid, th, 0, s>>>((T *)y, (const T *)x, H, W, rows));
  return cudaGetLastError();
}
