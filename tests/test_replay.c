/* dit_replay (src/backend/replay.c) against a fake backend that records: the first call
 * with a key runs the ops, the second records and launches them, later ones launch; keys
 * are told apart and evicted least-recently-used; a capture that fails, a backend that
 * says "not now" and a stale graph all fall back to running the ops; a real error from the
 * ops reaches the caller; a backend without capture just runs them. The CUDA graphs
 * themselves are checked on the GPU (test_flux2_gpu, test_bench_gpu). */
#include <stdlib.h>
#include <string.h>

#include "backend/replay.h"
#include "testing.h"

typedef struct fake {
  dit_backend be;
  dit_backend_ops ops;
  bool capturing;
  bool refuse_begin; /* capture_begin: "not now" */
  bool stale;        /* graph_launch: "not now" */
  long begun, graphs_live;
  struct work *w; /* whose counters a launch adds to */
} fake;

typedef struct fgraph {
  int ops; /* ops recorded */
} fgraph;

/* The "model": counts ops run and ops recorded; fails when told to. */
typedef struct work {
  fake *f;
  int ran, recorded, launched_ops;
  bool fail_capture; /* an op that cannot be recorded */
  bool fail_always;  /* a real error */
} work;

static fake *F(dit_backend *be) { return (fake *)be; }

static dit_status f_begin(dit_backend *be, dit_error *err) {
  if (F(be)->refuse_begin) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "not now");
  F(be)->capturing = true;
  F(be)->begun++;
  return DIT_OK;
}

static dit_status f_end(dit_backend *be, bool keep, void **graph, dit_error *err) {
  (void)err;
  F(be)->capturing = false;
  *graph = NULL;
  if (!keep) return DIT_OK;
  fgraph *g = calloc(1, sizeof *g);
  if (!g) return dit_errorf(err, DIT_ERR_NOMEM, "oom");
  g->ops = 1;
  F(be)->graphs_live++;
  *graph = g;
  return DIT_OK;
}

static dit_status f_launch(dit_backend *be, void *graph, dit_error *err) {
  if (F(be)->stale) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "stale");
  F(be)->w->launched_ops += ((fgraph *)graph)->ops;
  return DIT_OK;
}

static void f_free(dit_backend *be, void *graph) {
  F(be)->graphs_live--;
  free(graph);
}

static dit_status ops_fn(void *ctx, dit_error *err) {
  work *w = ctx;
  if (w->fail_always) return dit_errorf(err, DIT_ERR_INVALID_ARG, "bad op");
  if (w->f->capturing) {
    if (w->fail_capture) return dit_errorf(err, DIT_ERR_INTERNAL, "cannot record");
    w->recorded++;
  } else {
    w->ran++;
  }
  return DIT_OK;
}

static void fake_init(fake *f, bool with_capture) {
  memset(f, 0, sizeof *f);
  f->ops.name = "fake";
  if (with_capture) {
    f->ops.capture_begin = f_begin;
    f->ops.capture_end = f_end;
    f->ops.graph_launch = f_launch;
    f->ops.graph_free = f_free;
  }
  f->be.ops = &f->ops;
}

/* A fresh fake backend (with or without capture), its work counters and an empty replay cache. */
static void setup(fake *f, work *w, dit_replay *r, bool with_capture) {
  fake_init(f, with_capture);
  memset(w, 0, sizeof *w);
  w->f = f;
  f->w = w;
  memset(r, 0, sizeof *r);
}

static dit_status call(dit_replay *r, fake *f, work *w, int key) {
  dit_error err = {0};
  return dit_replay_run(r, &f->be, &key, sizeof key, ops_fn, w, &err);
}

static void test_sequence(const dt_args *args) {
  fake f;
  work w;
  dit_replay r;
  setup(&f, &w, &r, true);
  CHECK(call(&r, &f, &w, 7) == DIT_OK);
  CHECK(w.ran == 1 && w.recorded == 0 && w.launched_ops == 0); /* first: run */
  CHECK(call(&r, &f, &w, 7) == DIT_OK);
  CHECK(w.ran == 1 && w.recorded == 1 && w.launched_ops == 1); /* second: record + launch */
  CHECK(call(&r, &f, &w, 7) == DIT_OK);
  CHECK(call(&r, &f, &w, 7) == DIT_OK);
  CHECK(w.ran == 1 && w.recorded == 1 && w.launched_ops == 3); /* then launch only */
  CHECK(r.captures == 1 && r.launches == 3 && r.eager == 1);
  /* another key: its own first run, the first key's graph kept */
  CHECK(call(&r, &f, &w, 8) == DIT_OK);
  CHECK(w.ran == 2 && f.graphs_live == 1);
  CHECK(call(&r, &f, &w, 7) == DIT_OK);
  CHECK(w.launched_ops == 4);
  /* more keys than slots: the least recently used (8) is evicted, then 7 still launches */
  for (int k = 100; k < 100 + DIT_REPLAY_SLOTS - 1; k++) CHECK(call(&r, &f, &w, k) == DIT_OK);
  CHECK(call(&r, &f, &w, 7) == DIT_OK);
  CHECK(w.launched_ops == 5);
  int ran = w.ran;
  CHECK(call(&r, &f, &w, 8) == DIT_OK); /* evicted: a first run again */
  CHECK(w.ran == ran + 1);
  dit_replay_clear(&r, &f.be);
  CHECK(f.graphs_live == 0);
}

static void test_failures(const dt_args *args) {
  fake f;
  work w;
  dit_replay r;
  setup(&f, &w, &r, true);
  /* an op that cannot be recorded: the call still runs the ops, and the key is not tried again */
  w.fail_capture = true;
  CHECK(call(&r, &f, &w, 1) == DIT_OK);
  CHECK(call(&r, &f, &w, 1) == DIT_OK);
  CHECK(call(&r, &f, &w, 1) == DIT_OK);
  CHECK(w.ran == 3 && w.launched_ops == 0 && f.begun == 1 && f.graphs_live == 0);
  w.fail_capture = false;
  /* "not now" from capture_begin: run, and try again on the next call */
  f.refuse_begin = true;
  CHECK(call(&r, &f, &w, 2) == DIT_OK);
  CHECK(call(&r, &f, &w, 2) == DIT_OK);
  CHECK(w.ran == 5 && f.begun == 1);
  f.refuse_begin = false;
  CHECK(call(&r, &f, &w, 2) == DIT_OK);
  CHECK(w.recorded == 1 && w.launched_ops == 1);
  /* a stale graph: run the ops now, record again on the next call */
  f.stale = true;
  CHECK(call(&r, &f, &w, 2) == DIT_OK);
  CHECK(w.ran == 6 && f.graphs_live == 0);
  f.stale = false;
  CHECK(call(&r, &f, &w, 2) == DIT_OK);
  CHECK(w.recorded == 2 && w.launched_ops == 2 && f.graphs_live == 1);
  /* a real error reaches the caller, in the first run and in the capture's fallback */
  w.fail_always = true;
  dit_error err = {0};
  int key = 3;
  CHECK(dit_replay_run(&r, &f.be, &key, sizeof key, ops_fn, &w, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "bad op") != NULL);
  CHECK(dit_replay_run(&r, &f.be, &key, sizeof key, ops_fn, &w, &err) == DIT_ERR_INVALID_ARG);
  CHECK(!f.capturing);
  dit_replay_clear(&r, &f.be);
  CHECK(f.graphs_live == 0);
}

static void test_no_capture(const dt_args *args) {
  fake f;
  work w;
  dit_replay r;
  setup(&f, &w, &r, false);
  for (int i = 0; i < 3; i++) CHECK(call(&r, &f, &w, 5) == DIT_OK);
  CHECK(w.ran == 3 && w.recorded == 0 && r.captures == 0);
  dit_replay_clear(&r, &f.be);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_sequence, test_failures, test_no_capture};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
