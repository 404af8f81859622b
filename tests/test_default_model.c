/* The model shipped in the repository (models/shapes-128, what `make run` uses) against
 * diffusers' ZImagePipeline run on the same folder (models/shapes-128/reference, written by
 * tools/train/diffusers_ref.py on the GPU machine, float32): for every case the tokenizer's
 * ids of the chat-templated prompt are diffusers' ids, and the 128x128 image from 8 steps
 * with the case's seed is within one 8-bit level of diffusers' image. Then the LoRA shipped
 * beside it (models/loras): with it, shapes are drawn as outlines; without, filled.
 * Usage: test_default_model [--fixture MODEL_DIR] (default <src>/models/shapes-128). */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ditrun.h"
#include "fixture.h"
#include "testing.h"
#include "text/chat.h"
#include "text/tokenizer.h"

static void check_ids(const char *model, const char *ref_file, int i, const char *prompt) {
  char path[4096], name[64];
  dit_error err = {0};
  dit_tokenizer *tok = NULL;
  char *text = NULL;
  int32_t *ids = NULL, *ref = NULL;
  size_t n = 0;
  int64_t shape[8];
  int nd = 0;
  snprintf(path, sizeof path, "%s/tokenizer", model);
  dit_status s = dit_tok_load(path, &tok, &err);
  if (s == DIT_OK) s = dit_chat_render(DIT_CHAT_QWEN3_THINKING, prompt, &text, &err);
  if (s == DIT_OK) s = dit_tok_encode(tok, text, strlen(text), &ids, &n, &err);
  CHECK_MSG(s == DIT_OK, "case %d: tokenize: %s", i, err.msg);
  snprintf(name, sizeof name, "ids_%d", i);
  if (s == DIT_OK && dt_load_i32(ref_file, name, &ref, shape, &nd) == 0) {
    int same = nd == 1 && (size_t)shape[0] == n && memcmp(ids, ref, n * sizeof *ids) == 0;
    CHECK_MSG(same, "case %d: %zu ids differ from diffusers' tokenizer (%lld ids)", i, n, (long long)shape[0]);
    free(ref);
  } else {
    CHECK_MSG(0, "case %d: no %s in %s", i, name, ref_file);
  }
  free(ids);
  free(text);
  dit_tok_free(tok);
}

static void check_image(dit_ctx *ctx, const char *model, const char *ref_file, int i, const char *prompt,
                        uint64_t seed, int W, int H, int steps) {
  dit_gen_params p;
  dit_gen_params_default(&p);
  p.model_dir = model;
  p.prompt = prompt;
  p.width = W;
  p.height = H;
  p.steps = steps;
  p.seed = seed;
  p.guidance = 0.0;
  p.guidance_set = 1;
  dit_image img = {0};
  dit_gen_stats st;
  dit_status s = dit_generate(ctx, &p, &img, &st);
  CHECK_MSG(s == DIT_OK, "case %d: generate: %s", i, dit_ctx_last_error(ctx));
  char name[64];
  snprintf(name, sizeof name, "image_%d", i);
  float *ref = NULL;
  int64_t sh[8];
  int nd = 0;
  if (s == DIT_OK && dt_load_f32(ref_file, name, &ref, sh, &nd) == 0) {
    const size_t n = (size_t)W * (size_t)H * 3;
    int ok = nd == 3 && sh[0] == H && sh[1] == W && sh[2] == 3 && img.width == W && img.height == H;
    CHECK_MSG(ok, "case %d: image shape differs from the reference", i);
    size_t off = 0;
    int maxd = ok ? dt_max_level_diff(ref, img.rgb, n, &off) : 0;
    printf("case %d (\"%s\", seed %llu): max difference %d levels, %zu values off by more than one\n", i, prompt,
           (unsigned long long)seed, maxd, off);
    CHECK_MSG(ok && maxd <= 1, "case %d: image differs from diffusers' by %d 8-bit levels", i, maxd);
    free(ref);
  } else if (s == DIT_OK) {
    CHECK_MSG(0, "case %d: no %s in %s", i, name, ref_file);
  }
  dit_image_free(&img);
}

/* Whether the shape in img (one shape on a plain background) is drawn as an outline: the
 * middle of the box around the pixels (inside a 3-pixel margin) that differ from the
 * border's colour shows the border's colour. *found: enough such pixels for a shape. */
static bool hollow(const dit_image *img, bool *found) {
  const int W = img->width, H = img->height;
  double bg[3] = {0, 0, 0};
  int nb = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      if (x < 2 || y < 2 || x >= W - 2 || y >= H - 2) {
        for (int c = 0; c < 3; c++) bg[c] += img->rgb[(y * W + x) * 3 + c];
        nb++;
      }
  for (int c = 0; c < 3; c++) bg[c] /= nb;
  int x0 = W, y0 = H, x1 = -1, y1 = -1, n = 0;
  for (int y = 3; y < H - 3; y++) /* not the border: the decoder leaves the odd off pixel in a corner */
    for (int x = 3; x < W - 3; x++) {
      const uint8_t *p = &img->rgb[(y * W + x) * 3];
      double d = sqrt((p[0] - bg[0]) * (p[0] - bg[0]) + (p[1] - bg[1]) * (p[1] - bg[1]) + (p[2] - bg[2]) * (p[2] - bg[2]));
      if (d <= 60) continue;
      n++;
      x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1, y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1;
    }
  *found = n >= 40;
  if (!*found) return false;
  const uint8_t *m = &img->rgb[(((y0 + y1) / 2) * W + (x0 + x1) / 2) * 3];
  double d = sqrt((m[0] - bg[0]) * (m[0] - bg[0]) + (m[1] - bg[1]) * (m[1] - bg[1]) + (m[2] - bg[2]) * (m[2] - bg[2]));
  return d < 60;
}

/* The LoRA shipped beside the model (models/loras/shapes-128-outline.safetensors, made by
 * tools/train/lora.py): with it the shapes of held-out captions are outlines, without it
 * they are filled. */
static void check_outline_lora(dit_ctx *ctx, const char *model, const char *src) {
  static const char *const prompts[] = {
      "a red circle on a white background",    "a blue square on a yellow background",
      "a green triangle on a black background", "an orange circle on a purple background",
      "a white square on a blue background",    "a yellow triangle on a red background"};
  char path[4300];
  snprintf(path, sizeof path, "%s/models/loras/shapes-128-outline.safetensors", src);
  const dit_lora l = {path, 1.0};
  int hol[2] = {0, 0}, shown[2] = {0, 0};
  const int n = (int)(sizeof prompts / sizeof *prompts);
  for (int with = 0; with < 2; with++)
    for (int i = 0; i < n; i++) {
      dit_gen_params p;
      dit_gen_params_default(&p);
      p.model_dir = model, p.prompt = prompts[i], p.seed = (uint64_t)(100 + i);
      if (with) p.loras = &l, p.n_loras = 1;
      dit_image img = {0};
      CHECK_MSG(dit_generate(ctx, &p, &img, NULL) == DIT_OK, "outline LoRA: %s", dit_ctx_last_error(ctx));
      bool found = false;
      if (img.rgb) hol[with] += hollow(&img, &found), shown[with] += found;
      dit_image_free(&img);
    }
  printf("outline LoRA: %d of %d shapes hollow with it, %d of %d without (%d and %d shapes found)\n", hol[1], n,
         hol[0], n, shown[1], shown[0]);
  CHECK_MSG(hol[1] >= n - 1 && shown[1] >= n - 1, "with the outline LoRA, %d of %d shapes are outlines", hol[1], n);
  CHECK_MSG(hol[0] == 0 && shown[0] == n, "without it, %d of %d shapes are outlines", hol[0], n);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char model[4096], ref_dir[4200], ref_file[4400];
  dt_model_dir(&a, a.src, "shapes-128", model, sizeof model);
  json_t *rj = dt_load_reference(dt_path(ref_dir, sizeof ref_dir, model, "reference"), ref_file, sizeof ref_file);
  if (!rj) return dt_finish();
  const int W = (int)json_integer_value(json_object_get(rj, "width"));
  const int H = (int)json_integer_value(json_object_get(rj, "height"));
  const int steps = (int)json_integer_value(json_object_get(rj, "steps"));
  json_t *cases = json_object_get(rj, "cases");
  CHECK_MSG(json_array_size(cases) > 0 && W > 0 && H > 0 && steps > 0, "reference.json: no cases or no size");
  dit_ctx *ctx = NULL;
  dit_ctx_create(NULL, &ctx);
  for (size_t i = 0; ctx && i < json_array_size(cases); i++) {
    json_t *c = json_array_get(cases, i);
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    const uint64_t seed = (uint64_t)json_integer_value(json_object_get(c, "seed"));
    CHECK_MSG(prompt != NULL, "case %zu has no prompt", i);
    if (!prompt) continue;
    check_ids(model, ref_file, (int)i, prompt);
    check_image(ctx, model, ref_file, (int)i, prompt, seed, W, H, steps);
  }
  if (ctx) check_outline_lora(ctx, model, a.src);
  dit_ctx_free(ctx);
  json_decref(rj);
  return dt_finish();
}
