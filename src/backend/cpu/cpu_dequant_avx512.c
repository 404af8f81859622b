/* AVX-512 dequantization of the block types the GEMM meets most (Q8_0, Q4_0, Q4_K, Q6_K)
 * into fp32 rows, for the packing of block-quantized weights (cpu_linear.c). Each value is
 * computed with the same roundings as dit_dequant_row (core/quant.c): an exact integer to
 * float conversion, then one product (and one difference for Q4_K), never a fused
 * multiply-add, so the results are bit-identical; other types go to dit_dequant_row. */
#include "backend/cpu/cpu_avx512.h"
#include "core/quant.h"
#include "core/quant_internal.h"

#if defined(DIT_CPU_X86)
#define TGT CPU_AVX512_TGT

#define f16 dit_q_f16

/* 16 bytes as 16 int32 lanes (signed or unsigned). */
TGT static inline __m512 cvt_i8(const uint8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

TGT static inline __m512i u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

TGT static void q8_0(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
    const __m512 d = _mm512_set1_ps(f16(b));
    _mm512_storeu_ps(y, _mm512_mul_ps(cvt_i8(b + 2), d));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(cvt_i8(b + 18), d));
  }
}

TGT static void q4_0(const uint8_t *b, float *y, int64_t nb) {
  const __m512i lo = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
  for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
    const __m512 d = _mm512_set1_ps(f16(b));
    const __m512i q = u8x16(b + 2);
    const __m512i x0 = _mm512_sub_epi32(_mm512_and_si512(q, lo), eight);
    const __m512i x1 = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(x0), d));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(x1), d));
  }
}

/* 32 values v (two halves of 16 lanes) as d1 * v - m1. */
TGT static inline void store_dm(float *y, __m512i v0, __m512i v1, float d1, float m1) {
  const __m512 d = _mm512_set1_ps(d1), m = _mm512_set1_ps(m1);
  _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(v0)), m));
  _mm512_storeu_ps(y + 16, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(v1)), m));
}

TGT static void q4_k(const uint8_t *b, float *y, int64_t nb) {
  const __m512i lo = _mm512_set1_epi32(15);
  for (int64_t i = 0; i < nb; i++, b += 144) {
    const float d = f16(b), dmin = f16(b + 2);
    const uint8_t *q = b + 16;
    for (int c = 0; c < 4; c++, q += 32, y += 64) {
      uint8_t sc, m;
      const __m512i a = u8x16(q), bb = u8x16(q + 16);
      dit_q_scale_min_k4(2 * c, b + 4, &sc, &m);
      store_dm(y, _mm512_and_si512(a, lo), _mm512_and_si512(bb, lo), d * (float)sc, dmin * (float)m);
      dit_q_scale_min_k4(2 * c + 1, b + 4, &sc, &m);
      store_dm(y + 32, _mm512_srli_epi32(a, 4), _mm512_srli_epi32(bb, 4), d * (float)sc, dmin * (float)m);
    }
  }
}

/* 16 values of one Q6_K quarter: low nibbles (or high) of ql, two bits of qh at shift. */
TGT static inline __m512i q6_vals(const uint8_t *ql, const uint8_t *qh, bool high, int shift) {
  const __m512i l = u8x16(ql), h = u8x16(qh);
  const __m512i lo = high ? _mm512_srli_epi32(l, 4) : _mm512_and_si512(l, _mm512_set1_epi32(15));
  const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, (unsigned)shift), _mm512_set1_epi32(3)), 4);
  return _mm512_sub_epi32(_mm512_or_si512(lo, hi), _mm512_set1_epi32(32));
}

TGT static void q6_k(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 210) {
    const float d = f16(b + 208);
    for (int n = 0; n < 2; n++, y += 128) {
      const uint8_t *ql = b + n * 64, *qh = b + 128 + n * 32;
      const int8_t *sc = (const int8_t *)(b + 192 + n * 8);
      for (int quarter = 0; quarter < 4; quarter++) {
        const uint8_t *lq = ql + (quarter & 1) * 32;
        for (int h = 0; h < 2; h++) { /* l = 16 h .. 16 h + 15: scale index is + h */
          const __m512i v = q6_vals(lq + 16 * h, qh + 16 * h, quarter >= 2, 2 * quarter);
          const __m512 s = _mm512_set1_ps(d * (float)sc[h + 2 * quarter]);
          _mm512_storeu_ps(y + 32 * quarter + 16 * h, _mm512_mul_ps(s, _mm512_cvtepi32_ps(v)));
        }
      }
    }
  }
}

void cpu_dequant_row_avx512(dit_dtype t, const void *src, float *dst, int64_t n) {
  const uint8_t *b = src;
  switch (t) {
    case DIT_Q8_0: q8_0(b, dst, n / 32); break;
    case DIT_Q4_0: q4_0(b, dst, n / 32); break;
    case DIT_Q4_K: q4_k(b, dst, n / 256); break;
    case DIT_Q6_K: q6_k(b, dst, n / 256); break;
    default: dit_dequant_row(t, src, dst, n); break;
  }
}
#endif
