/* MiniMax-H3 transformer forward (see minimax_h3.h), as a sequence of backend ops that reads like
 * diffusers' MiniMaxH3Transformer3DModel.forward. Host work per call: the layout checks, the runs of
 * rows that share a modulation pair, the RoPE tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/timer.h"
#include "models/minimax_h3_internal.h"

#define MAX_ROWS ((int64_t)1 << 22)
#define MAX_TIMESTEPS 64
#define MAX_FOLD 1024 /* timesteps one fold holds (a 50-step video + audio schedule has at most 98) */
#define TIME_MAX_PERIOD 10000.0f /* Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0) */

/* A run of consecutive packed rows [start, start + len) that share one key (a modulation row). */
typedef struct h3_run {
  int64_t start, len, key;
} h3_run;

/* A run of rows of one modality's input that sit consecutively in the packed sequence. */
typedef struct h3_span {
  int64_t src, dst, len;
} h3_span;

typedef struct h3_layout {
  int64_t S;
  h3_run *mod_runs, *out_runs; /* keys: timestep_index * 3 + tag (blocks), timestep_index (norm_out) */
  int64_t n_mod, n_out;
  h3_span *spans[3]; /* text, video, audio */
  int64_t n_spans[3];
} h3_layout;

typedef struct h3_acts {
  void *x, *h, *r, *q, *k, *v, *o, *ffa, *ffb; /* [S, H] x3 (stream, normed, branch output), [S, I] x4, [S, F] x2 */
  void *in[3];                             /* the uploaded rows (F32): text, video, audio */
  void *proj[3];                           /* their projections [n, H] (text: the refined stream) */
  void *cos, *sin;                         /* [S, 3 R] F32 */
  void *tt, *sinus, *t1, *temb, *stemb;    /* the timestep embedding per distinct timestep */
  void *mod, *omod;                        /* [n_t, 18 H], [n_t, 2 H] */
  void *vo, *ao;                           /* [S, patch_dim], [S, audio_channels] F32 */
} h3_acts;

static void layout_free(h3_layout *l) {
  free(l->mod_runs), free(l->out_runs);
  for (int i = 0; i < 3; i++) free(l->spans[i]);
  memset(l, 0, sizeof *l);
}

/* Runs of rows with equal key(row) into *out (n of them); a row's timestep is map[timestep_index] (its row
 * of the modulation tables). */
static dit_status make_runs(const dit_h3_call *c, const int *map, int64_t S, bool with_tag, h3_run **out, int64_t *n,
                            dit_error *err) {
  h3_run *r = malloc((size_t)S * sizeof *r);
  if (!r) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for %lld rows", (long long)S);
  int64_t k = 0;
  for (int64_t i = 0; i < S; i++) {
    const int64_t t = map[c->timestep_index[i]], key = with_tag ? t * DIT_H3_MODALITIES + c->tags[i] : t;
    if (k && r[k - 1].key == key) r[k - 1].len++;
    else r[k++] = (h3_run){i, 1, key};
  }
  *out = r, *n = k;
  return DIT_OK;
}

/* The spans of one modality's index array; every packed row is claimed once (seen). */
static dit_status make_spans(const int32_t *idx, int64_t n, int64_t S, uint8_t *seen, const char *name,
                             h3_span **out, int64_t *ns, dit_error *err) {
  *out = NULL, *ns = 0;
  if (!n) return DIT_OK;
  if (!idx) return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: no %s indices", name);
  h3_span *s = malloc((size_t)n * sizeof *s);
  if (!s) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    if (idx[i] < 0 || idx[i] >= S || seen[idx[i]]) {
      free(s);
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: %s row %lld goes to packed row %d, %s", name,
                        (long long)i, idx[i], idx[i] < 0 || idx[i] >= S ? "outside the sequence" : "already placed");
    }
    seen[idx[i]] = 1;
    if (k && s[k - 1].dst + s[k - 1].len == idx[i]) s[k - 1].len++;
    else s[k++] = (h3_span){i, idx[i], 1};
  }
  *out = s, *ns = k;
  return DIT_OK;
}

/* Each call timestep's row of the modulation tables: its own index, or its place in the fold. */
static dit_status timestep_map(const dit_h3 *m, const dit_h3_call *c, int *map, dit_error *err) {
  for (int i = 0; i < c->n_timesteps; i++) {
    map[i] = m->fold ? -1 : i;
    for (int j = 0; m->fold && j < m->n_fold; j++)
      if (m->fold_t[j] == c->timesteps[i]) map[i] = j;
    if (map[i] < 0)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: timestep %.9g is not one of the %d the "
                        "modulation was folded for (fold the request's schedule again)", (double)c->timesteps[i],
                        m->n_fold);
  }
  return DIT_OK;
}

static dit_status check_call(const dit_h3 *m, const dit_h3_call *c, h3_layout *l, dit_error *err) {
  memset(l, 0, sizeof *l);
  if (!c || !c->text || !c->video || !c->timesteps || !c->timestep_index || !c->tags || !c->positions ||
      (c->n_audio && !c->audio))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: a NULL input");
  const int64_t S = c->n_text + c->n_video + c->n_audio;
  if (c->n_text < 1 || c->n_video < 1 || c->n_audio < 0 || S > MAX_ROWS || c->n_timesteps < 1 ||
      c->n_timesteps > MAX_TIMESTEPS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: %lld text, %lld video, %lld audio rows or %d "
                      "timesteps out of range", (long long)c->n_text, (long long)c->n_video, (long long)c->n_audio,
                      c->n_timesteps);
  for (int i = 0; i < c->n_timesteps; i++)
    if (!isfinite(c->timesteps[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: timestep %d is not finite", i);
  for (int64_t i = 0; i < S; i++) {
    if (c->tags[i] < 0 || c->tags[i] >= DIT_H3_MODALITIES || c->timestep_index[i] < 0 ||
        c->timestep_index[i] >= c->n_timesteps)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: row %lld has tag %d, timestep index %d",
                        (long long)i, c->tags[i], c->timestep_index[i]);
    for (int a = 0; a < 3; a++)
      if (!isfinite(c->positions[i * 3 + a]) || fabs(c->positions[i * 3 + a]) > 1e7)
        return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: row %lld's position is not a finite value "
                          "below 1e7", (long long)i);
  }
  int map[MAX_TIMESTEPS];
  DIT_TRY(timestep_map(m, c, map, err));
  uint8_t *seen = calloc((size_t)S, 1);
  if (!seen) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  l->S = S;
  const int32_t *idx[3] = {c->text_index, c->video_index, c->audio_index};
  const int64_t n[3] = {c->n_text, c->n_video, c->n_audio};
  const char *names[3] = {"text", "video", "audio"};
  dit_status s = DIT_OK;
  for (int i = 0; s == DIT_OK && i < 3; i++)
    s = make_spans(idx[i], n[i], S, seen, names[i], &l->spans[i], &l->n_spans[i], err);
  free(seen); /* S rows claimed once each by S indices: every row is placed */
  if (s == DIT_OK) s = make_runs(c, map, S, true, &l->mod_runs, &l->n_mod, err);
  if (s == DIT_OK) s = make_runs(c, map, S, false, &l->out_runs, &l->n_out, err);
  if (s != DIT_OK) layout_free(l);
  return s;
}

static dit_status plan(dit_arena *ar, bool real, const dit_h3 *m, const dit_h3_call *c, int64_t S, h3_acts *a,
                       dit_error *err) {
  const dit_h3_config *g = &m->cfg;
  const size_t es = m->as.es, H = (size_t)g->hidden, I = (size_t)g->heads * (size_t)g->head_dim, F = (size_t)g->ffn;
  const size_t R = (size_t)S, nt = (size_t)c->n_timesteps, f4 = sizeof(float);
  DIT_ACT_TAKE(ar, real, a->x, R * H * es);
  DIT_ACT_TAKE(ar, real, a->h, R * H * es);
  DIT_ACT_TAKE(ar, real, a->r, R * H * es);
  DIT_ACT_TAKE(ar, real, a->q, R * I * es);
  DIT_ACT_TAKE(ar, real, a->k, R * I * es);
  DIT_ACT_TAKE(ar, real, a->v, R * I * es);
  DIT_ACT_TAKE(ar, real, a->o, R * I * es);
  DIT_ACT_TAKE(ar, real, a->ffa, R * F * es);
  DIT_ACT_TAKE(ar, real, a->ffb, R * F * es);
  const int64_t n[3] = {c->n_text, c->n_video, c->n_audio};
  const int64_t w[3] = {g->text_dim, g->patch_dim, g->audio_channels};
  for (int i = 0; i < 3; i++) {
    a->in[i] = a->proj[i] = NULL;
    if (!n[i]) continue;
    DIT_ACT_TAKE(ar, real, a->in[i], (size_t)(n[i] * w[i]) * f4);
    DIT_ACT_TAKE(ar, real, a->proj[i], (size_t)n[i] * H * es);
  }
  DIT_ACT_TAKE(ar, real, a->cos, R * (size_t)(3 * g->rope_freq_dim) * f4);
  DIT_ACT_TAKE(ar, real, a->sin, R * (size_t)(3 * g->rope_freq_dim) * f4);
  DIT_ACT_TAKE(ar, real, a->tt, nt * f4);
  DIT_ACT_TAKE(ar, real, a->sinus, nt * (size_t)g->freq_dim * es);
  DIT_ACT_TAKE(ar, real, a->t1, nt * (size_t)g->time_hidden * es);
  DIT_ACT_TAKE(ar, real, a->temb, nt * (size_t)g->time_dim * es);
  DIT_ACT_TAKE(ar, real, a->stemb, nt * (size_t)g->time_dim * es);
  DIT_ACT_TAKE(ar, real, a->mod, nt * DIT_H3_MODALITIES * 6 * H * es);
  DIT_ACT_TAKE(ar, real, a->omod, nt * 2 * H * es);
  DIT_ACT_TAKE(ar, real, a->vo, R * (size_t)g->patch_dim * f4);
  DIT_ACT_TAKE(ar, real, a->ao, R * (size_t)g->audio_channels * f4);
  return DIT_OK;
}

/* RoPE tables [S, 3 R]: angle = (float)position[axis] * inv_freq[j], axes t | h | w (diffusers casts the
 * float64 positions to float32 and computes in float32). */
static dit_status upload_rope(dit_h3 *m, const dit_h3_call *c, int64_t S, const h3_acts *a, dit_error *err) {
  const int R = m->cfg.rope_freq_dim, W = 3 * R;
  float *tab = malloc((size_t)(2 * S * W) * sizeof *tab), inv[256];
  if (!tab) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for RoPE tables");
  for (int j = 0; j < R; j++) /* 1 / theta^(2j / 2R), the exponent and power in float32 as torch */
    inv[j] = 1.0f / powf((float)m->cfg.rope_theta, (float)(2 * j) / (float)(2 * R));
  for (int64_t i = 0; i < S; i++)
    for (int ax = 0; ax < 3; ax++) {
      const float p = (float)c->positions[i * 3 + ax];
      for (int j = 0; j < R; j++) {
        const float ang = p * inv[j];
        tab[i * W + ax * R + j] = cosf(ang);
        tab[S * W + i * W + ax * R + j] = sinf(ang);
      }
    }
  dit_backend *be = m->be;
  dit_status s = be->ops->upload(be, a->cos, tab, (size_t)(S * W) * sizeof *tab, err);
  if (s == DIT_OK) s = be->ops->upload(be, a->sin, tab + S * W, (size_t)(S * W) * sizeof *tab, err);
  free(tab);
  return s;
}

/* Full attention of q, k, v [1, M, heads, hd] into o. On a GPU with F32 activations the three are rounded to
 * bf16 first and the output read back, as diffusers' bf16 run computes attention: the fused bf16 kernel
 * (cuDNN's) instead of the F32 one, which at the released geometry took 565 of an 884 ms forward (H100,
 * 2048^2). The MLP's buffers, idle during attention, hold the bf16 copies (q and k in ffa, v and o in ffb: room
 * for them when I <= F, as released). The CPU stays F32 throughout (the float32 reference). */
static dit_status attend(dit_h3 *m, const dit_tensor *q, const dit_tensor *k, const dit_tensor *v, dit_tensor *o,
                         const h3_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_act_space *as = &m->as;
  const float scale = 1.0f / sqrtf((float)m->cfg.head_dim);
  const int64_t n = dit_tensor_numel(q);
  if (dit_backend_is_host(be) || as->adt != DIT_F32 || m->cfg.heads * m->cfg.head_dim > m->cfg.ffn ||
      m->cfg.head_dim % 8)
    return dit_op_attention(be, o, q, k, v, NULL, scale, false, err);
  dit_tensor qb = dit_act_mk(as, DIT_BF16, a->ffa, 4, q->shape);
  dit_tensor kb = dit_act_mk(as, DIT_BF16, (uint16_t *)a->ffa + n, 4, q->shape);
  dit_tensor vb = dit_act_mk(as, DIT_BF16, a->ffb, 4, q->shape);
  dit_tensor ob = dit_act_mk(as, DIT_BF16, (uint16_t *)a->ffb + n, 4, q->shape);
  DIT_TRY(dit_op_copy(be, &qb, q, err));
  DIT_TRY(dit_op_copy(be, &kb, k, err));
  DIT_TRY(dit_op_copy(be, &vb, v, err));
  DIT_TRY(dit_op_attention(be, &ob, &qb, &kb, &vb, NULL, scale, false, err));
  return dit_op_copy(be, o, &ob, err);
}

/* MiniMaxH3Attention on a->h rows [M, H] (normed input) into out [M, H]: q/k/v, per-head RMSNorm on q and k,
 * rotate-half RoPE on each head's first 6 R channels when rope, full attention, to_out. */
static dit_status attention(dit_h3 *m, const h3_attn_w *w, int64_t M, bool rope, const h3_acts *a, void *out,
                            dit_error *err) {
  dit_backend *be = m->be;
  const dit_act_space *as = &m->as;
  const dit_h3_config *g = &m->cfg;
  const int64_t H = g->hidden, nh = g->heads, hd = g->head_dim, I = nh * hd;
  dit_tensor h = dit_act_2d(as, a->h, M, H), q = dit_act_2d(as, a->q, M, I), k = dit_act_2d(as, a->k, M, I);
  dit_tensor v = dit_act_2d(as, a->v, M, I);
  DIT_TRY(dit_op_linear(be, &q, &h, &w->to_q, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &h, &w->to_k, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, &h, &w->to_v, NULL, DIT_ACT_NONE, err));
  dit_tensor qr = dit_act_2d(as, a->q, M * nh, hd), kr = dit_act_2d(as, a->k, M * nh, hd);
  DIT_TRY(dit_op_rms_norm(be, &qr, &qr, &w->norm_q, g->qk_norm_eps, err));
  DIT_TRY(dit_op_rms_norm(be, &kr, &kr, &w->norm_k, g->qk_norm_eps, err));
  if (rope) { /* the rotated channels of every head: a strided [1, M, heads, 6 R] view */
    const int64_t W = 3 * g->rope_freq_dim;
    dit_tensor cs = dit_act_mk(as, DIT_F32, a->cos, 2, (int64_t[]){M, W});
    dit_tensor sn = dit_act_mk(as, DIT_F32, a->sin, 2, (int64_t[]){M, W});
    for (int t = 0; t < 2; t++) {
      dit_tensor x = dit_act_4d(as, t ? a->k : a->q, 1, M, nh, 2 * W);
      x.stride[0] = M * I, x.stride[1] = I, x.stride[2] = hd, x.stride[3] = 1;
      DIT_TRY(dit_op_rope(be, &x, &cs, &sn, DIT_ROPE_HALF, err));
    }
  }
  dit_tensor q4 = dit_act_4d(as, a->q, 1, M, nh, hd), k4 = dit_act_4d(as, a->k, 1, M, nh, hd);
  dit_tensor v4 = dit_act_4d(as, a->v, 1, M, nh, hd), o4 = dit_act_4d(as, a->o, 1, M, nh, hd);
  DIT_TRY(attend(m, &q4, &k4, &v4, &o4, a, err));
  dit_tensor o = dit_act_2d(as, a->o, M, I), y = dit_act_2d(as, out, M, H);
  return dit_op_linear(be, &y, &o, &w->to_out, NULL, DIT_ACT_NONE, err);
}

/* The SwiGLU MLP of a->h rows [M, H] into out [M, H]: value * silu(gate), down. */
static dit_status mlp(dit_h3 *m, const h3_block_w *b, int64_t M, const h3_acts *a, void *out, dit_error *err) {
  dit_backend *be = m->be;
  const dit_act_space *as = &m->as;
  const int64_t H = m->cfg.hidden, F = m->cfg.ffn;
  dit_tensor h = dit_act_2d(as, a->h, M, H), fa = dit_act_2d(as, a->ffa, M, F), fb = dit_act_2d(as, a->ffb, M, F);
  dit_tensor y = dit_act_2d(as, out, M, H);
  DIT_TRY(dit_op_linear(be, &fa, &h, &b->ff_gate, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &fb, &h, &b->ff_value, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_swiglu(be, &fa, &fa, &fb, err));
  return dit_op_linear(be, &y, &fa, &b->ff_down, NULL, DIT_ACT_NONE, err);
}

/* The token refiner on the text stream t [n, H] in place, then its final RMSNorm. */
static dit_status refine(dit_h3 *m, int64_t n, void *t, const h3_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_h3_config *g = &m->cfg;
  dit_tensor x = dit_act_2d(&m->as, t, n, g->hidden), h = dit_act_2d(&m->as, a->h, n, g->hidden);
  for (int i = 0; i < g->refiner_layers; i++) {
    const h3_block_w *b = &m->w.refiner[i];
    dit_tensor r = dit_act_2d(&m->as, a->r, n, g->hidden);
    DIT_TRY(dit_op_rms_norm(be, &h, &x, &b->norm1, g->norm_eps, err));
    DIT_TRY(attention(m, &b->attn, n, false, a, a->r, err));
    DIT_TRY(dit_op_add(be, &x, &x, &r, err));
    DIT_TRY(dit_op_rms_norm(be, &h, &x, &b->norm2, g->norm_eps, err));
    DIT_TRY(mlp(m, b, n, a, a->r, err));
    DIT_TRY(dit_op_add(be, &x, &x, &r, err));
  }
  return dit_op_rms_norm(be, &x, &x, &m->w.refiner_norm, g->final_norm_eps, err);
}

/* A [1, H] row of a modulation table: row r of width `width`, at column `col`. */
static dit_tensor mod_vec(const dit_h3 *m, void *table, int64_t r, int64_t width, int64_t col) {
  return dit_act_2d(&m->as, dit_act_el(&m->as, table, r * width + col), 1, m->cfg.hidden);
}

/* Per run of rows sharing a modulation row: x += gate * r (when r), then h = RMSNorm(x) * w * (1 + scale) +
 * shift (when h): the six vectors of row key sit at columns 0..5 H of the block's [n_t * 3, 6 H] table
 * (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp). g, sc, sh: which of them. */
static dit_status mod_runs(dit_h3 *m, const h3_layout *l, const h3_acts *a, void *mod, void *r, int g, bool h,
                           const dit_tensor *w, int sc, int sh, dit_error *err) {
  const int64_t H = m->cfg.hidden;
  for (int64_t i = 0; i < l->n_mod; i++) {
    const h3_run *u = &l->mod_runs[i];
    dit_tensor x = dit_act_3d(&m->as, dit_act_el(&m->as, a->x, u->start * H), 1, u->len, H);
    dit_tensor rr = dit_act_3d(&m->as, r ? dit_act_el(&m->as, r, u->start * H) : NULL, 1, u->len, H);
    dit_tensor hh = dit_act_3d(&m->as, dit_act_el(&m->as, a->h, u->start * H), 1, u->len, H);
    dit_tensor gv = mod_vec(m, mod, u->key, 6 * H, g * H), scv = mod_vec(m, mod, u->key, 6 * H, sc * H);
    dit_tensor shv = mod_vec(m, mod, u->key, 6 * H, sh * H);
    DIT_TRY(dit_op_residual_rms_mod(m->be, &x, r ? &rr : NULL, r ? &gv : NULL, h ? &hh : NULL, w, &scv, &shv,
                                    m->cfg.norm_eps, err));
  }
  return DIT_OK;
}

/* out = adaln_proj of block i on st: the mapped weights as they are on the CPU; on a device, the block's
 * weight and bias uploaded into the scratch first (after the previous use of it has run). */
static dit_status ada_linear(dit_h3 *m, int i, const dit_tensor *st, dit_tensor *out, dit_error *err) {
  dit_backend *be = m->be;
  const h3_block_w *b = &m->w.blocks[i];
  if (dit_backend_is_host(be)) return dit_op_linear(be, out, st, &b->ada_w, &b->ada_b, DIT_ACT_NONE, err);
  if (!m->ada_scratch) DIT_TRY(be->ops->alloc(be, m->ada_block_bytes, &m->ada_scratch, err));
  const size_t wb = dit_tensor_nbytes(&b->ada_w), off = (wb + 255) / 256 * 256;
  DIT_TRY(be->ops->sync(be, err));
  DIT_TRY(be->ops->upload(be, m->ada_scratch, b->ada_w.data, wb, err));
  DIT_TRY(be->ops->upload(be, (char *)m->ada_scratch + off, b->ada_b.data, dit_tensor_nbytes(&b->ada_b), err));
  dit_tensor w = dit_act_mk(&m->as, b->ada_w.dtype, m->ada_scratch, 2, b->ada_w.shape);
  w.scale = b->ada_w.scale; /* a scaled fp8 file's */
  dit_tensor bias = dit_act_mk(&m->as, b->ada_b.dtype, (char *)m->ada_scratch + off, 1, b->ada_b.shape);
  return dit_op_linear(be, out, st, &w, &bias, DIT_ACT_NONE, err);
}

/* Block i's modulation table [n_t * 3, 6 H]: from the fold, or adaln_proj(SiLU(temb)) into a->mod. */
static dit_status block_table(dit_h3 *m, int i, int nt, const h3_acts *a, void **mod, dit_error *err) {
  const dit_h3_config *g = &m->cfg;
  const int64_t A = (int64_t)DIT_H3_MODALITIES * 6 * g->hidden;
  if (m->fold) {
    *mod = dit_act_el(&m->as, m->fold, (int64_t)i * m->n_fold * A);
    return DIT_OK;
  }
  *mod = a->mod;
  dit_tensor st = dit_act_2d(&m->as, a->stemb, nt, g->time_dim), t = dit_act_2d(&m->as, a->mod, nt, A);
  return ada_linear(m, i, &st, &t, err);
}

/* One block: its modulation table, then the two modulated branches. */
static dit_status block(dit_h3 *m, int i, const h3_layout *l, int nt, const h3_acts *a, dit_error *err) {
  const h3_block_w *b = &m->w.blocks[i];
  void *mod = NULL;
  DIT_TRY(block_table(m, i, nt, a, &mod, err));
  DIT_TRY(mod_runs(m, l, a, mod, NULL, 2, true, &b->norm1, 1, 0, err));
  DIT_TRY(attention(m, &b->attn, l->S, true, a, a->r, err));
  DIT_TRY(mod_runs(m, l, a, mod, a->r, 2, true, &b->norm2, 4, 3, err));
  DIT_TRY(mlp(m, b, l->S, a, a->r, err));
  return mod_runs(m, l, a, mod, a->r, 5, false, NULL, 4, 3, err);
}

/* One modality's rows uploaded (F32) and projected into a->proj[i]; the text then refined. */
static dit_status project(dit_h3 *m, const dit_h3_call *c, int i, const h3_acts *a, dit_error *err) {
  const dit_h3_config *g = &m->cfg;
  const h3_weights *w = &m->w;
  const int64_t n[3] = {c->n_text, c->n_video, c->n_audio}, wd[3] = {g->text_dim, g->patch_dim, g->audio_channels};
  const float *src[3] = {c->text, c->video, c->audio};
  const dit_tensor *pw[3] = {&w->ctx_w, &w->proj_in_w, &w->aproj_in_w};
  const dit_tensor *pb[3] = {&w->ctx_b, &w->proj_in_b, &w->aproj_in_b};
  if (!n[i]) return DIT_OK;
  DIT_TRY(m->be->ops->upload(m->be, a->in[i], src[i], (size_t)(n[i] * wd[i]) * sizeof(float), err));
  dit_tensor in = dit_act_mk(&m->as, DIT_F32, a->in[i], 2, (int64_t[]){n[i], wd[i]});
  dit_tensor out = dit_act_2d(&m->as, a->proj[i], n[i], g->hidden);
  DIT_TRY(dit_op_linear(m->be, &out, &in, pw[i], pb[i], DIT_ACT_NONE, err));
  return i == 0 ? refine(m, n[0], a->proj[0], a, err) : DIT_OK;
}

/* Each modality's projected rows into their packed positions of a->x. */
static dit_status place(dit_h3 *m, const h3_layout *l, const h3_acts *a, dit_error *err) {
  const int64_t H = m->cfg.hidden;
  for (int i = 0; i < 3; i++)
    for (int64_t k = 0; k < l->n_spans[i]; k++) {
      const h3_span *sp = &l->spans[i][k];
      dit_tensor src = dit_act_2d(&m->as, dit_act_el(&m->as, a->proj[i], sp->src * H), sp->len, H);
      dit_tensor dst = dit_act_2d(&m->as, dit_act_el(&m->as, a->x, sp->dst * H), sp->len, H);
      DIT_TRY(dit_op_copy(m->be, &dst, &src, err));
    }
  return DIT_OK;
}

/* temb = time_embedder(time_proj(t)) per distinct timestep, and SiLU(temb), which every modulation reads. */
static dit_status time_embed(dit_h3 *m, const dit_h3_call *c, const h3_acts *a, dit_error *err) {
  dit_backend *be = m->be;
  const dit_h3_config *g = &m->cfg;
  const h3_weights *w = &m->w;
  const int64_t nt = c->n_timesteps;
  DIT_TRY(be->ops->upload(be, a->tt, c->timesteps, (size_t)nt * sizeof(float), err));
  dit_tensor tt = dit_act_mk(&m->as, DIT_F32, a->tt, 1, (int64_t[]){nt});
  dit_tensor sn = dit_act_2d(&m->as, a->sinus, nt, g->freq_dim), t1 = dit_act_2d(&m->as, a->t1, nt, g->time_hidden);
  dit_tensor te = dit_act_2d(&m->as, a->temb, nt, g->time_dim), st = dit_act_2d(&m->as, a->stemb, nt, g->time_dim);
  DIT_TRY(dit_op_timestep_embedding(be, &sn, &tt, g->freq_dim, TIME_MAX_PERIOD, 0.0f, 1.0f, true, err));
  DIT_TRY(dit_op_linear(be, &t1, &sn, &w->t1_w, &w->t1_b, DIT_ACT_SILU, err));
  DIT_TRY(dit_op_linear(be, &te, &t1, &w->t2_w, &w->t2_b, DIT_ACT_NONE, err));
  return dit_op_activation(be, &st, &te, DIT_ACT_SILU, err);
}

/* norm_out (RMSNorm, then shift / scale of each row's timestep: [shift | scale] per timestep), both heads
 * over every row, and each modality's rows picked out on the host. */
static dit_status epilogue(dit_h3 *m, const dit_h3_call *c, const h3_layout *l, const h3_acts *a, float *vout,
                           float *aout, dit_error *err) {
  dit_backend *be = m->be;
  const dit_h3_config *g = &m->cfg;
  const h3_weights *w = &m->w;
  const int64_t H = g->hidden, S = l->S, pd = g->patch_dim, ac = g->audio_channels;
  void *omod = a->omod; /* [n_t, 2 H]: shift | scale per timestep */
  if (m->fold) {
    omod = dit_act_el(&m->as, m->fold, (int64_t)g->layers * m->n_fold * DIT_H3_MODALITIES * 6 * H);
  } else {
    dit_tensor st = dit_act_2d(&m->as, a->stemb, c->n_timesteps, g->time_dim);
    dit_tensor om = dit_act_2d(&m->as, a->omod, c->n_timesteps, 2 * H);
    DIT_TRY(dit_op_linear(be, &om, &st, &w->out_w, &w->out_b, DIT_ACT_NONE, err));
  }
  for (int64_t i = 0; i < l->n_out; i++) {
    const h3_run *u = &l->out_runs[i];
    dit_tensor x = dit_act_3d(&m->as, dit_act_el(&m->as, a->x, u->start * H), 1, u->len, H);
    dit_tensor h = dit_act_3d(&m->as, dit_act_el(&m->as, a->h, u->start * H), 1, u->len, H);
    dit_tensor shift = mod_vec(m, omod, u->key, 2 * H, 0), scale = mod_vec(m, omod, u->key, 2 * H, H);
    DIT_TRY(dit_op_residual_rms_mod(be, &x, NULL, NULL, &h, &w->out_norm, &scale, &shift, g->final_norm_eps, err));
  }
  dit_tensor h = dit_act_2d(&m->as, a->h, S, H);
  dit_tensor vo = dit_act_mk(&m->as, DIT_F32, a->vo, 2, (int64_t[]){S, pd});
  dit_tensor ao = dit_act_mk(&m->as, DIT_F32, a->ao, 2, (int64_t[]){S, ac});
  DIT_TRY(dit_op_linear(be, &vo, &h, &w->proj_out_w, &w->proj_out_b, DIT_ACT_NONE, err));
  if (c->n_audio) DIT_TRY(dit_op_linear(be, &ao, &h, &w->aproj_out_w, &w->aproj_out_b, DIT_ACT_NONE, err));
  const int64_t cols = c->n_audio && ac > pd ? ac : pd;
  float *all = malloc((size_t)(S * cols) * sizeof *all);
  if (!all) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for the outputs");
  dit_status s = be->ops->download(be, all, a->vo, (size_t)(S * pd) * sizeof *all, err);
  for (int64_t i = 0; s == DIT_OK && i < c->n_video; i++)
    memcpy(vout + i * pd, all + (int64_t)c->video_index[i] * pd, (size_t)pd * sizeof *all);
  if (s == DIT_OK && c->n_audio) s = be->ops->download(be, all, a->ao, (size_t)(S * ac) * sizeof *all, err);
  for (int64_t i = 0; s == DIT_OK && i < c->n_audio; i++)
    memcpy(aout + i * ac, all + (int64_t)c->audio_index[i] * ac, (size_t)ac * sizeof *all);
  free(all);
  return s;
}

/* The host memory a call allocates beyond the activation space, at its peak: the layout's spans and runs
 * (at most one per row each: check_call, make_spans, make_runs), then the largest of the RoPE tables
 * (upload_rope), the attention's workspace (att bytes, while it runs) and the downloaded outputs (epilogue). */
static size_t call_host_bytes(const dit_h3_config *g, int64_t S, bool audio, size_t att) {
  const size_t rows = (size_t)S, cols = (size_t)(audio && g->audio_channels > g->patch_dim ? g->audio_channels
                                                                                           : g->patch_dim);
  const size_t layout = rows * sizeof(h3_span) + 2 * rows * sizeof(h3_run);
  const size_t rope = 2 * rows * (size_t)(3 * g->rope_freq_dim) * sizeof(float), outs = rows * cols * sizeof(float);
  const size_t most = rope > outs ? rope : outs;
  return layout + (att > most ? att : most);
}

/* Plans the call's buffers: measures, fits the activation space, then binds them. */
static dit_status bind(dit_h3 *m, const dit_h3_call *c, int64_t S, h3_acts *a, dit_error *err) {
  dit_arena ar;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, false, m, c, S, a, err));
  DIT_TRY(dit_act_space_fit(&m->as, m->be, &ar, 0, &(bool){false}, err));
  return plan(&ar, true, m, c, S, a, err);
}

dit_status dit_h3_forward(dit_h3 *m, const dit_h3_call *c, float *video_out, float *audio_out, dit_error *err) {
  if (!m || !video_out || (c && c->n_audio && !audio_out))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 forward: NULL argument");
  h3_layout l;
  DIT_TRY(check_call(m, c, &l, err));
  h3_acts a;
  dit_status s = bind(m, c, l.S, &a, err);
  if (s == DIT_OK) s = upload_rope(m, c, l.S, &a, err);
  if (s == DIT_OK && !m->fold) s = time_embed(m, c, &a, err);
  for (int i = 0; s == DIT_OK && i < 3; i++) s = project(m, c, i, &a, err);
  if (s == DIT_OK) s = place(m, &l, &a, err);
  for (int i = 0; s == DIT_OK && i < m->cfg.layers; i++) {
    s = block(m, i, &l, c->n_timesteps, &a, err);
    if (s != DIT_OK) dit_error_prefix(err, "minimax-h3 block %d", i);
  }
  if (s == DIT_OK) s = epilogue(m, c, &l, &a, video_out, audio_out, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  layout_free(&l);
  return s;
}

double dit_h3_flops(const dit_h3_config *g, int64_t n_text, int64_t n_video, int64_t n_audio) {
  const double H = g->hidden, I = (double)g->heads * g->head_dim, F = g->ffn, t = (double)n_text;
  const double S = t + (double)n_video + (double)n_audio, row = 2.0 * (4.0 * H * I + 3.0 * F * H);
  const double io = 2.0 * H * (t * g->text_dim + (double)n_video * g->patch_dim + (double)n_audio * g->audio_channels +
                               S * (g->patch_dim + g->audio_channels));
  return g->refiner_layers * (t * row + 4.0 * t * t * I) + g->layers * (S * row + 4.0 * S * S * I) + io;
}

/* The fold's tables: every block's [n, 3 x 6 H] and norm_out's [n, 2 H] (activation dtype). */
static size_t fold_bytes(const dit_h3 *m, int n) {
  const dit_h3_config *g = &m->cfg;
  return ((size_t)g->layers * DIT_H3_MODALITIES * 6 + 2) * (size_t)n * (size_t)g->hidden * m->as.es;
}

dit_status dit_h3_cost(const dit_h3 *m, int64_t n_text, int64_t n_video, int64_t n_audio, int n_fold, dit_cost *out,
                       dit_error *err) {
  if (!m || !out || n_text < 1 || n_video < 1 || n_audio < 0 || n_fold < 1 || n_fold > MAX_FOLD ||
      n_text + n_video + n_audio > MAX_ROWS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 cost: bad arguments");
  const dit_h3_config *g = &m->cfg;
  const int64_t S = n_text + n_video + n_audio;
  const dit_h3_call c = {.n_text = n_text, .n_video = n_video, .n_audio = n_audio, .n_timesteps = 2};
  const dit_h3_call f = {.n_timesteps = n_fold}; /* the fold's own pass (one row, every timestep) */
  dit_arena ar, af;
  h3_acts a;
  dit_arena_init_measure(&ar);
  dit_arena_init_measure(&af);
  DIT_TRY(plan(&ar, false, m, &c, S, &a, err));
  DIT_TRY(plan(&af, false, m, &f, 1, &a, err));
  const size_t space = ar.peak > af.peak ? ar.peak : af.peak;
  const size_t att = dit_cpu_attention_workspace(m->be, 1, S, S, g->heads, g->head_dim);
  const size_t host = call_host_bytes(g, S, n_audio > 0, att);
  out->act_bytes = space + fold_bytes(m, n_fold) + (host + 63) / 64 * 64;
  out->flops = dit_h3_flops(g, n_text, n_video, n_audio);
  return DIT_OK;
}

dit_status dit_h3_refine_text(dit_h3 *m, int64_t n, const float *text, float *out, dit_error *err) {
  if (!m || !text || !out || n < 1 || n > MAX_ROWS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 refine: bad arguments");
  const float t0 = 0.0f;
  const dit_h3_call c = {.n_text = n, .text = text, .n_timesteps = 1, .timesteps = &t0};
  h3_acts a;
  DIT_TRY(bind(m, &c, n, &a, err));
  DIT_TRY(project(m, &c, 0, &a, err));
  DIT_TRY(m->be->ops->sync(m->be, err));
  const dit_h3_config *g = &m->cfg;
  if (m->as.adt == DIT_F32)
    return m->be->ops->download(m->be, out, a.proj[0], (size_t)(n * g->hidden) * sizeof(float), err);
  dit_tensor src = dit_act_2d(&m->as, a.proj[0], n, g->hidden), dst = dit_act_mk(&m->as, DIT_F32, a.r, 2,
                                                                                  (int64_t[]){n, g->hidden});
  DIT_TRY(dit_op_copy(m->be, &dst, &src, err));
  return m->be->ops->download(m->be, out, a.r, (size_t)(n * g->hidden) * sizeof(float), err);
}

dit_status dit_h3_set_act_dtype(dit_h3 *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: no model");
  if (m->fold && dt != m->as.adt)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: the activation dtype changes while the modulation is "
                      "folded (its tables are in the old dtype): set it before folding");
  bool changed = false; /* nothing but the activation space depends on it: the RoPE tables are made per call */
  return dit_act_space_set_dtype(&m->as, m->be, dt, "minimax-h3", &changed, err);
}

void dit_h3_unfold(dit_h3 *m) {
  if (!m) return;
  if (m->fold) m->be->ops->free(m->be, m->fold);
  free(m->fold_t);
  m->fold = NULL, m->fold_t = NULL, m->n_fold = 0;
}

/* The tables of the fold for n timesteps into block (see dit_h3_fold), timed by the caller. */
static dit_status fold_tables(dit_h3 *m, int n, const float *ts, void *block, dit_error *err) {
  const dit_h3_config *g = &m->cfg;
  const int64_t A = (int64_t)DIT_H3_MODALITIES * 6 * g->hidden;
  const dit_h3_call c = {.n_timesteps = n, .timesteps = ts};
  h3_acts a;
  DIT_TRY(bind(m, &c, 1, &a, err));
  DIT_TRY(time_embed(m, &c, &a, err));
  dit_tensor st = dit_act_2d(&m->as, a.stemb, n, g->time_dim);
  for (int i = 0; i < g->layers; i++) {
    dit_tensor t = dit_act_2d(&m->as, dit_act_el(&m->as, block, (int64_t)i * n * A), n, A);
    DIT_TRY(ada_linear(m, i, &st, &t, err));
  }
  dit_tensor o = dit_act_2d(&m->as, dit_act_el(&m->as, block, (int64_t)g->layers * n * A), n, 2 * g->hidden);
  DIT_TRY(dit_op_linear(m->be, &o, &st, &m->w.out_w, &m->w.out_b, DIT_ACT_NONE, err));
  return m->be->ops->sync(m->be, err);
}

dit_status dit_h3_fold(dit_h3 *m, int n, const float *timesteps, dit_h3_fold_info *info, dit_error *err) {
  if (!m || !timesteps || n < 1 || n > MAX_FOLD)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 fold: %d timesteps (1..%d)", n, MAX_FOLD);
  for (int i = 0; i < n; i++) {
    if (!isfinite(timesteps[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 fold: timestep %d is not finite", i);
    for (int j = 0; j < i; j++)
      if (timesteps[j] == timesteps[i])
        return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 fold: timestep %.9g is given twice",
                          (double)timesteps[i]);
  }
  dit_h3_unfold(m);
  const dit_h3_config *g = &m->cfg;
  const size_t bytes = fold_bytes(m, n);
  const double t0 = dit_time_now();
  void *block = NULL;
  float *ts = malloc((size_t)n * sizeof *ts);
  dit_status s = ts ? m->be->ops->alloc(m->be, bytes, &block, err)
                    : dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3 fold: out of memory");
  if (s == DIT_OK) s = fold_tables(m, n, timesteps, block, err);
  if (m->ada_scratch) m->be->ops->free(m->be, m->ada_scratch); /* folded forwards read no projection */
  m->ada_scratch = NULL;
  if (s != DIT_OK) {
    if (block) m->be->ops->free(m->be, block);
    free(ts);
    return s;
  }
  memcpy(ts, timesteps, (size_t)n * sizeof *ts);
  m->fold = block, m->fold_t = ts, m->n_fold = n;
  for (int i = 0; i < g->layers; i++) { /* the projections' pages leave the resident set (they stay mapped) */
    const h3_block_w *b = &m->w.blocks[i];
    dit_weights_release_pages(m->ada_files, b->ada_w.data, dit_tensor_nbytes(&b->ada_w));
    dit_weights_release_pages(m->ada_files, b->ada_b.data, dit_tensor_nbytes(&b->ada_b));
  }
  if (info) *info = (dit_h3_fold_info){bytes, m->ada_bytes, dit_time_now() - t0};
  return DIT_OK;
}
