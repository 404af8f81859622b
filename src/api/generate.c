/* The one-shot generation API: dit_generate (a model loaded with nothing kept, one image,
 * freed), the model's defaults, and the image (and clip) helpers. */
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "io/model_dir.h"
#include "io/image_read.h"
#include "io/png.h"
#include "pipeline/family.h"

void dit_gen_params_default(dit_gen_params *p) {
  memset(p, 0, sizeof *p);
  p->cfg_truncation = 1.0;
  p->rng = DIT_RNG_TORCH_CPU;
  p->device = DIT_DEVICE_CPU;
}

dit_status dit_gen_defaults_for(dit_ctx *ctx, const char *model_dir, dit_gen_defaults *out) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  dit_model_dir *dir = NULL;
  const dit_family *fam = NULL;
  DIT_TRY(dit_model_dir_open(model_dir, &dir, err));
  dit_status s = dit_family_of(dir, &fam, err);
  if (s == DIT_OK) s = dit_family_model_defaults(fam, dir, out, err);
  dit_model_dir_close(dir);
  return s;
}

dit_status dit_generate(dit_ctx *ctx, const dit_gen_params *p, dit_image *out, dit_gen_stats *stats) {
  memset(out, 0, sizeof *out);
  if (stats) memset(stats, 0, sizeof *stats);
  if (!p->model_dir) {
    dit_error_clear(&ctx->err);
    return dit_errorf(&ctx->err, DIT_ERR_INVALID_ARG, "no model folder given");
  }
  /* one image: nothing kept, so each component is released before the next is loaded */
  dit_model_opts o;
  dit_model_opts_default(&o);
  o.device = p->device;
  o.cpu_precision = p->cpu_precision;
  o.gpu_precision = p->gpu_precision;
  o.keep = 0;
  o.files = p->files;
  o.n_files = p->n_files;
  o.loras = p->loras;
  o.n_loras = p->n_loras;
  dit_model *m = NULL;
  dit_status s = dit_model_load(ctx, p->model_dir, &o, &m);
  if (s == DIT_OK) s = dit_model_generate(m, p, out, stats);
  dit_model_free(m);
  return s;
}

void dit_clip_free(dit_clip *c) {
  if (!c) return;
  free(c->rgb);
  free(c->samples);
  memset(c, 0, sizeof *c);
}

void dit_image_free(dit_image *img) {
  if (!img) return;
  free(img->rgb);
  memset(img, 0, sizeof *img);
}

dit_status dit_image_save_png(dit_ctx *ctx, const dit_image *img, const char *path, const char *const *keys,
                              const char *const *values, int n_text, int overwrite) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  if (!img || !img->rgb || img->width <= 0 || img->height <= 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "no image to save");
  return dit_png_write(path, img->rgb, img->width, img->height, keys, values, n_text, overwrite != 0, err);
}

dit_status dit_image_encode_png(dit_ctx *ctx, const dit_image *img, const char *const *keys,
                                const char *const *values, int n_text, uint8_t **out, size_t *out_len) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  if (!out || !out_len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "no output for the PNG");
  *out = NULL;
  *out_len = 0;
  if (!img || !img->rgb || img->width <= 0 || img->height <= 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "no image to encode");
  return dit_png_encode(img->rgb, img->width, img->height, keys, values, n_text, out, out_len, err);
}

dit_status dit_image_load(dit_ctx *ctx, const char *path, int64_t max_pixels, dit_image *out) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  if (!path || !out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "image load: NULL argument");
  return dit_image_read(path, max_pixels > 0 ? max_pixels : DIT_IMAGE_DEFAULT_MAX_PIXELS, out, err);
}

dit_status dit_image_load_mem(dit_ctx *ctx, const uint8_t *data, size_t n, const char *name, int64_t max_pixels,
                              dit_image *out) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  if (!data || !out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "image load: NULL argument");
  return dit_image_decode(data, n, name ? name : "image", max_pixels > 0 ? max_pixels : DIT_IMAGE_DEFAULT_MAX_PIXELS,
                          out, err);
}
