/* The backend op case table and its runner (see op_cases.h). */
#include "op_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "testing.h"

/* ---------------- buffers of a case ---------------- */

enum { OPC_MAX_BUFS = 12 };
typedef enum { K_ACT, K_WGT, K_F32, K_U8, K_I32, K_I64 } buf_kind;
typedef enum { F_RAND, F_POISON, F_MASK, F_IDS, F_TIME } buf_fill;

typedef struct buf_spec {
  buf_kind kind;
  int64_t n;
  buf_fill fill;
  float amp; /* F_RAND: amplitude; F_MASK: padded keys per item; F_IDS: vocabulary; F_TIME: t scale */
  bool out;  /* compared after the op */
} buf_spec;

/* One side of a case: the op functions below are called twice per backend, first to record
 * the buffers (run false), then to build the tensors over them and run the op. */
typedef struct opc_io {
  const opc_case *c;
  int n;
  buf_spec sp[OPC_MAX_BUFS];
  void *ptr[OPC_MAX_BUFS];
  dit_dtype dt[OPC_MAX_BUFS];
  dit_backend *be;
  bool run;
  dit_error err;
} opc_io;

static int buf(opc_io *o, buf_kind kind, int64_t n, buf_fill fill, float amp, bool out) {
  int i = o->n++;
  if (!o->run && i < OPC_MAX_BUFS) o->sp[i] = (buf_spec){kind, n, fill, amp, out};
  return i;
}
static int in(opc_io *o, buf_kind kind, int64_t n, float amp) { return buf(o, kind, n, F_RAND, amp, false); }
/* An output: NaN-poisoned (fresh) or random (a view into it is written; the rest must stay). */
static int out(opc_io *o, buf_kind kind, int64_t n, bool fresh) {
  return buf(o, kind, n, fresh ? F_POISON : F_RAND, 1.0f, true);
}

/* A view of buffer b: nd dims, from element off, strides (NULL: contiguous). */
static dit_tensor view(const opc_io *o, int b, int64_t off, int nd, const int64_t *shape, const int64_t *stride) {
  dit_dtype dt = o->run ? o->dt[b] : DIT_F32;
  dit_tensor t = dit_tensor_make(dt, o->run ? (char *)o->ptr[b] + (size_t)off * dit_dtype_size(dt) : NULL, nd, shape);
  if (stride)
    for (int i = 0; i < nd; i++) t.stride[i] = stride[i];
  t.device = o->run ? dit_backend_device(o->be) : DIT_DEV_CPU;
  return t;
}
static dit_tensor ten(const opc_io *o, int b, int nd, const int64_t *shape) { return view(o, b, 0, nd, shape, NULL); }
#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof(SH(__VA_ARGS__)) / sizeof(int64_t)))
#define T(b, ...) ten(o, b, NDIM(__VA_ARGS__), SH(__VA_ARGS__))
#define RUN(call) return o->run ? (call) : DIT_OK

/* ---------------- one function per op: its buffers, tensors and call ---------------- */

/* linear: s = {L, M, K, N}, a = act; BIAS; STRIDED: x a column slice of [L*M, K + 8], y of
 * [L*M, N + 8] (ld != width, as fused projections). */
static dit_status op_linear(opc_io *o) {
  const opc_case *c = o->c;
  int64_t L = c->s[0], M = c->s[1], K = c->s[2], N = c->s[3], R = L * M;
  bool st = c->flags & OPC_STRIDED;
  int64_t xw = st ? K + 8 : K, yw = st ? N + 8 : N;
  int bx = in(o, K_ACT, R * xw, 1), bw = in(o, K_WGT, N * K, 0.5f), bb = in(o, K_WGT, N, 1), by = out(o, K_ACT, R * yw, !st);
  dit_tensor x, y, w = T(bw, N, K), b = T(bb, N);
  if (st) x = view(o, bx, 8, 2, SH(R, K), SH(xw, 1)), y = view(o, by, 8, 2, SH(R, N), SH(yw, 1));
  else if (L > 1) x = T(bx, L, M, K), y = T(by, L, M, N);
  else x = T(bx, M, K), y = T(by, M, N);
  RUN(dit_op_linear(o->be, &y, &x, &w, c->flags & OPC_BIAS ? &b : NULL, (dit_act)c->a, &o->err));
}

/* rms_norm / layer_norm / softmax / activation: s = {R, D}; BIAS: weight (and bias); INPLACE. */
static dit_status rows_op(opc_io *o) {
  const opc_case *c = o->c;
  int64_t R = c->s[0], D = c->s[1];
  bool ip = c->flags & OPC_INPLACE, aff = c->flags & OPC_BIAS;
  int bx = buf(o, K_ACT, R * D, F_RAND, 3, ip), bw = in(o, K_WGT, D, 1), bb = in(o, K_WGT, D, 1);
  int by = ip ? bx : out(o, K_ACT, R * D, true);
  dit_tensor x = T(bx, R, D), y = T(by, R, D), w = T(bw, D), b = T(bb, D);
  if (!o->run) return DIT_OK;
  switch (c->op) {
    case OPC_rms_norm: return dit_op_rms_norm(o->be, &y, &x, aff ? &w : NULL, 1e-6f, &o->err);
    case OPC_layer_norm: return dit_op_layer_norm(o->be, &y, &x, aff ? &w : NULL, aff ? &b : NULL, 1e-6f, &o->err);
    case OPC_softmax: return dit_op_softmax(o->be, &y, &x, &o->err);
    case OPC_scale: return dit_op_scale(o->be, &y, &x, 0.37f, &o->err);
    default: return dit_op_activation(o->be, &y, &x, (dit_act)c->a, &o->err);
  }
}

/* group_norm: s = {B, C, H, W}, a = groups; SILU; BIAS: affine. */
static dit_status op_group_norm(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], C = c->s[1], H = c->s[2], W = c->s[3];
  bool aff = c->flags & OPC_BIAS;
  int bx = in(o, K_ACT, B * C * H * W, 2), bw = in(o, K_WGT, C, 1), bb = in(o, K_WGT, C, 1);
  int by = out(o, K_ACT, B * C * H * W, true);
  dit_tensor x = T(bx, B, C, H, W), y = T(by, B, C, H, W), w = T(bw, C), b = T(bb, C);
  RUN(dit_op_group_norm(o->be, &y, &x, c->a, aff ? &w : NULL, aff ? &b : NULL, 1e-5f, c->flags & OPC_SILU, &o->err));
}

/* attention: s = {B, Sq, Sk, Hq, Hkv, D}, b = padded keys per item (MASK: item i has b * (i + 1));
 * CAUSAL; EMPTY: the last item sees no key; STRIDED (Sq == Sk, Hq == Hkv): q, k, v column
 * slices of one [B, S, 3, H, D] buffer, out a slice of a filled [B, S, 2, H, D] one. */
static dit_status op_attention(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], Sq = c->s[1], Sk = c->s[2], Hq = c->s[3], Hkv = c->s[4], D = c->s[5];
  bool st = c->flags & OPC_STRIDED, mask = c->flags & (OPC_MASK | OPC_EMPTY);
  dit_tensor q, k, v, out_t;
  int bm = buf(o, K_U8, B * Sk, F_MASK, (float)c->b, false);
  if (st) {
    int bq = in(o, K_ACT, B * Sq * 3 * Hq * D, 1), bo = out(o, K_ACT, B * Sq * 2 * Hq * D, false);
    const int64_t *sh = SH(B, Sq, Hq, D), *qs = SH(Sq * 3 * Hq * D, 3 * Hq * D, D, 1);
    q = view(o, bq, 0, 4, sh, qs), k = view(o, bq, Hq * D, 4, sh, qs), v = view(o, bq, 2 * Hq * D, 4, sh, qs);
    out_t = view(o, bo, 0, 4, sh, SH(Sq * 2 * Hq * D, 2 * Hq * D, D, 1));
  } else {
    int bq = in(o, K_ACT, B * Sq * Hq * D, 1), bk = in(o, K_ACT, B * Sk * Hkv * D, 1);
    int bv = in(o, K_ACT, B * Sk * Hkv * D, 1), bo = out(o, K_ACT, B * Sq * Hq * D, true);
    q = T(bq, B, Sq, Hq, D), k = T(bk, B, Sk, Hkv, D), v = T(bv, B, Sk, Hkv, D), out_t = T(bo, B, Sq, Hq, D);
  }
  dit_tensor m = T(bm, B, Sk);
  RUN(dit_op_attention(o->be, &out_t, &q, &k, &v, mask ? &m : NULL, 1.0f / sqrtf((float)D), c->flags & OPC_CAUSAL,
                       &o->err));
}

/* rope and rms_norm_rope: s = {B, S, H, D}, a = mode; SHARED: tables [S, D/2]; STRIDED: x the
 * first H heads of [B, S, 2H, D]; rms_norm_rope: BIAS: weight [D]. In place. */
static dit_status rope_op(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], S = c->s[1], H = c->s[2], D = c->s[3], CB = c->flags & OPC_SHARED ? 1 : B;
  bool st = c->flags & OPC_STRIDED;
  int bx = buf(o, K_ACT, B * S * (st ? 2 : 1) * H * D, F_RAND, 2, true);
  int bc = in(o, K_F32, CB * S * D / 2, 1), bs = in(o, K_F32, CB * S * D / 2, 1), bw = in(o, K_WGT, D, 1);
  dit_tensor x = st ? view(o, bx, 0, 4, SH(B, S, H, D), SH(S * 2 * H * D, 2 * H * D, D, 1)) : T(bx, B, S, H, D);
  dit_tensor cs = CB == 1 ? T(bc, S, D / 2) : T(bc, B, S, D / 2), sn = CB == 1 ? T(bs, S, D / 2) : T(bs, B, S, D / 2);
  dit_tensor w = T(bw, D);
  if (!o->run) return DIT_OK;
  if (c->op == OPC_rope) return dit_op_rope(o->be, &x, &cs, &sn, (dit_rope_mode)c->a, &o->err);
  return dit_op_rms_norm_rope(o->be, &x, c->flags & OPC_BIAS ? &w : NULL, 1e-5f, &cs, &sn, (dit_rope_mode)c->a,
                              &o->err);
}

/* Elementwise on [B, S, D] with [B, D] vectors: add, mul, swiglu (STRIDED: a, b column slices of
 * [B*S, 2D + 16], y of [B*S, D + 8]), modulate (BIAS: shift), gated_add (a: 0 no gate, 1 gate,
 * 2 tanh gate; in place). */
static dit_status elementwise_op(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], S = c->s[1], D = c->s[2], R = B * S;
  bool st = c->flags & OPC_STRIDED, ga = c->op == OPC_gated_add;
  int64_t aw = st ? 2 * D + 16 : D, yw = st ? D + 8 : D;
  int ba = buf(o, K_ACT, R * aw, F_RAND, 4, ga), bb = in(o, K_ACT, st ? 0 : R * D, 1);
  int bp = in(o, K_ACT, B * D, 1), bq = in(o, K_ACT, B * D, 1), by = out(o, K_ACT, ga ? 0 : R * yw, !st);
  dit_tensor a, b, y, p = T(bp, B, D), q = T(bq, B, D);
  if (st) {
    a = view(o, ba, 8, 2, SH(R, D), SH(aw, 1)), b = view(o, ba, D + 16, 2, SH(R, D), SH(aw, 1));
    y = view(o, by, 8, 2, SH(R, D), SH(yw, 1));
  } else {
    a = T(ba, B, S, D), b = T(bb, B, S, D), y = T(by, B, S, D);
  }
  if (!o->run) return DIT_OK;
  switch (c->op) {
    case OPC_add: return dit_op_add(o->be, &y, &a, &b, &o->err);
    case OPC_mul: return dit_op_mul(o->be, &y, &a, &b, &o->err);
    case OPC_swiglu: return dit_op_swiglu(o->be, &y, &a, &b, &o->err);
    case OPC_modulate: return dit_op_modulate(o->be, &y, &a, &p, c->flags & OPC_BIAS ? &q : NULL, &o->err);
    default: return dit_op_gated_add(o->be, &a, &b, c->a ? &p : NULL, c->a == 2, &o->err);
  }
}

/* embedding: s = {V, D, N}, table in wdt, a = 1: I64 ids (else I32). */
static dit_status op_embedding(opc_io *o) {
  const opc_case *c = o->c;
  int64_t V = c->s[0], D = c->s[1], N = c->s[2];
  int bt = in(o, K_WGT, V * D, 1), bi = buf(o, c->a ? K_I64 : K_I32, N, F_IDS, (float)V, false);
  int by = out(o, K_F32, N * D, true);
  dit_tensor t = T(bt, V, D), ids = T(bi, N), y = T(by, N, D);
  RUN(dit_op_embedding(o->be, &y, &t, &ids, &o->err));
}

/* conv2d: s = {B, Ci, H, W, Co, k}, a = stride, b = pad; BIAS. */
static dit_status op_conv2d(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], Ci = c->s[1], H = c->s[2], W = c->s[3], Co = c->s[4], k = c->s[5];
  int64_t Ho = (H + 2 * c->b - k) / c->a + 1, Wo = (W + 2 * c->b - k) / c->a + 1;
  int bx = in(o, K_ACT, B * Ci * H * W, 1), bw = in(o, K_WGT, Co * Ci * k * k, 0.3f), bb = in(o, K_WGT, Co, 1);
  int by = out(o, K_ACT, B * Co * Ho * Wo, true);
  dit_tensor x = T(bx, B, Ci, H, W), w = T(bw, Co, Ci, k, k), b = T(bb, Co), y = T(by, B, Co, Ho, Wo);
  RUN(dit_op_conv2d(o->be, &y, &x, &w, c->flags & OPC_BIAS ? &b : NULL, c->a, c->b, &o->err));
}

/* conv3d: s = {B, Ci, T, H, W, Co}, a = kt * 10 + k (a kt x k x k kernel), b = pt * 10 + p (zero padding
 * of pt frames, p rows and p columns); BIAS. */
static dit_status op_conv3d(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], Ci = c->s[1], F = c->s[2], H = c->s[3], W = c->s[4], Co = c->s[5];
  int64_t kt = c->a / 10, k = c->a % 10, pt = c->b / 10, p = c->b % 10;
  int64_t To = F + 2 * pt - kt + 1, Ho = H + 2 * p - k + 1, Wo = W + 2 * p - k + 1;
  int bx = in(o, K_ACT, B * Ci * F * H * W, 1), bw = in(o, K_WGT, Co * Ci * kt * k * k, 0.3f), bb = in(o, K_WGT, Co, 1);
  int by = out(o, K_ACT, B * Co * To * Ho * Wo, true);
  dit_tensor x = T(bx, B, Ci, F, H, W), w = T(bw, Co, Ci, kt, k, k), b = T(bb, Co), y = T(by, B, Co, To, Ho, Wo);
  RUN(dit_op_conv3d(o->be, &y, &x, &w, c->flags & OPC_BIAS ? &b : NULL, (int)pt, (int)p, (int)p, &o->err));
}

/* pixel_norm: s = {B, C, H, W} (eps 1e-8); SILU; INPLACE. */
static dit_status op_pixel_norm(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], C = c->s[1], H = c->s[2], W = c->s[3], n = B * C * H * W;
  bool ip = c->flags & OPC_INPLACE;
  int bx = buf(o, K_ACT, n, F_RAND, 2, ip), by = ip ? bx : out(o, K_ACT, n, true);
  dit_tensor x = T(bx, B, C, H, W), y = T(by, B, C, H, W);
  RUN(dit_op_pixel_norm(o->be, &y, &x, 1e-8f, c->flags & OPC_SILU, &o->err));
}

/* upsample2x: s = {B, C, H, W}. */
static dit_status op_upsample2x(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], C = c->s[1], H = c->s[2], W = c->s[3];
  int bx = in(o, K_ACT, B * C * H * W, 1), by = out(o, K_ACT, B * C * H * W * 4, true);
  dit_tensor x = T(bx, B, C, H, W), y = T(by, B, C, 2 * H, 2 * W);
  RUN(dit_op_upsample2x(o->be, &y, &x, &o->err));
}

/* timestep_embedding: s = {N, dim, t scale}, f = {max_period, shift, scale}, a = flip. */
static dit_status op_timestep_embedding(opc_io *o) {
  const opc_case *c = o->c;
  int64_t N = c->s[0], dim = c->s[1];
  int bt = buf(o, K_F32, N, F_TIME, (float)c->s[2], false), by = out(o, K_F32, N * dim, true);
  dit_tensor t = T(bt, N), y = T(by, N, dim);
  RUN(dit_op_timestep_embedding(o->be, &y, &t, (int)dim, c->f[0], c->f[1], c->f[2], c->a, &o->err));
}

/* copy: s = {A, B, C, D}: src [A, B, C, D] (activation) read as the permuted view [A, C, B, D]
 * into dst of dtype wdt; STRIDED: dst the second half of the channels of a filled
 * [A, 2C, B, D] (concat). */
static dit_status op_copy(opc_io *o) {
  const opc_case *c = o->c;
  int64_t A = c->s[0], B = c->s[1], C = c->s[2], D = c->s[3];
  bool st = c->flags & OPC_STRIDED;
  int bs = in(o, K_ACT, A * B * C * D, 1), bd = out(o, K_WGT, (st ? 2 : 1) * A * B * C * D, !st);
  dit_tensor src = view(o, bs, 0, 4, SH(A, C, B, D), SH(B * C * D, D, C * D, 1));
  dit_tensor dst = st ? view(o, bd, C * B * D, 4, SH(A, C, B, D), SH(2 * C * B * D, B * D, D, 1)) : T(bd, A, C, B, D);
  RUN(dit_op_copy(o->be, &dst, &src, &o->err));
}

/* rms_norm_mod: s = {B, S, D}; BIAS: with scale [B, D]; INPLACE. */
static dit_status op_rms_norm_mod(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], S = c->s[1], D = c->s[2];
  bool ip = c->flags & OPC_INPLACE;
  int bx = buf(o, K_ACT, B * S * D, F_RAND, 3, ip), bw = in(o, K_WGT, D, 1), bs = in(o, K_ACT, B * D, 1);
  int by = ip ? bx : out(o, K_ACT, B * S * D, true);
  dit_tensor x = T(bx, B, S, D), y = T(by, B, S, D), w = T(bw, D), sc = T(bs, B, D);
  RUN(dit_op_rms_norm_mod(o->be, &y, &x, &w, c->flags & OPC_BIAS ? &sc : NULL, 1e-6f, &o->err));
}

/* residual_norm: s = {B, S, D}, a = gate mode (0 none, 1 gate, 2 tanh); OUT: with h. x and h are
 * compared (r is scratch). */
static dit_status op_residual_norm(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], S = c->s[1], D = c->s[2], n = B * S * D;
  bool h_on = c->flags & OPC_OUT;
  int bx = buf(o, K_ACT, n, F_RAND, 1, true), br = in(o, K_ACT, n, 4), bwr = in(o, K_WGT, D, 1);
  int bwh = in(o, K_WGT, D, 1), bg = in(o, K_ACT, B * D, 1), bs = in(o, K_ACT, B * D, 1);
  int bh = out(o, K_ACT, h_on ? n : 0, true);
  dit_tensor x = T(bx, B, S, D), r = T(br, B, S, D), wr = T(bwr, D), wh = T(bwh, D), g = T(bg, B, D);
  dit_tensor sc = T(bs, B, D), h = T(bh, B, S, D);
  RUN(dit_op_residual_norm(o->be, &x, &r, &wr, c->a ? &g : NULL, c->a == 2, h_on ? &h : NULL, &wh, &sc, 1e-6f,
                           &o->err));
}

/* residual_layer_norm: s = {B, S, D}, a = variant: 0 residual + gate + scale/shift, 1 residual +
 * scale, 2 residual only (no h), 3 norm + scale/shift, 4 plain norm, 5 in place (h = x) +
 * scale/shift. */
static dit_status op_residual_layer_norm(opc_io *o) {
  const opc_case *c = o->c;
  int64_t B = c->s[0], S = c->s[1], D = c->s[2], n = B * S * D;
  int k = c->a;
  bool res = k <= 2, gate = k == 0, h_on = k != 2 && k != 5, scale = k == 0 || k == 1 || k == 3 || k == 5;
  bool shift = k == 0 || k == 3 || k == 5;
  int bx = buf(o, K_ACT, n, F_RAND, 1, true), br = in(o, K_ACT, n, 1), bg = in(o, K_ACT, B * D, 1);
  int bs = in(o, K_ACT, B * D, 1), bf = in(o, K_ACT, B * D, 1), bh = out(o, K_ACT, h_on ? n : 0, true);
  dit_tensor x = T(bx, B, S, D), r = T(br, B, S, D), g = T(bg, B, D), sc = T(bs, B, D), sf = T(bf, B, D);
  dit_tensor h = T(bh, B, S, D);
  dit_tensor *hp = h_on ? &h : k == 5 ? &x : NULL;
  RUN(dit_op_residual_layer_norm(o->be, &x, res ? &r : NULL, gate ? &g : NULL, hp, scale ? &sc : NULL,
                                 shift ? &sf : NULL, 1e-6f, &o->err));
}

typedef dit_status (*opc_fn)(opc_io *o);
static opc_fn op_fn(opc_op op) {
  switch (op) {
    case OPC_linear: return op_linear;
    case OPC_rms_norm: case OPC_layer_norm: case OPC_softmax: case OPC_scale: case OPC_activation: return rows_op;
    case OPC_group_norm: return op_group_norm;
    case OPC_attention: return op_attention;
    case OPC_rope: case OPC_rms_norm_rope: return rope_op;
    case OPC_add: case OPC_mul: case OPC_swiglu: case OPC_modulate: case OPC_gated_add: return elementwise_op;
    case OPC_embedding: return op_embedding;
    case OPC_conv2d: return op_conv2d;
    case OPC_conv3d: return op_conv3d;
    case OPC_pixel_norm: return op_pixel_norm;
    case OPC_upsample2x: return op_upsample2x;
    case OPC_timestep_embedding: return op_timestep_embedding;
    case OPC_copy: return op_copy;
    case OPC_rms_norm_mod: return op_rms_norm_mod;
    case OPC_residual_norm: return op_residual_norm;
    case OPC_residual_layer_norm: return op_residual_layer_norm;
    default: return NULL;
  }
}

/* ---------------- the runner ---------------- */

static const char *op_names[] = {
#define OPC_NAME(name, params, args) #name,
    DIT_BACKEND_OPS(OPC_NAME)
#undef OPC_NAME
};

const char *opc_name(const opc_case *c, char *buf, size_t len) {
  int k = snprintf(buf, len, "%s [", op_names[c->op]);
  for (int i = 0; i < 6 && c->s[i] && k < (int)len; i++) k += snprintf(buf + k, len - (size_t)k, "%s%lld", i ? "," : "", (long long)c->s[i]);
  static const char *fl[] = {"bias", "mask", "causal", "strided", "empty-row", "shared", "silu", "out", "in-place"};
  if (k < (int)len) k += snprintf(buf + k, len - (size_t)k, "] a%s w%s", dit_dtype_name(c->adt), dit_dtype_name(c->wdt));
  for (int i = 0; i < 9 && k < (int)len; i++)
    if (c->flags & (1 << i)) k += snprintf(buf + k, len - (size_t)k, " %s", fl[i]);
  if (k < (int)len && (c->a || c->b)) snprintf(buf + k, len - (size_t)k, " a=%d b=%d", c->a, c->b);
  return buf;
}

/* Whether bf16 operands enter the device side (the policy in op_cases.h). */
static bool bf16_operands(const opc_case *c) {
  bool wop = c->op == OPC_linear || c->op == OPC_conv2d || c->op == OPC_conv3d || c->op == OPC_copy;
  return c->adt != DIT_F32 || c->op == OPC_attention || (wop && c->wdt != DIT_F32);
}

bool opc_pass(const opc_case *c, bool device_pair, double maxrel, double nmse, int64_t nonfinite) {
  if (nonfinite) return false;
  if (!device_pair) return maxrel <= c->tol;
  if (bf16_operands(c)) return nmse < 1e-4;
  return maxrel <= fmax(1e-5, c->tol);
}

bool opc_device_takes(const opc_case *c, void *ctx) {
  (void)ctx;
  if (c->op == OPC_attention) return c->s[5] % 8 == 0 || c->s[5] <= 32; /* small odd widths: the plain kernel */
  /* plain rope takes strided x on the CPU only (backend_ops.h); strided rope goes through rms_norm_rope */
  if (c->op == OPC_rope) return c->s[3] % 8 == 0 && !(c->flags & OPC_STRIDED);
  if (c->op == OPC_conv2d || c->op == OPC_embedding || c->op == OPC_copy) return c->wdt != DIT_F16;
  return true;
}

/* Deterministic host values of spec s (index i of the case), as floats. */
static void fill_values(const buf_spec *s, const opc_case *c, int i, uint64_t seed, float *v) {
  size_t n = (size_t)s->n;
  switch (s->fill) {
    case F_MASK: { /* item b: b.amp * (b + 1) padded keys at the end; EMPTY: the last item none */
      int64_t B = c->s[0], Sk = n / (size_t)(B ? B : 1);
      for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < Sk; j++)
          v[b * Sk + j] = (c->flags & OPC_EMPTY && b == B - 1) ? 0.0f : (float)(j < Sk - ((int64_t)s->amp * (b + 1)) % (Sk + 1));
      return;
    }
    case F_IDS:
      for (size_t j = 0; j < n; j++) v[j] = (float)((j * 7919 + 13) % (size_t)s->amp);
      return;
    case F_POISON:
      for (size_t j = 0; j < n; j++) v[j] = NAN;
      return;
    default:
      dt_fill_random(v, n, seed + 0x9e37ull * (uint64_t)(i + 1));
      for (size_t j = 0; j < n; j++) v[j] = s->fill == F_TIME ? fabsf(v[j]) * s->amp : v[j] * s->amp;
  }
}

static dit_dtype side_dtype(const buf_spec *s, const opc_case *c, bool host) {
  switch (s->kind) {
    case K_ACT: return host ? DIT_F32 : c->adt;
    case K_WGT: return c->wdt;
    case K_U8: return DIT_U8;
    case K_I32: return DIT_I32;
    case K_I64: return DIT_I64;
    default: return DIT_F32;
  }
}

/* Host bytes of v in dtype dt (values first rounded through `round`, the case's dtype). */
static void *encode(const float *v, size_t n, dit_dtype dt, dit_dtype round) {
  void *p = malloc(dit_dtype_size(dt) * (n ? n : 1));
  float *r = malloc(sizeof(float) * (n ? n : 1));
  memcpy(r, v, sizeof(float) * n);
  if (round == DIT_BF16 || round == DIT_F16) {
    void *t = malloc(2 * (n ? n : 1));
    dit_convert_from_f32(t, r, round, n);
    dit_convert_to_f32(r, t, round, n);
    free(t);
  }
  for (size_t j = 0; j < n; j++) {
    if (dt == DIT_U8) ((uint8_t *)p)[j] = (uint8_t)r[j];
    else if (dt == DIT_I32) ((int32_t *)p)[j] = (int32_t)r[j];
    else if (dt == DIT_I64) ((int64_t *)p)[j] = (int64_t)r[j];
  }
  if (dt == DIT_F32) memcpy(p, r, sizeof(float) * n);
  else if (dt == DIT_BF16 || dt == DIT_F16) dit_convert_from_f32(p, r, dt, n);
  free(r);
  return p;
}

typedef struct side {
  opc_io io;
  float *got[OPC_MAX_BUFS];
} side;

/* Allocates and fills the case's buffers on one backend, runs the op, downloads the outputs. */
static dit_status run_side(const opc_case *c, const opc_io *plan, float *const *vals, dit_backend *be, side *sd) {
  memset(sd, 0, sizeof *sd);
  opc_io *o = &sd->io;
  *o = *plan;
  o->be = be, o->run = true, o->n = 0;
  bool host = dit_backend_is_host(be);
  dit_status st = DIT_OK;
  for (int i = 0; i < plan->n && st == DIT_OK; i++) {
    const buf_spec *s = &plan->sp[i];
    o->dt[i] = side_dtype(s, c, host);
    size_t bytes = (size_t)s->n * dit_dtype_size(o->dt[i]);
    st = be->ops->alloc(be, bytes ? bytes : 16, &o->ptr[i], &o->err);
    if (st != DIT_OK) break;
    dit_dtype round = s->kind == K_ACT ? c->adt : s->kind == K_WGT ? c->wdt : DIT_F32;
    void *h = encode(vals[i], (size_t)s->n, o->dt[i], round);
    if (bytes) st = be->ops->upload(be, o->ptr[i], h, bytes, &o->err);
    free(h);
  }
  if (st == DIT_OK) st = op_fn(c->op)(o);
  if (st == DIT_OK) st = be->ops->sync(be, &o->err);
  for (int i = 0; i < plan->n && st == DIT_OK; i++) {
    if (!plan->sp[i].out) continue;
    size_t n = (size_t)plan->sp[i].n, bytes = n * dit_dtype_size(o->dt[i]);
    void *raw = malloc(bytes ? bytes : 1);
    sd->got[i] = malloc(sizeof(float) * (n ? n : 1));
    if (bytes) st = be->ops->download(be, raw, o->ptr[i], bytes, &o->err);
    dit_convert_to_f32(sd->got[i], raw, o->dt[i], n);
    free(raw);
  }
  return st;
}

static void free_side(side *sd, int n) {
  for (int i = 0; i < n; i++) {
    if (sd->io.ptr[i]) sd->io.be->ops->free(sd->io.be, sd->io.ptr[i]);
    free(sd->got[i]);
  }
}

int opc_run_case(const opc_case *c, dit_backend *test, dit_backend *ref, uint64_t seed, const char *label) {
  char name[200];
  opc_name(c, name, sizeof name);
  opc_io plan;
  memset(&plan, 0, sizeof plan);
  plan.c = c;
  op_fn(c->op)(&plan);
  float *vals[OPC_MAX_BUFS] = {0};
  for (int i = 0; i < plan.n; i++) {
    vals[i] = malloc(sizeof(float) * (size_t)(plan.sp[i].n ? plan.sp[i].n : 1));
    fill_values(&plan.sp[i], c, i, seed, vals[i]);
  }
  side t, r;
  dit_status st_t = run_side(c, &plan, vals, test, &t), st_r = run_side(c, &plan, vals, ref, &r);
  double se = 0, sr = 0, maxd = 0, maxr = 0;
  int64_t bad = 0;
  for (int i = 0; i < plan.n && st_t == DIT_OK && st_r == DIT_OK; i++) {
    if (!plan.sp[i].out) continue;
    for (int64_t j = 0; j < plan.sp[i].n; j++) {
      double a = t.got[i][j], b = r.got[i][j];
      if (!isfinite(a) || !isfinite(b)) {
        bad++;
        continue;
      }
      double d = fabs(a - b);
      se += d * d, sr += b * b;
      maxd = d > maxd ? d : maxd, maxr = fabs(b) > maxr ? fabs(b) : maxr;
    }
  }
  bool device_pair = dit_backend_is_host(test) != dit_backend_is_host(ref);
  double nmse = sr > 0 ? se / sr : se, rel = maxr > 0 ? maxd / maxr : maxd;
  bool pass = st_t == DIT_OK && st_r == DIT_OK && opc_pass(c, device_pair, rel, nmse, bad);
  char tol[48];
  if (device_pair && bf16_operands(c)) snprintf(tol, sizeof tol, "nmse<1e-4");
  else snprintf(tol, sizeof tol, "maxrel<=%.0e", device_pair ? fmax(1e-5, c->tol) : c->tol);
  if (st_t != DIT_OK || st_r != DIT_OK)
    printf("FAIL %s %s: %s\n", label, name, st_t != DIT_OK ? t.io.err.msg : r.io.err.msg);
  else
    printf("%-4s %s %-60s nmse=%.2e maxrel=%.2e nonfinite=%lld (%s)\n", pass ? "ok" : "FAIL", label, name, nmse, rel,
           (long long)bad, tol);
  free_side(&t, plan.n), free_side(&r, plan.n);
  for (int i = 0; i < plan.n; i++) free(vals[i]);
  return pass ? 0 : 1;
}

opc_result opc_run_all(dit_backend *test, dit_backend *ref, const char *label,
                       bool (*filter)(const opc_case *c, void *ctx), void *ctx) {
  opc_result res = {0, 0, 0};
  for (size_t i = 0; i < opc_n_cases; i++) {
    if (filter && !filter(&opc_cases[i], ctx)) {
      res.skipped++;
      continue;
    }
    int r = opc_run_case(&opc_cases[i], test, ref, 0x5eed0000ull + i, label);
    res.run++;
    res.failed += r != 0;
    CHECK_MSG(r == 0, "%s case %zu", label, i);
  }
  return res;
}

/* ---------------- the table ---------------- */

#define CASE(op_, adt_, wdt_, flags_, a_, b_, tol_, ...)                                                 \
  {.op = OPC_##op_, .s = {__VA_ARGS__}, .adt = DIT_##adt_, .wdt = DIT_##wdt_, .flags = flags_, .a = a_, \
   .b = b_, .tol = tol_}
#define TSTEP(flip, mp, shift, scale, ...) \
  {.op = OPC_timestep_embedding, .s = {__VA_ARGS__}, .adt = DIT_F32, .wdt = DIT_F32, .a = flip, .f = {mp, shift, scale}, .tol = 1e-6}
enum { B_ = OPC_BIAS, M_ = OPC_MASK, C_ = OPC_CAUSAL, S_ = OPC_STRIDED, E_ = OPC_EMPTY, SH_ = OPC_SHARED };
#define TOL 1e-5 /* fp32 sums in another order (SIMD lanes, blocked GEMM) */

const opc_case opc_cases[] = {
    /* linear: s = {L, M, K, N}, a = act: odd sizes, every weight dtype, 3-D x, small M (streaming);
     * fp32 64^3 cases resolve tanh-vs-erf GELU (~5e-4 apart) at 1e-5 (the cuBLASLt epilogue) */
    CASE(linear, F32, F32, B_, 0, 0, TOL, 1, 1, 1, 1), CASE(linear, F32, BF16, 0, 1, 0, TOL, 1, 5, 7, 3),
    CASE(linear, F32, F16, B_, 2, 0, TOL, 1, 37, 300, 45), CASE(linear, F32, BF16, B_, 3, 0, TOL, 2, 13, 257, 70),
    CASE(linear, F32, F32, 0, 0, 0, TOL, 1, 270, 520, 200), CASE(linear, F32, F32, B_, 0, 0, TOL, 1, 37, 70, 53),
    CASE(linear, F32, F32, B_, 3, 0, TOL, 1, 64, 64, 64), CASE(linear, F32, F32, 0, 2, 0, TOL, 1, 64, 64, 64),
    CASE(linear, F32, BF16, B_, 3, 0, TOL, 1, 129, 200, 96), CASE(linear, F32, BF16, 0, 2, 0, TOL, 1, 129, 200, 96),
    CASE(linear, F32, F16, B_, 0, 0, TOL, 1, 65, 136, 72), CASE(linear, BF16, BF16, B_, 1, 0, TOL, 1, 65, 136, 72),
    CASE(linear, F32, F32, B_, 1, 0, TOL, 1, 64, 64, 64), CASE(linear, F32, BF16, B_, 0, 0, TOL, 1, 129, 200, 96),
    CASE(linear, F32, BF16, 0, 3, 0, TOL, 1, 129, 200, 96), CASE(linear, F32, BF16, B_, 1, 0, TOL, 1, 129, 200, 96),
    CASE(linear, F32, BF16, B_, 0, 0, TOL, 1, 3, 2560, 3840), CASE(linear, F32, BF16, S_ | B_, 1, 0, TOL, 2, 9, 64, 40),
    CASE(linear, F32, F32, S_, 0, 0, TOL, 1, 33, 96, 64),
    /* tanh-GELU into a column slice (FLUX.1's single blocks write their MLP-in there) */
    CASE(linear, F32, BF16, S_ | B_, 3, 0, TOL, 2, 9, 64, 40), CASE(linear, BF16, BF16, S_ | B_, 3, 0, TOL, 1, 65, 136, 72),
    /* norms, softmax, activation, scale: s = {R, D} */
    CASE(rms_norm, F32, F32, B_, 0, 0, TOL, 7, 37), CASE(rms_norm, F32, BF16, B_, 0, 0, TOL, 33, 3840),
    CASE(rms_norm, F32, F16, OPC_INPLACE | B_, 0, 0, TOL, 17, 100), CASE(rms_norm, BF16, BF16, 0, 0, 0, TOL, 9, 1000),
    CASE(rms_norm, F32, F32, 0, 0, 0, TOL, 3, 16384), CASE(layer_norm, F32, F32, B_, 0, 0, TOL, 7, 37),
    CASE(layer_norm, F32, BF16, B_, 0, 0, TOL, 33, 3840), CASE(layer_norm, F32, F16, 0, 0, 0, TOL, 50, 40),
    CASE(layer_norm, BF16, BF16, OPC_INPLACE | B_, 0, 0, TOL, 77, 128), CASE(softmax, F32, F32, 0, 0, 0, TOL, 6, 37),
    CASE(softmax, F32, F32, OPC_INPLACE, 0, 0, TOL, 20, 256), CASE(softmax, BF16, F32, 0, 0, 0, TOL, 9, 1000),
    CASE(activation, F32, F32, 0, 1, 0, TOL, 6, 37), CASE(activation, F32, F32, 0, 2, 0, TOL, 100, 96),
    CASE(activation, F32, F32, OPC_INPLACE, 3, 0, TOL, 33, 40), CASE(activation, BF16, F32, 0, 1, 0, TOL, 66, 40),
    CASE(scale, F32, F32, 0, 0, 0, TOL, 100, 96), CASE(scale, BF16, F32, OPC_INPLACE, 0, 0, TOL, 66, 40),
    /* group_norm: s = {B, C, H, W}, a = groups */
    CASE(group_norm, F32, BF16, B_ | OPC_SILU, 3, 0, TOL, 2, 6, 5, 3), CASE(group_norm, F32, F32, 0, 3, 0, TOL, 2, 6, 5, 3),
    CASE(group_norm, F32, BF16, B_ | OPC_SILU, 32, 0, TOL, 2, 64, 9, 9), CASE(group_norm, F32, F32, B_, 32, 0, TOL, 1, 96, 13, 7),
    /* attention: s = {B, Sq, Sk, Hq, Hkv, D}, b = padded keys per item: GQA, masks, causal, strided */
    CASE(attention, F32, F32, 0, 0, 0, TOL, 1, 1, 1, 1, 1, 1), CASE(attention, F32, F32, M_, 0, 2, TOL, 2, 5, 7, 6, 2, 19),
    CASE(attention, F32, F32, C_, 0, 0, TOL, 2, 9, 9, 4, 4, 33), CASE(attention, F32, F32, M_ | C_, 0, 9, TOL, 1, 70, 70, 3, 1, 64),
    CASE(attention, F32, F32, E_ | M_, 0, 5, TOL, 2, 3, 130, 2, 1, 17), CASE(attention, F32, F32, 0, 0, 0, TOL, 1, 200, 270, 4, 2, 40),
    CASE(attention, F32, F32, M_ | C_, 0, 11, TOL, 2, 150, 300, 2, 1, 24), CASE(attention, F32, F32, C_, 0, 0, TOL, 1, 260, 260, 1, 1, 128),
    CASE(attention, F32, F32, M_, 0, 9, TOL, 2, 77, 77, 4, 2, 64), CASE(attention, BF16, F32, M_ | E_, 0, 9, TOL, 2, 77, 77, 4, 2, 64),
    CASE(attention, BF16, F32, M_, 0, 5, TOL, 2, 130, 61, 2, 1, 128), CASE(attention, BF16, F32, C_, 0, 0, TOL, 1, 70, 70, 4, 1, 80),
    CASE(attention, F32, F32, M_, 0, 3, TOL, 1, 65, 65, 2, 2, 256), CASE(attention, BF16, F32, S_, 0, 0, TOL, 2, 40, 40, 2, 2, 64),
    CASE(attention, F32, F32, S_ | M_, 0, 4, TOL, 1, 33, 33, 2, 2, 64), CASE(attention, BF16, F32, M_, 0, 9, TOL, 2, 77, 77, 2, 2, 320),
    CASE(attention, F32, F32, 0, 0, 0, TOL, 1, 5, 0, 1, 1, 512),
    /* rope: s = {B, S, H, D}, a = mode */
    CASE(rope, F32, F32, 0, 0, 0, TOL, 2, 5, 3, 10), CASE(rope, F32, F32, SH_, 1, 0, TOL, 2, 5, 3, 10),
    CASE(rope, F32, F32, 0, 1, 0, TOL, 2, 13, 3, 64), CASE(rope, F32, F32, SH_, 0, 0, TOL, 1, 29, 5, 128),
    CASE(rope, BF16, F32, 0, 0, 0, TOL, 2, 13, 3, 32), CASE(rope, F32, F32, S_, 0, 0, TOL, 2, 7, 3, 64),
    /* elementwise: s = {B, S, D} */
    CASE(add, F32, F32, 0, 0, 0, TOL, 2, 3, 37), CASE(add, BF16, F32, 0, 0, 0, TOL, 2, 33, 40),
    CASE(mul, F32, F32, 0, 0, 0, TOL, 2, 50, 96), CASE(mul, BF16, F32, 0, 0, 0, TOL, 2, 33, 40),
    CASE(swiglu, F32, F32, 0, 0, 0, TOL, 2, 3, 37), CASE(swiglu, BF16, F32, 0, 0, 0, TOL, 2, 33, 40),
    CASE(swiglu, F32, F32, S_, 0, 0, TOL, 2, 20, 64), CASE(swiglu, BF16, F32, S_, 0, 0, TOL, 1, 77, 128),
    CASE(modulate, F32, F32, 0, 0, 0, TOL, 2, 3, 37), CASE(modulate, F32, F32, B_, 0, 0, TOL, 2, 50, 96),
    CASE(modulate, BF16, F32, B_, 0, 0, TOL, 2, 33, 40), CASE(gated_add, F32, F32, 0, 0, 0, TOL, 2, 3, 37),
    CASE(gated_add, F32, F32, 0, 1, 0, TOL, 2, 50, 96), CASE(gated_add, F32, F32, 0, 2, 0, TOL, 2, 3, 37),
    CASE(gated_add, BF16, F32, 0, 2, 0, TOL, 2, 33, 40),
    /* data ops: bit-identical on every path */
    CASE(embedding, F32, F32, 0, 0, 0, 0, 11, 9, 6), CASE(embedding, F32, BF16, 0, 1, 0, 0, 1000, 64, 37),
    CASE(embedding, F32, F16, 0, 1, 0, 0, 500, 72, 20), CASE(upsample2x, F32, F32, 0, 0, 0, 0, 1, 2, 3, 5),
    CASE(upsample2x, F32, F32, 0, 0, 0, 0, 2, 3, 7, 5), CASE(copy, F32, F32, 0, 0, 0, 0, 2, 3, 7, 5),
    CASE(copy, F32, BF16, 0, 0, 0, 0, 2, 3, 4, 5), CASE(copy, F32, BF16, 0, 0, 0, 0, 2, 3, 7, 5), CASE(copy, F32, F16, S_, 0, 0, 0, 2, 3, 7, 5),
    CASE(copy, F32, F32, S_, 0, 0, 0, 2, 3, 7, 5), CASE(copy, BF16, BF16, 0, 0, 0, 0, 2, 3, 7, 8),
    TSTEP(1, 10000, 1, 1, 3, 256, 1), TSTEP(1, 10000, 1, 1, 5, 256, 1), TSTEP(0, 10000, 1, 1, 7, 33, 1), TSTEP(0, 10000, 0, 1000, 3, 33, 1), TSTEP(0, 100, 1, 1, 3, 8, 1000),
    TSTEP(1, 10000, 0.5f, 2, 3, 7, 1000), TSTEP(1, 10000, 1, 1, 8, 256, 1000),
    /* conv2d: s = {B, Ci, H, W, Co, k}, a = stride, b = pad */
    CASE(conv2d, F32, F32, B_, 1, 1, TOL, 2, 3, 9, 11, 5, 3), CASE(conv2d, F32, BF16, B_, 2, 0, TOL, 1, 4, 10, 7, 6, 3),
    CASE(conv2d, F32, F16, 0, 1, 0, TOL, 1, 5, 6, 6, 7, 1), CASE(conv2d, F32, BF16, B_, 1, 1, TOL, 1, 40, 12, 13, 33, 3),
    CASE(conv2d, F32, BF16, B_, 1, 1, TOL, 1, 300, 3, 130, 4, 3), CASE(conv2d, F32, F16, B_, 2, 1, TOL, 2, 300, 5, 250, 3, 3),
    CASE(conv2d, F32, F32, B_, 1, 1, TOL, 2, 8, 17, 17, 12, 3), CASE(conv2d, F32, BF16, 0, 1, 0, TOL, 1, 16, 9, 11, 8, 1),
    /* conv3d: s = {B, Ci, T, H, W, Co}, a = kt * 10 + k, b = pt * 10 + p: the LTX-2 VAE's 3x3x3 convs (frames
     * padded by the caller: pt 0), a 1x1x1 shortcut, zero padding in every dim, a kernel over one frame */
    CASE(conv3d, F32, F32, B_, 33, 1, TOL, 1, 4, 5, 6, 7, 5), CASE(conv3d, F32, BF16, B_, 33, 1, TOL, 2, 3, 4, 9, 5, 6),
    CASE(conv3d, F32, BF16, 0, 11, 0, TOL, 1, 16, 3, 5, 6, 8), CASE(conv3d, F32, F32, B_, 33, 11, TOL, 1, 5, 2, 4, 3, 7),
    CASE(conv3d, F32, BF16, B_, 13, 1, TOL, 1, 6, 3, 7, 5, 4), CASE(conv3d, F32, BF16, B_, 33, 1, TOL, 1, 64, 4, 12, 20, 48),
    CASE(conv3d, BF16, BF16, B_, 33, 1, TOL, 1, 32, 3, 8, 9, 16),
    /* pixel_norm: s = {B, C, H, W} */
    CASE(pixel_norm, F32, F32, 0, 0, 0, TOL, 2, 6, 5, 3), CASE(pixel_norm, F32, F32, OPC_SILU, 0, 0, TOL, 1, 128, 9, 33),
    CASE(pixel_norm, F32, F32, OPC_INPLACE | OPC_SILU, 0, 0, TOL, 1, 3, 1, 700), CASE(pixel_norm, BF16, F32, OPC_SILU, 0, 0, TOL, 1, 64, 4, 40),
    /* fused ops */
    CASE(rms_norm_rope, F32, BF16, B_, 0, 0, TOL, 2, 5, 3, 16), CASE(rms_norm_rope, F32, F32, SH_, 1, 0, TOL, 2, 5, 3, 16),
    CASE(rms_norm_rope, BF16, BF16, B_, 0, 0, TOL, 2, 13, 3, 128), CASE(rms_norm_rope, F32, BF16, B_ | SH_, 1, 0, TOL, 1, 29, 5, 128),
    CASE(rms_norm_rope, F32, F32, B_ | S_, 0, 0, TOL, 2, 7, 3, 64), CASE(rms_norm_rope, F32, F32, B_, 0, 0, TOL, 1, 5, 2, 10),
    CASE(rms_norm_mod, F32, F32, B_, 0, 0, TOL, 2, 3, 40), CASE(rms_norm_mod, F32, F32, 0, 0, 0, TOL, 2, 3, 40),
    CASE(rms_norm_mod, BF16, BF16, B_, 0, 0, TOL, 2, 33, 3840), CASE(rms_norm_mod, F32, F32, B_ | OPC_INPLACE, 0, 0, TOL, 2, 7, 1000),
    CASE(residual_norm, F32, F32, 0, 0, 0, TOL, 2, 3, 40), CASE(residual_norm, F32, F32, OPC_OUT, 1, 0, TOL, 2, 3, 40),
    CASE(residual_norm, F32, F32, OPC_OUT, 2, 0, TOL, 2, 3, 40), CASE(residual_norm, BF16, BF16, OPC_OUT, 2, 0, TOL, 2, 33, 3840),
    CASE(residual_norm, F32, BF16, 0, 1, 0, TOL, 1, 40, 3840), CASE(residual_norm, F32, F32, OPC_OUT, 1, 0, TOL, 2, 5, 37),
    CASE(residual_layer_norm, F32, F32, 0, 0, 0, TOL, 2, 5, 64), CASE(residual_layer_norm, F32, F32, 0, 1, 0, TOL, 2, 5, 64),
    CASE(residual_layer_norm, F32, F32, 0, 2, 0, TOL, 2, 5, 64), CASE(residual_layer_norm, F32, F32, 0, 3, 0, TOL, 1, 21, 3072),
    CASE(residual_layer_norm, F32, F32, 0, 4, 0, TOL, 3, 9, 1000), CASE(residual_layer_norm, BF16, F32, 0, 5, 0, TOL, 2, 37, 3072),
    CASE(residual_layer_norm, F32, F32, 0, 0, 0, TOL, 2, 3, 36),
};
const size_t opc_n_cases = sizeof opc_cases / sizeof opc_cases[0];
