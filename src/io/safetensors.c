/* The safetensors reader: maps a file read-only and validates its header against every
 * rule of RELIABILITY.md (sizes, UTF-8 JSON, dtypes, shapes, offsets that tile the data
 * buffer exactly) before any tensor is handed out. Sharded sets live in st_weights.c and
 * the weight table in st_wtable.c; this file knows only one file at a time. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/json.h"

/* True if the n bytes at s are well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF). *bad receives the offset of the first bad byte. */
static bool utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, cp = c & 0x07;
    } else {
      *bad = i;
      return false;
    }
    if (n - i < len) {
      *bad = i;
      return false;
    }
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) {
        *bad = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) {
      *bad = i;
      return false;
    }
    i += len;
  }
  return true;
}

static int cmp_by_offset(const void *a, const void *b) {
  const dit_st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_by_name(const void *a, const void *b) {
  const dit_st_tensor *x = a, *y = b;
  return strcmp(x->name, y->name);
}

static bool json_nonneg_int(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v)) return false;
  json_int_t x = json_integer_value(v);
  if (x < 0) return false;
  *out = (uint64_t)x;
  return true;
}

/* Validates one header entry (everything but its place in the data buffer). */
static dit_status parse_entry(const char *what, const char *name, const json_t *v, dit_st_tensor *t, dit_error *err) {
  if (!json_is_object(v))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": header entry is not a JSON object", what, name);
  const json_t *jd = json_object_get(v, "dtype");
  const json_t *js = json_object_get(v, "shape");
  const json_t *jo = json_object_get(v, "data_offsets");
  if (!json_is_string(jd))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": missing or non-string \"dtype\"", what, name);
  if (!dit_dtype_from_name(json_string_value(jd), &t->dtype))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": unknown dtype \"%.32s\"", what, name,
                      json_string_value(jd));
  if (!json_is_array(js))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": missing or non-array \"shape\"", what, name);
  size_t nd = json_array_size(js);
  if (nd > DIT_MAX_DIMS)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: tensor \"%s\": shape has %zu dimensions (at most %d supported)",
                      what, name, nd, DIT_MAX_DIMS);
  t->ndim = (int)nd;
  uint64_t numel = 1;
  for (size_t i = 0; i < nd; i++) {
    uint64_t d;
    if (!json_nonneg_int(json_array_get(js, i), &d))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": shape dimension %zu is not a non-negative integer",
                        what, name, i);
    t->shape[i] = (int64_t)d;
    if (dit_mul_overflow_u64(numel, d, &numel))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": element count of the shape overflows", what, name);
  }
  if (!dit_shape_fits(t->shape, t->ndim))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": element count of the shape overflows (zero dims aside)",
                      what, name);
  uint64_t nbytes;
  if (dit_mul_overflow_u64(numel, dit_dtype_size(t->dtype), &nbytes))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": byte size of the shape overflows", what, name);
  if (!json_is_array(jo) || json_array_size(jo) != 2)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: tensor \"%s\": \"data_offsets\" must be an array of exactly two integers", what, name);
  if (!json_nonneg_int(json_array_get(jo, 0), &t->begin) || !json_nonneg_int(json_array_get(jo, 1), &t->end))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" must be non-negative integers", what,
                      name);
  if (t->end < t->begin)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] end before they begin", what,
                      name, (unsigned long long)t->begin, (unsigned long long)t->end);
  if (t->end - t->begin != nbytes)
    return dit_errorf(
        err, DIT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] span %llu bytes but %s %s needs %llu bytes",
        what, name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
        dit_dtype_name(t->dtype), dit_shape_str(t->shape, t->ndim, (char[160]){0}, 160), (unsigned long long)nbytes);
  return DIT_OK;
}

static dit_status check_metadata(const char *what, const json_t *m, dit_error *err) {
  if (!json_is_object(m))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"__metadata__\" must be an object of strings", what);
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)m, k, v) {
    if (!json_is_string(v))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"__metadata__\" value of \"%.64s\" is not a string", what, k);
  }
  return DIT_OK;
}

/* Sorted by offset, the entries must tile [0, data_len) exactly. */
static dit_status check_tiling(const char *what, dit_st_tensor *t, size_t n, uint64_t data_len, dit_error *err) {
  qsort(t, n, sizeof *t, cmp_by_offset);
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i].begin > pos)
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "%s: tensor \"%s\": data_offsets begin at %llu, leaving a hole of %llu unused bytes before it",
                        what, t[i].name, (unsigned long long)t[i].begin, (unsigned long long)(t[i].begin - pos));
    if (t[i].begin < pos)
      return dit_errorf(
          err, DIT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] overlap the previous tensor \"%s\"", what,
          t[i].name, (unsigned long long)t[i].begin, (unsigned long long)t[i].end, i ? t[i - 1].name : "");
    pos = t[i].end;
  }
  if (pos > data_len)
    return dit_errorf(
        err, DIT_ERR_FORMAT,
        "%s: tensor data ends at byte %llu, past the end of the data buffer (%llu bytes; file truncated?)", what,
        (unsigned long long)pos, (unsigned long long)data_len);
  if (pos < data_len)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: %llu trailing bytes after the last tensor (data buffer is %llu bytes, tensors cover %llu)",
                      what, (unsigned long long)(data_len - pos), (unsigned long long)data_len,
                      (unsigned long long)pos);
  return DIT_OK;
}

/* Parses the header's entries into f->tensors (which it allocates). */
static dit_status parse_entries(dit_st_file *f, const char *what, json_t *root, const unsigned char *data,
                                uint64_t data_len, dit_error *err) {
  size_t cap = json_object_size(root);
  f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
  if (!f->tensors) return dit_errorf(err, DIT_ERR_NOMEM, "%s: cannot allocate %zu tensor entries", what, cap);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) {
      DIT_TRY(check_metadata(what, v, err));
      f->metadata = json_incref(v);
      continue;
    }
    dit_st_tensor *t = &f->tensors[f->n_tensors];
    t->name = strdup(key);
    if (!t->name) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", what);
    f->n_tensors++;
    DIT_TRY(parse_entry(what, key, v, t, err));
  }
  DIT_TRY(check_tiling(what, f->tensors, f->n_tensors, data_len, err));
  for (size_t i = 0; i < f->n_tensors; i++) f->tensors[i].data = data + f->tensors[i].begin;
  qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_by_name);
  for (size_t i = 1; i < f->n_tensors; i++)
    if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: duplicate tensor name \"%s\"", what, f->tensors[i].name);
  return DIT_OK;
}

/* Validates buf[0..len) and fills f (whose path is set). */
static dit_status parse(dit_st_file *f, const unsigned char *buf, size_t len, const dit_st_options *opt,
                        dit_error *err) {
  const char *what = f->path;
  size_t cap = opt && opt->max_header_bytes ? opt->max_header_bytes : DIT_ST_DEFAULT_MAX_HEADER;
  if (len < 8)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length", what, len);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
  if (n > cap)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: header length %llu bytes exceeds the limit of %zu bytes (real files with 126 MB "
                      "headers exist: raise dit_st_options.max_header_bytes to load them)",
                      what, (unsigned long long)n, cap);
  uint64_t hend;
  if (dit_add_overflow_u64(8, n, &hend) || hend > len)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", what,
                      (unsigned long long)n, len);
  const unsigned char *h = buf + 8;
  size_t bad;
  if (!utf8_valid(h, (size_t)n, &bad))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: header is not valid UTF-8 (bad byte at header offset %zu)", what, bad);
  size_t i = 0;
  while (i < n && (h[i] == ' ' || h[i] == '\t' || h[i] == '\n' || h[i] == '\r')) i++;
  if (i == n || h[i] != '{')
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: header does not start with '{' (not a JSON object)", what);
  if (memchr(h, 0, (size_t)n)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: header contains a NUL byte", what);
  json_t *root;
  char jwhat[DIT_ERROR_MSG_MAX / 2];
  snprintf(jwhat, sizeof jwhat, "%s: header", what);
  DIT_TRY(dit_json_parse((const char *)h, (size_t)n, jwhat, &root, err));
  if (!json_is_object(root)) {
    json_decref(root);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: header is not a JSON object", what);
  }
  dit_status s = parse_entries(f, what, root, buf + hend, len - hend, err);
  json_decref(root);
  return s;
}

dit_status dit_st_new(const char *what, dit_st_file **out, dit_error *err) {
  dit_st_file *f = calloc(1, sizeof *f);
  if (f) f->path = strdup(what ? what : "(memory)");
  if (!f || !f->path) {
    free(f);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", what ? what : "(memory)");
  }
  *out = f;
  return DIT_OK;
}

dit_status dit_st_open_memory(const void *buf, size_t len, const char *what, const dit_st_options *opt,
                              dit_st_file **out, dit_error *err) {
  *out = NULL;
  dit_st_file *f;
  DIT_TRY(dit_st_new(what, &f, err));
  f->map = (void *)buf;
  f->map_size = len;
  dit_status s = parse(f, buf, len, opt, err);
  DIT_HAND_OVER(s, f, out, dit_st_close);
}

dit_status dit_map_file(const char *path, size_t min_len, const char *what_min, void **map, size_t *len,
                        dit_error *err) {
  *map = NULL, *len = 0;
  /* O_NONBLOCK so that opening a FIFO does not wait for a writer; it is rejected below. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return dit_errorf(err, DIT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return dit_errorf(err, DIT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a regular file (%s)", path,
                      S_ISDIR(st.st_mode)    ? "a directory"
                      : S_ISFIFO(st.st_mode) ? "a FIFO"
                                             : "a special file");
  }
  if ((uint64_t)st.st_size > SIZE_MAX) {
    close(fd);
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: file too large to map", path);
  }
  size_t n = (size_t)st.st_size;
  if (n < min_len) {
    close(fd);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: file is %zu bytes, too short for %s", path, n, what_min);
  }
  void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED) return dit_errorf(err, DIT_ERR_IO, "%s: cannot map %zu bytes: %s", path, n, strerror(e));
  *map = m, *len = n;
  return DIT_OK;
}

dit_status dit_st_open_mapped(const char *path, size_t min_len, const char *what_min, dit_st_parse_fn parse_fn,
                              const void *arg, dit_st_file **out, dit_error *err) {
  *out = NULL;
  void *map;
  size_t len;
  DIT_TRY(dit_map_file(path, min_len, what_min, &map, &len, err));
  dit_st_file *f;
  dit_status s = dit_st_new(path, &f, err);
  if (s != DIT_OK) {
    munmap(map, len);
    return s;
  }
  f->map = map;
  f->map_size = len;
  f->mapped = true;
  s = parse_fn(f, map, len, arg, err);
  DIT_HAND_OVER(s, f, out, dit_st_close);
}

static dit_status parse_st(dit_st_file *f, const unsigned char *buf, size_t len, const void *opt, dit_error *err) {
  return parse(f, buf, len, opt, err);
}

dit_status dit_st_open(const char *path, const dit_st_options *opt, dit_st_file **out, dit_error *err) {
  return dit_st_open_mapped(path, 8, "the 8-byte header length", parse_st, opt, out, err);
}

void dit_st_close(dit_st_file *f) {
  if (!f) return;
  if (f->mapped && f->map) munmap(f->map, f->map_size);
  for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
  free(f->tensors);
  if (f->metadata) json_decref(f->metadata);
  dit_gguf_meta_free(f->gguf);
  free(f->path);
  free(f);
}

static int cmp_name_tensor(const void *key, const void *elem) {
  return strcmp(key, ((const dit_st_tensor *)elem)->name);
}

const dit_st_tensor *dit_st_find(const dit_st_file *f, const char *name) {
  if (!f || !name || !f->n_tensors) return NULL;
  return bsearch(name, f->tensors, f->n_tensors, sizeof *f->tensors, cmp_name_tensor);
}
