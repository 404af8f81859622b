/* Internals shared by the CUDA backend's C host files and its .cu kernel files: the
 * backend's private state (device, stream, cuBLASLt handle, workspaces, GEMM plan cache),
 * the argument checks and the extern "C" kernel launchers. Plain C: no C++ here.
 * Dtype arguments of the launchers are dit_dtype values (F32, BF16, F16 for floats). */
#ifndef DIT_CUDA_INTERNAL_H
#define DIT_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/backend_check.h"

#define CU_MAX_PLANS 128
#define CU_MAX_CANDS 16 /* heuristic algorithms kept per plan for tuning */

/* One cached cuBLASLt matmul: descriptors plus the algorithm for a shape (the heuristic's
 * first until tuned: the fastest candidate timed on the first un-captured call). */
typedef struct cu_plan {
  int64_t m, n, k, lda, ldb, ldd;
  int ta, tb;           /* transpose flags of A and B */
  int abt, dt;          /* A/B dtype, D dtype (dit_dtype) */
  int epi;              /* cublasLtEpilogue_t */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t cand[CU_MAX_CANDS]; /* heuristic candidates, best first */
  size_t cand_ws[CU_MAX_CANDS];            /* their workspace bytes */
  int n_cand;
  bool tuned;
} cu_plan;

typedef struct cu_impl {
  int device;
  dit_run_opts opts; /* the run-time switches it was made with (core/options.h) */
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void *workspace; /* cuBLASLt workspace */
  size_t workspace_bytes;
  void *scratch; /* conversions (activations to bf16, im2col), grown on demand */
  size_t scratch_bytes;
  int *flag; /* device int: kernels report bad input (embedding ids) here */
  unsigned long long *hash; /* device word for cu_result_hash */
  int max_smem; /* opt-in shared memory per block */
  int attn_version; /* flash kernel: 1 (default), or 2 / 3 (opts.cuda_attn_version; k_attention.cu) */
  size_t attn_chunk_bytes; /* GEMM attention (D > 256): scratch bound per query chunk; 0: 256 MiB */
  bool vec; /* 16-byte elementwise kernels (k_vec.cu) where shapes allow; env DIT_CUDA_VEC=1 */
  bool fused; /* fused norm kernels (k_fused.cu) for the fused ops; env DIT_CUDA_FUSED=0: unfused sequences */
  bool cudnn; /* BF16 attention through cuDNN's SDPA first (cudnn_sdpa.c); env DIT_CUDA_CUDNN=0 turns it off */
  struct cu_sdpa *sdpa; /* cuDNN state, created on first use (NULL until then) */
  bool graphs; /* graph capture (cuda_graph.c); env DIT_CUDA_GRAPHS=0 turns it off */
  bool gemm_tune; /* time the GEMM candidates per shape (cuda_gemm.c); env DIT_CUDA_GEMM_TUNE=0 turns it off */
  bool capturing;
  uint64_t moves; /* times a backend buffer (scratch) was reallocated: graphs before are stale */
  uint64_t capture_moves;
  cudaEvent_t *marks; /* device timer marks (cuda_timer.c), cap_marks created, n_marks recorded */
  int n_marks, cap_marks;
  struct dit_tune_cache *tcache; /* the tuning cache file's entries (cuda_tune_cache.c), NULL: none */
  int tc_timed, tc_cached;       /* GEMM and conv shapes tuned by timing / taken from the file */
  double tc_seconds;             /* host time spent timing them */
  char tc_prefix[192];           /* its keys' GPU and library part */
  int n_plans;
  cu_plan plans[CU_MAX_PLANS];
} cu_impl;

static inline cu_impl *cu_im(dit_backend *be) { return (cu_impl *)be->impl; }

/* Fills err with "op: what: CUDA error string" when e != cudaSuccess. */
dit_status cu_check(cudaError_t e, const char *op, const char *what, dit_error *err);
dit_status cu_check_lt(cublasStatus_t s, const char *op, const char *what, dit_error *err);
/* Grows the scratch buffer to at least bytes (synchronizes the stream when it grows). */
dit_status cu_scratch(dit_backend *be, size_t bytes, void **out, dit_error *err);
/* *h = cuk_hash of the rows x cols matrix at p (ld elements between columns, elt bytes each),
 * read back with a stream synchronize. The tuners keep only the candidates whose result on
 * pseudo-random operands hashes as the heuristic's first's, so that tuning never changes a
 * result (the call's own operands can be degenerate, all zeros, where different arithmetic
 * agrees). */
dit_status cu_result_hash(cu_impl *im, const void *p, int elt, int64_t rows, int64_t cols, int64_t ld, uint64_t *h,
                          dit_error *err);
/* ptr[i]: n[i] elements of dtype dt[i] for i < k (k <= 8), pseudo-random (cuk_fill_random), in
 * one new device block (*block, freed with cudaFree); DIT_ERR_NOMEM when the card has no room. */
dit_status cu_random_operands(cu_impl *im, int k, const int64_t *n, const int *dt, void **block, void **ptr,
                              dit_error *err);

/* The persisted tuning choices (cuda_tune_cache.c): cu_tc_open at creation (nothing when the
 * cache is off or has no file), cu_tc_get / cu_tc_put a choice of exactly len bytes under
 * `what` (a text key of the shape; the GPU and library versions are added), cu_tc_close at
 * destruction (saves what was put). Failures only cost a tuning. */
void cu_tc_open(cu_impl *im);
bool cu_tc_get(const cu_impl *im, const char *what, void *val, size_t len);
void cu_tc_put(cu_impl *im, const char *what, const void *val, size_t len);
void cu_tc_close(cu_impl *im);

/* Operand checks (backend_check.h) with the GPU's device and dtypes: cu_check_act (F32 or
 * BF16, contiguous), cu_check_rows (row views), cu_check_w, cu_check_same_shape (shape and
 * dtype). */
#define CU_ACT_DTYPES (DIT_DTYPES(DIT_F32) | DIT_DTYPES(DIT_BF16))
DIT_BACKEND_CHECKS(cu, DIT_DEV_CUDA, CU_ACT_DTYPES, true)
/* Strided [B, S, H, D] activations: F32/BF16, unit last stride; non-contiguous ones need strides
 * that are multiples of 8 elements (16-byte rows). */
dit_status cu_check_strided4(const char *op, const char *name, const dit_tensor *t, dit_error *err);
/* x and y: activations of the same shape and dtype. */
dit_status cu_check_xy(const char *op, const dit_tensor *x, const dit_tensor *y, dit_error *err);
/* RoPE tables for x [B, S, H, D]: cos, sin F32 [B, S, D/2] or [S, D/2] (*csb: batch stride, 0
 * when shared). */
dit_status cu_check_rope_tables(const char *op, const dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin,
                                int64_t *csb, dit_error *err);
static inline bool cu_fdtype(dit_dtype t) { return dit_dtype_in(t, DIT_WEIGHT_DTYPES); }

/* GEMM through cuBLASLt (column-major, like cuBLAS): D[m,n] = alpha op(A)[m,k] op(B)[k,n]
 * (+ bias[m]) with epilogue epi; A and B of dtype abt, D of dtype dt; fp32 accumulation. */
dit_status cu_gemm(dit_backend *be, const char *op, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *A, int64_t lda, const void *B, int64_t ldb, int abt, void *D, int64_t ldd,
                   int dt, const void *bias, int epi, dit_error *err);
/* The same with A and B float8_e4m3 (abt DIT_F8_E4M3, ta = 1, tb = 0: Hopper's fp8 layout)
 * scaled per row: D[i, j] = alpha sa[i] sb[j] (op(A) op(B))[i, j] (+ bias[i]); sa [m] and sb
 * [n] fp32 on the device (NULL for the other dtypes). */
dit_status cu_gemm_scaled(dit_backend *be, const char *op, int ta, int tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, int abt, void *D,
                          int64_t ldd, int dt, const void *bias, int epi, const float *sa, const float *sb,
                          dit_error *err);

/* The ops: cu_<op> for every op of DIT_BACKEND_OPS (cuda_gemm.c: linear, conv2d; cuda_video.c:
 * conv3d, pixel_norm; cuda_audio.c: unary, snake, resample1d, complex_abs; cuda_ops.c: attention
 * and the plain ops; cuda_fused.c: the fused ops). */
#define CU_OP_DECL(name, params, args) DIT_BACKEND_OP_DECL(cu_##name, params)
DIT_BACKEND_OPS(CU_OP_DECL)
#undef CU_OP_DECL
void cu_register_graph_ops(dit_backend_ops *ops); /* graph capture (cuda_graph.c) */
void cu_register_timer_ops(dit_backend_ops *ops); /* device timers (cuda_timer.c) */
void cu_timer_destroy(cu_impl *im);
/* x [B,S,D] (or [S,D] as B = 1) and an optional per-batch vector [B,D] (or [D], broadcast):
 * B, S, D and the vector's batch stride *vbs (D, or 0 when broadcast). */
dit_status cu_check_bsd(const char *op, const dit_tensor *x, const char *vn, const dit_tensor *vec, int64_t *B,
                        int64_t *S, int64_t *D, int64_t *vbs, dit_error *err);

/* Arguments of the fused row kernels (k_fused.cu); dtypes are dit_dtype values, pointers
 * 16-byte aligned, vectors [B, D] with batch stride vbs (0: broadcast). NULL: absent. */
typedef struct cu_rowargs {
  const void *wr; int wrdt;    /* residual_norm: weight of the norm of r */
  const void *gate; int gdt;   /* residual_norm: gate (NULL: 1) */
  int tanh_gate;
  const void *wh; int whdt;    /* weight of the output norm */
  const void *scale; int sdt;  /* output modulation: * (1 + scale) */
  const void *shift; int shdt; /* + shift after the scale (NULL: 0) */
  int r_raw;                   /* residual_rms_mod: r is added as it is (no norm of r) */
  int64_t vbs;
  float eps;
} cu_rowargs;

/* Element strides (batch, sequence, head) of the attention operands [B, S, H, D]; the head
 * dim has unit stride. */
typedef struct cu_attn_strides {
  int64_t q[3], k[3], v[3], o[3];
} cu_attn_strides;
static inline cu_attn_strides cu_attn_contiguous(int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D) {
  cu_attn_strides s = {{Sq * Hq * D, Hq * D, D}, {Sk * Hkv * D, Hkv * D, D}, {Sk * Hkv * D, Hkv * D, D},
                       {Sq * Hq * D, Hq * D, D}};
  return s;
}
/* Attention for 256 < D <= CU_ATTN_GEMM_MAX_D (cuda_attn_gemm.c): chunked GEMM, softmax, GEMM;
 * operands checked by cu_attention (dt F32 or BF16, strides as, mask [B,Sk] or NULL). */
#define CU_ATTN_GEMM_MAX_D 1024
dit_status cu_attention_gemm(dit_backend *be, void *out, const void *q, const void *k, const void *v, int dt,
                             int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                             const uint8_t *mask, float scale, bool causal, const cu_attn_strides *as,
                             dit_error *err);

#ifdef __cplusplus
extern "C" {
#endif
/* Kernel launchers: enqueue on stream s and return cudaGetLastError(). n: element counts. */
cudaError_t cuk_convert(void *dst, int ddt, const void *src, int sdt, int64_t n, cudaStream_t s);
/* *out = an order-independent 64-bit hash of the rows x cols matrix at p (column j at
 * p + j*ld elements; elt 2 or 4 bytes per element). */
cudaError_t cuk_hash(const void *p, int elt, int64_t rows, int64_t cols, int64_t ld, unsigned long long *out,
                     cudaStream_t s);
/* p[0..n) (dtype dt: F32, BF16, F16 or F8_E4M3) = pseudo-random values in [-1, 1) of seed. */
cudaError_t cuk_fill_random(void *p, int dt, int64_t n, unsigned long long seed, cudaStream_t s);
/* y [rows, K] bf16 = the quantized rows w (dtype a DIT_Q* block type, as ggml dequantizes
 * them, or fp8 with K even), plus add_scale * add (bf16 [rows, K]) where add is not NULL,
 * rounded to bf16. */
cudaError_t cuk_dequant_bf16(void *y, const void *w, int dtype, int64_t rows, int64_t K, const void *add,
                             float add_scale, cudaStream_t s);
/* cuk_embedding over a quantized table (tdt a DIT_Q* type or fp8): each value as ggml
 * dequantizes it, times ws (the table's per-tensor scale). */
cudaError_t cuk_embedding_q(void *y, int ydt, const void *table, int tdt, int64_t V, int64_t D, float ws,
                            const void *ids, int idt, int64_t N, int *flag, cudaStream_t s);
/* fp8 compute (k_fp8.cu): rows r = p * M + m (r < P * M) of x (xdt F32 or BF16, row r at
 * element p * ps + m * rs) as float8_e4m3 codes into xq [P * M, K] with per-row scales xs
 * [P * M] (x_r ~ xs[r] * xq_r); ws (NULL: none) gets N copies of wscale (the GEMM's
 * outer-vector scale of a per-tensor-scaled weight). */
cudaError_t cuk_quant_rows_e4m3(void *xq, float *xs, const void *x, int xdt, int64_t P, int64_t M, int64_t K,
                                int64_t ps, int64_t rs, float *ws, int64_t N, float wscale, cudaStream_t s);
cudaError_t cuk_act(void *y, const void *x, int dt, int64_t n, int act, cudaStream_t s);
/* op: 0 add, 1 mul, 2 swiglu (silu(a) * b). */
cudaError_t cuk_binary(void *y, const void *a, const void *b, int dt, int64_t n, int op, cudaStream_t s);
cudaError_t cuk_scale(void *y, const void *x, int dt, int64_t n, float sc, cudaStream_t s);
/* x [B,S,D]; scale/shift [B or 1, D] (shift may be NULL); sbs: batch stride of scale/shift. */
cudaError_t cuk_modulate(void *y, const void *x, int dt, int64_t B, int64_t S, int64_t D, const void *scale,
                         const void *shift, int sdt, int64_t sbs, cudaStream_t s);
cudaError_t cuk_gated_add(void *x, const void *y, int dt, int64_t B, int64_t S, int64_t D, const void *gate,
                          int gdt, int64_t gbs, int tanh_gate, cudaStream_t s);
/* y [M,N] (dtype dt) = act(y + bias[N]) (bias may be NULL). */
cudaError_t cuk_bias_act(void *y, int dt, int64_t M, int64_t N, const void *bias, int bdt, int act,
                         cudaStream_t s);
/* y [B,C,P] += bias[C]. */
cudaError_t cuk_bias_channel(void *y, int dt, int64_t B, int64_t C, int64_t P, const void *bias, int bdt,
                             cudaStream_t s);
cudaError_t cuk_rms_norm(void *y, const void *x, int dt, int64_t rows, int64_t D, const void *w, int wdt,
                         float eps, cudaStream_t s);
cudaError_t cuk_layer_norm(void *y, const void *x, int dt, int64_t rows, int64_t D, const void *w, int wdt,
                           const void *b, int bdt, float eps, cudaStream_t s);
/* Per-pixel RMS over the channels of x [B, C, HW] (+SiLU): the channel_rms_norm op (k_norm.cu). */
cudaError_t cuk_channel_rms_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW, const void *w,
                                 int wdt, bool silu, cudaStream_t s);
/* GroupNorm(+SiLU) of x [B, C, HW] (y may alias x); ws: cuk_group_norm_ws_bytes of device scratch
 * for the per-chunk partial sums and per-group statistics (k_group_norm.cu). */
size_t cuk_group_norm_ws_bytes(int64_t B, int64_t C, int64_t HW, int G);
cudaError_t cuk_group_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW, int G,
                           const void *w, int wdt, const void *b, int bdt, float eps, int silu, void *ws,
                           cudaStream_t s);
cudaError_t cuk_softmax(void *y, const void *x, int dt, int64_t rows, int64_t D, cudaStream_t s);
/* x [B,S,H,D] in place (xstride: element strides of B, S, H; NULL: contiguous); cos/sin F32 [*, S, D/2] with
 * batch stride csb (0: broadcast). */
cudaError_t cuk_rope(void *x, int dt, int64_t B, int64_t S, int64_t H, int64_t D, const int64_t *xstride,
                     const float *cos, const float *sin, int64_t csb, int mode, cudaStream_t s);
/* y [N,D] = table[ids]; a bad id sets *flag = 1 and zeroes its row. idt: I32 or I64. */
cudaError_t cuk_embedding(void *y, int ydt, const void *table, int tdt, int64_t V, int64_t D, const void *ids,
                          int idt, int64_t N, int *flag, cudaStream_t s);
cudaError_t cuk_timestep(void *y, int ydt, const float *t, int64_t N, int dim, float max_period, float shift,
                         float scale, int flip, cudaStream_t s);
cudaError_t cuk_upsample2x(void *y, const void *x, int dt, int64_t BC, int64_t H, int64_t W, cudaStream_t s);
/* Strided copy with conversion; shape/strides in elements, ndim <= 8. esize: element bytes
 * when ddt == sdt and the type is not a float type (raw copy), else 0. */
cudaError_t cuk_copy(void *dst, int ddt, const void *src, int sdt, int ndim, const int64_t *shape,
                     const int64_t *dstride, const int64_t *sstride, int esize, cudaStream_t s);
/* col [Ci*kh*kw, np] (dtype cdt) for output pixels p0 .. p0+np of one image x [Ci,H,W]. */
cudaError_t cuk_im2col(void *col, int cdt, const void *x, int xdt, int64_t Ci, int64_t H, int64_t W, int kh,
                       int kw, int stride, int pad, int64_t Ho, int64_t Wo, int64_t p0, int64_t np,
                       cudaStream_t s);
/* conv3d's geometry (cuda_video.c, k_video.cu): x [Ci, T, H, W] per item, kernel kt x kh x kw,
 * zero padding pt, ph, pw, stride 1, output To x Ho x Wo. */
typedef struct cu_conv3d_geom {
  int64_t Ci, T, H, W, To, Ho, Wo;
  int kt, kh, kw, pt, ph, pw;
} cu_conv3d_geom;
/* col [Ci*kt*kh*kw, np] (dtype cdt) for output positions p0 .. p0+np (of To*Ho*Wo) of one item x. */
cudaError_t cuk_im2col3d(void *col, int cdt, const void *x, int xdt, const cu_conv3d_geom *g, int64_t p0, int64_t np,
                         cudaStream_t s);
/* The audio ops (cuda_audio.c, k_audio.cu), activations of dtype dt (x and y alike), weights
 * (alpha, beta, f) of their own dtypes: unary over n elements; snake over rows x C channels;
 * resample1d of x [B, Ti, C] into y [B, To, C] with f [K]; complex_abs of x [rows, 2F] into
 * y [rows, F]. Each as its op in backend_ops.h. */
cudaError_t cuk_unary(void *y, const void *x, int dt, int64_t n, int fn, float a, float b, cudaStream_t s);
cudaError_t cuk_snake(void *y, const void *x, int dt, int64_t rows, int64_t C, const void *alpha, int adt,
                      const void *beta, int bdt, float eps, cudaStream_t s);
typedef struct cu_resample_geom {
  int64_t B, Ti, To, C, K;
  int up, down, offset;
  float gain;
} cu_resample_geom;
cudaError_t cuk_resample1d(void *y, const void *x, int dt, const void *f, int fdt, const cu_resample_geom *g,
                           cudaStream_t s);
cudaError_t cuk_complex_abs(void *y, const void *x, int dt, int64_t rows, int64_t F, cudaStream_t s);
/* The pixel_norm op over x [B, C, HW] (y may alias x; k_norm.cu, with channel_rms_norm's kernel). */
cudaError_t cuk_pixel_norm(void *y, const void *x, int dt, int64_t B, int64_t C, int64_t HW, float eps, bool silu,
                           cudaStream_t s);
/* Flash attention: q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D], out like q, all dtype dt (F32/BF16);
 * element strides st (NULL: contiguous; rows 16-byte aligned); mask [B,Sk] bytes or NULL.
 * Returns cudaErrorInvalidValue for unsupported D. */
/* Head dims up to CU_ATTN_SMALL_MAX_D that the flash kernels cannot take (not a multiple of 8): a
 * plain kernel, one thread per query row (k_attention.cu). */
#define CU_ATTN_SMALL_MAX_D 32
cudaError_t cuk_attention_small(void *out, const void *q, const void *k, const void *v, int dt, int64_t B,
                                int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, const uint8_t *mask,
                                float scale, int causal, const cu_attn_strides *st, cudaStream_t s);
cudaError_t cuk_attention(void *out, const void *q, const void *k, const void *v, int dt, int64_t B,
                          int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, const uint8_t *mask,
                          float scale, int causal, int version, const cu_attn_strides *st, cudaStream_t s);
/* GEMM attention's row softmax (k_attn_gemm.cu): rows of fp32 scores s (row stride lds) to
 * p (pdt F32 or BF16, row stride ldp; p == s allowed for F32): p = softmax(scale * s) over the
 * visible keys (mask [Sk] nonzero or NULL; causal: key j <= q0 + row), 0 elsewhere; a row with
 * no visible key is all zeros. */
cudaError_t cuk_attn_softmax(void *p, int pdt, int64_t ldp, const float *s, int64_t lds, int64_t rows,
                             int64_t Sk, float scale, const uint8_t *mask, int causal, int64_t q0,
                             cudaStream_t st);
/* 8-element (16-byte) variants, k_vec.cu: n (or D) % 8 == 0 and 16-byte aligned pointers
 * (cos/sin too). ew op: 0 add, 1 mul, 2 swiglu, 3 scale by sc, 4 activation act. */
cudaError_t cuk_v8_ew(void *y, const void *a, const void *b, int dt, int64_t n, int op, float sc, int act,
                      cudaStream_t s);
/* add / mul / swiglu (op 0, 1, 2) over rows x cols of strided views (row strides ldy, lda,
 * ldb in elements); vec8: 16-byte accesses (cols, lds % 8 == 0, 16-byte aligned pointers). */
cudaError_t cuk_ew_rows(void *y, int64_t ldy, const void *a, int64_t lda, const void *b, int64_t ldb, int dt,
                        int64_t rows, int64_t cols, int op, int vec8, cudaStream_t s);
cudaError_t cuk_v8_modulate(void *y, const void *x, int dt, int64_t B, int64_t S, int64_t D, const void *scale,
                            const void *shift, int sdt, int64_t sbs, cudaStream_t s);
cudaError_t cuk_v8_gated_add(void *x, const void *y, int dt, int64_t B, int64_t S, int64_t D, const void *gate,
                             int gdt, int64_t gbs, int tanh_gate, cudaStream_t s);
/* y[r, :] = x[r, :] * (sc * g[r]) for rows of D (n elements; g of dtype gdt); vec: 16-byte accesses (D % 8 == 0,
 * aligned pointers). */
cudaError_t cuk_mul_rows(void *y, const void *x, int dt, const void *g, int gdt, int64_t n, int64_t D, float sc,
                         int vec, cudaStream_t s);
cudaError_t cuk_v8_rope(void *x, int dt, int64_t B, int64_t S, int64_t H, int64_t D, const float *cos,
                        const float *sin, int64_t csb, cudaStream_t s);
/* Fused row kernels (k_fused.cu): D % 8 == 0, 16-byte aligned pointers. Rows [B*S, D]:
 * r == NULL: h = rms_norm(x) * wh * (1 + scale[b]) (h may alias x);
 * r != NULL: x += g[b] * rms_norm(r) * wr, then h (when not NULL) as above from the new x. */
cudaError_t cuk_f_norm(void *h, void *x, const void *r, int dt, int64_t B, int64_t S, int64_t D,
                       const cu_rowargs *a, cudaStream_t s);
/* Rows [B*S, D] (D % 8 == 0, 16-byte aligned pointers): r != NULL: x += gate[b] * r (gate NULL:
 * 1; no norm of r); then, h != NULL: h = layer_norm(x) * (1 + scale[b]) + shift[b] (h may
 * alias x when r is NULL). Uses a.gate, a.scale, a.shift, a.vbs, a.eps. */
cudaError_t cuk_f_lnorm(void *h, void *x, const void *r, int dt, int64_t B, int64_t S, int64_t D,
                        const cu_rowargs *a, cudaStream_t s);
/* x [B,S,H,D] in place: rms_norm(x) * w, then interleaved RoPE (cos/sin as cuk_rope). D / 8 <= 32.
 * xstride: element strides of B, S, H (multiples of 8; NULL: contiguous). */
cudaError_t cuk_f_norm_rope(void *x, int dt, int64_t B, int64_t S, int64_t H, int64_t D, const int64_t *xstride,
                            const void *w, int wdt, float eps, const float *cos, const float *sin, int64_t csb,
                            cudaStream_t s);
/* x rows [rows, D] in place (row tok = row % S of the tables): rms_norm over the whole row * w, then split
 * RoPE over its D / (2 r) chunks, pairs (j, j + r), cos/sin F32 [S, D / 2]. D % 8 == 0, r % 4 == 0,
 * D <= 8192, 16-byte aligned pointers. */
cudaError_t cuk_f_row_norm_rope(void *x, int dt, int64_t rows, int64_t S, int64_t D, int64_t r, const void *w,
                                int wdt, float eps, const float *cos, const float *sin, cudaStream_t s);
#ifdef __cplusplus
}
#endif

#endif
