/* FLUX MMDiT forward: Flux2Transformer2DModel.forward (no KV-cache modes) and, for the
 * FLUX.1 variant, FluxTransformer2DModel.forward, as a sequence of backend ops. Flow:
 * timestep (+ guidance, + FLUX.1's pooled text) embedding -> every modulation of the call
 * (FLUX.2: double-stream image/text, single-stream, output, shared by the blocks; FLUX.1:
 * each block's own and the output's) computed once up front ->
 * x_embedder / context_embedder -> double-stream blocks over the separate streams with
 * joint attention over [text, image] -> single-stream blocks over the joint sequence ->
 * image rows -> AdaLayerNormContinuous -> proj_out. RoPE tables are built on the host
 * in float64 from the (t, h, w, l) ids and rounded to float32, as diffusers does.
 * No q/k/v copies: the double blocks write each stream's projections straight into its row
 * range of the joint [text, image] q/k/v buffers (strided GEMM outputs) and read the
 * attention output back through row views; the single blocks take q/k/v as column slices of
 * the fused projection, normalise and rotate them in place (fused QK-norm + RoPE), and
 * write the attention output and the SwiGLU activation into the two column ranges of the
 * fused out-projection's input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/replay.h"
#include "core/arena.h"
#include "models/flux2_internal.h"
#include "models/rope_axes.h"

#define MAX_BATCH 4096
#define MAX_ELEMS ((int64_t)1 << 40) /* largest activation tensor accepted, in elements */
#define TIME_MAX_PERIOD 10000.0f

/* Modulation chunks, each [B, D] contiguous, in the reference's chunk order. A double
 * block's stream has 6 (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp), a
 * single block 3 (shift, scale, gate), the output 2 (scale, shift: AdaLayerNormContinuous).
 * FLUX.2 holds one set per kind (image, text, single, output: 17 chunks); FLUX.1 one per
 * block: double block l's image set at 12 l, its text set at 12 l + 6, then the single
 * blocks' (3 each), then the output's. */
static int mk_double(const dit_flux2_config *c, int l, bool txt) {
  return (c->variant == DIT_FLUX_1 ? 12 * l : 0) + (txt ? 6 : 0);
}

static int mk_single(const dit_flux2_config *c, int l) {
  return c->variant == DIT_FLUX_1 ? 12 * c->n_layers + 3 * l : 12;
}

static int mk_out(const dit_flux2_config *c) {
  return c->variant == DIT_FLUX_1 ? mk_single(c, c->n_single_layers) : mk_single(c, 0) + 3;
}

static int64_t n_chunks(const dit_flux2_config *c) { return mk_out(c) + 2; }

/* Width of the single blocks' projection buffer: FLUX.2's fused q, k, v + SwiGLU input,
 * FLUX.1's q, k, v (its MLP input goes straight into the out projection's input). Also
 * holds the double blocks' SwiGLU input (2F <= 3D + 2F). */
static int64_t big_width(const dit_flux2_config *c) {
  return c->variant == DIT_FLUX_1 ? 3 * (int64_t)c->dim : 3 * (int64_t)c->dim + 2 * (int64_t)c->mlp_hidden;
}

static const dit_tensor *bias_of(const flux_lin *l) { return l->b.data ? &l->b : NULL; }

/* y = act(x @ l.w^T + l.b). */
static dit_status lin(dit_backend *be, dit_tensor *y, const dit_tensor *x, const flux_lin *l, dit_act act,
                      dit_error *err) {
  return dit_op_linear(be, y, x, &l->w, bias_of(l), act, err);
}

/* Geometry of one call. */
typedef struct flux2_geom {
  int64_t B, Si, St, S; /* batch, image tokens, text tokens, S = St + Si */
} flux2_geom;

/* Activations of one call: one arena over the model's buffer. */
typedef struct flux2_acts {
  void *tab;            /* device copy of the host tables */
  /* in the activation dtype (F32, or BF16 on a GPU): */
  void *t_freq;         /* [B, Tc] */
  void *t_mid, *temb, *g_emb, *temb_silu; /* [B, D] */
  void *pooled;         /* [B, pooled_dim] FLUX.1's pooled text in the activation dtype */
  void *mod_raw;        /* [B, 6D] one modulation linear's output (B > 1: split into chunks by copies) */
  void *chunks;         /* [n_chunks, B, D] (B = 1: the modulation linears write here directly) */
  void *img, *txt;      /* [B, Si, D], [B, St, D] */
  void *joint;          /* [B, S, D] */
  void *hn, *p;         /* [B*S*D] block scratch: normed input, projection output */
  void *q, *k, *v, *o;  /* [B, S, D] joint q/k/v and attention output of the double blocks */
  void *big;            /* [B*S, big_width] single blocks' projection / double blocks' SwiGLU input */
  void *ga;             /* [B*S, F] MLP hidden of the double blocks */
  void *cat;            /* [B*S, D + F] single blocks: [attention output, SwiGLU] */
  void *x_in, *txt_in, *out_act; /* inputs and output in the activation dtype (only when it is not F32) */
  float *x_f32, *txt_f32, *out_f32; /* device copies of host inputs / output (staged calls: host tensors, GPU model) */
} flux2_acts;

/* Host tables, laid out in one buffer uploaded in one piece. */
typedef struct flux2_host_tables {
  float *cos, *sin;     /* [S, hd/2], shared by the batch */
  float *t;             /* [B] t * 1000 */
  float *g;             /* [B] guidance * 1000 */
  float *p;             /* [B, pooled_dim] FLUX.1's pooled text */
} flux2_host_tables;

/* A strided 3-D activation view: [a, b, c] with strides (sa, sb, 1). */
static dit_tensor v3(const dit_flux2 *m, void *p, int64_t a, int64_t b, int64_t c, int64_t sa, int64_t sb) {
  dit_tensor t = dit_act_3d(&m->as, p, a, b, c);
  t.stride[0] = sa;
  t.stride[1] = sb;
  return t;
}

static void *chunk(const dit_flux2 *m, const flux2_acts *a, const flux2_geom *g, int k) {
  return dit_act_el(&m->as, a->chunks, (int64_t)k * g->B * m->cfg.dim);
}

static size_t host_bytes_of(const dit_flux2_config *c, const flux2_geom *g) {
  size_t tab = (size_t)(g->S * (c->head_dim / 2));
  return (2 * tab + 2 * (size_t)g->B + (size_t)g->B * (size_t)c->pooled_dim) * sizeof(float);
}

static void table_layout(const dit_flux2_config *c, const flux2_geom *g, void *buf, flux2_host_tables *h) {
  size_t tab = (size_t)(g->S * (c->head_dim / 2));
  h->cos = buf;
  h->sin = h->cos + tab;
  h->t = h->sin + tab;
  h->g = h->t + g->B;
  h->p = h->g + g->B;
}

/* Flux2PosEmbed / FluxPosEmbed (models/rope_axes.h). Rows are [text, image] as the model
 * concatenates them (one table for every batch item). */
static void fill_rope(const dit_flux2_config *c, const flux2_geom *g, const float *img_ids, const float *txt_ids,
                      const flux2_host_tables *h) {
  const int64_t half = c->head_dim / 2;
  dit_rope_axes_fill(c->n_axes, c->axes_dims, c->rope_theta, txt_ids, g->St, h->cos, h->sin);
  dit_rope_axes_fill(c->n_axes, c->axes_dims, c->rope_theta, img_ids, g->Si, h->cos + g->St * half,
                     h->sin + g->St * half);
}

/* True when the device copy at tab already holds the RoPE tables of these ids (the
 * sampler's steps: same ids every call). */
static bool rope_cached(const dit_flux2 *m, const flux2_geom *g, const void *tab, const float *img_ids,
                        const float *txt_ids) {
  const int64_t na = m->cfg.n_axes;
  return m->rope_ok && m->rope_tab == tab && m->rope_St == g->St && m->rope_Si == g->Si &&
         !memcmp(m->rope_ids, txt_ids, (size_t)(na * g->St) * sizeof(float)) &&
         !memcmp(m->rope_ids + na * g->St, img_ids, (size_t)(na * g->Si) * sizeof(float));
}

/* Remembers the ids whose tables were uploaded to tab (no cache when out of memory). */
static void rope_remember(dit_flux2 *m, const flux2_geom *g, void *tab, const float *img_ids, const float *txt_ids) {
  const int64_t na = m->cfg.n_axes;
  m->rope_ok = false;
  float *ids = realloc(m->rope_ids, (size_t)(na * g->S) * sizeof(float));
  if (!ids) return;
  memcpy(ids, txt_ids, (size_t)(na * g->St) * sizeof(float));
  memcpy(ids + na * g->St, img_ids, (size_t)(na * g->Si) * sizeof(float));
  m->rope_ids = ids;
  m->rope_tab = tab;
  m->rope_St = g->St;
  m->rope_Si = g->Si;
  m->rope_ok = true;
}

/* Carves every activation out of a (measuring or real) arena. */
static dit_status plan(dit_arena *ar, const dit_flux2_config *c, const flux2_geom *g, size_t host_bytes,
                       size_t es, bool stage, bool staged, flux2_acts *o, dit_error *err) {
  const bool real = ar->base != NULL;
  const size_t B = (size_t)g->B, D = (size_t)c->dim, F = (size_t)c->mlp_hidden, R = B * (size_t)g->S;
  const size_t wide = (size_t)big_width(c);
  memset(o, 0, sizeof *o);
#define TAKE(field, count) DIT_ACT_TAKE(ar, real, o->field, (count) * es)
  DIT_ACT_TAKE(ar, real, o->tab, host_bytes);
  TAKE(t_freq, B * (size_t)c->t_channels);
  TAKE(t_mid, B * D);
  TAKE(temb, B * D);
  TAKE(g_emb, B * D);
  TAKE(temb_silu, B * D);
  TAKE(pooled, B * (size_t)c->pooled_dim);
  TAKE(mod_raw, B * 6 * D);
  TAKE(chunks, (size_t)n_chunks(c) * B * D);
  TAKE(img, B * (size_t)g->Si * D);
  TAKE(txt, B * (size_t)g->St * D);
  TAKE(joint, R * D);
  TAKE(hn, R * D);
  TAKE(q, R * D);
  TAKE(k, R * D);
  TAKE(v, R * D);
  TAKE(p, R * D);
  TAKE(o, R * D);
  TAKE(big, R * wide);
  TAKE(ga, R * F);
  TAKE(cat, R * (D + F));
  const size_t nx = B * (size_t)g->Si * (size_t)c->in_channels, nt = B * (size_t)g->St * (size_t)c->joint_attention_dim;
  const size_t no = B * (size_t)g->Si * (size_t)c->out_channels;
  if (stage) {
    TAKE(x_in, nx);
    TAKE(txt_in, nt);
    TAKE(out_act, no);
  }
  if (staged) {
    es = sizeof(float);
    TAKE(x_f32, nx);
    TAKE(txt_f32, nt);
    TAKE(out_f32, no);
  }
#undef TAKE
  return DIT_OK;
}

/* One modulation: silu(temb) @ W^T + b (b NULL: none) split into n chunks [B, D] starting at chunk k0. */
static dit_status modulation(dit_flux2 *m, const flux2_geom *g, const dit_tensor *w, const dit_tensor *b, int n, int k0,
                             flux2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor ts = dit_act_2d(&m->as, a->temb_silu, B, D), raw = dit_act_2d(&m->as, a->mod_raw, B, n * D);
  if (B == 1) { /* [1, nD] is chunks k0 .. k0 + n - 1 laid end to end: no split needed */
    dit_tensor dst = dit_act_2d(&m->as, chunk(m, a, g, k0), 1, n * D);
    return dit_op_linear(be, &dst, &ts, w, b, DIT_ACT_NONE, err);
  }
  DIT_TRY(dit_op_linear(be, &raw, &ts, w, b, DIT_ACT_NONE, err));
  for (int i = 0; i < n; i++) {
    dit_tensor dst = dit_act_2d(&m->as, chunk(m, a, g, k0 + i), B, D);
    dit_tensor src = dit_act_2d(&m->as, dit_act_el(&m->as, a->mod_raw, i * D), B, D);
    src.stride[0] = n * D;
    DIT_TRY(dit_op_copy(be, &dst, &src, err));
  }
  return DIT_OK;
}

/* TimestepEmbedding (linear_1, SiLU, linear_2) of the sinusoid of v [B] into y [B, D]. */
static dit_status embed_scalar(dit_flux2 *m, const flux2_geom *g, const dit_tensor *v, const flux_lin *l1,
                               const flux_lin *l2, void *y, flux2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_flux2_config *c = &m->cfg;
  const int64_t B = g->B, D = c->dim;
  dit_tensor tf = dit_act_2d(&m->as, a->t_freq, B, c->t_channels), tm = dit_act_2d(&m->as, a->t_mid, B, D), out = dit_act_2d(&m->as, y, B, D);
  DIT_TRY(dit_op_timestep_embedding(be, &tf, v, c->t_channels, TIME_MAX_PERIOD, 0.0f, 1.0f, true, err));
  DIT_TRY(lin(be, &tm, &tf, l1, DIT_ACT_SILU, err));
  return lin(be, &out, &tm, l2, DIT_ACT_NONE, err);
}

/* FLUX.1's text_embedder (PixArtAlphaTextProjection: linear_1, SiLU, linear_2) of the pooled
 * text p_dev [B, pooled_dim] (F32), added to temb. */
static dit_status embed_pooled(dit_flux2 *m, const flux2_geom *g, const dit_tensor *p_dev, flux2_acts *a,
                               dit_error *err) {
  dit_backend *be = m->be;
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor pa = dit_act_2d(&m->as, a->pooled, B, m->cfg.pooled_dim), tm = dit_act_2d(&m->as, a->t_mid, B, D);
  dit_tensor pe = dit_act_2d(&m->as, a->g_emb, B, D), te = dit_act_2d(&m->as, a->temb, B, D);
  DIT_TRY(dit_op_copy(be, &pa, p_dev, err));
  DIT_TRY(lin(be, &tm, &pa, &m->w.p_linear_1, DIT_ACT_SILU, err));
  DIT_TRY(lin(be, &pe, &tm, &m->w.p_linear_2, DIT_ACT_NONE, err));
  return dit_op_add(be, &te, &te, &pe, err);
}

/* Every block's modulation (FLUX.1: each block its own linear, with bias). */
static dit_status modulations(dit_flux2 *m, const flux2_geom *g, flux2_acts *a, dit_error *err) {
  const flux2_weights *w = &m->w;
  const dit_flux2_config *c = &m->cfg;
  if (c->variant != DIT_FLUX_1) {
    DIT_TRY(modulation(m, g, &w->mod_img, NULL, 6, mk_double(c, 0, false), a, err));
    DIT_TRY(modulation(m, g, &w->mod_txt, NULL, 6, mk_double(c, 0, true), a, err));
    DIT_TRY(modulation(m, g, &w->mod_single, NULL, 3, mk_single(c, 0), a, err));
    return modulation(m, g, &w->norm_out.w, NULL, 2, mk_out(c), a, err);
  }
  for (int l = 0; l < c->n_layers; l++) {
    const flux2_double_w *b = &w->blocks[l];
    DIT_TRY(modulation(m, g, &b->mod_img.w, bias_of(&b->mod_img), 6, mk_double(c, l, false), a, err));
    DIT_TRY(modulation(m, g, &b->mod_txt.w, bias_of(&b->mod_txt), 6, mk_double(c, l, true), a, err));
  }
  for (int l = 0; l < c->n_single_layers; l++)
    DIT_TRY(modulation(m, g, &w->single[l].mod.w, bias_of(&w->single[l].mod), 3, mk_single(c, l), a, err));
  return modulation(m, g, &w->norm_out.w, bias_of(&w->norm_out), 2, mk_out(c), a, err);
}

/* temb (+ guidance embedding, + pooled text) and every modulation of the call. */
static dit_status time_embed(dit_flux2 *m, const flux2_geom *g, const dit_tensor *t_dev, const dit_tensor *g_dev,
                             const dit_tensor *p_dev, flux2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const flux2_weights *w = &m->w;
  const int64_t B = g->B, D = m->cfg.dim;
  DIT_TRY(embed_scalar(m, g, t_dev, &w->t_linear_1, &w->t_linear_2, a->temb, a, err));
  dit_tensor te = dit_act_2d(&m->as, a->temb, B, D), ts = dit_act_2d(&m->as, a->temb_silu, B, D);
  if (g_dev) {
    DIT_TRY(embed_scalar(m, g, g_dev, &w->g_linear_1, &w->g_linear_2, a->g_emb, a, err));
    dit_tensor ge = dit_act_2d(&m->as, a->g_emb, B, D);
    DIT_TRY(dit_op_add(be, &te, &te, &ge, err));
  }
  if (p_dev) DIT_TRY(embed_pooled(m, g, p_dev, a, err));
  DIT_TRY(dit_op_activation(be, &ts, &te, DIT_ACT_SILU, err));
  return modulations(m, g, a, err);
}

/* hn [B, Ss, D] = LayerNorm(x) * (1 + scale) + shift (no affine). */
/* Gated residual then the next norm: x [B, Ss, D] += gate * r (r NULL: no residual), then, when
 * hn is not NULL, hn = LayerNorm(x) * (1 + scale) + shift (one fused pass on the GPU). */
static dit_status res_norm(dit_flux2 *m, const flux2_geom *g, void *x, int64_t Ss, void *r, void *gate, void *hn,
                           void *shift, void *scale, dit_error *err) {
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor tx = dit_act_3d(&m->as, x, B, Ss, D), tr = dit_act_3d(&m->as, r, B, Ss, D), th = dit_act_3d(&m->as, hn, B, Ss, D);
  dit_tensor tg = dit_act_2d(&m->as, gate, B, D), sc = dit_act_2d(&m->as, scale, B, D), sh = dit_act_2d(&m->as, shift, B, D);
  return dit_op_residual_layer_norm(m->be, &tx, r ? &tr : NULL, r ? &tg : NULL, hn ? &th : NULL, &sc, &sh,
                                    m->cfg.eps, err);
}

/* hn = LayerNorm(x) * (1 + scale) + shift (the blocks' norm1 / norm2 and norm_out). */
static dit_status norm_mod(dit_flux2 *m, const flux2_geom *g, void *x, int64_t Ss, void *hn, void *shift, void *scale,
                           dit_error *err) {
  return res_norm(m, g, x, Ss, NULL, NULL, hn, shift, scale, err);
}

/* A strided [B, Ss, H, hd] view of rows [off, off + Ss) of a [B, S, ld] buffer at p. */
static dit_tensor heads(const dit_flux2 *m, void *p, const flux2_geom *g, int64_t Ss, int64_t off, int64_t ld) {
  const int64_t H = m->cfg.n_heads, hd = m->cfg.head_dim;
  dit_tensor t = dit_act_4d(&m->as, dit_act_el(&m->as, p, off * ld), g->B, Ss, H, hd);
  t.stride[0] = g->S * ld, t.stride[1] = ld, t.stride[2] = hd;
  return t;
}

/* RoPE table rows [off, off + Ss) ([Ss, hd/2], shared by the batch). */
static dit_tensor rope_rows(const dit_flux2 *m, const dit_tensor *tab, int64_t Ss, int64_t off) {
  const int64_t half = m->cfg.head_dim / 2;
  return dit_act_mk(&m->as, DIT_F32, (float *)tab->data + off * half, 2, (int64_t[]){Ss, half});
}

/* One stream's projection written straight into rows [off, off + Ss) of the joint buffer
 * dst [B, S, D]: dst rows = hn @ W^T, then (norm not NULL) per-head RMSNorm and RoPE in place. */
static dit_status project_into(dit_flux2 *m, const flux2_geom *g, int64_t Ss, int64_t off, void *hin,
                               const flux_lin *w, const dit_tensor *norm, const dit_tensor *cos, const dit_tensor *sin,
                               void *dst, dit_error *err) {
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor hn = dit_act_3d(&m->as, hin, B, Ss, D), d = v3(m, dit_act_el(&m->as, dst, off * D), B, Ss, D, g->S * D, D);
  DIT_TRY(lin(m->be, &d, &hn, w, DIT_ACT_NONE, err));
  if (!norm) return DIT_OK;
  dit_tensor d4 = heads(m, dst, g, Ss, off, D), c = rope_rows(m, cos, Ss, off), sn = rope_rows(m, sin, Ss, off);
  return dit_op_rms_norm_rope(m->be, &d4, norm, m->cfg.eps, &c, &sn, DIT_ROPE_INTERLEAVED, err);
}

/* The double blocks' feed-forward on hin [rows, D] -> p [rows, D]: FLUX.2's Flux2FeedForward
 * (linear_in, SwiGLU over its two halves read in place as column slices, linear_out) or
 * FLUX.1's FeedForward (linear with tanh-GELU, linear). */
static dit_status feed_forward(dit_flux2 *m, int64_t rows, void *hin, const flux_lin *w_in, const flux_lin *w_out,
                               flux2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const int64_t D = m->cfg.dim, F = m->cfg.mlp_hidden;
  dit_tensor hn = dit_act_2d(&m->as, hin, rows, D), big = dit_act_2d(&m->as, a->big, rows, 2 * F), p = dit_act_2d(&m->as, a->p, rows, D);
  dit_tensor ga = dit_act_2d(&m->as, a->ga, rows, F);
  if (m->cfg.variant == DIT_FLUX_1) {
    DIT_TRY(lin(be, &ga, &hn, w_in, DIT_ACT_GELU_TANH, err));
    return lin(be, &p, &ga, w_out, DIT_ACT_NONE, err);
  }
  DIT_TRY(lin(be, &big, &hn, w_in, DIT_ACT_NONE, err));
  dit_tensor sa = dit_act_2d(&m->as, a->big, rows, F), sb = dit_act_2d(&m->as, dit_act_el(&m->as, a->big, F), rows, F);
  sa.stride[0] = sb.stride[0] = 2 * F;
  DIT_TRY(dit_op_swiglu(be, &ga, &sa, &sb, err));
  return lin(be, &p, &ga, w_out, DIT_ACT_NONE, err);
}

/* The second half of a double block for one stream: attention output rows [off, off+Ss)
 * (a row view of o) through its out projection and gate, then the gated feed-forward; hin is
 * the stream's norm buffer. With next, the last gated residual also makes the next double
 * block's normed, modulated input there (its modulation chunks start at mk_next).
 * mk: this block's chunks for the stream. */
static dit_status stream_tail(dit_flux2 *m, const flux2_geom *g, void *x, int64_t Ss, int64_t off, int mk, int mk_next,
                              void *hin, bool next, const flux_lin *w_o, const flux_lin *w_in, const flux_lin *w_out,
                              flux2_acts *a, dit_error *err) {
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor p = dit_act_3d(&m->as, a->p, B, Ss, D);
  dit_tensor os = v3(m, dit_act_el(&m->as, a->o, off * D), B, Ss, D, g->S * D, D);
  DIT_TRY(lin(m->be, &p, &os, w_o, DIT_ACT_NONE, err));
  DIT_TRY(res_norm(m, g, x, Ss, a->p, chunk(m, a, g, mk + 2), hin, chunk(m, a, g, mk + 3), chunk(m, a, g, mk + 4),
                   err));
  DIT_TRY(feed_forward(m, B * Ss, hin, w_in, w_out, a, err));
  return res_norm(m, g, x, Ss, a->p, chunk(m, a, g, mk + 5), next ? hin : NULL, chunk(m, a, g, mk_next),
                  chunk(m, a, g, mk_next + 1), err);
}

/* Double block l (Flux2TransformerBlock / FluxTransformerBlock): both streams normed and
 * modulated (already, by the previous block, when l > 0), projected into the joint [text,
 * image] q/k/v (q and k normed and rotated per stream), joint attention, then each stream's
 * output and MLP (next: ending in the next block's normed inputs). The streams' norm
 * buffers: text rows at hn, image rows after them. */
static dit_status double_block(dit_flux2 *m, int l, const flux2_geom *g, const dit_tensor *cos, const dit_tensor *sin,
                               bool next, flux2_acts *a, dit_error *err) {
  const dit_flux2_config *c = &m->cfg;
  const flux2_double_w *b = &m->w.blocks[l];
  const int64_t St = g->St, Si = g->Si, B = g->B, S = g->S, H = c->n_heads, hd = c->head_dim;
  const int mi = mk_double(c, l, false), mt = mk_double(c, l, true);
  void *hn_t = a->hn, *hn_i = dit_act_el(&m->as, a->hn, B * St * c->dim);
  if (l == 0) {
    DIT_TRY(norm_mod(m, g, a->txt, St, hn_t, chunk(m, a, g, mt), chunk(m, a, g, mt + 1), err));
    DIT_TRY(norm_mod(m, g, a->img, Si, hn_i, chunk(m, a, g, mi), chunk(m, a, g, mi + 1), err));
  }
  DIT_TRY(project_into(m, g, St, 0, hn_t, &b->add_q_proj, &b->norm_added_q, cos, sin, a->q, err));
  DIT_TRY(project_into(m, g, St, 0, hn_t, &b->add_k_proj, &b->norm_added_k, cos, sin, a->k, err));
  DIT_TRY(project_into(m, g, St, 0, hn_t, &b->add_v_proj, NULL, cos, sin, a->v, err));
  DIT_TRY(project_into(m, g, Si, St, hn_i, &b->to_q, &b->norm_q, cos, sin, a->q, err));
  DIT_TRY(project_into(m, g, Si, St, hn_i, &b->to_k, &b->norm_k, cos, sin, a->k, err));
  DIT_TRY(project_into(m, g, Si, St, hn_i, &b->to_v, NULL, cos, sin, a->v, err));
  dit_tensor q4 = dit_act_4d(&m->as, a->q, B, S, H, hd), k4 = dit_act_4d(&m->as, a->k, B, S, H, hd), v4 = dit_act_4d(&m->as, a->v, B, S, H, hd);
  dit_tensor o4 = dit_act_4d(&m->as, a->o, B, S, H, hd);
  DIT_TRY(dit_op_attention(m->be, &o4, &q4, &k4, &v4, NULL, 1.0f / sqrtf((float)hd), false, err));
  DIT_TRY(stream_tail(m, g, a->img, Si, St, mi, mk_double(c, l + 1, false), hn_i, next, &b->to_out_0, &b->ff_in,
                      &b->ff_out, a, err));
  return stream_tail(m, g, a->txt, St, 0, mt, mk_double(c, l + 1, true), hn_t, next, &b->to_add_out, &b->ffc_in,
                     &b->ffc_out, a, err);
}

/* FLUX.1's single-block projections from hn [R, D]: q, k, v into the first 3D columns of
 * big [R, 3D] (one fused GEMM when the checkpoint has the rows together), and the MLP
 * input through tanh-GELU straight into cat's columns [D, D + F). */
static dit_status single_proj_v1(dit_flux2 *m, const flux2_single_w *b, int64_t R, flux2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const int64_t D = m->cfg.dim, F = m->cfg.mlp_hidden, C = D + F;
  dit_tensor hn = dit_act_2d(&m->as, a->hn, R, D);
  if (b->qkv.w.data) {
    dit_tensor big = dit_act_2d(&m->as, a->big, R, 3 * D);
    DIT_TRY(lin(be, &big, &hn, &b->qkv, DIT_ACT_NONE, err));
  } else {
    const flux_lin *w3[3] = {&b->to_q, &b->to_k, &b->to_v};
    for (int i = 0; i < 3; i++) {
      dit_tensor d = dit_act_2d(&m->as, dit_act_el(&m->as, a->big, i * D), R, D);
      d.stride[0] = 3 * D;
      DIT_TRY(lin(be, &d, &hn, w3[i], DIT_ACT_NONE, err));
    }
  }
  dit_tensor mo = dit_act_2d(&m->as, dit_act_el(&m->as, a->cat, D), R, F);
  mo.stride[0] = C;
  return lin(be, &mo, &hn, &b->proj_mlp, DIT_ACT_GELU_TANH, err);
}

/* Single block l (Flux2SingleTransformerBlock / FluxSingleTransformerBlock) on the joint
 * stream: the projections to q, k, v (used in place as column slices of big) and the MLP,
 * attention and the MLP activation written into the two column ranges of cat, one fused
 * output projection. hn already holds the normed, modulated input when l > 0 (from the
 * previous block); next: the gated residual also makes the next single block's input in hn.
 * FLUX.2 projects q, k, v and both SwiGLU halves in one GEMM. */
static dit_status single_block(dit_flux2 *m, int l, const flux2_geom *g, const dit_tensor *cos, const dit_tensor *sin,
                               bool next, flux2_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_flux2_config *c = &m->cfg;
  const flux2_single_w *b = &m->w.single[l];
  const int64_t B = g->B, S = g->S, R = B * S, D = c->dim, F = c->mlp_hidden, hd = c->head_dim;
  const int64_t W = big_width(c), C = D + F;
  const int mk = mk_single(c, l), mk_next = mk_single(c, l + 1);
  const float eps = c->eps;
  if (l == 0) DIT_TRY(norm_mod(m, g, a->joint, S, a->hn, chunk(m, a, g, mk), chunk(m, a, g, mk + 1), err));
  dit_tensor hn = dit_act_2d(&m->as, a->hn, R, D), big = dit_act_2d(&m->as, a->big, R, W);
  if (c->variant == DIT_FLUX_1)
    DIT_TRY(single_proj_v1(m, b, R, a, err));
  else
    DIT_TRY(dit_op_linear(be, &big, &hn, &b->to_qkv_mlp_proj, NULL, DIT_ACT_NONE, err));
  dit_tensor q4 = heads(m, a->big, g, S, 0, W), k4 = heads(m, dit_act_el(&m->as, a->big, D), g, S, 0, W);
  dit_tensor v4 = heads(m, dit_act_el(&m->as, a->big, 2 * D), g, S, 0, W), o4 = heads(m, a->cat, g, S, 0, C);
  DIT_TRY(dit_op_rms_norm_rope(be, &q4, &b->norm_q, eps, cos, sin, DIT_ROPE_INTERLEAVED, err));
  DIT_TRY(dit_op_rms_norm_rope(be, &k4, &b->norm_k, eps, cos, sin, DIT_ROPE_INTERLEAVED, err));
  DIT_TRY(dit_op_attention(be, &o4, &q4, &k4, &v4, NULL, 1.0f / sqrtf((float)hd), false, err));
  if (c->variant != DIT_FLUX_1) {
    dit_tensor ma = dit_act_2d(&m->as, dit_act_el(&m->as, a->big, 3 * D), R, F), mb = dit_act_2d(&m->as, dit_act_el(&m->as, a->big, 3 * D + F), R, F);
    dit_tensor mo = dit_act_2d(&m->as, dit_act_el(&m->as, a->cat, D), R, F);
    ma.stride[0] = mb.stride[0] = W;
    mo.stride[0] = C;
    DIT_TRY(dit_op_swiglu(be, &mo, &ma, &mb, err));
  }
  dit_tensor cat = dit_act_2d(&m->as, a->cat, R, C), p2 = dit_act_2d(&m->as, a->p, R, D);
  DIT_TRY(lin(be, &p2, &cat, &b->to_out, DIT_ACT_NONE, err));
  return res_norm(m, g, a->joint, S, a->p, chunk(m, a, g, mk + 2), next ? a->hn : NULL, chunk(m, a, g, mk_next),
                  chunk(m, a, g, mk_next + 1), err);
}

/* joint[b] = [txt[b], img[b]]. */
static dit_status join_streams(dit_flux2 *m, const flux2_geom *g, flux2_acts *a, dit_error *err) {
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor dt = v3(m, a->joint, B, g->St, D, g->S * D, D),
             di = v3(m, dit_act_el(&m->as, a->joint, g->St * D), B, g->Si, D, g->S * D, D);
  dit_tensor st = dit_act_3d(&m->as, a->txt, B, g->St, D), si = dit_act_3d(&m->as, a->img, B, g->Si, D);
  DIT_TRY(dit_op_copy(m->be, &dt, &st, err));
  return dit_op_copy(m->be, &di, &si, err);
}

/* Image rows of the joint stream -> norm_out (AdaLayerNormContinuous) -> proj_out. */
static dit_status final_layer(dit_flux2 *m, const flux2_geom *g, flux2_acts *a, dit_tensor *out, dit_error *err) {
  const int64_t B = g->B, D = m->cfg.dim;
  dit_tensor src = v3(m, dit_act_el(&m->as, a->joint, g->St * D), B, g->Si, D, g->S * D, D),
             img = dit_act_3d(&m->as, a->img, B, g->Si, D);
  DIT_TRY(dit_op_copy(m->be, &img, &src, err));
  const int mo = mk_out(&m->cfg), sf = m->w.norm_out_shift_first;
  DIT_TRY(norm_mod(m, g, a->img, g->Si, a->hn, chunk(m, a, g, mo + !sf), chunk(m, a, g, mo + sf), err));
  dit_tensor hn = dit_act_3d(&m->as, a->hn, B, g->Si, D);
  if (!a->out_act) return lin(m->be, out, &hn, &m->w.proj_out, DIT_ACT_NONE, err);
  dit_tensor o = dit_act_3d(&m->as, a->out_act, B, g->Si, m->cfg.out_channels);
  DIT_TRY(lin(m->be, &o, &hn, &m->w.proj_out, DIT_ACT_NONE, err));
  return dit_op_copy(m->be, out, &o, err);
}

static bool is_f32_contig3(const dit_tensor *t) {
  return t && t->dtype == DIT_F32 && t->ndim == 3 && t->data && dit_tensor_is_contiguous(t);
}

static dit_status check_args(const dit_flux2_config *c, const dit_tensor *x, const dit_tensor *txt,
                             const float *pooled, const float *t, const float *guidance, const float *img_ids,
                             const float *txt_ids, const dit_tensor *out, flux2_geom *g, dit_error *err) {
  char b1[128];
  if (!t || !img_ids || !txt_ids) return dit_errorf(err, DIT_ERR_INVALID_ARG, "NULL t or ids");
  if (c->pooled_dim > 0 && !pooled) return dit_errorf(err, DIT_ERR_INVALID_ARG, "no pooled text embedding");
  if (!is_f32_contig3(x) || x->shape[2] != c->in_channels || x->shape[0] < 1 || x->shape[1] < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "x must be contiguous F32 [B, Si >= 1, %d], got %s",
                      c->in_channels, x ? dit_shape_str(x->shape, x->ndim, b1, sizeof b1) : "NULL");
  g->B = x->shape[0];
  g->Si = x->shape[1];
  if (!is_f32_contig3(txt) || txt->shape[0] != g->B || txt->shape[2] != c->joint_attention_dim || txt->shape[1] < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "txt must be contiguous F32 [%lld, St >= 1, %d], got %s",
                      (long long)g->B, c->joint_attention_dim,
                      txt ? dit_shape_str(txt->shape, txt->ndim, b1, sizeof b1) : "NULL");
  g->St = txt->shape[1];
  g->S = g->St + g->Si;
  int64_t os[3] = {g->B, g->Si, c->out_channels};
  if (!is_f32_contig3(out) || !dit_tensor_has_shape(out, 3, os))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "out must be contiguous F32 %s",
                      dit_shape_str(os, 3, b1, sizeof b1));
  if (x->device != txt->device || x->device != out->device)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "x, txt and out must be on the same device");
  if (g->B > MAX_BATCH)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "batch of %lld (max %d)", (long long)g->B, MAX_BATCH);
  int64_t wide = 3 * (int64_t)c->dim + 2 * (int64_t)c->mlp_hidden;
  if ((double)g->B * (double)g->S * (double)wide > (double)MAX_ELEMS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%lld x %lld tokens are too many", (long long)g->B, (long long)g->S);
  for (int64_t i = 0; i < g->B; i++) {
    if (!isfinite(t[i])) return dit_errorf(err, DIT_ERR_INVALID_ARG, "t[%lld] is not finite", (long long)i);
    if (guidance && !isfinite(guidance[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "guidance[%lld] is not finite", (long long)i);
  }
  const int64_t na = c->n_axes;
  for (int64_t i = 0; i < na * g->Si; i++)
    if (!isfinite(img_ids[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "img_ids[%lld] is not finite", (long long)(i / na));
  for (int64_t i = 0; i < na * g->St; i++)
    if (!isfinite(txt_ids[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "txt_ids[%lld] is not finite", (long long)(i / na));
  for (int64_t i = 0; i < g->B * c->pooled_dim; i++)
    if (!isfinite(pooled[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "pooled[%lld] is not finite", (long long)i);
  return DIT_OK;
}

/* One call's op sequence after the tables are uploaded: everything it touches is in the
 * model's buffers, the weights and the call's device tensors (a replayable graph). */
typedef struct flux2_call {
  dit_flux2 *m;
  const flux2_geom *g;
  flux2_acts *a;
  dit_tensor cos, sin, t_dev, g_dev, p_dev;
  bool use_g, use_p, stage;
  const dit_tensor *x, *txt; /* device tensors (the staged copies for host inputs) */
  dit_tensor *out;
} flux2_call;

/* What the recorded ops depend on besides memory contents (zero-filled: compared bytewise). */
typedef struct flux2_call_key {
  int64_t B, Si, St;
  int64_t adt, use_g, stage;
  const void *act, *tab, *x, *txt, *out;
} flux2_call_key;

static dit_status call_ops(void *ctx, dit_error *err) {
  flux2_call *k = ctx;
  dit_flux2 *m = k->m;
  const flux2_geom *g = k->g;
  const dit_flux2_config *c = &m->cfg;
  dit_backend *be = m->be;
  flux2_acts *a = k->a;
  const int64_t B = g->B, D = c->dim;
  DIT_TRY(time_embed(m, g, &k->t_dev, k->use_g ? &k->g_dev : NULL, k->use_p ? &k->p_dev : NULL, a, err));
  dit_tensor img = dit_act_3d(&m->as, a->img, B, g->Si, D), tx = dit_act_3d(&m->as, a->txt, B, g->St, D);
  dit_tensor xs = *k->x, ts = *k->txt;
  if (k->stage) {
    xs = dit_act_3d(&m->as, a->x_in, B, g->Si, c->in_channels);
    ts = dit_act_3d(&m->as, a->txt_in, B, g->St, c->joint_attention_dim);
    DIT_TRY(dit_op_copy(be, &xs, k->x, err));
    DIT_TRY(dit_op_copy(be, &ts, k->txt, err));
  }
  DIT_TRY(lin(be, &img, &xs, &m->w.x_embedder, DIT_ACT_NONE, err));
  DIT_TRY(lin(be, &tx, &ts, &m->w.context_embedder, DIT_ACT_NONE, err));
  for (int l = 0; l < c->n_layers; l++) {
    dit_status s = double_block(m, l, g, &k->cos, &k->sin, l + 1 < c->n_layers, a, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "transformer_blocks.%d", l);
      return s;
    }
  }
  DIT_TRY(join_streams(m, g, a, err));
  for (int l = 0; l < c->n_single_layers; l++) {
    dit_status s = single_block(m, l, g, &k->cos, &k->sin, l + 1 < c->n_single_layers, a, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "single_transformer_blocks.%d", l);
      return s;
    }
  }
  return final_layer(m, g, a, k->out, err);
}

static dit_status run(dit_flux2 *m, const flux2_geom *g, const dit_tensor *x, const dit_tensor *txt,
                      const float *pooled, const float *t, const float *guidance, const float *img_ids,
                      const float *txt_ids, dit_tensor *out, dit_error *err) {
  const dit_flux2_config *c = &m->cfg;
  dit_backend *be = m->be;
  const size_t host_bytes = host_bytes_of(c, g);
  const bool stage = m->as.adt != DIT_F32; /* inputs/outputs are F32: convert through staging buffers */
  const bool staged = x->device != m->as.dev; /* host tensors with a GPU model: upload / download */
  dit_arena ar;
  flux2_acts a;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, c, g, host_bytes, m->as.es, stage, staged, &a, err));
  bool grew = false;
  DIT_TRY(dit_act_space_fit(&m->as, be, &ar, host_bytes, &grew, err));
  if (grew) m->rope_ok = false;
  DIT_TRY(plan(&ar, c, g, host_bytes, m->as.es, stage, staged, &a, err));
  flux2_host_tables h;
  table_layout(c, g, m->as.host, &h);
  /* timestep.to(dtype) * 1000 in float32, as the reference */
  for (int64_t i = 0; i < g->B; i++) {
    h.t[i] = t[i] * 1000.0f;
    h.g[i] = guidance ? guidance[i] * 1000.0f : 0.0f;
  }
  if (c->pooled_dim > 0) memcpy(h.p, pooled, (size_t)(g->B * c->pooled_dim) * sizeof(float));
  if (rope_cached(m, g, a.tab, img_ids, txt_ids)) {
    size_t off = (size_t)((char *)h.t - (char *)m->as.host);
    DIT_TRY(be->ops->upload(be, (char *)a.tab + off, h.t, host_bytes - off, err));
  } else {
    m->rope_ok = false;
    fill_rope(c, g, img_ids, txt_ids, &h);
    DIT_TRY(be->ops->upload(be, a.tab, m->as.host, host_bytes, err));
    rope_remember(m, g, a.tab, img_ids, txt_ids);
  }
  flux2_call k = {.m = m, .g = g, .a = &a, .stage = stage, .use_g = guidance && c->guidance_embeds,
                  .use_p = c->pooled_dim > 0};
#define DEV(ptr) ((void *)((char *)a.tab + ((const char *)(ptr) - (const char *)m->as.host)))
  const int64_t B = g->B, half = c->head_dim / 2;
  k.cos = dit_act_mk(&m->as, DIT_F32, DEV(h.cos), 2, (int64_t[]){g->S, half});
  k.sin = dit_act_mk(&m->as, DIT_F32, DEV(h.sin), 2, (int64_t[]){g->S, half});
  k.t_dev = dit_act_mk(&m->as, DIT_F32, DEV(h.t), 1, (int64_t[]){B});
  k.g_dev = dit_act_mk(&m->as, DIT_F32, DEV(h.g), 1, (int64_t[]){B});
  k.p_dev = dit_act_mk(&m->as, DIT_F32, DEV(h.p), 2, (int64_t[]){B, c->pooled_dim});
#undef DEV
  dit_tensor xd = *x, td = *txt, od = *out;
  if (staged) {
    xd = dit_act_mk(&m->as, DIT_F32, a.x_f32, 3, x->shape);
    td = dit_act_mk(&m->as, DIT_F32, a.txt_f32, 3, txt->shape);
    od = dit_act_mk(&m->as, DIT_F32, a.out_f32, 3, out->shape);
    DIT_TRY(be->ops->upload(be, a.x_f32, x->data, dit_tensor_nbytes(x), err));
    DIT_TRY(be->ops->upload(be, a.txt_f32, txt->data, dit_tensor_nbytes(txt), err));
  }
  k.x = &xd;
  k.txt = &td;
  k.out = &od;
  flux2_call_key key;
  memset(&key, 0, sizeof key);
  key.B = g->B;
  key.Si = g->Si;
  key.St = g->St;
  key.adt = m->as.adt;
  key.use_g = k.use_g;
  key.stage = stage;
  key.act = m->as.act;
  key.tab = a.tab;
  key.x = xd.data;
  key.txt = td.data;
  key.out = od.data;
  DIT_TRY(dit_replay_run(&m->replay, be, &key, sizeof key, call_ops, &k, err));
  if (staged) DIT_TRY(be->ops->download(be, out->data, a.out_f32, dit_tensor_nbytes(out), err));
  return DIT_OK;
}

double dit_flux_flops(const dit_flux2_config *c, double n_img, double n_txt) {
  const double D = c->dim, M = c->mlp_hidden, S = n_img + n_txt, m = c->variant == DIT_FLUX_1 ? 2.0 : 3.0;
  return (double)(c->n_layers + c->n_single_layers) * (2.0 * (4.0 * D * D + m * D * M) * S + 4.0 * D * S * S);
}

dit_status dit_flux_cost(const dit_flux2 *m, int64_t B, int64_t Si, int64_t St, dit_cost *out, dit_error *err) {
  if (!m || !out || B < 1 || B > MAX_BATCH || Si < 1 || St < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux cost: bad arguments");
  const dit_flux2_config *c = &m->cfg;
  const flux2_geom g = {B, Si, St, Si + St};
  const size_t host_bytes = host_bytes_of(c, &g);
  dit_arena ar;
  flux2_acts a;
  dit_arena_init_measure(&ar);
  /* as run() plans a call from host tensors: staged through the buffer on a device model */
  DIT_TRY(plan(&ar, c, &g, host_bytes, m->as.es, m->as.adt != DIT_F32, m->as.dev != DIT_DEV_CPU, &a, err));
  out->act_bytes = ar.peak + (host_bytes + 63) / 64 * 64;
  out->flops = (double)B * dit_flux_flops(c, (double)Si, (double)St);
  return DIT_OK;
}

dit_status dit_flux_forward(dit_flux2 *m, const dit_tensor *x, const dit_tensor *txt, const float *pooled,
                            const float *t, const float *guidance, const float *img_ids, const float *txt_ids,
                            dit_tensor *out, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux forward: no model");
  const char *who = m->cfg.variant == DIT_FLUX_1 ? "flux1 forward" : "flux2 forward";
  flux2_geom g;
  memset(&g, 0, sizeof g);
  dit_status s = check_args(&m->cfg, x, txt, pooled, t, guidance, img_ids, txt_ids, out, &g, err);
  if (s == DIT_OK) s = run(m, &g, x, txt, pooled, t, guidance, img_ids, txt_ids, out, err);
  if (s != DIT_OK) dit_error_prefix(err, "%s", who);
  return s;
}

dit_status dit_flux2_forward(dit_flux2 *m, const dit_tensor *x, const dit_tensor *txt, const float *t,
                             const float *guidance, const float *img_ids, const float *txt_ids, dit_tensor *out,
                             dit_error *err) {
  return dit_flux_forward(m, x, txt, NULL, t, guidance, img_ids, txt_ids, out, err);
}
