/* LoRA merged at load (models/lora.h) on the tiny fixtures, against the same updates merged by
 * this test into a copy of the transformer file (W + s * B A, in double, rounded to the weights'
 * bf16) and loaded as a single transformer file: the images must agree, and differ from the
 * base model's. Three LoRAs at once on Z-Image, one per layout (diffusers/PEFT with a user
 * scale, kohya with alpha, the original names with the fused qkv split over q, k, v), and a
 * PEFT LoRA on FLUX.2 [klein]. Against diffusers itself (tests/fixtures/edit: its
 * load_lora_weights through peft): a PEFT and a kohya LoRA on each tiny model, images within
 * one 8-bit level. Then the refusals: keys that match nothing (listed), a rank or
 * shape that does not fit, a non-finite value or scale, a missing file. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "ditrun.h"
#include "fixture.h"
#include "io/safetensors.h"
#include "testing.h"

static char g_data[4096], g_tmp[4096], g_cli[4200];

/* One LoRA tensor to write (F32). */
typedef struct lt {
  char name[160];
  int ndim;
  int64_t shape[2];
  float *data;
} lt;

static dit_status fill_lt(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  (void)err;
  memcpy(dst, ((const lt *)user)[i].data, nbytes);
  return DIT_OK;
}

static int write_lora(const char *path, const lt *t, size_t n) {
  dit_out_tensor o[16];
  for (size_t i = 0; i < n; i++) o[i] = (dit_out_tensor){t[i].name, DIT_F32, t[i].ndim, {t[i].shape[0], t[i].shape[1]}};
  dit_error err = {0};
  return dit_st_write(path, true, NULL, 0, o, n, fill_lt, (void *)t, &err) == DIT_OK ? 0 : -1;
}

static float *rnd(size_t n, uint64_t seed, float amp) {
  float *x = malloc(n * sizeof *x);
  dt_fill_random(x, n, seed);
  for (size_t i = 0; i < n; i++) x[i] *= amp;
  return x;
}

/* An update for the reference: target tensor name, rows [row0, row0 + rows) of it get
 * s * B[rows, r] A[r, cols] (B's rows from b_row0). */
typedef struct upd {
  const char *target;
  const float *A, *B;
  int64_t r, cols, rows, row0, b_row0;
  double s;
} upd;

typedef struct ref_ctx {
  const dit_st_file *f;
  const upd *u;
  size_t n_u;
} ref_ctx;

static dit_status fill_ref(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  (void)err;
  const ref_ctx *c = user;
  const dit_st_tensor *t = &c->f->tensors[i];
  memcpy(dst, t->data, nbytes);
  size_t n = (size_t)(t->end - t->begin) / dit_dtype_size(t->dtype);
  float *w = malloc(n * sizeof *w);
  dit_convert_to_f32(w, t->data, t->dtype, n);
  bool touched = false;
  for (size_t k = 0; k < c->n_u; k++) {
    const upd *u = &c->u[k];
    if (strcmp(u->target, t->name)) continue;
    touched = true;
    for (int64_t o = 0; o < u->rows; o++)
      for (int64_t j = 0; j < u->cols; j++) {
        double d = 0;
        for (int64_t q = 0; q < u->r; q++) d += (double)u->B[(u->b_row0 + o) * u->r + q] * u->A[q * u->cols + j];
        w[(u->row0 + o) * u->cols + j] += (float)(u->s * d);
      }
  }
  if (touched) dit_convert_from_f32(dst, w, t->dtype, n);
  free(w);
  return DIT_OK;
}

/* The fixture's transformer file with the updates merged, at path. */
static int write_reference(const char *model, const char *path, const upd *u, size_t n_u) {
  char src[4200];
  snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", model);
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  dit_out_tensor *o = calloc(f->n_tensors, sizeof *o);
  for (size_t i = 0; i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    o[i] = (dit_out_tensor){t->name, t->dtype, t->ndim, {0}};
    memcpy(o[i].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
  }
  ref_ctx c = {f, u, n_u};
  int rc = dit_st_write(path, true, NULL, 0, o, f->n_tensors, fill_ref, &c, &err) == DIT_OK ? 0 : -1;
  free(o);
  dit_st_close(f);
  return rc;
}

/* dst: a model folder of links to model's parts, whose transformer weights are file (for a
 * family without single transformer files). */
static int ref_folder(const char *model, const char *dst, const char *file) {
  static const char *const parts[] = {"model_index.json", "scheduler",      "text_encoder", "tokenizer",
                                      "text_encoder_2",   "tokenizer_2", "vae"};
  char a[4400], b[4400];
  int rc = mkdir(dst, 0777) && errno != EEXIST ? -1 : 0;
  for (size_t i = 0; !rc && i < sizeof parts / sizeof *parts; i++) {
    snprintf(a, sizeof a, "%s/%s", model, parts[i]);
    snprintf(b, sizeof b, "%s/%s", dst, parts[i]);
    if (access(a, F_OK) != 0) continue; /* a family without it */
    char *abs = realpath(a, NULL);
    unlink(b);
    rc = abs && symlink(abs, b) == 0 ? 0 : -1;
    free(abs);
  }
  snprintf(b, sizeof b, "%s/transformer", dst);
  if (!rc && mkdir(b, 0777) && errno != EEXIST) rc = -1;
  snprintf(a, sizeof a, "%s/transformer/config.json", model);
  snprintf(b, sizeof b, "%s/transformer/config.json", dst);
  char *abs = rc ? NULL : realpath(a, NULL);
  unlink(b);
  if (!rc) rc = abs && symlink(abs, b) == 0 ? 0 : -1;
  free(abs);
  snprintf(b, sizeof b, "%s/transformer/diffusion_pytorch_model.safetensors", dst);
  if (!rc) rc = rename(file, b);
  return rc;
}

static void params(dit_gen_params *p, const char *model) {
  dit_gen_params_default(p);
  p->model_dir = model;
  p->prompt = "a red fox in the snow";
  p->width = 64, p->height = 64, p->steps = 2, p->seed = 5;
}

/* Max channel difference of two images (-1: sizes differ). */
static int img_diff(const dit_image *a, const dit_image *b) {
  if (!a->rgb || !b->rgb || a->width != b->width || a->height != b->height) return -1;
  int m = 0;
  for (size_t i = 0; i < (size_t)a->width * a->height * 3; i++) {
    int d = abs(a->rgb[i] - b->rgb[i]);
    if (d > m) m = d;
  }
  return m;
}

/* PSNR of two images in dB (range 255, every channel; +inf when equal, -1 when sizes differ). */
static double img_psnr(const dit_image *a, const dit_image *b) {
  if (!a->rgb || !b->rgb || a->width != b->width || a->height != b->height) return -1.0;
  const size_t n = (size_t)a->width * a->height * 3;
  double se = 0.0;
  for (size_t i = 0; i < n; i++) se += (double)(a->rgb[i] - b->rgb[i]) * (a->rgb[i] - b->rgb[i]);
  return se == 0.0 ? INFINITY : 10.0 * log10(255.0 * 255.0 * (double)n / se);
}

/* base, with the LoRAs, and the reference (a transformer file, or with ref_model a whole model
 * folder): LoRA == reference (<= 1 level), != base. */
static void compare(dit_ctx *ctx, const char *name, const char *model, const dit_lora *l, int n, const char *ref,
                    const char *ref_model) {
  dit_gen_params p;
  dit_image base = {0}, with = {0}, want = {0};
  params(&p, model);
  CHECK_MSG(dit_generate(ctx, &p, &base, NULL) == DIT_OK, "%s base: %s", name, dit_ctx_last_error(ctx));
  p.loras = l, p.n_loras = n;
  CHECK_MSG(dit_generate(ctx, &p, &with, NULL) == DIT_OK, "%s with LoRA: %s", name, dit_ctx_last_error(ctx));
  params(&p, ref_model ? ref_model : model);
  dit_component_file f = {"transformer", ref};
  if (!ref_model) p.files = &f, p.n_files = 1;
  CHECK_MSG(dit_generate(ctx, &p, &want, NULL) == DIT_OK, "%s reference: %s", name, dit_ctx_last_error(ctx));
  int d = img_diff(&with, &want), db = img_diff(&with, &base);
  CHECK_MSG(d >= 0 && d <= 1, "%s: LoRA image vs merged reference: %d levels", name, d);
  CHECK_MSG(db > 10, "%s: the LoRA changes the image (%d levels from the base)", name, db);
  printf("%s: LoRA vs merged reference max diff %d, vs base %d levels\n", name, d, db);
  dit_image_free(&base), dit_image_free(&with), dit_image_free(&want);
}

static void test_zimage(dit_ctx *ctx) {
  char model[4200], peft[4300], kohya[4300], orig[4300], ref[4300];
  snprintf(model, sizeof model, "%s/models/zimage-tiny", g_data);
  snprintf(peft, sizeof peft, "%s/z_peft.safetensors", g_tmp);
  snprintf(kohya, sizeof kohya, "%s/z_kohya.safetensors", g_tmp);
  snprintf(orig, sizeof orig, "%s/z_orig.safetensors", g_tmp);
  snprintf(ref, sizeof ref, "%s/z_ref.safetensors", g_tmp);
  const int64_t D = 128, F = 341, r = 4;
  float *a1 = rnd(r * D, 1, 0.3f), *b1 = rnd(D * r, 2, 0.3f), *a2 = rnd(r * D, 3, 0.3f), *b2 = rnd(F * r, 4, 0.3f);
  float *a3 = rnd(r * D, 5, 0.3f), *b3 = rnd(D * r, 6, 0.3f), *a4 = rnd(r * F, 7, 0.3f), *b4 = rnd(D * r, 8, 0.3f);
  float *a5 = rnd(r * D, 9, 0.3f), *b5 = rnd(3 * D * r, 10, 0.3f), *a6 = rnd(r * D, 11, 0.3f), *b6 = rnd(D * r, 12, 0.3f);
  float alpha = 2.0f; /* kohya: scale alpha / r = 0.5 */
  lt pe[] = {{"transformer.layers.0.attention.to_q.lora_A.weight", 2, {r, D}, a1},
             {"transformer.layers.0.attention.to_q.lora_B.weight", 2, {D, r}, b1},
             {"transformer.layers.1.feed_forward.w1.lora_A.weight", 2, {r, D}, a2},
             {"transformer.layers.1.feed_forward.w1.lora_B.weight", 2, {F, r}, b2}};
  lt ko[] = {{"lora_unet_layers_1_attention_to_k.lora_down.weight", 2, {r, D}, a3},
             {"lora_unet_layers_1_attention_to_k.lora_up.weight", 2, {D, r}, b3},
             {"lora_unet_layers_1_attention_to_k.alpha", 0, {0, 0}, &alpha},
             {"lora_unet_noise_refiner_0_feed_forward_w2.lora_down.weight", 2, {r, F}, a4},
             {"lora_unet_noise_refiner_0_feed_forward_w2.lora_up.weight", 2, {D, r}, b4},
             {"lora_unet_noise_refiner_0_feed_forward_w2.alpha", 0, {0, 0}, &alpha}};
  lt og[] = {{"diffusion_model.layers.0.attention.qkv.lora_A.weight", 2, {r, D}, a5},
             {"diffusion_model.layers.0.attention.qkv.lora_B.weight", 2, {3 * D, r}, b5},
             {"diffusion_model.context_refiner.0.attention.out.lora_A.weight", 2, {r, D}, a6},
             {"diffusion_model.context_refiner.0.attention.out.lora_B.weight", 2, {D, r}, b6}};
  CHECK(write_lora(peft, pe, 4) == 0 && write_lora(kohya, ko, 6) == 0 && write_lora(orig, og, 4) == 0);
  const upd u[] = {
      {"layers.0.attention.to_q.weight", a1, b1, r, D, D, 0, 0, 0.8},
      {"layers.1.feed_forward.w1.weight", a2, b2, r, D, F, 0, 0, 0.8},
      {"layers.1.attention.to_k.weight", a3, b3, r, D, D, 0, 0, 0.5},
      {"noise_refiner.0.feed_forward.w2.weight", a4, b4, r, F, D, 0, 0, 0.5},
      {"layers.0.attention.to_q.weight", a5, b5, r, D, D, 0, 0, 1.0},
      {"layers.0.attention.to_k.weight", a5, b5, r, D, D, 0, D, 1.0},
      {"layers.0.attention.to_v.weight", a5, b5, r, D, D, 0, 2 * D, 1.0},
      {"context_refiner.0.attention.to_out.0.weight", a6, b6, r, D, D, 0, 0, 1.0},
  };
  CHECK(write_reference(model, ref, u, sizeof u / sizeof *u) == 0);
  const dit_lora l[] = {{peft, 0.8}, {kohya, 1.0}, {orig, 1.0}};
  compare(ctx, "zimage, PEFT x0.8 + kohya alpha + original names (fused qkv)", model, l, 3, ref, NULL);
  /* the same from the CLI: --lora FILE:SCALE, recorded in the PNG's parameters */
  char out[4300], log[4300], arg1[4400], text[65536];
  snprintf(out, sizeof out, "%s/cli_lora.png", g_tmp);
  snprintf(log, sizeof log, "%s/cli_lora.log", g_tmp);
  snprintf(arg1, sizeof arg1, "%s:0.8", peft);
  char *argv[] = {"ditrun", "generate", "-m", model, "-p", "a red fox in the snow", "-W", "64", "-H", "64", "--steps", "2",
                  "--seed", "5", "--lora", arg1, "--lora", kohya, "--lora", orig, "-o", out, "--overwrite", "-q", NULL};
  int rc = dt_run_argv(g_cli, argv, log, NULL, 0);
  long tn = rc == 0 ? dt_read_file(out, text, sizeof text) : -1;
  const char *want = "LoRA: \"z_peft.safetensors: 0.8, z_kohya.safetensors: 1, z_orig.safetensors: 1\"";
  CHECK_MSG(rc == 0 && tn > 0 && memmem(text, (size_t)tn, want, strlen(want)),
            "CLI --lora: exit %d, the PNG names its LoRAs (log %s)", rc, log);
  /* and its pixels are the library's with the same LoRAs (not the base model's) */
  dit_gen_params p;
  params(&p, model);
  p.loras = l, p.n_loras = 3;
  dit_image lib = {0}, cli = {0};
  CHECK_MSG(dit_generate(ctx, &p, &lib, NULL) == DIT_OK, "library with LoRAs: %s", dit_ctx_last_error(ctx));
  CHECK_MSG(rc == 0 && dit_image_load(ctx, out, 0, &cli) == DIT_OK, "the CLI's PNG: %s", dit_ctx_last_error(ctx));
  int dcli = img_diff(&cli, &lib);
  CHECK_MSG(dcli == 0, "CLI --lora image vs the library's with the same LoRAs: %d levels", dcli);
  dit_image_free(&lib), dit_image_free(&cli);
  char *bad[] = {"ditrun", "generate", "-m", model, "-p", "x", "--lora", "z.safetensors:nan", "-o", out, NULL};
  CHECK_MSG(dt_run_argv(g_cli, bad, log, NULL, 0) == 2, "CLI --lora FILE:nan exits 2");
  free(a1), free(b1), free(a2), free(b2), free(a3), free(b3), free(a4), free(b4), free(a5), free(b5), free(a6), free(b6);
}

static void test_flux2(dit_ctx *ctx) {
  char model[4200], peft[4300], ref[4300];
  snprintf(model, sizeof model, "%s/models/flux2-klein-tiny", g_data);
  snprintf(peft, sizeof peft, "%s/k_peft.safetensors", g_tmp);
  snprintf(ref, sizeof ref, "%s/k_ref.safetensors", g_tmp);
  const int64_t D = 128, r = 8;
  float *a1 = rnd(r * D, 21, 0.3f), *b1 = rnd(D * r, 22, 0.3f), *a2 = rnd(r * D, 23, 0.3f), *b2 = rnd(1152 * r, 24, 0.3f);
  lt pe[] = {{"transformer_blocks.0.attn.to_q.lora_A.weight", 2, {r, D}, a1},
             {"transformer_blocks.0.attn.to_q.lora_B.weight", 2, {D, r}, b1},
             {"single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight", 2, {r, D}, a2},
             {"single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_B.weight", 2, {1152, r}, b2}};
  CHECK(write_lora(peft, pe, 4) == 0);
  const upd u[] = {{"transformer_blocks.0.attn.to_q.weight", a1, b1, r, D, D, 0, 0, 1.0},
                   {"single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight", a2, b2, r, D, 1152, 0, 0, 1.0}};
  char ref_model[4300];
  snprintf(ref_model, sizeof ref_model, "%s/klein-merged", g_tmp);
  CHECK(write_reference(model, ref, u, 2) == 0 && ref_folder(model, ref_model, ref) == 0);
  const dit_lora l[] = {{peft, 1.0}};
  compare(ctx, "flux2-klein, PEFT (no prefix)", model, l, 1, ref, ref_model);
  free(a1), free(b1), free(a2), free(b2);
}

/* FLUX.1 from its diffusers folder: a kohya LoRA in BFL's names (single_blocks' linear1 split
 * unevenly over to_q, to_k, to_v [D rows each] and proj_mlp [F rows]; double_blocks' img_attn
 * qkv over to_q, to_k, to_v), BFL's dotted names (AI-Toolkit) and a PEFT file, against the
 * updates merged by the test. */
static void test_flux1(dit_ctx *ctx) {
  char model[4200], kohya[4300], dotted[4300], peft[4300], ref[4300], ref_model[4300];
  snprintf(model, sizeof model, "%s/models/flux1-schnell-tiny", g_data);
  snprintf(kohya, sizeof kohya, "%s/f1_kohya.safetensors", g_tmp);
  snprintf(dotted, sizeof dotted, "%s/f1_dotted.safetensors", g_tmp);
  snprintf(peft, sizeof peft, "%s/f1_peft.safetensors", g_tmp);
  snprintf(ref, sizeof ref, "%s/f1_ref.safetensors", g_tmp);
  snprintf(ref_model, sizeof ref_model, "%s/flux1-merged", g_tmp);
  const int64_t D = 32, F = 128, r = 4;
  float *a1 = rnd(r * D, 31, 0.3f), *b1 = rnd((3 * D + F) * r, 32, 0.3f), *a2 = rnd(r * D, 33, 0.3f);
  float *b2 = rnd(3 * D * r, 34, 0.3f), *a3 = rnd(r * (D + F), 35, 0.3f), *b3 = rnd(D * r, 36, 0.3f);
  float *a4 = rnd(r * F, 37, 0.3f), *b4 = rnd(D * r, 38, 0.3f);
  float alpha1 = 2.0f, alpha2 = 4.0f; /* scales 0.5 and 1 */
  lt ko[] = {{"lora_unet_single_blocks_0_linear1.lora_down.weight", 2, {r, D}, a1},
             {"lora_unet_single_blocks_0_linear1.lora_up.weight", 2, {3 * D + F, r}, b1},
             {"lora_unet_single_blocks_0_linear1.alpha", 0, {0, 0}, &alpha1},
             {"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", 2, {r, D}, a2},
             {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", 2, {3 * D, r}, b2},
             {"lora_unet_double_blocks_0_img_attn_qkv.alpha", 0, {0, 0}, &alpha2}};
  lt dt[] = {{"diffusion_model.single_blocks.1.linear2.lora_A.weight", 2, {r, D + F}, a3},
             {"diffusion_model.single_blocks.1.linear2.lora_B.weight", 2, {D, r}, b3}};
  lt pe[] = {{"transformer.transformer_blocks.0.ff.net.2.lora_A.weight", 2, {r, F}, a4},
             {"transformer.transformer_blocks.0.ff.net.2.lora_B.weight", 2, {D, r}, b4}};
  CHECK(write_lora(kohya, ko, 6) == 0 && write_lora(dotted, dt, 2) == 0 && write_lora(peft, pe, 2) == 0);
  const upd u[] = {
      {"single_transformer_blocks.0.attn.to_q.weight", a1, b1, r, D, D, 0, 0, 0.5},
      {"single_transformer_blocks.0.attn.to_k.weight", a1, b1, r, D, D, 0, D, 0.5},
      {"single_transformer_blocks.0.attn.to_v.weight", a1, b1, r, D, D, 0, 2 * D, 0.5},
      {"single_transformer_blocks.0.proj_mlp.weight", a1, b1, r, D, F, 0, 3 * D, 0.5},
      {"transformer_blocks.0.attn.to_q.weight", a2, b2, r, D, D, 0, 0, 1.0},
      {"transformer_blocks.0.attn.to_k.weight", a2, b2, r, D, D, 0, D, 1.0},
      {"transformer_blocks.0.attn.to_v.weight", a2, b2, r, D, D, 0, 2 * D, 1.0},
      {"single_transformer_blocks.1.proj_out.weight", a3, b3, r, D + F, D, 0, 0, 1.0},
      {"transformer_blocks.0.ff.net.2.weight", a4, b4, r, F, D, 0, 0, 0.8},
  };
  CHECK(write_reference(model, ref, u, sizeof u / sizeof *u) == 0 && ref_folder(model, ref_model, ref) == 0);
  const dit_lora l[] = {{kohya, 1.0}, {dotted, 1.0}, {peft, 0.8}};
  compare(ctx, "flux1-schnell, kohya BFL names (uneven linear1) + dotted BFL + PEFT", model, l, 3, ref, ref_model);
  free(a1), free(b1), free(a2), free(b2), free(a3), free(b3), free(a4), free(b4);
}

/* Image of model (with transformer file tf when not NULL) under one LoRA. */
static void lora_image(dit_ctx *ctx, const char *model, const char *tf, const char *lora, dit_image *out) {
  dit_gen_params p;
  params(&p, model);
  const dit_component_file f = {"transformer", tf};
  const dit_lora l = {lora, 1.0};
  if (tf) p.files = &f, p.n_files = 1;
  p.loras = &l, p.n_loras = 1;
  CHECK_MSG(dit_generate(ctx, &p, out, NULL) == DIT_OK, "%s + %s: %s", tf ? tf : model, lora,
            dit_ctx_last_error(ctx));
}

/* The final modulation (norm_out.linear: scale then shift in diffusers; BFL's
 * final_layer.adaLN_modulation.1: shift then scale) under a LoRA named either way: B's halves
 * go where the loaded tensor keeps them. FLUX.2 [klein] from its folder and from BFL's single
 * file, FLUX.1 from its folder (kohya's BFL name), against the update merged by the test. */
static void test_final_modulation(dit_ctx *ctx) {
  char model[4200], bfl[4300], dif[4300], ref[4300], ref_model[4300], single[4300];
  snprintf(model, sizeof model, "%s/models/flux2-klein-tiny", g_data);
  snprintf(bfl, sizeof bfl, "%s/k_final_bfl.safetensors", g_tmp);
  snprintf(dif, sizeof dif, "%s/k_final_diffusers.safetensors", g_tmp);
  snprintf(ref, sizeof ref, "%s/k_final_ref.safetensors", g_tmp);
  snprintf(ref_model, sizeof ref_model, "%s/klein-final-merged", g_tmp);
  snprintf(single, sizeof single, "%s/klein_bfl_single.safetensors", g_tmp);
  int64_t D = 128, r = 4;
  float *a = rnd(r * D, 41, 0.3f), *b = rnd(2 * D * r, 42, 0.3f), *bs = malloc(2 * D * r * sizeof *bs);
  memcpy(bs, b + D * r, D * r * sizeof *bs); /* the diffusers layout: B's halves exchanged */
  memcpy(bs + D * r, b, D * r * sizeof *bs);
  const lt lb[] = {{"diffusion_model.final_layer.adaLN_modulation.1.lora_A.weight", 2, {r, D}, a},
                   {"diffusion_model.final_layer.adaLN_modulation.1.lora_B.weight", 2, {2 * D, r}, b}};
  const lt ld[] = {{"transformer.norm_out.linear.lora_A.weight", 2, {r, D}, a},
                   {"transformer.norm_out.linear.lora_B.weight", 2, {2 * D, r}, bs}};
  CHECK(write_lora(bfl, lb, 2) == 0 && write_lora(dif, ld, 2) == 0);
  const upd u[] = {{"norm_out.linear.weight", a, b, r, D, D, 0, D, 1.0},
                   {"norm_out.linear.weight", a, b, r, D, D, D, 0, 1.0}};
  CHECK(write_reference(model, ref, u, 2) == 0 && ref_folder(model, ref_model, ref) == 0);
  const dit_lora l = {bfl, 1.0};
  compare(ctx, "flux2-klein, final modulation in BFL's names", model, &l, 1, ref, ref_model);
  char src[4300];
  snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", model);
  CHECK(dt_flux2_write_bfl(src, single, "") == 0);
  dit_image want = {0}, got = {0};
  lora_image(ctx, model, NULL, dif, &want);
  const char *const files[] = {dif, bfl};
  for (int i = 0; i < 2; i++) {
    lora_image(ctx, model, single, files[i], &got);
    int d = img_diff(&got, &want);
    CHECK_MSG(d == 0, "klein's BFL single file + the final modulation LoRA in %s names: %d levels from the "
              "folder's", i ? "BFL's" : "diffusers'", d);
    printf("klein BFL single file, final modulation LoRA in %s names: %d levels from the folder's image\n",
           i ? "BFL's" : "diffusers'", d);
    dit_image_free(&got);
  }
  dit_image_free(&want);
  free(a), free(b), free(bs);
  /* FLUX.1's folder, kohya's BFL name */
  snprintf(model, sizeof model, "%s/models/flux1-schnell-tiny", g_data);
  snprintf(bfl, sizeof bfl, "%s/f1_final_kohya.safetensors", g_tmp);
  snprintf(ref, sizeof ref, "%s/f1_final_ref.safetensors", g_tmp);
  snprintf(ref_model, sizeof ref_model, "%s/flux1-final-merged", g_tmp);
  D = 32;
  a = rnd(r * D, 43, 0.3f), b = rnd(2 * D * r, 44, 0.3f);
  const lt lk[] = {{"lora_unet_final_layer_adaLN_modulation_1.lora_down.weight", 2, {r, D}, a},
                   {"lora_unet_final_layer_adaLN_modulation_1.lora_up.weight", 2, {2 * D, r}, b}};
  CHECK(write_lora(bfl, lk, 2) == 0);
  const upd u1[] = {{"norm_out.linear.weight", a, b, r, D, D, 0, D, 1.0},
                    {"norm_out.linear.weight", a, b, r, D, D, D, 0, 1.0}};
  CHECK(write_reference(model, ref, u1, 2) == 0 && ref_folder(model, ref_model, ref) == 0);
  const dit_lora l1 = {bfl, 1.0};
  compare(ctx, "flux1-schnell, final modulation in kohya's BFL name", model, &l1, 1, ref, ref_model);
  free(a), free(b);
}

/* A LoRA file of the given tensors must be refused with status want and a message holding needle. */
static void refuse(dit_ctx *ctx, const char *what, const lt *t, size_t n, double scale, dit_status want,
                   const char *needle, const dit_component_file *files) {
  char model[4200], path[4300];
  snprintf(model, sizeof model, "%s/models/zimage-tiny", g_data);
  snprintf(path, sizeof path, "%s/bad.safetensors", g_tmp);
  if (n) CHECK(write_lora(path, t, n) == 0);
  dit_gen_params p;
  params(&p, model);
  dit_lora l = {n ? path : "/nonexistent/lora.safetensors", scale};
  p.loras = &l, p.n_loras = 1;
  if (files) p.files = files, p.n_files = 1;
  dit_image img = {0};
  dit_status s = dit_generate(ctx, &p, &img, NULL);
  const char *m = dit_ctx_last_error(ctx);
  CHECK_MSG(s == want && !img.rgb && strstr(m, needle), "%s: status %d (want %d): %s", what, (int)s, (int)want, m);
  printf("  %-28s -> %s\n", what, m);
  dit_image_free(&img);
}

static void test_refusals(dit_ctx *ctx) {
  const int64_t D = 128, r = 4;
  float *a = rnd(r * D, 31, 0.3f), *b = rnd(D * r, 32, 0.3f), *a_bad = rnd(r * 64, 33, 0.3f);
  float *b3 = rnd(D * 3, 34, 0.3f), *a_nan = rnd(r * D, 35, 0.3f);
  a_nan[17] = NAN;
  lt nomatch[] = {{"transformer.layers.9.attention.to_q.lora_A.weight", 2, {r, D}, a},
                  {"transformer.layers.9.attention.to_q.lora_B.weight", 2, {D, r}, b},
                  {"something.else", 2, {r, D}, a}};
  refuse(ctx, "keys that match nothing", nomatch, 3, 1.0, DIT_ERR_FORMAT, "layers.9.attention.to_q", NULL);
  lt rank[] = {{"layers.0.attention.to_q.lora_A.weight", 2, {r, D}, a}, {"layers.0.attention.to_q.lora_B.weight", 2, {D, 3}, b3}};
  refuse(ctx, "rank mismatch", rank, 2, 1.0, DIT_ERR_FORMAT, "rank", NULL);
  lt shape[] = {{"layers.0.attention.to_q.lora_A.weight", 2, {r, 64}, a_bad},
                {"layers.0.attention.to_q.lora_B.weight", 2, {D, r}, b}};
  refuse(ctx, "LoRA for another model", shape, 2, 1.0, DIT_ERR_FORMAT, "updates [128, 64]", NULL);
  lt nan[] = {{"layers.0.attention.to_q.lora_A.weight", 2, {r, D}, a_nan}, {"layers.0.attention.to_q.lora_B.weight", 2, {D, r}, b}};
  refuse(ctx, "NaN in A", nan, 2, 1.0, DIT_ERR_FORMAT, "non-finite", NULL);
  lt ok[] = {{"layers.0.attention.to_q.lora_A.weight", 2, {r, D}, a}, {"layers.0.attention.to_q.lora_B.weight", 2, {D, r}, b}};
  refuse(ctx, "NaN scale", ok, 2, NAN, DIT_ERR_INVALID_ARG, "not a finite number", NULL);
  refuse(ctx, "missing file", NULL, 0, 1.0, DIT_ERR_IO, "/nonexistent/lora.safetensors", NULL);
  free(a), free(b), free(a_bad), free(b3), free(a_nan);
}

static dit_device_kind test_device(void) {
  const char *d = getenv("DIT_TEST_DEVICE");
  return d && !strcmp(d, "cuda") ? DIT_DEVICE_CUDA : DIT_DEVICE_CPU;
}

/* One image of model with transformer file tf (NULL: the folder's) and the LoRAs l[0..n). */
static void gen_with(dit_ctx *ctx, const char *model, const char *tf, const dit_lora *l, int n, dit_image *out) {
  dit_gen_params p;
  params(&p, model);
  p.device = test_device();
  const dit_component_file f = {"transformer", tf};
  if (tf) p.files = &f, p.n_files = 1;
  p.loras = l, p.n_loras = n;
  CHECK_MSG(dit_generate(ctx, &p, out, NULL) == DIT_OK, "%s: %s", tf ? tf : model, dit_ctx_last_error(ctx));
}

/* A LoRA on quantized weights (Z-Image and klein with the fixture's PEFT LoRA, FLUX.1 with a
 * kohya one): a run-time
 * low-rank term beside each quantized GEMM (its arithmetic is checked against the merged
 * weight in test_quant and dit_gpu_op_test). Q8_0: the transformer as a GGUF (dit_quantize);
 * with the LoRA the image is >= 40 dB from the float model's with it. fp8: the transformer
 * as a scaled E4M3 safetensors, and as its exact decode in F32 (dt_st_to_fp8) where the LoRA
 * is merged into the weights at load: the two images agree within 1 level on the CPU (35 dB on
 * a GPU, which runs fp8 through bf16). Either way the LoRA moves the image as much as on the
 * float model, and on the resident model comes and goes with dit_model_set_loras, bit for bit
 * as fresh loads (also on the GPU: DIT_TEST_DEVICE=cuda). */
static void quantized_case(dit_ctx *ctx, const char *fam, const char *lf, double scale, dit_dtype type) {
  char model[4200], qf[4300], rf[4300], src[4300];
  const bool fp8 = type == DIT_F8_E4M3 || type == DIT_F8_E5M2, gpu = test_device() == DIT_DEVICE_CUDA;
  const char *tn = dit_dtype_name(type), *dev = gpu ? "cuda" : "cpu";
  snprintf(model, sizeof model, "%s/models/%s", g_data, fam);
  snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", model);
  snprintf(qf, sizeof qf, "%s/%s_%s.%s", g_tmp, fam, tn, fp8 ? "safetensors" : "gguf");
  snprintf(rf, sizeof rf, "%s/%s_%s_decoded.safetensors", g_tmp, fam, tn);
  if (fp8) {
    CHECK(dt_st_to_fp8(src, qf, type, false, false) == 0 && dt_st_to_fp8(src, rf, type, false, true) == 0);
  } else {
    dit_quantize_params qp = {.model_dir = model, .type = type, .output = qf, .overwrite = 1};
    CHECK_MSG(dit_quantize(ctx, &qp) == DIT_OK, "quantize: %s", dit_ctx_last_error(ctx));
  }
  const dit_lora l = {lf, scale};
  dit_image fb = {0}, fl = {0}, qb = {0}, ql = {0};
  gen_with(ctx, model, fp8 ? rf : NULL, NULL, 0, &fb);
  gen_with(ctx, model, fp8 ? rf : NULL, &l, 1, &fl);
  gen_with(ctx, model, qf, NULL, 0, &qb);
  gen_with(ctx, model, qf, &l, 1, &ql);
  const char *ref = fp8 ? "its F32 decode" : "the float model";
  const int dl = img_diff(&ql, &fl);
  const double pl = img_psnr(&ql, &fl), eff = img_psnr(&ql, &qb), eff_f = img_psnr(&fl, &fb);
  CHECK_MSG(fp8 && !gpu ? dl >= 0 && dl <= 1 : pl >= (fp8 ? 35.0 : 40.0),
            "%s (%s): %s + LoRA is %d levels, %.1f dB from %s + LoRA", fam, dev, tn, dl, pl, ref);
  CHECK_MSG(eff <= pl - 15.0 && fabs(eff - eff_f) <= 3.0, "%s (%s): with and without the LoRA %.1f dB apart on %s, "
            "%.1f dB on %s", fam, dev, eff, tn, eff_f, ref);
  printf("%s (%s) %s + LoRA: %d levels (%.1f dB) from %s + LoRA; with and without the LoRA %.1f dB apart "
         "(%s: %.1f dB)\n", fam, dev, tn, dl, pl, ref, eff, ref, eff_f);
  dit_model *m = NULL;
  dit_model_opts o;
  dit_model_opts_default(&o);
  o.device = test_device();
  const dit_component_file f = {"transformer", qf};
  o.files = &f, o.n_files = 1;
  CHECK_MSG(dit_model_load(ctx, model, &o, &m) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  const dit_image *want[] = {&qb, &ql, &qb, &ql};
  for (int i = 0; m && i < 4; i++) {
    CHECK_MSG(dit_model_set_loras(m, i % 2 ? &l : NULL, i % 2) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    dit_gen_params p;
    params(&p, model);
    dit_image img = {0};
    CHECK_MSG(dit_model_generate(m, &p, &img, NULL) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    const int d = img_diff(&img, want[i]);
    CHECK_MSG(d == 0, "%s (%s): resident %s model, LoRA %s: %d levels from a fresh load's", fam, dev, tn,
              i % 2 ? "set" : "none", d);
    dit_image_free(&img);
  }
  dit_model_free(m);
  dit_image_free(&fb), dit_image_free(&fl), dit_image_free(&qb), dit_image_free(&ql);
}

static void test_quantized(dit_ctx *ctx) {
  char z[4300], k[4300], f1[4300];
  snprintf(z, sizeof z, "%s/edit/z_lora_peft.safetensors", g_data);
  snprintf(k, sizeof k, "%s/edit/k_lora_peft.safetensors", g_data);
  snprintf(f1, sizeof f1, "%s/f1_kohya.safetensors", g_tmp); /* test_flux1's */
  quantized_case(ctx, "zimage-tiny", z, 0.8, DIT_Q8_0);
  quantized_case(ctx, "flux2-klein-tiny", k, 0.8, DIT_Q8_0);
  quantized_case(ctx, "zimage-tiny", z, 0.8, DIT_F8_E4M3);
  quantized_case(ctx, "flux2-klein-tiny", k, 0.8, DIT_F8_E4M3);
  /* FLUX.1's GGUF is in BFL's names: q/k/v run as row views of the fused tensors, each with
   * its rows of the fused tensor's low-rank term */
  quantized_case(ctx, "flux1-schnell-tiny", f1, 20.0, DIT_Q8_0); /* a weak LoRA on this tiny model: scaled up */
}

/* The fixture's diffusers runs: each LoRA file at scale 0.8 on its tiny model, 128x96, 4 steps,
 * seed 42, the reference prompt (the text encoder's RoPE in bf16, as those models were made). */
static void test_diffusers_refs(dit_ctx *ctx) {
  static const struct {
    const char *model, *file, *key;
    double guidance;
  } cases[] = {
      {"zimage-tiny", "z_lora_peft.safetensors", "z_lora_peft_image", 0.0},
      {"zimage-tiny", "z_lora_kohya.safetensors", "z_lora_kohya_image", 0.0},
      {"flux2-klein-tiny", "k_lora_peft.safetensors", "k_lora_peft_image", 1.0},
      {"flux2-klein-tiny", "k_lora_kohya.safetensors", "k_lora_kohya_image", 1.0},
  };
  char ref[4200];
  snprintf(ref, sizeof ref, "%s/edit/reference.safetensors", g_data);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char model[4200], file[4200], label[256];
    snprintf(model, sizeof model, "%s/models/%s", g_data, cases[i].model);
    snprintf(file, sizeof file, "%s/edit/%s", g_data, cases[i].file);
    snprintf(label, sizeof label, "%s + %s vs diffusers", cases[i].model, cases[i].file);
    dit_gen_params p;
    dit_gen_params_default(&p);
    p.model_dir = model;
    p.prompt = "a red fox in the snow, 35mm photo";
    p.width = 96, p.height = 128, p.steps = 4, p.seed = 42, p.text_rope_bf16 = 1;
    p.guidance = cases[i].guidance, p.guidance_set = 1;
    const dit_lora l = {file, 0.8};
    p.loras = &l, p.n_loras = 1;
    dit_image img = {0};
    dit_status s = dit_generate(ctx, &p, &img, NULL);
    CHECK_MSG(s == DIT_OK, "%s: %s", label, dit_ctx_last_error(ctx));
    if (s == DIT_OK) dt_check_image(ref, cases[i].key, &img, label);
    dit_image_free(&img);
  }
}

/* LoRAs changed on a resident model (dit_model_set_loras): each image equals, bit for bit, a
 * fresh load with the same LoRAs; none again gives the base back; a file that fits nothing
 * fails and leaves the LoRAs the model had. DIT_TEST_DEVICE=cuda runs the
 * swaps on the GPU (in-place uploads, base tensors read from the checkpoint again); bit
 * equality holds there because the GEMM and conv tuners only choose among algorithms that give
 * the heuristic's first's exact result (cuda_gemm.c). */
static void one_shot(dit_ctx *ctx, const char *model, const dit_lora *l, int n, double guidance, dit_image *out) {
  dit_gen_params p;
  params(&p, model);
  p.device = test_device();
  p.guidance = guidance, p.guidance_set = 1;
  p.loras = l, p.n_loras = n;
  CHECK_MSG(dit_generate(ctx, &p, out, NULL) == DIT_OK, "one-shot generate: %s", dit_ctx_last_error(ctx));
}

static void swap_case(dit_ctx *ctx, const char *fam, const char *a_file, const char *b_file, double guidance) {
  char model[4200], a[4300], b[4300], bad[4300];
  snprintf(model, sizeof model, "%s/models/%s", g_data, fam);
  snprintf(a, sizeof a, "%s", a_file);
  snprintf(b, sizeof b, "%s", b_file);
  snprintf(bad, sizeof bad, "%s/edit/%s", g_data, strncmp(fam, "zimage", 6) ? "z_lora_peft.safetensors"
                                                                             : "k_lora_peft.safetensors");
  const dit_lora la = {a, 0.8}, lab[] = {{a, 0.5}, {b, 0.7}}, lbad = {bad, 1.0};
  dit_image want_base = {0}, want_a = {0}, want_ab = {0};
  one_shot(ctx, model, NULL, 0, guidance, &want_base);
  one_shot(ctx, model, &la, 1, guidance, &want_a);
  one_shot(ctx, model, lab, 2, guidance, &want_ab);
  dit_model *m = NULL;
  dit_model_opts o;
  dit_model_opts_default(&o);
  o.device = test_device();
  CHECK_MSG(dit_model_load(ctx, model, &o, &m) == DIT_OK, "%s: %s", fam, dit_ctx_last_error(ctx));
  if (!m) return;
  struct {
    const char *what;
    const dit_lora *l;
    int n;
    const dit_image *want;
    bool fails;
  } seq[] = {{"none", NULL, 0, &want_base, false},     {"A", &la, 1, &want_a, false},
             {"A + B", lab, 2, &want_ab, false},       {"another model's LoRA", &lbad, 1, &want_ab, true},
             {"A again", &la, 1, &want_a, false},      {"none again", NULL, 0, &want_base, false},
             {"A + B again", lab, 2, &want_ab, false}};
  for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
    dit_status s = i ? dit_model_set_loras(m, seq[i].l, seq[i].n) : DIT_OK;
    CHECK_MSG((s != DIT_OK) == seq[i].fails, "%s: set LoRAs %s: %s", fam, seq[i].what,
              s == DIT_OK ? "accepted" : dit_ctx_last_error(ctx));
    if (seq[i].fails)
      CHECK_MSG(s == DIT_ERR_FORMAT && strstr(dit_ctx_last_error(ctx), "match nothing"), "%s: %s: %s", fam,
                seq[i].what, dit_ctx_last_error(ctx));
    dit_gen_params p;
    params(&p, model);
    p.guidance = guidance, p.guidance_set = 1;
    dit_image img = {0};
    CHECK_MSG(dit_model_generate(m, &p, &img, NULL) == DIT_OK, "%s: %s", fam, dit_ctx_last_error(ctx));
    int d = img_diff(&img, seq[i].want);
    CHECK_MSG(d == 0, "%s: after setting LoRAs %s the image differs from a fresh load's by %d levels", fam,
              seq[i].what, d);
    dit_image_free(&img);
  }
  printf("%s (%s): LoRAs swapped 6 times on the resident model, every image equal to a fresh load's (%d levels "
         "between base and A)\n", fam, o.device == DIT_DEVICE_CUDA ? "cuda" : "cpu", img_diff(&want_base, &want_a));
  dit_model_free(m);
  dit_image_free(&want_base), dit_image_free(&want_a), dit_image_free(&want_ab);
}

static void test_swap(dit_ctx *ctx) {
  char a[4300], b[4300];
  snprintf(a, sizeof a, "%s/edit/z_lora_peft.safetensors", g_data);
  snprintf(b, sizeof b, "%s/edit/z_lora_kohya.safetensors", g_data);
  swap_case(ctx, "zimage-tiny", a, b, 0.0);
  snprintf(a, sizeof a, "%s/edit/k_lora_peft.safetensors", g_data);
  snprintf(b, sizeof b, "%s/edit/k_lora_kohya.safetensors", g_data);
  swap_case(ctx, "flux2-klein-tiny", a, b, 1.0);
  snprintf(a, sizeof a, "%s/f1_kohya.safetensors", g_tmp); /* test_flux1's */
  snprintf(b, sizeof b, "%s/f1_peft.safetensors", g_tmp);
  swap_case(ctx, "flux1-schnell-tiny", a, b, 0.0);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  snprintf(g_data, sizeof g_data, "%s", a.data);
  snprintf(g_tmp, sizeof g_tmp, "%s", a.tmp);
  snprintf(g_cli, sizeof g_cli, "%s/ditrun", a.bin);
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(NULL, &ctx) != DIT_OK) return 1;
  if (test_device() == DIT_DEVICE_CUDA) { /* the GPU run: the swaps (test_flux1 writes FLUX.1's files) */
    test_flux1(ctx);
    test_swap(ctx);
    test_quantized(ctx);
    dit_ctx_free(ctx);
    return dt_finish();
  }
  test_zimage(ctx);
  test_flux2(ctx);
  test_flux1(ctx);
  test_final_modulation(ctx);
  test_diffusers_refs(ctx);
  test_swap(ctx);
  test_refusals(ctx);
  test_quantized(ctx);
  dit_ctx_free(ctx);
  return dt_finish();
}
