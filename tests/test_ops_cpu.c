/* CPU backend ops against straightforward double-precision references written here:
 * random inputs, odd sizes, F32/BF16/F16 weights, masks, GQA, causal, strided copies,
 * and argument errors. Every op runs on the portable C path and on the SIMD path. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cpu_paths.h"
#include "testing.h"

#define TOL 1e-5

static float *rnd(size_t n, uint64_t seed) {
  float *x = malloc(sizeof(float) * (n ? n : 1));
  dt_fill_random(x, n, seed);
  return x;
}

/* Stores src (n floats) as dtype t in a new buffer and rounds src to what was stored. */
static void *as_dtype(float *src, size_t n, dit_dtype t) {
  void *p = malloc(dit_dtype_size(t) * (n ? n : 1));
  dit_convert_from_f32(p, src, t, n);
  dit_convert_to_f32(src, p, t, n);
  return p;
}

static double act_ref(double v, dit_act a) {
  switch (a) {
    case DIT_ACT_SILU: return v / (1 + exp(-v));
    case DIT_ACT_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case DIT_ACT_GELU_TANH: return 0.5 * v * (1 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case DIT_ACT_SIGMOID: return 1 / (1 + exp(-v));
    default: return v;
  }
}

static const dit_dtype wtypes[3] = {DIT_F32, DIT_BF16, DIT_F16};

static void test_linear(dit_backend *be) {
  static const int64_t shapes[][4] = {/* lead, M, K, N */
                                      {1, 1, 1, 1}, {1, 5, 7, 3}, {1, 37, 300, 45}, {2, 13, 257, 70},
                                      {1, 270, 520, 200}, {1, 3, 0, 4}};
  for (int s = 0; s < 6; s++) {
    int64_t L = shapes[s][0], M = shapes[s][1], K = shapes[s][2], N = shapes[s][3];
    for (int ti = 0; ti < 3; ti++) {
      dit_dtype wt = wtypes[ti];
      dit_act act = (dit_act)((s + ti) % 5);
      bool with_b = (s + ti) % 2 == 0;
      float *x = rnd((size_t)(L * M * K), 11 + s), *w = rnd((size_t)(N * K), 12 + s), *b = rnd((size_t)N, 13 + s);
      void *wq = as_dtype(w, (size_t)(N * K), wt), *bq = as_dtype(b, (size_t)N, wt);
      float *y = calloc((size_t)(L * M * N), sizeof(float)), *ref = calloc((size_t)(L * M * N), sizeof(float));
      for (int64_t m = 0; m < L * M; m++)
        for (int64_t n = 0; n < N; n++) {
          double acc = with_b ? b[n] : 0;
          for (int64_t k = 0; k < K; k++) acc += (double)x[m * K + k] * w[n * K + k];
          ref[m * N + n] = (float)act_ref(acc, act);
        }
      dit_tensor tx = L > 1 ? dit_tensor_3d(DIT_F32, x, L, M, K) : dit_tensor_2d(DIT_F32, x, M, K);
      dit_tensor ty = L > 1 ? dit_tensor_3d(DIT_F32, y, L, M, N) : dit_tensor_2d(DIT_F32, y, M, N);
      dit_tensor tw = dit_tensor_2d(wt, wq, N, K), tb = dit_tensor_1d(wt, bq, N);
      dit_error err = {0};
      dit_status st = dit_op_linear(be, &ty, &tx, &tw, with_b ? &tb : NULL, act, &err);
      double e = dt_rel_err(y, ref, (size_t)(L * M * N));
      CHECK_MSG(st == DIT_OK && e < TOL, "linear M=%lld K=%lld N=%lld %s act %d: st %d err %g (%s)",
                (long long)M, (long long)K, (long long)N, dit_dtype_name(wt), (int)act, st, e, err.msg);
      free(x), free(w), free(b), free(wq), free(bq), free(y), free(ref);
    }
  }
  /* shape errors */
  float buf[64] = {0};
  dit_tensor x = dit_tensor_2d(DIT_F32, buf, 2, 3), w = dit_tensor_2d(DIT_F32, buf, 4, 5),
             y = dit_tensor_2d(DIT_F32, buf + 32, 2, 4);
  dit_error err = {0};
  CHECK(dit_op_linear(be, &y, &x, &w, NULL, DIT_ACT_NONE, &err) == DIT_ERR_INVALID_ARG &&
        strstr(err.msg, "linear"));
  w = dit_tensor_2d(DIT_I32, buf, 4, 3);
  CHECK(dit_op_linear(be, &y, &x, &w, NULL, DIT_ACT_NONE, &err) == DIT_ERR_INVALID_ARG);
  w = dit_tensor_2d(DIT_F32, buf, 4, 3);
  y = dit_tensor_2d(DIT_F32, buf + 32, 2, 5);
  CHECK(dit_op_linear(be, &y, &x, &w, NULL, DIT_ACT_NONE, &err) == DIT_ERR_INVALID_ARG);
}

static void test_norms(dit_backend *be) {
  int64_t R = 7, D = 37;
  for (int ti = 0; ti < 3; ti++) {
    float *x = rnd((size_t)(R * D), 21), *w = rnd((size_t)D, 22), *b = rnd((size_t)D, 23);
    for (int64_t i = 0; i < R * D; i++) x[i] = x[i] * 3 + 0.5f;
    void *wq = as_dtype(w, (size_t)D, wtypes[ti]), *bq = as_dtype(b, (size_t)D, wtypes[ti]);
    float *y = malloc(sizeof(float) * (size_t)(R * D)), *ref = malloc(sizeof(float) * (size_t)(R * D));
    dit_tensor tx = dit_tensor_2d(DIT_F32, x, R, D), ty = dit_tensor_2d(DIT_F32, y, R, D);
    dit_tensor tw = dit_tensor_1d(wtypes[ti], wq, D), tb = dit_tensor_1d(wtypes[ti], bq, D);
    float eps = 1e-6f;
    for (int use_w = 0; use_w < 2; use_w++) {
      for (int64_t r = 0; r < R; r++) {
        double ss = 0, s = 0, v = 0;
        for (int64_t i = 0; i < D; i++) ss += (double)x[r * D + i] * x[r * D + i], s += x[r * D + i];
        for (int64_t i = 0; i < D; i++) ref[r * D + i] = (float)(x[r * D + i] / sqrt(ss / D + eps) * (use_w ? w[i] : 1));
        (void)v;
      }
      dit_error err = {0};
      dit_status st = dit_op_rms_norm(be, &ty, &tx, use_w ? &tw : NULL, eps, &err);
      CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, (size_t)(R * D)) < TOL, "rms_norm %s w=%d: %g",
                dit_dtype_name(wtypes[ti]), use_w, dt_rel_err(y, ref, (size_t)(R * D)));
      for (int64_t r = 0; r < R; r++) {
        double s = 0, v = 0;
        for (int64_t i = 0; i < D; i++) s += x[r * D + i];
        double mean = s / D;
        for (int64_t i = 0; i < D; i++) v += (x[r * D + i] - mean) * (x[r * D + i] - mean);
        for (int64_t i = 0; i < D; i++)
          ref[r * D + i] = (float)((x[r * D + i] - mean) / sqrt(v / D + eps) * (use_w ? w[i] : 1) + (use_w ? b[i] : 0));
      }
      st = dit_op_layer_norm(be, &ty, &tx, use_w ? &tw : NULL, use_w ? &tb : NULL, eps, &err);
      CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, (size_t)(R * D)) < TOL, "layer_norm %s w=%d: %g",
                dit_dtype_name(wtypes[ti]), use_w, dt_rel_err(y, ref, (size_t)(R * D)));
    }
    /* in place */
    memcpy(y, x, sizeof(float) * (size_t)(R * D));
    dit_error err = {0};
    CHECK(dit_op_layer_norm(be, &ty, &ty, &tw, &tb, eps, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)(R * D)) < TOL);
    dit_tensor bad = dit_tensor_1d(wtypes[ti], wq, D - 1);
    CHECK(dit_op_rms_norm(be, &ty, &tx, &bad, eps, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "rms_norm"));
    free(x), free(w), free(b), free(wq), free(bq), free(y), free(ref);
  }
  /* group norm: B=2, C=6, 3 groups, H=5, W=3, bf16 affine, with and without SiLU */
  int64_t B = 2, C = 6, G = 3, HW = 15, n = B * C * HW;
  float *x = rnd((size_t)n, 31), *w = rnd((size_t)C, 32), *b = rnd((size_t)C, 33);
  void *wq = as_dtype(w, (size_t)C, DIT_BF16), *bq = as_dtype(b, (size_t)C, DIT_BF16);
  float *y = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
  dit_tensor tx = dit_tensor_4d(DIT_F32, x, B, C, 5, 3), ty = dit_tensor_4d(DIT_F32, y, B, C, 5, 3);
  dit_tensor tw = dit_tensor_1d(DIT_BF16, wq, C), tb = dit_tensor_1d(DIT_BF16, bq, C);
  for (int silu = 0; silu < 2; silu++) {
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t g = 0; g < G; g++) {
        int64_t cpg = C / G, off = (bi * C + g * cpg) * HW, cnt = cpg * HW;
        double s = 0, v = 0;
        for (int64_t i = 0; i < cnt; i++) s += x[off + i];
        double mean = s / cnt;
        for (int64_t i = 0; i < cnt; i++) v += (x[off + i] - mean) * (x[off + i] - mean);
        for (int64_t i = 0; i < cnt; i++) {
          int64_t c = g * cpg + i / HW;
          double o = (x[off + i] - mean) / sqrt(v / cnt + 1e-5) * w[c] + b[c];
          ref[off + i] = (float)(silu ? act_ref(o, DIT_ACT_SILU) : o);
        }
      }
    dit_error err = {0};
    dit_status st = dit_op_group_norm(be, &ty, &tx, (int)G, &tw, &tb, 1e-5f, silu, &err);
    CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL, "group_norm silu=%d: %g", silu,
              dt_rel_err(y, ref, (size_t)n));
  }
  dit_error err = {0};
  CHECK(dit_op_group_norm(be, &ty, &tx, 4, &tw, &tb, 1e-5f, false, &err) == DIT_ERR_INVALID_ARG);
  /* channel RMS norm: per pixel over C, F.normalize * sqrt(C) * w, with and without SiLU; one
   * all-zero pixel (F.normalize's floor: it stays 0) */
  for (int64_t c = 0; c < C; c++) x[(1 * C + c) * HW + 7] = 0;
  for (int silu = 0; silu < 2; silu++) {
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t p = 0; p < HW; p++) {
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)x[(bi * C + c) * HW + p] * x[(bi * C + c) * HW + p];
        const double nrm = fmax(sqrt(ss), 1e-12);
        for (int64_t c = 0; c < C; c++) {
          double o = x[(bi * C + c) * HW + p] / nrm * sqrt((double)C) * w[c];
          ref[(bi * C + c) * HW + p] = (float)(silu ? act_ref(o, DIT_ACT_SILU) : o);
        }
      }
    dit_status st = dit_op_channel_rms_norm(be, &ty, &tx, &tw, silu, &err);
    CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL, "channel_rms_norm silu=%d: %g", silu,
              dt_rel_err(y, ref, (size_t)n));
    CHECK(y[(1 * C + 2) * HW + 7] == 0.0f);
  }
  dit_tensor wbad = dit_tensor_1d(DIT_BF16, wq, C - 1);
  CHECK(dit_op_channel_rms_norm(be, &ty, &tx, &wbad, false, &err) == DIT_ERR_INVALID_ARG);
  free(x), free(w), free(b), free(wq), free(bq), free(y), free(ref);
}

/* Reference SDPA on q [B,Sq,Hq,D] given by element accessor strides (qs: 4 strides). */
static void attn_ref(float *out, const float *q, const int64_t *qs, const float *k, const float *v, const uint8_t *mask,
                     int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, double scale, bool causal) {
  double *p = malloc(sizeof(double) * (size_t)Sk);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++)
      for (int64_t i = 0; i < Sq; i++) {
        int64_t hk = h / (Hq / Hkv);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Sk; j++) {
          bool vis = (!mask || mask[b * Sk + j]) && (!causal || j <= i);
          double s = 0;
          for (int64_t d = 0; d < D; d++)
            s += (double)q[b * qs[0] + i * qs[1] + h * qs[2] + d] * k[((b * Sk + j) * Hkv + hk) * D + d];
          p[j] = vis ? s * scale : -INFINITY;
          if (p[j] > mx) mx = p[j];
        }
        float *o = out + ((b * Sq + i) * Hq + h) * D;
        if (mx == -INFINITY) {
          for (int64_t d = 0; d < D; d++) o[d] = 0;
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; j++) sum += (p[j] = exp(p[j] - mx));
        for (int64_t d = 0; d < D; d++) {
          double a = 0;
          for (int64_t j = 0; j < Sk; j++) a += p[j] * v[((b * Sk + j) * Hkv + hk) * D + d];
          o[d] = (float)(a / sum);
        }
      }
  free(p);
}

static void test_attention(dit_backend *be) {
  struct { int64_t B, Sq, Sk, Hq, Hkv, D; int mask, causal, strided_q; } cs[] = {
      {1, 1, 1, 1, 1, 1, 0, 0, 0}, {2, 5, 7, 6, 2, 19, 1, 0, 0}, {2, 9, 9, 4, 4, 33, 0, 1, 1},
      {1, 70, 70, 3, 1, 64, 1, 1, 0}, {2, 3, 130, 2, 1, 17, 1, 0, 1},
      /* several query and key blocks */
      {1, 200, 270, 4, 2, 40, 0, 0, 0}, {2, 150, 300, 2, 1, 24, 1, 1, 1}, {1, 260, 260, 1, 1, 128, 0, 1, 0}};
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t B = cs[c].B, Sq = cs[c].Sq, Sk = cs[c].Sk, Hq = cs[c].Hq, Hkv = cs[c].Hkv, D = cs[c].D;
    /* strided q: a view of the q part of a fused [B, Sq, 3, Hq, D] tensor */
    int64_t qmul = cs[c].strided_q ? 3 : 1;
    float *qb = rnd((size_t)(B * Sq * qmul * Hq * D), 41 + c), *k = rnd((size_t)(B * Sk * Hkv * D), 42 + c),
          *v = rnd((size_t)(B * Sk * Hkv * D), 43 + c);
    for (int64_t i = 0; i < B * Sq * qmul * Hq * D; i++) qb[i] *= 4; /* peaky softmax */
    uint8_t *mask = malloc((size_t)(B * Sk));
    for (int64_t i = 0; i < B * Sk; i++) mask[i] = (uint8_t)((i * 7 + 3) % 5 != 0);
    if (B > 1) memset(mask + Sk, 0, (size_t)Sk); /* batch 1: every key masked -> zeros */
    if (B > 1 && cs[c].causal) mask[Sk] = 1;
    float *out = malloc(sizeof(float) * (size_t)(B * Sq * Hq * D)), *ref = malloc(sizeof(float) * (size_t)(B * Sq * Hq * D));
    int64_t qs[4] = {Sq * qmul * Hq * D, qmul * Hq * D, D, 1};
    dit_tensor tq = dit_tensor_4d(DIT_F32, qb, B, Sq, Hq, D);
    for (int d = 0; d < 4; d++) tq.stride[d] = qs[d];
    dit_tensor tk = dit_tensor_4d(DIT_F32, k, B, Sk, Hkv, D), tv = dit_tensor_4d(DIT_F32, v, B, Sk, Hkv, D);
    dit_tensor to = dit_tensor_4d(DIT_F32, out, B, Sq, Hq, D), tm = dit_tensor_2d(DIT_U8, mask, B, Sk);
    double scale = 1.0 / sqrt((double)D);
    attn_ref(ref, qb, qs, k, v, cs[c].mask ? mask : NULL, B, Sq, Sk, Hq, Hkv, D, (float)scale, cs[c].causal);
    dit_error err = {0};
    dit_status st = dit_op_attention(be, &to, &tq, &tk, &tv, cs[c].mask ? &tm : NULL, (float)scale, cs[c].causal, &err);
    double e = dt_rel_err(out, ref, (size_t)(B * Sq * Hq * D));
    CHECK_MSG(st == DIT_OK && e < TOL, "attention case %zu: st %d err %g (%s)", c, st, e, err.msg);
    if (B > 1 && cs[c].mask && !cs[c].causal) {
      bool zero = true;
      for (int64_t i = Sq * Hq * D; i < 2 * Sq * Hq * D; i++) zero = zero && out[i] == 0.0f;
      CHECK_MSG(zero, "attention: fully masked batch must give zeros");
    }
    tm.dtype = DIT_BOOL;
    st = dit_op_attention(be, &to, &tq, &tk, &tv, cs[c].mask ? &tm : NULL, (float)scale, cs[c].causal, &err);
    CHECK(st == DIT_OK && dt_rel_err(out, ref, (size_t)(B * Sq * Hq * D)) < TOL);
    free(qb), free(k), free(v), free(mask), free(out), free(ref);
  }
  float buf[256] = {0};
  dit_tensor q = dit_tensor_4d(DIT_F32, buf, 1, 2, 3, 4), k = dit_tensor_4d(DIT_F32, buf, 1, 2, 2, 4);
  dit_tensor o = dit_tensor_4d(DIT_F32, buf + 128, 1, 2, 3, 4);
  dit_error err = {0};
  CHECK(dit_op_attention(be, &o, &q, &k, &k, NULL, 1.0f, false, &err) == DIT_ERR_INVALID_ARG &&
        strstr(err.msg, "attention"));
}

static void test_rope(dit_backend *be) {
  int64_t B = 2, S = 5, H = 3, D = 10, h2 = D / 2, n = B * S * H * D;
  for (int mode = 0; mode < 2; mode++) {
    for (int shared = 0; shared < 2; shared++) {
      int64_t CB = shared ? 1 : B;
      float *x = rnd((size_t)n, 51), *ang = rnd((size_t)(CB * S * h2), 52);
      float *c = malloc(sizeof(float) * (size_t)(CB * S * h2)), *s = malloc(sizeof(float) * (size_t)(CB * S * h2));
      for (int64_t i = 0; i < CB * S * h2; i++) c[i] = cosf(ang[i] * 3), s[i] = sinf(ang[i] * 3);
      float *ref = malloc(sizeof(float) * (size_t)n);
      for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < S; t++)
          for (int64_t h = 0; h < H; h++) {
            const float *xr = x + ((b * S + t) * H + h) * D;
            float *rr = ref + ((b * S + t) * H + h) * D;
            const float *cr = c + ((shared ? 0 : b) * S + t) * h2, *sr = s + ((shared ? 0 : b) * S + t) * h2;
            for (int64_t i = 0; i < h2; i++) {
              int64_t i0 = mode == DIT_ROPE_INTERLEAVED ? 2 * i : i, i1 = mode == DIT_ROPE_INTERLEAVED ? 2 * i + 1 : i + h2;
              rr[i0] = (float)((double)xr[i0] * cr[i] - (double)xr[i1] * sr[i]);
              rr[i1] = (float)((double)xr[i1] * cr[i] + (double)xr[i0] * sr[i]);
            }
          }
      dit_tensor tx = dit_tensor_4d(DIT_F32, x, B, S, H, D);
      dit_tensor tc = dit_tensor_3d(DIT_F32, c, CB, S, h2), ts = dit_tensor_3d(DIT_F32, s, CB, S, h2);
      dit_error err = {0};
      dit_status st = dit_op_rope(be, &tx, &tc, &ts, (dit_rope_mode)mode, &err);
      CHECK_MSG(st == DIT_OK && dt_rel_err(x, ref, (size_t)n) < TOL, "rope mode %d shared %d: %g", mode, shared,
                dt_rel_err(x, ref, (size_t)n));
      tc = dit_tensor_3d(DIT_F32, c, CB, S - 1, h2);
      CHECK(dit_op_rope(be, &tx, &tc, &tc, (dit_rope_mode)mode, &err) == DIT_ERR_INVALID_ARG);
      free(x), free(ang), free(c), free(s), free(ref);
    }
  }
}

static void test_elementwise(dit_backend *be) {
  int64_t B = 2, S = 3, D = 37, n = B * S * D;
  float *a = rnd((size_t)n, 61), *b = rnd((size_t)n, 62), *p = rnd((size_t)(B * D), 63), *q = rnd((size_t)(B * D), 64);
  for (int64_t i = 0; i < n; i++) a[i] *= 5;
  float *y = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
  dit_tensor ta = dit_tensor_3d(DIT_F32, a, B, S, D), tb = dit_tensor_3d(DIT_F32, b, B, S, D);
  dit_tensor ty = dit_tensor_3d(DIT_F32, y, B, S, D);
  dit_tensor tp = dit_tensor_2d(DIT_F32, p, B, D), tq = dit_tensor_2d(DIT_F32, q, B, D);
  dit_error err = {0};
  for (int act = 0; act <= DIT_ACT_SIGMOID; act++) {
    for (int64_t i = 0; i < n; i++) ref[i] = (float)act_ref(a[i], (dit_act)act);
    CHECK_MSG(dit_op_activation(be, &ty, &ta, (dit_act)act, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL,
              "activation %d: %g", act, dt_rel_err(y, ref, (size_t)n));
  }
  for (int64_t i = 0; i < n; i++) ref[i] = (float)(act_ref(a[i], DIT_ACT_SILU) * b[i]);
  CHECK(dit_op_swiglu(be, &ty, &ta, &tb, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  for (int sh = 0; sh < 2; sh++) {
    for (int64_t i = 0; i < n; i++) {
      int64_t bi = i / (S * D), d = i % D;
      ref[i] = (float)((double)a[i] * (1.0 + p[bi * D + d]) + (sh ? q[bi * D + d] : 0));
    }
    CHECK(dit_op_modulate(be, &ty, &ta, &tp, sh ? &tq : NULL, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  }
  for (int mode = 0; mode < 3; mode++) { /* no gate, gate, tanh gate */
    memcpy(y, a, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      int64_t bi = i / (S * D), d = i % D;
      double g = mode == 0 ? 1 : (mode == 1 ? p[bi * D + d] : tanh(p[bi * D + d]));
      ref[i] = (float)(a[i] + g * b[i]);
    }
    CHECK_MSG(dit_op_gated_add(be, &ty, &tb, mode ? &tp : NULL, mode == 2, &err) == DIT_OK &&
                  dt_rel_err(y, ref, (size_t)n) < TOL, "gated_add mode %d", mode);
  }
  for (int64_t i = 0; i < n; i++) ref[i] = a[i] + b[i];
  CHECK(dit_op_add(be, &ty, &ta, &tb, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  for (int64_t i = 0; i < n; i++) ref[i] = a[i] * b[i];
  CHECK(dit_op_mul(be, &ty, &ta, &tb, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  for (int64_t i = 0; i < n; i++) ref[i] = a[i] * 0.3f;
  CHECK(dit_op_scale(be, &ty, &ta, 0.3f, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  for (int64_t r = 0; r < B * S; r++) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < D; i++) mx = a[r * D + i] > mx ? a[r * D + i] : mx;
    for (int64_t i = 0; i < D; i++) s += exp(a[r * D + i] - mx);
    for (int64_t i = 0; i < D; i++) ref[r * D + i] = (float)(exp(a[r * D + i] - mx) / s);
  }
  CHECK(dit_op_softmax(be, &ty, &ta, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  memcpy(y, a, sizeof(float) * (size_t)n); /* in place */
  CHECK(dit_op_softmax(be, &ty, &ty, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL);
  dit_tensor small = dit_tensor_3d(DIT_F32, b, B, S, D - 1);
  CHECK(dit_op_add(be, &ty, &ta, &small, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "add"));
  CHECK(dit_op_modulate(be, &ty, &ta, &small, NULL, &err) == DIT_ERR_INVALID_ARG);
  free(a), free(b), free(p), free(q), free(y), free(ref);
}

static void test_embedding(dit_backend *be) {
  int64_t V = 11, D = 9, N = 6;
  for (int ti = 0; ti < 3; ti++) {
    float *t = rnd((size_t)(V * D), 71);
    void *tq = as_dtype(t, (size_t)(V * D), wtypes[ti]);
    int32_t ids32[6] = {0, 10, 3, 3, 7, 1};
    int64_t ids64[6] = {0, 10, 3, 3, 7, 1};
    float y[54], ref[54];
    for (int64_t n = 0; n < N; n++) memcpy(ref + n * D, t + ids32[n] * D, sizeof(float) * (size_t)D);
    dit_tensor tt = dit_tensor_2d(wtypes[ti], tq, V, D), ty = dit_tensor_2d(DIT_F32, y, N, D);
    dit_tensor i32 = dit_tensor_1d(DIT_I32, ids32, N), i64 = dit_tensor_1d(DIT_I64, ids64, N);
    dit_error err = {0};
    CHECK(dit_op_embedding(be, &ty, &tt, &i32, &err) == DIT_OK && dt_rel_err(y, ref, 54) == 0);
    CHECK(dit_op_embedding(be, &ty, &tt, &i64, &err) == DIT_OK && dt_rel_err(y, ref, 54) == 0);
    ids32[2] = 11;
    ids64[4] = -1;
    CHECK(dit_op_embedding(be, &ty, &tt, &i32, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "embedding"));
    CHECK(dit_op_embedding(be, &ty, &tt, &i64, &err) == DIT_ERR_INVALID_ARG);
    free(t), free(tq);
  }
}

static void test_conv(dit_backend *be) {
  struct { int64_t B, Ci, H, W, Co, k; int stride, pad; dit_dtype wt; } cs[] = {
      {2, 3, 9, 11, 5, 3, 1, 1, DIT_F32}, {1, 4, 10, 7, 6, 3, 2, 0, DIT_BF16}, {1, 5, 6, 6, 7, 1, 1, 0, DIT_F16},
      {1, 40, 12, 13, 33, 3, 1, 1, DIT_BF16}, {1, 3, 8, 8, 4, 3, 2, 1, DIT_F32},
      /* rows wider than one im2col tile */
      {1, 300, 3, 130, 4, 3, 1, 1, DIT_BF16}, {2, 300, 5, 250, 3, 3, 2, 1, DIT_F16}};
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t B = cs[c].B, Ci = cs[c].Ci, H = cs[c].H, W = cs[c].W, Co = cs[c].Co, k = cs[c].k;
    int s = cs[c].stride, pd = cs[c].pad;
    int64_t Ho = (H + 2 * pd - k) / s + 1, Wo = (W + 2 * pd - k) / s + 1;
    float *x = rnd((size_t)(B * Ci * H * W), 81 + c), *w = rnd((size_t)(Co * Ci * k * k), 82 + c), *b = rnd((size_t)Co, 83);
    void *wq = as_dtype(w, (size_t)(Co * Ci * k * k), cs[c].wt), *bq = as_dtype(b, (size_t)Co, cs[c].wt);
    size_t ny = (size_t)(B * Co * Ho * Wo);
    float *y = malloc(sizeof(float) * ny), *ref = malloc(sizeof(float) * ny);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t co = 0; co < Co; co++)
        for (int64_t oy = 0; oy < Ho; oy++)
          for (int64_t ox = 0; ox < Wo; ox++) {
            double acc = b[co];
            for (int64_t ci = 0; ci < Ci; ci++)
              for (int64_t ky = 0; ky < k; ky++)
                for (int64_t kx = 0; kx < k; kx++) {
                  int64_t iy = oy * s - pd + ky, ix = ox * s - pd + kx;
                  if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                  acc += (double)x[((bi * Ci + ci) * H + iy) * W + ix] * w[((co * Ci + ci) * k + ky) * k + kx];
                }
            ref[((bi * Co + co) * Ho + oy) * Wo + ox] = (float)acc;
          }
    dit_tensor tx = dit_tensor_4d(DIT_F32, x, B, Ci, H, W), tw = dit_tensor_4d(cs[c].wt, wq, Co, Ci, k, k);
    dit_tensor tb = dit_tensor_1d(cs[c].wt, bq, Co), ty = dit_tensor_4d(DIT_F32, y, B, Co, Ho, Wo);
    dit_error err = {0};
    dit_status st = dit_op_conv2d(be, &ty, &tx, &tw, &tb, s, pd, &err);
    CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, ny) < TOL, "conv2d case %zu: st %d err %g (%s)", c, st,
              dt_rel_err(y, ref, ny), err.msg);
    ty.shape[3]++;
    CHECK(dit_op_conv2d(be, &ty, &tx, &tw, &tb, s, pd, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "conv2d"));
    free(x), free(w), free(b), free(wq), free(bq), free(y), free(ref);
  }
  /* upsample */
  float x[2 * 3 * 5], y[2 * 6 * 10], ref[2 * 6 * 10];
  dt_fill_random(x, 30, 91);
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < 10; j++) ref[(c * 6 + i) * 10 + j] = x[(c * 3 + i / 2) * 5 + j / 2];
  dit_tensor tx = dit_tensor_4d(DIT_F32, x, 1, 2, 3, 5), ty = dit_tensor_4d(DIT_F32, y, 1, 2, 6, 10);
  dit_error err = {0};
  CHECK(dit_op_upsample2x(be, &ty, &tx, &err) == DIT_OK && dt_rel_err(y, ref, 120) == 0);
}

static void test_timestep(dit_backend *be) {
  float t[3] = {0.0f, 1.5f, 999.0f};
  struct { int dim; float mp, shift, scale; bool flip; } cs[] = {
      {256, 10000, 1, 1, true}, {33, 10000, 0, 1000, false}, {8, 100, 1, 1, false}, {7, 10000, 0.5f, 2, true}};
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int dim = cs[c].dim, half = dim / 2;
    float *y = malloc(sizeof(float) * 3 * (size_t)dim), *ref = malloc(sizeof(float) * 3 * (size_t)dim);
    for (int n = 0; n < 3; n++) {
      for (int i = 0; i < half; i++) {
        /* the argument as torch forms it in fp32, then sin/cos in double */
        float e = (float)-log((double)cs[c].mp) * (float)i;
        e = e / ((float)half - cs[c].shift);
        float arg = cs[c].scale * (t[n] * (float)exp((double)e));
        ref[n * dim + i] = (float)(cs[c].flip ? cos(arg) : sin(arg));
        ref[n * dim + half + i] = (float)(cs[c].flip ? sin(arg) : cos(arg));
      }
      if (dim % 2) ref[n * dim + dim - 1] = 0;
    }
    dit_tensor tt = dit_tensor_1d(DIT_F32, t, 3), ty = dit_tensor_2d(DIT_F32, y, 3, dim);
    dit_error err = {0};
    dit_status st = dit_op_timestep_embedding(be, &ty, &tt, dim, cs[c].mp, cs[c].shift, cs[c].scale, cs[c].flip, &err);
    /* expf of the exponent may differ from the double exp by 1 ulp, scaled by t up to 999 */
    CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, 3 * (size_t)dim) < 2e-4, "timestep_embedding case %zu: %g", c,
              dt_rel_err(y, ref, 3 * (size_t)dim));
    free(y), free(ref);
  }
}

static void test_copy(dit_backend *be) {
  /* permute [2,3,4,5] -> [2,4,3,5] view, F32 -> BF16 -> F32, and a slice into a larger tensor */
  int64_t A = 2, Bd = 3, C = 4, D = 5, n = A * Bd * C * D;
  float *x = rnd((size_t)n, 101), *y = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < Bd; b++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t d = 0; d < D; d++) ref[((a * C + c) * Bd + b) * D + d] = x[((a * Bd + b) * C + c) * D + d];
  dit_tensor src = dit_tensor_4d(DIT_F32, x, A, C, Bd, D); /* permuted view of x */
  src.stride[0] = Bd * C * D, src.stride[1] = D, src.stride[2] = C * D, src.stride[3] = 1;
  dit_tensor dst = dit_tensor_4d(DIT_F32, y, A, C, Bd, D);
  dit_error err = {0};
  CHECK(dit_op_copy(be, &dst, &src, &err) == DIT_OK && dt_rel_err(y, ref, (size_t)n) == 0);
  /* transposed last dim (stride != 1) into bf16 */
  uint16_t *h = malloc(2 * (size_t)n);
  dit_tensor src2 = dit_tensor_2d(DIT_F32, x, 6, 20), dst2 = dit_tensor_2d(DIT_BF16, h, 20, 6);
  src2.shape[0] = 20, src2.shape[1] = 6, src2.stride[0] = 1, src2.stride[1] = 20;
  CHECK(dit_op_copy(be, &dst2, &src2, &err) == DIT_OK);
  int bad = 0;
  for (int i = 0; i < 20; i++)
    for (int j = 0; j < 6; j++) bad += h[i * 6 + j] != dit_f32_to_bf16(x[j * 20 + i]);
  CHECK_MSG(bad == 0, "copy to bf16: %d wrong", bad);
  /* bf16 -> f16 and a slice: write into columns 2..8 of a [6, 10] f32 tensor */
  float big[60] = {0};
  dit_tensor sl = dit_tensor_2d(DIT_F32, big + 2, 6, 6);
  sl.stride[0] = 10;
  dit_tensor hs = dit_tensor_2d(DIT_BF16, h, 6, 6);
  CHECK(dit_op_copy(be, &sl, &hs, &err) == DIT_OK);
  bad = 0;
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 10; j++) {
      float want = (j >= 2 && j < 8) ? dit_bf16_to_f32(h[i * 6 + j - 2]) : 0.0f;
      bad += big[i * 10 + j] != want;
    }
  CHECK_MSG(bad == 0, "copy into slice: %d wrong", bad);
  uint16_t f16[36];
  dit_tensor tf = dit_tensor_2d(DIT_F16, f16, 6, 6);
  CHECK(dit_op_copy(be, &tf, &hs, &err) == DIT_OK && dit_f16_to_f32(f16[7]) == dit_bf16_to_f32(h[7]));
  dit_tensor ti = dit_tensor_2d(DIT_I32, f16, 6, 6);
  CHECK(dit_op_copy(be, &ti, &hs, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "copy"));
  free(x), free(y), free(ref), free(h);
}

/* Fused ops (rms_norm_rope, rms_norm_mod, residual_norm) against double-precision references
 * of their unfused sequences, and against the unfused sequence run through the same backend
 * (the CPU backend's fused ops must reproduce it to ~1e-6). */
static double rms_inv(const float *x, int64_t D, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < D; i++) ss += (double)x[i] * x[i];
  return 1.0 / sqrt(ss / (double)D + eps);
}

static void test_fused_norm_rope(dit_backend *be) {
  const int64_t B = 2, S = 5, H = 3, D = 16, h2 = D / 2, n = B * S * H * D;
  const float eps = 1e-5f;
  float *x = rnd((size_t)n, 91), *ang = rnd((size_t)(B * S * h2), 92), *wf = rnd((size_t)D, 93);
  for (int64_t i = 0; i < n; i++) x[i] *= 3;
  for (int64_t i = 0; i < D; i++) wf[i] = 1 + 0.3f * wf[i];
  void *w = as_dtype(wf, (size_t)D, DIT_BF16);
  float *c = malloc(sizeof(float) * (size_t)(B * S * h2)), *s = malloc(sizeof(float) * (size_t)(B * S * h2));
  for (int64_t i = 0; i < B * S * h2; i++) c[i] = cosf(ang[i] * 3), s[i] = sinf(ang[i] * 3);
  float *ref = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  float *y2 = malloc(sizeof(float) * (size_t)n);
  for (int64_t row = 0; row < B * S * H; row++) {
    const float *xr = x + row * D;
    int64_t t = (row / H) % S, b = row / (H * S);
    double r = rms_inv(xr, D, eps), nv[16];
    for (int64_t i = 0; i < D; i++) nv[i] = xr[i] * r * wf[i];
    for (int64_t i = 0; i < h2; i++) {
      double cc = c[(b * S + t) * h2 + i], ss = s[(b * S + t) * h2 + i];
      ref[row * D + 2 * i] = (float)(nv[2 * i] * cc - nv[2 * i + 1] * ss);
      ref[row * D + 2 * i + 1] = (float)(nv[2 * i + 1] * cc + nv[2 * i] * ss);
    }
  }
  dit_tensor tw = dit_tensor_1d(DIT_BF16, w, D);
  dit_tensor tc = dit_tensor_3d(DIT_F32, c, B, S, h2), ts = dit_tensor_3d(DIT_F32, s, B, S, h2);
  dit_error err = {0};
  memcpy(y, x, sizeof(float) * (size_t)n);
  dit_tensor ty = dit_tensor_4d(DIT_F32, y, B, S, H, D);
  CHECK(be->ops->rms_norm_rope != NULL);
  dit_status st = dit_op_rms_norm_rope(be, &ty, &tw, eps, &tc, &ts, DIT_ROPE_INTERLEAVED, &err);
  CHECK_MSG(st == DIT_OK && dt_rel_err(y, ref, (size_t)n) < TOL, "rms_norm_rope: %s %g", err.msg,
            dt_rel_err(y, ref, (size_t)n));
  /* the unfused sequence, op by op */
  memcpy(y2, x, sizeof(float) * (size_t)n);
  dit_tensor rows = dit_tensor_2d(DIT_F32, y2, B * S * H, D), t4 = dit_tensor_4d(DIT_F32, y2, B, S, H, D);
  CHECK(dit_op_rms_norm(be, &rows, &rows, &tw, eps, &err) == DIT_OK);
  CHECK(dit_op_rope(be, &t4, &tc, &ts, DIT_ROPE_INTERLEAVED, &err) == DIT_OK);
  CHECK_MSG(dt_rel_err(y, y2, (size_t)n) < 1e-6, "rms_norm_rope vs unfused: %g", dt_rel_err(y, y2, (size_t)n));
  dit_tensor bad = dit_tensor_3d(DIT_F32, c, B, S - 1, h2);
  CHECK(dit_op_rms_norm_rope(be, &ty, &tw, eps, &bad, &ts, DIT_ROPE_INTERLEAVED, &err) == DIT_ERR_INVALID_ARG);
  free(x), free(ang), free(wf), free(w), free(c), free(s), free(ref), free(y), free(y2);
}

static void test_fused_residual(dit_backend *be) {
  const int64_t B = 2, S = 3, D = 40, n = B * S * D;
  const float eps = 1e-6f;
  float *x = rnd((size_t)n, 101), *r = rnd((size_t)n, 102), *g = rnd((size_t)(B * D), 103);
  float *sc = rnd((size_t)(B * D), 104), *wr = rnd((size_t)D, 105), *wh = rnd((size_t)D, 106);
  for (int64_t i = 0; i < n; i++) r[i] *= 4;
  for (int64_t i = 0; i < D; i++) wr[i] = 1 + 0.2f * wr[i], wh[i] = 1 + 0.2f * wh[i];
  float *xa = malloc(sizeof(float) * (size_t)n), *ra = malloc(sizeof(float) * (size_t)n);
  float *h = malloc(sizeof(float) * (size_t)n), *xb = malloc(sizeof(float) * (size_t)n);
  float *rb = malloc(sizeof(float) * (size_t)n), *hb = malloc(sizeof(float) * (size_t)n);
  float *xref = malloc(sizeof(float) * (size_t)n), *href = malloc(sizeof(float) * (size_t)n);
  dit_tensor twr = dit_tensor_1d(DIT_F32, wr, D), twh = dit_tensor_1d(DIT_F32, wh, D);
  dit_tensor tg = dit_tensor_2d(DIT_F32, g, B, D), tsc = dit_tensor_2d(DIT_F32, sc, B, D);
  dit_error err = {0};
  /* rms_norm_mod: h = rms_norm(x) * wh * (1 + scale), with and without scale */
  for (int mod = 0; mod < 2; mod++) {
    for (int64_t row = 0; row < B * S; row++) {
      double ri = rms_inv(x + row * D, D, eps);
      for (int64_t i = 0; i < D; i++)
        href[row * D + i] = (float)(x[row * D + i] * ri * wh[i] * (mod ? 1.0 + sc[(row / S) * D + i] : 1.0));
    }
    dit_tensor tx = dit_tensor_3d(DIT_F32, x, B, S, D), th = dit_tensor_3d(DIT_F32, h, B, S, D);
    CHECK(be->ops->rms_norm_mod != NULL);
    CHECK_MSG(dit_op_rms_norm_mod(be, &th, &tx, &twh, mod ? &tsc : NULL, eps, &err) == DIT_OK &&
                  dt_rel_err(h, href, (size_t)n) < TOL, "rms_norm_mod %d: %g", mod, dt_rel_err(h, href, (size_t)n));
  }
  /* residual_norm: gate none / plain / tanh, with and without the output norm */
  for (int gm = 0; gm < 3; gm++) {
    for (int out = 0; out < 2; out++) {
      for (int64_t row = 0; row < B * S; row++) {
        double ri = rms_inv(r + row * D, D, eps);
        for (int64_t i = 0; i < D; i++) {
          double gv = gm == 0 ? 1 : gm == 1 ? g[(row / S) * D + i] : tanh(g[(row / S) * D + i]);
          xref[row * D + i] = (float)(x[row * D + i] + gv * (r[row * D + i] * ri * wr[i]));
        }
        double xi = rms_inv(xref + row * D, D, eps);
        for (int64_t i = 0; i < D; i++)
          href[row * D + i] = (float)(xref[row * D + i] * xi * wh[i] * (1.0 + sc[(row / S) * D + i]));
      }
      memcpy(xa, x, sizeof(float) * (size_t)n), memcpy(ra, r, sizeof(float) * (size_t)n);
      memcpy(xb, x, sizeof(float) * (size_t)n), memcpy(rb, r, sizeof(float) * (size_t)n);
      dit_tensor tx = dit_tensor_3d(DIT_F32, xa, B, S, D), tr = dit_tensor_3d(DIT_F32, ra, B, S, D);
      dit_tensor th = dit_tensor_3d(DIT_F32, h, B, S, D);
      CHECK(be->ops->residual_norm != NULL);
      dit_status st = dit_op_residual_norm(be, &tx, &tr, &twr, gm ? &tg : NULL, gm == 2, out ? &th : NULL, &twh,
                                           &tsc, eps, &err);
      CHECK_MSG(st == DIT_OK && dt_rel_err(xa, xref, (size_t)n) < TOL && (!out || dt_rel_err(h, href, (size_t)n) < TOL),
                "residual_norm gate %d out %d: %s x %g h %g", gm, out, err.msg, dt_rel_err(xa, xref, (size_t)n),
                dt_rel_err(h, href, (size_t)n));
      /* the unfused sequence op by op */
      dit_tensor ux = dit_tensor_3d(DIT_F32, xb, B, S, D), ur = dit_tensor_3d(DIT_F32, rb, B, S, D);
      dit_tensor uh = dit_tensor_3d(DIT_F32, hb, B, S, D);
      CHECK(dit_op_rms_norm(be, &ur, &ur, &twr, eps, &err) == DIT_OK);
      CHECK(dit_op_gated_add(be, &ux, &ur, gm ? &tg : NULL, gm == 2, &err) == DIT_OK);
      CHECK(dit_op_rms_norm(be, &uh, &ux, &twh, eps, &err) == DIT_OK);
      CHECK(dit_op_modulate(be, &uh, &uh, &tsc, NULL, &err) == DIT_OK);
      CHECK_MSG(dt_rel_err(xa, xb, (size_t)n) < 1e-6 && (!out || dt_rel_err(h, hb, (size_t)n) < 1e-6),
                "residual_norm vs unfused gate %d out %d", gm, out);
    }
  }
  dit_tensor tx = dit_tensor_3d(DIT_F32, xa, B, S, D), tr = dit_tensor_3d(DIT_F32, ra, B, S, D);
  CHECK(dit_op_residual_norm(be, &tx, &tr, &twr, &tg, true, &tx, &twh, &tsc, eps, &err) == DIT_ERR_INVALID_ARG);
  dit_tensor small = dit_tensor_3d(DIT_F32, ra, B, S, D - 1);
  CHECK(dit_op_residual_norm(be, &tx, &small, &twr, &tg, true, NULL, NULL, NULL, eps, &err) == DIT_ERR_INVALID_ARG);
  free(x), free(r), free(g), free(sc), free(wr), free(wh), free(xa), free(ra), free(h), free(xb), free(rb);
  free(hb), free(xref), free(href);
}

static void run_all(dit_backend *be) {
  test_linear(be);
  test_norms(be);
  test_attention(be);
  test_rope(be);
  test_elementwise(be);
  test_embedding(be);
  test_conv(be);
  test_timestep(be);
  test_copy(be);
  test_fused_norm_rope(be);
  test_fused_residual(be);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  dt_on_cpu_paths(2, false, "AVX-512", run_all);
  return dt_finish();
}
