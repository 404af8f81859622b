/* The LTX-2 transformer against diffusers (fixtures models/ltx2-tiny and ltx23-tiny, made by
 * gen/make_fixtures_ltx2.py): every transformer call of the reference pipeline run (3 steps x
 * the conditional/unconditional batch, the spatio-temporal guidance pass and the isolated-
 * modalities pass), from the exact inputs diffusers gave it, both outputs (video and audio)
 * within relative error 1e-4 (float32 against float32). With DIT_TEST_DEVICE=cuda the same on
 * the GPU, normalized MSE 1e-4. Then inputs the model cannot take are refused. */
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

static void run_call(dit_ltx2 *m, const char *ref, const json_t *meta, int k, double *worst_v, double *worst_a) {
  size_t nv, na, nt, nat, nm, ntv;
  float *tv = NULL, *mask = NULL, *sg = NULL;
  float *v = dev_tensor(ref, k, "hidden_states", &nv, NULL), *a = dev_tensor(ref, k, "audio_hidden_states", &na, NULL);
  float *t = dev_tensor(ref, k, "encoder_hidden_states", &nt, NULL);
  float *at = dev_tensor(ref, k, "audio_encoder_hidden_states", &nat, NULL);
  float *dts = dev_tensor(ref, k, "timestep", &ntv, &tv), *dmask = dev_tensor(ref, k, "encoder_attention_mask", &nm, &mask);
  float *dsg = dev_tensor(ref, k, "sigma", &ntv, &sg);
  char key[96];
  snprintf(key, sizeof key, "transformer.%d.out0", k);
  float *rv = dt_load_f32_n(ref, key, nv), *ra = NULL;
  snprintf(key, sizeof key, "transformer.%d.out1", k);
  ra = dt_load_f32_n(ref, key, na);
  const dit_ltx2_config *c = dit_ltx2_get_config(m);
  const int B = (int)ntv, N = dt_json_int(meta, "num_frames") * dt_json_int(meta, "height") * dt_json_int(meta, "width");
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
                        .text = t, .audio_text = at, .text_mask = m8, .timestep = tv, .sigma = sg,
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
      printf("  call %d (batch %d%s%s): video %.3g, audio %.3g\n", k, B, n_stg ? ", STG" : "",
             call.isolate_modalities ? ", isolated" : "", ev, ea);
      /* the pass's own switch matters: without it the output misses the bound tenfold in the
       * same measure (2.0's attention ignores STG, so only isolation is checked there) */
      const bool stg_counts = n_stg && c->perturbed_attn;
      if (stg_counts || call.isolate_modalities) {
        dit_ltx2_call plain = call;
        plain.n_stg_blocks = 0, plain.isolate_modalities = false;
        if (dit_ltx2_forward(m, &plain, ov, oa, &e) == DIT_OK &&
            g_be->ops->download(g_be, hv, ov, nov * sizeof *hv, &e) == DIT_OK && g_be->ops->sync(g_be, &e) == DIT_OK) {
          double d = g_gpu ? dt_nmse(hv, rv, nov, &bad) : dt_rel_err(hv, rv, nov);
          CHECK_MSG(d > 10 * TOL, "call %d: the same output without %s (%.3g)", k, stg_counts ? "STG" : "isolation", d);
          printf("  call %d without %s: video %.3g from the reference\n", k, stg_counts ? "STG" : "isolation", d);
        }
      }
      *worst_v = ev > *worst_v ? ev : *worst_v;
      *worst_a = ea > *worst_a ? ea : *worst_a;
    }
    free(hv);
    free(ha);
  }
  void *dev[] = {v, a, t, at, dts, dmask, dsg, ov, oa};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
    if (dev[i]) g_be->ops->free(g_be, dev[i]);
  free(tv), free(mask), free(sg), free(rv), free(ra), free(m8);
}

static void check_fixture(const dt_args *a, const char *name) {
  char dir[1024], ref[1200], tdir[1200], sub[128];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  dt_path(tdir, sizeof tdir, dir, "transformer");
  dit_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_ltx2_load(g_be, tdir, &m, &e) == DIT_OK, "%s", e.msg);
  double wv = 0, wa = 0;
  int calls = 0;
  size_t i;
  json_t *c;
  printf("%s (%s):\n", name, g_gpu ? "cuda, nmse" : "cpu, rel err");
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

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny"); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny"); }

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ltx20, test_ltx23};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}
