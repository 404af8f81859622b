/* AutoencoderKL: the config from vae/config.json (both halves' fields), the weight table
 * naming every decoder tensor as the checkpoint does, loading, and a random-weights
 * constructor for benchmarks. The decoder's forward pass is in vae_kl_decode.c; the encoder
 * (vae_kl_encode.c) builds its own table with the helpers here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "core/splitmix.h"
#include "io/json.h"
#include "models/model_weights.h"
#include "models/vae_kl_internal.h"

#define MAX_CHANNELS 8192
#define MAX_LATENT_CHANNELS 1024
#define MAX_OUT_CHANNELS 64
#define MAX_LAYERS_PER_BLOCK 16

/* ---- config ---------------------------------------------------------------------- */

dit_status dit_vae_kl_config_check(const dit_vae_kl_config *c, dit_error *err) {
  if (c->latent_channels < 1 || c->latent_channels > MAX_LATENT_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "latent_channels = %d is outside [1, %d]", c->latent_channels,
                      MAX_LATENT_CHANNELS);
  if (c->out_channels < 1 || c->out_channels > MAX_OUT_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "out_channels = %d is outside [1, %d]", c->out_channels,
                      MAX_OUT_CHANNELS);
  if (c->n_levels < 1 || c->n_levels > DIT_VAE_KL_MAX_LEVELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "block_out_channels has %d entries, expected 1 to %d", c->n_levels,
                      DIT_VAE_KL_MAX_LEVELS);
  if (c->layers_per_block < 0 || c->layers_per_block > MAX_LAYERS_PER_BLOCK)
    return dit_errorf(err, DIT_ERR_FORMAT, "layers_per_block = %d is outside [0, %d]", c->layers_per_block,
                      MAX_LAYERS_PER_BLOCK);
  if (c->norm_num_groups < 1 || c->norm_num_groups > MAX_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "norm_num_groups = %d is outside [1, %d]", c->norm_num_groups,
                      MAX_CHANNELS);
  for (int i = 0; i < c->n_levels; i++) {
    int ch = c->block_out_channels[i];
    if (ch < 1 || ch > MAX_CHANNELS)
      return dit_errorf(err, DIT_ERR_FORMAT, "block_out_channels[%d] = %d is outside [1, %d]", i, ch, MAX_CHANNELS);
    if (ch % c->norm_num_groups)
      return dit_errorf(err, DIT_ERR_FORMAT, "block_out_channels[%d] = %d is not divisible by norm_num_groups = %d",
                        i, ch, c->norm_num_groups);
  }
  if (c->in_channels < 1 || c->in_channels > MAX_OUT_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "in_channels = %d is outside [1, %d]", c->in_channels, MAX_OUT_CHANNELS);
  if (c->enc_n_levels < 1 || c->enc_n_levels > DIT_VAE_KL_MAX_LEVELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "block_out_channels has %d entries, expected 1 to %d", c->enc_n_levels,
                      DIT_VAE_KL_MAX_LEVELS);
  for (int i = 0; i < c->enc_n_levels; i++) {
    int ch = c->enc_block_out_channels[i];
    if (ch < 1 || ch > MAX_CHANNELS || ch % c->norm_num_groups)
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "block_out_channels[%d] = %d must be in [1, %d] and divisible by norm_num_groups = %d", i, ch,
                        MAX_CHANNELS, c->norm_num_groups);
  }
  if (!isfinite(c->scaling_factor) || c->scaling_factor == 0.0f)
    return dit_errorf(err, DIT_ERR_FORMAT, "scaling_factor = %g must be finite and nonzero", c->scaling_factor);
  if (!isfinite(c->shift_factor))
    return dit_errorf(err, DIT_ERR_FORMAT, "shift_factor = %g must be finite", c->shift_factor);
  return DIT_OK;
}

/* A string-array member whose every entry must equal `want`; n = its length. */
static dit_status check_block_types(const json_t *j, const char *key, const char *want, int n, const char *what,
                                    dit_error *err) {
  const json_t *a = json_object_get(j, key);
  if (!a) return dit_errorf(err, DIT_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
  if (!json_is_array(a)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" must be an array", what, key);
  if ((int)json_array_size(a) != n)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" has %zu entries but block_out_channels has %d", what,
                      key, json_array_size(a), n);
  for (int i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(a, (size_t)i));
    if (!s) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\"[%d] must be a string", what, key, i);
    if (strcmp(s, want))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"%s\"[%d] = \"%s\" is not supported (only %s)", what,
                        key, i, s, want);
  }
  return DIT_OK;
}

/* Reads the decoder's fields of an AutoencoderKL-family config.json whose class must be
 * `want` (diffusers' defaults for the optional ones) and checks them. */
static dit_status parse_config(const json_t *j, const char *what, const char *want, dit_vae_kl_config *c,
                               dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(j, "_class_name", &cls, what, err));
  if (cls && strcmp(cls, want))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"_class_name\" = \"%s\" is not %s", what, cls, want);
  int64_t v = 4;
  DIT_TRY(dit_json_int_opt(j, "latent_channels", 1, MAX_LATENT_CHANNELS, &v, what, err));
  c->latent_channels = (int)v;
  v = 3;
  DIT_TRY(dit_json_int_opt(j, "out_channels", 1, MAX_OUT_CHANNELS, &v, what, err));
  c->out_channels = (int)v;
  v = 1;
  DIT_TRY(dit_json_int_opt(j, "layers_per_block", 0, MAX_LAYERS_PER_BLOCK, &v, what, err));
  c->layers_per_block = (int)v;
  v = 32;
  DIT_TRY(dit_json_int_opt(j, "norm_num_groups", 1, MAX_CHANNELS, &v, what, err));
  c->norm_num_groups = (int)v;
  v = 3;
  DIT_TRY(dit_json_int_opt(j, "in_channels", 1, MAX_OUT_CHANNELS, &v, what, err));
  c->in_channels = (int)v;
  int64_t ch[DIT_VAE_KL_MAX_LEVELS];
  size_t n = 0;
  DIT_TRY(dit_json_int_array(j, "block_out_channels", 1, MAX_CHANNELS, ch, DIT_VAE_KL_MAX_LEVELS, &n, what, err));
  if (n < 1) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"block_out_channels\" is empty", what);
  c->enc_n_levels = (int)n;
  for (size_t i = 0; i < n; i++) c->enc_block_out_channels[i] = (int)ch[i];
  /* AutoencoderKLFlux2 may give the decoder its own widths */
  const json_t *dec = json_object_get(j, "decoder_block_out_channels");
  const char *key = dec && !json_is_null(dec) ? "decoder_block_out_channels" : "block_out_channels";
  DIT_TRY(dit_json_int_array(j, key, 1, MAX_CHANNELS, ch, DIT_VAE_KL_MAX_LEVELS, &n, what, err));
  if (n < 1) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" is empty", what, key);
  c->n_levels = (int)n;
  for (size_t i = 0; i < n; i++) c->block_out_channels[i] = (int)ch[i];
  const char *act = "silu";
  DIT_TRY(dit_json_string_opt(j, "act_fn", &act, what, err));
  if (strcmp(act, "silu") && strcmp(act, "swish"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"act_fn\" = \"%s\" is not supported (only silu)", what,
                      act);
  DIT_TRY(check_block_types(j, "up_block_types", "UpDecoderBlock2D", c->n_levels, what, err));
  c->mid_block_add_attention = true;
  DIT_TRY(dit_json_bool_opt(j, "mid_block_add_attention", &c->mid_block_add_attention, what, err));
  c->use_post_quant_conv = true;
  DIT_TRY(dit_json_bool_opt(j, "use_post_quant_conv", &c->use_post_quant_conv, what, err));
  c->use_quant_conv = true;
  DIT_TRY(dit_json_bool_opt(j, "use_quant_conv", &c->use_quant_conv, what, err));
  const json_t *dt = json_object_get(j, "down_block_types");
  c->has_down_block_types = dt != NULL;
  if (dt) DIT_TRY(check_block_types(j, "down_block_types", "DownEncoderBlock2D", c->enc_n_levels, what, err));
  double d = 0.18215;
  DIT_TRY(dit_json_double_opt(j, "scaling_factor", &d, what, err));
  c->scaling_factor = (float)d;
  d = NAN;
  DIT_TRY(dit_json_double_opt(j, "shift_factor", &d, what, err));
  c->has_shift_factor = !isnan(d);
  c->shift_factor = c->has_shift_factor ? (float)d : 0.0f;
  dit_status s = dit_vae_kl_config_check(c, err);
  if (s != DIT_OK) dit_error_prefix(err, "%s", what);
  return s;
}

/* ---- structure and weight table --------------------------------------------------- */

void vae_kl_resnet_init(vae_resnet *r, int cin, int cout) {
  memset(r, 0, sizeof *r);
  r->cin = cin;
  r->cout = cout;
}

/* Fills in the channel structure of the decoder from m->cfg (allocates the resnet pool). */
static dit_status build_structure(dit_vae_kl *m, dit_error *err) {
  const dit_vae_kl_config *c = &m->cfg;
  int top = c->block_out_channels[c->n_levels - 1];
  int per = c->layers_per_block + 1;
  m->resnet_pool = calloc((size_t)c->n_levels * (size_t)per, sizeof *m->resnet_pool);
  if (!m->resnet_pool) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory for the model structure");
  vae_kl_resnet_init(&m->mid_res[0], top, top);
  vae_kl_resnet_init(&m->mid_res[1], top, top);
  m->mid_attn.c = top;
  int prev = top;
  for (int i = 0; i < c->n_levels; i++) {
    vae_up_block *b = &m->up[i];
    int out = c->block_out_channels[c->n_levels - 1 - i];
    b->cin = prev;
    b->cout = out;
    b->n_resnets = per;
    b->resnets = m->resnet_pool + (size_t)i * (size_t)per;
    for (int k = 0; k < per; k++) vae_kl_resnet_init(&b->resnets[k], k == 0 ? prev : out, out);
    b->upsample = i != c->n_levels - 1;
    prev = out;
  }
  return DIT_OK;
}

void vae_kl_add_conv(dit_wtable *t, dit_tensor *w, dit_tensor *b, int co, int ci, int k, const char *name) {
  int64_t ws[4] = {co, ci, k, k}, bs[1] = {co};
  dit_wtable_add(t, w, false, 4, ws, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, bs, "%s.bias", name);
}

void vae_kl_add_vec(dit_wtable *t, dit_tensor *w, dit_tensor *b, int c, const char *name) {
  int64_t s[1] = {c};
  dit_wtable_add(t, w, false, 1, s, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, s, "%s.bias", name);
}

static void add_linear(dit_wtable *t, dit_tensor *w, dit_tensor *b, int co, int ci, const char *name) {
  int64_t ws[2] = {co, ci}, bs[1] = {co};
  dit_wtable_add(t, w, false, 2, ws, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, bs, "%s.bias", name);
}

void vae_kl_add_resnet(dit_wtable *t, vae_resnet *r, const char *base) {
  char n[160];
  snprintf(n, sizeof n, "%s.norm1", base);
  vae_kl_add_vec(t, &r->norm1_w, &r->norm1_b, r->cin, n);
  snprintf(n, sizeof n, "%s.conv1", base);
  vae_kl_add_conv(t, &r->conv1_w, &r->conv1_b, r->cout, r->cin, 3, n);
  snprintf(n, sizeof n, "%s.norm2", base);
  vae_kl_add_vec(t, &r->norm2_w, &r->norm2_b, r->cout, n);
  snprintf(n, sizeof n, "%s.conv2", base);
  vae_kl_add_conv(t, &r->conv2_w, &r->conv2_b, r->cout, r->cout, 3, n);
  if (r->cin != r->cout) {
    snprintf(n, sizeof n, "%s.conv_shortcut", base);
    vae_kl_add_conv(t, &r->short_w, &r->short_b, r->cout, r->cin, 1, n);
  }
}

void vae_kl_add_attn(dit_wtable *t, vae_attn *a, const char *base) {
  char n[160];
  const int c = a->c;
  snprintf(n, sizeof n, "%s.group_norm", base);
  vae_kl_add_vec(t, &a->gn_w, &a->gn_b, c, n);
  snprintf(n, sizeof n, "%s.to_q", base);
  add_linear(t, &a->q_w, &a->q_b, c, c, n);
  snprintf(n, sizeof n, "%s.to_k", base);
  add_linear(t, &a->k_w, &a->k_b, c, c, n);
  snprintf(n, sizeof n, "%s.to_v", base);
  add_linear(t, &a->v_w, &a->v_b, c, c, n);
  snprintf(n, sizeof n, "%s.to_out.0", base);
  add_linear(t, &a->o_w, &a->o_b, c, c, n);
}

/* Lists every decoder tensor with the checkpoint's name and shape. */
static void build_table(dit_vae_kl *m, dit_wtable *t) {
  const dit_vae_kl_config *c = &m->cfg;
  int top = c->block_out_channels[c->n_levels - 1];
  if (c->use_post_quant_conv)
    vae_kl_add_conv(t, &m->pq_w, &m->pq_b, c->latent_channels, c->latent_channels, 1, "post_quant_conv");
  vae_kl_add_conv(t, &m->conv_in_w, &m->conv_in_b, top, c->latent_channels, 3, "decoder.conv_in");
  vae_kl_add_resnet(t, &m->mid_res[0], "decoder.mid_block.resnets.0");
  if (c->mid_block_add_attention) vae_kl_add_attn(t, &m->mid_attn, "decoder.mid_block.attentions.0");
  vae_kl_add_resnet(t, &m->mid_res[1], "decoder.mid_block.resnets.1");
  char n[160];
  for (int i = 0; i < c->n_levels; i++) {
    vae_up_block *b = &m->up[i];
    for (int k = 0; k < b->n_resnets; k++) {
      snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.%d", i, k);
      vae_kl_add_resnet(t, &b->resnets[k], n);
    }
    if (b->upsample) {
      snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.conv", i);
      vae_kl_add_conv(t, &b->up_w, &b->up_b, b->cout, b->cout, 3, n);
    }
  }
  vae_kl_add_vec(t, &m->norm_out_w, &m->norm_out_b, c->block_out_channels[0], "decoder.conv_norm_out");
  vae_kl_add_conv(t, &m->conv_out_w, &m->conv_out_b, c->out_channels, c->block_out_channels[0], 3, "decoder.conv_out");
}

static dit_status model_new(dit_backend *be, const dit_vae_kl_config *cfg, dit_vae_kl **out, dit_error *err) {
  *out = NULL;
  DIT_TRY(dit_vae_kl_config_check(cfg, err));
  dit_vae_kl *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory");
  m->be = be;
  m->cfg = *cfg;
  dit_status s = build_structure(m, err);
  DIT_HAND_OVER(s, m, out, dit_vae_kl_free);
}

dit_status vae_kl_to_device(dit_backend *be, const dit_wtable *t, void **wblock, dit_weights **weights, void **owned,
                            dit_error *err) {
  if (dit_backend_is_host(be)) return DIT_OK;
  DIT_TRY(dit_backend_upload_wtable_as(be, t, DIT_UPLOAD_F32_WEIGHTS_AS_BF16, wblock, err));
  if (*weights) dit_weights_close(*weights);
  *weights = NULL;
  free(*owned);
  *owned = NULL;
  return DIT_OK;
}

static dit_status to_device(dit_vae_kl *m, const dit_wtable *t, dit_error *err) {
  return vae_kl_to_device(m->be, t, &m->wblock, &m->weights, &m->owned, err);
}

dit_status vae_kl_read_config(const char *path, const char *cls, dit_vae_kl_config *cfg, dit_error *err) {
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 16u << 20, &j, err));
  dit_status s = parse_config(j, path, cls, cfg, err);
  json_decref(j);
  return s;
}

/* The decoder of cfg with its weights bound from weights_path (a folder or a safetensors
 * file, as dit_weights_open takes); with ldm_ok, a checkpoint naming its tensors the LDM
 * way is bound under those names. extra_ignore as for vae_kl_load_class. */
static dit_status load_model(dit_backend *be, const dit_vae_kl_config *cfg, const char *weights_path, bool ldm_ok,
                             const char *const *extra_ignore, dit_vae_kl **out, dit_error *err) {
  dit_vae_kl *m = NULL;
  DIT_TRY(model_new(be, cfg, &m, err));
  dit_wtable t;
  dit_wtable_init(&t);
  build_table(m, &t);
  const char *ignore[16] = {"encoder.", "quant_conv."};
  for (size_t i = 0, k = 2; extra_ignore && extra_ignore[i] && k < 15; i++) ignore[k++] = extra_ignore[i];
  dit_status s = dit_weights_open(weights_path, NULL, &m->weights, err);
  const bool ldm = s == DIT_OK && ldm_ok && vae_kl_ldm_detect(m->weights);
  if (ldm) s = vae_kl_ldm_rename(&t, m->weights, cfg->n_levels, err);
  if (s == DIT_OK) {
    s = dit_wtable_bind(&t, m->weights, "", ignore, err);
    if (s != DIT_OK) dit_error_prefix(err, "%s", weights_path);
  }
  if (s == DIT_OK && ldm) vae_kl_ldm_flatten(&t);
  if (s == DIT_OK) s = dit_wtable_check_float(&t, err);
  if (s == DIT_OK) s = to_device(m, &t, err);
  dit_wtable_free(&t);
  if (s != DIT_OK) dit_error_prefix(err, "vae load");
  DIT_HAND_OVER(s, m, out, dit_vae_kl_free);
}

dit_status dit_vae_kl_load(dit_backend *be, const char *path, dit_vae_kl **out, dit_error *err) {
  struct stat st;
  if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) return dit_vae_kl_load_file(be, path, NULL, out, err);
  return vae_kl_load_class(be, path, "AutoencoderKL", NULL, out, err);
}

dit_status dit_vae_kl_load_file(dit_backend *be, const char *file, const char *config_json, dit_vae_kl **out,
                                dit_error *err) {
  *out = NULL;
  if (!be || !file) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: NULL backend or file");
  struct stat st;
  if (stat(file, &st) != 0 || !S_ISREG(st.st_mode))
    return dit_errorf(err, DIT_ERR_IO, "vae load: %s is not a readable regular file", file);
  dit_vae_kl_config cfg;
  if (config_json)
    DIT_TRY(vae_kl_read_config(config_json, "AutoencoderKL", &cfg, err));
  else
    dit_vae_kl_config_flux1(&cfg);
  dit_status s = load_model(be, &cfg, file, true, NULL, out, err);
  if (s == DIT_ERR_FORMAT && !config_json)
    dit_error_prefix(err, "with FLUX.1's VAE configuration (no config.json given)");
  return s;
}

dit_status vae_kl_load_class(dit_backend *be, const char *component_dir, const char *cls,
                             const char *const *extra_ignore, dit_vae_kl **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: NULL backend or folder");
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/config.json", component_dir) >= sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: folder path too long");
  dit_vae_kl_config cfg;
  DIT_TRY(vae_kl_read_config(path, cls, &cfg, err));
  return load_model(be, &cfg, component_dir, false, extra_ignore, out, err);
}

/* ---- random weights --------------------------------------------------------------- */

/* SplitMix64: the next output, advancing the state. */
static uint64_t splitmix64(uint64_t *s) {
  const uint64_t z = dit_splitmix64(*s);
  *s += DIT_SPLITMIX64_GAMMA;
  return z;
}

/* Uniform in [-1, 1). */
static float rand_unit(uint64_t *s) { return (float)((double)(splitmix64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* Fills one tensor: matrices/kernels uniform with variance 1/fan_in (activations stay
 * O(1) through the stack), norm scales 1 + 0.1 u, biases 0.05 u. */
static void fill_random(uint16_t *dst, const dit_wentry *e, uint64_t *s) {
  int64_t n = 1;
  for (int k = 0; k < e->ndim; k++) n *= e->shape[k];
  float amp;
  float base = 0.0f;
  size_t len = strlen(e->name);
  bool is_weight = len > 7 && !strcmp(e->name + len - 7, ".weight");
  if (e->ndim >= 2) {
    double fan_in = (double)n / (double)e->shape[0];
    amp = (float)sqrt(3.0 / fan_in);
  } else if (is_weight) {
    base = 1.0f;
    amp = 0.1f;
  } else {
    amp = 0.05f;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = dit_f32_to_bf16(base + amp * rand_unit(s));
}

dit_status vae_kl_fill_random(dit_backend *be, dit_wtable *t, uint64_t seed, void **wblock, dit_weights **weights,
                              void **owned, dit_error *err) {
  if (t->status != DIT_OK) return dit_errorf(err, t->status, "%s", t->err.msg);
  size_t total = 0;
  for (size_t i = 0; i < t->n; i++) {
    int64_t n = 1;
    for (int k = 0; k < t->entries[i].ndim; k++) n *= t->entries[i].shape[k];
    total += (size_t)n;
  }
  *owned = malloc(total ? total * sizeof(uint16_t) : 1);
  if (!*owned) return dit_errorf(err, DIT_ERR_NOMEM, "vae: cannot allocate %zu bytes of random weights", 2 * total);
  uint64_t state = seed;
  uint16_t *p = *owned;
  for (size_t i = 0; i < t->n; i++) {
    dit_wentry *e = &t->entries[i];
    *e->dst = dit_tensor_make(DIT_BF16, p, e->ndim, e->shape);
    fill_random(p, e, &state);
    p += dit_tensor_numel(e->dst);
  }
  return vae_kl_to_device(be, t, wblock, weights, owned, err);
}

void vae_kl_release(dit_backend *be, dit_weights *weights, void *wblock, void *owned, void *pool) {
  if (weights) dit_weights_close(weights);
  if (wblock) be->ops->free(be, wblock);
  free(owned);
  free(pool);
}

dit_status dit_vae_kl_create_random(dit_backend *be, const dit_vae_kl_config *cfg, uint64_t seed, dit_vae_kl **out,
                                    dit_error *err) {
  *out = NULL;
  dit_vae_kl *m = NULL;
  DIT_TRY(model_new(be, cfg, &m, err));
  dit_wtable t;
  dit_wtable_init(&t);
  build_table(m, &t);
  dit_status s = vae_kl_fill_random(m->be, &t, seed, &m->wblock, &m->weights, &m->owned, err);
  dit_wtable_free(&t);
  DIT_HAND_OVER(s, m, out, dit_vae_kl_free);
}

void dit_vae_kl_free(dit_vae_kl *m) {
  if (!m) return;
  vae_run_drop(m->keep);
  vae_kl_release(m->be, m->weights, m->wblock, m->owned, m->resnet_pool);
  free(m);
}

const dit_vae_kl_config *dit_vae_kl_get_config(const dit_vae_kl *m) { return m ? &m->cfg : NULL; }
