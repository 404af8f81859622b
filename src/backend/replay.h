/* Replay of a fixed op sequence through the backend's graph capture (CUDA graphs). A model
 * wraps the ops of its forward in a function and calls dit_replay_run with a key that
 * names everything the recorded ops depend on besides memory contents: the geometry and
 * every buffer address they touch. The first call with a key runs the ops (plans, caches
 * and workspaces settle there), the second records them into a graph and launches it, and
 * later calls launch that graph. A backend without capture (the CPU), or one that says
 * "not now", just runs the function. A capture that fails (an op that cannot be recorded)
 * runs the function instead and that key is not captured again.
 *
 * The function must issue the same ops on the same addresses whenever the key is the same,
 * and must not read device results on the host (no download, no sync) in between. */
#ifndef DIT_BACKEND_REPLAY_H
#define DIT_BACKEND_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define DIT_REPLAY_SLOTS 4

typedef struct dit_replay_slot {
  void *key;       /* copy of the key bytes (NULL: slot empty) */
  size_t key_bytes;
  void *graph;     /* captured graph, or NULL */
  int runs;        /* eager runs with this key so far */
  bool no_capture; /* capture failed once for this key */
  uint64_t used;   /* last use (LRU) */
} dit_replay_slot;

typedef struct dit_replay {
  dit_replay_slot slot[DIT_REPLAY_SLOTS];
  uint64_t clock;
  long launches, captures, eager; /* counts, for reports and tests */
} dit_replay;

typedef dit_status (*dit_replay_fn)(void *ctx, dit_error *err);

/* Runs fn(ctx) on be, or the graph recorded for key. r starts zeroed. */
dit_status dit_replay_run(dit_replay *r, dit_backend *be, const void *key, size_t key_bytes, dit_replay_fn fn,
                          void *ctx, dit_error *err);
/* Frees every graph and key (before the model's buffers or the backend go away). */
void dit_replay_clear(dit_replay *r, dit_backend *be);

#endif
