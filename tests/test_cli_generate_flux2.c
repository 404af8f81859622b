/* `ditrun generate` on FLUX.2 [klein] end to end through the CLI: the acceptance command
 * against the fixture's reference image (within one 8-bit level), also with the text
 * encoder's RoPE frequencies in bf16 as the fixture generator had them, byte-identical
 * output with one thread and with all cores, the family's size rule.
 * Usage: test_cli_generate_flux2 [--fixture DIR] (default <data>/models/flux2-klein-tiny). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "testing.h"

static dt_cli_env g;
static char g_prompt[1024];

/* The acceptance command: -W 96 -H 128 --steps 4 --seed 42, plus extra options. */
static int gen(const char *extra, const char *out, const char *log) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p '%s' -W 96 -H 128 --steps 4 --seed 42 -o '%s' %s", g.cli,
           g.model, g_prompt, out, extra);
  return dt_run(cmd, log);
}

static void check_image(const char *png) {
  char ref_file[4200];
  snprintf(ref_file, sizeof ref_file, "%s/reference.safetensors", g.model);
  dt_check_png(png, ref_file, "image", 96, 128);
}

static void test_acceptance(void) {
  char out[4200], out2[4200], log[4200], msg[4096];
  snprintf(out, sizeof out, "%s/k.png", g.tmp);
  snprintf(log, sizeof log, "%s/k.log", g.tmp);
  unlink(out);
  int rc = gen("", out, log);
  if (dt_read_file(log, msg, sizeof msg) < 0) msg[0] = 0;
  CHECK_MSG(rc == 0, "acceptance command: exit %d: %s", rc, msg);
  check_image(out);
  snprintf(out2, sizeof out2, "%s/k_bf16.png", g.tmp);
  unlink(out2);
  CHECK(gen("--text-rope-bf16 --threads 1", out2, NULL) == 0);
  check_image(out2);
  /* one thread instead of all cores: byte-identical */
  snprintf(out2, sizeof out2, "%s/k_t1.png", g.tmp);
  unlink(out2);
  CHECK(gen("--threads 1", out2, NULL) == 0);
  CHECK_MSG(dt_files_equal(out, out2), "--threads 1 gave a different file");
}

static void test_bad_size(void) {
  char out[4200], log[4200], cmd[8192], msg[4096];
  snprintf(out, sizeof out, "%s/bad.png", g.tmp);
  snprintf(log, sizeof log, "%s/bad.log", g.tmp);
  unlink(out);
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p x -W 100 -o '%s'", g.cli, g.model, out);
  int rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "multiples of 16"), "-W 100: exit %d, '%s'", rc, msg);
  struct stat st;
  CHECK_MSG(stat(out, &st) != 0, "-W 100 left an output file");
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "flux2-klein-tiny", false, &g);
  json_t *rj = dt_load_reference(g.model, NULL, 0);
  if (!rj) return dt_finish();
  snprintf(g_prompt, sizeof g_prompt, "%s", json_string_value(json_object_get(rj, "prompt")));
  json_decref(rj);
  test_acceptance();
  test_bad_size();
  return dt_finish();
}
