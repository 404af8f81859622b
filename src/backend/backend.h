/* Backend interface: a table of function pointers for memory and for every op the
 * models need. Model code calls ops through it (dit_op_* wrappers below) and never
 * branches on the backend; precision and kernel choices live in the backends.
 *
 * Conventions (all ops):
 * - Activations are contiguous row-major F32 tensors unless an op says otherwise.
 *   "Row views" (ops that say so): any tensor dit_tensor_rowview accepts — unit stride on
 *   the last dim, leading dims merging into at most two strided groups (a column slice of a
 *   wider buffer, a per-batch row range of a longer sequence). "Strided [B,S,H,D]": 4-D,
 *   unit last stride, any non-negative strides on B, S and H. The CUDA backend also needs
 *   16-byte aligned rows (strides multiples of 8 elements) for these.
 *   Weights (w, b, norm scales, tables) may be F32, BF16 or F16 and are read in their
 *   stored dtype (never copied to F32 as a whole).
 * - Shapes are checked; a mismatch returns DIT_ERR_INVALID_ARG naming the op.
 * - y may alias x only where an op says so. */
#ifndef DIT_BACKEND_H
#define DIT_BACKEND_H

#include <stdbool.h>

#include "core/error.h"
#include "core/options.h"
#include "core/tensor.h"
#include "backend/backend_ops.h"

typedef enum dit_act {
  DIT_ACT_NONE = 0,
  DIT_ACT_SILU,
  DIT_ACT_GELU,      /* exact erf GELU */
  DIT_ACT_GELU_TANH, /* tanh approximation */
  DIT_ACT_SIGMOID    /* 1 / (1 + exp(-x)) (Krea 2's attention output gate) */
} dit_act;

typedef enum dit_rope_mode {
  DIT_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1) rotate as complex numbers (diffusers Z-Image/Flux) */
  DIT_ROPE_HALF             /* pairs (i, i + D/2), rotate_half (HF Qwen3/Llama) */
} dit_rope_mode;

/* The elementwise functions of the unary op, with its parameters a and b. */
typedef enum dit_unary {
  DIT_UNARY_LEAKY_RELU = 0, /* x > 0 ? x : a * x */
  DIT_UNARY_TANH,           /* tanh(x) */
  DIT_UNARY_CLAMP,          /* min(max(x, a), b) */
  DIT_UNARY_LOG_CLAMP,      /* log(max(x, a)) (a log-mel floor) */
  DIT_UNARY_COUNT
} dit_unary;

typedef struct dit_backend dit_backend;

typedef struct dit_backend_ops {
  const char *name;
  /* ---- memory: device buffers (host memory on the CPU backend) ---- */
  dit_status (*alloc)(dit_backend *be, size_t bytes, void **out, dit_error *err);
  void (*free)(dit_backend *be, void *p);
  dit_status (*upload)(dit_backend *be, void *dst, const void *src_host, size_t bytes, dit_error *err);
  dit_status (*download)(dit_backend *be, void *dst_host, const void *src, size_t bytes, dit_error *err);
  dit_status (*sync)(dit_backend *be, dit_error *err);

  /* ---- the compute ops: one field per row of DIT_BACKEND_OPS (backend_ops.h, with each
   * op's contract) ---- */
#define DIT_OP_FIELD(name, params, args) dit_status (*name)(dit_backend * be, DIT_EXPAND params);
  DIT_BACKEND_OPS(DIT_OP_FIELD)
#undef DIT_OP_FIELD
  /* ---- optional graph capture (NULL where a backend has none; CUDA graphs on the GPU).
   * Between capture_begin and capture_end the backend records the ops it is given instead of
   * running them; capture_end (keep = false discards) returns a replayable graph, and
   * graph_launch runs it again: the same ops on the same memory, reading what is there at
   * launch time. DIT_ERR_UNSUPPORTED from any of them means "not now" (graphs turned off, a
   * profiler timing each op, a graph made stale by a backend buffer that moved): run the ops
   * instead. Use them through dit_replay (backend/replay.h). ---- */
  dit_status (*capture_begin)(dit_backend *be, dit_error *err);
  dit_status (*capture_end)(dit_backend *be, bool keep, void **graph, dit_error *err);
  dit_status (*graph_launch)(dit_backend *be, void *graph, dit_error *err);
  void (*graph_free)(dit_backend *be, void *graph);
  /* ---- optional device timers (NULL where a backend has none; CUDA events on the GPU).
   * timer_mark records a mark in the order of the backend's queued work and gives its number
   * (0, 1, ... since the last timer_reset); timer_ms waits until marks a and b are reached and
   * gives the device time between them in ms; timer_reset forgets every mark. The profiler
   * uses them to time each op without synchronizing between ops. ---- */
  dit_status (*timer_mark)(dit_backend *be, int *id, dit_error *err);
  dit_status (*timer_ms)(dit_backend *be, int a, int b, double *ms, dit_error *err);
  void (*timer_reset)(dit_backend *be);
  /* Optional: gives back the memory the backend keeps between calls for its kernels (the
   * CPU's scratch), between stages; the next op takes it again. Use dit_backend_trim. */
  void (*trim)(dit_backend *be);
  /* Optional: releases the backend's private state (streams, handles, workspaces, scratch);
   * dit_backend_free calls it before freeing be. */
  void (*destroy)(dit_backend *be);
} dit_backend_ops;

struct dit_backend {
  const dit_backend_ops *ops;
  int n_threads;
  /* fp8 compute (DIT_GPU_PRECISION_FP8, set at creation on a GPU that has it): linear ops
   * with float8_e4m3 weights quantize their activations per row and run fp8 GEMMs, and the
   * transformers convert their block matrices to e4m3 at load (dit_wname_fp8_compute). */
  bool fp8;
  void *impl;
};

/* The precisions a backend is asked for at creation (each backend reads its own). */
typedef struct dit_backend_precision {
  dit_cpu_precision cpu;
  dit_gpu_precision gpu;
} dit_backend_precision;

/* The backend of a device kind: the CPU (n_threads <= 0: all online cores; its linear
 * layers' precision) or CUDA device `device` with the run-time switches opts (NULL: the
 * defaults). DIT_ERR_UNSUPPORTED when this build has no
 * such device. Whoever creates a backend frees it, with dit_backend_free. */
/* The backend registry: one row per kind of backend in this build (the CPU always; CUDA
 * when built with it). Nothing above src/backend needs a device library's header: it asks
 * the registry. */
typedef struct dit_backend_kind_info {
  dit_device_kind kind;
  const char *name;  /* "cpu", "cuda" */
  bool host_memory;  /* its buffers are host memory */
  int (*device_count)(void); /* devices visible now (0: none) */
  /* A backend on `device` (CPU: n_threads threads, linear layers at precision.cpu; a GPU:
   * GEMMs at precision.gpu, DIT_ERR_UNSUPPORTED where it has no fp8). */
  dit_status (*create)(int device, int n_threads, dit_backend_precision precision, const dit_run_opts *opts,
                       dit_backend **out, dit_error *err);
  /* The device's free and total memory in bytes (the CPU: available and physical RAM). */
  dit_status (*mem_info)(int device, size_t *free_b, size_t *total_b, dit_error *err);
} dit_backend_kind_info;
size_t dit_backend_kind_count(void);
const dit_backend_kind_info *dit_backend_kind_at(size_t i);
/* The row of `kind`, or NULL when this build lacks it. */
const dit_backend_kind_info *dit_backend_kind_get(dit_device_kind kind);

/* Creates a backend of `kind` (DIT_ERR_UNSUPPORTED when the build lacks it). Whoever creates
 * a backend frees it with dit_backend_free. */
dit_status dit_backend_create(dit_device_kind kind, int device, int n_threads, dit_backend_precision precision,
                              const dit_run_opts *opts, dit_backend **out, dit_error *err);
dit_status dit_backend_mem_info(dit_device_kind kind, int device, size_t *free_b, size_t *total_b, dit_error *err);
/* Device memory in use now on a GPU (whole device, every process), 0 on the CPU. */
size_t dit_backend_device_used(dit_device_kind kind, int device);
/* Whether be has op number `op` (table order of DIT_BACKEND_OPS; the fused ops are optional). */
bool dit_backend_supports_op(const dit_backend *be, int op);
void dit_backend_free(dit_backend *be);
/* Gives back what be keeps between calls for its kernels (ops.trim; nothing where it has none):
 * at the end of a stage, so the next one does not hold the last one's working memory. */
void dit_backend_trim(dit_backend *be);

dit_status dit_backend_cpu_create(int n_threads, dit_backend **out, dit_error *err);
/* The CPU backend's GEMM kernel path now: "avx512bf16", "avx512" (AVX-512 without BF16),
 * "avx2", "neon" (AArch64) or "portable" (the best the CPU has, narrowed by the
 * environment's DIT_CPU_ISA; create refuses one the CPU lacks). */
const char *dit_cpu_isa_name(const dit_backend *be);
/* The workspace the CPU backend's attention op allocates while it runs over B x Hq heads of Sq
 * queries and Sk keys of D channels (each thread's packed K and V), for planners; 0 for another
 * backend (a device's workspace is its own). */
size_t dit_cpu_attention_workspace(const dit_backend *be, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t D);
/* The paths DIT_CPU_ISA may name in this build, as a comma-separated list. */
const char *dit_cpu_isa_names(void);
/* CPU backend only: the precision of its linear layers (DIT_CPU_PRECISION_FP32, the
 * default: fp32 products; DIT_CPU_PRECISION_BF16: activations and weights rounded to bf16,
 * products accumulated in fp32, with vdpbf16ps where the CPU has AVX512-BF16). */
dit_status dit_backend_cpu_set_precision(dit_backend *be, dit_cpu_precision p, dit_error *err);

#ifdef DIT_HAVE_CUDA
/* CUDA backend on device `device`: one owned stream, cuBLASLt GEMMs, fused kernels. Ops take
 * device pointers (tensors with device DIT_DEV_CUDA); activations may be F32 or BF16 (all
 * activation operands of one call share a dtype); upload is asynchronous on the backend's
 * stream (pageable host memory is staged before it returns; pinned memory must stay valid
 * until sync), download waits for its copy. Call ops from one host thread. */
dit_status dit_backend_cuda_create(int device, dit_gpu_precision precision, const dit_run_opts *opts,
                                   dit_backend **out, dit_error *err);
/* Memory in use on CUDA device `device` (total - free), 0 when it cannot be asked. */
int dit_cuda_device_count(void);
dit_status dit_cuda_mem_info(int device, size_t *free_b, size_t *total_b, dit_error *err);
#endif

/* ---- generic helpers (backend.c) ---- */
struct dit_wtable;

/* True when the backend's memory is host memory (the CPU backend, or a profiler over it). */
bool dit_backend_is_host(const dit_backend *be);
/* A model's activation buffer for n slots of need[i] bytes (each 256-byte aligned): *act of
 * *act_bytes is replaced by a larger one when they do not fit (kept for the next call
 * otherwise); slot[i] points into it. */
dit_status dit_backend_fit_slots(dit_backend *be, const size_t *need, int n, void **act, size_t *act_bytes,
                                 char **slot, dit_error *err);
/* The device tag tensors in this backend's memory carry. */
dit_device dit_backend_device(const dit_backend *be);
/* Copies every bound tensor of t (dst->data set, host memory) into one new backend
 * allocation *block (stored dtype kept, 256-byte aligned pieces) and repoints the
 * destinations there (device tag set). Free *block with be->ops->free. */
dit_status dit_backend_upload_wtable(dit_backend *be, const struct dit_wtable *t, void **block, dit_error *err);
/* The same, converting on the way (flags, or'd): */
enum {
  DIT_UPLOAD_F16_AS_BF16 = 1,         /* F16 tensors to BF16 (same size, the range of fp32: for models whose
                                         activations overflow fp16, such as T5) */
  DIT_UPLOAD_F32_MATRICES_AS_BF16 = 2, /* F32 matrices (2-D) to BF16: a transformer stored in fp32 runs its GEMMs
                                         as one stored in bf16 does (the GPU's bf16 activations need bf16 w) */
  DIT_UPLOAD_FP8_COMPUTE = 4, /* on an fp8 backend (be->fp8): the float matrices dit_wname_fp8_compute names to
                                float8_e4m3 with a per-tensor scale (amax / 448), the rest as the other flags say */
  DIT_UPLOAD_F32_WEIGHTS_AS_BF16 = 8 /* F32 tensors of 2 or more dims (matrices, conv kernels) to BF16, once: a
                                        VAE runs in bf16 on a GPU (an F32 checkpoint's convolutions would
                                        convert w per call, its attention GEMMs take no F32 w) */
};
dit_status dit_backend_upload_wtable_as(dit_backend *be, const struct dit_wtable *t, unsigned flags, void **block,
                                        dit_error *err);
/* Gives every entry of t (unbound) deterministic random values of dtype dt (F32/BF16/F16;
 * with flags DIT_UPLOAD_FP8_COMPUTE on an fp8 backend the matrices dit_wname_fp8_compute
 * names are e4m3, scaled; the other flags do nothing here) in one new backend allocation *block: uniform in +-1/sqrt(last dim) for matrices,
 * 1 +- 0.05 for 1-D "*weight" tensors (norm scales), +-0.02 for other 1-D tensors. Same seed, same values
 * on every backend. For benchmarks at real geometry without checkpoint files. */
dit_status dit_backend_random_wtable(dit_backend *be, const struct dit_wtable *t, dit_dtype dt, unsigned flags,
                                     uint64_t seed, void **block, dit_error *err);

/* Checks an activation dtype asked of a model on be: F32 anywhere, BF16 on device backends
 * only (the CPU backend computes in F32). `what` names the model in the message. */
dit_status dit_backend_check_act_dtype(const dit_backend *be, dit_dtype dt, const char *what, dit_error *err);

/* Profiler: a backend that forwards every call to `inner` and, while enabled, times each
 * op and adds it to the op's total (and, for linear, to its GEMM shape's). Where the inner
 * backend has device timers, each op is timed between two marks in the queue, with no sync
 * between ops (collect the times with dit_backend_profiler_finish); elsewhere it syncs
 * around each op and reads the host clock. It also tracks the bytes allocated through it
 * (live and peak). The profiler does not own inner; free it with dit_backend_profiler_free
 * (not dit_backend_free). */
typedef enum dit_op_class { DIT_OPC_GEMM = 0, DIT_OPC_ATTENTION, DIT_OPC_ELEMENTWISE, DIT_OPC_COUNT } dit_op_class;
#define DIT_PROF_OPS DIT_N_OPS
#define DIT_PROF_SHAPES 48
typedef struct dit_prof_shape {
  int64_t m, n, k; /* y[m, n] = x[m, k] w[n, k]^T; a conv: m output pixels, n = Co, k = Ci kh kw */
  long calls;
  double ms;
  bool conv;
} dit_prof_shape;
typedef struct dit_prof_stats {
  double ms[DIT_PROF_OPS];    /* per op (names: dit_prof_op_name) */
  long calls[DIT_PROF_OPS];
  bool device_timed;          /* the times are device spans between marks (no syncs between ops) */
  double span_ms;             /* device_timed: first op's start to last op's end */
  int n_shapes;               /* linear and conv2d calls by shape, first seen first (more shapes: not split) */
  dit_prof_shape shapes[DIT_PROF_SHAPES];
  size_t live_bytes, peak_bytes; /* allocated through the profiler */
} dit_prof_stats;
const char *dit_prof_op_name(int op);
dit_op_class dit_prof_op_class(int op);
dit_status dit_backend_profiler_create(dit_backend *inner, dit_backend **out, dit_error *err);
void dit_backend_profiler_enable(dit_backend *prof, bool on);
/* Clears the times and counts (not the memory counters). */
void dit_backend_profiler_reset(dit_backend *prof);
/* Waits for the timed ops and adds their device times to the stats (device timers only;
 * a no-op otherwise). Call after the profiled work, before reading the stats. */
dit_status dit_backend_profiler_finish(dit_backend *prof, dit_error *err);
const dit_prof_stats *dit_backend_profiler_stats(const dit_backend *prof);
void dit_backend_profiler_free(dit_backend *prof);

/* Thin wrappers so model code reads like the reference modules: dit_op_linear(be, ...) and
 * so on for every plain op, calling the backend's. */
#define DIT_OP_WRAPPER(name, params, args) \
  static inline dit_status dit_op_##name(dit_backend *be, DIT_EXPAND params) { return be->ops->name(be, DIT_EXPAND args); }
DIT_BACKEND_LINEAR_OP(DIT_OP_WRAPPER)
DIT_BACKEND_BASE_OPS(DIT_OP_WRAPPER)
#undef DIT_OP_WRAPPER

/* Fused ops (backend_fused.c): dit_op_<op> runs the backend's op when it has one, else
 * dit_unfused_<op>, the sequence of plain ops that defines it (the reference semantics; also
 * what a backend runs for the cases its kernel does not take). */
#define DIT_OP_FUSED_DECL(name, params, args) \
  DIT_BACKEND_OP_DECL(dit_op_##name, params) DIT_BACKEND_OP_DECL(dit_unfused_##name, params)
DIT_BACKEND_FUSED_OPS(DIT_OP_FUSED_DECL)
#undef DIT_OP_FUSED_DECL

#endif
