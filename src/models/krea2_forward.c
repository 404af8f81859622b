/* Krea 2 transformer forward (see krea2.h), as a sequence of backend ops that reads like
 * diffusers' Krea2Transformer2DModel: the text path (Krea2TextFusion + txt_in) in
 * dit_krea2_encode_text, the rest per step in dit_krea2_forward. Activations are F32, or BF16
 * on a GPU (dit_krea2_set_act_dtype): the F32 inputs and outputs then go through copies. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "models/krea2_internal.h"
#include "models/rope_axes.h"

#define MAX_BATCH 4096
#define MAX_TOKENS ((int64_t)1 << 22)
#define TIME_MAX_PERIOD 10000.0f /* Krea2TimestepEmbedding: exp(-ln(1e4) * i / half) */
#define TIME_SCALE 1000.0f       /* ... of t * 1e3 */

/* The buffers one attention + MLP block needs, over R rows of width W (q/gate/out width W,
 * k/v width KV, MLP width F). */
typedef struct krea2_scratch {
  void *hn, *q, *k, *v, *g, *o, *ffa, *ffb;
} krea2_scratch;

/* Geometry of one block kind: heads, head size, widths. */
typedef struct krea2_shape {
  int64_t Hq, Hkv, hd, W, F;
} krea2_shape;

static dit_status take_scratch(dit_arena *ar, bool real, size_t es, size_t R, const krea2_shape *sh,
                               krea2_scratch *s, dit_error *err) {
  const size_t W = (size_t)sh->W, KV = (size_t)(sh->Hkv * sh->hd), F = (size_t)sh->F;
  DIT_ACT_TAKE(ar, real, s->hn, R * W * es);
  DIT_ACT_TAKE(ar, real, s->q, R * W * es);
  DIT_ACT_TAKE(ar, real, s->k, R * KV * es);
  DIT_ACT_TAKE(ar, real, s->v, R * KV * es);
  DIT_ACT_TAKE(ar, real, s->g, R * W * es);
  DIT_ACT_TAKE(ar, real, s->o, R * W * es);
  DIT_ACT_TAKE(ar, real, s->ffa, R * F * es);
  DIT_ACT_TAKE(ar, real, s->ffb, R * F * es);
  return DIT_OK;
}

/* A strided view over the activation space (shape and strides in elements). */
static dit_tensor view(const dit_krea2 *m, dit_dtype dt, void *p, int nd, const int64_t *shape,
                       const int64_t *stride) {
  dit_tensor t = dit_act_mk(&m->as, dt, p, nd, shape);
  for (int i = 0; i < nd; i++) t.stride[i] = stride[i];
  return t;
}

/* A contiguous tensor seen as [a, b] (same data, dtype and device). */
static dit_tensor as_2d(const dit_tensor *t, int64_t a, int64_t b) {
  dit_tensor r = dit_tensor_make(t->dtype, t->data, 2, (int64_t[]){a, b});
  r.device = t->device;
  return r;
}

/* Krea2Attention on hn [B, S, W] (normed input): q/k RMSNorm, RoPE when cos is not NULL,
 * grouped-query attention over the keys kmask lets through (NULL: all), the output gated by
 * sigmoid(to_gate(hn)) and projected: the result is left in s->hn. */
static dit_status attention(dit_krea2 *m, const krea2_attn_w *w, const krea2_shape *sh, int64_t B, int64_t S,
                            const dit_tensor *cos, const dit_tensor *sin, const dit_tensor *kmask,
                            const krea2_scratch *s, dit_error *err) {
  dit_backend *be = m->be;
  const dit_act_space *as = &m->as;
  const int64_t W = sh->W, KV = sh->Hkv * sh->hd;
  const float eps = m->cfg.eps;
  dit_tensor hn = dit_act_3d(as, s->hn, B, S, W), q = dit_act_3d(as, s->q, B, S, W), k = dit_act_3d(as, s->k, B, S, KV);
  dit_tensor v = dit_act_3d(as, s->v, B, S, KV), g = dit_act_3d(as, s->g, B, S, W), o = dit_act_3d(as, s->o, B, S, W);
  DIT_TRY(dit_op_linear(be, &q, &hn, &w->to_q, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &hn, &w->to_k, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, &hn, &w->to_v, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &g, &hn, &w->to_gate, NULL, DIT_ACT_SIGMOID, err));
  dit_tensor q4 = dit_act_4d(as, s->q, B, S, sh->Hq, sh->hd), k4 = dit_act_4d(as, s->k, B, S, sh->Hkv, sh->hd);
  dit_tensor v4 = dit_act_4d(as, s->v, B, S, sh->Hkv, sh->hd), o4 = dit_act_4d(as, s->o, B, S, sh->Hq, sh->hd);
  if (cos) {
    DIT_TRY(dit_op_rms_norm_rope(be, &q4, &w->norm_q, eps, cos, sin, DIT_ROPE_INTERLEAVED, err));
    DIT_TRY(dit_op_rms_norm_rope(be, &k4, &w->norm_k, eps, cos, sin, DIT_ROPE_INTERLEAVED, err));
  } else {
    dit_tensor qr = dit_act_2d(as, s->q, B * S * sh->Hq, sh->hd), kr = dit_act_2d(as, s->k, B * S * sh->Hkv, sh->hd);
    DIT_TRY(dit_op_rms_norm(be, &qr, &qr, &w->norm_q, eps, err));
    DIT_TRY(dit_op_rms_norm(be, &kr, &kr, &w->norm_k, eps, err));
  }
  DIT_TRY(dit_op_attention(be, &o4, &q4, &k4, &v4, kmask, 1.0f / sqrtf((float)sh->hd), false, err));
  DIT_TRY(dit_op_mul(be, &o, &o, &g, err));
  return dit_op_linear(be, &hn, &o, &w->to_out, NULL, DIT_ACT_NONE, err);
}

/* Krea2SwiGLU of in [R, W] into out (may be in). */
static dit_status swiglu(dit_krea2 *m, const krea2_block_w *b, const krea2_shape *sh, int64_t R, void *in, void *out,
                         const krea2_scratch *s, dit_error *err) {
  dit_backend *be = m->be;
  dit_tensor x = dit_act_2d(&m->as, in, R, sh->W), y = dit_act_2d(&m->as, out, R, sh->W);
  dit_tensor fa = dit_act_2d(&m->as, s->ffa, R, sh->F), fb = dit_act_2d(&m->as, s->ffb, R, sh->F);
  DIT_TRY(dit_op_linear(be, &fa, &x, &b->ff_gate, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &fb, &x, &b->ff_up, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_swiglu(be, &fa, &fa, &fb, err));
  return dit_op_linear(be, &y, &fa, &b->ff_down, NULL, DIT_ACT_NONE, err);
}

/* Krea2TextFusionBlock on h [B, S, W] in place: h += attn(norm1(h)); h += ff(norm2(h)). */
static dit_status fusion_block(dit_krea2 *m, const krea2_block_w *b, const krea2_shape *sh, int64_t B, int64_t S,
                               void *h, const dit_tensor *kmask, const krea2_scratch *s, dit_error *err) {
  dit_backend *be = m->be;
  const int64_t R = B * S;
  dit_tensor x = dit_act_2d(&m->as, h, R, sh->W), hn = dit_act_2d(&m->as, s->hn, R, sh->W);
  DIT_TRY(dit_op_rms_norm(be, &hn, &x, &b->norm1, m->cfg.eps, err));
  DIT_TRY(attention(m, &b->attn, sh, B, S, NULL, NULL, kmask, s, err));
  DIT_TRY(dit_op_add(be, &x, &x, &hn, err));
  DIT_TRY(dit_op_rms_norm(be, &hn, &x, &b->norm2, m->cfg.eps, err));
  DIT_TRY(swiglu(m, b, sh, R, s->hn, s->hn, s, err));
  return dit_op_add(be, &x, &x, &hn, err);
}

/* ---- text ------------------------------------------------------------------------- */

typedef struct krea2_text_acts {
  void *mask;   /* [B, L] U8 */
  void *h;      /* [B * L * T, td] the layerwise stream, then [B * L, td] the refiner's */
  void *perm;   /* [B * L, td, T] */
  void *fused;  /* [B * L, td] when the caller wants none */
  void *tn;     /* [B * L, td] txt_in's norm */
  void *t1;     /* [B * L, D] */
  void *t2;     /* [B * L, D] txt_in's output in the model's order */
  krea2_scratch s;
} krea2_text_acts;

static dit_status plan_text(dit_arena *ar, const dit_krea2_config *c, int64_t B, int64_t L, size_t es,
                            krea2_text_acts *o, dit_error *err) {
  const bool real = ar->base != NULL;
  const size_t R = (size_t)(B * L), T = (size_t)c->n_taps, td = (size_t)c->text_dim;
  memset(o, 0, sizeof *o);
  DIT_ACT_TAKE(ar, real, o->mask, (R + 255) / 256 * 256);
  DIT_ACT_TAKE(ar, real, o->h, R * T * td * es);
  DIT_ACT_TAKE(ar, real, o->perm, R * T * td * es);
  DIT_ACT_TAKE(ar, real, o->fused, R * td * es);
  DIT_ACT_TAKE(ar, real, o->tn, R * td * es);
  DIT_ACT_TAKE(ar, real, o->t1, R * (size_t)c->dim * es);
  DIT_ACT_TAKE(ar, real, o->t2, R * (size_t)c->dim * es);
  const krea2_shape sh = {c->text_heads, c->text_kv_heads, c->text_head_dim, c->text_dim, c->text_ffn_dim};
  return take_scratch(ar, real, es, R * T, &sh, &o->s, err);
}

static dit_status check_f32(const dit_krea2 *m, const dit_tensor *t, int nd, const int64_t *shape, const char *what,
                            dit_error *err) {
  bool ok = t && t->data && t->dtype == DIT_F32 && t->ndim == nd && dit_tensor_is_contiguous(t);
  for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == shape[i];
  if (!ok) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: %s must be a contiguous F32 tensor of the shape the "
                             "model expects", what);
  if (t->device != m->as.dev)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: %s must be in the model's backend memory", what);
  return DIT_OK;
}

/* The order the model runs a text in: each item's real tokens first (in the caller's order),
 * then its padding. Attention is the same under any order of the keys (the text carries no
 * position of its own in the fusion, and its RoPE rows travel with it in the blocks), and with
 * the padding last every key mask is a prefix of valid keys, which fused attention kernels
 * (cuDNN's padding mask) take. order[b * L + j] is the caller's index of item b's place j;
 * n_real[b] its real tokens. mask NULL: all real, the identity. */
typedef struct krea2_order {
  int64_t *order, *n_real;
  bool padded; /* some item has padding */
} krea2_order;

static dit_status order_make(const uint8_t *mask, int64_t B, int64_t L, krea2_order *o, dit_error *err) {
  o->order = malloc((size_t)(B * L) * sizeof *o->order);
  o->n_real = malloc((size_t)B * sizeof *o->n_real);
  o->padded = false;
  if (!o->order || !o->n_real) return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  for (int64_t b = 0; b < B; b++) {
    int64_t j = 0;
    for (int pass = 1; pass >= 0; pass--)
      for (int64_t i = 0; i < L; i++)
        if ((!mask || mask[b * L + i] != 0) == (pass == 1)) o->order[b * L + j++] = i;
    o->n_real[b] = 0;
    for (int64_t i = 0; i < L; i++) o->n_real[b] += !mask || mask[b * L + i] != 0;
    o->padded |= o->n_real[b] < L;
  }
  return DIT_OK;
}

static void order_free(krea2_order *o) { free(o->order), free(o->n_real); }

/* Moves item rows between the caller's order and the model's: dst row (place j) = src row
 * order[j] (or, to_caller, dst row order[j] = src row j), for each item b, as one copy per run
 * of consecutive indices. Rows are `width` elements, items `dst_item` / `src_item` elements
 * apart (row stride = width). */
static dit_status order_rows(dit_krea2 *m, const krea2_order *o, int64_t B, int64_t L, int64_t width,
                             dit_tensor dst, int64_t dst_item, dit_tensor src, int64_t src_item, bool to_caller,
                             dit_error *err) {
  const size_t des = dit_dtype_size(dst.dtype), ses = dit_dtype_size(src.dtype);
  for (int64_t b = 0; b < B; b++) {
    const int64_t *ord = o->order + b * L;
    for (int64_t j = 0; j < L;) {
      int64_t n = 1;
      while (j + n < L && ord[j + n] == ord[j] + n) n++;
      const int64_t dr = to_caller ? ord[j] : j, sr = to_caller ? j : ord[j];
      dit_tensor d = dst, s = src;
      d.data = (char *)dst.data + (size_t)(b * dst_item + dr * width) * des;
      s.data = (char *)src.data + (size_t)(b * src_item + sr * width) * ses;
      d.ndim = s.ndim = 2;
      d.shape[0] = s.shape[0] = n, d.shape[1] = s.shape[1] = width;
      d.stride[0] = s.stride[0] = width, d.stride[1] = s.stride[1] = 1;
      DIT_TRY(dit_op_copy(m->be, &d, &s, err));
      j += n;
    }
  }
  return DIT_OK;
}

/* A host key mask [B, lead + L]: lead valid keys, then each item's real text tokens, then its
 * padding (the model's order). */
static void prefix_mask(const krea2_order *o, int64_t B, int64_t lead, int64_t L, uint8_t *km) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < lead + L; i++) km[b * (lead + L) + i] = i < lead + o->n_real[b];
}

static dit_status text_ops(dit_krea2 *m, const dit_tensor *enc, const krea2_order *o, dit_tensor *fused,
                           dit_tensor *txt, const krea2_text_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_krea2_config *c = &m->cfg;
  const krea2_weights *w = &m->w;
  const dit_act_space *as = &m->as;
  const int64_t B = enc->shape[0], L = enc->shape[1], T = c->n_taps, td = c->text_dim, R = B * L;
  const krea2_shape sh = {c->text_heads, c->text_kv_heads, c->text_head_dim, td, c->text_ffn_dim};
  dit_tensor km = dit_act_mk(as, DIT_U8, a->mask, 2, (int64_t[]){B, L});
  if (o->padded) {
    uint8_t *hm = malloc((size_t)R);
    if (!hm) return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
    prefix_mask(o, B, 0, L, hm);
    dit_status s = be->ops->upload(be, a->mask, hm, (size_t)R, err);
    free(hm);
    DIT_TRY(s);
  }
  /* layerwise blocks: every token's T tapped states attend to each other */
  dit_tensor h = dit_act_2d(as, a->h, R, T * td), src = as_2d(enc, R, T * td);
  DIT_TRY(order_rows(m, o, B, L, T * td, h, L * T * td, src, L * T * td, false, err));
  for (int i = 0; i < c->n_layerwise; i++) DIT_TRY(fusion_block(m, &w->layerwise[i], &sh, R, T, a->h, NULL, &a->s, err));
  /* projector: Linear(T -> 1) over the tap axis */
  dit_tensor hv = view(m, as->adt, a->h, 3, (int64_t[]){R, td, T}, (int64_t[]){T * td, 1, td});
  dit_tensor pm = dit_act_3d(as, a->perm, R, td, T);
  DIT_TRY(dit_op_copy(be, &pm, &hv, err));
  dit_tensor pm2 = dit_act_2d(as, a->perm, R * td, T), f1 = dit_act_2d(as, a->h, R * td, 1);
  DIT_TRY(dit_op_linear(be, &f1, &pm2, &w->projector, NULL, DIT_ACT_NONE, err));
  /* refiner blocks over the tokens, padding masked out of the keys */
  for (int i = 0; i < c->n_refiner; i++)
    DIT_TRY(fusion_block(m, &w->refiner[i], &sh, B, L, a->h, o->padded ? &km : NULL, &a->s, err));
  dit_tensor fz = dit_act_2d(as, a->h, R, td);
  if (fused) DIT_TRY(order_rows(m, o, B, L, td, as_2d(fused, R, td), L * td, fz, L * td, true, err));
  /* txt_in: linear_2(gelu_tanh(linear_1(norm(fused)))), back in the caller's order */
  dit_tensor tn = dit_act_2d(as, a->tn, R, td), t1 = dit_act_2d(as, a->t1, R, c->dim);
  dit_tensor t2 = dit_act_2d(as, a->t2, R, c->dim);
  DIT_TRY(dit_op_rms_norm(be, &tn, &fz, &w->txt_norm, c->eps, err));
  DIT_TRY(dit_op_linear(be, &t1, &tn, &w->txt_1_w, &w->txt_1_b, DIT_ACT_GELU_TANH, err));
  DIT_TRY(dit_op_linear(be, &t2, &t1, &w->txt_2_w, &w->txt_2_b, DIT_ACT_NONE, err));
  return order_rows(m, o, B, L, c->dim, as_2d(txt, R, c->dim), L * c->dim, t2, L * c->dim, true, err);
}

dit_status dit_krea2_encode_text(dit_krea2 *m, const dit_tensor *enc, const uint8_t *mask, dit_tensor *fused,
                                 dit_tensor *txt, dit_error *err) {
  if (!m || !enc || !txt) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 encode_text: NULL argument");
  const dit_krea2_config *c = &m->cfg;
  if (enc->ndim != 4 || enc->shape[0] < 1 || enc->shape[0] > MAX_BATCH || enc->shape[1] < 1 ||
      enc->shape[1] > MAX_TOKENS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 encode_text: enc must be [B, L, %d, %d]", c->n_taps,
                      c->text_dim);
  const int64_t B = enc->shape[0], L = enc->shape[1];
  DIT_TRY(check_f32(m, enc, 4, (int64_t[]){B, L, c->n_taps, c->text_dim}, "the tapped text states", err));
  if (fused) DIT_TRY(check_f32(m, fused, 3, (int64_t[]){B, L, c->text_dim}, "the fused text output", err));
  DIT_TRY(check_f32(m, txt, 3, (int64_t[]){B, L, c->dim}, "the text output", err));
  dit_arena ar;
  krea2_text_acts a;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan_text(&ar, c, B, L, m->as.es, &a, err));
  bool grew = false;
  DIT_TRY(dit_act_space_fit(&m->as, m->be, &ar, 0, &grew, err));
  free(m->rope_key), m->rope_key = NULL; /* the text's buffers overlap where the forward keeps its tables */
  DIT_TRY(plan_text(&ar, c, B, L, m->as.es, &a, err));
  krea2_order o;
  dit_status s = order_make(mask, B, L, &o, err);
  if (s == DIT_OK) s = text_ops(m, enc, &o, fused, txt, &a, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  order_free(&o);
  return s;
}

/* ---- the blocks ------------------------------------------------------------------- */

typedef struct krea2_acts {
  void *tab;     /* the host tables' device copy: cos, sin [S, hd/2] F32, t [B] F32, mask [B, S] U8 */
  void *t_freq;  /* [B, E] */
  void *t_mid;   /* [B, D] */
  void *temb;    /* [B, D] */
  void *temb_g;  /* [B, D] gelu_tanh(temb) */
  void *mod;     /* [B, 6D] time_mod_proj */
  void *modc;    /* [6, B, D] its chunks */
  void *bmod;    /* [6, B, D] one block's modulation (chunks + the block's table) */
  void *x;       /* [B, S, D] residual stream */
  void *fin;     /* [B, Si, D] */
  void *x_in;    /* [B, Si, C] x in the activation dtype (activations not F32) */
  void *o_act;   /* [B, Si, C] the output before its F32 copy (likewise) */
  krea2_scratch s;
} krea2_acts;

typedef struct krea2_geom {
  int64_t B, L, Si, S;
} krea2_geom;

/* Host table layout: cos, sin, t, mask (bytes). */
/* Per item (the text's order differs between items): cos, sin [B, S, hd/2]; t [B]; the mask. */
static size_t host_bytes_of(const dit_krea2_config *c, const krea2_geom *g) {
  const size_t tab = (size_t)(g->B * g->S) * (size_t)(c->head_dim / 2);
  return (2 * tab + (size_t)g->B) * sizeof(float) + (size_t)(g->B * g->S);
}

static dit_status plan(dit_arena *ar, const dit_krea2_config *c, const krea2_geom *g, size_t host_bytes, size_t es,
                       krea2_acts *o, dit_error *err) {
  const bool real = ar->base != NULL;
  const size_t B = (size_t)g->B, D = (size_t)c->dim, R = B * (size_t)g->S;
  memset(o, 0, sizeof *o);
  DIT_ACT_TAKE(ar, real, o->tab, host_bytes);
  DIT_ACT_TAKE(ar, real, o->t_freq, B * (size_t)c->t_embed_dim * es);
  DIT_ACT_TAKE(ar, real, o->t_mid, B * D * es);
  DIT_ACT_TAKE(ar, real, o->temb, B * D * es);
  DIT_ACT_TAKE(ar, real, o->temb_g, B * D * es);
  DIT_ACT_TAKE(ar, real, o->mod, 6 * B * D * es);
  DIT_ACT_TAKE(ar, real, o->modc, 6 * B * D * es);
  DIT_ACT_TAKE(ar, real, o->bmod, 6 * B * D * es);
  DIT_ACT_TAKE(ar, real, o->x, R * D * es);
  DIT_ACT_TAKE(ar, real, o->fin, B * (size_t)g->Si * D * es);
  if (es != sizeof(float)) {
    DIT_ACT_TAKE(ar, real, o->x_in, B * (size_t)g->Si * (size_t)c->in_channels * es);
    DIT_ACT_TAKE(ar, real, o->o_act, B * (size_t)g->Si * (size_t)c->in_channels * es);
  }
  const krea2_shape sh = {c->n_heads, c->n_kv_heads, c->head_dim, c->dim, c->ffn_dim};
  return take_scratch(ar, real, es, R, &sh, &o->s, err);
}

/* dst [k, B, D] = table rows [k, D] repeated over the batch, plus add [k, B, D] (or, with
 * add_one, the same [B, D] for every row). */
static dit_status table_plus(dit_krea2 *m, void *dst, const dit_tensor *table, int64_t k, int64_t B, const void *add,
                             bool add_one, dit_error *err) {
  const int64_t D = m->cfg.dim;
  dit_tensor d = dit_act_3d(&m->as, dst, k, B, D);
  dit_tensor src = view(m, table->dtype, table->data, 3, (int64_t[]){k, B, D}, (int64_t[]){D, 0, 1});
  src.device = table->device;
  DIT_TRY(dit_op_copy(m->be, &d, &src, err));
  for (int64_t i = 0; i < (add_one ? k : 1); i++) {
    const int64_t n = add_one ? B * D : k * B * D;
    dit_tensor di = dit_act_2d(&m->as, dit_act_el(&m->as, dst, i * B * D), 1, n);
    dit_tensor ai = dit_act_2d(&m->as, (void *)add, 1, n);
    DIT_TRY(dit_op_add(m->be, &di, &di, &ai, err));
  }
  return DIT_OK;
}

/* Krea2TimestepEmbedding and time_mod_proj: temb, and the shared modulation's six chunks. */
static dit_status time_embed(dit_krea2 *m, const krea2_geom *g, const dit_tensor *t_dev, const krea2_acts *a,
                             dit_error *err) {
  dit_backend *be = m->be;
  const dit_krea2_config *c = &m->cfg;
  const krea2_weights *w = &m->w;
  const dit_act_space *as = &m->as;
  const int64_t B = g->B, D = c->dim;
  dit_tensor tf = dit_act_2d(as, a->t_freq, B, c->t_embed_dim), tm = dit_act_2d(as, a->t_mid, B, D);
  dit_tensor te = dit_act_2d(as, a->temb, B, D), tg = dit_act_2d(as, a->temb_g, B, D);
  dit_tensor md = dit_act_2d(as, a->mod, B, 6 * D);
  DIT_TRY(dit_op_timestep_embedding(be, &tf, t_dev, c->t_embed_dim, TIME_MAX_PERIOD, 0.0f, TIME_SCALE, true, err));
  DIT_TRY(dit_op_linear(be, &tm, &tf, &w->time_1_w, &w->time_1_b, DIT_ACT_GELU_TANH, err));
  DIT_TRY(dit_op_linear(be, &te, &tm, &w->time_2_w, &w->time_2_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_activation(be, &tg, &te, DIT_ACT_GELU_TANH, err));
  DIT_TRY(dit_op_linear(be, &md, &tg, &w->mod_w, &w->mod_b, DIT_ACT_NONE, err));
  dit_tensor mc = dit_act_3d(as, a->modc, 6, B, D);
  dit_tensor mv = view(m, as->adt, a->mod, 3, (int64_t[]){6, B, D}, (int64_t[]){D, 6 * D, 1});
  return dit_op_copy(be, &mc, &mv, err);
}

/* Krea2TransformerBlock on a->x [B, S, D] in place. Each norm with its modulation, and the
 * attention's gated residual with the second, go through residual_rms_mod (one pass where the
 * backend fuses it; on the CPU the sequence rms_norm, modulate, gated_add). */
static dit_status block(dit_krea2 *m, const krea2_block_w *b, const krea2_geom *g, const dit_tensor *cos,
                        const dit_tensor *sin, const dit_tensor *kmask, const krea2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_krea2_config *c = &m->cfg;
  const dit_act_space *as = &m->as;
  const int64_t B = g->B, S = g->S, D = c->dim;
  const krea2_shape sh = {c->n_heads, c->n_kv_heads, c->head_dim, D, c->ffn_dim};
  DIT_TRY(table_plus(m, a->bmod, &b->table, 6, B, a->modc, false, err));
  dit_tensor ch[6]; /* prescale, preshift, pregate, postscale, postshift, postgate */
  for (int k = 0; k < 6; k++) ch[k] = dit_act_2d(as, dit_act_el(as, a->bmod, k * B * D), B, D);
  dit_tensor x = dit_act_3d(as, a->x, B, S, D), hn = dit_act_3d(as, a->s.hn, B, S, D);
  dit_tensor h2 = dit_act_3d(as, a->s.o, B, S, D); /* the MLP's input: o is free after the attention */
  /* hn = (1 + prescale) * norm1(x) + preshift */
  DIT_TRY(dit_op_residual_rms_mod(be, &x, NULL, NULL, &hn, &b->norm1, &ch[0], &ch[1], c->eps, err));
  DIT_TRY(attention(m, &b->attn, &sh, B, S, cos, sin, kmask, &a->s, err));
  /* x += pregate * attn; h2 = (1 + postscale) * norm2(x) + postshift */
  DIT_TRY(dit_op_residual_rms_mod(be, &x, &hn, &ch[2], &h2, &b->norm2, &ch[3], &ch[4], c->eps, err));
  DIT_TRY(swiglu(m, b, &sh, B * S, a->s.o, a->s.hn, &a->s, err));
  return dit_op_gated_add(be, &x, &hn, &ch[5], false, err);
}

static dit_status forward_ops(dit_krea2 *m, const krea2_geom *g, const dit_tensor *xin, const dit_tensor *txt,
                              const krea2_order *o, dit_tensor *out, const krea2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_krea2_config *c = &m->cfg;
  const krea2_weights *w = &m->w;
  const dit_act_space *as = &m->as;
  const int64_t B = g->B, L = g->L, Si = g->Si, S = g->S, D = c->dim, half = c->head_dim / 2;
  float *tab = a->tab;
  dit_tensor cos = dit_act_mk(as, DIT_F32, tab, 3, (int64_t[]){B, S, half});
  dit_tensor sin = dit_act_mk(as, DIT_F32, tab + B * S * half, 3, (int64_t[]){B, S, half});
  dit_tensor t_dev = dit_act_mk(as, DIT_F32, tab + 2 * B * S * half, 1, (int64_t[]){B});
  dit_tensor km = dit_act_mk(as, DIT_U8, tab + 2 * B * S * half + B, 2, (int64_t[]){B, S});
  DIT_TRY(time_embed(m, g, &t_dev, a, err));
  /* the stream, in the model's order [image, text (real tokens, then padding)]: img_in(x), then txt */
  dit_tensor xt = dit_act_2d(as, dit_act_el(as, a->x, Si * D), B * S, D);
  DIT_TRY(order_rows(m, o, B, L, D, xt, S * D, as_2d(txt, B * L, D), L * D, false, err));
  dit_tensor ie = dit_act_3d(as, a->fin, B, Si, D), xs = *xin;
  if (a->x_in) {
    xs = dit_act_3d(as, a->x_in, B, Si, c->in_channels);
    DIT_TRY(dit_op_copy(be, &xs, xin, err));
  }
  DIT_TRY(dit_op_linear(be, &ie, &xs, &w->img_in_w, &w->img_in_b, DIT_ACT_NONE, err));
  dit_tensor xi = view(m, as->adt, a->x, 3, (int64_t[]){B, Si, D}, (int64_t[]){S * D, D, 1});
  DIT_TRY(dit_op_copy(be, &xi, &ie, err));
  for (int i = 0; i < c->n_layers; i++) {
    dit_status s = block(m, &w->blocks[i], g, &cos, &sin, o->padded ? &km : NULL, a, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "krea2 block %d", i);
      return s;
    }
  }
  /* final layer on the image tokens: (1 + scale) * norm(x) + shift, scale / shift = temb + table */
  DIT_TRY(dit_op_copy(be, &ie, &xi, err));
  DIT_TRY(table_plus(m, a->bmod, &w->final_table, 2, B, a->temb, true, err));
  dit_tensor sc = dit_act_2d(as, a->bmod, B, D), sf = dit_act_2d(as, dit_act_el(as, a->bmod, B * D), B, D);
  DIT_TRY(dit_op_residual_rms_mod(be, &ie, NULL, NULL, &ie, &w->final_norm, &sc, &sf, c->eps, err));
  if (!a->o_act) return dit_op_linear(be, out, &ie, &w->final_w, &w->final_b, DIT_ACT_NONE, err);
  dit_tensor oa = dit_act_3d(as, a->o_act, B, Si, c->in_channels);
  DIT_TRY(dit_op_linear(be, &oa, &ie, &w->final_w, &w->final_b, DIT_ACT_NONE, err));
  return dit_op_copy(be, out, &oa, err);
}

/* One forward's ops after its tables are uploaded (replayable: they touch only the model's
 * buffers, the weights and the call's tensors). */
typedef struct krea2_call {
  dit_krea2 *m;
  const krea2_geom *g;
  const dit_tensor *x, *txt;
  const krea2_order *o;
  dit_tensor *out;
  const krea2_acts *a;
} krea2_call;

static dit_status call_ops(void *ctx, dit_error *err) {
  krea2_call *k = ctx;
  return forward_ops(k->m, k->g, k->x, k->txt, k->o, k->out, k->a, err);
}

/* What the recorded ops depend on besides memory contents, then the mask [B * L] (0 / 1). */
typedef struct krea2_key {
  int64_t B, L, Si;
  dit_dtype adt;
  void *act, *tab, *x, *txt, *out;
  uint8_t mask[];
} krea2_key;

/* The host tables in the model's order, per item: RoPE of each row's ids (the image's, then
 * the text's as ordered), t, and the key mask (the image and the real text a prefix); then
 * their upload to tab. The RoPE tables depend only on the geometry, the ids and the text's
 * order: when those are what the tables already in tab were made from (the steps of one
 * image), only t and the mask are made and uploaded. */
static dit_status upload_tables(dit_krea2 *m, const krea2_geom *g, const krea2_order *o, const float *t,
                                const float *pos, void *tab, size_t host_bytes, dit_error *err) {
  const dit_krea2_config *c = &m->cfg;
  const int64_t B = g->B, L = g->L, Si = g->Si, S = g->S, half = c->head_dim / 2;
  float *h = m->as.host;
  const size_t rope_bytes = (size_t)(2 * B * S * half) * sizeof(float);
  memcpy(h + 2 * B * S * half, t, (size_t)B * sizeof(float));
  prefix_mask(o, B, Si, L, (uint8_t *)(h + 2 * B * S * half + B));
  const size_t np = (size_t)(3 * S) * sizeof(float), no = (size_t)(B * L) * sizeof(int64_t);
  const size_t kb = 4 * sizeof(int64_t) + np + no;
  char *key = malloc(kb);
  if (!key) return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  const int64_t head[4] = {B, L, Si, (int64_t)(intptr_t)tab};
  memcpy(key, head, sizeof head);
  memcpy(key + sizeof head, pos, np);
  memcpy(key + sizeof head + np, o->order, no);
  if (m->rope_key && m->rope_key_bytes == kb && !memcmp(m->rope_key, key, kb)) {
    free(key);
    return m->be->ops->upload(m->be, (char *)tab + rope_bytes, (char *)h + rope_bytes, host_bytes - rope_bytes, err);
  }
  free(m->rope_key);
  m->rope_key = NULL;
  float *ids = malloc((size_t)(S * 3) * sizeof *ids);
  if (!ids) {
    free(key);
    return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  }
  for (int64_t b = 0; b < B; b++) {
    memcpy(ids, pos + 3 * L, (size_t)(Si * 3) * sizeof *ids);
    for (int64_t j = 0; j < L; j++) memcpy(ids + 3 * (Si + j), pos + 3 * o->order[b * L + j], 3 * sizeof *ids);
    dit_rope_axes_fill(DIT_KREA2_N_AXES, c->axes_dims, c->rope_theta, ids, S, h + b * S * half,
                       h + (B + b) * S * half);
  }
  free(ids);
  dit_status s = m->be->ops->upload(m->be, tab, h, host_bytes, err);
  if (s == DIT_OK) m->rope_key = key, m->rope_key_bytes = kb;
  else free(key);
  return s;
}

dit_status dit_krea2_forward(dit_krea2 *m, const dit_tensor *x, const dit_tensor *txt, const uint8_t *mask,
                             const float *t, const float *pos, dit_tensor *out, dit_error *err) {
  if (!m || !x || !txt || !t || !pos || !out)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 forward: NULL argument");
  const dit_krea2_config *c = &m->cfg;
  if (x->ndim != 3 || txt->ndim != 3 || x->shape[0] < 1 || x->shape[0] > MAX_BATCH || x->shape[1] < 1 ||
      x->shape[1] > MAX_TOKENS || txt->shape[1] < 1 || txt->shape[1] > MAX_TOKENS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 forward: x must be [B, Si, %d] and txt [B, L, %d]",
                      c->in_channels, c->dim);
  krea2_geom g = {x->shape[0], txt->shape[1], x->shape[1], 0};
  g.S = g.L + g.Si;
  DIT_TRY(check_f32(m, x, 3, (int64_t[]){g.B, g.Si, c->in_channels}, "x", err));
  DIT_TRY(check_f32(m, txt, 3, (int64_t[]){g.B, g.L, c->dim}, "txt", err));
  DIT_TRY(check_f32(m, out, 3, (int64_t[]){g.B, g.Si, c->in_channels}, "out", err));
  for (int64_t i = 0; i < g.B; i++)
    if (!isfinite(t[i])) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 forward: t[%lld] is not finite", (long long)i);
  for (int64_t i = 0; i < 3 * g.S; i++)
    if (!isfinite(pos[i]) || fabsf(pos[i]) > 1e7f)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 forward: position id %lld is not a finite value below 1e7",
                        (long long)i);
  const size_t host_bytes = host_bytes_of(c, &g);
  dit_arena ar;
  krea2_acts a;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, c, &g, host_bytes, m->as.es, &a, err));
  bool grew = false;
  DIT_TRY(dit_act_space_fit(&m->as, m->be, &ar, host_bytes, &grew, err));
  if (grew) free(m->rope_key), m->rope_key = NULL; /* a new buffer: its tables are gone */
  DIT_TRY(plan(&ar, c, &g, host_bytes, m->as.es, &a, err));
  krea2_order o;
  DIT_TRY(order_make(mask, g.B, g.L, &o, err));
  dit_status s = upload_tables(m, &g, &o, t, pos, a.tab, host_bytes, err);
  /* the ops depend on the geometry, the buffers and the text's order (the mask): the key */
  const size_t nm = (size_t)(g.B * g.L);
  krea2_call k = {m, &g, x, txt, &o, out, &a};
  krea2_key *key = s == DIT_OK ? calloc(1, sizeof *key + nm) : NULL;
  if (s == DIT_OK && !key) s = dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  if (s == DIT_OK) {
    *key = (krea2_key){g.B, g.L, g.Si, m->as.adt, m->as.act, a.tab, x->data, txt->data, out->data};
    for (size_t i = 0; mask && i < nm; i++) key->mask[i] = mask[i] != 0;
    if (!mask) memset(key->mask, 1, nm);
    s = dit_replay_run(&m->replay, m->be, key, sizeof *key + nm, call_ops, &k, err);
  }
  free(key);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  order_free(&o);
  return s;
}

double dit_krea2_flops(const dit_krea2_config *c, double Si, double L) {
  const double S = Si + L, D = c->dim;
  const double Dkv = (double)c->n_kv_heads * c->head_dim, F = c->ffn_dim, T = c->n_taps, td = c->text_dim;
  const double tkv = (double)c->text_kv_heads * c->text_head_dim, tf = c->text_ffn_dim;
  const double blk = 2 * (3 * D * D + 2 * D * Dkv + 3 * D * F) * S + 4 * D * S * S;
  const double tblk = 2 * (3 * td * td + 2 * td * tkv + 3 * td * tf);
  return c->n_layers * blk + c->n_layerwise * (tblk * L * T + 4 * td * T * T * L) +
         c->n_refiner * (tblk * L + 4 * td * L * L) + 2 * (td * D + D * D) * L;
}

dit_status dit_krea2_cost(const dit_krea2 *m, int64_t B, int64_t L, int64_t Si, dit_cost *out, dit_error *err) {
  if (!m || !out || B < 1 || B > MAX_BATCH || L < 1 || L > MAX_TOKENS || Si < 1 || Si > MAX_TOKENS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 cost: bad arguments");
  const dit_krea2_config *c = &m->cfg;
  const krea2_geom g = {B, L, Si, L + Si};
  const size_t host_bytes = host_bytes_of(c, &g);
  dit_arena text, fwd;
  krea2_text_acts ta;
  krea2_acts a;
  dit_arena_init_measure(&text);
  dit_arena_init_measure(&fwd);
  DIT_TRY(plan_text(&text, c, B, L, m->as.es, &ta, err));
  DIT_TRY(plan(&fwd, c, &g, host_bytes, m->as.es, &a, err));
  /* the text fusion and the forward share the model's buffer, grown to the larger */
  out->act_bytes = (text.peak > fwd.peak ? text.peak : fwd.peak) + (host_bytes + 63) / 64 * 64;
  out->flops = (double)B * dit_krea2_flops(c, (double)Si, (double)L);
  return DIT_OK;
}

dit_status dit_krea2_set_act_dtype(dit_krea2 *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: no model");
  bool changed = false;
  DIT_TRY(dit_act_space_set_dtype(&m->as, m->be, dt, "krea2", &changed, err));
  if (changed) { /* graphs and tables of the dropped buffer */
    dit_replay_clear(&m->replay, m->be);
    free(m->rope_key), m->rope_key = NULL;
  }
  return DIT_OK;
}
