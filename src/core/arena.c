/* Arena allocator (see arena.h). */
#include "core/arena.h"

#include <stdlib.h>
#include <string.h>

dit_status dit_arena_init(dit_arena *a, size_t cap, dit_error *err) {
  memset(a, 0, sizeof *a);
  size_t rounded = (cap + DIT_ARENA_ALIGN - 1) / DIT_ARENA_ALIGN * DIT_ARENA_ALIGN;
  if (rounded < cap) return dit_errorf(err, DIT_ERR_NOMEM, "arena of %zu bytes is too large", cap);
  if (rounded == 0) rounded = DIT_ARENA_ALIGN;
  a->base = aligned_alloc(DIT_ARENA_ALIGN, rounded);
  if (!a->base) return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate an arena of %zu bytes", cap);
  a->cap = rounded;
  return DIT_OK;
}

void dit_arena_init_measure(dit_arena *a) { memset(a, 0, sizeof *a); }

void *dit_arena_alloc(dit_arena *a, size_t n, dit_error *err) {
  size_t need = (n + DIT_ARENA_ALIGN - 1) / DIT_ARENA_ALIGN * DIT_ARENA_ALIGN;
  if (need < n) {
    dit_errorf(err, DIT_ERR_NOMEM, "arena request of %zu bytes overflows", n);
    return NULL;
  }
  if (!a->base) {
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return NULL;
  }
  if (need > a->cap - a->used) {
    dit_errorf(err, DIT_ERR_NOMEM, "arena full: %zu bytes requested, %zu of %zu free", n,
               a->cap - a->used, a->cap);
    return NULL;
  }
  void *p = a->base + a->used;
  a->used += need;
  if (a->used > a->peak) a->peak = a->used;
  return p;
}

float *dit_arena_floats(dit_arena *a, size_t n, dit_error *err) {
  if (n > SIZE_MAX / sizeof(float)) {
    dit_errorf(err, DIT_ERR_NOMEM, "arena request of %zu floats overflows", n);
    return NULL;
  }
  return dit_arena_alloc(a, n * sizeof(float), err);
}

size_t dit_arena_mark(const dit_arena *a) { return a->used; }
void dit_arena_reset(dit_arena *a, size_t mark) {
  if (mark <= a->used) a->used = mark;
}

void dit_arena_free(dit_arena *a) {
  free(a->base);
  memset(a, 0, sizeof *a);
}
