/* Public generation API (dit_generate and friends): opens the model folder, picks the
 * family's pipeline from model_index.json, creates the backend and runs it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/ctx.h"
#include "io/model_dir.h"
#include "io/png.h"
#include "pipeline/flux2_pipeline.h"
#include "pipeline/model_defaults.h"
#include "pipeline/zimage_pipeline.h"

void dit_gen_params_default(dit_gen_params *p) {
  memset(p, 0, sizeof *p);
  p->cfg_truncation = 1.0;
  p->max_sequence_length = 512;
  p->rng = DIT_RNG_TORCH_CPU;
  p->device = DIT_DEVICE_CPU;
}

typedef enum family { FAMILY_UNKNOWN = 0, FAMILY_ZIMAGE, FAMILY_FLUX2_KLEIN } family;

static family family_of(const dit_model_dir *d) {
  if (d->pipeline && !strcmp(d->pipeline, "ZImagePipeline")) return FAMILY_ZIMAGE;
  if (d->pipeline && !strcmp(d->pipeline, "Flux2KleinPipeline")) return FAMILY_FLUX2_KLEIN;
  return FAMILY_UNKNOWN;
}

static dit_status open_family(const char *model_dir, dit_model_dir **dir, family *fam, dit_error *err) {
  DIT_TRY(dit_model_dir_open(model_dir, dir, err));
  *fam = family_of(*dir);
  if (*fam == FAMILY_UNKNOWN) {
    dit_errorf(err, DIT_ERR_UNSUPPORTED,
               "%s: pipeline \"%s\" is not supported (supported: ZImagePipeline, Flux2KleinPipeline)", model_dir,
               (*dir)->pipeline ? (*dir)->pipeline : "?");
    dit_model_dir_close(*dir);
    *dir = NULL;
    return err->status;
  }
  return DIT_OK;
}

/* The family's defaults, then the folder's ditrun.json over them. */
static dit_status model_defaults(const dit_model_dir *dir, family fam, dit_gen_defaults *out, dit_error *err) {
  if (fam == FAMILY_FLUX2_KLEIN) {
    bool distilled = false;
    DIT_TRY(dit_flux2_klein_is_distilled(dir, &distilled, err));
    dit_flux2_klein_defaults(distilled, out);
  } else {
    dit_zimage_defaults(out);
  }
  return dit_model_defaults_apply(dir, out, err);
}

dit_status dit_gen_defaults_for(dit_ctx *ctx, const char *model_dir, dit_gen_defaults *out) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  dit_model_dir *dir = NULL;
  family fam;
  DIT_TRY(open_family(model_dir, &dir, &fam, err));
  dit_status s = model_defaults(dir, fam, out, err);
  dit_model_dir_close(dir);
  return s;
}

static dit_status check_params(const dit_gen_params *p, dit_error *err) {
  if (!p->model_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "no model folder given");
  if (!p->prompt) return dit_errorf(err, DIT_ERR_INVALID_ARG, "no prompt given");
  if (p->width < 0 || p->height < 0 || p->width > 16384 || p->height > 16384)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "image size %dx%d is outside 1..16384", p->width, p->height);
  if (p->steps < 0 || p->steps > 1000)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "steps = %d is outside 1..1000", p->steps);
  if (p->guidance_set && !isfinite(p->guidance))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "guidance must be a finite number");
  if (!isfinite(p->cfg_truncation) || !isfinite(p->cfg_normalization) || p->cfg_normalization < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "cfg truncation/normalization must be finite (normalization >= 0)");
  if (p->max_sequence_length < 0 || p->max_sequence_length > 32768)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "max sequence length %d is outside 1..32768", p->max_sequence_length);
  if (p->rng != DIT_RNG_TORCH_CPU) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "unknown random number generator");
  if (p->device != DIT_DEVICE_CPU && p->device != DIT_DEVICE_CUDA)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "unknown device %d", (int)p->device);
  return DIT_OK;
}

dit_status dit_generate(dit_ctx *ctx, const dit_gen_params *p, dit_image *out, dit_gen_stats *stats) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  memset(out, 0, sizeof *out);
  if (stats) memset(stats, 0, sizeof *stats);
  DIT_TRY(check_params(p, err));
  dit_model_dir *dir = NULL;
  family fam;
  DIT_TRY(open_family(p->model_dir, &dir, &fam, err));
  /* parameters left at 0 take the model's defaults (the pipelines fill only the family's) */
  dit_gen_defaults d;
  dit_gen_params q = *p;
  dit_status s = model_defaults(dir, fam, &d, err);
  if (s == DIT_OK) {
    if (q.width <= 0) q.width = d.width;
    if (q.height <= 0) q.height = d.height;
    if (q.steps <= 0) q.steps = d.steps;
    if (!q.guidance_set) q.guidance = d.guidance, q.guidance_set = 1;
    p = &q;
  }
  dit_backend *be = NULL;
  if (s == DIT_OK) s = dit_backend_cpu_create(ctx->params.n_threads, &be, err);
  if (s == DIT_OK) s = dit_backend_cpu_set_precision(be, p->cpu_precision, err);
  if (s == DIT_OK && fam == FAMILY_FLUX2_KLEIN) s = dit_flux2_klein_generate(ctx, be, dir, p, out, stats, err);
  else if (s == DIT_OK) s = dit_zimage_generate(ctx, be, dir, p, out, stats, err);
  dit_backend_free(be);
  dit_model_dir_close(dir);
  if (s != DIT_OK) dit_image_free(out);
  return s;
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
