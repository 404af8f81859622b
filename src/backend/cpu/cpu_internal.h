/* Internals shared by the CPU backend's op files: the backend's private state (thread
 * count, which kernel path to use), element loads from the stored weight dtypes, the
 * argument checks every op repeats, and the GEMM core used by linear and conv2d. */
#ifndef DIT_CPU_INTERNAL_H
#define DIT_CPU_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/act_math.h"
#include "backend/backend_check.h"

/* The memory behind cpu_scratch_take: one anonymous mapping (or, under AddressSanitizer,
 * the heap blocks of the last call). */
#define CPU_SCRATCH_PARTS 4
typedef struct cpu_scratch {
  void *map;
  size_t map_bytes;
  void *block[CPU_SCRATCH_PARTS];
} cpu_scratch;

/* The buffers cpu_alloc mapped straight from the system (address and length), for cpu_free. */
typedef struct cpu_mapping {
  void *addr;
  size_t bytes;
} cpu_mapping;
typedef struct cpu_mapped {
  cpu_mapping *at;
  size_t n, cap;
} cpu_mapped;

typedef struct cpu_impl {
  bool have_avx512; /* the AVX-512 fp32 kernels run: the CPU has avx512f/bw/vl (and DIT_CPU_ISA allows them) */
  bool have_bf16;   /* and the AVX512-BF16 ones (bf16 precision, small-M stream kernels): avx512bf16 too */
  bool have_avx2;   /* the AVX2 GEMM runs where the AVX-512 one does not: avx2 + fma (and DIT_CPU_ISA allows it) */
  bool have_neon;   /* the NEON GEMM runs (AArch64, unless DIT_CPU_ISA=portable) */
  bool use_simd;    /* use the SIMD kernels when available (tests switch them off) */
  dit_cpu_precision precision; /* linear layers: fp32 products (default) or bf16 x bf16 */
  cpu_scratch scratch;          /* the kernels' working memory, kept between calls */
  cpu_mapped mapped;            /* the live buffers of at least CPU_MAP_MIN bytes */
} cpu_impl;

/* The working memory of the call running now (packing panels, activations rounded to bf16,
 * im2col tiles, attention blocks): n parts of bytes[i] each (0: NULL), 64-byte aligned, valid
 * until the next cpu_scratch call on the backend, so one kernel at a time holds it (a kernel
 * that calls another takes its own parts first and hands them down). The memory is kept
 * between calls and grows to the largest asked: the thousands of GEMMs of a forward neither
 * allocate nor fault in fresh pages, and a process's resident peak is its largest call's, not
 * a product of how the heap happens to be fragmented. dit_backend_trim gives it back. Under
 * AddressSanitizer each part is a heap block of its exact size, freed at the next call, so
 * overruns are still caught. op names the kernel in the out-of-memory message. */
dit_status cpu_scratch_take(const dit_backend *be, int n, const size_t *bytes, void **parts, const char *op,
                            dit_error *err);

/* Internal switch (tests, benchmarks): use the SIMD kernels (when the CPU has them) or
 * force the portable C path. Returns whether a SIMD path (dit_cpu_isa_name) is now in use. */
bool dit_cpu_set_simd(dit_backend *be, bool on);
static inline bool cpu_simd(const dit_backend *be) {
  const cpu_impl *im = (const cpu_impl *)be->impl;
  return im->have_avx512 && im->use_simd;
}
/* The AVX512-BF16 kernels are in use (cpu_simd and the CPU has avx512bf16). */
static inline bool cpu_simd_bf16(const dit_backend *be) {
  return cpu_simd(be) && ((const cpu_impl *)be->impl)->have_bf16;
}

static inline dit_cpu_precision cpu_precision(const dit_backend *be) {
  return ((const cpu_impl *)be->impl)->precision;
}

/* Element i of p, stored as F32, BF16 or F16 (callers check the dtype first). */
static inline float cpu_ld(const void *p, dit_dtype t, int64_t i) {
  switch (t) {
    case DIT_BF16: return dit_bf16_to_f32(((const uint16_t *)p)[i]);
    case DIT_F16: return dit_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}
/* Converts n elements of a F32/BF16/F16 array (from element off) to floats. */
void cpu_ld_row(float *dst, const void *p, dit_dtype t, int64_t off, int64_t n);


/* Operand checks (backend_check.h) with the CPU's device and dtypes: cpu_check_act (F32,
 * contiguous), cpu_check_rows (F32 row views), cpu_check_w, cpu_check_same_shape. */
DIT_BACKEND_CHECKS(cpu, DIT_DEV_CPU, DIT_DTYPES(DIT_F32), false)
/* Checks a strided 4-D F32 tensor [B, S, H, D]: unit last stride, non-negative strides. */
dit_status cpu_check_strided4(const char *op, const char *name, const dit_tensor *t, dit_error *err);
/* Element offset of (b, s, h, 0) in a 4-D tensor. */
static inline int64_t cpu_off4(const dit_tensor *t, int64_t b, int64_t s, int64_t h) {
  return b * t->stride[0] + s * t->stride[1] + h * t->stride[2];
}
/* Checks a row-wise op's x and y (F32, contiguous, the same shape, at least 1 dim); gives
 * the row length D (x's last dim) and the number of rows. */
dit_status cpu_check_rowwise(const char *op, dit_tensor *y, const dit_tensor *x, int64_t *rows, int64_t *D,
                             dit_error *err);
/* Checks a per-(batch, channel) F32 tensor p [B, D] for x [B, S, D] (NULL p: nothing to check). */
dit_status cpu_check_bd(const char *op, const char *name, const dit_tensor *x, const dit_tensor *p,
                        dit_error *err);

static inline float cpu_act(float v, dit_act a) { return dit_act_apply(v, (int)a); }

/* y[m, n] = act(ws * sum_k x[m, k] * w[n, k] + b[n]) for m < M, n < N: x fp32 with row
 * stride ldx, w in its stored dtype wt with row stride ldw (ws: its per-tensor scale), b
 * (NULL or [N] in dtype bt), y fp32 with row stride ldy. Parallel over n_threads; fp32
 * accumulation. */
dit_status cpu_gemm(const dit_backend *be, int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx,
                    const void *w, dit_dtype wt, float ws, int64_t ldw, const void *b, dit_dtype bt, dit_act act,
                    float *y, int64_t ldy, dit_error *err);

/* 1 / sqrt(mean(x^2) + eps) of one row of D floats, as cpu_rms_norm computes it (the
 * fused ops use it so they stay bit-identical to their unfused sequences). */
float cpu_rms_inv(const float *xr, int64_t D, float eps);

/* y = rms_norm(x) * w (w: fp32 [D], or NULL), then * (1 + s) + 0 when s: one row (in place
 * when y == x), the arithmetic of rms_norm and of rms_norm then modulate. */
static inline void cpu_norm_mod_row(float *y, const float *x, const float *w, const float *s, int64_t D, float eps) {
  float inv = cpu_rms_inv(x, D, eps);
  if (w)
    for (int64_t i = 0; i < D; i++) y[i] = x[i] * inv * w[i];
  else
    for (int64_t i = 0; i < D; i++) y[i] = x[i] * inv;
  if (s)
    for (int64_t i = 0; i < D; i++) y[i] = y[i] * (1.0f + s[i]) + 0.0f;
}
/* A norm weight w [D] as fp32 (malloc'd; NULL when w is NULL); *bad set when out of memory. */
float *cpu_weight_f32(const dit_tensor *w, int64_t D, bool *bad);
/* rms_norm over the rows of x, then * (1 + scale) when scale (per (batch, channel), x
 * [B, S, D]) is given: rms_norm and rms_norm_mod, named op in messages. */
dit_status cpu_rms_norm_scaled(dit_backend *be, const char *op, dit_tensor *y, const dit_tensor *x,
                               const dit_tensor *w, const dit_tensor *scale, float eps, dit_error *err);

/* Rotates one head row x[0..2*h2) by cos/sin c, s [h2] (pairs (2i, 2i+1) or (i, i+h2)). */
static inline void cpu_rope_row(float *xr, const float *c, const float *s, int64_t h2, dit_rope_mode mode) {
  if (mode == DIT_ROPE_INTERLEAVED) {
    for (int64_t i = 0; i < h2; i++) {
      float a = xr[2 * i], bb = xr[2 * i + 1];
      xr[2 * i] = a * c[i] - bb * s[i];
      xr[2 * i + 1] = a * s[i] + bb * c[i];
    }
  } else {
    for (int64_t i = 0; i < h2; i++) {
      float a = xr[i], bb = xr[i + h2];
      xr[i] = a * c[i] - bb * s[i];
      xr[i + h2] = bb * c[i] + a * s[i];
    }
  }
}
/* Checks rope's arguments (x [B, S, H, D], cos/sin [B or 1, S, D/2] or [S, D/2]); *shared:
 * cos/sin shared over the batch. */
dit_status cpu_rope_check(const dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode,
                          bool *shared, dit_error *err);

/* Op implementations (one family per file). */
/* The ops: cpu_<op> for every op of DIT_BACKEND_OPS (cpu_residual_layer_norm, cpu_residual_rms_mod
 * and cpu_rms_norm_rope_row have no CPU kernel: cpu_backend.c leaves them NULL and the unfused
 * sequences run). */
#define CPU_OP_DECL(name, params, args) DIT_BACKEND_OP_DECL(cpu_##name, params)
DIT_BACKEND_OPS(CPU_OP_DECL)
#undef CPU_OP_DECL

#endif
