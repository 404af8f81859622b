/* Operand checks every backend shares (backend_check.h). */
#include "backend/backend_check.h"

#include "core/dtype.h"

static const char *device_word(dit_device d) { return d == DIT_DEV_CUDA ? "CUDA" : "CPU"; }

dit_status dit_check_placed(const char *op, const char *name, const dit_tensor *t, dit_device dev, dit_error *err) {
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s is NULL", op, name);
  if (t->device != dev)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s is not a %s tensor", op, name, device_word(dev));
  if (!t->data && dit_tensor_numel(t) > 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has no data", op, name);
  return DIT_OK;
}

dit_status dit_check_present(const char *op, const char *name, const dit_tensor *t, dit_device dev, dit_error *err) {
  DIT_TRY(dit_check_placed(op, name, t, dev, err));
  if (!dit_tensor_is_contiguous(t))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be contiguous", op, name);
  return DIT_OK;
}

dit_status dit_check_dtype(const char *op, const char *name, const dit_tensor *t, unsigned dtypes, dit_error *err) {
  if (dit_dtype_in(t->dtype, dtypes)) return DIT_OK;
  char list[64] = "";
  size_t used = 0;
  int n = 0;
  for (unsigned d = 0; d < 32; d++) {
    if (!dit_dtype_in((dit_dtype)d, dtypes)) continue;
    int w = snprintf(list + used, sizeof list - used, "%s%s", n++ ? " or " : "", dit_dtype_name((dit_dtype)d));
    if (w < 0 || (size_t)w >= sizeof list - used) break;
    used += (size_t)w;
  }
  return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be %s, got %s", op, name, list, dit_dtype_name(t->dtype));
}

dit_status dit_check_rows(const char *op, const char *name, const dit_tensor *t, dit_device dev, unsigned dtypes,
                          dit_rowview *v, dit_error *err) {
  DIT_TRY(dit_check_placed(op, name, t, dev, err));
  DIT_TRY(dit_check_dtype(op, name, t, dtypes, err));
  if (!dit_tensor_rowview(t, v))
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "%s: %s must be rows of its last dim (unit last stride, at most two strided groups of "
                      "leading dims)", op, name);
  return DIT_OK;
}

dit_status dit_check_weight(const char *op, const char *name, const dit_tensor *t, dit_device dev, int64_t n,
                            dit_error *err) {
  DIT_TRY(dit_check_present(op, name, t, dev, err));
  if (!dit_dtype_in(t->dtype, DIT_WEIGHT_DTYPES))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s dtype %s unsupported (F32/BF16/F16)", op, name,
                      dit_dtype_name(t->dtype));
  if (n >= 0 && dit_tensor_numel(t) != n) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has shape %s, expected %lld elements", op, name,
                      dit_shape_str(t->shape, t->ndim, s, sizeof s), (long long)n);
  }
  return DIT_OK;
}

dit_status dit_check_matrix(const char *op, const char *name, const dit_tensor *t, dit_device dev, dit_error *err) {
  DIT_TRY(dit_check_present(op, name, t, dev, err));
  if (!dit_dtype_is_quant(t->dtype)) return dit_check_weight(op, name, t, dev, -1, err);
  uint64_t rb;
  if (t->ndim != 2 || !dit_dtype_row_bytes(t->dtype, (uint64_t)t->shape[1], &rb)) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s %s %s must be 2-D with rows of whole %zu-element blocks", op,
                      name, dit_dtype_name(t->dtype), dit_shape_str(t->shape, t->ndim, s, sizeof s),
                      dit_dtype_block_elems(t->dtype));
  }
  return DIT_OK;
}

dit_status dit_check_same_shape(const char *op, const char *an, const dit_tensor *a, const char *bn,
                                const dit_tensor *b, bool same_dtype, dit_error *err) {
  if (dit_tensor_has_shape(b, a->ndim, a->shape) && (!same_dtype || a->dtype == b->dtype)) return DIT_OK;
  char s1[128], s2[128];
  dit_shape_str(a->shape, a->ndim, s1, sizeof s1);
  dit_shape_str(b->shape, b->ndim, s2, sizeof s2);
  if (!same_dtype) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s shape %s != %s shape %s", op, an, s1, bn, s2);
  return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s %s %s != %s %s %s", op, an, dit_dtype_name(a->dtype), s1, bn,
                    dit_dtype_name(b->dtype), s2);
}
