/* LTX2TextConnectors (see ltx2_connectors.h). */
#include "models/ltx2_connectors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "io/json.h"
#include "models/act_space.h"
#include "models/ltx2_attn.h"
#include "models/ltx2_rope.h"
#include "models/model_weights.h"

#define CONN_EPS 1e-6f

typedef struct conn_block {
  dit_ltx2_attn attn;
  dit_tensor ff1, ff1_b, ff2, ff2_b; /* [4W, W], [4W], [W, 4W], [W] */
} conn_block;

typedef struct connector {
  dit_ltx2_connector_config cfg;
  int W;                /* heads * head_dim */
  dit_tensor registers; /* [R, W] */
  conn_block *blocks;
} connector;

struct dit_ltx2_connectors {
  dit_backend *be;
  dit_ltx2_connectors_config cfg;
  dit_model_weights w;
  dit_act_space as;
  dit_tensor proj, proj_b;   /* 2.0: text_proj_in [C, C*F] */
  dit_tensor vproj, vproj_b; /* 2.3: video_text_proj_in [Wv, C*F] */
  dit_tensor aproj, aproj_b; /* 2.3: audio_text_proj_in [Wa, C*F] */
  connector video, audio;
};

/* ---- config and weights ------------------------------------------------------------ */

static dit_status geti(const json_t *j, const char *key, int64_t lo, int64_t hi, int *v, const char *what,
                       dit_error *err) {
  int64_t x = *v;
  DIT_TRY(dit_json_int_opt(j, key, lo, hi, &x, what, err));
  *v = (int)x;
  return DIT_OK;
}

static dit_status parse_side(const json_t *j, const char *side, dit_ltx2_connector_config *c, const char *what,
                             dit_error *err) {
  char k[96];
  c->heads = 30, c->head_dim = 128, c->layers = 2, c->registers = 128, c->gated = false;
  snprintf(k, sizeof k, "%s_connector_num_attention_heads", side);
  DIT_TRY(geti(j, k, 1, 1024, &c->heads, what, err));
  snprintf(k, sizeof k, "%s_connector_attention_head_dim", side);
  DIT_TRY(geti(j, k, 2, 1024, &c->head_dim, what, err));
  snprintf(k, sizeof k, "%s_connector_num_layers", side);
  DIT_TRY(geti(j, k, 0, 256, &c->layers, what, err));
  snprintf(k, sizeof k, "%s_connector_num_learnable_registers", side);
  const json_t *r = json_object_get(j, k);
  if (r && json_is_null(r))
    c->registers = 0;
  else
    DIT_TRY(geti(j, k, 1, 1 << 20, &c->registers, what, err));
  snprintf(k, sizeof k, "%s_gated_attn", side);
  DIT_TRY(dit_json_bool_opt(j, k, &c->gated, what, err));
  if (c->head_dim % 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s_connector_attention_head_dim = %d must be even", what, side,
                      c->head_dim);
  return DIT_OK;
}

static dit_status parse_config(const json_t *j, dit_ltx2_connectors_config *c, const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  c->caption_channels = 3840, c->proj_in_factor = 49, c->rope_base_seq_len = 4096;
  c->rope_theta = 10000.0, c->rope_double_precision = true;
  c->video_hidden_dim = 4096, c->audio_hidden_dim = 2048;
  DIT_TRY(geti(j, "caption_channels", 1, 65536, &c->caption_channels, what, err));
  DIT_TRY(geti(j, "text_proj_in_factor", 1, 1024, &c->proj_in_factor, what, err));
  DIT_TRY(parse_side(j, "video", &c->video, what, err));
  DIT_TRY(parse_side(j, "audio", &c->audio, what, err));
  DIT_TRY(geti(j, "connector_rope_base_seq_len", 1, 1 << 24, &c->rope_base_seq_len, what, err));
  DIT_TRY(dit_json_double_opt(j, "rope_theta", &c->rope_theta, what, err));
  DIT_TRY(dit_json_bool_opt(j, "rope_double_precision", &c->rope_double_precision, what, err));
  DIT_TRY(dit_json_bool_opt(j, "per_modality_projections", &c->per_modality, what, err));
  DIT_TRY(geti(j, "video_hidden_dim", 1, 65536, &c->video_hidden_dim, what, err));
  DIT_TRY(geti(j, "audio_hidden_dim", 1, 65536, &c->audio_hidden_dim, what, err));
  DIT_TRY(dit_json_bool_opt(j, "proj_bias", &c->proj_bias, what, err));
  const char *rt = "interleaved";
  DIT_TRY(dit_json_string_opt(j, "rope_type", &rt, what, err));
  if (strcmp(rt, "split") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: rope_type \"%s\" is not supported (LTX-2's \"split\")", what, rt);
  if (!(c->rope_theta > 1.0) || c->rope_theta > 1e12)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rope_theta = %g must be in (1, 1e12]", what, c->rope_theta);
  int wv = c->video.heads * c->video.head_dim, wa = c->audio.heads * c->audio.head_dim;
  if (!c->per_modality && (wv != c->caption_channels || wa != c->caption_channels))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: the connectors' widths (%d, %d) must equal caption_channels (%d)", what,
                      wv, wa, c->caption_channels);
  if (c->per_modality && (wv != c->video_hidden_dim || wa != c->audio_hidden_dim))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: the connectors' widths (%d, %d) must equal video_hidden_dim (%d) and "
                      "audio_hidden_dim (%d)", what, wv, wa, c->video_hidden_dim, c->audio_hidden_dim);
  return DIT_OK;
}

static void side_table(dit_wtable *t, connector *s, const char *name) {
  char p[128];
  int64_t W = s->W;
  if (s->cfg.registers)
    dit_wtable_add(t, &s->registers, false, 2, (int64_t[]){s->cfg.registers, W}, "%s.learnable_registers", name);
  for (int i = 0; i < s->cfg.layers; i++) {
    conn_block *b = &s->blocks[i];
    snprintf(p, sizeof p, "%s.transformer_blocks.%d.attn1", name, i);
    dit_ltx2_attn_table(t, &b->attn, s->cfg.heads, s->cfg.head_dim, s->cfg.gated, W, W, p);
    dit_wtable_add(t, &b->ff1, false, 2, (int64_t[]){4 * W, W}, "%s.transformer_blocks.%d.ff.net.0.proj.weight", name, i);
    dit_wtable_add(t, &b->ff1_b, false, 1, (int64_t[]){4 * W}, "%s.transformer_blocks.%d.ff.net.0.proj.bias", name, i);
    dit_wtable_add(t, &b->ff2, false, 2, (int64_t[]){W, 4 * W}, "%s.transformer_blocks.%d.ff.net.2.weight", name, i);
    dit_wtable_add(t, &b->ff2_b, false, 1, (int64_t[]){W}, "%s.transformer_blocks.%d.ff.net.2.bias", name, i);
  }
}

static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  (void)err;
  dit_ltx2_connectors *m = model;
  const dit_ltx2_connectors_config *c = &m->cfg;
  dit_wtable_init(t);
  int64_t K = (int64_t)c->caption_channels * c->proj_in_factor;
  if (c->per_modality) {
    dit_wtable_add(t, &m->vproj, false, 2, (int64_t[]){m->video.W, K}, "video_text_proj_in.weight");
    dit_wtable_add(t, &m->aproj, false, 2, (int64_t[]){m->audio.W, K}, "audio_text_proj_in.weight");
    if (c->proj_bias) {
      dit_wtable_add(t, &m->vproj_b, false, 1, (int64_t[]){m->video.W}, "video_text_proj_in.bias");
      dit_wtable_add(t, &m->aproj_b, false, 1, (int64_t[]){m->audio.W}, "audio_text_proj_in.bias");
    }
  } else {
    dit_wtable_add(t, &m->proj, false, 2, (int64_t[]){c->caption_channels, K}, "text_proj_in.weight");
    if (c->proj_bias) dit_wtable_add(t, &m->proj_b, false, 1, (int64_t[]){c->caption_channels}, "text_proj_in.bias");
  }
  side_table(t, &m->video, "video_connector");
  side_table(t, &m->audio, "audio_connector");
  return DIT_OK;
}

static dit_status init_side(connector *s, const dit_ltx2_connector_config *c, dit_error *err) {
  s->cfg = *c;
  s->W = c->heads * c->head_dim;
  s->blocks = calloc((size_t)(c->layers ? c->layers : 1), sizeof *s->blocks);
  return s->blocks ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "ltx2 connectors: out of memory");
}

dit_status dit_ltx2_connectors_load(dit_backend *be, const char *dir, dit_ltx2_connectors **out, dit_error *err) {
  *out = NULL;
  if (!be || !dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 connectors: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("ltx2 connectors", dir, path, sizeof path, err));
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 1u << 20, &j, err));
  dit_ltx2_connectors *m = calloc(1, sizeof *m);
  if (!m) {
    json_decref(j);
    return dit_errorf(err, DIT_ERR_NOMEM, "ltx2 connectors: out of memory");
  }
  m->be = be;
  dit_act_space_init(&m->as, be);
  dit_status s = parse_config(j, &m->cfg, path, err);
  json_decref(j);
  if (s == DIT_OK) s = init_side(&m->video, &m->cfg.video, err);
  if (s == DIT_OK) s = init_side(&m->audio, &m->cfg.audio, err);
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->w, "LTX-2 text connectors", dir, build_table, m, true, err);
  DIT_HAND_OVER(s, m, out, dit_ltx2_connectors_free);
}

void dit_ltx2_connectors_free(dit_ltx2_connectors *m) {
  if (!m) return;
  dit_act_space_release(&m->as, m->be);
  dit_model_weights_release(m->be, &m->w);
  free(m->video.blocks);
  free(m->audio.blocks);
  free(m);
}

const dit_ltx2_connectors_config *dit_ltx2_connectors_get_config(const dit_ltx2_connectors *m) {
  return m ? &m->cfg : NULL;
}
int dit_ltx2_connectors_video_dim(const dit_ltx2_connectors *m) { return m ? m->video.W : 0; }
int dit_ltx2_connectors_audio_dim(const dit_ltx2_connectors *m) { return m ? m->audio.W : 0; }

/* ---- the text features' normalization (host) --------------------------------------- */

/* LTX-2.0's per_layer_masked_mean_norm over x [B, S, C, F] in place: per (batch, layer), the
 * mean and range over the real tokens' (s, c), (x - mean) / (max - min + eps) * 8; padded
 * rows become 0. The sums run in double (torch's fp32 reduction order is not reproducible). */
static void masked_mean_norm(float *x, int B, int S, int C, int F, const uint8_t *mask) {
  for (int b = 0; b < B; b++) {
    int n = 0;
    for (int s = 0; s < S; s++) n += mask[(size_t)b * S + s] != 0;
    for (int l = 0; l < F; l++) {
      double sum = 0.0;
      float lo = INFINITY, hi = -INFINITY;
      for (int s = 0; s < S; s++) {
        if (!mask[(size_t)b * S + s]) continue;
        const float *row = x + ((size_t)b * S + s) * (size_t)C * F;
        for (int c = 0; c < C; c++) {
          float v = row[(size_t)c * F + l];
          sum += v;
          lo = v < lo ? v : lo;
          hi = v > hi ? v : hi;
        }
      }
      float mean = (float)(sum / (double)((float)n * (float)C + 1e-6f));
      float range = (hi - lo) + 1e-6f;
      for (int s = 0; s < S; s++) {
        float *row = x + ((size_t)b * S + s) * (size_t)C * F;
        for (int c = 0; c < C; c++) {
          float *v = &row[(size_t)c * F + l];
          *v = mask[(size_t)b * S + s] ? (*v - mean) / range * 8.0f : 0.0f;
        }
      }
    }
  }
}

/* LTX-2.3's per_token_rms_norm: x [B, S, C, F], each (b, s, layer) over c: x / sqrt(mean(x^2) + eps);
 * padded rows become 0. */
static void token_rms_norm(float *x, int B, int S, int C, int F, const uint8_t *mask) {
  for (size_t r = 0; r < (size_t)B * S; r++) {
    float *row = x + r * (size_t)C * F;
    for (int l = 0; l < F; l++) {
      double ss = 0.0;
      for (int c = 0; c < C; c++) ss += (double)row[(size_t)c * F + l] * row[(size_t)c * F + l];
      float inv = 1.0f / sqrtf((float)(ss / C) + 1e-6f);
      for (int c = 0; c < C; c++) row[(size_t)c * F + l] = mask[r] ? row[(size_t)c * F + l] * inv : 0.0f;
    }
  }
}

/* ---- one connector ---------------------------------------------------------------- */

/* LTX2RotaryPosEmbed1d's angles [S, W/2] of positions pos[S] (s / rope_base_seq_len). */
static void rope_angles_1d(const dit_ltx2_connectors *m, int W, int S, const float *pos, float *angles) {
  dit_ltx2_rope_angles(pos, S, 1, W, m->cfg.rope_theta, m->cfg.rope_double_precision, angles);
}

typedef struct side_bufs {
  void *x, *h, *ff, *cos, *sin, *kmask;
  dit_ltx2_attn_scratch at;
} side_bufs;

static dit_status plan_side(dit_arena *ar, bool real, const connector *s, int64_t B, int64_t S, size_t es,
                            side_bufs *o, dit_error *err) {
  int64_t M = B * S, W = s->W;
  DIT_ACT_TAKE(ar, real, o->x, (size_t)(M * W) * es);
  DIT_ACT_TAKE(ar, real, o->h, (size_t)(M * W) * es);
  DIT_ACT_TAKE(ar, real, o->ff, (size_t)(M * 4 * W) * es);
  DIT_ACT_TAKE(ar, real, o->cos, (size_t)(S * W / 2) * sizeof(float));
  DIT_ACT_TAKE(ar, real, o->sin, (size_t)(S * W / 2) * sizeof(float));
  DIT_ACT_TAKE(ar, real, o->kmask, (size_t)M);
  size_t sz[DIT_LTX2_ATTN_SCRATCH];
  dit_ltx2_attn_scratch_sizes(&s->blocks[0].attn, M, M, es, sz);
  void **p[DIT_LTX2_ATTN_SCRATCH] = {&o->at.q, &o->at.k, &o->at.v, &o->at.o, &o->at.g};
  for (int i = 0; i < DIT_LTX2_ATTN_SCRATCH; i++) {
    *p[i] = NULL;
    if (sz[i]) DIT_ACT_TAKE(ar, real, *p[i], sz[i]);
  }
  return DIT_OK;
}

/* x's rows for batch b: the real tokens of P in order, then registers[p % R] (as the connector's
 * stable argsort and torch.where do), copied in runs. */
static dit_status place_registers(dit_ltx2_connectors *m, const connector *s, int B, int S, const float *P, void *x,
                                  const uint8_t *mask, dit_error *err) {
  const dit_act_space *as = &m->as;
  int64_t W = s->W, R = s->cfg.registers;
  for (int b = 0; b < B; b++) {
    int p = 0;
    for (int t = 0; t < S;) {
      if (!mask[(size_t)b * S + t]) {
        t++;
        continue;
      }
      int e = t;
      while (e < S && mask[(size_t)b * S + e]) e++;
      dit_tensor src = dit_act_mk(as, DIT_F32, (void *)(P + ((size_t)b * S + t) * W), 2, (int64_t[]){e - t, W});
      dit_tensor dst = dit_act_2d(as, dit_act_el(as, x, ((int64_t)b * S + p) * W), e - t, W);
      DIT_TRY(dit_op_copy(m->be, &dst, &src, err));
      p += e - t;
      t = e;
    }
    while (p < S) {
      int64_t r = p % R, n = R - r < S - p ? R - r : S - p;
      dit_tensor src = s->registers;
      src.data = (char *)src.data + (size_t)r * W * dit_dtype_size(src.dtype);
      src.shape[0] = n;
      dit_tensor dst = dit_act_2d(as, dit_act_el(as, x, ((int64_t)b * S + p) * W), n, W);
      DIT_TRY(dit_op_copy(m->be, &dst, &src, err));
      p += (int)n;
    }
  }
  return DIT_OK;
}

/* One connector on its projected input P [B, S, W] (F32, backend memory) into out. */
static dit_status run_side(dit_ltx2_connectors *m, const connector *s, int B, int S, const float *P,
                           const uint8_t *mask, const side_bufs *o, float *out, dit_error *err) {
  dit_backend *be = m->be;
  const dit_act_space *as = &m->as;
  int64_t M = (int64_t)B * S, W = s->W, heads = s->cfg.heads, D = s->cfg.head_dim;
  dit_tensor x = dit_act_2d(as, o->x, M, W), h = dit_act_2d(as, o->h, M, W), ff = dit_act_2d(as, o->ff, M, 4 * W);
  if (s->cfg.registers) {
    DIT_TRY(place_registers(m, s, B, S, P, o->x, mask, err));
  } else {
    dit_tensor src = dit_act_mk(as, DIT_F32, (void *)P, 2, (int64_t[]){M, W});
    DIT_TRY(dit_op_copy(be, &x, &src, err));
    DIT_TRY(be->ops->upload(be, o->kmask, mask, (size_t)M, err));
  }
  float *f = malloc((size_t)S * (size_t)W * sizeof *f);
  if (!f) return dit_errorf(err, DIT_ERR_NOMEM, "ltx2 connectors: out of memory for RoPE tables");
  float *cs = f + (size_t)S * W / 2;
  for (int i = 0; i < S; i++) cs[i] = (float)i / (float)m->cfg.rope_base_seq_len; /* positions, in cs for now */
  rope_angles_1d(m, (int)W, S, cs, f);
  dit_ltx2_rope_cos_sin(f, (int64_t)S * W / 2, cs, f); /* cos into cs, sin over f (read first) */
  dit_status st = be->ops->upload(be, o->cos, cs, (size_t)S * W / 2 * sizeof *f, err);
  if (st == DIT_OK) st = be->ops->upload(be, o->sin, f, (size_t)S * W / 2 * sizeof *f, err);
  free(f);
  DIT_TRY(st);
  dit_tensor cos = dit_act_mk(as, DIT_F32, o->cos, 2, (int64_t[]){S * heads, D / 2});
  dit_tensor sin = dit_act_mk(as, DIT_F32, o->sin, 2, (int64_t[]){S * heads, D / 2});
  dit_tensor km = dit_act_mk(as, DIT_U8, o->kmask, 2, (int64_t[]){B, S});
  dit_tensor x3 = dit_act_3d(as, o->x, B, S, W), h3 = dit_act_3d(as, o->h, B, S, W), y3 = dit_act_3d(as, o->ff, B, S, W);
  for (int i = 0; i < s->cfg.layers; i++) {
    const conn_block *b = &s->blocks[i];
    DIT_TRY(dit_op_rms_norm(be, &h, &x, NULL, CONN_EPS, err));
    DIT_TRY(dit_ltx2_attn_forward(be, as, &b->attn, CONN_EPS, B, S, S, &h3, NULL, &cos, &sin, NULL, NULL,
                                  s->cfg.registers ? NULL : &km, false, &o->at, &y3, err));
    DIT_TRY(dit_op_add(be, &x3, &x3, &y3, err));
    DIT_TRY(dit_op_rms_norm(be, &h, &x, NULL, CONN_EPS, err));
    DIT_TRY(dit_op_linear(be, &ff, &h, &b->ff1, &b->ff1_b, DIT_ACT_GELU_TANH, err));
    DIT_TRY(dit_op_linear(be, &h, &ff, &b->ff2, &b->ff2_b, DIT_ACT_NONE, err));
    DIT_TRY(dit_op_add(be, &x, &x, &h, err));
  }
  dit_tensor y = dit_act_mk(as, DIT_F32, out, 2, (int64_t[]){M, W});
  return dit_op_rms_norm(be, &y, &x, NULL, CONN_EPS, err);
}

/* ---- forward ---------------------------------------------------------------------- */

static dit_status project(dit_ltx2_connectors *m, void *Pbuf, int64_t M, const float *normed, float scale,
                          const dit_tensor *w, const dit_tensor *b, float *dst, float *host_tmp, dit_error *err) {
  int64_t K = (int64_t)m->cfg.caption_channels * m->cfg.proj_in_factor;
  const float *src = normed;
  if (scale != 1.0f) {
    for (int64_t i = 0; i < M * K; i++) host_tmp[i] = normed[i] * scale;
    src = host_tmp;
  }
  DIT_TRY(m->be->ops->upload(m->be, Pbuf, src, (size_t)(M * K) * sizeof(float), err));
  dit_tensor in = dit_act_mk(&m->as, DIT_F32, Pbuf, 2, (int64_t[]){M, K});
  dit_tensor out = dit_act_mk(&m->as, DIT_F32, dst, 2, (int64_t[]){M, w->shape[0]});
  return dit_op_linear(m->be, &out, &in, w, b->data ? b : NULL, DIT_ACT_NONE, err);
}

typedef struct conn_plan {
  void *P;          /* [M, C*F] normalized features, uploaded */
  void *pv, *pa;    /* [M, Wv], [M, Wa] projected */
  side_bufs v, a;
} conn_plan;

static dit_status plan(dit_arena *ar, bool real, dit_ltx2_connectors *m, int64_t B, int64_t S, conn_plan *p,
                       dit_error *err) {
  int64_t M = B * S, K = (int64_t)m->cfg.caption_channels * m->cfg.proj_in_factor;
  DIT_ACT_TAKE(ar, real, p->P, (size_t)(M * K) * sizeof(float));
  DIT_ACT_TAKE(ar, real, p->pv, (size_t)(M * m->video.W) * sizeof(float));
  DIT_ACT_TAKE(ar, real, p->pa, (size_t)(M * m->audio.W) * sizeof(float));
  DIT_TRY(plan_side(ar, real, &m->video, B, S, m->as.es, &p->v, err));
  return plan_side(ar, real, &m->audio, B, S, m->as.es, &p->a, err);
}

static dit_status forward_planned(dit_ltx2_connectors *m, int B, int S, float *normed, const uint8_t *mask,
                                  const conn_plan *p, float *video, float *audio, dit_error *err) {
  const dit_ltx2_connectors_config *c = &m->cfg;
  int64_t M = (int64_t)B * S, K = (int64_t)c->caption_channels * c->proj_in_factor;
  float *tmp = NULL;
  if (c->per_modality) {
    tmp = malloc((size_t)(M * K) * sizeof *tmp);
    if (!tmp) return dit_errorf(err, DIT_ERR_NOMEM, "ltx2 connectors: out of memory for the projections' input");
  }
  dit_status s = DIT_OK;
  if (c->per_modality) {
    float sv = (float)sqrt((double)c->video_hidden_dim / c->caption_channels);
    float sa = (float)sqrt((double)c->audio_hidden_dim / c->caption_channels);
    s = project(m, p->P, M, normed, sv, &m->vproj, &m->vproj_b, p->pv, tmp, err);
    if (s == DIT_OK) s = project(m, p->P, M, normed, sa, &m->aproj, &m->aproj_b, p->pa, tmp, err);
  } else {
    s = project(m, p->P, M, normed, 1.0f, &m->proj, &m->proj_b, p->pv, NULL, err);
  }
  free(tmp);
  DIT_TRY(s);
  const float *pa = c->per_modality ? p->pa : p->pv;
  DIT_TRY(run_side(m, &m->video, B, S, p->pv, mask, &p->v, video, err));
  return run_side(m, &m->audio, B, S, pa, mask, &p->a, audio, err);
}

dit_status dit_ltx2_connectors_forward(dit_ltx2_connectors *m, int B, int S, const float *hidden, const uint8_t *mask,
                                       float *video, float *audio, uint8_t *out_mask, dit_error *err) {
  if (!m || !hidden || !mask || !video || !audio || !out_mask || B < 1 || S < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 connectors: NULL argument or empty batch");
  const dit_ltx2_connectors_config *c = &m->cfg;
  if ((m->video.cfg.registers && S % m->video.cfg.registers) || (m->audio.cfg.registers && S % m->audio.cfg.registers))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 connectors: %d tokens are not a multiple of the registers "
                      "(%d, %d)", S, m->video.cfg.registers, m->audio.cfg.registers);
  int64_t M = (int64_t)B * S, K = (int64_t)c->caption_channels * c->proj_in_factor;
  float *normed = malloc((size_t)(M * K) * sizeof *normed);
  if (!normed) return dit_errorf(err, DIT_ERR_NOMEM, "ltx2 connectors: out of memory for %lld features", (long long)(M * K));
  dit_status s = m->be->ops->download(m->be, normed, hidden, (size_t)(M * K) * sizeof *normed, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  if (s == DIT_OK) {
    if (c->per_modality)
      token_rms_norm(normed, B, S, c->caption_channels, c->proj_in_factor, mask);
    else
      masked_mean_norm(normed, B, S, c->caption_channels, c->proj_in_factor, mask);
  }
  conn_plan p;
  dit_arena ar;
  dit_arena_init_measure(&ar);
  if (s == DIT_OK) s = plan(&ar, false, m, B, S, &p, err);
  if (s == DIT_OK) s = dit_act_space_fit(&m->as, m->be, &ar, 0, &(bool){false}, err);
  if (s == DIT_OK) s = plan(&ar, true, m, B, S, &p, err);
  if (s == DIT_OK) s = forward_planned(m, B, S, normed, mask, &p, video, audio, err);
  free(normed);
  DIT_TRY(s);
  bool regs = m->video.cfg.registers > 0;
  for (int64_t i = 0; i < M; i++) out_mask[i] = regs ? 1 : (mask[i] != 0);
  if (!regs) { /* the video features of masked rows are zero */
    for (int64_t i = 0; i < M; i++) {
      if (mask[i]) continue;
      dit_tensor row = dit_act_mk(&m->as, DIT_F32, video + i * m->video.W, 2, (int64_t[]){1, m->video.W});
      DIT_TRY(dit_op_scale(m->be, &row, &row, 0.0f, err));
    }
  }
  return m->be->ops->sync(m->be, err);
}

dit_status dit_ltx2_connectors_cost(const dit_ltx2_connectors *m, int B, int S, dit_cost *out, size_t *kept,
                                    dit_error *err) {
  if (!m || !out || !kept || B < 1 || S < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 connectors cost: bad arguments");
  const dit_ltx2_connectors_config *c = &m->cfg;
  const int64_t M = (int64_t)B * S, K = (int64_t)c->caption_channels * c->proj_in_factor;
  conn_plan p;
  dit_arena ar;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, false, (dit_ltx2_connectors *)m, B, S, &p, err));
  const int Wmax = m->video.W > m->audio.W ? m->video.W : m->audio.W;
  *kept = ar.peak;
  /* normed, the per-modality projections' input, a side's RoPE angles */
  out->act_bytes = ar.peak + (size_t)(M * K) * sizeof(float) * (c->per_modality ? 2 : 1) +
                   (size_t)S * Wmax * sizeof(float);
  double f = 2.0 * (double)M * K * (m->video.W + (c->per_modality ? m->audio.W : 0));
  const connector *side[2] = {&m->video, &m->audio};
  for (int i = 0; i < 2; i++) /* per layer: q, k, v, o and the 4x MLP; attention over S */
    f += side[i]->cfg.layers * (2.0 * M * 12.0 * side[i]->W * side[i]->W + 4.0 * M * S * side[i]->W);
  out->flops = f;
  return DIT_OK;
}
