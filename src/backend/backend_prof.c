/* The profiling backend: forwards every call to an inner backend and, while enabled,
 * times each op and adds it to that op's total (linear and conv2d calls also to their shape's), so a
 * benchmark can split a forward into GEMM, attention and elementwise time. With the inner
 * backend's device timers (CUDA events) each op runs between two marks and nothing is
 * synchronized until dit_backend_profiler_finish; without them (CPU) it syncs around each
 * op and reads the host clock. Allocation sizes are tracked to report the peak bytes the
 * model allocated. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/grow.h"
#include "core/timer.h"

/* One slot per op of DIT_BACKEND_OPS: OP_linear, OP_rms_norm, ... */
#define PROF_OP_ENUM(name, params, args) OP_##name,
enum { DIT_BACKEND_OPS(PROF_OP_ENUM) OP_COUNT };
#undef PROF_OP_ENUM
#define PROF_OP_NAME(name, params, args) #name,
static const char *const op_names[OP_COUNT] = {DIT_BACKEND_OPS(PROF_OP_NAME)};
#undef PROF_OP_NAME

typedef struct prof_alloc {
  void *p;
  size_t bytes;
} prof_alloc;

/* One op timed on the device: its marks, read back by dit_backend_profiler_finish. */
typedef struct prof_rec {
  int op, shape; /* shape: index into st.shapes, or -1 */
  int a, b;      /* marks before and after */
} prof_rec;

typedef struct prof_backend {
  dit_backend be; /* first: the wrapper handed out */
  dit_backend_ops ops;
  dit_backend *inner;
  bool on;
  dit_prof_stats st;
  prof_alloc *allocs;
  size_t n_allocs, cap_allocs;
  prof_rec *recs;
  size_t n_recs, cap_recs;
} prof_backend;

const char *dit_prof_op_name(int op) { return op >= 0 && op < OP_COUNT ? op_names[op] : "?"; }

dit_op_class dit_prof_op_class(int op) {
  if (op == OP_linear || op == OP_conv2d || op == OP_conv3d) return DIT_OPC_GEMM;
  if (op == OP_attention) return DIT_OPC_ATTENTION;
  return DIT_OPC_ELEMENTWISE;
}

static prof_backend *P(dit_backend *be) { return (prof_backend *)be->impl; }

static bool has_timers(const dit_backend *in) {
  return in->ops->timer_mark && in->ops->timer_ms && in->ops->timer_reset;
}

/* Where one op's timing starts: a device mark, or a sync and the host clock. */
typedef struct op_clock {
  int mark;
  double t0;
} op_clock;

static dit_status clock_start(prof_backend *p, op_clock *c, dit_error *err) {
  dit_backend *in = p->inner;
  if (p->st.device_timed) return in->ops->timer_mark(in, &c->mark, err);
  DIT_TRY(in->ops->sync(in, err));
  c->t0 = dit_time_now();
  return DIT_OK;
}

/* Ends the timing of op (shape: its linear shape slot or -1) after it returned s. */
static dit_status clock_stop(prof_backend *p, const op_clock *c, int op, int shape, dit_status s, dit_error *err) {
  if (s != DIT_OK) return s;
  dit_backend *in = p->inner;
  p->st.calls[op]++;
  if (shape >= 0) p->st.shapes[shape].calls++;
  if (!p->st.device_timed) {
    DIT_TRY(in->ops->sync(in, err));
    double ms = (dit_time_now() - c->t0) * 1e3;
    p->st.ms[op] += ms;
    if (shape >= 0) p->st.shapes[shape].ms += ms;
    return DIT_OK;
  }
  prof_rec *recs = dit_grow(p->recs, p->n_recs, &p->cap_recs, sizeof *recs, 1024);
  if (!recs) return dit_errorf(err, DIT_ERR_NOMEM, "profiler: out of memory");
  p->recs = recs;
  prof_rec *r = &p->recs[p->n_recs];
  DIT_TRY(in->ops->timer_mark(in, &r->b, err));
  r->op = op, r->shape = shape, r->a = c->mark;
  p->n_recs++;
  return DIT_OK;
}

/* Runs `call` on the inner backend; when profiling, timed as op opi (linear shape slot shp). */
#define FORWARD_SHAPE(opi, shp, call)                                  \
  do {                                                                 \
    prof_backend *p_ = P(be);                                          \
    dit_backend *in = p_->inner;                                       \
    if (!p_->on) return (call);                                        \
    op_clock c_;                                                       \
    DIT_TRY(clock_start(p_, &c_, err));                                \
    dit_status s_ = (call);                                            \
    return clock_stop(p_, &c_, opi, shp, s_, err);                     \
  } while (0)
#define FORWARD(opi, call) FORWARD_SHAPE(opi, -1, call)

/* The slot of shape (m, n, k, conv), -1 when the table is full. */
static int slot_of(prof_backend *p, int64_t m, int64_t n, int64_t k, bool conv) {
  for (int i = 0; i < p->st.n_shapes; i++) {
    const dit_prof_shape *s = &p->st.shapes[i];
    if (s->m == m && s->n == n && s->k == k && s->conv == conv) return i;
  }
  if (p->st.n_shapes == DIT_PROF_SHAPES) return -1;
  p->st.shapes[p->st.n_shapes] = (dit_prof_shape){m, n, k, 0, 0.0, conv};
  return p->st.n_shapes++;
}

/* The shape slot of a linear call (y[m, n] = x[m, k] w^T), -1 when the table is full. */
static int shape_slot(prof_backend *p, const dit_tensor *x, const dit_tensor *w) {
  if (!p->on || !x || !w || w->ndim != 2) return -1;
  const int64_t n = w->shape[0], k = w->shape[1], m = k > 0 ? dit_tensor_numel(x) / k : 0;
  return slot_of(p, m, n, k, false);
}

/* The shape slot of a conv2d call as its implicit GEMM: m output pixels (B Ho Wo), n = Co,
 * k = Ci kh kw. */
static int conv_slot(prof_backend *p, const dit_tensor *y, const dit_tensor *w) {
  if (!p->on || !y || !w || w->ndim != 4 || y->ndim != 4 || w->shape[0] < 1) return -1;
  const int64_t n = w->shape[0], k = w->shape[1] * w->shape[2] * w->shape[3];
  return slot_of(p, dit_tensor_numel(y) / n, n, k, true);
}

static dit_status w_alloc(dit_backend *be, size_t bytes, void **out, dit_error *err) {
  prof_backend *p = P(be);
  prof_alloc *a = dit_grow(p->allocs, p->n_allocs, &p->cap_allocs, sizeof *a, 16);
  if (!a) return dit_errorf(err, DIT_ERR_NOMEM, "profiler: out of memory");
  p->allocs = a;
  DIT_TRY(p->inner->ops->alloc(p->inner, bytes, out, err));
  p->allocs[p->n_allocs++] = (prof_alloc){*out, bytes};
  p->st.live_bytes += bytes;
  if (p->st.live_bytes > p->st.peak_bytes) p->st.peak_bytes = p->st.live_bytes;
  return DIT_OK;
}

static void w_free(dit_backend *be, void *ptr) {
  prof_backend *p = P(be);
  for (size_t i = 0; i < p->n_allocs; i++) {
    if (p->allocs[i].p == ptr) {
      p->st.live_bytes -= p->allocs[i].bytes;
      p->allocs[i] = p->allocs[--p->n_allocs];
      break;
    }
  }
  p->inner->ops->free(p->inner, ptr);
}

static dit_status w_upload(dit_backend *be, void *dst, const void *src, size_t bytes, dit_error *err) {
  dit_backend *in = P(be)->inner;
  return in->ops->upload(in, dst, src, bytes, err);
}
static dit_status w_download(dit_backend *be, void *dst, const void *src, size_t bytes, dit_error *err) {
  dit_backend *in = P(be)->inner;
  return in->ops->download(in, dst, src, bytes, err);
}
static dit_status w_sync(dit_backend *be, dit_error *err) {
  dit_backend *in = P(be)->inner;
  return in->ops->sync(in, err);
}

static dit_status w_linear(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                           const dit_tensor *b, dit_act act, dit_error *err) {
  const int shp = shape_slot(P(be), x, w);
  FORWARD_SHAPE(OP_linear, shp, in->ops->linear(in, y, x, w, b, act, err));
}
static dit_status w_conv2d_shaped(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                                  const dit_tensor *b, int stride, int pad, dit_error *err) {
  const int shp = conv_slot(P(be), y, w);
  FORWARD_SHAPE(OP_conv2d, shp, in->ops->conv2d(in, y, x, w, b, stride, pad, err));
}
/* Every other op: forwarded, timed as its own slot (conv2d's generated forwarder is
 * replaced by w_conv2d_shaped, which also splits its calls by shape). */
#define PROF_FORWARDER(name, params, args)                                   \
  static inline dit_status w_##name(dit_backend *be, DIT_EXPAND params) {    \
    FORWARD(OP_##name, in->ops->name(in, DIT_EXPAND args));                   \
  }
DIT_BACKEND_OTHER_OPS(PROF_FORWARDER)
#undef PROF_FORWARDER

/* Graph capture passes through while the profiler is off; while it times ops, it answers
 * "not now" so the ops run one by one. */
static dit_status w_capture_begin(dit_backend *be, dit_error *err) {
  prof_backend *p = P(be);
  if (p->on) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "profiler: no capture while timing ops");
  return p->inner->ops->capture_begin(p->inner, err);
}
static dit_status w_capture_end(dit_backend *be, bool keep, void **graph, dit_error *err) {
  return P(be)->inner->ops->capture_end(P(be)->inner, keep, graph, err);
}
static dit_status w_graph_launch(dit_backend *be, void *graph, dit_error *err) {
  prof_backend *p = P(be);
  if (p->on) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "profiler: no graphs while timing ops");
  return p->inner->ops->graph_launch(p->inner, graph, err);
}
static void w_graph_free(dit_backend *be, void *graph) { P(be)->inner->ops->graph_free(P(be)->inner, graph); }
static void w_trim(dit_backend *be) { dit_backend_trim(P(be)->inner); }

dit_status dit_backend_profiler_create(dit_backend *inner, dit_backend **out, dit_error *err) {
  *out = NULL;
  if (!inner) return dit_errorf(err, DIT_ERR_INVALID_ARG, "profiler: no inner backend");
  prof_backend *p = calloc(1, sizeof *p);
  if (!p) return dit_errorf(err, DIT_ERR_NOMEM, "profiler: out of memory");
  const dit_backend_ops *io = inner->ops;
  p->inner = inner;
  p->st.device_timed = has_timers(inner);
  p->ops = (dit_backend_ops){
      .name = io->name, .alloc = w_alloc, .free = w_free, .upload = w_upload, .download = w_download,
      .sync = w_sync, .destroy = NULL};
  /* keep an op NULL where the inner backend lacks it */
#define SET_OP(name, params, args) p->ops.name = io->name ? w_##name : NULL;
  DIT_BACKEND_OPS(SET_OP)
#undef SET_OP
  if (io->conv2d) p->ops.conv2d = w_conv2d_shaped;
  p->ops.capture_begin = io->capture_begin ? w_capture_begin : NULL;
  p->ops.capture_end = io->capture_end ? w_capture_end : NULL;
  p->ops.graph_launch = io->graph_launch ? w_graph_launch : NULL;
  p->ops.graph_free = io->graph_free ? w_graph_free : NULL;
  p->ops.trim = io->trim ? w_trim : NULL;
  p->be.ops = &p->ops;
  p->be.n_threads = inner->n_threads;
  p->be.fp8 = inner->fp8;
  p->be.impl = p;
  *out = &p->be;
  return DIT_OK;
}

void dit_backend_profiler_enable(dit_backend *prof, bool on) { P(prof)->on = on; }

void dit_backend_profiler_reset(dit_backend *prof) {
  prof_backend *p = P(prof);
  memset(p->st.ms, 0, sizeof p->st.ms);
  memset(p->st.calls, 0, sizeof p->st.calls);
  p->st.n_shapes = 0;
  p->st.span_ms = 0;
  p->st.device_timed = has_timers(p->inner);
  p->n_recs = 0;
  if (p->st.device_timed) p->inner->ops->timer_reset(p->inner);
}

dit_status dit_backend_profiler_finish(dit_backend *prof, dit_error *err) {
  prof_backend *p = P(prof);
  if (!p->st.device_timed || !p->n_recs) return DIT_OK;
  dit_backend *in = p->inner;
  dit_status s = DIT_OK;
  for (size_t i = 0; i < p->n_recs && s == DIT_OK; i++) {
    const prof_rec *r = &p->recs[i];
    double ms = 0;
    s = in->ops->timer_ms(in, r->a, r->b, &ms, err);
    p->st.ms[r->op] += ms;
    if (r->shape >= 0) p->st.shapes[r->shape].ms += ms;
  }
  if (s == DIT_OK) s = in->ops->timer_ms(in, p->recs[0].a, p->recs[p->n_recs - 1].b, &p->st.span_ms, err);
  p->n_recs = 0;
  in->ops->timer_reset(in);
  return s;
}

const dit_prof_stats *dit_backend_profiler_stats(const dit_backend *prof) {
  return &((const prof_backend *)prof->impl)->st;
}

void dit_backend_profiler_free(dit_backend *prof) {
  if (!prof) return;
  prof_backend *p = P(prof);
  free(p->allocs);
  free(p->recs);
  free(p);
}
