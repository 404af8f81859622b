/* The Z-Image pipeline against diffusers' ZImagePipeline on the fixture: sigmas and
 * timesteps, the per-step latents and the final 8-bit image, for the distilled case
 * (4 steps, no guidance) and the CFG case (3 steps, guidance 3, negative prompt).
 * Usage: test_zimage_pipeline [--fixture DIR] (default <data>/models/zimage-tiny). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "ditrun.h"
#include "io/model_dir.h"
#include "pipeline/scheduler.h"
#include "pipeline/zimage_pipeline.h"
#include "testing.h"

/* rope_bf16: the fixtures' generator cast the text encoder to bf16 and back, which
 * rounded its RoPE frequencies; with the same rounding the latents match to ~1e-6, with
 * transformers' fp32 frequencies (the default) to ~1e-4. */
static void run_case(dit_ctx *ctx, const char *fixture, const char *ref_file, json_t *rj, const char *prefix,
                     const char *case_name, int rope_bf16) {
  json_t *cs = json_object_get(json_object_get(rj, "cases"), case_name);
  CHECK_MSG(cs != NULL, "reference.json has no case %s", case_name);
  if (!cs) return;
  dit_gen_params p;
  dt_gen_params_from_reference(&p, fixture, rj, cs);
  p.negative_prompt = json_string_value(json_object_get(rj, "negative_prompt"));
  dt_step_check cap = {rope_bf16 ? 1e-5 : 1e-4, ref_file, prefix, 0, 0};
  p.text_rope_bf16 = rope_bf16;
  p.on_step = dt_step_check_cb;
  p.user = &cap;

  /* sigmas and timesteps as the pipeline computes them */
  char name[64];
  float *rs, *rt;
  int64_t sh[8];
  int nd;
  snprintf(name, sizeof name, "%s_sigmas", prefix);
  int ok = dt_load_f32(ref_file, name, &rs, sh, &nd) == 0;
  snprintf(name, sizeof name, "%s_timesteps", prefix);
  ok = ok && dt_load_f32(ref_file, name, &rt, sh, &nd) == 0;
  CHECK(ok);

  if (ok) {
    dit_model_dir *dir = NULL;
    dit_error err = {0};
    int64_t steps = p.steps;
    float sig[64], ts[64];
    dit_status s0 = dit_model_dir_open(fixture, &dir, &err);
    if (s0 == DIT_OK) s0 = dit_zimage_schedule(dir, (int)steps, p.height / 8, p.width / 8, sig, ts, &err);
    CHECK_MSG(s0 == DIT_OK, "schedule: %s", err.msg);
    if (s0 == DIT_OK) {
      double es = dt_rel_err(sig, rs, (size_t)steps + 1), et = dt_rel_err(ts, rt, (size_t)steps);
      printf("%s: sigmas rel err %.3g, timesteps rel err %.3g\n", case_name, es, et);
      CHECK_MSG(es <= 1e-6 && et <= 1e-6, "%s: sigmas/timesteps differ (%.3g, %.3g)", case_name, es, et);
    }
    dit_model_dir_close(dir);
  }
  dit_image img;
  dit_gen_stats st;
  dit_status s = dit_generate(ctx, &p, &img, &st);
  CHECK_MSG(s == DIT_OK, "%s: generate failed: %s", case_name, dit_ctx_last_error(ctx));
  CHECK_MSG(cap.steps_seen == p.steps, "%s: %d steps reported, %d expected", case_name, cap.steps_seen, p.steps);
  if (s == DIT_OK) {
    snprintf(name, sizeof name, "%s_image", prefix);
    CHECK(img.width == p.width && img.height == p.height);
    dt_check_image(ref_file, name, &img, case_name);
  }
  if (ok) {
    free(rs);
    free(rt);
  }
  dit_image_free(&img);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char fixture[4096], ref_file[4200];
  dt_model_dir(&a, a.data, "zimage-tiny", fixture, sizeof fixture);
  json_t *rj = dt_load_reference(fixture, ref_file, sizeof ref_file);
  if (!rj) return dt_finish();

  /* default sigmas: torch.linspace(1, 1/n, n) */
  float sg[8];
  dit_zimage_default_sigmas(4, sg);
  CHECK(sg[0] == 1.0f && sg[3] == 0.25f && sg[1] == 0.75f && sg[2] == 0.5f);

  dit_ctx *ctx;
  dit_ctx_create(NULL, &ctx);
  for (int rope_bf16 = 1; rope_bf16 >= 0; rope_bf16--) {
    printf("-- text encoder RoPE frequencies in %s\n", rope_bf16 ? "bf16 (as the fixture generator)" : "fp32");
    run_case(ctx, fixture, ref_file, rj, "turbo", "turbo", rope_bf16);
    run_case(ctx, fixture, ref_file, rj, "cfg", "cfg", rope_bf16);
  }
  dit_ctx_free(ctx);
  json_decref(rj);
  return dt_finish();
}
