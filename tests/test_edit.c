/* Editing against diffusers (tests/fixtures/edit). FLUX.2 [klein] reference editing against
 * Flux2KleinPipeline(image=[...]): the reference's packed latents (crop to multiples of 16,
 * the encoder's mode, 2x2 patchify, batch-norm statistics), then with one and with two
 * references the per-step latents and the image. Z-Image image-to-image against
 * ZImageImg2ImgPipeline:
 * the init image's preprocessing (floor to 16, Pillow's Lanczos, [-1, 1]), the per-step
 * latents and the 8-bit image at strengths 0.6, 0.9 and 1.0 and with guidance; at strength
 * 1.0 the init picture plays no part (text-to-image from the generator's second draw, as in
 * diffusers); the bad inputs (strength out of range, too few steps left, an init image for a
 * family that takes none, a truncated file) end in errors naming them. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ditrun.h"
#include "fixture.h"
#include "models/vae_flux2.h"
#include "pipeline/image_prep.h"
#include "testing.h"

#define PROMPT "a red fox in the snow, 35mm photo"

static char g_ref[4200], g_model[4200], g_edit[4200];

static void params(dit_gen_params *p, const dit_image *init, double strength, uint64_t seed) {
  dit_gen_params_default(p);
  p->model_dir = g_model;
  p->prompt = PROMPT;
  p->steps = 4;
  p->guidance = 0.0, p->guidance_set = 1;
  p->seed = seed;
  p->text_rope_bf16 = 1;
  p->init_image = init;
  p->strength = strength;
}

static void test_pixels(const dit_image *init) {
  float *px = NULL, *ref = NULL;
  int64_t sh[8];
  int nd;
  dit_error err = {0};
  CHECK(dt_load_f32(g_ref, "z_init_pixels", &ref, sh, &nd) == 0 && nd == 3 && sh[1] == 128 && sh[2] == 96);
  CHECK_MSG(dit_image_to_pixels(init, 96, 128, DIT_RESAMPLE_LANCZOS, &px, &err) == DIT_OK, "%s", err.msg);
  if (px && ref) {
    double worst = 0;
    for (size_t i = 0; i < 3 * 128 * 96; i++) worst = fmax(worst, fabs((double)px[i] - ref[i]));
    printf("init image 100x130 -> 96x128 (Lanczos), [-1, 1]: max diff to diffusers %.3g\n", worst);
    CHECK_MSG(worst == 0, "preprocessed init image differs from diffusers' by %.3g", worst);
  }
  free(px), free(ref);
}

static void run_case(dit_ctx *ctx, const dit_image *init, const char *name, double strength, int steps_run,
                     double guidance, uint64_t seed, dit_image *keep) {
  dit_gen_params p;
  params(&p, init, strength, seed);
  if (guidance > 0) p.guidance = guidance, p.negative_prompt = "blurry";
  dt_step_check cap = {1e-5, g_ref, name, 0, 0};
  if (guidance == 0) p.on_step = dt_step_check_cb, p.user = &cap;
  dit_image img = {0};
  dit_gen_stats st;
  dit_status s = dit_generate(ctx, &p, &img, &st);
  CHECK_MSG(s == DIT_OK, "%s: %s", name, dit_ctx_last_error(ctx));
  if (guidance == 0)
    CHECK_MSG(cap.steps_seen == steps_run && st.steps == steps_run, "%s: %d steps checked, %d run, %d expected", name,
              cap.steps_seen, st.steps, steps_run);
  char key[96];
  snprintf(key, sizeof key, "%s_image", name);
  if (s == DIT_OK) {
    CHECK(img.width == 96 && img.height == 128);
    dt_check_image(g_ref, key, &img, name);
  }
  if (keep) *keep = img;
  else dit_image_free(&img);
}

static void expect_fail(dit_ctx *ctx, const dit_gen_params *p, dit_status want, const char *needle) {
  dit_image img = {0};
  dit_status s = dit_generate(ctx, p, &img, NULL);
  CHECK_MSG(s == want && strstr(dit_ctx_last_error(ctx), needle) && !img.rgb, "want %d with \"%s\", got %d: %s", want,
            needle, s, dit_ctx_last_error(ctx));
  printf("refused as expected: %s\n", dit_ctx_last_error(ctx));
  dit_image_free(&img);
}

static void test_refusals(dit_ctx *ctx, const dit_image *init) {
  dit_gen_params p;
  params(&p, init, 1.5, 1);
  expect_fail(ctx, &p, DIT_ERR_INVALID_ARG, "strength");
  params(&p, init, -0.2, 1);
  expect_fail(ctx, &p, DIT_ERR_INVALID_ARG, "strength");
  /* t_start = int(4 - 4 s): any s > 0 leaves a step, unless 4 s vanishes next to 4 */
  params(&p, init, 1e-17, 1);
  expect_fail(ctx, &p, DIT_ERR_INVALID_ARG, "no step");
  /* FLUX.2 [klein] takes reference images, not an init image */
  char klein[4300];
  snprintf(klein, sizeof klein, "%s/../flux2-klein-tiny", g_model);
  params(&p, init, 0.6, 1);
  p.model_dir = klein;
  expect_fail(ctx, &p, DIT_ERR_UNSUPPORTED, "reference images");
  /* Z-Image takes no reference images */
  params(&p, NULL, 0, 1);
  p.ref_images = init, p.n_ref_images = 1;
  expect_fail(ctx, &p, DIT_ERR_UNSUPPORTED, "does not take reference images");
  /* a truncated PNG is refused when read */
  char path[4300];
  snprintf(path, sizeof path, "%s/init.png", g_edit);
  static uint8_t buf[1 << 16];
  long n = dt_read_file(path, (char *)buf, sizeof buf);
  dit_image bad = {0};
  CHECK(n > 1000 && dit_image_load_mem(ctx, buf, (size_t)n / 2, "cut.png", 0, &bad) == DIT_ERR_FORMAT && !bad.rgb);
  printf("truncated PNG: %s\n", dit_ctx_last_error(ctx));
}

/* ref_a prepared and encoded as Flux2KleinPipeline does: k_ref_a_latents [4L, 8, 6]. */
static void test_klein_ref_latents(const dit_image *ref_a) {
  char vae[4300];
  snprintf(vae, sizeof vae, "%s/../flux2-klein-tiny/vae", g_model);
  dit_error err = {0};
  dit_backend *be = NULL;
  dit_vae_flux2_enc *enc = NULL;
  float *px = NULL, *want = NULL;
  int W = 0, H = 0, nd;
  int64_t sh[8];
  CHECK(dit_backend_cpu_create(0, &be, &err) == DIT_OK);
  CHECK_MSG(be && dit_vae_flux2_enc_load(be, vae, &enc, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_flux2_ref_pixels(ref_a, 16, (int64_t)1024 * 1024, &px, &W, &H, &err) == DIT_OK, "%s", err.msg);
  CHECK(W == 96 && H == 128);
  CHECK(dt_load_f32(g_ref, "k_ref_a_latents", &want, sh, &nd) == 0 && nd == 3 && sh[1] == 8 && sh[2] == 6);
  if (enc && px && want) {
    const int64_t P = sh[0], n = sh[1] * sh[2];
    float *tok = malloc((size_t)(P * n) * sizeof *tok), *cm = malloc((size_t)(P * n) * sizeof *cm);
    CHECK_MSG(dit_vae_flux2_encode_packed(enc, px, H, W, 0, tok, &err) == DIT_OK, "%s", err.msg);
    for (int64_t r = 0; r < n; r++)
      for (int64_t k = 0; k < P; k++) cm[k * n + r] = tok[r * P + k];
    const double e = dt_rel_err(cm, want, (size_t)(P * n));
    printf("klein reference latents (ref_a, 96x128 crop): rel err %.3g\n", e);
    CHECK_MSG(e <= 1e-4, "reference latents rel err %.3g", e);
    free(tok), free(cm);
  }
  free(px), free(want);
  dit_vae_flux2_enc_free(enc);
  dit_backend_free(be);
}

static void klein_case(dit_ctx *ctx, const char *name, const dit_image *refs, int n, bool auto_size) {
  char klein[4300];
  snprintf(klein, sizeof klein, "%s/../flux2-klein-tiny", g_model);
  dit_gen_params p;
  dit_gen_params_default(&p);
  p.model_dir = klein;
  p.prompt = "turn the fox blue";
  p.steps = 4, p.seed = 42, p.text_rope_bf16 = 1;
  p.guidance = 1.0, p.guidance_set = 1;
  if (!auto_size) p.width = 96, p.height = 128;
  p.ref_images = refs, p.n_ref_images = n;
  dt_step_check cap = {1e-5, g_ref, name, 0, 0};
  p.on_step = dt_step_check_cb, p.user = &cap;
  dit_image img = {0};
  dit_status s = dit_generate(ctx, &p, &img, NULL);
  CHECK_MSG(s == DIT_OK, "%s: %s", name, dit_ctx_last_error(ctx));
  CHECK_MSG(cap.steps_seen == 4, "%s: %d steps checked", name, cap.steps_seen);
  char key[96];
  snprintf(key, sizeof key, "%s_image", name);
  if (s == DIT_OK) {
    CHECK(img.width == 96 && img.height == 128);
    dt_check_image(g_ref, key, &img, name);
  }
  dit_image_free(&img);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  snprintf(g_edit, sizeof g_edit, "%s/edit", a.data);
  snprintf(g_ref, sizeof g_ref, "%s/reference.safetensors", g_edit);
  snprintf(g_model, sizeof g_model, "%s/models/zimage-tiny", a.data);
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(NULL, &ctx) != DIT_OK) return 1;
  char path[4300];
  snprintf(path, sizeof path, "%s/init.png", g_edit);
  dit_image init = {0}, other = {0};
  CHECK_MSG(dit_image_load(ctx, path, 0, &init) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  snprintf(path, sizeof path, "%s/ref_a.png", g_edit);
  CHECK_MSG(dit_image_load(ctx, path, 0, &other) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  if (init.rgb && other.rgb) {
    test_pixels(&init);
    dit_image s100 = {0}, s100b = {0};
    run_case(ctx, &init, "z_img2img_s60", 0.6, 3, 0.0, 42, NULL);
    run_case(ctx, &init, "z_img2img_s90", 0.9, 4, 0.0, 42, NULL);
    run_case(ctx, &init, "z_img2img_s100", 1.0, 4, 0.0, 42, &s100);
    run_case(ctx, &init, "z_img2img_cfg", 0.6, 3, 3.0, 7, NULL);
    /* strength 1: the picture does not matter, only the generator (another image, same image) */
    run_case(ctx, &other, "z_img2img_s100", 1.0, 4, 0.0, 42, &s100b);
    CHECK_MSG(s100.rgb && s100b.rgb && !memcmp(s100.rgb, s100b.rgb, 96 * 128 * 3),
              "strength 1.0 depends on the init picture");
    dit_image_free(&s100), dit_image_free(&s100b);
    test_refusals(ctx, &init);
  }
  dit_image refs[2] = {{0}};
  snprintf(path, sizeof path, "%s/ref_a.png", g_edit);
  CHECK_MSG(dit_image_load(ctx, path, 0, &refs[0]) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  snprintf(path, sizeof path, "%s/ref_b.png", g_edit);
  CHECK_MSG(dit_image_load(ctx, path, 0, &refs[1]) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  if (refs[0].rgb && refs[1].rgb) {
    test_klein_ref_latents(&refs[0]);
    klein_case(ctx, "k_edit1", refs, 1, true);
    klein_case(ctx, "k_edit2", refs, 2, false);
  }
  dit_image_free(&refs[0]), dit_image_free(&refs[1]);
  dit_image_free(&init), dit_image_free(&other);
  dit_ctx_free(ctx);
  return dt_finish();
}
