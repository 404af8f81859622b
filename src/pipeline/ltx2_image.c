/* LTX-2 image-to-video's conditioning frame (LTX2ImageToVideoPipeline.prepare_latents): the
 * image re-compressed as one H.264 frame at the image CRF (dit_image_h264_roundtrip), resized
 * to the clip's size with PIL's bilinear filter and normalized (its VideoProcessor), encoded by
 * the video VAE as a one-frame video, the posterior's mode normalized by the VAE's latent
 * statistics; those latents replace the noise of the first latent frame, whose tokens then keep
 * them through the denoising loop. The encoder is the family's DIT_SLOT_VAE_ENC component:
 * loaded on first use, then kept or released as the runtime's keep bits say (DIT_KEEP_VAE), as
 * the image families' encoders are. */
#include <stdlib.h>
#include <string.h>

#include "io/video.h"
#include "models/vae_ltx2.h"
#include "pipeline/image_prep.h"
#include "pipeline/ltx2_pipeline_internal.h"
#include "pipeline/ltx2_sample.h"

/* The encoder's mean of pixels [3, H, W] (host) as host latents [C, h * w]. */
static dit_status encode_frame(dit_vae_ltx2_enc *e, dit_backend *be, const float *px, int H, int W,
                               const dit_ltx2_geom *g, float *lat, dit_error *err) {
  int F, h, w;
  DIT_TRY(dit_vae_ltx2_enc_latent_size(e, 1, H, W, &F, &h, &w, err));
  if (dit_vae_ltx2_enc_latent_channels(e) != g->C || F != 1 || h != g->H || w != g->W)
    return dit_errorf(err, DIT_ERR_FORMAT, "vae: its encoder makes %d x %d x %d latents of %d channels from a %dx%d "
                      "image, the transformer takes %d x %d of %d", F, h, w, dit_vae_ltx2_enc_latent_channels(e), W,
                      H, g->H, g->W, g->C);
  if (dit_vae_ltx2_enc_in_channels(e) != 3)
    return dit_errorf(err, DIT_ERR_FORMAT, "vae: its encoder takes %d channels, not RGB",
                      dit_vae_ltx2_enc_in_channels(e));
  const size_t nin = (size_t)3 * H * W, nout = (size_t)g->C * h * w;
  const dit_device dev = dit_backend_device(be);
  void *xin = NULL, *xout = NULL;
  dit_status s = be->ops->alloc(be, nin * sizeof(float), &xin, err);
  if (s == DIT_OK) s = be->ops->alloc(be, nout * sizeof(float), &xout, err);
  if (s == DIT_OK) s = be->ops->upload(be, xin, px, nin * sizeof(float), err);
  if (s == DIT_OK) {
    dit_tensor x = dit_tensor_make(DIT_F32, xin, 5, (int64_t[]){1, 3, 1, H, W});
    dit_tensor m = dit_tensor_make(DIT_F32, xout, 5, (int64_t[]){1, g->C, 1, h, w});
    x.device = m.device = dev;
    s = dit_vae_ltx2_encode(e, &x, &m, err);
  }
  if (s == DIT_OK) s = be->ops->download(be, lat, xout, nout * sizeof(float), err);
  if (s == DIT_OK) s = be->ops->sync(be, err);
  if (xin) be->ops->free(be, xin);
  if (xout) be->ops->free(be, xout);
  if (s == DIT_OK) dit_vae_ltx2_enc_normalize(e, lat, (int64_t)h * w);
  return s;
}

static dit_status enc_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  char path[4096];
  dit_vae_ltx2_enc *e = NULL;
  DIT_TRY(dit_model_dir_component_path(rt->dir, "vae", path, sizeof path, err));
  DIT_TRY(dit_vae_ltx2_enc_load(rt->dev, path, &e, err));
  *obj = e;
  return DIT_OK;
}
static void enc_free(void *obj) { dit_vae_ltx2_enc_free(obj); }
const dit_component_kind dit_ltx2_vae_enc = {"VAE encode", DIT_KEEP_VAE, enc_load, enc_free, true, NULL};

/* The image's pixels [3, H, W]: re-compressed at the CRF (0: the default, negative: not at all),
 * then resized and normalized. */
static dit_status image_pixels(const dit_gen_params *p, const dit_ltx2_geom *g, float **px, dit_error *err) {
  const int crf = p->image_crf == 0 ? DIT_LTX2_DEFAULT_IMAGE_CRF : p->image_crf;
  if (crf < 0) return dit_image_to_pixels(p->init_image, g->width, g->height, DIT_RESAMPLE_BILINEAR, px, err);
  dit_image c = {0};
  DIT_TRY(dit_image_h264_roundtrip(p->init_image->rgb, p->init_image->width, p->init_image->height, crf, &c.rgb,
                                   &c.width, &c.height, err));
  dit_status s = dit_image_to_pixels(&c, g->width, g->height, DIT_RESAMPLE_BILINEAR, px, err);
  free(c.rgb);
  return s;
}

dit_status dit_ltx2_condition_image(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p,
                                    const dit_ltx2_geom *g, float *video, dit_error *err) {
  float *px = NULL, *lat = malloc((size_t)g->C * g->H * g->W * sizeof *lat);
  if (!lat) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the image latents");
  void *e = NULL;
  dit_status s = image_pixels(p, g, &px, err);
  if (s == DIT_OK) s = dit_component_get(rt, c, DIT_SLOT_VAE_ENC, &e, err);
  if (s == DIT_OK) {
    s = encode_frame(e, rt->dev, px, g->height, g->width, g, lat, err);
    dit_component_done(rt, c, DIT_SLOT_VAE_ENC);
  }
  if (s == DIT_OK) dit_ltx2_pack_video(lat, g->C, 1, g->H, g->W, video); /* the first frame's H W tokens */
  free(px), free(lat);
  if (s != DIT_OK) dit_error_prefix(err, "image conditioning");
  return s;
}
