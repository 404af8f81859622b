/* Indexing CUDA kernels: strided copy with dtype conversion, embedding lookup,
 * sinusoidal timestep embedding (fp32), RoPE (both pair layouts, fp32 tables),
 * im2col for conv2d, and for the tuners' result checks: pseudo-random operands and a hash of a
 * result matrix. */
#include <cuda_fp8.h>

#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

#define GS_LOOP(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
                           i += (int64_t)gridDim.x * blockDim.x)

struct cu_strides {
  int ndim;
  int64_t shape[8], ds[8], ss[8];
};

/* Destination and source element offsets of flat index i. */
__device__ __forceinline__ void strided_offsets(const cu_strides &st, int64_t i, int64_t *od, int64_t *os) {
  int64_t r = i, o_d = 0, o_s = 0;
  for (int d = st.ndim - 1; d >= 0; d--) {
    int64_t c = r % st.shape[d];
    r /= st.shape[d];
    o_d += c * st.ds[d];
    o_s += c * st.ss[d];
  }
  *od = o_d, *os = o_s;
}

template <typename D, typename S>
__global__ void k_copy(D *dst, const S *src, cu_strides st, int64_t n) {
  GS_LOOP(i, n) {
    int64_t od, os;
    strided_offsets(st, i, &od, &os);
    cu_st(dst, od, cu_ld(src, os));
  }
}

template <typename E>
__global__ void k_copy_raw(E *dst, const E *src, cu_strides st, int64_t n) {
  GS_LOOP(i, n) {
    int64_t od, os;
    strided_offsets(st, i, &od, &os);
    dst[od] = src[os];
  }
}

extern "C" cudaError_t cuk_copy(void *dst, int ddt, const void *src, int sdt, int ndim, const int64_t *shape,
                                const int64_t *dstride, const int64_t *sstride, int esize, cudaStream_t s) {
  cu_strides st;
  int64_t n = 1;
  st.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    st.shape[d] = shape[d];
    st.ds[d] = dstride[d];
    st.ss[d] = sstride[d];
    n *= shape[d];
  }
  if (n <= 0) return cudaSuccess;
  unsigned g = cu_blocks(n, 256);
  if (esize == 1) k_copy_raw<uint8_t><<<g, 256, 0, s>>>((uint8_t *)dst, (const uint8_t *)src, st, n);
  else if (esize == 2) k_copy_raw<uint16_t><<<g, 256, 0, s>>>((uint16_t *)dst, (const uint16_t *)src, st, n);
  else if (esize == 4) k_copy_raw<uint32_t><<<g, 256, 0, s>>>((uint32_t *)dst, (const uint32_t *)src, st, n);
  else if (esize == 8) k_copy_raw<uint64_t><<<g, 256, 0, s>>>((uint64_t *)dst, (const uint64_t *)src, st, n);
  else
    CU_DISPATCH(ddt, TD, CU_DISPATCH(sdt, TS, k_copy<TD, TS><<<g, 256, 0, s>>>((TD *)dst, (const TS *)src, st, n)));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_embedding(T *y, const void *table, int tdt, int64_t V, int64_t D, const void *ids, int idt,
                            int64_t n, int *flag) {
  GS_LOOP(i, n) {
    int64_t r = i / D, d = i % D;
    int64_t id = idt == CU_DT_I64 ? ((const int64_t *)ids)[r] : (int64_t)((const int32_t *)ids)[r];
    if (id < 0 || id >= V) {
      *flag = 1;
      cu_st(y, i, 0.0f);
    } else {
      cu_st(y, i, cu_ldw(table, tdt, id * D + d));
    }
  }
}

extern "C" cudaError_t cuk_embedding(void *y, int ydt, const void *table, int tdt, int64_t V, int64_t D,
                                     const void *ids, int idt, int64_t N, int *flag, cudaStream_t s) {
  int64_t n = N * D;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(ydt, T, k_embedding<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, table, tdt, V, D, ids, idt, n,
                                                                        flag));
  return cudaGetLastError();
}

template <typename T>
__global__ void k_timestep(T *y, const float *t, int64_t N, int dim, float lmp, float shift, float scale,
                           int flip) {
  int half = dim / 2;
  int64_t n = N * dim;
  GS_LOOP(i, n) {
    int64_t r = i / dim;
    int c = (int)(i % dim);
    float v = 0.0f;
    if (c < 2 * half) {
      int j = c < half ? c : c - half;
      bool first = c < half;
      /* fp32 operation order as diffusers; exp/sin/cos evaluated in double and rounded,
       * so the phase matches a correctly rounded fp32 library even for large arguments */
      float ex = -lmp * (float)j;
      ex = ex / ((float)half - shift);
      float f = (float)exp((double)ex);
      float arg = scale * (t[r] * f);
      bool is_sin = flip ? !first : first;
      v = (float)(is_sin ? sin((double)arg) : cos((double)arg));
    }
    cu_st(y, i, v);
  }
}

extern "C" cudaError_t cuk_timestep(void *y, int ydt, const float *t, int64_t N, int dim, float max_period,
                                    float shift, float scale, int flip, cudaStream_t s) {
  int64_t n = N * dim;
  if (n <= 0) return cudaSuccess;
  float lmp = (float)log((double)max_period);
  CU_DISPATCH(ydt, T, k_timestep<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)y, t, N, dim, lmp, shift, scale,
                                                                       flip));
  return cudaGetLastError();
}

/* One thread per rotated pair; row (b, s, h) of x at b * xb + s * xs + h * xh (strided views). */
template <typename T>
__global__ void k_rope(T *x, int64_t S, int64_t H, int64_t D, int64_t xb, int64_t xs, int64_t xh, const float *cos,
                       const float *sin, int64_t csb, int mode, int64_t n) {
  int64_t half = D / 2;
  GS_LOOP(i, n) {
    int64_t p = i % half, row = i / half; /* row = (b*S + s)*H + h */
    int64_t h = row % H, sidx = (row / H) % S, b = row / (H * S);
    int64_t ci = b * csb + sidx * half + p;
    float c = cos[ci], sn = sin[ci];
    int64_t i0 = mode == 0 ? 2 * p : p, i1 = mode == 0 ? 2 * p + 1 : p + half;
    T *r = x + b * xb + sidx * xs + h * xh;
    float x0 = cu_ld(r, i0), x1 = cu_ld(r, i1);
    cu_st(r, i0, x0 * c - x1 * sn);
    cu_st(r, i1, x0 * sn + x1 * c);
  }
}

extern "C" cudaError_t cuk_rope(void *x, int dt, int64_t B, int64_t S, int64_t H, int64_t D, const int64_t *xstride,
                                const float *cos, const float *sin, int64_t csb, int mode, cudaStream_t s) {
  int64_t n = B * S * H * (D / 2);
  if (n <= 0) return cudaSuccess;
  const int64_t xb = xstride ? xstride[0] : S * H * D, xs = xstride ? xstride[1] : H * D, xh = xstride ? xstride[2] : D;
  CU_DISPATCH(dt, T, k_rope<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)x, S, H, D, xb, xs, xh, cos, sin, csb, mode, n));
  return cudaGetLastError();
}

/* col[(ci*kh + ky)*kw + kx, j] = x[ci, oy*stride - pad + ky, ox*stride - pad + kx] for pixel p0 + j. */
template <typename C, typename X>
__global__ void k_im2col(C *col, const X *x, int64_t Ci, int64_t H, int64_t W, int kh, int kw, int stride,
                         int pad, int64_t Wo, int64_t p0, int64_t np, int64_t n) {
  GS_LOOP(i, n) {
    int64_t j = i % np, kk = i / np;
    int kx = (int)(kk % kw), ky = (int)((kk / kw) % kh);
    int64_t ci = kk / ((int64_t)kw * kh);
    int64_t p = p0 + j, oy = p / Wo, ox = p % Wo;
    int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
    float v = 0.0f;
    if (iy >= 0 && iy < H && ix >= 0 && ix < W) v = cu_ld(x, (ci * H + iy) * W + ix);
    cu_st(col, i, v);
  }
}

extern "C" cudaError_t cuk_im2col(void *col, int cdt, const void *x, int xdt, int64_t Ci, int64_t H, int64_t W,
                                  int kh, int kw, int stride, int pad, int64_t Ho, int64_t Wo, int64_t p0,
                                  int64_t np, cudaStream_t s) {
  int64_t n = Ci * kh * kw * np;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(cdt, TC, CU_DISPATCH(xdt, TX, k_im2col<TC, TX><<<cu_blocks(n, 256), 256, 0, s>>>(
                                               (TC *)col, (const TX *)x, Ci, H, W, kh, kw, stride, pad, Wo, p0,
                                               np, n)));
  return cudaGetLastError();
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* *out += sum over the rows x cols values (column j at p + j*ld) of mix(index, bits): a
 * wrapping sum, so the value does not depend on the order the blocks add in. */
template <typename T>
__global__ void k_hash(const T *p, int64_t rows, int64_t ld, int64_t n, unsigned long long *out) {
  unsigned long long h = 0;
  GS_LOOP(i, n) {
    const int64_t c = i / rows, r = i % rows;
    h += mix64(mix64((unsigned long long)i + 1) ^ (unsigned long long)p[c * ld + r]);
  }
  for (int o = 16; o > 0; o >>= 1) h += __shfl_down_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, h);
}

extern "C" cudaError_t cuk_hash(const void *p, int elt, int64_t rows, int64_t cols, int64_t ld,
                                unsigned long long *out, cudaStream_t s) {
  if (rows <= 0 || cols <= 0 || ld < rows || (elt != 2 && elt != 4)) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(out, 0, sizeof *out, s);
  if (e != cudaSuccess) return e;
  const int64_t n = rows * cols;
  unsigned blocks = cu_blocks(n, 256);
  if (blocks > 1024) blocks = 1024;
  if (elt == 2) k_hash<unsigned short><<<blocks, 256, 0, s>>>((const unsigned short *)p, rows, ld, n, out);
  else k_hash<unsigned><<<blocks, 256, 0, s>>>((const unsigned *)p, rows, ld, n, out);
  return cudaGetLastError();
}

/* p[i] = a pseudo-random value in [-1, 1) of seed and i. */
template <typename T>
__global__ void k_fill_random(T *p, int64_t n, unsigned long long seed) {
  GS_LOOP(i, n) cu_st(p, i, (float)(mix64(seed + (unsigned long long)i) >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

/* The same as e4m3 codes (fp8 GEMM tuning operands). */
__global__ void k_fill_random_e4m3(uint8_t *p, int64_t n, unsigned long long seed) {
  GS_LOOP(i, n) {
    const float v = (float)(mix64(seed + (unsigned long long)i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    p[i] = (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
}

extern "C" cudaError_t cuk_fill_random(void *p, int dt, int64_t n, unsigned long long seed, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (dt == DIT_F8_E4M3) {
    k_fill_random_e4m3<<<cu_blocks(n, 256), 256, 0, s>>>((uint8_t *)p, n, seed);
    return cudaGetLastError();
  }
  CU_DISPATCH(dt, T, k_fill_random<T><<<cu_blocks(n, 256), 256, 0, s>>>((T *)p, n, seed));
  return cudaGetLastError();
}
