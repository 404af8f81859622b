/* The fused ops' reference semantics: each dit_op_* helper calls the backend's fused op
 * when it has one, else runs the unfused sequence of plain ops. The unfused sequences are
 * exported too (the CPU backend's fused ops are exactly these, so CPU results do not
 * change, and tests compare a backend's fused op against them). */
#include "backend/backend.h"

/* x viewed as rows of its last dim (same data, device and dtype). */
static dit_status as_rows(const char *op, const dit_tensor *x, dit_tensor *v, dit_error *err) {
  if (!x || x->ndim < 1 || !dit_tensor_is_contiguous(x))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be a contiguous tensor", op);
  int64_t D = x->shape[x->ndim - 1], rows = D ? dit_tensor_numel(x) / D : 0;
  *v = dit_tensor_make(x->dtype, x->data, 2, (int64_t[]){rows, D});
  v->device = x->device;
  return DIT_OK;
}

/* A strided x goes through a contiguous temporary (allocated and freed here, after a sync):
 * the fallback of backends without the fused op for such views, not a fast path. */
static dit_status unfused_norm_rope_strided(dit_backend *be, dit_tensor *x, const dit_tensor *w, float eps,
                                            const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode,
                                            dit_error *err) {
  void *tmp = NULL;
  DIT_TRY(be->ops->alloc(be, dit_tensor_nbytes(x), &tmp, err));
  dit_tensor c = dit_tensor_make(x->dtype, tmp, x->ndim, x->shape);
  c.device = x->device;
  dit_status s = be->ops->copy(be, &c, x, err);
  if (s == DIT_OK) s = dit_unfused_rms_norm_rope(be, &c, w, eps, cos, sin, mode, err);
  if (s == DIT_OK) s = be->ops->copy(be, x, &c, err);
  if (s == DIT_OK) s = be->ops->sync(be, err);
  be->ops->free(be, tmp);
  return s;
}

dit_status dit_unfused_rms_norm_rope(dit_backend *be, dit_tensor *x, const dit_tensor *w, float eps,
                                     const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode,
                                     dit_error *err) {
  if (x && x->ndim >= 1 && x->data && !dit_tensor_is_contiguous(x))
    return unfused_norm_rope_strided(be, x, w, eps, cos, sin, mode, err);
  dit_tensor rows;
  DIT_TRY(as_rows("rms_norm_rope", x, &rows, err));
  DIT_TRY(be->ops->rms_norm(be, &rows, &rows, w, eps, err));
  return be->ops->rope(be, x, cos, sin, mode, err);
}

dit_status dit_unfused_rms_norm_mod(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                                    const dit_tensor *scale, float eps, dit_error *err) {
  DIT_TRY(be->ops->rms_norm(be, y, x, w, eps, err));
  return scale ? be->ops->modulate(be, y, y, scale, NULL, err) : DIT_OK;
}

dit_status dit_unfused_residual_norm(dit_backend *be, dit_tensor *x, dit_tensor *r, const dit_tensor *wr,
                                     const dit_tensor *gate, bool tanh_gate, dit_tensor *h, const dit_tensor *wh,
                                     const dit_tensor *scale, float eps, dit_error *err) {
  if (h && x && r && (h->data == x->data || h->data == r->data))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_norm: h aliases x or r");
  DIT_TRY(be->ops->rms_norm(be, r, r, wr, eps, err));
  DIT_TRY(be->ops->gated_add(be, x, r, gate, tanh_gate, err));
  return h ? dit_unfused_rms_norm_mod(be, h, x, wh, scale, eps, err) : DIT_OK;
}

dit_status dit_unfused_residual_layer_norm(dit_backend *be, dit_tensor *x, const dit_tensor *r,
                                           const dit_tensor *gate, dit_tensor *h, const dit_tensor *scale,
                                           const dit_tensor *shift, float eps, dit_error *err) {
  if (h && x && ((r && h->data == x->data) || (r && h->data == r->data)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_layer_norm: h aliases %s", h->data == x->data ? "x" : "r");
  if (h && shift && !scale)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_layer_norm: a shift needs a scale");
  if (r) DIT_TRY(be->ops->gated_add(be, x, r, gate, false, err));
  if (!h) return DIT_OK;
  DIT_TRY(be->ops->layer_norm(be, h, x, NULL, NULL, eps, err));
  return scale ? be->ops->modulate(be, h, h, scale, shift, err) : DIT_OK;
}

dit_status dit_unfused_residual_rms_mod(dit_backend *be, dit_tensor *x, const dit_tensor *r, const dit_tensor *gate,
                                        dit_tensor *h, const dit_tensor *w, const dit_tensor *scale,
                                        const dit_tensor *shift, float eps, dit_error *err) {
  if (h && x && r && (h->data == x->data || h->data == r->data))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_rms_mod: h aliases %s", h->data == x->data ? "x" : "r");
  if (h && shift && !scale) return dit_errorf(err, DIT_ERR_INVALID_ARG, "residual_rms_mod: a shift needs a scale");
  if (r) DIT_TRY(be->ops->gated_add(be, x, r, gate, false, err));
  if (!h) return DIT_OK;
  DIT_TRY(be->ops->rms_norm(be, h, x, w, eps, err));
  return scale ? be->ops->modulate(be, h, h, scale, shift, err) : DIT_OK;
}

dit_status dit_unfused_rms_norm_rope_row(dit_backend *be, dit_tensor *x, const dit_tensor *w, float eps,
                                         const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode,
                                         dit_error *err) {
  const char *op = "rms_norm_rope_row";
  if (!x || x->ndim != 3 || !dit_tensor_is_contiguous(x))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be a contiguous [B, S, I]", op);
  if (!cos || !sin || cos->ndim < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: cos and sin tables are required", op);
  const int64_t B = x->shape[0], S = x->shape[1], I = x->shape[2], r = cos->shape[cos->ndim - 1];
  const int64_t n = dit_tensor_numel(cos);
  if (r <= 0 || S <= 0 || I % (2 * r) || n != S * (I / 2))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: tables of %lld x %lld do not split %lld positions of width %lld",
                      op, (long long)(r ? n / r : 0), (long long)r, (long long)S, (long long)I);
  dit_tensor rows;
  DIT_TRY(as_rows(op, x, &rows, err));
  DIT_TRY(be->ops->rms_norm(be, &rows, &rows, w, eps, err));
  dit_tensor x4 = dit_tensor_make(x->dtype, x->data, 4, (int64_t[]){B, S * (I / (2 * r)), 1, 2 * r});
  x4.device = x->device;
  return be->ops->rope(be, &x4, cos, sin, mode, err);
}

/* dit_op_<op> for every fused op: the backend's op, else its unfused sequence. */
#define FUSED_DISPATCH(name, params, args)                            \
  dit_status dit_op_##name(dit_backend *be, DIT_EXPAND params) {      \
    if (be->ops->name) return be->ops->name(be, DIT_EXPAND args);     \
    return dit_unfused_##name(be, DIT_EXPAND args);                   \
  }
DIT_BACKEND_FUSED_OPS(FUSED_DISPATCH)
#undef FUSED_DISPATCH
