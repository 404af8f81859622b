/* GGUF files (ggml's format: what stable-diffusion.cpp, ComfyUI-GGUF and llama.cpp write),
 * read into the same dit_st_file the safetensors reader makes, so weight sets, weight tables
 * and `ditrun info` treat both alike; and written (gguf_write.c).
 *
 * Reading maps the file and validates every count, length, type, shape and offset before
 * anything is trusted (docs/SECURITY.md lists the rules): versions 2 and 3, keys and tensor
 * names non-empty UTF-8 without NUL (names shorter than 64 bytes, as ggml requires), no
 * duplicate keys or names, no nested arrays, at most 4 dims, no overflowing sizes, rows of
 * whole blocks, offsets that are the running sum of the previous tensors' sizes padded to
 * the alignment (a power of two, general.alignment or 32), each tensor inside the file.
 * Tensors get torch-order shapes (ggml's ne reversed) and ditrun dtypes; ggml types ditrun
 * does not run (IQ*, TQ*, MXFP4 ...) are DIT_ERR_UNSUPPORTED naming the type. A tensor with a
 * ComfyUI-GGUF "comfy.gguf.orig_shape.<name>" key takes that shape (same element count,
 * rows of whole blocks). */
#ifndef DIT_IO_GGUF_H
#define DIT_IO_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "io/outfile.h"
#include "io/safetensors.h"

/* GGUF value types. */
typedef enum dit_gguf_type {
  DIT_GGUF_U8 = 0, DIT_GGUF_I8, DIT_GGUF_U16, DIT_GGUF_I16, DIT_GGUF_U32, DIT_GGUF_I32, DIT_GGUF_F32,
  DIT_GGUF_BOOL, DIT_GGUF_STRING, DIT_GGUF_ARRAY, DIT_GGUF_U64, DIT_GGUF_I64, DIT_GGUF_F64, DIT_GGUF_TYPE_COUNT
} dit_gguf_type;

typedef struct dit_gguf_kv {
  char *key;
  dit_gguf_type type;     /* DIT_GGUF_ARRAY for arrays */
  dit_gguf_type elem;     /* arrays: the element type (never ARRAY); scalars: = type */
  uint64_t n;             /* arrays: element count; scalars: 1 */
  const uint8_t *data;    /* the value's bytes in the mapping (strings: their u64 length first) */
} dit_gguf_kv;

typedef struct dit_gguf_meta {
  uint32_t version;
  uint64_t alignment, data_offset; /* data_offset: where tensor data start in the file */
  size_t n_kv;
  dit_gguf_kv *kv;                  /* in file order */
} dit_gguf_meta;

/* 1 when buf (len bytes) starts with GGUF's magic. */
bool dit_gguf_is_gguf(const void *buf, size_t len);
dit_status dit_gguf_open(const char *path, dit_st_file **out, dit_error *err);
/* The same rules over a buffer (tests, fuzzing); the file points into buf. */
dit_status dit_gguf_open_memory(const void *buf, size_t len, const char *what, dit_st_file **out, dit_error *err);
void dit_gguf_meta_free(dit_gguf_meta *m);

/* The key's entry, or NULL (also for a safetensors file). */
const dit_gguf_kv *dit_gguf_find(const dit_st_file *f, const char *key);
/* Typed reads of a scalar entry (or of element i of an array: *_at); false when kv is NULL,
 * of another type or i is out of range. Strings are not NUL-terminated: *len bytes. */
bool dit_gguf_str(const dit_gguf_kv *kv, const char **s, uint64_t *len);
bool dit_gguf_uint(const dit_gguf_kv *kv, uint64_t *v);  /* any unsigned type, or a non-negative signed one */
bool dit_gguf_int_at(const dit_gguf_kv *kv, uint64_t i, int64_t *v); /* integer elements (u64 above INT64_MAX: false) */
bool dit_gguf_float_at(const dit_gguf_kv *kv, uint64_t i, double *v); /* any numeric or bool element */
bool dit_gguf_str_at(const dit_gguf_kv *kv, uint64_t i, const char **s, uint64_t *len);
const char *dit_gguf_type_name(dit_gguf_type t);
/* ggml's name of a ggml tensor type id ("q4_K"), or NULL when ggml has no such type. */
const char *dit_gguf_ggml_type_name(uint32_t id);

/* ---- writing (gguf_write.c) ---- */
typedef struct dit_gguf_wkv {
  const char *key;
  dit_gguf_type type; /* a scalar type, or ARRAY */
  dit_gguf_type elem; /* arrays: U32, I32, U64, I64, F32 or STRING */
  uint64_t n;         /* arrays: element count */
  const void *value;  /* scalars: a pointer to the value (STRING: a NUL-terminated string);
                         arrays: n values, or n `const char *` for STRING */
} dit_gguf_wkv;

/* dtype: F32, F16, BF16 or a block type (or I8..I64, F64); ndim 1..4 (io/outfile.h) */
typedef dit_out_tensor dit_gguf_wtensor;
typedef dit_out_fill_fn dit_gguf_fill_fn;

/* Writes path (through a temporary file in its folder, renamed when complete; an existing
 * path is replaced only when overwrite): version 3, alignment 32, the key/values, then each
 * tensor's data as fill gives it, zero padding between. Nothing is left on failure. */
dit_status dit_gguf_write(const char *path, bool overwrite, const dit_gguf_wkv *kv, size_t n_kv,
                          const dit_gguf_wtensor *t, size_t n_t, dit_gguf_fill_fn fill, void *user, dit_error *err);

#endif
