/* Host side of the CUDA fused ops (rms_norm_rope, rms_norm_mod, residual_norm,
 * residual_layer_norm, residual_rms_mod, rms_norm_rope_row): argument
 * checks, then the row kernels of k_fused.cu where shapes and alignment allow (D % 8 == 0,
 * 16-byte aligned operands) and the backend's `fused` switch is on (env DIT_CUDA_FUSED=0
 * turns it off); otherwise the unfused sequence of plain ops (backend_fused.c). */
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

#define LAUNCH(op, what, call) DIT_TRY(cu_check((call), op, what, err))
#define MAX_ROW_D 65536 /* longest row the row kernels take (8 chunks of 8 per thread, 1024 threads) */

static bool al16(const dit_tensor *t) { return !t || ((uintptr_t)t->data & 15) == 0; }

dit_status cu_rms_norm_rope(dit_backend *be, dit_tensor *x, const dit_tensor *w, float eps,
                                const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode, dit_error *err) {
  const char *op = "cuda rms_norm_rope";
  DIT_TRY(cu_check_strided4(op, "x", x, err)); /* strided views too: q/k column slices of a fused projection */
  if (x->shape[3] % 2 != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, S, H, D] with D even", op);
  const int64_t B = x->shape[0], S = x->shape[1], H = x->shape[2], D = x->shape[3];
  if (w) DIT_TRY(cu_check_w(op, "w", w, D, err));
  int64_t csb = 0;
  DIT_TRY(cu_check_rope_tables(op, x, cos, sin, &csb, err));
  const bool fast = cu_im(be)->fused && mode == DIT_ROPE_INTERLEAVED && D % 8 == 0 && D / 8 <= 32 && al16(x) &&
                    al16(w) && al16(cos) && al16(sin);
  if (!fast) return dit_unfused_rms_norm_rope(be, x, w, eps, cos, sin, mode, err);
  LAUNCH(op, "kernel", cuk_f_norm_rope(x->data, x->dtype, B, S, H, D, x->stride, w ? w->data : NULL,
                                       w ? (int)w->dtype : 0, eps, (const float *)cos->data,
                                       (const float *)sin->data, csb, cu_im(be)->stream));
  return DIT_OK;
}

dit_status cu_rms_norm_mod(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                               const dit_tensor *scale, float eps, dit_error *err) {
  const char *op = "cuda rms_norm_mod";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t D = x->ndim ? x->shape[x->ndim - 1] : 1, B = D ? dit_tensor_numel(x) / D : 0, S = 1, vbs = 0;
  if (w) DIT_TRY(cu_check_w(op, "w", w, D, err));
  if (scale) DIT_TRY(cu_check_bsd(op, x, "scale", scale, &B, &S, &D, &vbs, err));
  const bool fast = cu_im(be)->fused && D % 8 == 0 && D <= MAX_ROW_D && al16(x) && al16(y) && al16(w) &&
                    al16(scale);
  if (!fast) return dit_unfused_rms_norm_mod(be, y, x, w, scale, eps, err);
  cu_rowargs a = {0};
  a.wh = w ? w->data : NULL, a.whdt = w ? (int)w->dtype : 0;
  a.scale = scale ? scale->data : NULL, a.sdt = scale ? (int)scale->dtype : 0;
  a.vbs = vbs, a.eps = eps;
  LAUNCH(op, "kernel", cuk_f_norm(y->data, x->data, NULL, x->dtype, B, S, D, &a, cu_im(be)->stream));
  return DIT_OK;
}

dit_status cu_residual_norm(dit_backend *be, dit_tensor *x, dit_tensor *r, const dit_tensor *wr,
                                const dit_tensor *gate, bool tanh_gate, dit_tensor *h, const dit_tensor *wh,
                                const dit_tensor *scale, float eps, dit_error *err) {
  const char *op = "cuda residual_norm";
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "r", r, err));
  DIT_TRY(cu_check_same_shape(op, "x", x, "r", r, err));
  if (h) {
    DIT_TRY(cu_check_act(op, "h", h, err));
    DIT_TRY(cu_check_same_shape(op, "x", x, "h", h, err));
    if (h->data == x->data || h->data == r->data)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: h aliases x or r", op);
  }
  if (x->data == r->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: r aliases x", op);
  int64_t B, S, D, gbs = 0, sbs = 0;
  DIT_TRY(cu_check_bsd(op, x, "gate", gate, &B, &S, &D, &gbs, err));
  DIT_TRY(cu_check_bsd(op, x, "scale", h ? scale : NULL, &B, &S, &D, &sbs, err));
  if (wr) DIT_TRY(cu_check_w(op, "wr", wr, D, err));
  if (h && wh) DIT_TRY(cu_check_w(op, "wh", wh, D, err));
  const bool one_vbs = !gate || !scale || !h || gbs == sbs; /* the kernel takes one batch stride */
  const bool fast = cu_im(be)->fused && one_vbs && D % 8 == 0 && D <= MAX_ROW_D && al16(x) && al16(r) &&
                    al16(h) && al16(wr) && al16(gate) && (!h || (al16(wh) && al16(scale)));
  if (!fast) return dit_unfused_residual_norm(be, x, r, wr, gate, tanh_gate, h, wh, scale, eps, err);
  cu_rowargs a = {0};
  a.wr = wr ? wr->data : NULL, a.wrdt = wr ? (int)wr->dtype : 0;
  a.gate = gate ? gate->data : NULL, a.gdt = gate ? (int)gate->dtype : 0, a.tanh_gate = tanh_gate;
  if (h) {
    a.wh = wh ? wh->data : NULL, a.whdt = wh ? (int)wh->dtype : 0;
    a.scale = scale ? scale->data : NULL, a.sdt = scale ? (int)scale->dtype : 0;
  }
  a.vbs = gate ? gbs : sbs, a.eps = eps;
  LAUNCH(op, "kernel", cuk_f_norm(h ? h->data : NULL, x->data, r->data, x->dtype, B, S, D, &a,
                                  cu_im(be)->stream));
  return DIT_OK;
}

/* The checks residual_layer_norm and residual_rms_mod share (x, r, gate, h, scale, shift) and
 * their row arguments; *fast when the row kernels take them (one batch stride for the vectors,
 * D % 8 == 0, 16-byte aligned, the fused switch on). */
static dit_status res_mod_args(dit_backend *be, const char *op, const dit_tensor *x, const dit_tensor *r,
                               const dit_tensor *gate, const dit_tensor *h, const dit_tensor *scale,
                               const dit_tensor *shift, cu_rowargs *a, int64_t *B, int64_t *S, int64_t *D, bool *fast,
                               dit_error *err) {
  DIT_TRY(cu_check_act(op, "x", x, err));
  if (r) {
    DIT_TRY(cu_check_act(op, "r", r, err));
    DIT_TRY(cu_check_same_shape(op, "x", x, "r", r, err));
    if (r->data == x->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: r aliases x", op);
  }
  if (h) {
    DIT_TRY(cu_check_act(op, "h", h, err));
    DIT_TRY(cu_check_same_shape(op, "x", x, "h", h, err));
    if (r && (h->data == x->data || h->data == r->data))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: h aliases %s", op, h->data == x->data ? "x" : "r");
    if (shift && !scale) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a shift needs a scale", op);
  }
  int64_t gbs = 0, sbs = 0, fbs = 0;
  DIT_TRY(cu_check_bsd(op, x, "gate", r ? gate : NULL, B, S, D, &gbs, err));
  DIT_TRY(cu_check_bsd(op, x, "scale", h ? scale : NULL, B, S, D, &sbs, err));
  DIT_TRY(cu_check_bsd(op, x, "shift", h ? shift : NULL, B, S, D, &fbs, err));
  const bool g_on = r && gate, s_on = h && scale, f_on = h && shift;
  const int64_t vbs = g_on ? gbs : s_on ? sbs : fbs; /* the kernels take one batch stride */
  const bool one_vbs = (!g_on || gbs == vbs) && (!s_on || sbs == vbs) && (!f_on || fbs == vbs);
  *fast = cu_im(be)->fused && one_vbs && *D % 8 == 0 && *D <= MAX_ROW_D && al16(x) && al16(r) && al16(h) &&
          (!g_on || al16(gate)) && (!s_on || al16(scale)) && (!f_on || al16(shift));
  memset(a, 0, sizeof *a);
  if (g_on) a->gate = gate->data, a->gdt = (int)gate->dtype;
  if (s_on) a->scale = scale->data, a->sdt = (int)scale->dtype;
  if (f_on) a->shift = shift->data, a->shdt = (int)shift->dtype;
  a->vbs = vbs;
  return DIT_OK;
}

dit_status cu_residual_layer_norm(dit_backend *be, dit_tensor *x, const dit_tensor *r, const dit_tensor *gate,
                                      dit_tensor *h, const dit_tensor *scale, const dit_tensor *shift, float eps,
                                      dit_error *err) {
  const char *op = "cuda residual_layer_norm";
  int64_t B, S, D;
  bool fast = false;
  cu_rowargs a;
  DIT_TRY(res_mod_args(be, op, x, r, gate, h, scale, shift, &a, &B, &S, &D, &fast, err));
  if (!fast) return dit_unfused_residual_layer_norm(be, x, r, gate, h, scale, shift, eps, err);
  a.eps = eps;
  LAUNCH(op, "kernel", cuk_f_lnorm(h ? h->data : NULL, x->data, r ? r->data : NULL, x->dtype, B, S, D, &a,
                                   cu_im(be)->stream));
  return DIT_OK;
}

dit_status cu_residual_rms_mod(dit_backend *be, dit_tensor *x, const dit_tensor *r, const dit_tensor *gate,
                               dit_tensor *h, const dit_tensor *w, const dit_tensor *scale, const dit_tensor *shift,
                               float eps, dit_error *err) {
  const char *op = "cuda residual_rms_mod";
  int64_t B, S, D;
  bool fast = false;
  cu_rowargs a;
  DIT_TRY(res_mod_args(be, op, x, r, gate, h, scale, shift, &a, &B, &S, &D, &fast, err));
  if (!r && !h) return DIT_OK;
  if (h && w) DIT_TRY(cu_check_w(op, "w", w, D, err));
  if (!fast || (h && !al16(w))) return dit_unfused_residual_rms_mod(be, x, r, gate, h, w, scale, shift, eps, err);
  a.r_raw = 1;
  if (h && w) a.wh = w->data, a.whdt = (int)w->dtype;
  a.eps = eps;
  LAUNCH(op, "kernel", cuk_f_norm(h ? h->data : NULL, x->data, r ? r->data : NULL, x->dtype, B, S, D, &a,
                                  cu_im(be)->stream));
  return DIT_OK;
}

dit_status cu_rms_norm_rope_row(dit_backend *be, dit_tensor *x, const dit_tensor *w, float eps, const dit_tensor *cos,
                                const dit_tensor *sin, dit_rope_mode mode, dit_error *err) {
  const char *op = "cuda rms_norm_rope_row";
  DIT_TRY(cu_check_act(op, "x", x, err));
  if (x->ndim != 3) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, S, I]", op);
  const int64_t S = x->shape[1], I = x->shape[2];
  if (w) DIT_TRY(cu_check_w(op, "w", w, I, err));
  DIT_TRY(cu_check_w(op, "cos", cos, -1, err));
  DIT_TRY(cu_check_w(op, "sin", sin, -1, err));
  const int64_t r = cos->ndim ? cos->shape[cos->ndim - 1] : 0;
  if (cos->dtype != DIT_F32 || sin->dtype != DIT_F32 || dit_tensor_numel(sin) != dit_tensor_numel(cos))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: cos/sin must be F32 tables of one size", op);
  /* the fast path's shapes; the unfused sequence checks (and refuses) the rest */
  const bool fast = cu_im(be)->fused && mode == DIT_ROPE_HALF && r > 0 && r % 4 == 0 && I % (2 * r) == 0 &&
                    I % 8 == 0 && I <= 8192 && dit_tensor_numel(cos) == S * (I / 2) && al16(x) && al16(w) &&
                    al16(cos) && al16(sin);
  if (!fast) return dit_unfused_rms_norm_rope_row(be, x, w, eps, cos, sin, mode, err);
  LAUNCH(op, "kernel", cuk_f_row_norm_rope(x->data, x->dtype, x->shape[0] * S, S, I, r, w ? w->data : NULL,
                                           w ? (int)w->dtype : 0, eps, (const float *)cos->data,
                                           (const float *)sin->data, cu_im(be)->stream));
  return DIT_OK;
}
