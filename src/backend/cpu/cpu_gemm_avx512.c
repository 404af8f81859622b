/* AVX-512 GEMM micro-kernel (x86-64 only, chosen at run time when the CPU reports
 * avx512f/bw/vl/bf16): MR rows of x times a packed fp32 W panel of 32 columns, held in
 * 2*MR zmm accumulators; x elements are broadcast, W panel rows loaded as 2 zmm. */
#include "backend/cpu/cpu_gemm.h"

#include <math.h>

#if defined(DIT_CPU_X86)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define AVX_MR 12
#define AVX_NR 32

static inline __attribute__((always_inline)) TGT void kern_rows(const int MR, int nr, int64_t kc,
                                                                 const float *x, int64_t ldx,
                                                                 const float *wp, float *y, int64_t ldy,
                                                                 bool acc) {
  __m512 c0[AVX_MR], c1[AVX_MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_load_ps(wp + k * AVX_NR), b1 = _mm512_load_ps(wp + k * AVX_NR + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(x[i * ldx + k]);
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
    }
  }
  __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? (__mmask16)0xffff : (nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0);
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++) {
    float *yr = y + i * ldy;
    if (acc) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yr));
      c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yr + 16));
    }
    _mm512_mask_storeu_ps(yr, m0, c0[i]);
    _mm512_mask_storeu_ps(yr + 16, m1, c1[i]);
  }
}

TGT static void kern_avx512(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                            int64_t ldy, bool acc) {
  switch (mr) {
#define CASE(n) \
  case n: kern_rows(n, nr, kc, x, ldx, wp, y, ldy, acc); break;
    CASE(12) CASE(11) CASE(10) CASE(9) CASE(8) CASE(7) CASE(6) CASE(5) CASE(4) CASE(3) CASE(2) CASE(1)
#undef CASE
    default: break;
  }
}

/* In-register transpose of a 16x16 fp32 block: r[j] holds row j on entry, column j on exit. */
static inline __attribute__((always_inline)) TGT void tr16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; i++) { /* r[4i + c], lane l: rows 4i..4i+3 of column 4l + c */
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 4; c++) {
    __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    __m512 v0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44), v1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(u0, v0, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(u0, v0, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(u1, v1, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u1, v1, 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* Up to 16 elements (mask m) of a F32/BF16/F16 row as fp32. */
static inline __attribute__((always_inline)) TGT __m512 ld16(const void *p, dit_dtype wt, int64_t off,
                                                             __mmask16 m) {
  if (wt == DIT_BF16) {
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (wt == DIT_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
  return _mm512_maskz_loadu_ps(m, (const float *)p + off);
}

/* Same layout as cpu_pack_w_c (panels of 32 columns, k-major), converted 16 k at a time
 * and transposed in registers. */
TGT static void pack_avx512(float *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc,
                            int64_t k0, int64_t kc, int nr) {
  int64_t np = (nc + AVX_NR - 1) / AVX_NR;
  for (int64_t p = 0; p < np; p++) {
    float *dst = wp + p * kc * AVX_NR;
    for (int64_t k = 0; k < kc; k += 16) {
      int kn = kc - k < 16 ? (int)(kc - k) : 16;
      __mmask16 m = (__mmask16)((1u << kn) - 1);
      for (int h = 0; h < 2; h++) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
          int64_t n = p * AVX_NR + h * 16 + j;
          r[j] = n < nc ? ld16(w, wt, (n0 + n) * ldw + k0 + k, m) : _mm512_setzero_ps();
        }
        tr16(r);
        for (int i = 0; i < kn; i++) _mm512_storeu_ps(dst + (k + i) * AVX_NR + h * 16, r[i]);
      }
    }
  }
}

TGT static float row_max_avx512(const float *s, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + i));
  if (i < n) m = _mm512_mask_max_ps(m, (__mmask16)((1u << (n - i)) - 1), m, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), s + i));
  return _mm512_reduce_max_ps(m);
}

/* exp(x) for 16 floats: x = k ln2 + r, |r| <= ln2/2, e^r by its degree-7 Taylor
 * polynomial (relative error < 1e-8 before rounding), times 2^k; exp(x) = 0 below -103. */
static inline __attribute__((always_inline)) TGT __m512 exp16(__m512 x) {
  __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.0f), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_mask_mov_ps(_mm512_scalef_ps(p, k), tiny, _mm512_setzero_ps());
}

TGT static float exp_sum_avx512(float *s, int64_t n, float m) {
  __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), vm));
    _mm512_storeu_ps(s + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    __mmask16 t = (__mmask16)((1u << (n - i)) - 1);
    __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, s + i), vm));
    _mm512_mask_storeu_ps(s + i, t, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(t, e));
  }
  return _mm512_reduce_add_ps(acc);
}

const cpu_gemm_path cpu_gemm_path_avx512 = {AVX_MR,      AVX_NR,        pack_avx512, kern_avx512,
                                            row_max_avx512, exp_sum_avx512};

#endif
