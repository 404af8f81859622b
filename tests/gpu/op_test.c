/* GPU op test (needs a CUDA GPU; built as dit_gpu_op_test when CUDA is on, run by
 * `make gpu-test`, never by ctest): every CUDA op against the CPU op on fresh random
 * inputs. GPU outputs are poisoned with NaN before each run, then checked for NaN/Inf
 * (which also catches unwritten elements), normalized MSE and max relative error
 * (max |gpu - cpu| / max |cpu|). Big Z-Image shapes are timed with CUDA events (warmup,
 * median) and reported in TFLOP/s or GB/s; for those the CPU checks a subset of rows.
 * The generic cases (group_norm, timestep_embedding, upsample2x, copy and the rest of the op
 * table) come from the backend op table (tests/support/op_cases.c); the tests here are the
 * GPU-specific ones: kernel versions and switches, cuDNN paths and guards, big shapes, timing.
 * Usage: dit_gpu_op_test [--quick] (skips the big shapes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/act_math.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_conv.h"
#include "backend/cuda/cudnn_sdpa.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "op_cases.h"
#include "testing.h"

#define NREP 15
#define TOL_F32 1e-5  /* max rel err, fp32 ops */
#define TOL_NMSE 1e-4 /* bf16 operands (GEMM, attention, bf16 activations) */

typedef struct env {
  dit_backend *cpu, *gpu;
  cudaStream_t stream;
  cudaEvent_t ev0, ev1;
  uint64_t seed;
} env;

/* A tensor on both sides: c on the host (F32 activations or the weight's dtype) for the
 * CPU op, g on the GPU (dtype gdt). Values are identical (rounded to gdt first). */
typedef struct pair {
  dit_tensor c, g;
  int64_t n;
} pair;

#define OK(call)                                                      \
  do {                                                                \
    dit_error e_;                                                     \
    dit_status s_ = (call);                                           \
    if (s_ != DIT_OK) {                                               \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, e_.msg); \
      dt_failed++;                                                    \
    }                                                                 \
  } while (0)
#define E (&e_)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  return p;
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}
static float median(float *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_f);
  return t[n / 2];
}

/* Runs call warm (3x) and then NREP times between events; ms = median. */
#define TIMED(e, ms, call)                                          \
  do {                                                              \
    float t_[NREP];                                                 \
    for (int i_ = 0; i_ < 3; i_++) OK(call);                        \
    for (int i_ = 0; i_ < NREP; i_++) {                             \
      cudaEventRecord((e)->ev0, (e)->stream);                       \
      OK(call);                                                     \
      cudaEventRecord((e)->ev1, (e)->stream);                       \
      cudaEventSynchronize((e)->ev1);                               \
      cudaEventElapsedTime(&t_[i_], (e)->ev0, (e)->ev1);            \
    }                                                               \
    ms = median(t_, NREP);                                          \
  } while (0)

static pair mk(env *e, dit_dtype gdt, dit_dtype cdt, int ndim, const int64_t *shape, float amp, bool fill) {
  pair p;
  memset(&p, 0, sizeof p);
  p.n = 1;
  for (int i = 0; i < ndim; i++) p.n *= shape[i];
  size_t n = (size_t)p.n;
  float *v = xmalloc(n * sizeof(float));
  void *graw = xmalloc(n * dit_dtype_size(gdt));
  if (fill) {
    dt_fill_random(v, n, e->seed += 0x9e37);
    for (size_t i = 0; i < n; i++) v[i] *= amp;
  } else {
    for (size_t i = 0; i < n; i++) v[i] = 0.0f;
  }
  if (gdt == DIT_F32) memcpy(graw, v, n * 4);
  else dit_convert_from_f32(graw, v, gdt, n);
  void *craw = xmalloc(n * dit_dtype_size(cdt));
  if (cdt == gdt) memcpy(craw, graw, n * dit_dtype_size(gdt));
  else dit_convert_to_f32(craw, graw, gdt, n); /* cdt is F32 here */
  p.c = dit_tensor_make(cdt, craw, ndim, shape);
  void *d = NULL;
  OK(e->gpu->ops->alloc(e->gpu, n * dit_dtype_size(gdt), &d, E));
  if (fill) OK(e->gpu->ops->upload(e->gpu, d, graw, n * dit_dtype_size(gdt), E));
  else cudaMemsetAsync(d, 0xff, n * dit_dtype_size(gdt), e->stream); /* NaN poison (F32, BF16, F16) */
  p.g = dit_tensor_make(gdt, d, ndim, shape);
  p.g.device = DIT_DEV_CUDA;
  free(v);
  free(graw);
  return p;
}
/* Activation pair: GPU dtype dt, CPU F32. Output pairs (fill = false) are poisoned. */
static pair act(env *e, dit_dtype dt, int ndim, const int64_t *shape, bool fill) {
  return mk(e, dt, DIT_F32, ndim, shape, 1.0f, fill);
}
static pair wgt(env *e, dit_dtype dt, int ndim, const int64_t *shape, float amp) {
  return mk(e, dt, dt, ndim, shape, amp, true);
}
static void poison(env *e, pair *p) {
  cudaMemsetAsync(p->g.data, 0xff, (size_t)p->n * dit_dtype_size(p->g.dtype), e->stream);
}
static void drop(env *e, pair *p) {
  free(p->c.data);
  e->gpu->ops->free(e->gpu, p->g.data);
  memset(p, 0, sizeof *p);
}

/* Makes the GPU copy equal to the CPU copy (rounded to the GPU dtype), so that a check that
 * follows another on the same buffer starts both sides from the same values. */
static void resync(env *e, const pair *p) {
  size_t n = (size_t)p->n, es = dit_dtype_size(p->g.dtype);
  void *raw = xmalloc(n * es);
  if (p->g.dtype == DIT_F32) memcpy(raw, p->c.data, n * es);
  else dit_convert_from_f32(raw, p->c.data, p->g.dtype, n);
  OK(e->gpu->ops->upload(e->gpu, p->g.data, raw, n * es, E));
  free(raw);
}

/* Downloads g as floats (n elements starting at element off). */
static float *fetch(env *e, const dit_tensor *g, int64_t off, int64_t n) {
  size_t es = dit_dtype_size(g->dtype);
  void *raw = xmalloc((size_t)n * es);
  float *f = xmalloc((size_t)n * sizeof(float));
  dit_error e_;
  if (e->gpu->ops->download(e->gpu, raw, (const char *)g->data + (size_t)off * es, (size_t)n * es, E) != DIT_OK) {
    fprintf(stderr, "FAIL download: %s\n", e_.msg);
    dt_failed++;
  }
  dit_convert_to_f32(f, raw, g->dtype, (size_t)n);
  free(raw);
  return f;
}

/* Compares n GPU values (from element off of g) with n CPU floats; prints one line. */
static void compare_at(env *e, const char *name, const dit_tensor *g, int64_t off, const float *ref, int64_t n,
                       bool bf16_tol) {
  float *got = fetch(e, g, off, n);
  double se = 0, sr = 0, maxd = 0, maxr = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) {
      bad++;
      continue;
    }
    double d = fabs((double)got[i] - ref[i]);
    se += d * d;
    sr += (double)ref[i] * ref[i];
    if (d > maxd) maxd = d;
    if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
  }
  double nmse = sr > 0 ? se / sr : se, rel = maxr > 0 ? maxd / maxr : maxd;
  bool pass = bad == 0 && (bf16_tol ? nmse < TOL_NMSE : rel <= TOL_F32);
  printf("%-4s %-44s n=%-10lld nmse=%.2e maxrel=%.2e nonfinite=%lld (%s)\n", pass ? "ok" : "FAIL", name,
         (long long)n, nmse, rel, (long long)bad, bf16_tol ? "nmse<1e-4" : "maxrel<=1e-5");
  CHECK_MSG(pass, "%s", name);
  free(got);
}
static void compare(env *e, const char *name, const pair *p, bool bf16_tol) {
  compare_at(e, name, &p->g, 0, (const float *)p->c.data, p->n, bf16_tol);
}

static const char *dn(dit_dtype t) { return dit_dtype_name(t); }

/* ---------------- linear ---------------- */

static void t_linear(env *e, int64_t M, int64_t K, int64_t N, dit_dtype wdt, dit_dtype xdt, dit_dtype ydt,
                     bool bias, dit_act a) {
  int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N}, bs[1] = {N};
  pair x = act(e, xdt, 2, xs, true), w = wgt(e, wdt, 2, ws, 0.5f), b = wgt(e, wdt, 1, bs, 1.0f);
  pair y = act(e, ydt, 2, ys, false);
  OK(dit_op_linear(e->cpu, &y.c, &x.c, &w.c, bias ? &b.c : NULL, a, E));
  OK(dit_op_linear(e->gpu, &y.g, &x.g, &w.g, bias ? &b.g : NULL, a, E));
  char name[160];
  snprintf(name, sizeof name, "linear %lldx%lldx%lld w%s x%s y%s%s act%d", (long long)M, (long long)K,
           (long long)N, dn(wdt), dn(xdt), dn(ydt), bias ? " bias" : "", (int)a);
  compare(e, name, &y, wdt != DIT_F32 || xdt != DIT_F32 || ydt != DIT_F32);
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* An fp8 w with a per-tensor scale (stored values up to +-100, scale 1/256): the GPU takes the
 * scale as cuBLASLt's alpha before the bias, the CPU in its epilogue. */
static void t_linear_fp8(env *e, int64_t M, int64_t K, int64_t N, dit_dtype wdt, dit_dtype xdt, bool bias) {
  int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N}, bs[1] = {N};
  pair x = act(e, xdt, 2, xs, true), w = wgt(e, wdt, 2, ws, 100.0f), b = wgt(e, DIT_F32, 1, bs, 1.0f);
  pair y = act(e, xdt, 2, ys, false);
  w.c.scale = w.g.scale = 1.0f / 256.0f;
  OK(dit_op_linear(e->cpu, &y.c, &x.c, &w.c, bias ? &b.c : NULL, DIT_ACT_NONE, E));
  OK(dit_op_linear(e->gpu, &y.g, &x.g, &w.g, bias ? &b.g : NULL, DIT_ACT_NONE, E));
  char name[160];
  snprintf(name, sizeof name, "linear %lldx%lldx%lld w%s*scale x%s%s", (long long)M, (long long)K, (long long)N,
           dn(wdt), dn(xdt), bias ? " bias" : "");
  compare(e, name, &y, true);
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* A quantized w (a ggml block type, or fp8 with a per-tensor scale) with, for R > 0, a
 * low-rank term (a LoRA on quantized weights): the GPU adds B A / scale into its bf16
 * expansion of w, the CPU adds x A^T B^T beside its GEMM. a and b are rounded to bf16 first
 * (the GPU keeps them so), the CPU reads them as F32. A term of the wrong shape is refused. */
static void t_linear_quant(env *e, int64_t M, int64_t K, int64_t N, int64_t R, dit_dtype wdt, dit_dtype xdt) {
  int64_t xs[2] = {M, K}, ys[2] = {M, N}, bs[1] = {N};
  pair x = act(e, xdt, 2, xs, true), b = wgt(e, DIT_F32, 1, bs, 1.0f), y = act(e, xdt, 2, ys, false);
  pair y0 = act(e, xdt, 2, ys, false);
  const bool fp8 = wdt == DIT_F8_E4M3 || wdt == DIT_F8_E5M2;
  uint64_t rb = 0;
  dit_dtype_row_bytes(wdt, K, &rb);
  float *wf = xmalloc((size_t)(N * K) * sizeof(float));
  unsigned char *wq = xmalloc((size_t)(rb * N));
  dt_fill_random(wf, (size_t)(N * K), e->seed += 0x9e37);
  for (int64_t i = 0; i < N * K; i++) wf[i] *= fp8 ? 100.0f : 0.5f;
  if (fp8) dit_convert_from_f32(wq, wf, wdt, (size_t)(N * K));
  else
    for (int64_t r = 0; r < N; r++) dit_quant_row(wdt, wf + r * K, wq + r * rb, K);
  void *wg = NULL;
  OK(e->gpu->ops->alloc(e->gpu, (size_t)(rb * N), &wg, E));
  OK(e->gpu->ops->upload(e->gpu, wg, wq, (size_t)(rb * N), E));
  dit_tensor wc = dit_tensor_2d(wdt, wq, N, K), wgt_ = dit_tensor_2d(wdt, wg, N, K);
  wgt_.device = DIT_DEV_CUDA;
  wc.scale = wgt_.scale = fp8 ? 1.0f / 256.0f : 0.0f;
  int64_t as[2] = {R > 0 ? R : 1, K}, bsz[2] = {N, R > 0 ? R : 1};
  pair la = wgt(e, DIT_BF16, 2, as, 0.3f), lb = wgt(e, DIT_BF16, 2, bsz, 0.3f);
  float *laf = xmalloc((size_t)la.n * sizeof(float)), *lbf = xmalloc((size_t)lb.n * sizeof(float));
  dit_convert_to_f32(laf, la.c.data, DIT_BF16, (size_t)la.n);
  dit_convert_to_f32(lbf, lb.c.data, DIT_BF16, (size_t)lb.n);
  const dit_lowrank Lc = {dit_tensor_2d(DIT_F32, laf, as[0], K), dit_tensor_2d(DIT_F32, lbf, N, bsz[1])};
  const dit_lowrank Lg = {la.g, lb.g};
  if (R > 0) wc.lowrank = &Lc, wgt_.lowrank = &Lg;
  OK(dit_op_linear(e->cpu, &y.c, &x.c, &wc, &b.c, DIT_ACT_GELU_TANH, E));
  OK(dit_op_linear(e->gpu, &y.g, &x.g, &wgt_, &b.g, DIT_ACT_GELU_TANH, E));
  char name[160];
  snprintf(name, sizeof name, "linear %lldx%lldx%lld w%s%s x%s +lowrank R%lld", (long long)M, (long long)K,
           (long long)N, dn(wdt), fp8 ? "*scale" : "", dn(xdt), (long long)R);
  compare(e, name, &y, true);
  if (R > 0) { /* the term moved y: not a term the GEMM dropped */
    wc.lowrank = NULL;
    OK(dit_op_linear(e->cpu, &y0.c, &x.c, &wc, &b.c, DIT_ACT_GELU_TANH, E));
    double d = 0, r = 0;
    for (int64_t i = 0; i < M * N; i++) {
      const double v = ((float *)y.c.data)[i] - ((float *)y0.c.data)[i];
      d += v * v, r += (double)((float *)y0.c.data)[i] * ((float *)y0.c.data)[i];
    }
    CHECK_MSG(d > 1e-3 * r, "%s: the low-rank term hardly changes y (%g of %g)", name, d, r);
    dit_lowrank bad = Lg;
    bad.b.shape[0] = N - 1;
    wgt_.lowrank = &bad;
    dit_error e2;
    CHECK(dit_op_linear(e->gpu, &y.g, &x.g, &wgt_, &b.g, DIT_ACT_NONE, &e2) == DIT_ERR_INVALID_ARG &&
          strstr(e2.msg, "low-rank"));
  }
  e->gpu->ops->free(e->gpu, wg);
  free(wf), free(wq), free(laf), free(lbf);
  drop(e, &x), drop(e, &b), drop(e, &y), drop(e, &y0), drop(e, &la), drop(e, &lb);
}

/* fp8 compute (be->fp8): an e4m3 w (per-tensor scale) with x quantized per row on the GPU.
 * The reference repeats the quantization on the host (row scale amax / 448, codes e4m3 of
 * x / scale, nearest even) and sums the decoded products in double, so the GPU may differ
 * only by its fp32 sums and the bf16 rounding of y (nmse < 1e-5); against the unquantized
 * x the error must be larger (the fp8 path really ran). x may be a row view (stride ldx). */
static void t_linear_fp8c(env *e, int64_t M, int64_t K, int64_t N, int64_t ldx, dit_dtype xdt, bool bias,
                          dit_act a) {
  int64_t xs[2] = {M, ldx}, ws[2] = {N, K}, ys[2] = {M, N}, bs[1] = {N};
  pair x = act(e, xdt, 2, xs, true), w = wgt(e, DIT_F8_E4M3, 2, ws, 100.0f);
  pair b = mk(e, DIT_BF16, DIT_F32, 1, bs, 1.0f, true);
  pair y = act(e, DIT_BF16, 2, ys, false);
  const float wsc = 1.0f / 256.0f;
  w.g.scale = wsc;
  float *wf = xmalloc((size_t)(N * K) * sizeof *wf), *q = xmalloc((size_t)K * sizeof *q);
  float *ref = xmalloc((size_t)(M * N) * sizeof *ref), *plain = xmalloc((size_t)(M * N) * sizeof *plain);
  dit_convert_to_f32(wf, w.c.data, DIT_F8_E4M3, (size_t)(N * K));
  for (int64_t m = 0; m < M; m++) {
    const float *xr = (const float *)x.c.data + m * ldx;
    float amax = 0.0f;
    for (int64_t k = 0; k < K; k++) amax = fabsf(xr[k]) > amax ? fabsf(xr[k]) : amax;
    const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t k = 0; k < K; k++) {
      float v = xr[k] / sc;
      v = v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v;
      q[k] = dit_e4m3_to_f32(dit_f32_to_e4m3(v));
    }
    for (int64_t n = 0; n < N; n++) {
      double sq = 0, sp = 0;
      for (int64_t k = 0; k < K; k++) sq += (double)q[k] * wf[n * K + k], sp += (double)xr[k] * wf[n * K + k];
      const float bv = bias ? ((float *)b.c.data)[n] : 0.0f; /* bf16 on both sides */
      ref[m * N + n] = dit_act_apply((float)(sq * sc * wsc) + bv, (int)a);
      plain[m * N + n] = dit_act_apply((float)(sp * wsc) + bv, (int)a);
    }
  }
  dit_tensor xv = x.g;
  xv.shape[1] = K; /* columns [0, K) of the [M, ldx] buffer */
  e->gpu->fp8 = true;
  dit_tensor bc = b.g;
  OK(dit_op_linear(e->gpu, &y.g, &xv, &w.g, bias ? &bc : NULL, a, E));
  e->gpu->fp8 = false;
  char name[160];
  snprintf(name, sizeof name, "fp8 linear %lldx%lldx%lld ldx%lld x%s%s act%d", (long long)M, (long long)K,
           (long long)N, (long long)ldx, dn(xdt), bias ? " bias" : "", (int)a);
  float *got = fetch(e, &y.g, 0, M * N);
  double se = 0, sp = 0, sr = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < M * N; i++) {
    bad += !isfinite(got[i]);
    se += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
    sp += ((double)got[i] - plain[i]) * ((double)got[i] - plain[i]);
    sr += (double)ref[i] * ref[i];
  }
  const double nq = sr > 0 ? se / sr : se, np = sr > 0 ? sp / sr : sp;
  const bool pass = bad == 0 && nq < 1e-5 && np > 3 * nq;
  printf("%-4s %-44s nmse vs fp8 model %.2e, vs unquantized x %.2e, nonfinite %lld\n", pass ? "ok" : "FAIL", name, nq,
         np, (long long)bad);
  CHECK_MSG(pass, "%s", name);
  free(got), free(wf), free(q), free(ref), free(plain);
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* Big GEMM: the CPU checks the first and last `rows` rows; timed. */
static void t_linear_big(env *e, int64_t M, int64_t K, int64_t N, dit_dtype xdt, dit_dtype ydt) {
  int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N}, bs[1] = {N};
  pair x = act(e, xdt, 2, xs, true), w = wgt(e, DIT_BF16, 2, ws, 0.05f), b = wgt(e, DIT_BF16, 1, bs, 1.0f);
  pair y = act(e, ydt, 2, ys, false);
  OK(dit_op_linear(e->gpu, &y.g, &x.g, &w.g, &b.g, DIT_ACT_NONE, E));
  const int64_t R = 128;
  int64_t offs[2] = {0, M - R};
  char name[160];
  for (int i = 0; i < 2; i++) {
    int64_t xr[2] = {R, K}, yr[2] = {R, N};
    float *yc = xmalloc((size_t)(R * N) * sizeof(float));
    dit_tensor xc = dit_tensor_make(DIT_F32, (float *)x.c.data + offs[i] * K, 2, xr);
    dit_tensor ycv = dit_tensor_make(DIT_F32, yc, 2, yr);
    OK(dit_op_linear(e->cpu, &ycv, &xc, &w.c, &b.c, DIT_ACT_NONE, E));
    snprintf(name, sizeof name, "linear big %lldx%lldx%lld x%s y%s rows@%lld", (long long)M, (long long)K,
             (long long)N, dn(xdt), dn(ydt), (long long)offs[i]);
    compare_at(e, name, &y.g, offs[i] * N, yc, R * N, true);
    free(yc);
  }
  float ms;
  TIMED(e, ms, dit_op_linear(e->gpu, &y.g, &x.g, &w.g, &b.g, DIT_ACT_NONE, E));
  printf("TIME linear M=%lld K=%lld N=%lld x%s y%s wBF16 +bias: %.3f ms, %.1f TFLOP/s\n", (long long)M,
         (long long)K, (long long)N, dn(xdt), dn(ydt), ms, 2.0 * M * K * N / (ms * 1e-3) / 1e12);
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* ---------------- attention ---------------- */

static void fill_mask(uint8_t *m, int64_t B, int64_t Sk, int64_t pad_keys, bool one_empty) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < Sk; j++) m[b * Sk + j] = (uint8_t)(j < Sk - pad_keys * (b + 1) % (Sk + 1));
  if (one_empty && B > 1)
    for (int64_t j = 0; j < Sk; j++) m[(B - 1) * Sk + j] = 0;
}

static pair mk_mask(env *e, int64_t B, int64_t Sk, int64_t pad, bool one_empty) {
  int64_t ms[2] = {B, Sk};
  pair p;
  memset(&p, 0, sizeof p);
  p.n = B * Sk;
  uint8_t *h = xmalloc((size_t)p.n);
  fill_mask(h, B, Sk, pad, one_empty);
  void *d = NULL;
  OK(e->gpu->ops->alloc(e->gpu, (size_t)p.n, &d, E));
  OK(e->gpu->ops->upload(e->gpu, d, h, (size_t)p.n, E));
  p.c = dit_tensor_make(DIT_U8, h, 2, ms);
  p.g = dit_tensor_make(DIT_U8, d, 2, ms);
  p.g.device = DIT_DEV_CUDA;
  return p;
}

/* "cudnn" or "v<N>": the attention implementation the GPU op tries first. */
static const char *attn_impl(env *e, char *buf, size_t n) {
  if (cu_im(e->gpu)->cudnn) snprintf(buf, n, "cudnn");
  else snprintf(buf, n, "v%d", cu_im(e->gpu)->attn_version);
  return buf;
}

static void t_attention(env *e, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                        dit_dtype dt, int64_t pad, bool causal, bool one_empty) {
  int64_t qs[4] = {B, Sq, Hq, D}, ks[4] = {B, Sk, Hkv, D};
  pair q = act(e, dt, 4, qs, true), k = act(e, dt, 4, ks, true), v = act(e, dt, 4, ks, true);
  pair o = act(e, dt, 4, qs, false);
  pair m = mk_mask(e, B, Sk, pad, one_empty);
  bool use_mask = pad > 0 || one_empty;
  float sc = 1.0f / sqrtf((float)D);
  OK(dit_op_attention(e->cpu, &o.c, &q.c, &k.c, &v.c, use_mask ? &m.c : NULL, sc, causal, E));
  OK(dit_op_attention(e->gpu, &o.g, &q.g, &k.g, &v.g, use_mask ? &m.g : NULL, sc, causal, E));
  char name[160], impl[16];
  snprintf(name, sizeof name, "attention %s B%lld Sq%lld Sk%lld H%lld/%lld D%lld %s%s%s%s",
           attn_impl(e, impl, sizeof impl), (long long)B,
           (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D, dn(dt),
           use_mask ? " mask" : "", causal ? " causal" : "", one_empty ? " empty-row" : "");
  compare(e, name, &o, true);
  drop(e, &q), drop(e, &k), drop(e, &v), drop(e, &o), drop(e, &m);
}

/* Z-Image shape: B items (item b has pad * (b + 1) padded keys; use_mask false: no mask), the
 * CPU checks 64 query rows at the start and at the end of the last item; timed. */
static void t_attention_big(env *e, int64_t B, int64_t S, int64_t H, int64_t D, int64_t pad, bool use_mask,
                            dit_dtype dt) {
  int64_t qs[4] = {B, S, H, D};
  pair q = act(e, dt, 4, qs, true), k = act(e, dt, 4, qs, true), v = act(e, dt, 4, qs, true);
  pair o = act(e, dt, 4, qs, false);
  pair m = mk_mask(e, B, S, pad, false);
  const dit_tensor *mg = use_mask ? &m.g : NULL;
  float sc = 1.0f / sqrtf((float)D);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  OK(dit_op_attention(e->gpu, &o.g, &q.g, &k.g, &v.g, mg, sc, false, E));
  OK(e->gpu->ops->sync(e->gpu, E));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const int64_t R = 64, b = B - 1, item = S * H * D;
  int64_t offs[2] = {0, S - R}, is[4] = {1, S, H, D}, ms2[2] = {1, S};
  dit_tensor kc = dit_tensor_make(DIT_F32, (float *)k.c.data + b * item, 4, is);
  dit_tensor vc = dit_tensor_make(DIT_F32, (float *)v.c.data + b * item, 4, is);
  dit_tensor mc = dit_tensor_make(DIT_U8, (uint8_t *)m.c.data + b * S, 2, ms2);
  char name[160], impl[16];
  attn_impl(e, impl, sizeof impl);
  for (int i = 0; i < 2; i++) {
    int64_t rs[4] = {1, R, H, D};
    float *oc = xmalloc((size_t)(R * H * D) * sizeof(float));
    dit_tensor qc = dit_tensor_make(DIT_F32, (float *)q.c.data + b * item + offs[i] * H * D, 4, rs);
    dit_tensor ocv = dit_tensor_make(DIT_F32, oc, 4, rs);
    OK(dit_op_attention(e->cpu, &ocv, &qc, &kc, &vc, use_mask ? &mc : NULL, sc, false, E));
    snprintf(name, sizeof name, "attention %s big B%lld S%lld H%lld D%lld %s %s%lld item%lld rows@%lld", impl,
             (long long)B, (long long)S, (long long)H, (long long)D, dn(dt), use_mask ? "pad" : "nomask",
             use_mask ? (long long)(pad * B) : 0LL, (long long)b, (long long)offs[i]);
    compare_at(e, name, &o.g, b * item + offs[i] * H * D, oc, R * H * D, true);
    free(oc);
  }
  float ms;
  TIMED(e, ms, dit_op_attention(e->gpu, &o.g, &q.g, &k.g, &v.g, mg, sc, false, E));
  printf("TIME attention %s B=%lld S=%lld H=%lld D=%lld %s %s: %.3f ms, %.1f TFLOP/s (4*B*S*S*H*D); first call "
         "(incl. plan build) %.1f ms\n",
         impl, (long long)B, (long long)S, (long long)H, (long long)D, dn(dt), use_mask ? "mask" : "no mask", ms,
         4.0 * B * S * S * H * D / (ms * 1e-3) / 1e12,
         (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
  drop(e, &q), drop(e, &k), drop(e, &v), drop(e, &o), drop(e, &m);
}

/* t_attention_wide flags */
enum { W_CAUSAL = 1, W_EMPTY = 2, W_STRIDED = 4, W_BIG = 8 };

/* Head dims above 256 (the GEMM path, cuda_attn_gemm.c; the VAE's one-head D=512 attention).
 * pad > 0: key mask (item b has pad * (b + 1) padded keys), W_EMPTY: the last item's mask is
 * empty; W_STRIDED: q, k, v column slices of one [B, S, 3, H, D] buffer and out a slice of a
 * filled [B, S, 2, H, D] one (Sq == Sk, Hq == Hkv); W_BIG: the CPU checks 64 query rows at the
 * start and at the end of the last item (no causal, no strided) and the op is timed. */
static void t_attention_wide(env *e, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                             dit_dtype dt, int64_t pad, int flags) {
  const bool causal = flags & W_CAUSAL, strided = flags & W_STRIDED, big = flags & W_BIG;
  const int nq = strided ? 3 : 1, no = strided ? 2 : 1; /* head groups per row of the q and out buffers */
  int64_t qs[4] = {B, Sq, nq * Hq, D}, ks[4] = {B, Sk, Hkv, D}, os[4] = {B, Sq, no * Hq, D};
  pair q = act(e, dt, 4, qs, true), k = act(e, dt, 4, ks, !strided), v = act(e, dt, 4, ks, !strided);
  pair o = act(e, dt, 4, os, strided);
  pair m = mk_mask(e, B, Sk, pad, flags & W_EMPTY);
  const bool use_mask = pad > 0 || (flags & W_EMPTY);
  dit_tensor qc = q.c, qg = q.g, kc = k.c, kg = k.g, vc = v.c, vg = v.g, oc = o.c, og = o.g;
  if (strided) { /* [B, S, 3, H, D] as three [B, S, H, D] views; out the first half of [B, S, 2, H, D] */
    const int64_t sh[4] = {B, Sq, Hq, D}, qst[4] = {Sq * 3 * Hq * D, 3 * Hq * D, D, 1},
                  ost[4] = {Sq * 2 * Hq * D, 2 * Hq * D, D, 1};
    dit_tensor *views[8] = {&qc, &qg, &kc, &kg, &vc, &vg, &oc, &og};
    for (int i = 0; i < 8; i++) {
      dit_tensor *t = views[i];
      const pair *src = i < 6 ? &q : &o;
      *t = i % 2 ? src->g : src->c;
      t->data = (char *)t->data + (size_t)((i < 6 ? i / 2 : 0) * Hq * D) * dit_dtype_size(t->dtype);
      for (int d = 0; d < 4; d++) t->shape[d] = sh[d], t->stride[d] = i < 6 ? qst[d] : ost[d];
    }
  }
  const dit_tensor *mg = use_mask ? &m.g : NULL;
  float sc = 1.0f / sqrtf((float)D);
  OK(dit_op_attention(e->gpu, &og, &qg, &kg, &vg, mg, sc, causal, E));
  char name[200];
  snprintf(name, sizeof name, "attention gemm B%lld Sq%lld Sk%lld H%lld/%lld D%lld %s%s%s%s%s", (long long)B,
           (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D, dn(dt), use_mask ? " mask" : "",
           causal ? " causal" : "", (flags & W_EMPTY) ? " empty-row" : "", strided ? " strided" : "");
  if (!big) {
    OK(dit_op_attention(e->cpu, &oc, &qc, &kc, &vc, use_mask ? &m.c : NULL, sc, causal, E));
    compare(e, name, &o, true);
  } else {
    const int64_t R = Sq < 64 ? Sq : 64, b = B - 1, qi = Sq * Hq * D, ki = Sk * Hkv * D;
    int64_t offs[2] = {0, Sq - R}, is[4] = {1, Sk, Hkv, D}, ms2[2] = {1, Sk}, rs[4] = {1, R, Hq, D};
    dit_tensor kb = dit_tensor_make(DIT_F32, (float *)k.c.data + b * ki, 4, is);
    dit_tensor vb = dit_tensor_make(DIT_F32, (float *)v.c.data + b * ki, 4, is);
    dit_tensor mb = dit_tensor_make(DIT_U8, (uint8_t *)m.c.data + b * Sk, 2, ms2);
    for (int i = 0; i < 2; i++) {
      float *ref = xmalloc((size_t)(R * Hq * D) * sizeof(float));
      dit_tensor qr = dit_tensor_make(DIT_F32, (float *)q.c.data + b * qi + offs[i] * Hq * D, 4, rs);
      dit_tensor orf = dit_tensor_make(DIT_F32, ref, 4, rs);
      OK(dit_op_attention(e->cpu, &orf, &qr, &kb, &vb, use_mask ? &mb : NULL, sc, false, E));
      char nm[240];
      snprintf(nm, sizeof nm, "%s item%lld rows@%lld", name, (long long)b, (long long)offs[i]);
      compare_at(e, nm, &o.g, b * qi + offs[i] * Hq * D, ref, R * Hq * D, true);
      free(ref);
    }
    float ms;
    TIMED(e, ms, dit_op_attention(e->gpu, &og, &qg, &kg, &vg, mg, sc, causal, E));
    printf("TIME attention gemm B=%lld S=%lld H=%lld D=%lld %s %s: %.3f ms, %.1f TFLOP/s (4*B*Sq*Sk*H*D)\n",
           (long long)B, (long long)Sq, (long long)Hq, (long long)D, dn(dt), use_mask ? "mask" : "no mask", ms,
           4.0 * B * Sq * Sk * Hq * D / (ms * 1e-3) / 1e12);
  }
  drop(e, &q), drop(e, &k), drop(e, &v), drop(e, &o), drop(e, &m);
}

/* After a call meant for cuDNN: did cuDNN run it? must: a failure when it fell back. */
static void cudnn_report(env *e, const char *what, long calls0, bool must) {
  cu_sdpa_info i = cu_sdpa_get_info(cu_im(e->gpu)->sdpa);
  bool used = i.calls > calls0;
  printf("%-4s cudnn path %s: %s [cuDNN %ld, calls %ld, fallbacks %ld, plans %d] %s\n",
         used || !must ? "ok" : "FAIL", what, used ? "ran on cuDNN" : "FELL BACK to our kernel", i.version,
         i.calls, i.fallbacks, i.n_plans, i.message);
  if (must) CHECK_MSG(used, "cuDNN was not used for %s: %s", what, i.message);
}

static long cudnn_calls(env *e) { return cu_sdpa_get_info(cu_im(e->gpu)->sdpa).calls; }

/* The cuDNN path on BF16 (head dims 64 and 128 must run on cuDNN; others may fall back). */
static void t_attention_cudnn(env *e, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                              int64_t pad, bool causal) {
  long c0 = cudnn_calls(e);
  t_attention(e, B, Sq, Sk, Hq, Hkv, D, DIT_BF16, pad, causal, false);
  char what[96];
  snprintf(what, sizeof what, "B%lld Sq%lld Sk%lld H%lld/%lld D%lld%s%s", (long long)B, (long long)Sq,
           (long long)Sk, (long long)Hq, (long long)Hkv, (long long)D, pad ? " mask" : "", causal ? " causal" : "");
  cudnn_report(e, what, c0, (D == 64 || D == 128) && !(pad && causal));
}

/* A key mask cuDNN cannot express (a hole; an item with no valid key) must be reported by
 * the next sync rather than pass silently (the shape's plan is built and checked first with a
 * prefix mask, so that these calls do run on cuDNN). */
static void t_attention_cudnn_guard(env *e) {
  const int64_t B = 2, S = 64, H = 2, D = 64;
  int64_t qs[4] = {B, S, H, D}, ms[2] = {B, S};
  t_attention_cudnn(e, B, S, S, H, H, D, 3, false);
  for (int variant = 0; variant < 2; variant++) {
    pair q = act(e, DIT_BF16, 4, qs, true), k = act(e, DIT_BF16, 4, qs, true), v = act(e, DIT_BF16, 4, qs, true);
    pair o = act(e, DIT_BF16, 4, qs, false);
    uint8_t h[2 * 64];
    for (int64_t i = 0; i < B * S; i++) h[i] = 1;
    if (variant == 0) h[10] = 0; /* item 0: a hole, not a prefix */
    else memset(h + S, 0, (size_t)S); /* item 1: no valid key */
    void *d = NULL;
    OK(e->gpu->ops->alloc(e->gpu, sizeof h, &d, E));
    OK(e->gpu->ops->upload(e->gpu, d, h, sizeof h, E));
    dit_tensor mg = dit_tensor_make(DIT_U8, d, 2, ms);
    mg.device = DIT_DEV_CUDA;
    long c0 = cudnn_calls(e);
    OK(dit_op_attention(e->gpu, &o.g, &q.g, &k.g, &v.g, &mg, 0.125f, false, E));
    dit_error se;
    dit_status st = e->gpu->ops->sync(e->gpu, &se);
    const char *what = variant == 0 ? "mask with a hole" : "item with no valid key";
    if (cudnn_calls(e) == c0) {
      printf("ok   cudnn guard %s: not run on cuDNN (sync %s)\n", what, st == DIT_OK ? "ok" : se.msg);
    } else {
      bool pass = st != DIT_OK && strstr(se.msg, "prefix") != NULL;
      printf("%-4s cudnn guard %s: sync reports: %s\n", pass ? "ok" : "FAIL", what,
             st == DIT_OK ? "(nothing)" : se.msg);
      CHECK_MSG(pass, "cudnn guard %s", what);
    }
    e->gpu->ops->free(e->gpu, d);
    drop(e, &q), drop(e, &k), drop(e, &v), drop(e, &o);
  }
}

static void cudnn_small_tests(env *e) {
  bool c0 = cu_im(e->gpu)->cudnn;
  cu_im(e->gpu)->cudnn = true;
  printf("-- attention through cuDNN SDPA (BF16)\n");
  t_attention_cudnn(e, 1, 77, 77, 4, 4, 64, 0, false);
  t_attention_cudnn(e, 2, 77, 77, 4, 2, 64, 9, false);   /* GQA, lengths 68 / 59 */
  t_attention_cudnn(e, 1, 300, 300, 2, 2, 128, 0, true); /* causal */
  t_attention_cudnn(e, 2, 130, 61, 2, 1, 128, 5, false); /* Sq != Sk, lengths 56 / 51 */
  t_attention_cudnn(e, 2, 257, 190, 6, 2, 64, 11, false);
  t_attention_cudnn(e, 2, 1100, 1100, 4, 4, 128, 37, false); /* Z-Image-like prefix masks */
  t_attention_cudnn(e, 2, 150, 150, 4, 4, 128, 0, false);    /* B2 without mask */
  t_attention_cudnn(e, 1, 70, 70, 4, 1, 80, 0, true);       /* D80: may fall back */
  t_attention_cudnn(e, 1, 200, 333, 2, 2, 256, 7, false);   /* D256: may fall back */
  t_attention_cudnn(e, 2, 77, 77, 4, 2, 64, 9, true);       /* causal + mask: our kernel */
  t_attention_cudnn_guard(e);
  cu_im(e->gpu)->cudnn = c0;
}

/* ---------------- norms, softmax ---------------- */

static void t_norms(env *e, int64_t rows, int64_t D, dit_dtype dt, dit_dtype wdt) {
  bool bt = dt != DIT_F32;
  int64_t xs[2] = {rows, D}, ds[1] = {D};
  pair x = act(e, dt, 2, xs, true), w = wgt(e, wdt, 1, ds, 1.0f), b = wgt(e, wdt, 1, ds, 1.0f);
  pair y = act(e, dt, 2, xs, false);
  char name[160];
  OK(dit_op_rms_norm(e->cpu, &y.c, &x.c, &w.c, 1e-6f, E));
  OK(dit_op_rms_norm(e->gpu, &y.g, &x.g, &w.g, 1e-6f, E));
  snprintf(name, sizeof name, "rms_norm %lldx%lld %s w%s", (long long)rows, (long long)D, dn(dt), dn(wdt));
  compare(e, name, &y, bt);
  poison(e, &y);
  OK(dit_op_rms_norm(e->cpu, &y.c, &x.c, NULL, 1e-5f, E));
  OK(dit_op_rms_norm(e->gpu, &y.g, &x.g, NULL, 1e-5f, E));
  snprintf(name, sizeof name, "rms_norm %lldx%lld %s no-w", (long long)rows, (long long)D, dn(dt));
  compare(e, name, &y, bt);
  poison(e, &y);
  OK(dit_op_layer_norm(e->cpu, &y.c, &x.c, &w.c, &b.c, 1e-6f, E));
  OK(dit_op_layer_norm(e->gpu, &y.g, &x.g, &w.g, &b.g, 1e-6f, E));
  snprintf(name, sizeof name, "layer_norm %lldx%lld %s w,b %s", (long long)rows, (long long)D, dn(dt), dn(wdt));
  compare(e, name, &y, bt);
  poison(e, &y);
  OK(dit_op_layer_norm(e->cpu, &y.c, &x.c, NULL, NULL, 1e-6f, E));
  OK(dit_op_layer_norm(e->gpu, &y.g, &x.g, NULL, NULL, 1e-6f, E));
  snprintf(name, sizeof name, "layer_norm %lldx%lld %s no affine", (long long)rows, (long long)D, dn(dt));
  compare(e, name, &y, bt);
  poison(e, &y);
  OK(dit_op_softmax(e->cpu, &y.c, &x.c, E));
  OK(dit_op_softmax(e->gpu, &y.g, &x.g, E));
  snprintf(name, sizeof name, "softmax %lldx%lld %s", (long long)rows, (long long)D, dn(dt));
  compare(e, name, &y, bt);
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* GroupNorm(+SiLU) at VAE sizes: the multi-block kernels (chunked partial sums, 16-byte
 * loads where HW and the group allow, element by element where not), optionally in place
 * and with a large common offset (the shifted sums must not cancel); time: GB/s for the
 * three passes (two reads, one write). */
static void t_group_norm(env *e, int64_t B, int64_t C, int64_t H, int64_t W, int G, dit_dtype dt, bool silu,
                         bool inplace, float offset, bool time) {
  const bool bt = dt != DIT_F32;
  int64_t xs[4] = {B, C, H, W}, cs[1] = {C};
  pair x = act(e, dt, 4, xs, true), w = wgt(e, DIT_F32, 1, cs, 1.0f), b = wgt(e, DIT_F32, 1, cs, 1.0f);
  if (offset != 0.0f) { /* F32 only: both sides hold the same shifted values */
    float *c = x.c.data;
    for (int64_t i = 0; i < x.n; i++) c[i] += offset;
    resync(e, &x);
  }
  pair y = inplace ? x : act(e, dt, 4, xs, false);
  char name[160];
  snprintf(name, sizeof name, "group_norm [%lld,%lld,%lld,%lld] g%d %s%s%s%s", (long long)B, (long long)C,
           (long long)H, (long long)W, G, dn(dt), silu ? " silu" : "", inplace ? " in-place" : "",
           offset != 0.0f ? " offset" : "");
  OK(dit_op_group_norm(e->gpu, &y.g, &x.g, G, &w.g, &b.g, 1e-6f, silu, E));
  OK(dit_op_group_norm(e->cpu, &y.c, &x.c, G, &w.c, &b.c, 1e-6f, silu, E));
  compare(e, name, &y, bt);
  if (time) {
    pair t = act(e, dt, 4, xs, true);
    float ms = 0;
    TIMED(e, ms, dit_op_group_norm(e->gpu, &t.g, &t.g, G, &w.g, &b.g, 1e-6f, silu, E));
    const double bytes = 3.0 * (double)x.n * (double)dit_dtype_size(dt);
    printf("     %-44s %.3f ms  %.0f GB/s (2 reads + 1 write)\n", name, ms, bytes / (ms * 1e-3) / 1e9);
    drop(e, &t);
  }
  if (!inplace) drop(e, &y);
  drop(e, &x), drop(e, &w), drop(e, &b);
}

static void t_channel_rms_norm(env *e, int64_t B, int64_t C, int64_t H, int64_t W, dit_dtype dt, bool silu) {
  int64_t xs[4] = {B, C, H, W}, cs[1] = {C};
  pair x = act(e, dt, 4, xs, true), w = wgt(e, DIT_F32, 1, cs, 1.0f), y = act(e, dt, 4, xs, false);
  char name[160];
  snprintf(name, sizeof name, "channel_rms_norm [%lld,%lld,%lld,%lld] %s%s", (long long)B, (long long)C,
           (long long)H, (long long)W, dn(dt), silu ? " silu" : "");
  OK(dit_op_channel_rms_norm(e->gpu, &y.g, &x.g, &w.g, silu, E));
  OK(dit_op_channel_rms_norm(e->cpu, &y.c, &x.c, &w.c, silu, E));
  compare(e, name, &y, dt != DIT_F32);
  drop(e, &y), drop(e, &x), drop(e, &w);
}

/* ---------------- elementwise ---------------- */

static void t_elementwise(env *e, int64_t B, int64_t S, int64_t D, dit_dtype dt) {
  bool bt = dt != DIT_F32;
  int64_t xs[3] = {B, S, D}, vs[2] = {B, D};
  pair a = act(e, dt, 3, xs, true), b = act(e, dt, 3, xs, true), y = act(e, dt, 3, xs, false);
  pair sc = act(e, dt, 2, vs, true), sh = act(e, dt, 2, vs, true); /* modulation vectors: activations */
  char name[160];
  const char *an[5] = {"none", "silu", "gelu", "gelu_tanh", "sigmoid"};
  for (int k = 1; k <= DIT_ACT_SIGMOID; k++) {
    poison(e, &y);
    OK(dit_op_activation(e->cpu, &y.c, &a.c, (dit_act)k, E));
    OK(dit_op_activation(e->gpu, &y.g, &a.g, (dit_act)k, E));
    snprintf(name, sizeof name, "activation %s %lld %s", an[k], (long long)a.n, dn(dt));
    compare(e, name, &y, bt);
  }
  struct {
    const char *n;
    int k;
  } bins[3] = {{"add", 0}, {"mul", 1}, {"swiglu", 2}};
  for (int k = 0; k < 3; k++) {
    poison(e, &y);
    if (bins[k].k == 0) {
      OK(dit_op_add(e->cpu, &y.c, &a.c, &b.c, E));
      OK(dit_op_add(e->gpu, &y.g, &a.g, &b.g, E));
    } else if (bins[k].k == 1) {
      OK(dit_op_mul(e->cpu, &y.c, &a.c, &b.c, E));
      OK(dit_op_mul(e->gpu, &y.g, &a.g, &b.g, E));
    } else {
      OK(dit_op_swiglu(e->cpu, &y.c, &a.c, &b.c, E));
      OK(dit_op_swiglu(e->gpu, &y.g, &a.g, &b.g, E));
    }
    snprintf(name, sizeof name, "%s %lld %s", bins[k].n, (long long)a.n, dn(dt));
    compare(e, name, &y, bt);
  }
  poison(e, &y);
  OK(dit_op_scale(e->cpu, &y.c, &a.c, 0.37f, E));
  OK(dit_op_scale(e->gpu, &y.g, &a.g, 0.37f, E));
  snprintf(name, sizeof name, "scale %lld %s", (long long)a.n, dn(dt));
  compare(e, name, &y, bt);
  for (int half = 0; half < 2; half++) { /* mul_rows over rows of D, then of D / 2 (D / 2 % 8: the scalar kernel) */
    const int64_t R = B * S * (half + 1), W = D / (half + 1);
    int64_t gs[1] = {R};
    pair g = act(e, dt, 1, gs, true);
    dit_tensor ac = dit_tensor_make(DIT_F32, a.c.data, 2, (int64_t[]){R, W});
    dit_tensor ag = dit_tensor_make(dt, a.g.data, 2, (int64_t[]){R, W}), yc = ac, yg = ag;
    yc.data = y.c.data, yg.data = y.g.data;
    ag.device = yg.device = DIT_DEV_CUDA;
    poison(e, &y);
    OK(dit_op_mul_rows(e->cpu, &yc, &ac, &g.c, 2.0f, E));
    OK(dit_op_mul_rows(e->gpu, &yg, &ag, &g.g, 2.0f, E));
    snprintf(name, sizeof name, "mul_rows [%lld,%lld] %s", (long long)R, (long long)W, dn(dt));
    compare(e, name, &y, bt);
    drop(e, &g);
  }
  for (int k = 0; k < 2; k++) {
    poison(e, &y);
    OK(dit_op_modulate(e->cpu, &y.c, &a.c, &sc.c, k ? &sh.c : NULL, E));
    OK(dit_op_modulate(e->gpu, &y.g, &a.g, &sc.g, k ? &sh.g : NULL, E));
    snprintf(name, sizeof name, "modulate [%lld,%lld,%lld] %s%s", (long long)B, (long long)S, (long long)D, dn(dt),
             k ? " +shift" : "");
    compare(e, name, &y, bt);
  }
  for (int k = 0; k < 3; k++) { /* gated_add in place on a: gate, tanh gate, no gate */
    OK(dit_op_gated_add(e->cpu, &a.c, &b.c, k < 2 ? &sc.c : NULL, k == 1, E));
    OK(dit_op_gated_add(e->gpu, &a.g, &b.g, k < 2 ? &sc.g : NULL, k == 1, E));
    snprintf(name, sizeof name, "gated_add [%lld,%lld,%lld] %s %s", (long long)B, (long long)S, (long long)D,
             dn(dt), k == 0 ? "gate" : k == 1 ? "tanh gate" : "no gate");
    /* bf16 x accumulates rounding on both sides differently: compare after each step anyway */
    compare(e, name, &a, bt);
    if (bt) { /* re-sync the CPU copy to the GPU's bf16 values so errors do not compound */
      float *g = fetch(e, &a.g, 0, a.n);
      memcpy(a.c.data, g, (size_t)a.n * sizeof(float));
      free(g);
    }
  }
  drop(e, &a), drop(e, &b), drop(e, &y), drop(e, &sc), drop(e, &sh);
}

/* RoPE on x [B,S,H,D], or on a strided view of each head's leading R channels (R < D: partial RoPE, as
 * MiniMax-H3's); the whole buffer is compared, so writes past the view show. */
static void t_rope(env *e, int64_t B, int64_t S, int64_t H, int64_t D, int64_t R, dit_dtype dt, bool shared) {
  int64_t xs[4] = {B, S, H, D}, cs3[3] = {B, S, R / 2}, cs2[2] = {S, R / 2};
  for (int mode = 0; mode < 2; mode++) {
    pair x = act(e, dt, 4, xs, true);
    pair c = shared ? wgt(e, DIT_F32, 2, cs2, 1.0f) : wgt(e, DIT_F32, 3, cs3, 1.0f);
    pair s = shared ? wgt(e, DIT_F32, 2, cs2, 1.0f) : wgt(e, DIT_F32, 3, cs3, 1.0f);
    dit_tensor vc = x.c, vg = x.g;
    vc.shape[3] = vg.shape[3] = R; /* the strides stay the buffer's */
    OK(dit_op_rope(e->cpu, &vc, &c.c, &s.c, (dit_rope_mode)mode, E));
    OK(dit_op_rope(e->gpu, &vg, &c.g, &s.g, (dit_rope_mode)mode, E));
    char name[160];
    snprintf(name, sizeof name, "rope %s [%lld,%lld,%lld,%lld]%s %s%s", mode ? "half" : "interleaved", (long long)B,
             (long long)S, (long long)H, (long long)D, R < D ? " leading channels" : "", dn(dt),
             shared ? " shared-table" : "");
    compare(e, name, &x, dt != DIT_F32);
    drop(e, &x), drop(e, &c), drop(e, &s);
  }
}

/* ---------------- data ops ---------------- */

static void t_embedding(env *e, int64_t V, int64_t D, int64_t N, dit_dtype tdt, dit_dtype idt) {
  int64_t ts[2] = {V, D}, is[1] = {N}, ys[2] = {N, D};
  pair t = wgt(e, tdt, 2, ts, 1.0f), y = act(e, DIT_F32, 2, ys, false);
  if (tdt == DIT_F8_E4M3 || tdt == DIT_F8_E5M2) t.c.scale = t.g.scale = 0.375f; /* a per-tensor scale */
  size_t es = dit_dtype_size(idt);
  void *ih = xmalloc((size_t)N * es), *id = NULL;
  for (int64_t i = 0; i < N; i++) {
    int64_t v = (i * 7919 + 13) % V;
    if (idt == DIT_I64) ((int64_t *)ih)[i] = v;
    else ((int32_t *)ih)[i] = (int32_t)v;
  }
  OK(e->gpu->ops->alloc(e->gpu, (size_t)N * es, &id, E));
  OK(e->gpu->ops->upload(e->gpu, id, ih, (size_t)N * es, E));
  dit_tensor ic = dit_tensor_make(idt, ih, 1, is), ig = dit_tensor_make(idt, id, 1, is);
  ig.device = DIT_DEV_CUDA;
  OK(dit_op_embedding(e->cpu, &y.c, &t.c, &ic, E));
  OK(dit_op_embedding(e->gpu, &y.g, &t.g, &ig, E));
  char name[160];
  snprintf(name, sizeof name, "embedding V%lld D%lld N%lld table %s ids %s", (long long)V, (long long)D,
           (long long)N, dn(tdt), dn(idt));
  compare(e, name, &y, false);
  /* a bad id must be refused */
  if (idt == DIT_I64) ((int64_t *)ih)[N / 2] = V;
  else ((int32_t *)ih)[N / 2] = -1;
  OK(e->gpu->ops->upload(e->gpu, id, ih, (size_t)N * es, E));
  dit_error e2;
  CHECK_MSG(dit_op_embedding(e->gpu, &y.g, &t.g, &ig, &e2) == DIT_ERR_INVALID_ARG, "bad embedding id accepted");
  free(ih);
  e->gpu->ops->free(e->gpu, id);
  drop(e, &t), drop(e, &y);
}

static void t_conv(env *e, int64_t B, int64_t Ci, int64_t H, int64_t W, int64_t Co, int k, int stride, int pad,
                   dit_dtype wdt, bool bias) {
  int64_t Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
  int64_t xs[4] = {B, Ci, H, W}, ws[4] = {Co, Ci, k, k}, bs[1] = {Co}, ys[4] = {B, Co, Ho, Wo};
  pair x = act(e, DIT_F32, 4, xs, true), w = wgt(e, wdt, 4, ws, 0.3f), b = wgt(e, wdt, 1, bs, 1.0f);
  pair y = act(e, DIT_F32, 4, ys, false);
  OK(dit_op_conv2d(e->cpu, &y.c, &x.c, &w.c, bias ? &b.c : NULL, stride, pad, E));
  OK(dit_op_conv2d(e->gpu, &y.g, &x.g, &w.g, bias ? &b.g : NULL, stride, pad, E));
  char name[160];
  snprintf(name, sizeof name, "conv2d [%lld,%lld,%lld,%lld]->%lld k%d s%d p%d w%s%s", (long long)B, (long long)Ci,
           (long long)H, (long long)W, (long long)Co, k, stride, pad, dn(wdt), bias ? " bias" : "");
  compare(e, name, &y, wdt != DIT_F32);
  if (Ci * H * W >= (1 << 21)) {
    float ms;
    TIMED(e, ms, dit_op_conv2d(e->gpu, &y.g, &x.g, &w.g, bias ? &b.g : NULL, stride, pad, E));
    printf("TIME %s: %.3f ms, %.1f TFLOP/s\n", name, ms,
           2.0 * B * Co * Ho * Wo * Ci * k * k / (ms * 1e-3) / 1e12);
  }
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* The cuDNN conv path (cudnn_conv.c), cuDNN switched on: the CPU reference as in t_conv, then
 * whether cuDNN ran the call (must: a failure when it fell back to im2col); a run captured into
 * a CUDA graph after the shape's first call (no sync or allocation then) is checked again.
 * Inputs of >= 2^21 elements are timed with cuDNN and with im2col + GEMM (cuDNN off). */
static void t_conv_cudnn(env *e, int64_t B, int64_t Ci, int64_t H, int64_t W, int64_t Co, int k, int stride,
                         int pad, dit_dtype xdt, dit_dtype wdt, dit_dtype ydt, bool bias, bool must) {
  cu_impl *im = cu_im(e->gpu);
  const bool cudnn0 = im->cudnn;
  im->cudnn = true;
  int64_t Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
  int64_t xs[4] = {B, Ci, H, W}, ws[4] = {Co, Ci, k, k}, bs[1] = {Co}, ys[4] = {B, Co, Ho, Wo};
  pair x = act(e, xdt, 4, xs, true), w = wgt(e, wdt, 4, ws, 0.3f), b = wgt(e, wdt, 1, bs, 1.0f);
  pair y = act(e, ydt, 4, ys, false);
  const dit_tensor *bg = bias ? &b.g : NULL;
  OK(dit_op_conv2d(e->cpu, &y.c, &x.c, &w.c, bias ? &b.c : NULL, stride, pad, E));
  long calls0 = cu_conv_get_info(im->sdpa).calls;
  OK(dit_op_conv2d(e->gpu, &y.g, &x.g, &w.g, bg, stride, pad, E));
  cu_conv_info ci = cu_conv_get_info(im->sdpa);
  const bool used = ci.calls > calls0;
  char name[160];
  snprintf(name, sizeof name, "conv2d cudnn [%lld,%lld,%lld,%lld]->%lld k%d s%d p%d x%s w%s y%s%s", (long long)B,
           (long long)Ci, (long long)H, (long long)W, (long long)Co, k, stride, pad, dn(xdt), dn(wdt), dn(ydt),
           bias ? " bias" : "");
  compare(e, name, &y, xdt != DIT_F32 || wdt != DIT_F32 || ydt != DIT_F32);
  printf("%-4s cudnn conv %s: %s [cuDNN %ld, calls %ld, fallbacks %ld, plans %d] %s\n", used || !must ? "ok" : "FAIL",
         name + 13, used ? "ran on cuDNN" : "left to im2col + GEMM", ci.version, ci.calls, ci.fallbacks, ci.n_plans,
         ci.message);
  if (must) CHECK_MSG(used, "cuDNN did not run %s: %s", name, ci.message);
  const bool big = Ci * H * W >= (1 << 21);
  if (used && !big) { /* replayed from a CUDA graph: the call must not sync or allocate */
    poison(e, &y);
    void *g = NULL;
    OK(e->gpu->ops->capture_begin(e->gpu, E));
    OK(dit_op_conv2d(e->gpu, &y.g, &x.g, &w.g, bg, stride, pad, E));
    OK(e->gpu->ops->capture_end(e->gpu, true, &g, E));
    if (g) OK(e->gpu->ops->graph_launch(e->gpu, g, E));
    e->gpu->ops->graph_free(e->gpu, g);
    char gname[176];
    snprintf(gname, sizeof gname, "%s graph", name);
    compare(e, gname, &y, xdt != DIT_F32 || wdt != DIT_F32 || ydt != DIT_F32);
    CHECK_MSG(cu_conv_get_info(im->sdpa).calls > ci.calls, "the captured %s did not run on cuDNN", name);
  }
  if (big) {
    const double flop = 2.0 * Co * Ci * k * k * Ho * Wo * B;
    float ms, ms2;
    TIMED(e, ms, dit_op_conv2d(e->gpu, &y.g, &x.g, &w.g, bg, stride, pad, E));
    im->cudnn = false;
    TIMED(e, ms2, dit_op_conv2d(e->gpu, &y.g, &x.g, &w.g, bg, stride, pad, E));
    printf("TIME %s: %s %.3f ms, %.1f TFLOP/s; im2col + GEMM %.3f ms, %.1f TFLOP/s\n", name,
           used ? "cuDNN" : "(fell back) ", ms, flop / (ms * 1e-3) / 1e12, ms2, flop / (ms2 * 1e-3) / 1e12);
  }
  im->cudnn = cudnn0;
  drop(e, &x), drop(e, &w), drop(e, &b), drop(e, &y);
}

/* ---------------- bandwidth timings ---------------- */

static void time_bw(env *e) {
  int64_t S = 4224, D = 3840, F = 10240;
  int64_t xs[3] = {1, S, D}, vs[2] = {1, D}, fs[3] = {1, S, F}, ds[1] = {D};
  for (int k = 0; k < 2; k++) {
    dit_dtype dt = k ? DIT_BF16 : DIT_F32;
    double es = (double)dit_dtype_size(dt);
    pair x = act(e, dt, 3, xs, true), y = act(e, dt, 3, xs, false), sc = act(e, dt, 2, vs, true);
    pair w = wgt(e, DIT_BF16, 1, ds, 1.0f);
    pair a = act(e, dt, 3, fs, true), b = act(e, dt, 3, fs, true);
    float ms;
    double nx = (double)S * D;
    TIMED(e, ms, dit_op_rms_norm(e->gpu, &y.g, &x.g, &w.g, 1e-6f, E));
    printf("TIME rms_norm [%lld,%lld] %s: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, dn(dt), ms,
           2 * nx * es / (ms * 1e-3) / 1e9);
    TIMED(e, ms, dit_op_modulate(e->gpu, &y.g, &x.g, &sc.g, &sc.g, E));
    printf("TIME modulate [%lld,%lld] %s: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, dn(dt), ms,
           2 * nx * es / (ms * 1e-3) / 1e9);
    TIMED(e, ms, dit_op_gated_add(e->gpu, &y.g, &x.g, &sc.g, true, E));
    printf("TIME gated_add [%lld,%lld] %s: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, dn(dt), ms,
           3 * nx * es / (ms * 1e-3) / 1e9);
    TIMED(e, ms, dit_op_swiglu(e->gpu, &a.g, &a.g, &b.g, E));
    printf("TIME swiglu [%lld,%lld] %s: %.3f ms, %.0f GB/s\n", (long long)S, (long long)F, dn(dt), ms,
           3.0 * S * F * es / (ms * 1e-3) / 1e9);
    int64_t rs[4] = {1, S, 30, 128}, cs[2] = {S, 64};
    dit_tensor xr = dit_tensor_make(dt, a.g.data, 4, rs);
    xr.device = DIT_DEV_CUDA;
    pair c = wgt(e, DIT_F32, 2, cs, 1.0f);
    TIMED(e, ms, dit_op_rope(e->gpu, &xr, &c.g, &c.g, DIT_ROPE_INTERLEAVED, E));
    printf("TIME rope [1,%lld,30,128] %s: %.3f ms, %.0f GB/s\n", (long long)S, dn(dt), ms,
           2.0 * S * 3840 * es / (ms * 1e-3) / 1e9);
    drop(e, &x), drop(e, &y), drop(e, &sc), drop(e, &w), drop(e, &a), drop(e, &b), drop(e, &c);
  }
}

/* ---------------- fused ops (k_fused.cu; fallbacks to the unfused sequence) ---------------- */

/* rms_norm_mod and residual_norm on [B,S,D]; the CPU side runs the unfused sequence.
 * bcast_gate: gate broadcast as [D] while scale is [B,D] (the CUDA op falls back then). */
static void t_fused_rows(env *e, int64_t B, int64_t S, int64_t D, dit_dtype dt, dit_dtype wdt, bool bcast_gate) {
  bool bt = dt != DIT_F32;
  int64_t xs[3] = {B, S, D}, vs[2] = {B, D}, ds[1] = {D};
  pair x = act(e, dt, 3, xs, true), h = act(e, dt, 3, xs, false);
  pair sc = act(e, dt, 2, vs, true), g = act(e, dt, 2, vs, true);
  if (bcast_gate) { /* the GPU gets row 0 as [D]; the CPU (which wants [B, D]) row 0 repeated */
    for (int64_t b = 1; b < B; b++)
      memcpy((float *)g.c.data + b * D, g.c.data, (size_t)D * sizeof(float));
    g.g = dit_tensor_make(g.g.dtype, g.g.data, 1, ds);
    g.g.device = DIT_DEV_CUDA;
  }
  pair wr = wgt(e, wdt, 1, ds, 1.0f), wh = wgt(e, wdt, 1, ds, 1.0f);
  char name[200];
  for (int k = 0; k < 3; k++) { /* scale, no scale, in place with scale */
    pair xi = act(e, dt, 3, xs, true);
    pair *in = k == 2 ? &xi : &x, *y = k == 2 ? &xi : &h;
    poison(e, &h);
    OK(dit_op_rms_norm_mod(e->cpu, &y->c, &in->c, &wh.c, k == 1 ? NULL : &sc.c, 1e-6f, E));
    OK(dit_op_rms_norm_mod(e->gpu, &y->g, &in->g, &wh.g, k == 1 ? NULL : &sc.g, 1e-6f, E));
    snprintf(name, sizeof name, "rms_norm_mod [%lld,%lld,%lld] %s w%s %s", (long long)B, (long long)S, (long long)D,
             dn(dt), dn(wdt), k == 0 ? "scale" : k == 1 ? "no scale" : "in place");
    compare(e, name, y, bt);
    drop(e, &xi);
  }
  for (int gm = 0; gm < 3; gm++) {   /* gate none / plain / tanh */
    for (int out = 0; out < 2; out++) { /* without / with the output norm */
      pair xx = act(e, dt, 3, xs, true), r = act(e, dt, 3, xs, true);
      poison(e, &h);
      OK(dit_op_residual_norm(e->cpu, &xx.c, &r.c, &wr.c, gm ? &g.c : NULL, gm == 2, out ? &h.c : NULL, &wh.c, &sc.c,
                              1e-6f, E));
      OK(dit_op_residual_norm(e->gpu, &xx.g, &r.g, &wr.g, gm ? &g.g : NULL, gm == 2, out ? &h.g : NULL, &wh.g, &sc.g,
                              1e-6f, E));
      snprintf(name, sizeof name, "residual_norm [%lld,%lld,%lld] %s w%s %s%s: x", (long long)B, (long long)S,
               (long long)D, dn(dt), dn(wdt), gm == 0 ? "no gate" : gm == 1 ? "gate" : "tanh gate",
               bcast_gate ? " [D]" : "");
      compare(e, name, &xx, bt);
      if (out) {
        snprintf(name, sizeof name, "residual_norm [%lld,%lld,%lld] %s w%s %s%s: h", (long long)B, (long long)S,
                 (long long)D, dn(dt), dn(wdt), gm == 0 ? "no gate" : gm == 1 ? "gate" : "tanh gate",
                 bcast_gate ? " [D]" : "");
        compare(e, name, &h, bt);
      }
      drop(e, &xx), drop(e, &r);
    }
  }
  drop(e, &x), drop(e, &h), drop(e, &sc), drop(e, &g), drop(e, &wr), drop(e, &wh);
}

static void t_fused_rope(env *e, int64_t B, int64_t S, int64_t H, int64_t D, dit_dtype dt, dit_dtype wdt,
                         bool shared) {
  int64_t xs[4] = {B, S, H, D}, cs3[3] = {B, S, D / 2}, cs2[2] = {S, D / 2}, ds[1] = {D};
  for (int mode = 0; mode < 2; mode++) {
    pair x = act(e, dt, 4, xs, true), w = wgt(e, wdt, 1, ds, 1.0f);
    pair c = shared ? wgt(e, DIT_F32, 2, cs2, 1.0f) : wgt(e, DIT_F32, 3, cs3, 1.0f);
    pair s = shared ? wgt(e, DIT_F32, 2, cs2, 1.0f) : wgt(e, DIT_F32, 3, cs3, 1.0f);
    OK(dit_op_rms_norm_rope(e->cpu, &x.c, &w.c, 1e-5f, &c.c, &s.c, (dit_rope_mode)mode, E));
    OK(dit_op_rms_norm_rope(e->gpu, &x.g, &w.g, 1e-5f, &c.g, &s.g, (dit_rope_mode)mode, E));
    char name[200];
    snprintf(name, sizeof name, "rms_norm_rope %s [%lld,%lld,%lld,%lld] %s w%s%s", mode ? "half" : "interleaved",
             (long long)B, (long long)S, (long long)H, (long long)D, dn(dt), dn(wdt), shared ? " shared-table" : "");
    compare(e, name, &x, dt != DIT_F32);
    drop(e, &x), drop(e, &w), drop(e, &c), drop(e, &s);
  }
}

/* rms_norm_rope_row (LTX-2's q/k): x [B,S,I] normed over each whole row, split RoPE over hr chunks of
 * 2 r, tables [S * hr, r]; the CPU runs the unfused rms_norm + rope. */
static void t_fused_rope_row(env *e, int64_t B, int64_t S, int64_t I, int64_t hr, dit_dtype dt, bool weight) {
  int64_t xs[3] = {B, S, I}, cs[2] = {S * hr, I / hr / 2}, ds[1] = {I};
  pair x = act(e, dt, 3, xs, true), w = wgt(e, DIT_F32, 1, ds, 1.0f);
  pair c = wgt(e, DIT_F32, 2, cs, 1.0f), s = wgt(e, DIT_F32, 2, cs, 1.0f);
  OK(dit_op_rms_norm_rope_row(e->cpu, &x.c, weight ? &w.c : NULL, 1e-6f, &c.c, &s.c, DIT_ROPE_HALF, E));
  OK(dit_op_rms_norm_rope_row(e->gpu, &x.g, weight ? &w.g : NULL, 1e-6f, &c.g, &s.g, DIT_ROPE_HALF, E));
  char name[200];
  snprintf(name, sizeof name, "rms_norm_rope_row [%lld,%lld,%lld] %lld chunks %s%s", (long long)B, (long long)S,
           (long long)I, (long long)hr, dn(dt), weight ? " w" : "");
  compare(e, name, &x, dt != DIT_F32);
  drop(e, &x), drop(e, &w), drop(e, &c), drop(e, &s);
}

/* residual_layer_norm (rms: residual_rms_mod, with a norm weight or none) on [B,S,D] (the CPU
 * runs the unfused gated_add, layer_norm / rms_norm, modulate): with and without the residual,
 * gate, output, shift; in place (h = x, no residual). bcast: [D] vectors (batch stride 0). */
static void t_fused_lnorm(env *e, int64_t B, int64_t S, int64_t D, dit_dtype dt, bool bcast, bool rms) {
  bool bt = dt != DIT_F32;
  int64_t xs[3] = {B, S, D}, vs[2] = {B, D}, ds[1] = {D};
  pair h = act(e, dt, 3, xs, false);
  pair sc = act(e, dt, 2, vs, true), sf = act(e, dt, 2, vs, true), g = act(e, dt, 2, vs, true);
  pair w = wgt(e, DIT_F32, 1, ds, 1.0f);
  if (bcast) /* the GPU gets row 0 as [D]; the CPU row 0 repeated as [B, D] */
    for (pair *v = &sc; v; v = v == &sc ? &sf : v == &sf ? &g : NULL) {
      for (int64_t b = 1; b < B; b++) memcpy((float *)v->c.data + b * D, v->c.data, (size_t)D * sizeof(float));
      v->g = dit_tensor_make(v->g.dtype, v->g.data, 1, ds);
      v->g.device = DIT_DEV_CUDA;
    }
  char name[200];
  for (int k = 0; k < 7; k++) {
    /* 0: residual + gate + scale/shift; 1: residual, no gate, scale only; 2: residual only (no h);
     * 3: norm only + scale/shift; 4: norm only, no modulation; 5: norm in place (h = x) + scale/shift;
     * 6: as 0 without the norm weight (LTX-2's norms have none) */
    const bool res = k <= 2 || k == 6, gate = k == 0 || k == 6, out = k != 2;
    const bool scale = k == 0 || k == 1 || k == 3 || k == 5 || k == 6, shift = k == 0 || k == 3 || k == 5 || k == 6;
    pair x = act(e, dt, 3, xs, true), r = act(e, dt, 3, xs, true);
    poison(e, &h);
    pair *y = k == 5 ? &x : &h;
    for (int side = 0; side < 2; side++) {
      pair *pp[5] = {&x, &r, &g, y, &sc};
      dit_tensor *t[6];
      for (int i = 0; i < 5; i++) t[i] = side ? &pp[i]->g : &pp[i]->c;
      t[5] = side ? &sf.g : &sf.c;
      dit_backend *be = side ? e->gpu : e->cpu;
      if (rms)
        OK(dit_op_residual_rms_mod(be, t[0], res ? t[1] : NULL, gate ? t[2] : NULL, out ? t[3] : NULL,
                                   k == 6 ? NULL : side ? &w.g : &w.c, scale ? t[4] : NULL, shift ? t[5] : NULL,
                                   1e-6f, E));
      else
        OK(dit_op_residual_layer_norm(be, t[0], res ? t[1] : NULL, gate ? t[2] : NULL, out ? t[3] : NULL,
                                      scale ? t[4] : NULL, shift ? t[5] : NULL, 1e-6f, E));
    }
    const char *what[7] = {"residual gate scale shift", "residual scale", "residual only", "scale shift",
                           "plain", "in place scale shift", "residual gate scale shift, no norm weight"};
    const char *on = rms ? "residual_rms_mod" : "residual_layer_norm";
    snprintf(name, sizeof name, "%s [%lld,%lld,%lld] %s %s%s: %s", on, (long long)B, (long long)S,
             (long long)D, dn(dt), what[k], bcast ? " [D]" : "", out ? "h" : "x");
    compare(e, name, out ? y : &x, bt);
    if (res && out) {
      snprintf(name, sizeof name, "%s [%lld,%lld,%lld] %s %s%s: x", on, (long long)B, (long long)S,
               (long long)D, dn(dt), what[k], bcast ? " [D]" : "");
      compare(e, name, &x, bt);
    }
    drop(e, &x), drop(e, &r);
  }
  drop(e, &h), drop(e, &sc), drop(e, &sf), drop(e, &g), drop(e, &w);
}

static void fused_tests(env *e) {
  bool f0 = cu_im(e->gpu)->fused;
  for (int f = 1; f >= 0; f--) { /* fused kernels, then the unfused fallbacks */
    cu_im(e->gpu)->fused = f;
    printf("-- fused ops: %s\n", f ? "fused kernels (k_fused.cu)" : "unfused sequences");
    t_fused_rows(e, 2, 33, 3840, DIT_BF16, DIT_BF16, false); /* row kernel, 2 chunks per thread */
    t_fused_rows(e, 1, 40, 3840, DIT_F32, DIT_BF16, false);
    t_fused_rows(e, 2, 7, 1000, DIT_F32, DIT_F32, false);    /* 125 chunks: partly idle block */
    t_fused_rows(e, 2, 9, 40, DIT_F32, DIT_F32, false);      /* short rows: team kernel (norm_mod) */
    t_fused_rows(e, 3, 5, 96, DIT_BF16, DIT_F32, true);      /* [D] gate, [B,D] scale: fallback */
    t_fused_rows(e, 1, 6, 6000, DIT_F32, DIT_F32, false);    /* 4 chunks per thread */
    t_fused_rows(e, 1, 3, 20000, DIT_BF16, DIT_BF16, false); /* 8 chunks per thread */
    t_fused_rows(e, 2, 5, 37, DIT_F32, DIT_F32, false);      /* D % 8 != 0: fallback */
    t_fused_rope(e, 2, 13, 3, 128, DIT_BF16, DIT_BF16, false);
    t_fused_rope(e, 1, 29, 5, 128, DIT_F32, DIT_BF16, true);
    t_fused_rope(e, 2, 11, 30, 128, DIT_F32, DIT_F32, false);
    t_fused_rope(e, 1, 17, 3, 64, DIT_F32, DIT_F32, false);   /* 8 lanes per row */
    t_fused_rope(e, 1, 9, 2, 256, DIT_BF16, DIT_BF16, false); /* 32 lanes per row */
    t_fused_rope(e, 2, 7, 3, 24, DIT_F32, DIT_F32, true);     /* 3 chunks: 4-lane teams, one lane idle */
    t_fused_rope(e, 1, 5, 2, 10, DIT_F32, DIT_F32, false);    /* D % 8 != 0: fallback */
    t_fused_rope_row(e, 2, 37, 4096, 32, DIT_BF16, false); /* LTX-2 video q/k: 2 chunks of 8 per thread */
    t_fused_rope_row(e, 1, 19, 2048, 32, DIT_F32, true);   /* the audio stream's width, a weight */
    t_fused_rope_row(e, 2, 11, 2048, 16, DIT_BF16, true);  /* other-stream tables (cross-modal) */
    t_fused_rope_row(e, 1, 7, 6144, 48, DIT_BF16, false);  /* 4 chunks of 8 per thread */
    t_fused_rope_row(e, 1, 5, 96, 4, DIT_F32, false);      /* r = 12: 3 runs of 4 pairs a chunk */
    t_fused_rope_row(e, 1, 5, 80, 4, DIT_F32, false);      /* r = 10: fallback */
    for (int rms = 0; rms < 2; rms++) { /* residual_layer_norm, then residual_rms_mod */
      t_fused_lnorm(e, 2, 37, 3072, DIT_BF16, false, rms); /* klein width: 2 chunks per thread */
      t_fused_lnorm(e, 1, 21, 3072, DIT_F32, false, rms);
      t_fused_lnorm(e, 3, 9, 1000, DIT_F32, true, rms);    /* 125 chunks, [D] vectors */
      t_fused_lnorm(e, 2, 5, 64, DIT_BF16, false, rms);    /* short rows: one warp (rms: team kernel) */
      t_fused_lnorm(e, 1, 4, 12000, DIT_F32, false, rms);  /* 4 chunks per thread */
      t_fused_lnorm(e, 2, 3, 36, DIT_F32, false, rms);     /* D % 8 != 0: fallback */
    }
    t_fused_lnorm(e, 1, 9, 6144, DIT_BF16, false, true);  /* Krea 2's width */
  }
  cu_im(e->gpu)->fused = f0;
}

/* ---------------- strided views (FLUX.2: fused projections, joint [text, image] buffers) ---------------- */

/* The same view of both sides of p: nd dims, shape and strides in elements, from element off. */
static void pview(const pair *p, int64_t off, int nd, const int64_t *shape, const int64_t *stride, dit_tensor *c,
                  dit_tensor *g) {
  *c = p->c, *g = p->g;
  c->data = (char *)p->c.data + (size_t)off * dit_dtype_size(p->c.dtype);
  g->data = (char *)p->g.data + (size_t)off * dit_dtype_size(p->g.dtype);
  c->ndim = g->ndim = nd;
  for (int i = 0; i < nd; i++) c->shape[i] = g->shape[i] = shape[i], c->stride[i] = g->stride[i] = stride[i];
}

/* A single block's buffers: big [B*S, W = 3D + 2F] (q | k | v | mlp a | mlp b), cat [B*S, C = D + F]
 * (attention out | swiglu out), both filled on both sides (so writes outside the views show
 * up as differences); every op reads and writes column slices of them, as flux2_forward.c. */
static void t_strided_single(env *e, int64_t B, int64_t S, int64_t H, int64_t hd, dit_dtype dt) {
  const int64_t D = H * hd, F = 2 * D, W = 3 * D + 2 * F, C = D + F, R = B * S;
  const bool bt = dt != DIT_F32;
  char name[200];
  int64_t bs[2] = {R, W}, cs[2] = {R, C}, ws[2] = {D, F}, nb[1] = {D}, hs[1] = {hd}, ts[2] = {S, hd / 2};
  pair big = act(e, dt, 2, bs, true), cat = act(e, dt, 2, cs, true);
  pair w = wgt(e, DIT_BF16, 2, ws, 0.1f), bias = wgt(e, DIT_BF16, 1, nb, 1.0f), nw = wgt(e, DIT_BF16, 1, hs, 1.0f);
  pair co = wgt(e, DIT_F32, 2, ts, 1.0f), si = wgt(e, DIT_F32, 2, ts, 1.0f);
  dit_tensor xc, xg, yc, yg, qc, qg, kc, kg, vc, vg, oc, og;
  /* linear: x = big[:, 3D:3D+F] (ld W), y = cat[:, :D] (ld C), plain and with a SiLU after it */
  for (int a = 0; a < 2; a++) {
    pview(&big, 3 * D, 2, (int64_t[]){R, F}, (int64_t[]){W, 1}, &xc, &xg);
    pview(&cat, 0, 2, (int64_t[]){R, D}, (int64_t[]){C, 1}, &yc, &yg);
    dit_act ac = a ? DIT_ACT_SILU : DIT_ACT_NONE;
    OK(dit_op_linear(e->cpu, &yc, &xc, &w.c, &bias.c, ac, E));
    OK(dit_op_linear(e->gpu, &yg, &xg, &w.g, &bias.g, ac, E));
    snprintf(name, sizeof name, "linear strided x ld%lld -> y ld%lld %s act%d", (long long)W, (long long)C, dn(dt), a);
    compare(e, name, &cat, true);
  }
  /* q/k RMSNorm + RoPE in place on column slices, attention into cat[:, :D] */
  const int64_t h4[4] = {B, S, H, hd}, bst[4] = {S * W, W, hd, 1}, cst[4] = {S * C, C, hd, 1};
  bool f0 = cu_im(e->gpu)->fused;
  for (int f = 1; f >= 0; f--) {
    cu_im(e->gpu)->fused = f;
    pview(&big, f ? 0 : D, 4, h4, bst, &qc, &qg);
    OK(dit_op_rms_norm_rope(e->cpu, &qc, &nw.c, 1e-6f, &co.c, &si.c, DIT_ROPE_INTERLEAVED, E));
    OK(dit_op_rms_norm_rope(e->gpu, &qg, &nw.g, 1e-6f, &co.g, &si.g, DIT_ROPE_INTERLEAVED, E));
    snprintf(name, sizeof name, "rms_norm_rope strided ld%lld %s%s", (long long)W, dn(dt), f ? "" : " (unfused)");
    compare(e, name, &big, bt);
  }
  cu_im(e->gpu)->fused = f0;
  bool cudnn0 = cu_im(e->gpu)->cudnn;
  for (int cd = 1; cd >= 0; cd--) { /* cuDNN (BF16), then our kernel */
    cu_im(e->gpu)->cudnn = cd;
    pview(&big, 0, 4, h4, bst, &qc, &qg);
    pview(&big, D, 4, h4, bst, &kc, &kg);
    pview(&big, 2 * D, 4, h4, bst, &vc, &vg);
    pview(&cat, 0, 4, h4, cst, &oc, &og);
    float sc = 1.0f / sqrtf((float)hd);
    OK(dit_op_attention(e->cpu, &oc, &qc, &kc, &vc, NULL, sc, false, E));
    OK(dit_op_attention(e->gpu, &og, &qg, &kg, &vg, NULL, sc, false, E));
    char impl[16];
    snprintf(name, sizeof name, "attention %s strided q/k/v ld%lld out ld%lld B%lld S%lld %s",
             attn_impl(e, impl, sizeof impl), (long long)W, (long long)C, (long long)B, (long long)S, dn(dt));
    compare(e, name, &cat, true);
  }
  cu_im(e->gpu)->cudnn = cudnn0;
  /* swiglu: cat[:, D:] = silu(big[:, 3D:3D+F]) * big[:, 3D+F:]; a fresh cat (its other columns
   * hold bf16 GEMM / attention results, which the F32 tolerance would not pass) */
  drop(e, &cat);
  cat = act(e, dt, 2, cs, true);
  bool vec0 = cu_im(e->gpu)->vec;
  for (int vec = 1; vec >= 0; vec--) {
    cu_im(e->gpu)->vec = vec;
    dit_tensor ac, ag, bc, bg;
    pview(&big, 3 * D, 2, (int64_t[]){R, F}, (int64_t[]){W, 1}, &ac, &ag);
    pview(&big, 3 * D + F, 2, (int64_t[]){R, F}, (int64_t[]){W, 1}, &bc, &bg);
    pview(&cat, D, 2, (int64_t[]){R, F}, (int64_t[]){C, 1}, &yc, &yg);
    OK(dit_op_swiglu(e->cpu, &yc, &ac, &bc, E));
    OK(dit_op_swiglu(e->gpu, &yg, &ag, &bg, E));
    snprintf(name, sizeof name, "swiglu strided a/b ld%lld y ld%lld %s%s", (long long)W, (long long)C, dn(dt),
             vec ? "" : " (scalar)");
    compare(e, name, &cat, bt);
  }
  cu_im(e->gpu)->vec = vec0;
  drop(e, &big), drop(e, &cat), drop(e, &w), drop(e, &bias), drop(e, &nw), drop(e, &co), drop(e, &si);
}

/* A double block's joint buffer [B, S, D] with S = St + Si: linear written into the text rows
 * (per-batch row ranges: one GEMM per item), read back from the image rows, and q/k RMSNorm +
 * RoPE on a row range with its slice of the table. */
static void t_strided_joint(env *e, int64_t B, int64_t St, int64_t Si, int64_t H, int64_t hd, dit_dtype dt) {
  const int64_t S = St + Si, D = H * hd;
  char name[200];
  int64_t js[3] = {B, S, D}, xs[3] = {B, St, D}, ys[3] = {B, Si, D}, ws[2] = {D, D}, hs[1] = {hd};
  int64_t ts[2] = {S, hd / 2};
  pair joint = act(e, dt, 3, js, true), x = act(e, dt, 3, xs, true), y = act(e, dt, 3, ys, true);
  pair w = wgt(e, DIT_BF16, 2, ws, 0.1f), nw = wgt(e, DIT_BF16, 1, hs, 1.0f);
  pair co = wgt(e, DIT_F32, 2, ts, 1.0f), si = wgt(e, DIT_F32, 2, ts, 1.0f);
  dit_tensor jc, jg;
  pview(&joint, 0, 3, xs, (int64_t[]){S * D, D, 1}, &jc, &jg);
  OK(dit_op_linear(e->cpu, &jc, &x.c, &w.c, NULL, DIT_ACT_NONE, E));
  OK(dit_op_linear(e->gpu, &jg, &x.g, &w.g, NULL, DIT_ACT_NONE, E));
  snprintf(name, sizeof name, "linear into joint rows [0,%lld) of %lld, B%lld %s", (long long)St, (long long)S,
           (long long)B, dn(dt));
  compare(e, name, &joint, true);
  pview(&joint, St * D, 3, ys, (int64_t[]){S * D, D, 1}, &jc, &jg);
  OK(dit_op_linear(e->cpu, &y.c, &jc, &w.c, NULL, DIT_ACT_NONE, E));
  OK(dit_op_linear(e->gpu, &y.g, &jg, &w.g, NULL, DIT_ACT_NONE, E));
  snprintf(name, sizeof name, "linear from joint rows [%lld,%lld), B%lld %s", (long long)St, (long long)S,
           (long long)B, dn(dt));
  compare(e, name, &y, true);
  bool f0 = cu_im(e->gpu)->fused;
  for (int f = 1; f >= 0; f--) {
    cu_im(e->gpu)->fused = f;
    /* the text rows hold the GPU GEMM's output (bf16-rounded inputs): start both sides equal */
    resync(e, &joint);
    dit_tensor cc, cg, sc, sg;
    pview(&joint, St * D, 4, (int64_t[]){B, Si, H, hd}, (int64_t[]){S * D, D, hd, 1}, &jc, &jg);
    pview(&co, St * (hd / 2), 2, (int64_t[]){Si, hd / 2}, (int64_t[]){hd / 2, 1}, &cc, &cg);
    pview(&si, St * (hd / 2), 2, (int64_t[]){Si, hd / 2}, (int64_t[]){hd / 2, 1}, &sc, &sg);
    OK(dit_op_rms_norm_rope(e->cpu, &jc, &nw.c, 1e-6f, &cc, &sc, DIT_ROPE_INTERLEAVED, E));
    OK(dit_op_rms_norm_rope(e->gpu, &jg, &nw.g, 1e-6f, &cg, &sg, DIT_ROPE_INTERLEAVED, E));
    snprintf(name, sizeof name, "rms_norm_rope joint rows [%lld,%lld) B%lld %s%s", (long long)St, (long long)S,
             (long long)B, dn(dt), f ? "" : " (unfused)");
    compare(e, name, &joint, dt != DIT_F32);
  }
  cu_im(e->gpu)->fused = f0;
  drop(e, &joint), drop(e, &x), drop(e, &y), drop(e, &w), drop(e, &nw), drop(e, &co), drop(e, &si);
}

static void strided_tests(env *e) {
  printf("-- strided views (FLUX.2 fused projections and joint buffers)\n");
  t_strided_single(e, 1, 77, 3, 64, DIT_BF16);
  t_strided_single(e, 2, 40, 2, 128, DIT_BF16);
  t_strided_single(e, 1, 33, 2, 64, DIT_F32);
  t_strided_joint(e, 1, 9, 40, 3, 64, DIT_BF16);
  t_strided_joint(e, 2, 9, 40, 2, 128, DIT_BF16);
  t_strided_joint(e, 2, 5, 19, 2, 64, DIT_F32);
}

static void time_fused(env *e) {
  int64_t S = 4224, D = 3840;
  int64_t xs[3] = {1, S, D}, vs[2] = {1, D}, ds[1] = {D}, hs[1] = {128}, rs[4] = {1, S, 30, 128}, cs[2] = {S, 64};
  dit_dtype dt = DIT_BF16;
  double es = 2, nx = (double)S * D;
  pair x = act(e, dt, 3, xs, true), r = act(e, dt, 3, xs, true), h = act(e, dt, 3, xs, false);
  pair sc = act(e, dt, 2, vs, true), g = act(e, dt, 2, vs, true), w = wgt(e, DIT_BF16, 1, ds, 1.0f);
  pair hw = wgt(e, DIT_BF16, 1, hs, 1.0f), c = wgt(e, DIT_F32, 2, cs, 1.0f);
  dit_tensor q = dit_tensor_make(dt, r.g.data, 4, rs);
  q.device = DIT_DEV_CUDA;
  float ms;
  TIMED(e, ms, dit_op_rms_norm_mod(e->gpu, &h.g, &x.g, &w.g, &sc.g, 1e-6f, E));
  printf("TIME rms_norm_mod [%lld,%lld] bf16: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, ms,
         2 * nx * es / (ms * 1e-3) / 1e9);
  TIMED(e, ms, dit_op_residual_norm(e->gpu, &x.g, &r.g, &w.g, &g.g, true, &h.g, &w.g, &sc.g, 1e-6f, E));
  printf("TIME residual_norm +h [%lld,%lld] bf16: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, ms,
         4 * nx * es / (ms * 1e-3) / 1e9);
  TIMED(e, ms, dit_op_residual_norm(e->gpu, &x.g, &r.g, &w.g, &g.g, true, NULL, NULL, NULL, 1e-6f, E));
  printf("TIME residual_norm [%lld,%lld] bf16: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, ms,
         3 * nx * es / (ms * 1e-3) / 1e9);
  TIMED(e, ms, dit_op_residual_layer_norm(e->gpu, &x.g, &r.g, &g.g, &h.g, &sc.g, &g.g, 1e-6f, E));
  printf("TIME residual_layer_norm +h [%lld,%lld] bf16: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D, ms,
         4 * nx * es / (ms * 1e-3) / 1e9);
  TIMED(e, ms, dit_op_residual_layer_norm(e->gpu, &x.g, NULL, NULL, &h.g, &sc.g, &g.g, 1e-6f, E));
  printf("TIME residual_layer_norm (norm only) [%lld,%lld] bf16: %.3f ms, %.0f GB/s\n", (long long)S, (long long)D,
         ms, 2 * nx * es / (ms * 1e-3) / 1e9);
  TIMED(e, ms, dit_op_rms_norm_rope(e->gpu, &q, &hw.g, 1e-5f, &c.g, &c.g, DIT_ROPE_INTERLEAVED, E));
  printf("TIME rms_norm_rope [1,%lld,30,128] bf16: %.3f ms, %.0f GB/s\n", (long long)S, ms,
         2 * nx * es / (ms * 1e-3) / 1e9);
  drop(e, &x), drop(e, &r), drop(e, &h), drop(e, &sc), drop(e, &g), drop(e, &w), drop(e, &hw), drop(e, &c);
}

/* The generic cases: every case of the backend op table (tests/support/op_cases.c) that the
 * CUDA backend takes, GPU against CPU, with the table's device-pair tolerance policy. */
static void table_tests(env *e) {
  printf("-- backend op table (%zu cases)\n", opc_n_cases);
  /* our attention kernels: cuDNN's padding mask cannot express the table's masks with no
   * valid key (its guard refuses them); the cuDNN path has its own tests below */
  const bool cudnn0 = cu_im(e->gpu)->cudnn;
  cu_im(e->gpu)->cudnn = false;
  opc_result r = opc_run_all(e->gpu, e->cpu, "cuda", opc_device_takes, NULL);
  cu_im(e->gpu)->cudnn = cudnn0;
  printf("-- backend op table: %d run, %d failed, %d not taken by the CUDA backend\n", r.run, r.failed, r.skipped);
}

static void small_tests(env *e) {
  table_tests(e);
  /* the table has the linear cases of one activation dtype; this one reads BF16, writes F32 */
  t_linear(e, 65, 136, 72, DIT_BF16, DIT_BF16, DIT_F32, true, DIT_ACT_NONE);
  int ver0 = cu_im(e->gpu)->attn_version;
  bool cudnn0 = cu_im(e->gpu)->cudnn;
  cu_im(e->gpu)->cudnn = false; /* our kernels first; cuDNN below */
  for (int ver = 1; ver <= 3; ver++) { /* every flash kernel version (k_attention.cu) */
    cu_im(e->gpu)->attn_version = ver;
    t_attention(e, 2, 77, 77, 4, 2, 64, DIT_F32, 9, false, false);
    t_attention(e, 2, 77, 77, 4, 2, 64, DIT_BF16, 9, false, true);
    t_attention(e, 1, 100, 100, 3, 3, 128, DIT_F32, 0, true, false);
    t_attention(e, 1, 300, 300, 2, 2, 128, DIT_BF16, 0, true, false);
    t_attention(e, 2, 130, 61, 2, 1, 128, DIT_BF16, 5, false, false);
    t_attention(e, 1, 65, 65, 2, 2, 256, DIT_F32, 3, false, false);
    t_attention(e, 1, 200, 333, 2, 2, 256, DIT_BF16, 7, false, false);
    t_attention(e, 1, 70, 70, 4, 1, 80, DIT_BF16, 0, true, false);
    t_attention(e, 2, 257, 190, 6, 2, 64, DIT_BF16, 11, false, true);
  }
  cu_im(e->gpu)->attn_version = ver0;
  cu_im(e->gpu)->cudnn = cudnn0;
  cudnn_small_tests(e);
  /* head dims above 256: the GEMM path (cuda_attn_gemm.c) */
  t_attention_wide(e, 2, 77, 77, 2, 2, 320, DIT_BF16, 9, 0);
  t_attention_wide(e, 2, 77, 77, 2, 2, 320, DIT_F32, 9, W_EMPTY);
  t_attention_wide(e, 1, 130, 130, 2, 2, 512, DIT_BF16, 0, W_CAUSAL);
  t_attention_wide(e, 1, 200, 200, 1, 1, 512, DIT_F32, 0, 0);
  t_attention_wide(e, 1, 200, 200, 1, 1, 512, DIT_BF16, 0, 0);
  t_attention_wide(e, 2, 100, 61, 2, 1, 384, DIT_BF16, 5, 0); /* GQA 2/1, Sq != Sk */
  t_attention_wide(e, 1, 90, 90, 2, 2, 512, DIT_BF16, 0, W_STRIDED);
  t_attention_wide(e, 2, 1, 50, 2, 2, 512, DIT_BF16, 3, 0); /* one query row */
  t_attention_wide(e, 1, 5, 0, 1, 1, 512, DIT_F32, 0, 0);   /* no keys: zeros */
  size_t chunk0 = cu_im(e->gpu)->attn_chunk_bytes;
  cu_im(e->gpu)->attn_chunk_bytes = (size_t)64 << 10; /* 32-row query chunks */
  t_attention_wide(e, 2, 300, 300, 2, 1, 512, DIT_F32, 7, W_CAUSAL);
  t_attention_wide(e, 2, 300, 257, 2, 2, 384, DIT_BF16, 7, W_EMPTY);
  cu_im(e->gpu)->attn_chunk_bytes = chunk0;
  bool vec0 = cu_im(e->gpu)->vec;
  for (int vec = 0; vec < 2; vec++) { /* scalar kernels, then the 16-byte ones (k_vec.cu) */
    cu_im(e->gpu)->vec = vec;
    printf("-- elementwise kernels: %s\n", vec ? "16-byte (vec)" : "scalar");
    t_norms(e, 33, 3840, DIT_F32, DIT_BF16);
    t_norms(e, 17, 100, DIT_F32, DIT_F32);
    t_norms(e, 9, 1000, DIT_BF16, DIT_BF16);
    t_elementwise(e, 2, 50, 96, DIT_F32);
    t_elementwise(e, 2, 33, 40, DIT_BF16);
    t_rope(e, 2, 13, 3, 64, 64, DIT_F32, false);
    t_rope(e, 1, 29, 5, 128, 128, DIT_F32, true);
    t_rope(e, 2, 13, 3, 32, 32, DIT_BF16, false);
    t_rope(e, 1, 21, 4, 128, 96, DIT_BF16, true); /* MiniMax-H3: 96 of 128 channels */
    t_norms(e, 77, 128, DIT_BF16, DIT_BF16); /* short rows: team kernel (16 lanes per row) */
    t_norms(e, 50, 40, DIT_F32, DIT_F32);    /* 5 chunks: 8-lane teams */
    t_norms(e, 20, 256, DIT_F32, DIT_BF16);  /* 32 lanes per row */
    t_norms(e, 3, 16384, DIT_BF16, DIT_F32); /* row kernel, 4 chunks per thread */
  }
  cu_im(e->gpu)->vec = vec0;
  printf("-- group_norm (chunked partial sums)\n");
  t_group_norm(e, 1, 128, 64, 64, 32, DIT_BF16, true, false, 0.0f, false);  /* 16-byte path, 2 chunks a group */
  t_group_norm(e, 2, 64, 100, 37, 32, DIT_BF16, false, true, 0.0f, false); /* HW % 8 = 4: element path */
  t_group_norm(e, 1, 96, 45, 45, 32, DIT_F32, true, false, 0.0f, false);   /* odd sizes, F32 */
  t_group_norm(e, 2, 64, 96, 96, 32, DIT_F32, false, false, 50.0f, false); /* offset 50 */
  t_channel_rms_norm(e, 1, 96, 33, 47, DIT_F32, true);
  t_channel_rms_norm(e, 2, 384, 16, 16, DIT_BF16, false);
  fused_tests(e);
  t_embedding(e, 1000, 64, 37, DIT_BF16, DIT_I32);
  t_embedding(e, 500, 72, 20, DIT_F32, DIT_I64);
  t_embedding(e, 300, 64, 29, DIT_F8_E4M3, DIT_I32);
  t_embedding(e, 300, 64, 29, DIT_F8_E5M2, DIT_I64);
  t_linear_fp8(e, 65, 136, 72, DIT_F8_E4M3, DIT_BF16, true);
  t_linear_fp8(e, 300, 512, 200, DIT_F8_E5M2, DIT_F32, false);
  printf("-- fp8 compute (e4m3 GEMMs, activations quantized per row)\n");
  t_linear_fp8c(e, 70, 512, 96, 512, DIT_BF16, true, DIT_ACT_NONE);
  t_linear_fp8c(e, 129, 256, 160, 256, DIT_BF16, false, DIT_ACT_GELU_TANH);
  t_linear_fp8c(e, 33, 256, 64, 384, DIT_BF16, true, DIT_ACT_SILU); /* x a column slice */
  t_linear_fp8c(e, 40, 128, 48, 128, DIT_F32, true, DIT_ACT_NONE);
  t_linear_fp8c(e, 1, 3840, 3840, 3840, DIT_BF16, true, DIT_ACT_NONE);
  t_linear_quant(e, 70, 512, 96, 0, DIT_Q8_0, DIT_BF16);
  t_linear_quant(e, 70, 512, 96, 0, DIT_Q4_K, DIT_F32);
  t_linear_quant(e, 70, 512, 96, 8, DIT_Q8_0, DIT_BF16);
  t_linear_quant(e, 33, 256, 200, 5, DIT_Q4_K, DIT_F32);
  t_linear_quant(e, 129, 256, 64, 16, DIT_F8_E4M3, DIT_BF16);
  t_linear_quant(e, 64, 512, 128, 3, DIT_F8_E5M2, DIT_F32);
  t_linear_quant(e, 9, 341, 128, 0, DIT_F8_E4M3, DIT_BF16); /* odd rows (an FFN of 341) */
  t_linear_quant(e, 5, 341, 33, 4, DIT_F8_E5M2, DIT_F32);    /* odd rows and an odd count */
  t_conv(e, 2, 8, 17, 17, 12, 3, 1, 1, DIT_F32, true);
  t_conv(e, 2, 8, 17, 17, 12, 3, 2, 1, DIT_BF16, true);
  t_conv(e, 1, 16, 9, 11, 8, 1, 1, 0, DIT_F32, true);
  t_conv(e, 1, 16, 9, 11, 8, 1, 1, 0, DIT_BF16, false);
  printf("-- conv2d through cuDNN\n");
  t_conv_cudnn(e, 1, 32, 17, 23, 48, 3, 1, 1, DIT_BF16, DIT_BF16, DIT_BF16, true, true);
  t_conv_cudnn(e, 1, 32, 17, 23, 48, 3, 1, 1, DIT_BF16, DIT_BF16, DIT_BF16, false, true);
  t_conv_cudnn(e, 1, 32, 17, 23, 48, 3, 1, 1, DIT_BF16, DIT_F32, DIT_BF16, true, true);
  t_conv_cudnn(e, 1, 32, 17, 23, 48, 3, 1, 1, DIT_BF16, DIT_F32, DIT_F32, false, true);
  t_conv_cudnn(e, 2, 64, 16, 16, 64, 3, 1, 1, DIT_F32, DIT_BF16, DIT_F32, true, true); /* F32 activations */
  t_conv_cudnn(e, 1, 64, 9, 11, 32, 1, 1, 0, DIT_BF16, DIT_F32, DIT_F32, false, true); /* 1x1 */
  t_conv_cudnn(e, 1, 64, 9, 11, 32, 1, 1, 0, DIT_F32, DIT_BF16, DIT_F32, true, true);
  t_conv_cudnn(e, 1, 64, 9, 11, 32, 1, 1, 0, DIT_BF16, DIT_BF16, DIT_BF16, true, false); /* the GEMM reads x */
  t_conv_cudnn(e, 2, 32, 17, 23, 32, 3, 2, 0, DIT_BF16, DIT_BF16, DIT_BF16, true, true); /* encoder downsample */
  t_conv_cudnn(e, 1, 32, 18, 24, 32, 3, 2, 0, DIT_BF16, DIT_F32, DIT_BF16, true, true);
  t_conv_cudnn(e, 1, 128, 33, 31, 3, 3, 1, 1, DIT_BF16, DIT_BF16, DIT_BF16, true, false); /* conv_out: 3 channels */
  t_conv_cudnn(e, 1, 16, 9, 11, 8, 3, 1, 1, DIT_F32, DIT_F32, DIT_F32, true, false);     /* fp32: im2col */
}

static void big_tests(env *e) {
  t_linear_big(e, 4224, 3840, 3840, DIT_F32, DIT_F32);
  t_linear_big(e, 4224, 3840, 3840, DIT_BF16, DIT_BF16);
  t_linear_big(e, 4224, 3840, 10240, DIT_BF16, DIT_BF16);
  int ver0 = cu_im(e->gpu)->attn_version;
  bool cudnn0 = cu_im(e->gpu)->cudnn;
  cu_im(e->gpu)->cudnn = true;
  long c0 = cudnn_calls(e);
  t_attention_big(e, 1, 4224, 30, 128, 0, false, DIT_BF16); /* Z-Image 1024², one image: no mask */
  cudnn_report(e, "big B1 S4224 no mask", c0, true);
  c0 = cudnn_calls(e);
  t_attention_big(e, 1, 4224, 30, 128, 100, true, DIT_BF16);
  cudnn_report(e, "big B1 S4224 mask", c0, true);
  c0 = cudnn_calls(e);
  t_attention_big(e, 2, 4224, 30, 128, 100, true, DIT_BF16); /* two items, 4124 / 4024 valid keys */
  cudnn_report(e, "big B2 S4224 mask", c0, true);
  cu_im(e->gpu)->cudnn = false;
  for (int ver = 1; ver <= 3; ver++) {
    cu_im(e->gpu)->attn_version = ver;
    t_attention_big(e, 1, 4224, 30, 128, 100, true, DIT_BF16);
    t_attention_big(e, 1, 4224, 30, 128, 100, true, DIT_F32);
  }
  cu_im(e->gpu)->attn_version = ver0;
  cu_im(e->gpu)->cudnn = cudnn0;
  t_attention_wide(e, 1, 4096, 4096, 1, 1, 512, DIT_BF16, 0, W_BIG);   /* VAE mid-block attention, 512² image */
  t_attention_wide(e, 1, 4096, 4096, 1, 1, 512, DIT_F32, 0, W_BIG);
  t_attention_wide(e, 1, 16384, 16384, 1, 1, 512, DIT_BF16, 0, W_BIG); /* 1024² image */
  t_group_norm(e, 1, 128, 1024, 1024, 32, DIT_BF16, true, false, 0.0f, true); /* VAE decoder, 1024² image */
  t_group_norm(e, 1, 512, 128, 128, 32, DIT_BF16, true, false, 0.0f, true);
  t_conv(e, 1, 128, 256, 256, 128, 3, 1, 1, DIT_BF16, true);
  t_conv(e, 1, 512, 128, 128, 512, 3, 1, 1, DIT_BF16, true);
  t_conv_cudnn(e, 1, 512, 128, 128, 512, 3, 1, 1, DIT_BF16, DIT_BF16, DIT_BF16, true, true);
  t_conv_cudnn(e, 1, 128, 512, 512, 128, 3, 1, 1, DIT_BF16, DIT_BF16, DIT_BF16, true, true);
  t_conv_cudnn(e, 1, 512, 128, 128, 512, 3, 1, 1, DIT_BF16, DIT_F32, DIT_BF16, true, true); /* F32 weights */
  t_conv_cudnn(e, 1, 128, 512, 512, 128, 3, 1, 1, DIT_F32, DIT_BF16, DIT_F32, true, true);  /* F32 activations */
  bool vec0 = cu_im(e->gpu)->vec;
  for (int vec = 0; vec < 2; vec++) {
    cu_im(e->gpu)->vec = vec;
    printf("-- elementwise timings: %s kernels\n", vec ? "16-byte (vec)" : "scalar");
    time_bw(e);
  }
  cu_im(e->gpu)->vec = vec0;
  time_fused(e);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  env ev;
  memset(&ev, 0, sizeof ev);
  ev.seed = 0x5eed1234ull;
  dit_error e_;
  if (dit_backend_cpu_create(0, &ev.cpu, E) != DIT_OK || dit_backend_cuda_create(0, DIT_GPU_PRECISION_BF16, NULL, &ev.gpu, E) != DIT_OK) {
    fprintf(stderr, "backend create failed: %s\n", e_.msg);
    return 1;
  }
  ev.stream = cu_im(ev.gpu)->stream;
  cudaEventCreate(&ev.ev0);
  cudaEventCreate(&ev.ev1);
  small_tests(&ev);
  strided_tests(&ev);
  if (!quick) big_tests(&ev);
  OK(ev.gpu->ops->sync(ev.gpu, E));
  cudaEventDestroy(ev.ev0);
  cudaEventDestroy(ev.ev1);
  dit_backend_free(ev.gpu);
  dit_backend_free(ev.cpu);
  return dt_finish();
}
