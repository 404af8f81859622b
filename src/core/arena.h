/* Arena: one allocation split into aligned pieces, freed all at once. A plan pass can
 * run the same code with a "measuring" arena (no memory) to learn the size needed, so
 * nothing is allocated inside a sampler loop. */
#ifndef DIT_CORE_ARENA_H
#define DIT_CORE_ARENA_H

#include <stddef.h>

#include "core/error.h"

#define DIT_ARENA_ALIGN 64

typedef struct dit_arena {
  unsigned char *base; /* NULL for a measuring arena */
  size_t cap;          /* bytes available (ignored when measuring) */
  size_t used;         /* bytes handed out so far */
  size_t peak;         /* high-water mark of `used` */
} dit_arena;

/* Allocates cap bytes (64-byte aligned). Returns DIT_ERR_NOMEM on failure. */
dit_status dit_arena_init(dit_arena *a, size_t cap, dit_error *err);
/* A measuring arena: allocations succeed with NULL and only count bytes. */
void dit_arena_init_measure(dit_arena *a);
/* Returns an aligned block of n bytes, or NULL (with err set) when the arena is full.
 * A measuring arena returns NULL and sets nothing. */
void *dit_arena_alloc(dit_arena *a, size_t n, dit_error *err);
/* Same, for n floats. */
float *dit_arena_floats(dit_arena *a, size_t n, dit_error *err);
/* Position marks: everything allocated after `mark` is released by dit_arena_reset. */
size_t dit_arena_mark(const dit_arena *a);
void dit_arena_reset(dit_arena *a, size_t mark);
void dit_arena_free(dit_arena *a);

#endif
