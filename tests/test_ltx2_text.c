/* LTX-2's text stage against diffusers (fixtures models/ltx2-tiny and ltx23-tiny, made by
 * gen/make_fixtures_ltx2.py): the prompt and the empty negative prompt tokenized as
 * LTX2Pipeline does (strip, <bos>, cut to max_sequence_length, padded on the LEFT with
 * <pad>); Gemma 3's stacked hidden states of both (the real tokens' rows: padded query rows
 * see no key and are not used downstream); the text connectors of LTX-2.0 (masked mean/range
 * normalization, one projection) and LTX-2.3 (per-token RMS norm, per-stream projections,
 * gated attention) on the pipeline's own connector input, both streams and the mask. Bound:
 * relative error 1e-4 (float32 against float32); with DIT_TEST_DEVICE=cuda the same on the GPU,
 * normalized MSE 1e-4. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/gemma3.h"
#include "models/ltx2_connectors.h"
#include "testing.h"
#include "text/tokenizer.h"

#define TOL 1e-4

static dit_backend *g_be;
static bool g_gpu; /* DIT_TEST_DEVICE=cuda: the CUDA backend, compared by normalized MSE (1e-4) */

/* The test's error measure of got against want: relative error on the CPU, normalized MSE on
 * the GPU (its GEMMs round differently). */
static double err_of(const float *got, const float *want, size_t n) {
  long bad = 0;
  return g_gpu ? dt_nmse(got, want, n, &bad) + (double)bad : dt_rel_err(got, want, n);
}

static void *dev_alloc(size_t n) {
  void *p = NULL;
  dit_error e = {0};
  CHECK_MSG(g_be->ops->alloc(g_be, n * sizeof(float), &p, &e) == DIT_OK, "%s", e.msg);
  return p;
}

/* The error measure over the rows whose mask is set: a [rows, w] against b. */
static double masked_err(const float *a, const float *b, const int32_t *mask, int rows, size_t w) {
  size_t n = 0;
  for (int r = 0; r < rows; r++) n += mask[r] ? w : 0;
  float *x = malloc((n ? n : 1) * sizeof *x), *y = malloc((n ? n : 1) * sizeof *y);
  size_t k = 0;
  for (int r = 0; r < rows && x && y; r++)
    if (mask[r]) {
      memcpy(x + k, a + (size_t)r * w, w * sizeof *x);
      memcpy(y + k, b + (size_t)r * w, w * sizeof *y);
      k += w;
    }
  double e = x && y && n ? err_of(x, y, n) : 1.0;
  free(x);
  free(y);
  return e;
}

static json_t *open_fixture(const dt_args *a, const char *name, char *dir, size_t dl, char *ref, size_t rl) {
  char sub[128];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, dl, a->data, sub);
  return dt_load_reference(dir, ref, rl);
}

/* The pipeline's token ids and masks (text_encoder call 0: the prompt, 1: the negative "")
 * are what the tokenizer gives, padded on the left. */
static void test_tokens(const dt_args *a) {
  char dir[1024], ref[1200], tokdir[1200];
  json_t *rj = open_fixture(a, "ltx2-tiny", dir, sizeof dir, ref, sizeof ref);
  if (!rj) return;
  const json_t *call = json_object_get(rj, "call");
  const char *prompt = json_string_value(json_object_get(call, "prompt"));
  int S = (int)json_integer_value(json_object_get(call, "max_sequence_length"));
  CHECK(prompt && S > 0);
  dt_path(tokdir, sizeof tokdir, dir, "tokenizer");
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_tok_load(tokdir, &t, &e) == DIT_OK, "%s: %s (`make setup` installs it)", tokdir, e.msg);
  for (int c = 0; t && prompt && c < 2; c++) {
    const char *text = c == 0 ? prompt : "";
    size_t b = 0, len = strlen(text);
    while (b < len && isspace((unsigned char)text[b])) b++;
    while (len > b && isspace((unsigned char)text[len - 1])) len--;
    int32_t *ids = NULL, *want = NULL, *wmask = NULL;
    size_t n = 0;
    int64_t sh[8];
    int nd = 0;
    char name[64];
    CHECK(dit_tok_encode_model(t, text + b, len - b, (size_t)S, &ids, &n, &e) == DIT_OK);
    snprintf(name, sizeof name, "text_encoder.%d.input_ids", c);
    if (!ids || dt_load_i32(ref, name, &want, sh, &nd)) continue;
    snprintf(name, sizeof name, "text_encoder.%d.attention_mask", c);
    CHECK(dt_load_i32(ref, name, &wmask, sh, &nd) == 0);
    bool same = wmask && nd == 2 && sh[1] == S && n <= (size_t)S;
    for (int i = 0; same && i < S; i++) {
      bool real = i >= S - (int)n;
      same = want[i] == (real ? ids[i - (S - (int)n)] : dit_tok_pad_id(t)) && wmask[i] == (real ? 1 : 0);
    }
    CHECK_MSG(same, "%s prompt: ids or mask differ from the pipeline's", c ? "negative" : "positive");
    printf("%s prompt: %zu tokens + %d left padding, as the pipeline\n", c ? "negative" : "positive", n, S - (int)n);
    free(ids);
    free(want);
    free(wmask);
  }
  dit_tok_free(t);
  json_decref(rj);
}

static void test_gemma3(const dt_args *a) {
  char dir[1024], ref[1200], tedir[1200];
  json_t *rj = open_fixture(a, "ltx2-tiny", dir, sizeof dir, ref, sizeof ref);
  if (!rj) return;
  dt_path(tedir, sizeof tedir, dir, "text_encoder");
  dit_gemma3 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_gemma3_load(g_be, tedir, &m, &e) == DIT_OK, "%s", e.msg);
  if (!m) {
    json_decref(rj);
    return;
  }
  const dit_gemma3_config *c = dit_gemma3_get_config(m);
  printf("gemma3: %d layers (%s%s%s), width %d, %d/%d heads of %d, RoPE %g / %g x%g\n", c->num_layers,
         c->sliding[0] ? "s" : "f", c->num_layers > 1 ? (c->sliding[1] ? "s" : "f") : "",
         c->num_layers > 2 ? (c->sliding[2] ? "s" : "f") : "", c->hidden_size, c->num_heads, c->num_kv_heads,
         c->head_dim, c->rope_local_theta, c->rope_global_theta, c->rope_global_factor);
  for (int call = 0; call < 2; call++) {
    char name[64];
    int32_t *ids = NULL, *mask = NULL;
    float *hs = NULL;
    int64_t sh[8], shh[8];
    int nd = 0, ndh = 0;
    snprintf(name, sizeof name, "text_encoder.%d.input_ids", call);
    if (dt_load_i32(ref, name, &ids, sh, &nd)) break;
    int S = (int)sh[1];
    snprintf(name, sizeof name, "text_encoder.%d.attention_mask", call);
    CHECK(dt_load_i32(ref, name, &mask, sh, &nd) == 0);
    snprintf(name, sizeof name, "text_encoder.%d.hidden_states", call);
    CHECK(dt_load_f32(ref, name, &hs, shh, &ndh) == 0);
    size_t w = (size_t)c->hidden_size * (size_t)(c->num_layers + 1);
    CHECK(ndh == 4 && shh[1] == S && shh[2] == c->hidden_size && shh[3] == c->num_layers + 1);
    float *dout = dev_alloc((size_t)S * w), *out = NULL;
    uint8_t *m8 = malloc((size_t)S);
    for (int i = 0; m8 && mask && i < S; i++) m8[i] = (uint8_t)mask[i];
    if (dout && m8 && mask && hs) {
      CHECK_MSG(dit_gemma3_encode_all(m, 1, S, ids, m8, dout, &e) == DIT_OK, "%s", e.msg);
      out = dt_to_host(g_be, dout, (size_t)S * w);
      double rel = out ? masked_err(out, hs, mask, S, w) : 1.0;
      CHECK_MSG(rel <= TOL, "call %d: hidden states error %.3g", call, rel);
      printf("gemma3 %s prompt: every hidden state of the real tokens, %s %.3g\n", call ? "negative" : "positive",
             g_gpu ? "nmse" : "rel err", rel);
    }
    if (dout) g_be->ops->free(g_be, dout);
    free(out);
    free(m8);
    free(ids);
    free(mask);
    free(hs);
  }
  /* a prompt longer than the sliding window is refused, not run wrong */
  int32_t ids[80] = {2};
  float *out = dev_alloc((size_t)80 * (size_t)c->hidden_size * (size_t)(c->num_layers + 1));
  if (out && c->sliding_window < 80) {
    CHECK(dit_gemma3_encode_all(m, 1, 80, ids, NULL, out, &e) == DIT_ERR_UNSUPPORTED);
    printf("80 tokens over a window of %d: %s\n", c->sliding_window, e.msg);
  }
  if (out) g_be->ops->free(g_be, out);
  dit_gemma3_free(m);
  json_decref(rj);
}

static void check_connectors(const dt_args *a, const char *fixture) {
  char dir[1024], ref[1200], cdir[1200];
  json_t *rj = open_fixture(a, fixture, dir, sizeof dir, ref, sizeof ref);
  if (!rj) return;
  dt_path(cdir, sizeof cdir, dir, "connectors");
  dit_ltx2_connectors *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_ltx2_connectors_load(g_be, cdir, &m, &e) == DIT_OK, "%s", e.msg);
  float *in = NULL, *rv = NULL, *ra = NULL;
  int32_t *mask = NULL, *rmask = NULL;
  int64_t sh[8], shm[8], shv[8], sha[8], sho[8];
  int nd = 0, ndm = 0, ndv = 0, nda = 0, ndo = 0;
  if (m && !dt_load_f32(ref, "connectors.0.arg0", &in, sh, &nd) && !dt_load_i32(ref, "connectors.0.arg1", &mask, shm, &ndm) &&
      !dt_load_f32(ref, "connectors.0.out0", &rv, shv, &ndv) && !dt_load_f32(ref, "connectors.0.out1", &ra, sha, &nda) &&
      !dt_load_i32(ref, "connectors.0.out2", &rmask, sho, &ndo)) {
    int B = (int)sh[0], S = (int)sh[1];
    int wv = dit_ltx2_connectors_video_dim(m), wa = dit_ltx2_connectors_audio_dim(m);
    CHECK(shv[2] == wv && sha[2] == wa && shm[0] == B && shm[1] == S);
    size_t nin = (size_t)B * S * (size_t)sh[2], nv = (size_t)B * S * wv, na = (size_t)B * S * wa;
    float *din = dt_to_device(g_be, in, nin), *dv = dev_alloc(nv), *da = dev_alloc(na), *v = NULL, *au = NULL;
    uint8_t *m8 = malloc((size_t)B * S), *om = malloc((size_t)B * S);
    for (int i = 0; m8 && i < B * S; i++) m8[i] = (uint8_t)mask[i];
    if (din && dv && da && m8 && om) {
      CHECK_MSG(dit_ltx2_connectors_forward(m, B, S, din, m8, dv, da, om, &e) == DIT_OK, "%s", e.msg);
      v = dt_to_host(g_be, dv, nv);
      au = dt_to_host(g_be, da, na);
    }
    if (v && au) {
      double ev = err_of(v, rv, nv), ea = err_of(au, ra, na);
      bool same = true;
      for (int i = 0; i < B * S; i++) same = same && om[i] == (uint8_t)rmask[i];
      CHECK_MSG(ev <= TOL && ea <= TOL, "%s: video error %.3g, audio %.3g", fixture, ev, ea);
      CHECK_MSG(same, "%s: the connectors' mask differs", fixture);
      printf("%s connectors (batch %d x %d tokens): %s video %.3g, audio %.3g, mask as the pipeline\n", fixture, B, S,
             g_gpu ? "nmse" : "rel err", ev, ea);
    }
    void *bufs[3] = {din, dv, da};
    for (int i = 0; i < 3; i++)
      if (bufs[i]) g_be->ops->free(g_be, bufs[i]);
    free(v);
    free(au);
    free(m8);
    free(om);
  }
  free(in);
  free(rv);
  free(ra);
  free(mask);
  free(rmask);
  dit_ltx2_connectors_free(m);
  json_decref(rj);
}

static void test_connectors_20(const dt_args *a) { check_connectors(a, "ltx2-tiny"); }
static void test_connectors_23(const dt_args *a) { check_connectors(a, "ltx23-tiny"); }

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_tokens, test_gemma3, test_connectors_20, test_connectors_23};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}
