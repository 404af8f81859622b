/* The resident model API (dit_model_load / dit_model_generate / dit_model_free) on the
 * fixture models:
 * - a model keeping everything makes the same image as one-shot dit_generate, twice, and its
 *   generates read no weights: the weight files are removed after the load and it still works
 *   (a model that keeps nothing then fails, so the check can fail);
 * - the step callback cancels (DIT_ERR_CANCELLED, no image), and can make a latent preview;
 * - dit_image_encode_png gives the bytes dit_image_save_png writes;
 * - an unsupported pipeline names the supported ones (from the family registry);
 * - two models in two threads, side by side, give the images they give alone;
 * - dit_model_dir_for_file finds the shipped folder for a single transformer file.
 * Usage: test_model_api (fixtures under <data>/models). */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ditrun.h"
#include "testing.h"

static char g_data[4096], g_tmp[4096];

static void params(dit_gen_params *p, const char *model, uint64_t seed) {
  dit_gen_params_default(p);
  p->model_dir = model;
  p->prompt = "a red fox in the snow";
  p->width = 96;
  p->height = 128;
  p->steps = 2;
  p->seed = seed;
}

static int same_image(const dit_image *a, const dit_image *b) {
  return a->rgb && b->rgb && a->width == b->width && a->height == b->height &&
         !memcmp(a->rgb, b->rgb, (size_t)a->width * a->height * 3);
}

/* A copy of model_dir in which every file is a symlink (folders are real). */
static int link_copy(const char *src, const char *dst) {
  mkdir(dst, 0777);
  DIR *d = opendir(src);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) && rc == 0) {
    if (e->d_name[0] == '.') continue;
    char s[PATH_MAX], t[PATH_MAX];
    snprintf(s, sizeof s, "%s/%s", src, e->d_name);
    snprintf(t, sizeof t, "%s/%s", dst, e->d_name);
    struct stat st;
    if (stat(s, &st) != 0) rc = -1;
    else if (S_ISDIR(st.st_mode)) rc = link_copy(s, t);
    else {
      char *abs = realpath(s, NULL);
      unlink(t);
      rc = abs && symlink(abs, t) == 0 ? 0 : -1;
      free(abs);
    }
  }
  closedir(d);
  return rc;
}

/* Removes every *.safetensors link under dir (one level of component folders). */
static int drop_weights(const char *dir) {
  static const char *const comps[] = {"text_encoder", "transformer", "vae"};
  int n = 0;
  for (size_t i = 0; i < sizeof comps / sizeof *comps; i++) {
    char c[PATH_MAX];
    snprintf(c, sizeof c, "%s/%s", dir, comps[i]);
    DIR *d = opendir(c);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      size_t l = strlen(e->d_name);
      if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) {
        char f[PATH_MAX + 256];
        snprintf(f, sizeof f, "%s/%s", c, e->d_name);
        n += unlink(f) == 0;
      }
    }
    if (d) closedir(d);
  }
  return n;
}

static void test_resident(dit_ctx *ctx, const char *name) {
  char src[4096], copy[4096];
  snprintf(src, sizeof src, "%s/models/%s", g_data, name);
  snprintf(copy, sizeof copy, "%s/%s-links", g_tmp, name);
  CHECK_MSG(link_copy(src, copy) == 0, "cannot make %s", copy);
  dit_gen_params p;
  dit_image ref[2] = {{0}}, img = {0};
  for (int i = 0; i < 2; i++) {
    params(&p, src, 42 + i);
    CHECK_MSG(dit_generate(ctx, &p, &ref[i], NULL) == DIT_OK, "%s: %s", name, dit_ctx_last_error(ctx));
  }
  dit_model *all = NULL, *none = NULL;
  dit_model_opts o;
  dit_model_opts_default(&o);
  CHECK(o.keep == DIT_KEEP_ALL && o.device == DIT_DEVICE_CPU);
  CHECK_MSG(dit_model_load(ctx, copy, &o, &all) == DIT_OK, "%s: %s", name, dit_ctx_last_error(ctx));
  o.keep = 0;
  CHECK_MSG(dit_model_load(ctx, copy, &o, &none) == DIT_OK, "%s: %s", name, dit_ctx_last_error(ctx));
  dit_gen_defaults d;
  if (all) dit_model_get_defaults(all, &d);
  CHECK(all && d.width == 1024 && d.size_multiple == 16);
  int dropped = drop_weights(copy);
  CHECK_MSG(dropped >= 3, "%s: removed %d weight files", name, dropped);
  for (int i = 0; all && i < 2; i++) {
    params(&p, NULL, 42 + i); /* the model's folder is its own: p.model_dir is not read */
    dit_gen_stats st;
    dit_status s = dit_model_generate(all, &p, &img, &st);
    CHECK_MSG(s == DIT_OK, "%s: resident generate %d without weight files: %s", name, i, dit_ctx_last_error(ctx));
    CHECK_MSG(same_image(&img, &ref[i]), "%s: resident image %d differs from dit_generate's", name, i);
    CHECK(st.steps == 2);
    dit_image_free(&img);
  }
  if (none) {
    params(&p, NULL, 42);
    dit_status s = dit_model_generate(none, &p, &img, NULL);
    CHECK_MSG(s != DIT_OK && img.rgb == NULL, "%s: a model that keeps nothing ran without its weight files", name);
  }
  dit_model_free(all);
  dit_model_free(none);
  dit_image_free(&ref[0]);
  dit_image_free(&ref[1]);
}

typedef struct cancel_at {
  int step, calls;
} cancel_at;

static int cancel_cb(void *user, int step, int total, const float *lat, size_t n, double secs) {
  (void)total, (void)lat, (void)n, (void)secs;
  cancel_at *c = user;
  c->calls++;
  return step == c->step;
}

static void test_cancel(dit_ctx *ctx) {
  char src[4096];
  snprintf(src, sizeof src, "%s/models/zimage-tiny", g_data);
  dit_model *m = NULL;
  CHECK(dit_model_load(ctx, src, NULL, &m) == DIT_OK);
  dit_gen_params p;
  params(&p, NULL, 1);
  p.steps = 4;
  cancel_at c = {.step = 1};
  p.on_step = cancel_cb;
  p.user = &c;
  dit_image img = {0};
  dit_status s = m ? dit_model_generate(m, &p, &img, NULL) : DIT_ERR_INTERNAL;
  CHECK_MSG(s == DIT_ERR_CANCELLED && img.rgb == NULL && c.calls == 2, "cancel: status %d, %d calls", (int)s,
            c.calls);
  CHECK(strstr(dit_ctx_last_error(ctx), "cancelled") != NULL);
  CHECK(dit_status_exit_code(DIT_ERR_CANCELLED) == 1 && !strcmp(dit_status_str(DIT_ERR_CANCELLED), "cancelled"));
  /* the model is still usable after a cancel */
  c.step = -1;
  s = m ? dit_model_generate(m, &p, &img, NULL) : DIT_ERR_INTERNAL;
  CHECK(s == DIT_OK && img.rgb && c.calls == 6);
  dit_image_free(&img);
  dit_model_free(m);
}

/* dit_model_latent_preview from the step callback: one pixel per latent pixel, not flat;
 * latents that do not fit the image size are refused. */
typedef struct preview_at {
  dit_model *m;
  int calls, ok, w, h, bad_refused;
  long distinct;
} preview_at;

static int preview_cb(void *user, int step, int total, const float *lat, size_t n, double secs) {
  (void)step, (void)total, (void)secs;
  preview_at *c = user;
  dit_image img = {0};
  c->calls++;
  if (dit_model_latent_preview(c->m, 96, 128, lat, n, &img) == DIT_OK) {
    c->ok++, c->w = img.width, c->h = img.height;
    long d = 0;
    for (int i = 1; i < img.width * img.height; i++) d += memcmp(img.rgb, img.rgb + 3 * i, 3) != 0;
    c->distinct = d;
  }
  dit_image_free(&img);
  c->bad_refused += dit_model_latent_preview(c->m, 96, 128, lat, n - 1, &img) == DIT_ERR_INVALID_ARG && !img.rgb;
  return 0;
}

static void test_preview_and_png(dit_ctx *ctx, const char *name) {
  char src[4096], path[4200];
  snprintf(src, sizeof src, "%s/models/%s", g_data, name);
  preview_at c = {0};
  CHECK(dit_model_load(ctx, src, NULL, &c.m) == DIT_OK);
  if (!c.m) return;
  dit_gen_params p;
  params(&p, NULL, 3);
  p.on_step = preview_cb;
  p.user = &c;
  dit_image img = {0};
  CHECK(dit_model_generate(c.m, &p, &img, NULL) == DIT_OK);
  CHECK_MSG(c.ok == c.calls && c.calls == 2 && c.w == 12 && c.h == 16 && c.distinct > 100 && c.bad_refused == 2,
            "%s preview: %d of %d calls, %dx%d, %ld pixels unlike the first, %d bad refused", name, c.ok, c.calls, c.w,
            c.h, c.distinct, c.bad_refused);
  printf("%s latent preview: %dx%d for a 96x128 image\n", name, c.w, c.h);
  /* the PNG in memory is the file dit_image_save_png writes */
  const char *keys[1] = {"parameters"}, *vals[1] = {"a red fox in the snow\nSteps: 2"};
  uint8_t *png = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/%s-mem.png", g_tmp, name);
  CHECK(dit_image_encode_png(ctx, &img, keys, vals, 1, &png, &len) == DIT_OK);
  CHECK(dit_image_save_png(ctx, &img, path, keys, vals, 1, 1) == DIT_OK);
  FILE *f = fopen(path, "rb");
  uint8_t *file = malloc(len + 1);
  size_t got = f && file ? fread(file, 1, len + 1, f) : 0;
  CHECK_MSG(png && got == len && !memcmp(png, file, len), "encode_png: %zu bytes in memory, %zu in the file", len, got);
  if (f) fclose(f);
  free(file);
  free(png);
  const char *bad_key[1] = {" bad"};
  CHECK(dit_image_encode_png(ctx, &img, bad_key, vals, 1, &png, &len) == DIT_ERR_INVALID_ARG && !png && !len);
  dit_image_free(&img);
  dit_model_free(c.m);
}

static void test_unsupported(dit_ctx *ctx) {
  char dir[4096], f[4200];
  snprintf(dir, sizeof dir, "%s/sdxl", g_tmp);
  mkdir(dir, 0777);
  snprintf(f, sizeof f, "%s/model_index.json", dir);
  FILE *fp = fopen(f, "w");
  if (fp) fputs("{\"_class_name\": \"StableDiffusionXLPipeline\"}", fp), fclose(fp);
  dit_model *m = (dit_model *)1;
  CHECK(dit_model_load(ctx, dir, NULL, &m) == DIT_ERR_UNSUPPORTED && m == NULL);
  const char *msg = dit_ctx_last_error(ctx);
  CHECK_MSG(strstr(msg, "StableDiffusionXLPipeline") && strstr(msg, "ZImagePipeline") &&
                strstr(msg, "Flux2KleinPipeline"),
            "message: %s", msg);
  dit_model_opts o;
  dit_model_opts_default(&o);
  o.keep = 64;
  snprintf(dir, sizeof dir, "%s/models/zimage-tiny", g_data);
  CHECK(dit_model_load(ctx, dir, &o, &m) == DIT_ERR_INVALID_ARG && m == NULL);
}

typedef struct job {
  const char *model;
  uint64_t seed;
  dit_image img;
  dit_status s;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  cp.n_threads = 1;
  dit_ctx *ctx = NULL;
  j->s = dit_ctx_create(&cp, &ctx);
  dit_model *m = NULL;
  if (j->s == DIT_OK) j->s = dit_model_load(ctx, j->model, NULL, &m);
  dit_gen_params p;
  params(&p, NULL, j->seed);
  if (j->s == DIT_OK) j->s = dit_model_generate(m, &p, &j->img, NULL);
  dit_model_free(m);
  dit_ctx_free(ctx);
  return NULL;
}

static void test_side_by_side(void) {
  char zi[4096], kl[4096];
  snprintf(zi, sizeof zi, "%s/models/zimage-tiny", g_data);
  snprintf(kl, sizeof kl, "%s/models/flux2-klein-tiny", g_data);
  job alone[2] = {{zi, 3, {0}, 0}, {kl, 4, {0}, 0}}, both[2] = {{zi, 3, {0}, 0}, {kl, 4, {0}, 0}};
  for (int i = 0; i < 2; i++) run_job(&alone[i]);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, run_job, &both[i]) == 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    CHECK_MSG(alone[i].s == DIT_OK && both[i].s == DIT_OK, "job %d: %d %d", i, (int)alone[i].s, (int)both[i].s);
    CHECK_MSG(same_image(&alone[i].img, &both[i].img), "job %d: side by side differs from alone", i);
    dit_image_free(&alone[i].img);
    dit_image_free(&both[i].img);
  }
}

/* The shipped folder for a single transformer file: by family (FLUX.1 by its guidance
 * embedder); FLUX.2 and non-transformer files refused with a message; a models root without
 * the folder named. */
static void test_dir_for_file(dit_ctx *ctx, const char *src) {
  static const struct {
    const char *file, *want; /* want: the folder's name, or a piece of the error */
    dit_status s;
  } cases[] = {
      {"zimage-tiny/transformer/diffusion_pytorch_model.safetensors", "/z-image-turbo", DIT_OK},
      {"flux1-dev-tiny/single/transformer.safetensors", "/flux1-dev", DIT_OK},
      {"flux1-dev-tiny/transformer/diffusion_pytorch_model.safetensors", "/flux1-dev", DIT_OK},
      {"flux1-schnell-tiny/single/transformer.safetensors", "/flux1-schnell", DIT_OK},
      {"flux2-klein-tiny/transformer/diffusion_pytorch_model.safetensors", "FLUX.2", DIT_ERR_INVALID_ARG},
      {"zimage-tiny/vae/diffusion_pytorch_model.safetensors", "give -m", DIT_ERR_INVALID_ARG},
  };
  char root[4200];
  snprintf(root, sizeof root, "%s/models", src);
  setenv("DITRUN_MODELS", root, 1);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char f[4400], dir[4400];
    snprintf(f, sizeof f, "%s/models/%s", g_data, cases[i].file);
    dit_status s = dit_model_dir_for_file(ctx, f, dir, sizeof dir);
    const char *got = s == DIT_OK ? dir : dit_ctx_last_error(ctx);
    size_t n = strlen(got), w = strlen(cases[i].want);
    bool ok = s == cases[i].s && (s == DIT_OK ? n >= w && !strcmp(got + n - w, cases[i].want) : !!strstr(got, cases[i].want));
    CHECK_MSG(ok, "%s: status %d, %s", cases[i].file, (int)s, got);
  }
  setenv("DITRUN_MODELS", g_tmp, 1); /* a root without the folders */
  char f[4400], dir[4400];
  snprintf(f, sizeof f, "%s/models/%s", g_data, cases[0].file);
  dit_status s = dit_model_dir_for_file(ctx, f, dir, sizeof dir);
  CHECK_MSG(s == DIT_ERR_IO && strstr(dit_ctx_last_error(ctx), "z-image-turbo"), "%s", dit_ctx_last_error(ctx));
  unsetenv("DITRUN_MODELS");
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  snprintf(g_data, sizeof g_data, "%s", a.data);
  snprintf(g_tmp, sizeof g_tmp, "%s", a.tmp);
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(NULL, &ctx) != DIT_OK) return 1;
  test_resident(ctx, "zimage-tiny");
  test_resident(ctx, "flux2-klein-tiny");
  test_cancel(ctx);
  test_preview_and_png(ctx, "zimage-tiny");
  test_preview_and_png(ctx, "flux2-klein-tiny");
  test_unsupported(ctx);
  test_side_by_side();
  test_dir_for_file(ctx, a.src);
  dit_ctx_free(ctx);
  return dt_finish();
}
