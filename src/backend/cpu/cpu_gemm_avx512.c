/* AVX-512 GEMM micro-kernel (x86-64 only, chosen at run time when the CPU reports
 * avx512f/bw/vl/bf16): MR rows of x times a packed fp32 W panel of 32 columns, held in
 * 2*MR zmm accumulators; x elements are broadcast, W panel rows loaded as 2 zmm. */
#include "backend/cpu/cpu_gemm.h"

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
  for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_load_ps(wp + k * AVX_NR), b1 = _mm512_load_ps(wp + k * AVX_NR + 16);
    for (int i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(x[i * ldx + k]);
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
    }
  }
  __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? (__mmask16)0xffff : (nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0);
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

const cpu_gemm_path cpu_gemm_path_avx512 = {AVX_MR, AVX_NR, cpu_pack_w_c, kern_avx512};

#endif
