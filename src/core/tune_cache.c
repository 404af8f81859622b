/* Tuning cache file (see tune_cache.h). Entries live in insertion order in one array, found
 * through an open-addressing index of their key hashes; the file reader trusts no byte. */
#include "core/tune_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TC_MAGIC "DITTUNE1"
#define TC_HEADER 16 /* magic, version, count */
#define TC_TRAILER 8 /* checksum */
#define TC_SLOTS 8192 /* index size: a power of two, twice the most entries */
#define TC_NOTE_MAX 1536

typedef struct tc_entry {
  uint64_t hash;          /* FNV-1a of the key */
  uint16_t klen, vlen;
  unsigned char *kv;      /* key then value, one allocation */
} tc_entry;

struct dit_tune_cache {
  char *path;
  tc_entry *e;            /* n entries, oldest first; room for DIT_TUNE_CACHE_MAX_ENTRIES */
  size_t n;
  uint32_t *slot;         /* TC_SLOTS: 0 empty, else entry index + 1 */
  bool dirty;             /* put since open: save has something to write */
  char note[TC_NOTE_MAX]; /* why open started empty, or "" */
};

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
  return h;
}

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void wr32(unsigned char *p, uint32_t v) { wr16(p, (uint16_t)v), wr16(p + 2, (uint16_t)(v >> 16)); }
static void wr64(unsigned char *p, uint64_t v) { wr32(p, (uint32_t)v), wr32(p + 4, (uint32_t)(v >> 32)); }

/* ---- the table ------------------------------------------------------------------------ */

/* The index of key in c's entries, or -1. */
static long find(const dit_tune_cache *c, const void *key, size_t klen, uint64_t hash) {
  for (size_t i = hash & (TC_SLOTS - 1);; i = (i + 1) & (TC_SLOTS - 1)) {
    uint32_t s = c->slot[i];
    if (!s) return -1;
    const tc_entry *e = &c->e[s - 1];
    if (e->hash == hash && e->klen == klen && !memcmp(e->kv, key, klen)) return (long)s - 1;
  }
}

/* Indexes entry i (its key not indexed yet; fewer entries than slots, so a slot is free). */
static void index_add(dit_tune_cache *c, size_t i) {
  size_t j = c->e[i].hash & (TC_SLOTS - 1);
  while (c->slot[j]) j = (j + 1) & (TC_SLOTS - 1);
  c->slot[j] = (uint32_t)i + 1;
}

static void clear(dit_tune_cache *c) {
  for (size_t i = 0; i < c->n; i++) free(c->e[i].kv);
  c->n = 0;
  memset(c->slot, 0, TC_SLOTS * sizeof *c->slot);
}

/* Drops the oldest entry (the cache is full) and rebuilds the index for the shifted rest. */
static void evict_oldest(dit_tune_cache *c) {
  free(c->e[0].kv);
  memmove(c->e, c->e + 1, (c->n - 1) * sizeof *c->e);
  c->n--;
  memset(c->slot, 0, TC_SLOTS * sizeof *c->slot);
  for (size_t i = 0; i < c->n; i++) index_add(c, i);
}

/* Sets key's value; lengths already checked. Returns whether anything changed, or -1 when
 * out of memory (c unchanged). */
static int set(dit_tune_cache *c, const void *key, size_t klen, const void *val, size_t vlen) {
  uint64_t h = fnv1a(FNV_OFFSET, key, klen);
  long i = find(c, key, klen, h);
  if (i >= 0 && c->e[i].vlen == vlen && (!vlen || !memcmp(c->e[i].kv + klen, val, vlen))) return 0;
  unsigned char *kv = malloc(klen + vlen);
  if (!kv) return -1;
  memcpy(kv, key, klen);
  if (vlen) memcpy(kv + klen, val, vlen);
  if (i >= 0) { /* replace in place: the entry keeps its age */
    free(c->e[i].kv);
    c->e[i].kv = kv, c->e[i].vlen = (uint16_t)vlen;
    return 1;
  }
  if (c->n == DIT_TUNE_CACHE_MAX_ENTRIES) evict_oldest(c);
  c->e[c->n] = (tc_entry){.hash = h, .klen = (uint16_t)klen, .vlen = (uint16_t)vlen, .kv = kv};
  index_add(c, c->n++);
  return 1;
}

/* An empty cache for path (NULL: a scratch table that is never saved). NULL when out of memory. */
static dit_tune_cache *tc_new(const char *path) {
  dit_tune_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->e = malloc(DIT_TUNE_CACHE_MAX_ENTRIES * sizeof *c->e);
  c->slot = calloc(TC_SLOTS, sizeof *c->slot);
  c->path = path ? strdup(path) : NULL;
  if (!c->e || !c->slot || (path && !c->path)) {
    dit_tune_cache_free(c);
    return NULL;
  }
  return c;
}

/* ---- reading -------------------------------------------------------------------------- */

/* Loads the n bytes of a cache file into the empty c. A malformed file leaves c empty and
 * the reason in why (returns DIT_OK); DIT_ERR_NOMEM only when out of memory. */
static dit_status parse(dit_tune_cache *c, const unsigned char *p, size_t n, char *why, size_t wlen,
                        dit_error *err) {
  why[0] = 0;
  if (n < TC_HEADER + TC_TRAILER) {
    snprintf(why, wlen, "truncated (%zu bytes, the smallest file has %d)", n, TC_HEADER + TC_TRAILER);
    return DIT_OK;
  }
  if (memcmp(p, TC_MAGIC, 8) != 0) {
    snprintf(why, wlen, "not a tuning cache file (no %s magic)", TC_MAGIC);
    return DIT_OK;
  }
  uint32_t version = rd32(p + 8), count = rd32(p + 12);
  if (version != DIT_TUNE_CACHE_VERSION) {
    snprintf(why, wlen, "format version %u, this build reads %u", version, DIT_TUNE_CACHE_VERSION);
    return DIT_OK;
  }
  size_t body = n - TC_TRAILER;
  if (fnv1a(FNV_OFFSET, p, body) != rd64(p + body)) {
    snprintf(why, wlen, "checksum mismatch (damaged or truncated)");
    return DIT_OK;
  }
  if (count > DIT_TUNE_CACHE_MAX_ENTRIES) {
    snprintf(why, wlen, "%u entries, more than the %d allowed", count, DIT_TUNE_CACHE_MAX_ENTRIES);
    return DIT_OK;
  }
  size_t off = TC_HEADER;
  for (uint32_t i = 0; i < count && !why[0]; i++) {
    if (body - off < 4) {
      snprintf(why, wlen, "entry %u of %u: truncated length fields", i, count);
      break;
    }
    size_t klen = rd16(p + off), vlen = rd16(p + off + 2);
    off += 4;
    if (klen == 0 || klen > DIT_TUNE_CACHE_MAX_KEY || vlen > DIT_TUNE_CACHE_MAX_VAL)
      snprintf(why, wlen, "entry %u: key of %zu bytes or value of %zu (limits 1..%d, %d)", i, klen, vlen,
               DIT_TUNE_CACHE_MAX_KEY, DIT_TUNE_CACHE_MAX_VAL);
    else if (body - off < klen + vlen)
      snprintf(why, wlen, "entry %u: %zu bytes of key and value past the end of the entries", i, klen + vlen);
    else if (set(c, p + off, klen, p + off + klen, vlen) < 0) {
      clear(c);
      return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory", c->path ? c->path : "");
    }
    off += klen + vlen;
  }
  if (!why[0] && off != body) snprintf(why, wlen, "%zu bytes after the %u entries", body - off, count);
  if (why[0]) clear(c);
  return DIT_OK;
}

/* Reads path into the empty c; what made it start empty goes to why ("" when it did not:
 * the file loaded, or there is none). DIT_ERR_NOMEM only. */
static dit_status load(dit_tune_cache *c, const char *path, char *why, size_t wlen, dit_error *err) {
  why[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno != ENOENT) snprintf(why, wlen, "cannot open: %s", strerror(errno));
    return DIT_OK;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, wlen, "not a regular file");
    fclose(f);
    return DIT_OK;
  }
  if (st.st_size > (off_t)DIT_TUNE_CACHE_MAX_FILE) {
    snprintf(why, wlen, "%lld bytes, larger than the %u allowed", (long long)st.st_size, DIT_TUNE_CACHE_MAX_FILE);
    fclose(f);
    return DIT_OK;
  }
  size_t size = (size_t)st.st_size;
  unsigned char *buf = malloc(size + 1); /* one more: a file that grew is noticed */
  if (!buf) {
    fclose(f);
    return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory for %zu bytes", path, size + 1);
  }
  size_t got = fread(buf, 1, size + 1, f);
  int rerr = ferror(f);
  fclose(f);
  dit_status s = DIT_OK;
  if (rerr)
    snprintf(why, wlen, "read error");
  else if (got != size)
    snprintf(why, wlen, "changed size while being read");
  else
    s = parse(c, buf, size, why, wlen, err);
  free(buf);
  return s;
}

dit_status dit_tune_cache_open(const char *path, dit_tune_cache **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "dit_tune_cache_open: no output handle");
  *out = NULL;
  if (!path || !path[0]) return dit_errorf(err, DIT_ERR_INVALID_ARG, "dit_tune_cache_open: no path");
  dit_tune_cache *c = tc_new(path);
  if (!c) return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory", path);
  char why[256];
  dit_status s = load(c, path, why, sizeof why, err);
  if (s == DIT_OK && why[0]) snprintf(c->note, sizeof c->note, "tuning cache %s: %s; starting empty", path, why);
  DIT_HAND_OVER(s, c, out, dit_tune_cache_free);
}

const char *dit_tune_cache_note(const dit_tune_cache *c) { return c && c->note[0] ? c->note : NULL; }

size_t dit_tune_cache_count(const dit_tune_cache *c) { return c ? c->n : 0; }

bool dit_tune_cache_get(const dit_tune_cache *c, const void *key, size_t klen, void *val, size_t cap, size_t *vlen) {
  if (vlen) *vlen = 0;
  if (!c || !key || klen == 0 || klen > DIT_TUNE_CACHE_MAX_KEY) return false;
  long i = find(c, key, klen, fnv1a(FNV_OFFSET, key, klen));
  if (i < 0) return false;
  const tc_entry *e = &c->e[i];
  if (vlen) *vlen = e->vlen;
  if (e->vlen > cap) return false;
  if (e->vlen) memcpy(val, e->kv + e->klen, e->vlen);
  return true;
}

dit_status dit_tune_cache_put(dit_tune_cache *c, const void *key, size_t klen, const void *val, size_t vlen,
                              dit_error *err) {
  if (!c || !key || (vlen && !val)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "dit_tune_cache_put: NULL argument");
  if (klen == 0 || klen > DIT_TUNE_CACHE_MAX_KEY)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "tuning cache: a key of %zu bytes (1..%d allowed)", klen,
                      DIT_TUNE_CACHE_MAX_KEY);
  if (vlen > DIT_TUNE_CACHE_MAX_VAL)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "tuning cache: a value of %zu bytes (at most %d allowed)", vlen,
                      DIT_TUNE_CACHE_MAX_VAL);
  int r = set(c, key, klen, val, vlen);
  if (r < 0) return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory", c->path ? c->path : "");
  if (r) c->dirty = true;
  return DIT_OK;
}

/* ---- writing -------------------------------------------------------------------------- */

/* The file image of the entries list[0..n) (at most DIT_TUNE_CACHE_MAX_ENTRIES), malloc'd,
 * its size in *size; NULL when out of memory. */
static unsigned char *serialize(const tc_entry *const *list, size_t n, size_t *size) {
  size_t total = TC_HEADER + TC_TRAILER;
  for (size_t i = 0; i < n; i++) total += 4 + (size_t)list[i]->klen + list[i]->vlen;
  unsigned char *p = malloc(total);
  if (!p) return NULL;
  memcpy(p, TC_MAGIC, 8);
  wr32(p + 8, DIT_TUNE_CACHE_VERSION);
  wr32(p + 12, (uint32_t)n);
  size_t off = TC_HEADER;
  for (size_t i = 0; i < n; i++) {
    const tc_entry *e = list[i];
    wr16(p + off, e->klen), wr16(p + off + 2, e->vlen);
    memcpy(p + off + 4, e->kv, (size_t)e->klen + e->vlen);
    off += 4 + (size_t)e->klen + e->vlen;
  }
  wr64(p + off, fnv1a(FNV_OFFSET, p, off));
  *size = total;
  return p;
}

/* Creates folder dir and its missing parents (mode 0700). */
static dit_status make_dirs(const char *dir, dit_error *err) {
  char *d = strdup(dir);
  if (!d) return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache: out of memory");
  dit_status s = DIT_OK;
  for (char *q = d + 1;; q++) { /* d + 1: a leading '/' is the root, not a folder to make */
    bool end = !*q;
    if (*q != '/' && !end) continue;
    *q = 0;
    struct stat st;
    if (mkdir(d, 0700) != 0) { /* fine when it is a folder already (EEXIST, or EACCES/EROFS on one) */
      int e = errno;
      bool exists = stat(d, &st) == 0;
      if (!exists || !S_ISDIR(st.st_mode)) {
        s = dit_errorf(err, DIT_ERR_IO, "cannot create folder %s: %s", d,
                       exists ? "a file of that name is in the way" : strerror(e));
        break;
      }
    }
    if (end) break;
    *q = '/';
  }
  free(d);
  return s;
}

/* Writes p[0..n) to path through a temporary file in folder dir: written, fsynced, renamed
 * over path. A failure removes the temporary file and leaves path as it was. */
static dit_status write_atomic(const char *path, const char *dir, const unsigned char *p, size_t n, dit_error *err) {
  size_t tlen = strlen(dir) + 32;
  char *tmp = malloc(tlen);
  if (!tmp) return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory", path);
  snprintf(tmp, tlen, "%s/.tune-XXXXXX", dir);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    dit_errorf(err, DIT_ERR_IO, "cannot write tuning cache %s: cannot create a temporary file in %s: %s", path, dir,
               strerror(errno));
    free(tmp);
    return DIT_ERR_IO;
  }
  const char *what = NULL;
  for (size_t done = 0; done < n && !what;) {
    ssize_t w = write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = EIO;
    if (w <= 0) what = "writing";
    else done += (size_t)w;
  }
  if (!what && fsync(fd) != 0) what = "fsync";
  int e = errno;
  if (close(fd) != 0 && !what) what = "closing", e = errno;
  if (!what && rename(tmp, path) != 0) what = "renaming it into place", e = errno;
  dit_status s = DIT_OK;
  if (what) {
    s = dit_errorf(err, DIT_ERR_IO, "cannot write tuning cache %s: %s: %s", path, what, strerror(e));
    unlink(tmp);
  } else {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) { /* best effort: makes the rename durable */
      (void)fsync(dfd);
      close(dfd);
    }
  }
  free(tmp);
  return s;
}

/* The entries to write, oldest first: the file's (in disk) whose keys c lacks, then c's,
 * keeping the newest DIT_TUNE_CACHE_MAX_ENTRIES. *n is their number; NULL when out of memory. */
static const tc_entry **merged(const dit_tune_cache *c, const dit_tune_cache *disk, size_t *n) {
  const tc_entry **list = malloc((disk->n + c->n) * sizeof *list + 1);
  if (!list) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < disk->n; i++) {
    const tc_entry *e = &disk->e[i];
    if (find(c, e->kv, e->klen, e->hash) < 0) list[k++] = e;
  }
  for (size_t i = 0; i < c->n; i++) list[k++] = &c->e[i];
  size_t drop = k > DIT_TUNE_CACHE_MAX_ENTRIES ? k - DIT_TUNE_CACHE_MAX_ENTRIES : 0;
  memmove(list, list + drop, (k - drop) * sizeof *list);
  *n = k - drop;
  return list;
}

dit_status dit_tune_cache_save(dit_tune_cache *c, dit_error *err) {
  if (!c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "dit_tune_cache_save: no cache");
  if (!c->dirty || !c->path) return DIT_OK;
  const char *slash = strrchr(c->path, '/');
  char *dir = slash ? strndup(c->path, slash == c->path ? 1 : (size_t)(slash - c->path)) : strdup(".");
  dit_tune_cache *disk = tc_new(NULL);
  if (!dir || !disk) {
    free(dir);
    dit_tune_cache_free(disk);
    return dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory", c->path);
  }
  char why[256]; /* a bad file on disk is simply replaced */
  dit_status s = make_dirs(dir, err);
  if (s == DIT_OK) s = load(disk, c->path, why, sizeof why, err);
  const tc_entry **list = NULL;
  unsigned char *image = NULL;
  size_t n = 0, size = 0;
  if (s == DIT_OK && (!(list = merged(c, disk, &n)) || !(image = serialize(list, n, &size))))
    s = dit_errorf(err, DIT_ERR_NOMEM, "tuning cache %s: out of memory", c->path);
  if (s == DIT_OK) s = write_atomic(c->path, dir, image, size, err);
  if (s == DIT_OK) c->dirty = false;
  free(image);
  free(list);
  dit_tune_cache_free(disk);
  free(dir);
  return s;
}

void dit_tune_cache_free(dit_tune_cache *c) {
  if (!c) return;
  if (c->e && c->slot) clear(c);
  free(c->e);
  free(c->slot);
  free(c->path);
  free(c);
}

/* ---- the default path ----------------------------------------------------------------- */

dit_status dit_tune_cache_default_path(char *buf, size_t len, const char *cache_dir_env, const char *xdg_env,
                                       const char *home_env, dit_error *err) {
  if (!buf || !len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "dit_tune_cache_default_path: no buffer");
  buf[0] = 0;
  const char *base, *sub, *var;
  if (cache_dir_env && cache_dir_env[0])
    base = cache_dir_env, sub = "", var = "DITRUN_CACHE_DIR";
  else if (xdg_env && xdg_env[0] == '/')
    base = xdg_env, sub = "/ditrun", var = "XDG_CACHE_HOME";
  else if (home_env && home_env[0] == '/')
    base = home_env, sub = "/.cache/ditrun", var = "HOME";
  else
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "no folder for the tuning cache: set DITRUN_CACHE_DIR, or XDG_CACHE_HOME or HOME to an "
                      "absolute path");
  size_t blen = strlen(base);
  while (blen && base[blen - 1] == '/') blen--; /* "dir/" -> "dir"; "/" -> "" (the root) */
  int w = blen < len ? snprintf(buf, len, "%.*s%s/%s", (int)blen, base, sub, DIT_TUNE_CACHE_FILE) : -1;
  if (w < 0 || (size_t)w >= len) {
    buf[0] = 0;
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "the tuning cache path from %s (%.200s...) is longer than %zu bytes",
                      var, base, len - 1);
  }
  return DIT_OK;
}
