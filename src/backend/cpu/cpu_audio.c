/* The CPU backend's audio ops (the LTX-2 vocoders'): unary (leaky ReLU, tanh, clamp, log of a
 * clamp), snake (snake-beta over channels last), resample1d (depthwise FIR up / down sampling
 * with replicate edges, channels last) and complex_abs (an STFT's magnitude). F32 activations,
 * contiguous; the per-channel parameters and filters in any weight dtype. */
#include <stdlib.h>
#include <string.h>

#include "backend/audio_math.h"
#include "backend/cpu/cpu_internal.h"

dit_status cpu_unary(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_unary fn, float a, float b,
                     dit_error *err) {
  const char *op = "unary";
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  DIT_TRY(cpu_check_same_shape(op, "y", y, "x", x, err));
  if ((int)fn < 0 || fn >= DIT_UNARY_COUNT)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: unknown function %d", op, (int)fn);
  const int64_t n = dit_tensor_numel(x);
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t i = 0; i < n; i++) yd[i] = dit_unary_apply(xd[i], (int)fn, a, b);
  return DIT_OK;
}

dit_status cpu_snake(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *alpha,
                     const dit_tensor *beta, float eps, dit_error *err) {
  const char *op = "snake";
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  DIT_TRY(cpu_check_same_shape(op, "y", y, "x", x, err));
  if (x->ndim < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [..., C]", op);
  const int64_t C = x->shape[x->ndim - 1], rows = C ? dit_tensor_numel(x) / C : 0;
  DIT_TRY(cpu_check_w(op, "alpha", alpha, C, err));
  DIT_TRY(cpu_check_w(op, "beta", beta, C, err));
  if (!isfinite(eps)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: eps is not finite", op);
  float *p = malloc(sizeof(float) * (size_t)(2 * C + 1));
  if (!p) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", op);
  float *al = p, *inv = p + C;
  cpu_ld_row(al, alpha->data, alpha->dtype, 0, C);
  cpu_ld_row(inv, beta->data, beta->dtype, 0, C);
  for (int64_t c = 0; c < C; c++) inv[c] = 1.0f / (inv[c] + eps);
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < C; c++) yd[r * C + c] = dit_snake_apply(xd[r * C + c], al[c], inv[c]);
  free(p);
  return DIT_OK;
}

/* floor(n / d) for d > 0. */
static inline int64_t floor_div(int64_t n, int64_t d) { return n >= 0 ? n / d : -((-n + d - 1) / d); }

dit_status cpu_resample1d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *f, int up, int down,
                          int offset, float gain, dit_error *err) {
  const char *op = "resample1d";
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  DIT_TRY(cpu_check_w(op, "f", f, -1, err));
  if (x->ndim != 3 || y->ndim != 3 || y->shape[0] != x->shape[0] || y->shape[2] != x->shape[2])
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [B, Ti, C] and y [B, To, C] expected", op);
  if (up < 1 || down < 1 || dit_tensor_numel(f) < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: up %d and down %d must be >= 1, f not empty", op, up, down);
  if (dit_tensor_bytes_overlap(x, y)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y aliases x", op);
  const int64_t B = x->shape[0], Ti = x->shape[1], To = y->shape[1], C = x->shape[2], K = dit_tensor_numel(f);
  if (B * To * C == 0) return DIT_OK;
  if (Ti < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x has no samples", op);
  float *fk = malloc(sizeof(float) * (size_t)K);
  if (!fk) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", op);
  cpu_ld_row(fk, f->data, f->dtype, 0, K);
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t bt = 0; bt < B * To; bt++) {
    const int64_t b = bt / To, t = bt % To;
    float *restrict yr = yd + bt * C;
#pragma omp simd
    for (int64_t c = 0; c < C; c++) yr[c] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      const int64_t n = t * down + k - offset;
      if (floor_div(n, up) * up != n) continue;
      int64_t i = floor_div(n, up);
      i = i < 0 ? 0 : (i >= Ti ? Ti - 1 : i);
      const float *restrict xr = xd + (b * Ti + i) * C;
      const float w = fk[k];
#pragma omp simd
      for (int64_t c = 0; c < C; c++) yr[c] += w * xr[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < C; c++) yr[c] *= gain;
  }
  free(fk);
  return DIT_OK;
}

dit_status cpu_complex_abs(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  const char *op = "complex_abs";
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  const int nd = x->ndim;
  bool ok = nd >= 1 && y->ndim == nd && x->shape[nd - 1] % 2 == 0 && y->shape[nd - 1] * 2 == x->shape[nd - 1];
  for (int d = 0; ok && d < nd - 1; d++) ok = y->shape[d] == x->shape[d];
  if (!ok) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [..., 2F] and y [..., F] expected", op);
  if (dit_tensor_bytes_overlap(x, y)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y aliases x", op);
  const int64_t F = y->shape[nd - 1], rows = F ? dit_tensor_numel(y) / F : 0;
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < F; i++) {
      const float re = xd[r * 2 * F + i], im = xd[r * 2 * F + F + i];
      yd[r * F + i] = sqrtf(re * re + im * im);
    }
  return DIT_OK;
}
