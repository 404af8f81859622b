/* What `ditrun bench` needs of a family: its benchmark variants (family.h's `bench`, a
 * list ended by a row whose name is NULL), each with its name for `bench --arch`, the
 * default caption length, which geometry of the family it is, and the family's bench
 * operations: a random-weight model at the geometry, its token counts and FLOPs per
 * forward, the forward's inputs and the forward itself. The timing, profiling and
 * reporting around them is src/api/bench.c's, the same for every family. */
#ifndef DIT_PIPELINE_FAMILY_BENCH_H
#define DIT_PIPELINE_FAMILY_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/ctx.h"
#include "core/options.h"

/* One forward's inputs on the bench backend: x, the text features and out (the bench
 * allocates and fills their data), and host position ids where the model takes them. */
typedef struct dit_bench_io {
  dit_tensor x, cap, out;
  float *img_ids, *txt_ids; /* malloc'd by the family's inputs (or NULL), freed by the bench */
  float *vec;               /* a host text vector (FLUX.1's pooled CLIP output), likewise */
} dit_bench_io;

typedef struct dit_bench_variant dit_bench_variant;

typedef struct dit_bench_ops {
  /* The model under test on be: random weights (p->dtype, p->seed) at v's geometry with p's
   * overrides, activations in adt. */
  dit_status (*create)(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                       dit_backend *be, dit_dtype adt, void **model, dit_error *err);
  /* Tokens as computed (padded where the model pads; aux: a second stream's, such as LTX-2's
   * audio, else 0) and FLOPs of one forward at p's resolution and text length. */
  void (*geometry)(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                   int64_t *aux_tokens, double *flops);
  /* The shapes of io's x, cap and out at p's resolution and text length (data left NULL)
   * and the host ids. */
  dit_status (*inputs)(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err);
  /* One forward at t = 0.5 (not synchronised). */
  dit_status (*forward)(void *model, dit_bench_io *io, dit_error *err);
  size_t (*weight_bytes)(const void *model);
  uint64_t (*weight_params)(const void *model);
  void (*graph_counts)(const void *model, long *captures, long *launches);
  void (*free)(void *model);
  const char *flops_what; /* the FLOP formula, as the report prints it */
} dit_bench_ops;

/* Defines `static const dit_bench_ops name` from the family's create, geometry, inputs and
 * forward and the model's own prefix##_weight_bytes, prefix##_graph_counts, prefix##_free. */
#define DIT_BENCH_OPS(name, prefix, create_fn, geometry_fn, inputs_fn, forward_fn, what)                          \
  static size_t name##_weight_bytes(const void *m) { return prefix##_weight_bytes(m); }                          \
  static uint64_t name##_weight_params(const void *m) { return prefix##_weight_params(m); }                      \
  static void name##_graph_counts(const void *m, long *c, long *l) { prefix##_graph_counts(m, c, l); }           \
  static void name##_free(void *m) { prefix##_free(m); }                                                          \
  static const dit_bench_ops name = {create_fn,           geometry_fn,          inputs_fn,                          \
                                     forward_fn,          name##_weight_bytes,  name##_weight_params,               \
                                     name##_graph_counts, name##_free,          what}

struct dit_bench_variant {
  const char *name;          /* bench --arch: "flux2-klein-4b" */
  int text_len;              /* default caption tokens */
  int geometry;              /* which geometry of the family (klein: 0 = 4B, 1 = 9B) */
  const dit_bench_ops *ops;
  int frames;                /* a video model's default frame count (its bench takes WxH and frames);
                                0: an image model (square images) */
};

/* The bench's input values (bench.c): uniform in [-1.7, 1.7) (unit variance), deterministic
 * in key; for a family's inputs beyond x and cap. */
void dit_bench_fill_host(float *d, size_t n, uint64_t key);

#endif
