/* Prompt text -> caption features against the pipelines' references: Z-Image
 * prompt_embeds / negative_prompt_embeds (hidden_states[-2] at the real positions) and
 * FLUX.2 klein prompt_embeds (hidden_states 9, 18, 27 at all 512 positions), from
 * reference.json's prompts; plus truncation, the empty prompt and bad arguments.
 * --fixture DIR checks one folder (by its model_index.json class); by default both
 * zimage-tiny and flux2-klein-tiny. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/qwen3.h"
#include "pipeline/prompt.h"
#include "testing.h"
#include "text/tokenizer.h"

#define TOL 1e-4

typedef struct model {
  dit_qwen3 *te;
  dit_tokenizer *tok;
  json_t *ref; /* reference.json */
  char refst[4096];
} model;

static bool open_model(dit_backend *be, const char *dir, model *m) {
  memset(m, 0, sizeof *m);
  char p[4096];
  dit_error err = {0};
  dit_status s = dit_qwen3_load(be, dt_path(p, sizeof p, dir, "text_encoder"), &m->te, &err);
  CHECK_MSG(s == DIT_OK, "text encoder: %s", err.msg);
  if (s != DIT_OK) return false;
  /* The fixtures were made with every model buffer rounded to bf16 (see qwen3.h). */
  CHECK(dit_qwen3_set_rope_freq_dtype(m->te, DIT_BF16, &err) == DIT_OK);
  s = dit_tok_load(dt_path(p, sizeof p, dir, "tokenizer"), &m->tok, &err);
  CHECK_MSG(s == DIT_OK, "tokenizer: %s", err.msg);
  m->ref = json_load_file(dt_path(p, sizeof p, dir, "reference.json"), 0, NULL);
  CHECK(m->ref != NULL);
  dt_path(m->refst, sizeof m->refst, dir, "reference.safetensors");
  return s == DIT_OK && m->ref;
}

static void close_model(model *m) {
  dit_qwen3_free(m->te);
  dit_tok_free(m->tok);
  json_decref(m->ref);
}

static void check_zimage_one(model *m, const char *prompt, const char *name) {
  float *ref = NULL, *emb = NULL;
  int64_t shape[8];
  int nd = 0, n = 0;
  if (dt_load_f32(m->refst, name, &ref, shape, &nd) != 0) {
    CHECK(0);
    return;
  }
  dit_error err = {0};
  dit_status s = dit_zimage_encode_prompt(m->te, m->tok, prompt, 512, &emb, &n, &err);
  CHECK_MSG(s == DIT_OK, "%s: %s", name, err.msg);
  int H = dit_qwen3_get_config(m->te)->hidden_size;
  CHECK_MSG(nd == 2 && n == shape[0] && shape[1] == H, "%s: %d tokens, reference [%lld, %lld]", name, n,
            (long long)shape[0], (long long)shape[1]);
  if (s == DIT_OK && n == shape[0]) {
    double e = dt_rel_err(emb, ref, (size_t)n * H);
    printf("zimage %-24s %d tokens, rel err %.3g\n", name, n, e);
    CHECK_MSG(e <= TOL, "%s: rel err %g", name, e);
  }
  free(emb);
  free(ref);
}

static void test_zimage(model *m) {
  const char *prompt = json_string_value(json_object_get(m->ref, "prompt"));
  const char *neg = json_string_value(json_object_get(m->ref, "negative_prompt"));
  CHECK(prompt && neg);
  if (!prompt || !neg) return;
  check_zimage_one(m, prompt, "prompt_embeds");
  check_zimage_one(m, neg, "negative_prompt_embeds");

  dit_error err = {0};
  int H = dit_qwen3_get_config(m->te)->hidden_size, n = 0, n5 = 0;
  float *full = NULL, *cut = NULL, *e = NULL;
  /* Truncation keeps the first max_len ids; causal attention makes their states the
   * first rows of the untruncated run. */
  CHECK(dit_zimage_encode_prompt(m->te, m->tok, prompt, 512, &full, &n, &err) == DIT_OK);
  CHECK(dit_zimage_encode_prompt(m->te, m->tok, prompt, 5, &cut, &n5, &err) == DIT_OK);
  CHECK(n5 == 5);
  if (full && cut && n5 == 5) CHECK(dt_rel_err(cut, full, 5 * (size_t)H) <= 1e-6);
  free(full);
  free(cut);
  /* Empty and NULL prompts: the template alone (8 ids with enable_thinking=True). */
  CHECK(dit_zimage_encode_prompt(m->te, m->tok, "", 512, &e, &n, &err) == DIT_OK && n == 8);
  free(e);
  CHECK(dit_zimage_encode_prompt(m->te, m->tok, NULL, 512, &e, &n, &err) == DIT_OK && n == 8);
  free(e);
  /* Bad input is rejected with nothing returned. */
  CHECK(dit_zimage_encode_prompt(m->te, m->tok, "bad \xff utf-8", 512, &e, &n, &err) == DIT_ERR_INVALID_ARG);
  CHECK(e == NULL && n == 0);
  CHECK(dit_zimage_encode_prompt(m->te, m->tok, "x", 0, &e, &n, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "max_sequence_length") != NULL);
}

static void test_klein(model *m) {
  const char *prompt = json_string_value(json_object_get(m->ref, "prompt"));
  CHECK(prompt != NULL);
  float *ref = NULL, *emb = NULL;
  int64_t shape[8];
  int nd = 0;
  if (!prompt || dt_load_f32(m->refst, "prompt_embeds", &ref, shape, &nd) != 0) {
    CHECK(0);
    return;
  }
  int H = dit_qwen3_get_config(m->te)->hidden_size;
  CHECK(nd == 2 && shape[0] == 512 && shape[1] == 3 * H);
  dit_error err = {0};
  dit_status s = dit_flux2_klein_encode_prompt(m->te, m->tok, prompt, 512, &emb, &err);
  CHECK_MSG(s == DIT_OK, "klein: %s", err.msg);
  if (s == DIT_OK && nd == 2 && shape[0] == 512 && shape[1] == 3 * H) {
    double e = dt_rel_err(emb, ref, (size_t)512 * 3 * H);
    printf("klein prompt_embeds [512, %d] rel err %.3g\n", 3 * H, e);
    CHECK_MSG(e <= TOL, "klein prompt_embeds: rel err %g", e);
  }
  free(emb);
  free(ref);
  CHECK(dit_flux2_klein_encode_prompt(m->te, m->tok, "\xc0\x80", 512, &emb, &err) == DIT_ERR_INVALID_ARG);
  CHECK(emb == NULL);
}

/* Runs the test matching dir's pipeline class. */
static void run_dir(dit_backend *be, const char *dir) {
  char p[4096];
  json_t *idx = json_load_file(dt_path(p, sizeof p, dir, "model_index.json"), 0, NULL);
  const char *cls = idx ? json_string_value(json_object_get(idx, "_class_name")) : NULL;
  CHECK_MSG(cls != NULL, "%s: no model_index.json class", dir);
  model m;
  if (cls && open_model(be, dir, &m)) {
    if (!strcmp(cls, "ZImagePipeline"))
      test_zimage(&m);
    else if (!strcmp(cls, "Flux2KleinPipeline"))
      test_klein(&m);
    else
      CHECK_MSG(0, "%s: pipeline %s has no prompt test", dir, cls);
  }
  if (cls) close_model(&m);
  json_decref(idx);
}

int main(int argc, char **argv) {
  dt_args args;
  dt_init(argc, argv, &args);
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &be, &err) != DIT_OK) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    return 1;
  }
  char dir[4096];
  if (args.fixture) {
    run_dir(be, args.fixture);
  } else {
    run_dir(be, dt_path(dir, sizeof dir, args.data, "models/zimage-tiny"));
    run_dir(be, dt_path(dir, sizeof dir, args.data, "models/flux2-klein-tiny"));
  }
  dit_backend_free(be);
  return dt_finish();
}
