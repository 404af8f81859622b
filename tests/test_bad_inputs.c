/* The bad-input matrix of RELIABILITY.md through the release CLI, table-driven: each
 * case runs build/ditrun and asserts the exit code (2 bad input/usage, 1 runtime
 * failure; never a signal), that stderr names the problem, and that no output file was
 * left or an existing one overwritten. Cases not already covered by test_safetensors /
 * test_model_dir / test_cli_generate / test_png / test_tokenizer:
 *   - config.json values of each zimage-tiny component (transformer, text encoder,
 *     VAE, scheduler): zero, negative, huge, non-integer and string sizes, inconsistent
 *     heads, a config/weights mismatch;
 *   - shard-index files through `ditrun info` (bad weight_map shapes and names);
 *   - CLI numbers and strings of every subcommand (generate's remaining options,
 *     tokenize, info, the dispatcher), prompts that are invalid UTF-8;
 *   - output paths: symlinks (to a file, dangling), a FIFO (must not block), read-only
 *     folder (a read-only tmpfs when root can mount, since root ignores permissions),
 *     and a full disk: a 64 KiB tmpfs when mount works, and always RLIMIT_FSIZE with
 *     SIGXFSZ ignored (write fails with EFBIG).
 * Models load from a symlinked copy of zimage-tiny whose tokenizer.json is small (the
 * 11 MB one would dominate the run time); generate runs at 64x64, 1 step. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "small_model.h"
#include "testing.h"

static dt_cli_env g;
static char g_copy[4200], g_out[4200], g_log[4200];

/* Runs argv (argv[0] = "ditrun" is replaced by the CLI path) with stdout+stderr to
 * g_log, a 120 s alarm, and optionally RLIMIT_FSIZE = fsize bytes with SIGXFSZ ignored.
 * Returns the exit code, or -signal. */
static int run_cli(char **argv, long fsize) { return dt_run_argv(g.cli, argv, g_log, NULL, fsize); }

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Number of entries in dir whose name starts with prefix (left-over temp files). */
static int count_prefix(const char *dir, const char *prefix) {
  char cmd[8192], out[64];
  snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s' > '%s/count.txt'", dir, prefix, g.tmp);
  dt_run(cmd, NULL);
  snprintf(cmd, sizeof cmd, "%s/count.txt", g.tmp);
  return dt_read_file(cmd, out, sizeof out) > 0 ? atoi(out) : -1;
}

/* Checks the last run: exit code, message containing `expect`, no file at `out` (when
 * out is given). */
static void expect(const char *what, int rc, int want_rc, const char *needle, const char *out) {
  static char msg[1 << 16];
  msg[0] = 0;
  dt_read_file(g_log, msg, sizeof msg);
  CHECK_MSG(rc >= 0, "%s: killed by signal %d (%s)", what, -rc, msg);
  CHECK_MSG(rc == want_rc, "%s: exit %d, expected %d (%s)", what, rc, want_rc, msg);
  CHECK_MSG(!needle || strstr(msg, needle), "%s: message '%s' does not name '%s'", what, msg, needle);
  if (out) CHECK_MSG(!exists(out), "%s: left %s", what, out);
  size_t len = strlen(msg);
  while (len && msg[len - 1] == '\n') msg[--len] = 0;
  char *last = strrchr(msg, '\n');
  printf("  %-44s exit %d: %.150s\n", what, rc, last ? last + 1 : msg);
}

/* ---- the model folder copy ---------------------------------------------------------- */

/* g_copy = symlinks to the fixture's files, components as real folders of symlinks so a
 * config can be replaced; a small tokenizer. */
static bool make_model(void) {
  snprintf(g_copy, sizeof g_copy, "%s/model", g.tmp);
  return dt_make_small_model(g.model, g_copy);
}

/* Replaces component/<file> with the fixture's JSON where key = value (JSON text;
 * NULL value deletes the key; key "a.b" sets a member of an object member). */
static bool set_config(const char *comp, const char *file, const char *key, const char *value) {
  char src[4400], dst[4400];
  snprintf(src, sizeof src, "%s/%s/%s", g.model, comp, file);
  snprintf(dst, sizeof dst, "%s/%s/%s", g_copy, comp, file);
  json_error_t je;
  json_t *j = json_load_file(src, 0, &je);
  if (!j) return false;
  json_t *obj = j;
  char k[256];
  snprintf(k, sizeof k, "%s", key);
  char *dot = strchr(k, '.');
  if (dot) {
    *dot = 0;
    obj = json_object_get(j, k);
    memmove(k, dot + 1, strlen(dot + 1) + 1);
  }
  if (value) {
    json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
    if (!v || !obj) return false;
    json_object_set_new(obj, k, v);
  } else if (obj) {
    json_object_del(obj, k);
  }
  unlink(dst);
  int r = json_dump_file(j, dst, JSON_INDENT(1));
  json_decref(j);
  return r == 0;
}

static void restore_config(const char *comp, const char *file) {
  char src[4400], dst[4400];
  snprintf(src, sizeof src, "%s/%s/%s", g.model, comp, file);
  snprintf(dst, sizeof dst, "%s/%s/%s", g_copy, comp, file);
  unlink(dst);
  CHECK(symlink(src, dst) == 0);
}

static int generate(const char *out, const char *extra1, const char *extra2, long fsize) {
  char *argv[] = {"ditrun", "generate", "-m", g_copy, "-p", "a fox", "-W", "64", "-H", "64", "--steps", "1",
                  "-q", "-o", (char *)out, (char *)extra1, (char *)extra2, NULL};
  return run_cli(argv, fsize);
}

/* ---- config values ---------------------------------------------------------------- */

typedef struct cfg_case {
  const char *comp, *file, *key, *value, *needle;
} cfg_case;

static void test_configs(void) {
  printf("config.json values:\n");
  static const char *const sizes[] = {"0", "-1", "1000000000000", "2.5", "\"8\"", "null"};
  static const struct { const char *comp, *file, *key; } size_keys[] = {
      {"transformer", "config.json", "dim"},          {"transformer", "config.json", "n_heads"},
      {"transformer", "config.json", "n_kv_heads"},   {"transformer", "config.json", "n_layers"},
      {"transformer", "config.json", "n_refiner_layers"}, {"transformer", "config.json", "in_channels"},
      {"transformer", "config.json", "cap_feat_dim"},
      {"text_encoder", "config.json", "hidden_size"}, {"text_encoder", "config.json", "num_attention_heads"},
      {"text_encoder", "config.json", "num_key_value_heads"}, {"text_encoder", "config.json", "head_dim"},
      {"text_encoder", "config.json", "num_hidden_layers"}, {"text_encoder", "config.json", "intermediate_size"},
      {"text_encoder", "config.json", "vocab_size"},
      {"vae", "config.json", "latent_channels"},      {"vae", "config.json", "layers_per_block"},
      {"vae", "config.json", "norm_num_groups"},      {"vae", "config.json", "out_channels"},
      {"scheduler", "scheduler_config.json", "num_train_timesteps"},
  };
  char what[512];
  for (size_t k = 0; k < sizeof size_keys / sizeof size_keys[0]; k++) {
    for (size_t v = 0; v < sizeof sizes / sizeof sizes[0]; v++) {
      /* null means "absent" where the family has a default: skip those */
      if (!strcmp(sizes[v], "null") && (!strcmp(size_keys[k].key, "head_dim") ||
                                        !strcmp(size_keys[k].key, "num_key_value_heads") ||
                                        !strcmp(size_keys[k].comp, "scheduler") ||
                                        !strcmp(size_keys[k].comp, "vae")))
        continue;
      snprintf(what, sizeof what, "%s %s = %s", size_keys[k].comp, size_keys[k].key, sizes[v]);
      CHECK_MSG(set_config(size_keys[k].comp, size_keys[k].file, size_keys[k].key, sizes[v]), "%s", what);
      unlink(g_out);
      /* layers_per_block / n_refiner_layers = 0 are valid configs: the weights then have
       * tensors too many, named as unexpected */
      bool valid0 = (!strcmp(size_keys[k].key, "layers_per_block") || !strcmp(size_keys[k].key, "n_refiner_layers")) &&
                    !strcmp(sizes[v], "0");
      expect(what, generate(g_out, NULL, NULL, 0), 2, valid0 ? "unexpected" : size_keys[k].key, g_out);
      restore_config(size_keys[k].comp, size_keys[k].file);
    }
  }
  /* inconsistent values and mismatches with the weights */
  static const cfg_case cases[] = {
      {"transformer", "config.json", "n_heads", "3", "n_heads"},
      {"transformer", "config.json", "axes_dims", "[32, 48]", "axes_dims"},
      {"transformer", "config.json", "axes_dims", "[32, 48, 40]", "axes_dims"},
      {"transformer", "config.json", "all_patch_size", "[3]", "patch"},
      {"transformer", "config.json", "norm_eps", "-1", "norm_eps"},
      {"transformer", "config.json", "dim", "256", "dim"},
      /* heads that the config allows but the weights contradict: named by tensor and shape */
      {"text_encoder", "config.json", "num_attention_heads", "3", "q_proj.weight expected [24, 16] found [16, 16]"},
      {"text_encoder", "config.json", "num_key_value_heads", "3", "num_key_value_heads"},
      {"text_encoder", "config.json", "head_dim", "16", "mis-shaped"},
      {"text_encoder", "config.json", "hidden_size", "32", "embed_tokens.weight expected [151936, 32]"},
      {"text_encoder", "config.json", "rms_norm_eps", "\"x\"", "rms_norm_eps"},
      {"text_encoder", "config.json", "num_hidden_layers", "2", "num_hidden_layers"},
      {"vae", "config.json", "block_out_channels", "[32, 0, 64, 64]", "block_out_channels"},
      {"vae", "config.json", "block_out_channels", "[]", "block_out_channels"},
      {"vae", "config.json", "norm_num_groups", "7", "norm_num_groups"},
      {"vae", "config.json", "scaling_factor", "0", "scaling_factor"},
      {"scheduler", "scheduler_config.json", "shift", "-3", "shift"},
      {"scheduler", "scheduler_config.json", "use_karras_sigmas", "true", "use_karras_sigmas"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(what, sizeof what, "%s %s = %s", cases[i].comp, cases[i].key, cases[i].value);
    CHECK_MSG(set_config(cases[i].comp, cases[i].file, cases[i].key, cases[i].value), "%s", what);
    unlink(g_out);
    expect(what, generate(g_out, NULL, NULL, 0), 2, cases[i].needle, g_out);
    restore_config(cases[i].comp, cases[i].file);
  }
  /* not JSON, and JSON nested past the parser's depth cap */
  char path[4400];
  snprintf(path, sizeof path, "%s/transformer/config.json", g_copy);
  unlink(path);
  FILE *f = fopen(path, "wb");
  if (f) {
    for (int i = 0; i < 100000; i++) fputc('[', f);
    fclose(f);
  }
  unlink(g_out);
  expect("transformer config.json nested 100000 deep", generate(g_out, NULL, NULL, 0), 2, "config.json", g_out);
  restore_config("transformer", "config.json");
}

/* ---- shard indexes through `ditrun info` --------------------------------------------- */

static void test_indexes(void) {
  printf("shard indexes (ditrun info):\n");
  char dir[4400], path[4600];
  snprintf(dir, sizeof dir, "%s/idx", g.tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  dt_write_one_tensor_shard(path);
  static const struct { const char *json, *needle; } cases[] = {
      {"{\"weight_map\": []}", "weight_map"},
      {"{\"metadata\": {}}", "weight_map"},
      {"{\"weight_map\": {\"w\": 1}}", "\"w\""},
      {"{\"weight_map\": {\"w\": \"\"}}", "plain file name"},
      {"{\"weight_map\": {\"w\": \"a.safetensors\\u0000x\"}}", "\\u0000"},
      {"{\"weight_map\": {\"w\": \"a.safetensors/\"}}", "plain file name"},
      {"{\"weight_map\": {\"w\": \"./a.safetensors\"}}", "plain file name"},
      {"{\"weight_map\": {\"w\": \"a.safetensors\", \"w\": \"a.safetensors\"}}", "\"w\""},
      {"{\"weight_map\": {\"w\": \"a.safetensors\"", "index.json"},
      {"[\"a.safetensors\"]", "index.json"},
  };
  char what[256], idx[4600];
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dt_write_bytes(idx, cases[i].json, strlen(cases[i].json));
    char *argv[] = {"ditrun", "info", idx, NULL};
    snprintf(what, sizeof what, "index %.36s", cases[i].json);
    expect(what, run_cli(argv, 0), 2, cases[i].needle, NULL);
  }
  /* the good index is accepted (the table's files are otherwise right) */
  dt_write_bytes(idx, "{\"weight_map\": {\"w\": \"a.safetensors\"}}", 38);
  char *argv[] = {"ditrun", "info", idx, NULL};
  expect("index good", run_cli(argv, 0), 0, "tensors: 1", NULL);
}

/* ---- CLI numbers and strings ------------------------------------------------------- */

static void test_cli(void) {
  printf("CLI options:\n");
  static const struct { const char *a, *b, *needle; } gen[] = {
      {"--cfg-truncation", "nan", "--cfg-truncation"}, {"--cfg-normalization", "-1", "--cfg-normalization"},
      {"--max-seq-len", "0", "--max-seq-len"},         {"--max-seq-len", "99999", "--max-seq-len"},
      {"--vae-tile", "-1", "--vae-tile"},              {"--threads", "1025", "--threads"},
      {"--width=", NULL, "--width"},                   {"-H", "", "--height"},
      {"--seed", "", "--seed"},                        {"--seed", " 5", "--seed"},
      {"-W", "64.0", "--width"},                       {"--guidance", "1e5", "--guidance"},
      {"--device", "", "--device"},                    {"--rng", NULL, "needs a value"},
      {"-W", "16384", "axes_lens"},                    {"-W", "1000", "multiples of 16"},                    {"--steps", "1.5", "--steps"},
      {"--steps", "-0x1", "--steps"},                  {"--guidance", "--steps", "--guidance"},
  };
  char what[256];
  for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++) {
    unlink(g_out);
    snprintf(what, sizeof what, "generate %s '%s'", gen[i].a, gen[i].b ? gen[i].b : "");
    expect(what, generate(g_out, gen[i].a, gen[i].b, 0), 2, gen[i].needle, g_out);
  }
  /* strings: empty output path, invalid UTF-8 prompt, empty model folder */
  char *e1[] = {"ditrun", "generate", "-m", g_copy, "-p", "x", "-o", "", NULL};
  expect("generate -o ''", run_cli(e1, 0), 2, "--output", NULL);
  unlink(g_out);
  char *e2[] = {"ditrun", "generate", "-m", g_copy, "-p", "caf\xc3 \xff", "-W", "64", "-H", "64", "--steps", "1",
                "-q", "-o", g_out, NULL};
  expect("generate invalid UTF-8 prompt", run_cli(e2, 0), 2, "UTF-8", g_out);
  unlink(g_out);
  char *e3[] = {"ditrun", "generate", "-m", "", "-p", "x", "-o", g_out, NULL};
  expect("generate -m ''", run_cli(e3, 0), 2, "MODEL_DIR", g_out);
  char *t0[] = {"ditrun", "tokenize", "-m", "", "x", NULL};
  expect("tokenize -m ''", run_cli(t0, 0), 2, "MODEL_DIR", NULL);
  char *i0[] = {"ditrun", "info", "", NULL};
  expect("info ''", run_cli(i0, 0), 2, "empty", NULL);
  /* tokenize */
  char *t1[] = {"ditrun", "tokenize", NULL};
  expect("tokenize (nothing)", run_cli(t1, 0), 2, "-m", NULL);
  char *t2[] = {"ditrun", "tokenize", "-m", NULL};
  expect("tokenize -m", run_cli(t2, 0), 2, "-m", NULL);
  char *t3[] = {"ditrun", "tokenize", "-m", g_copy, "--bogus", "x", NULL};
  expect("tokenize --bogus", run_cli(t3, 0), 2, "--bogus", NULL);
  char *t4[] = {"ditrun", "tokenize", "-m", g_copy, "a", "b", NULL};
  expect("tokenize two texts", run_cli(t4, 0), 2, "more than one", NULL);
  char *t5[] = {"ditrun", "tokenize", "-m", g_copy, "\xed\xa0\x80", NULL};
  expect("tokenize invalid UTF-8 (surrogate)", run_cli(t5, 0), 2, "UTF-8", NULL);
  char *t6[] = {"ditrun", "tokenize", "-m", g.tmp, "x", NULL};
  expect("tokenize folder without tokenizer", run_cli(t6, 0), 2, "tokenizer.json", NULL);
  char *t7[] = {"ditrun", "tokenize", "-m", g_copy, "--chat", "", NULL};
  expect("tokenize --chat ''", run_cli(t7, 0), 0, NULL, NULL);
  /* info */
  char *i1[] = {"ditrun", "info", NULL};
  expect("info (nothing)", run_cli(i1, 0), 2, "usage", NULL);
  char *i2[] = {"ditrun", "info", g_copy, g_copy, NULL};
  expect("info two paths", run_cli(i2, 0), 2, "more than one", NULL);
  char *i3[] = {"ditrun", "info", "--bogus", NULL};
  expect("info --bogus", run_cli(i3, 0), 2, "--bogus", NULL);
  char nowhere[4400];
  snprintf(nowhere, sizeof nowhere, "%s/no/such/thing", g.tmp);
  char *i4[] = {"ditrun", "info", nowhere, NULL};
  int rc = run_cli(i4, 0);
  CHECK_MSG(rc == 1 || rc == 2, "info on a missing path: exit %d", rc);
  expect("info missing path", rc, rc, "no/such/thing", NULL);
  /* the dispatcher */
  char *d1[] = {"ditrun", NULL};
  expect("ditrun (nothing)", run_cli(d1, 0), 2, "usage", NULL);
  char *d2[] = {"ditrun", "frobnicate", NULL};
  expect("ditrun frobnicate", run_cli(d2, 0), 2, "frobnicate", NULL);
}

/* ---- output paths and a full disk -------------------------------------------------- */

static void put_precious(const char *path) { dt_write_bytes(path, "precious", 8); }
static bool is_precious(const char *path) {
  char buf[64];
  return dt_read_file(path, buf, sizeof buf) == 8 && !memcmp(buf, "precious", 8);
}

/* Mounts a tmpfs at dir with opts; true when it worked (root in a permissive container). */
static bool mount_tmpfs(const char *dir, const char *opts) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "umount '%s' 2>/dev/null; mkdir -p '%s' && mount -t tmpfs -o %s ditrun-test '%s' 2>/dev/null",
           dir, dir, opts, dir);
  return dt_run(cmd, NULL) == 0;
}
static void umount_dir(const char *dir) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "umount '%s' 2>/dev/null", dir);
  dt_run(cmd, NULL);
}

static void test_outputs(void) {
  printf("output paths:\n");
  char target[4400], link_path[4400], fifo[4400], dir[4400];
  snprintf(target, sizeof target, "%s/target.png", g.tmp);
  snprintf(link_path, sizeof link_path, "%s/link.png", g.tmp);
  put_precious(target);
  unlink(link_path);
  CHECK(symlink(target, link_path) == 0);
  expect("-o symlink to an existing file", generate(link_path, NULL, NULL, 0), 2, "exists", NULL);
  CHECK_MSG(is_precious(target), "the symlink's target was changed");
  /* a dangling symlink: never followed to create its target */
  char dangling_target[4400];
  snprintf(dangling_target, sizeof dangling_target, "%s/dangling-target.png", g.tmp);
  unlink(dangling_target);
  unlink(link_path);
  CHECK(symlink(dangling_target, link_path) == 0);
  int rc = generate(link_path, NULL, NULL, 0);
  expect("-o dangling symlink", rc, 2, "exists", NULL); /* refused before any work */
  CHECK_MSG(!exists(dangling_target), "a dangling symlink's target was created");
  unlink(link_path);
  /* a FIFO: refused without blocking, with or without --overwrite */
  snprintf(fifo, sizeof fifo, "%s/out.fifo", g.tmp);
  unlink(fifo);
  if (mkfifo(fifo, 0644) == 0) {
    expect("-o FIFO", generate(fifo, NULL, NULL, 0), 2, "exists", NULL);
    expect("-o FIFO --overwrite", generate(fifo, "--overwrite", NULL, 0), 2, "not a regular file", NULL);
    unlink(fifo);
  }
  CHECK_MSG(count_prefix(g.tmp, ".ditrun-png-") == 0, "temporary files left in %s", g.tmp);

  /* a full disk, by RLIMIT_FSIZE (works unprivileged): 4 KiB, the PNG is larger */
  put_precious(target);
  rc = generate(target, "--overwrite", NULL, 4096);
  expect("full disk (RLIMIT_FSIZE 4 KiB) --overwrite", rc, 1, target, NULL);
  expect("full disk (RLIMIT_FSIZE) names the reason", rc, 1, "File too large", NULL);
  CHECK_MSG(is_precious(target), "a failed write overwrote the existing file");
  CHECK_MSG(count_prefix(g.tmp, ".ditrun-png-") == 0, "temporary files left after a failed write");

  /* a full disk, by a 4 KiB tmpfs; a read-only folder, by a read-only tmpfs (root ignores
   * permissions, so chmod cannot make one) */
  snprintf(dir, sizeof dir, "%s/small-fs", g.tmp);
  if (mount_tmpfs(dir, "size=4k")) {
    char out[4600];
    snprintf(out, sizeof out, "%s/out.png", dir);
    put_precious(out);
    rc = generate(out, "--overwrite", NULL, 0);
    expect("full disk (4 KiB tmpfs) --overwrite", rc, 1, "no space left", NULL);
    CHECK_MSG(is_precious(out), "a failed write on a full disk overwrote the existing file");
    CHECK_MSG(count_prefix(dir, ".ditrun-png-") == 0, "temporary files left on the full disk");
    umount_dir(dir);
    snprintf(dir, sizeof dir, "%s/ro-fs", g.tmp);
    if (mount_tmpfs(dir, "ro,size=64k")) {
      snprintf(out, sizeof out, "%s/out.png", dir);
      expect("read-only folder (ro tmpfs)", generate(out, NULL, NULL, 0), 1, "read-only", out);
      umount_dir(dir);
    }
  } else {
    printf("  tmpfs cases skipped: cannot mount (not root or no CAP_SYS_ADMIN); RLIMIT_FSIZE case ran\n");
  }
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "zimage-tiny", false, &g);
  snprintf(g_out, sizeof g_out, "%s/out.png", g.tmp);
  snprintf(g_log, sizeof g_log, "%s/run.log", g.tmp);
  CHECK_MSG(make_model(), "cannot make the model folder copy in %s", g.tmp);
  /* the copy works: a good run first */
  unlink(g_out);
  int rc = generate(g_out, NULL, NULL, 0);
  expect("good run", rc, 0, NULL, NULL);
  CHECK(exists(g_out));
  unlink(g_out);
  test_configs();
  test_indexes();
  test_cli();
  test_outputs();
  return dt_finish();
}
