/* conv2d forward through cuDNN's backend (graph) C API, for the VAE's 3x3 and 1x1 convs.
 * Why: im2col + cuBLASLt reaches 29-106 TFLOP/s on those shapes on an H200 (the im2col traffic
 * dominates); cuDNN's implicit-GEMM engines read the activation in place.
 *
 * The graph, per shape (B, Ci, H, W, Co, kh, kw, stride, pad, dtypes):
 *   A = conv_fwd(X, W)        cross-correlation, fp32 compute, dilation 1, symmetric padding;
 *                             X [B,Ci,H,W], W [Co,Ci,kh,kw] in the 16-bit dtype cdt (BF16 or F16)
 *   Y = A + bias[1,Co,1,1]    "fused" ending: A virtual (fp32), a pointwise ADD (IDENTITY
 *                             without bias) writes Y in y's dtype (a 16-bit y: the bias
 *                             converted to it per call);
 * or  Y = A                   "direct" ending: the conv writes Y (y's dtype), the bias is added
 *                             after by cuk_bias_channel;
 * or  Y16 = A                 "16-bit out": the conv writes cdt into scratch, converted into y
 *                             (and the bias added) after.
 * Tensors are described NCHW (dit's [B,C,H,W] contiguous layout, read in place), or NHWC (KRSC
 * weights): then x and w are copied into scratch in that layout and y comes back through
 * scratch. Each layout's endings are tried in turn (fused first with a bias), NCHW first; the
 * first graph for which an engine config finalizes wins. NCHW first, as measured on an H200 with
 * cuDNN 9.19 (BF16, bias; whole op): [1,512,128,128]->512 3x3 0.168 ms (460 TFLOP/s) NCHW vs
 * 0.321 ms NHWC, [1,128,512,512]->128 3x3 0.310 ms (249 TFLOP/s) vs 0.966 ms, im2col + GEMM 0.731
 * and 2.68 ms. cuDNN's NHWC kernels alone are faster (0.10 and 0.11 ms) but the transposing
 * copies (cuk_copy) cost more than that; a fast transpose would make NHWC worth it for the
 * 128-channel shapes. DIT_CUDA_CUDNN_CONV_LAYOUT picks one layout (for measurements).
 * A y in F32 (BF16 operands): only a direct-ending engine takes it in NCHW (0.605 ms for the
 * 128-channel shape with F32 x, 128 TFLOP/s); kept for its fp32 output rather than the 16-bit
 * ending.
 * Engines: heuristics mode A (the fallback list only when A gives nothing), the first
 * CONV_CANDS configs that finalize with a workspace <= ws_cap; on the shape's first call
 * outside a stream capture each is timed on the call's operands and the fastest kept
 * (DIT_CUDA_CUDNN_CONV_TUNE=0: the first, untimed).
 * Dtypes: x BF16 (w converted to BF16 per call into scratch when it is F32/F16: 512x512x3x3 is
 * 4.7 MB, a few microseconds, ~3% of that conv), or x F32 with BF16/F16 w (x converted into
 * scratch, the same rounding the im2col path applies). F32 x with F32 w is left to im2col: that
 * path computes in fp32 and callers rely on it (an F32 checkpoint gets this path by running
 * BF16 activations, or with its conv weights cast to BF16).
 * Buffers: the backend's scratch only (cu_scratch: its reallocations count in im->moves, which
 * invalidates captured graphs), sized the same on every call of a shape, so a call after the
 * shape's first eager one allocates nothing and does not sync: it can be captured. A shape not
 * seen yet while the stream is capturing goes to im2col (planning may allocate).
 * Fallbacks: no library, a refused shape (remembered), an execution error (the plan is dropped),
 * unaligned pointers: the caller's im2col path; one stderr line per refused shape
 * (DIT_CUDA_CUDNN_VERBOSE=0 none, 2 also each plan). */
#include "backend/cuda/cudnn_conv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/timer.h"

#ifndef DIT_HAVE_CUDNN

/* Built without cuDNN headers: never used. */
dit_status cu_cudnn_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                           const dit_tensor *b, int stride, int pad, bool *done, dit_error *err) {
  (void)be, (void)y, (void)x, (void)w, (void)b, (void)stride, (void)pad, (void)err;
  *done = false;
  return DIT_OK;
}

cu_conv_info cu_conv_get_info(const cu_sdpa *s) {
  (void)s;
  cu_conv_info i;
  memset(&i, 0, sizeof i);
  i.message = "built without cuDNN headers";
  return i;
}

#else

#include <cudnn_graph.h>

#include "backend/cuda/cudnn_lib.h"

#define CONV_MAX_PLANS 128
#define CONV_MAX_DESC 128 /* descriptors of one shape's graph and plans */
#define CONV_MAX_CFGS 16  /* heuristic results looked at per mode */
#define CONV_CANDS 4      /* engine configs finalized (and timed) per shape */
#define CONV_TUNE_RUNS 3
#define CONV_MAX_WS ((int64_t)1 << 30) /* workspace cap, or 4x the 16-bit x if larger (see ws_cap) */
#define CONV_ALIGN 16

enum { UID_X = 1, UID_W, UID_Y, UID_B, UID_ACC };
enum { LAY_NCHW, LAY_NHWC, LAYS };
enum { END_FUSED, END_DIRECT, END_HALF, ENDS };
static const char *const lay_name[LAYS] = {"NCHW", "NHWC"};
static const char *const end_name[ENDS] = {"fused pointwise", "direct", "16-bit out"};

/* All int64, so that keys compare with memcmp. */
typedef struct conv_key {
  int64_t B, Ci, H, W, Co, kh, kw, Ho, Wo, stride, pad;
  int64_t cdt, ydt, bdt; /* dit_dtype of x/w as cuDNN reads them, of y, of the bias (-1: none) */
} conv_key;

typedef struct conv_plan {
  conv_key k;
  bool ok;    /* false: refused or dropped, im2col */
  bool tuned; /* cand[0] is the one to run */
  int lay, end;
  int n_cand;
  cudnnBackendDescriptor_t cand[CONV_CANDS]; /* finalized execution plans */
  int64_t cand_ws[CONV_CANDS], cand_engine[CONV_CANDS];
  cudnnBackendDescriptor_t d[CONV_MAX_DESC]; /* every descriptor made for it, in creation order */
  int nd;
} conv_plan;

struct cu_conv {
  cu_cudnn lib; /* borrowed from the attention state */
  int lays[LAYS], n_lays;
  bool tune;
  long calls, fallbacks;
  int n_plans;
  conv_plan *plans[CONV_MAX_PLANS];
  char msg[1024];
};

/* Where a call's converted operands, output copy and workspace lie in the scratch. */
typedef struct conv_bufs {
  size_t x, w, b, y, ws, total; /* offsets; SIZE_MAX: not used */
} conv_bufs;

/* ---------------- diagnostics ---------------- */

#define note(st, ...) cu_cdn_note((st)->msg, sizeof (st)->msg, __VA_ARGS__)

/* One stderr line for events that change which kernel runs (once per shape at most). */
static void log_msg(const cu_conv *c, bool fallback) { cu_cdn_log(c->lib.log, c->msg, fallback, "im2col + GEMM"); }

static dit_status cdn_fail(cu_conv *c, cudnnStatus_t st, const char *call, const char *what, dit_error *err) {
  return cu_cdn_fail(c->lib.api, st, "cudnn conv", call, what, c->msg, sizeof c->msg, err);
}

#define CK(expr, call, what)                                                 \
  do {                                                                       \
    cudnnStatus_t st_ = (expr);                                              \
    if (st_ != CUDNN_STATUS_SUCCESS) return cdn_fail(c, st_, call, what, err); \
  } while (0)
#define SET(d, attr, type, n, ptr, what) \
  CK(c->lib.api->SetAttr((d), (attr), (type), (n), (ptr)), "cudnnBackendSetAttribute(" #attr ")", what)
#define FIN(d, what) CK(c->lib.api->Finalize(d), "cudnnBackendFinalize", what)

static void key_str(const conv_key *k, char *buf, size_t n) {
  snprintf(buf, n, "[%lld,%lld,%lld,%lld]->%lld k%lldx%lld s%lld p%lld x/w %s y %s%s%s", (long long)k->B,
           (long long)k->Ci, (long long)k->H, (long long)k->W, (long long)k->Co, (long long)k->kh, (long long)k->kw,
           (long long)k->stride, (long long)k->pad, dit_dtype_name((dit_dtype)k->cdt),
           dit_dtype_name((dit_dtype)k->ydt), k->bdt >= 0 ? " bias " : "",
           k->bdt >= 0 ? dit_dtype_name((dit_dtype)k->bdt) : "");
}

/* ---------------- graph building ---------------- */

static cudnnDataType_t cdn_dt(int64_t dt) {
  return dt == DIT_BF16 ? CUDNN_DATA_BFLOAT16 : dt == DIT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* Strides of a [N, C, H, W] tensor in layout lay (NCHW, or NHWC / KRSC). */
static void strides4(int lay, int64_t C, int64_t H, int64_t W, int64_t s[4]) {
  if (lay == LAY_NCHW) s[0] = C * H * W, s[1] = H * W, s[2] = W, s[3] = 1;
  else s[0] = H * W * C, s[1] = 1, s[2] = W * C, s[3] = C;
}

static dit_status d_new(cu_conv *c, conv_plan *p, cudnnBackendDescriptorType_t t, const char *what,
                        cudnnBackendDescriptor_t *out, dit_error *err) {
  *out = NULL;
  if (p->nd >= CONV_MAX_DESC) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cudnn conv: too many descriptors");
  CK(c->lib.api->CreateDesc(t, out), "cudnnBackendCreateDescriptor", what);
  p->d[p->nd++] = *out;
  return DIT_OK;
}

/* Destroys one descriptor of p now (a plan that did not finalize, a candidate that lost). */
static void d_drop(cu_conv *c, conv_plan *p, cudnnBackendDescriptor_t d) {
  for (int i = p->nd - 1; i >= 0; i--)
    if (p->d[i] == d) {
      c->lib.api->DestroyDesc(d);
      p->d[i] = NULL;
      return;
    }
}

static void free_descs(cu_conv *c, conv_plan *p) {
  for (int i = p->nd - 1; i >= 0; i--)
    if (p->d[i]) c->lib.api->DestroyDesc(p->d[i]);
  p->nd = 0;
  p->n_cand = 0;
}

static dit_status g_tensor(cu_conv *c, conv_plan *p, int64_t uid, int64_t dt, const int64_t dims[4],
                           const int64_t st[4], bool virt, const char *what, cudnnBackendDescriptor_t *out,
                           dit_error *err) {
  cudnnDataType_t t = cdn_dt(dt);
  int64_t align = CONV_ALIGN;
  cudnnBackendDescriptor_t d;
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what, &d, err));
  SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, what);
  SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, what);
  SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st, what);
  SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
  SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
  if (virt) SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what);
  FIN(d, what);
  *out = d;
  return DIT_OK;
}

/* The conv op (and the pointwise op of the fused ending) of p's variant into ops. */
static dit_status build_graph(cu_conv *c, conv_plan *p, cudnnBackendDescriptor_t ops[2], int *nops,
                              dit_error *err) {
  const conv_key *k = &p->k;
  const int64_t xd[4] = {k->B, k->Ci, k->H, k->W}, wd[4] = {k->Co, k->Ci, k->kh, k->kw};
  const int64_t yd[4] = {k->B, k->Co, k->Ho, k->Wo}, bd[4] = {1, k->Co, 1, 1};
  int64_t xs[4], ws[4], ys[4], bs[4];
  strides4(p->lay, k->Ci, k->H, k->W, xs);
  strides4(p->lay, k->Ci, k->kh, k->kw, ws);
  strides4(p->lay, k->Co, k->Ho, k->Wo, ys);
  strides4(p->lay, k->Co, 1, 1, bs);
  const int64_t gy = p->end == END_HALF ? k->cdt : k->ydt; /* dtype of the graph's output */
  cudnnBackendDescriptor_t X, W, Y, A, Bt = NULL, cd;
  DIT_TRY(g_tensor(c, p, UID_X, k->cdt, xd, xs, false, "x", &X, err));
  DIT_TRY(g_tensor(c, p, UID_W, k->cdt, wd, ws, false, "w", &W, err));
  DIT_TRY(g_tensor(c, p, UID_Y, gy, yd, ys, false, "y", &Y, err));
  A = Y;
  if (p->end == END_FUSED) {
    DIT_TRY(g_tensor(c, p, UID_ACC, DIT_F32, yd, ys, true, "conv accumulator", &A, err));
    if (k->bdt >= 0) DIT_TRY(g_tensor(c, p, UID_B, k->bdt, bd, bs, false, "bias", &Bt, err));
  }
  const char *what = "convolution";
  const int64_t sdims = 2, dil[2] = {1, 1}, fst[2] = {k->stride, k->stride}, pads[2] = {k->pad, k->pad};
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, what, &cd, err));
  SET(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sdims, what);
  SET(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
  SET(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, what);
  SET(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, what);
  SET(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, fst, what);
  SET(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads, what);
  SET(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads, what);
  FIN(cd, what);
  what = "convolution forward";
  const float alpha = 1.0f, beta = 0.0f;
  cudnnBackendDescriptor_t op;
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, what, &op, err));
  SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X, what);
  SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &W, what);
  SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &A, what);
  SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, what);
  SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, what);
  SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, what);
  FIN(op, what);
  ops[0] = op;
  *nops = 1;
  if (p->end != END_FUSED) return DIT_OK;
  what = Bt ? "bias add" : "identity";
  const cudnnPointwiseMode_t pm = Bt ? CUDNN_POINTWISE_ADD : CUDNN_POINTWISE_IDENTITY;
  cudnnBackendDescriptor_t pw, pop;
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what, &pw, err));
  SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pm, what);
  SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
  FIN(pw, what);
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what, &pop, err));
  SET(pop, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
  SET(pop, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &A, what);
  if (Bt) SET(pop, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Bt, what);
  SET(pop, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y, what);
  FIN(pop, what);
  ops[1] = pop;
  *nops = 2;
  return DIT_OK;
}

/* The global index of a config's engine (for the diagnostics), -1 when cuDNN does not say. */
static int64_t cfg_engine(cu_conv *c, conv_plan *p, cudnnBackendDescriptor_t cfg, bool *nondet) {
  dit_error e;
  cudnnBackendDescriptor_t eng;
  *nondet = false;
  if (d_new(c, p, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine", &eng, &e) != DIT_OK) return -1;
  int64_t n = 0, id = -1;
  if (c->lib.api->GetAttr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) !=
          CUDNN_STATUS_SUCCESS ||
      c->lib.api->GetAttr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &id) != CUDNN_STATUS_SUCCESS)
    id = -1;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (id >= 0 && c->lib.api->GetAttr(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
      *nondet = *nondet || notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  d_drop(c, p, eng);
  return id;
}

/* The largest workspace accepted: NCHW engines take about twice the 16-bit x (they transpose
 * internally: 134 MB for [1,128,512,512]), so the cap grows with big decodes. */
static int64_t ws_cap(const conv_key *k) {
  const int64_t x4 = 4 * k->B * k->Ci * k->H * k->W * (int64_t)dit_dtype_size((dit_dtype)k->cdt);
  return x4 > CONV_MAX_WS ? x4 : CONV_MAX_WS;
}

/* Finalizes the plan of config cfg into p's candidates if its engine is deterministic (the
 * same seed must give the same pixels in every run) and it builds with an acceptable
 * workspace; a refusal is not an error (first_fail keeps the first reason). */
static dit_status try_cfg(cu_conv *c, conv_plan *p, cudnnBackendDescriptor_t cfg, const char *what,
                          char *first_fail, size_t ff_n, dit_error *err) {
  bool nondet = false;
  const int64_t engine = cfg_engine(c, p, cfg, &nondet);
  if (nondet) {
    note(c, "cudnn conv: %s: engine %lld is not deterministic", what, (long long)engine);
    if (!first_fail[0]) snprintf(first_fail, ff_n, "%.500s", c->msg);
    return DIT_OK;
  }
  cudnnBackendDescriptor_t plan;
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan", &plan, err));
  SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->lib.h, "execution plan");
  SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg, "execution plan");
  cudnnStatus_t fs = c->lib.api->Finalize(plan);
  int64_t ws = 0, n = 0;
  if (fs == CUDNN_STATUS_SUCCESS)
    fs = c->lib.api->GetAttr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
  if (fs != CUDNN_STATUS_SUCCESS || ws > ws_cap(&p->k)) {
    dit_error e2;
    if (fs != CUDNN_STATUS_SUCCESS) cdn_fail(c, fs, "cudnnBackendFinalize(execution plan)", what, &e2);
    else note(c, "cudnn conv: %s: workspace %lld B is too large", what, (long long)ws);
    if (!first_fail[0]) snprintf(first_fail, ff_n, "%.500s", c->msg);
    d_drop(c, p, plan);
    return DIT_OK;
  }
  p->cand_engine[p->n_cand] = engine;
  p->cand_ws[p->n_cand] = ws > 0 ? ws : 0;
  p->cand[p->n_cand++] = plan;
  return DIT_OK;
}

/* Operation graph, heuristics (mode A, then the fallback list if A gave nothing), up to
 * `want` finalized execution plans into p->cand. */
static dit_status make_plans(cu_conv *c, conv_plan *p, cudnnBackendDescriptor_t *ops, int nops, int want,
                             dit_error *err) {
  cudnnBackendDescriptor_t og;
  DIT_TRY(d_new(c, p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph", &og, err));
  SET(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops, "operation graph");
  SET(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->lib.h, "operation graph");
  FIN(og, "operation graph");
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  char first_fail[512] = "";
  int tried = 0;
  for (int mi = 0; mi < 2 && p->n_cand == 0; mi++) {
    const char *what = mi ? "heuristics (fallback mode)" : "heuristics (mode A)";
    cudnnBackendDescriptor_t heur;
    DIT_TRY(d_new(c, p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what, &heur, err));
    SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og, what);
    SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi], what);
    cudnnStatus_t hs = c->lib.api->Finalize(heur);
    if (hs != CUDNN_STATUS_SUCCESS) {
      dit_error e2;
      cdn_fail(c, hs, "cudnnBackendFinalize(heuristics)", what, &e2);
      if (!first_fail[0]) snprintf(first_fail, sizeof first_fail, "%.500s", c->msg);
      continue;
    }
    int64_t count = 0;
    CK(c->lib.api->GetAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
       "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", what);
    if (count <= 0) continue;
    if (count > CONV_MAX_CFGS) count = CONV_MAX_CFGS;
    cudnnBackendDescriptor_t cfg[CONV_MAX_CFGS];
    for (int64_t i = 0; i < count; i++) DIT_TRY(d_new(c, p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what, &cfg[i], err));
    int64_t got = 0;
    CK(c->lib.api->GetAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
       "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)", what);
    for (int64_t i = 0; i < got && i < count && p->n_cand < want; i++, tried++) {
      char w[96];
      snprintf(w, sizeof w, "%s config %lld", what, (long long)i);
      DIT_TRY(try_cfg(c, p, cfg[i], w, first_fail, sizeof first_fail, err));
    }
  }
  if (p->n_cand > 0) return DIT_OK;
  note(c, "no engine (%d configs tried); first failure: %s", tried,
       first_fail[0] ? first_fail : "(heuristics returned no configs)");
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s", c->msg);
}

/* The variants to try for key k, best first: (layout, ending) pairs into lay/end. */
static int variants(const cu_conv *c, const conv_key *k, int lay[], int end[]) {
  int n = 0;
  const bool bias = k->bdt >= 0, wide = k->ydt != k->cdt;
  for (int li = 0; li < c->n_lays; li++) {
    const int L = c->lays[li];
    if (bias) {
      lay[n] = L, end[n++] = END_FUSED;
      lay[n] = L, end[n++] = END_DIRECT;
    } else {
      lay[n] = L, end[n++] = END_DIRECT;
      if (wide) lay[n] = L, end[n++] = END_FUSED;
    }
    if (wide) lay[n] = L, end[n++] = END_HALF;
  }
  return n;
}

/* The cached plan of a shape, built on first use (NULL: none, and none is built while the
 * stream is capturing, or when the cache is full). */
static conv_plan *get_plan(cu_conv *c, const conv_key *k, bool capturing) {
  for (int i = 0; i < c->n_plans; i++)
    if (memcmp(&c->plans[i]->k, k, sizeof *k) == 0) return c->plans[i];
  char ks[160];
  key_str(k, ks, sizeof ks);
  if (capturing) {
    note(c, "cudnn conv: %s first seen while capturing: not planned now", ks);
    return NULL;
  }
  if (c->n_plans >= CONV_MAX_PLANS) {
    note(c, "cudnn conv: plan cache full (%d shapes)", CONV_MAX_PLANS);
    return NULL;
  }
  conv_plan *p = calloc(1, sizeof *p);
  if (!p) {
    note(c, "cudnn conv: out of host memory");
    return NULL;
  }
  p->k = *k;
  int lay[2 * ENDS * LAYS], end[2 * ENDS * LAYS];
  const int nv = variants(c, k, lay, end);
  char fails[1024] = "";
  for (int v = 0; v < nv && !p->ok; v++) {
    dit_error e;
    cudnnBackendDescriptor_t ops[2];
    int nops = 0;
    p->lay = lay[v], p->end = end[v];
    const int want = c->tune ? CONV_CANDS : 1;
    if (build_graph(c, p, ops, &nops, &e) == DIT_OK && make_plans(c, p, ops, nops, want, &e) == DIT_OK) {
      p->ok = true;
      break;
    }
    size_t n = strlen(fails);
    snprintf(fails + n, sizeof fails - n, "%s%s %s: %.300s", n ? " | " : "", lay_name[p->lay], end_name[p->end],
             c->msg);
    free_descs(c, p);
  }
  if (p->ok) {
    p->tuned = p->n_cand < 2;
    note(c, "cudnn conv: plan for %s: %s, %s ending, %d engine(s), first: engine %lld, workspace %lld B", ks,
         lay_name[p->lay], end_name[p->end], p->n_cand, (long long)p->cand_engine[0], (long long)p->cand_ws[0]);
  } else {
    note(c, "cudnn conv: no plan for %s: %s", ks, nv ? fails : "no variant applies");
  }
  log_msg(c, !p->ok);
  c->plans[c->n_plans++] = p;
  return p;
}

/* ---------------- execution ---------------- */

static dit_status run_plan(cu_conv *c, cudnnBackendDescriptor_t plan, const void *x, const void *w, void *y,
                           const void *b, void *ws, dit_error *err) {
  int64_t uids[4] = {UID_X, UID_W, UID_Y, UID_B};
  void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
  const int64_t n = b ? 4 : 3;
  cudnnBackendDescriptor_t vp = NULL;
  const char *what = "variant pack";
  CK(c->lib.api->CreateDesc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp), "cudnnBackendCreateDescriptor", what);
  const cudnn_api *a = c->lib.api;
  cudnnStatus_t st = a->SetAttr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  const char *call = "cudnnBackendSetAttribute(VARIANT_PACK_UNIQUE_IDS)";
  if (st == CUDNN_STATUS_SUCCESS) {
    st = a->SetAttr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    call = "cudnnBackendSetAttribute(VARIANT_PACK_DATA_POINTERS)";
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    st = a->SetAttr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    call = "cudnnBackendSetAttribute(VARIANT_PACK_WORKSPACE)";
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    st = a->Finalize(vp);
    call = "cudnnBackendFinalize(variant pack)";
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    st = a->Execute(c->lib.h, plan, vp);
    call = "cudnnBackendExecute";
  }
  a->DestroyDesc(vp);
  if (st != CUDNN_STATUS_SUCCESS) return cdn_fail(c, st, call, "execute", err);
  return DIT_OK;
}

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Scratch layout of a call: converted x, w and bias, the graph's output when it does not write
 * y, the workspace (ws bytes). */
static conv_bufs bufs_for(const conv_plan *p, int xdt, int wdt, int bdt, int64_t ws) {
  const conv_key *k = &p->k;
  conv_bufs b = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, 0};
  const size_t cs = dit_dtype_size((dit_dtype)k->cdt);
  if (xdt != k->cdt || p->lay != LAY_NCHW) b.x = b.total, b.total += al256((size_t)(k->B * k->Ci * k->H * k->W) * cs);
  if (wdt != k->cdt || p->lay != LAY_NCHW)
    b.w = b.total, b.total += al256((size_t)(k->Co * k->Ci * k->kh * k->kw) * cs);
  if (p->end == END_FUSED && k->bdt >= 0 && bdt != k->bdt)
    b.b = b.total, b.total += al256((size_t)k->Co * dit_dtype_size((dit_dtype)k->bdt));
  if (p->end == END_HALF || p->lay != LAY_NCHW) {
    const int64_t gy = p->end == END_HALF ? k->cdt : k->ydt;
    b.y = b.total, b.total += al256((size_t)(k->B * k->Co * k->Ho * k->Wo) * dit_dtype_size((dit_dtype)gy));
  }
  if (ws > 0) b.ws = b.total, b.total += al256((size_t)ws);
  return b;
}

/* x (or w) into the scratch at dst in cdt and p's layout. */
static cudaError_t to_layout(const conv_plan *p, void *dst, const dit_tensor *t, cudaStream_t s) {
  const int64_t n = dit_tensor_numel(t);
  if (p->lay == LAY_NCHW) return cuk_convert(dst, (int)p->k.cdt, t->data, t->dtype, n, s);
  const int64_t *d = t->shape;
  int64_t ds[4], ss[4];
  strides4(LAY_NHWC, d[1], d[2], d[3], ds);
  strides4(LAY_NCHW, d[1], d[2], d[3], ss);
  return cuk_copy(dst, (int)p->k.cdt, t->data, t->dtype, 4, d, ds, ss, 0, s);
}

/* After the graph: its output into y (layout and dtype), the bias when the graph did not add it. */
static dit_status finish(const conv_plan *p, const conv_bufs *bf, char *scr, dit_tensor *y, const dit_tensor *b,
                         cudaStream_t s, dit_error *err) {
  const conv_key *k = &p->k;
  const char *op = "cuda conv2d (cuDNN)";
  if (bf->y != SIZE_MAX) {
    const int gy = (int)(p->end == END_HALF ? k->cdt : k->ydt);
    const int64_t n = k->B * k->Co * k->Ho * k->Wo;
    if (p->lay == LAY_NCHW) {
      DIT_TRY(cu_check(cuk_convert(y->data, (int)k->ydt, scr + bf->y, gy, n, s), op, "convert y", err));
    } else {
      int64_t ds[4], ss[4];
      strides4(LAY_NCHW, k->Co, k->Ho, k->Wo, ds);
      strides4(LAY_NHWC, k->Co, k->Ho, k->Wo, ss);
      DIT_TRY(cu_check(cuk_copy(y->data, (int)k->ydt, scr + bf->y, gy, 4, y->shape, ds, ss, 0, s), op,
                       "y from NHWC", err));
    }
  }
  if (b && p->end != END_FUSED)
    DIT_TRY(cu_check(cuk_bias_channel(y->data, (int)k->ydt, k->B, k->Co, k->Ho * k->Wo, b->data, b->dtype, s), op,
                     "bias", err));
  return DIT_OK;
}

/* Whether candidate i's output on the check operands rx, rw (pseudo-random, NULL when there was
 * no room for them) is bit for bit the reference candidate's (*ref < 0: i is the first that
 * ran and becomes the reference). A failed run or hash counts as different, so that only the
 * reference stays a choice. y is rewritten (the call writes it after). */
static bool same_result(cu_impl *im, cu_conv *c, const conv_plan *p, int i, const void *rx, const void *rw, void *y,
                        const void *b, void *ws, int *ref, uint64_t *h) {
  const int64_t gy = p->end == END_HALF ? p->k.cdt : p->k.ydt, ny = p->k.B * p->k.Co * p->k.Ho * p->k.Wo;
  dit_error e;
  bool ok = rx && run_plan(c, p->cand[i], rx, rw, y, b, ws, &e) == DIT_OK &&
            cu_result_hash(im, y, (int)dit_dtype_size((dit_dtype)gy), ny, 1, ny, &h[i], &e) == DIT_OK;
  if (!ok) {
    cudaGetLastError();
    if (*ref >= 0) return false;
    h[i] = 0;
  }
  if (*ref < 0) *ref = i;
  return h[i] == h[*ref];
}

/* Keeps candidate best of p as cand[0], the only one. */
static void keep_only(cu_conv *c, conv_plan *p, int best) {
  for (int i = 0; i < p->n_cand; i++)
    if (i != best) d_drop(c, p, p->cand[i]);
  p->cand[0] = p->cand[best];
  p->cand_ws[0] = p->cand_ws[best];
  p->cand_engine[0] = p->cand_engine[best];
  p->n_cand = 1;
}

/* p's key in the tuning cache file: its shape, layout, ending and the cuDNN version. */
static void tc_key(const cu_conv *c, const conv_plan *p, char *buf, size_t n) {
  char ks[160];
  key_str(&p->k, ks, sizeof ks);
  snprintf(buf, n, "conv %s %s %s dnn%zu", ks, lay_name[p->lay], end_name[p->end], c->lib.version);
}

/* Times each candidate on the call's operands (one untimed run, then CONV_TUNE_RUNS) and moves
 * the fastest of those whose output on pseudo-random operands is bit for bit the first runnable
 * one's to cand[0], dropping the others (tuning never changes a result, cuda_gemm.c). A
 * candidate that fails to run is skipped; when none runs the plan is dropped (p->ok = false).
 * CUDA event failures keep cand[0]. */
static void tune(cu_impl *im, cu_conv *c, conv_plan *p, const void *x, const void *w, void *y, const void *b,
                 void *ws) {
  cudaEvent_t e0 = NULL, e1 = NULL;
  float ms[CONV_CANDS];
  uint64_t h[CONV_CANDS];
  int ref = -1;
  const int64_t n_op[2] = {p->k.B * p->k.Ci * p->k.H * p->k.W, p->k.Co * p->k.Ci * p->k.kh * p->k.kw};
  const int dt_op[2] = {(int)p->k.cdt, (int)p->k.cdt};
  void *block = NULL, *rnd[2] = {NULL, NULL};
  dit_error re;
  if (cu_random_operands(im, 2, n_op, dt_op, &block, rnd, &re) != DIT_OK) cudaGetLastError();
  bool events = cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess;
  for (int i = 0; i < p->n_cand; i++) {
    ms[i] = -1.0f;
    dit_error e;
    bool ran = true;
    for (int r = 0; r <= CONV_TUNE_RUNS && ran; r++) {
      if (r == 1 && events) cudaEventRecord(e0, c->lib.stream);
      ran = run_plan(c, p->cand[i], x, w, y, b, ws, &e) == DIT_OK;
    }
    if (!ran || !events) {
      if (!ran) cudaGetLastError();
      if (ran) ms[i] = same_result(im, c, p, i, rnd[0], rnd[1], y, b, ws, &ref, h) ? (float)i : -1.0f; /* untimed */
      continue;
    }
    float t = 0.0f;
    if (cudaEventRecord(e1, c->lib.stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
        cudaEventElapsedTime(&t, e0, e1) == cudaSuccess)
      ms[i] = t / CONV_TUNE_RUNS;
    else
      cudaGetLastError(), ms[i] = (float)i;
    if (!same_result(im, c, p, i, rnd[0], rnd[1], y, b, ws, &ref, h)) ms[i] = -1.0f; /* another result */
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaFree(block);
  int best = -1;
  for (int i = 0; i < p->n_cand; i++)
    if (ms[i] >= 0.0f && (best < 0 || ms[i] < ms[best])) best = i;
  p->tuned = true;
  char ks[160];
  key_str(&p->k, ks, sizeof ks);
  if (best < 0) {
    p->ok = false;
    note(c, "cudnn conv: no engine of %s ran (%s); dropping the plan", ks, c->msg);
    return;
  }
  const double gf = 2.0 * (double)(p->k.B * p->k.Co * p->k.Ho * p->k.Wo) * (double)(p->k.Ci * p->k.kh * p->k.kw);
  note(c, "cudnn conv: %s: %s, %s ending, %d engine(s) timed, best engine %lld %.4f ms (%.1f TFLOP/s), "
       "workspace %lld B",
       ks, lay_name[p->lay], end_name[p->end], p->n_cand, (long long)p->cand_engine[best], (double)ms[best],
       events && ms[best] > 0 ? gf / (ms[best] * 1e9) : 0.0, (long long)p->cand_ws[best]);
  keep_only(c, p, best);
  int64_t v[2] = {best, p->cand_engine[0]};
  char tk[256];
  tc_key(c, p, tk, sizeof tk);
  cu_tc_put(im, tk, v, sizeof v);
}

/* A choice an earlier process made for p (the tuning cache file), when candidate v[0] is the
 * same engine now: kept as the tuned one. */
static bool tc_lookup(cu_impl *im, cu_conv *c, conv_plan *p) {
  char tk[256];
  int64_t v[2];
  tc_key(c, p, tk, sizeof tk);
  if (!cu_tc_get(im, tk, v, sizeof v) || v[0] < 0 || v[0] >= p->n_cand || p->cand_engine[v[0]] != v[1]) return false;
  keep_only(c, p, (int)v[0]);
  p->tuned = true;
  return true;
}

/* ---------------- state and entry ---------------- */

/* The conv state, created on first use next to the attention state (never while capturing:
 * creating either allocates). NULL: cuDNN cannot be used. */
static cu_conv *conv_state(cu_impl *im, bool capturing) {
  if (capturing && (!im->sdpa || !cu_sdpa_conv_get(im->sdpa))) return NULL;
  cu_cudnn lib;
  const char *why = "";
  if (!cu_sdpa_shared(&im->sdpa, im->stream, &im->opts, &lib, &why)) return NULL; /* the attention state logged why */
  cu_conv **slot = cu_sdpa_conv_slot(im->sdpa);
  if (*slot) return *slot;
  cu_conv *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->lib = lib;
  const int lay = im->opts.cuda_cudnn_conv_layout;
  if (lay == DIT_CONV_LAYOUT_NHWC) c->lays[c->n_lays++] = LAY_NHWC;
  else if (lay == DIT_CONV_LAYOUT_NCHW) c->lays[c->n_lays++] = LAY_NCHW;
  else c->lays[c->n_lays++] = LAY_NCHW, c->lays[c->n_lays++] = LAY_NHWC;
  c->tune = im->opts.cuda_cudnn_conv_tune;
  note(c, "cudnn conv: cuDNN %zu", lib.version);
  *slot = c;
  return c;
}

/* The 16-bit dtype cuDNN computes in for these operands, -1 when the call is not for cuDNN. */
static int compute_dtype(int xdt, int wdt) {
  if (xdt == DIT_BF16 || xdt == DIT_F16) return xdt;   /* w converted to it */
  if (wdt == DIT_BF16 || wdt == DIT_F16) return wdt;   /* F32 x converted, as im2col does */
  return -1;                                           /* F32 x and w: fp32 arithmetic, im2col */
}

dit_status cu_cudnn_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                           const dit_tensor *b, int stride, int pad, bool *done, dit_error *err) {
  *done = false;
  cu_impl *im = cu_im(be);
  const int xdt = x->dtype, wdt = w->dtype, ydt = y->dtype, cdt = compute_dtype(xdt, wdt);
  if (cdt < 0 || !cu_fdtype(y->dtype) || y->data == x->data) return DIT_OK;
  const uintptr_t ptrs = (uintptr_t)x->data | (uintptr_t)w->data | (uintptr_t)y->data | (b ? (uintptr_t)b->data : 0);
  bool capturing = im->capturing;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (!capturing && cudaStreamIsCapturing(im->stream, &cs) != cudaSuccess) {
    cudaGetLastError();
    capturing = true; /* unknown: plan nothing now */
  }
  capturing = capturing || cs != cudaStreamCaptureStatusNone;
  cu_conv *c = conv_state(im, capturing);
  if (!c) return DIT_OK;
  if (ptrs % CONV_ALIGN != 0) {
    c->fallbacks++;
    note(c, "cudnn conv: operands not %d-byte aligned", CONV_ALIGN);
    return DIT_OK;
  }
  conv_key k;
  memset(&k, 0, sizeof k);
  k.B = x->shape[0], k.Ci = x->shape[1], k.H = x->shape[2], k.W = x->shape[3];
  k.Co = w->shape[0], k.kh = w->shape[2], k.kw = w->shape[3], k.Ho = y->shape[2], k.Wo = y->shape[3];
  k.stride = stride, k.pad = pad, k.cdt = cdt, k.ydt = ydt, k.bdt = b ? (int64_t)b->dtype : -1;
  /* a fused bias in y's 16-bit dtype (converted per call: Co values): cuDNN's NCHW conv + bias
   * engines refuse an F32 bias with a BF16 y (measured), and y is rounded to 16 bits anyway */
  if (b && ydt != DIT_F32) k.bdt = ydt;
  conv_plan *p = get_plan(c, &k, capturing);
  if (!p || !p->ok) {
    c->fallbacks++;
    return DIT_OK;
  }
  int64_t ws = p->cand_ws[0];
  for (int i = 1; i < p->n_cand; i++) /* untuned: room for every candidate */
    if (p->cand_ws[i] > ws) ws = p->cand_ws[i];
  const conv_bufs bf = bufs_for(p, xdt, wdt, b ? (int)b->dtype : -1, ws);
  if (capturing && bf.total > im->scratch_bytes) { /* growing syncs the stream: not while capturing */
    c->fallbacks++;
    note(c, "cudnn conv: the scratch would grow while capturing");
    return DIT_OK;
  }
  char *scr = NULL;
  if (bf.total) DIT_TRY(cu_scratch(be, bf.total, (void **)&scr, err));
  const char *op = "cuda conv2d (cuDNN)";
  const void *xp = x->data, *wp = w->data;
  if (bf.x != SIZE_MAX) {
    DIT_TRY(cu_check(to_layout(p, scr + bf.x, x, im->stream), op, "convert x", err));
    xp = scr + bf.x;
  }
  if (bf.w != SIZE_MAX) {
    DIT_TRY(cu_check(to_layout(p, scr + bf.w, w, im->stream), op, "convert w", err));
    wp = scr + bf.w;
  }
  const void *bp = b && p->end == END_FUSED ? b->data : NULL;
  if (bf.b != SIZE_MAX) {
    DIT_TRY(cu_check(cuk_convert(scr + bf.b, (int)k.bdt, b->data, b->dtype, k.Co, im->stream), op, "convert bias",
                     err));
    bp = scr + bf.b;
  }
  void *yp = bf.y != SIZE_MAX ? scr + bf.y : y->data;
  void *wsp = bf.ws != SIZE_MAX ? scr + bf.ws : NULL;
  if (!p->tuned && !capturing && tc_lookup(im, c, p)) im->tc_cached++;
  if (!p->tuned && !capturing) {
    const double t0 = dit_time_now();
    tune(im, c, p, xp, wp, yp, bp, wsp);
    im->tc_seconds += dit_time_now() - t0;
    im->tc_timed++;
    log_msg(c, !p->ok);
    if (!p->ok) {
      c->fallbacks++;
      return DIT_OK;
    }
  }
  dit_error e2;
  if (run_plan(c, p->cand[0], xp, wp, yp, bp, wsp, &e2) != DIT_OK) {
    cudaGetLastError();
    p->ok = false; /* don't retry this shape */
    log_msg(c, true);
    c->fallbacks++;
    return DIT_OK;
  }
  DIT_TRY(finish(p, &bf, scr, y, b, im->stream, err));
  c->calls++;
  *done = true;
  return DIT_OK;
}

cu_conv_info cu_conv_get_info(const cu_sdpa *s) {
  cu_conv_info i;
  memset(&i, 0, sizeof i);
  const cu_conv *c = cu_sdpa_conv_get(s);
  if (!c) {
    i.message = s ? cu_sdpa_get_info(s).message : "cuDNN conv not tried yet";
    return i;
  }
  i.loaded = true;
  i.version = (long)c->lib.version;
  i.calls = c->calls;
  i.fallbacks = c->fallbacks;
  i.n_plans = c->n_plans;
  i.message = c->msg;
  return i;
}

void cu_conv_destroy(cu_conv *c) {
  if (!c) return;
  for (int i = 0; i < c->n_plans; i++) {
    free_descs(c, c->plans[i]);
    free(c->plans[i]);
  }
  free(c);
}

#endif
