/* dit_replay: run, record or launch a model's op sequence (see replay.h). */
#include "backend/replay.h"

#include <stdlib.h>
#include <string.h>

static void slot_drop(dit_replay_slot *s, dit_backend *be) {
  if (s->graph && be->ops->graph_free) be->ops->graph_free(be, s->graph);
  free(s->key);
  memset(s, 0, sizeof *s);
}

/* The slot holding key, or a fresh one (the least recently used is dropped). */
static dit_replay_slot *slot_for(dit_replay *r, dit_backend *be, const void *key, size_t key_bytes) {
  dit_replay_slot *lru = &r->slot[0];
  for (int i = 0; i < DIT_REPLAY_SLOTS; i++) {
    dit_replay_slot *s = &r->slot[i];
    if (s->key && s->key_bytes == key_bytes && !memcmp(s->key, key, key_bytes)) return s;
    if (!s->key || (lru->key && s->used < lru->used)) lru = s;
  }
  slot_drop(lru, be);
  lru->key = malloc(key_bytes ? key_bytes : 1);
  if (!lru->key) return NULL;
  memcpy(lru->key, key, key_bytes);
  lru->key_bytes = key_bytes;
  return lru;
}

static dit_status eager(dit_replay *r, dit_replay_slot *s, dit_replay_fn fn, void *ctx, dit_error *err) {
  r->eager++;
  if (s) s->runs++;
  return fn(ctx, err);
}

/* Records fn into s->graph. Returns DIT_OK with s->graph set, or with s->no_capture set
 * (the caller then runs fn). */
static void capture(dit_replay *r, dit_replay_slot *s, dit_backend *be, dit_replay_fn fn, void *ctx) {
  dit_error e;
  if (be->ops->capture_begin(be, &e) != DIT_OK) return; /* not now: try again next call */
  dit_status st = fn(ctx, &e);
  void *g = NULL;
  dit_error e2;
  dit_status se = be->ops->capture_end(be, st == DIT_OK, &g, &e2);
  if (st != DIT_OK || se != DIT_OK || !g) {
    if (g) be->ops->graph_free(be, g);
    s->no_capture = true;
    return;
  }
  s->graph = g;
  r->captures++;
}

dit_status dit_replay_run(dit_replay *r, dit_backend *be, const void *key, size_t key_bytes, dit_replay_fn fn,
                          void *ctx, dit_error *err) {
  const dit_backend_ops *o = be->ops;
  if (!o->capture_begin || !o->capture_end || !o->graph_launch || !o->graph_free) return eager(r, NULL, fn, ctx, err);
  dit_replay_slot *s = slot_for(r, be, key, key_bytes);
  if (!s) return eager(r, NULL, fn, ctx, err);
  s->used = ++r->clock;
  if (!s->graph && s->runs >= 1 && !s->no_capture) capture(r, s, be, fn, ctx);
  if (!s->graph) return eager(r, s, fn, ctx, err);
  dit_status st = o->graph_launch(be, s->graph, err);
  if (st == DIT_OK) {
    r->launches++;
    return DIT_OK;
  }
  if (st != DIT_ERR_UNSUPPORTED) return st;
  /* stale or not now: run the ops; a later call records them again */
  o->graph_free(be, s->graph);
  s->graph = NULL;
  s->runs = 0;
  return eager(r, s, fn, ctx, err);
}

void dit_replay_clear(dit_replay *r, dit_backend *be) {
  for (int i = 0; i < DIT_REPLAY_SLOTS; i++) slot_drop(&r->slot[i], be);
}
