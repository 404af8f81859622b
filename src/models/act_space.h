/* Where a transformer's activations live (the device tag of its backend's memory, the
 * activation dtype and its element size, the activation buffer and the host scratch for
 * its tables, both reused across calls that fit) and the tensor descriptors its forward
 * builds over that memory. */
#ifndef DIT_MODELS_ACT_SPACE_H
#define DIT_MODELS_ACT_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/tensor.h"

typedef struct dit_act_space {
  dit_device dev; /* device tag of backend memory */
  dit_dtype adt;  /* activation dtype: F32, or BF16 on GPU backends */
  size_t es;      /* its element size */
  void *act;      /* activation buffer (backend memory) */
  size_t act_bytes;
  void *host;     /* host scratch for the tables (64-byte aligned) */
  size_t host_bytes;
} dit_act_space;

/* In a plan pass over the arena ar (a measuring one, or the real buffer when real): ptr =
 * the next bytes of it; on a full real arena the enclosing function returns DIT_ERR_NOMEM
 * (err names the size). */
#define DIT_ACT_TAKE(ar, real, ptr, bytes)           \
  do {                                               \
    (ptr) = dit_arena_alloc((ar), (bytes), err);     \
    if ((real) && !(ptr)) return DIT_ERR_NOMEM;      \
  } while (0)

/* F32 activations on be's device, no buffers yet. */
void dit_act_space_init(dit_act_space *s, const dit_backend *be);
/* Activations in dt (checked against be as `who`); a new dtype drops the activation buffer,
 * whose planned layout depends on the element size (*changed says so: cached tables in it
 * are gone). */
dit_status dit_act_space_set_dtype(dit_act_space *s, dit_backend *be, dit_dtype dt, const char *who, bool *changed,
                                   dit_error *err);
/* After a plan pass over the measuring arena ar: grows the activation buffer to ar's peak
 * and the host scratch to host_bytes (each kept when it fits; *grew says whether either was
 * replaced, which makes cached tables stale), then points ar at the activation buffer for
 * the real pass. */
dit_status dit_act_space_fit(dit_act_space *s, dit_backend *be, dit_arena *ar, size_t host_bytes, bool *grew,
                             dit_error *err);
void dit_act_space_release(dit_act_space *s, dit_backend *be);

/* A descriptor over backend memory: dtype dt, the backend's device tag. */
static inline dit_tensor dit_act_mk(const dit_act_space *s, dit_dtype dt, void *p, int nd, const int64_t *shape) {
  dit_tensor t = dit_tensor_make(dt, p, nd, shape);
  t.device = s->dev;
  return t;
}
/* Activations (the activation dtype). */
static inline dit_tensor dit_act_2d(const dit_act_space *s, void *p, int64_t a, int64_t b) {
  return dit_act_mk(s, s->adt, p, 2, (int64_t[]){a, b});
}
static inline dit_tensor dit_act_3d(const dit_act_space *s, void *p, int64_t a, int64_t b, int64_t c) {
  return dit_act_mk(s, s->adt, p, 3, (int64_t[]){a, b, c});
}
static inline dit_tensor dit_act_4d(const dit_act_space *s, void *p, int64_t a, int64_t b, int64_t c, int64_t d) {
  return dit_act_mk(s, s->adt, p, 4, (int64_t[]){a, b, c, d});
}
/* p advanced by n activation elements. */
static inline void *dit_act_el(const dit_act_space *s, void *p, int64_t n) { return (char *)p + (size_t)n * s->es; }

#endif
