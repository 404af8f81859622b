/* Tensor descriptor: dtype, shape, strides (in elements), device and a data pointer.
 * A descriptor never owns its data; arenas, mapped files or backends do. */
#ifndef DIT_CORE_TENSOR_H
#define DIT_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

#define DIT_MAX_DIMS 8

typedef enum dit_device { DIT_DEV_CPU = 0, DIT_DEV_CUDA = 1 } dit_device;

typedef struct dit_tensor {
  dit_dtype dtype;
  int ndim;
  int64_t shape[DIT_MAX_DIMS];
  int64_t stride[DIT_MAX_DIMS]; /* in elements */
  dit_device device;
  void *data;
  /* A weight's values are its stored elements times this (per-tensor scaled fp8
   * checkpoints); 0 means 1. Only the linear and embedding ops read it (dit_tensor_scale). */
  float scale;
  /* A weight's run-time low-rank term (LoRA on quantized weights, models/lora.c), or NULL:
   * the linear op computes x (W + B A)^T with B A never formed at W's size. Only linear reads
   * it; views made from a weight by the dit_tensor_* constructors do not carry it. */
  const struct dit_lowrank *lowrank;
} dit_tensor;

/* W's low-rank term: a [R, K] and b [N, R] (on W's device: F32 on the CPU, BF16 on a GPU; b
 * holds the scales), the pairs of every LoRA on W side by side along R. */
typedef struct dit_lowrank {
  dit_tensor a, b;
} dit_lowrank;

static inline float dit_tensor_scale(const dit_tensor *t) { return t->scale != 0.0f ? t->scale : 1.0f; }

/* A contiguous row-major descriptor over `data` (ndim <= DIT_MAX_DIMS). */
dit_tensor dit_tensor_make(dit_dtype dtype, void *data, int ndim, const int64_t *shape);
/* Shorthands for contiguous 1-4 D descriptors. */
dit_tensor dit_tensor_1d(dit_dtype dtype, void *data, int64_t d0);
dit_tensor dit_tensor_2d(dit_dtype dtype, void *data, int64_t d0, int64_t d1);
dit_tensor dit_tensor_3d(dit_dtype dtype, void *data, int64_t d0, int64_t d1, int64_t d2);
dit_tensor dit_tensor_4d(dit_dtype dtype, void *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3);

int64_t dit_tensor_numel(const dit_tensor *t);
/* Bytes of the contiguous data (block types: whole blocks; the last dim is a multiple of
 * the block). */
size_t dit_tensor_nbytes(const dit_tensor *t);
bool dit_tensor_is_contiguous(const dit_tensor *t);
/* True when the element ranges of contiguous a and b share a byte. */
bool dit_tensor_bytes_overlap(const dit_tensor *a, const dit_tensor *b);
/* A tensor seen as P blocks of M rows of its last dim C: row (p, m) starts at element
 * p * ps + m * rs; the last dim has unit stride. Strided views (column slices of a wider
 * buffer, row ranges of a longer sequence per batch item) have this form. */
typedef struct dit_rowview {
  int64_t P, M, C, ps, rs;
} dit_rowview;
/* Merges t's leading dims where their strides allow. Returns false (v unspecified) when the
 * last dim's stride is not 1, a stride is negative, or more than two irregular groups of
 * leading dims remain. A contiguous tensor gives P = 1, M = rows, rs = C. */
bool dit_tensor_rowview(const dit_tensor *t, dit_rowview *v);
/* Re-splits v into P blocks (v->P == P already, or v->P == 1 and M % P == 0). */
bool dit_rowview_split(dit_rowview *v, int64_t P);
/* Writes "[a, b, c]" into buf. Returns buf. */
char *dit_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);
/* When the n 2-D tensors parts[i] ([r_i, C], same dtype, device, C and scale, contiguous) lie back
 * to back in memory in this order, *out becomes one [sum r_i, C] tensor over them and the
 * result is true; otherwise false (*out untouched). */
bool dit_tensor_stack_rows(const dit_tensor *const *parts, int n, dit_tensor *out);
/* Rows [r0, r0 + n) of a contiguous tensor (dim 0) as a view: the same dtype (block types
 * too: a row is whole blocks), device and trailing dims. */
dit_tensor dit_tensor_rows(const dit_tensor *t, int64_t r0, int64_t n);
/* True when the dims are non-negative and the product of the non-zero ones fits in int64, so
 * element counts, strides and their partial products of any order cannot overflow (a zero
 * dim does not excuse huge others). */
bool dit_shape_fits(const int64_t *shape, int ndim);
/* True if t has exactly this shape. */
bool dit_tensor_has_shape(const dit_tensor *t, int ndim, const int64_t *shape);

/* Overflow-checked size arithmetic: return false on overflow. */
bool dit_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);
bool dit_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);

#endif
