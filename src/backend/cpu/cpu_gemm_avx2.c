/* AVX2+FMA GEMM micro-kernel (x86-64 only, chosen at run time on CPUs with avx2 and fma but
 * not the AVX-512 set the faster path needs): MR = 6 rows of x times a packed fp32 W panel
 * of 16 columns, held in 12 ymm accumulators; x elements are broadcast, each panel row is
 * loaded as 2 ymm (15 of the 16 registers in use). The panels are cpu_pack_w_c's (bf16/f16
 * weights widened to fp32 as they are packed). */
#include "backend/cpu/cpu_gemm.h"

#if defined(DIT_CPU_X86)
#include <immintrin.h>
#include <math.h>

#define TGT __attribute__((target("avx2,fma")))
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

const cpu_gemm_path cpu_gemm_path_avx2 = {A2_MR, A2_NR, cpu_pack_w_c, kern_avx2, row_max_avx2, cpu_exp_sum_c};

#endif
