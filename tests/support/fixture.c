/* Fixture tensor loading for tests (see fixture.h): validated through the library's own
 * safetensors reader, then converted element by element. */
#include "fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/safetensors.h"

/* Opens file, finds name, copies its raw bytes into a malloc'd buffer (aligned for any
 * dtype). Returns 0 or -1 after printing why. */
static int load_raw(const char *file, const char *name, void **raw, dit_dtype *dtype, size_t *numel, int64_t *shape,
                    int *ndim) {
  dit_error err = {0};
  dit_st_file *f;
  if (dit_st_open(file, NULL, &f, &err) != DIT_OK) {
    fprintf(stderr, "fixture: %s\n", err.msg);
    return -1;
  }
  const dit_st_tensor *t = dit_st_find(f, name);
  if (!t) {
    fprintf(stderr, "fixture: %s: no tensor \"%s\"\n", file, name);
    dit_st_close(f);
    return -1;
  }
  size_t nbytes = (size_t)(t->end - t->begin);
  *raw = malloc(nbytes ? nbytes : 1);
  if (!*raw) {
    fprintf(stderr, "fixture: %s: out of memory for \"%s\"\n", file, name);
    dit_st_close(f);
    return -1;
  }
  memcpy(*raw, t->data, nbytes);
  *dtype = t->dtype;
  *numel = nbytes / dit_dtype_size(t->dtype);
  *ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
  dit_st_close(f);
  return 0;
}

int dt_load_f32(const char *file, const char *name, float **data, int64_t *shape, int *ndim) {
  void *raw;
  dit_dtype dt;
  size_t n;
  *data = NULL;
  if (load_raw(file, name, &raw, &dt, &n, shape, ndim)) return -1;
  float *out = malloc(n ? n * sizeof *out : 1);
  if (!out) {
    free(raw);
    fprintf(stderr, "fixture: %s: out of memory for \"%s\"\n", file, name);
    return -1;
  }
  dit_convert_to_f32(out, raw, dt, n);
  free(raw);
  *data = out;
  return 0;
}

int dt_load_i32(const char *file, const char *name, int32_t **data, int64_t *shape, int *ndim) {
  void *raw;
  dit_dtype dt;
  size_t n;
  *data = NULL;
  if (load_raw(file, name, &raw, &dt, &n, shape, ndim)) return -1;
  int32_t *out = malloc(n ? n * sizeof *out : 1);
  if (!out) {
    free(raw);
    fprintf(stderr, "fixture: %s: out of memory for \"%s\"\n", file, name);
    return -1;
  }
  const unsigned char *p = raw;
  for (size_t i = 0; i < n; i++) {
    double v;
    switch (dt) {
      case DIT_I64: {
        int64_t x;
        memcpy(&x, p + 8 * i, 8);
        v = (double)x;
        break;
      }
      case DIT_U64: {
        uint64_t x;
        memcpy(&x, p + 8 * i, 8);
        v = (double)x;
        break;
      }
      case DIT_F64: memcpy(&v, p + 8 * i, 8); break;
      case DIT_I32: {
        int32_t x;
        memcpy(&x, p + 4 * i, 4);
        v = x;
        break;
      }
      case DIT_U32: {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        v = x;
        break;
      }
      default: {
        float x;
        dit_convert_to_f32(&x, p + dit_dtype_size(dt) * i, dt, 1);
        v = x;
        break;
      }
    }
    if (!(v >= INT32_MIN && v <= INT32_MAX) || v != floor(v)) {
      fprintf(stderr, "fixture: %s: \"%s\" element %zu (%g) is not an int32 value\n", file, name, i, v);
      free(raw);
      free(out);
      return -1;
    }
    out[i] = (int32_t)v;
  }
  free(raw);
  *data = out;
  return 0;
}
