/* AVX-512 dequantization of the block types the GEMM meets most (Q8_0, Q4_0, Q4_K, Q6_K) and fp8
 * into fp32 rows, or into bf16 rows for the bf16 GEMM's packing (cpu_gemm_avx512bf16.c),
 * which then reads a few rows from L1 instead of a whole fp32 block from L2. Each value is
 * computed with the same roundings as dit_dequant_row (core/quant.c): an exact integer to
 * float conversion, then one product (and one difference for Q4_K), never a fused
 * multiply-add, so the fp32 results are bit-identical and the bf16 ones are those values
 * rounded to nearest even; other types go to dit_dequant_row. */
#include "backend/cpu/cpu_avx512.h"

#include <math.h>

#include "core/quant.h"
#include "core/quant_internal.h"

#if defined(DIT_CPU_X86)
#define TGT CPU_AVX512BF16_TGT

#define f16 dit_q_f16
#define INL CPU_AVX512BF16_INL

/* 16 values to y + off: fp32, or rounded to bf16 (bf is a constant where inlined). */
INL void put16(const bool bf, void *y, int64_t off, __m512 v) {
  if (bf)
    _mm256_storeu_si256((__m256i *)((uint16_t *)y + off), (__m256i)_mm512_cvtneps_pbh(v));
  else
    _mm512_storeu_ps((float *)y + off, v);
}

/* fp8 rows (n elements, any n): e5m2 is the high byte of an fp16; e4m3 (float8_e4m3fn) placed
 * as an fp16 with its exponent bias 8 short is exact after a product by 2^8, subnormals
 * included, and its 0x7f/0xff is NaN. Both are exact in fp32 and in bf16. */
/* fp8 rows straight to bf16, 32 at a time in 16-bit lanes: a normal fp8 value's bf16 bits
 * are its magnitude bits shifted into place plus the exponent bias difference; the few
 * subnormal codes come from a table; Inf and NaN (e4m3: NaN only) are set by compare. */
INL void f8_bf16(const bool e4m3, const uint8_t *b, uint16_t *y, int64_t n) {
  /* subnormal (and zero) codes 0..7 (e4m3: m * 2^-9) or 0..3 (e5m2: m * 2^-16) as bf16 */
  static const uint16_t sub4m3[32] = {0, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60};
  static const uint16_t sub5m2[32] = {0, 0x3780, 0x3800, 0x3840};
  const __m512i tab = _mm512_loadu_si512(e4m3 ? sub4m3 : sub5m2), m7f = _mm512_set1_epi16(0x7f);
  const __m512i sh = _mm512_set1_epi16(e4m3 ? 4 : 5), bias = _mm512_set1_epi16(e4m3 ? 0x3c00 : 0x3800);
  const __m512i nsub = _mm512_set1_epi16(e4m3 ? 8 : 4), nan = _mm512_set1_epi16(0x7fc0);
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, b + i));
    const __m512i mag = _mm512_and_si512(v, m7f);
    __m512i r = _mm512_add_epi16(_mm512_sllv_epi16(mag, sh), bias);
    r = _mm512_mask_mov_epi16(r, _mm512_cmplt_epu16_mask(mag, nsub), _mm512_permutexvar_epi16(mag, tab));
    r = _mm512_or_si512(r, _mm512_slli_epi16(_mm512_andnot_si512(m7f, v), 8)); /* the sign */
    if (e4m3) {
      r = _mm512_mask_mov_epi16(r, _mm512_cmpeq_epi16_mask(mag, m7f), nan);
    } else { /* exponent all ones: Inf (signed) or NaN */
      const __m512i inf = _mm512_or_si512(_mm512_set1_epi16(0x7f80), _mm512_slli_epi16(_mm512_andnot_si512(m7f, v), 8));
      r = _mm512_mask_mov_epi16(r, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7c)), inf);
      r = _mm512_mask_mov_epi16(r, _mm512_cmpgt_epu16_mask(mag, _mm512_set1_epi16(0x7c)), nan);
    }
    _mm512_mask_storeu_epi16(y + i, m, r);
  }
}

INL void f8(const bool bf, const bool e4m3, const uint8_t *b, void *y, int64_t n) {
  if (bf) {
    f8_bf16(e4m3, b, y, n);
    return;
  }
  const __m256i m7f = _mm256_set1_epi16(0x7f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = cpu_mask16(n - i);
    const __m256i v = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, b + i));
    __m512 f;
    if (e4m3) {
      const __m256i mag = _mm256_and_si256(v, m7f);
      const __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(_mm256_andnot_si256(m7f, v), 8));
      f = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
      f = _mm512_mask_mov_ps(f, _mm256_cmpeq_epi16_mask(mag, m7f), _mm512_set1_ps(NAN));
    } else {
      f = _mm512_cvtph_ps(_mm256_slli_epi16(v, 8));
    }
    if (bf)
      _mm256_mask_storeu_epi16((uint16_t *)y + i, m, (__m256i)_mm512_cvtneps_pbh(f));
    else
      _mm512_mask_storeu_ps((float *)y + i, m, f);
  }
}

/* 16 bytes as 16 int32 lanes (signed or unsigned). */
TGT static inline __m512 cvt_i8(const uint8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

TGT static inline __m512i u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

INL void q8_0(const bool bf, const uint8_t *b, void *y, int64_t nb) {
  for (int64_t i = 0, o = 0; i < nb; i++, b += 34, o += 32) {
    const __m512 d = _mm512_set1_ps(f16(b));
    put16(bf, y, o, _mm512_mul_ps(cvt_i8(b + 2), d));
    put16(bf, y, o + 16, _mm512_mul_ps(cvt_i8(b + 18), d));
  }
}

INL void q4_0(const bool bf, const uint8_t *b, void *y, int64_t nb) {
  const __m512i lo = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
  for (int64_t i = 0, o = 0; i < nb; i++, b += 18, o += 32) {
    const __m512 d = _mm512_set1_ps(f16(b));
    const __m512i q = u8x16(b + 2);
    const __m512i x0 = _mm512_sub_epi32(_mm512_and_si512(q, lo), eight);
    const __m512i x1 = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
    put16(bf, y, o, _mm512_mul_ps(_mm512_cvtepi32_ps(x0), d));
    put16(bf, y, o + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(x1), d));
  }
}

/* 32 values v (two halves of 16 lanes) as d1 * v - m1, to y + off. */
INL void store_dm(const bool bf, void *y, int64_t off, __m512i v0, __m512i v1, float d1, float m1) {
  const __m512 d = _mm512_set1_ps(d1), m = _mm512_set1_ps(m1);
  put16(bf, y, off, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(v0)), m));
  put16(bf, y, off + 16, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(v1)), m));
}

INL void q4_k(const bool bf, const uint8_t *b, void *y, int64_t nb) {
  const __m512i lo = _mm512_set1_epi32(15);
  for (int64_t i = 0, o = 0; i < nb; i++, b += 144) {
    const float d = f16(b), dmin = f16(b + 2);
    const uint8_t *q = b + 16;
    for (int c = 0; c < 4; c++, q += 32, o += 64) {
      uint8_t sc, m;
      const __m512i a = u8x16(q), bb = u8x16(q + 16);
      dit_q_scale_min_k4(2 * c, b + 4, &sc, &m);
      store_dm(bf, y, o, _mm512_and_si512(a, lo), _mm512_and_si512(bb, lo), d * (float)sc, dmin * (float)m);
      dit_q_scale_min_k4(2 * c + 1, b + 4, &sc, &m);
      store_dm(bf, y, o + 32, _mm512_srli_epi32(a, 4), _mm512_srli_epi32(bb, 4), d * (float)sc, dmin * (float)m);
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

INL void q6_k(const bool bf, const uint8_t *b, void *y, int64_t nb) {
  for (int64_t i = 0, o = 0; i < nb; i++, b += 210) {
    const float d = f16(b + 208);
    for (int n = 0; n < 2; n++, o += 128) {
      const uint8_t *ql = b + n * 64, *qh = b + 128 + n * 32;
      const int8_t *sc = (const int8_t *)(b + 192 + n * 8);
      for (int quarter = 0; quarter < 4; quarter++) {
        const uint8_t *lq = ql + (quarter & 1) * 32;
        for (int h = 0; h < 2; h++) { /* l = 16 h .. 16 h + 15: scale index is + h */
          const __m512i v = q6_vals(lq + 16 * h, qh + 16 * h, quarter >= 2, 2 * quarter);
          const __m512 s = _mm512_set1_ps(d * (float)sc[h + 2 * quarter]);
          put16(bf, y, o + 32 * quarter + 16 * h, _mm512_mul_ps(s, _mm512_cvtepi32_ps(v)));
        }
      }
    }
  }
}

/* The row dequantizer for fp32 (bf false) or bf16 output; false where t has none here. */
INL bool dequant(const bool bf, dit_dtype t, const uint8_t *b, void *dst, int64_t n) {
  switch (t) {
    case DIT_Q8_0: q8_0(bf, b, dst, n / 32); return true;
    case DIT_Q4_0: q4_0(bf, b, dst, n / 32); return true;
    case DIT_Q4_K: q4_k(bf, b, dst, n / 256); return true;
    case DIT_Q6_K: q6_k(bf, b, dst, n / 256); return true;
    case DIT_F8_E4M3: f8(bf, true, b, dst, n); return true;
    case DIT_F8_E5M2: f8(bf, false, b, dst, n); return true;
    default: return false;
  }
}

TGT void cpu_dequant_row_avx512(dit_dtype t, const void *src, float *dst, int64_t n) {
  if (!dequant(false, t, src, dst, n)) dit_dequant_row(t, src, dst, n);
}

TGT void cpu_dequant_row_bf16_avx512(dit_dtype t, const void *src, uint16_t *dst, int64_t n) {
  if (dequant(true, t, src, dst, n)) return;
  /* the other types: portable fp32 rows, a block at a time, rounded as vcvtneps2bf16 does */
  const int64_t be = (int64_t)dit_dtype_block_elems(t);
  uint64_t bb = 0;
  dit_dtype_row_bytes(t, (uint64_t)be, &bb);
  float tmp[256];
  for (int64_t i = 0; i < n; i += be) {
    dit_dequant_row(t, (const uint8_t *)src + (uint64_t)(i / be) * bb, tmp, be);
    for (int64_t j = 0; j < be; j += 16) put16(true, dst, i + j, _mm512_loadu_ps(tmp + j));
  }
}
#endif
