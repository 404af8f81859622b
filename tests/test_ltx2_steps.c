/* LTX-2's sampling around the transformer against diffusers (fixtures models/ltx2-tiny and
 * ltx23-tiny): the initial video and audio latents (torch.randn from the seed, in that order,
 * packed), the schedule (np.linspace sigmas shifted by calculate_shift over the video tokens,
 * stretched to the terminal 0.1), and every step's guidance (CFG, STG, modality isolation,
 * rescale; video and audio scales) from the reference transformer outputs to the velocity the
 * scheduler stepped with, and the Euler step to the next latents. Bound: relative error 1e-5
 * (host float32 arithmetic in diffusers' order; the rescale's spreads are summed in double);
 * the latents and the schedule bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "io/json.h"
#include "io/model_dir.h"
#include "pipeline/ltx2_sample.h"
#include "pipeline/rng_torch.h"
#include "pipeline/scheduler.h"
#include "testing.h"

#define TOL 1e-5

/* The reference's tensor `name` of n floats (a failed check and NULL otherwise). */
static float *ref_n(const char *ref, const char *name, size_t n) { return dt_load_f32_n(ref, name, n); }

/* Initial latents: randn video [1, C, F, H, W] then audio [1, Ca, L, M] from one generator. */
static void check_latents(const char *ref, int C, int F, int H, int W, int Ca, int L, int M, int seed) {
  const size_t nv = (size_t)C * F * H * W, na = (size_t)Ca * L * M;
  float *rv = malloc(nv * sizeof *rv), *ra = malloc(na * sizeof *ra), *pv = malloc(nv * sizeof *pv);
  float *pa = malloc(na * sizeof *pa);
  float *wv = ref_n(ref, "prepare_latents.0.out0", nv), *wa = ref_n(ref, "prepare_audio_latents.0.out0", na);
  if (rv && ra && pv && pa && wv && wa) {
    dit_torch_rng g;
    dit_torch_rng_seed(&g, (uint64_t)seed);
    dit_torch_randn(&g, rv, nv);
    dit_torch_randn(&g, ra, na);
    dit_ltx2_pack_video(rv, C, F, H, W, pv);
    dit_ltx2_pack_audio(ra, Ca, L, M, pa);
    CHECK_MSG(!memcmp(pv, wv, nv * sizeof *pv), "packed video latents differ");
    CHECK_MSG(!memcmp(pa, wa, na * sizeof *pa), "packed audio latents differ");
    dit_ltx2_unpack_video(pv, C, F, H, W, rv + 0);
    dit_ltx2_unpack_audio(pa, Ca, L, M, ra + 0);
    dit_torch_rng_seed(&g, (uint64_t)seed);
    float *again = malloc(nv * sizeof *again);
    if (again) {
      dit_torch_randn(&g, again, nv);
      CHECK_MSG(!memcmp(again, rv, nv * sizeof *rv), "unpack is not the inverse of pack");
    }
    free(again);
    printf("initial latents: video [%d, %d, %d, %d] and audio [%d, %d, %d] bit for bit\n", C, F, H, W, Ca, L, M);
  }
  free(rv), free(ra), free(pv), free(pa), free(wv), free(wa);
}

static void check_fixture(const dt_args *a, const char *name) {
  char dir[1024], ref[1200], sub[128];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  const json_t *call = json_object_get(rj, "call"), *t0 = NULL;
  size_t k;
  json_t *c;
  json_array_foreach(json_object_get(rj, "calls"), k, c) {
    if (!t0 && !strcmp(json_string_value(json_object_get(c, "stage")), "transformer")) t0 = c;
  }
  const int steps = dt_json_int(call, "num_inference_steps"), F = dt_json_int(t0, "num_frames"), H = dt_json_int(t0, "height");
  const int W = dt_json_int(t0, "width"), L = dt_json_int(t0, "audio_num_frames");
  const int N = F * H * W;
  /* channel counts from the shapes of the first call's inputs */
  const json_t *shapes = json_object_get(rj, "tensors");
  const int C = (int)json_integer_value(json_array_get(json_object_get(shapes, "transformer.0.hidden_states"), 2));
  const int CA = (int)json_integer_value(json_array_get(json_object_get(shapes, "transformer.0.audio_hidden_states"), 2));
  char avp[1200];
  dt_path(avp, sizeof avp, dir, "audio_vae/config.json");
  json_t *av = NULL;
  dit_error je = {0};
  CHECK_MSG(dit_json_load_file(avp, 1 << 20, &av, &je) == DIT_OK, "%s", je.msg);
  const int Ca = av ? dt_json_int(av, "latent_channels") : 1, M = CA / (Ca > 0 ? Ca : 1); /* latent channels, mel bins */
  json_decref(av);
  check_latents(ref, C, F, H, W, Ca, L, M, (int)json_integer_value(json_object_get(rj, "seed")));

  /* the schedule */
  dit_model_dir *md = NULL;
  dit_error e = {0};
  float sig[DIT_FLOW_MAX_STEPS + 1], ts[DIT_FLOW_MAX_STEPS];
  CHECK_MSG(dit_model_dir_open(dir, &md, &e) == DIT_OK, "%s", e.msg);
  CHECK(md && dit_flow_schedule_for(md, steps, N, dit_flux2_default_sigmas, dit_flow_mu_calculate_shift, sig, ts,
                                    &e) == DIT_OK);
  float *rs = ref_n(ref, "sigmas", (size_t)steps + 1), *rt = ref_n(ref, "timesteps", (size_t)steps);
  CHECK_MSG(rs && rt && !memcmp(rs, sig, (size_t)(steps + 1) * sizeof *sig) && !memcmp(rt, ts, (size_t)steps * sizeof *ts),
            "%s: the schedule differs", name);
  printf("%s: %d steps over %d video tokens, sigmas %g .. %g as the pipeline\n", name, steps, N, sig[0], sig[steps - 1]);
  dit_model_dir_close(md);
  free(rs), free(rt);

  /* each step: transformer calls 3i (CFG batch: uncond, cond), 3i+1 (STG), 3i+2 (isolated) */
  dit_ltx2_guidance gv, ga;
  dit_ltx2_guidance_defaults(&gv, &ga);
  double worst = 0.0;
  for (int i = 0; i < steps; i++) {
    for (int s = 0; s < 2; s++) {
      const size_t n = s ? (size_t)L * CA : (size_t)N * C;
      const char *st = s ? "step_audio" : "step_video";
      char key[96];
      snprintf(key, sizeof key, "%s.%d.sample", st, i);
      float *x = ref_n(ref, key, n);
      snprintf(key, sizeof key, "%s.%d.model_output", st, i);
      float *want_v = ref_n(ref, key, n);
      snprintf(key, sizeof key, "%s.%d.out0", st, i);
      float *want_x = ref_n(ref, key, n);
      snprintf(key, sizeof key, "transformer.%d.out%d", 3 * i, s);
      float *cfg = ref_n(ref, key, 2 * n);
      snprintf(key, sizeof key, "transformer.%d.out%d", 3 * i + 1, s);
      float *stg = ref_n(ref, key, n);
      snprintf(key, sizeof key, "transformer.%d.out%d", 3 * i + 2, s);
      float *iso = ref_n(ref, key, n);
      float *v = malloc(n * sizeof *v);
      if (x && want_v && want_x && cfg && stg && iso && v) {
        CHECK(dit_ltx2_guide(s ? &ga : &gv, n, x, sig[i], cfg + n, cfg, stg, iso, v) == 0);
        double ev = dt_rel_err(v, want_v, n);
        dit_flow_euler_step(x, v, n, sig[i], sig[i + 1]);
        double ex = dt_rel_err(x, want_x, n);
        CHECK_MSG(ev <= TOL && ex <= TOL, "%s step %d %s: velocity %.3g, latents %.3g", name, i, s ? "audio" : "video",
                  ev, ex);
        worst = ev > worst ? ev : worst;
        worst = ex > worst ? ex : worst;
      }
      free(x), free(want_v), free(want_x), free(cfg), free(stg), free(iso), free(v);
    }
  }
  printf("%s: guidance and Euler steps of both streams, worst rel err %.3g\n", name, worst);
  /* refused: no spread to rescale by, a non-positive sigma */
  float z[4] = {0}, out[4];
  CHECK(dit_ltx2_guide(&gv, 4, z, 0.5f, z, NULL, NULL, NULL, out) == -1);
  CHECK(dit_ltx2_guide(&gv, 4, z, 0.0f, z, NULL, NULL, NULL, out) == -1);
  json_decref(rj);
}

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny"); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny"); }

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ltx20, test_ltx23};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
