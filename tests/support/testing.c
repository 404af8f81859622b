/* Test harness (see testing.h). */
#include "testing.h"

#include <errno.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

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

int dt_finish(void) {
  printf("%d passed, %d failed\n", dt_passed, dt_failed);
  return dt_failed ? 1 : 0;
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

long dt_read_file(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return (long)n;
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
