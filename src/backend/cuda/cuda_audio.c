/* Host side of the CUDA audio ops (the LTX-2 vocoders'): unary, snake, resample1d and
 * complex_abs, each one kernel of k_audio.cu. Activations F32 or BF16 (x and y of one dtype),
 * contiguous; alpha, beta and the filters F32, BF16 or F16, read in their stored dtype. */
#include "backend/cuda/cuda_internal.h"

dit_status cu_unary(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_unary fn, float a, float b,
                    dit_error *err) {
  const char *op = "cuda unary";
  DIT_TRY(cu_check_xy(op, x, y, err));
  if ((int)fn < 0 || fn >= DIT_UNARY_COUNT)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: unknown function %d", op, (int)fn);
  return cu_check(cuk_unary(y->data, x->data, x->dtype, dit_tensor_numel(x), (int)fn, a, b, cu_im(be)->stream), op,
                  "kernel", err);
}

dit_status cu_snake(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *alpha,
                    const dit_tensor *beta, float eps, dit_error *err) {
  const char *op = "cuda snake";
  DIT_TRY(cu_check_xy(op, x, y, err));
  if (x->ndim < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [..., C]", op);
  const int64_t C = x->shape[x->ndim - 1], rows = C ? dit_tensor_numel(x) / C : 0;
  DIT_TRY(cu_check_w(op, "alpha", alpha, C, err));
  DIT_TRY(cu_check_w(op, "beta", beta, C, err));
  if (!(eps > -1e30f && eps < 1e30f)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: eps is not finite", op);
  return cu_check(cuk_snake(y->data, x->data, x->dtype, rows, C, alpha->data, alpha->dtype, beta->data, beta->dtype,
                            eps, cu_im(be)->stream),
                  op, "kernel", err);
}

dit_status cu_resample1d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *f, int up, int down,
                         int offset, float gain, dit_error *err) {
  const char *op = "cuda resample1d";
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  DIT_TRY(cu_check_w(op, "f", f, -1, err));
  if (x->dtype != y->dtype) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x and y dtypes differ", op);
  if (x->ndim != 3 || y->ndim != 3 || y->shape[0] != x->shape[0] || y->shape[2] != x->shape[2])
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [B, Ti, C] and y [B, To, C] expected", op);
  if (up < 1 || down < 1 || dit_tensor_numel(f) < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: up %d and down %d must be >= 1, f not empty", op, up, down);
  if (dit_tensor_bytes_overlap(x, y)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y aliases x", op);
  const cu_resample_geom g = {x->shape[0], x->shape[1], y->shape[1], x->shape[2], dit_tensor_numel(f),
                              up,          down,        offset,      gain};
  if (g.B * g.To * g.C == 0) return DIT_OK;
  if (g.Ti < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x has no samples", op);
  return cu_check(cuk_resample1d(y->data, x->data, x->dtype, f->data, f->dtype, &g, cu_im(be)->stream), op, "kernel",
                  err);
}

dit_status cu_complex_abs(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  const char *op = "cuda complex_abs";
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  const int nd = x->ndim;
  bool ok = nd >= 1 && y->ndim == nd && x->dtype == y->dtype && x->shape[nd - 1] % 2 == 0 &&
            y->shape[nd - 1] * 2 == x->shape[nd - 1];
  for (int d = 0; ok && d < nd - 1; d++) ok = y->shape[d] == x->shape[d];
  if (!ok) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [..., 2F] and y [..., F] of one dtype expected", op);
  if (dit_tensor_bytes_overlap(x, y)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y aliases x", op);
  const int64_t F = y->shape[nd - 1], rows = F ? dit_tensor_numel(y) / F : 0;
  return cu_check(cuk_complex_abs(y->data, x->data, x->dtype, rows, F, cu_im(be)->stream), op, "kernel", err);
}
