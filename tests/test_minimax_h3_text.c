/* MiniMax-H3's conditioning against its fixture (models/minimax-h3-tiny, made by
 * gen/make_fixtures_minimax_h3.py from diffusers' modular pipeline at the pinned commit): the
 * prompt is tokenized verbatim (no template, no special tokens) and the Qwen3-VL language model's
 * hidden_states[50] (after decoder layer 50, no final norm) is the conditioning. Checked here with
 * what ditrun already has: its Qwen3 tokenizer and its Qwen3 / Qwen3-VL encoder (the fixture's text
 * encoder has 51 layers of width 4, its embedding stored as float8_e4m3fn). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/qwen3.h"
#include "testing.h"
#include "text/tokenizer.h"

#define TOL 1e-5 /* fp32 CPU against transformers' float32 */
#define H3_TEXT_LAYER 50 /* MiniMax-H3's conditioning layer (the pipeline refuses fewer than 51 layers) */

static dit_backend *g_be;

/* The prompt's ids as the pipeline made them, and ditrun's for the same text. */
static void test_tokens(const dt_args *a) {
  char dir[1024], ref[1200], sub[1200];
  dt_path(dir, sizeof dir, a->data, "models/minimax-h3-tiny");
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  const char *prompt = json_string_value(json_object_get(json_object_get(rj, "call"), "prompt"));
  CHECK(prompt != NULL);
  int32_t *want = NULL, *mask = NULL, *ids = NULL;
  int64_t ws[8], ms[8];
  int wn = 0, mn = 0;
  CHECK(dt_load_i32(ref, "text_encoder.0.input_ids", &want, ws, &wn) == 0);
  CHECK(dt_load_i32(ref, "text_encoder.0.attention_mask", &mask, ms, &mn) == 0);
  dit_tokenizer *tok = NULL;
  dit_error e = {0};
  dt_path(sub, sizeof sub, dir, "tokenizer");
  CHECK_MSG(dit_tok_load(sub, &tok, &e) == DIT_OK, "%s", e.msg);
  size_t n = 0;
  if (tok && prompt) CHECK_MSG(dit_tok_encode(tok, prompt, strlen(prompt), &ids, &n, &e) == DIT_OK, "%s", e.msg);
  if (want && mask && ids) {
    CHECK_MSG(wn == 2 && ws[0] == 1 && (size_t)ws[1] == n, "%zu ids, the pipeline's %lld", n, (long long)ws[1]);
    for (size_t i = 0; i < n && (size_t)ws[1] == n; i++) {
      CHECK_MSG(ids[i] == want[i], "id %zu: %d, the pipeline's %d", i, ids[i], want[i]);
      CHECK(mask[i] == 1); /* one prompt, no padding */
    }
    printf("prompt: %zu tokens, the pipeline's ids\n", n);
  }
  free(want), free(mask), free(ids);
  dit_tok_free(tok);
  json_decref(rj);
}

/* hidden_states[50] (what the pipeline conditions on) and the post-norm last state (what it must not
 * take, -1 here) for the pipeline's ids: the stacked reference [1, N, H, 52]. */
static void test_encoder(const dt_args *a) {
  char dir[1024], ref[1200], sub[1200];
  dt_path(dir, sizeof dir, a->data, "models/minimax-h3-tiny");
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  dit_qwen3 *te = NULL;
  dit_error e = {0};
  dt_path(sub, sizeof sub, dir, "text_encoder");
  CHECK_MSG(dit_qwen3_load(g_be, sub, &te, &e) == DIT_OK, "%s", e.msg);
  int32_t *ids = NULL;
  float *hs = NULL;
  int64_t is[8], hsh[8];
  int in = 0, hn = 0;
  CHECK(dt_load_i32(ref, "text_encoder.0.input_ids", &ids, is, &in) == 0);
  CHECK(dt_load_f32(ref, "text_encoder.0.hidden_states", &hs, hsh, &hn) == 0);
  if (te && ids && hs) {
    const dit_qwen3_config *c = dit_qwen3_get_config(te);
    const int N = (int)is[1], H = c->hidden_size, L = (int)hsh[3];
    CHECK_MSG(c->num_layers == 51 && hn == 4 && hsh[1] == N && hsh[2] == H && L == 52,
              "%d layers, hidden states [%lld, %lld, %lld, %lld]", c->num_layers, (long long)hsh[0],
              (long long)hsh[1], (long long)hsh[2], (long long)hsh[3]);
    const int layers[2] = {H3_TEXT_LAYER, -1}, taps[2] = {H3_TEXT_LAYER, L - 1};
    float *got[2] = {calloc((size_t)N * H, sizeof(float)), calloc((size_t)N * H, sizeof(float))};
    float *want = calloc((size_t)N * H, sizeof(float));
    CHECK(got[0] && got[1] && want);
    if (got[0] && got[1] && want && c->num_layers == 51 && L == 52) {
      CHECK_MSG(dit_qwen3_encode(te, 1, N, ids, NULL, 2, layers, got, &e) == DIT_OK, "%s", e.msg);
      for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < (int64_t)N * H; i++) want[i] = hs[i * L + taps[k]];
        const double r = dt_rel_err(got[k], want, (size_t)N * H);
        printf("hidden_states[%d] (%s, %d tokens): relative error %.3g\n", taps[k],
               k ? "after the final norm" : "the conditioning", N, r);
        CHECK_MSG(r <= TOL, "hidden_states[%d]: relative error %.3g > %g", taps[k], r, TOL);
      }
      /* the two differ (the check can tell the conditioning from the normed last state) */
      for (int64_t i = 0; i < (int64_t)N * H; i++) want[i] = hs[i * L + L - 1];
      CHECK(dt_rel_err(got[0], want, (size_t)N * H) > 0.1);
    }
    free(got[0]), free(got[1]), free(want);
  }
  free(ids), free(hs);
  dit_qwen3_free(te);
  json_decref(rj);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_tokens, test_encoder};
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &g_be, &err) != DIT_OK) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    return 1;
  }
  int rc = dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
  dit_backend_free(g_be);
  return rc;
}
