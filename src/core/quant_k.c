/* The reference quantizers of ggml's K types (Q2_K ... Q6_K): per 16- or 32-element
 * sub-block a scale (and min) fitted by ggml's searches, the scales then quantized against
 * the super-block's fp16 d (and dmin), and every value rounded against its dequantized
 * sub-block scale. Each step is written in ggml's order of operations (quant.h: ISO C
 * roundings), so the bytes equal its quantize_row_*_ref. */
#include <math.h>
#include <string.h>

#include "core/quant_internal.h"

#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest (ties to even) through the float's mantissa, as ggml does: exact for
 * |v| <= 4194303, defined (if meaningless) for every v. */
static inline int nearest_int(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/* ggml's make_qx_quants with rmse_type 1 and no importance weights: a symmetric scale for
 * n values into L[i] in [0, 2 nmax), refined over 18 nearby scales. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
  float amax, max = dit_q_signed_absmax(x, n, &amax);
  if (amax < GROUP_MAX_EPS) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = (float)(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = (int8_t)(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * (float)l;
    suml2 += w * (float)l * (float)l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -((float)nmax + 0.1f * (float)is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
      float w = x[i] * x[i];
      sumlx += w * x[i] * (float)l;
      suml2 += w * (float)l * (float)l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/* ggml's make_q3_quants with its rmse refinement: L[i] in [0, 2 nmax). */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
  float amax, max = dit_q_signed_absmax(x, n, &amax);
  if (amax < GROUP_MAX_EPS) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = (float)(-nmax) / max, sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = (int8_t)l;
    float w = x[i] * x[i];
    sumlx += w * x[i] * (float)l;
    suml2 += w * (float)l * (float)l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * (float)L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * (float)L[i] * (float)L[i];
        int new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
        if (new_l != L[i]) {
          slx += w * x[i] * (float)new_l;
          sl2 += w * (float)new_l * (float)new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = (int8_t)new_l, sumlx = slx, suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ggml's make_qkx2_quants: an asymmetric scale and min (returned negated in *the_min) for n
 * weighted values into L[i] in [0, nmax], refined over nstep + 1 trial scales. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = (float)nmax / (max - min), scale = 1 / iscale, best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
    float diff = scale * (float)L[i] + min - x[i];
    diff = use_mad ? fabsf(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = (uint8_t)l;
      float w = weights[i];
      sum_l += w * (float)l;
      sum_l2 += w * (float)l * (float)l;
      sum_xl += w * (float)l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * (float)Laux[i] + this_min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        memcpy(L, Laux, (size_t)n);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/* Two bits of each of 256 values L into 64 bytes q (ggml's order). */
static void pack2(const uint8_t *L, uint8_t *q) {
  for (int j = 0; j < 256; j += 128)
    for (int l = 0; l < 32; ++l)
      q[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* Q2_K: scales[16] (4-bit scale, 4-bit min), qs[64], d, dmin. */
void dit_q_q2_k(const float *x, uint8_t *b, int64_t nb) {
  uint8_t L[256], Laux[16];
  float weights[16], mins[16], scales[16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < nb; i++, x += 256, b += 84) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j) b[j] = (uint8_t)nearest_int(iscale * scales[j]);
      dit_q_put_f16(b + 80, max_scale / q4scale);
    } else {
      memset(b, 0, 16);
      dit_q_put_f16(b + 80, 0.f);
    }
    if (max_min > 0) {
      float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j) b[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
      dit_q_put_f16(b + 82, max_min / q4scale);
    } else {
      dit_q_put_f16(b + 82, 0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = dit_q_f16(b + 80) * (float)(b[j] & 15);
      if (d == 0.0f) continue;
      const float dm = dit_q_f16(b + 82) * (float)(b[j] >> 4);
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + ii] + dm) / d)));
    }
    pack2(L, b + 16);
  }
}

/* Q3_K's scale j (minus 32) as stored in its 12 scale bytes s. */
static int q3_scale(const uint8_t *s, int j) {
  int sc = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
  return (int)(int8_t)(uint8_t)(sc | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/* Q3_K: hmask[32], qs[64], scales[12], d. */
void dit_q_q3_k(const float *x, uint8_t *b, int64_t nb) {
  int8_t L[256];
  float scales[16];
  for (int64_t i = 0; i < nb; i++, x += 256, b += 110) {
    uint8_t *hmask = b, *qs = b + 32, *s = b + 96;
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
    }
    memset(s, 0, 12);
    if (max_scale != 0.0f) {
      float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int l = imax(-32, imin(31, (int8_t)(uint8_t)nearest_int(iscale * scales[j]))) + 32;
        if (j < 8) s[j] = (uint8_t)(l & 15);
        else s[j - 8] |= (uint8_t)((l & 15) << 4);
        s[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
      }
      dit_q_put_f16(b + 108, 1 / iscale);
    } else {
      dit_q_put_f16(b + 108, 0.f);
    }
    for (int j = 0; j < 16; ++j) {
      float d = dit_q_f16(b + 108) * (float)q3_scale(s, j);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(imax(-4, imin(3, nearest_int(x[16 * j + ii] / d))) + 4);
    }
    memset(hmask, 0, 32);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < 256; ++j) {
      if (L[j] > 3) {
        hmask[m] |= hm;
        L[j] = (int8_t)(L[j] - 4);
      }
      if (++m == 32) m = 0, hm = (uint8_t)(hm << 1);
    }
    pack2((const uint8_t *)L, qs);
  }
}

/* Q4_K (nmax 15) and Q5_K (nmax 31): d, dmin, scales[12], [qh[32]], qs[128]. */
void dit_q_q45_k(const float *x, uint8_t *b, int64_t nb, bool five) {
  uint8_t L[256], Laux[32];
  float weights[32], mins[8], scales[8];
  const int nmax = five ? 31 : 15, bb = five ? 176 : 144;
  for (int64_t i = 0; i < nb; i++, x += 256, b += bb) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      float av_x = sqrtf(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, five ? -0.5f : -1.f,
                                   0.1f, five ? 15 : 20, false);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t *s = b + 4;
    for (int j = 0; j < 8; ++j) {
      uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]), lm = (uint8_t)nearest_int(inv_min * mins[j]);
      ls = ls < 63 ? ls : 63, lm = lm < 63 ? lm : 63;
      if (j < 4) {
        s[j] = ls, s[j + 4] = lm;
      } else {
        s[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
        s[j - 4] |= (uint8_t)((ls >> 4) << 6);
        s[j] |= (uint8_t)((lm >> 4) << 6);
      }
    }
    dit_q_put_f16(b, max_scale / 63.f);
    dit_q_put_f16(b + 2, max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      dit_q_scale_min_k4(j, s, &sc, &m);
      const float d = dit_q_f16(b) * (float)sc;
      if (d == 0.0f) continue;
      const float dm = dit_q_f16(b + 2) * (float)m;
      for (int ii = 0; ii < 32; ++ii)
        L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + ii] + dm) / d)));
    }
    uint8_t *qh = b + 16, *q = b + (five ? 48 : 16);
    if (five) memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64, q += 32, m1 = (uint8_t)(m1 << 2), m2 = (uint8_t)(m2 << 2)) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (five && l1 > 15) l1 -= 16, qh[j] |= m1;
        if (five && l2 > 15) l2 -= 16, qh[j] |= m2;
        q[j] = (uint8_t)(l1 | (l2 << 4));
      }
    }
  }
}

/* Q6_K: ql[128], qh[64], scales[16] (int8), d. */
void dit_q_q6_k(const float *x, uint8_t *b, int64_t nb) {
  int8_t L[256];
  float scales[16];
  for (int64_t i = 0; i < nb; i++, x += 256, b += 210) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (fabsf(scales[ib]) > max_abs_scale) max_abs_scale = fabsf(scales[ib]), max_scale = scales[ib];
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
      memset(b, 0, 210);
      continue;
    }
    float iscale = -128.f / max_scale;
    int8_t *sc = (int8_t *)(b + 192);
    dit_q_put_f16(b + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = (int8_t)(uint8_t)imin(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < 16; ++j) {
      float d = dit_q_f16(b + 208) * (float)sc[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 15, q2 = L[j + l + 32] & 15, q3 = L[j + l + 64] & 15, q4 = L[j + l + 96] & 15;
        ql[l] = (uint8_t)(q1 | (q3 << 4));
        ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
        qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                          ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}
