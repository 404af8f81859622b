/* Replays the fuzz corpora (fuzz/corpus/<target>/, and $DIT_FUZZ_CORPUS/<target>/ when
 * set: `make fuzz-ci` points it at the corpora the fuzzers grew) through the RELEASE
 * CLI, so no abort/assert/crash is reachable from those inputs in a build without
 * sanitizers: every run must exit 0, 1 or 2, never by a signal.
 *   safetensors     `ditrun info FILE.safetensors --tensors`
 *   gguf            `ditrun info FILE.gguf --tensors`
 *   config          byte 0 picks the file (as fuzz/fuzz_config.c); model_index.json and
 *                   index.json via `ditrun info`, component configs via `ditrun generate`
 *                   (64x64, 1 step) on a symlinked zimage-tiny copy with a small tokenizer
 *   tokenizer_json  `ditrun tokenize -m DIR TEXT` (and --chat)
 *   tokenize        `ditrun tokenize -m zimage-tiny -- BYTES` (up to the first NUL)
 *   cli             `ditrun SUBCOMMAND ARGS...` (NUL-separated), in a scratch folder
 *   png             `ditrun info FILE` on the bytes after the selector
 * At most DIT_FUZZ_CORPUS_MAX files (default 120) per extra corpus folder, spread evenly. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "small_model.h"
#include "testing.h"

static dt_cli_env g;
static char g_copy[4200], g_log[4200];
static int g_runs, g_by_exit[3];

static void check_run(const char *what, const char *file, char **argv, const char *cwd) {
  int rc = dt_run_argv(g.cli, argv, g_log, cwd, 0);
  g_runs++;
  if (rc >= 0 && rc <= 2) g_by_exit[rc]++;
  char msg[2048] = "";
  if (rc < 0 || rc > 2) dt_read_file(g_log, msg, sizeof msg);
  CHECK_MSG(rc >= 0 && rc <= 2, "%s %s: exit %d (signal %d): %s", what, file, rc, rc < 0 ? -rc : 0, msg);
}

static bool make_model(void) {
  snprintf(g_copy, sizeof g_copy, "%s/model", g.tmp);
  return dt_make_small_model(g.model, g_copy);
}

/* ---- one input per target ---------------------------------------------------------- */

static void one_safetensors(const char *file, const unsigned char *d, size_t n) {
  char path[4400];
  snprintf(path, sizeof path, "%s/x.safetensors", g.tmp);
  dt_write_bytes(path, d, n);
  char *argv[] = {"ditrun", "info", "--tensors", path, NULL};
  check_run("safetensors", file, argv, g.tmp);
}

static void one_gguf(const char *file, const unsigned char *d, size_t n) {
  char path[4400];
  snprintf(path, sizeof path, "%s/x.gguf", g.tmp);
  dt_write_bytes(path, d, n);
  char *argv[] = {"ditrun", "info", "--tensors", path, NULL};
  check_run("gguf", file, argv, g.tmp);
}

static void one_config(const char *file, const unsigned char *d, size_t n) {
  if (n < 1) return;
  unsigned which = d[0] % 9;
  if (which >= 7) return; /* FLUX.2 configs: replayed by fuzz_config only (the copy is zimage-tiny) */
  static const char *const comp[] = {NULL, "transformer", "text_encoder", "vae", "scheduler"};
  static const char *const name[] = {NULL, "config.json", "config.json", "config.json", "scheduler_config.json"};
  char path[4400], src[4400], dir[4400];
  if (which >= 1 && which <= 4) {
    snprintf(path, sizeof path, "%s/%s/%s", g_copy, comp[which], name[which]);
    dt_write_bytes(path, d + 1, n - 1);
    char out[4400];
    snprintf(out, sizeof out, "%s/out.png", g.tmp);
    unlink(out);
    char *argv[] = {"ditrun", "generate", "-m", g_copy, "-p", "a fox", "-W", "64", "-H", "64", "--steps", "1",
                    "-q", "--overwrite", "-o", out, NULL};
    check_run("config", file, argv, g.tmp);
    snprintf(src, sizeof src, "%s/%s/%s", g.model, comp[which], name[which]);
    unlink(path);
    CHECK(symlink(src, path) == 0);
    return;
  }
  snprintf(dir, sizeof dir, "%s/cfg", g.tmp);
  mkdir(dir, 0755);
  if (which == 0) {
    snprintf(path, sizeof path, "%s/model_index.json", dir);
  } else {
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    snprintf(src, sizeof src, "%s/a.safetensors", dir);
    dt_write_one_tensor_shard(src);
  }
  dt_write_bytes(path, d + 1, n - 1);
  char *argv[] = {"ditrun", "info", which == 0 ? dir : path, NULL};
  check_run("config", file, argv, g.tmp);
  unlink(path);
}

static void one_tokenizer_json(const char *file, const unsigned char *d, size_t n) {
  char dir[4400], path[4600];
  snprintf(dir, sizeof dir, "%s/tok", g.tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  dt_write_bytes(path, d, n);
  char *argv[] = {"ditrun", "tokenize", "-m", dir, "Hello world <|x|> \xc3\xa9 12", NULL};
  check_run("tokenizer_json", file, argv, g.tmp);
}

static void one_tokenize(const char *file, const unsigned char *d, size_t n) {
  (void)n;
  char *argv[] = {"ditrun", "tokenize", "-m", g.model, "--", (char *)d, NULL};
  check_run("tokenize", file, argv, g.tmp);
  char *argv2[] = {"ditrun", "tokenize", "-m", g.model, "--chat", "--", (char *)d, NULL};
  check_run("tokenize --chat", file, argv2, g.tmp);
}

/* fuzz_png inputs: the bytes after the selector as an image for `ditrun info` (PNG files, and
 * parameters texts, which are then simply not PNGs). */
static void one_png(const char *file, const unsigned char *d, size_t n) {
  if (n < 1) return;
  char path[4600];
  snprintf(path, sizeof path, "%s/in.png", g.tmp);
  dt_write_bytes(path, d + 1, n - 1);
  char *argv[] = {"ditrun", "info", path, NULL};
  check_run("png", file, argv, g.tmp);
  unlink(path);
}

static void one_cli(const char *file, const unsigned char *d, size_t n) {
  if (n < 1) return;
  static const char *const names[] = {"generate", "tokenize", "info"};
  char *buf = malloc(n + 1);
  if (!buf) return;
  memcpy(buf, d + 1, n - 1);
  buf[n - 1] = 0;
  char *argv[70];
  int argc = 0;
  argv[argc++] = "ditrun";
  argv[argc++] = (char *)names[d[0] % 3];
  for (size_t i = 0; i < n - 1 && argc < 66;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  char cwd[4400];
  snprintf(cwd, sizeof cwd, "%s/cli", g.tmp);
  mkdir(cwd, 0755);
  check_run("cli", file, argv, cwd);
  free(buf);
}

typedef void (*one_fn)(const char *, const unsigned char *, size_t);

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays up to max files of dir (all when max == 0). Returns the number replayed. */
static int replay(const char *dir, one_fn fn, int max) {
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) break;
      names = nn;
    }
    names[n++] = strdup(e->d_name);
  }
  closedir(dp);
  if (n) qsort(names, n, sizeof *names, cmp_str);
  int done = 0;
  size_t step = max > 0 && n > (size_t)max ? (n + (size_t)max - 1) / (size_t)max : 1;
  for (size_t i = 0; i < n; i++) {
    if (i % step == 0) {
      char path[4600];
      snprintf(path, sizeof path, "%s/%s", dir, names[i]);
      size_t len = 0;
      unsigned char *d = dt_read_bytes(path, &len);
      if (d) {
        fn(path, d, len);
        done++;
      }
      free(d);
    }
    free(names[i]);
  }
  free(names);
  return done;
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "zimage-tiny", false, &g);
  snprintf(g_log, sizeof g_log, "%s/run.log", g.tmp);
  CHECK_MSG(make_model(), "cannot make the model folder copy");
  static const struct { const char *name; one_fn fn; } targets[] = {
      {"safetensors", one_safetensors}, {"gguf", one_gguf}, {"config", one_config},
      {"tokenizer_json", one_tokenizer_json},
      {"tokenize", one_tokenize},       {"cli", one_cli},
      {"png", one_png},
  };
  const char *extra = getenv("DIT_FUZZ_CORPUS");
  const char *max_s = getenv("DIT_FUZZ_CORPUS_MAX");
  int max = max_s ? atoi(max_s) : 120;
  for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", a.src, targets[t].name);
    int before = g_runs;
    int files = replay(dir, targets[t].fn, 0);
    CHECK_MSG(files > 0, "no committed corpus in %s", dir);
    if (extra) {
      snprintf(dir, sizeof dir, "%s/%s", extra, targets[t].name);
      files += replay(dir, targets[t].fn, max);
    }
    printf("%-15s %4d inputs, %4d runs\n", targets[t].name, files, g_runs - before);
  }
  printf("%d runs: exit 0 x%d, 1 x%d, 2 x%d, none by a signal\n", g_runs, g_by_exit[0], g_by_exit[1], g_by_exit[2]);
  return dt_finish();
}
