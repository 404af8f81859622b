/* `ditrun compare`: dit_compare_png against scikit-image's PSNR and SSIM on the pairs of
 * tests/fixtures/compare (refs.json, made by tests/fixtures/gen/make_compare_refs.py), and the
 * CLI's output and exit codes. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ditrun.h"
#include "testing.h"

static dt_cli_env g;

static void test_refs(const dt_args *a) {
  char path[4096], pa[4200], pb[4200];
  snprintf(path, sizeof path, "%s/compare/refs.json", a->data);
  json_error_t je;
  json_t *r = json_load_file(path, 0, &je);
  CHECK_MSG(r != NULL, "cannot read %s", path);
  if (!r) return;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(r, "pairs"), i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    snprintf(pa, sizeof pa, "%s/compare/%s_a.png", a->data, name);
    snprintf(pb, sizeof pb, "%s/compare/%s_b.png", a->data, name);
    dit_image_metrics m;
    dit_status s = dit_compare_png(ctx, pa, pb, &m);
    CHECK_MSG(s == DIT_OK, "%s: %s", name, dit_ctx_last_error(ctx));
    if (s != DIT_OK) continue;
    const json_t *jp = json_object_get(p, "psnr");
    double want_ssim = json_real_value(json_object_get(p, "ssim"));
    if (json_is_string(jp)) CHECK_MSG(isinf(m.psnr), "%s: psnr %g, want inf", name, m.psnr);
    else CHECK_MSG(fabs(m.psnr - json_real_value(jp)) <= 1e-9, "%s: psnr %.12g, skimage %.12g", name, m.psnr,
                   json_real_value(jp));
    CHECK_MSG(fabs(m.ssim - want_ssim) <= 1e-12, "%s: ssim %.15g, skimage %.15g", name, m.ssim, want_ssim);
    CHECK(m.max_diff == json_integer_value(json_object_get(p, "max_diff")));
    printf("%s: psnr %.6f ssim %.12f (skimage %.12f)\n", name, m.psnr, m.ssim, want_ssim);
  }
  dit_ctx_free(ctx);
  json_decref(r);
}

/* exit code and first output line of `ditrun compare ARGS` */
static int run(const char *args, char *msg, size_t len) {
  char cmd[8192], log[4200];
  snprintf(cmd, sizeof cmd, "'%s' compare %s", g.cli, args);
  snprintf(log, sizeof log, "%s/compare.log", g.tmp);
  return dt_run_output(cmd, log, msg, len);
}

static void test_cli(const dt_args *a) {
  char args[9000], msg[4096];
  const char *d = a->data;
  snprintf(args, sizeof args, "'%s/compare/rgb_noisy_a.png' '%s/compare/rgb_noisy_b.png' --min-psnr 30", d, d);
  CHECK(run(args, msg, sizeof msg) == 0);
  snprintf(args, sizeof args, "'%s/compare/rgb_noisy_a.png' '%s/compare/rgb_noisy_b.png' --min-psnr 40", d, d);
  CHECK_MSG(run(args, msg, sizeof msg) == 1 && strstr(msg, "below"), "below the bound: '%s'", msg);
  snprintf(args, sizeof args, "'%s/compare/rgb_noisy_a.png' '%s/compare/rgb_noisy_b.png' --min-ssim 0.999", d, d);
  CHECK(run(args, msg, sizeof msg) == 1);
  snprintf(args, sizeof args, "'%s/compare/same_7x7_a.png' '%s/compare/same_7x7_b.png' --json", d, d);
  CHECK(run(args, msg, sizeof msg) == 0 && strstr(msg, "\"psnr\": \"inf\""));
  snprintf(args, sizeof args, "'%s/compare/rgb_noisy_a.png' '%s/compare/gray_9x13_a.png'", d, d);
  CHECK_MSG(run(args, msg, sizeof msg) == 2 && strstr(msg, "64x48") && strstr(msg, "13x9"), "sizes: '%s'", msg);
  snprintf(args, sizeof args, "'%s/compare/refs.json' '%s/compare/same_7x7_a.png'", d, d);
  CHECK_MSG(run(args, msg, sizeof msg) == 2 && strstr(msg, "PNG"), "not a PNG: '%s'", msg);
  CHECK(run("--min-psnr abc a.png b.png", msg, sizeof msg) == 2);
  CHECK(run("only_one.png", msg, sizeof msg) == 2);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "zimage-tiny", false, &g);
  test_refs(&a);
  test_cli(&a);
  return dt_finish();
}
