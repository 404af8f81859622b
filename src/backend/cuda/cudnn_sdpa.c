/* cuDNN fused flash attention for the CUDA backend, through cuDNN's backend (graph) C API.
 * Why: cuDNN's SDPA runs ~10x faster than our own flash kernel on Hopper, and the C++
 * frontend is not an option for C host code. The library is opened at run time (dlopen), so
 * builds and machines without cuDNN keep working with our kernel.
 *
 * The operation graph is the one cuDNN's runtime fusion engines recognise as flash attention
 * (the same graph cudnn-frontend lowers its SDPA node to for cuDNN 9 before the unified op):
 *   S  = matmul(Q, K^T)                 fp32, Q [B,Hq,Sq,D], K^T [B,Hkv,D,Sk] (strided views of BSHD)
 *   S  = S * scale                      scale passed by value
 *   padding mask (key mask given):      row = gen_index(S, 2), col = gen_index(S, 3),
 *                                       keep = (row < seq_q[b]) && (col < seq_kv[b]),
 *                                       S = keep ? S : -inf   (binary select)
 *   causal:                             keep = gen_index(S, 2) >= gen_index(S, 3), S = keep ? S : -inf
 *   softmax:                            M = max_k S, E = exp(S - M), Z = sum_k E, P = E / Z (bf16)
 *                                       stats = M + log Z (fp32 [B,Hq,Sq,1]; virtual, output or absent)
 *   O  = matmul(P, V)                   V [B,Hkv,Sk,D], O [B,Hq,Sq,D] (BSHD strides)
 * with the matmuls' M/N/K overridden by the per-item lengths when masked. The softmax stats
 * are tried as a virtual tensor first (cudnn-frontend's inference form), then as an output,
 * then without the stats ops. A plan (heuristics mode A, then the fallback list; the first
 * engine config that finalizes) is cached per shape. Each plan's first output is checked
 * against our own kernel (one sync per shape; DIT_CUDA_CUDNN_VERIFY=0 skips it) and a plan that
 * disagrees is dropped. Fallbacks to our kernel (no library, a refused or dropped shape) print
 * one stderr line; DIT_CUDA_CUDNN_VERBOSE=2 also prints each plan, 0 nothing. */
#include "backend/cuda/cudnn_sdpa.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DIT_HAVE_CUDNN

/* Built without cuDNN headers: never used. */
dit_status cu_sdpa_attention(cu_sdpa **state, cudaStream_t st, const dit_run_opts *o, void *out, const void *q,
                             const void *k,
                             const void *v, const uint8_t *mask, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq,
                             int64_t Hkv, int64_t D, const cu_attn_strides *strides, float scale, bool causal,
                             bool *done, dit_error *err) {
  *done = false;
  return DIT_OK;
}
dit_status cu_sdpa_check(cu_sdpa *s, dit_error *err) { return DIT_OK; }
long cu_sdpa_moves(const cu_sdpa *s) { return 0; } /* the state is never created here */

cu_sdpa_info cu_sdpa_get_info(const cu_sdpa *s) {
  cu_sdpa_info i;
  memset(&i, 0, sizeof i);
  i.message = "built without cuDNN headers";
  return i;
}
void cu_sdpa_destroy(cu_sdpa *s) {}

#else

#include <dlfcn.h>

#include <cudnn_graph.h>

#include "backend/cuda/cudnn_lib.h"
#include "backend/cuda/cuda_internal.h" /* cuk_attention: our kernel, the first call's reference */

#define SDPA_MAX_PLANS 64
#define SDPA_MAX_DESC 200
#define SDPA_MAX_OPS 32

/* Tensor ids of the graph's real (non-virtual) tensors; virtual ones count up from UID_VIRT. */
/* How the graph ends the softmax: the stats ops with a virtual output (what cudnn-frontend
 * emits for inference), with a real output (training form), or no stats ops at all. */
enum { STATS_VIRTUAL, STATS_OUT, STATS_NONE, STATS_MODES };
static const char *const stats_name[STATS_MODES] = {"virtual stats", "stats output", "no stats"};

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_SEQ_Q, UID_SEQ_KV, UID_NEG_INF, UID_VIRT = 100 };

/* cudnn_api, the entry points we use (resolved with dlsym), is in cudnn_lib.h: shared with cudnn_conv.c. */

/* Every descriptor made for one graph: kept alive as long as its plan. */
typedef struct sdpa_graph {
  cudnnBackendDescriptor_t d[SDPA_MAX_DESC];
  int n;
  cudnnBackendDescriptor_t ops[SDPA_MAX_OPS];
  int nops;
  int64_t next_uid;
} sdpa_graph;

typedef struct sdpa_plan {
  int64_t B, Sq, Sk, Hq, Hkv, D;
  cu_attn_strides st; /* element strides of Q, K, V, O (batch, sequence, head) */
  bool masked, causal;
  bool ok;    /* false: cuDNN refused this shape; use our kernel */
  bool verified; /* the first output was checked against our kernel */
  int stats;  /* softmax stats M + log Z: STATS_VIRTUAL, STATS_OUT (needs the stats buffer), STATS_NONE */
  int64_t ws; /* workspace bytes */
  cudnnBackendDescriptor_t plan;
  sdpa_graph g;
} sdpa_plan;

struct cu_sdpa {
  void *lib;
  cudnn_api api;
  cudnnHandle_t h;
  cudaStream_t stream;
  bool broken; /* not loadable: always fall back */
  bool verify; /* check each plan's first output against our kernel; env DIT_CUDA_CUDNN_VERIFY=0 skips */
  int log;     /* stderr lines: 0 none, 1 fallbacks (default), 2 also plans; env DIT_CUDA_CUDNN_VERBOSE */
  size_t version;
  void *ws;
  size_t ws_bytes;
  long moves; /* buffer (re)allocations, see cu_sdpa_moves */
  int32_t *seqlen; /* device [2 * seqlen_cap]: seq_q then seq_kv */
  int64_t seqlen_cap;
  float *stats;
  size_t stats_bytes;
  volatile int *bad_host; /* mapped pinned flag: a mask was not a prefix */
  int *bad_dev;
  long calls, fallbacks;
  int n_plans;
  sdpa_plan *plans[SDPA_MAX_PLANS];
  _Alignas(16) float scale_v;   /* by-value scalars of the last execute (16-byte aligned, as declared) */
  _Alignas(16) float neg_inf_v;
  struct cu_conv *conv; /* cudnn_conv.c's state, sharing this library and handle (cudnn_lib.h) */
  char msg[1024];
};

/* ---------------- diagnostics ---------------- */

#define note(st, ...) cu_cdn_note((st)->msg, sizeof (st)->msg, __VA_ARGS__)

/* One stderr line for events that change which kernel runs (once per shape at most). */
static void log_msg(const cu_sdpa *s, bool fallback) { cu_cdn_log(s->log, s->msg, fallback, "our attention kernel"); }

static dit_status cdn_fail(cu_sdpa *s, cudnnStatus_t st, const char *call, const char *what, dit_error *err) {
  return cu_cdn_fail(&s->api, st, "cudnn sdpa", call, what, s->msg, sizeof s->msg, err);
}

#define CK(s, expr, call, what)                                                 \
  do {                                                                          \
    cudnnStatus_t st_ = (expr);                                                 \
    if (st_ != CUDNN_STATUS_SUCCESS) return cdn_fail((s), st_, call, what, err); \
  } while (0)

/* ---------------- loading ---------------- */

static bool load_sym(void *lib, const char *name, void *fp, size_t fsize) {
  void *p = dlsym(lib, name);
  if (!p) return false;
  memcpy(fp, &p, fsize);
  return true;
}
#define SYM(field, name)                                                     \
  if (!load_sym(s->lib, name, &s->api.field, sizeof s->api.field)) {         \
    note(s, "cudnn sdpa: symbol %s missing from the cuDNN library", name);   \
    return false;                                                            \
  }

static bool load_lib(cu_sdpa *s) {
  static const char *const names[] = {"libcudnn.so.9", "libcudnn_graph.so.9",
#ifdef DIT_CUDNN_LIBDIR
                                      DIT_CUDNN_LIBDIR "/libcudnn.so.9", DIT_CUDNN_LIBDIR "/libcudnn_graph.so.9",
#endif
                                      "libcudnn.so"};
  char tried[512] = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !s->lib; i++) {
    s->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!s->lib) {
      const char *e = dlerror();
      size_t n = strlen(tried);
      snprintf(tried + n, sizeof tried - n, "%s%s", n ? "; " : "", e ? e : names[i]);
    }
  }
  if (!s->lib) {
    note(s, "cudnn sdpa: cuDNN 9 not found (%s)", tried);
    return false;
  }
  SYM(GetVersion, "cudnnGetVersion");
  SYM(GetErrorString, "cudnnGetErrorString");
  SYM(Create, "cudnnCreate");
  SYM(Destroy, "cudnnDestroy");
  SYM(SetStream, "cudnnSetStream");
  SYM(CreateDesc, "cudnnBackendCreateDescriptor");
  SYM(DestroyDesc, "cudnnBackendDestroyDescriptor");
  SYM(Finalize, "cudnnBackendFinalize");
  SYM(SetAttr, "cudnnBackendSetAttribute");
  SYM(GetAttr, "cudnnBackendGetAttribute");
  SYM(Execute, "cudnnBackendExecute");
  load_sym(s->lib, "cudnnGetLastErrorString", &s->api.GetLastErrorString, sizeof s->api.GetLastErrorString);
  s->version = s->api.GetVersion();
  if (s->version < 90000) {
    note(s, "cudnn sdpa: cuDNN %zu is older than 9.0", s->version);
    return false;
  }
  return true;
}

static bool open_state(cu_sdpa *s, cudaStream_t st) {
  s->stream = st;
  if (!load_lib(s)) return false;
  dit_error e;
  dit_error *err = &e;
  cudnnStatus_t cs = s->api.Create(&s->h);
  if (cs != CUDNN_STATUS_SUCCESS) {
    cdn_fail(s, cs, "cudnnCreate", "init", err);
    s->h = NULL;
    return false;
  }
  cs = s->api.SetStream(s->h, st);
  if (cs != CUDNN_STATUS_SUCCESS) {
    cdn_fail(s, cs, "cudnnSetStream", "init", err);
    return false;
  }
  int *h = NULL;
  cudaError_t ce = cudaHostAlloc((void **)&h, sizeof(int), cudaHostAllocMapped);
  if (ce == cudaSuccess) ce = cudaHostGetDevicePointer((void **)&s->bad_dev, h, 0);
  if (ce != cudaSuccess) {
    cudaGetLastError();
    if (h) cudaFreeHost(h);
    note(s, "cudnn sdpa: mapped host flag: CUDA error %s", cudaGetErrorString(ce));
    return false;
  }
  *h = 0;
  s->bad_host = h;
  note(s, "cudnn sdpa: cuDNN %zu loaded", s->version);
  return true;
}

/* ---------------- graph building ---------------- */

static dit_status g_new(cu_sdpa *s, sdpa_graph *g, cudnnBackendDescriptorType_t t, const char *what,
                        cudnnBackendDescriptor_t *out, dit_error *err) {
  *out = NULL;
  if (g->n >= SDPA_MAX_DESC) return dit_errorf(err, DIT_ERR_INTERNAL, "cudnn sdpa: too many descriptors");
  CK(s, s->api.CreateDesc(t, out), "cudnnBackendCreateDescriptor", what);
  g->d[g->n++] = *out;
  return DIT_OK;
}

static dit_status g_set(cu_sdpa *s, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                        cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what,
                        const char *attr, dit_error *err) {
  cudnnStatus_t st = s->api.SetAttr(d, a, t, n, v);
  if (st == CUDNN_STATUS_SUCCESS) return DIT_OK;
  char call[160];
  snprintf(call, sizeof call, "cudnnBackendSetAttribute(%s)", attr);
  return cdn_fail(s, st, call, what, err);
}
#define SET(d, attr, type, n, v, what) DIT_TRY(g_set(s, d, attr, type, n, v, what, #attr, err))
#define FIN(d, what) CK(s, s->api.Finalize(d), "cudnnBackendFinalize", what)

/* A 4-D tensor; strides NULL: contiguous. uid 0: the next virtual id. */
static dit_status g_tensor(cu_sdpa *s, sdpa_graph *g, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                           const int64_t *strides, bool virt, bool byval, const char *what,
                           cudnnBackendDescriptor_t *out, dit_error *err) {
  int64_t st[4];
  if (strides) memcpy(st, strides, sizeof st);
  else {
    st[3] = 1;
    for (int i = 2; i >= 0; i--) st[i] = st[i + 1] * dims[i + 1];
  }
  if (!uid) uid = g->next_uid++;
  int64_t align = 16;
  cudnnBackendDescriptor_t t;
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what, &t, err));
  SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
  SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, what);
  SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st, what);
  SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
  SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
  if (virt) SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what);
  if (byval) SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, what);
  FIN(t, what);
  *out = t;
  return DIT_OK;
}

/* A pointwise op y = mode(x[, b][, t]) computed in prec; axis >= 0 for GEN_INDEX. */
static dit_status g_pw(cu_sdpa *s, sdpa_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                       cudnnBackendDescriptor_t y, const char *what, dit_error *err) {
  if (g->nops >= SDPA_MAX_OPS) return dit_errorf(err, DIT_ERR_INTERNAL, "cudnn sdpa: too many ops");
  cudnnBackendDescriptor_t pw, op;
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what, &pw, err));
  SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
  SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
  if (axis >= 0) SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
  FIN(pw, what);
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what, &op, err));
  SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
  SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
  if (b) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
  if (t) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, what);
  SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
  float one = 1.0f;
  SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
  SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
  FIN(op, what);
  g->ops[g->nops++] = op;
  return DIT_OK;
}

/* c = a @ b (fp32 accumulation); m/n/k overrides may be NULL. */
static dit_status g_mm(cu_sdpa *s, sdpa_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                       cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t mo, cudnnBackendDescriptor_t no,
                       cudnnBackendDescriptor_t ko, const char *what, dit_error *err) {
  if (g->nops >= SDPA_MAX_OPS) return dit_errorf(err, DIT_ERR_INTERNAL, "cudnn sdpa: too many ops");
  cudnnBackendDescriptor_t mm, op;
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what, &mm, err));
  SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
  FIN(mm, what);
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what, &op, err));
  SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
  SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
  SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
  SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, what);
  if (mo) SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mo, what);
  if (no) SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &no, what);
  if (ko) SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ko, what);
  FIN(op, what);
  g->ops[g->nops++] = op;
  return DIT_OK;
}

static dit_status g_red(cu_sdpa *s, sdpa_graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t y, const char *what, dit_error *err) {
  if (g->nops >= SDPA_MAX_OPS) return dit_errorf(err, DIT_ERR_INTERNAL, "cudnn sdpa: too many ops");
  cudnnBackendDescriptor_t rd, op;
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what, &rd, err));
  SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
  SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
  FIN(rd, what);
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what, &op, err));
  SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
  SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
  SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, what);
  FIN(op, what);
  g->ops[g->nops++] = op;
  return DIT_OK;
}

/* Virtual tensor shorthand. */
#define VT(out, dt, dims, what) DIT_TRY(g_tensor(s, g, 0, dt, dims, NULL, true, false, what, &out, err))

/* S = keep ? S : -inf for the key padding mask (row < seq_q[b] && col < seq_kv[b]). */
static dit_status g_padding(cu_sdpa *s, sdpa_graph *g, const int64_t sdims[4], cudnnBackendDescriptor_t *S,
                            cudnnBackendDescriptor_t sq, cudnnBackendDescriptor_t skv,
                            cudnnBackendDescriptor_t neg_inf, dit_error *err) {
  const cudnnDataType_t I32 = CUDNN_DATA_INT32, BOOL = CUDNN_DATA_BOOLEAN, F32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t row, col, rm, cm, keep, y;
  VT(row, I32, sdims, "padding row index");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_GEN_INDEX, I32, 2, *S, NULL, NULL, row, "padding gen_index(2)", err));
  VT(col, I32, sdims, "padding col index");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_GEN_INDEX, I32, 3, *S, NULL, NULL, col, "padding gen_index(3)", err));
  VT(rm, BOOL, sdims, "padding row < seq_q");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_CMP_LT, BOOL, -1, row, sq, NULL, rm, "padding row < seq_q", err));
  VT(cm, BOOL, sdims, "padding col < seq_kv");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_CMP_LT, BOOL, -1, col, skv, NULL, cm, "padding col < seq_kv", err));
  VT(keep, BOOL, sdims, "padding and");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_LOGICAL_AND, BOOL, -1, rm, cm, NULL, keep, "padding and", err));
  VT(y, F32, sdims, "padding select");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_BINARY_SELECT, F32, -1, *S, neg_inf, keep, y, "padding select", err));
  *S = y;
  return DIT_OK;
}

/* S = (row >= col) ? S : -inf. */
static dit_status g_causal(cu_sdpa *s, sdpa_graph *g, const int64_t sdims[4], cudnnBackendDescriptor_t *S,
                           cudnnBackendDescriptor_t neg_inf, dit_error *err) {
  const cudnnDataType_t I32 = CUDNN_DATA_INT32, BOOL = CUDNN_DATA_BOOLEAN, F32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t row, col, keep, y;
  VT(row, I32, sdims, "causal row index");
  /* index math in the graph's default compute type, as cudnn-frontend builds the causal mask */
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_GEN_INDEX, F32, 2, *S, NULL, NULL, row, "causal gen_index(2)", err));
  VT(col, I32, sdims, "causal col index");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_GEN_INDEX, F32, 3, *S, NULL, NULL, col, "causal gen_index(3)", err));
  VT(keep, BOOL, sdims, "causal row >= col");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_CMP_GE, BOOL, -1, row, col, NULL, keep, "causal row >= col", err));
  VT(y, F32, sdims, "causal select");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_BINARY_SELECT, F32, -1, *S, neg_inf, keep, y, "causal select", err));
  *S = y;
  return DIT_OK;
}

/* The whole attention graph for plan p (its shape and flags) into p->g. */
static dit_status build_graph(cu_sdpa *s, sdpa_plan *p, dit_error *err) {
  sdpa_graph *g = &p->g;
  g->next_uid = UID_VIRT;
  const int64_t B = p->B, Sq = p->Sq, Sk = p->Sk, Hq = p->Hq, Hkv = p->Hkv, D = p->D;
  const cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F32 = CUDNN_DATA_FLOAT, I32 = CUDNN_DATA_INT32;
  const cu_attn_strides *t = &p->st; /* BSHD views, possibly strided (fused projections) */
  const int64_t qd[4] = {B, Hq, Sq, D}, qs[4] = {t->q[0], t->q[2], t->q[1], 1};
  const int64_t os[4] = {t->o[0], t->o[2], t->o[1], 1};
  const int64_t ktd[4] = {B, Hkv, D, Sk}, kts[4] = {t->k[0], t->k[2], 1, t->k[1]};
  const int64_t vd[4] = {B, Hkv, Sk, D}, vs[4] = {t->v[0], t->v[2], t->v[1], 1};
  const int64_t one[4] = {1, 1, 1, 1}, bd[4] = {B, 1, 1, 1}, bs[4] = {1, 1, 1, 1};
  const int64_t sd[4] = {B, Hq, Sq, Sk}, rd[4] = {B, Hq, Sq, 1}, rs[4] = {Hq * Sq, Sq, 1, 1};
  cudnnBackendDescriptor_t Q, KT, V, O, scale, sq = NULL, skv = NULL, ninf = NULL, S, S1;
  DIT_TRY(g_tensor(s, g, UID_Q, BF, qd, qs, false, false, "Q", &Q, err));
  DIT_TRY(g_tensor(s, g, UID_K, BF, ktd, kts, false, false, "K^T", &KT, err));
  DIT_TRY(g_tensor(s, g, UID_V, BF, vd, vs, false, false, "V", &V, err));
  DIT_TRY(g_tensor(s, g, UID_O, BF, qd, os, false, false, "O", &O, err));
  DIT_TRY(g_tensor(s, g, UID_SCALE, F32, one, NULL, false, true, "attn scale", &scale, err));
  if (p->masked) {
    DIT_TRY(g_tensor(s, g, UID_SEQ_Q, I32, bd, bs, false, false, "seq_len_q", &sq, err));
    DIT_TRY(g_tensor(s, g, UID_SEQ_KV, I32, bd, bs, false, false, "seq_len_kv", &skv, err));
  }
  if (p->masked || p->causal)
    DIT_TRY(g_tensor(s, g, UID_NEG_INF, F32, one, NULL, false, true, "-inf", &ninf, err));
  VT(S, F32, sd, "bmm1 out");
  DIT_TRY(g_mm(s, g, Q, KT, S, sq, skv, NULL, "bmm1 Q K^T", err));
  VT(S1, F32, sd, "scaled S");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_MUL, F32, -1, S, scale, NULL, S1, "attn scale mul", err));
  if (p->masked) DIT_TRY(g_padding(s, g, sd, &S1, sq, skv, ninf, err));
  if (p->causal) DIT_TRY(g_causal(s, g, sd, &S1, ninf, err));
  cudnnBackendDescriptor_t M, E0, E, Z, P;
  DIT_TRY(g_tensor(s, g, 0, F32, rd, rs, true, false, "softmax max", &M, err));
  DIT_TRY(g_red(s, g, CUDNN_REDUCE_TENSOR_MAX, S1, M, "softmax max", err));
  VT(E0, F32, sd, "softmax sub");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_SUB, F32, -1, S1, M, NULL, E0, "softmax sub", err));
  VT(E, F32, sd, "softmax exp");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_EXP, F32, -1, E0, NULL, NULL, E, "softmax exp", err));
  DIT_TRY(g_tensor(s, g, 0, F32, rd, rs, true, false, "softmax sum", &Z, err));
  DIT_TRY(g_red(s, g, CUDNN_REDUCE_TENSOR_ADD, E, Z, "softmax sum", err));
  if (p->stats != STATS_NONE) {
    cudnnBackendDescriptor_t L, ST;
    bool virt = p->stats == STATS_VIRTUAL;
    DIT_TRY(g_tensor(s, g, 0, F32, rd, rs, true, false, "softmax log", &L, err));
    DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_LOG, F32, -1, Z, NULL, NULL, L, "softmax log", err));
    DIT_TRY(g_tensor(s, g, virt ? 0 : UID_STATS, F32, rd, rs, virt, false, "stats", &ST, err));
    DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_ADD, F32, -1, M, L, NULL, ST, "stats add", err));
  }
  VT(P, BF, sd, "softmax out");
  DIT_TRY(g_pw(s, g, CUDNN_POINTWISE_DIV, F32, -1, E, Z, NULL, P, "softmax div", err));
  DIT_TRY(g_mm(s, g, P, V, O, sq, NULL, skv, "bmm2 P V", err));
  return DIT_OK;
}

/* Operation graph, heuristics (mode A, then fallback), first config whose plan finalizes. */
static dit_status make_plan(cu_sdpa *s, sdpa_plan *p, dit_error *err) {
  sdpa_graph *g = &p->g;
  cudnnBackendDescriptor_t og;
  DIT_TRY(g_new(s, g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph", &og, err));
  SET(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops, "operation graph");
  SET(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->h, "operation graph");
  FIN(og, "operation graph");
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  char first_fail[512] = "";
  int tried = 0;
  for (int mi = 0; mi < 2 && !(mi == 1 && tried > 0); mi++) { /* the fallback list only if A gave nothing */
    const char *what = mi ? "heuristics (fallback mode)" : "heuristics (mode A)";
    cudnnBackendDescriptor_t heur;
    DIT_TRY(g_new(s, g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what, &heur, err));
    SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og, "heuristics");
    SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi], "heuristics");
    cudnnStatus_t hs = s->api.Finalize(heur);
    if (hs != CUDNN_STATUS_SUCCESS) {
      dit_error e2;
      cdn_fail(s, hs, "cudnnBackendFinalize(heuristics)", what, &e2);
      if (!first_fail[0]) snprintf(first_fail, sizeof first_fail, "%.500s", s->msg);
      continue;
    }
    int64_t count = 0;
    CK(s, s->api.GetAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
       "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", what);
    if (count <= 0) continue;
    if (count > 6) count = 6; /* the best few; each plan finalize may compile a kernel */
    cudnnBackendDescriptor_t cfg[16];
    for (int64_t i = 0; i < count; i++) DIT_TRY(g_new(s, g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what, &cfg[i], err));
    int64_t got = 0;
    CK(s, s->api.GetAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
       "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)", what);
    for (int64_t i = 0; i < got && i < count; i++) {
      cudnnBackendDescriptor_t plan;
      tried++;
      DIT_TRY(g_new(s, g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan", &plan, err));
      SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->h, "execution plan");
      SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i], "execution plan");
      cudnnStatus_t fs = s->api.Finalize(plan);
      if (fs != CUDNN_STATUS_SUCCESS) {
        dit_error e2;
        char w[96];
        snprintf(w, sizeof w, "%s config %lld", what, (long long)i);
        cdn_fail(s, fs, "cudnnBackendFinalize(execution plan)", w, &e2);
        if (!first_fail[0]) snprintf(first_fail, sizeof first_fail, "%.500s", s->msg);
        continue;
      }
      int64_t ws = 0, n = 0;
      CK(s, s->api.GetAttr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
         "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)", "execution plan");
      p->plan = plan;
      p->ws = ws > 0 ? ws : 0;
      note(s, "cudnn sdpa: plan for B%lld Sq%lld Sk%lld H%lld/%lld D%lld%s%s%s: %s config %lld, workspace %lld B",
           (long long)p->B, (long long)p->Sq, (long long)p->Sk, (long long)p->Hq, (long long)p->Hkv,
           (long long)p->D, p->masked ? " padding-mask" : "", p->causal ? " causal" : "",
           stats_name[p->stats], what, (long long)i, (long long)p->ws);
      return DIT_OK;
    }
  }
  note(s, "cudnn sdpa: no engine for B%lld Sq%lld Sk%lld H%lld/%lld D%lld%s%s%s (%d configs tried); first failure: %s",
       (long long)p->B, (long long)p->Sq, (long long)p->Sk, (long long)p->Hq, (long long)p->Hkv, (long long)p->D,
       p->masked ? " padding-mask" : "", p->causal ? " causal" : "", stats_name[p->stats], tried,
       first_fail[0] ? first_fail : "(heuristics returned no configs)");
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s", s->msg);
}

static void free_graph(cu_sdpa *s, sdpa_graph *g) {
  for (int i = g->n - 1; i >= 0; i--)
    if (g->d[i]) s->api.DestroyDesc(g->d[i]);
  memset(g, 0, sizeof *g);
}

/* Builds (or refuses) the plan of a shape, trying each stats mode in turn. */
static sdpa_plan *get_plan(cu_sdpa *s, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                           const cu_attn_strides *st, bool masked, bool causal) {
  for (int i = 0; i < s->n_plans; i++) {
    sdpa_plan *p = s->plans[i];
    if (p->B == B && p->Sq == Sq && p->Sk == Sk && p->Hq == Hq && p->Hkv == Hkv && p->D == D &&
        p->masked == masked && p->causal == causal && memcmp(&p->st, st, sizeof *st) == 0)
      return p;
  }
  if (s->n_plans >= SDPA_MAX_PLANS) {
    note(s, "cudnn sdpa: plan cache full (%d shapes)", SDPA_MAX_PLANS);
    return NULL;
  }
  sdpa_plan *p = calloc(1, sizeof *p);
  if (!p) {
    note(s, "cudnn sdpa: out of host memory");
    return NULL;
  }
  p->B = B, p->Sq = Sq, p->Sk = Sk, p->Hq = Hq, p->Hkv = Hkv, p->D = D, p->masked = masked, p->causal = causal;
  p->st = *st;
  char fails[STATS_MODES][360];
  for (int mode = 0; mode < STATS_MODES && !p->ok; mode++) {
    dit_error e;
    p->stats = mode;
    if (build_graph(s, p, &e) == DIT_OK && make_plan(s, p, &e) == DIT_OK) {
      p->ok = true;
      break;
    }
    snprintf(fails[mode], sizeof fails[mode], "%.350s", s->msg);
    free_graph(s, &p->g);
    p->plan = NULL;
  }
  if (!p->ok) note(s, "%s | %s | %s", fails[0], fails[1], fails[2]);
  log_msg(s, !p->ok);
  s->plans[s->n_plans++] = p;
  return p;
}

/* ---------------- execution ---------------- */

/* Grows a device buffer (syncing the stream before freeing the old one). */
static dit_status grow(cu_sdpa *s, void **buf, size_t *have, size_t need, const char *what, dit_error *err) {
  if (need <= *have) return DIT_OK;
  if (*buf) {
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess)
      return dit_errorf(err, DIT_ERR_INTERNAL, "cudnn sdpa: %s: stream sync: %s", what, cudaGetErrorString(e));
    cudaFree(*buf);
    *buf = NULL;
    *have = 0;
  }
  size_t n = (need + 255) & ~(size_t)255;
  s->moves++;
  cudaError_t e = cudaMalloc(buf, n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *buf = NULL;
    return dit_errorf(err, DIT_ERR_NOMEM, "cudnn sdpa: %s: cudaMalloc(%zu): %s", what, n, cudaGetErrorString(e));
  }
  *have = n;
  return DIT_OK;
}

static dit_status execute(cu_sdpa *s, sdpa_plan *p, void *out, const void *q, const void *k, const void *v,
                          float scale, dit_error *err) {
  s->scale_v = scale;
  s->neg_inf_v = s->version < 91000 ? -FLT_MAX : -INFINITY; /* what cudnn-frontend passes per version */
  int64_t uids[9];
  void *ptrs[9];
  int n = 0;
#define ADD(u, ptr) (uids[n] = (u), ptrs[n] = (void *)(ptr), n++)
  ADD(UID_Q, q);
  ADD(UID_K, k);
  ADD(UID_V, v);
  ADD(UID_O, out);
  ADD(UID_SCALE, &s->scale_v);
  if (p->masked) {
    ADD(UID_SEQ_Q, s->seqlen);
    ADD(UID_SEQ_KV, s->seqlen + s->seqlen_cap);
  }
  if (p->masked || p->causal) ADD(UID_NEG_INF, &s->neg_inf_v);
  if (p->stats == STATS_OUT) ADD(UID_STATS, s->stats);
#undef ADD
  cudnnBackendDescriptor_t vp = NULL;
  const char *what = "variant pack";
  CK(s, s->api.CreateDesc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp), "cudnnBackendCreateDescriptor", what);
  cudnnStatus_t st = s->api.SetAttr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  const char *call = "cudnnBackendSetAttribute(VARIANT_PACK_UNIQUE_IDS)";
  if (st == CUDNN_STATUS_SUCCESS) {
    st = s->api.SetAttr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    call = "cudnnBackendSetAttribute(VARIANT_PACK_DATA_POINTERS)";
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    void *ws = s->ws;
    st = s->api.SetAttr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    call = "cudnnBackendSetAttribute(VARIANT_PACK_WORKSPACE)";
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    st = s->api.Finalize(vp);
    call = "cudnnBackendFinalize(variant pack)";
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    st = s->api.Execute(s->h, p->plan, vp);
    call = "cudnnBackendExecute";
  }
  s->api.DestroyDesc(vp);
  if (st != CUDNN_STATUS_SUCCESS) return cdn_fail(s, st, call, "execute", err);
  return DIT_OK;
}

/* The first output of a new plan is compared with our kernel (v1) on the same inputs: a plan
 * whose output differs (NMSE >= 1e-3 or non-finite values) is dropped and out gets our
 * kernel's result. Costs one run of our kernel and a sync, once per shape; skipped while the
 * stream is being captured. Returns false when the plan was dropped. */
static bool verify_first(cu_sdpa *s, sdpa_plan *p, void *out, const void *q, const void *k, const void *v,
                         const uint8_t *mask, float scale, bool causal) { /* strides: p->st */
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return true; /* check a later call */
  }
  p->verified = true;
  const int64_t n = p->B * p->Sq * p->Hq * p->D;
  const size_t bytes = ((size_t)n * 2 + 255) & ~(size_t)255;
  /* the reference is contiguous; a strided out is compared through a contiguous copy */
  const cu_attn_strides cs = cu_attn_contiguous(p->Sq, p->Sk, p->Hq, p->Hkv, p->D);
  const bool strided_out = memcmp(cs.o, p->st.o, sizeof cs.o) != 0;
  const int64_t shape[4] = {p->B, p->Sq, p->Hq, p->D}, cstr[4] = {cs.o[0], cs.o[1], cs.o[2], 1};
  const int64_t ostr[4] = {p->st.o[0], p->st.o[1], p->st.o[2], 1};
  cu_attn_strides rs = p->st;
  memcpy(rs.o, cs.o, sizeof rs.o);
  void *ref = NULL;
  double h[3] = {0, 0, 0};
  cudaError_t e = cudaMalloc(&ref, (strided_out ? 2 : 1) * bytes + 3 * sizeof(double));
  if (e != cudaSuccess) {
    cudaGetLastError();
    note(s, "cudnn sdpa: first-output check skipped (no memory for the reference)");
    return true;
  }
  void *outc = strided_out ? (char *)ref + bytes : out;
  double *acc = (double *)((char *)ref + (strided_out ? 2 : 1) * bytes);
  e = cudaMemsetAsync(acc, 0, 3 * sizeof(double), s->stream);
  if (e == cudaSuccess)
    e = cuk_attention(ref, q, k, v, DIT_BF16, p->B, p->Sq, p->Sk, p->Hq, p->Hkv, p->D, mask, scale, causal, 1, &rs,
                      s->stream);
  if (e == cudaSuccess && strided_out)
    e = cuk_copy(outc, DIT_BF16, out, DIT_BF16, 4, shape, cstr, ostr, 2, s->stream);
  if (e == cudaSuccess) e = cuk_bf16_diff(outc, ref, n, acc, s->stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(h, acc, sizeof h, cudaMemcpyDeviceToHost, s->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
  double nmse = h[1] > 0 ? h[0] / h[1] : h[0];
  bool good = e == cudaSuccess && h[2] == 0 && nmse < 1e-3;
  if (e != cudaSuccess) {
    cudaGetLastError();
    note(s, "cudnn sdpa: first-output check failed: CUDA error %s; dropping the plan", cudaGetErrorString(e));
  } else if (!good) {
    note(s, "cudnn sdpa: plan for B%lld Sq%lld Sk%lld H%lld/%lld D%lld%s%s gives a different result than our "
            "kernel (nmse %.3e, %.0f non-finite values); dropping it",
         (long long)p->B, (long long)p->Sq, (long long)p->Sk, (long long)p->Hq, (long long)p->Hkv, (long long)p->D,
         p->masked ? " padding-mask" : "", p->causal ? " causal" : "", nmse, h[2]);
    cudaError_t ce = strided_out ? cuk_copy(out, DIT_BF16, ref, DIT_BF16, 4, shape, ostr, cstr, 2, s->stream)
                                 : cudaMemcpyAsync(out, ref, (size_t)n * 2, cudaMemcpyDeviceToDevice, s->stream);
    if (ce != cudaSuccess || cudaStreamSynchronize(s->stream) != cudaSuccess) cudaGetLastError();
  } else {
    note(s, "cudnn sdpa: plan for B%lld Sq%lld Sk%lld H%lld/%lld D%lld%s%s (%s) checked: nmse %.2e vs our kernel",
         (long long)p->B, (long long)p->Sq, (long long)p->Sk, (long long)p->Hq, (long long)p->Hkv, (long long)p->D,
         p->masked ? " padding-mask" : "", p->causal ? " causal" : "", stats_name[p->stats], nmse);
  }
  cudaFree(ref);
  if (!good) p->ok = false;
  log_msg(s, !good);
  return good;
}

/* The state, created on first use (library, handle on stream st); NULL when out of host memory. */
static cu_sdpa *sdpa_state(cu_sdpa **state, cudaStream_t st, const dit_run_opts *o) {
  cu_sdpa *s = *state;
  if (s) return s;
  s = calloc(1, sizeof *s);
  if (!s) return NULL;
  *state = s;
  s->log = o->cuda_cudnn_verbose;
  s->verify = o->cuda_cudnn_verify;
  s->broken = !open_state(s, st);
  log_msg(s, s->broken);
  return s;
}

bool cu_sdpa_shared(cu_sdpa **state, cudaStream_t st, const dit_run_opts *o, cu_cudnn *out, const char **why) {
  memset(out, 0, sizeof *out);
  cu_sdpa *s = sdpa_state(state, st, o);
  if (!s || s->broken) {
    *why = s ? s->msg : "cudnn: out of host memory";
    return false;
  }
  out->api = &s->api;
  out->h = s->h;
  out->stream = s->stream;
  out->version = s->version;
  out->log = s->log;
  return true;
}

struct cu_conv **cu_sdpa_conv_slot(cu_sdpa *s) { return &s->conv; }
const struct cu_conv *cu_sdpa_conv_get(const cu_sdpa *s) { return s ? s->conv : NULL; }

dit_status cu_sdpa_attention(cu_sdpa **state, cudaStream_t st, const dit_run_opts *o, void *out, const void *q,
                             const void *k,
                             const void *v, const uint8_t *mask, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq,
                             int64_t Hkv, int64_t D, const cu_attn_strides *strides, float scale, bool causal,
                             bool *done, dit_error *err) {
  *done = false;
  cu_sdpa *s = sdpa_state(state, st, o);
  if (!s) return DIT_OK; /* our kernel then */
  if (s->broken) {
    s->fallbacks++;
    return DIT_OK;
  }
  if (mask && causal) { /* left-padded causal masks are common there: our kernel */
    s->fallbacks++;
    note(s, "cudnn sdpa: causal with a key mask is left to our kernel");
    return DIT_OK;
  }
  if (B <= 0 || Sq <= 0 || Sk <= 0 || Sq > INT32_MAX || Sk > INT32_MAX) {
    s->fallbacks++;
    return DIT_OK;
  }
  const cu_attn_strides cst = strides ? *strides : cu_attn_contiguous(Sq, Sk, Hq, Hkv, D);
  sdpa_plan *p = get_plan(s, B, Sq, Sk, Hq, Hkv, D, &cst, mask != NULL, causal);
  if (!p || !p->ok) {
    s->fallbacks++;
    return DIT_OK;
  }
  DIT_TRY(grow(s, &s->ws, &s->ws_bytes, (size_t)p->ws, "workspace", err));
  if (p->stats == STATS_OUT) {
    void *b = s->stats;
    DIT_TRY(grow(s, &b, &s->stats_bytes, (size_t)(B * Hq * Sq) * sizeof(float), "stats", err));
    s->stats = b;
  }
  if (mask) {
    if (B > s->seqlen_cap) {
      void *b = s->seqlen;
      size_t have = s->seqlen ? (size_t)s->seqlen_cap * 2 * sizeof(int32_t) : 0;
      DIT_TRY(grow(s, &b, &have, (size_t)B * 2 * sizeof(int32_t), "seq lengths", err));
      s->seqlen = b;
      s->seqlen_cap = (int64_t)(have / (2 * sizeof(int32_t)));
    }
    cudaError_t ce = cuk_mask_seqlen(mask, B, Sk, Sq, s->seqlen, s->seqlen + s->seqlen_cap, s->bad_dev, st);
    if (ce != cudaSuccess)
      return dit_errorf(err, DIT_ERR_INTERNAL, "cudnn sdpa: mask to lengths kernel: CUDA error %s (%s)",
                        cudaGetErrorName(ce), cudaGetErrorString(ce));
  }
  dit_error e2;
  if (execute(s, p, out, q, k, v, scale, &e2) != DIT_OK) {
    p->ok = false; /* don't retry this shape */
    log_msg(s, true);
    s->fallbacks++;
    return DIT_OK;
  }
  if (s->verify && !p->verified && !verify_first(s, p, out, q, k, v, mask, scale, causal)) {
    s->fallbacks++; /* out holds our kernel's result */
    *done = true;
    return DIT_OK;
  }
  s->calls++;
  *done = true;
  return DIT_OK;
}

dit_status cu_sdpa_check(cu_sdpa *s, dit_error *err) {
  if (!s || !s->bad_host || !*s->bad_host) return DIT_OK;
  *s->bad_host = 0;
  return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                    "cuda attention (cuDNN): a key_mask given since the last sync was not a prefix of valid keys "
                    "(or had none) in some batch item; cuDNN's padding mask cannot express it, so those outputs "
                    "are wrong; run with DIT_CUDA_CUDNN=0 to use our kernel");
}

long cu_sdpa_moves(const cu_sdpa *s) { return s ? s->moves : 0; }

cu_sdpa_info cu_sdpa_get_info(const cu_sdpa *s) {
  cu_sdpa_info i;
  memset(&i, 0, sizeof i);
  i.message = "cuDNN not tried yet";
  if (!s) return i;
  i.loaded = !s->broken;
  i.version = (long)s->version;
  i.calls = s->calls;
  i.fallbacks = s->fallbacks;
  i.n_plans = s->n_plans;
  i.message = s->msg;
  return i;
}

void cu_sdpa_destroy(cu_sdpa *s) {
  if (!s) return;
  if (s->stream) cudaStreamSynchronize(s->stream);
  cu_conv_destroy(s->conv); /* its plans use the handle */
  for (int i = 0; i < s->n_plans; i++) {
    free_graph(s, &s->plans[i]->g);
    free(s->plans[i]);
  }
  if (s->h && s->api.Destroy) s->api.Destroy(s->h);
  cudaFree(s->ws);
  cudaFree(s->stats);
  cudaFree(s->seqlen);
  if (s->bad_host) cudaFreeHost((void *)s->bad_host);
  /* the library stays loaded: unloading cuDNN while CUDA holds its modules is not safe */
  free(s);
}

#endif
