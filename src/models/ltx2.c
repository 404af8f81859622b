/* LTX2VideoTransformer3DModel (see ltx2.h): config, weight table, loading. */
#include "models/ltx2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "models/ltx2_internal.h"

/* ---- config ---------------------------------------------------------------------- */

static dit_status geti(const json_t *j, const char *key, int64_t lo, int64_t hi, int *v, const char *what,
                       dit_error *err) {
  int64_t x = *v;
  DIT_TRY(dit_json_int_opt(j, key, lo, hi, &x, what, err));
  *v = (int)x;
  return DIT_OK;
}

/* A setting this implementation has one value of must have it (or be absent). */
static dit_status want_bool(const json_t *j, const char *key, bool want, const char *what, dit_error *err) {
  bool v = want;
  DIT_TRY(dit_json_bool_opt(j, key, &v, what, err));
  if (v != want)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s = %s is not supported", what, key, v ? "true" : "false");
  return DIT_OK;
}

static dit_status want_str(const json_t *j, const char *key, const char *want, const char *what, dit_error *err) {
  const char *v = want;
  DIT_TRY(dit_json_string_opt(j, key, &v, what, err));
  if (strcmp(v, want) != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported (\"%s\")", what, key, v, want);
  return DIT_OK;
}

static dit_status parse_stream(const json_t *j, const char *pre, dit_ltx2_stream_config *s, const char *what,
                               dit_error *err) {
  char k[96];
#define KEY(name) (snprintf(k, sizeof k, "%s%s", pre, name), k)
  DIT_TRY(geti(j, KEY("in_channels"), 1, 1 << 16, &s->in_channels, what, err));
  s->out_channels = s->in_channels;
  const json_t *oc = json_object_get(j, KEY("out_channels"));
  if (oc && !json_is_null(oc)) DIT_TRY(geti(j, k, 1, 1 << 16, &s->out_channels, what, err));
  DIT_TRY(geti(j, KEY("num_attention_heads"), 1, 1024, &s->heads, what, err));
  DIT_TRY(geti(j, KEY("attention_head_dim"), 2, 1024, &s->head_dim, what, err));
  DIT_TRY(geti(j, KEY("cross_attention_dim"), 1, 1 << 16, &s->cross_attention_dim, what, err));
  DIT_TRY(dit_json_bool_opt(j, KEY("gated_attn"), &s->gated_attn, what, err));
  DIT_TRY(dit_json_bool_opt(j, KEY("cross_attn_mod"), &s->cross_attn_mod, what, err));
  DIT_TRY(geti(j, KEY("pos_embed_max_pos"), 1, 1 << 20, &s->pos_embed_max_pos, what, err));
  DIT_TRY(geti(j, KEY("patch_size"), 1, 1, &(int){1}, what, err));
  DIT_TRY(geti(j, KEY("patch_size_t"), 1, 1, &(int){1}, what, err));
#undef KEY
  if (s->head_dim % 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %sattention_head_dim = %d must be even", what, pre, s->head_dim);
  return DIT_OK;
}

void dit_ltx2_config_default(dit_ltx2_config *c, bool v23) {
  memset(c, 0, sizeof *c);
  c->video = (dit_ltx2_stream_config){128, 128, 32, 128, 4096, v23, v23, 20};
  c->audio = (dit_ltx2_stream_config){128, 128, 32, 64, 2048, v23, v23, 20};
  c->num_layers = 48, c->caption_channels = 3840;
  c->vae_scale_factors[0] = 8, c->vae_scale_factors[1] = c->vae_scale_factors[2] = 32;
  c->base_height = c->base_width = 2048;
  c->audio_scale_factor = 4, c->audio_sampling_rate = 16000, c->audio_hop_length = 160, c->causal_offset = 1;
  c->norm_eps = 1e-6f;
  c->rope_theta = 10000.0, c->rope_double_precision = true;
  c->timestep_scale_multiplier = c->cross_attn_timestep_scale_multiplier = 1000.0;
  c->use_prompt_embeddings = !v23, c->perturbed_attn = v23, c->use_prompt_adaln_single = true;
}

/* What the forward pass needs of a configuration, read or made. */
static dit_status check_config(const dit_ltx2_config *c, const char *what, dit_error *err) {
  if (!(c->norm_eps > 0.0f) || c->norm_eps > 0.1f || !(c->rope_theta > 1.0) || !(c->timestep_scale_multiplier > 0.0))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: norm_eps, rope_theta or timestep_scale_multiplier out of range", what);
  if ((c->video.cross_attn_mod || c->audio.cross_attn_mod) && !c->use_prompt_adaln_single)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: use_prompt_adaln_single = false is not supported", what);
  const int Da = c->audio.heads * c->audio.head_dim, Dv = c->video.heads * c->video.head_dim;
  if (Da != c->audio.cross_attention_dim || (Da / c->video.heads) % 2 || Da % c->video.heads)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: the cross-modal RoPE needs audio_cross_attention_dim (%d) = the audio "
                      "width (%d), split evenly over the video heads (%d)", what, c->audio.cross_attention_dim, Da,
                      c->video.heads);
  if (!c->use_prompt_embeddings && (c->video.cross_attention_dim != Dv || c->audio.cross_attention_dim != Da))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: without caption projections the cross-attention widths must be the "
                      "streams' (%d, %d)", what, Dv, Da);
  return DIT_OK;
}

static dit_status parse_config(const json_t *j, dit_ltx2_config *c, const char *what, dit_error *err) {
  dit_ltx2_config_default(c, false);
  double eps = c->norm_eps;
  DIT_TRY(parse_stream(j, "", &c->video, what, err));
  DIT_TRY(parse_stream(j, "audio_", &c->audio, what, err));
  DIT_TRY(geti(j, "num_layers", 1, 1024, &c->num_layers, what, err));
  DIT_TRY(geti(j, "caption_channels", 1, 1 << 16, &c->caption_channels, what, err));
  const json_t *sf = json_object_get(j, "vae_scale_factors");
  if (sf && !json_is_null(sf)) DIT_TRY(dit_json_ints_exact(j, "vae_scale_factors", 1, 1024, c->vae_scale_factors, 3, what, err));
  DIT_TRY(geti(j, "base_height", 1, 1 << 20, &c->base_height, what, err));
  DIT_TRY(geti(j, "base_width", 1, 1 << 20, &c->base_width, what, err));
  DIT_TRY(geti(j, "audio_scale_factor", 1, 1024, &c->audio_scale_factor, what, err));
  DIT_TRY(geti(j, "audio_sampling_rate", 1, 1 << 22, &c->audio_sampling_rate, what, err));
  DIT_TRY(geti(j, "audio_hop_length", 1, 1 << 20, &c->audio_hop_length, what, err));
  DIT_TRY(geti(j, "causal_offset", 0, 1024, &c->causal_offset, what, err));
  DIT_TRY(dit_json_double_opt(j, "norm_eps", &eps, what, err));
  c->norm_eps = (float)eps;
  DIT_TRY(dit_json_double_opt(j, "rope_theta", &c->rope_theta, what, err));
  DIT_TRY(dit_json_bool_opt(j, "rope_double_precision", &c->rope_double_precision, what, err));
  DIT_TRY(dit_json_double_opt(j, "timestep_scale_multiplier", &c->timestep_scale_multiplier, what, err));
  DIT_TRY(dit_json_double_opt(j, "cross_attn_timestep_scale_multiplier", &c->cross_attn_timestep_scale_multiplier, what,
                              err));
  DIT_TRY(dit_json_bool_opt(j, "use_prompt_embeddings", &c->use_prompt_embeddings, what, err));
  DIT_TRY(dit_json_bool_opt(j, "perturbed_attn", &c->perturbed_attn, what, err));
  DIT_TRY(dit_json_bool_opt(j, "use_prompt_adaln_single", &c->use_prompt_adaln_single, what, err));
  DIT_TRY(want_str(j, "rope_type", "split", what, err));
  DIT_TRY(want_str(j, "qk_norm", "rms_norm_across_heads", what, err));
  DIT_TRY(want_str(j, "activation_fn", "gelu-approximate", what, err));
  DIT_TRY(want_bool(j, "attention_bias", true, what, err));
  DIT_TRY(want_bool(j, "attention_out_bias", true, what, err));
  DIT_TRY(want_bool(j, "ff_bias", true, what, err));
  DIT_TRY(want_bool(j, "audio_ff_bias", true, what, err));
  DIT_TRY(want_bool(j, "norm_elementwise_affine", false, what, err));
  DIT_TRY(want_bool(j, "use_keyframes_abs_pos_embedding", false, what, err));
  if (!(eps > 0.0) || eps > 0.1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: norm_eps %g out of range", what, eps);
  return check_config(c, what, err);
}

/* ---- weights --------------------------------------------------------------------- */

static void add_lin(dit_wtable *t, dit_tensor *w, dit_tensor *b, int64_t n, int64_t k, const char *name) {
  dit_wtable_add(t, w, false, 2, (int64_t[]){n, k}, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, (int64_t[]){n}, "%s.bias", name);
}

static void add_adaln(dit_wtable *t, ltx2_adaln *a, int n, int dim, const char *name) {
  char p[224];
  a->n = n, a->dim = dim;
  snprintf(p, sizeof p, "%s.emb.timestep_embedder.linear_1", name);
  add_lin(t, &a->l1, &a->l1_b, dim, 256, p);
  snprintf(p, sizeof p, "%s.emb.timestep_embedder.linear_2", name);
  add_lin(t, &a->l2, &a->l2_b, dim, dim, p);
  snprintf(p, sizeof p, "%s.linear", name);
  add_lin(t, &a->lin, &a->lin_b, (int64_t)n * dim, dim, p);
}

static void add_ff(dit_wtable *t, ltx2_ff *f, int64_t D, const char *name) {
  char p[192];
  snprintf(p, sizeof p, "%s.net.0.proj", name);
  add_lin(t, &f->w1, &f->b1, 4 * D, D, p);
  snprintf(p, sizeof p, "%s.net.2", name);
  add_lin(t, &f->w2, &f->b2, D, 4 * D, p);
}

static void add_half(dit_wtable *t, const dit_ltx2_config *c, ltx2_half *h, bool video, int i) {
  const dit_ltx2_stream_config *s = video ? &c->video : &c->audio, *o = video ? &c->audio : &c->video;
  const int64_t D = (int64_t)s->heads * s->head_dim, Do = (int64_t)o->heads * o->head_dim;
  const char *pre = video ? "" : "audio_";
  char p[160];
  snprintf(p, sizeof p, "transformer_blocks.%d.%sattn1", i, pre);
  dit_ltx2_attn_table(t, &h->attn1, s->heads, s->head_dim, s->gated_attn, D, D, p);
  snprintf(p, sizeof p, "transformer_blocks.%d.%sattn2", i, pre);
  dit_ltx2_attn_table(t, &h->attn2, s->heads, s->head_dim, s->gated_attn, D, s->cross_attention_dim, p);
  /* audio_to_video_attn (queries video) and video_to_audio_attn (queries audio): audio heads both */
  snprintf(p, sizeof p, "transformer_blocks.%d.%s", i, video ? "audio_to_video_attn" : "video_to_audio_attn");
  dit_ltx2_attn_table(t, &h->cross, c->audio.heads, c->audio.head_dim, s->gated_attn, D, Do, p);
  snprintf(p, sizeof p, "transformer_blocks.%d.%sff", i, pre);
  add_ff(t, &h->ff, D, p);
  const int n = s->cross_attn_mod ? 9 : 6;
  dit_wtable_add(t, &h->table, false, 2, (int64_t[]){n, D}, "transformer_blocks.%d.%sscale_shift_table", i, pre);
  if (c->video.cross_attn_mod || c->audio.cross_attn_mod)
    dit_wtable_add(t, &h->prompt_table, false, 2, (int64_t[]){2, D}, "transformer_blocks.%d.%sprompt_scale_shift_table",
                   i, pre);
  dit_wtable_add(t, &h->ca_table, false, 2, (int64_t[]){5, D}, "transformer_blocks.%d.%s_a2v_cross_attn_scale_shift_table",
                 i, video ? "video" : "audio");
}

static void add_stream(dit_wtable *t, const dit_ltx2_config *c, ltx2_stream *st, bool video) {
  const dit_ltx2_stream_config *s = video ? &c->video : &c->audio;
  const char *pre = video ? "" : "audio_";
  const int D = st->D = s->heads * s->head_dim;
  char p[160];
  snprintf(p, sizeof p, "%sproj_in", pre);
  add_lin(t, &st->proj_in, &st->proj_in_b, D, s->in_channels, p);
  snprintf(p, sizeof p, "%sproj_out", pre);
  add_lin(t, &st->proj_out, &st->proj_out_b, s->out_channels, D, p);
  if (c->use_prompt_embeddings) {
    snprintf(p, sizeof p, "%scaption_projection.linear_1", pre);
    add_lin(t, &st->cap1, &st->cap1_b, D, c->caption_channels, p);
    snprintf(p, sizeof p, "%scaption_projection.linear_2", pre);
    add_lin(t, &st->cap2, &st->cap2_b, D, D, p);
  }
  snprintf(p, sizeof p, "%stime_embed", pre);
  add_adaln(t, &st->time, s->cross_attn_mod ? 9 : 6, D, p);
  snprintf(p, sizeof p, "av_cross_attn_%s_scale_shift", video ? "video" : "audio");
  add_adaln(t, &st->ca_scale_shift, 4, D, p);
  snprintf(p, sizeof p, "av_cross_attn_%s", video ? "video_a2v_gate" : "audio_v2a_gate");
  add_adaln(t, &st->ca_gate, 1, D, p);
  if (c->video.cross_attn_mod || c->audio.cross_attn_mod) {
    snprintf(p, sizeof p, "%sprompt_adaln", pre);
    add_adaln(t, &st->prompt, 2, D, p);
  }
  dit_wtable_add(t, &st->table, false, 2, (int64_t[]){2, D}, "%sscale_shift_table", pre);
}

static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  (void)err;
  dit_ltx2 *m = model;
  dit_wtable_init(t);
  add_stream(t, &m->cfg, &m->v, true);
  add_stream(t, &m->cfg, &m->a, false);
  for (int i = 0; i < m->cfg.num_layers; i++) {
    add_half(t, &m->cfg, &m->blocks[i].v, true, i);
    add_half(t, &m->cfg, &m->blocks[i].a, false, i);
  }
  return DIT_OK;
}

/* *out: a model without weights for the configuration c (checked). */
static dit_status new_model(dit_backend *be, const dit_ltx2_config *c, const char *what, dit_ltx2 **out,
                            dit_error *err) {
  DIT_TRY(check_config(c, what, err));
  dit_ltx2 *m = calloc(1, sizeof *m);
  if (m) m->blocks = calloc((size_t)c->num_layers, sizeof *m->blocks);
  if (!m || !m->blocks) {
    free(m);
    return dit_errorf(err, DIT_ERR_NOMEM, "ltx2: out of memory for %d blocks", c->num_layers);
  }
  m->be = be;
  m->cfg = *c;
  dit_act_space_init(&m->as, be);
  *out = m;
  return DIT_OK;
}

dit_status dit_ltx2_load(dit_backend *be, const char *dir, dit_ltx2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("ltx2", dir, path, sizeof path, err));
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 1u << 20, &j, err));
  dit_ltx2_config c;
  dit_status s = parse_config(j, &c, path, err);
  json_decref(j);
  DIT_TRY(s);
  dit_ltx2 *m = NULL;
  DIT_TRY(new_model(be, &c, path, &m, err));
  s = dit_model_weights_load(be, &m->w, "LTX-2 transformer", dir, build_table, m, true, err);
  DIT_HAND_OVER(s, m, out, dit_ltx2_free);
}

dit_status dit_ltx2_create_random(dit_backend *be, const dit_ltx2_config *c, dit_dtype wdt, uint64_t seed,
                                  dit_ltx2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2: NULL backend or config");
  if (c->num_layers < 1 || c->num_layers > 1024 || c->video.heads < 1 || c->audio.heads < 1 ||
      c->video.head_dim < 2 || c->audio.head_dim < 2 || c->video.head_dim % 2 || c->audio.head_dim % 2 ||
      c->caption_channels < 1 || c->video.in_channels < 1 || c->audio.in_channels < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 random config: a size is out of range");
  dit_ltx2 *m = NULL;
  DIT_TRY(new_model(be, c, "ltx2 random config", &m, err));
  dit_status s = dit_model_weights_random(be, &m->w, "ltx2", build_table, m, wdt, seed, err);
  DIT_HAND_OVER(s, m, out, dit_ltx2_free);
}

dit_status dit_ltx2_set_act_dtype(dit_ltx2 *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2: no model");
  bool changed = false; /* the RoPE tables live in their own block: nothing cached goes stale */
  return dit_act_space_set_dtype(&m->as, m->be, dt, "ltx2", &changed, err);
}

size_t dit_ltx2_weight_bytes(const dit_ltx2 *m) { return m ? m->w.wbytes : 0; }
uint64_t dit_ltx2_weight_params(const dit_ltx2 *m) { return m ? m->w.wparams : 0; }

void dit_ltx2_free(dit_ltx2 *m) {
  if (!m) return;
  dit_act_space_release(&m->as, m->be);
  dit_model_weights_release(m->be, &m->w);
  if (m->rope.block) m->be->ops->free(m->be, m->rope.block);
  free(m->blocks);
  free(m);
}

const dit_ltx2_config *dit_ltx2_get_config(const dit_ltx2 *m) { return m ? &m->cfg : NULL; }
