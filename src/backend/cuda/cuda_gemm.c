/* GEMMs on the GPU through cuBLASLt: a plan cache (descriptors + algorithm per shape,
 * dtype, epilogue and pointer alignment; the algorithm is tuned per shape: the heuristic's
 * first few candidates are timed on the plan's first un-captured call and the fastest of those
 * giving the first's exact result is kept, or the choice an earlier process kept in the tuning
 * cache file is taken; DIT_CUDA_GEMM_TUNE=0: the heuristic's first), fp8 GEMMs with row
 * scales (fp8 compute: an e4m3 w with x quantized per row, k_fp8.cu),
 * linear (activations F32 converted to the weight dtype on the fly, or BF16 as given; fp32
 * accumulation; bias/GELU-tanh epilogues in cuBLASLt, SiLU and exact GELU in a separate
 * kernel) and conv2d (cuDNN first when the backend's cuDNN switch is on and the dtypes fit,
 * cudnn_conv.c; else im2col in chunks + GEMM, then a per-channel bias kernel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_conv.h"
#include "core/timer.h"

#define CU_IM2COL_BYTES ((size_t)256 << 20)
#define CU_TUNE_RUNS 3 /* timed runs per candidate (after one untimed warm-up) */

static cudaDataType_t cu_dtype(int dt) {
  return dt == DIT_BF16 ? CUDA_R_16BF : dt == DIT_F16 ? CUDA_R_16F : dt == DIT_F8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_32F;
}

static int ptr_align(const void *p) {
  uintptr_t u = (uintptr_t)p;
  int a = 256;
  while (a > 1 && (u % (uintptr_t)a) != 0) a /= 2;
  return a;
}

static void plan_release(cu_plan *p) {
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
  memset(p, 0, sizeof *p);
}

static dit_status plan_build(cu_impl *im, cu_plan *p, int align, const char *op, dit_error *err) {
  cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = (cublasLtEpilogue_t)p->epi;
  cudaDataType_t abt = cu_dtype(p->abt), dt = cu_dtype(p->dt);
  DIT_TRY(cu_check_lt(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op, "MatmulDescCreate",
                      err));
  DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), op,
                      "set TRANSA", err));
  DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), op,
                      "set TRANSB", err));
  DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                      op, "set EPILOGUE", err));
  if (p->abt == DIT_F8_E4M3) { /* fp8: row scales of A (the weight's) and B (the tokens'), set per call; the
                                  heuristic sees a device address there already */
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const void *any = im->workspace;
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode),
                        op, "set A_SCALE_MODE", err));
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode),
                        op, "set B_SCALE_MODE", err));
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof any),
                        op, "set A_SCALE_POINTER", err));
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof any),
                        op, "set B_SCALE_POINTER", err));
  }
  uint64_t ar = p->ta ? p->k : p->m, ac = p->ta ? p->m : p->k;
  uint64_t br = p->tb ? p->n : p->k, bc = p->tb ? p->k : p->n;
  DIT_TRY(cu_check_lt(cublasLtMatrixLayoutCreate(&p->la, abt, ar, ac, p->lda), op, "layout A", err));
  DIT_TRY(cu_check_lt(cublasLtMatrixLayoutCreate(&p->lb, abt, br, bc, p->ldb), op, "layout B", err));
  DIT_TRY(cu_check_lt(cublasLtMatrixLayoutCreate(&p->ld, dt, (uint64_t)p->m, (uint64_t)p->n, p->ldd), op,
                      "layout D", err));
  cublasLtMatmulPreference_t pref;
  DIT_TRY(cu_check_lt(cublasLtMatmulPreferenceCreate(&pref), op, "PreferenceCreate", err));
  uint64_t ws = im->workspace_bytes;
  uint32_t al = (uint32_t)align;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
  cublasLtMatmulHeuristicResult_t res[CU_MAX_CANDS];
  int nres = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(im->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref,
                                                     CU_MAX_CANDS, res, &nres);
  cublasLtMatmulPreferenceDestroy(pref);
  DIT_TRY(cu_check_lt(st, op, "AlgoGetHeuristic", err));
  p->n_cand = 0;
  for (int i = 0; i < nres && i < CU_MAX_CANDS; i++) { /* the usable ones, in the heuristic's order */
    if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > im->workspace_bytes) continue;
    p->cand[p->n_cand] = res[i].algo;
    p->cand_ws[p->n_cand++] = res[i].workspaceSize;
  }
  if (p->n_cand < 1)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                      "%s: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld (A/B %s, D %s, epilogue %d)", op,
                      (long long)p->m, (long long)p->n, (long long)p->k, dit_dtype_name(p->abt),
                      dit_dtype_name(p->dt), p->epi);
  p->algo = p->cand[0];
  p->tuned = p->n_cand < 2; /* nothing to choose from */
  return DIT_OK;
}

/* Times candidate c on the call's operands: one untimed warm-up, then CU_TUNE_RUNS runs
 * between ev0 and ev1 on the stream. *ms: time per run, or -1 when cuBLASLt refuses the
 * candidate (skipped, not an error). A CUDA error (events) is returned: tuning stops. (Emptying
 * the L2 cache before each timed run, as a forward meets its weights, chose the same algorithms
 * for LTX-2's and Z-Image's shapes on an H100 and timed them alike: docs/PERF.md.) */
static dit_status tune_one(cu_impl *im, const cu_plan *p, int c, const void *A, const void *B, void *D,
                           cudaEvent_t ev0, cudaEvent_t ev1, float *ms, dit_error *err) {
  const char *op = "cuda gemm tune";
  const float one = 1.0f, zero = 0.0f;
  *ms = -1.0f;
  for (int r = 0; r <= CU_TUNE_RUNS; r++) {
    if (r == 1) DIT_TRY(cu_check(cudaEventRecord(ev0, im->stream), op, "cudaEventRecord", err));
    cublasStatus_t st = cublasLtMatmul(im->lt, p->desc, &one, A, p->la, B, p->lb, &zero, D, p->ld, D, p->ld,
                                       &p->cand[c], im->workspace, im->workspace_bytes, im->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
      cudaGetLastError(); /* a launch failure it may have left behind */
      return DIT_OK;
    }
  }
  DIT_TRY(cu_check(cudaEventRecord(ev1, im->stream), op, "cudaEventRecord", err));
  DIT_TRY(cu_check(cudaEventSynchronize(ev1), op, "cudaEventSynchronize", err));
  float t = 0.0f;
  DIT_TRY(cu_check(cudaEventElapsedTime(&t, ev0, ev1), op, "cudaEventElapsedTime", err));
  *ms = t / CU_TUNE_RUNS;
  return DIT_OK;
}

/* An algorithm's tile, stages and cluster shape ids (cuBLASLt's enums), for the tuning log. */
static void algo_desc(const cublasLtMatmulAlgo_t *a, char *buf, size_t len) {
  uint32_t tile = 0, stages = 0, cluster = 0;
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &got);
  snprintf(buf, len, "tile %u stages %u cluster %u", tile, stages, cluster);
}

static double tflops(const cu_plan *p, float ms) {
  return ms > 0.0f ? 2.0 * (double)p->m * (double)p->n * (double)p->k / ((double)ms * 1e9) : 0.0;
}

/* The hash of candidate c's D on the check operands rA, rB (false: cuBLASLt refused it there). */
static bool check_hash(cu_impl *im, const cu_plan *p, int c, const void *rA, const void *rB, void *D, uint64_t *h,
                       dit_status *s, dit_error *err) {
  const float one = 1.0f, zero = 0.0f;
  if (cublasLtMatmul(im->lt, p->desc, &one, rA, p->la, rB, p->lb, &zero, D, p->ld, D, p->ld, &p->cand[c],
                     im->workspace, im->workspace_bytes, im->stream) != CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();
    return false;
  }
  *s = cu_result_hash(im, D, (int)dit_dtype_size((dit_dtype)p->dt), p->m, p->n, p->ldd, h, err);
  return *s == DIT_OK;
}

/* Sets p->algo to the fastest of p's candidates timed on the call's operands among those whose
 * result on pseudo-random operands of the same sizes is bit for bit the first runnable
 * candidate's, so that tuning, which timing noise decides, never changes an image: a model
 * loaded twice gives the same pixels. The bias pointer is already on p->desc; beta = 0 and D
 * aliases neither A nor B, so the extra runs only rewrite D (the call writes it after). Fails,
 * with a message, on a CUDA error or when the card has no room for the check operands: the
 * caller then keeps the first. */
static dit_status gemm_tune(cu_impl *im, cu_plan *p, const void *A, const void *B, void *D, dit_error *err) {
  const char *op = "cuda gemm tune";
  const int64_t n_op[2] = {p->lda * (p->ta ? p->m : p->k), p->ldb * (p->tb ? p->k : p->n)};
  const int dt_op[2] = {p->abt, p->abt};
  void *block = NULL, *rnd[2] = {NULL, NULL};
  DIT_TRY(cu_random_operands(im, 2, n_op, dt_op, &block, rnd, err));
  cudaEvent_t ev0 = NULL, ev1 = NULL;
  float t[CU_MAX_CANDS];
  uint64_t h[CU_MAX_CANDS];
  int ref = -1, same = 0;
  dit_status s = cu_check(cudaEventCreate(&ev0), op, "cudaEventCreate", err);
  if (s == DIT_OK) s = cu_check(cudaEventCreate(&ev1), op, "cudaEventCreate", err);
  for (int c = 0; s == DIT_OK && c < p->n_cand; c++) {
    s = tune_one(im, p, c, A, B, D, ev0, ev1, &t[c], err);
    if (s != DIT_OK || t[c] < 0.0f) continue;
    if (!check_hash(im, p, c, rnd[0], rnd[1], D, &h[c], &s, err)) {
      t[c] = -1.0f;
      continue;
    }
    if (ref < 0) ref = c;
    if (h[c] != h[ref]) t[c] = -1.0f; /* another result: not a choice */
    same += t[c] >= 0.0f;
  }
  if (ev0) cudaEventDestroy(ev0);
  if (ev1) cudaEventDestroy(ev1);
  cudaFree(block);
  DIT_TRY(s);
  int best = ref < 0 ? 0 : ref;
  for (int c = 0; c < p->n_cand; c++)
    if (t[c] >= 0.0f && t[c] < t[best]) best = c;
  p->algo = p->cand[best];
  if (!im->opts.cuda_gemm_tune_log) return DIT_OK; /* one stderr line per tuned shape */
  char first[128] = "refused", won[128] = "none ran", d0[64], db[64];
  algo_desc(&p->cand[0], d0, sizeof d0);
  algo_desc(&p->cand[best], db, sizeof db);
  if (t[0] >= 0.0f)
    snprintf(first, sizeof first, "%.4f ms (%.1f TFLOP/s; %s)", (double)t[0], tflops(p, t[0]), d0);
  if (ref >= 0)
    snprintf(won, sizeof won, "#%d %.4f ms (%.1f TFLOP/s; %s)", best, (double)t[best], tflops(p, t[best]), db);
  fprintf(stderr, "ditrun: cuda gemm tune: m=%lld n=%lld k=%lld (A/B %s, D %s): %d candidates, %d with the first's "
          "result, heuristic's first %s, best %s\n", (long long)p->m, (long long)p->n, (long long)p->k,
          dit_dtype_name(p->abt), dit_dtype_name(p->dt), p->n_cand, same, first, won);
  return DIT_OK;
}

/* p's key in the tuning cache file. */
static void tc_key(const cu_plan *p, char *key, size_t len) {
  snprintf(key, len, "gemm %lld %lld %lld %lld %lld %lld %d %d %d %d %d", (long long)p->m, (long long)p->n,
           (long long)p->k, (long long)p->lda, (long long)p->ldb, (long long)p->ldd, p->ta, p->tb, p->abt, p->dt,
           p->epi);
}

/* A choice an earlier process made for p (the tuning cache file), when it is one of p's
 * candidates now. */
static bool tc_lookup(cu_impl *im, cu_plan *p) {
  char key[128];
  cublasLtMatmulAlgo_t a;
  tc_key(p, key, sizeof key);
  if (!cu_tc_get(im, key, &a, sizeof a)) return false;
  for (int c = 0; c < p->n_cand; c++)
    if (!memcmp(&p->cand[c], &a, sizeof a)) {
      p->algo = p->cand[c];
      return true;
    }
  return false;
}

/* Tunes p on its first use outside a stream capture (timing needs a synchronize; while
 * capturing it stays untuned and tunes at the next un-captured call), unless the tuning cache
 * file has its choice. Never fails: on any error the heuristic's first is kept and the CUDA
 * error state is cleared. */
static void gemm_tune_maybe(cu_impl *im, cu_plan *p, const void *A, const void *B, void *D) {
  if (p->tuned || p->n_cand < 2) return;
  if (!im->gemm_tune) {
    p->tuned = true;
    return;
  }
  if (tc_lookup(im, p)) {
    p->tuned = true;
    im->tc_cached++;
    return;
  }
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(im->stream, &cs) != cudaSuccess) {
    cudaGetLastError(); /* try again at the next call */
    return;
  }
  if (cs != cudaStreamCaptureStatusNone || im->capturing) return;
  dit_error e;
  memset(&e, 0, sizeof e);
  const double t0 = dit_time_now();
  const dit_status ts = gemm_tune(im, p, A, B, D, &e);
  im->tc_seconds += dit_time_now() - t0;
  im->tc_timed++;
  if (ts != DIT_OK) {
    cudaGetLastError();
    p->algo = p->cand[0];
    if (im->opts.cuda_gemm_tune_log)
      fprintf(stderr, "ditrun: %s (m=%lld n=%lld k=%lld: using the heuristic's first)\n", e.msg, (long long)p->m,
              (long long)p->n, (long long)p->k);
  } else {
    char key[128];
    tc_key(p, key, sizeof key);
    cu_tc_put(im, key, &p->algo, sizeof p->algo);
  }
  p->tuned = true;
}

dit_status cu_gemm(dit_backend *be, const char *op, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *A, int64_t lda, const void *B, int64_t ldb, int abt, void *D, int64_t ldd,
                   int dt, const void *bias, int epi, dit_error *err) {
  return cu_gemm_scaled(be, op, ta, tb, m, n, k, alpha, A, lda, B, ldb, abt, D, ldd, dt, bias, epi, NULL, NULL, err);
}

dit_status cu_gemm_scaled(dit_backend *be, const char *op, int ta, int tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, int abt, void *D,
                          int64_t ldd, int dt, const void *bias, int epi, const float *sa, const float *sb,
                          dit_error *err) {
  cu_impl *im = cu_im(be);
  if (m <= 0 || n <= 0) return DIT_OK;
  int align = ptr_align(A);
  int a2 = ptr_align(B), a3 = ptr_align(D);
  if (a2 < align) align = a2;
  if (a3 < align) align = a3;
  cu_plan key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
  key.ta = ta, key.tb = tb, key.abt = abt, key.dt = dt, key.epi = epi * 512 + align;
  cu_plan *p = NULL;
  for (int i = 0; i < im->n_plans; i++) {
    cu_plan *c = &im->plans[i];
    if (c->m == m && c->n == n && c->k == k && c->lda == lda && c->ldb == ldb && c->ldd == ldd && c->ta == ta &&
        c->tb == tb && c->abt == abt && c->dt == dt && c->epi == key.epi) {
      p = c;
      break;
    }
  }
  if (!p) {
    int slot = im->n_plans < CU_MAX_PLANS ? im->n_plans++ : CU_MAX_PLANS - 1;
    p = &im->plans[slot];
    plan_release(p);
    *p = key;
    p->epi = epi; /* plan_build reads the real epilogue */
    dit_status s = plan_build(im, p, align, op, err);
    if (s != DIT_OK) {
      plan_release(p);
      if (slot == im->n_plans - 1) im->n_plans--;
      return s;
    }
    p->epi = key.epi;
  }
  if (bias)
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                       sizeof bias),
                        op, "set BIAS_POINTER", err));
  if (abt == DIT_F8_E4M3) {
    if (!sa || !sb) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: an fp8 GEMM needs its row scales", op);
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
                        op, "set A_SCALE_POINTER", err));
    DIT_TRY(cu_check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb),
                        op, "set B_SCALE_POINTER", err));
  }
  gemm_tune_maybe(im, p, A, B, D);
  const float zero = 0.0f;
  cublasStatus_t st = cublasLtMatmul(im->lt, p->desc, &alpha, A, p->la, B, p->lb, &zero, D, p->ld, D, p->ld,
                                     &p->algo, im->workspace, im->workspace_bytes, im->stream);
  return cu_check_lt(st, op, "cublasLtMatmul", err);
}

static bool d_ok(int abt, int dt) {
  if (dt == DIT_F32) return true;
  return abt == dt;
}

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* One GEMM per block of rows (x and y row views split alike): y rows = x rows @ w^T; fp8
 * operands with their row scales sc[0] (w's, [N]) and sc[1] (x's, [P * M]). */
static dit_status gemm_blocks(dit_backend *be, const char *op, const dit_tensor *w, const void *xp,
                              const dit_rowview *xv, void *yp, const dit_rowview *yv, int dt, const void *bp, int epi,
                              const float *const sc[2], dit_error *err) {
  const int64_t K = w->shape[1], N = w->shape[0];
  const size_t xs = dit_dtype_size(w->dtype), ys = dit_dtype_size(dt);
  for (int64_t p = 0; p < xv->P; p++)
    DIT_TRY(cu_gemm_scaled(be, op, 1, 0, N, xv->M, K, dit_tensor_scale(w), w->data, K,
                           (const char *)xp + (size_t)(p * xv->ps) * xs, xv->rs, w->dtype,
                           (char *)yp + (size_t)(p * yv->ps) * ys, yv->rs, dt, bp, epi, sc[0],
                           sc[1] ? sc[1] + p * xv->M : NULL, err));
  return DIT_OK;
}

/* A low-rank term on w (LoRA on quantized weights): a [R, K] and b [N, R], BF16 on the GPU. */
static dit_status check_lowrank(const char *op, const dit_tensor *w, const dit_lowrank *lr, dit_error *err) {
  const dit_tensor *a = &lr->a, *b = &lr->b;
  if (!dit_dtype_is_quant(w->dtype) || a->ndim != 2 || b->ndim != 2 || a->dtype != DIT_BF16 || b->dtype != DIT_BF16 ||
      a->device != DIT_DEV_CUDA || b->device != DIT_DEV_CUDA || a->shape[0] < 1 || a->shape[1] != w->shape[1] ||
      b->shape[0] != w->shape[0] || b->shape[1] != a->shape[0] || !a->data || !b->data)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a low-rank term must be BF16 a [R, %lld] and b [%lld, R] on the "
                      "GPU, on a quantized w", op, (long long)w->shape[1], (long long)w->shape[0]);
  return DIT_OK;
}

/* x and y may be row views (column slices, per-batch row ranges): cuBLASLt takes the row
 * strides as lda/ldc; an F32 x is converted into a contiguous scratch copy, and a SiLU / exact
 * GELU on a strided y runs on a contiguous scratch result copied into y afterwards (GELU-tanh
 * is cuBLASLt's epilogue, written into the strided y itself). */
dit_status cu_linear(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *wq,
                     const dit_tensor *b, dit_act act, dit_error *err) {
  const char *op = "cuda linear";
  cu_impl *im = cu_im(be);
  dit_rowview xv, yv;
  DIT_TRY(cu_check_rows(op, "x", x, &xv, err));
  DIT_TRY(cu_check_rows(op, "y", y, &yv, err));
  DIT_TRY(dit_check_matrix(op, "w", wq, DIT_DEV_CUDA, err));
  const dit_lowrank *lr = wq->lowrank;
  if (lr) DIT_TRY(check_lowrank(op, wq, lr, err));
  /* fp8 compute: an e4m3 w stays e4m3 and x is quantized per row into the scratch (with the
   * GEMM's row-scale vectors); a w with a low-rank term, a y that is not BF16 or sizes that
   * are not multiples of 16 take the bf16 path below */
  const bool fp8 = be->fp8 && wq->dtype == DIT_F8_E4M3 && !lr && y->dtype == DIT_BF16 && wq->ndim == 2 &&
                   wq->shape[0] % 16 == 0 && wq->shape[1] % 16 == 0;
  /* otherwise a quantized w is expanded to bf16 in the scratch (placed first, below); its
   * per-tensor scale (fp8) is the GEMM's alpha, as it is of the fp8 GEMM */
  const bool wblocks = dit_dtype_is_quant(wq->dtype) && !fp8;
  dit_tensor wbf = *wq;
  if (wblocks) {
    wbf = dit_tensor_2d(DIT_BF16, NULL, wq->shape[0], wq->shape[1]), wbf.device = DIT_DEV_CUDA, wbf.scale = wq->scale;
  }
  const dit_tensor *w = &wbf;
  if (w->ndim != 2 || x->ndim < 1 || w->shape[1] != x->shape[x->ndim - 1])
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: w must be [N, K] with K = x's last dim", op);
  int64_t K = w->shape[1], N = w->shape[0];
  int64_t M = K ? dit_tensor_numel(x) / K : 0;
  if (dit_tensor_numel(y) != M * N || y->shape[y->ndim - 1] != N)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y must be [..., %lld] with %lld rows", op, (long long)N,
                      (long long)M);
  if (b) DIT_TRY(cu_check_w(op, "b", b, N, err));
  if (y->data == x->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y aliases x", op);
  int abt = w->dtype, dt = y->dtype;
  if (!fp8 && !d_ok(abt, dt))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: y dtype %s with w dtype %s", op, dit_dtype_name(dt),
                      dit_dtype_name(abt));
  if (M == 0 || N == 0) return DIT_OK;
  const int64_t P = xv.P > yv.P ? xv.P : yv.P;
  if (!dit_rowview_split(&xv, P) || !dit_rowview_split(&yv, P) || xv.M != yv.M)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: the row layouts of x and y do not match", op);
  const bool ycontig = dit_tensor_is_contiguous(y);
  const size_t wbytes = wblocks ? al256((size_t)(N * K) * 2) : 0, lbytes = lr ? wbytes : 0;
  size_t xbytes = (int)x->dtype != abt ? al256((size_t)(M * K) * dit_dtype_size(abt)) : 0;
  const size_t sbytes = fp8 ? al256((size_t)M * 4) + al256((size_t)N * 4) : 0; /* x's and w's row scales */
  xbytes += sbytes;
  size_t bbytes = b && (int)b->dtype != dt ? al256((size_t)N * dit_dtype_size(dt)) : 0;
  bool post_act = act != DIT_ACT_NONE && act != DIT_ACT_GELU_TANH;
  size_t ybytes = !ycontig && act != DIT_ACT_NONE ? al256((size_t)(M * N) * dit_dtype_size(dt)) : 0;
  void *scr = NULL;
  if (wbytes + lbytes + xbytes + bbytes + ybytes)
    DIT_TRY(cu_scratch(be, wbytes + lbytes + xbytes + bbytes + ybytes, &scr, err));
  if (wblocks) {
    wbf.data = scr;
    const void *ba = NULL;
    if (lr) { /* W' = W + B A / scale in bf16, so that the GEMM's alpha = scale gives scale W + B A */
      ba = (char *)scr + wbytes;
      DIT_TRY(cu_gemm(be, op, 0, 0, K, N, lr->a.shape[0], 1.0f, lr->a.data, K, lr->b.data, lr->a.shape[0], DIT_BF16,
                      (void *)ba, K, DIT_BF16, NULL, CUBLASLT_EPILOGUE_DEFAULT, err));
    }
    DIT_TRY(cu_check(cuk_dequant_bf16(scr, wq->data, (int)wq->dtype, N, K, ba, 1.0f / dit_tensor_scale(wq),
                                      im->stream),
                     op, "dequantize w", err));
    scr = (char *)scr + wbytes + lbytes;
  }
  const void *xp = x->data, *bp = b ? b->data : NULL;
  const float *sc[2] = {NULL, NULL};
  if (fp8) {
    float *xsc = (float *)((char *)scr + xbytes - sbytes), *wsc = (float *)((char *)xsc + al256((size_t)M * 4));
    DIT_TRY(cu_check(cuk_quant_rows_e4m3(scr, xsc, x->data, x->dtype, xv.P, xv.M, K, xv.ps, xv.rs, wsc, N, 1.0f,
                                         im->stream),
                     op, "quantize x to fp8", err));
    sc[0] = wsc, sc[1] = xsc;
    xp = scr;
    xv.ps = xv.M * K, xv.rs = K;
  } else if (xbytes) {
    if (dit_tensor_is_contiguous(x)) {
      DIT_TRY(cu_check(cuk_convert(scr, abt, x->data, x->dtype, M * K, im->stream), op, "convert x", err));
    } else {
      const int64_t sh[3] = {P, xv.M, K}, ds[3] = {xv.M * K, K, 1}, ss[3] = {xv.ps, xv.rs, 1};
      DIT_TRY(cu_check(cuk_copy(scr, abt, x->data, x->dtype, 3, sh, ds, ss, 0, im->stream), op, "convert x", err));
    }
    xp = scr;
    xv.ps = xv.M * K, xv.rs = K;
  }
  if (bbytes) {
    void *bs = (char *)scr + xbytes;
    DIT_TRY(cu_check(cuk_convert(bs, dt, b->data, b->dtype, N, im->stream), op, "convert bias", err));
    bp = bs;
  }
  /* an activation kernel after the GEMM on a strided y runs on a contiguous scratch result,
   * copied into y after; a GELU-tanh epilogue writes the strided y directly */
  void *yp = y->data;
  dit_rowview yw = yv;
  if (ybytes && post_act) {
    yp = (char *)scr + xbytes + bbytes;
    yw.ps = yw.M * N, yw.rs = N;
  }
  int epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (act == DIT_ACT_GELU_TANH) epi = bp ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else if (bp) epi = CUBLASLT_EPILOGUE_BIAS;
  dit_status s = gemm_blocks(be, op, w, xp, &xv, yp, &yw, dt, bp, epi, sc, err);
  if (s == DIT_ERR_UNSUPPORTED && act == DIT_ACT_GELU_TANH) { /* no GELU epilogue here: separate kernel */
    epi = bp ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    post_act = true;
    if (ybytes) {
      yp = (char *)scr + xbytes + bbytes;
      yw.ps = yw.M * N, yw.rs = N;
    }
    s = gemm_blocks(be, op, w, xp, &xv, yp, &yw, dt, bp, epi, sc, err);
  }
  DIT_TRY(s);
  if (post_act) DIT_TRY(cu_check(cuk_act(yp, yp, dt, M * N, (int)act, im->stream), op, "activation", err));
  if (ybytes && post_act) {
    const int64_t sh[3] = {P, yv.M, N}, ds[3] = {yv.ps, yv.rs, 1}, ss[3] = {yv.M * N, N, 1};
    DIT_TRY(cu_check(cuk_copy(y->data, dt, yp, dt, 3, sh, ds, ss, 0, im->stream), op, "copy into strided y", err));
  }
  return DIT_OK;
}

dit_status cu_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                     const dit_tensor *b, int stride, int pad, dit_error *err) {
  const char *op = "cuda conv2d";
  cu_impl *im = cu_im(be);
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  DIT_TRY(cu_check_w(op, "w", w, -1, err));
  if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4 || w->shape[1] != x->shape[1] || stride < 1 || pad < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [B,Ci,H,W], w [Co,Ci,kh,kw], y [B,Co,Ho,Wo] expected", op);
  int64_t B = x->shape[0], Ci = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t Co = w->shape[0], kh = w->shape[2], kw = w->shape[3];
  int64_t Ho = (H + 2 * pad - kh) / stride + 1, Wo = (W + 2 * pad - kw) / stride + 1;
  if (H + 2 * pad < kh || W + 2 * pad < kw || y->shape[0] != B || y->shape[1] != Co || y->shape[2] != Ho ||
      y->shape[3] != Wo)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y must be [%lld, %lld, %lld, %lld]", op, (long long)B,
                      (long long)Co, (long long)Ho, (long long)Wo);
  if (b) DIT_TRY(cu_check_w(op, "b", b, Co, err));
  int abt = w->dtype, dt = y->dtype;
  /* a 16-bit y with F32 weights (cuDNN takes it too): the GEMM in y's dtype, w converted per call */
  const size_t wconv =
      !d_ok(abt, dt) && abt == DIT_F32 ? al256((size_t)dit_tensor_numel(w) * dit_dtype_size(dt)) : 0;
  if (wconv) abt = dt;
  bool direct = kh == 1 && kw == 1 && stride == 1 && pad == 0 && (int)x->dtype == abt;
  /* cuDNN first (cudnn_conv.c), except for a 1x1 conv that the GEMM reads in place: measured
   * faster there ([1,512,128,128]->512 BF16 on an H200: 0.054 ms vs cuDNN's 0.073 ms) */
  if (im->cudnn && !direct) {
    bool done = false;
    DIT_TRY(cu_cudnn_conv2d(be, y, x, w, b, stride, pad, &done, err));
    if (done) return DIT_OK;
  }
  if (!d_ok(abt, dt))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: y dtype %s with w dtype %s", op, dit_dtype_name(dt),
                      dit_dtype_name(abt));
  int64_t P = Ho * Wo, Kd = Ci * kh * kw;
  size_t es = dit_dtype_size(abt);
  int64_t np = P;
  if (!direct && (size_t)(Kd * P) * es > CU_IM2COL_BYTES) {
    np = (int64_t)(CU_IM2COL_BYTES / ((size_t)Kd * es)) / 256 * 256;
    if (np < 256) np = 256;
    if (np > P) np = P;
  }
  void *col = NULL, *scr = NULL;
  const void *wp = w->data;
  if (!direct || wconv) DIT_TRY(cu_scratch(be, wconv + (direct ? 0 : (size_t)(Kd * np) * es), &scr, err));
  if (wconv) {
    DIT_TRY(cu_check(cuk_convert(scr, abt, w->data, w->dtype, Co * Kd, im->stream), op, "convert w", err));
    wp = scr;
  }
  if (!direct) col = (char *)scr + wconv;
  size_t ys = dit_dtype_size(dt), xs = dit_dtype_size(x->dtype);
  for (int64_t bi = 0; bi < B; bi++) {
    const char *xb = (const char *)x->data + (size_t)(bi * Ci * H * W) * xs;
    char *yb = (char *)y->data + (size_t)(bi * Co * P) * ys;
    for (int64_t p0 = 0; p0 < P; p0 += np) {
      int64_t n = P - p0 < np ? P - p0 : np;
      const void *A = xb;
      int64_t lda = P;
      if (!direct) {
        DIT_TRY(cu_check(cuk_im2col(col, abt, xb, x->dtype, Ci, H, W, (int)kh, (int)kw, stride, pad, Ho, Wo, p0, n,
                                    im->stream),
                         op, "im2col", err));
        A = col;
        lda = n;
      }
      DIT_TRY(cu_gemm(be, op, 0, 0, n, Co, Kd, 1.0f, A, lda, wp, Kd, abt, yb + (size_t)p0 * ys, P, dt, NULL,
                      CUBLASLT_EPILOGUE_DEFAULT, err));
    }
  }
  if (b)
    DIT_TRY(cu_check(cuk_bias_channel(y->data, dt, B, Co, P, b->data, b->dtype, im->stream), op, "bias", err));
  return DIT_OK;
}
