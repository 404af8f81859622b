/* JSON helpers over jansson (see json.h). */
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

dit_status dit_json_parse(const char *buf, size_t len, const char *what, json_t **out, dit_error *err) {
  *out = NULL;
  json_error_t je;
  json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (!j)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", what, je.line,
                      je.column, je.text);
  *out = j;
  return DIT_OK;
}

dit_status dit_json_load_file(const char *path, size_t max_bytes, json_t **out, dit_error *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return dit_errorf(err, DIT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a regular file", path);
  }
  if ((uint64_t)st.st_size > max_bytes) {
    fclose(f);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %lld bytes is larger than the %zu-byte limit for this file",
                      path, (long long)st.st_size, max_bytes);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n ? n : 1);
  if (!buf) {
    fclose(f);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n);
  }
  size_t got = fread(buf, 1, n, f);
  int rerr = ferror(f);
  fclose(f);
  if (got != n || rerr) {
    free(buf);
    return dit_errorf(err, DIT_ERR_IO, "%s: read failed", path);
  }
  dit_status s = dit_json_parse(buf, n, path, out, err);
  free(buf);
  return s;
}

static dit_status member(const json_t *obj, const char *key, const json_t **v, bool optional,
                         const char *what, dit_error *err) {
  *v = NULL;
  if (!json_is_object(obj)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: expected a JSON object", what);
  const json_t *m = json_object_get(obj, key);
  if (!m || json_is_null(m)) {
    if (optional) return DIT_OK;
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
  }
  *v = m;
  return DIT_OK;
}

static bool is_number(const json_t *v) { return json_is_number(v); }
static bool is_boolean(const json_t *v) { return json_is_boolean(v); }
static bool is_string(const json_t *v) { return json_is_string(v); }
static bool is_array(const json_t *v) { return json_is_array(v); }

/* member() whose value, when there is one, must pass `is`: else "field must <must>". */
static dit_status typed_member(const json_t *obj, const char *key, const json_t **v, bool optional,
                               bool (*is)(const json_t *), const char *must, const char *what, dit_error *err) {
  DIT_TRY(member(obj, key, v, optional, what, err));
  if (*v && !is(*v)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" must %s", what, key, must);
  return DIT_OK;
}

static dit_status get_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                          bool optional, const char *what, dit_error *err) {
  const json_t *v;
  DIT_TRY(member(obj, key, &v, optional, what, err));
  if (!v) return DIT_OK;
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15) {
    x = (int64_t)json_real_value(v);
  } else {
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" must be an integer", what, key);
  }
  if (x < min || x > max)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" = %lld is outside [%lld, %lld]", what, key,
                      (long long)x, (long long)min, (long long)max);
  *out = x;
  return DIT_OK;
}

dit_status dit_json_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                        const char *what, dit_error *err) {
  return get_int(obj, key, min, max, out, false, what, err);
}

dit_status dit_json_int_opt(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                            const char *what, dit_error *err) {
  return get_int(obj, key, min, max, out, true, what, err);
}

dit_status dit_json_class_check(const json_t *obj, const char *expected, const char *what, dit_error *err) {
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(obj, "_class_name", &cls, what, err));
  if (cls && strcmp(cls, expected) != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"_class_name\" is \"%s\", expected %s", what, cls, expected);
  return DIT_OK;
}

/* True when key is present with a non-null value. */
static bool given(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  return v && !json_is_null(v);
}

dit_status dit_json_int_fields(const json_t *obj, const dit_json_int_field *f, size_t n, const char *what,
                               dit_error *err) {
  for (size_t i = 0; i < n; i++) {
    int64_t v = f[i].def, a = f[i].def;
    DIT_TRY(dit_json_int_opt(obj, f[i].key, f[i].min, f[i].max, &v, what, err));
    if (f[i].alias && given(obj, f[i].alias)) {
      DIT_TRY(dit_json_int_opt(obj, f[i].alias, f[i].min, f[i].max, &a, what, err));
      if (given(obj, f[i].key) && v != a)
        return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"%s\" %lld and \"%s\" %lld disagree", what, f[i].key,
                          (long long)v, f[i].alias, (long long)a);
      v = a;
    }
    *f[i].dst = (int)v;
  }
  return DIT_OK;
}

static dit_status get_double(const json_t *obj, const char *key, double *out, bool optional,
                             const char *what, dit_error *err) {
  const json_t *v;
  DIT_TRY(typed_member(obj, key, &v, optional, is_number, "be a number", what, err));
  if (!v) return DIT_OK;
  double x = json_number_value(v);
  if (!isfinite(x)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" is not finite", what, key);
  *out = x;
  return DIT_OK;
}

dit_status dit_json_double(const json_t *obj, const char *key, double *out, const char *what, dit_error *err) {
  return get_double(obj, key, out, false, what, err);
}

dit_status dit_json_double_opt(const json_t *obj, const char *key, double *out, const char *what,
                               dit_error *err) {
  return get_double(obj, key, out, true, what, err);
}

dit_status dit_json_bool_opt(const json_t *obj, const char *key, bool *out, const char *what, dit_error *err) {
  const json_t *v;
  DIT_TRY(typed_member(obj, key, &v, true, is_boolean, "be true or false", what, err));
  if (v) *out = json_is_true(v);
  return DIT_OK;
}

static dit_status get_string(const json_t *obj, const char *key, const char **out, bool optional,
                             const char *what, dit_error *err) {
  const json_t *v;
  DIT_TRY(typed_member(obj, key, &v, optional, is_string, "be a string", what, err));
  if (v) *out = json_string_value(v);
  return DIT_OK;
}

dit_status dit_json_string(const json_t *obj, const char *key, const char **out, const char *what,
                           dit_error *err) {
  return get_string(obj, key, out, false, what, err);
}

dit_status dit_json_string_opt(const json_t *obj, const char *key, const char **out, const char *what,
                               dit_error *err) {
  return get_string(obj, key, out, true, what, err);
}

dit_status dit_json_int_array(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                              size_t cap, size_t *n, const char *what, dit_error *err) {
  const json_t *v;
  DIT_TRY(typed_member(obj, key, &v, false, is_array, "be an array", what, err));
  size_t len = json_array_size(v);
  if (len > cap)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" has %zu entries, at most %zu allowed", what, key,
                      len, cap);
  for (size_t i = 0; i < len; i++) {
    const json_t *e = json_array_get(v, i);
    if (!json_is_integer(e))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\"[%zu] must be an integer", what, key, i);
    int64_t x = (int64_t)json_integer_value(e);
    if (x < min || x > max)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\"[%zu] = %lld is outside [%lld, %lld]", what,
                        key, i, (long long)x, (long long)min, (long long)max);
    out[i] = x;
  }
  *n = len;
  return DIT_OK;
}

dit_status dit_json_ints_exact(const json_t *obj, const char *key, int64_t min, int64_t max, int *out, size_t n,
                               const char *what, dit_error *err) {
  int64_t v[16];
  size_t got = 0;
  if (n > 16) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: field \"%s\": at most 16 values", what, key);
  DIT_TRY(dit_json_int_array(obj, key, min, max, v, 16, &got, what, err));
  if (got != n)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" has %zu entries, expected %zu", what, key, got, n);
  for (size_t i = 0; i < n; i++) out[i] = (int)v[i];
  return DIT_OK;
}
