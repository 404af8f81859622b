/* Fused row passes of the CPU backend (issue 9): rms_norm_rope, rms_norm_mod and
 * residual_norm do per row, with the row in L1, what their unfused sequences
 * (backend_fused.c) do in 2, 2 and 4 passes over the whole [B, S, D] stream, with the same fp32 operations in the same
 * order, so results are bit-identical to the unfused ops. */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

dit_status cpu_rms_norm_rope(dit_backend *be, dit_tensor *x, const dit_tensor *w, float eps, const dit_tensor *cos,
                             const dit_tensor *sin, dit_rope_mode mode, dit_error *err) {
  bool shared;
  DIT_TRY(cpu_rope_check(x, cos, sin, mode, &shared, err));
  int64_t B = x->shape[0], S = x->shape[1], H = x->shape[2], D = x->shape[3], h2 = D / 2;
  if (w) DIT_TRY(cpu_check_w("rms_norm", "w", w, D, err));
  bool bad = false;
  float *wf = cpu_weight_f32(w, D, &bad);
  if (bad) return dit_errorf(err, DIT_ERR_NOMEM, "rms_norm_rope: out of memory for the weight");
  float *xd = x->data;
  const float *cd = cos->data, *sd = sin->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t bs = 0; bs < B * S; bs++) {
    int64_t crow = shared ? bs % S : bs;
    for (int64_t h = 0; h < H; h++) {
      float *xr = xd + cpu_off4(x, bs / S, bs % S, h);
      cpu_norm_mod_row(xr, xr, wf, NULL, D, eps);
      cpu_rope_row(xr, cd + crow * h2, sd + crow * h2, h2, mode);
    }
  }
  free(wf);
  return DIT_OK;
}

dit_status cpu_rms_norm_mod(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                            const dit_tensor *scale, float eps, dit_error *err) {
  return cpu_rms_norm_scaled(be, "rms_norm_mod", y, x, w, scale, eps, err);
}

dit_status cpu_residual_norm(dit_backend *be, dit_tensor *x, dit_tensor *r, const dit_tensor *wr,
                             const dit_tensor *gate, bool tanh_gate, dit_tensor *h, const dit_tensor *wh,
                             const dit_tensor *scale, float eps, dit_error *err) {
  const char *op = "residual_norm";
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "r", r, err));
  DIT_TRY(cpu_check_same_shape(op, "r", r, "x", x, err));
  if (h) {
    DIT_TRY(cpu_check_act(op, "h", h, err));
    DIT_TRY(cpu_check_same_shape(op, "h", h, "x", x, err));
    if (h->data == x->data || h->data == r->data)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_norm: h aliases x or r");
  }
  if (x->ndim < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_norm: x has no dims");
  int64_t D = x->shape[x->ndim - 1], rows = D ? dit_tensor_numel(x) / D : 0;
  if (wr) DIT_TRY(cpu_check_w(op, "wr", wr, D, err));
  if (h && wh) DIT_TRY(cpu_check_w(op, "wh", wh, D, err));
  DIT_TRY(cpu_check_bd(op, "gate", x, gate, err));
  if (h) DIT_TRY(cpu_check_bd(op, "scale", x, scale, err));
  int64_t S = x->ndim == 3 ? x->shape[1] : 1;
  bool bad = false;
  float *wrf = cpu_weight_f32(wr, D, &bad), *whf = h ? cpu_weight_f32(wh, D, &bad) : NULL, *tg = NULL;
  if (gate && tanh_gate && !bad) {
    int64_t ng = dit_tensor_numel(gate);
    tg = malloc(sizeof(float) * (size_t)(ng ? ng : 1));
    if (!tg) bad = true;
    for (int64_t i = 0; tg && i < ng; i++) tg[i] = tanhf(((const float *)gate->data)[i]);
  }
  if (bad) {
    free(wrf), free(whf), free(tg);
    return dit_errorf(err, DIT_ERR_NOMEM, "residual_norm: out of memory for weights and gate");
  }
  const float *gd = tg ? tg : gate ? gate->data : NULL, *sd = h && scale ? scale->data : NULL;
  float *xd = x->data, *rd = r->data, *hd = h ? h->data : NULL;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t row = 0; row < rows; row++) {
    float *xr = xd + row * D, *rr = rd + row * D;
    const float *g = gd ? gd + (row / S) * D : NULL;
    cpu_norm_mod_row(rr, rr, wrf, NULL, D, eps);
    if (g)
      for (int64_t i = 0; i < D; i++) xr[i] += g[i] * rr[i];
    else
      for (int64_t i = 0; i < D; i++) xr[i] += rr[i];
    if (hd) cpu_norm_mod_row(hd + row * D, xr, whf, sd ? sd + (row / S) * D : NULL, D, eps);
  }
  free(wrf), free(whf), free(tg);
  return DIT_OK;
}
