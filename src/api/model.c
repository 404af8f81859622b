/* The resident model (dit_model_load / dit_model_generate / dit_model_free): opens the
 * folder once, finds its family in the registry, owns the backends, and lets the family keep
 * the components the caller asked for loaded between generates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/timer.h"
#include "pipeline/family.h"
#include "pipeline/plan.h"

struct dit_model {
  dit_model_rt rt;
  const dit_family *family;
  void *state;
  dit_gen_defaults defaults;
};

void dit_model_opts_default(dit_model_opts *o) {
  memset(o, 0, sizeof *o);
  o->device = DIT_DEVICE_CPU;
  o->cpu_precision = DIT_CPU_PRECISION_FP32;
  o->keep = DIT_KEEP_ALL;
}

static void free_loras(dit_lora *l, int n) {
  for (int i = 0; i < n; i++) free((char *)l[i].path);
}

void dit_model_free(dit_model *m) {
  if (!m) return;
  if (m->family && m->state) m->family->close(m->state);
  if (m->rt.dev && m->rt.dev != m->rt.host) dit_backend_free(m->rt.dev);
  dit_backend_free(m->rt.host);
  dit_model_dir_close(m->rt.dir);
  free_loras(m->rt.loras, m->rt.n_loras);
  free(m);
}

/* The LoRAs checked and copied into out (the model may load its transformer again in later
 * generates); on failure out holds none. */
static dit_status copy_loras(const dit_lora *loras, int n, dit_lora *out, int *n_out, dit_error *err) {
  *n_out = 0;
  if (n < 0 || n > DIT_MAX_LORAS || (n && !loras))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%d LoRAs (at most %d)", n, DIT_MAX_LORAS);
  for (int i = 0; i < n; i++) {
    dit_status s = DIT_OK;
    char *p = NULL;
    if (!loras[i].path || !*loras[i].path) s = dit_errorf(err, DIT_ERR_INVALID_ARG, "LoRA %d: no file", i + 1);
    else if (!isfinite(loras[i].scale))
      s = dit_errorf(err, DIT_ERR_INVALID_ARG, "LoRA %s: the scale is not a finite number", loras[i].path);
    else if (!(p = strdup(loras[i].path))) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
    if (s != DIT_OK) {
      free_loras(out, *n_out);
      *n_out = 0;
      return s;
    }
    out[(*n_out)++] = (dit_lora){p, loras[i].scale};
  }
  return DIT_OK;
}

dit_status dit_model_set_loras(dit_model *m, const dit_lora *loras, int n) {
  dit_error *err = &m->rt.ctx->err;
  dit_error_clear(err);
  dit_lora old[DIT_MAX_LORAS], now[DIT_MAX_LORAS];
  int n_now = 0;
  DIT_TRY(copy_loras(loras, n, now, &n_now, err));
  const int n_old = m->rt.n_loras;
  memcpy(old, m->rt.loras, sizeof old);
  memcpy(m->rt.loras, now, sizeof now);
  m->rt.n_loras = n_now;
  /* every family's state begins with its components (family.h) */
  dit_status s = dit_components_retune(&m->rt, m->state, err);
  dit_lora *drop = s == DIT_OK ? old : now;
  const int n_drop = s == DIT_OK ? n_old : n_now;
  if (s != DIT_OK) memcpy(m->rt.loras, old, sizeof old), m->rt.n_loras = n_old;
  free_loras(drop, n_drop);
  return s;
}

/* The host backend, and the device backend the models run on (the same one on the CPU). */
static dit_status create_backends(dit_model *m, const dit_model_opts *o, dit_error *err) {
  if (o->device != DIT_DEVICE_CPU && o->device != DIT_DEVICE_CUDA)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "unknown device %d", (int)o->device);
  const int threads = m->rt.ctx->params.n_threads;
  const dit_backend_precision dev = {o->cpu_precision, o->gpu_precision}, host = {o->cpu_precision, 0};
  /* the CPU device is the host backend, asked with the caller's precisions (fp8 is refused there) */
  DIT_TRY(dit_backend_create(DIT_DEVICE_CPU, 0, threads, o->device == DIT_DEVICE_CPU ? dev : host,
                             &m->rt.ctx->opts, &m->rt.host, err));
  if (o->device == DIT_DEVICE_CPU) {
    m->rt.dev = m->rt.host;
    return DIT_OK;
  }
  return dit_backend_create(o->device, 0, threads, dev, &m->rt.ctx->opts, &m->rt.dev, err);
}

dit_status dit_model_load(dit_ctx *ctx, const char *model_dir, const dit_model_opts *o, dit_model **out) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  *out = NULL;
  dit_model_opts def;
  if (!o) {
    dit_model_opts_default(&def);
    o = &def;
  }
  if (!model_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "no model folder given");
  if (o->keep & ~(unsigned)DIT_KEEP_ALL) return dit_errorf(err, DIT_ERR_INVALID_ARG, "unknown keep bits %#x", o->keep);
  dit_model *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  m->rt.ctx = ctx;
  m->rt.keep = o->keep;
  dit_status s = dit_model_dir_open(model_dir, &m->rt.dir, err);
  if (s == DIT_OK && (o->n_files < 0 || o->n_files > DIT_MAX_COMPONENT_FILES || (o->n_files && !o->files)))
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "%d component files (at most %d)", o->n_files, DIT_MAX_COMPONENT_FILES);
  for (int i = 0; s == DIT_OK && i < o->n_files; i++)
    s = dit_model_dir_set_file(m->rt.dir, o->files[i].component, o->files[i].path, err);
  if (s == DIT_OK) s = copy_loras(o->loras, o->n_loras, m->rt.loras, &m->rt.n_loras, err);
  if (s == DIT_OK) s = dit_family_of(m->rt.dir, &m->family, err);
  if (s == DIT_OK) s = dit_family_model_defaults(m->family, m->rt.dir, &m->defaults, err);
  if (s == DIT_OK) s = create_backends(m, o, err);
  if (s == DIT_OK) s = m->family->open(&m->rt, &m->state, err);
  DIT_HAND_OVER(s, m, out, dit_model_free);
}

void dit_model_get_defaults(const dit_model *m, dit_gen_defaults *out) { *out = m->defaults; }

/* Ranges of the parameters every family shares (sizes and steps may still be 0 here). */
static dit_status check_params(const dit_gen_params *p, dit_error *err) {
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
  if (p->init_image && (!p->init_image->rgb || p->init_image->width < 1 || p->init_image->height < 1))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "the init image is empty");
  if (p->init_image && !(p->strength == 0 || (p->strength > 0 && p->strength <= 1)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "strength = %g is outside (0, 1]", p->strength);
  if (p->n_ref_images < 0 || p->n_ref_images > DIT_MAX_REF_IMAGES || (p->n_ref_images > 0 && !p->ref_images))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%d reference images (at most %d)", p->n_ref_images,
                      DIT_MAX_REF_IMAGES);
  for (int i = 0; i < p->n_ref_images; i++)
    if (!p->ref_images[i].rgb || p->ref_images[i].width < 1 || p->ref_images[i].height < 1)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "reference image %d is empty", i + 1);
  return DIT_OK;
}

/* An init or reference image given to a family whose pipeline takes none. */
static dit_status check_inputs(const dit_family *f, const dit_gen_params *p, dit_error *err) {
  if (p->init_image && !(f->inputs & DIT_INPUT_INIT_IMAGE))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s does not take an init image (image-to-image)%s", f->title,
                      f->inputs & DIT_INPUT_REF_IMAGES ? "; it takes reference images" : "");
  if (p->n_ref_images && !(f->inputs & DIT_INPUT_REF_IMAGES))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s does not take reference images%s", f->title,
                      f->inputs & DIT_INPUT_INIT_IMAGE ? "; it takes an init image (image-to-image)" : "");
  return DIT_OK;
}

/* An image's parameters: those left at 0 take the model's defaults. */
static void image_params(const dit_model *m, const dit_gen_params *p, dit_gen_params *q) {
  *q = *p;
  const dit_gen_defaults *d = &m->defaults;
  const bool sized_by_image = p->init_image || p->n_ref_images > 0;
  if (q->width <= 0 && !sized_by_image) q->width = d->width;
  if (q->height <= 0 && !sized_by_image) q->height = d->height;
  if (q->init_image && q->strength == 0) q->strength = 0.6;
  if (q->steps <= 0) q->steps = d->steps;
  if (!q->guidance_set) q->guidance = d->guidance, q->guidance_set = 1;
}

/* A clip's parameters, likewise. */
static void clip_params(const dit_model *m, const dit_gen_params *p, dit_gen_params *q) {
  *q = *p;
  const dit_gen_defaults *d = &m->defaults;
  if (q->width <= 0) q->width = d->width;
  if (q->height <= 0) q->height = d->height;
  if (q->steps <= 0) q->steps = d->steps;
  if (q->frames <= 0) q->frames = d->frames;
  if (q->fps <= 0) q->fps = d->fps;
  if (!q->guidance_set) q->guidance = d->guidance, q->guidance_set = 1;
}

dit_status dit_model_generate(dit_model *m, const dit_gen_params *p, dit_image *out, dit_gen_stats *stats) {
  dit_error *err = &m->rt.ctx->err;
  dit_error_clear(err);
  memset(out, 0, sizeof *out);
  if (stats) memset(stats, 0, sizeof *stats);
  DIT_TRY(check_params(p, err));
  DIT_TRY(check_inputs(m->family, p, err));
  dit_gen_params q;
  image_params(m, p, &q);
  if (!m->family->generate)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s makes videos, not images (dit_model_generate_clip; the CLI: "
                      "-o NAME.mp4)", m->family->title);
  dit_status s = m->family->generate(&m->rt, m->state, &q, out, stats, err);
  if (s != DIT_OK) dit_image_free(out);
  return s;
}

dit_status dit_model_generate_clip(dit_model *m, const dit_gen_params *p, dit_clip *out, dit_gen_stats *stats) {
  dit_error *err = &m->rt.ctx->err;
  dit_error_clear(err);
  memset(out, 0, sizeof *out);
  if (stats) memset(stats, 0, sizeof *stats);
  if (!m->family->generate_clip)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s makes images, not videos", m->family->title);
  DIT_TRY(check_params(p, err));
  DIT_TRY(check_inputs(m->family, p, err));
  if (p->frames < 0 || p->frames > 100000)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "frames = %d is outside 1..100000", p->frames);
  if (!isfinite(p->fps) || p->fps < 0 || p->fps > 1000)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "fps = %g is outside (0, 1000]", p->fps);
  if (p->image_crf > 51)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "image CRF %d is outside 1..51 (0: the model's default, negative: "
                      "none)", p->image_crf);
  if (p->init_image && p->strength != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "strength does not apply to image-to-video (the init image is the "
                      "first frame, kept as it is)");
  dit_gen_params q;
  clip_params(m, p, &q);
  dit_status s = m->family->generate_clip(&m->rt, m->state, &q, out, stats, err);
  if (s != DIT_OK) dit_clip_free(out);
  return s;
}

dit_status dit_model_plan(dit_ctx *ctx, const dit_gen_params *p, const dit_model_opts *o, dit_plan *out) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  memset(out, 0, sizeof *out);
  if (!p) return dit_errorf(err, DIT_ERR_INVALID_ARG, "plan: no parameters");
  dit_model_opts mo;
  if (o) mo = *o;
  else dit_model_opts_default(&mo), mo.keep = 0;
  if (mo.device != DIT_DEVICE_CPU)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "plan: only the CPU is planned so far (not CUDA yet)");
  if (mo.keep & ~(unsigned)DIT_KEEP_ALL) return dit_errorf(err, DIT_ERR_INVALID_ARG, "unknown keep bits %#x", mo.keep);
  out->base_bytes = dit_rss_bytes();
  out->start_peak_bytes = dit_peak_rss_bytes();
  out->device = mo.device;
  out->keep = mo.keep;
  /* opened with nothing loaded and no LoRA: the family's plan opens each component on the host
   * (mapped, never run) and releases it */
  dit_model_opts ho = mo;
  ho.keep = 0, ho.loras = NULL, ho.n_loras = 0;
  dit_model *m = NULL;
  DIT_TRY(dit_model_load(ctx, p->model_dir, &ho, &m));
  dit_gen_params q = *p;
  if (!q.prompt) q.prompt = m->defaults.prompt;
  dit_status s = check_params(&q, err);
  if (s == DIT_OK) s = check_inputs(m->family, &q, err);
  if (s == DIT_OK && !m->family->plan)
    s = dit_errorf(err, DIT_ERR_UNSUPPORTED, "plan: %s is not planned yet", m->family->title);
  if (s == DIT_OK) {
    const dit_gen_params given = q;
    if (m->family->generate) image_params(m, &given, &q);
    else clip_params(m, &given, &q);
    snprintf(out->family, sizeof out->family, "%s", m->family->name);
    out->width = q.width, out->height = q.height, out->frames = q.frames, out->steps = q.steps, out->batch = 1;
    s = m->family->plan(&m->rt, m->state, &q, out, err);
  }
  dit_model_free(m);
  if (s == DIT_OK) dit_plan_finish(out);
  return s;
}

/* Mean and standard deviation of channel c over the latent picture (stride apart from
 * first, count values). */
static void channel_stats(const float *x, size_t first, size_t stride, size_t count, double *mean, double *sd) {
  double s = 0, s2 = 0;
  for (size_t i = 0; i < count; i++) {
    double v = x[first + i * stride];
    s += v, s2 += v * v;
  }
  *mean = s / (double)count;
  double var = s2 / (double)count - *mean * *mean;
  *sd = var > 0 ? sqrt(var) : 0;
}

dit_status dit_model_latent_preview(const dit_model *m, int width, int height, const float *latents, size_t n,
                                    dit_image *out) {
  dit_error *err = &m->rt.ctx->err;
  dit_error_clear(err);
  memset(out, 0, sizeof *out);
  const dit_latent_layout *L = &m->family->latent;
  if (!latents || !L->grid || width < L->grid || height < L->grid)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "latent preview: no latents for a %dx%d image", width, height);
  const size_t gh = (size_t)(height / L->grid), gw = (size_t)(width / L->grid), p = (size_t)L->patch;
  const size_t h = gh * p, w = gw * p, hw = h * w;
  if (n % hw || n / hw < 3)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "latent preview: %zu latents do not fit a %zux%zu latent picture", n,
                      h, w);
  const size_t C = n / hw, tok_ch = C * p * p; /* packed: channels per token */
  out->rgb = malloc(hw * 3);
  if (!out->rgb) return dit_errorf(err, DIT_ERR_NOMEM, "latent preview: out of memory");
  out->width = (int)w, out->height = (int)h;
  for (size_t c = 0; c < 3; c++) {
    double mean, sd;
    if (L->packed) channel_stats(latents, c * p * p, tok_ch, gh * gw, &mean, &sd); /* the (0, 0) pixel of each patch */
    else channel_stats(latents, c * hw, 1, hw, &mean, &sd);
    const double lo = mean - 2 * sd, scale = sd > 0 ? 255.0 / (4 * sd) : 0;
    for (size_t y = 0; y < h; y++)
      for (size_t x = 0; x < w; x++) {
        size_t at = L->packed ? ((y / p) * gw + x / p) * tok_ch + c * p * p + (y % p) * p + x % p : c * hw + y * w + x;
        double v = (latents[at] - lo) * scale;
        out->rgb[(y * w + x) * 3 + c] = (uint8_t)(v < 0 || v != v ? 0 : v > 255 ? 255 : v + 0.5);
      }
  }
  return DIT_OK;
}

int dit_family_get(size_t i, const char **name, const char **title, const char *const **pipelines) {
  const dit_family *f = dit_family_at(i);
  if (!f) return 0;
  if (name) *name = f->name;
  if (title) *title = f->title;
  if (pipelines) *pipelines = f->pipelines;
  return 1;
}
