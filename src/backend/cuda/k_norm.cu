/* Normalization CUDA kernels: RMSNorm, LayerNorm and softmax, one block per row;
 * statistics in fp32 with a two-pass mean/variance. (GroupNorm: k_group_norm.cu.) */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

template <typename T>
__global__ void k_rms_norm(T *y, const T *x, int64_t D, const void *w, int wdt, float eps) {
  __shared__ float sh[32];
  const T *xr = x + blockIdx.x * D;
  T *yr = y + blockIdx.x * D;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = cu_ld(xr, i);
    ss += v * v;
  }
  ss = cu_block_sum(ss, sh);
  float r = rsqrtf(ss / (float)D + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = cu_ld(xr, i) * r;
    if (w) v *= cu_ldw(w, wdt, i);
    cu_st(yr, i, v);
  }
}

/* Mean and 1 / sqrt(centred variance + eps) of xr[0, n), two passes, over the block. */
template <typename T>
__device__ __forceinline__ void mean_rstd(const T *xr, int64_t n, float eps, float *sh, float *mean, float *r) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += cu_ld(xr, i);
  const float m = cu_block_sum(s, sh) / (float)n;
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float d = cu_ld(xr, i) - m;
    q += d * d;
  }
  *mean = m;
  *r = rsqrtf(cu_block_sum(q, sh) / (float)n + eps);
}

template <typename T>
__global__ void k_layer_norm(T *y, const T *x, int64_t D, const void *w, int wdt, const void *b, int bdt,
                             float eps) {
  __shared__ float sh[32];
  const T *xr = x + blockIdx.x * D;
  T *yr = y + blockIdx.x * D;
  float mean, r;
  mean_rstd(xr, D, eps, sh, &mean, &r);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = (cu_ld(xr, i) - mean) * r;
    if (w) v *= cu_ldw(w, wdt, i);
    if (b) v += cu_ldw(b, bdt, i);
    cu_st(yr, i, v);
  }
}

static int norm_threads(int64_t D) {
  int t = 32;
  while (t < 1024 && t * 4 < D) t *= 2;
  return t;
}

extern "C" cudaError_t cuk_rms_norm(void *y, const void *x, int dt, int64_t rows, int64_t D, const void *w,
                                    int wdt, float eps, cudaStream_t s) {
  if (rows <= 0 || D <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_rms_norm<T><<<(unsigned)rows, norm_threads(D), 0, s>>>((T *)y, (const T *)x, D, w, wdt,
                                                                               eps));
  return cudaGetLastError();
}

extern "C" cudaError_t cuk_layer_norm(void *y, const void *x, int dt, int64_t rows, int64_t D, const void *w,
                                      int wdt, const void *b, int bdt, float eps, cudaStream_t s) {
  if (rows <= 0 || D <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_layer_norm<T><<<(unsigned)rows, norm_threads(D), 0, s>>>((T *)y, (const T *)x, D, w,
                                                                                 wdt, b, bdt, eps));
  return cudaGetLastError();
}

/* One thread per position: the sum of squares over the C channels (coalesced across the
 * positions of a warp), then y = x / d * scale * w (+ SiLU): channel_rms_norm (eps < 0) divides by
 * max(||x||, 1e-12) and scales by sqrt(C); pixel_norm by sqrt(mean + eps), scale 1, no w. */
template <typename T>
__global__ void k_position_norm(T *y, const T *x, int64_t C, int64_t HW, const void *w, int wdt, float scale, float eps,
                                bool silu) {
  const int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= HW) return;
  const T *xb = x + blockIdx.y * C * HW + p;
  T *yb = y + blockIdx.y * C * HW + p;
  float ss = 0.0f;
  for (int64_t c = 0; c < C; c++) {
    const float v = cu_ld(xb, c * HW);
    ss += v * v;
  }
  const float d = eps >= 0.0f ? sqrtf(ss / (float)C + eps) : fmaxf(sqrtf(ss), 1e-12f);
  for (int64_t c = 0; c < C; c++) {
    float v = cu_ld(xb, c * HW) / d * scale;
    if (w) v *= cu_ldw(w, wdt, c);
    cu_st(yb, c * HW, silu ? v / (1.0f + __expf(-v)) : v);
  }
}

static cudaError_t position_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW, const void *w,
                                 int wdt, float scale, float eps, bool silu, cudaStream_t s) {
  if (B <= 0 || C <= 0 || HW <= 0) return cudaSuccess;
  const dim3 grid((unsigned)((HW + 255) / 256), (unsigned)B);
  CU_DISPATCH(dt, T, k_position_norm<T><<<grid, 256, 0, s>>>((T *)y, (const T *)x, C, HW, w, wdt, scale, eps, silu));
  return cudaGetLastError();
}

extern "C" cudaError_t cuk_channel_rms_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW,
                                            const void *w, int wdt, bool silu, cudaStream_t s) {
  return position_norm(y, x, dt, B, C, HW, w, wdt, sqrtf((float)C), -1.0f, silu, s);
}

extern "C" cudaError_t cuk_pixel_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW, float eps,
                                      bool silu, cudaStream_t s) {
  return position_norm(y, x, dt, B, C, HW, NULL, 0, 1.0f, eps, silu, s);
}

template <typename T>
__global__ void k_softmax(T *y, const T *x, int64_t D) {
  __shared__ float sh[32];
  const T *xr = x + blockIdx.x * D;
  T *yr = y + blockIdx.x * D;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) m = fmaxf(m, cu_ld(xr, i));
  m = cu_block_max(m, sh);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += expf(cu_ld(xr, i) - m);
  float inv = 1.0f / cu_block_sum(s, sh);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) cu_st(yr, i, expf(cu_ld(xr, i) - m) * inv);
}

extern "C" cudaError_t cuk_softmax(void *y, const void *x, int dt, int64_t rows, int64_t D, cudaStream_t s) {
  if (rows <= 0 || D <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, k_softmax<T><<<(unsigned)rows, norm_threads(D), 0, s>>>((T *)y, (const T *)x, D));
  return cudaGetLastError();
}
