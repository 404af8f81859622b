/* Elementwise ops of the CPU backend: activations, SwiGLU, adaLN modulate, gated
 * residual add, add, mul and scale. All are F32, contiguous (SwiGLU also takes strided
 * row views), fp32 math, and allow the output to alias an input (each element is read
 * before it is written). */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

static dit_status check_unary(const char *op, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  return cpu_check_same_shape(op, "y", y, "x", x, err);
}

static dit_status check_binary(const char *op, dit_tensor *y, const dit_tensor *a, const dit_tensor *b,
                               dit_error *err) {
  DIT_TRY(cpu_check_act(op, "a", a, err));
  DIT_TRY(cpu_check_act(op, "b", b, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  DIT_TRY(cpu_check_same_shape(op, "b", b, "a", a, err));
  return cpu_check_same_shape(op, "y", y, "a", a, err);
}

dit_status cpu_activation(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_act act, dit_error *err) {
  DIT_TRY(check_unary("activation", y, x, err));
  if (act < DIT_ACT_NONE || act > DIT_ACT_SIGMOID)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "activation: unknown activation %d", (int)act);
  int64_t n = dit_tensor_numel(x);
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t i = 0; i < n; i++) yd[i] = cpu_act(xd[i], act);
  return DIT_OK;
}

/* y = silu(a) * b over rows: contiguous operands as one flat loop, strided views (column
 * slices of wider buffers, see dit_tensor_rowview) row by row; the same arithmetic. */
dit_status cpu_swiglu(dit_backend *be, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  dit_rowview yv, av, bv;
  DIT_TRY(cpu_check_rows("swiglu", "a", a, &av, err));
  DIT_TRY(cpu_check_rows("swiglu", "b", b, &bv, err));
  DIT_TRY(cpu_check_rows("swiglu", "y", y, &yv, err));
  DIT_TRY(cpu_check_same_shape("swiglu", "b", b, "a", a, err));
  DIT_TRY(cpu_check_same_shape("swiglu", "y", y, "a", a, err));
  const float *ad = a->data, *bd = b->data;
  float *yd = y->data;
  if (dit_tensor_is_contiguous(a) && dit_tensor_is_contiguous(b) && dit_tensor_is_contiguous(y)) {
    int64_t n = dit_tensor_numel(a);
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
      float v = ad[i];
      yd[i] = v / (1.0f + expf(-v)) * bd[i];
    }
    return DIT_OK;
  }
  int64_t P = yv.P > av.P ? yv.P : av.P;
  P = bv.P > P ? bv.P : P;
  if (!dit_rowview_split(&yv, P) || !dit_rowview_split(&av, P) || !dit_rowview_split(&bv, P) || yv.M != av.M ||
      bv.M != av.M)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "swiglu: the row layouts of y, a and b do not match");
  const int64_t M = av.M, C = av.C;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < P * M; r++) {
    const int64_t p = r / M, m = r % M;
    const float *ar = ad + p * av.ps + m * av.rs, *br = bd + p * bv.ps + m * bv.rs;
    float *yr = yd + p * yv.ps + m * yv.rs;
    for (int64_t i = 0; i < C; i++) {
      float v = ar[i];
      yr[i] = v / (1.0f + expf(-v)) * br[i];
    }
  }
  return DIT_OK;
}

dit_status cpu_check_bd(const char *op, const char *name, const dit_tensor *x, const dit_tensor *p,
                        dit_error *err) {
  if (!p) return DIT_OK;
  DIT_TRY(cpu_check_act(op, name, p, err));
  if (x->ndim != 3) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, S, D], got %d dims", op, x->ndim);
  int64_t B = x->shape[0], D = x->shape[2];
  if (dit_tensor_numel(p) != B * D || p->shape[p->ndim - 1] != D || p->shape[0] != B) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s shape %s, expected [%lld, %lld]", op, name,
                      dit_shape_str(p->shape, p->ndim, s, sizeof s), (long long)B, (long long)D);
  }
  return DIT_OK;
}

dit_status cpu_modulate(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *scale,
                        const dit_tensor *shift, dit_error *err) {
  DIT_TRY(check_unary("modulate", y, x, err));
  DIT_TRY(cpu_check_bd("modulate", "scale", x, scale, err));
  DIT_TRY(cpu_check_bd("modulate", "shift", x, shift, err));
  int64_t B = x->shape[0], S = x->shape[1], D = x->shape[2];
  const float *xd = x->data, *sc = scale->data, *sh = shift ? shift->data : NULL;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < B * S; r++) {
    int64_t b = r / S;
    const float *xr = xd + r * D, *s = sc + b * D, *t = sh ? sh + b * D : NULL;
    float *yr = yd + r * D;
    for (int64_t i = 0; i < D; i++) yr[i] = xr[i] * (1.0f + s[i]) + (t ? t[i] : 0.0f);
  }
  return DIT_OK;
}

dit_status cpu_gated_add(dit_backend *be, dit_tensor *x, const dit_tensor *y, const dit_tensor *gate,
                         bool tanh_gate, dit_error *err) {
  DIT_TRY(cpu_check_act("gated_add", "x", x, err));
  DIT_TRY(cpu_check_act("gated_add", "y", y, err));
  DIT_TRY(cpu_check_same_shape("gated_add", "y", y, "x", x, err));
  if (gate) DIT_TRY(cpu_check_bd("gated_add", "gate", x, gate, err));
  else if (x->ndim < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "gated_add: x has no dims");
  int64_t D = x->shape[x->ndim - 1], rows = D ? dit_tensor_numel(x) / D : 0;
  int64_t S = gate ? x->shape[1] : 1;
  float *xd = x->data, *tg = NULL;
  const float *yd = y->data, *gd = gate ? gate->data : NULL;
  if (gd && tanh_gate) { /* tanh of the [B, D] gate once, not once per row */
    int64_t ng = dit_tensor_numel(gate);
    tg = malloc(sizeof(float) * (size_t)(ng ? ng : 1));
    if (!tg) return dit_errorf(err, DIT_ERR_NOMEM, "gated_add: out of memory for the tanh gate");
    for (int64_t i = 0; i < ng; i++) tg[i] = tanhf(gd[i]);
    gd = tg;
  }
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    float *xr = xd + r * D;
    const float *yr = yd + r * D, *g = gd ? gd + (r / S) * D : NULL;
    if (g)
      for (int64_t i = 0; i < D; i++) xr[i] += g[i] * yr[i];
    else
      for (int64_t i = 0; i < D; i++) xr[i] += yr[i];
  }
  free(tg);
  return DIT_OK;
}

/* y = a + b or a * b, elementwise. */
static dit_status binary(dit_backend *be, const char *op, dit_tensor *y, const dit_tensor *a, const dit_tensor *b,
                         bool mul, dit_error *err) {
  DIT_TRY(check_binary(op, y, a, b, err));
  int64_t n = dit_tensor_numel(a);
  const float *ad = a->data, *bd = b->data;
  float *yd = y->data;
  if (mul) {
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
    for (int64_t i = 0; i < n; i++) yd[i] = ad[i] * bd[i];
  } else {
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
    for (int64_t i = 0; i < n; i++) yd[i] = ad[i] + bd[i];
  }
  return DIT_OK;
}

dit_status cpu_add(dit_backend *be, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  return binary(be, "add", y, a, b, false, err);
}

dit_status cpu_mul(dit_backend *be, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  return binary(be, "mul", y, a, b, true, err);
}

dit_status cpu_scale(dit_backend *be, dit_tensor *y, const dit_tensor *x, float s, dit_error *err) {
  DIT_TRY(check_unary("scale", y, x, err));
  int64_t n = dit_tensor_numel(x);
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t i = 0; i < n; i++) yd[i] = xd[i] * s;
  return DIT_OK;
}

dit_status cpu_mul_rows(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *g, float s,
                        dit_error *err) {
  DIT_TRY(check_unary("mul_rows", y, x, err));
  DIT_TRY(cpu_check_act("mul_rows", "g", g, err));
  const int64_t D = x->ndim ? x->shape[x->ndim - 1] : 1, rows = D ? dit_tensor_numel(x) / D : 0;
  if (dit_tensor_numel(g) != rows)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "mul_rows: g has %lld values for %lld rows",
                      (long long)dit_tensor_numel(g), (long long)rows);
  if (g->data == y->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "mul_rows: g aliases y");
  const float *xd = x->data, *gd = g->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const float f = s * gd[r];
    for (int64_t d = 0; d < D; d++) yd[r * D + d] = xd[r * D + d] * f;
  }
  return DIT_OK;
}
