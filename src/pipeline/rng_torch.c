/* torch.randn on a CPU generator, bit for bit (see rng_torch.h for what is reproduced).
 *
 * Every float operation of torch's vectorized path is written out as its own statement,
 * in torch's order, with FP contraction off here, and fmaf() exactly where torch's binary
 * has a fused multiply-add: its AVX2 kernels are compiled by GCC with -mfma and default
 * contraction, which fuses a multiply whose only use is an add/sub (first such multiply in
 * statement order). Without those fusions ~1% of the values differ by 1 ulp; with them all
 * the reference tensors match bit for bit. Constants are converted from double literals to
 * float exactly as torch's tables do. */
#include "pipeline/rng_torch.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UMASK 0x80000000u
#define MT_LMASK 0x7fffffffu

void dit_torch_rng_seed(dit_torch_rng *g, uint64_t seed) {
  g->state[0] = (uint32_t)(seed & 0xffffffffu);
  for (uint32_t j = 1; j < DIT_MT19937_N; j++) {
    uint32_t prev = g->state[j - 1];
    g->state[j] = 1812433253u * (prev ^ (prev >> 30)) + j;
  }
  g->left = 1;
  g->next = 0;
  g->has_cached_normal = false;
  g->cached_normal = 0.0;
}

static uint32_t mt_twist(uint32_t u, uint32_t v) {
  uint32_t mixed = (u & MT_UMASK) | (v & MT_LMASK);
  return (mixed >> 1) ^ ((v & 1u) ? MT_MATRIX_A : 0u);
}

/* Regenerates the 624 state words (the standard mt19937 recurrence). */
static void mt_next_state(dit_torch_rng *g) {
  uint32_t *s = g->state;
  int k = 0;
  for (; k < DIT_MT19937_N - MT_M; k++) s[k] = s[k + MT_M] ^ mt_twist(s[k], s[k + 1]);
  for (; k < DIT_MT19937_N - 1; k++) s[k] = s[k + MT_M - DIT_MT19937_N] ^ mt_twist(s[k], s[k + 1]);
  s[k] = s[k + MT_M - DIT_MT19937_N] ^ mt_twist(s[k], s[0]);
  g->left = DIT_MT19937_N;
  g->next = 0;
}

uint32_t dit_torch_rng_u32(dit_torch_rng *g) {
  if (--g->left == 0) mt_next_state(g);
  uint32_t y = g->state[g->next++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t dit_torch_rng_u64(dit_torch_rng *g) {
  uint64_t hi = dit_torch_rng_u32(g);
  uint64_t lo = dit_torch_rng_u32(g);
  return (hi << 32) | lo;
}

/* ---- n < 16: scalar Box-Muller in double ------------------------------------------ */

static double uniform_double(dit_torch_rng *g) {
  uint64_t v = dit_torch_rng_u64(g) & ((UINT64_C(1) << 53) - 1);
  return (double)v * (1.0 / (double)(UINT64_C(1) << 53));
}

static double normal_double(dit_torch_rng *g) {
  if (g->has_cached_normal) {
    g->has_cached_normal = false;
    return g->cached_normal;
  }
  const double pi = 3.14159265358979323846;
  double u1 = uniform_double(g);
  double u2 = uniform_double(g);
  double r = sqrt(-2.0 * log1p(-u2));
  double theta = 2.0 * pi * u1;
  g->cached_normal = r * sin(theta);
  g->has_cached_normal = true;
  return r * cos(theta);
}

/* ---- n >= 16: torch's AVX2 normal_fill, lane by lane -------------------------------- */

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Cephes logf as in avx_mathfun's log256_ps, for x > 0 (the only inputs here). */
static float cephes_logf(float x) {
  static const float p[9] = {
      (float)7.0376836292E-2,  (float)-1.1514610310E-1, (float)1.1676998740E-1,
      (float)-1.2420140846E-1, (float)1.4249322787E-1,  (float)-1.6668057665E-1,
      (float)2.0000714765E-1,  (float)-2.4999993993E-1, (float)3.3333331174E-1};
  const float sqrthf = (float)0.707106781186547524;
  const float q1 = (float)-2.12194440e-4, q2 = (float)0.693359375;
  const float min_norm = u2f(0x00800000u);
  if (x < min_norm) x = min_norm;
  uint32_t bits = f2u(x);
  int32_t expo = (int32_t)(bits >> 23) - 0x7f;
  x = u2f((bits & ~0x7f800000u) | f2u(0.5f));
  float e = (float)expo;
  e = e + 1.0f;
  bool below = x < sqrthf;
  float tmp = below ? x : 0.0f;
  x = x - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x = x + tmp;
  float z = x * x;
  float y = p[0];
  for (int i = 1; i < 9; i++) y = fmaf(y, x, p[i]);
  y = y * x;
  tmp = e * q1;
  y = fmaf(y, z, tmp);
  y = fmaf(-z, 0.5f, y);
  x = x + y;
  x = fmaf(e, q2, x);
  return x;
}

/* Cephes sincosf as in avx_mathfun's sincos256_ps, for 0 <= x < 2^31 (here [0, 2 pi)). */
static void cephes_sincosf(float x, float *s, float *c) {
  const float dp1 = (float)-0.78515625, dp2 = (float)-2.4187564849853515625e-4,
              dp3 = (float)-3.77489497744594108e-8;
  const float sp0 = (float)-1.9515295891E-4, sp1 = (float)8.3321608736E-3,
              sp2 = (float)-1.6666654611E-1;
  const float cp0 = (float)2.443315711809948E-005, cp1 = (float)-1.388731625493765E-003,
              cp2 = (float)4.166664568298827E-002;
  const float fopi = (float)1.27323954473516;
  uint32_t sign_sin = f2u(x) & 0x80000000u;
  x = u2f(f2u(x) & 0x7fffffffu);
  float y = x * fopi;
  int32_t j = (int32_t)y; /* truncation, like cvttps */
  j = (j + 1) & ~1;
  y = (float)j;
  uint32_t swap_sin = ((uint32_t)j & 4u) << 29;
  bool poly_sin = (j & 2) == 0;
  x = fmaf(y, dp1, x);
  x = fmaf(y, dp2, x);
  x = fmaf(y, dp3, x);
  uint32_t sign_cos = (~(uint32_t)(j - 2) & 4u) << 29;
  sign_sin ^= swap_sin;
  float z = x * x;
  float yc = fmaf(cp0, z, cp1);
  yc = fmaf(yc, z, cp2);
  yc = yc * z;
  float tmp = z * 0.5f;
  yc = fmaf(yc, z, -tmp);
  yc = yc + 1.0f;
  float ys = fmaf(sp0, z, sp1);
  ys = fmaf(ys, z, sp2);
  ys = ys * z;
  ys = fmaf(ys, x, x);
  float ysin2 = poly_sin ? ys : 0.0f;
  float ysin1 = poly_sin ? 0.0f : yc;
  ys = ys - ysin2;
  yc = yc - ysin1;
  float sv = ysin1 + ysin2;
  float cv = yc + ys;
  *s = u2f(f2u(sv) ^ sign_sin);
  *c = u2f(f2u(cv) ^ sign_cos);
}

/* Box-Muller on 16 uniforms in place: d[0..8) radius, d[8..16) angle (mean 0, std 1). */
static void normal_fill_16(float *d) {
  const float two_pi = (float)(2.0f * 3.14159265358979323846);
  for (int j = 0; j < 8; j++) {
    float u1 = 1.0f - d[j];
    float u2 = d[j + 8];
    float lg = cephes_logf(u1);
    float m = -2.0f * lg;
    float radius = sqrtf(m);
    float theta = two_pi * u2;
    float sn, cs;
    cephes_sincosf(theta, &sn, &cs);
    float n1 = radius * cs;
    float n2 = radius * sn;
    d[j] = n1 * 1.0f + 0.0f; /* fmadd(n, std = 1, mean = 0): exact, and -0 becomes +0 */
    d[j + 8] = n2 * 1.0f + 0.0f;
  }
}

static float uniform_float(dit_torch_rng *g) {
  uint32_t v = dit_torch_rng_u32(g) & ((1u << 24) - 1);
  return (float)v * (1.0f / (float)(1u << 24));
}

void dit_torch_randn(dit_torch_rng *g, float *out, size_t n) {
  if (n < 16) {
    for (size_t i = 0; i < n; i++) out[i] = (float)normal_double(g);
    return;
  }
  for (size_t i = 0; i < n; i++) out[i] = uniform_float(g);
  for (size_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out + i);
  if (n % 16 != 0) {
    float *tail = out + n - 16;
    for (int i = 0; i < 16; i++) tail[i] = uniform_float(g);
    normal_fill_16(tail);
  }
}
