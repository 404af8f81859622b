/* AVX2+FMA GEMM micro-kernel (x86-64 only, chosen at run time on CPUs with avx2 and fma but
 * not the AVX-512 set the faster path needs): MR = 6 rows of x times a packed fp32 W panel
 * of 16 columns, held in 12 ymm accumulators; x elements are broadcast, each panel row is
 * loaded as 2 ymm (15 of the 16 registers in use). The panels are cpu_pack_w_c's layout,
 * packed 8 k at a time with in-register 8x8 transposes (bf16/f16 weights widened to fp32). */
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_internal.h"

#if defined(DIT_CPU_X86)
#include <immintrin.h>
#include <math.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT
#define A2_MR 6
#define A2_NR 16

/* y[i][0..nr) (+)= the accumulators of row i, columns past nr left alone. */
INL void store_row(int nr, __m256 c0, __m256 c1, float *y, bool acc) {
  if (nr == A2_NR) {
    if (acc) c0 = _mm256_add_ps(c0, _mm256_loadu_ps(y)), c1 = _mm256_add_ps(c1, _mm256_loadu_ps(y + 8));
    _mm256_storeu_ps(y, c0);
    _mm256_storeu_ps(y + 8, c1);
    return;
  }
  float t[A2_NR];
  _mm256_storeu_ps(t, c0);
  _mm256_storeu_ps(t + 8, c1);
  for (int j = 0; j < nr; j++) y[j] = acc ? y[j] + t[j] : t[j];
}

INL void kern_rows(const int MR, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                   int64_t ldy, bool acc) {
  __m256 c0[A2_MR], c1[A2_MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_loadu_ps(wp + k * A2_NR), b1 = _mm256_loadu_ps(wp + k * A2_NR + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      const __m256 a = _mm256_broadcast_ss(x + i * ldx + k);
      c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++) store_row(nr, c0[i], c1[i], y + i * ldy, acc);
}

/* 8 elements of a F32/BF16/F16 row from element off, as fp32. */
INL __m256 ld8(const void *p, dit_dtype wt, int64_t off) {
  if (wt == DIT_BF16) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + off));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  if (wt == DIT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + off)));
  return _mm256_loadu_ps((const float *)p + off);
}

/* In-register transpose of an 8x8 block: r[j] holds row j on entry, column j on exit. */
INL void tr8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

/* cpu_pack_w_c's panels (16 columns, k-major), 8 k of 8 columns at a time through tr8; the
 * k tail and columns past nc as the C pack does. */
TGT static void pack_avx2(float *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc, int64_t k0,
                          int64_t kc, int nr) {
  (void)nr;
  const int64_t np = (nc + A2_NR - 1) / A2_NR, k8 = kc / 8 * 8;
  for (int64_t p = 0; p < np; p++) {
    float *dst = wp + p * kc * A2_NR;
    for (int h = 0; h < 2; h++) {
      const int64_t nb = p * A2_NR + h * 8; /* this half's first column */
      for (int64_t k = 0; k < k8; k += 8) {
        __m256 r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
          r[j] = nb + j < nc ? ld8(w, wt, (n0 + nb + j) * ldw + k0 + k) : _mm256_setzero_ps();
        tr8(r);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (k + i) * A2_NR + h * 8, r[i]);
      }
      for (int j = 0; j < 8; j++)
        for (int64_t k = k8; k < kc; k++) {
          const int64_t n = nb + j;
          dst[k * A2_NR + h * 8 + j] = n < nc ? cpu_ld(w, wt, (n0 + n) * ldw + k0 + k) : 0.0f;
        }
    }
  }
}

#define A2_CASE(n) \
  case n: kern_rows(n, nr, kc, x, ldx, wp, y, ldy, acc); break;

TGT static void kern_avx2(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                          int64_t ldy, bool acc) {
  switch (mr) {
    A2_CASE(6) A2_CASE(5) A2_CASE(4) A2_CASE(3) A2_CASE(2) A2_CASE(1)
    default: break;
  }
}

TGT static float row_max_avx2(const float *s, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + i));
  float t[8], r = -INFINITY;
  _mm256_storeu_ps(t, m);
  for (int j = 0; j < 8; j++) r = t[j] > r ? t[j] : r;
  for (; i < n; i++) r = s[i] > r ? s[i] : r;
  return r;
}

/* exp(x) for 8 floats as the AVX-512 path's exp16 computes it (CPU_EXP_POLY(r) times 2^k),
 * with 2^k built in the exponent bits:
 * exp(x) = 0 below -87.3 (where 2^k would leave the normal range; those terms are < 1e-37, far
 * under a softmax sum's rounding, and -inf, a masked score, gives 0). */
INL __m256 exp8(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(CPU_EXP_LOG2E)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(CPU_EXP_LN2_HI), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(CPU_EXP_LN2_LO), r);
  const __m256 p = CPU_EXP_POLY(_mm256_fmadd_ps, _mm256_set1_ps, r);
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

TGT static float exp_sum_avx2(float *s, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float t[8], sum = 0.0f;
  if (i < n) { /* the tail through a padded copy */
    for (int j = 0; j < 8; j++) t[j] = i + j < n ? s[i + j] : -INFINITY;
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(t), vm));
    _mm256_storeu_ps(t, e);
    for (int j = 0; i + j < n; j++) s[i + j] = t[j];
    acc = _mm256_add_ps(acc, e);
  }
  _mm256_storeu_ps(t, acc);
  for (int j = 0; j < 8; j++) sum += t[j];
  return sum;
}

const cpu_gemm_path cpu_gemm_path_avx2 = {A2_MR, A2_NR, pack_avx2, kern_avx2, row_max_avx2, exp_sum_avx2};

#endif
