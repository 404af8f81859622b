/* Fused scaled-dot-product attention (FlashAttention-2 style): one block of 4 warps per
 * 64 query rows of one (batch, head); K/V tiles of 64 keys go through shared memory as
 * bf16; S = Q K^T and O += P V run on the tensor cores (mma.sync m16n8k16 bf16, fp32
 * accumulation) with an online softmax in fp32 registers. Key-padding mask, causal mask
 * and GQA (head h reads kv head h / (Hq / Hkv)). Head dims up to 256 (even), padded with
 * zeros to 64, 128 or 256 in shared memory. Inputs F32 (rounded to bf16 on load) or BF16.
 * Versions: 1 (default; validated on an H200: 64 rows per block, synchronous loads, V
 * transposed on store), 2 (128 rows, two-stage cp.async K/V pipeline, ldmatrix) and 3 (2 with
 * registers capped for two blocks per SM when D <= 128). 2 and 3 are NOT yet validated on a
 * GPU: env DIT_CUDA_ATTN=2 or 3 selects them; the op test checks and times all three.
 * Operands may be strided (cu_attn_strides: batch, sequence and head strides; unit stride on
 * the head dim, rows 16-byte aligned), e.g. q/k/v as column slices of a fused projection. */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

#define FA_BM 64
#define FA_BN 64
#define FA_THREADS 128

__device__ __forceinline__ void fa_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Loads 8 consecutive elements (or fewer at the row end: zeros) as bf16. */
__device__ __forceinline__ void fa_load8(__nv_bfloat16 *dst, const float *src, int n) {
  if (n >= 8) {
    float4 a = *reinterpret_cast<const float4 *>(src), b = *reinterpret_cast<const float4 *>(src + 4);
    dst[0] = __float2bfloat16_rn(a.x); dst[1] = __float2bfloat16_rn(a.y);
    dst[2] = __float2bfloat16_rn(a.z); dst[3] = __float2bfloat16_rn(a.w);
    dst[4] = __float2bfloat16_rn(b.x); dst[5] = __float2bfloat16_rn(b.y);
    dst[6] = __float2bfloat16_rn(b.z); dst[7] = __float2bfloat16_rn(b.w);
  } else {
    for (int i = 0; i < 8; i++) dst[i] = __float2bfloat16_rn(i < n ? src[i] : 0.0f);
  }
}
__device__ __forceinline__ void fa_load8(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int n) {
  if (n >= 8) {
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
  } else {
    for (int i = 0; i < 8; i++) dst[i] = i < n ? src[i] : __float2bfloat16_rn(0.0f);
  }
}

/* Tile [64 rows][DP] from rows r0.. of a [rows_total, rstride] array (zeros outside). If
 * transposed, stores dst[d * ld + r] (V^T) else dst[r * ld + d]. */
template <typename T, int DP>
__device__ __forceinline__ void fa_tile(__nv_bfloat16 *dst, int ld, bool transposed, const T *src, int64_t r0,
                                        int64_t nrows, int64_t rstride, int D) {
  for (int idx = threadIdx.x; idx < FA_BM * (DP / 8); idx += FA_THREADS) {
    int r = idx / (DP / 8), c = (idx % (DP / 8)) * 8;
    __align__(16) __nv_bfloat16 v[8];
    if (r0 + r < nrows && c < D) {
      fa_load8(v, src + (r0 + r) * rstride + c, D - c);
    } else {
      for (int i = 0; i < 8; i++) v[i] = __float2bfloat16_rn(0.0f);
    }
    if (transposed) {
      for (int i = 0; i < 8; i++) dst[(c + i) * ld + r] = v[i];
    } else {
      *reinterpret_cast<uint4 *>(dst + r * ld + c) = *reinterpret_cast<uint4 *>(v);
    }
  }
}

/* One key tile's online-softmax step for this thread's two query rows (qia, qib): scores s
 * scaled by sl2 (log2 units), key mask mb (0 or -inf per key of the tile), causal mask; new
 * row maxima m, running sums l, and the accumulators o rescaled; s becomes P. */
template <int DP>
__device__ __forceinline__ void fa_softmax_step(float (*s)[4], const float *mb, float sl2, int causal, int64_t k0,
                                                int64_t qia, int64_t qib, int qc, float *m, float *l,
                                                float (*o)[4]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < FA_BN / 8; n++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int j = n * 8 + qc + (e & 1);
      float val = s[n][e] * sl2 + mb[j];
      if (causal && k0 + j > (e < 2 ? qia : qib)) val = -INFINITY;
      s[n][e] = val;
      mx[e >> 1] = fmaxf(mx[e >> 1], val);
    }
  }
  float alpha[2], mu[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    float mn = fmaxf(m[r], mx[r]);
    mu[r] = mn == -INFINITY ? 0.0f : mn;
    alpha[r] = exp2f(m[r] - mu[r]);
    m[r] = mn;
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int n = 0; n < FA_BN / 8; n++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = exp2f(s[n][e] - mu[e >> 1]);
      s[n][e] = p;
      l[e >> 1] += p;
    }
  }
#pragma unroll
  for (int d = 0; d < DP / 8; d++) {
    o[d][0] *= alpha[0]; o[d][1] *= alpha[0];
    o[d][2] *= alpha[1]; o[d][3] *= alpha[1];
  }
}

/* The A fragment of P for key columns 16 j .. 16 j + 15. */
__device__ __forceinline__ void fa_pack_p(uint32_t *a, const float (*s)[4], int j) {
  a[0] = fa_pack(s[2 * j][0], s[2 * j][1]);
  a[1] = fa_pack(s[2 * j][2], s[2 * j][3]);
  a[2] = fa_pack(s[2 * j + 1][0], s[2 * j + 1][1]);
  a[3] = fa_pack(s[2 * j + 1][2], s[2 * j + 1][3]);
}

/* Sums l over the row's four threads and writes O / l for rows qia and qib (zeros for a row
 * that saw no key). */
template <typename T, int DP>
__device__ __forceinline__ void fa_store_rows(T *out, const cu_attn_strides &st, int b, int h, int64_t Sq, int D,
                                              int64_t qia, int64_t qib, int qc, float *l, const float (*o)[4]) {
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  }
  T *ob = out + (int64_t)b * st.o[0] + (int64_t)h * st.o[2];
#pragma unroll
  for (int d = 0; d < DP / 8; d++) {
    int c = d * 8 + qc;
    if (c >= D) continue;
    if (qia < Sq) {
      cu_st(ob, qia * st.o[1] + c, o[d][0] * inv[0]);
      cu_st(ob, qia * st.o[1] + c + 1, o[d][1] * inv[0]);
    }
    if (qib < Sq) {
      cu_st(ob, qib * st.o[1] + c, o[d][2] * inv[1]);
      cu_st(ob, qib * st.o[1] + c + 1, o[d][3] * inv[1]);
    }
  }
}

/* 0 for a key j that may be attended, -inf for one past Sk or masked out. */
__device__ __forceinline__ float fa_key_bias(const uint8_t *mask, int b, int64_t Sk, int64_t j) {
  return (j < Sk && (!mask || mask[(int64_t)b * Sk + j])) ? 0.0f : -INFINITY;
}

template <typename T, int DP>
__global__ void __launch_bounds__(FA_THREADS) k_flash(T *out, const T *q, const T *k, const T *v, int64_t Sq,
                                                      int64_t Sk, int Hq, int Hkv, int D, const uint8_t *mask,
                                                      float sl2, int causal, cu_attn_strides st) {
  extern __shared__ __align__(16) unsigned char fa_smem[];
  const int LQ = DP + 8, LV = FA_BN + 8;
  __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(fa_smem);
  __nv_bfloat16 *Ks = Qs + FA_BM * LQ;
  __nv_bfloat16 *Vt = Ks + FA_BN * LQ;
  float *mb = reinterpret_cast<float *>(Vt + DP * LV);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / (Hq / Hkv);
  const int64_t q0 = (int64_t)blockIdx.x * FA_BM;
  const T *qb = q + (int64_t)b * st.q[0] + (int64_t)h * st.q[2];
  const T *kb = k + (int64_t)b * st.k[0] + (int64_t)hk * st.k[2];
  const T *vb = v + (int64_t)b * st.v[0] + (int64_t)hk * st.v[2];

  fa_tile<T, DP>(Qs, LQ, false, qb, q0, Sq, st.q[1], D);

  const int ra = warp * 16 + (lane >> 2), qc = (lane & 3) * 2;
  const int64_t qia = q0 + ra, qib = qia + 8;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[DP / 8][4];
#pragma unroll
  for (int i = 0; i < DP / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

  int64_t nkt = (Sk + FA_BN - 1) / FA_BN;
  if (causal) {
    int64_t last = (q0 + FA_BM - 1) / FA_BN + 1;
    if (last < nkt) nkt = last;
  }
  for (int64_t kt = 0; kt < nkt; kt++) {
    const int64_t k0 = kt * FA_BN;
    __syncthreads();
    fa_tile<T, DP>(Ks, LQ, false, kb, k0, Sk, st.k[1], D);
    fa_tile<T, DP>(Vt, LV, true, vb, k0, Sk, st.v[1], D);
    if (threadIdx.x < FA_BN) mb[threadIdx.x] = fa_key_bias(mask, b, Sk, k0 + threadIdx.x);
    __syncthreads();

    float s[FA_BN / 8][4];
#pragma unroll
    for (int n = 0; n < FA_BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < DP / 16; ks++) {
      const __nv_bfloat16 *qp = Qs + ra * LQ + ks * 16 + qc;
      uint32_t a[4];
      a[0] = *reinterpret_cast<const uint32_t *>(qp);
      a[1] = *reinterpret_cast<const uint32_t *>(qp + 8 * LQ);
      a[2] = *reinterpret_cast<const uint32_t *>(qp + 8);
      a[3] = *reinterpret_cast<const uint32_t *>(qp + 8 * LQ + 8);
#pragma unroll
      for (int n = 0; n < FA_BN / 8; n++) {
        const __nv_bfloat16 *kp = Ks + (n * 8 + (lane >> 2)) * LQ + ks * 16 + qc;
        fa_mma(s[n], a, *reinterpret_cast<const uint32_t *>(kp), *reinterpret_cast<const uint32_t *>(kp + 8));
      }
    }
    fa_softmax_step<DP>(s, mb, sl2, causal, k0, qia, qib, qc, m, l, o);
#pragma unroll
    for (int j = 0; j < FA_BN / 16; j++) {
      uint32_t a[4];
      fa_pack_p(a, s, j);
#pragma unroll
      for (int d = 0; d < DP / 8; d++) {
        const __nv_bfloat16 *vp = Vt + (d * 8 + (lane >> 2)) * LV + j * 16 + qc;
        fa_mma(o[d], a, *reinterpret_cast<const uint32_t *>(vp), *reinterpret_cast<const uint32_t *>(vp + 8));
      }
    }
  }
  fa_store_rows<T, DP>(out, st, b, h, Sq, D, qia, qib, qc, l, o);
}

/* ---- version 2: 128 query rows per block (8 warps), K/V tiles row-major in a two-stage
 * pipeline (cp.async for BF16 inputs; F32 inputs convert while storing), fragments
 * through ldmatrix (.trans for V). ---- */
#define F2_BM 128
#define F2_THREADS 256

__device__ __forceinline__ uint32_t f2_smem(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void f2_ldm4(uint32_t *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(f2_smem(p)));
}
__device__ __forceinline__ void f2_ldm4t(uint32_t *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(f2_smem(p)));
}
__device__ __forceinline__ void f2_cp16(void *dst, const void *src, bool ok) {
  int n = ok ? 16 : 0; /* 0: zero-fill */
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(f2_smem(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void f2_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void f2_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* rows r0 .. r0+nr-1 of src (row stride rstride) into dst [nr][ld]; zeros outside. */
template <int DP>
__device__ __forceinline__ void f2_tile(__nv_bfloat16 *dst, int ld, int nr, const __nv_bfloat16 *src, int64_t r0,
                                        int64_t nrows, int64_t rstride, int D) {
  for (int idx = threadIdx.x; idx < nr * (DP / 8); idx += F2_THREADS) {
    int r = idx / (DP / 8), c = (idx % (DP / 8)) * 8;
    bool ok = r0 + r < nrows && c < D;
    const __nv_bfloat16 *g = ok ? src + (r0 + r) * rstride + c : src;
    f2_cp16(dst + r * ld + c, g, ok);
  }
}
template <int DP>
__device__ __forceinline__ void f2_tile(__nv_bfloat16 *dst, int ld, int nr, const float *src, int64_t r0,
                                        int64_t nrows, int64_t rstride, int D) {
  for (int idx = threadIdx.x; idx < nr * (DP / 8); idx += F2_THREADS) {
    int r = idx / (DP / 8), c = (idx % (DP / 8)) * 8;
    __align__(16) __nv_bfloat16 v[8];
    if (r0 + r < nrows && c < D) {
      fa_load8(v, src + (r0 + r) * rstride + c, 8);
    } else {
      for (int i = 0; i < 8; i++) v[i] = __float2bfloat16_rn(0.0f);
    }
    *reinterpret_cast<uint4 *>(dst + r * ld + c) = *reinterpret_cast<uint4 *>(v);
  }
}

template <typename T, int DP, int MINB>
__global__ void __launch_bounds__(F2_THREADS, MINB) k_flash2(T *out, const T *q, const T *k, const T *v, int64_t Sq,
                                                       int64_t Sk, int Hq, int Hkv, int D, const uint8_t *mask,
                                                       float sl2, int causal, cu_attn_strides st) {
  extern __shared__ __align__(16) unsigned char fa_smem[];
  const int LQ = DP + 8;
  __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(fa_smem);
  __nv_bfloat16 *Kb = Qs + F2_BM * LQ;   /* [2][FA_BN][LQ] */
  __nv_bfloat16 *Vb = Kb + 2 * FA_BN * LQ; /* [2][FA_BN][LQ] */
  float *mb = reinterpret_cast<float *>(Vb + 2 * FA_BN * LQ); /* [2][FA_BN] */

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / (Hq / Hkv);
  const int64_t q0 = (int64_t)blockIdx.x * F2_BM;
  const T *qb = q + (int64_t)b * st.q[0] + (int64_t)h * st.q[2];
  const T *kb = k + (int64_t)b * st.k[0] + (int64_t)hk * st.k[2];
  const T *vb = v + (int64_t)b * st.v[0] + (int64_t)hk * st.v[2];
  const int64_t kvs = st.k[1], vvs = st.v[1];

  int64_t nkt = (Sk + FA_BN - 1) / FA_BN;
  if (causal) {
    int64_t last = (q0 + F2_BM - 1) / FA_BN + 1;
    if (last < nkt) nkt = last;
  }
  f2_tile<DP>(Qs, LQ, F2_BM, qb, q0, Sq, st.q[1], D);
  if (nkt > 0) {
    f2_tile<DP>(Kb, LQ, FA_BN, kb, 0, Sk, kvs, D);
    f2_tile<DP>(Vb, LQ, FA_BN, vb, 0, Sk, vvs, D);
    if (threadIdx.x < FA_BN) mb[threadIdx.x] = fa_key_bias(mask, b, Sk, threadIdx.x);
  }
  f2_commit();

  const int ra = warp * 16 + (lane >> 2), qc = (lane & 3) * 2;
  const int64_t qia = q0 + ra, qib = qia + 8;
  /* ldmatrix lane addressing */
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 8; /* A (Q) and V^T */
  const int krow = (lane & 7) + (lane >> 4) * 8, kcol = ((lane >> 3) & 1) * 8; /* K */
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[DP / 8][4];
#pragma unroll
  for (int i = 0; i < DP / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

  for (int64_t kt = 0; kt < nkt; kt++) {
    const int st = (int)(kt & 1);
    if (kt + 1 < nkt) {
      const int ns = st ^ 1;
      const int64_t k1 = (kt + 1) * FA_BN;
      f2_tile<DP>(Kb + ns * FA_BN * LQ, LQ, FA_BN, kb, k1, Sk, kvs, D);
      f2_tile<DP>(Vb + ns * FA_BN * LQ, LQ, FA_BN, vb, k1, Sk, vvs, D);
      if (threadIdx.x < FA_BN) mb[ns * FA_BN + threadIdx.x] = fa_key_bias(mask, b, Sk, k1 + threadIdx.x);
      f2_commit();
      f2_wait<1>();
    } else {
      f2_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16 *Ks = Kb + st * FA_BN * LQ, *Vs = Vb + st * FA_BN * LQ;
    const float *mbs = mb + st * FA_BN;
    const int64_t k0 = kt * FA_BN;

    float s[FA_BN / 8][4];
#pragma unroll
    for (int n = 0; n < FA_BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < DP / 16; ks++) {
      uint32_t a[4];
      f2_ldm4(a, Qs + (warp * 16 + lrow) * LQ + ks * 16 + lcol);
#pragma unroll
      for (int n = 0; n < FA_BN / 8; n += 2) {
        uint32_t bk[4];
        f2_ldm4(bk, Ks + (n * 8 + krow) * LQ + ks * 16 + kcol);
        fa_mma(s[n], a, bk[0], bk[1]);
        fa_mma(s[n + 1], a, bk[2], bk[3]);
      }
    }
    fa_softmax_step<DP>(s, mbs, sl2, causal, k0, qia, qib, qc, m, l, o);
#pragma unroll
    for (int j = 0; j < FA_BN / 16; j++) {
      uint32_t a[4];
      fa_pack_p(a, s, j);
#pragma unroll
      for (int d = 0; d < DP / 8; d += 2) {
        uint32_t bv[4];
        f2_ldm4t(bv, Vs + (j * 16 + lrow) * LQ + d * 8 + lcol);
        fa_mma(o[d], a, bv[0], bv[1]);
        fa_mma(o[d + 1], a, bv[2], bv[3]);
      }
    }
    __syncthreads(); /* the next iteration overwrites the other stage; this one is read */
  }
  f2_wait<0>(); /* nkt == 0: the Q copies are still in flight */
  fa_store_rows<T, DP>(out, st, b, h, Sq, D, qia, qib, qc, l, o);
}

template <typename T, int DP>
static cudaError_t fa_launch(void *out, const void *q, const void *k, const void *v, int64_t B, int64_t Sq,
                             int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, const uint8_t *mask, float scale,
                             int causal, int version, const cu_attn_strides &st, cudaStream_t s) {
  float sl2 = scale * 1.4426950408889634f;
  if (version == 1) {
    size_t smem = (size_t)(2 * FA_BM * (DP + 8) + DP * (FA_BN + 8)) * 2 + FA_BN * sizeof(float);
    cudaError_t e = cudaFuncSetAttribute(k_flash<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((Sq + FA_BM - 1) / FA_BM), (unsigned)Hq, (unsigned)B);
    k_flash<T, DP><<<grid, FA_THREADS, smem, s>>>((T *)out, (const T *)q, (const T *)k, (const T *)v, Sq, Sk,
                                                  (int)Hq, (int)Hkv, (int)D, mask, sl2, causal, st);
    return cudaGetLastError();
  }
  /* version 3: as 2 with registers capped for two blocks per SM (head dims <= 128) */
  size_t smem = (size_t)(F2_BM + 4 * FA_BN) * (DP + 8) * 2 + 2 * FA_BN * sizeof(float);
  void (*kern)(T *, const T *, const T *, const T *, int64_t, int64_t, int, int, int, const uint8_t *, float, int,
               cu_attn_strides) =
      version == 3 && DP <= 128 ? k_flash2<T, DP, 2> : k_flash2<T, DP, 1>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  dim3 grid((unsigned)((Sq + F2_BM - 1) / F2_BM), (unsigned)Hq, (unsigned)B);
  kern<<<grid, F2_THREADS, smem, s>>>((T *)out, (const T *)q, (const T *)k, (const T *)v, Sq, Sk, (int)Hq,
                                      (int)Hkv, (int)D, mask, sl2, causal, st);
  return cudaGetLastError();
}

extern "C" cudaError_t cuk_attention(void *out, const void *q, const void *k, const void *v, int dt, int64_t B,
                                     int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                                     const uint8_t *mask, float scale, int causal, int version,
                                     const cu_attn_strides *strides, cudaStream_t s) {
  if (D <= 0 || D > 256 || D % 8 != 0 || Hkv <= 0 || Hq % Hkv != 0) return cudaErrorInvalidValue;
  if (B <= 0 || Sq <= 0) return cudaSuccess;
  const cu_attn_strides st = strides ? *strides : cu_attn_contiguous(Sq, Sk, Hq, Hkv, D);
#define FA_ARGS out, q, k, v, B, Sq, Sk, Hq, Hkv, D, mask, scale, causal, version, st, s
  if (dt == CU_DT_BF16) {
    if (D <= 64) return fa_launch<__nv_bfloat16, 64>(FA_ARGS);
    if (D <= 128) return fa_launch<__nv_bfloat16, 128>(FA_ARGS);
    return fa_launch<__nv_bfloat16, 256>(FA_ARGS);
  }
  if (dt == CU_DT_F32) {
    if (D <= 64) return fa_launch<float, 64>(FA_ARGS);
    if (D <= 128) return fa_launch<float, 128>(FA_ARGS);
    return fa_launch<float, 256>(FA_ARGS);
  }
#undef FA_ARGS
  return cudaErrorInvalidValue;
}

/* Head dims the flash kernels cannot take (not a multiple of 8, at most CU_ATTN_SMALL_MAX_D):
 * one thread per (item, query, head) with an online softmax over the keys in fp32 (masked or
 * causal keys skipped; a row without keys gets zeros, as the flash kernels give). Slow, and
 * only for the small widths of tiny test models. */
template <typename T>
__global__ void k_attn_small(T *out, const T *q, const T *k, const T *v, int64_t B, int64_t Sq, int64_t Sk,
                             int64_t Hq, int64_t Hkv, int D, const uint8_t *mask, float scale, int causal,
                             cu_attn_strides st) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= B * Sq * Hq) return;
  const int64_t h = idx % Hq, i = (idx / Hq) % Sq, b = idx / (Hq * Sq), hk = h / (Hq / Hkv);
  const T *qp = q + b * st.q[0] + i * st.q[1] + h * st.q[2];
  float qv[CU_ATTN_SMALL_MAX_D], acc[CU_ATTN_SMALL_MAX_D];
  for (int d = 0; d < D; d++) qv[d] = cu_ld(qp, d) * scale, acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < Sk; j++) {
    if ((mask && !mask[b * Sk + j]) || (causal && j > i)) continue;
    const T *kp = k + b * st.k[0] + j * st.k[1] + hk * st.k[2], *vp = v + b * st.v[0] + j * st.v[1] + hk * st.v[2];
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += qv[d] * cu_ld(kp, d);
    const float mn = fmaxf(m, s), c = expf(m - mn), p = expf(s - mn);
    l = l * c + p;
    for (int d = 0; d < D; d++) acc[d] = acc[d] * c + p * cu_ld(vp, d);
    m = mn;
  }
  T *op = out + b * st.o[0] + i * st.o[1] + h * st.o[2];
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = 0; d < D; d++) cu_st(op, d, acc[d] * inv);
}

extern "C" cudaError_t cuk_attention_small(void *out, const void *q, const void *k, const void *v, int dt, int64_t B,
                                           int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                                           const uint8_t *mask, float scale, int causal, const cu_attn_strides *st,
                                           cudaStream_t s) {
  if (D <= 0 || D > CU_ATTN_SMALL_MAX_D || Hkv <= 0 || Hq % Hkv != 0) return cudaErrorInvalidValue;
  const int64_t n = B * Sq * Hq;
  if (n <= 0) return cudaSuccess;
  const unsigned grid = (unsigned)((n + 127) / 128);
  if (dt == CU_DT_BF16)
    k_attn_small<<<grid, 128, 0, s>>>((__nv_bfloat16 *)out, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
                                      (const __nv_bfloat16 *)v, B, Sq, Sk, Hq, Hkv, (int)D, mask, scale, causal, *st);
  else if (dt == CU_DT_F32)
    k_attn_small<<<grid, 128, 0, s>>>((float *)out, (const float *)q, (const float *)k, (const float *)v, B, Sq, Sk,
                                      Hq, Hkv, (int)D, mask, scale, causal, *st);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}
