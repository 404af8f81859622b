/* AVX-512 GEMM micro-kernel (x86-64 only, chosen at run time when the CPU reports
 * avx512f/bw/vl; no BF16 instructions): MR rows of x times a packed fp32 W panel of 32 columns, held in
 * 2*MR zmm accumulators; x elements are broadcast, W panel rows loaded as 2 zmm. */
#include "backend/cpu/cpu_avx512.h"

#include <math.h>

#if defined(DIT_CPU_X86)
#define TGT CPU_AVX512_TGT
#define INL CPU_AVX512_INL
#define AVX_MR 12
#define AVX_NR 32

INL void kern_rows(const int MR, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                   int64_t ldy, bool acc) {
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
  cpu_store_rows32(MR, nr, c0, c1, y, ldy, acc);
}

CPU_KERN_ENTRY(kern_avx512, float)

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
          r[j] = n < nc ? cpu_ld16f(w, wt, (n0 + n) * ldw + k0 + k, m) : _mm512_setzero_ps();
        }
        cpu_tr16(r);
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

/* exp(x) for 16 floats: CPU_EXP_POLY(r) times 2^k; exp(x) = 0 below -103. */
INL __m512 exp16(__m512 x) {
  __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.0f), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(CPU_EXP_LOG2E)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(CPU_EXP_LN2_HI), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(CPU_EXP_LN2_LO), r);
  const __m512 p = CPU_EXP_POLY(_mm512_fmadd_ps, _mm512_set1_ps, r);
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
