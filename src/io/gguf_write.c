/* The GGUF writer (see gguf.h): version 3, little-endian, the layout ggml's reader checks
 * (the data section aligned, each tensor at the running sum of the previous padded sizes,
 * zero padding), through io/outfile.h. Tensor data come from the caller's fill function one
 * tensor at a time, through one buffer of the largest tensor's size. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/outfile.h"

#define ALIGN 32

typedef struct wr {
  dit_outfile *o;
  uint64_t pos;
  int err_no; /* first failed write's errno */
} wr;

static void put(wr *w, const void *p, size_t n) {
  if (w->err_no || !n) return;
  if (fwrite(p, 1, n, w->o->fp) != n) w->err_no = errno ? errno : 5 /* EIO */;
  w->pos += n;
}

static void put_u(wr *w, uint64_t v, int n) {
  uint8_t b[8];
  for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
  put(w, b, (size_t)n);
}

static void put_str(wr *w, const char *s) {
  put_u(w, strlen(s), 8);
  put(w, s, strlen(s));
}

static const int type_bytes[DIT_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* One scalar of type t at p (STRING: p is the string). */
static void put_scalar(wr *w, dit_gguf_type t, const void *p) {
  if (t == DIT_GGUF_STRING) return put_str(w, p);
  uint64_t v = 0;
  memcpy(&v, p, (size_t)type_bytes[t]); /* the host is little-endian (x86-64, arm64) */
  put_u(w, v, type_bytes[t]);
}

static dit_status put_kv(wr *w, const dit_gguf_wkv *kv, dit_error *err) {
  bool arr = kv->type == DIT_GGUF_ARRAY;
  dit_gguf_type t = arr ? kv->elem : kv->type;
  if ((unsigned)t >= DIT_GGUF_TYPE_COUNT || t == DIT_GGUF_ARRAY || !kv->key || !*kv->key || !kv->value)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "GGUF writer: bad key/value \"%s\"", kv->key ? kv->key : "(null)");
  put_str(w, kv->key);
  put_u(w, (uint64_t)kv->type, 4);
  if (!arr) {
    put_scalar(w, t, kv->value);
    return DIT_OK;
  }
  put_u(w, (uint64_t)t, 4);
  put_u(w, kv->n, 8);
  for (uint64_t i = 0; i < kv->n; i++)
    put_scalar(w, t, t == DIT_GGUF_STRING ? ((const char *const *)kv->value)[i]
                                          : (const char *)kv->value + i * (uint64_t)type_bytes[t]);
  return DIT_OK;
}

/* ggml's type id of a ditrun dtype, or -1. */
static int ggml_id(dit_dtype d) {
  static const struct {
    dit_dtype d;
    int id;
  } m[] = {{DIT_F32, 0},   {DIT_F16, 1},   {DIT_Q4_0, 2},  {DIT_Q4_1, 3},  {DIT_Q5_0, 6},  {DIT_Q5_1, 7},
           {DIT_Q8_0, 8},  {DIT_Q2_K, 10}, {DIT_Q3_K, 11}, {DIT_Q4_K, 12}, {DIT_Q5_K, 13}, {DIT_Q6_K, 14},
           {DIT_I8, 24},   {DIT_I16, 25},  {DIT_I32, 26},  {DIT_I64, 27},  {DIT_F64, 28},  {DIT_BF16, 30}};
  for (size_t i = 0; i < sizeof m / sizeof *m; i++)
    if (m[i].d == d) return m[i].id;
  return -1;
}

/* Bytes of tensor t, or an error naming it. */
static dit_status tensor_bytes(const dit_gguf_wtensor *t, uint64_t *n, dit_error *err) {
  if (!t->name || !*t->name || strlen(t->name) >= 64 || t->ndim < 1 || t->ndim > 4 || ggml_id(t->dtype) < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "GGUF writer: tensor \"%s\": bad name, rank or dtype",
                      t->name ? t->name : "(null)");
  uint64_t rows = 1;
  for (int j = 0; j < t->ndim - 1; j++)
    if (t->shape[j] < 0 || dit_mul_overflow_u64(rows, (uint64_t)t->shape[j], &rows))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "GGUF writer: tensor \"%s\": bad shape", t->name);
  if (t->shape[t->ndim - 1] < 0 || !dit_dtype_row_bytes(t->dtype, (uint64_t)t->shape[t->ndim - 1], n) ||
      dit_mul_overflow_u64(*n, rows, n))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "GGUF writer: tensor \"%s\": rows are not whole %s blocks", t->name,
                      dit_dtype_name(t->dtype));
  return DIT_OK;
}

static uint64_t pad(uint64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static void put_zeros(wr *w, uint64_t n) {
  static const uint8_t z[ALIGN];
  put(w, z, (size_t)n);
}

static dit_status write_all(wr *w, const dit_gguf_wkv *kv, size_t n_kv, const dit_gguf_wtensor *t, size_t n_t,
                            dit_gguf_fill_fn fill, void *user, dit_error *err) {
  uint64_t off = 0, biggest = 0, nb;
  put(w, "GGUF", 4);
  put_u(w, 3, 4);
  put_u(w, n_t, 8);
  put_u(w, n_kv, 8);
  for (size_t i = 0; i < n_kv; i++) DIT_TRY(put_kv(w, &kv[i], err));
  for (size_t i = 0; i < n_t; i++) {
    DIT_TRY(tensor_bytes(&t[i], &nb, err));
    put_str(w, t[i].name);
    put_u(w, (uint64_t)t[i].ndim, 4);
    for (int j = t[i].ndim - 1; j >= 0; j--) put_u(w, (uint64_t)t[i].shape[j], 8); /* ggml's ne: reversed */
    put_u(w, (uint64_t)ggml_id(t[i].dtype), 4);
    put_u(w, off, 8);
    off += pad(nb);
    if (nb > biggest) biggest = nb;
  }
  put_zeros(w, pad(w->pos) - w->pos);
  void *buf = biggest ? malloc((size_t)biggest) : NULL;
  if (biggest && !buf) return dit_errorf(err, DIT_ERR_NOMEM, "GGUF writer: out of memory for a %llu-byte tensor",
                                         (unsigned long long)biggest);
  dit_status s = DIT_OK;
  for (size_t i = 0; i < n_t && s == DIT_OK && !w->err_no; i++) {
    tensor_bytes(&t[i], &nb, err);
    s = nb ? fill(user, i, buf, (size_t)nb, err) : DIT_OK;
    put(w, buf, (size_t)nb);
    put_zeros(w, pad(nb) - nb);
  }
  free(buf);
  return s;
}

dit_status dit_gguf_write(const char *path, bool overwrite, const dit_gguf_wkv *kv, size_t n_kv,
                          const dit_gguf_wtensor *t, size_t n_t, dit_gguf_fill_fn fill, void *user, dit_error *err) {
  for (size_t i = 0; i < n_kv; i++)
    if (kv[i].key && !strcmp(kv[i].key, "general.alignment"))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "GGUF writer: general.alignment is the writer's (32)");
  dit_outfile o;
  DIT_TRY(dit_outfile_begin(&o, path, "GGUF", overwrite, err));
  wr w = {&o, 0, 0};
  dit_status s = write_all(&w, kv, n_kv, t, n_t, fill, user, err);
  if (s == DIT_OK && w.err_no) s = dit_outfile_error(&o, "writing", w.err_no, err);
  return dit_outfile_end(&o, s, err);
}
