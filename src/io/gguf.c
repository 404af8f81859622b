/* The GGUF reader (see gguf.h): a bounds-checked cursor over the mapped header, the
 * key/values, the tensor infos, then the data layout checked as ggml's own reader checks
 * it. Nothing is allocated from a count before the bytes left could hold that many items. */
#include "io/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME: names are shorter */
#define GGUF_DEFAULT_ALIGNMENT 32

/* ---- ggml's tensor types ---- */
typedef struct ggml_type_info {
  const char *name;
  int dtype; /* a dit_dtype, or -1: a type ditrun does not run */
} ggml_type_info;

static const ggml_type_info ggml_types[] = {
    [0] = {"f32", DIT_F32},       [1] = {"f16", DIT_F16},        [2] = {"q4_0", DIT_Q4_0},
    [3] = {"q4_1", DIT_Q4_1},     [6] = {"q5_0", DIT_Q5_0},      [7] = {"q5_1", DIT_Q5_1},
    [8] = {"q8_0", DIT_Q8_0},     [9] = {"q8_1", -1},            [10] = {"q2_K", DIT_Q2_K},
    [11] = {"q3_K", DIT_Q3_K},    [12] = {"q4_K", DIT_Q4_K},     [13] = {"q5_K", DIT_Q5_K},
    [14] = {"q6_K", DIT_Q6_K},    [15] = {"q8_K", -1},           [16] = {"iq2_xxs", -1},
    [17] = {"iq2_xs", -1},        [18] = {"iq3_xxs", -1},        [19] = {"iq1_s", -1},
    [20] = {"iq4_nl", -1},        [21] = {"iq3_s", -1},          [22] = {"iq2_s", -1},
    [23] = {"iq4_xs", -1},        [24] = {"i8", DIT_I8},         [25] = {"i16", DIT_I16},
    [26] = {"i32", DIT_I32},      [27] = {"i64", DIT_I64},       [28] = {"f64", DIT_F64},
    [29] = {"iq1_m", -1},         [30] = {"bf16", DIT_BF16},     [34] = {"tq1_0", -1},
    [35] = {"tq2_0", -1},         [39] = {"mxfp4", -1},          [40] = {"nvfp4", -1},
    [41] = {"q1_0", -1},          [42] = {"q2_0", -1},
};
enum { N_GGML_TYPES = sizeof ggml_types / sizeof *ggml_types };

const char *dit_gguf_ggml_type_name(uint32_t id) { return id < N_GGML_TYPES ? ggml_types[id].name : NULL; }

static const char *const type_names[DIT_GGUF_TYPE_COUNT] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                                             "bool", "string", "array", "u64", "i64", "f64"};
static const uint8_t type_sizes[DIT_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *dit_gguf_type_name(dit_gguf_type t) { return (unsigned)t < DIT_GGUF_TYPE_COUNT ? type_names[t] : "?"; }

bool dit_gguf_is_gguf(const void *buf, size_t len) { return len >= 4 && !memcmp(buf, "GGUF", 4); }

/* ---- the cursor ---- */
typedef struct cursor {
  const uint8_t *p;
  size_t len, pos;
  const char *what;
  dit_error *err;
} cursor;

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static dit_status need(cursor *c, uint64_t n, const char *item) {
  if (n > c->len - c->pos)
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: truncated: %s needs %llu bytes at offset %zu, the file has %zu",
                      c->what, item, (unsigned long long)n, c->pos, c->len);
  return DIT_OK;
}

static dit_status rd(cursor *c, int n, uint64_t *v, const char *item) {
  DIT_TRY(need(c, (uint64_t)n, item));
  *v = le(c->p + c->pos, n);
  c->pos += (size_t)n;
  return DIT_OK;
}

/* True if the n bytes at s are UTF-8 without NUL. */
static bool clean_utf8(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned b = s[i], len = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (!b || !len || n - i < len) return false;
    uint32_t cp = len == 1 ? b : b & (0x7f >> len);
    for (unsigned k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

/* A length-prefixed string: *s points into the buffer, *n bytes. */
static dit_status rd_str(cursor *c, const uint8_t **s, uint64_t *n, const char *item) {
  DIT_TRY(rd(c, 8, n, item));
  DIT_TRY(need(c, *n, item));
  *s = c->p + c->pos;
  c->pos += (size_t)*n;
  return DIT_OK;
}

/* A key or tensor name: non-empty UTF-8 without NUL, as a C string. */
static dit_status rd_name(cursor *c, uint64_t max, char **out, const char *item) {
  const uint8_t *s;
  uint64_t n;
  DIT_TRY(rd_str(c, &s, &n, item));
  if (n == 0) return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: %s is empty", c->what, item);
  if (n >= max)
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: %s \"%.40s...\" is %llu bytes (at most %llu)", c->what, item,
                      clean_utf8(s, 40) ? (const char *)s : "?", (unsigned long long)n, (unsigned long long)(max - 1));
  if (!clean_utf8(s, (size_t)n))
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: %s at offset %zu is not UTF-8 (or holds a NUL byte)", c->what,
                      item, c->pos - (size_t)n);
  *out = malloc((size_t)n + 1);
  if (!*out) return dit_errorf(c->err, DIT_ERR_NOMEM, "%s: out of memory", c->what);
  memcpy(*out, s, (size_t)n);
  (*out)[n] = 0;
  return DIT_OK;
}

/* ---- key/values ---- */

/* Skips one value of type t (not ARRAY), checking it is there. */
static dit_status skip_value(cursor *c, dit_gguf_type t, const char *key) {
  if (t == DIT_GGUF_STRING) {
    const uint8_t *s;
    uint64_t n;
    return rd_str(c, &s, &n, key);
  }
  DIT_TRY(need(c, type_sizes[t], key));
  c->pos += type_sizes[t];
  return DIT_OK;
}

static dit_status rd_type(cursor *c, dit_gguf_type *t, const char *key) {
  uint64_t v;
  DIT_TRY(rd(c, 4, &v, key));
  if (v >= DIT_GGUF_TYPE_COUNT)
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: key \"%s\" has unknown value type %llu", c->what, key,
                      (unsigned long long)v);
  *t = (dit_gguf_type)v;
  return DIT_OK;
}

static dit_status rd_kv(cursor *c, dit_gguf_kv *kv) {
  DIT_TRY(rd_name(c, 1u << 16, &kv->key, "a key"));
  DIT_TRY(rd_type(c, &kv->type, kv->key));
  kv->elem = kv->type, kv->n = 1;
  if (kv->type == DIT_GGUF_ARRAY) {
    DIT_TRY(rd_type(c, &kv->elem, kv->key));
    if (kv->elem == DIT_GGUF_ARRAY)
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: key \"%s\" is an array of arrays (not supported by GGUF readers)",
                        c->what, kv->key);
    DIT_TRY(rd(c, 8, &kv->n, kv->key));
    /* each element takes at least its size (a string: its 8-byte length) */
    uint64_t min = kv->elem == DIT_GGUF_STRING ? 8 : type_sizes[kv->elem];
    if (kv->n > (c->len - c->pos) / min)
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: key \"%s\": %llu array elements cannot fit in the %zu bytes left",
                        c->what, kv->key, (unsigned long long)kv->n, c->len - c->pos);
  }
  kv->data = c->p + c->pos;
  if (kv->elem != DIT_GGUF_STRING) {
    uint64_t bytes = type_sizes[kv->elem] * kv->n; /* no overflow: n <= bytes left / size */
    DIT_TRY(need(c, bytes, kv->key));
    c->pos += (size_t)bytes;
    return DIT_OK;
  }
  for (uint64_t i = 0; i < kv->n; i++) DIT_TRY(skip_value(c, DIT_GGUF_STRING, kv->key));
  return DIT_OK;
}

/* ---- tensor infos ---- */
typedef struct tinfo {
  uint32_t type;
  int ndim;
  int64_t ne[GGUF_MAX_DIMS];
  uint64_t offset, nbytes;
} tinfo;

static dit_status rd_tensor(cursor *c, dit_st_tensor *t, tinfo *ti) {
  DIT_TRY(rd_name(c, GGUF_MAX_NAME, &t->name, "a tensor name"));
  uint64_t v;
  DIT_TRY(rd(c, 4, &v, t->name));
  if (v < 1 || v > GGUF_MAX_DIMS)
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\" has %llu dims (1 to %d)", c->what, t->name,
                      (unsigned long long)v, GGUF_MAX_DIMS);
  ti->ndim = (int)v;
  uint64_t numel = 1;
  for (int j = 0; j < ti->ndim; j++) {
    DIT_TRY(rd(c, 8, &v, t->name));
    if (v > (uint64_t)INT64_MAX)
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\": dimension %d is negative", c->what, t->name, j);
    ti->ne[j] = (int64_t)v;
    if (dit_mul_overflow_u64(numel, v, &numel) || numel > (uint64_t)INT64_MAX)
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\": the element count overflows", c->what, t->name);
  }
  int64_t torch[GGUF_MAX_DIMS];
  for (int j = 0; j < ti->ndim; j++) torch[j] = ti->ne[j];
  if (!dit_shape_fits(torch, ti->ndim))
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\": the element count overflows (zero dims aside)",
                      c->what, t->name);
  DIT_TRY(rd(c, 4, &v, t->name));
  ti->type = (uint32_t)v;
  const char *tn = v < N_GGML_TYPES ? ggml_types[v].name : NULL;
  if (!tn)
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\" has unknown ggml type %llu", c->what, t->name,
                      (unsigned long long)v);
  if (ggml_types[v].dtype < 0)
    return dit_errorf(c->err, DIT_ERR_UNSUPPORTED, "%s: tensor \"%s\" has ggml type %s, which ditrun does not run",
                      c->what, t->name, tn);
  t->dtype = (dit_dtype)ggml_types[v].dtype;
  if (!dit_dtype_row_bytes(t->dtype, (uint64_t)ti->ne[0], &ti->nbytes))
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\": a row of %lld elements is not a whole number of %s "
                      "blocks (%zu)", c->what, t->name, (long long)ti->ne[0], tn, dit_dtype_block_elems(t->dtype));
  uint64_t rows = ti->ne[0] ? numel / (uint64_t)ti->ne[0] : 0;
  if (dit_mul_overflow_u64(ti->nbytes, rows, &ti->nbytes))
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\": the byte size overflows", c->what, t->name);
  if (ti->ne[0] == 0) ti->nbytes = 0;
  DIT_TRY(rd(c, 8, &ti->offset, t->name));
  t->ndim = ti->ndim;
  for (int j = 0; j < ti->ndim; j++) t->shape[j] = ti->ne[ti->ndim - 1 - j]; /* torch order */
  return DIT_OK;
}

/* ggml's data layout: the data section at the first aligned offset after the infos; each
 * tensor at the running sum of the previous ones' sizes padded to the alignment, in file
 * order; each inside the file. */
static dit_status check_layout(cursor *c, dit_st_file *f, const tinfo *ti) {
  const dit_gguf_meta *m = f->gguf;
  uint64_t start = ((uint64_t)c->pos + m->alignment - 1) / m->alignment * m->alignment, expect = 0;
  for (size_t i = 0; i < f->n_tensors; i++) {
    dit_st_tensor *t = &f->tensors[i];
    if (ti[i].offset != expect)
      return dit_errorf(c->err, DIT_ERR_FORMAT,
                        "%s: tensor \"%s\" is at data offset %llu, expected %llu (the previous tensors' sizes, each "
                        "padded to %llu bytes)", c->what, t->name, (unsigned long long)ti[i].offset,
                        (unsigned long long)expect, (unsigned long long)m->alignment);
    uint64_t end, padded;
    if (dit_add_overflow_u64(start, ti[i].offset, &t->begin) || dit_add_overflow_u64(t->begin, ti[i].nbytes, &end) ||
        end > c->len)
      return dit_errorf(c->err, DIT_ERR_FORMAT,
                        "%s: tensor \"%s\" (%llu bytes at file offset %llu) runs past the end of the file (%zu bytes; "
                        "truncated?)", c->what, t->name, (unsigned long long)ti[i].nbytes,
                        (unsigned long long)(start + ti[i].offset), c->len);
    t->end = end;
    t->data = c->p + t->begin;
    t->begin -= start, t->end -= start; /* relative to the data section, as safetensors' */
    padded = (ti[i].nbytes + m->alignment - 1) / m->alignment * m->alignment;
    if (dit_add_overflow_u64(expect, padded, &expect))
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: tensor \"%s\": the data size overflows", c->what, t->name);
  }
  ((dit_gguf_meta *)m)->data_offset = start;
  return DIT_OK;
}

/* ComfyUI-GGUF's comfy.gguf.orig_shape.<name>: the tensor's real shape. */
static dit_status apply_orig_shapes(cursor *c, dit_st_file *f) {
  static const char pre[] = "comfy.gguf.orig_shape.";
  for (size_t k = 0; k < f->gguf->n_kv; k++) {
    const dit_gguf_kv *kv = &f->gguf->kv[k];
    if (strncmp(kv->key, pre, sizeof pre - 1)) continue;
    const char *name = kv->key + sizeof pre - 1;
    dit_st_tensor *t = (dit_st_tensor *)dit_st_find(f, name); /* the tensors are sorted by now */
    if (!t) continue;
    if (kv->type != DIT_GGUF_ARRAY || (kv->elem != DIT_GGUF_I32 && kv->elem != DIT_GGUF_U32 && kv->elem != DIT_GGUF_I64) ||
        kv->n < 1 || kv->n > DIT_MAX_DIMS)
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: \"%s\" must be an array of 1 to %d integers", c->what, kv->key,
                        DIT_MAX_DIMS);
    int64_t shape[DIT_MAX_DIMS];
    uint64_t numel = 1, had = 1;
    for (uint64_t j = 0; j < kv->n; j++) {
      if (!dit_gguf_int_at(kv, j, &shape[j]) || shape[j] < 0 || dit_mul_overflow_u64(numel, (uint64_t)shape[j], &numel))
        return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: \"%s\": bad dimension %llu", c->what, kv->key,
                          (unsigned long long)j);
    }
    for (int j = 0; j < t->ndim; j++) had *= (uint64_t)t->shape[j];
    uint64_t rb;
    if (!dit_shape_fits(shape, (int)kv->n))
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: \"%s\": the element count overflows (zero dims aside)", c->what,
                        kv->key);
    if (numel != had || !dit_dtype_row_bytes(t->dtype, (uint64_t)shape[kv->n - 1], &rb))
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: \"%s\" does not fit tensor \"%s\" (%llu elements of %s)",
                        c->what, kv->key, name, (unsigned long long)had, dit_dtype_name(t->dtype));
    t->ndim = (int)kv->n;
    memcpy(t->shape, shape, sizeof(int64_t) * kv->n);
  }
  return DIT_OK;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const dit_st_tensor *)a)->name, ((const dit_st_tensor *)b)->name);
}

static int cmp_key_ptr(const void *a, const void *b) {
  return strcmp((*(const dit_gguf_kv *const *)a)->key, (*(const dit_gguf_kv *const *)b)->key);
}

/* No key twice (sorted copies of the pointers: n log n for any count the file holds). */
static dit_status check_unique_keys(cursor *c, const dit_gguf_meta *m) {
  const dit_gguf_kv **p = malloc((m->n_kv ? m->n_kv : 1) * sizeof *p);
  if (!p) return dit_errorf(c->err, DIT_ERR_NOMEM, "%s: out of memory", c->what);
  for (size_t i = 0; i < m->n_kv; i++) p[i] = &m->kv[i];
  qsort(p, m->n_kv, sizeof *p, cmp_key_ptr);
  dit_status s = DIT_OK;
  for (size_t i = 1; i < m->n_kv && s == DIT_OK; i++)
    if (!strcmp(p[i - 1]->key, p[i]->key))
      s = dit_errorf(c->err, DIT_ERR_FORMAT, "%s: duplicate key \"%s\"", c->what, p[i]->key);
  free(p);
  return s;
}

/* The header: magic, version, counts, key/values, alignment. */
static dit_status parse_header(cursor *c, dit_gguf_meta *m, uint64_t *n_tensors) {
  uint64_t v, n_kv;
  if (!dit_gguf_is_gguf(c->p, c->len)) return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: not a GGUF file (no GGUF magic)", c->what);
  c->pos = 4;
  DIT_TRY(rd(c, 4, &v, "the version"));
  if (v != 2 && v != 3)
    return dit_errorf(c->err, v == 1 ? DIT_ERR_UNSUPPORTED : DIT_ERR_FORMAT,
                      "%s: GGUF version %llu (versions 2 and 3 are read)", c->what, (unsigned long long)v);
  m->version = (uint32_t)v;
  DIT_TRY(rd(c, 8, n_tensors, "the tensor count"));
  DIT_TRY(rd(c, 8, &n_kv, "the key/value count"));
  /* a key/value takes at least 13 bytes (8-byte length, a 1-byte key, 4-byte type), a
   * tensor info 33 */
  if (n_kv > (c->len - c->pos) / 13 || *n_tensors > (c->len - c->pos) / 33)
    return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: %llu key/values and %llu tensors cannot fit in a %zu-byte file",
                      c->what, (unsigned long long)n_kv, (unsigned long long)*n_tensors, c->len);
  m->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *m->kv);
  if (!m->kv) return dit_errorf(c->err, DIT_ERR_NOMEM, "%s: out of memory", c->what);
  for (uint64_t i = 0; i < n_kv; i++) {
    dit_status s = rd_kv(c, &m->kv[m->n_kv]);
    if (m->kv[m->n_kv].key) m->n_kv++; /* freed with m, also on failure */
    DIT_TRY(s);
  }
  DIT_TRY(check_unique_keys(c, m));
  m->alignment = GGUF_DEFAULT_ALIGNMENT;
  for (size_t i = 0; i < m->n_kv; i++) {
    if (strcmp(m->kv[i].key, "general.alignment")) continue;
    if (m->kv[i].type != DIT_GGUF_U32 || !dit_gguf_uint(&m->kv[i], &m->alignment) || m->alignment == 0 ||
        (m->alignment & (m->alignment - 1)))
      return dit_errorf(c->err, DIT_ERR_FORMAT, "%s: general.alignment must be a u32 power of two", c->what);
  }
  return DIT_OK;
}

static dit_status parse(dit_st_file *f, const uint8_t *buf, size_t len, dit_error *err) {
  cursor c = {buf, len, 0, f->path, err};
  f->gguf = calloc(1, sizeof *f->gguf);
  if (!f->gguf) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", f->path);
  uint64_t n = 0;
  DIT_TRY(parse_header(&c, f->gguf, &n));
  f->tensors = calloc(n ? (size_t)n : 1, sizeof *f->tensors);
  tinfo *ti = calloc(n ? (size_t)n : 1, sizeof *ti);
  dit_status s = f->tensors && ti ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", f->path);
  for (uint64_t i = 0; s == DIT_OK && i < n; i++) {
    s = rd_tensor(&c, &f->tensors[i], &ti[i]);
    if (f->tensors[i].name) f->n_tensors++;
  }
  if (s == DIT_OK) s = check_layout(&c, f, ti);
  free(ti);
  if (s != DIT_OK) return s;
  qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_name);
  for (size_t i = 1; i < f->n_tensors; i++)
    if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: duplicate tensor name \"%s\"", f->path, f->tensors[i].name);
  return apply_orig_shapes(&c, f);
}

dit_status dit_gguf_open_memory(const void *buf, size_t len, const char *what, dit_st_file **out, dit_error *err) {
  *out = NULL;
  dit_st_file *f;
  DIT_TRY(dit_st_new(what, &f, err));
  f->map = (void *)buf;
  f->map_size = len;
  dit_status s = parse(f, buf, len, err);
  DIT_HAND_OVER(s, f, out, dit_st_close);
}

static dit_status parse_mapped(dit_st_file *f, const unsigned char *buf, size_t len, const void *arg, dit_error *err) {
  (void)arg;
  return parse(f, buf, len, err);
}

dit_status dit_gguf_open(const char *path, dit_st_file **out, dit_error *err) {
  return dit_st_open_mapped(path, 24, "a GGUF header", parse_mapped, NULL, out, err);
}

void dit_gguf_meta_free(dit_gguf_meta *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_kv; i++) free(m->kv[i].key);
  free(m->kv);
  free(m);
}

/* ---- lookups ---- */

const dit_gguf_kv *dit_gguf_find(const dit_st_file *f, const char *key) {
  if (!f || !f->gguf || !key) return NULL;
  for (size_t i = 0; i < f->gguf->n_kv; i++)
    if (!strcmp(f->gguf->kv[i].key, key)) return &f->gguf->kv[i];
  return NULL;
}

bool dit_gguf_str(const dit_gguf_kv *kv, const char **s, uint64_t *len) {
  if (!kv || kv->type != DIT_GGUF_STRING) return false;
  *len = le(kv->data, 8);
  *s = (const char *)kv->data + 8;
  return true;
}

bool dit_gguf_str_at(const dit_gguf_kv *kv, uint64_t i, const char **s, uint64_t *len) {
  if (!kv || kv->type != DIT_GGUF_ARRAY || kv->elem != DIT_GGUF_STRING || i >= kv->n) return false;
  const uint8_t *p = kv->data; /* validated when read: every length fits */
  for (uint64_t k = 0; k < i; k++) p += 8 + le(p, 8);
  *len = le(p, 8);
  *s = (const char *)p + 8;
  return true;
}

/* Element i of a numeric kv as raw bits, and its type. */
static bool raw_at(const dit_gguf_kv *kv, uint64_t i, uint64_t *bits, dit_gguf_type *t) {
  if (!kv || kv->elem == DIT_GGUF_STRING || i >= kv->n) return false;
  *t = kv->elem;
  *bits = le(kv->data + i * type_sizes[kv->elem], type_sizes[kv->elem]);
  return true;
}

bool dit_gguf_int_at(const dit_gguf_kv *kv, uint64_t i, int64_t *v) {
  uint64_t b;
  dit_gguf_type t;
  if (!raw_at(kv, i, &b, &t)) return false;
  switch (t) {
    case DIT_GGUF_U8: case DIT_GGUF_U16: case DIT_GGUF_U32: case DIT_GGUF_BOOL: *v = (int64_t)b; return true;
    case DIT_GGUF_U64: if (b > (uint64_t)INT64_MAX) return false; *v = (int64_t)b; return true;
    case DIT_GGUF_I8: *v = (int8_t)b; return true;
    case DIT_GGUF_I16: *v = (int16_t)b; return true;
    case DIT_GGUF_I32: *v = (int32_t)b; return true;
    case DIT_GGUF_I64: *v = (int64_t)b; return true;
    default: return false;
  }
}

bool dit_gguf_uint(const dit_gguf_kv *kv, uint64_t *v) {
  int64_t x;
  uint64_t b;
  dit_gguf_type t;
  if (kv && kv->type == DIT_GGUF_U64 && raw_at(kv, 0, &b, &t)) return *v = b, true;
  if (!kv || kv->type == DIT_GGUF_ARRAY || !dit_gguf_int_at(kv, 0, &x) || x < 0) return false;
  *v = (uint64_t)x;
  return true;
}

bool dit_gguf_float_at(const dit_gguf_kv *kv, uint64_t i, double *v) {
  uint64_t b;
  dit_gguf_type t;
  if (!raw_at(kv, i, &b, &t)) return false;
  if (t == DIT_GGUF_F32) {
    uint32_t u = (uint32_t)b;
    float f;
    memcpy(&f, &u, 4);
    return *v = f, true;
  }
  if (t == DIT_GGUF_F64) return memcpy(v, &b, 8), true;
  int64_t x;
  if (dit_gguf_int_at(kv, i, &x)) return *v = (double)x, true;
  return *v = (double)b, true; /* a u64 above INT64_MAX */
}
