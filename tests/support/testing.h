/* Minimal test harness: every test binary is run by ctest as
 *   test_x --data DIR --tmp DIR --src DIR --bin DIR [--fixture DIR]
 * where --data names the fixture root (models/, refs/; default tests/fixtures of the source
 * tree; --shared is accepted as another name for it)
 * and uses CHECK* macros; it prints "N passed, N failed" and exits non-zero on failure. */
#ifndef DIT_TESTING_H
#define DIT_TESTING_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct dt_args {
  const char *data;    /* fixture root: models/<name>/, refs/ (tests/fixtures) */
  const char *tmp;     /* scratch folder for this test (created) */
  const char *src;     /* source tree */
  const char *bin;     /* build tree (the CLI is bin/ditrun) */
  const char *fixture; /* --fixture DIR or NULL */
  char data_default[4096]; /* storage for the default data path */
} dt_args;

extern int dt_passed, dt_failed; /* test-binary globals: counters of this process only */

/* Parses the arguments above and creates tmp. */
void dt_init(int argc, char **argv, dt_args *a);
/* Prints the summary; returns the process exit code. */
int dt_finish(void);
/* Path helpers: snprintf into a static-per-call buffer supplied by caller. */
const char *dt_path(char *buf, size_t len, const char *a, const char *b);

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (cond) {                                                                         \
      dt_passed++;                                                                      \
    } else {                                                                            \
      dt_failed++;                                                                      \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                  \
    }                                                                                   \
  } while (0)

#define CHECK_MSG(cond, ...)                                                            \
  do {                                                                                  \
    if (cond) {                                                                         \
      dt_passed++;                                                                      \
    } else {                                                                            \
      dt_failed++;                                                                      \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                  \
      fprintf(stderr, __VA_ARGS__);                                                     \
      fputc('\n', stderr);                                                              \
    }                                                                                   \
  } while (0)

/* Max |a-b| over n, divided by max |b| (the reference's max magnitude). */
double dt_rel_err(const float *a, const float *b, size_t n);
/* Largest difference in 8-bit levels between px and a reference image ref in [0, 1]
 * (rounded as diffusers does: lrint(v * 255)), over n values; *over_one (if set) counts the
 * values that differ by more than one level. */
int dt_max_level_diff(const float *ref, const unsigned char *px, size_t n, size_t *over_one);
/* Deterministic pseudo-random floats in [-1, 1) (xorshift; seed != 0). */
void dt_fill_random(float *x, size_t n, uint64_t seed);
/* Runs a shell command, returns its exit status (or -1); stdout+stderr to out_file if set. */
int dt_run(const char *cmd, const char *out_file);
/* Reads a PNG as 8-bit RGB (malloc'd, w*h*3 bytes) or returns NULL. */
unsigned char *dt_read_png_rgb(const char *path, int *w, int *h);
/* 1 when both files exist, are non-empty, at most 1 MiB and byte-identical. */
int dt_files_equal(const char *a, const char *b);
/* Reads a whole small text file into buf (NUL-terminated); returns bytes or -1. */
long dt_read_file(const char *path, char *buf, size_t len);

#endif
