/* The safetensors writer (see safetensors.h): the 8-byte little-endian header length, the
 * JSON header (each tensor's dtype, shape and data offsets, in the order given, and string
 * metadata under "__metadata__"), padded with spaces to a multiple of 8 so the data start
 * aligned, then the tensors' data back to back, through io/outfile.h. Data come from the
 * caller's fill function one tensor at a time, through one buffer of the largest size. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/outfile.h"
#include "io/safetensors.h"

/* Bytes of tensor t (an element type, 0..4 dims), or an error naming it. */
static dit_status tensor_bytes(const dit_out_tensor *t, uint64_t *n, dit_error *err) {
  if (!t->name || !*t->name || !strcmp(t->name, "__metadata__") || t->ndim < 0 || t->ndim > 4 ||
      dit_dtype_is_block(t->dtype) || (unsigned)t->dtype >= DIT_DTYPE_COUNT)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "safetensors writer: tensor \"%s\": bad name, rank or dtype",
                      t->name ? t->name : "(null)");
  *n = dit_dtype_size(t->dtype);
  for (int j = 0; j < t->ndim; j++)
    if (t->shape[j] < 0 || dit_mul_overflow_u64(*n, (uint64_t)t->shape[j], n))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "safetensors writer: tensor \"%s\": bad shape", t->name);
  return DIT_OK;
}

/* The header text (NULL when out of memory or a name repeats; *biggest: the largest tensor). */
static char *header(const char *const *meta, size_t n_meta, const dit_out_tensor *t, size_t n_t, uint64_t *biggest,
                    dit_error *err) {
  json_t *h = json_object(), *m = n_meta ? json_object() : NULL;
  bool ok = h && (!n_meta || m);
  for (size_t i = 0; ok && i + 1 < 2 * n_meta; i += 2) ok = !json_object_set_new(m, meta[i], json_string(meta[i + 1]));
  if (ok && m) {
    ok = !json_object_set_new(h, "__metadata__", m); /* takes m either way */
    m = NULL;
  }
  uint64_t off = 0, nb;
  *biggest = 0;
  for (size_t i = 0; ok && i < n_t; i++) {
    if (tensor_bytes(&t[i], &nb, err) != DIT_OK) {
      json_decref(h);
      return NULL;
    }
    if (json_object_get(h, t[i].name)) {
      dit_errorf(err, DIT_ERR_INVALID_ARG, "safetensors writer: tensor \"%s\" given twice", t[i].name);
      json_decref(h);
      return NULL;
    }
    json_t *sh = json_array();
    for (int j = 0; sh && j < t[i].ndim; j++) json_array_append_new(sh, json_integer(t[i].shape[j]));
    ok = sh && !json_object_set_new(h, t[i].name,
                                    json_pack("{s:s, s:o, s:[I,I]}", "dtype", dit_dtype_name(t[i].dtype), "shape", sh,
                                              "data_offsets", (json_int_t)off, (json_int_t)(off + nb)));
    off += nb;
    if (nb > *biggest) *biggest = nb;
  }
  char *s = ok ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(m);
  json_decref(h);
  if (!s) dit_errorf(err, DIT_ERR_NOMEM, "safetensors writer: out of memory for the header");
  return s;
}

dit_status dit_st_write(const char *path, bool overwrite, const char *const *meta, size_t n_meta,
                        const dit_out_tensor *t, size_t n_t, dit_out_fill_fn fill, void *user, dit_error *err) {
  uint64_t biggest = 0, nb;
  char *h = header(meta, n_meta, t, n_t, &biggest, err);
  if (!h) return err->status != DIT_OK ? err->status : DIT_ERR_NOMEM;
  void *buf = biggest ? malloc((size_t)biggest) : NULL;
  if (biggest && !buf) {
    free(h);
    return dit_errorf(err, DIT_ERR_NOMEM, "safetensors writer: out of memory for a %llu-byte tensor",
                      (unsigned long long)biggest);
  }
  dit_outfile o;
  dit_status s = dit_outfile_begin(&o, path, "safetensors", overwrite, err);
  if (s != DIT_OK) {
    free(h), free(buf);
    return s;
  }
  size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
  uint8_t le[8];
  for (int k = 0; k < 8; k++) le[k] = (uint8_t)((uint64_t)padded >> (8 * k));
  int e = 0;
  if (fwrite(le, 1, 8, o.fp) != 8 || fwrite(h, 1, hl, o.fp) != hl || fwrite("        ", 1, padded - hl, o.fp) != padded - hl)
    e = errno ? errno : EIO;
  for (size_t i = 0; i < n_t && s == DIT_OK && !e; i++) {
    tensor_bytes(&t[i], &nb, err);
    s = nb ? fill(user, i, buf, (size_t)nb, err) : DIT_OK;
    if (s == DIT_OK && nb && fwrite(buf, 1, (size_t)nb, o.fp) != nb) e = errno ? errno : EIO;
  }
  free(h);
  free(buf);
  if (s == DIT_OK && e) s = dit_outfile_error(&o, "writing", e, err);
  return dit_outfile_end(&o, s, err);
}
