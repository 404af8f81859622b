/* `ditrun generate` end to end through the CLI: the acceptance commands against the
 * fixture's reference images (within one 8-bit level), byte-identical output for the
 * same command and for 1 vs 2 threads, image-to-image (--init-image, --strength) and klein
 * editing (-r) against diffusers' images (tests/fixtures/edit) with their PNG parameters,
 * and every bad option / output path / input image giving exit 2 with a message and no
 * output file. Usage: test_cli_generate [--fixture DIR]. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "testing.h"

static dt_cli_env g;
static char g_prompt[1024], g_neg[1024];

static int gen(const char *extra, const char *out, const char *log) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p '%s' -W 96 -H 128 --seed 42 -o '%s' %s", g.cli, g.model,
           g_prompt, out, extra);
  return dt_run(cmd, log);
}

static void check_image(const char *png, const char *ref_name) {
  char ref_file[4200];
  snprintf(ref_file, sizeof ref_file, "%s/reference.safetensors", g.model);
  dt_check_png(png, ref_file, ref_name, 96, 128);
}

static void test_reference_images(void) {
  char out[4096], out2[4096], cmd[256];
  snprintf(out, sizeof out, "%s/turbo.png", g.tmp);
  unlink(out);
  CHECK(gen("--steps 4 --guidance 0", out, NULL) == 0);
  check_image(out, "turbo_image");
  /* same command twice: byte-identical */
  snprintf(out2, sizeof out2, "%s/turbo2.png", g.tmp);
  unlink(out2);
  CHECK(gen("--steps 4 --guidance 0", out2, NULL) == 0);
  CHECK_MSG(dt_files_equal(out, out2), "same command gave different files");
  /* 1 and 2 threads: identical */
  for (int t = 1; t <= 2; t++) {
    snprintf(out2, sizeof out2, "%s/turbo_t%d.png", g.tmp, t);
    snprintf(cmd, sizeof cmd, "--steps 4 --guidance 0 --threads %d --overwrite", t);
    CHECK(gen(cmd, out2, NULL) == 0);
    CHECK_MSG(dt_files_equal(out, out2), "--threads %d gave a different file", t);
  }
  snprintf(out, sizeof out, "%s/cfg.png", g.tmp);
  unlink(out);
  char extra[2048];
  snprintf(extra, sizeof extra, "--steps 3 --guidance 3 -n '%s'", g_neg);
  CHECK(gen(extra, out, NULL) == 0);
  check_image(out, "cfg_image");
}

/* The transformer and text encoder from single files under other programs' names (Z-Image's
 * original names with ComfyUI's prefix; llama.cpp's Qwen3 names): the same PNG, byte for
 * byte, as the folder's diffusers-named weights. */
static void test_component_files(void) {
  char src[4200], dit[4200], te[4200], out[4096], ref[4096], extra[9000];
  snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", g.model);
  snprintf(dit, sizeof dit, "%s/z_image_original.safetensors", g.tmp);
  CHECK(dt_zimage_write_original(src, dit, false) == 0);
  snprintf(src, sizeof src, "%s/text_encoder/model.safetensors", g.model);
  snprintf(te, sizeof te, "%s/qwen3_llama_cpp.safetensors", g.tmp);
  CHECK(dt_st_rename(src, te, dt_qwen3_to_llama_cpp, NULL) == 0);
  snprintf(ref, sizeof ref, "%s/turbo.png", g.tmp);
  snprintf(out, sizeof out, "%s/files.png", g.tmp);
  unlink(out);
  snprintf(extra, sizeof extra, "--steps 4 --guidance 0 --diffusion-model '%s' --text-encoder '%s'", dit, te);
  CHECK(gen(extra, out, NULL) == 0);
  CHECK_MSG(dt_files_equal(ref, out), "single files under other names gave a different image");
}

/* A bad invocation: exit 2, a non-empty message, and no output file. */
static void bad(const char *args, const char *expect) {
  char out[4096], log[4096], cmd[8192], msg[4096];
  snprintf(out, sizeof out, "%s/bad.png", g.tmp);
  snprintf(log, sizeof log, "%s/bad.log", g.tmp);
  unlink(out);
  snprintf(cmd, sizeof cmd, "'%s' generate %s", g.cli, args);
  int rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2, "'%s': exit %d, expected 2 (%s)", args, rc, msg);
  CHECK_MSG(strstr(msg, expect) != NULL, "'%s': message '%s' does not mention '%s'", args, msg, expect);
  struct stat st;
  CHECK_MSG(stat(out, &st) != 0, "'%s' left an output file", args);
}

static void test_bad_options(void) {
  char a[8192], base[4096];
  snprintf(base, sizeof base, "-m '%s' -p 'x' -o '%s/bad.png'", g.model, g.tmp);
  static const struct { const char *opt, *expect; } cases[] = {
      {"--steps 12abc", "--steps"},   {"--steps 0", "--steps"},      {"--steps ''", "--steps"},
      {"--steps 100000", "--steps"},  {"-W 1e999", "--width"},       {"-W 0x10", "--width"},
      {"-W -16", "--width"},          {"-W 100", "multiples of 16"}, {"-H 17", "multiples of 16"},
      {"-W 99999999999", "--width"},  {"--seed 0x10", "--seed"},     {"--seed -2", "--seed"},
      {"--seed 18446744073709551616", "--seed"}, {"--guidance nan", "--guidance"},
      {"--guidance inf", "--guidance"}, {"--guidance 1e999", "--guidance"}, {"--guidance 3x", "--guidance"},
      {"--rng philox", "--rng"},      {"--device gpu", "--device"},  {"--frobnicate", "unknown option"},
      {"-W 16384 -H 16384", "too large"},
      {"--threads 0", "--threads"},   {"--vae-tile abc", "--vae-tile"}, {"--steps", "needs a value"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(a, sizeof a, "%s %s", base, cases[i].opt);
    bad(a, cases[i].expect);
  }
  snprintf(a, sizeof a, "-p x -o '%s/bad.png'", g.tmp);
  bad(a, "-m");
  snprintf(a, sizeof a, "-m '%s' -o '%s/bad.png'", g.model, g.tmp);
  bad(a, "-p");
  /* output paths: a directory, a missing parent, an existing file (kept unchanged) */
  snprintf(a, sizeof a, "-m '%s' -p x -o '%s'", g.model, g.tmp);
  bad(a, "directory");
  snprintf(a, sizeof a, "-m '%s' -p x -o '%s/no/such/dir/x.png'", g.model, g.tmp);
  bad(a, "does not exist");
  char keep[4096];
  snprintf(keep, sizeof keep, "%s/keep.png", g.tmp);
  FILE *f = fopen(keep, "wb");
  if (f) {
    fputs("precious", f);
    fclose(f);
  }
  snprintf(a, sizeof a, "-m '%s' -p x -o '%s'", g.model, keep);
  char cmd[8192], log[4096], msg[4096];
  snprintf(cmd, sizeof cmd, "'%s' generate %s", g.cli, a);
  snprintf(log, sizeof log, "%s/keep.log", g.tmp);
  int rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "exists"), "existing output: exit %d, '%s'", rc, msg);
  CHECK(dt_read_file(keep, msg, sizeof msg) == 8 && !strcmp(msg, "precious"));
  /* a model folder that is not one */
  snprintf(a, sizeof a, "-m '%s' -p x -o '%s/bad.png'", g.tmp, g.tmp);
  snprintf(cmd, sizeof cmd, "'%s' generate %s", g.cli, a);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc != 0 && strstr(msg, "model_index.json"), "not a model folder: exit %d, '%s'", rc, msg);
}

/* --init-image and -r through the CLI against the edit fixture; the parameters recorded. */
static void test_edit(const char *data) {
  char edit[4200], ref[4300], out[4096], cmd[16384], text[65536];
  snprintf(edit, sizeof edit, "%s/edit", data);
  snprintf(ref, sizeof ref, "%s/reference.safetensors", edit);
  snprintf(out, sizeof out, "%s/img2img.png", g.tmp);
  unlink(out);
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p '%s' -i '%s/init.png' --strength 0.6 --steps 4 --guidance 0 "
           "--seed 42 --text-rope-bf16 -q -o '%s'", g.cli, g.model, g_prompt, edit, out);
  CHECK(dt_run(cmd, NULL) == 0);
  dt_check_png(out, ref, "z_img2img_s60_image", 96, 128);
  long n = dt_read_file(out, text, sizeof text);
  CHECK_MSG(n > 0 && memmem(text, (size_t)n, "Denoising strength: 0.6", 23), "img2img PNG lacks its strength");
  char klein[4200];
  snprintf(klein, sizeof klein, "%s/../flux2-klein-tiny", g.model);
  snprintf(out, sizeof out, "%s/edit2.png", g.tmp);
  unlink(out);
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p 'turn the fox blue' -r '%s/ref_a.png' --ref-image '%s/ref_b.png' "
           "-W 96 -H 128 --steps 4 --seed 42 --text-rope-bf16 -q -o '%s'", g.cli, klein, edit, edit, out);
  CHECK(dt_run(cmd, NULL) == 0);
  dt_check_png(out, ref, "k_edit2_image", 96, 128);
  n = dt_read_file(out, text, sizeof text);
  CHECK_MSG(n > 0 && memmem(text, (size_t)n, "Reference images: 2", 19), "edit PNG lacks its reference count");
  /* bad input images and combinations: exit 2, a message, no output */
  char a[16384], trunc[4200], buf[1 << 15];
  snprintf(trunc, sizeof trunc, "%s/trunc.png", g.tmp);
  snprintf(a, sizeof a, "%s/init.png", edit);
  long len = dt_read_file(a, buf, sizeof buf);
  FILE *f = fopen(trunc, "wb");
  if (f && len > 100) fwrite(buf, 1, (size_t)len / 3, f);
  if (f) fclose(f);
  static const struct {
    const char *fmt, *expect;
  } cases[] = {
      {"-m '%s' -p x -i '%s/trunc.png' -o '%s/bad.png'", "truncated"},
      {"-m '%s' -p x -i '%s/missing.png' -o '%s/bad.png'", "missing.png"},
      {"-m '%s' -p x --strength 0.5 -o '%s/bad.png' -n '%s'", "--strength needs --init-image"},
      {"-m '%s' -p x -i '%s/trunc.png' --strength 0 -o '%s/bad.png'", "--strength"},
      {"-m '%s' -p x -i '%s/trunc.png' --strength 1.5 -o '%s/bad.png'", "--strength"},
      {"-m '%s' -p x -r '%s/trunc.png' -i '%s/x.png' -o bad.png", "do not go together"},
      {"-m '%s' -p x --precision fp8 -o '%s/bad.png' -n '%s'", "--precision fp8 needs --device cuda"},
      {"-m '%s' -p x --precision fp16 -o '%s/bad.png' -n '%s'", "--precision"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(a, sizeof a, cases[i].fmt, g.model, g.tmp, g.tmp);
    bad(a, cases[i].expect);
  }
  snprintf(a, sizeof a, "-m '%s' -p x -r '%s/init.png' -o '%s/bad.png'", g.model, edit, g.tmp);
  bad(a, "does not take reference images");
  snprintf(a, sizeof a, "-m '%s' -p x -i '%s/init.png' -o '%s/bad.png'", klein, edit, g.tmp);
  bad(a, "does not take an init image");
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "zimage-tiny", false, &g);
  json_t *rj = dt_load_reference(g.model, NULL, 0);
  if (!rj) return dt_finish();
  snprintf(g_prompt, sizeof g_prompt, "%s", json_string_value(json_object_get(rj, "prompt")));
  snprintf(g_neg, sizeof g_neg, "%s", json_string_value(json_object_get(rj, "negative_prompt")));
  json_decref(rj);
  test_reference_images();
  test_component_files();
  test_bad_options();
  test_edit(a.data);
  return dt_finish();
}
