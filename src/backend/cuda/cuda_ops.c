/* Host side of the CUDA elementwise, normalization, attention and indexing ops: argument
 * checks (shapes, dtypes, device) and the kernel launches on the backend's stream. */
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_sdpa.h"

#define LAUNCH(op, what, call) DIT_TRY(cu_check((call), op, what, err))

static cudaStream_t st(dit_backend *be) { return cu_im(be)->stream; }

/* The 16-byte kernels apply: switch on, n % 8 == 0, every pointer (NULL ignored) 16-byte aligned. */
static bool v8(dit_backend *be, int64_t n, const void *p0, const void *p1, const void *p2, const void *p3) {
  uintptr_t a = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3;
  return cu_im(be)->vec && n % 8 == 0 && a % 16 == 0;
}

static int64_t last_dim(const dit_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

static dit_status opt_w(const char *op, const char *name, const dit_tensor *t, int64_t n, dit_error *err) {
  return t ? cu_check_w(op, name, t, n, err) : DIT_OK;
}

/* x and y: activations of the same shape and dtype (y may alias x). */
dit_status cu_check_xy(const char *op, const dit_tensor *x, const dit_tensor *y, dit_error *err) {
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  return cu_check_same_shape(op, "x", x, "y", y, err);
}

dit_status cu_check_rope_tables(const char *op, const dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin,
                                int64_t *csb, dit_error *err) {
  const int64_t B = x->shape[0], S = x->shape[1], D = x->shape[3];
  DIT_TRY(cu_check_w(op, "cos", cos, -1, err));
  DIT_TRY(cu_check_w(op, "sin", sin, -1, err));
  const int64_t n = dit_tensor_numel(cos);
  if (cos->dtype != DIT_F32 || sin->dtype != DIT_F32 || dit_tensor_numel(sin) != n ||
      (n != B * S * (D / 2) && n != S * (D / 2)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: cos/sin must be F32 [B, S, D/2] (or [S, D/2])", op);
  *csb = n == B * S * (D / 2) ? S * (D / 2) : 0;
  return DIT_OK;
}

dit_status cu_rms_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, float eps,
                           dit_error *err) {
  const char *op = "cuda rms_norm";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t D = last_dim(x), rows = D ? dit_tensor_numel(x) / D : 0;
  DIT_TRY(opt_w(op, "w", w, D, err));
  if (v8(be, D, x->data, y->data, w ? w->data : NULL, NULL)) { /* row-parallel 16-byte kernels, k_fused.cu */
    cu_rowargs ra = {0};
    ra.wh = w ? w->data : NULL, ra.whdt = w ? (int)w->dtype : 0, ra.eps = eps;
    LAUNCH(op, "kernel", cuk_f_norm(y->data, x->data, NULL, x->dtype, rows, 1, D, &ra, st(be)));
    return DIT_OK;
  }
  LAUNCH(op, "kernel", cuk_rms_norm(y->data, x->data, x->dtype, rows, D, w ? w->data : NULL, w ? w->dtype : 0, eps,
                                    st(be)));
  return DIT_OK;
}

dit_status cu_layer_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                             const dit_tensor *b, float eps, dit_error *err) {
  const char *op = "cuda layer_norm";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t D = last_dim(x), rows = D ? dit_tensor_numel(x) / D : 0;
  DIT_TRY(opt_w(op, "w", w, D, err));
  DIT_TRY(opt_w(op, "b", b, D, err));
  LAUNCH(op, "kernel", cuk_layer_norm(y->data, x->data, x->dtype, rows, D, w ? w->data : NULL, w ? w->dtype : 0,
                                      b ? b->data : NULL, b ? b->dtype : 0, eps, st(be)));
  return DIT_OK;
}

dit_status cu_group_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, int groups, const dit_tensor *w,
                             const dit_tensor *b, float eps, bool silu, dit_error *err) {
  const char *op = "cuda group_norm";
  DIT_TRY(cu_check_xy(op, x, y, err));
  if (x->ndim < 2 || groups <= 0 || x->shape[1] % groups != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, C, ...] with C divisible by groups=%d", op,
                      groups);
  int64_t B = x->shape[0], C = x->shape[1], HW = (B > 0 && C > 0) ? dit_tensor_numel(x) / (B * C) : 0;
  DIT_TRY(opt_w(op, "w", w, C, err));
  DIT_TRY(opt_w(op, "b", b, C, err));
  void *ws = NULL;
  DIT_TRY(cu_scratch(be, cuk_group_norm_ws_bytes(B, C, HW, groups), &ws, err));
  LAUNCH(op, "kernel", cuk_group_norm(y->data, x->data, x->dtype, B, C, HW, groups, w ? w->data : NULL,
                                      w ? w->dtype : 0, b ? b->data : NULL, b ? b->dtype : 0, eps, silu, ws, st(be)));
  return DIT_OK;
}

dit_status cu_channel_rms_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, bool silu,
                               dit_error *err) {
  const char *op = "cuda channel_rms_norm";
  DIT_TRY(cu_check_xy(op, x, y, err));
  if (x->ndim < 2) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, C, ...]", op);
  int64_t B = x->shape[0], C = x->shape[1], HW = (B > 0 && C > 0) ? dit_tensor_numel(x) / (B * C) : 0;
  DIT_TRY(opt_w(op, "w", w, C, err));
  LAUNCH(op, "kernel", cuk_channel_rms_norm(y->data, x->data, x->dtype, B, C, HW, w ? w->data : NULL,
                                            w ? w->dtype : 0, silu, st(be)));
  return DIT_OK;
}

dit_status cu_attention(dit_backend *be, dit_tensor *out, const dit_tensor *q, const dit_tensor *k,
                        const dit_tensor *v, const dit_tensor *key_mask, float scale, bool causal,
                        dit_error *err) {
  const char *op = "cuda attention";
  DIT_TRY(cu_check_strided4(op, "q", q, err));
  DIT_TRY(cu_check_strided4(op, "k", k, err));
  DIT_TRY(cu_check_strided4(op, "v", v, err));
  DIT_TRY(cu_check_strided4(op, "out", out, err));
  DIT_TRY(cu_check_same_shape(op, "q", q, "out", out, err));
  DIT_TRY(cu_check_same_shape(op, "k", k, "v", v, err));
  if (q->ndim != 4 || k->ndim != 4 || k->dtype != q->dtype || k->shape[0] != q->shape[0] ||
      k->shape[3] != q->shape[3] || k->shape[2] <= 0 || q->shape[2] % k->shape[2] != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "%s: q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D] of q's dtype with Hq %% Hkv == 0 expected", op);
  int64_t B = q->shape[0], Sq = q->shape[1], Hq = q->shape[2], D = q->shape[3], Sk = k->shape[1],
          Hkv = k->shape[2];
  if (D > CU_ATTN_GEMM_MAX_D || (D % 8 != 0 && D > CU_ATTN_SMALL_MAX_D))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: head dim %lld unsupported (at most %d, a multiple of 8 above %d)",
                      op, (long long)D, CU_ATTN_GEMM_MAX_D, CU_ATTN_SMALL_MAX_D);
  const uint8_t *mask = NULL;
  if (key_mask) {
    if (key_mask->device != DIT_DEV_CUDA || (key_mask->dtype != DIT_U8 && key_mask->dtype != DIT_BOOL) ||
        dit_tensor_numel(key_mask) != B * Sk || !dit_tensor_is_contiguous(key_mask))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: key_mask must be a contiguous CUDA U8/BOOL [B, Sk]", op);
    mask = (const uint8_t *)key_mask->data;
  }
  cu_attn_strides as; /* operands may be strided views (fused projections, joint buffers) */
  for (int i = 0; i < 3; i++)
    as.q[i] = q->stride[i], as.k[i] = k->stride[i], as.v[i] = v->stride[i], as.o[i] = out->stride[i];
  if (out->data == q->data || out->data == k->data || out->data == v->data)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: out aliases an input", op);
  if (D % 8 != 0) { /* small head dims of tiny models: the plain kernel */
    LAUNCH(op, "small-head kernel", cuk_attention_small(out->data, q->data, k->data, v->data, q->dtype, B, Sq, Sk, Hq,
                                                        Hkv, D, mask, scale, causal, &as, st(be)));
    return DIT_OK;
  }
  if (((uintptr_t)q->data | (uintptr_t)k->data | (uintptr_t)v->data | (uintptr_t)out->data) % 16 != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: q, k, v and out must be 16-byte aligned", op);
  if (D > 256) /* beyond the flash kernels and cuDNN: GEMM, softmax, GEMM (cuda_attn_gemm.c) */
    return cu_attention_gemm(be, out->data, q->data, k->data, v->data, q->dtype, B, Sq, Sk, Hq, Hkv, D, mask, scale,
                             causal, &as, err);
  if (cu_im(be)->cudnn && q->dtype == DIT_BF16) { /* cuDNN's fused SDPA where it applies, else our kernel */
    bool done = false;
    DIT_TRY(cu_sdpa_attention(&cu_im(be)->sdpa, st(be), &cu_im(be)->opts, out->data, q->data, k->data, v->data, mask, B, Sq, Sk, Hq,
                              Hkv, D, &as, scale, causal, &done, err));
    if (done) return DIT_OK;
  }
  LAUNCH(op, "flash kernel", cuk_attention(out->data, q->data, k->data, v->data, q->dtype, B, Sq, Sk, Hq, Hkv, D,
                                           mask, scale, causal, cu_im(be)->attn_version, &as, st(be)));
  return DIT_OK;
}

dit_status cu_rope(dit_backend *be, dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin,
                       dit_rope_mode mode, dit_error *err) {
  const char *op = "cuda rope";
  DIT_TRY(cu_check_strided4(op, "x", x, err)); /* strided views too: a head's leading channels (partial RoPE) */
  if (x->shape[3] % 2 != 0) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, S, H, D] with D even", op);
  int64_t B = x->shape[0], S = x->shape[1], H = x->shape[2], D = x->shape[3];
  int64_t csb = 0;
  DIT_TRY(cu_check_rope_tables(op, x, cos, sin, &csb, err));
  const bool dense = dit_tensor_is_contiguous(x);
  if (dense && mode == DIT_ROPE_INTERLEAVED && v8(be, D, x->data, cos->data, sin->data, NULL)) {
    LAUNCH(op, "kernel", cuk_v8_rope(x->data, x->dtype, B, S, H, D, (const float *)cos->data,
                                     (const float *)sin->data, csb, st(be)));
    return DIT_OK;
  }
  LAUNCH(op, "kernel", cuk_rope(x->data, x->dtype, B, S, H, D, dense ? NULL : x->stride, (const float *)cos->data,
                                (const float *)sin->data, csb, (int)mode, st(be)));
  return DIT_OK;
}

dit_status cu_activation(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_act act, dit_error *err) {
  const char *op = "cuda activation";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t n = dit_tensor_numel(x);
  if (v8(be, n, x->data, y->data, NULL, NULL))
    LAUNCH(op, "kernel", cuk_v8_ew(y->data, x->data, NULL, x->dtype, n, 4, 1.0f, (int)act, st(be)));
  else
    LAUNCH(op, "kernel", cuk_act(y->data, x->data, x->dtype, n, (int)act, st(be)));
  return DIT_OK;
}

static dit_status binary(dit_backend *be, const char *op, dit_tensor *y, const dit_tensor *a, const dit_tensor *b,
                         int kind, dit_error *err) {
  DIT_TRY(cu_check_act(op, "a", a, err));
  DIT_TRY(cu_check_act(op, "b", b, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  DIT_TRY(cu_check_same_shape(op, "a", a, "b", b, err));
  DIT_TRY(cu_check_same_shape(op, "a", a, "y", y, err));
  int64_t n = dit_tensor_numel(a);
  if (v8(be, n, a->data, b->data, y->data, NULL))
    LAUNCH(op, "kernel", cuk_v8_ew(y->data, a->data, b->data, a->dtype, n, kind, 1.0f, 0, st(be)));
  else
    LAUNCH(op, "kernel", cuk_binary(y->data, a->data, b->data, a->dtype, n, kind, st(be)));
  return DIT_OK;
}

dit_status cu_add(dit_backend *be, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  return binary(be, "cuda add", y, a, b, 0, err);
}
dit_status cu_mul(dit_backend *be, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  return binary(be, "cuda mul", y, a, b, 1, err);
}
/* Contiguous operands: the flat kernels; row views (column slices of a fused projection,
 * see dit_tensor_rowview): one row kernel launch per block of rows. */
dit_status cu_swiglu(dit_backend *be, dit_tensor *y, const dit_tensor *a, const dit_tensor *b,
                         dit_error *err) {
  const char *op = "cuda swiglu";
  if (a && b && y && dit_tensor_is_contiguous(a) && dit_tensor_is_contiguous(b) && dit_tensor_is_contiguous(y))
    return binary(be, op, y, a, b, 2, err);
  dit_rowview yv, av, bv;
  DIT_TRY(cu_check_rows(op, "a", a, &av, err));
  DIT_TRY(cu_check_rows(op, "b", b, &bv, err));
  DIT_TRY(cu_check_rows(op, "y", y, &yv, err));
  DIT_TRY(cu_check_same_shape(op, "a", a, "b", b, err));
  DIT_TRY(cu_check_same_shape(op, "a", a, "y", y, err));
  int64_t P = yv.P > av.P ? yv.P : av.P;
  P = bv.P > P ? bv.P : P;
  if (!dit_rowview_split(&yv, P) || !dit_rowview_split(&av, P) || !dit_rowview_split(&bv, P) || yv.M != av.M ||
      bv.M != av.M)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: the row layouts of y, a and b do not match", op);
  const size_t es = dit_dtype_size(a->dtype);
  const bool vec = cu_im(be)->vec && (av.C | av.rs | bv.rs | yv.rs | av.ps | bv.ps | yv.ps) % 8 == 0 &&
                   v8(be, 8, a->data, b->data, y->data, NULL);
  for (int64_t p = 0; p < P; p++)
    LAUNCH(op, "row kernel", cuk_ew_rows((char *)y->data + (size_t)(p * yv.ps) * es, yv.rs,
                                         (const char *)a->data + (size_t)(p * av.ps) * es, av.rs,
                                         (const char *)b->data + (size_t)(p * bv.ps) * es, bv.rs, a->dtype, av.M,
                                         av.C, 2, vec, st(be)));
  return DIT_OK;
}

dit_status cu_scale(dit_backend *be, dit_tensor *y, const dit_tensor *x, float s, dit_error *err) {
  const char *op = "cuda scale";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t n = dit_tensor_numel(x);
  if (v8(be, n, x->data, y->data, NULL, NULL))
    LAUNCH(op, "kernel", cuk_v8_ew(y->data, x->data, NULL, x->dtype, n, 3, s, 0, st(be)));
  else
    LAUNCH(op, "kernel", cuk_scale(y->data, x->data, x->dtype, n, s, st(be)));
  return DIT_OK;
}

dit_status cu_mul_rows(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *g, float s,
                       dit_error *err) {
  const char *op = "cuda mul_rows";
  DIT_TRY(cu_check_xy(op, x, y, err));
  DIT_TRY(cu_check_w(op, "g", g, -1, err));
  if (g->dtype != DIT_F32 && g->dtype != DIT_BF16 && g->dtype != DIT_F16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: g must be F32, BF16 or F16", op);
  const int64_t D = last_dim(x), n = dit_tensor_numel(x), rows = D ? n / D : 0;
  if (dit_tensor_numel(g) != rows)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: g has %lld values for %lld rows", op,
                      (long long)dit_tensor_numel(g), (long long)rows);
  if (g->data == y->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: g aliases y", op);
  LAUNCH(op, "kernel", cuk_mul_rows(y->data, x->data, x->dtype, g->data, (int)g->dtype, n, D, s,
                                    v8(be, D, x->data, y->data, NULL, NULL), st(be)));
  return DIT_OK;
}

/* x [B,S,D] (or [S,D] as B = 1); a per-batch vector [B,D] (or [D], broadcast): batch stride. */
dit_status cu_check_bsd(const char *op, const dit_tensor *x, const char *vn, const dit_tensor *vec, int64_t *B,
                           int64_t *S, int64_t *D, int64_t *vbs, dit_error *err) {
  if (x->ndim != 3 && x->ndim != 2)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, S, D]", op);
  *B = x->ndim == 3 ? x->shape[0] : 1;
  *S = x->shape[x->ndim - 2];
  *D = x->shape[x->ndim - 1];
  if (!vec) return DIT_OK;
  DIT_TRY(cu_check_w(op, vn, vec, -1, err));
  int64_t n = dit_tensor_numel(vec);
  if (n != *B * *D && n != *D)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be [B, D] = [%lld, %lld]", op, vn, (long long)*B,
                      (long long)*D);
  *vbs = n == *B * *D ? *D : 0;
  return DIT_OK;
}

dit_status cu_modulate(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *scale_,
                           const dit_tensor *shift, dit_error *err) {
  const char *op = "cuda modulate";
  DIT_TRY(cu_check_xy(op, x, y, err));
  if (!scale_) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: scale is NULL", op);
  int64_t B, S, D, sbs = 0, hbs = 0;
  DIT_TRY(cu_check_bsd(op, x, "scale", scale_, &B, &S, &D, &sbs, err));
  DIT_TRY(cu_check_bsd(op, x, "shift", shift, &B, &S, &D, &hbs, err));
  if (shift && (shift->dtype != scale_->dtype || hbs != sbs))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: shift must match scale's dtype and shape", op);
  if (v8(be, D, x->data, y->data, NULL, NULL)) {
    LAUNCH(op, "kernel", cuk_v8_modulate(y->data, x->data, x->dtype, B, S, D, scale_->data,
                                         shift ? shift->data : NULL, scale_->dtype, sbs, st(be)));
    return DIT_OK;
  }
  LAUNCH(op, "kernel", cuk_modulate(y->data, x->data, x->dtype, B, S, D, scale_->data, shift ? shift->data : NULL,
                                    scale_->dtype, sbs, st(be)));
  return DIT_OK;
}

dit_status cu_gated_add(dit_backend *be, dit_tensor *x, const dit_tensor *y, const dit_tensor *gate,
                            bool tanh_gate, dit_error *err) {
  const char *op = "cuda gated_add";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t B, S, D, gbs = 0;
  DIT_TRY(cu_check_bsd(op, x, "gate", gate, &B, &S, &D, &gbs, err));
  if (v8(be, D, x->data, y->data, NULL, NULL)) {
    LAUNCH(op, "kernel", cuk_v8_gated_add(x->data, y->data, x->dtype, B, S, D, gate ? gate->data : NULL,
                                          gate ? gate->dtype : 0, gbs, tanh_gate, st(be)));
    return DIT_OK;
  }
  LAUNCH(op, "kernel", cuk_gated_add(x->data, y->data, x->dtype, B, S, D, gate ? gate->data : NULL,
                                     gate ? gate->dtype : 0, gbs, tanh_gate, st(be)));
  return DIT_OK;
}

dit_status cu_softmax(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  const char *op = "cuda softmax";
  DIT_TRY(cu_check_xy(op, x, y, err));
  int64_t D = last_dim(x), rows = D ? dit_tensor_numel(x) / D : 0;
  LAUNCH(op, "kernel", cuk_softmax(y->data, x->data, x->dtype, rows, D, st(be)));
  return DIT_OK;
}

/* Waits for the lookup to report bad ids (one host sync: embeddings run once per prompt). */
dit_status cu_embedding(dit_backend *be, dit_tensor *y, const dit_tensor *table, const dit_tensor *ids,
                            dit_error *err) {
  const char *op = "cuda embedding";
  cu_impl *im = cu_im(be);
  DIT_TRY(cu_check_act(op, "y", y, err));
  DIT_TRY(dit_check_matrix(op, "table", table, DIT_DEV_CUDA, err));
  if (!ids || ids->device != DIT_DEV_CUDA || (ids->dtype != DIT_I32 && ids->dtype != DIT_I64) ||
      !dit_tensor_is_contiguous(ids))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: ids must be a contiguous CUDA I32/I64 tensor", op);
  if (table->ndim != 2) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: table must be [V, D]", op);
  int64_t V = table->shape[0], D = table->shape[1], N = dit_tensor_numel(ids);
  if (dit_tensor_numel(y) != N * D || last_dim(y) != D)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y must be [%lld, %lld]", op, (long long)N, (long long)D);
  if (N == 0) return DIT_OK;
  if (dit_dtype_is_quant(table->dtype))
    LAUNCH(op, "kernel", cuk_embedding_q(y->data, y->dtype, table->data, table->dtype, V, D, dit_tensor_scale(table),
                                         ids->data, ids->dtype, N, im->flag, im->stream));
  else
    LAUNCH(op, "kernel", cuk_embedding(y->data, y->dtype, table->data, table->dtype, V, D, ids->data, ids->dtype, N,
                                       im->flag, im->stream));
  int bad = 0;
  LAUNCH(op, "read flag", cudaMemcpyAsync(&bad, im->flag, sizeof bad, cudaMemcpyDeviceToHost, im->stream));
  LAUNCH(op, "sync", cudaStreamSynchronize(im->stream));
  if (bad) {
    LAUNCH(op, "reset flag", cudaMemsetAsync(im->flag, 0, sizeof(int), im->stream));
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: an id is outside [0, %lld)", op, (long long)V);
  }
  return DIT_OK;
}

dit_status cu_upsample2x(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  const char *op = "cuda upsample2x";
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  if (x->ndim != 4 || y->ndim != 4 || y->dtype != x->dtype || y->shape[0] != x->shape[0] ||
      y->shape[1] != x->shape[1] || y->shape[2] != 2 * x->shape[2] || y->shape[3] != 2 * x->shape[3])
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [B,C,H,W] and y [B,C,2H,2W] of one dtype expected", op);
  LAUNCH(op, "kernel", cuk_upsample2x(y->data, x->data, x->dtype, x->shape[0] * x->shape[1], x->shape[2],
                                      x->shape[3], st(be)));
  return DIT_OK;
}

dit_status cu_timestep_embedding(dit_backend *be, dit_tensor *y, const dit_tensor *t, int dim,
                                     float max_period, float shift, float scale_, bool flip, dit_error *err) {
  const char *op = "cuda timestep_embedding";
  DIT_TRY(cu_check_act(op, "y", y, err));
  DIT_TRY(cu_check_act(op, "t", t, err));
  int64_t N = dit_tensor_numel(t);
  if (t->dtype != DIT_F32 || dim <= 0 || dit_tensor_numel(y) != N * dim || last_dim(y) != dim)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: t F32 [N] and y [N, %d] expected", op, dim);
  LAUNCH(op, "kernel", cuk_timestep(y->data, y->dtype, (const float *)t->data, N, dim, max_period, shift, scale_,
                                    flip, st(be)));
  return DIT_OK;
}

dit_status cu_copy(dit_backend *be, dit_tensor *dst, const dit_tensor *src, dit_error *err) {
  const char *op = "cuda copy";
  if (!dst || !src) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: NULL tensor", op);
  if (dst->device != DIT_DEV_CUDA || src->device != DIT_DEV_CUDA)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: both tensors must be CUDA tensors", op);
  if (!dit_tensor_has_shape(dst, src->ndim, src->shape)) {
    char s1[128], s2[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: dst shape %s != src shape %s", op,
                      dit_shape_str(dst->shape, dst->ndim, s1, sizeof s1),
                      dit_shape_str(src->shape, src->ndim, s2, sizeof s2));
  }
  int64_t n = dit_tensor_numel(src);
  if (n == 0) return DIT_OK;
  if ((!dst->data || !src->data))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: tensor without data", op);
  bool same = dst->dtype == src->dtype;
  if (!same && !(cu_fdtype(dst->dtype) && cu_fdtype(src->dtype)))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s to %s unsupported (float types convert)", op,
                      dit_dtype_name(src->dtype), dit_dtype_name(dst->dtype));
  bool contig = dit_tensor_is_contiguous(dst) && dit_tensor_is_contiguous(src);
  if (contig && same) {
    LAUNCH(op, "cudaMemcpyAsync", cudaMemcpyAsync(dst->data, src->data, (size_t)n * dit_dtype_size(src->dtype),
                                                  cudaMemcpyDeviceToDevice, st(be)));
    return DIT_OK;
  }
  if (contig) {
    LAUNCH(op, "convert kernel", cuk_convert(dst->data, dst->dtype, src->data, src->dtype, n, st(be)));
    return DIT_OK;
  }
  int es = same && !cu_fdtype(src->dtype) ? (int)dit_dtype_size(src->dtype) : 0;
  LAUNCH(op, "strided kernel", cuk_copy(dst->data, dst->dtype, src->data, src->dtype, src->ndim, src->shape,
                                        dst->stride, src->stride, es, st(be)));
  return DIT_OK;
}
