/* Tensor descriptor helpers (see tensor.h). */
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

dit_tensor dit_tensor_make(dit_dtype dtype, void *data, int ndim, const int64_t *shape) {
  dit_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.ndim = ndim < 0 ? 0 : (ndim > DIT_MAX_DIMS ? DIT_MAX_DIMS : ndim);
  t.data = data;
  t.device = DIT_DEV_CPU;
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; i--) {
    t.shape[i] = shape[i];
    t.stride[i] = s;
    s *= shape[i];
  }
  return t;
}

dit_tensor dit_tensor_1d(dit_dtype dtype, void *data, int64_t d0) {
  int64_t s[1] = {d0};
  return dit_tensor_make(dtype, data, 1, s);
}
dit_tensor dit_tensor_2d(dit_dtype dtype, void *data, int64_t d0, int64_t d1) {
  int64_t s[2] = {d0, d1};
  return dit_tensor_make(dtype, data, 2, s);
}
dit_tensor dit_tensor_3d(dit_dtype dtype, void *data, int64_t d0, int64_t d1, int64_t d2) {
  int64_t s[3] = {d0, d1, d2};
  return dit_tensor_make(dtype, data, 3, s);
}
dit_tensor dit_tensor_4d(dit_dtype dtype, void *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t s[4] = {d0, d1, d2, d3};
  return dit_tensor_make(dtype, data, 4, s);
}

int64_t dit_tensor_numel(const dit_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t dit_tensor_nbytes(const dit_tensor *t) {
  if (dit_dtype_is_block(t->dtype)) {
    /* Whole rows of blocks: numel / block_elems blocks (the last dim is a multiple). */
    return (size_t)(dit_tensor_numel(t) / (int64_t)dit_dtype_block_elems(t->dtype)) *
           dit_dtype_block_bytes(t->dtype);
  }
  return (size_t)dit_tensor_numel(t) * dit_dtype_size(t->dtype);
}

bool dit_tensor_is_contiguous(const dit_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

bool dit_tensor_rowview(const dit_tensor *t, dit_rowview *v) {
  v->P = 1, v->M = 1, v->C = 1, v->ps = 1, v->rs = 1;
  if (t->ndim < 1) return true;
  const int last = t->ndim - 1;
  v->C = t->shape[last];
  if (v->C != 1 && t->stride[last] != 1) return false;
  v->rs = v->ps = v->C;
  int64_t gn[2] = {1, 1}, gs[2] = {0, 0}; /* groups from the innermost: size, stride */
  int ng = 0;
  for (int i = last - 1; i >= 0; i--) {
    const int64_t n = t->shape[i], s = t->stride[i];
    if (n == 1) continue;
    if (s < 0) return false;
    if (ng > 0 && s == gs[ng - 1] * gn[ng - 1]) {
      gn[ng - 1] *= n;
      continue;
    }
    if (ng == 2) return false;
    gn[ng] = n, gs[ng] = s;
    ng++;
  }
  if (ng >= 1) v->M = gn[0], v->rs = gs[0], v->ps = gn[0] * gs[0];
  if (ng == 2) v->P = gn[1], v->ps = gs[1];
  return true;
}

bool dit_rowview_split(dit_rowview *v, int64_t P) {
  if (v->P == P) return true;
  if (v->P != 1 || P <= 0 || v->M % P != 0) return false;
  v->M /= P;
  v->P = P;
  v->ps = v->M * v->rs;
  return true;
}

char *dit_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
  size_t o = 0;
  if (len == 0) return buf;
  buf[0] = 0;
  o += (size_t)snprintf(buf + o, len - o, "[");
  for (int i = 0; i < ndim && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

bool dit_tensor_stack_rows(const dit_tensor *const *parts, int n, dit_tensor *out) {
  if (n < 1 || !parts[0]) return false;
  const dit_tensor *f = parts[0];
  int64_t rows = 0;
  const char *next = f->data;
  for (int i = 0; i < n; i++) {
    const dit_tensor *t = parts[i];
    if (!t || !t->data || t->ndim != 2 || t->dtype != f->dtype || t->device != f->device || t->shape[1] != f->shape[1] ||
        !dit_tensor_is_contiguous(t) || (const char *)t->data != next || dit_tensor_scale(t) != dit_tensor_scale(f) ||
        t->lowrank)
      return false;
    rows += t->shape[0];
    next = (const char *)t->data + dit_tensor_nbytes(t);
  }
  dit_tensor s = dit_tensor_2d(f->dtype, f->data, rows, f->shape[1]);
  s.device = f->device;
  s.scale = f->scale;
  *out = s;
  return true;
}

dit_tensor dit_tensor_rows(const dit_tensor *t, int64_t r0, int64_t n) {
  dit_tensor v = *t;
  v.shape[0] = 1;
  size_t row = dit_tensor_nbytes(&v); /* bytes of one row (of dim 0) */
  v.shape[0] = n;
  v.data = t->data ? (char *)t->data + (size_t)r0 * row : NULL;
  return v;
}

bool dit_shape_fits(const int64_t *shape, int ndim) {
  uint64_t p = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return false;
    if (shape[i] && (dit_mul_overflow_u64(p, (uint64_t)shape[i], &p) || p > (uint64_t)INT64_MAX)) return false;
  }
  return true;
}

bool dit_tensor_has_shape(const dit_tensor *t, int ndim, const int64_t *shape) {
  if (t->ndim != ndim) return false;
  for (int i = 0; i < ndim; i++)
    if (t->shape[i] != shape[i]) return false;
  return true;
}

bool dit_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out); }
bool dit_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_add_overflow(a, b, out); }

bool dit_tensor_bytes_overlap(const dit_tensor *a, const dit_tensor *b) {
  const char *pa = a->data, *pb = b->data;
  const size_t na = (size_t)dit_tensor_numel(a) * dit_dtype_size(a->dtype);
  const size_t nb = (size_t)dit_tensor_numel(b) * dit_dtype_size(b->dtype);
  return na && nb && pa < pb + nb && pb < pa + na;
}
