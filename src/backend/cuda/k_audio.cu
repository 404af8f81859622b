/* CUDA kernels of the audio ops (cuda_audio.c checks the operands): unary, snake over channels
 * last, resample1d (depthwise FIR with replicate edges, one thread per output element, channels
 * fastest) and complex_abs. Arithmetic in fp32 (audio_math.h, shared with the CPU). */
#include "backend/audio_math.h"
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

#define GS_LOOP(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
                           i += (int64_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void k_unary(T *y, const T *x, int64_t n, int fn, float a, float b) {
  GS_LOOP(i, n) cu_st(y, i, dit_unary_apply(cu_ld(x, i), fn, a, b));
}

extern "C" cudaError_t cuk_unary(void *y, const void *x, int dt, int64_t n, int fn, float a, float b,
                                 cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_unary<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, n, fn, a, b));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_snake(T *y, const T *x, int64_t n, int64_t C, const void *alpha, int adt, const void *beta, int bdt,
                        float eps) {
  GS_LOOP(i, n) {
    const int64_t c = i % C;
    const float inv = 1.0f / (cu_ldw(beta, bdt, c) + eps);
    cu_st(y, i, dit_snake_apply(cu_ld(x, i), cu_ldw(alpha, adt, c), inv));
  }
}

extern "C" cudaError_t cuk_snake(void *y, const void *x, int dt, int64_t rows, int64_t C, const void *alpha, int adt,
                                 const void *beta, int bdt, float eps, cudaStream_t s) {
  const int64_t n = rows * C;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_snake<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, n, C, alpha, adt, beta, bdt,
                                                                  eps));
  return cudaGetLastError();
}

/* floor(n / d) for d > 0. */
__device__ __forceinline__ int64_t fdiv(int64_t n, int64_t d) { return n >= 0 ? n / d : -((-n + d - 1) / d); }

template <typename T>
__global__ void k_resample1d(T *y, const T *x, const void *f, int fdt, cu_resample_geom g, int64_t n) {
  GS_LOOP(i, n) {
    const int64_t c = i % g.C, t = (i / g.C) % g.To, b = i / (g.C * g.To);
    const T *xb = x + b * g.Ti * g.C + c;
    float acc = 0.0f;
    for (int64_t k = 0; k < g.K; k++) {
      const int64_t m = t * g.down + k - g.offset, q = fdiv(m, g.up);
      if (q * g.up != m) continue;
      const int64_t r = q < 0 ? 0 : (q >= g.Ti ? g.Ti - 1 : q);
      acc += cu_ldw(f, fdt, k) * cu_ld(xb, r * g.C);
    }
    cu_st(y, i, acc * g.gain);
  }
}

extern "C" cudaError_t cuk_resample1d(void *y, const void *x, int dt, const void *f, int fdt, const cu_resample_geom *g,
                                      cudaStream_t s) {
  const int64_t n = g->B * g->To * g->C;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_resample1d<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, f, fdt, *g, n));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_complex_abs(T *y, const T *x, int64_t F, int64_t n) {
  GS_LOOP(i, n) {
    const int64_t r = i / F, j = i % F;
    const float re = cu_ld(x, r * 2 * F + j), im = cu_ld(x, r * 2 * F + F + j);
    cu_st(y, i, sqrtf(re * re + im * im));
  }
}

extern "C" cudaError_t cuk_complex_abs(void *y, const void *x, int dt, int64_t rows, int64_t F, cudaStream_t s) {
  const int64_t n = rows * F;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_complex_abs<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const T *)x, F, n));
  return cudaGetLastError();
}
