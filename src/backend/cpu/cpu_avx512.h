/* Register-level pieces shared by the AVX-512 GEMM kernels (cpu_gemm_avx512.c, fp32,
 * and cpu_gemm_avx512bf16.c, bf16): all are always inlined into their target("avx512...")
 * callers, so the kernels compile exactly as if each had its own copy. x86-64 only. */
#ifndef DIT_CPU_AVX512_H
#define DIT_CPU_AVX512_H

#include "backend/cpu/cpu_gemm.h"

#if defined(DIT_CPU_X86)
#include <immintrin.h>

/* The fp32 kernels need avx512f/bw/vl only (the "avx512" path, for CPUs without BF16); the
 * bf16 ones (cpu_gemm_avx512bf16.c, the dequantization into bf16 rows) add avx512bf16, so the
 * compiler itself keeps BF16 instructions out of the fp32 path. */
#define CPU_AVX512_TGT __attribute__((target("avx512f,avx512bw,avx512vl")))
#define CPU_AVX512BF16_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define CPU_AVX512_INL static inline __attribute__((always_inline)) CPU_AVX512_TGT
#define CPU_AVX512BF16_INL static inline __attribute__((always_inline)) CPU_AVX512BF16_TGT

/* The row counts a micro-kernel is instantiated for, largest first: X(n) for each, so a
 * switch over the run-time row count calls an always-inlined body with a constant n. */
#define CPU_MR_CASES_12(X) X(12) X(11) X(10) X(9) X(8) X(7) CPU_MR_CASES_6(X)
#define CPU_MR_CASES_6(X) X(6) X(5) X(4) X(3) X(2) X(1)

/* Defines `name`, the entry of an MR x 32 packed micro-kernel over x and panel elements
 * of type T: the file's always-inlined kern_rows(MR, nr, k, x, ldx, wp, y, ldy, acc)
 * instantiated for each row count 1 .. 12, compiled for the file's target TGT. */
#define CPU_KERN_ENTRY(name, T)                                                                          \
  TGT static void name(int mr, int nr, int64_t k, const T *x, int64_t ldx, const T *wp, float *y, \
                                  int64_t ldy, bool acc) {                                               \
    switch (mr) {                                                                                        \
      CPU_MR_CASES_12(CPU_KERN_CASE)                                                                     \
      default: break;                                                                                    \
    }                                                                                                    \
  }
#define CPU_KERN_CASE(n) \
  case n: kern_rows(n, nr, k, x, ldx, wp, y, ldy, acc); break;

/* Lanes 0 .. n-1 (all 16 when n >= 16). */
static inline __mmask16 cpu_mask16(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* Up to 16 elements (mask m) of a F32/BF16/F16 row starting at element off, as fp32. */
CPU_AVX512_INL __m512 cpu_ld16f(const void *p, dit_dtype wt, int64_t off, __mmask16 m) {
  if (wt == DIT_BF16) {
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (wt == DIT_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
  return _mm512_maskz_loadu_ps(m, (const float *)p + off);
}

/* In-register transpose of a 16x16 block of 32-bit words: r[j] holds row j on entry,
 * column j on exit. */
CPU_AVX512_INL void cpu_tr16(__m512 r[16]) {
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

/* The end of an MR x 32 micro-kernel: y[i][0..nr) (+)= accumulators c0[i] (columns 0..15)
 * and c1[i] (16..31) for i < MR, rows ldy apart, columns past nr left alone. */
CPU_AVX512_INL void cpu_store_rows32(const int MR, int nr, __m512 *c0, __m512 *c1, float *y, int64_t ldy,
                                     bool acc) {
  __mmask16 m0 = cpu_mask16(nr), m1 = nr > 16 ? cpu_mask16(nr - 16) : 0;
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

#endif
#endif
