/* Z-Image transformer forward: the diffusers ZImageTransformer2DModel.forward in basic
 * mode, as a sequence of backend ops. Flow: timestep embedding -> patchify + x embed ->
 * noise refiner -> caption embed -> context refiner -> unified [image, caption] stream
 * -> main layers -> final layer -> unpatchify. Every token stream is padded to a
 * multiple of 32 with a learned pad token (those tokens take part in attention); the
 * batch is padded to its longest item and the padding is masked out of the keys. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/zimage_internal.h"

#define MAX_BATCH 4096
#define MAX_ELEMS ((int64_t)1 << 40) /* largest activation tensor accepted, in elements */
#define QK_NORM_EPS 1e-5f            /* diffusers builds the q/k RMSNorms with eps 1e-5 */
#define FINAL_NORM_EPS 1e-6f
#define TIME_MAX_PERIOD 10000.0f

/* Activations of one call: one arena over the model's buffer. */
typedef struct zimage_acts {
  void *tab;                 /* device copy of the host tables */
  void *stage;               /* device copies of host inputs and outputs (staged calls) */
  /* in the activation dtype (F32, or BF16 on a GPU): */
  void *t_freq;              /* [n, t_freq_dim] */
  void *t_mid;               /* [n, t_mid_dim] */
  void *adaln;               /* [n, A] */
  void *adaln_silu;          /* [n, A] */
  void *mod;                 /* [n, 4D] one block's modulation */
  void *mod4;                /* 4 x [n, D]: scale_msa, gate_msa, scale_mlp, gate_mlp */
  void *fscale;              /* [n, D] final-layer scale (before the 1 +) */
  void *patches;             /* [max n_img, P] */
  void *capn;                /* [max L, cap_feat_dim] */
  void *xs, *cs, *us;        /* [n, Sx, D], [n, Sc, D], [n, Su, D] */
  void *hn;                  /* [n * S_max, D] block scratch */
  void *qkv;                 /* [n * S_max, 3D]: q, k, v as column slices (stacked weights), or
                                three [n * S_max, D] buffers q, k, v one after the other */
  void *q, *k, *v;           /* the three buffers (q also holds the blocks' projection outputs) */
  void *ff_a, *ff_b;         /* [n * S_max, Fd] */
  void *fo;                  /* [n, Su, P] */
} zimage_acts;

/* One token stream going through refiner or main layers. */
typedef struct zimage_stream {
  void *x;                   /* [n, S, D], updated in place */
  int64_t S;
  dit_tensor cos, sin;       /* [n, S, hd/2] */
  dit_tensor mask;           /* [n, S] U8 */
  bool masked;               /* lengths differ: pass the mask */
} zimage_stream;

/* A strided view (shape and strides in elements). */
static dit_tensor view(const dit_zimage *m, dit_dtype dt, void *p, int nd, const int64_t *shape,
                       const int64_t *stride) {
  dit_tensor t = dit_act_mk(&m->as, dt, p, nd, shape);
  for (int i = 0; i < nd; i++) t.stride[i] = stride[i];
  return t;
}

/* Carves every activation out of a (measuring or real) arena. */
static dit_status plan(dit_arena *ar, const dit_zimage_config *c, const zimage_geom *g, size_t host_bytes,
                       size_t stage_bytes, size_t es, zimage_acts *o, dit_error *err) {
  const bool real = ar->base != NULL;
  const size_t n = (size_t)g->n, D = (size_t)c->dim, A = (size_t)c->adaln_dim, P = (size_t)c->patch_dim;
  const size_t R = n * (size_t)g->S_max;
  size_t max_img = 0, max_cap = 0;
  for (int i = 0; i < g->n; i++) {
    if ((size_t)g->items[i].n_img > max_img) max_img = (size_t)g->items[i].n_img;
    if ((size_t)g->items[i].cap_raw > max_cap) max_cap = (size_t)g->items[i].cap_raw;
  }
  memset(o, 0, sizeof *o);
#define TAKE(field, count) DIT_ACT_TAKE(ar, real, o->field, (count) * es)
  DIT_ACT_TAKE(ar, real, o->tab, host_bytes);
  if (stage_bytes) DIT_ACT_TAKE(ar, real, o->stage, stage_bytes);
  TAKE(t_freq, n * (size_t)c->t_freq_dim);
  TAKE(t_mid, n * (size_t)c->t_mid_dim);
  TAKE(adaln, n * A);
  TAKE(adaln_silu, n * A);
  TAKE(mod, n * 4 * D);
  TAKE(mod4, n * 4 * D);
  TAKE(fscale, n * D);
  TAKE(patches, max_img * P);
  TAKE(capn, max_cap * (size_t)c->cap_feat_dim);
  TAKE(xs, n * (size_t)g->Sx * D);
  TAKE(cs, n * (size_t)g->Sc * D);
  TAKE(us, n * (size_t)g->Su * D);
  TAKE(hn, R * D);
  TAKE(qkv, R * 3 * D);
  o->q = o->qkv;
  o->k = o->qkv ? (char *)o->qkv + R * D * es : NULL;
  o->v = o->qkv ? (char *)o->qkv + 2 * R * D * es : NULL;
  TAKE(ff_a, R * (size_t)c->ffn_dim);
  TAKE(ff_b, R * (size_t)c->ffn_dim);
  TAKE(fo, n * (size_t)g->Su * P);
#undef TAKE
  return DIT_OK;
}

/* dst rows [rows, D] (F32, contiguous) = `row` ([1, D] or [D], any float dtype) repeated. */
static dit_status fill_rows(const dit_zimage *m, void *dst, int64_t rows, int64_t D, const dit_tensor *row,
                            dit_error *err) {
  if (rows <= 0) return DIT_OK;
  dit_tensor d = dit_act_2d(&m->as, dst, rows, D);
  dit_tensor s = view(m, row->dtype, row->data, 2, (int64_t[]){rows, D}, (int64_t[]){0, 1});
  s.device = row->device;
  return dit_op_copy(m->be, &d, &s, err);
}

/* t_embedder (sinusoid of t * t_scale, MLP) and the final layer's scale, once per call. */
static dit_status time_embed(dit_zimage *m, const zimage_geom *g, const dit_tensor *t_dev, zimage_acts *a,
                             dit_error *err) {
  dit_backend *be = m->be;
  const dit_zimage_config *c = &m->cfg;
  const zimage_weights *w = &m->w;
  const int64_t n = g->n;
  dit_tensor tf = dit_act_2d(&m->as, a->t_freq, n, c->t_freq_dim), tm = dit_act_2d(&m->as, a->t_mid, n, c->t_mid_dim);
  dit_tensor ad = dit_act_2d(&m->as, a->adaln, n, c->adaln_dim), ads = dit_act_2d(&m->as, a->adaln_silu, n, c->adaln_dim);
  dit_tensor fs = dit_act_2d(&m->as, a->fscale, n, c->dim);
  DIT_TRY(dit_op_timestep_embedding(be, &tf, t_dev, c->t_freq_dim, TIME_MAX_PERIOD, 0.0f, 1.0f, true, err));
  DIT_TRY(dit_op_linear(be, &tm, &tf, &w->t_embedder_mlp_0_w, &w->t_embedder_mlp_0_b, DIT_ACT_SILU, err));
  DIT_TRY(dit_op_linear(be, &ad, &tm, &w->t_embedder_mlp_2_w, &w->t_embedder_mlp_2_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_activation(be, &ads, &ad, DIT_ACT_SILU, err));
  return dit_op_linear(be, &fs, &ads, &w->final_adaLN_modulation_1_w, &w->final_adaLN_modulation_1_b, DIT_ACT_NONE,
                       err);
}

/* A block's adaLN modulation: mod4[k] = chunk k of Linear(adaln) ([n, D] each). */
static dit_status modulation(dit_zimage *m, const zimage_block_w *b, int64_t n, zimage_acts *a, dit_tensor sm[4],
                             dit_error *err) {
  dit_backend *be = m->be;
  const int64_t D = m->cfg.dim;
  dit_tensor ad = dit_act_2d(&m->as, a->adaln, n, m->cfg.adaln_dim), mod = dit_act_2d(&m->as, a->mod, n, 4 * D);
  DIT_TRY(dit_op_linear(be, &mod, &ad, &b->adaLN_modulation_0_w, &b->adaLN_modulation_0_b, DIT_ACT_NONE, err));
  if (n == 1) { /* a chunk of one row is already contiguous: no copies */
    for (int k = 0; k < 4; k++) sm[k] = dit_act_2d(&m->as, dit_act_el(&m->as, a->mod, k * D), 1, D);
    return DIT_OK;
  }
  for (int k = 0; k < 4; k++) {
    sm[k] = dit_act_2d(&m->as, dit_act_el(&m->as, a->mod4, k * n * D), n, D);
    dit_tensor src = view(m, m->as.adt, dit_act_el(&m->as, a->mod, k * D), 2, (int64_t[]){n, D}, (int64_t[]){4 * D, 1});
    DIT_TRY(dit_op_copy(be, &sm[k], &src, err));
  }
  return DIT_OK;
}

/* Self-attention of the stream on a->hn (normed, modulated input); the projected output
 * is left in a->q as [n, S, D]. */
static dit_status attention(dit_zimage *m, const zimage_block_w *b, const zimage_stream *st, int64_t n,
                            zimage_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_zimage_config *c = &m->cfg;
  const int64_t S = st->S, D = c->dim, H = c->n_heads, hd = c->head_dim;
  dit_tensor hn = dit_act_3d(&m->as, a->hn, n, S, D), q4, k4, v4, o4 = dit_act_4d(&m->as, a->hn, n, S, H, hd);
  if (m->stack_qkv && b->attention_qkv.data) { /* one GEMM; heads read in place as column slices */
    dit_tensor qkv = dit_act_3d(&m->as, a->qkv, n, S, 3 * D);
    DIT_TRY(dit_op_linear(be, &qkv, &hn, &b->attention_qkv, NULL, DIT_ACT_NONE, err));
    const int64_t sh[4] = {n, S, H, hd}, st[4] = {S * 3 * D, 3 * D, hd, 1};
    q4 = view(m, m->as.adt, a->qkv, 4, sh, st);
    k4 = view(m, m->as.adt, dit_act_el(&m->as, a->qkv, D), 4, sh, st);
    v4 = view(m, m->as.adt, dit_act_el(&m->as, a->qkv, 2 * D), 4, sh, st);
  } else {
    dit_tensor q = dit_act_3d(&m->as, a->q, n, S, D), k = dit_act_3d(&m->as, a->k, n, S, D), v = dit_act_3d(&m->as, a->v, n, S, D);
    DIT_TRY(dit_op_linear(be, &q, &hn, &b->attention_to_q, NULL, DIT_ACT_NONE, err));
    DIT_TRY(dit_op_linear(be, &k, &hn, &b->attention_to_k, NULL, DIT_ACT_NONE, err));
    DIT_TRY(dit_op_linear(be, &v, &hn, &b->attention_to_v, NULL, DIT_ACT_NONE, err));
    q4 = dit_act_4d(&m->as, a->q, n, S, H, hd), k4 = dit_act_4d(&m->as, a->k, n, S, H, hd), v4 = dit_act_4d(&m->as, a->v, n, S, H, hd);
  }
  if (c->qk_norm) { /* per-head RMSNorm then RoPE, one pass over q and one over k where fused */
    DIT_TRY(dit_op_rms_norm_rope(be, &q4, &b->attention_norm_q, QK_NORM_EPS, &st->cos, &st->sin,
                                 DIT_ROPE_INTERLEAVED, err));
    DIT_TRY(dit_op_rms_norm_rope(be, &k4, &b->attention_norm_k, QK_NORM_EPS, &st->cos, &st->sin,
                                 DIT_ROPE_INTERLEAVED, err));
  } else {
    DIT_TRY(dit_op_rope(be, &q4, &st->cos, &st->sin, DIT_ROPE_INTERLEAVED, err));
    DIT_TRY(dit_op_rope(be, &k4, &st->cos, &st->sin, DIT_ROPE_INTERLEAVED, err));
  }
  DIT_TRY(dit_op_attention(be, &o4, &q4, &k4, &v4, st->masked ? &st->mask : NULL, 1.0f / sqrtf((float)hd), false,
                           err));
  dit_tensor att = dit_act_3d(&m->as, a->hn, n, S, D), o = dit_act_3d(&m->as, a->q, n, S, D);
  return dit_op_linear(be, &o, &att, &b->attention_to_out_0, NULL, DIT_ACT_NONE, err);
}

/* One ZImageTransformerBlock on the stream, in place. Modulated blocks scale the normed
 * inputs by 1 + scale and gate the residuals by tanh(gate). The norms around each residual
 * go through the fused ops (rms_norm_mod, residual_norm: on the CPU exactly the unfused
 * reference sequence; on a GPU one pass each). */
static dit_status block(dit_zimage *m, const zimage_block_w *b, const zimage_stream *st, int64_t n, zimage_acts *a,
                        dit_error *err) {
  dit_backend *be = m->be;
  const dit_zimage_config *c = &m->cfg;
  const int64_t S = st->S, D = c->dim, Fd = c->ffn_dim;
  const float eps = c->norm_eps;
  dit_tensor sm[4];
  const bool md = b->modulation;
  if (md) DIT_TRY(modulation(m, b, n, a, sm, err));
  dit_tensor x = dit_act_3d(&m->as, st->x, n, S, D), hn = dit_act_3d(&m->as, a->hn, n, S, D), o = dit_act_3d(&m->as, a->q, n, S, D);
  /* attention: hn = norm1(x) * (1 + scale_msa); x += tanh(gate_msa) * norm2(attn(hn)) */
  DIT_TRY(dit_op_rms_norm_mod(be, &hn, &x, &b->attention_norm1, md ? &sm[0] : NULL, eps, err));
  DIT_TRY(attention(m, b, st, n, a, err));
  /* ... and, same pass, the feed-forward input hn = ffn_norm1(x) * (1 + scale_mlp) */
  DIT_TRY(dit_op_residual_norm(be, &x, &o, &b->attention_norm2, md ? &sm[1] : NULL, true, &hn, &b->ffn_norm1,
                               md ? &sm[2] : NULL, eps, err));
  /* feed-forward: w2(silu(w1 h) * w3 h); x += tanh(gate_mlp) * ffn_norm2(ff) */
  dit_tensor fa = dit_act_3d(&m->as, a->ff_a, n, S, Fd), fb = dit_act_3d(&m->as, a->ff_b, n, S, Fd);
  DIT_TRY(dit_op_linear(be, &fa, &hn, &b->feed_forward_w1, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &fb, &hn, &b->feed_forward_w3, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_swiglu(be, &fa, &fa, &fb, err));
  DIT_TRY(dit_op_linear(be, &o, &fa, &b->feed_forward_w2, NULL, DIT_ACT_NONE, err));
  return dit_op_residual_norm(be, &x, &o, &b->ffn_norm2, md ? &sm[3] : NULL, true, NULL, NULL, NULL, eps, err);
}

/* Patchify + x_embedder into xs; image pad rows get x_pad_token, batch padding zeros. */
static dit_status embed_image(dit_zimage *m, const zimage_geom *g, const dit_tensor *x, const dit_tensor *zeros,
                              zimage_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_zimage_config *c = &m->cfg;
  const int64_t D = c->dim, P = c->patch_dim, p = c->patch_size, pf = c->f_patch_size;
  for (int i = 0; i < g->n; i++) {
    const zimage_item *it = &g->items[i];
    const int64_t C = it->C, H = it->H, W = it->W, F = it->F;
    /* [C, F, H, W] as [Ft, Ht, Wt, pF, pH, pW, C] -> rows of (pf, ph, pw, c) */
    int64_t shape[7] = {it->Ft, it->Ht, it->Wt, pf, p, p, C};
    int64_t sstr[7] = {pf * H * W, p * W, p, H * W, W, 1, F * H * W};
    dit_tensor src = view(m, DIT_F32, x[i].data, 7, shape, sstr);
    src.device = x[i].device;
    dit_tensor dst = dit_act_mk(&m->as, m->as.adt, a->patches, 7, shape);
    DIT_TRY(dit_op_copy(be, &dst, &src, err));
    void *rows = dit_act_el(&m->as, a->xs, i * g->Sx * D);
    dit_tensor pin = dit_act_2d(&m->as, a->patches, it->n_img, P), y = dit_act_2d(&m->as, rows, it->n_img, D);
    DIT_TRY(dit_op_linear(be, &y, &pin, &m->w.x_embedder_w, &m->w.x_embedder_b, DIT_ACT_NONE, err));
    DIT_TRY(fill_rows(m, dit_act_el(&m->as, rows, it->n_img * D), it->x_len - it->n_img, D, &m->w.x_pad_token, err));
    DIT_TRY(fill_rows(m, dit_act_el(&m->as, rows, it->x_len * D), g->Sx - it->x_len, D, zeros, err));
  }
  return DIT_OK;
}

/* cap_embedder (RMSNorm, Linear) into cs; caption pad rows get cap_pad_token. */
static dit_status embed_caption(dit_zimage *m, const zimage_geom *g, const dit_tensor *cap, const dit_tensor *zeros,
                                zimage_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_zimage_config *c = &m->cfg;
  const int64_t D = c->dim;
  for (int i = 0; i < g->n; i++) {
    const zimage_item *it = &g->items[i];
    dit_tensor cn = dit_act_2d(&m->as, a->capn, it->cap_raw, c->cap_feat_dim);
    if (m->as.adt == cap[i].dtype) {
      DIT_TRY(dit_op_rms_norm(be, &cn, &cap[i], &m->w.cap_embedder_0_w, c->norm_eps, err));
    } else { /* the norm's operands share a dtype: convert the F32 features first */
      DIT_TRY(dit_op_copy(be, &cn, &cap[i], err));
      DIT_TRY(dit_op_rms_norm(be, &cn, &cn, &m->w.cap_embedder_0_w, c->norm_eps, err));
    }
    void *rows = dit_act_el(&m->as, a->cs, i * g->Sc * D);
    dit_tensor y = dit_act_2d(&m->as, rows, it->cap_raw, D);
    DIT_TRY(dit_op_linear(be, &y, &cn, &m->w.cap_embedder_1_w, &m->w.cap_embedder_1_b, DIT_ACT_NONE, err));
    DIT_TRY(fill_rows(m, dit_act_el(&m->as, rows, it->cap_raw * D), it->cap_len - it->cap_raw, D, &m->w.cap_pad_token, err));
    DIT_TRY(fill_rows(m, dit_act_el(&m->as, rows, it->cap_len * D), g->Sc - it->cap_len, D, zeros, err));
  }
  return DIT_OK;
}

/* us[i] = [xs[i][:x_len], cs[i][:cap_len], zeros]. */
static dit_status unify(dit_zimage *m, const zimage_geom *g, const dit_tensor *zeros, zimage_acts *a,
                        dit_error *err) {
  dit_backend *be = m->be;
  const int64_t D = m->cfg.dim;
  for (int i = 0; i < g->n; i++) {
    const zimage_item *it = &g->items[i];
    void *u = dit_act_el(&m->as, a->us, i * g->Su * D);
    dit_tensor ux = dit_act_2d(&m->as, u, it->x_len, D), sx = dit_act_2d(&m->as, dit_act_el(&m->as, a->xs, i * g->Sx * D), it->x_len, D);
    dit_tensor uc = dit_act_2d(&m->as, dit_act_el(&m->as, u, it->x_len * D), it->cap_len, D);
    dit_tensor sc = dit_act_2d(&m->as, dit_act_el(&m->as, a->cs, i * g->Sc * D), it->cap_len, D);
    DIT_TRY(dit_op_copy(be, &ux, &sx, err));
    DIT_TRY(dit_op_copy(be, &uc, &sc, err));
    int64_t used = it->x_len + it->cap_len;
    DIT_TRY(fill_rows(m, dit_act_el(&m->as, u, used * D), g->Su - used, D, zeros, err));
  }
  return DIT_OK;
}

/* Final layer (LayerNorm without affine, * (1 + scale), Linear) and unpatchify into out. */
static dit_status final_layer(dit_zimage *m, const zimage_geom *g, zimage_acts *a, dit_tensor *out, dit_error *err) {
  dit_backend *be = m->be;
  const dit_zimage_config *c = &m->cfg;
  const int64_t n = g->n, D = c->dim, P = c->patch_dim, p = c->patch_size, pf = c->f_patch_size;
  dit_tensor us = dit_act_3d(&m->as, a->us, n, g->Su, D), hn = dit_act_3d(&m->as, a->hn, n, g->Su, D), fs = dit_act_2d(&m->as, a->fscale, n, D);
  dit_tensor fo = dit_act_3d(&m->as, a->fo, n, g->Su, P);
  DIT_TRY(dit_op_layer_norm(be, &hn, &us, NULL, NULL, FINAL_NORM_EPS, err));
  DIT_TRY(dit_op_modulate(be, &hn, &hn, &fs, NULL, err));
  DIT_TRY(dit_op_linear(be, &fo, &hn, &m->w.final_linear_w, &m->w.final_linear_b, DIT_ACT_NONE, err));
  for (int i = 0; i < g->n; i++) {
    const zimage_item *it = &g->items[i];
    const int64_t C = it->C, Ht = it->Ht, Wt = it->Wt;
    /* rows (f, h, w) x cols (pf, ph, pw, c) -> [C, Ft, pF, Ht, pH, Wt, pW] = [C, F, H, W] */
    int64_t shape[7] = {C, it->Ft, pf, Ht, p, Wt, p};
    int64_t sstr[7] = {1, Ht * Wt * P, p * p * C, Wt * P, p * C, P, C};
    dit_tensor src = view(m, m->as.adt, dit_act_el(&m->as, a->fo, i * g->Su * P), 7, shape, sstr);
    dit_tensor dst = dit_act_mk(&m->as, DIT_F32, out[i].data, 7, shape);
    DIT_TRY(dit_op_copy(be, &dst, &src, err));
  }
  return DIT_OK;
}

static bool is_f32_contig(const dit_tensor *t, int ndim) {
  return t->dtype == DIT_F32 && t->ndim == ndim && t->data && dit_tensor_is_contiguous(t);
}

/* Checks one item's tensors and fills its geometry. */
static dit_status check_item(const dit_zimage_config *c, int i, const dit_tensor *x, const dit_tensor *cap,
                             const dit_tensor *out, float t, dit_device dev, zimage_item *it, dit_error *err) {
  char b1[128], b2[128];
  if (x->device != dev || cap->device != dev || out->device != dev)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: x[%d], cap[%d] and out[%d] must all be in %s memory "
                      "(like x[0])", i, i, i, dev == DIT_DEV_CPU ? "host" : "GPU");
  if (!is_f32_contig(x, 4) || x->shape[0] != c->in_channels)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: x[%d] must be contiguous F32 [%d, F, H, W], got %s %s",
                      i, c->in_channels, dit_dtype_name(x->dtype), dit_shape_str(x->shape, x->ndim, b1, sizeof b1));
  if (!is_f32_contig(cap, 2) || cap->shape[1] != c->cap_feat_dim || cap->shape[0] < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "zimage forward: cap[%d] must be contiguous F32 [L >= 1, %d], got %s %s", i, c->cap_feat_dim,
                      dit_dtype_name(cap->dtype), dit_shape_str(cap->shape, cap->ndim, b1, sizeof b1));
  it->C = x->shape[0], it->F = x->shape[1], it->H = x->shape[2], it->W = x->shape[3];
  const int p = c->patch_size, pf = c->f_patch_size;
  if (it->F < 1 || it->H < 1 || it->W < 1 || it->F % pf || it->H % p || it->W % p)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "zimage forward: x[%d] is %s: F must be a multiple of %d, H and W multiples of %d", i,
                      dit_shape_str(x->shape, 4, b1, sizeof b1), pf, p);
  it->Ft = it->F / pf, it->Ht = it->H / p, it->Wt = it->W / p;
  if (!is_f32_contig(out, 4) || !dit_tensor_has_shape(out, 4, x->shape))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: out[%d] must be contiguous F32 %s, got %s %s", i,
                      dit_shape_str(x->shape, 4, b1, sizeof b1), dit_dtype_name(out->dtype),
                      dit_shape_str(out->shape, out->ndim, b2, sizeof b2));
  if (!isfinite(t)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: t[%d] is not finite", i);
  it->cap_raw = cap->shape[0];
  const int64_t q = DIT_ZIMAGE_SEQ_MULTI, lim = (int64_t)1 << 30;
  if (it->Ft > lim || it->Ht > lim || it->Wt > lim || it->cap_raw > lim)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: item %d is too large", i);
  it->cap_len = (it->cap_raw + q - 1) / q * q;
  /* position ids index per-axis tables of axes_lens entries */
  if (it->cap_len + it->Ft >= c->axes_lens[0] || it->Ht > c->axes_lens[1] || it->Wt > c->axes_lens[2])
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "zimage forward: item %d needs positions (%lld, %lld, %lld) beyond axes_lens (%d, %d, %d) "
                      "(caption of %lld tokens, latent %s)",
                      i, (long long)(it->cap_len + it->Ft), (long long)(it->Ht - 1), (long long)(it->Wt - 1),
                      c->axes_lens[0], c->axes_lens[1], c->axes_lens[2], (long long)it->cap_raw,
                      dit_shape_str(x->shape, 4, b1, sizeof b1));
  it->n_img = it->Ft * it->Ht * it->Wt;
  it->x_len = (it->n_img + q - 1) / q * q;
  return DIT_OK;
}

/* Validates the call and computes its geometry (g->items is malloc'd: free it). */
static dit_status make_geom(const dit_zimage_config *c, int n, const dit_tensor *x, const dit_tensor *cap,
                            const float *t, const dit_tensor *out, dit_device dev, zimage_geom *g, dit_error *err) {
  memset(g, 0, sizeof *g);
  if (n < 1 || n > MAX_BATCH)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: batch of %d items (1..%d)", n, MAX_BATCH);
  if (!x || !cap || !t || !out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: NULL argument");
  g->items = calloc((size_t)n, sizeof *g->items);
  if (!g->items) return dit_errorf(err, DIT_ERR_NOMEM, "zimage forward: out of memory");
  g->n = n;
  for (int i = 0; i < n; i++) {
    zimage_item *it = &g->items[i];
    DIT_TRY(check_item(c, i, &x[i], &cap[i], &out[i], t[i], dev, it, err));
    if (i > 0) {
      g->x_ragged |= it->x_len != g->items[0].x_len;
      g->c_ragged |= it->cap_len != g->items[0].cap_len;
      g->u_ragged |= it->x_len + it->cap_len != g->items[0].x_len + g->items[0].cap_len;
    }
    if (it->x_len > g->Sx) g->Sx = it->x_len;
    if (it->cap_len > g->Sc) g->Sc = it->cap_len;
    if (it->x_len + it->cap_len > g->Su) g->Su = it->x_len + it->cap_len;
  }
  g->S_max = g->Su > g->Sx ? g->Su : g->Sx;
  if (g->Sc > g->S_max) g->S_max = g->Sc;
  int64_t widest = c->ffn_dim > c->dim ? c->ffn_dim : c->dim;
  if (c->patch_dim > widest) widest = c->patch_dim;
  if ((double)n * (double)g->S_max * (double)widest > (double)MAX_ELEMS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: %d items of up to %lld tokens are too large", n,
                      (long long)g->S_max);
  return DIT_OK;
}

/* Makes the device tables right for g and t: everything when the geometry changed (or
 * the buffers did), else only the timesteps. */
static dit_status upload_tables(dit_zimage *m, const zimage_geom *g, const float *t, const zimage_acts *a,
                                size_t host_bytes, zimage_host_tables *h, dit_error *err) {
  const dit_zimage_config *c = &m->cfg;
  zimage_table_layout(c, g, m->as.host, h);
  zimage_set_timesteps(c, g->n, t, h);
  bool same = m->tables_ok && m->tab_n == g->n && !memcmp(m->tab_items, g->items, (size_t)g->n * sizeof *g->items);
  if (same) {
    size_t off = (size_t)((char *)h->t_scaled - (char *)m->as.host);
    return m->be->ops->upload(m->be, (char *)a->tab + off, h->t_scaled, (size_t)g->n * sizeof(float), err);
  }
  m->tables_ok = false;
  zimage_fill_tables(c, g, h);
  DIT_TRY(m->be->ops->upload(m->be, a->tab, m->as.host, host_bytes, err));
  zimage_item *items = realloc(m->tab_items, (size_t)g->n * sizeof *items);
  if (!items) return DIT_OK; /* correct, just not cached */
  memcpy(items, g->items, (size_t)g->n * sizeof *items);
  m->tab_items = items;
  m->tab_n = g->n;
  m->tables_ok = true;
  return DIT_OK;
}

/* Device views of the uploaded tables. */
static void table_views(const dit_zimage *m, const zimage_geom *g, const zimage_host_tables *h, const zimage_acts *a,
                        zimage_stream st[3], dit_tensor *t_dev, dit_tensor *zeros) {
  const int64_t n = g->n, half = m->cfg.head_dim / 2;
#define DEV(ptr) ((void *)((char *)a->tab + ((const char *)(ptr) - (const char *)m->as.host)))
  const int64_t S[3] = {g->Sx, g->Sc, g->Su};
  float *cs[3] = {h->x_cos, h->c_cos, h->u_cos}, *sn[3] = {h->x_sin, h->c_sin, h->u_sin};
  uint8_t *mks[3] = {h->x_mask, h->c_mask, h->u_mask};
  const bool rag[3] = {g->x_ragged, g->c_ragged, g->u_ragged};
  void *xs[3] = {a->xs, a->cs, a->us};
  for (int s = 0; s < 3; s++) {
    st[s].x = xs[s];
    st[s].S = S[s];
    st[s].cos = dit_act_mk(&m->as, DIT_F32, DEV(cs[s]), 3, (int64_t[]){n, S[s], half});
    st[s].sin = dit_act_mk(&m->as, DIT_F32, DEV(sn[s]), 3, (int64_t[]){n, S[s], half});
    st[s].mask = dit_act_mk(&m->as, DIT_U8, DEV(mks[s]), 2, (int64_t[]){n, S[s]});
    st[s].masked = rag[s];
  }
  *t_dev = dit_act_mk(&m->as, DIT_F32, DEV(h->t_scaled), 1, (int64_t[]){n});
  *zeros = dit_act_mk(&m->as, DIT_F32, DEV(h->zeros), 2, (int64_t[]){1, m->cfg.dim});
#undef DEV
}

/* Device-side views for a staged call: item i's x, cap and out at 256-byte aligned
 * places of a->stage (stage == NULL: only the total is computed). */
static size_t stage_layout(const zimage_geom *g, const dit_tensor *x, const dit_tensor *cap, void *stage,
                           dit_device dev, dit_tensor *xd, dit_tensor *cd, dit_tensor *od) {
  size_t off = 0;
  for (int i = 0; i < g->n; i++) {
    const dit_tensor *src[3] = {&x[i], &cap[i], &x[i]};
    dit_tensor *dst[3] = {xd ? &xd[i] : NULL, cd ? &cd[i] : NULL, od ? &od[i] : NULL};
    for (int k = 0; k < 3; k++) {
      if (stage) {
        *dst[k] = dit_tensor_make(DIT_F32, (char *)stage + off, src[k]->ndim, src[k]->shape);
        dst[k]->device = dev;
      }
      off += (dit_tensor_nbytes(src[k]) + 255) / 256 * 256;
    }
  }
  return off;
}

static dit_status layers(dit_zimage *m, const zimage_geom *g, const dit_tensor *x, const dit_tensor *cap,
                         const float *t, zimage_acts *a, size_t host_bytes, dit_tensor *out, dit_error *err);

/* Plans the call's buffers; a staged call (host tensors, device model) first uploads x and
 * cap into the model's buffer and finally downloads the outputs (waiting for the GPU). */
static dit_status run(dit_zimage *m, const zimage_geom *g, const dit_tensor *x, const dit_tensor *cap, const float *t,
                      dit_tensor *out, bool staged, dit_error *err) {
  const dit_zimage_config *c = &m->cfg;
  size_t host_bytes = zimage_host_bytes(c, g);
  size_t stage_bytes = staged ? stage_layout(g, x, cap, NULL, m->as.dev, NULL, NULL, NULL) : 0;
  dit_arena ar;
  zimage_acts a;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, c, g, host_bytes, stage_bytes, m->as.es, &a, err));
  bool grew = false;
  DIT_TRY(dit_act_space_fit(&m->as, m->be, &ar, host_bytes, &grew, err));
  if (grew) m->tables_ok = false;
  DIT_TRY(plan(&ar, c, g, host_bytes, stage_bytes, m->as.es, &a, err));
  if (!staged) return layers(m, g, x, cap, t, &a, host_bytes, out, err);
  dit_tensor *xd = calloc((size_t)g->n * 3, sizeof *xd);
  if (!xd) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_tensor *cd = xd + g->n, *od = cd + g->n;
  stage_layout(g, x, cap, a.stage, m->as.dev, xd, cd, od);
  dit_backend *be = m->be;
  dit_status s = DIT_OK;
  for (int i = 0; i < g->n && s == DIT_OK; i++) {
    s = be->ops->upload(be, xd[i].data, x[i].data, dit_tensor_nbytes(&x[i]), err);
    if (s == DIT_OK) s = be->ops->upload(be, cd[i].data, cap[i].data, dit_tensor_nbytes(&cap[i]), err);
  }
  if (s == DIT_OK) s = layers(m, g, xd, cd, t, &a, host_bytes, od, err);
  for (int i = 0; i < g->n && s == DIT_OK; i++)
    s = be->ops->download(be, out[i].data, od[i].data, dit_tensor_nbytes(&out[i]), err);
  free(xd);
  return s;
}

/* One call's op sequence after the tables are uploaded (a replayable graph: it touches
 * only the model's buffers, the weights and the call's device tensors). */
typedef struct zimage_call {
  dit_zimage *m;
  const zimage_geom *g;
  zimage_acts a;
  zimage_stream st[3];
  dit_tensor t_dev, zeros;
  const dit_tensor *x, *cap;
  dit_tensor *out;
} zimage_call;

static dit_status call_ops(void *ctx, dit_error *err) {
  zimage_call *k = ctx;
  dit_zimage *m = k->m;
  const zimage_geom *g = k->g;
  const dit_zimage_config *c = &m->cfg;
  zimage_acts *a = &k->a;
  const int64_t n = g->n;
  DIT_TRY(time_embed(m, g, &k->t_dev, a, err));
  DIT_TRY(embed_image(m, g, k->x, &k->zeros, a, err));
  for (int l = 0; l < c->n_refiner_layers; l++) DIT_TRY(block(m, &m->w.noise_refiner[l], &k->st[0], n, a, err));
  DIT_TRY(embed_caption(m, g, k->cap, &k->zeros, a, err));
  for (int l = 0; l < c->n_refiner_layers; l++) DIT_TRY(block(m, &m->w.context_refiner[l], &k->st[1], n, a, err));
  DIT_TRY(unify(m, g, &k->zeros, a, err));
  for (int l = 0; l < c->n_layers; l++) DIT_TRY(block(m, &m->w.layers[l], &k->st[2], n, a, err));
  return final_layer(m, g, a, k->out, err);
}

/* The replay key of a call: dtype, buffers, the items' geometry and every tensor address
 * (malloc'd; *bytes its size). NULL when out of memory (the call then runs unrecorded). */
static void *call_key(const dit_zimage *m, const zimage_geom *g, const zimage_acts *a, const dit_tensor *x,
                      const dit_tensor *cap, const dit_tensor *out, size_t *bytes) {
  const size_t head = 4 * sizeof(int64_t), items = (size_t)g->n * sizeof *g->items;
  const size_t ptrs = (size_t)g->n * 3 * sizeof(void *);
  *bytes = head + items + ptrs;
  unsigned char *k = calloc(1, *bytes);
  if (!k) return NULL;
  const int64_t h[4] = {g->n, (int64_t)m->as.adt, (int64_t)(uintptr_t)m->as.act, (int64_t)(uintptr_t)a->tab};
  memcpy(k, h, head);
  memcpy(k + head, g->items, items);
  void **p = (void **)(k + head + items);
  for (int i = 0; i < g->n; i++) {
    p[3 * i] = x[i].data;
    p[3 * i + 1] = cap[i].data;
    p[3 * i + 2] = out[i].data;
  }
  return k;
}

/* The forward proper, on tensors in backend memory. */
static dit_status layers(dit_zimage *m, const zimage_geom *g, const dit_tensor *x, const dit_tensor *cap,
                         const float *t, zimage_acts *a_, size_t host_bytes, dit_tensor *out, dit_error *err) {
  zimage_call k = {.m = m, .g = g, .a = *a_, .x = x, .cap = cap, .out = out};
  zimage_host_tables h;
  DIT_TRY(upload_tables(m, g, t, &k.a, host_bytes, &h, err));
  table_views(m, g, &h, &k.a, k.st, &k.t_dev, &k.zeros);
  size_t key_bytes = 0;
  void *key = call_key(m, g, &k.a, x, cap, out, &key_bytes);
  if (!key) return call_ops(&k, err);
  dit_status s = dit_replay_run(&m->replay, m->be, key, key_bytes, call_ops, &k, err);
  free(key);
  return s;
}

double dit_zimage_flops(const dit_zimage_config *c, double n_img, double n_cap) {
  const double D = c->dim, Fd = c->ffn_dim, L = c->n_layers, R = c->n_refiner_layers, n = n_img + n_cap;
  const double per_tok = 2.0 * (4.0 * D * D + 3.0 * D * Fd);
  return per_tok * (L * n + R * n_img + R * n_cap) + 4.0 * D * (L * n * n + R * n_img * n_img + R * n_cap * n_cap);
}

dit_status dit_zimage_cost(const dit_zimage *m, int n, int h, int w, const int *cap_len, dit_cost *out,
                           dit_error *err) {
  if (!m || !cap_len || !out || n < 1 || n > MAX_BATCH)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage cost: bad arguments");
  const dit_zimage_config *c = &m->cfg;
  /* descriptors only: make_geom reads shapes (data must be non-NULL, and is never read) */
  static const float never_read;
  void *d = (void *)&never_read;
  dit_tensor *x = calloc((size_t)n * 2, sizeof *x);
  float *t = calloc((size_t)n, sizeof *t);
  if (!x || !t) {
    free(x), free(t);
    return dit_errorf(err, DIT_ERR_NOMEM, "zimage cost: out of memory");
  }
  dit_tensor *cap = x + n;
  for (int i = 0; i < n; i++) {
    x[i] = dit_tensor_4d(DIT_F32, d, c->in_channels, 1, h, w);
    cap[i] = dit_tensor_2d(DIT_F32, d, cap_len[i] > 0 ? cap_len[i] : 1, c->cap_feat_dim);
  }
  const bool staged = m->as.dev != DIT_DEV_CPU;
  zimage_geom g;
  dit_status s = make_geom(c, n, x, cap, t, x, DIT_DEV_CPU, &g, err);
  if (s == DIT_OK) {
    const size_t host_bytes = zimage_host_bytes(c, &g);
    const size_t stage_bytes = staged ? stage_layout(&g, x, cap, NULL, m->as.dev, NULL, NULL, NULL) : 0;
    dit_arena ar;
    zimage_acts a;
    dit_arena_init_measure(&ar);
    s = plan(&ar, c, &g, host_bytes, stage_bytes, m->as.es, &a, err);
    out->act_bytes = ar.peak + (host_bytes + 63) / 64 * 64;
    out->flops = 0;
    for (int i = 0; i < n; i++) out->flops += dit_zimage_flops(c, (double)g.items[i].x_len, (double)g.items[i].cap_len);
  }
  free(g.items);
  free(x);
  free(t);
  if (s != DIT_OK) dit_error_prefix(err, "zimage cost");
  return s;
}

dit_status dit_zimage_forward(dit_zimage *m, int n, const dit_tensor *x, const dit_tensor *cap, const float *t,
                              dit_tensor *out, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage forward: no model");
  zimage_geom g;
  /* host tensors with a GPU model: staged through the model's buffer */
  const bool staged = m->as.dev != DIT_DEV_CPU && n >= 1 && x && x[0].device == DIT_DEV_CPU;
  dit_status s = make_geom(&m->cfg, n, x, cap, t, out, staged ? DIT_DEV_CPU : m->as.dev, &g, err);
  if (s == DIT_OK) {
    s = run(m, &g, x, cap, t, out, staged, err);
    if (s != DIT_OK) dit_error_prefix(err, "zimage forward");
  }
  free(g.items);
  return s;
}
