/* Row-parallel normalization kernels with 16-byte accesses, and the fused ops built on
 * them: RMSNorm (+ modulate), gated residual (of a normed or a raw r) + RMSNorm (+ modulate with
 * shift), RMSNorm + interleaved RoPE per head, RMSNorm over a whole row + split RoPE, gated
 * residual + LayerNorm + modulate (shift and scale). Long
 * rows (D/8 > 32 chunks of 8) take one block per row and keep the row in registers (each
 * input read once); short rows (attention heads) take a team of L <= 32 lanes of a warp,
 * 32/L rows per warp. Math in fp32; the residual stream is rounded to its storage type
 * before its norm is taken, as the unfused sequence (store, reload) does. */
#include "backend/cuda/cu_vec.cuh"
#include "backend/cuda/cuda_internal.h"

/* u = u * rr * wh * (1 + scale[b]) + shift[b] for the 8 elements from column c8. */
__device__ __forceinline__ void out_mod(float *u, float rr, const cu_rowargs &a, int64_t b, int64_t c8) {
  float w[8], sc[8], sf[8];
  if (a.wh) ld8w(a.wh, a.whdt, c8, w);
  else
    for (int k = 0; k < 8; k++) w[k] = 1.0f;
  if (a.scale) ld8w(a.scale, a.sdt, b * a.vbs + c8, sc);
  else
    for (int k = 0; k < 8; k++) sc[k] = 0.0f;
  if (a.shift) ld8w(a.shift, a.shdt, b * a.vbs + c8, sf);
  else
    for (int k = 0; k < 8; k++) sf[k] = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; k++) u[k] = u[k] * rr * w[k] * (1.0f + sc[k]) + sf[k];
}

/* This thread's chunks t + j * blockDim.x (j < NC) of 8 elements of row xr into u, and the sum of their squares. */
template <typename T, int NC>
__device__ __forceinline__ float row_load(const T *xr, int64_t D8, float (*u)[8]) {
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < NC; j++) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    if (c < D8) {
      ld8(xr + c * 8, u[j]);
#pragma unroll
      for (int k = 0; k < 8; k++) ss += u[j][k] * u[j][k];
    }
  }
  return ss;
}

/* One block per row; thread t owns chunks t + j * blockDim.x (j < NC) of 8 elements. */
/* Register budget: NC <= 2 (rows up to 4096) 64 registers, 4 blocks of 256 per SM; NC = 4 128; NC = 8 (rows
 * over 8192, 1024 threads) 64 and spills (no model here has such rows). */
template <typename T, int NC>
__global__ void __launch_bounds__(NC == 8 ? 1024 : 256, NC == 8 ? 1 : NC == 4 ? 2 : 4) kf_row(T *h, T *x, const T *r, int64_t S, int64_t D, cu_rowargs a) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x, b = row / S, D8 = D / 8;
  T *xr = x + row * D;
  float u[NC][8];
  float ss = 0.0f;
  if (r) {
    const T *rrow = r + row * D;
    float xv[NC][8]; /* x loaded with r, before the reduction: both streams in flight at once */
#pragma unroll
    for (int j = 0; j < NC; j++) {
      int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
      if (c < D8) {
        ld8(rrow + c * 8, u[j]);
        ld8(xr + c * 8, xv[j]);
#pragma unroll
        for (int k = 0; k < 8; k++) ss += u[j][k] * u[j][k];
      }
    }
    const float rr = a.r_raw ? 1.0f : rsqrtf(cu_block_sum(ss, sh) / (float)D + a.eps); /* r_raw: uniform */
    ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NC; j++) {
      int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
      if (c < D8) {
        float w[8], g[8];
        if (a.wr && !a.r_raw) ld8w(a.wr, a.wrdt, c * 8, w);
        else
          for (int k = 0; k < 8; k++) w[k] = 1.0f;
        if (a.gate) {
          ld8w(a.gate, a.gdt, b * a.vbs + c * 8, g);
          if (a.tanh_gate)
            for (int k = 0; k < 8; k++) g[k] = tanhf(g[k]);
        } else {
          for (int k = 0; k < 8; k++) g[k] = 1.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
          float v = cu_rnd(xv[j][k] + g[k] * (u[j][k] * rr * w[k]), xr);
          u[j][k] = v;
          ss += v * v;
        }
        st8(xr + c * 8, u[j]);
      }
    }
    if (!h) return; /* uniform over the block */
  } else {
    ss = row_load<T, NC>(xr, D8, u);
  }
  const float rr = rsqrtf(cu_block_sum(ss, sh) / (float)D + a.eps);
  T *hr = h + row * D;
#pragma unroll
  for (int j = 0; j < NC; j++) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    if (c < D8) {
      out_mod(u[j], rr, a, b, c * 8);
      st8(hr + c * 8, u[j]);
    }
  }
}

/* Gated residual + LayerNorm + modulate, one block per row (chunks as kf_row): x += g * r
 * (rounded to T, stored), then h = (x - mean) * rsqrt(var + eps) * (1 + scale) + shift with the
 * mean and the centred variance from the row held in registers (two block reductions). */
template <typename T, int NC>
__global__ void __launch_bounds__(NC == 8 ? 1024 : 256, NC == 8 ? 1 : NC == 4 ? 2 : 4) kf_ln_row(T *h, T *x, const T *r, int64_t S, int64_t D, cu_rowargs a) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x, b = row / S, D8 = D / 8;
  T *xr = x + row * D;
  float u[NC][8];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < NC; j++) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    if (c < D8) {
      ld8(xr + c * 8, u[j]);
      if (r) {
        float rv[8], g[8];
        ld8(r + row * D + c * 8, rv);
        if (a.gate) ld8w(a.gate, a.gdt, b * a.vbs + c * 8, g);
        else
          for (int k = 0; k < 8; k++) g[k] = 1.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) u[j][k] = cu_rnd(u[j][k] + g[k] * rv[k], xr);
        st8(xr + c * 8, u[j]);
      }
#pragma unroll
      for (int k = 0; k < 8; k++) sum += u[j][k];
    }
  }
  if (!h) return; /* uniform over the block */
  const float mean = cu_block_sum(sum, sh) / (float)D;
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < NC; j++) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    if (c < D8)
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float d = u[j][k] - mean;
        ss += d * d;
      }
  }
  const float rr = rsqrtf(cu_block_sum(ss, sh) / (float)D + a.eps);
  T *hr = h + row * D;
#pragma unroll
  for (int j = 0; j < NC; j++) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    if (c < D8) {
      float sc[8], sf[8];
      if (a.scale) ld8w(a.scale, a.sdt, b * a.vbs + c * 8, sc);
      else
        for (int k = 0; k < 8; k++) sc[k] = 0.0f;
      if (a.shift) ld8w(a.shift, a.shdt, b * a.vbs + c * 8, sf);
      else
        for (int k = 0; k < 8; k++) sf[k] = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k++) u[j][k] = (u[j][k] - mean) * rr * (1.0f + sc[k]) + sf[k];
      st8(hr + c * 8, u[j]);
    }
  }
}

/* Element strides (batch, sequence, head) of the rows of a [B, S, H, D] tensor. */
struct kf_strides {
  int64_t b, s, h;
};

/* A team of L lanes (L divides 32) per row of D <= 8 L: h = rms_norm(x) * wh * (1 + scale[row / S]),
 * or, with cos, x [B,S,H,D] rows normed and rotated in place (interleaved pairs). Row (b, s, hh)
 * of x and h starts at b * st.b + s * st.s + hh * st.h (strided views, e.g. q/k column slices of
 * a fused projection). */
template <typename T, int L>
__global__ void kf_team(T *h, const T *x, int64_t rows, int64_t S, int64_t H, int64_t D, cu_rowargs a,
                        const float *cos, const float *sin, int64_t csb, kf_strides st) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t row = t / L;
  const int lane = (int)(t % L);
  const bool ok = row < rows && lane < D / 8;
  const int64_t hh = row % H, s = (row / H) % S, b = row / (H * S);
  const int64_t ro = b * st.b + s * st.s + hh * st.h;
  float u[8];
  float ss = 0.0f;
  if (ok) {
    ld8(x + ro + lane * 8, u);
#pragma unroll
    for (int k = 0; k < 8; k++) ss += u[k] * u[k];
  }
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o); /* every lane takes part */
  if (!ok) return;
  const float rr = rsqrtf(ss / (float)D + a.eps);
  const int64_t c8 = (int64_t)lane * 8;
  if (!cos) {
    out_mod(u, rr, a, row / S, c8);
    st8(h + ro + c8, u);
    return;
  }
  float w[8];
  if (a.wh) ld8w(a.wh, a.whdt, c8, w);
  else
    for (int k = 0; k < 8; k++) w[k] = 1.0f;
  const int64_t ci = b * csb + s * (D / 2) + (int64_t)lane * 4;
  const float4 c = *reinterpret_cast<const float4 *>(cos + ci), sn = *reinterpret_cast<const float4 *>(sin + ci);
  const float cc[4] = {c.x, c.y, c.z, c.w}, sv[4] = {sn.x, sn.y, sn.z, sn.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float x0 = u[2 * k] * rr * w[2 * k], x1 = u[2 * k + 1] * rr * w[2 * k + 1];
    u[2 * k] = x0 * cc[k] - x1 * sv[k];
    u[2 * k + 1] = x0 * sv[k] + x1 * cc[k];
  }
  st8(h + ro + c8, u);
}

template <typename T>
static cudaError_t launch_team(T *h, const T *x, int64_t rows, int64_t S, int64_t H, int64_t D,
                               const cu_rowargs &a, const float *cos, const float *sin, int64_t csb,
                               const kf_strides &st, cudaStream_t s) {
  int64_t D8 = D / 8;
  int L = 1;
  while (L < D8) L *= 2;
  int64_t blocks = (rows * L + 255) / 256;
  if (L > 32 || blocks > 0x7fffffff) return cudaErrorInvalidValue;
  switch (L) {
#define TEAM(n) \
  case n: kf_team<T, n><<<(unsigned)blocks, 256, 0, s>>>(h, x, rows, S, H, D, a, cos, sin, csb, st); break;
    TEAM(1) TEAM(2) TEAM(4) TEAM(8) TEAM(16) TEAM(32)
#undef TEAM
  }
  return cudaGetLastError();
}

/* One block per row (kf_row, or kf_ln_row when LN): NC chunks of 8 per thread by row length. */
template <typename T, bool LN>
static cudaError_t launch_row(T *h, T *x, const T *r, int64_t rows, int64_t S, int64_t D, const cu_rowargs &a,
                              cudaStream_t s) {
  int64_t D8 = D / 8;
  int nc = D8 <= 256 ? 1 : D8 <= 512 ? 2 : D8 <= 1024 ? 4 : 8;
  int64_t threads = ((D8 + nc - 1) / nc + 31) / 32 * 32;
  if (threads > 1024 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  switch (nc) {
#define ROW(n)                                                                          \
  case n:                                                                               \
    if (LN) kf_ln_row<T, n><<<(unsigned)rows, (unsigned)threads, 0, s>>>(h, x, r, S, D, a); \
    else kf_row<T, n><<<(unsigned)rows, (unsigned)threads, 0, s>>>(h, x, r, S, D, a);      \
    break;
    ROW(1) ROW(2) ROW(4) ROW(8)
#undef ROW
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cuk_f_norm(void *h, void *x, const void *r, int dt, int64_t B, int64_t S, int64_t D,
                                  const cu_rowargs *a, cudaStream_t s) {
  int64_t rows = B * S;
  if (rows <= 0 || D <= 0) return cudaSuccess;
  if (D % 8 || S <= 0) return cudaErrorInvalidValue;
  if (!r && D / 8 <= 32) {
    const kf_strides st = {S * D, D, D};
    CU_DISPATCH(dt, T, return launch_team<T>((T *)h, (const T *)x, rows, S, 1, D, *a, NULL, NULL, 0, st, s));
  }
  CU_DISPATCH(dt, T, return launch_row<T, false>((T *)h, (T *)x, (const T *)r, rows, S, D, *a, s));
  return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuk_f_lnorm(void *h, void *x, const void *r, int dt, int64_t B, int64_t S, int64_t D,
                                   const cu_rowargs *a, cudaStream_t s) {
  int64_t rows = B * S;
  if (rows <= 0 || D <= 0) return cudaSuccess;
  if (D % 8 || S <= 0) return cudaErrorInvalidValue;
  CU_DISPATCH(dt, T, return launch_row<T, true>((T *)h, (T *)x, (const T *)r, rows, S, D, *a, s));
  return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuk_f_norm_rope(void *x, int dt, int64_t B, int64_t S, int64_t H, int64_t D,
                                       const int64_t *xstride, const void *w, int wdt, float eps, const float *cos,
                                       const float *sin, int64_t csb, cudaStream_t s) {
  int64_t rows = B * S * H;
  if (rows <= 0 || D <= 0) return cudaSuccess;
  if (D % 8 || D / 8 > 32 || !cos || !sin) return cudaErrorInvalidValue;
  cu_rowargs a = {};
  a.wh = w, a.whdt = wdt, a.eps = eps;
  const kf_strides st = xstride ? kf_strides{xstride[0], xstride[1], xstride[2]} : kf_strides{S * H * D, H * D, D};
  CU_DISPATCH(dt, T, return launch_team<T>((T *)x, (const T *)x, rows, S, H, D, a, cos, sin, csb, st, s));
  return cudaErrorInvalidValue;
}

/* RMSNorm over each whole row of D (every head together), then split RoPE over its D / (2 r) chunks (LTX-2's
 * q/k): one block per row, chunks of 8 per thread as kf_row. The normed row, rounded to T as the unfused
 * sequence stores it, goes through shared memory (D floats); then each thread rotates runs of 4 pairs
 * (j, j + r) of a chunk with float4 reads of the row's tables (row tok = row % S of [S, D / 2]). r % 4 == 0. */
template <typename T, int NC>
__global__ void __launch_bounds__(256, NC == 4 ? 2 : 4) kf_row_rope(T *x, int64_t S, int64_t D, int64_t r,
                                                                    const void *w, int wdt, float eps,
                                                                    const float *cos, const float *sin) {
  extern __shared__ float nrow[];
  __shared__ float sh[32];
  const int64_t row = blockIdx.x, D8 = D / 8;
  T *xr = x + row * D;
  float u[NC][8];
  const float ss = row_load<T, NC>(xr, D8, u);
  const float rr = rsqrtf(cu_block_sum(ss, sh) / (float)D + eps);
#pragma unroll
  for (int j = 0; j < NC; j++) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    if (c < D8) {
      float wv[8];
      if (w) ld8w(w, wdt, c * 8, wv);
      else
        for (int k = 0; k < 8; k++) wv[k] = 1.0f;
#pragma unroll
      for (int k = 0; k < 8; k++) nrow[c * 8 + k] = cu_rnd(u[j][k] * rr * wv[k], xr);
    }
  }
  __syncthreads();
  const int64_t half = D / 2, tok = row % S;
  const float *cr = cos + tok * half, *sr = sin + tok * half;
  for (int64_t g = threadIdx.x; g < half / 4; g += blockDim.x) {
    const int64_t p = g * 4, h = p / r, i1 = h * 2 * r + (p - h * r), i2 = i1 + r;
    const float4 c4 = *reinterpret_cast<const float4 *>(cr + p), s4 = *reinterpret_cast<const float4 *>(sr + p);
    const float cc[4] = {c4.x, c4.y, c4.z, c4.w}, sv[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float a = nrow[i1 + k], b = nrow[i2 + k];
      cu_st(xr, i1 + k, a * cc[k] - b * sv[k]);
      cu_st(xr, i2 + k, b * cc[k] + a * sv[k]);
    }
  }
}

extern "C" cudaError_t cuk_f_row_norm_rope(void *x, int dt, int64_t rows, int64_t S, int64_t D, int64_t r,
                                           const void *w, int wdt, float eps, const float *cos, const float *sin,
                                           cudaStream_t s) {
  if (rows <= 0 || D <= 0) return cudaSuccess;
  const int64_t D8 = D / 8;
  if (D % 8 || r <= 0 || r % 4 || D % (2 * r) || S <= 0 || D8 > 1024 || rows > 0x7fffffff || !cos || !sin)
    return cudaErrorInvalidValue;
  const int nc = D8 <= 256 ? 1 : D8 <= 512 ? 2 : 4;
  const unsigned threads = (unsigned)(((D8 + nc - 1) / nc + 31) / 32 * 32);
  const size_t shm = (size_t)D * sizeof(float); /* D <= 8192: 32 KiB, under the default 48 KiB */
  switch (nc) {
#define ROWR(n)                                                                                                \
  case n:                                                                                                      \
    CU_DISPATCH(dt, T, kf_row_rope<T, n><<<(unsigned)rows, threads, shm, s>>>((T *)x, S, D, r, w, wdt, eps, cos, \
                                                                             sin);                             \
                return cudaGetLastError());                                                                    \
    break;
    ROWR(1) ROWR(2) ROWR(4)
#undef ROWR
  }
  return cudaErrorInvalidValue;
}
