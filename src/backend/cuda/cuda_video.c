/* Host side of the CUDA video ops: conv3d as im2col in chunks of output positions + one
 * cuBLASLt GEMM per chunk (the conv2d fallback path of cuda_gemm.c in three dims; a 1x1x1
 * kernel without padding reads x in place), then the per-channel bias; and pixel_norm.
 * Operands: x and y F32 or BF16; w F32, BF16 or F16 (converted per call to y's dtype when
 * the GEMM cannot take the pair, e.g. an F32 w with a BF16 y); im2col converts x to w's
 * dtype, so a BF16 w with F32 activations multiplies bf16-rounded inputs in fp32. */
#include <string.h>

#include "backend/cuda/cuda_internal.h"

#define CU3_IM2COL_BYTES ((size_t)256 << 20)

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

static dit_status conv3d_check(const char *op, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                               const dit_tensor *b, int pt, int ph, int pw, dit_error *err) {
  DIT_TRY(cu_check_act(op, "x", x, err));
  DIT_TRY(cu_check_act(op, "y", y, err));
  DIT_TRY(cu_check_w(op, "w", w, -1, err));
  if (x->ndim != 5 || w->ndim != 5 || y->ndim != 5 || w->shape[1] != x->shape[1] || pt < 0 || ph < 0 || pw < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x [B,Ci,T,H,W], w [Co,Ci,kt,kh,kw], y 5-D, padding >= 0 expected",
                      op);
  const int64_t kt = w->shape[2], kh = w->shape[3], kw = w->shape[4];
  const int64_t ys[5] = {x->shape[0], w->shape[0], x->shape[2] + 2 * pt - kt + 1, x->shape[3] + 2 * ph - kh + 1,
                         x->shape[4] + 2 * pw - kw + 1};
  if (kt < 1 || kh < 1 || kw < 1 || ys[2] < 1 || ys[3] < 1 || ys[4] < 1 || !dit_tensor_has_shape(y, 5, ys)) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y must be %s", op, dit_shape_str(ys, 5, s, sizeof s));
  }
  if (y->data == x->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: y aliases x", op);
  if (b) DIT_TRY(cu_check_w(op, "b", b, w->shape[0], err));
  return DIT_OK;
}

dit_status cu_conv3d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                     int pt, int ph, int pw, dit_error *err) {
  const char *op = "cuda conv3d";
  cu_impl *im = cu_im(be);
  DIT_TRY(conv3d_check(op, y, x, w, b, pt, ph, pw, err));
  const int64_t B = x->shape[0], Co = w->shape[0];
  const cu_conv3d_geom g = {x->shape[1],      x->shape[2],      x->shape[3],      x->shape[4],
                            y->shape[2],      y->shape[3],      y->shape[4],      (int)w->shape[2],
                            (int)w->shape[3], (int)w->shape[4], pt,               ph,
                            pw};
  const int64_t P = g.To * g.Ho * g.Wo, Kd = g.Ci * g.kt * g.kh * g.kw, N = g.T * g.H * g.W;
  if (B == 0 || P == 0 || Co == 0) return DIT_OK;
  int abt = w->dtype;
  const int dt = y->dtype;
  /* the GEMM takes A/B of abt into D of dt when dt is F32 or both match; else w in dt's dtype */
  const size_t wconv = dt != DIT_F32 && abt != dt ? al256((size_t)(Co * Kd) * dit_dtype_size((dit_dtype)dt)) : 0;
  if (wconv) abt = dt;
  const bool direct = g.kt == 1 && g.kh == 1 && g.kw == 1 && pt == 0 && ph == 0 && pw == 0 && (int)x->dtype == abt;
  const size_t es = dit_dtype_size((dit_dtype)abt);
  int64_t np = P;
  if (!direct && (size_t)(Kd * P) * es > CU3_IM2COL_BYTES) {
    np = (int64_t)(CU3_IM2COL_BYTES / ((size_t)Kd * es)) / 256 * 256;
    if (np < 256) np = 256;
    if (np > P) np = P;
  }
  void *scr = NULL;
  const void *wp = w->data;
  if (!direct || wconv) DIT_TRY(cu_scratch(be, wconv + (direct ? 0 : (size_t)(Kd * np) * es), &scr, err));
  if (wconv) {
    DIT_TRY(cu_check(cuk_convert(scr, abt, w->data, w->dtype, Co * Kd, im->stream), op, "convert w", err));
    wp = scr;
  }
  void *col = direct ? NULL : (char *)scr + wconv;
  const size_t ysz = dit_dtype_size((dit_dtype)dt), xsz = dit_dtype_size(x->dtype);
  for (int64_t bi = 0; bi < B; bi++) {
    const char *xb = (const char *)x->data + (size_t)(bi * g.Ci * N) * xsz;
    char *yb = (char *)y->data + (size_t)(bi * Co * P) * ysz;
    for (int64_t p0 = 0; p0 < P; p0 += np) {
      const int64_t n = P - p0 < np ? P - p0 : np;
      const void *A = xb + (direct ? (size_t)p0 * xsz : 0);
      int64_t lda = P;
      if (!direct) {
        DIT_TRY(cu_check(cuk_im2col3d(col, abt, xb, x->dtype, &g, p0, n, im->stream), op, "im2col", err));
        A = col;
        lda = n;
      }
      /* column-major: D[pixel, co] = A[pixel, k] W[k, co] with W = w's rows [Co, Kd] */
      DIT_TRY(cu_gemm(be, op, 0, 0, n, Co, Kd, 1.0f, A, lda, wp, Kd, abt, yb + (size_t)p0 * ysz, P, dt, NULL,
                      CUBLASLT_EPILOGUE_DEFAULT, err));
    }
  }
  if (b) DIT_TRY(cu_check(cuk_bias_channel(y->data, dt, B, Co, P, b->data, b->dtype, im->stream), op, "bias", err));
  return DIT_OK;
}

dit_status cu_pixel_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, float eps, bool silu, dit_error *err) {
  const char *op = "cuda pixel_norm";
  DIT_TRY(cu_check_xy(op, x, y, err));
  if (x->ndim < 2) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, C, ...]", op);
  if (!(eps >= 0.0f)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: eps %g is not >= 0", op, (double)eps);
  const int64_t B = x->shape[0], C = x->shape[1], HW = (B > 0 && C > 0) ? dit_tensor_numel(x) / (B * C) : 0;
  if (B > 65535) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: batch %lld over 65535", op, (long long)B);
  DIT_TRY(cu_check(cuk_pixel_norm(y->data, x->data, x->dtype, B, C, HW, eps, silu, cu_im(be)->stream), op, "kernel",
                   err));
  return DIT_OK;
}
