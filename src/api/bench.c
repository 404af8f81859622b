/* Public benchmark API (ditrun bench): one DiT forward of a family's bench variant
 * (family_bench.h) at the real geometry with random
 * weights made in memory, timed un-profiled (warmup, then the median of iters) and once
 * through the profiling backend (sync after every op) for a GEMM / attention /
 * elementwise split; FLOPs from the geometry, TFLOP/s against a stated peak, and peak
 * memory (RSS on the CPU, device memory in use on a GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/ctx.h"
#include "core/splitmix.h"
#include "core/timer.h"
#include "api/bench_internal.h"
#include "pipeline/family.h"

#define MAX_RES 8192
#define MAX_TEXT 4096
#define MAX_ITERS 10000
/* CPU: measured fp32 FMA peak per thread (docs/perf/cpu.md: 24 independent AVX-512 FMA
 * chains, 2 pipes x 16 lanes x 2 flop x 3.84 GHz effective = 245.8 GFLOP/s). */
#define CPU_PEAK_PER_THREAD_TFLOPS 0.2458
/* GPU: bf16 GEMM ceiling measured on the H200 (issue 5: cuBLAS via torch, 753-766). */
#define GPU_PEAK_TFLOPS 760.0

void dit_bench_params_default(dit_bench_params *p) {
  memset(p, 0, sizeof *p);
  p->arch = "zimage";
  p->res = 1024;
  p->text_len = 128;
  p->device = DIT_DEVICE_CPU;
  p->dtype = DIT_BF16;
  p->iters = 5;
  p->warmup = 1;
  p->profile = 1;
  p->seed = 42;
}

int dit_bench_arch_get(size_t i, const char **name, const char **family, int *text_len) {
  const dit_family *f = NULL;
  const dit_bench_variant *v = dit_bench_variant_at(i, &f);
  if (!v) return 0;
  if (name) *name = v->name;
  if (family) *family = f->name;
  if (text_len) *text_len = v->text_len;
  return 1;
}

dit_status dit_bench_check_params(const dit_bench_params *p, dit_error *err) {
  char list[256];
  if (!dit_bench_variant_find(p->arch))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "bench: arch \"%s\" is not supported (supported: %s)",
                      p->arch ? p->arch : "(null)", dit_bench_variant_list(list, sizeof list));
  if (p->res < 16 || p->res > MAX_RES || p->res % 16 != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: resolution %d must be a multiple of 16 in 16..%d", p->res,
                      MAX_RES);
  if (p->text_len < 1 || p->text_len > MAX_TEXT)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: text length %d is outside 1..%d", p->text_len, MAX_TEXT);
  if (p->iters < 1 || p->iters > MAX_ITERS || p->warmup < 0 || p->warmup > MAX_ITERS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: iters %d (1..%d), warmup %d (0..%d)", p->iters, MAX_ITERS,
                      p->warmup, MAX_ITERS);
  if (p->dtype != DIT_BF16 && p->dtype != DIT_F32 && !dit_dtype_is_quant(p->dtype))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "bench: dtype %s (bf16, f32, fp8 or a block type such as q8_0)",
                      dit_dtype_name(p->dtype));
  if (!(p->peak_tflops >= 0) || !isfinite(p->peak_tflops))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: peak must be a finite number >= 0");
  if (p->dim < 0 || p->n_layers < 0 || p->n_refiner_layers < 0 || p->n_heads < 0 || p->cap_feat_dim < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: negative geometry override");
  if (p->ref_res < 0 || p->ref_res > MAX_RES || p->ref_res % 16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: reference resolution %d must be a multiple of 16 in 0..%d",
                      p->ref_res, MAX_RES);
  const dit_bench_variant *v = dit_bench_variant_find(p->arch);
  if (v->frames) {
    if (p->height < 0 || p->height > MAX_RES || p->height % 16 || p->frames < 0 || p->frames > 4096)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: height %d (a multiple of 16 in 16..%d) or %d frames "
                        "(1..4096) out of range", p->height, MAX_RES, p->frames);
  } else if ((p->height && p->height != p->res) || p->frames) {
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "bench: %s takes square images (--res PX) and no frames", p->arch);
  }
  const dit_family *fam = NULL;
  for (size_t i = 0; p->ref_res && dit_bench_variant_at(i, &fam); i++)
    if (!strcmp(dit_bench_variant_at(i, NULL)->name, p->arch)) break;
  if (p->ref_res && !(fam && (fam->inputs & DIT_INPUT_REF_IMAGES)))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "bench: %s takes no reference images", p->arch);
  return DIT_OK;
}

/* Device memory in use now (whole GPU), 0 on the CPU. */
size_t dit_bench_device_used(const dit_bench_params *p) { return dit_backend_device_used(p->device, p->cuda_device); }

dit_status dit_bench_make_backend(dit_ctx *ctx, const dit_bench_params *p, dit_backend **be, dit_error *err) {
  dit_status s =
      dit_backend_create(p->device, p->cuda_device, ctx->params.n_threads,
                         (dit_backend_precision){p->cpu_precision, p->gpu_precision}, &ctx->opts, be, err);
  if (s != DIT_OK) dit_error_prefix(err, "bench");
  return s;
}

/* Uniform in [-1.7, 1.7) (unit variance), deterministic. */
void dit_bench_fill_host(float *d, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; i++) d[i] = ((float)(dit_splitmix64(key ^ (i * 0xD1B54A32D192ED03ull)) >> 40) / 16777216.0f * 2 - 1) * 1.7f;
}

/* The model under test (a family's bench operations and its object) and its inputs in the
 * bench backend. */
typedef struct bench_model {
  const dit_bench_ops *ops;
  void *obj;
} bench_model;

typedef struct bench_io {
  dit_bench_io t;          /* the family's tensors (their data are px, pc, po) and ids */
  void *px, *pc, *po;
  float *host_out;
  size_t nx, nc;
} bench_io;

/* Allocates and fills x (nx floats), the text features (nc) and out (nx) in the backend
 * and points the family's tensors at them. */
static dit_status make_inputs(dit_backend *be, const dit_bench_params *p, bench_io *io, dit_error *err) {
  io->nx = (size_t)dit_tensor_numel(&io->t.x);
  io->nc = (size_t)dit_tensor_numel(&io->t.cap);
  float *h = malloc((io->nx > io->nc ? io->nx : io->nc) * sizeof(float));
  io->host_out = malloc(io->nx * sizeof(float));
  if (!h || !io->host_out) {
    free(h);
    return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory for inputs");
  }
  dit_status s = be->ops->alloc(be, io->nx * sizeof(float), &io->px, err);
  if (s == DIT_OK) s = be->ops->alloc(be, io->nc * sizeof(float), &io->pc, err);
  if (s == DIT_OK) s = be->ops->alloc(be, io->nx * sizeof(float), &io->po, err);
  if (s == DIT_OK) {
    dit_bench_fill_host(h, io->nx, p->seed ^ 0x1111);
    s = be->ops->upload(be, io->px, h, io->nx * sizeof(float), err);
  }
  if (s == DIT_OK) s = be->ops->sync(be, err);
  if (s == DIT_OK) {
    dit_bench_fill_host(h, io->nc, p->seed ^ 0x2222);
    s = be->ops->upload(be, io->pc, h, io->nc * sizeof(float), err);
  }
  if (s == DIT_OK) s = be->ops->sync(be, err);
  free(h);
  io->t.x.data = io->px;
  io->t.cap.data = io->pc;
  io->t.out.data = io->po;
  io->t.x.device = io->t.out.device = io->t.cap.device = dit_backend_device(be);
  return s;
}

static void free_inputs(dit_backend *be, bench_io *io) {
  if (io->px) be->ops->free(be, io->px);
  if (io->pc) be->ops->free(be, io->pc);
  if (io->po) be->ops->free(be, io->po);
  free(io->host_out);
  free(io->t.img_ids);
  free(io->t.txt_ids);
  free(io->t.vec);
}

/* Process CPU time (all threads), ms: on a shared machine the rate per CPU-second is what
 * the code reaches while it holds the cores (docs/perf/cpu.md). */
static double dit_bench_cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double dit_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static dit_status forward_once(bench_model *m, dit_backend *be, bench_io *io, double *ms, dit_error *err) {
  double t0 = dit_time_now();
  DIT_TRY(m->ops->forward(m->obj, &io->t, err));
  DIT_TRY(be->ops->sync(be, err));
  *ms = (dit_time_now() - t0) * 1e3;
  return DIT_OK;
}

static long graph_launches(const bench_model *m) {
  long c = 0, l = 0;
  m->ops->graph_counts(m->obj, &c, &l);
  return l;
}

/* After a profiled run: waits for its device times and copies the per-op split and the
 * shapes (linear and conv as GEMMs) into r. */
dit_status dit_bench_take_profile(dit_backend *prof, dit_bench_result *r, dit_error *err) {
  DIT_TRY(dit_backend_profiler_finish(prof, err));
  const dit_prof_stats *st = dit_backend_profiler_stats(prof);
  r->profiled = 1;
  r->prof_device_timed = st->device_timed;
  r->prof_span_ms = st->span_ms;
  for (int i = 0; i < st->n_shapes && i < DIT_BENCH_MAX_SHAPES; i++) {
    r->gemm_shapes[i].m = st->shapes[i].m, r->gemm_shapes[i].n = st->shapes[i].n;
    r->gemm_shapes[i].k = st->shapes[i].k, r->gemm_shapes[i].calls = st->shapes[i].calls;
    r->gemm_shapes[i].ms = st->shapes[i].ms, r->gemm_shapes[i].conv = st->shapes[i].conv;
    r->n_gemm_shapes = i + 1;
  }
  for (int i = 0; i < DIT_PROF_OPS && r->n_ops < DIT_BENCH_MAX_OPS; i++) {
    if (!st->calls[i]) continue;
    r->op_name[r->n_ops] = dit_prof_op_name(i);
    r->op_ms[r->n_ops] = st->ms[i];
    r->op_calls[r->n_ops++] = st->calls[i];
    r->phase_ms[dit_prof_op_class(i)] += st->ms[i];
  }
  return DIT_OK;
}

/* Warmup, timed runs, then the profiled run; fills the timing fields of r. */
static dit_status measure(const dit_bench_params *p, bench_model *m, dit_backend *prof, bench_io *io,
                          dit_bench_result *r, dit_error *err) {
  double ms, *ts = malloc((size_t)p->iters * sizeof *ts);
  if (!ts) return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory");
  dit_status s = DIT_OK;
  for (int i = 0; i < p->warmup && s == DIT_OK; i++) {
    s = forward_once(m, prof, io, &ms, err);
    if (i == 0) r->first_ms = ms;
  }
  if (s == DIT_OK && dit_bench_device_used(p) > r->peak_mem_bytes) r->peak_mem_bytes = dit_bench_device_used(p);
  r->cpu_ms_min = 0;
  const long launches0 = graph_launches(m);
  for (int i = 0; i < p->iters && s == DIT_OK; i++) {
    double c0 = dit_bench_cpu_ms();
    s = forward_once(m, prof, io, &ts[i], err);
    if (i == 0 && p->warmup == 0) r->first_ms = ts[0];
    double c = dit_bench_cpu_ms() - c0;
    if (i == 0 || c < r->cpu_ms_min) r->cpu_ms_min = c;
  }
  r->graph_launches = graph_launches(m) - launches0;
  if (s == DIT_OK) {
    r->iters = p->iters;
    r->ms_median = dit_bench_median(ts, p->iters); /* sorts ts */
    r->ms_min = ts[0];
    r->ms_max = ts[p->iters - 1];
  }
  free(ts);
  if (s == DIT_OK && p->profile) {
    dit_backend_profiler_reset(prof);
    dit_backend_profiler_enable(prof, true);
    s = forward_once(m, prof, io, &r->prof_total_ms, err);
    dit_backend_profiler_enable(prof, false);
    if (s == DIT_OK) s = dit_bench_take_profile(prof, r, err);
  }
  if (s == DIT_OK && dit_bench_device_used(p) > r->peak_mem_bytes) r->peak_mem_bytes = dit_bench_device_used(p);
  return s;
}

static dit_status check_output(dit_backend *be, bench_io *io, dit_bench_result *r, dit_error *err) {
  DIT_TRY(be->ops->download(be, io->host_out, io->po, io->nx * sizeof(float), err));
  r->output_finite = 1;
  for (size_t i = 0; i < io->nx; i++)
    if (!isfinite(io->host_out[i])) r->output_finite = 0;
  return DIT_OK;
}

static void fill_header(const dit_bench_params *p, dit_backend *be, dit_dtype adt, dit_bench_result *r) {
  snprintf(r->arch, sizeof r->arch, "%s", p->arch);
  snprintf(r->device, sizeof r->device, "%s", be->ops->name);
  snprintf(r->cpu_isa, sizeof r->cpu_isa, "%s", p->device == DIT_DEVICE_CPU ? dit_cpu_isa_name(be) : "");
  /* fp8 compute: the blocks' matrices are e4m3 whatever --dtype is (dit_wname_fp8_compute) */
  snprintf(r->weight_dtype, sizeof r->weight_dtype, "%s", dit_dtype_name(be->fp8 && !dit_dtype_is_quant(p->dtype) ? DIT_F8_E4M3 : p->dtype));
  snprintf(r->act_dtype, sizeof r->act_dtype, "%s", dit_dtype_name(adt));
  r->res = p->res;
  const dit_bench_variant *v = dit_bench_variant_find(p->arch);
  if (v && v->frames) r->height = p->height ? p->height : p->res, r->frames = p->frames ? p->frames : v->frames;
  r->ref_res = p->ref_res;
  r->text_len = p->text_len;
  r->threads = be->n_threads;
  if (p->peak_tflops > 0) {
    r->peak_tflops = p->peak_tflops;
    snprintf(r->peak_what, sizeof r->peak_what, "given with --peak");
  } else if (p->device == DIT_DEVICE_CPU) {
    /* the kernel path's vectors: 512-bit (AVX-512), or 256-bit AVX2 at half the rate */
    const bool ymm = !strcmp(r->cpu_isa, "avx2");
    r->peak_tflops = CPU_PEAK_PER_THREAD_TFLOPS * be->n_threads / (ymm ? 2 : 1);
    snprintf(r->peak_what, sizeof r->peak_what, "fp32 FMA%s, measured 245.8 GFLOP/s per thread%s x %d",
             ymm ? " on 256-bit vectors" : "", ymm ? " / 2" : "", be->n_threads);
    if (p->cpu_precision == DIT_CPU_PRECISION_BF16 && !strcmp(r->cpu_isa, "avx512bf16")) {
      r->peak_tflops *= 2; /* vdpbf16ps: 2 products per fp32 lane */
      snprintf(r->peak_what, sizeof r->peak_what, "bf16 vdpbf16ps = 2 x measured fp32 FMA 245.8 GFLOP/s x %d",
               be->n_threads);
    }
  } else {
    r->peak_tflops = GPU_PEAK_TFLOPS;
    snprintf(r->peak_what, sizeof r->peak_what, "bf16 GEMM ceiling measured on an H200 (cuBLAS)");
  }
}

/* Shared tail of a bench: inputs made, timed, profiled and checked. */
static dit_status time_model(const dit_bench_params *p, bench_model *m, dit_backend *prof, bench_io *io,
                             dit_bench_result *r, dit_error *err) {
  dit_status s = measure(p, m, prof, io, r, err);
  if (s == DIT_OK) s = check_output(prof, io, r, err);
  if (s == DIT_OK) {
    r->tflops = r->flops / (r->ms_median * 1e-3) / 1e12;
    r->pct_peak = r->peak_tflops > 0 ? 100.0 * r->tflops / r->peak_tflops : 0;
    r->alloc_peak_bytes = dit_backend_profiler_stats(prof)->peak_bytes;
    if (p->device == DIT_DEVICE_CPU) r->peak_mem_bytes = dit_peak_rss_bytes();
  }
  return s;
}

/* The forward of m's output (io->host_out) against the same forward with bf16 weights of the
 * same random values: m is freed first (one model in memory at a time), the bf16 one made,
 * run once on the same inputs and freed. */
static dit_status ref_error(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                            dit_backend *be, dit_dtype adt, bench_model *m, bench_io *io, dit_bench_result *r,
                            dit_error *err) {
  float *q = malloc(io->nx * sizeof *q);
  if (!q) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the reference comparison");
  memcpy(q, io->host_out, io->nx * sizeof *q);
  v->ops->free(m->obj);
  m->obj = NULL;
  dit_bench_params pb = *p;
  pb.dtype = DIT_BF16;
  double ms = 0;
  dit_status s = v->ops->create(v, &pb, o, be, adt, &m->obj, err);
  if (s == DIT_OK) s = forward_once(m, be, io, &ms, err);
  if (s == DIT_OK) s = be->ops->download(be, io->host_out, io->po, io->nx * sizeof(float), err);
  if (s == DIT_OK) {
    double se = 0, sb = 0, md = 0, mb = 0;
    for (size_t i = 0; i < io->nx; i++) {
      const double d = fabs((double)q[i] - io->host_out[i]), b = fabs((double)io->host_out[i]);
      se += d * d, sb += b * b;
      md = d > md ? d : md, mb = b > mb ? b : mb;
    }
    r->have_ref = 1;
    r->ref_rel_l2 = sb > 0 ? sqrt(se / sb) : sqrt(se);
    r->ref_rel_max = mb > 0 ? md / mb : md;
  }
  free(q);
  return s;
}

/* One variant's bench: the family's random-weight model at p's geometry, its inputs, then
 * timed, profiled and checked. */
static dit_status run_variant(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                              dit_backend *be, dit_bench_result *r, dit_error *err) {
  dit_backend *prof = NULL;
  bench_model m = {v->ops, NULL};
  bench_io io;
  memset(&io, 0, sizeof io);
  const dit_dtype adt = p->device != DIT_DEVICE_CPU &&
                                (p->dtype == DIT_BF16 || dit_dtype_is_quant(p->dtype)) ? DIT_BF16 : DIT_F32;
  double t0 = dit_time_now();
  dit_status s = dit_backend_profiler_create(be, &prof, err);
  if (s == DIT_OK) s = v->ops->create(v, p, o, prof, adt, &m.obj, err);
  if (s == DIT_OK) {
    fill_header(p, be, adt, r);
    int64_t img = 0, cap = 0, aux = 0;
    v->ops->geometry(m.obj, p, &img, &cap, &aux, &r->flops);
    r->img_tokens = img;
    r->cap_tokens = cap;
    r->aux_tokens = aux;
    r->weight_bytes = v->ops->weight_bytes(m.obj);
    r->params = (long long)v->ops->weight_params(m.obj);
    s = v->ops->inputs(m.obj, p, &io.t, err);
    if (s == DIT_OK) s = make_inputs(prof, p, &io, err);
  }
  r->setup_s = dit_time_now() - t0;
  if (s == DIT_OK) s = time_model(p, &m, prof, &io, r, err);
  if (s == DIT_OK && p->ref_bf16 && (p->dtype != DIT_BF16 || be->fp8)) {
    const bool fp8 = be->fp8;
    be->fp8 = prof->fp8 = false; /* the reference: bf16 weights and bf16 GEMMs */
    s = ref_error(v, p, o, prof, adt, &m, &io, r, err);
    be->fp8 = prof->fp8 = fp8;
  }
  if (prof) free_inputs(prof, &io);
  if (m.obj) v->ops->free(m.obj);
  dit_backend_profiler_free(prof);
  return s;
}

dit_status dit_bench_run(dit_ctx *ctx, const dit_bench_params *p, dit_bench_result *r) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  memset(r, 0, sizeof *r);
  if (!p) return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: no parameters");
  DIT_TRY(dit_bench_check_params(p, err));
  size_t base = dit_bench_device_used(p);
  dit_backend *be = NULL;
  DIT_TRY(dit_bench_make_backend(ctx, p, &be, err));
  r->device_base_bytes = base;
  dit_status s = run_variant(dit_bench_variant_find(p->arch), p, &ctx->opts, be, r, err);
  size_t keep_base = r->device_base_bytes;
  if (s != DIT_OK) {
    memset(r, 0, sizeof *r);
    dit_error_prefix(err, "bench");
  }
  r->device_base_bytes = keep_base;
  dit_backend_free(be);
  return s;
}

static double gib(size_t b) { return (double)b / (double)(1u << 30); }

static void print_json(const dit_bench_result *r, FILE *f) {
  fprintf(f,
          "{\"arch\": \"%s\", \"device\": \"%s\", \"weight_dtype\": \"%s\", \"act_dtype\": \"%s\", \"res\": %d, "
          "\"height\": %d, \"frames\": %d, \"aux_tokens\": %lld, "
          "\"ref_res\": %d, \"text_len\": %d, \"threads\": %d, \"img_tokens\": %lld, \"cap_tokens\": %lld, \"params\": %lld, "
          "\"flops\": %.6g, \"iters\": %d, \"ms_median\": %.4f, \"ms_min\": %.4f, \"ms_max\": %.4f, "
          "\"tflops\": %.4f, \"peak_tflops\": %.4f, \"pct_peak\": %.3f, \"peak_what\": \"%s\", \"cpu_isa\": \"%s\", ",
          r->arch, r->device, r->weight_dtype, r->act_dtype, r->res, r->height, r->frames, r->aux_tokens, r->ref_res,
          r->text_len, r->threads, r->img_tokens,
          r->cap_tokens, r->params, r->flops, r->iters, r->ms_median, r->ms_min, r->ms_max, r->tflops, r->peak_tflops,
          r->pct_peak, r->peak_what, r->cpu_isa);
  fprintf(f, "\"profiled\": %s, \"prof_device_timed\": %s, \"prof_total_ms\": %.4f, \"prof_span_ms\": %.4f, "
             "\"phase_ms\": {\"gemm\": %.4f, \"attention\": %.4f, \"elementwise\": %.4f}, \"ops\": {",
          r->profiled ? "true" : "false", r->prof_device_timed ? "true" : "false", r->prof_total_ms, r->prof_span_ms,
          r->phase_ms[0], r->phase_ms[1], r->phase_ms[2]);
  for (int i = 0; i < r->n_ops; i++)
    fprintf(f, "%s\"%s\": {\"ms\": %.4f, \"calls\": %ld}", i ? ", " : "", r->op_name[i], r->op_ms[i],
            r->op_calls[i]);
  fprintf(f, "}, \"gemm_shapes\": [");
  for (int i = 0; i < r->n_gemm_shapes; i++)
    fprintf(f, "%s{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"calls\": %ld, \"ms\": %.4f, \"conv\": %s}",
            i ? ", " : "", r->gemm_shapes[i].m, r->gemm_shapes[i].n, r->gemm_shapes[i].k, r->gemm_shapes[i].calls,
            r->gemm_shapes[i].ms, r->gemm_shapes[i].conv ? "true" : "false");
  fprintf(f,
          "], \"weight_bytes\": %zu, \"alloc_peak_bytes\": %zu, \"peak_mem_bytes\": %zu, \"device_base_bytes\": %zu, "
          "\"setup_s\": %.3f, \"first_ms\": %.2f, \"output_finite\": %s, \"graph_launches\": %ld",
          r->weight_bytes, r->alloc_peak_bytes, r->peak_mem_bytes, r->device_base_bytes, r->setup_s, r->first_ms,
          r->output_finite ? "true" : "false", r->graph_launches);
  if (r->have_ref) fprintf(f, ", \"ref_rel_l2\": %.6g, \"ref_rel_max\": %.6g", r->ref_rel_l2, r->ref_rel_max);
  fprintf(f, "}\n");
}

/* The profiled run's split: phases, ops, and GEMM shapes with their rates. */
void dit_bench_print_profile(const dit_bench_result *r, FILE *f) {
  const double tot = r->prof_device_timed ? r->prof_span_ms : r->prof_total_ms;
  const double d = tot > 0 ? tot : 1, rest = tot - r->phase_ms[0] - r->phase_ms[1] - r->phase_ms[2];
  fprintf(f, "  profiled run (%s): %.2f ms: GEMM %.2f (%.1f%%), attention %.2f (%.1f%%), elementwise %.2f (%.1f%%), "
             "%s %.2f\n",
          r->prof_device_timed ? "device events around each op, no syncs between ops; first op start to last op end"
                               : "sync after each op, host clock",
          tot, r->phase_ms[0], 100 * r->phase_ms[0] / d, r->phase_ms[1], 100 * r->phase_ms[1] / d, r->phase_ms[2],
          100 * r->phase_ms[2] / d, r->prof_device_timed ? "gaps between ops" : "other", rest);
  if (r->prof_device_timed) fprintf(f, "    (host wall time of that forward %.2f ms)\n", r->prof_total_ms);
  for (int i = 0; i < r->n_ops; i++)
    fprintf(f, "    %-20s %9.2f ms  %6ld calls\n", r->op_name[i], r->op_ms[i], r->op_calls[i]);
  if (r->n_gemm_shapes)
    fprintf(f, "  GEMM shapes (linear: y[m,n] = x[m,k] w[n,k]^T; conv: m output pixels, n out channels, k in "
               "channels x kernel area):\n");
  for (int i = 0; i < r->n_gemm_shapes; i++) {
    const double ms = r->gemm_shapes[i].ms, fl = 2.0 * (double)r->gemm_shapes[i].m * (double)r->gemm_shapes[i].n *
                                                  (double)r->gemm_shapes[i].k * (double)r->gemm_shapes[i].calls;
    fprintf(f, "    %-6s m %8lld n %6lld k %6lld  %4ld calls %9.3f ms  %8.1f us/call  %7.1f TFLOP/s\n",
            r->gemm_shapes[i].conv ? "conv" : "linear", r->gemm_shapes[i].m,
            r->gemm_shapes[i].n, r->gemm_shapes[i].k, r->gemm_shapes[i].calls, ms,
            r->gemm_shapes[i].calls ? 1e3 * ms / (double)r->gemm_shapes[i].calls : 0.0,
            ms > 0 ? fl / (ms * 1e-3) / 1e12 : 0.0);
  }
}

void dit_bench_print(const dit_bench_result *r, int json, FILE *f) {
  if (json) {
    print_json(r, f);
    return;
  }
  const bool vae = !strcmp(r->arch, "vae-flux");
  char ref[64] = "";
  if (r->ref_res) snprintf(ref, sizeof ref, " + a %dx%d reference", r->ref_res, r->ref_res);
  if (vae)
    fprintf(f, "vae-flux decode (AutoencoderKL, Flux / Z-Image), a %dx%d image from a %dx%dx16 latent (host to host), "
               "%s weights, %s activations, device %s%s%s\n",
            r->res, r->res, r->res / 8, r->res / 8, r->weight_dtype, r->act_dtype, r->device,
            r->cpu_isa[0] ? ", kernel path " : "", r->cpu_isa);
  else if (r->frames)
    fprintf(f, "%s forward, %dx%d, %d frames, %d text tokens: %lld video + %lld audio + %lld text tokens of each "
               "stream, %s weights, %s activations, device %s%s%s (%d thread%s)\n",
            r->arch, r->res, r->height, r->frames, r->text_len, r->img_tokens, r->aux_tokens, r->cap_tokens,
            r->weight_dtype, r->act_dtype, r->device, r->cpu_isa[0] ? ", kernel path " : "", r->cpu_isa, r->threads,
            r->threads == 1 ? "" : "s");
  else
    fprintf(f, "%s forward, %dx%d%s, %d text tokens: %lld image + %lld text tokens (as computed), %s weights, %s "
             "activations, device %s%s%s (%d thread%s)\n",
          r->arch, r->res, r->res, ref, r->text_len, r->img_tokens, r->cap_tokens, r->weight_dtype, r->act_dtype,
          r->device, r->cpu_isa[0] ? ", kernel path " : "", r->cpu_isa, r->threads, r->threads == 1 ? "" : "s");
  if (vae) {
    fprintf(f, "  setup (random weights) %.1f s, first decode (tunes unless cached) %.1f ms\n", r->setup_s, r->first_ms);
    fprintf(f, "  FLOP per decode %.4g (2 Ci Co kh kw per output pixel of each conv, 4 S^2 C for the mid-block "
               "attention, 2 K N per token of its linears)\n", r->flops);
  } else {
    fprintf(f, "  params %.3f B, setup (random weights) %.1f s, first forward (tunes unless cached) %.1f ms\n",
            (double)r->params / 1e9, r->setup_s, r->first_ms);
    const dit_bench_variant *v = dit_bench_variant_find(r->arch);
    fprintf(f, "  FLOP per forward %.4g (%s)\n", r->flops, v ? v->ops->flops_what : "?");
  }
  fprintf(f, "  time: median %.2f ms (min %.2f, max %.2f, %d runs)\n", r->ms_median, r->ms_min, r->ms_max, r->iters);
  if (strcmp(r->device, "cpu") && !vae)
    fprintf(f, "  %ld of the %d timed runs replayed one captured graph (DIT_CUDA_GRAPHS=0: op by op)\n",
            r->graph_launches, r->iters);
  if (vae) fprintf(f, "  achieved %.3f TFLOP/s\n", r->tflops);
  else
    fprintf(f, "  achieved %.3f TFLOP/s = %.1f%% of %.1f TFLOP/s (%s)\n", r->tflops, r->pct_peak, r->peak_tflops,
            r->peak_what);
  if (!strcmp(r->device, "cpu") && r->cpu_ms_min > 0) {
    double ct = r->flops / (r->cpu_ms_min * 1e-3 / r->threads) / 1e12;
    fprintf(f, "  CPU time: least %.2f s of process CPU per run = %.3f TFLOP/s per CPU-second x %d threads "
               "(%.1f%% of peak; the wall rate above is lower while other processes share the cores)\n",
            r->cpu_ms_min * 1e-3, ct, r->threads, r->peak_tflops > 0 ? 100 * ct / r->peak_tflops : 0);
  }
  if (r->profiled) dit_bench_print_profile(r, f);
  fprintf(f, "  memory: weights %.2f GiB, model allocations peak %.2f GiB, ", gib(r->weight_bytes),
          gib(r->alloc_peak_bytes));
  if (!strcmp(r->device, "cpu")) fprintf(f, "peak RSS %.2f GiB\n", gib(r->peak_mem_bytes));
  else
    fprintf(f, "device in use peak %.2f GiB (%.2f GiB before the backend)\n", gib(r->peak_mem_bytes),
            gib(r->device_base_bytes));
  fprintf(f, "  output finite: %s\n", r->output_finite ? "yes" : "NO");
  if (r->have_ref)
    fprintf(f, "  against bf16 weights of the same random values: relative error %.3e (L2), %.3e (max)\n",
            r->ref_rel_l2, r->ref_rel_max);
}
