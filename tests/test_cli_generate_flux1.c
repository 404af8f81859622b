/* `ditrun generate` on FLUX.1 [dev] and [schnell] end to end through the CLI: the fixture's
 * reference image (within one 8-bit level) from the folder, the same PNG byte for byte when
 * the weights come from single files (--diffusion-model: the transformer under BFL's names;
 * --clip-l, --t5xxl: the encoders' files; --vae: the VAE under ae.safetensors' LDM names), and
 * a single file with a missing or mis-shaped tensor, a file that does not exist or a broken T5
 * tokenizer.json ending in exit 2 with a message that names it. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "testing.h"

static dt_cli_env g;

typedef struct ref_run {
  char model[4096], prompt[1024];
  int steps, max_len;
  double guidance;
} ref_run;

static int load_run(const char *model, ref_run *r) {
  json_t *rj = dt_load_reference(model, NULL, 0);
  if (!rj) return -1;
  snprintf(r->model, sizeof r->model, "%s", model);
  snprintf(r->prompt, sizeof r->prompt, "%s", json_string_value(json_object_get(rj, "prompt")));
  r->steps = (int)json_integer_value(json_object_get(rj, "steps"));
  r->max_len = (int)json_integer_value(json_object_get(rj, "max_sequence_length"));
  r->guidance = json_number_value(json_object_get(rj, "guidance_scale"));
  json_decref(rj);
  return 0;
}

/* The reference's settings at 96x128, seed 42, plus extra options; exit status, output in msg. */
static int gen(const ref_run *r, const char *extra, const char *out, char *msg, size_t len) {
  char cmd[16384], log[4200];
  snprintf(log, sizeof log, "%s/gen.log", g.tmp);
  snprintf(cmd, sizeof cmd,
           "'%s' generate -q -m '%s' -p '%s' -W 96 -H 128 --steps %d --guidance %g --max-seq-len %d --seed 42 "
           "--overwrite -o '%s' %s",
           g.cli, r->model, r->prompt, r->steps, r->guidance, r->max_len, out, extra);
  return dt_run_output(cmd, log, msg, len);
}

static void test_model(const char *model, const char *tag) {
  ref_run r;
  if (load_run(model, &r)) {
    CHECK_MSG(0, "%s: no reference", model);
    return;
  }
  char out[4200], out2[4200], ref_file[4200], msg[4096], files[16384];
  snprintf(out, sizeof out, "%s/%s.png", g.tmp, tag);
  snprintf(ref_file, sizeof ref_file, "%s/reference.safetensors", model);
  int rc = gen(&r, "", out, msg, sizeof msg);
  CHECK_MSG(rc == 0, "%s: exit %d: %s", tag, rc, msg);
  if (rc == 0) dt_check_png(out, ref_file, "image", 96, 128);
  /* the same weights from single files (the VAE under ae.safetensors' LDM names) */
  char ae[4200], vsrc[4200];
  snprintf(ae, sizeof ae, "%s/%s_ae.safetensors", g.tmp, tag);
  snprintf(vsrc, sizeof vsrc, "%s/vae/diffusion_pytorch_model.safetensors", model);
  CHECK(dt_vae_write_ldm(vsrc, ae, 4, false) == 0);
  snprintf(files, sizeof files,
           "--diffusion-model '%s/single/transformer.safetensors' --clip-l '%s/text_encoder/model.safetensors' "
           "--t5xxl '%s/text_encoder_2/model.safetensors' --vae '%s'",
           model, model, model, ae);
  snprintf(out2, sizeof out2, "%s/%s_files.png", g.tmp, tag);
  rc = gen(&r, files, out2, msg, sizeof msg);
  CHECK_MSG(rc == 0, "%s single files: exit %d: %s", tag, rc, msg);
  if (rc == 0) CHECK_MSG(dt_files_equal(out, out2), "%s: single files gave a different image", tag);
}

static void test_bad_files(const char *model) {
  ref_run r;
  if (load_run(model, &r)) return;
  char bad[4200], src[4200], out[4200], extra[8192], msg[4096];
  snprintf(src, sizeof src, "%s/single/transformer.safetensors", model);
  snprintf(bad, sizeof bad, "%s/no_txt_in.safetensors", g.tmp);
  snprintf(out, sizeof out, "%s/bad.png", g.tmp);
  CHECK(dt_st_rewrite(src, bad, "txt_in.weight", NULL) == 0);
  snprintf(extra, sizeof extra, "--diffusion-model '%s'", bad);
  int rc = gen(&r, extra, out, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "txt_in.weight"), "missing tensor: exit %d, '%s'", rc, msg);
  /* mis-shaped: the MLP's out weight [D, F] holding its in weight [F, D] */
  snprintf(bad, sizeof bad, "%s/bad_mlp.safetensors", g.tmp);
  CHECK(dt_st_rewrite(src, bad, "double_blocks.0.img_mlp.2.weight", "double_blocks.0.img_mlp.0.weight") == 0);
  snprintf(extra, sizeof extra, "--diffusion-model '%s'", bad);
  rc = gen(&r, extra, out, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "double_blocks.0.img_mlp.2.weight"), "mis-shaped tensor: exit %d, '%s'", rc, msg);
  /* a width the folder's config.json does not have: txt_in.weight holding img_in.weight's data */
  snprintf(bad, sizeof bad, "%s/bad_txt_in.safetensors", g.tmp);
  CHECK(dt_st_rewrite(src, bad, "txt_in.weight", "img_in.weight") == 0);
  snprintf(extra, sizeof extra, "--diffusion-model '%s'", bad);
  rc = gen(&r, extra, out, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "joint_attention_dim"), "width unlike the config: exit %d, '%s'", rc, msg);
  snprintf(extra, sizeof extra, "--clip-l '%s/nonexistent.safetensors'", g.tmp);
  rc = gen(&r, extra, out, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "nonexistent.safetensors"), "missing file: exit %d, '%s'", rc, msg);
  rc = gen(&r, "--vae", out, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "--vae"), "--vae without a value: exit %d, '%s'", rc, msg);
}

/* Same size and pixels (the PNGs' text differs: it names the model folder). */
static bool same_pixels(const char *a, const char *b) {
  int wa = 0, ha = 0, wb = 0, hb = 0;
  unsigned char *pa = dt_read_png_rgb(a, &wa, &ha), *pb = dt_read_png_rgb(b, &wb, &hb);
  bool same = pa && pb && wa == wb && ha == hb && !memcmp(pa, pb, (size_t)wa * ha * 3);
  free(pa);
  free(pb);
  return same;
}

/* A copy of the model folder (symlinks) whose T5 tokenizer.json (its tokenizer_config.json
 * left out: the pad token is then the class default) has member2 of the object at member1
 * set to value; member1 "normalizer" is the first normalizer of its Sequence (the charsmap). */
static int broken_t5_folder(const char *model, const char *dir, const char *member1, const char *member2,
                            json_t *value) {
  static const char *const links[] = {"model_index.json", "scheduler", "text_encoder", "text_encoder_2",
                                      "transformer", "vae", "tokenizer"};
  char src[4200], dst[4200], abs_model[4096];
  if (!realpath(model, abs_model)) return -1;
  mkdir(dir, 0755);
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    snprintf(src, sizeof src, "%s/%s", abs_model, links[i]);
    snprintf(dst, sizeof dst, "%s/%s", dir, links[i]);
    unlink(dst);
    if (symlink(src, dst) != 0) return -1;
  }
  snprintf(dst, sizeof dst, "%s/tokenizer_2", dir);
  mkdir(dst, 0755);
  snprintf(src, sizeof src, "%s/tokenizer_2/tokenizer.json", abs_model);
  json_t *j = json_load_file(src, 0, NULL);
  json_t *obj = j ? json_object_get(j, member1) : NULL;
  if (obj && json_object_get(obj, "normalizers")) obj = json_array_get(json_object_get(obj, "normalizers"), 0);
  if (!obj) {
    json_decref(j);
    return -1;
  }
  json_object_set_new(obj, member2, value);
  snprintf(dst, sizeof dst, "%s/tokenizer_2/tokenizer.json", dir);
  int rc = json_dump_file(j, dst, JSON_COMPACT);
  json_decref(j);
  return rc;
}

/* A T5 tokenizer.json with a broken charsmap or vocabulary: exit 2 naming the field. */
static void test_bad_tokenizer(const char *model) {
  ref_run r;
  if (load_run(model, &r)) return;
  char dir[4200], out[4200], msg[4096];
  snprintf(out, sizeof out, "%s/badtok.png", g.tmp);
  static const struct {
    const char *m1, *m2, *value, *want;
  } cases[] = {
      {"normalizer", "precompiled_charsmap", "\"AAA\"", "precompiled_charsmap"},
      {"model", "vocab", "[[\"a\", \"x\"]]", "vocab"},
      {"model", "unk_id", "2", NULL}, /* unchanged: only tokenizer_config.json is missing */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    snprintf(dir, sizeof dir, "%s/badtok%zu", g.tmp, i);
    json_t *v = json_loads(cases[i].value, JSON_DECODE_ANY, NULL);
    if (broken_t5_folder(model, dir, cases[i].m1, cases[i].m2, v)) {
      CHECK_MSG(0, "cannot prepare %s", dir);
      continue;
    }
    snprintf(r.model, sizeof r.model, "%s", dir);
    int rc = gen(&r, "", out, msg, sizeof msg);
    if (!cases[i].want) { /* the pad token falls back to T5's <pad>: the folder's image */
      char ref[4200];
      snprintf(ref, sizeof ref, "%s/dev.png", g.tmp);
      CHECK_MSG(rc == 0 && same_pixels(out, ref), "no tokenizer_config.json: exit %d, '%s'", rc, msg);
      continue;
    }
    CHECK_MSG(rc == 2 && strstr(msg, cases[i].want), "broken %s: exit %d, '%s'", cases[i].want, rc, msg);
  }
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "flux1-dev-tiny", false, &g);
  char schnell[4096];
  snprintf(schnell, sizeof schnell, "%s/models/flux1-schnell-tiny", a.data);
  test_model(g.model, "dev");
  test_model(schnell, "schnell");
  test_bad_files(g.model);
  test_bad_tokenizer(g.model);
  return dt_finish();
}
