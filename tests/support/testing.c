/* Test harness (see testing.h). */
#include "testing.h"

#include <errno.h>
#include <fcntl.h>
#include <png.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int dt_passed = 0, dt_failed = 0;

static void mkdir_p(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p == '/') {
      *p = 0;
      mkdir(buf, 0777);
      *p = '/';
    }
  }
  mkdir(buf, 0777);
}

void dt_init(int argc, char **argv, dt_args *a) {
  memset(a, 0, sizeof *a);
  a->data = NULL;
  a->tmp = "/tmp/ditrun-test";
  a->src = ".";
  a->bin = "build";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--data") || !strcmp(argv[i], "--shared")) a->data = argv[i + 1];
    else if (!strcmp(argv[i], "--tmp")) a->tmp = argv[i + 1];
    else if (!strcmp(argv[i], "--src")) a->src = argv[i + 1];
    else if (!strcmp(argv[i], "--bin")) a->bin = argv[i + 1];
    else if (!strcmp(argv[i], "--fixture")) a->fixture = argv[i + 1];
    else {
      fprintf(stderr, "unknown test argument %s\n", argv[i]);
      exit(2);
    }
  }
  if (!a->data) { /* the fixtures kept in the source tree */
    snprintf(a->data_default, sizeof a->data_default, "%s/tests/fixtures", a->src);
    a->data = a->data_default;
  }
  mkdir_p(a->tmp);
}

void dt_report_failure(const char *file, int line, const char *cond, bool with_msg, const char *fmt, ...) {
  fprintf(stderr, "FAIL %s:%d: %s", file, line, cond);
  if (with_msg) {
    va_list ap;
    va_start(ap, fmt);
    fputs(": ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  fputc('\n', stderr);
}

int dt_finish(void) {
  printf("%d passed, %d failed\n", dt_passed, dt_failed);
  return dt_failed ? 1 : 0;
}

int dt_main(int argc, char **argv, void (*const *cases)(const dt_args *), size_t n) {
  dt_args a;
  dt_init(argc, argv, &a);
  for (size_t i = 0; i < n; i++) cases[i](&a);
  return dt_finish();
}

const char *dt_path(char *buf, size_t len, const char *a, const char *b) {
  snprintf(buf, len, "%s/%s", a, b);
  return buf;
}

double dt_rel_err(const float *a, const float *b, size_t n) {
  double maxd = 0, maxr = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= maxd)) maxd = d; /* NaN propagates */
    if (fabs((double)b[i]) > maxr) maxr = fabs((double)b[i]);
  }
  return maxr > 0 ? maxd / maxr : maxd;
}

int dt_max_level_diff(const float *ref, const unsigned char *px, size_t n, size_t *over_one) {
  int maxd = 0;
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)lrintf(ref[i] * 255.0f) - (int)px[i]);
    if (d > maxd) maxd = d;
    if (d > 1) off++;
  }
  if (over_one) *over_one = off;
  return maxd;
}

void dt_fill_random(float *x, size_t n, uint64_t seed) {
  uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
}

int dt_run(const char *cmd, const char *out_file) {
  char buf[8192];
  if (out_file)
    snprintf(buf, sizeof buf, "%s >'%s' 2>&1", cmd, out_file);
  else
    snprintf(buf, sizeof buf, "%s", cmd);
  int st = system(buf);
  if (st == -1 || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

unsigned char *dt_read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)(len > 0 ? len : 0) + 1);
  if (p && len > 0 && fread(p, 1, (size_t)len, f) != (size_t)len) len = 0;
  fclose(f);
  if (p) p[len > 0 ? len : 0] = 0;
  *n = len > 0 ? (size_t)len : 0;
  return p;
}

long dt_read_file(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return (long)n;
}

int dt_run_output(const char *cmd, const char *out_file, char *msg, size_t len) {
  int rc = dt_run(cmd, out_file);
  if (dt_read_file(out_file, msg, len) < 0) msg[0] = 0;
  return rc;
}

int dt_run_argv(const char *cli, char **argv, const char *log, const char *cwd, long fsize) {
  pid_t pid = fork();
  if (pid < 0) return -1000;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (cwd && chdir(cwd) != 0) _exit(126);
    if (fsize > 0) {
      signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
      setrlimit(RLIMIT_FSIZE, &rl);
    }
    alarm(120);
    argv[0] = (char *)cli;
    execv(cli, argv);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

void dt_init_cli(int argc, char **argv, dt_args *a, const char *name, bool shipped, dt_cli_env *e) {
  dt_init(argc, argv, a);
  snprintf(e->cli, sizeof e->cli, "%s/ditrun", a->bin);
  dt_model_dir(a, shipped ? a->src : a->data, name, e->model, sizeof e->model);
  snprintf(e->tmp, sizeof e->tmp, "%s", a->tmp);
}

const char *dt_model_dir(const dt_args *a, const char *root, const char *name, char *buf, size_t len) {
  if (a->fixture) snprintf(buf, len, "%s", a->fixture);
  else snprintf(buf, len, "%s/models/%s", root, name);
  return buf;
}

double dt_nmse(const float *a, const float *b, size_t n, long *bad) {
  double se = 0, sr = 0;
  *bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) {
      (*bad)++;
      continue;
    }
    double d = (double)a[i] - (double)b[i];
    se += d * d;
    sr += (double)b[i] * (double)b[i];
  }
  return sr > 0 ? se / sr : se;
}

void dt_check_replay_step(const char *model, int step, float t, const float *out, const float *ref, size_t n,
                          long captured, long launches) {
  size_t diff = 0;
  long bad = 0;
  for (size_t i = 0; i < n; i++) {
    diff += memcmp(&out[i], &ref[i], sizeof(float)) != 0;
    bad += !isfinite(out[i]);
  }
  printf("gpu %s replay step %d (t %.2f): %zu of %lld values differ from the op-by-op run, %ld non-finite; "
         "graphs: %ld captured, %ld launches\n", model, step, (double)t, diff, (long long)n, bad, captured, launches);
  CHECK_MSG(diff == 0 && bad == 0, "replay step %d: %zu values differ", step, diff);
  CHECK(captured == (step >= 1) && launches == (step >= 1 ? step : 0));
}

void dt_write_bytes(const char *path, const void *p, size_t n) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  if (f) {
    if (n) fwrite(p, 1, n, f);
    fclose(f);
  }
}

unsigned char *dt_read_png_rgb(const char *path, int *w, int *h) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, path)) return NULL;
  im.format = PNG_FORMAT_RGB;
  unsigned char *buf = malloc(PNG_IMAGE_SIZE(im));
  if (!buf || !png_image_finish_read(&im, NULL, buf, 0, NULL)) {
    free(buf);
    png_image_free(&im);
    return NULL;
  }
  *w = (int)im.width;
  *h = (int)im.height;
  return buf;
}

int dt_files_equal(const char *a, const char *b) {
  enum { CAP = 1 << 20 };
  char *ba = malloc(CAP), *bb = malloc(CAP);
  int eq = 0;
  if (ba && bb) {
    long na = dt_read_file(a, ba, CAP), nb = dt_read_file(b, bb, CAP);
    eq = na > 0 && na == nb && memcmp(ba, bb, (size_t)na) == 0;
  }
  free(ba);
  free(bb);
  return eq;
}

long dt_file_rss_kb(const char *path) {
  char real[4096];
  FILE *f = realpath(path, real) ? fopen("/proc/self/smaps", "r") : NULL;
  if (!f) return -1;
  char line[4608];
  long rss = -1;
  bool in = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      const char *name = strchr(line, '/'); /* the pathname column, when the mapping has one */
      const size_t n = name ? strcspn(name, "\n") : 0;
      in = name && n == strlen(real) && !strncmp(name, real, n);
    } else if (in && !strncmp(line, "Rss:", 4)) {
      rss = (rss < 0 ? 0 : rss) + strtol(line + 4, NULL, 10);
    }
  }
  fclose(f);
  return rss;
}
