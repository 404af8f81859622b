/* JSON reading for config.json, model_index.json, tokenizer.json and safetensors
 * headers, on top of jansson. Duplicate keys are rejected; nesting depth is capped by
 * the parser; every getter names the field (and the file) in its error message. */
#ifndef DIT_IO_JSON_H
#define DIT_IO_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Parses len bytes (not NUL-terminated). `what` names the source in messages.
 * Returns DIT_ERR_FORMAT with line/column on bad JSON or duplicate keys. *out owns a
 * reference: json_decref it. */
dit_status dit_json_parse(const char *buf, size_t len, const char *what, json_t **out, dit_error *err);
/* Reads and parses a whole file of at most max_bytes bytes. */
dit_status dit_json_load_file(const char *path, size_t max_bytes, json_t **out, dit_error *err);

/* Typed getters for an object member. `what` names the file in messages. The _opt
 * variants leave *out unchanged and succeed when the key is absent or null. Integers
 * must be in [min, max]; floats must be finite. */
dit_status dit_json_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                        const char *what, dit_error *err);
dit_status dit_json_int_opt(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                            const char *what, dit_error *err);
dit_status dit_json_double(const json_t *obj, const char *key, double *out, const char *what, dit_error *err);
dit_status dit_json_double_opt(const json_t *obj, const char *key, double *out, const char *what,
                               dit_error *err);
dit_status dit_json_bool_opt(const json_t *obj, const char *key, bool *out, const char *what, dit_error *err);
/* String member; *out points into obj (valid while obj lives). */
dit_status dit_json_string(const json_t *obj, const char *key, const char **out, const char *what,
                           dit_error *err);
dit_status dit_json_string_opt(const json_t *obj, const char *key, const char **out, const char *what,
                               dit_error *err);
/* A config's optional "_class_name": absent, null or `expected`; another is DIT_ERR_FORMAT naming both. */
dit_status dit_json_class_check(const json_t *obj, const char *expected, const char *what, dit_error *err);
/* A config's optional integer fields: each key's value in [min, max] into *dst, def when absent or
 * null; where alias is set (another program's name for the same field) its value is taken too,
 * and both present with different values is DIT_ERR_FORMAT naming both. */
typedef struct dit_json_int_field {
  const char *key;
  int64_t min, max, def;
  int *dst;
  const char *alias; /* NULL: none */
} dit_json_int_field;
dit_status dit_json_int_fields(const json_t *obj, const dit_json_int_field *f, size_t n, const char *what,
                               dit_error *err);
/* Array of integers: writes up to cap values into out, *n = count. Fails if longer. */
dit_status dit_json_int_array(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                              size_t cap, size_t *n, const char *what, dit_error *err);
/* Exactly n (<= 16) integers in [min, max] into out; DIT_ERR_FORMAT naming the field and the
 * count otherwise. */
dit_status dit_json_ints_exact(const json_t *obj, const char *key, int64_t min, int64_t max, int *out, size_t n,
                               const char *what, dit_error *err);

#endif
