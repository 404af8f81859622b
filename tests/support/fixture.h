/* Reading reference tensors out of the fixture .safetensors files as plain float32 or
 * int32 arrays, for comparing engine outputs against the diffusers references. */
#ifndef DIT_TEST_FIXTURE_H
#define DIT_TEST_FIXTURE_H

#include <stdint.h>

/* Loads tensor `name` of a .safetensors file as freshly malloc'd float32 (converting from
 * any dtype); shape/ndim out (shape must hold 8 values); returns 0 on success, prints the
 * error and returns -1 otherwise. */
int dt_load_f32(const char *file, const char *name, float **data, int64_t *shape, int *ndim);
/* The same as int32: integer and bool dtypes, or floats holding integral values in range. */
int dt_load_i32(const char *file, const char *name, int32_t **data, int64_t *shape, int *ndim);

#endif
