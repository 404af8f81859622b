/* The LTX-2 video VAE's encoder (see vae_ltx2.h): config, weights, and the forward pass of
 * diffusers' LTX2VideoEncoder3d over the activation slots of vae_ltx2_internal.h. The patchify
 * and the downsamplers' space-to-depth folds are strided copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "models/vae_ltx2_internal.h"

#define MAX_DOWN DIT_VAE_LTX2_MAX_UP
#define MAX_CHANNELS 65536

typedef struct enc_config {
  int in_channels, latent_channels, patch_size, patch_size_t;
  int n_down;
  int block_out[MAX_DOWN];   /* block_out_channels */
  int layers[MAX_DOWN + 1];  /* layers_per_block (the last: the mid block) */
  bool scaling[MAX_DOWN];    /* spatio_temporal_scaling */
  int st[MAX_DOWN][3];       /* downsample_type as (t, h, w) strides */
  bool causal, reflect;      /* encoder_causal, encoder_spatial_padding_mode */
  float eps, scaling_factor;
} enc_config;

/* A down block: resnets at its input's channels, then (has_down) the downsampler to `out`. */
typedef struct enc_down {
  int n_res;
  ltx2_resnet *res;
  bool has_down;
  int st[3], out, group; /* strides, channels out, input channels averaged per output channel */
  ltx2_conv conv;        /* [out / (st0 st1 st2), in, 3, 3, 3] */
} enc_down;

struct dit_vae_ltx2_enc {
  dit_backend *be;
  enc_config cfg;
  dit_weights *weights;
  void *wblock;
  ltx2_conv conv_in, conv_out;
  enc_down down[MAX_DOWN];
  int n_mid;
  ltx2_resnet *mid, *pool;
  dit_tensor mean_t, std_t;
  float *mean, *std; /* [latent_channels] host: 0 and 1 when the checkpoint has none */
  void *act;
  size_t act_bytes;
};

/* ---- config ---- */

/* downsample_type: "spatial", "temporal", "spatiotemporal" (the strided "conv" is refused);
 * absent: diffusers' default (spatial, temporal, spatiotemporal, spatiotemporal). */
static dit_status down_types(const json_t *j, size_t n, int st[][3], const char *what, dit_error *err) {
  static const int defaults[4][3] = {{1, 2, 2}, {2, 1, 1}, {2, 2, 2}, {2, 2, 2}};
  const json_t *v = json_object_get(j, "downsample_type");
  if (!v || json_is_null(v)) {
    if (n != 4) return dit_errorf(err, DIT_ERR_FORMAT, "%s: downsample_type is needed for %zu down blocks", what, n);
    memcpy(st, defaults, sizeof defaults);
    return DIT_OK;
  }
  for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
    const char *s = json_string_value(json_array_get(v, i));
    if (s && !strcmp(s, "conv"))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: downsample_type[%zu] \"conv\" (a strided convolution) is not "
                        "supported", what, i);
  }
  return ltx2_json_strides(j, "downsample_type", n, st, what, err);
}

static dit_status read_lists(const json_t *j, enc_config *c, const char *what, dit_error *err) {
  const json_t *bo = json_object_get(j, "block_out_channels");
  const size_t n = bo && !json_is_null(bo) ? json_array_size(bo) : 4;
  if (n < 1 || n > MAX_DOWN)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: block_out_channels must have 1 to %d entries", what, MAX_DOWN);
  c->n_down = (int)n;
  static const int d_bo[4] = {256, 512, 1024, 2048}, d_lp[5] = {4, 6, 6, 2, 2};
  int ones[MAX_DOWN + 1];
  for (int i = 0; i <= MAX_DOWN; i++) ones[i] = 1;
  DIT_TRY(ltx2_json_ints_n(j, "block_out_channels", n, MAX_CHANNELS, n == 4 ? d_bo : ones, c->block_out, what, err));
  DIT_TRY(ltx2_json_ints_n(j, "layers_per_block", n + 1, 256, n == 4 ? d_lp : ones, c->layers, what, err));
  DIT_TRY(ltx2_json_bools_n(j, "spatio_temporal_scaling", n, true, c->scaling, what, err));
  DIT_TRY(down_types(j, n, c->st, what, err));
  const json_t *types = json_object_get(j, "down_block_types");
  for (size_t i = 0; types && json_is_array(types) && i < json_array_size(types); i++) {
    const char *s = json_string_value(json_array_get(types, i));
    if (!s || strcmp(s, "LTX2VideoDownBlock3D"))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: down_block_types[%zu] is not LTX2VideoDownBlock3D", what, i);
  }
  return DIT_OK;
}

static dit_status read_config(const json_t *j, const char *what, enc_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(j, "_class_name", &cls, what, err));
  if (cls && strcmp(cls, "AutoencoderKLLTX2Video"))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: _class_name \"%s\" is not AutoencoderKLLTX2Video", what, cls);
  int64_t ic = 3, lc = 128, ps = 4, pst = 1;
  double eps = 1e-6, sf = 1.0;
  DIT_TRY(dit_json_int_opt(j, "in_channels", 1, 64, &ic, what, err));
  DIT_TRY(dit_json_int_opt(j, "latent_channels", 1, DIT_VAE_LTX2_MAX_LATENT, &lc, what, err));
  DIT_TRY(dit_json_int_opt(j, "patch_size", 1, 64, &ps, what, err));
  DIT_TRY(dit_json_int_opt(j, "patch_size_t", 1, 64, &pst, what, err));
  DIT_TRY(dit_json_double_opt(j, "resnet_norm_eps", &eps, what, err));
  DIT_TRY(dit_json_double_opt(j, "scaling_factor", &sf, what, err));
  if (!(eps > 0) || !(sf > 0))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: resnet_norm_eps and scaling_factor must be positive", what);
  if (pst != 1)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: patch_size_t %lld is not supported (only 1)", what,
                      (long long)pst);
  c->in_channels = (int)ic, c->latent_channels = (int)lc, c->patch_size = (int)ps, c->patch_size_t = 1;
  c->eps = (float)eps, c->scaling_factor = (float)sf;
  c->causal = true;
  DIT_TRY(dit_json_bool_opt(j, "encoder_causal", &c->causal, what, err));
  const char *pad = "zeros";
  DIT_TRY(dit_json_string_opt(j, "encoder_spatial_padding_mode", &pad, what, err));
  if (strcmp(pad, "reflect") && strcmp(pad, "zeros"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: encoder_spatial_padding_mode \"%s\" is not supported (zeros, "
                      "reflect)", what, pad);
  c->reflect = !strcmp(pad, "reflect");
  return read_lists(j, c, what, err);
}

/* ---- weights ---- */

/* The down blocks' tensors, checking that each block's channels follow from the one before. */
static dit_status add_down_blocks(dit_vae_ltx2_enc *e, dit_wtable *t, ltx2_resnet **pool, int *cur, dit_error *err) {
  const enc_config *c = &e->cfg;
  char n[160];
  for (int i = 0; i < c->n_down; i++) {
    enc_down *d = &e->down[i];
    d->n_res = c->layers[i], d->res = *pool;
    *pool += d->n_res;
    for (int k = 0; k < d->n_res; k++) {
      snprintf(n, sizeof n, "encoder.down_blocks.%d.resnets.%d", i, k);
      ltx2_add_resnet(t, &d->res[k], *cur, *cur, n);
    }
    d->has_down = c->scaling[i], d->out = c->block_out[i];
    memcpy(d->st, c->st[i], sizeof d->st);
    if (!d->has_down) {
      if (d->out != *cur)
        return dit_errorf(err, DIT_ERR_UNSUPPORTED, "down block %d: no downsampler, yet %d channels in and %d out", i,
                          *cur, d->out);
      continue;
    }
    const int S = d->st[0] * d->st[1] * d->st[2];
    if (d->out % S || (*cur * S) % d->out || *cur * S < d->out)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "down block %d: a downsampler from %d to %d channels (strides "
                        "%dx%dx%d)", i, *cur, d->out, d->st[0], d->st[1], d->st[2]);
    d->group = *cur * S / d->out;
    snprintf(n, sizeof n, "encoder.down_blocks.%d.downsamplers.0", i);
    ltx2_add_conv(t, &d->conv, d->out / S, *cur, 3, n, ".conv.conv");
    *cur = d->out;
  }
  return DIT_OK;
}

static dit_status build(dit_vae_ltx2_enc *e, dit_wtable *t, dit_error *err) {
  const enc_config *c = &e->cfg;
  int total = 0;
  for (int i = 0; i <= c->n_down; i++) total += c->layers[i];
  e->pool = calloc((size_t)(total ? total : 1), sizeof *e->pool);
  if (!e->pool) return dit_errorf(err, DIT_ERR_NOMEM, "vae encoder: out of memory");
  ltx2_resnet *pool = e->pool;
  int cur = c->latent_channels;
  ltx2_add_conv(t, &e->conv_in, cur, c->in_channels * c->patch_size * c->patch_size, 3, "encoder.conv_in", ".conv");
  DIT_TRY(add_down_blocks(e, t, &pool, &cur, err));
  e->n_mid = c->layers[c->n_down], e->mid = pool;
  char n[160];
  for (int k = 0; k < e->n_mid; k++) {
    snprintf(n, sizeof n, "encoder.mid_block.resnets.%d", k);
    ltx2_add_resnet(t, &e->mid[k], cur, cur, n);
  }
  ltx2_add_conv(t, &e->conv_out, c->latent_channels + 1, cur, 3, "encoder.conv_out", ".conv");
  dit_wtable_add(t, &e->mean_t, true, 1, (int64_t[]){c->latent_channels}, "latents_mean");
  dit_wtable_add(t, &e->std_t, true, 1, (int64_t[]){c->latent_channels}, "latents_std");
  return DIT_OK;
}

static dit_status read_stats(void *model, dit_error *err) {
  dit_vae_ltx2_enc *e = model;
  const size_t C = (size_t)e->cfg.latent_channels;
  e->mean = malloc(2 * C * sizeof *e->mean);
  if (!e->mean) return dit_errorf(err, DIT_ERR_NOMEM, "vae encoder: out of memory");
  e->std = e->mean + C;
  ltx2_latent_stats(&e->mean_t, &e->std_t, C, e->mean, e->std);
  return DIT_OK;
}

dit_status dit_vae_ltx2_enc_load(dit_backend *be, const char *folder, dit_vae_ltx2_enc **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encoder load: NULL output");
  *out = NULL;
  if (!be || !folder) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encoder load: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("vae encoder load", folder, path, sizeof path, err));
  dit_vae_ltx2_enc *e = calloc(1, sizeof *e);
  if (!e) return dit_errorf(err, DIT_ERR_NOMEM, "vae encoder: out of memory");
  e->be = be;
  json_t *j = NULL;
  dit_status s = dit_json_load_file(path, 16u << 20, &j, err);
  if (s == DIT_OK) s = read_config(j, path, &e->cfg, err);
  json_decref(j);
  dit_wtable t;
  dit_wtable_init(&t);
  if (s == DIT_OK) s = build(e, &t, err);
  static const char *const ignore[] = {"decoder.", NULL};
  if (s == DIT_OK) s = dit_wtable_load_dir(be, folder, &t, ignore, read_stats, e, &e->weights, &e->wblock, err);
  dit_wtable_free(&t);
  e->mean_t.data = e->std_t.data = NULL;
  if (s != DIT_OK) dit_error_prefix(err, "vae encoder load");
  DIT_HAND_OVER(s, e, out, dit_vae_ltx2_enc_free);
}

void dit_vae_ltx2_enc_free(dit_vae_ltx2_enc *e) {
  if (!e) return;
  if (e->act) e->be->ops->free(e->be, e->act);
  if (e->wblock) e->be->ops->free(e->be, e->wblock);
  dit_weights_close(e->weights);
  free(e->pool);
  free(e->mean);
  free(e);
}

int dit_vae_ltx2_enc_latent_channels(const dit_vae_ltx2_enc *e) { return e ? e->cfg.latent_channels : 0; }
int dit_vae_ltx2_enc_in_channels(const dit_vae_ltx2_enc *e) { return e ? e->cfg.in_channels : 0; }

dit_status dit_vae_ltx2_enc_latent_size(const dit_vae_ltx2_enc *e, int T, int H, int W, int *F, int *h, int *w,
                                        dit_error *err) {
  if (!e) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encode: no model");
  const int p = e->cfg.patch_size;
  int sh = p, sw = p, st = 1;
  for (int i = 0; i < e->cfg.n_down; i++)
    if (e->down[i].has_down) st *= e->down[i].st[0], sh *= e->down[i].st[1], sw *= e->down[i].st[2];
  if (T < 1 || H < 1 || W < 1 || T > (1 << 20) || H > (1 << 20) || W > (1 << 20) || H % sh || W % sw ||
      (T - 1) % st)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae encode: %d frames of %dx%d: the encoder takes heights that are "
                      "multiples of %d, widths of %d, and 1 + a multiple of %d frames", T, W, H, sh, sw, st);
  int f = T, y = H / p, x = W / p;
  for (int i = 0; i < e->cfg.n_down; i++)
    if (e->down[i].has_down) {
      const int *d = e->down[i].st;
      f = (f + d[0] - 1) / d[0], y /= d[1], x /= d[2];
    }
  *F = f, *h = y, *w = x;
  return DIT_OK;
}

void dit_vae_ltx2_enc_normalize(const dit_vae_ltx2_enc *e, float *x, int64_t n) {
  const float sf = e->cfg.scaling_factor;
  for (int c = 0; c < e->cfg.latent_channels; c++)
    for (int64_t i = 0; i < n; i++) {
      float *v = x + (size_t)c * (size_t)n + (size_t)i;
      *v = (*v - e->mean[c]) * sf / e->std[c];
    }
}

/* ---- the forward pass ---- */

/* dst [1, C S, F', H', W'] contiguous = the space-to-depth fold of src [1, C, F' s0, H' s1, W' s2]
 * (frame f s0 + i0, row h s1 + i1, column w s2 + i2 to channel c S + i0 s1 s2 + i1 s2 + i2),
 * as diffusers' unflatten / permute / flatten. Dims (c, i0, i1, i2, f, h, w). */
static dit_status fold(ltx2_vrun *r, const dit_tensor *dst, const dit_tensor *src, const int s[3], dit_error *err) {
  const int64_t C = src->shape[1], Fs = src->shape[2], Hs = src->shape[3], Ws = src->shape[4];
  const int64_t F = Fs / s[0], H = Hs / s[1], W = Ws / s[2], n = F * H * W;
  const int64_t ss[7] = {Fs * Hs * Ws, Hs * Ws, Ws, 1, s[0] * Hs * Ws, s[1] * Ws, s[2]};
  const int64_t ds[7] = {(int64_t)s[0] * s[1] * s[2] * n, (int64_t)s[1] * s[2] * n, s[2] * n, n, H * W, W, 1};
  return ltx2_vcopy(r, dst, 0, src, 0, 7, (int64_t[]){C, s[0], s[1], s[2], F, H, W}, ds, ss, err);
}

/* LTX2VideoDownsampler3d on *a, into the other running slot: the input with its first s0 - 1
 * frames repeated in front (xp), conv(xp) folded plus fold(xp) averaged over channel groups. */
static dit_status downsampler(ltx2_vrun *r, const enc_down *d, ltx2_act *a, dit_error *err) {
  const int s0 = d->st[0], S = d->st[0] * d->st[1] * d->st[2], g = d->group;
  const int64_t C = a->c, Fp = a->f + s0 - 1, fhw = (int64_t)a->f * a->h * a->w;
  ltx2_act o = {ltx2_other(a->slot), d->out, (int)(Fp / s0), a->h / d->st[1], a->w / d->st[2]};
  const int64_t n = (int64_t)o.f * o.h * o.w;
  dit_tensor x = ltx2_vview_of(a, r), xp, fx, res, tmp, h, y;
  DIT_TRY(ltx2_vview(r, &xp, LTX2_S_TMP, C, Fp, a->h, a->w, err));
  const int64_t hw = (int64_t)a->h * a->w, st[3] = {Fp * hw, hw, 1}, sx[3] = {fhw, hw, 1};
  if (s0 > 1) DIT_TRY(ltx2_vcopy(r, &xp, 0, &x, 0, 3, (int64_t[]){C, s0 - 1, hw}, st, sx, err));
  DIT_TRY(ltx2_vcopy(r, &xp, (s0 - 1) * hw, &x, 0, 3, (int64_t[]){C, a->f, hw}, st, sx, err));
  /* the residual: fold(xp) [C S, n], channels k g + j averaged over j */
  DIT_TRY(ltx2_vview(r, &fx, LTX2_S_SC, C * S, o.f, o.h, o.w, err));
  DIT_TRY(fold(r, &fx, &xp, d->st, err));
  DIT_TRY(ltx2_vview(r, &res, LTX2_S_R, o.c, o.f, o.h, o.w, err));
  DIT_TRY(ltx2_vview(r, &tmp, LTX2_S_H, o.c, o.f, o.h, o.w, err));
  const int64_t gs[2] = {g * n, 1}, cs[2] = {n, 1};
  DIT_TRY(ltx2_vcopy(r, &res, 0, &fx, 0, 2, (int64_t[]){o.c, n}, cs, gs, err));
  for (int j = 1; j < g; j++) {
    DIT_TRY(ltx2_vcopy(r, &tmp, 0, &fx, j * n, 2, (int64_t[]){o.c, n}, cs, gs, err));
    LTX2_OP(r, dit_op_add(r->be, &res, &res, &tmp, err));
  }
  if (g > 1) LTX2_OP(r, dit_op_scale(r->be, &res, &res, 1.0f / (float)g, err));
  DIT_TRY(ltx2_vconv(r, &d->conv, &xp, LTX2_S_H, &h, err));
  DIT_TRY(ltx2_vview(r, &y, o.slot, o.c, o.f, o.h, o.w, err));
  DIT_TRY(fold(r, &y, &h, d->st, err));
  LTX2_OP(r, dit_op_add(r->be, &y, &y, &res, err));
  *a = o;
  return DIT_OK;
}

/* y [1, C p p, T, H / p, W / p] from x [1, C, T, H, W]: row h p + ih, column w p + iw to channel
 * c p p + iw p + ih (diffusers' patching order). Dims (c, iw, ih, t, h, w). */
static dit_status patchify(ltx2_vrun *r, const dit_tensor *y, const dit_tensor *x, int p, dit_error *err) {
  const int64_t C = x->shape[1], T = x->shape[2], H = x->shape[3], W = x->shape[4], h = H / p, w = W / p;
  const int64_t n = T * h * w;
  const int64_t ss[6] = {T * H * W, 1, W, H * W, p * W, p};
  const int64_t ds[6] = {(int64_t)p * p * n, p * n, n, h * w, w, 1};
  return ltx2_vcopy(r, y, 0, x, 0, 6, (int64_t[]){C, p, p, T, h, w}, ds, ss, err);
}

typedef struct enc_ctx {
  const dit_vae_ltx2_enc *e;
  const dit_tensor *x;
  dit_tensor *mean;
} enc_ctx;

static dit_status forward(ltx2_vrun *r, void *ctx, dit_error *err) {
  const enc_ctx *q = ctx;
  const dit_vae_ltx2_enc *e = q->e;
  const int p = e->cfg.patch_size;
  const dit_tensor *x = q->x;
  dit_tensor px, t, h;
  DIT_TRY(ltx2_vview(r, &px, LTX2_S_A, x->shape[1] * p * p, x->shape[2], x->shape[3] / p, x->shape[4] / p, err));
  DIT_TRY(patchify(r, &px, x, p, err));
  DIT_TRY(ltx2_vconv(r, &e->conv_in, &px, LTX2_S_B, &t, err));
  ltx2_act a = {LTX2_S_B, e->conv_in.co, (int)t.shape[2], (int)t.shape[3], (int)t.shape[4]};
  for (int i = 0; i < e->cfg.n_down; i++) {
    const enc_down *d = &e->down[i];
    for (int k = 0; k < d->n_res; k++) DIT_TRY(ltx2_vresnet(r, &d->res[k], &a, err));
    if (d->has_down) DIT_TRY(downsampler(r, d, &a, err));
  }
  for (int k = 0; k < e->n_mid; k++) DIT_TRY(ltx2_vresnet(r, &e->mid[k], &a, err));
  dit_tensor xa = ltx2_vview_of(&a, r);
  DIT_TRY(ltx2_vview(r, &t, LTX2_S_TMP, a.c, a.f, a.h, a.w, err));
  LTX2_OP(r, dit_op_pixel_norm(r->be, &t, &xa, LTX2_VAE_NORM_EPS, true, err));
  DIT_TRY(ltx2_vconv(r, &e->conv_out, &t, LTX2_S_H, &h, err));
  /* the posterior's mode: the first latent_channels channels (the last one is the log-variance) */
  const int64_t nm = (int64_t)e->cfg.latent_channels * a.f * a.h * a.w;
  return ltx2_vcopy(r, q->mean, 0, &h, 0, 1, (int64_t[]){nm}, (int64_t[]){1}, (int64_t[]){1}, err);
}

dit_status dit_vae_ltx2_encode(dit_vae_ltx2_enc *e, const dit_tensor *x, dit_tensor *mean, dit_error *err) {
  const char *op = "vae encode";
  if (!e) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: no model", op);
  const dit_device dev = dit_backend_device(e->be);
  const dit_tensor *io[2] = {x, mean};
  for (int i = 0; i < 2; i++)
    if (!io[i] || io[i]->dtype != DIT_F32 || io[i]->ndim != 5 || !io[i]->data || !dit_tensor_is_contiguous(io[i]) ||
        io[i]->device != dev)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be a contiguous F32 [B, C, F, H, W] tensor with data in "
                        "the backend's memory", op, i ? "mean" : "x");
  if (x->shape[1] != e->cfg.in_channels)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x has %lld channels, expected %d", op, (long long)x->shape[1],
                      e->cfg.in_channels);
  int F, h, w;
  DIT_TRY(dit_vae_ltx2_enc_latent_size(e, (int)x->shape[2], (int)x->shape[3], (int)x->shape[4], &F, &h, &w, err));
  const int64_t want[5] = {x->shape[0], e->cfg.latent_channels, F, h, w};
  if (!dit_tensor_has_shape(mean, 5, want)) {
    char s1[128], s2[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: mean is %s, expected %s", op,
                      dit_shape_str(mean->shape, 5, s1, sizeof s1), dit_shape_str(want, 5, s2, sizeof s2));
  }
  const int64_t nin = dit_tensor_numel(x) / x->shape[0], nout = dit_tensor_numel(mean) / mean->shape[0];
  for (int64_t b = 0; b < x->shape[0]; b++) {
    dit_tensor xi = *x, mi = *mean;
    xi.shape[0] = mi.shape[0] = 1;
    xi.data = (float *)x->data + b * nin, mi.data = (float *)mean->data + b * nout;
    ltx2_vrun r = {.be = e->be, .causal = e->cfg.causal, .reflect = e->cfg.reflect, .eps = e->cfg.eps};
    enc_ctx q = {e, &xi, &mi};
    dit_status s = ltx2_vrun_pass(&r, forward, &q, &e->act, &e->act_bytes, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s (item %lld)", op, (long long)b);
      return s;
    }
  }
  return DIT_OK;
}
