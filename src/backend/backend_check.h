/* Operand checks every backend shares: an op validates each tensor it is given with these
 * (the backend supplies its device and the dtypes it computes in), so the rules and their
 * messages are the same on every backend. */
#ifndef DIT_BACKEND_CHECK_H
#define DIT_BACKEND_CHECK_H

#include "backend/backend.h"

/* Which activation dtypes a backend computes in (bits: 1 << dit_dtype). */
#define DIT_DTYPES(a) (1u << (a))
/* F32, BF16 or F16: the weight dtypes every backend reads. */
#define DIT_WEIGHT_DTYPES (DIT_DTYPES(DIT_F32) | DIT_DTYPES(DIT_BF16) | DIT_DTYPES(DIT_F16))

static inline bool dit_dtype_in(dit_dtype t, unsigned set) { return (unsigned)t < 32 && (set >> (unsigned)t) & 1u; }

/* t is non-NULL, on dev, with data (any layout). */
dit_status dit_check_placed(const char *op, const char *name, const dit_tensor *t, dit_device dev, dit_error *err);
/* As dit_check_placed, and contiguous. */
dit_status dit_check_present(const char *op, const char *name, const dit_tensor *t, dit_device dev, dit_error *err);
/* t's dtype is one of `dtypes` ("must be F32 or BF16, got F16"). */
dit_status dit_check_dtype(const char *op, const char *name, const dit_tensor *t, unsigned dtypes, dit_error *err);
/* Placed on dev, of one of `dtypes`, and rows of its last dim (see dit_tensor_rowview:
 * column slices and per-batch row ranges of wider buffers); fills v. */
dit_status dit_check_rows(const char *op, const char *name, const dit_tensor *t, dit_device dev, unsigned dtypes,
                          dit_rowview *v, dit_error *err);
/* A weight-like tensor: present on dev, F32/BF16/F16, exactly n elements (n < 0: any). */
dit_status dit_check_weight(const char *op, const char *name, const dit_tensor *t, dit_device dev, int64_t n,
                            dit_error *err);
/* A weight matrix: as dit_check_weight (any size), or a 2-D quantized tensor (fp8, or a
 * block type whose rows are whole blocks) for the linear and embedding ops. */
dit_status dit_check_matrix(const char *op, const char *name, const dit_tensor *t, dit_device dev, dit_error *err);
/* a and b have the same shape (and, when same_dtype, the same dtype). */
dit_status dit_check_same_shape(const char *op, const char *an, const dit_tensor *a, const char *bn,
                                const dit_tensor *b, bool same_dtype, dit_error *err);

/* A backend's check functions, PREFIX_check_act / _rows / _w / _same_shape, for its device
 * DEV, activation dtypes ACT (a DIT_DTYPES set) and whether operands of the same shape must
 * also share a dtype (SAME_DTYPE). Activations: contiguous, of ACT; rows: row views of ACT
 * (fills v); weights: contiguous, F32/BF16/F16, n elements (n < 0: any). */
#define DIT_BACKEND_CHECKS(PREFIX, DEV, ACT, SAME_DTYPE)                                                        \
  static inline dit_status PREFIX##_check_act(const char *op, const char *name, const dit_tensor *t,            \
                                              dit_error *err) {                                                 \
    DIT_TRY(dit_check_present(op, name, t, DEV, err));                                                          \
    return dit_check_dtype(op, name, t, ACT, err);                                                              \
  }                                                                                                             \
  static inline dit_status PREFIX##_check_rows(const char *op, const char *name, const dit_tensor *t,           \
                                               dit_rowview *v, dit_error *err) {                                \
    return dit_check_rows(op, name, t, DEV, ACT, v, err);                                                       \
  }                                                                                                             \
  static inline dit_status PREFIX##_check_w(const char *op, const char *name, const dit_tensor *t, int64_t n,   \
                                            dit_error *err) {                                                   \
    return dit_check_weight(op, name, t, DEV, n, err);                                                          \
  }                                                                                                             \
  static inline dit_status PREFIX##_check_same_shape(const char *op, const char *an, const dit_tensor *a,       \
                                                     const char *bn, const dit_tensor *b, dit_error *err) {     \
    return dit_check_same_shape(op, an, a, bn, b, SAME_DTYPE, err);                                             \
  }

#endif
