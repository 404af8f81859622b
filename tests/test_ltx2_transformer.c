/* The LTX-2 transformer against diffusers (fixtures models/ltx2-tiny and ltx23-tiny, made by
 * gen/make_fixtures_ltx2.py): every transformer call of the reference pipeline run (3 steps x
 * the conditional/unconditional batch, the spatio-temporal guidance pass and the isolated-
 * modalities pass), from the exact inputs diffusers gave it, both outputs (video and audio)
 * within relative error 1e-4 (float32 against float32); the same for the image-to-video run
 * (reference_i2v, made by gen/make_fixtures_ltx2_i2v.py), whose video timestep is per token: 0
 * for the conditioning frame's tokens. With DIT_TEST_DEVICE=cuda the same on the GPU, normalized
 * MSE 1e-4. Then inputs the model cannot take are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/ltx2.h"
#include "testing.h"

#define TOL 1e-4

static dit_backend *g_be;
static bool g_gpu;

/* Tensor name of call k, as F32 in the backend's memory (n elements written to *n). */
static float *dev_tensor(const char *ref, int k, const char *name, size_t *n, float **host) {
  char key[96];
  snprintf(key, sizeof key, "transformer.%d.%s", k, name);
  float *h = NULL;
  int64_t sh[8];
  int nd = 0;
  if (dt_load_f32(ref, key, &h, sh, &nd)) return NULL;
  *n = 1;
  for (int i = 0; i < nd; i++) *n *= (size_t)sh[i];
  float *d = dt_to_device(g_be, h, *n);
  if (host) *host = h; else free(h);
  return d;
}

/* An image-to-video call's per-token video timestep ts [B, N] as the call takes it: each item's
 * timestep (its last token's) into t[B], the leading tokens that differ from it (the same count
 * in every item) into *cond with their value (the same within an item) into tc[B]. False when
 * ts has another pattern. */
static bool split_timestep(const float *ts, int B, int N, float *t, float *tc, int *cond) {
  *cond = 0;
  while (*cond < N && ts[*cond] != ts[N - 1]) (*cond)++;
  for (int b = 0; b < B; b++) {
    t[b] = ts[(size_t)b * N + N - 1], tc[b] = ts[(size_t)b * N];
    for (int i = 0; i < N; i++)
      if (ts[(size_t)b * N + i] != (i < *cond ? tc[b] : t[b])) return false;
  }
  return true;
}

static void run_call(dit_ltx2 *m, const char *ref, const json_t *meta, int k, double *worst_v, double *worst_a) {
  size_t nv, na, nt, nat, nm, ntv, nta = 0;
  float *tv = NULL, *mask = NULL, *sg = NULL, *ta = NULL;
  float *v = dev_tensor(ref, k, "hidden_states", &nv, NULL), *a = dev_tensor(ref, k, "audio_hidden_states", &na, NULL);
  float *t = dev_tensor(ref, k, "encoder_hidden_states", &nt, NULL);
  float *at = dev_tensor(ref, k, "audio_encoder_hidden_states", &nat, NULL);
  float *dts = dev_tensor(ref, k, "timestep", &ntv, &tv), *dmask = dev_tensor(ref, k, "encoder_attention_mask", &nm, &mask);
  float *dsg = dev_tensor(ref, k, "sigma", &nta, &sg), *dta = NULL;
  char tk[96];
  snprintf(tk, sizeof tk, "transformer.%d.audio_timestep", k);
  float *probe = NULL;
  int64_t psh[8];
  int pnd = 0;
  const bool per_token = dt_load_f32(ref, tk, &probe, psh, &pnd) == 0; /* image-to-video: timestep [B, N] */
  free(probe);
  if (per_token) dta = dev_tensor(ref, k, "audio_timestep", &nta, &ta);
  char key[96];
  snprintf(key, sizeof key, "transformer.%d.out0", k);
  float *rv = dt_load_f32_n(ref, key, nv), *ra = NULL;
  snprintf(key, sizeof key, "transformer.%d.out1", k);
  ra = dt_load_f32_n(ref, key, na);
  const dit_ltx2_config *c = dit_ltx2_get_config(m);
  const int B = (int)nta, N = dt_json_int(meta, "num_frames") * dt_json_int(meta, "height") * dt_json_int(meta, "width");
  float tmain[64], tcond[64];
  int cond = 0;
  if (per_token) {
    CHECK_MSG(B <= 64 && ntv == (size_t)B * N && split_timestep(tv, B, N, tmain, tcond, &cond) && cond > 0,
              "call %d: a per-token timestep of %zu values for %d x %d tokens", k, ntv, B, N);
  } else {
    CHECK(ntv == (size_t)B && B <= 64);
    for (int b = 0; b < B && b < 64; b++) tmain[b] = tv[b];
  }
  const int T = (int)(nm / (size_t)B);
  int stg[8], n_stg = 0;
  const json_t *sb = json_object_get(meta, "spatio_temporal_guidance_blocks");
  for (size_t i = 0; json_is_array(sb) && i < json_array_size(sb) && n_stg < 8; i++)
    stg[n_stg++] = (int)json_integer_value(json_array_get(sb, i));
  uint8_t *m8 = malloc((size_t)B * T);
  for (int i = 0; m8 && mask && i < B * T; i++) m8[i] = mask[i] != 0.0f;
  dit_ltx2_call call = {.B = B, .frames = dt_json_int(meta, "num_frames"), .height = dt_json_int(meta, "height"),
                        .width = dt_json_int(meta, "width"), .fps = (float)json_number_value(json_object_get(meta, "fps")),
                        .audio_frames = dt_json_int(meta, "audio_num_frames"), .text_len = T, .video = v, .audio = a,
                        .text = t, .audio_text = at, .text_mask = m8, .timestep = tmain, .audio_timestep = ta,
                        .sigma = sg, .cond_tokens = cond, .cond_timestep = per_token ? tcond : NULL,
                        .use_cross_timestep = json_is_true(json_object_get(meta, "use_cross_timestep")),
                        .isolate_modalities = json_is_true(json_object_get(meta, "isolate_modalities")),
                        .stg_blocks = stg, .n_stg_blocks = n_stg};
  size_t nov = (size_t)B * N * c->video.out_channels, noa = (size_t)B * call.audio_frames * c->audio.out_channels;
  float *ov = NULL, *oa = NULL;
  dit_error e = {0};
  CHECK(g_be->ops->alloc(g_be, nov * sizeof(float), (void **)&ov, &e) == DIT_OK);
  CHECK(g_be->ops->alloc(g_be, noa * sizeof(float), (void **)&oa, &e) == DIT_OK);
  if (v && a && t && at && tv && sg && m8 && rv && ra && ov && oa && nov == nv / c->video.in_channels * c->video.out_channels) {
    CHECK_MSG(dit_ltx2_forward(m, &call, ov, oa, &e) == DIT_OK, "call %d: %s", k, e.msg);
    float *hv = malloc(nov * sizeof *hv), *ha = malloc(noa * sizeof *ha);
    if (hv && ha && g_be->ops->download(g_be, hv, ov, nov * sizeof *hv, &e) == DIT_OK &&
        g_be->ops->download(g_be, ha, oa, noa * sizeof *ha, &e) == DIT_OK && g_be->ops->sync(g_be, &e) == DIT_OK) {
      long bad = 0;
      double ev = g_gpu ? dt_nmse(hv, rv, nov, &bad) : dt_rel_err(hv, rv, nov);
      double ea = g_gpu ? dt_nmse(ha, ra, noa, &bad) : dt_rel_err(ha, ra, noa);
      CHECK_MSG(ev <= TOL && ea <= TOL && bad == 0, "call %d: video %.3g, audio %.3g", k, ev, ea);
      printf("  call %d (batch %d%s%s%s): video %.3g, audio %.3g\n", k, B, n_stg ? ", STG" : "",
             call.isolate_modalities ? ", isolated" : "", cond ? ", per-token timestep" : "", ev, ea);
      /* the pass's own switch matters: without it the output misses the bound tenfold in the
       * same measure (2.0's attention ignores STG, so only isolation is checked there) */
      const bool stg_counts = n_stg && c->perturbed_attn;
      if (stg_counts || call.isolate_modalities || cond) {
        dit_ltx2_call plain = call;
        plain.n_stg_blocks = 0, plain.isolate_modalities = false, plain.cond_tokens = 0;
        if (dit_ltx2_forward(m, &plain, ov, oa, &e) == DIT_OK &&
            g_be->ops->download(g_be, hv, ov, nov * sizeof *hv, &e) == DIT_OK && g_be->ops->sync(g_be, &e) == DIT_OK) {
          double d = g_gpu ? dt_nmse(hv, rv, nov, &bad) : dt_rel_err(hv, rv, nov);
          const char *what = stg_counts ? "STG" : call.isolate_modalities ? "isolation" : "the per-token timestep";
          CHECK_MSG(d > 10 * TOL, "call %d: the same output without %s (%.3g)", k, what, d);
          printf("  call %d without %s: video %.3g from the reference\n", k, what, d);
        }
      }
      *worst_v = ev > *worst_v ? ev : *worst_v;
      *worst_a = ea > *worst_a ? ea : *worst_a;
    }
    free(hv);
    free(ha);
  }
  void *dev[] = {v, a, t, at, dts, dmask, dsg, dta, ov, oa};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
    if (dev[i]) g_be->ops->free(g_be, dev[i]);
  free(tv), free(mask), free(sg), free(ta), free(rv), free(ra), free(m8);
}

/* The calls of dir/<stem>.json with the tensors of dir/<stem>.safetensors. */
static void check_fixture(const dt_args *a, const char *name, const char *stem) {
  char dir[1024], ref[1200], tdir[1200], sub[128], js[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  snprintf(ref, sizeof ref, "%s/%s.safetensors", dir, stem);
  snprintf(js, sizeof js, "%s/%s.json", dir, stem);
  json_error_t je;
  json_t *rj = json_load_file(js, 0, &je);
  CHECK_MSG(rj != NULL, "%s: %s", js, je.text);
  if (!rj) return;
  dt_path(tdir, sizeof tdir, dir, "transformer");
  dit_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_ltx2_load(g_be, tdir, &m, &e) == DIT_OK, "%s", e.msg);
  double wv = 0, wa = 0;
  int calls = 0;
  size_t i;
  json_t *c;
  printf("%s %s (%s):\n", name, stem, g_gpu ? "cuda, nmse" : "cpu, rel err");
  json_array_foreach(json_object_get(rj, "calls"), i, c) {
    if (m && !strcmp(json_string_value(json_object_get(c, "stage")), "transformer"))
      run_call(m, ref, c, dt_json_int(c, "index"), &wv, &wa), calls++;
  }
  CHECK(calls == 9);
  printf("%s: %d transformer calls, worst video %.3g, audio %.3g\n", name, calls, wv, wa);
  if (m) { /* refused before anything runs: an STG block the model does not have, an empty grid */
    const float t = 500.0f;
    float dummy = 0.0f;
    const int bad_block = dit_ltx2_get_config(m)->num_layers;
    dit_ltx2_call bad = {.B = 1, .frames = 1, .height = 1, .width = 1, .fps = 25.0f, .audio_frames = 1, .text_len = 1,
                         .video = &dummy, .audio = &dummy, .text = &dummy, .audio_text = &dummy, .timestep = &t,
                         .stg_blocks = &bad_block, .n_stg_blocks = 1};
    CHECK(dit_ltx2_forward(m, &bad, &dummy, &dummy, &e) == DIT_ERR_INVALID_ARG);
    printf("STG block %d: %s\n", bad_block, e.msg);
    bad.n_stg_blocks = 0, bad.frames = 0;
    CHECK(dit_ltx2_forward(m, &bad, &dummy, &dummy, &e) == DIT_ERR_INVALID_ARG);
    printf("no frames: %s\n", e.msg);
  }
  dit_ltx2_free(m);
  json_decref(rj);
}

/* The per-token timestep's plumbing, with and without use_cross_timestep, on call 0's inputs of
 * dir's reference (its conditional item): every token conditioned at t equals a plain call at t;
 * the first frame conditioned at the same t equals it too (the split runs the same rows); the
 * first frame at timestep 0 differs. */
static void check_cond_plumbing(const char *dir) {
  char ref[1200], tdir[1200];
  dt_path(ref, sizeof ref, dir, "reference.safetensors");
  dt_path(tdir, sizeof tdir, dir, "transformer");
  dit_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_ltx2_load(g_be, tdir, &m, &e) == DIT_OK, "%s", e.msg);
  size_t nv = 0, na = 0, nt = 0, nat = 0, ntv = 0;
  float *tv = NULL;
  float *v = dev_tensor(ref, 0, "hidden_states", &nv, NULL), *au = dev_tensor(ref, 0, "audio_hidden_states", &na, NULL);
  float *t = dev_tensor(ref, 0, "encoder_hidden_states", &nt, NULL);
  float *at = dev_tensor(ref, 0, "audio_encoder_hidden_states", &nat, NULL);
  float *dts = dev_tensor(ref, 0, "timestep", &ntv, &tv);
  size_t nm = 0;
  float *dmask = dev_tensor(ref, 0, "encoder_attention_mask", &nm, NULL);
  const dit_ltx2_config *c = m ? dit_ltx2_get_config(m) : NULL;
  if (!m || !v || !au || !t || !at || !tv || ntv != 2) {
    CHECK_MSG(false, "%s: call 0's inputs", dir);
  } else { /* item 1 (the conditional one) of the batch of 2: frames 3 x 2 x 4 tokens, 9 audio frames */
    const int N = 24, NA = 9, T = (int)(nm / 2);
    const size_t vo = nv / 2 / (size_t)c->video.in_channels * (size_t)c->video.out_channels;
    const size_t ao = na / 2 / (size_t)c->audio.in_channels * (size_t)c->audio.out_channels;
    void *ov = NULL, *oa = NULL;
    CHECK(g_be->ops->alloc(g_be, vo * sizeof(float), &ov, &e) == DIT_OK);
    CHECK(g_be->ops->alloc(g_be, ao * sizeof(float), &oa, &e) == DIT_OK);
    const float tt = tv[1], other = tt * 0.5f + 100.0f, zero = 0.0f;
    for (int cross = 0; cross < 2 && ov && oa; cross++) {
      dit_ltx2_call base = {.B = 1, .frames = 3, .height = 2, .width = 4, .fps = 25.0f, .audio_frames = NA,
                            .text_len = T, .video = v + nv / 2, .audio = au + na / 2, .text = t + nt / 2,
                            .audio_text = at + nat / 2, .timestep = &tt, .audio_timestep = &tt, .sigma = &tt,
                            .use_cross_timestep = cross};
      float *out[4] = {NULL};
      dit_ltx2_call calls[4] = {base, base, base, base};
      calls[1].timestep = &other, calls[1].cond_tokens = N, calls[1].cond_timestep = &tt; /* all at t */
      calls[2].cond_tokens = 8, calls[2].cond_timestep = &tt;                            /* frame 0 at t */
      calls[3].cond_tokens = 8, calls[3].cond_timestep = &zero;                          /* frame 0 at 0 */
      for (int k = 0; k < 4; k++) {
        CHECK_MSG(dit_ltx2_forward(m, &calls[k], ov, oa, &e) == DIT_OK, "%s", e.msg);
        out[k] = dt_to_host(g_be, ov, vo);
      }
      if (out[0] && out[1] && out[2] && out[3]) {
        const double e1 = dt_rel_err(out[1], out[0], vo), e2 = dt_rel_err(out[2], out[0], vo);
        const double e3 = dt_rel_err(out[3], out[0], vo);
        CHECK_MSG(e1 <= (g_gpu ? 1e-6 : 0) && e2 <= (g_gpu ? 1e-6 : 0) && e3 > 10 * TOL,
                  "use_cross_timestep %d: all conditioned %.3g, frame 0 at t %.3g, frame 0 at 0 %.3g", cross, e1, e2,
                  e3);
        printf("  use_cross_timestep %d: every token conditioned at t: %.3g from a plain call at t; the first frame at "
               "t: %.3g; at 0: %.3g\n", cross, e1, e2, e3);
      }
      for (int k = 0; k < 4; k++) free(out[k]);
    }
    dit_ltx2_call bad = {.B = 1, .frames = 3, .height = 2, .width = 4, .fps = 25.0f, .audio_frames = NA, .text_len = T,
                         .video = v, .audio = au, .text = t, .audio_text = at, .timestep = &tt, .cond_tokens = N + 1};
    CHECK(ov && oa && dit_ltx2_forward(m, &bad, ov, oa, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "conditioning"));
    if (ov) g_be->ops->free(g_be, ov);
    if (oa) g_be->ops->free(g_be, oa);
  }
  void *dev[] = {v, au, t, at, dts, dmask};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
    if (dev[i]) g_be->ops->free(g_be, dev[i]);
  free(tv);
  dit_ltx2_free(m);
}

static void test_cond_plumbing(const dt_args *a) {
  const char *names[2] = {"models/ltx2-tiny", "models/ltx23-tiny"};
  for (int i = 0; i < 2; i++) {
    char dir[1024];
    dt_path(dir, sizeof dir, a->data, names[i]);
    printf("%s per-token timestep:\n", names[i]);
    check_cond_plumbing(dir);
  }
}

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny", "reference"); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny", "reference"); }
static void test_ltx20_i2v(const dt_args *a) { check_fixture(a, "ltx2-tiny", "reference_i2v"); }
static void test_ltx23_i2v(const dt_args *a) { check_fixture(a, "ltx23-tiny", "reference_i2v"); }

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ltx20, test_ltx23, test_ltx20_i2v, test_ltx23_i2v,
                                                   test_cond_plumbing};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}
