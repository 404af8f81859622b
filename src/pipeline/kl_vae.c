/* AutoencoderKL decode and encode stages (see kl_vae.h). */
#include "pipeline/kl_vae.h"

#include <stdlib.h>

#include "models/vae_kl.h"
#include "pipeline/pipeline_common.h"

/* The VAE on rt->dev (bf16 activations on a GPU, as the bf16 reference pipelines run it): the
 * folder's, or a single file (ae.safetensors) with the folder's config.json when it has one. */
static dit_status vae_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  dit_component_src src;
  dit_vae_kl *m = NULL;
  DIT_TRY(dit_component_source(rt, "vae", &src, err));
  if (src.is_file)
    DIT_TRY(dit_vae_kl_load_file(rt->dev, src.path, src.cfg, &m, err));
  else
    DIT_TRY(dit_vae_kl_load(rt->dev, src.path, &m, err));
  dit_status s = dit_rt_on_device(rt) ? dit_vae_kl_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
  DIT_HAND_OVER(s, m, obj, dit_vae_kl_free);
}

static void vae_free(void *obj) { dit_vae_kl_free(obj); }

static const dit_component_kind vae_kl_kind = {"VAE decode", DIT_KEEP_VAE, vae_load, vae_free, false, NULL};
const dit_component_kind *const dit_vae_kl_component = &vae_kl_kind;

dit_status dit_kl_decode_stage(const dit_model_rt *rt, dit_components *c, const float *latents, int C, int h, int w,
                               int vae_tile, dit_image *out, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_VAE, &obj, err));
  dit_vae_kl *vae = obj;
  const dit_vae_kl_config *vc = dit_vae_kl_get_config(vae);
  const int H = h * 8, W = w * 8;
  const size_t n = (size_t)C * (size_t)h * (size_t)w;
  float *zl = malloc(n * sizeof(float));
  float *img = malloc(3 * (size_t)H * W * sizeof(float));
  dit_status s = DIT_OK;
  if (!zl || !img) s = dit_errorf(err, DIT_ERR_NOMEM, "VAE decode: out of memory");
  if (s == DIT_OK) {
    const float sf = (float)vc->scaling_factor, sh = (float)vc->shift_factor;
    for (size_t k = 0; k < n; k++) zl[k] = latents[k] / sf + sh;
    dit_tensor zt = dit_tensor_4d(DIT_F32, zl, 1, C, h, w);
    dit_tensor it = dit_tensor_4d(DIT_F32, img, 1, 3, H, W);
    s = dit_vae_kl_decode(vae, &zt, &it, vae_tile, err);
  }
  if (s == DIT_OK) s = dit_image_from_decoder(img, H, W, out, err);
  free(zl);
  free(img);
  dit_component_done(rt, c, DIT_SLOT_VAE);
  return s;
}

dit_status dit_kl_decode_cost(const dit_model_rt *rt, dit_components *c, int C, int h, int w, int vae_tile,
                              dit_cost *out, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_VAE, &obj, err));
  dit_status s = dit_vae_kl_cost_of(obj, h, w, vae_tile, out, err);
  const size_t px = (size_t)(h * 8) * (size_t)(w * 8);
  out->act_bytes += (size_t)C * (size_t)h * (size_t)w * sizeof(float) + 3 * px * sizeof(float) + 3 * px;
  dit_component_done(rt, c, DIT_SLOT_VAE);
  return s;
}

/* The encoder on rt->dev, from the same source as the decoder. */
static dit_status enc_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  dit_component_src src;
  dit_vae_kl_enc *m = NULL;
  DIT_TRY(dit_component_source(rt, "vae", &src, err));
  DIT_TRY(dit_vae_kl_enc_load(rt->dev, src.path, "AutoencoderKL", src.is_file ? src.cfg : NULL, &m, err));
  dit_status s = dit_rt_on_device(rt) ? dit_vae_kl_enc_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
  DIT_HAND_OVER(s, m, obj, dit_vae_kl_enc_free);
}

static void enc_free(void *obj) { dit_vae_kl_enc_free(obj); }

static const dit_component_kind vae_kl_enc_kind = {"VAE encode", DIT_KEEP_VAE, enc_load, enc_free, true, NULL};
const dit_component_kind *const dit_vae_kl_enc_component = &vae_kl_enc_kind;

dit_status dit_kl_encode_stage(const dit_model_rt *rt, dit_components *c, const float *pixels, int H, int W,
                               dit_torch_rng *g, int vae_tile, float **latents, int *C, dit_error *err) {
  *latents = NULL;
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_VAE_ENC, &obj, err));
  dit_vae_kl_enc *enc = obj;
  const dit_vae_kl_config *vc = dit_vae_kl_enc_get_config(enc);
  const int f = 1 << (vc->enc_n_levels - 1), h = H / f, w = W / f, L = vc->latent_channels;
  const size_t n = (size_t)L * (size_t)h * (size_t)w;
  float *mo = malloc(2 * n * sizeof(float)), *lat = malloc(n * sizeof(float));
  float *noise = g ? malloc(n * sizeof(float)) : NULL;
  dit_status s = mo && lat && (!g || noise) ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "VAE encode: out of memory");
  if (s == DIT_OK) {
    dit_tensor x = dit_tensor_4d(DIT_F32, (void *)pixels, 1, 3, H, W);
    dit_tensor m = dit_tensor_4d(DIT_F32, mo, 1, 2 * L, h, w);
    s = dit_vae_kl_encode(enc, &x, &m, vae_tile, err);
  }
  if (s == DIT_OK) {
    if (g) dit_torch_randn(g, noise, n);
    dit_vae_kl_latent(mo, L, (size_t)h * (size_t)w, noise, lat);
    const float sf = vc->scaling_factor, sh = vc->shift_factor;
    for (size_t k = 0; k < n; k++) lat[k] = (lat[k] - sh) * sf;
    *latents = lat, *C = L;
    lat = NULL;
  }
  free(mo);
  free(lat);
  free(noise);
  dit_component_done(rt, c, DIT_SLOT_VAE_ENC);
  return s;
}
