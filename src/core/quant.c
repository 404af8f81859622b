/* ggml's block formats (see quant.h): the 32-element types and the dequantization of all;
 * the K types' quantizers are in quant_k.c. Blocks are read and written byte by byte, so
 * any alignment works. */
#include "core/quant.h"

#include <math.h>
#include <string.h>

#include "core/quant_internal.h"

/* ---- dequantization ---- */

static void dq_q8_0(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
    const float d = dit_q_f16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
  }
}

static void dq_q4_0(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
    const float d = dit_q_f16(b);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)((b[2 + j] & 15) - 8) * d;
      y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
  }
}

static void dq_q4_1(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
    const float d = dit_q_f16(b), m = dit_q_f16(b + 2);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)(b[4 + j] & 15) * d + m;
      y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
  }
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q5_0 (offset 16, no min) and Q5_1 (min m): qh at h, qs at s. */
static void dq_q5(const uint8_t *h, const uint8_t *s, float d, float m, bool has_min, float *y) {
  const uint32_t qh = le32(h);
  for (int j = 0; j < 16; j++) {
    const int x0 = (s[j] & 15) | (int)(((qh >> j) << 4) & 0x10);
    const int x1 = (s[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
    if (has_min) {
      y[j] = (float)x0 * d + m;
      y[j + 16] = (float)x1 * d + m;
    } else {
      y[j] = (float)(x0 - 16) * d;
      y[j + 16] = (float)(x1 - 16) * d;
    }
  }
}

static void dq_q2_k(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 84) {
    const float d = dit_q_f16(b + 80), min = dit_q_f16(b + 82);
    const uint8_t *q = b + 16;
    int is = 0;
    for (int n = 0; n < 256; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; half++) {
          const uint8_t sc = b[is++];
          const float dl = d * (float)(sc & 15), ml = min * (float)(sc >> 4);
          for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
    }
  }
}

/* Q3_K's 16 signed 6-bit scales (minus 32) from its 12 scale bytes s. */
static void q3_scales(const uint8_t *s, int *out) {
  for (int k = 0; k < 4; k++) {
    out[k] = ((s[k] & 15) | (((s[8 + k] >> 0) & 3) << 4)) - 32;
    out[4 + k] = ((s[4 + k] & 15) | (((s[8 + k] >> 2) & 3) << 4)) - 32;
    out[8 + k] = ((s[k] >> 4) | (((s[8 + k] >> 4) & 3) << 4)) - 32;
    out[12 + k] = ((s[4 + k] >> 4) | (((s[8 + k] >> 6) & 3) << 4)) - 32;
  }
}

static void dq_q3_k(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 110) {
    const uint8_t *hm = b, *q = b + 32;
    const float d_all = dit_q_f16(b + 108);
    int sc[16], is = 0;
    q3_scales(b + 96, sc);
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int half = 0; half < 2; half++) {
          const float dl = d_all * (float)sc[is++];
          for (int l = 0; l < 16; l++) {
            const int v = ((q[l + 16 * half] >> shift) & 3) - ((hm[l + 16 * half] & m) ? 0 : 4);
            *y++ = dl * (float)v;
          }
        }
      }
    }
  }
}

void dit_q_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63, *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/* Q4_K and Q5_K (five): d, dmin, scales[12], [qh[32]], qs[128]. */
static void dq_q45_k(const uint8_t *b, float *y, int64_t nb, bool five) {
  const int bb = five ? 176 : 144;
  for (int64_t i = 0; i < nb; i++, b += bb) {
    const float d = dit_q_f16(b), min = dit_q_f16(b + 2);
    const uint8_t *qh = b + 16, *q = b + (five ? 48 : 16);
    int u1 = 1, u2 = 2;
    for (int c = 0, is = 0; c < 4; c++, q += 32, is += 2, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      dit_q_scale_min_k4(is, b + 4, &sc, &m);
      const float d1 = d * (float)sc, m1 = min * (float)m;
      dit_q_scale_min_k4(is + 1, b + 4, &sc, &m);
      const float d2 = d * (float)sc, m2 = min * (float)m;
      for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] & 15) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * (float)((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

static void dq_q6_k(const uint8_t *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, b += 210) {
    const float d = dit_q_f16(b + 208);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int q1 = (int8_t)((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = (int8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * (float)sc[is] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
    }
  }
}

void dit_dequant_row(dit_dtype t, const void *src, float *dst, int64_t n) {
  const uint8_t *b = src;
  switch (t) {
    case DIT_Q8_0: dq_q8_0(b, dst, n / 32); break;
    case DIT_Q4_0: dq_q4_0(b, dst, n / 32); break;
    case DIT_Q4_1: dq_q4_1(b, dst, n / 32); break;
    case DIT_Q5_0:
      for (int64_t i = 0; i < n / 32; i++) dq_q5(b + 22 * i + 2, b + 22 * i + 6, dit_q_f16(b + 22 * i), 0, false, dst + 32 * i);
      break;
    case DIT_Q5_1:
      for (int64_t i = 0; i < n / 32; i++)
        dq_q5(b + 24 * i + 4, b + 24 * i + 8, dit_q_f16(b + 24 * i), dit_q_f16(b + 24 * i + 2), true, dst + 32 * i);
      break;
    case DIT_Q2_K: dq_q2_k(b, dst, n / 256); break;
    case DIT_Q3_K: dq_q3_k(b, dst, n / 256); break;
    case DIT_Q4_K: dq_q45_k(b, dst, n / 256, false); break;
    case DIT_Q5_K: dq_q45_k(b, dst, n / 256, true); break;
    case DIT_Q6_K: dq_q6_k(b, dst, n / 256); break;
    default: dit_convert_to_f32(dst, src, t, (size_t)n); break;
  }
}

/* ---- quantization of the 32-element types ---- */

float dit_q_signed_absmax(const float *x, int n, float *amax) {
  float a = 0.0f, max = 0.0f;
  for (int j = 0; j < n; j++)
    if (a < fabsf(x[j])) a = fabsf(x[j]), max = x[j];
  if (amax) *amax = a;
  return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
  float lo = 3.40282347e38f, hi = -3.40282347e38f;
  for (int j = 0; j < n; j++) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo, *mx = hi;
}

/* C's float-to-integer conversion (truncation) where it is defined; out of range (or NaN)
 * clamped, where ggml's code would be undefined. */
static int trunc_int(float v) {
  if (!(v > -2147483520.0f)) return v != v ? 0 : -2147483647 - 1;
  if (v >= 2147483520.0f) return 2147483647;
  return (int)v;
}

static void q_q8_0(const float *x, uint8_t *b, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += 32, b += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    dit_q_put_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)trunc_int(roundf(x[j] * id));
  }
}

static void q_q4_0(const float *x, uint8_t *b, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += 32, b += 18) {
    const float d = dit_q_signed_absmax(x, 32, NULL) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    dit_q_put_f16(b, d);
    for (int j = 0; j < 16; j++) {
      int x0 = (int8_t)trunc_int(x[j] * id + 8.5f), x1 = (int8_t)trunc_int(x[j + 16] * id + 8.5f);
      x0 = x0 < 15 ? x0 : 15, x1 = x1 < 15 ? x1 : 15;
      b[2 + j] = (uint8_t)((uint8_t)x0 | (uint8_t)x1 << 4);
    }
  }
}

static void q_q4_1(const float *x, uint8_t *b, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += 32, b += 20) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    dit_q_put_f16(b, d);
    dit_q_put_f16(b + 2, mn);
    for (int j = 0; j < 16; j++) {
      int x0 = (int8_t)trunc_int((x[j] - mn) * id + 0.5f), x1 = (int8_t)trunc_int((x[j + 16] - mn) * id + 0.5f);
      x0 = x0 < 15 ? x0 : 15, x1 = x1 < 15 ? x1 : 15;
      b[4 + j] = (uint8_t)((uint8_t)x0 | (uint8_t)x1 << 4);
    }
  }
}

/* Packs 32 5-bit values: low nibbles into qs, fifth bits into the little-endian qh. */
static void pack5(const uint8_t *v, uint8_t *qh_out, uint8_t *qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; j++) {
    qs[j] = (uint8_t)((v[j] & 15) | ((v[j + 16] & 15) << 4));
    qh |= (uint32_t)((v[j] & 0x10u) >> 4) << j;
    qh |= (uint32_t)((v[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; k++) qh_out[k] = (uint8_t)(qh >> (8 * k));
}

static void q_q5_0(const float *x, uint8_t *b, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += 32, b += 22) {
    const float d = dit_q_signed_absmax(x, 32, NULL) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    dit_q_put_f16(b, d);
    uint8_t v[32];
    for (int j = 0; j < 32; j++) {
      int q = (int8_t)trunc_int(x[j] * id + 16.5f);
      v[j] = (uint8_t)(q < 31 ? q : 31);
    }
    pack5(v, b + 2, b + 6);
  }
}

static void q_q5_1(const float *x, uint8_t *b, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += 32, b += 24) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    dit_q_put_f16(b, d);
    dit_q_put_f16(b + 2, mn);
    uint8_t v[32];
    for (int j = 0; j < 32; j++) v[j] = (uint8_t)trunc_int((x[j] - mn) * id + 0.5f);
    pack5(v, b + 4, b + 8);
  }
}

void dit_quant_row(dit_dtype t, const float *src, void *dst, int64_t n) {
  uint8_t *b = dst;
  switch (t) {
    case DIT_Q8_0: q_q8_0(src, b, n / 32); break;
    case DIT_Q4_0: q_q4_0(src, b, n / 32); break;
    case DIT_Q4_1: q_q4_1(src, b, n / 32); break;
    case DIT_Q5_0: q_q5_0(src, b, n / 32); break;
    case DIT_Q5_1: q_q5_1(src, b, n / 32); break;
    case DIT_Q2_K: dit_q_q2_k(src, b, n / 256); break;
    case DIT_Q3_K: dit_q_q3_k(src, b, n / 256); break;
    case DIT_Q4_K: dit_q_q45_k(src, b, n / 256, false); break;
    case DIT_Q5_K: dit_q_q45_k(src, b, n / 256, true); break;
    case DIT_Q6_K: dit_q_q6_k(src, b, n / 256); break;
    default: dit_convert_from_f32(dst, src, t, (size_t)n); break;
  }
}

float dit_fp8_scale(float amax, dit_dtype t) {
  return amax > 0.0f && isfinite(amax) ? amax / (t == DIT_F8_E4M3 ? 448.0f : 57344.0f) : 1.0f;
}
