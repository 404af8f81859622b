/* Fault injection: makes allocation number N fail, for every N up to the number of
 * allocations a whole run makes, and checks that each run returns an error (NOMEM, or
 * a status naming what could not be built) instead of crashing, and leaks nothing.
 * Covered: dit_generate on the zimage-tiny fixture (64x64, 1 step: model_index.json,
 * configs, weights, tokenizer, text encoder, transformer, VAE, image) and the PNG
 * writer. jansson's allocations (json_set_alloc_funcs) are routed around the countdown:
 * the 11 MB tokenizer.json alone makes millions, and jansson 2.14 itself assert()s when
 * its string lexer's buffer cannot grow (akheron/jansson#362, unfixed upstream), so
 * failing them tests jansson, not ditrun; docs/SECURITY.md says so.
 *
 * How: this executable defines malloc/calloc/realloc/free/aligned_alloc/posix_memalign/
 * memalign, forwarding to glibc's (__libc_*), or to ASan's allocator in a sanitizer
 * build, so every allocation of the process (the library, libpng, PCRE2, libc) passes
 * through a countdown. Leaks: the sanitizer build asks LeakSanitizer after every run;
 * the release build counts live allocations (calls minus frees) and requires each
 * failed run to return to the count before it. Test-only process state. */
#include <errno.h>
#include <jansson.h>
#include <link.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ditrun.h"
#include "small_model.h"
#include "testing.h"

#ifdef DT_ASAN
#include <sanitizer/lsan_interface.h>
#define FA_REAL(fn) __interceptor_##fn
#else
#define FA_REAL(fn) __libc_##fn
#endif
void *FA_REAL(malloc)(size_t);
void *FA_REAL(calloc)(size_t, size_t);
void *FA_REAL(realloc)(void *, size_t);
void FA_REAL(free)(void *);
void *FA_REAL(memalign)(size_t, size_t);
#define REAL_MALLOC FA_REAL(malloc)
#define REAL_CALLOC FA_REAL(calloc)
#define REAL_REALLOC FA_REAL(realloc)
#define REAL_FREE FA_REAL(free)
#define REAL_MEMALIGN FA_REAL(memalign)

/* fail_at: the call number that fails (0 = none); calls counts since the last reset. */
static atomic_long fa_calls, fa_fail_at, fa_live, fa_failed;

/* libgomp's code range: its allocations are not failed (gomp_malloc exit()s the process
 * on failure: an OpenMP runtime limit, documented, not a ditrun path). */
static uintptr_t fa_gomp_lo, fa_gomp_hi;

static int fa_find_gomp(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "libgomp")) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    fa_gomp_lo = info->dlpi_addr + ph->p_vaddr;
    fa_gomp_hi = fa_gomp_lo + ph->p_memsz;
  }
  return 1;
}

static bool fa_should_fail_from(const void *caller) {
  if ((uintptr_t)caller >= fa_gomp_lo && (uintptr_t)caller < fa_gomp_hi) return false;
  long n = atomic_fetch_add(&fa_calls, 1) + 1;
  long f = atomic_load(&fa_fail_at);
  if (f && n == f) {
    atomic_fetch_add(&fa_failed, 1);
    return true;
  }
  return false;
}

static void *fa_track(void *p) {
  if (p) atomic_fetch_add(&fa_live, 1);
  return p;
}

#define fa_should_fail() fa_should_fail_from(__builtin_return_address(0))
void *malloc(size_t n) { return fa_should_fail() ? NULL : fa_track(REAL_MALLOC(n)); }
void *calloc(size_t a, size_t b) { return fa_should_fail() ? NULL : fa_track(REAL_CALLOC(a, b)); }
void free(void *p) {
  if (p) atomic_fetch_sub(&fa_live, 1);
  REAL_FREE(p);
}
void *realloc(void *p, size_t n) {
  if (!p) return malloc(n);
  if (n == 0) {
    free(p);
    return NULL;
  }
  if (fa_should_fail()) return NULL;
  return REAL_REALLOC(p, n); /* the old block is consumed either way on success */
}
void *memalign(size_t al, size_t n) { return fa_should_fail() ? NULL : fa_track(REAL_MEMALIGN(al, n)); }
void *aligned_alloc(size_t al, size_t n) { return fa_should_fail() ? NULL : fa_track(REAL_MEMALIGN(al, n)); }
int posix_memalign(void **out, size_t al, size_t n) {
  void *p = fa_should_fail() ? NULL : fa_track(REAL_MEMALIGN(al, n));
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

/* jansson: separate countdown, so the library's own allocations can be looped fully. */
static atomic_long fj_calls, fj_fail_at;
static void *fj_malloc(size_t n) {
  long c = atomic_fetch_add(&fj_calls, 1) + 1, f = atomic_load(&fj_fail_at);
  if (f && c == f) return NULL;
  return fa_track(REAL_MALLOC(n));
}
static void fj_free(void *p) { free(p); }

static void fa_arm(long lib_n, long json_n) {
  atomic_store(&fa_fail_at, 0);
  atomic_store(&fa_calls, 0);
  atomic_store(&fj_calls, 0);
  atomic_store(&fa_failed, 0);
  atomic_store(&fj_fail_at, json_n);
  atomic_store(&fa_fail_at, lib_n);
}
static void fa_disarm(void) {
  atomic_store(&fa_fail_at, 0);
  atomic_store(&fj_fail_at, 0);
}

static char g_fix[4096], g_tmp[4096], g_model[4200];

/* A copy of the fixture's folder (symlinks) whose tokenizer.json is a small byte-level
 * BPE with Qwen3's special tokens (as ids 256..260): the fixture's 11 MB file would make
 * every run spend its time in jansson. */
static bool make_small_model(void) {
  snprintf(g_model, sizeof g_model, "%s/model", g_tmp);
  return dt_make_small_model(g_fix, g_model);
}
static int g_leak_runs, g_bad_runs, g_ok_runs;

static bool leaked(long live_before) {
#ifdef DT_ASAN
  (void)live_before;
  return __lsan_do_recoverable_leak_check() != 0;
#else
  return atomic_load(&fa_live) != live_before;
#endif
}

/* One generate run; returns its status. */
static dit_status run_generate(dit_ctx *ctx) {
  dit_gen_params p;
  dit_gen_params_default(&p);
  p.model_dir = g_model;
  p.prompt = "a small red fox";
  p.width = 64;
  p.height = 64;
  p.steps = 1;
  p.seed = 7;
  p.max_sequence_length = 32;
  dit_image img = {0};
  dit_status s = dit_generate(ctx, &p, &img, NULL);
  if (s == DIT_OK) {
    char out[4200];
    snprintf(out, sizeof out, "%s/fault.png", g_tmp);
    const char *keys[] = {"prompt"}, *vals[] = {p.prompt};
    s = dit_image_save_png(ctx, &img, out, keys, vals, 1, 1);
  }
  dit_image_free(&img);
  return s;
}

/* Runs with failure at lib_n (or json_n); checks the outcome. Returns the calls made. */
static long one(dit_ctx *ctx, long lib_n, long json_n) {
  long live = atomic_load(&fa_live);
  fa_arm(lib_n, json_n);
  dit_status s = run_generate(ctx);
  long calls = atomic_load(&fa_calls);
  bool fired = atomic_load(&fa_failed) > 0 || json_n;
  fa_disarm();
  const char *msg = dit_ctx_last_error(ctx);
  if (fired && s == DIT_OK) {
    g_ok_runs++; /* the failed call was optional (a library falling back, e.g. stdio buffering) */
  } else if (s != DIT_OK && (!msg[0] || s == DIT_ERR_INTERNAL)) {
    if (g_bad_runs++ < 10) fprintf(stderr, "N=%ld/json %ld: status %s, message '%s'\n", lib_n, json_n,
                                   dit_status_str(s), msg);
  }
  if (leaked(live)) {
    if (g_leak_runs++ < 10) fprintf(stderr, "N=%ld/json %ld: leaked (%s: %s)\n", lib_n, json_n,
                                    dit_status_str(s), msg);
  }
  return calls;
}

/* The whole loop for the model folder g_fix. */
static void loop_fixture(dit_ctx *ctx) {
  g_leak_runs = g_bad_runs = g_ok_runs = 0;
  CHECK_MSG(make_small_model(), "cannot make the test model folder");
  /* warm-up: libc/OpenMP one-time allocations happen here, outside the counted runs */
  fa_disarm();
  CHECK_MSG(run_generate(ctx) == DIT_OK, "%s: %s", g_fix, dit_ctx_last_error(ctx));
  long live0 = atomic_load(&fa_live);
  fa_arm(0, 0);
  CHECK_MSG(run_generate(ctx) == DIT_OK, "%s: %s", g_fix, dit_ctx_last_error(ctx));
  long total = atomic_load(&fa_calls), total_json = atomic_load(&fj_calls);
  fa_disarm();
  CHECK_MSG(!leaked(live0), "%s: a successful run leaked", g_fix);
  printf("%s: a whole run makes %ld allocations (+ %ld by jansson)\n", g_fix, total, total_json);
  const char *every = getenv("DIT_FAULT_STRIDE");
  long stride = every ? atol(every) : 1;
  if (stride < 1) stride = 1;
  long runs = 0;
  for (long n = 1; n <= total; n += stride, runs++) {
    if (getenv("DIT_FAULT_VERBOSE")) fprintf(stderr, "N=%ld\n", n);
    one(ctx, n, 0);
  }
  printf("  %ld runs failing allocation N = 1..%ld (stride %ld): %d leaked, %d gave no message, %d succeeded "
         "anyway\n", runs, total, stride, g_leak_runs, g_bad_runs, g_ok_runs);
  CHECK_MSG(g_leak_runs == 0, "%s: %d runs leaked", g_fix, g_leak_runs);
  CHECK_MSG(g_bad_runs == 0, "%s: %d runs failed without a message", g_fix, g_bad_runs);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  snprintf(g_tmp, sizeof g_tmp, "%s", a.tmp);
  dl_iterate_phdr(fa_find_gomp, NULL);
  json_set_alloc_funcs(fj_malloc, fj_free);
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  cp.n_threads = 1;
  cp.log_level = DIT_LOG_ERROR;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(&cp, &ctx) == DIT_OK);
  if (!ctx) return dt_finish();
  if (a.fixture) {
    snprintf(g_fix, sizeof g_fix, "%s", a.fixture);
    loop_fixture(ctx);
  } else {
    static const char *const fixtures[] = {"zimage-tiny", "flux2-klein-tiny"};
    for (int i = 0; i < 2; i++) {
      snprintf(g_fix, sizeof g_fix, "%s/models/%s", a.data, fixtures[i]);
      loop_fixture(ctx);
    }
  }
  dit_ctx_free(ctx);
  return dt_finish();
}
