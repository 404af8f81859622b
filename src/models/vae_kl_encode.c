/* AutoencoderKL encoder (see vae_kl.h): its structure and weight table (diffusers or LDM
 * names), loading, and the forward pass on the machinery of vae_kl_run.c: conv_in, the
 * DownEncoderBlock2D levels (Downsample2D pads one zero row and column at the bottom and
 * right, then a stride-2 3x3 conv), the mid block, GroupNorm+SiLU, conv_out to the mean and
 * log-variance, quant_conv. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/model_weights.h"
#include "models/vae_kl_internal.h"


/* ---- structure and weights ---- */

static dit_status build_structure(dit_vae_kl_enc *m, dit_error *err) {
  const dit_vae_kl_config *c = &m->cfg;
  const int nl = c->enc_n_levels, per = c->layers_per_block;
  if (per < 1) return dit_errorf(err, DIT_ERR_FORMAT, "vae encoder: layers_per_block = %d must be >= 1", per);
  m->resnet_pool = calloc((size_t)nl * (size_t)per, sizeof *m->resnet_pool);
  if (!m->resnet_pool) return dit_errorf(err, DIT_ERR_NOMEM, "vae encoder: out of memory for the model structure");
  int prev = c->enc_block_out_channels[0];
  for (int i = 0; i < nl; i++) {
    vae_down_block *b = &m->down[i];
    const int out = c->enc_block_out_channels[i];
    *b = (vae_down_block){.cin = prev, .cout = out, .n_resnets = per, .downsample = i != nl - 1};
    b->resnets = m->resnet_pool + (size_t)i * (size_t)per;
    for (int k = 0; k < per; k++) vae_kl_resnet_init(&b->resnets[k], k == 0 ? prev : out, out);
    prev = out;
  }
  vae_kl_resnet_init(&m->mid_res[0], prev, prev);
  vae_kl_resnet_init(&m->mid_res[1], prev, prev);
  m->mid_attn.c = prev;
  return DIT_OK;
}

static void build_table(dit_vae_kl_enc *m, dit_wtable *t) {
  const dit_vae_kl_config *c = &m->cfg;
  const int nl = c->enc_n_levels, top = c->enc_block_out_channels[nl - 1], L2 = 2 * c->latent_channels;
  vae_kl_add_conv(t, &m->conv_in_w, &m->conv_in_b, c->enc_block_out_channels[0], c->in_channels, 3, "encoder.conv_in");
  char n[160];
  for (int i = 0; i < nl; i++) {
    vae_down_block *b = &m->down[i];
    for (int k = 0; k < b->n_resnets; k++) {
      snprintf(n, sizeof n, "encoder.down_blocks.%d.resnets.%d", i, k);
      vae_kl_add_resnet(t, &b->resnets[k], n);
    }
    if (b->downsample) {
      snprintf(n, sizeof n, "encoder.down_blocks.%d.downsamplers.0.conv", i);
      vae_kl_add_conv(t, &b->down_w, &b->down_b, b->cout, b->cout, 3, n);
    }
  }
  vae_kl_add_resnet(t, &m->mid_res[0], "encoder.mid_block.resnets.0");
  if (c->mid_block_add_attention) vae_kl_add_attn(t, &m->mid_attn, "encoder.mid_block.attentions.0");
  vae_kl_add_resnet(t, &m->mid_res[1], "encoder.mid_block.resnets.1");
  vae_kl_add_vec(t, &m->norm_out_w, &m->norm_out_b, top, "encoder.conv_norm_out");
  vae_kl_add_conv(t, &m->conv_out_w, &m->conv_out_b, L2, top, 3, "encoder.conv_out");
  if (c->use_quant_conv) vae_kl_add_conv(t, &m->qc_w, &m->qc_b, L2, L2, 1, "quant_conv");
}

static dit_status model_new(dit_backend *be, const dit_vae_kl_config *cfg, dit_vae_kl_enc **out, dit_error *err) {
  *out = NULL;
  DIT_TRY(dit_vae_kl_config_check(cfg, err));
  dit_vae_kl_enc *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "vae encoder: out of memory");
  m->be = be;
  m->cfg = *cfg;
  m->adt = DIT_F32;
  dit_status s = build_structure(m, err);
  DIT_HAND_OVER(s, m, out, dit_vae_kl_enc_free);
}

static dit_status load_weights(dit_vae_kl_enc *m, const char *weights_path, bool ldm_ok, dit_error *err) {
  dit_wtable t;
  dit_wtable_init(&t);
  build_table(m, &t);
  static const char *const ignore[] = {"decoder.", "post_quant_conv.", "bn.", NULL};
  dit_status s = dit_weights_open(weights_path, NULL, &m->weights, err);
  const bool ldm = s == DIT_OK && ldm_ok && vae_kl_ldm_detect(m->weights);
  if (ldm) s = vae_kl_ldm_rename(&t, m->weights, m->cfg.enc_n_levels, err);
  if (s == DIT_OK) {
    s = dit_wtable_bind(&t, m->weights, "", ignore, err);
    if (s != DIT_OK) dit_error_prefix(err, "%s", weights_path);
  }
  if (s == DIT_OK && ldm) vae_kl_ldm_flatten(&t);
  if (s == DIT_OK) s = dit_wtable_check_float(&t, err);
  if (s == DIT_OK) s = vae_kl_to_device(m->be, &t, &m->wblock, &m->weights, &m->owned, err);
  dit_wtable_free(&t);
  return s;
}

dit_status dit_vae_kl_enc_load(dit_backend *be, const char *path, const char *cls, const char *config_json,
                               dit_vae_kl_enc **out, dit_error *err) {
  *out = NULL;
  if (!be || !path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encoder load: NULL backend or path");
  struct stat st;
  if (stat(path, &st) != 0) return dit_errorf(err, DIT_ERR_IO, "vae encoder load: %s does not exist", path);
  const bool file = S_ISREG(st.st_mode);
  char cfg_path[4096];
  const char *cp = config_json;
  if (!file) {
    if ((size_t)snprintf(cfg_path, sizeof cfg_path, "%s/config.json", path) >= sizeof cfg_path)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encoder load: folder path too long");
    cp = cfg_path;
  }
  dit_vae_kl_config cfg;
  if (cp)
    DIT_TRY(vae_kl_read_config(cp, cls ? cls : "AutoencoderKL", &cfg, err));
  else
    dit_vae_kl_config_flux1(&cfg);
  if (cp && !cfg.has_down_block_types)
    return dit_errorf(err, DIT_ERR_FORMAT, "vae encoder load: %s lists no down_block_types", cp);
  dit_vae_kl_enc *m = NULL;
  DIT_TRY(model_new(be, &cfg, &m, err));
  dit_status s = load_weights(m, path, file, err);
  if (s != DIT_OK) dit_error_prefix(err, "vae encoder load");
  DIT_HAND_OVER(s, m, out, dit_vae_kl_enc_free);
}

dit_status dit_vae_kl_enc_create_random(dit_backend *be, const dit_vae_kl_config *cfg, uint64_t seed,
                                        dit_vae_kl_enc **out, dit_error *err) {
  *out = NULL;
  dit_vae_kl_enc *m = NULL;
  DIT_TRY(model_new(be, cfg, &m, err));
  dit_wtable t;
  dit_wtable_init(&t);
  build_table(m, &t);
  dit_status s = vae_kl_fill_random(m->be, &t, seed, &m->wblock, &m->weights, &m->owned, err);
  dit_wtable_free(&t);
  DIT_HAND_OVER(s, m, out, dit_vae_kl_enc_free);
}

void dit_vae_kl_enc_free(dit_vae_kl_enc *m) {
  if (!m) return;
  vae_kl_release(m->be, m->weights, m->wblock, m->owned, m->resnet_pool);
  free(m);
}

const dit_vae_kl_config *dit_vae_kl_enc_get_config(const dit_vae_kl_enc *m) { return m ? &m->cfg : NULL; }

dit_status dit_vae_kl_enc_set_act_dtype(dit_vae_kl_enc *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encoder: no model");
  DIT_TRY(dit_backend_check_act_dtype(m->be, dt, "vae encoder", err));
  m->adt = dt;
  return DIT_OK;
}

/* ---- forward ---- */

/* Downsample2D: x [c, h, w] is copied into a [c, h+1, w+1] buffer whose last row and column
 * are zeros (F.pad(x, (0, 1, 0, 1))), then a 3x3 conv of stride 2 without padding. */
static dit_status downsample_fwd(vae_run *r, const vae_down_block *db, vact *x, dit_error *err) {
  const int a = vae_other(x->buf, 0), b = vae_other(x->buf, 1);
  const int64_t c = x->c, h = x->h, w = x->w, ho = (h - 2) / 2 + 1, wo = (w - 2) / 2 + 1;
  dit_tensor tx, p, ty, z;
  DIT_TRY(vae_view(r, &tx, x->buf, c, h, w, err));
  DIT_TRY(vae_view(r, &p, a, c, h + 1, w + 1, err));
  DIT_TRY(vae_view(r, &ty, b, db->cout, ho, wo, err));
  dit_tensor in = vae_act4(r, p.data, 1, c, h, w);
  memcpy(in.stride, p.stride, sizeof in.stride);
  VAE_STAGE(vae_copy(r, &in, &tx, err), "pad");
  dit_tensor row = vae_act4(r, vae_elp(r, p.data, h * (w + 1)), 1, c, 1, w + 1);
  memcpy(row.stride, p.stride, sizeof row.stride);
  DIT_TRY(vae_zeros(r, &z, c, 1, w + 1, err));
  VAE_STAGE(vae_copy(r, &row, &z, err), "pad row");
  dit_tensor col = vae_act4(r, vae_elp(r, p.data, w), 1, c, h, 1);
  memcpy(col.stride, p.stride, sizeof col.stride);
  DIT_TRY(vae_zeros(r, &z, c, h, 1, err));
  VAE_STAGE(vae_copy(r, &col, &z, err), "pad column");
  VAE_STAGE(vae_conv(r, &ty, &p, &db->down_w, &db->down_b, 2, 0, err), "conv");
  *x = (vact){b, (int)db->cout, (int)ho, (int)wo};
  return DIT_OK;
}

/* The encoder on one image [in, f*h, f*w] (host) into moments [2L, h, w] (host); both are
 * NULL while planning. */
static dit_status encoder_fwd(vae_run *r, const void *model, const float *img, float *out, int h, int w,
                              dit_error *err) {
  const dit_vae_kl_enc *m = model;
  const dit_vae_kl_config *c = &m->cfg;
  const int groups = c->norm_num_groups, nl = c->enc_n_levels, f = 1 << (nl - 1), L2 = 2 * c->latent_channels;
  vact x = {0, c->in_channels, f * h, f * w};
  dit_tensor tx, ty;
  DIT_TRY(vae_input(r, &tx, 0, img, x.c, x.h, x.w, err));
  DIT_TRY(vae_view(r, &ty, 1, c->enc_block_out_channels[0], x.h, x.w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->conv_in_w, &m->conv_in_b, 1, 1, err), "encoder.conv_in");
  x.buf = 1;
  x.c = c->enc_block_out_channels[0];
  for (int i = 0; i < nl; i++) {
    const vae_down_block *db = &m->down[i];
    for (int k = 0; k < db->n_resnets; k++)
      VAE_STAGE(vae_resnet_fwd(r, &db->resnets[k], groups, &x, err), "encoder.down_blocks.%d.resnets.%d", i, k);
    if (db->downsample) VAE_STAGE(downsample_fwd(r, db, &x, err), "encoder.down_blocks.%d.downsamplers.0", i);
  }
  DIT_TRY(vae_mid_fwd(r, m->mid_res, c->mid_block_add_attention ? &m->mid_attn : NULL, groups, &x, "encoder", err));
  DIT_TRY(vae_view(r, &tx, x.buf, x.c, x.h, x.w, err));
  VAE_STAGE(vae_gnorm(r, &tx, &tx, groups, &m->norm_out_w, &m->norm_out_b, true, err), "encoder.conv_norm_out");
  int nb = vae_other(x.buf, 0);
  DIT_TRY(vae_view(r, &ty, nb, L2, x.h, x.w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->conv_out_w, &m->conv_out_b, 1, 1, err), "encoder.conv_out");
  if (c->use_quant_conv) {
    dit_tensor tq;
    DIT_TRY(vae_view(r, &tq, vae_other(nb, 0), L2, x.h, x.w, err));
    VAE_STAGE(vae_conv(r, &tq, &ty, &m->qc_w, &m->qc_b, 1, 0, err), "quant_conv");
    ty = tq;
  }
  return vae_output(r, &ty, out, err);
}

static dit_status check_args(const dit_vae_kl_enc *m, const dit_tensor *img, const dit_tensor *mo, int tile,
                             dit_error *err) {
  if (!m || !img || !mo) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encode: NULL argument");
  const dit_vae_kl_config *c = &m->cfg;
  const int64_t f = (int64_t)1 << (c->enc_n_levels - 1);
  char a[128], b[128];
  if (img->dtype != DIT_F32 || img->ndim != 4 || img->shape[0] < 1 || img->shape[1] != c->in_channels ||
      img->shape[2] < f || img->shape[3] < f || img->shape[2] % f || img->shape[3] % f ||
      !dit_tensor_is_contiguous(img) || !img->data || img->device != DIT_DEV_CPU)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "vae encode: img must be a contiguous host F32 [B, %d, H, W] tensor with H and W multiples of "
                      "%lld, got %s %s",
                      c->in_channels, (long long)f, dit_dtype_name(img->dtype),
                      dit_shape_str(img->shape, img->ndim, a, sizeof a));
  if (img->shape[2] > VAE_MAX_IMAGE_SIDE || img->shape[3] > VAE_MAX_IMAGE_SIDE || img->shape[0] > 4096)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encode: img %s is larger than %d pixels per side",
                      dit_shape_str(img->shape, img->ndim, a, sizeof a), VAE_MAX_IMAGE_SIDE);
  const int64_t want[4] = {img->shape[0], 2 * c->latent_channels, img->shape[2] / f, img->shape[3] / f};
  if (mo->dtype != DIT_F32 || !dit_tensor_has_shape(mo, 4, want) || !dit_tensor_is_contiguous(mo) || !mo->data ||
      mo->device != DIT_DEV_CPU)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "vae encode: moments must be a contiguous host F32 %s tensor, got %s %s",
                      dit_shape_str(want, 4, a, sizeof a), dit_dtype_name(mo->dtype),
                      dit_shape_str(mo->shape, mo->ndim, b, sizeof b));
  if (tile < 0 || (tile > 0 && tile < 4))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encode: tile = %d must be 0 (untiled) or at least 4 latent pixels",
                      tile);
  return DIT_OK;
}

dit_status dit_vae_kl_encode(dit_vae_kl_enc *m, const dit_tensor *img, dit_tensor *moments, int tile, dit_error *err) {
  DIT_TRY(check_args(m, img, moments, tile, err));
  const dit_vae_kl_config *c = &m->cfg;
  const int nb = (int)img->shape[0], h = (int)moments->shape[2], w = (int)moments->shape[3];
  const int f = 1 << (c->enc_n_levels - 1);
  const size_t xn = (size_t)dit_tensor_numel(img), mn = (size_t)dit_tensor_numel(moments);
  size_t bad = vae_first_nonfinite(img->data, xn);
  if (bad < xn) return dit_errorf(err, DIT_ERR_NUMERIC, "vae encode: the image holds NaN/Inf (element %zu)", bad);
  const vae_call call = {m->be, m->adt, encoder_fwd, m, nb, h, w, tile, c->in_channels, f, 2 * c->latent_channels, 1,
                         "vae encode", NULL};
  DIT_TRY(vae_run_call(&call, img->data, moments->data, err));
  bad = vae_first_nonfinite(moments->data, mn);
  if (bad < mn) return dit_errorf(err, DIT_ERR_NUMERIC, "vae encode: the moments hold NaN/Inf (element %zu)", bad);
  return DIT_OK;
}

void dit_vae_kl_latent(const float *moments, int L, size_t n, const float *noise, float *out) {
  const float *mean = moments, *logvar = moments + (size_t)L * n;
  for (size_t i = 0; i < (size_t)L * n; i++) {
    if (!noise) {
      out[i] = mean[i];
      continue;
    }
    const float lv = fminf(fmaxf(logvar[i], -30.0f), 20.0f);
    out[i] = mean[i] + expf(0.5f * lv) * noise[i];
  }
}
