/* The Krea 2 fixtures (models/krea2-raw-tiny, krea2-turbo-tiny; made by
 * gen/make_fixtures_krea2.py) against what ditrun already has: the prompt the pipeline hands
 * its Qwen3-VL text encoder is Qwen-Image's chat template tokenized as a fixed-length block,
 * [system prefix + prompt | pad to max_sequence_length + 34 - 5 | the 5 suffix tokens]; the
 * reference's prompt_ids and suffix_ids must be what ditrun's tokenizer gives for those
 * strings (the prompt's tokens, then the tokenizer's pad id), and its mask after the 34 prefix
 * tokens must mark the prompt and the suffix, not the padding. The files the family will
 * load are checked for the geometry the generator wrote (taps, distilled flag, latents). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "testing.h"
#include "text/tokenizer.h"

#define PREFIX                                                                                                 \
  "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "       \
  "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n"
#define SUFFIX "<|im_end|>\n<|im_start|>assistant\n"
#define PREFIX_TOKENS 34
#define SUFFIX_TOKENS 5

static void check_folder(const dt_args *a, const char *name, bool distilled, int steps) {
  char dir[1024], sub[256], ref[1200], tokdir[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  const char *prompt = json_string_value(json_object_get(rj, "prompt"));
  const int msl = (int)json_integer_value(json_object_get(rj, "max_sequence_length"));
  CHECK(prompt && msl > 0);
  CHECK(json_is_true(json_object_get(rj, "is_distilled")) == distilled);
  CHECK(json_integer_value(json_object_get(rj, "steps")) == steps);
  dt_path(tokdir, sizeof tokdir, dir, "tokenizer");
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_tok_load(tokdir, &t, &e) == DIT_OK, "%s tokenizer: %s", name, e.msg);
  int32_t *want = NULL, *sfx = NULL, *got = NULL, *gs = NULL;
  int64_t shp[8], shs[8];
  int nd = 0, nds = 0;
  if (t && prompt && !dt_load_i32(ref, "prompt_ids", &want, shp, &nd) &&
      !dt_load_i32(ref, "suffix_ids", &sfx, shs, &nds)) {
    const size_t block = (size_t)(msl + PREFIX_TOKENS - SUFFIX_TOKENS);
    CHECK_MSG(nd == 1 && (size_t)shp[0] == block, "%s: prompt_ids of %lld, expected %zu", name, (long long)shp[0],
              block);
    char *text = malloc(strlen(PREFIX) + strlen(prompt) + 1);
    size_t n = 0, ns = 0;
    if (text) {
      strcpy(text, PREFIX);
      strcat(text, prompt);
      CHECK(dit_tok_encode(t, text, strlen(text), &got, &n, &e) == DIT_OK);
    }
    const int32_t pad = dit_tok_pad_id(t);
    bool same = got && n <= block;
    for (size_t i = 0; same && i < block; i++) same = want[i] == (i < n ? got[i] : pad);
    CHECK_MSG(same, "%s: the prefix + prompt block differs from the pipeline's (%zu tokens, pad %d)", name, n, pad);
    CHECK(dit_tok_encode(t, SUFFIX, strlen(SUFFIX), &gs, &ns, &e) == DIT_OK);
    same = ns == SUFFIX_TOKENS && nds == 1 && shs[0] == SUFFIX_TOKENS;
    for (size_t i = 0; same && i < ns; i++) same = gs[i] == sfx[i];
    CHECK_MSG(same, "%s: the suffix tokens differ from the pipeline's", name);
    /* the mask after the system prefix: the prompt's tokens, no padding, the suffix */
    int32_t *mask = NULL;
    int64_t shm[8];
    int ndm = 0;
    if (n > PREFIX_TOKENS && !dt_load_i32(ref, "prompt_mask", &mask, shm, &ndm)) {
      CHECK(ndm == 1 && shm[0] == msl);
      bool ok = ndm == 1 && shm[0] == msl;
      for (int i = 0; ok && i < msl; i++) {
        const bool real = (size_t)i < n - PREFIX_TOKENS || i >= msl - SUFFIX_TOKENS;
        ok = mask[i] == (real ? 1 : 0);
      }
      CHECK_MSG(ok, "%s: prompt_mask is not [prompt | no padding | suffix]", name);
      printf("%s: %zu prompt tokens after the prefix, %d padding, %d suffix: as the pipeline\n", name,
             n - PREFIX_TOKENS, msl - SUFFIX_TOKENS - (int)(n - PREFIX_TOKENS), SUFFIX_TOKENS);
    }
    free(mask);
    free(text);
  }
  /* the packed latents the transformer takes: [1, (H/16)(W/16), 64] */
  float *lat = NULL;
  int64_t shl[8];
  int ndl = 0;
  if (!dt_load_f32(ref, "latents_init", &lat, shl, &ndl)) {
    const int64_t h = json_integer_value(json_object_get(rj, "height")), w = json_integer_value(json_object_get(rj, "width"));
    CHECK(ndl == 3 && shl[0] == 1 && shl[1] == (h / 16) * (w / 16) && shl[2] == 64);
  }
  free(lat);
  free(want), free(sfx), free(got), free(gs);
  dit_tok_free(t);
  json_decref(rj);
}

static void test_raw(const dt_args *a) { check_folder(a, "krea2-raw-tiny", false, 3); }
static void test_turbo(const dt_args *a) { check_folder(a, "krea2-turbo-tiny", true, 2); }

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_raw, test_turbo};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
