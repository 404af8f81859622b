/* NEON GEMM micro-kernel (AArch64, where Advanced SIMD is part of the base architecture):
 * MR = 6 rows of x times a packed fp32 W panel of NR = 16 columns (the AVX2 path's shape; the
 * blocked attention needs NR to divide its 128-key blocks), held in 24 q-register
 * accumulators; x elements are broadcast (ld1r), each panel row is loaded as 4 q registers
 * (29 of the 32 vector registers in use). The panels are cpu_pack_w_c's layout (bf16/f16
 * weights widened to fp32 there). The softmax helpers use the same exp polynomial as the
 * x86 paths (CPU_EXP_POLY). */
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_internal.h"

#if defined(DIT_CPU_ARM64)
#include <arm_neon.h>
#include <math.h>

#define NE_MR 6
#define NE_NR 16
#define INL static inline __attribute__((always_inline))

/* y[i][0..nr) (+)= the accumulators of row i, columns past nr left alone. */
INL void store_row(int nr, const float32x4_t c[4], float *y, bool acc) {
  if (nr == NE_NR) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) vst1q_f32(y + 4 * q, acc ? vaddq_f32(c[q], vld1q_f32(y + 4 * q)) : c[q]);
    return;
  }
  float t[NE_NR];
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++) vst1q_f32(t + 4 * q, c[q]);
  for (int j = 0; j < nr; j++) y[j] = acc ? y[j] + t[j] : t[j];
}

INL void kern_rows(const int MR, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                   int64_t ldy, bool acc) {
  float32x4_t c[NE_MR][4];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) c[i][q] = vdupq_n_f32(0.0f);
  for (int64_t k = 0; k < kc; k++) {
    const float *b = wp + k * NE_NR;
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      const float32x4_t a = vld1q_dup_f32(x + i * ldx + k);
      c[i][0] = vfmaq_f32(c[i][0], a, b0);
      c[i][1] = vfmaq_f32(c[i][1], a, b1);
      c[i][2] = vfmaq_f32(c[i][2], a, b2);
      c[i][3] = vfmaq_f32(c[i][3], a, b3);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++) store_row(nr, c[i], y + i * ldy, acc);
}

#define NE_CASE(n) \
  case n: kern_rows(n, nr, kc, x, ldx, wp, y, ldy, acc); break;

static void kern_neon(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                      int64_t ldy, bool acc) {
  switch (mr) {
    NE_CASE(6) NE_CASE(5) NE_CASE(4) NE_CASE(3) NE_CASE(2) NE_CASE(1)
    default: break;
  }
}

static float row_max_neon(const float *s, int64_t n) {
  float32x4_t m = vdupq_n_f32(-INFINITY);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) m = vmaxq_f32(m, vld1q_f32(s + i));
  float r = vmaxvq_f32(m);
  for (; i < n; i++) r = s[i] > r ? s[i] : r;
  return r;
}

/* CPU_EXP_POLY's FMA(a, b, c) = a * b + c. */
#define NE_FMA(a, b, c) vfmaq_f32((c), (a), (b))

/* exp(x) for 4 floats as the x86 paths compute it (CPU_EXP_POLY(r) times 2^k, 2^k built in
 * the exponent bits); 0 below -87.3, where 2^k would leave the normal range (-inf, a masked
 * score, gives 0). */
INL float32x4_t exp4(float32x4_t x) {
  const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(-87.3f));
  x = vmaxq_f32(x, vdupq_n_f32(-87.3f));
  x = vminq_f32(x, vdupq_n_f32(88.0f));
  const float32x4_t k = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(CPU_EXP_LOG2E)));
  float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(CPU_EXP_LN2_HI));
  r = vfmsq_f32(r, k, vdupq_n_f32(CPU_EXP_LN2_LO));
  const float32x4_t p = CPU_EXP_POLY(NE_FMA, vdupq_n_f32, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23);
  const float32x4_t v = vmulq_f32(p, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(v), tiny));
}

static float exp_sum_neon(float *s, int64_t n, float m) {
  const float32x4_t vm = vdupq_n_f32(m);
  float32x4_t acc = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + i), vm));
    vst1q_f32(s + i, e);
    acc = vaddq_f32(acc, e);
  }
  if (i < n) { /* the tail through a padded copy */
    float t[4];
    for (int j = 0; j < 4; j++) t[j] = i + j < n ? s[i + j] : -INFINITY;
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(t), vm));
    vst1q_f32(t, e);
    for (int j = 0; i + j < n; j++) s[i + j] = t[j];
    acc = vaddq_f32(acc, e);
  }
  return vaddvq_f32(acc);
}

const cpu_gemm_path cpu_gemm_path_neon = {NE_MR, NE_NR, cpu_pack_w_c, kern_neon, row_max_neon, exp_sum_neon};

#endif
