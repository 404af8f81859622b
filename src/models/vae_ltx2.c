/* The LTX-2 video VAE decoder (see vae_ltx2.h): config, the weight table, loading, the
 * latent denormalization and the decode call's checks; the forward is vae_ltx2_decode.c. */
#include "models/vae_ltx2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "models/model_weights.h"
#include "models/vae_ltx2_internal.h"

#define MAX_UP DIT_VAE_LTX2_MAX_UP
#define MAX_CHANNELS 65536

/* ---- config ---- */

/* The fields the decoder cannot run: refused by name. */
static dit_status refuse_unsupported(const json_t *j, const dit_vae_ltx2_config *c, const char *what,
                                     dit_error *err) {
  bool tc = false, noise[MAX_UP + 1];
  DIT_TRY(dit_json_bool_opt(j, "timestep_conditioning", &tc, what, err));
  if (tc) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: timestep_conditioning true is not supported", what);
  DIT_TRY(ltx2_json_bools_n(j, "decoder_inject_noise", (size_t)c->n_up + 1, false, noise, what, err));
  for (int i = 0; i <= c->n_up; i++)
    if (noise[i])
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: decoder_inject_noise[%d] true is not supported", what, i);
  if (c->patch_size_t != 1)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: patch_size_t %d is not supported (only 1)", what,
                      c->patch_size_t);
  const char *pad = "reflect";
  DIT_TRY(dit_json_string_opt(j, "decoder_spatial_padding_mode", &pad, what, err));
  if (strcmp(pad, "reflect") && strcmp(pad, "zeros"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: decoder_spatial_padding_mode \"%s\" is not supported (zeros, "
                      "reflect)", what, pad);
  return DIT_OK;
}

/* The compression ratios: the config's, or diffusers' default from the ENCODER's scaling
 * (patch size times 2 per scaling level). */
static dit_status ratios(const json_t *j, dit_vae_ltx2_config *c, const char *what, dit_error *err) {
  const json_t *lp = json_object_get(j, "layers_per_block");
  const size_t ne = json_is_array(lp) ? json_array_size(lp) : 5;
  bool es[16];
  if (ne < 1 || ne > 16) return dit_errorf(err, DIT_ERR_FORMAT, "%s: layers_per_block has %zu entries", what, ne);
  const json_t *sv = json_object_get(j, "spatio_temporal_scaling");
  size_t ns = json_is_array(sv) ? json_array_size(sv) : ne - 1;
  if (ns > 16) return dit_errorf(err, DIT_ERR_FORMAT, "%s: spatio_temporal_scaling is too long", what);
  DIT_TRY(ltx2_json_bools_n(j, "spatio_temporal_scaling", ns, true, es, what, err));
  int levels = 0;
  for (size_t i = 0; i < ns; i++) levels += es[i];
  int64_t sr = (int64_t)c->patch_size << levels, tr = (int64_t)c->patch_size_t << levels;
  DIT_TRY(dit_json_int_opt(j, "spatial_compression_ratio", 1, 1 << 16, &sr, what, err));
  DIT_TRY(dit_json_int_opt(j, "temporal_compression_ratio", 1, 1 << 16, &tr, what, err));
  c->spatial_ratio = (int)sr, c->temporal_ratio = (int)tr;
  return DIT_OK;
}

static dit_status read_config(const json_t *j, const char *what, dit_vae_ltx2_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(j, "_class_name", &cls, what, err));
  if (cls && strcmp(cls, "AutoencoderKLLTX2Video"))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: _class_name \"%s\" is not AutoencoderKLLTX2Video", what, cls);
  int64_t lc = 128, oc = 3, ps = 4, pst = 1;
  double eps = 1e-6, sf = 1.0;
  DIT_TRY(dit_json_int_opt(j, "latent_channels", 1, DIT_VAE_LTX2_MAX_LATENT, &lc, what, err));
  DIT_TRY(dit_json_int_opt(j, "out_channels", 1, 64, &oc, what, err));
  DIT_TRY(dit_json_int_opt(j, "patch_size", 1, 64, &ps, what, err));
  DIT_TRY(dit_json_int_opt(j, "patch_size_t", 1, 64, &pst, what, err));
  DIT_TRY(dit_json_double_opt(j, "resnet_norm_eps", &eps, what, err));
  DIT_TRY(dit_json_double_opt(j, "scaling_factor", &sf, what, err));
  if (!(eps > 0) || !(sf > 0))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: resnet_norm_eps and scaling_factor must be positive", what);
  c->latent_channels = (int)lc, c->out_channels = (int)oc, c->patch_size = (int)ps, c->patch_size_t = (int)pst;
  c->resnet_eps = (float)eps, c->scaling_factor = (float)sf;
  c->causal = true;
  DIT_TRY(dit_json_bool_opt(j, "decoder_causal", &c->causal, what, err));
  const char *pad = "reflect";
  DIT_TRY(dit_json_string_opt(j, "decoder_spatial_padding_mode", &pad, what, err));
  c->reflect = !strcmp(pad, "reflect");
  const json_t *bo = json_object_get(j, "decoder_block_out_channels");
  const size_t n = bo && !json_is_null(bo) ? json_array_size(bo) : 3;
  if (n < 1 || n > MAX_UP)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: decoder_block_out_channels must have 1 to %d entries", what, MAX_UP);
  c->n_up = (int)n;
  static const int d_bo[3] = {256, 512, 1024}, d_lp[4] = {5, 5, 5, 5}, d_uf[3] = {2, 2, 2};
  int fives[MAX_UP + 1], twos[MAX_UP];
  for (int i = 0; i <= MAX_UP; i++) fives[i] = 5;
  for (int i = 0; i < MAX_UP; i++) twos[i] = 2;
  DIT_TRY(ltx2_json_ints_n(j, "decoder_block_out_channels", n, MAX_CHANNELS, n == 3 ? d_bo : twos, c->block_out,
                           what, err));
  DIT_TRY(ltx2_json_ints_n(j, "decoder_layers_per_block", n + 1, 256, n == 3 ? d_lp : fives, c->layers, what, err));
  DIT_TRY(ltx2_json_ints_n(j, "upsample_factor", n, 64, n == 3 ? d_uf : twos, c->up_factor, what, err));
  DIT_TRY(ltx2_json_bools_n(j, "decoder_spatio_temporal_scaling", n, true, c->scaling, what, err));
  DIT_TRY(ltx2_json_bools_n(j, "upsample_residual", n, true, c->up_residual, what, err));
  DIT_TRY(ltx2_json_strides(j, "upsample_type", n, c->up_stride, what, err));
  DIT_TRY(refuse_unsupported(j, c, what, err));
  return ratios(j, c, what, err);
}

int ltx2_vae_mid_channels(const dit_vae_ltx2_config *c) { return c->block_out[c->n_up - 1]; }

/* Up block i (decoder order) reads its lists at index n_up - 1 - i of the config's (reversed),
 * except upsample_type. */
static int rev(const dit_vae_ltx2_config *c, int i) { return c->n_up - 1 - i; }

int ltx2_vae_up_out_channels(const dit_vae_ltx2_config *c, int i) {
  return c->block_out[rev(c, i)] / c->up_factor[rev(c, i)];
}

/* ---- weights ---- */

/* The up blocks' tensors, checking that each block's channels follow from the one before
 * (cur: the channels it receives; then what it gives). */
static dit_status add_up_blocks(dit_vae_ltx2 *m, dit_wtable *t, ltx2_resnet **pool, int *cur, dit_error *err) {
  const dit_vae_ltx2_config *c = &m->cfg;
  char n[160];
  for (int i = 0; i < c->n_up; i++) {
    ltx2_up_block *u = &m->up[i];
    const int r = rev(c, i), uf = c->up_factor[r];
    const int in = *cur / uf, out = ltx2_vae_up_out_channels(c, i);
    u->has_conv_in = in != out;
    if (u->has_conv_in) {
      if (in * uf != *cur)
        return dit_errorf(err, DIT_ERR_UNSUPPORTED, "up block %d: conv_in takes %d channels, it receives %d", i, in,
                          *cur);
      snprintf(n, sizeof n, "decoder.up_blocks.%d.conv_in", i);
      ltx2_add_resnet(t, &u->conv_in, in, out, n);
      *cur = out;
    }
    u->has_up = c->scaling[r], u->residual = c->up_residual[r], u->factor = uf;
    memcpy(u->st, c->up_stride[i], sizeof u->st);
    if (u->has_up) {
      const int S = u->st[0] * u->st[1] * u->st[2], cin = out * uf;
      if (cin != *cur || (cin * S) % uf || (cin * S / uf) % S || (u->residual && (cin % S || S % uf)))
        return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                          "up block %d: an upsampler of %d channels (factor %d) cannot take %d channels", i, cin, uf,
                          *cur);
      snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0", i);
      ltx2_add_conv(t, &u->up, cin * S / uf, cin, 3, n, ".conv.conv");
      *cur = cin / uf;
    }
    if (*cur != out)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "up block %d: its resnets take %d channels, it has %d", i, out, *cur);
    u->n_res = c->layers[rev(c, i)];
    u->res = *pool;
    *pool += u->n_res;
    for (int k = 0; k < u->n_res; k++) {
      snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.%d", i, k);
      ltx2_add_resnet(t, &u->res[k], out, out, n);
    }
  }
  return DIT_OK;
}

static dit_status build(dit_vae_ltx2 *m, dit_wtable *t, dit_error *err) {
  const dit_vae_ltx2_config *c = &m->cfg;
  int total = 0;
  for (int i = 0; i <= c->n_up; i++) total += c->layers[i];
  m->pool = calloc((size_t)(total ? total : 1), sizeof *m->pool);
  if (!m->pool) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory");
  ltx2_resnet *pool = m->pool;
  int cur = ltx2_vae_mid_channels(c);
  ltx2_add_conv(t, &m->conv_in, cur, c->latent_channels, 3, "decoder.conv_in", ".conv");
  m->n_mid = c->layers[c->n_up];
  m->mid = pool;
  pool += m->n_mid;
  char n[160];
  for (int k = 0; k < m->n_mid; k++) {
    snprintf(n, sizeof n, "decoder.mid_block.resnets.%d", k);
    ltx2_add_resnet(t, &m->mid[k], cur, cur, n);
  }
  DIT_TRY(add_up_blocks(m, t, &pool, &cur, err));
  ltx2_add_conv(t, &m->conv_out, c->out_channels * c->patch_size * c->patch_size, cur, 3, "decoder.conv_out", ".conv");
  dit_wtable_add(t, &m->mean_t, true, 1, (int64_t[]){c->latent_channels}, "latents_mean");
  dit_wtable_add(t, &m->std_t, true, 1, (int64_t[]){c->latent_channels}, "latents_std");
  return DIT_OK;
}

/* The latent statistics (host values, before any upload) into the config, and their device
 * form for dit_vae_ltx2_denormalize. */
static dit_status read_stats(dit_vae_ltx2 *m, dit_error *err) {
  dit_vae_ltx2_config *c = &m->cfg;
  const size_t C = (size_t)c->latent_channels;
  c->has_latents_stats = m->mean_t.data && m->std_t.data;
  ltx2_latent_stats(&m->mean_t, &m->std_t, C, c->latents_mean, c->latents_std);
  float *h = malloc(2 * C * sizeof *h);
  if (!h) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory");
  for (size_t i = 0; i < C; i++) {
    h[i] = c->latents_std[i] / c->scaling_factor - 1.0f;
    h[C + i] = c->latents_mean[i];
  }
  dit_status s = m->be->ops->alloc(m->be, 2 * C * sizeof *h, &m->stats, err);
  if (s == DIT_OK) s = m->be->ops->upload(m->be, m->stats, h, 2 * C * sizeof *h, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  free(h);
  return s;
}

static dit_status read_stats_cb(void *m, dit_error *err) { return read_stats(m, err); }

static dit_status bind_weights(dit_vae_ltx2 *m, const char *dir, dit_wtable *t, dit_error *err) {
  static const char *const ignore[] = {"encoder.", NULL};
  return dit_wtable_load_dir(m->be, dir, t, ignore, read_stats_cb, m, &m->weights, &m->wblock, err);
}

dit_status dit_vae_ltx2_load(dit_backend *be, const char *folder, dit_vae_ltx2 **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: NULL output");
  *out = NULL;
  if (!be || !folder) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("vae load", folder, path, sizeof path, err));
  dit_vae_ltx2 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory");
  m->be = be;
  json_t *j = NULL;
  dit_status s = dit_json_load_file(path, 16u << 20, &j, err);
  if (s == DIT_OK) s = read_config(j, path, &m->cfg, err);
  json_decref(j);
  dit_wtable t;
  dit_wtable_init(&t);
  if (s == DIT_OK) s = build(m, &t, err);
  if (s == DIT_OK) s = bind_weights(m, folder, &t, err);
  dit_wtable_free(&t);
  m->mean_t.data = m->std_t.data = NULL; /* read into the config; the mapping may be gone */
  if (s != DIT_OK) dit_error_prefix(err, "vae load");
  DIT_HAND_OVER(s, m, out, dit_vae_ltx2_free);
}

void dit_vae_ltx2_free(dit_vae_ltx2 *m) {
  if (!m) return;
  if (m->act) m->be->ops->free(m->be, m->act);
  if (m->stats) m->be->ops->free(m->be, m->stats);
  if (m->wblock) m->be->ops->free(m->be, m->wblock);
  dit_weights_close(m->weights);
  free(m->pool);
  free(m);
}

const dit_vae_ltx2_config *dit_vae_ltx2_get_config(const dit_vae_ltx2 *m) { return m ? &m->cfg : NULL; }

void dit_vae_ltx2_output_size(const dit_vae_ltx2 *m, int F, int H, int W, int *T, int *Ho, int *Wo) {
  const dit_vae_ltx2_config *c = &m->cfg;
  for (int i = 0; i < c->n_up; i++) {
    const ltx2_up_block *u = &m->up[i];
    if (!u->has_up) continue;
    F = F * u->st[0] - (u->st[0] - 1), H *= u->st[1], W *= u->st[2];
  }
  *T = F * c->patch_size_t, *Ho = H * c->patch_size, *Wo = W * c->patch_size;
}

/* ---- the calls ---- */

/* t: F32, 5-D, contiguous, in be's memory, with data; C channels (C < 0: any). */
static dit_status check_video(const dit_backend *be, const dit_tensor *t, const char *what, int C, const char *op,
                              dit_error *err) {
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s is NULL", op, what);
  if (t->dtype != DIT_F32 || t->ndim != 5 || !t->data || !dit_tensor_is_contiguous(t) ||
      t->device != dit_backend_device(be))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be a contiguous F32 [B, C, F, H, W] tensor with data "
                      "in the backend's memory", op, what);
  if (C >= 0 && t->shape[1] != C)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has %lld channels, expected %d", op, what,
                      (long long)t->shape[1], C);
  for (int i = 0; i < 5; i++)
    if (t->shape[i] < 1 || t->shape[i] > (1 << 20))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has an empty or huge dim %d", op, what, i);
  return DIT_OK;
}

dit_status dit_vae_ltx2_denormalize(dit_vae_ltx2 *m, dit_tensor *latents, dit_error *err) {
  const char *op = "vae denormalize";
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: no model", op);
  const int C = m->cfg.latent_channels;
  DIT_TRY(check_video(m->be, latents, "latents", C, op, err));
  const int64_t n = latents->shape[2] * latents->shape[3] * latents->shape[4];
  const dit_device dev = dit_backend_device(m->be);
  dit_tensor sc = dit_tensor_2d(DIT_F32, m->stats, C, 1), sh = dit_tensor_2d(DIT_F32, (float *)m->stats + C, C, 1);
  sc.device = sh.device = dev;
  for (int64_t b = 0; b < latents->shape[0]; b++) { /* x [C, n, 1] * (1 + scale[C, 1]) + shift[C, 1] */
    dit_tensor x = dit_tensor_3d(DIT_F32, (float *)latents->data + b * C * n, C, n, 1);
    x.device = dev;
    DIT_TRY(dit_op_modulate(m->be, &x, &x, &sc, &sh, err));
  }
  return DIT_OK;
}

dit_status ltx2_vae_check_latents(const dit_vae_ltx2 *m, const dit_tensor *latents, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: no model");
  return check_video(m->be, latents, "latents", m->cfg.latent_channels, "vae decode", err);
}

dit_status ltx2_vae_check_decode_io(const dit_vae_ltx2 *m, const dit_tensor *latents, const dit_tensor *out,
                                    dit_error *err) {
  const char *op = "vae decode";
  DIT_TRY(ltx2_vae_check_latents(m, latents, err));
  const dit_vae_ltx2_config *c = &m->cfg;
  DIT_TRY(check_video(m->be, out, "out", c->out_channels, op, err));
  int T, H, W;
  dit_vae_ltx2_output_size(m, (int)latents->shape[2], (int)latents->shape[3], (int)latents->shape[4], &T, &H, &W);
  const int64_t want[5] = {latents->shape[0], c->out_channels, T, H, W};
  if (!dit_tensor_has_shape(out, 5, want)) {
    char a[128], b[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: out is %s, expected %s", op,
                      dit_shape_str(out->shape, 5, a, sizeof a), dit_shape_str(want, 5, b, sizeof b));
  }
  return DIT_OK;
}

dit_status dit_vae_ltx2_decode(dit_vae_ltx2 *m, const dit_tensor *latents, dit_tensor *out, dit_error *err) {
  const char *op = "vae decode";
  DIT_TRY(ltx2_vae_check_decode_io(m, latents, out, err));
  const int64_t nin = dit_tensor_numel(latents) / latents->shape[0], nout = dit_tensor_numel(out) / out->shape[0];
  for (int64_t b = 0; b < latents->shape[0]; b++) {
    dit_tensor x = *latents, y = *out;
    x.shape[0] = y.shape[0] = 1;
    x.data = (float *)latents->data + b * nin;
    y.data = (float *)out->data + b * nout;
    dit_status s = ltx2_vae_decode_item(m, &x, &y, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s (item %lld)", op, (long long)b);
      return s;
    }
  }
  return DIT_OK;
}
