/* AVX512-BF16 GEMM kernels of the CPU backend (x86-64 only, chosen at run time when the
 * CPU reports avx512f/bw/vl/bf16), for the bf16-compute precision and for small M:
 * - rounding fp32 activation rows to bf16 (round to nearest even, vcvtne2ps2bf16);
 * - packing a W block into bf16 panels of 32 columns in the k-pair interleaved layout
 *   vdpbf16ps wants (a 32-bit word = two consecutive k of one column), by a 16x16
 *   transpose of 32-bit words: bf16 weights are copied, F32/F16 rounded to bf16;
 * - the packed micro-kernel: MR=12 rows x 32 columns, 24 zmm accumulators, per k pair
 *   2 panel loads, 12 broadcasts of an x pair, 24 vdpbf16ps (fp32 accumulation);
 * - small-M "stream" kernels that read W rows in place (no packing) as dot products
 *   along k: 6 rows x 4 columns of 16-lane accumulators, reduced at the end; the fp32
 *   one converts bf16/f16 weights to fp32 in registers, the bf16 one feeds vdpbf16ps. */
#include "backend/cpu/cpu_avx512.h"

#include <string.h>

#if defined(DIT_CPU_X86)
#define TGT CPU_AVX512BF16_TGT
#define INL CPU_AVX512BF16_INL
#define BF_MR 12
#define BF_NR 32

static inline __mmask32 mask32(int64_t n) { return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1); }

/* Up to 32 elements (mask m) of a F32/BF16/F16 row starting at element off, as 32 bf16
 * (zero where masked off). */
INL __m512i ld32bf(const void *p, dit_dtype wt, int64_t off, __mmask32 m) {
  if (wt == DIT_BF16) return _mm512_maskz_loadu_epi16(m, (const uint16_t *)p + off);
  __mmask16 lo = (__mmask16)(m & 0xffff), hi = (__mmask16)(m >> 16);
  __m512 a, b;
  if (wt == DIT_F16) {
    a = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lo, (const uint16_t *)p + off));
    b = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(hi, (const uint16_t *)p + off + 16));
  } else {
    a = _mm512_maskz_loadu_ps(lo, (const float *)p + off);
    b = _mm512_maskz_loadu_ps(hi, (const float *)p + off + 16);
  }
  return (__m512i)_mm512_cvtne2ps_pbh(b, a);
}

TGT static void round_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t n) {
  int64_t np = (n + 1) & ~(int64_t)1; /* pad an odd row with one zero */
  for (int64_t r = 0; r < rows; r++) {
    const float *s = src + r * lds;
    uint16_t *d = dst + r * ldd;
    for (int64_t i = 0; i < np; i += 32) {
      __mmask32 m = mask32(n - i);
      _mm512_mask_storeu_epi16(d + i, mask32(np - i), ld32bf(s, DIT_F32, i, m));
    }
  }
}

/* 16 rows of kc elements (rows[j] of type wt, NULL = zero) as the h-th 16 columns of a
 * bf16 k-pair panel of 32 columns at dst, by 16x16 transposes of 32-bit words. */
INL void pack_half(uint16_t *dst, const void *const rows[16], dit_dtype wt, int64_t kc, int h) {
  for (int64_t q = 0, kp = (kc + 1) / 2; q < kp; q += 16) {
    int qn = kp - q < 16 ? (int)(kp - q) : 16;
    __mmask32 m = mask32(kc - 2 * q);
    __m512 r[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) r[j] = rows[j] ? (__m512)ld32bf(rows[j], wt, 2 * q, m) : _mm512_setzero_ps();
    cpu_tr16(r);
    for (int i = 0; i < qn; i++) _mm512_store_ps((float *)(dst + (q + i) * 2 * BF_NR) + h * 16, r[i]);
  }
}

/* Largest kc of a block-quantized W the packing dequantizes (GEMM_KC_BF in cpu_linear.c). */
#define PACK_MAX_KC 512

/* Rows n0 .. n0+nc of w, columns k0 .. k0+kc, into bf16 panels of 32 columns: with
 * kp = (kc+1)/2 pairs, panel p holds wp[p*kp*64 + q*64 + 2*j + e] = w[n0+p*32+j][k0+2q+e]
 * (zero beyond nc and kc). F32/F16 are rounded to bf16. A quantized w (block types or fp8;
 * rows of ldw elements, k0 and kc whole blocks, kc <= PACK_MAX_KC) is dequantized 16 rows at
 * a time into bf16 rows on the stack (16 KiB, in L1) and packed from there. */
TGT static void pack_bf16(uint16_t *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc,
                          int64_t k0, int64_t kc) {
  int64_t np = (nc + BF_NR - 1) / BF_NR, kp = (kc + 1) / 2;
  const bool blk = dit_dtype_is_quant(wt);
  uint64_t row = 0, skip = 0;
  uint16_t tmp[16 * PACK_MAX_KC] __attribute__((aligned(64)));
  if (blk) {
    dit_dtype_row_bytes(wt, (uint64_t)ldw, &row); /* both checked by cpu_linear */
    dit_dtype_row_bytes(wt, (uint64_t)k0, &skip);
  }
  size_t esz = blk ? 0 : dit_dtype_size(wt);
  for (int64_t p = 0; p < np; p++) {
    for (int h = 0; h < 2; h++) {
      const void *rows[16];
      for (int j = 0; j < 16; j++) {
        int64_t n = p * BF_NR + h * 16 + j;
        if (n >= nc)
          rows[j] = NULL;
        else if (blk) {
          cpu_dequant_row_bf16_avx512(wt, (const char *)w + (uint64_t)(n0 + n) * row + skip, tmp + j * kc, kc);
          rows[j] = tmp + j * kc;
        } else
          rows[j] = (const char *)w + (size_t)((n0 + n) * ldw + k0) * esz;
      }
      pack_half(wp + p * kp * 2 * BF_NR, rows, blk ? DIT_BF16 : wt, kc, h);
    }
  }
}

/* A k-major fp32 panel of 32 columns (src[k*32 + j], kc rows) as a bf16 k-pair panel
 * (dst[q*64 + 2j + e] = src[(2q+e)*32 + j], zero row past kc). */
TGT static void interleave_panel(uint16_t *dst, const float *src, int64_t kc) {
  __m512i lo, hi;
  uint16_t il[64];
  for (int t = 0; t < 64; t++) il[t] = (uint16_t)((t & 1 ? 32 : 0) + t / 2);
  lo = _mm512_loadu_si512(il);
  hi = _mm512_loadu_si512(il + 32);
  for (int64_t q = 0; q < (kc + 1) / 2; q++) {
    const float *a = src + 2 * q * 32, *b = a + 32;
    __m512i ra = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + 16), _mm512_loadu_ps(a));
    __m512i rb = 2 * q + 1 < kc ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(b + 16), _mm512_loadu_ps(b))
                                : _mm512_setzero_si512();
    _mm512_store_si512(dst + q * 64, _mm512_permutex2var_epi16(ra, lo, rb));
    _mm512_store_si512(dst + q * 64 + 32, _mm512_permutex2var_epi16(ra, hi, rb));
  }
}

/* y[0..MR, 0..nr] (+)= x (bf16 rows, kp pairs) times one packed panel. */
INL void kern_rows(const int MR, int nr, int64_t kp, const uint16_t *x, int64_t ldx, const uint16_t *wp, float *y,
                   int64_t ldy, bool acc) {
  __m512 c0[BF_MR], c1[BF_MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < kp; q++) {
    __m512bh b0 = (__m512bh)_mm512_load_si512(wp + q * 64), b1 = (__m512bh)_mm512_load_si512(wp + q * 64 + 32);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
      int32_t pair;
      memcpy(&pair, x + i * ldx + 2 * q, 4);
      __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
    }
  }
  cpu_store_rows32(MR, nr, c0, c1, y, ldy, acc);
}

CPU_KERN_ENTRY(kern_bf16, uint16_t)

/* ---- small M: W rows read in place, dot products along k --------------------------- */
#define ST_MR 6
#define ST_NR 4

/* Sums of the 16 lanes of a, b, c, d as one 4-float vector {sum a, sum b, sum c, sum d}. */
INL __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
  __m256 v = _mm256_add_ps(_mm512_castps512_ps256(u), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

INL void st_store(const int MR, int nr, __m512 c[ST_MR][ST_NR], float *y, int64_t ldy, bool acc) {
  __mmask8 m = (__mmask8)((1u << nr) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
    __m128 s = hsum4(c[i][0], c[i][1], c[i][2], c[i][3]);
    if (acc) s = _mm_add_ps(s, _mm_maskz_loadu_ps(m, y + i * ldy));
    _mm_mask_storeu_ps(y + i * ldy, m, s);
  }
}

/* y[i][j] (+)= sum_k x[i][k] * w[j][k], k < kc, i < MR, j < nr (<= 4); w rows ldw apart.
 * fp32 (bf false): x fp32, bf16/f16 weights converted to fp32 in registers; bf16: x bf16
 * (rows ldx apart, even-padded), w rounded to bf16, vdpbf16ps. bf is a constant where it
 * is inlined, so each instance holds only its own loop body. */
INL void st_rows(const bool bf, const int MR, int nr, int64_t kc, const void *x, int64_t ldx, const void *w,
                 dit_dtype wt, int64_t ldw, float *y, int64_t ldy, bool acc) {
  __m512 c[ST_MR][ST_NR];
#pragma GCC unroll 32
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < ST_NR; j++) c[i][j] = _mm512_setzero_ps();
  int64_t r1 = nr > 1 ? ldw : 0, r2 = nr > 2 ? 2 * ldw : 0, r3 = nr > 3 ? 3 * ldw : 0;
  if (bf) {
    const uint16_t *xb = x;
    for (int64_t k = 0; k < kc; k += 32) {
      __mmask32 m = mask32(kc - k);
      __m512bh b[ST_NR] = {(__m512bh)ld32bf(w, wt, k, m), (__m512bh)ld32bf(w, wt, r1 + k, m),
                           (__m512bh)ld32bf(w, wt, r2 + k, m), (__m512bh)ld32bf(w, wt, r3 + k, m)};
#pragma GCC unroll 8
      for (int i = 0; i < MR; i++) {
        __m512bh a = (__m512bh)_mm512_maskz_loadu_epi16(m, xb + i * ldx + k);
#pragma GCC unroll 4
        for (int j = 0; j < ST_NR; j++) c[i][j] = _mm512_dpbf16_ps(c[i][j], a, b[j]);
      }
    }
  } else {
    const float *xf = x;
    for (int64_t k = 0; k < kc; k += 16) {
      __mmask16 m = cpu_mask16(kc - k);
      __m512 b[ST_NR] = {cpu_ld16f(w, wt, k, m), cpu_ld16f(w, wt, r1 + k, m), cpu_ld16f(w, wt, r2 + k, m),
                         cpu_ld16f(w, wt, r3 + k, m)};
#pragma GCC unroll 8
      for (int i = 0; i < MR; i++) {
        __m512 a = _mm512_maskz_loadu_ps(m, xf + i * ldx + k);
#pragma GCC unroll 4
        for (int j = 0; j < ST_NR; j++) c[i][j] = _mm512_fmadd_ps(a, b[j], c[i][j]);
      }
    }
  }
  st_store(MR, nr, c, y, ldy, acc);
}

/* st_rows instantiated for each row count 1 .. ST_MR. */
INL void stream_rows(const bool bf, int mr, int nr, int64_t kc, const void *x, int64_t ldx, const void *w,
                     dit_dtype wt, int64_t ldw, float *y, int64_t ldy, bool acc) {
  switch (mr) {
#define CASE(n) \
  case n: st_rows(bf, n, nr, kc, x, ldx, w, wt, ldw, y, ldy, acc); break;
    CPU_MR_CASES_6(CASE)
#undef CASE
    default: break;
  }
}

TGT static void stream_f32(int mr, int nr, int64_t kc, const void *x, int64_t ldx, const void *w, dit_dtype wt,
                           int64_t ldw, float *y, int64_t ldy, bool acc) {
  stream_rows(false, mr, nr, kc, x, ldx, w, wt, ldw, y, ldy, acc);
}

TGT static void stream_bf16(int mr, int nr, int64_t kc, const void *x, int64_t ldx, const void *w, dit_dtype wt,
                            int64_t ldw, float *y, int64_t ldy, bool acc) {
  stream_rows(true, mr, nr, kc, x, ldx, w, wt, ldw, y, ldy, acc);
}

const cpu_gemm_bf16_path cpu_gemm_bf16_avx512 = {BF_MR,      BF_NR,      ST_MR,      ST_NR,           round_rows,
                                                 pack_bf16, kern_bf16, stream_f32, stream_bf16, interleave_panel};

#endif
