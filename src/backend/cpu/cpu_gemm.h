/* The GEMM kernel interface of the CPU backend: a kernel path is a W-packing routine
 * and a register-blocked micro-kernel of MR rows x NR columns. The portable C path is in
 * cpu_linear.c, the AVX-512 one in cpu_gemm_avx512.c and the AVX2 one in cpu_gemm_avx2.c
 * (x86-64 only, chosen at run time), the NEON one in cpu_gemm_neon.c (AArch64); DIT_CPU_ISA
 * narrows the choice. */
#ifndef DIT_CPU_GEMM_H
#define DIT_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

#include <omp.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define DIT_CPU_X86 1
#endif
#if defined(__aarch64__) && defined(__GNUC__)
#define DIT_CPU_ARM64 1
#endif

typedef struct cpu_gemm_path {
  int mr, nr;
  void (*pack)(float *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc, int64_t k0,
               int64_t kc, int nr);
  void (*kern)(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y, int64_t ldy,
               bool acc);
  /* Softmax helpers for blocked attention: max of s[0..n) (-inf when n == 0), and
   * s[i] = exp(s[i] - m) in place, returning the sum (m finite). */
  float (*row_max)(const float *s, int64_t n);
  float (*exp_sum)(float *s, int64_t n, float m);
} cpu_gemm_path;

/* The kernel path the backend uses now (AVX-512 when available and enabled). */
struct dit_backend;
const cpu_gemm_path *cpu_gemm_path_for(const struct dit_backend *be);

/* Packs a K-major fp32 source (src[k * ld + n], e.g. V rows) into the same panel layout
 * as the packs above: wp[p*kc*nr + k*nr + j] = src[k * ld + n0 + p*nr + j], 0 beyond nc. */
void cpu_pack_kn(float *wp, const float *src, int64_t ld, int64_t n0, int64_t nc, int64_t kc, int nr);
float cpu_row_max_c(const float *s, int64_t n);
float cpu_exp_sum_c(float *s, int64_t n, float m);

void cpu_pack_w_c(float *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc, int64_t k0,
                  int64_t kc, int nr);

/* The bf16-compute and small-M kernels (AVX512-BF16 only; see cpu_gemm_avx512bf16.c):
 * round_rows: fp32 rows to bf16 (nearest even), an odd row padded with one zero;
 * pack: a W block into bf16 k-pair panels of nr columns (kp = (kc+1)/2 pairs: panel p
 * holds wp[p*kp*2*nr + q*2*nr + 2*j + e] = w[n0+p*nr+j][k0+2q+e]), block-quantized W
 * included (rows of ldw elements; k0, kc whole blocks, kc <= 512); kern: mr (<= mr) rows
 * of bf16 x times one panel, kp pairs; stream_f32 / stream_bf16: y[i][j] (+)= x row i
 * . w row j over kc for i < mr <= st_mr, j < nr <= st_nr, w read in place (x fp32, or
 * bf16 rows rounded by round_rows). */
typedef struct cpu_gemm_bf16_path {
  int mr, nr, st_mr, st_nr;
  void (*round_rows)(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t n);
  void (*pack)(uint16_t *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc, int64_t k0,
               int64_t kc);
  void (*kern)(int mr, int nr, int64_t kp, const uint16_t *x, int64_t ldx, const uint16_t *wp, float *y,
               int64_t ldy, bool acc);
  void (*stream_f32)(int mr, int nr, int64_t kc, const void *x, int64_t ldx, const void *w, dit_dtype wt,
                     int64_t ldw, float *y, int64_t ldy, bool acc);
  void (*stream_bf16)(int mr, int nr, int64_t kc, const void *x, int64_t ldx, const void *w, dit_dtype wt,
                      int64_t ldw, float *y, int64_t ldy, bool acc);
  /* a k-major fp32 panel of nr (= 32) columns, kc rows, as a bf16 k-pair panel (conv2d) */
  void (*interleave_panel)(uint16_t *dst, const float *src, int64_t kc);
} cpu_gemm_bf16_path;

/* The SIMD paths' exp (softmax): x = k ln2 + r with ln2 split in CPU_EXP_LN2_HI + _LO, and
 * e^r (|r| <= ln2/2) by its degree-7 Taylor polynomial in Horner form with the path's own
 * fmadd and set1 intrinsics (relative error < 1e-8 before rounding); the caller scales by 2^k. */
#define CPU_EXP_LOG2E 1.44269504088896341f
#define CPU_EXP_LN2_HI 0.693145751953125f
#define CPU_EXP_LN2_LO 1.428606765330187045e-06f
#define CPU_EXP_POLY(FMA, SET1, r)                                                                               \
  FMA(FMA(FMA(FMA(FMA(FMA(FMA(SET1(1.0f / 5040), r, SET1(1.0f / 720)), r, SET1(1.0f / 120)), r, SET1(1.0f / 24)), \
                  r, SET1(1.0f / 6)),                                                                            \
              r, SET1(0.5f)),                                                                                    \
          r, SET1(1.0f)),                                                                                        \
      r, SET1(1.0f))

#if defined(DIT_CPU_X86)
/* dit_dequant_row with AVX-512 for Q8_0, Q4_0, Q4_K, Q6_K and fp8 (bit-identical results,
 * NaN bits aside), and the same values rounded to bf16 (nearest even) for every type
 * dit_dtype_is_quant admits. */
void cpu_dequant_row_avx512(dit_dtype t, const void *src, float *dst, int64_t n);
void cpu_dequant_row_bf16_avx512(dit_dtype t, const void *src, uint16_t *dst, int64_t n);
extern const cpu_gemm_path cpu_gemm_path_avx512;
extern const cpu_gemm_path cpu_gemm_path_avx2; /* cpu_gemm_avx2.c: avx2 + fma CPUs without the AVX-512 set */
extern const cpu_gemm_bf16_path cpu_gemm_bf16_avx512;
#endif
#if defined(DIT_CPU_ARM64)
extern const cpu_gemm_path cpu_gemm_path_neon; /* cpu_gemm_neon.c */
#endif

#endif
