/* Dequantization of ggml's block-quantized weights (GGUF's Q4_0 ... Q6_K) and fp8 into bf16 rows on
 * the GPU, for the linear op: a quantized weight is expanded into the backend's scratch just
 * before its GEMM, so the resident copy stays quantized. Each element is computed as ggml's
 * dequantize_row_* computes it on the CPU (fp16 scales widened exactly, products and sums
 * rounded one at a time, no fused multiply-add), then rounded to bf16 (nearest even). The
 * block layouts are ggml's (block_q8_0 ... block_q6_K in its ggml-common.h). */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

__device__ __forceinline__ float h2f(const uint8_t *p) {
  __half_raw r;
  r.x = (unsigned short)(p[0] | (p[1] << 8));
  return __half2float(__half(r));
}

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float mul_sub(float a, float b, float c) { return __fsub_rn(__fmul_rn(a, b), c); }
__device__ __forceinline__ float mul_add(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }

/* Element i of one block at b. */
__device__ __forceinline__ float dq_q8_0(const uint8_t *b, int i) { return mul((float)(int8_t)b[2 + i], h2f(b)); }

__device__ __forceinline__ float dq_q4_0(const uint8_t *b, int i) {
  const uint8_t q = b[2 + (i & 15)];
  return mul((float)((i < 16 ? q & 15 : q >> 4) - 8), h2f(b));
}

__device__ __forceinline__ float dq_q4_1(const uint8_t *b, int i) {
  const uint8_t q = b[4 + (i & 15)];
  return mul_add((float)(i < 16 ? q & 15 : q >> 4), h2f(b), h2f(b + 2));
}

/* The 5-bit value of element i of Q5_0 / Q5_1 (qh at h, qs at s). */
__device__ __forceinline__ int q5_value(const uint8_t *h, const uint8_t *s, int i) {
  const uint32_t qh = h[0] | (h[1] << 8) | (h[2] << 16) | ((uint32_t)h[3] << 24);
  const int j = i & 15;
  if (i < 16) return (s[j] & 15) | (((qh >> j) << 4) & 0x10);
  return (s[j] >> 4) | ((qh >> (j + 12)) & 0x10);
}

__device__ __forceinline__ float dq_q5_0(const uint8_t *b, int i) {
  return mul((float)(q5_value(b + 2, b + 6, i) - 16), h2f(b));
}

__device__ __forceinline__ float dq_q5_1(const uint8_t *b, int i) {
  return mul_add((float)q5_value(b + 4, b + 8, i), h2f(b), h2f(b + 2));
}

/* Q2_K: scales[16], qs[64], d, dmin. */
__device__ __forceinline__ float dq_q2_k(const uint8_t *b, int i) {
  const int n = i >> 7, r = i & 127, j = r >> 5, second = (r >> 4) & 1, l = r & 15;
  const uint8_t sc = b[n * 8 + j * 2 + second];
  const int v = (b[16 + n * 32 + second * 16 + l] >> (2 * j)) & 3;
  const float dl = mul(h2f(b + 80), (float)(sc & 15)), ml = mul(h2f(b + 82), (float)(sc >> 4));
  return mul_sub(dl, (float)v, ml);
}

/* Q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales), d. */
__device__ __forceinline__ float dq_q3_k(const uint8_t *b, int i) {
  const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
  const int n = i >> 7, r = i & 127, j = r >> 5, second = (r >> 4) & 1, l = r & 15;
  const int is = n * 8 + j * 2 + second, k = is & 3, grp = is >> 2;
  const int lo = grp == 0 ? s[k] & 15 : grp == 1 ? s[4 + k] & 15 : grp == 2 ? s[k] >> 4 : s[4 + k] >> 4;
  const int hi = (s[8 + k] >> (2 * grp)) & 3;
  const int scale = (int)(int8_t)(uint8_t)(lo | (hi << 4)) - 32;
  const int q = (qs[n * 32 + second * 16 + l] >> (2 * j)) & 3;
  const int v = q - ((hm[second * 16 + l] & (1 << (n * 4 + j))) ? 0 : 4);
  return mul(mul(h2f(b + 108), (float)scale), (float)v);
}

/* The 6-bit scale and min j of a K block's 12 scale bytes q (ggml's get_scale_min_k4). */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
  if (j < 4) {
    *d = q[j] & 63, *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/* Q4_K: d, dmin, scales[12], qs[128]. */
__device__ __forceinline__ float dq_q4_k(const uint8_t *b, int i) {
  const int c = i >> 6, r = i & 63;
  int sc, m;
  scale_min_k4(2 * c + (r >> 5), b + 4, &sc, &m);
  const uint8_t q = b[16 + c * 32 + (r & 31)];
  const float d1 = mul(h2f(b), (float)sc), m1 = mul(h2f(b + 2), (float)m);
  return mul_sub(d1, (float)(r < 32 ? q & 15 : q >> 4), m1);
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]. */
__device__ __forceinline__ float dq_q5_k(const uint8_t *b, int i) {
  const int c = i >> 6, r = i & 63;
  int sc, m;
  scale_min_k4(2 * c + (r >> 5), b + 4, &sc, &m);
  const uint8_t q = b[48 + c * 32 + (r & 31)], h = b[16 + (r & 31)];
  const int bit = r < 32 ? 1 << (2 * c) : 2 << (2 * c);
  const int v = (r < 32 ? q & 15 : q >> 4) + ((h & bit) ? 16 : 0);
  const float d1 = mul(h2f(b), (float)sc), m1 = mul(h2f(b + 2), (float)m);
  return mul_sub(d1, (float)v, m1);
}

/* fp8 (one-byte "blocks"): e5m2 is the high byte of an fp16; e4m3 (float8_e4m3fn) as an
 * fp16 with its exponent bias 8 short is exact after a product by 2^8, subnormals included;
 * its 0x7f / 0xff is NaN (as dit_e4m3_to_f32). */
__device__ __forceinline__ float dq_e5m2(const uint8_t *b, int i) {
  __half_raw r;
  r.x = (unsigned short)(b[i] << 8);
  return __half2float(__half(r));
}

__device__ __forceinline__ float dq_e4m3(const uint8_t *b, int i) {
  const unsigned v = b[i];
  if ((v & 0x7f) == 0x7f) return __int_as_float(0x7fc00000);
  __half_raw r;
  r.x = (unsigned short)(((v & 0x80) << 8) | ((v & 0x7f) << 7));
  return __half2float(__half(r)) * 256.0f;
}

/* Q6_K: ql[128], qh[64], scales[16] (int8), d. */
__device__ __forceinline__ float dq_q6_k(const uint8_t *b, int i) {
  const int n = i >> 7, r = i & 127, quarter = r >> 5, l = r & 31;
  const uint8_t *ql = b + n * 64, *qh = b + 128 + n * 32;
  const int8_t *sc = (const int8_t *)(b + 192 + n * 8);
  const uint8_t lo = quarter & 1 ? ql[l + 32] : ql[l];
  const int v = (int)(int8_t)(uint8_t)((quarter < 2 ? lo & 15 : lo >> 4) | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
  return mul(mul(h2f(b + 208), (float)sc[(l >> 4) + 2 * quarter]), (float)v);
}

/* Two consecutive elements per thread, y[j], y[j + 1] of the rows * K elements (a pair crosses
 * into the next row when K is odd: an fp8 FFN 341 wide); each row is K / QK blocks of BB
 * bytes. With add (bf16 [rows, K], or NULL), add_scale * add is added before the one rounding
 * to bf16. */
template <int QK, int BB, float (*DQ)(const uint8_t *, int)>
__global__ void k_dequant(__nv_bfloat16 *y, const uint8_t *w, int64_t rows, int64_t K, const __nv_bfloat16 *add,
                          float add_scale) {
  const int64_t total = rows * K, n = (total + 1) / 2, row_bytes = K / QK * BB;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = 2 * t;
    int64_t r = j / K, e = j - r * K;
    float v[2] = {0.0f, 0.0f};
    const int cnt = j + 1 < total ? 2 : 1;
    for (int u = 0; u < cnt; u++) {
      v[u] = DQ(w + r * row_bytes + e / QK * BB, (int)(e % QK));
      if (add) v[u] = fmaf(add_scale, __bfloat162float(add[j + u]), v[u]);
      if (++e == K) e = 0, r++;
    }
    if (cnt == 2) {
      __nv_bfloat162 p;
      p.x = __float2bfloat16_rn(v[0]);
      p.y = __float2bfloat16_rn(v[1]);
      reinterpret_cast<__nv_bfloat162 *>(y)[t] = p; /* y is the 256-aligned scratch */
    } else {
      y[j] = __float2bfloat16_rn(v[0]);
    }
  }
}

template <int QK, int BB, float (*DQ)(const uint8_t *, int)>
static cudaError_t launch(void *y, const void *w, int64_t rows, int64_t K, const void *add, float add_scale,
                          cudaStream_t s) {
  const int64_t n = (rows * K + 1) / 2;
  if (n <= 0) return cudaSuccess;
  k_dequant<QK, BB, DQ><<<cu_blocks(n, 256), 256, 0, s>>>((__nv_bfloat16 *)y, (const uint8_t *)w, rows, K,
                                                           (const __nv_bfloat16 *)add, add_scale);
  return cudaGetLastError();
}

/* Embedding rows of a block-quantized table: y[r][d] = table[ids[r]][d]; a bad id sets *flag
 * and zeroes its row (as k_embedding). */
template <typename T, int QK, int BB, float (*DQ)(const uint8_t *, int)>
__global__ void k_embed_q(T *y, const uint8_t *w, int64_t V, int64_t D, float ws, const void *ids, int idt,
                          int64_t n, int *flag) {
  const int64_t row_bytes = D / QK * BB;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / D, d = i - r * D;
    const int64_t id = idt == CU_DT_I64 ? ((const int64_t *)ids)[r] : (int64_t)((const int32_t *)ids)[r];
    if (id < 0 || id >= V) {
      *flag = 1;
      cu_st(y, i, 0.0f);
    } else {
      cu_st(y, i, DQ(w + id * row_bytes + d / QK * BB, (int)(d % QK)) * ws);
    }
  }
}

template <int QK, int BB, float (*DQ)(const uint8_t *, int)>
static cudaError_t launch_embed(void *y, int ydt, const void *w, int64_t V, int64_t D, float ws, const void *ids,
                                int idt, int64_t N, int *flag, cudaStream_t s) {
  const int64_t n = N * D;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(ydt, T, k_embed_q<T, QK, BB, DQ><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, (const uint8_t *)w, V, D,
                                                                                   ws, ids, idt, n, flag));
  return cudaGetLastError();
}

/* Every type with its block elements, block bytes and element decoder. */
#define DQ_TYPES(X)                                                                                        \
  X(DIT_F8_E4M3, 1, 1, dq_e4m3) X(DIT_F8_E5M2, 1, 1, dq_e5m2) X(DIT_Q8_0, 32, 34, dq_q8_0)                \
  X(DIT_Q4_0, 32, 18, dq_q4_0) X(DIT_Q4_1, 32, 20, dq_q4_1) X(DIT_Q5_0, 32, 22, dq_q5_0)                  \
  X(DIT_Q5_1, 32, 24, dq_q5_1) X(DIT_Q2_K, 256, 84, dq_q2_k) X(DIT_Q3_K, 256, 110, dq_q3_k)               \
  X(DIT_Q4_K, 256, 144, dq_q4_k) X(DIT_Q5_K, 256, 176, dq_q5_k) X(DIT_Q6_K, 256, 210, dq_q6_k)

extern "C" cudaError_t cuk_embedding_q(void *y, int ydt, const void *table, int tdt, int64_t V, int64_t D, float ws,
                                       const void *ids, int idt, int64_t N, int *flag, cudaStream_t s) {
  switch (tdt) {
#define EMBED_CASE(T, QK, BB, DQ) \
  case T: return launch_embed<QK, BB, DQ>(y, ydt, table, V, D, ws, ids, idt, N, flag, s);
    DQ_TYPES(EMBED_CASE)
#undef EMBED_CASE
    default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t cuk_dequant_bf16(void *y, const void *w, int dtype, int64_t rows, int64_t K, const void *add,
                                       float add_scale, cudaStream_t s) {
  switch (dtype) {
#define DEQUANT_CASE(T, QK, BB, DQ) \
  case T: return launch<QK, BB, DQ>(y, w, rows, K, add, add_scale, s);
    DQ_TYPES(DEQUANT_CASE)
#undef DEQUANT_CASE
    default: return cudaErrorInvalidValue;
  }
}
