/* libFuzzer target for the tuning cache file reader (core/tune_cache.c). The first byte
 * picks: even = the rest is the file; odd = the rest followed by its correct checksum, so
 * that the entry parser behind the checksum is reached too. Any bytes must open (DIT_OK:
 * a bad file is an empty cache with a note, never an error), never crash, leak or read
 * out of bounds; a file that loads without a note takes a put, saves (merging with the
 * file itself) and loads again without a note and with the entries it should have.
 * Built by fuzz/CMakeLists.txt (make fuzz); seeds in fuzz/corpus/tune_cache. */
#include <stdlib.h>
#include <string.h>

#include "core/tune_cache.h"
#include "fuzz_util.h"

static void check_resave(const char *path, size_t n_before) {
  dit_error err = {0};
  dit_tune_cache *c;
  if (dit_tune_cache_open(path, &c, &err) != DIT_OK || dit_tune_cache_note(c) || dit_tune_cache_count(c) != n_before)
    abort(); /* the same file read twice gives the same cache */
  size_t vlen = 0;
  bool had = dit_tune_cache_get(c, "fuzz-key", 8, NULL, 0, &vlen) || vlen; /* present: found or too long */
  if (dit_tune_cache_put(c, "fuzz-key", 8, "v", 1, &err) != DIT_OK) abort();
  if (dit_tune_cache_save(c, &err) != DIT_OK) abort();
  dit_tune_cache_free(c);
  if (dit_tune_cache_open(path, &c, &err) != DIT_OK || dit_tune_cache_note(c)) abort();
  size_t want = had || n_before == DIT_TUNE_CACHE_MAX_ENTRIES ? n_before : n_before + 1;
  char v[2];
  if (dit_tune_cache_count(c) != want || !dit_tune_cache_get(c, "fuzz-key", 8, v, sizeof v, &vlen) || vlen != 1 ||
      v[0] != 'v')
    abort();
  dit_tune_cache_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  const uint8_t *body = data + 1;
  size_t n = size - 1;
  uint8_t *buf = NULL;
  if (data[0] & 1) { /* append the FNV-1a 64 checksum the format ends with */
    buf = malloc(n + 8);
    if (!buf) return 0;
    if (n) memcpy(buf, body, n);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ body[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++) buf[n + i] = (uint8_t)(h >> 8 * i);
    body = buf, n += 8;
  }
  fz_write("tune.bin", body, n);
  char path[512];
  snprintf(path, sizeof path, "%s/tune.bin", fz_dir());
  dit_error err = {0};
  dit_tune_cache *c;
  if (dit_tune_cache_open(path, &c, &err) != DIT_OK) abort();
  const char *note = dit_tune_cache_note(c);
  size_t count = dit_tune_cache_count(c);
  if (note ? count != 0 || !note[0] : count > DIT_TUNE_CACHE_MAX_ENTRIES || n < 24 || memcmp(body, "DITTUNE1", 8))
    abort();
  /* look up a few slices of the input as keys (found or not, never out of bounds) */
  uint8_t val[DIT_TUNE_CACHE_MAX_VAL];
  size_t vlen;
  for (size_t off = 20; off < n && off < 20 + 64; off += 7) { /* off - 4: where a first entry's lengths are */
    size_t klen = n - off < DIT_TUNE_CACHE_MAX_KEY ? n - off : DIT_TUNE_CACHE_MAX_KEY;
    if (dit_tune_cache_get(c, body + off, klen, val, sizeof val, &vlen) && vlen > sizeof val) abort();
  }
  dit_tune_cache_free(c);
  if (!note) check_resave(path, count);
  fz_remove("tune.bin");
  free(buf);
  return 0;
}
