/* GroupNorm(+SiLU) over [B, C, HW] in three kernels, so a 1024x1024 map of 128 channels is
 * spread over thousands of blocks instead of one block per group (32 blocks: a few percent
 * of an H100's bandwidth):
 *   1. partial sums: each block reduces one chunk of a group's contiguous cg*HW elements to
 *      sum(x - K) and sum((x - K)^2), K = the group's first element (a shift that keeps the
 *      variance from cancelling when the mean is large against the spread);
 *   2. statistics: one block per group adds its chunks' partials in double: mean, 1/sqrt(var + eps);
 *   3. apply: each block takes a stretch of one channel: y = x a + c with a = rstd w[c],
 *      c = b[c] - mean a, then SiLU if asked.
 * 16-byte loads and stores where the extents allow (8 elements), element by element otherwise. */
#include "backend/cuda/cu_vec.cuh"
#include "backend/cuda/cuda_internal.h"

#define GN_THREADS 256
#define GN_VEC 8
#define GN_CHUNK (GN_THREADS * GN_VEC * 4) /* elements per partial: 4 vectors per thread */
#define GN_APPLY (GN_THREADS * GN_VEC * 2) /* elements of a channel per apply block */
#define GN_MAX_GRID_Y 65535

static int64_t gn_chunks(int64_t n) { return (n + GN_CHUNK - 1) / GN_CHUNK; }

extern "C" size_t cuk_group_norm_ws_bytes(int64_t B, int64_t C, int64_t HW, int G) {
  if (B <= 0 || C <= 0 || HW <= 0 || G <= 0) return 0;
  const int64_t bg = B * G, n = C / G * HW;
  return (size_t)(bg * gn_chunks(n) + bg) * sizeof(float2);
}

__device__ __forceinline__ float2 block_sum2(float2 v, float2 *sh) {
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads(); /* sh may still be read from the previous call */
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = lane < nw ? sh[lane] : make_float2(0.0f, 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
      v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
    }
  }
  return v; /* valid in thread 0 */
}

/* grid (B*G, chunks): part[bg * nch + chunk] = (sum(x - K), sum((x - K)^2)) over the chunk. */
template <typename T, bool VEC>
__global__ void k_gn_partial(const T *x, int64_t n, int64_t nch, float2 *part) {
  __shared__ float2 sh[32];
  const int64_t bg = blockIdx.x;
  const T *xg = x + bg * n;
  const float K = cu_ld(xg, 0);
  for (int64_t ch = blockIdx.y; ch < nch; ch += gridDim.y) {
    const int64_t lo = ch * GN_CHUNK, hi = lo + GN_CHUNK < n ? lo + GN_CHUNK : n;
    float2 acc = make_float2(0.0f, 0.0f);
    if (VEC) {
      for (int64_t i = lo + (int64_t)threadIdx.x * GN_VEC; i < hi; i += GN_THREADS * GN_VEC) {
        float v[GN_VEC];
        ld8(xg + i, v);
#pragma unroll
        for (int k = 0; k < GN_VEC; k++) {
          const float d = v[k] - K;
          acc.x += d, acc.y += d * d;
        }
      }
    } else {
      for (int64_t i = lo + threadIdx.x; i < hi; i += GN_THREADS) {
        const float d = cu_ld(xg, i) - K;
        acc.x += d, acc.y += d * d;
      }
    }
    acc = block_sum2(acc, sh);
    if (threadIdx.x == 0) part[bg * nch + ch] = acc;
  }
}

/* One block per group: stats[bg] = (mean, 1/sqrt(var + eps)) from its nch partials. */
template <typename T>
__global__ void k_gn_stats(const T *x, int64_t n, int64_t nch, const float2 *part, float2 *stats, float eps) {
  __shared__ double sh[2][GN_THREADS];
  const int64_t bg = blockIdx.x;
  double s = 0, q = 0;
  for (int64_t i = threadIdx.x; i < nch; i += GN_THREADS) {
    const float2 p = part[bg * nch + i];
    s += p.x, q += p.y;
  }
  sh[0][threadIdx.x] = s, sh[1][threadIdx.x] = q;
  __syncthreads();
  for (int w = GN_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[0][threadIdx.x] += sh[0][threadIdx.x + w], sh[1][threadIdx.x] += sh[1][threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double K = cu_ld(x + bg * n, 0), m = sh[0][0] / (double)n;
    double var = sh[1][0] / (double)n - m * m;
    if (var < 0) var = 0;
    stats[bg] = make_float2((float)(K + m), (float)(1.0 / sqrt(var + (double)eps)));
  }
}

/* grid (B*C, stretches): y = x a + c over one channel's HW elements (in place allowed). */
template <typename T, bool VEC>
__global__ void k_gn_apply(T *y, const T *x, int64_t C, int64_t HW, int64_t cg, const float2 *stats,
                           const void *w, int wdt, const void *b, int bdt, int silu) {
  const int64_t bc = blockIdx.x, c = bc % C, bg = bc / C * (C / cg) + c / cg;
  const float2 st = stats[bg];
  const float a = st.y * (w ? cu_ldw(w, wdt, c) : 1.0f);
  const float sh = (b ? cu_ldw(b, bdt, c) : 0.0f) - st.x * a;
  const T *xc = x + bc * HW;
  T *yc = y + bc * HW;
  const int64_t nst = (HW + GN_APPLY - 1) / GN_APPLY;
  for (int64_t s = blockIdx.y; s < nst; s += gridDim.y) {
    const int64_t lo = s * GN_APPLY, hi = lo + GN_APPLY < HW ? lo + GN_APPLY : HW;
    if (VEC) {
      for (int64_t i = lo + (int64_t)threadIdx.x * GN_VEC; i < hi; i += GN_THREADS * GN_VEC) {
        float v[GN_VEC];
        ld8(xc + i, v);
#pragma unroll
        for (int k = 0; k < GN_VEC; k++) {
          const float u = v[k] * a + sh;
          v[k] = silu ? u / (1.0f + expf(-u)) : u;
        }
        st8(yc + i, v);
      }
    } else {
      for (int64_t i = lo + threadIdx.x; i < hi; i += GN_THREADS) {
        const float u = cu_ld(xc, i) * a + sh;
        cu_st(yc, i, silu ? u / (1.0f + expf(-u)) : u);
      }
    }
  }
}

static unsigned grid_y(int64_t n) { return (unsigned)(n < GN_MAX_GRID_Y ? (n > 0 ? n : 1) : GN_MAX_GRID_Y); }

template <typename T>
static void launch_gn(T *y, const T *x, int64_t B, int64_t C, int64_t HW, int G, const void *w, int wdt,
                      const void *b, int bdt, float eps, int silu, float2 *ws, cudaStream_t s) {
  const int64_t cg = C / G, n = cg * HW, bg = B * G, nch = gn_chunks(n);
  float2 *part = ws, *stats = ws + bg * nch;
  const bool al = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
  const dim3 gp((unsigned)bg, grid_y(nch)), ga((unsigned)(B * C), grid_y((HW + GN_APPLY - 1) / GN_APPLY));
  if (al && n % GN_VEC == 0) k_gn_partial<T, true><<<gp, GN_THREADS, 0, s>>>(x, n, nch, part);
  else k_gn_partial<T, false><<<gp, GN_THREADS, 0, s>>>(x, n, nch, part);
  k_gn_stats<T><<<(unsigned)bg, GN_THREADS, 0, s>>>(x, n, nch, part, stats, eps);
  if (al && HW % GN_VEC == 0) k_gn_apply<T, true><<<ga, GN_THREADS, 0, s>>>(y, x, C, HW, cg, stats, w, wdt, b, bdt, silu);
  else k_gn_apply<T, false><<<ga, GN_THREADS, 0, s>>>(y, x, C, HW, cg, stats, w, wdt, b, bdt, silu);
}

extern "C" cudaError_t cuk_group_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW, int G,
                                      const void *w, int wdt, const void *b, int bdt, float eps, int silu, void *ws,
                                      cudaStream_t s) {
  if (B <= 0 || C <= 0 || HW <= 0) return cudaSuccess;
  CU_DISPATCH(dt, T, launch_gn<T>((T *)y, (const T *)x, B, C, HW, G, w, wdt, b, bdt, eps, silu, (float2 *)ws, s));
  return cudaGetLastError();
}
