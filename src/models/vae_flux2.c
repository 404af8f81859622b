/* FLUX.2 VAE (see vae_flux2.h): the AutoencoderKL decoder is loaded by vae_kl with the
 * AutoencoderKLFlux2 class and the bn.* tensors left to this file, which reads the
 * batch-norm statistics and does the pipeline's de-normalisation and unpatchify. */
#include "models/vae_flux2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "models/vae_kl_internal.h"

#define PATCH 2 /* Flux2KleinPipeline._unpatchify_latents hard-codes 2x2 */

/* The batch-norm statistics of the packed latents. */
typedef struct bn_stats {
  int latent_channels;   /* L */
  float *mean;           /* [4L] */
  float *std;            /* [4L] sqrt(running_var + batch_norm_eps) in float32 */
} bn_stats;

struct dit_vae_flux2 {
  dit_vae_kl *kl;
  int latent_channels;   /* L */
  bn_stats bn;
};

struct dit_vae_flux2_enc {
  dit_vae_kl_enc *enc;
  bn_stats bn;
};

/* patch_size must be [2, 2] (what the pipeline unpatchifies); batch_norm_eps > 0. */
static dit_status read_flux2_fields(const char *dir, double *eps, dit_error *err) {
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "folder path too long");
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 16u << 20, &j, err));
  dit_status s = DIT_OK;
  const json_t *ps = json_object_get(j, "patch_size");
  if (ps && !json_is_null(ps)) {
    int64_t v[4];
    size_t n = 0;
    s = dit_json_int_array(j, "patch_size", 1, 64, v, 4, &n, path, err);
    if (s == DIT_OK && (n != 2 || v[0] != PATCH || v[1] != PATCH))
      s = dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"patch_size\" must be [2, 2] (the pipeline's unpatchify)",
                     path);
  }
  *eps = 1e-4;
  if (s == DIT_OK) s = dit_json_double_opt(j, "batch_norm_eps", eps, path, err);
  if (s == DIT_OK && !(*eps >= 0))
    s = dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"batch_norm_eps\" = %g must be >= 0", path, *eps);
  json_decref(j);
  return s;
}

/* Reads bn.<name> ([n], any float dtype) of the component's files into dst as float32. */
static dit_status read_stat(dit_weights *w, const char *name, int n, float *dst, dit_error *err) {
  char full[64];
  snprintf(full, sizeof full, "bn.%s", name);
  const dit_st_tensor *st = dit_weights_find(w, full);
  if (!st) return dit_errorf(err, DIT_ERR_FORMAT, "missing tensor %s", full);
  if (st->ndim != 1 || st->shape[0] != n || !dit_dtype_is_float(st->dtype))
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor %s must be a float vector of %d (4 x latent_channels)", full, n);
  dit_tensor t;
  DIT_TRY(dit_weights_tensor(w, st, &t, err));
  dit_convert_to_f32(dst, t.data, t.dtype, (size_t)n);
  return DIT_OK;
}

/* The batch-norm statistics of component_dir's files (w: already open, or NULL to open them:
 * on a GPU backend the models' loaders upload their weights and close the files). */
static dit_status read_bn(bn_stats *b, int L, dit_weights *w, const char *component_dir, double eps, dit_error *err) {
  const int n = PATCH * PATCH * L;
  b->latent_channels = L;
  b->mean = malloc((size_t)n * sizeof(float));
  b->std = malloc((size_t)n * sizeof(float));
  if (!b->mean || !b->std) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_weights *own = NULL;
  if (!w) DIT_TRY(dit_weights_open(component_dir, NULL, &own, err));
  dit_status s = read_stat(w ? w : own, "running_mean", n, b->mean, err);
  if (s == DIT_OK) s = read_stat(w ? w : own, "running_var", n, b->std, err);
  if (own) dit_weights_close(own);
  for (int i = 0; s == DIT_OK && i < n; i++) {
    b->std[i] = sqrtf(b->std[i] + (float)eps);
    if (!isfinite(b->std[i]) || !isfinite(b->mean[i]))
      s = dit_errorf(err, DIT_ERR_FORMAT, "bn statistics of channel %d are not finite (or running_var < 0)", i);
  }
  return s;
}

static void bn_free(bn_stats *b) {
  free(b->mean);
  free(b->std);
}

dit_status dit_vae_flux2_load(dit_backend *be, const char *component_dir, dit_vae_flux2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae load: NULL backend or folder");
  double eps = 0;
  dit_status s = read_flux2_fields(component_dir, &eps, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "flux2 vae load");
    return s;
  }
  dit_vae_flux2 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux2 vae load: out of memory");
  static const char *const bn_ignore[] = {"bn.", NULL};
  s = vae_kl_load_class(be, component_dir, "AutoencoderKLFlux2", bn_ignore, &m->kl, err);
  if (s == DIT_OK) {
    m->latent_channels = m->kl->cfg.latent_channels;
    s = read_bn(&m->bn, m->latent_channels, m->kl->weights, component_dir, eps, err);
    if (s != DIT_OK) dit_error_prefix(err, "flux2 vae load: %s", component_dir);
  }
  DIT_HAND_OVER(s, m, out, dit_vae_flux2_free);
}

void dit_vae_flux2_free(dit_vae_flux2 *m) {
  if (!m) return;
  dit_vae_kl_free(m->kl);
  bn_free(&m->bn);
  free(m);
}

dit_status dit_vae_flux2_set_act_dtype(dit_vae_flux2 *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae: no model");
  return dit_vae_kl_set_act_dtype(m->kl, dt, err);
}

int dit_vae_flux2_latent_channels(const dit_vae_flux2 *m) { return m->latent_channels; }
int dit_vae_flux2_packed_channels(const dit_vae_flux2 *m) { return PATCH * PATCH * m->latent_channels; }
int dit_vae_flux2_patch_h(const dit_vae_flux2 *m) { return m ? PATCH : 0; }
int dit_vae_flux2_patch_w(const dit_vae_flux2 *m) { return m ? PATCH : 0; }
int dit_vae_flux2_upscale(const dit_vae_flux2 *m) { return 1 << (m->kl->cfg.n_levels - 1); }

dit_status dit_vae_flux2_decode(dit_vae_flux2 *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae decode: no model");
  return dit_vae_kl_decode(m->kl, z, img, tile, err);
}

dit_status dit_vae_flux2_decode_packed(dit_vae_flux2 *m, const dit_tensor *tokens, int h, int w, dit_tensor *img,
                                       int tile, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae decode: no model");
  const int64_t L = m->latent_channels, P = PATCH * PATCH * L;
  char b1[128];
  if (!tokens || tokens->dtype != DIT_F32 || tokens->ndim != 3 || !tokens->data || !dit_tensor_is_contiguous(tokens) ||
      h < 1 || w < 1 || tokens->shape[1] != (int64_t)h * w || tokens->shape[2] != P || tokens->shape[0] < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "flux2 vae decode: tokens must be contiguous F32 [B, %d*%d, %lld], got %s", h, w, (long long)P,
                      tokens ? dit_shape_str(tokens->shape, tokens->ndim, b1, sizeof b1) : "NULL");
  const int64_t B = tokens->shape[0], H = (int64_t)h * PATCH, W = (int64_t)w * PATCH, hw = (int64_t)h * w;
  float *z = malloc((size_t)(B * P * hw) * sizeof(float));
  if (!z) return dit_errorf(err, DIT_ERR_NOMEM, "flux2 vae decode: out of memory for the latents");
  const float *tk = tokens->data;
  /* z[b, c, y*2+py, x*2+px] = tok[b, y*w+x, c*4+py*2+px] * std + mean */
  for (int64_t b = 0; b < B; b++)
    for (int64_t r = 0; r < hw; r++) {
      const int64_t y = r / w, x = r % w;
      const float *row = tk + (b * hw + r) * P;
      for (int64_t k = 0; k < P; k++) {
        const int64_t c = k / (PATCH * PATCH), py = (k / PATCH) % PATCH, px = k % PATCH;
        z[((b * L + c) * H + y * PATCH + py) * W + x * PATCH + px] = row[k] * m->bn.std[k] + m->bn.mean[k];
      }
    }
  dit_tensor zt = dit_tensor_4d(DIT_F32, z, B, L, H, W);
  dit_status s = dit_vae_kl_decode(m->kl, &zt, img, tile, err);
  free(z);
  if (s != DIT_OK) dit_error_prefix(err, "flux2 vae decode");
  return s;
}

dit_status dit_vae_flux2_cost(const dit_vae_flux2 *m, int h, int w, int tile, dit_cost *out, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae cost: no model");
  DIT_TRY(dit_vae_kl_cost_of(m->kl, h * PATCH, w * PATCH, tile, out, err));
  out->act_bytes += (size_t)(PATCH * PATCH * m->latent_channels) * (size_t)h * (size_t)w * sizeof(float);
  return DIT_OK;
}

dit_status dit_vae_flux2_enc_load(dit_backend *be, const char *component_dir, dit_vae_flux2_enc **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae encoder load: NULL argument");
  double eps = 0;
  dit_status s = read_flux2_fields(component_dir, &eps, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "flux2 vae encoder load");
    return s;
  }
  dit_vae_flux2_enc *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux2 vae encoder load: out of memory");
  s = dit_vae_kl_enc_load(be, component_dir, "AutoencoderKLFlux2", NULL, &m->enc, err);
  if (s == DIT_OK) {
    s = read_bn(&m->bn, m->enc->cfg.latent_channels, m->enc->weights, component_dir, eps, err);
    if (s != DIT_OK) dit_error_prefix(err, "flux2 vae encoder load: %s", component_dir);
  }
  DIT_HAND_OVER(s, m, out, dit_vae_flux2_enc_free);
}

dit_status dit_vae_flux2_enc_set_act_dtype(dit_vae_flux2_enc *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae encoder: no model");
  return dit_vae_kl_enc_set_act_dtype(m->enc, dt, err);
}

void dit_vae_flux2_enc_free(dit_vae_flux2_enc *m) {
  if (!m) return;
  dit_vae_kl_enc_free(m->enc);
  bn_free(&m->bn);
  free(m);
}

int dit_vae_flux2_enc_downscale(const dit_vae_flux2_enc *m) { return 1 << (m->enc->cfg.enc_n_levels - 1); }
int dit_vae_flux2_enc_packed_channels(const dit_vae_flux2_enc *m) { return PATCH * PATCH * m->bn.latent_channels; }

dit_status dit_vae_flux2_encode_packed(dit_vae_flux2_enc *m, const float *pixels, int H, int W, int tile,
                                       float *tokens, dit_error *err) {
  if (!m || !pixels || !tokens) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae encode: NULL argument");
  const int f = dit_vae_flux2_enc_downscale(m), L = m->bn.latent_channels;
  if (H < 2 * f || W < 2 * f || H % (2 * f) || W % (2 * f))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2 vae encode: %dx%d is not a multiple of %d", W, H, 2 * f);
  const int64_t h = H / f, w = W / f, P = PATCH * PATCH * L, gw = w / PATCH, hw = h * w;
  float *mo = malloc((size_t)(2 * L * hw) * sizeof(float));
  if (!mo) return dit_errorf(err, DIT_ERR_NOMEM, "flux2 vae encode: out of memory");
  dit_tensor x = dit_tensor_4d(DIT_F32, (void *)pixels, 1, 3, H, W), mt = dit_tensor_4d(DIT_F32, mo, 1, 2 * L, h, w);
  dit_status s = dit_vae_kl_encode(m->enc, &x, &mt, tile, err);
  if (s == DIT_OK) {
    /* tok[y*gw+x, c*4+py*2+px] = (mean[c, 2y+py, 2x+px] - bn_mean) / bn_std: the mode (mean, the
     * first L channels), patchified as _patchify_latents, normalised per packed channel */
    for (int64_t r = 0; r < (h / PATCH) * gw; r++) {
      const int64_t y = r / gw, xx = r % gw;
      for (int64_t k = 0; k < P; k++) {
        const int64_t c = k / (PATCH * PATCH), py = (k / PATCH) % PATCH, px = k % PATCH;
        const float v = mo[(c * h + y * PATCH + py) * w + xx * PATCH + px];
        tokens[r * P + k] = (v - m->bn.mean[k]) / m->bn.std[k];
      }
    }
  }
  free(mo);
  if (s != DIT_OK) dit_error_prefix(err, "flux2 vae encode");
  return s;
}
