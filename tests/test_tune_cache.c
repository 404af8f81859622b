/* The tuning cache file (core/tune_cache.h): round trips, replacement, eviction, merge of
 * two handles, every truncation and byte flip of a valid file and hand-made bad files (each
 * must load empty with a note naming the reason), the limits, the default path's order and
 * the run options that carry it, folder creation and failed saves (old file intact, no
 * temporary file left). */
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/options.h"
#include "core/tune_cache.h"
#include "testing.h"

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p) != 0;
}

/* The test's scratch folder's subfolder name, emptied (the scratch folder survives runs). */
static const char *fresh_dir(const dt_args *a, const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", a->tmp, name);
  nftw(buf, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  mkdir(buf, 0755);
  return buf;
}

/* Number of names in dir starting with prefix. */
static int count_prefixed(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

static bool exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static dit_tune_cache *open_ok(const char *path) {
  dit_error err = {0};
  dit_tune_cache *c = NULL;
  dit_status s = dit_tune_cache_open(path, &c, &err);
  CHECK_MSG(s == DIT_OK && c, "open %s: %s", path, err.msg);
  return c;
}

static void put_ok(dit_tune_cache *c, const char *k, const char *v) {
  dit_error err = {0};
  dit_status s = dit_tune_cache_put(c, k, strlen(k), v, strlen(v), &err);
  CHECK_MSG(s == DIT_OK, "put %s: %s", k, err.msg);
}

static void save_ok(dit_tune_cache *c) {
  dit_error err = {0};
  dit_status s = dit_tune_cache_save(c, &err);
  CHECK_MSG(s == DIT_OK, "save: %s", err.msg);
}

/* Whether c maps text key k to text value v. */
static bool has(const dit_tune_cache *c, const char *k, const char *v) {
  char buf[DIT_TUNE_CACHE_MAX_VAL];
  size_t n = 99;
  if (!dit_tune_cache_get(c, k, strlen(k), buf, sizeof buf, &n)) return false;
  return n == strlen(v) && !memcmp(buf, v, n);
}

/* ---- a hand-made file: builder with the format's own checksum (FNV-1a 64) -------------- */

typedef struct fbuf {
  unsigned char b[1 << 16];
  size_t n;
} fbuf;

static void fb_bytes(fbuf *f, const void *p, size_t n) {
  memcpy(f->b + f->n, p, n);
  f->n += n;
}
static void fb_u16(fbuf *f, unsigned v) { fb_bytes(f, (unsigned char[]){v & 255, v >> 8 & 255}, 2); }
static void fb_u32(fbuf *f, uint32_t v) { fb_u16(f, v & 0xffff), fb_u16(f, v >> 16); }
static void fb_head(fbuf *f, const char *magic, uint32_t version, uint32_t count) {
  f->n = 0;
  fb_bytes(f, magic, 8);
  fb_u32(f, version), fb_u32(f, count);
}
static void fb_entry(fbuf *f, const char *k, const char *v) {
  fb_u16(f, (unsigned)strlen(k)), fb_u16(f, (unsigned)strlen(v));
  fb_bytes(f, k, strlen(k)), fb_bytes(f, v, strlen(v));
}
static void fb_sum(fbuf *f) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < f->n; i++) h = (h ^ f->b[i]) * 0x100000001b3ull;
  fb_u32(f, (uint32_t)h), fb_u32(f, (uint32_t)(h >> 32));
}

/* Writes bytes to path and opens it: the cache must be empty with a note naming path and
 * containing `reason`. */
static void expect_rejected(const char *label, const char *path, const void *p, size_t n, const char *reason) {
  dt_write_bytes(path, p, n);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  const char *note = dit_tune_cache_note(c);
  CHECK_MSG(dit_tune_cache_count(c) == 0, "%s: %zu entries loaded", label, dit_tune_cache_count(c));
  CHECK_MSG(note && strstr(note, path) && strstr(note, reason), "%s: note \"%s\", expected \"%s\"", label,
            note ? note : "(none)", reason);
  CHECK_MSG(!dit_tune_cache_get(c, "k", 1, NULL, 0, NULL), "%s: a key found", label);
  dit_tune_cache_free(c);
}

/* A fresh folder for case `name` (dir) and the cache file path in it. */
static void case_path(const dt_args *a, const char *name, char *dir, size_t dlen, char *path, size_t plen) {
  fresh_dir(a, name, dir, dlen);
  snprintf(path, plen, "%s/tune.bin", dir);
}

/* ---- cases ---------------------------------------------------------------------------- */

static void test_round_trip(const dt_args *a) {
  char dir[4200], path[4300];
  case_path(a, "round_trip", dir, sizeof dir, path, sizeof path);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  CHECK(dit_tune_cache_count(c) == 0 && dit_tune_cache_note(c) == NULL);
  unsigned char bk[DIT_TUNE_CACHE_MAX_KEY], bv[DIT_TUNE_CACHE_MAX_VAL]; /* full-size binary, NULs included */
  for (int i = 0; i < DIT_TUNE_CACHE_MAX_KEY; i++) bk[i] = (unsigned char)(i * 7), bv[i] = (unsigned char)(255 - i);
  dit_error err = {0};
  CHECK(dit_tune_cache_put(c, bk, sizeof bk, bv, sizeof bv, &err) == DIT_OK);
  CHECK(dit_tune_cache_put(c, "empty", 5, NULL, 0, &err) == DIT_OK);
  put_ok(c, "gemm m=4096 n=3072 k=3072 bf16", "algo 17 tile 128x256");
  CHECK(dit_tune_cache_count(c) == 3);
  save_ok(c);
  dit_tune_cache_free(c);

  size_t n = 0;
  unsigned char *file = dt_read_bytes(path, &n);
  size_t want = 16 + (4 + 256 + 256) + (4 + 5) + (4 + 30 + 20) + 8;
  CHECK_MSG(file && n == want, "file of %zu bytes, expected %zu", n, want);
  if (file && n >= 16)
    CHECK(!memcmp(file, "DITTUNE1", 8) && file[8] == 1 && !file[9] && !file[10] && !file[11] && file[12] == 3 &&
          !file[13] && !file[14] && !file[15]);
  free(file);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);

  c = open_ok(path);
  if (!c) return;
  CHECK(dit_tune_cache_count(c) == 3 && dit_tune_cache_note(c) == NULL);
  unsigned char got[DIT_TUNE_CACHE_MAX_VAL];
  size_t vlen = 0;
  CHECK(dit_tune_cache_get(c, bk, sizeof bk, got, sizeof got, &vlen) && vlen == sizeof bv && !memcmp(got, bv, vlen));
  CHECK(dit_tune_cache_get(c, "empty", 5, NULL, 0, &vlen) && vlen == 0);
  CHECK(has(c, "gemm m=4096 n=3072 k=3072 bf16", "algo 17 tile 128x256"));
  /* a value larger than cap: not copied, its length told */
  vlen = 0;
  CHECK(!dit_tune_cache_get(c, bk, sizeof bk, got, 10, &vlen) && vlen == sizeof bv);
  vlen = 5;
  CHECK(!dit_tune_cache_get(c, "absent", 6, got, sizeof got, &vlen) && vlen == 0);
  CHECK(!dit_tune_cache_get(c, "gemm", 4, got, sizeof got, &vlen)); /* a prefix is another key */
  CHECK(!dit_tune_cache_get(c, "", 0, got, sizeof got, &vlen) && !dit_tune_cache_get(NULL, "a", 1, got, 9, &vlen));
  /* nothing put: save writes nothing (the removed file is not made again) */
  unlink(path);
  save_ok(c);
  CHECK(!exists(path));
  dit_tune_cache_free(c);
  dit_tune_cache_free(NULL);
}

static void test_replace(const dt_args *a) {
  char dir[4200], path[4300];
  case_path(a, "replace", dir, sizeof dir, path, sizeof path);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  put_ok(c, "k1", "first");
  put_ok(c, "k2", "two");
  put_ok(c, "k1", "second value");
  CHECK(dit_tune_cache_count(c) == 2 && has(c, "k1", "second value") && has(c, "k2", "two"));
  save_ok(c);
  dit_tune_cache_free(c);
  c = open_ok(path);
  if (!c) return;
  CHECK(dit_tune_cache_count(c) == 2 && has(c, "k1", "second value"));
  /* the same value again is no change: save writes nothing */
  put_ok(c, "k1", "second value");
  unlink(path);
  save_ok(c);
  CHECK(!exists(path));
  put_ok(c, "k1", "third");
  save_ok(c);
  dit_tune_cache_free(c);
  c = open_ok(path);
  CHECK(c && dit_tune_cache_count(c) == 2 && has(c, "k1", "third") && has(c, "k2", "two"));
  dit_tune_cache_free(c);
}

static void test_missing_and_args(const dt_args *a) {
  char dir[4200], path[4300];
  fresh_dir(a, "missing", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/no/such/folder/tune.bin", dir);
  dit_tune_cache *c = open_ok(path);
  CHECK(c && dit_tune_cache_count(c) == 0 && dit_tune_cache_note(c) == NULL);
  dit_tune_cache_free(c);
  dit_error err = {0};
  c = (dit_tune_cache *)1;
  CHECK(dit_tune_cache_open(NULL, &c, &err) == DIT_ERR_INVALID_ARG && c == NULL && err.msg[0]);
  err.msg[0] = 0;
  CHECK(dit_tune_cache_open("", &c, &err) == DIT_ERR_INVALID_ARG && c == NULL && err.msg[0]);
  err.msg[0] = 0;
  CHECK(dit_tune_cache_open(path, NULL, &err) == DIT_ERR_INVALID_ARG && err.msg[0]);
  CHECK(dit_tune_cache_save(NULL, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_tune_cache_put(NULL, "k", 1, "v", 1, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_tune_cache_note(NULL) == NULL && dit_tune_cache_count(NULL) == 0);
}

static void test_merge(const dt_args *a) {
  char dir[4200], path[4300];
  case_path(a, "merge", dir, sizeof dir, path, sizeof path);
  dit_tune_cache *c0 = open_ok(path);
  if (!c0) return;
  put_ok(c0, "old", "0");
  save_ok(c0);
  dit_tune_cache_free(c0);
  /* two processes open the same file, each tunes other shapes, both save */
  dit_tune_cache *ca = open_ok(path), *cb = open_ok(path);
  if (!ca || !cb) return;
  put_ok(ca, "only-a", "A");
  put_ok(cb, "only-b", "B");
  put_ok(ca, "both", "from a");
  put_ok(cb, "both", "from b");
  put_ok(cb, "old", "replaced by b");
  save_ok(ca);
  save_ok(cb);
  CHECK(!has(cb, "only-a", "A")); /* save does not load the merged entries into the handle */
  dit_tune_cache_free(ca);
  dit_tune_cache_free(cb);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  CHECK_MSG(dit_tune_cache_count(c) == 4, "%zu entries", dit_tune_cache_count(c));
  CHECK(has(c, "only-a", "A") && has(c, "only-b", "B"));
  CHECK(has(c, "both", "from b") && has(c, "old", "replaced by b")); /* the saving handle's value wins */
  dit_tune_cache_free(c);
  /* a handle whose file went bad meanwhile replaces it with its own entries */
  ca = open_ok(path);
  if (!ca) return;
  dt_write_bytes(path, "garbage", 7);
  put_ok(ca, "new", "N");
  save_ok(ca);
  dit_tune_cache_free(ca);
  c = open_ok(path);
  CHECK(c && dit_tune_cache_note(c) == NULL && dit_tune_cache_count(c) == 5 && has(c, "new", "N") &&
        has(c, "only-a", "A"));
  dit_tune_cache_free(c);
  CHECK(count_prefixed(dir, ".tune-") == 0);
}

/* Every truncation and every flipped byte of a valid file loads empty with a note. */
static void test_damage(const dt_args *a) {
  char dir[4200], path[4300], bad[4300];
  case_path(a, "damage", dir, sizeof dir, path, sizeof path);
  snprintf(bad, sizeof bad, "%s/bad.bin", dir);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  put_ok(c, "conv 3x3 64->64 nhwc", "engine 4 knobs 1,2,0");
  put_ok(c, "k", "");
  put_ok(c, "gemm 1x2x3", "7");
  save_ok(c);
  dit_tune_cache_free(c);
  size_t n = 0;
  unsigned char *good = dt_read_bytes(path, &n);
  if (!good || n < 40) {
    CHECK_MSG(0, "no valid file to damage (%zu bytes)", n);
    free(good);
    return;
  }
  int bad_trunc = 0, bad_flip = 0, loaded_ok = 0;
  for (size_t len = 0; len < n; len++) {
    dt_write_bytes(bad, good, len);
    dit_tune_cache *t = open_ok(bad);
    const char *note = t ? dit_tune_cache_note(t) : NULL;
    const char *want = len < 24 ? "truncated" : "checksum";
    if (!t || dit_tune_cache_count(t) != 0 || !note || !strstr(note, want)) {
      if (bad_trunc++ < 3) CHECK_MSG(0, "truncated to %zu: note %s", len, note ? note : "(none)");
    }
    dit_tune_cache_free(t);
  }
  CHECK_MSG(bad_trunc == 0, "%d of %zu truncations not rejected as such", bad_trunc, n);
  static const unsigned char masks[] = {0x01, 0x80, 0xff, 0x5a};
  unsigned char *copy = malloc(n);
  for (size_t off = 0; copy && off < n; off++) {
    for (size_t m = 0; m < sizeof masks; m++) {
      memcpy(copy, good, n);
      copy[off] ^= masks[m];
      dt_write_bytes(bad, copy, n);
      dit_tune_cache *t = open_ok(bad);
      const char *note = t ? dit_tune_cache_note(t) : NULL;
      const char *want = off < 8 ? "magic" : off < 12 ? "version" : "checksum";
      if (!t || dit_tune_cache_count(t) != 0 || !note || !strstr(note, want)) {
        if (bad_flip++ < 3) CHECK_MSG(0, "byte %zu ^ 0x%02x: note %s", off, masks[m], note ? note : "(none)");
      }
      dit_tune_cache_free(t);
    }
  }
  CHECK_MSG(bad_flip == 0, "%d of %zu flipped files not rejected as such", bad_flip, n * sizeof masks);
  /* the good bytes still load (the loop's file is not stale) */
  dt_write_bytes(bad, good, n);
  c = open_ok(bad);
  loaded_ok = c && dit_tune_cache_count(c) == 3 && !dit_tune_cache_note(c) && has(c, "gemm 1x2x3", "7");
  CHECK(loaded_ok);
  dit_tune_cache_free(c);
  free(copy);
  free(good);
}

/* Files with a valid checksum but bad fields, and other unusable files. */
static void test_bad_files(const dt_args *a) {
  char dir[4200], path[4300];
  case_path(a, "bad_files", dir, sizeof dir, path, sizeof path);
  static fbuf f;
  fb_head(&f, "DITTUNE2", 1, 0), fb_sum(&f);
  expect_rejected("magic", path, f.b, f.n, "magic");
  fb_head(&f, "DITTUNE1", 2, 0), fb_sum(&f);
  expect_rejected("version", path, f.b, f.n, "version 2");
  fb_head(&f, "DITTUNE1", 0xffffffffu, 0), fb_sum(&f);
  expect_rejected("version max", path, f.b, f.n, "version 4294967295");
  fb_head(&f, "DITTUNE1", 1, 0xffffffffu), fb_sum(&f);
  expect_rejected("huge count", path, f.b, f.n, "4294967295 entries");
  fb_head(&f, "DITTUNE1", 1, DIT_TUNE_CACHE_MAX_ENTRIES + 1), fb_sum(&f);
  expect_rejected("count 4097", path, f.b, f.n, "4097 entries");
  fb_head(&f, "DITTUNE1", 1, 1), fb_u16(&f, 0xffff), fb_u16(&f, 1), fb_bytes(&f, "kv", 2), fb_sum(&f);
  expect_rejected("huge key", path, f.b, f.n, "key of 65535");
  fb_head(&f, "DITTUNE1", 1, 1), fb_u16(&f, 1), fb_u16(&f, 257), fb_bytes(&f, "kv", 2), fb_sum(&f);
  expect_rejected("long value", path, f.b, f.n, "value of 257");
  fb_head(&f, "DITTUNE1", 1, 1), fb_u16(&f, 0), fb_u16(&f, 1), fb_bytes(&f, "v", 1), fb_sum(&f);
  expect_rejected("empty key", path, f.b, f.n, "key of 0");
  fb_head(&f, "DITTUNE1", 1, 1), fb_u16(&f, 10), fb_u16(&f, 10), fb_bytes(&f, "short", 5), fb_sum(&f);
  expect_rejected("past end", path, f.b, f.n, "past the end");
  fb_head(&f, "DITTUNE1", 1, 2), fb_entry(&f, "k", "v"), fb_sum(&f);
  expect_rejected("count too big", path, f.b, f.n, "entry 1 of 2");
  fb_head(&f, "DITTUNE1", 1, 2), fb_entry(&f, "k", "v"), fb_u16(&f, 1), fb_sum(&f);
  expect_rejected("half length field", path, f.b, f.n, "truncated length");
  fb_head(&f, "DITTUNE1", 1, 1), fb_entry(&f, "k", "v"), fb_bytes(&f, "xyz", 3), fb_sum(&f);
  expect_rejected("trailing", path, f.b, f.n, "3 bytes after");
  fb_head(&f, "DITTUNE1", 1, 1), fb_entry(&f, "k", "v"), fb_sum(&f), fb_bytes(&f, "\0", 1);
  expect_rejected("after checksum", path, f.b, f.n, "checksum");
  expect_rejected("empty file", path, "", 0, "truncated");
  /* too large: refused before reading */
  size_t big = DIT_TUNE_CACHE_MAX_FILE + 1;
  unsigned char *huge = calloc(1, big);
  if (huge) expect_rejected("too large", path, huge, big, "larger than");
  free(huge);
  /* a folder where the file should be */
  char sub[4400];
  snprintf(sub, sizeof sub, "%s/folder.bin", dir);
  mkdir(sub, 0755);
  dit_tune_cache *c = open_ok(sub);
  CHECK(c && dit_tune_cache_count(c) == 0 && dit_tune_cache_note(c) && strstr(dit_tune_cache_note(c), "regular"));
  dit_tune_cache_free(c);

  /* valid: no entries; a key twice (the last value wins) */
  fb_head(&f, "DITTUNE1", 1, 0), fb_sum(&f);
  dt_write_bytes(path, f.b, f.n);
  c = open_ok(path);
  CHECK(c && dit_tune_cache_count(c) == 0 && !dit_tune_cache_note(c));
  dit_tune_cache_free(c);
  fb_head(&f, "DITTUNE1", 1, 3), fb_entry(&f, "dup", "first"), fb_entry(&f, "x", "y"), fb_entry(&f, "dup", "last");
  fb_sum(&f);
  dt_write_bytes(path, f.b, f.n);
  c = open_ok(path);
  CHECK(c && dit_tune_cache_count(c) == 2 && !dit_tune_cache_note(c) && has(c, "dup", "last") && has(c, "x", "y"));
  dit_tune_cache_free(c);
}

static void test_limits(const dt_args *a) {
  char dir[4200], path[4300];
  case_path(a, "limits", dir, sizeof dir, path, sizeof path);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  static unsigned char big[DIT_TUNE_CACHE_MAX_KEY + 1];
  dit_error err = {0};
  CHECK(dit_tune_cache_put(c, big, 0, "v", 1, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "key of 0"));
  CHECK(dit_tune_cache_put(c, big, sizeof big, "v", 1, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "key of 257"));
  CHECK(dit_tune_cache_put(c, "k", 1, big, sizeof big, &err) == DIT_ERR_INVALID_ARG &&
        strstr(err.msg, "value of 257"));
  CHECK(dit_tune_cache_put(c, "k", 1, NULL, 3, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_tune_cache_count(c) == 0);
  unlink(path);
  save_ok(c); /* refused puts changed nothing */
  CHECK(!exists(path));
  /* full: a new key evicts the oldest */
  char k[32], v[32];
  int extra = 10, total = DIT_TUNE_CACHE_MAX_ENTRIES + extra, fails = 0;
  for (int i = 0; i < total; i++) {
    snprintf(k, sizeof k, "key %d", i), snprintf(v, sizeof v, "%d", i * 3);
    fails += dit_tune_cache_put(c, k, strlen(k), v, strlen(v), &err) != DIT_OK;
  }
  CHECK(fails == 0 && dit_tune_cache_count(c) == DIT_TUNE_CACHE_MAX_ENTRIES);
  CHECK(!has(c, "key 0", "0") && !has(c, "key 9", "27") && has(c, "key 10", "30"));
  snprintf(k, sizeof k, "key %d", total - 1), snprintf(v, sizeof v, "%d", (total - 1) * 3);
  CHECK(has(c, k, v));
  put_ok(c, "key 10", "replaced"); /* a replacement evicts nothing */
  CHECK(dit_tune_cache_count(c) == DIT_TUNE_CACHE_MAX_ENTRIES && has(c, "key 11", "33"));
  save_ok(c);
  dit_tune_cache_free(c);
  c = open_ok(path);
  CHECK(c && dit_tune_cache_count(c) == DIT_TUNE_CACHE_MAX_ENTRIES && !dit_tune_cache_note(c) &&
        has(c, "key 10", "replaced") && has(c, k, v));
  /* another handle's new entries on top of a full file: the oldest go */
  dit_tune_cache *d = open_ok(path);
  if (c && d) {
    put_ok(d, "newest", "n");
    save_ok(d);
    put_ok(c, "x", "y"); /* c is full too: its oldest ("key 10") is evicted from memory */
    save_ok(c);
  }
  dit_tune_cache_free(d);
  dit_tune_cache_free(c);
  c = open_ok(path);
  CHECK(c && dit_tune_cache_count(c) == DIT_TUNE_CACHE_MAX_ENTRIES && has(c, "x", "y") && has(c, k, v));
  dit_tune_cache_free(c);
}

static void expect_path(const char *label, const char *dir_env, const char *xdg, const char *home, const char *want) {
  char buf[1024] = "junk";
  dit_error err = {0};
  dit_status s = dit_tune_cache_default_path(buf, sizeof buf, dir_env, xdg, home, &err);
  if (want)
    CHECK_MSG(s == DIT_OK && !strcmp(buf, want), "%s: status %d, \"%s\", expected \"%s\" (%s)", label, s, buf, want,
              err.msg);
  else
    CHECK_MSG(s == DIT_ERR_INVALID_ARG && !buf[0] && err.msg[0], "%s: status %d, \"%s\"", label, s, buf);
}

static void test_default_path(const dt_args *a) {
  expect_path("all set", "/c", "/x", "/h", "/c/tune.bin");
  expect_path("dir empty", "", "/x", "/h", "/x/ditrun/tune.bin");
  expect_path("dir unset", NULL, "/x", "/h", "/x/ditrun/tune.bin");
  expect_path("xdg empty", "", "", "/h", "/h/.cache/ditrun/tune.bin");
  expect_path("xdg unset", NULL, NULL, "/home/u", "/home/u/.cache/ditrun/tune.bin");
  expect_path("xdg relative", NULL, "rel/cache", "/h", "/h/.cache/ditrun/tune.bin");
  expect_path("dir relative", "rel/dir", "/x", "/h", "rel/dir/tune.bin");
  expect_path("trailing slashes", "/c///", NULL, NULL, "/c/tune.bin");
  expect_path("xdg slash", NULL, "/x/", NULL, "/x/ditrun/tune.bin");
  expect_path("root dir", "/", NULL, NULL, "/tune.bin");
  expect_path("root home", NULL, NULL, "/", "/.cache/ditrun/tune.bin");
  expect_path("none", NULL, NULL, NULL, NULL);
  expect_path("all empty", "", "", "", NULL);
  expect_path("home relative", NULL, "x", "home", NULL);
  char dir_env[2000];
  memset(dir_env, 'd', sizeof dir_env - 1);
  dir_env[0] = '/', dir_env[sizeof dir_env - 1] = 0;
  expect_path("too long", dir_env, "/x", "/h", NULL); /* no fall back: the folder was named */
  dir_env[1024 - 10] = 0;                             /* + "/tune.bin" = 1023 bytes: fits */
  char want[1100];
  snprintf(want, sizeof want, "%s/tune.bin", dir_env);
  expect_path("exact fit", dir_env, NULL, NULL, want);
  dir_env[1024 - 10] = 'd', dir_env[1024 - 9] = 0; /* one more */
  expect_path("one over", dir_env, NULL, NULL, NULL);
  dit_error err = {0};
  CHECK(dit_tune_cache_default_path(NULL, 10, "/c", NULL, NULL, &err) == DIT_ERR_INVALID_ARG);
  char tiny[4] = "abc";
  CHECK(dit_tune_cache_default_path(tiny, 0, "/c", NULL, NULL, &err) == DIT_ERR_INVALID_ARG && tiny[0] == 'a');
}

/* The run options carry the switch and the resolved path (the environment read there). */
static void test_options(const dt_args *a) {
  static const char *const names[] = {"DITRUN_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "DIT_TUNE_CACHE"};
  char *saved[4];
  for (int i = 0; i < 4; i++) {
    const char *v = getenv(names[i]);
    saved[i] = v ? strdup(v) : NULL;
  }
  dit_run_opts o;
  dit_run_opts_default(&o);
  CHECK(o.tune_cache && o.tune_cache_path[0] == 0);
  setenv("DITRUN_CACHE_DIR", "/opt/c", 1), setenv("XDG_CACHE_HOME", "/x", 1), setenv("HOME", "/h", 1);
  unsetenv("DIT_TUNE_CACHE");
  dit_run_opts_from_env(&o);
  CHECK(o.tune_cache && !strcmp(o.tune_cache_path, "/opt/c/tune.bin"));
  setenv("DITRUN_CACHE_DIR", "", 1), setenv("DIT_TUNE_CACHE", "0", 1);
  dit_run_opts_default(&o), dit_run_opts_from_env(&o);
  CHECK(!o.tune_cache && !strcmp(o.tune_cache_path, "/x/ditrun/tune.bin"));
  unsetenv("DITRUN_CACHE_DIR"), unsetenv("XDG_CACHE_HOME"), setenv("DIT_TUNE_CACHE", "1", 1);
  dit_run_opts_default(&o), dit_run_opts_from_env(&o);
  CHECK(o.tune_cache && !strcmp(o.tune_cache_path, "/h/.cache/ditrun/tune.bin"));
  unsetenv("HOME");
  dit_run_opts_default(&o), dit_run_opts_from_env(&o);
  CHECK(o.tune_cache && o.tune_cache_path[0] == 0);
  for (int i = 0; i < 4; i++) {
    if (saved[i]) setenv(names[i], saved[i], 1);
    else unsetenv(names[i]);
    free(saved[i]);
  }
}

static void test_save_folders(const dt_args *a) {
  char dir[4200], path[4400], d1[4400];
  fresh_dir(a, "folders", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/a/b/c/tune.bin", dir);
  dit_tune_cache *c = open_ok(path);
  if (!c) return;
  put_ok(c, "k", "v");
  save_ok(c);
  dit_tune_cache_free(c);
  struct stat st;
  snprintf(d1, sizeof d1, "%s/a", dir);
  CHECK(stat(d1, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  snprintf(d1, sizeof d1, "%s/a/b/c", dir);
  CHECK(stat(d1, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  c = open_ok(path);
  CHECK(c && has(c, "k", "v"));
  dit_tune_cache_free(c);
  CHECK(count_prefixed(d1, ".tune-") == 0);
  /* a relative path: its folder is the working folder's */
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) && chdir(dir) == 0) {
    c = open_ok("rel.bin");
    if (c) put_ok(c, "r", "1"), save_ok(c);
    dit_tune_cache_free(c);
    CHECK(exists("rel.bin"));
    CHECK(chdir(cwd) == 0);
  }
}

static void test_save_failures(const dt_args *a) {
  char dir[4200], path[4400], msg[DIT_ERROR_MSG_MAX];
  fresh_dir(a, "failures", dir, sizeof dir);
  dit_error err = {0};
  /* a file where a folder must be made */
  char file[4400];
  snprintf(file, sizeof file, "%s/plain", dir);
  dt_write_bytes(file, "x", 1);
  snprintf(path, sizeof path, "%s/plain/sub/tune.bin", dir);
  dit_tune_cache *c = open_ok(path);
  if (c) {
    put_ok(c, "k", "v");
    CHECK(dit_tune_cache_save(c, &err) == DIT_ERR_IO && strstr(err.msg, "plain") && strstr(err.msg, "folder"));
    dit_tune_cache_free(c);
  }
  /* the target is a folder: the rename fails after the temporary file was written */
  snprintf(path, sizeof path, "%s/target.bin", dir);
  mkdir(path, 0755);
  c = open_ok(path);
  if (c) {
    put_ok(c, "k", "v");
    err.msg[0] = 0;
    CHECK(dit_tune_cache_save(c, &err) == DIT_ERR_IO && strstr(err.msg, "target.bin"));
    snprintf(msg, sizeof msg, "%s", err.msg);
    dit_tune_cache_free(c);
  }
  CHECK_MSG(count_prefixed(dir, ".tune-") == 0, "temporary file left after: %s", msg);
  /* writing fails (file size limit: works as root too): the old file stays, no temporary */
  snprintf(path, sizeof path, "%s/tune.bin", dir);
  c = open_ok(path);
  if (!c) return;
  put_ok(c, "small", "1");
  save_ok(c);
  size_t n0 = 0, n1 = 0;
  unsigned char *before = dt_read_bytes(path, &n0);
  static char bigv[DIT_TUNE_CACHE_MAX_VAL + 1];
  memset(bigv, 'v', DIT_TUNE_CACHE_MAX_VAL);
  put_ok(c, "big", bigv);
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 100;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
    err.msg[0] = 0;
    dit_status s = dit_tune_cache_save(c, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK_MSG(s == DIT_ERR_IO && strstr(err.msg, "writing"), "status %d: %s", s, err.msg);
    unsigned char *after = dt_read_bytes(path, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0));
    free(after);
    CHECK(count_prefixed(dir, ".tune-") == 0);
    save_ok(c); /* still dirty: it works once the limit is gone */
  }
  signal(SIGXFSZ, prev);
  free(before);
  dit_tune_cache_free(c);
  c = open_ok(path);
  CHECK(c && has(c, "big", bigv) && has(c, "small", "1"));
  dit_tune_cache_free(c);
  /* a folder without write permission (not for root, whom permissions do not stop) */
  if (geteuid() != 0) {
    char ro[4400];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    mkdir(ro, 0755);
    snprintf(path, sizeof path, "%s/ro/tune.bin", dir);
    c = open_ok(path);
    if (c) put_ok(c, "k", "v"), save_ok(c), put_ok(c, "k2", "v2");
    unsigned char *b0 = dt_read_bytes(path, &n0);
    chmod(ro, 0500);
    err.msg[0] = 0;
    CHECK(c && dit_tune_cache_save(c, &err) == DIT_ERR_IO && strstr(err.msg, "temporary"));
    chmod(ro, 0755);
    unsigned char *b1 = dt_read_bytes(path, &n1);
    CHECK(b0 && b1 && n0 == n1 && !memcmp(b0, b1, n0) && count_prefixed(ro, ".tune-") == 0);
    free(b0), free(b1);
    dit_tune_cache_free(c);
  }
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {
      test_round_trip, test_replace,      test_missing_and_args, test_merge,        test_damage,        test_bad_files,
      test_limits,     test_default_path, test_options,          test_save_folders, test_save_failures};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
