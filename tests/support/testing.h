/* Minimal test harness: every test binary is run by ctest as
 *   test_x --data DIR --tmp DIR --src DIR --bin DIR [--fixture DIR]
 * where --data names the fixture root (models/, refs/; default tests/fixtures of the source
 * tree; --shared is accepted as another name for it)
 * and uses CHECK* macros; it prints "N passed, N failed" and exits non-zero on failure. */
#ifndef DIT_TESTING_H
#define DIT_TESTING_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* DT_ASAN is defined in an AddressSanitizer build: its redzones, shadow and quarantine change
 * the memory a process holds, so measurements of it do not apply there. */
#if defined(__SANITIZE_ADDRESS__)
#define DT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DT_ASAN 1
#endif
#endif

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
/* The main of a test binary: dt_init, then cases[0..n) in order, then dt_finish. */
int dt_main(int argc, char **argv, void (*const *cases)(const dt_args *), size_t n);
/* Path helpers: snprintf into a static-per-call buffer supplied by caller. */
const char *dt_path(char *buf, size_t len, const char *a, const char *b);

/* Prints "FAIL file:line: cond" and, when with_msg, ": " and the printf message. */
void dt_report_failure(const char *file, int line, const char *cond, bool with_msg, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Counts one check; the message arguments are evaluated only when it fails. */
#define DT_CHECK_(cond, text, with_msg, ...)                                            \
  do {                                                                                  \
    if (cond) {                                                                         \
      dt_passed++;                                                                      \
    } else {                                                                            \
      dt_failed++;                                                                      \
      dt_report_failure(__FILE__, __LINE__, text, with_msg, __VA_ARGS__);               \
    }                                                                                   \
  } while (0)

#define CHECK(cond) DT_CHECK_(cond, #cond, false, "%s", "")
#define CHECK_MSG(cond, ...) DT_CHECK_(cond, #cond, true, __VA_ARGS__)

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
/* A whole file (malloc'd, with a NUL after its *n bytes), or NULL when it cannot be opened. */
unsigned char *dt_read_bytes(const char *path, size_t *n);
/* Reads a whole small text file into buf (NUL-terminated); returns bytes or -1. */
long dt_read_file(const char *path, char *buf, size_t len);
/* dt_run with stdout+stderr to out_file, then that output into msg (empty when none). */
int dt_run_output(const char *cmd, const char *out_file, char *msg, size_t len);
/* Runs argv without a shell, argv[0] replaced by cli: stdout+stderr to log, stdin from
 * /dev/null, in folder cwd (when set), a 120 s alarm, and when fsize > 0 RLIMIT_FSIZE =
 * fsize bytes with SIGXFSZ ignored. Returns the exit code, or -signal (-1000: no fork). */
int dt_run_argv(const char *cli, char **argv, const char *log, const char *cwd, long fsize);
/* What a test of the CLI works with: the CLI (bin/ditrun), the model folder it runs on
 * and the test's scratch folder. */
typedef struct dt_cli_env {
  char cli[4096], model[4096], tmp[4096];
} dt_cli_env;
/* dt_init, then e: the model folder is --fixture when given, else models/<name> of the
 * fixture root, or of the source tree when shipped (a model the repository ships). */
void dt_init_cli(int argc, char **argv, dt_args *a, const char *name, bool shipped, dt_cli_env *e);
/* The model folder a test runs on: --fixture when given, else root/models/name. */
const char *dt_model_dir(const dt_args *a, const char *root, const char *name, char *buf, size_t len);
/* Normalized MSE sum((a-b)^2)/sum(b^2) over the finite values of a; *bad counts the others. */
double dt_nmse(const float *a, const float *b, size_t n, long *bad);
/* One call of a graph-replay check on `model`: out (the replayed model's output) must equal
 * ref (the same model run op by op) bit for bit, with no non-finite value, and after calls
 * 0..step the replayed model must have captured one graph (from call 1 on) and launched it
 * `step` times. Prints the step's line. */
void dt_check_replay_step(const char *model, int step, float t, const float *out, const float *ref, size_t n,
                          long captured, long launches);
/* Writes n bytes to path (replacing any file there; nothing when it cannot be opened). */
void dt_write_bytes(const char *path, const void *p, size_t n);
/* This process's resident kB of its mappings of the file at path (the sum of their Rss in
 * /proc/self/smaps); -1 where that cannot be read or the file is not mapped. */
long dt_file_rss_kb(const char *path);

#endif
