/* 2-D convolution on the CPU backend as im2col tiles fed to the GEMM core. For a tile of
 * whole output rows, col[k][p] (k = ci*kh*kw + ky*kw + kx, p = output pixel) is built
 * K-major, so every row of col is a shifted, zero-bordered copy of an input row; then
 * y[co][p] = sum_k w[co][k] col[k][p] lands directly in NCHW (cpu_gemm_kn). The weight
 * is upcast to fp32 once per call (one layer, never the model). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

typedef struct conv_geom {
  int64_t Ci, H, W, kh, kw, Wo;
  int stride, pad;
} conv_geom;

/* col[k][r*Wo + ox] for output rows oy0 .. oy0+nrow of one image x [Ci, H, W]. */
static void im2col_kn(float *col, const float *x, const conv_geom *g, int64_t oy0, int64_t nrow, int nt) {
  int64_t K = g->Ci * g->kh * g->kw, np = nrow * g->Wo, Wo = g->Wo;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t k = 0; k < K; k++) {
    int64_t ci = k / (g->kh * g->kw), ky = (k / g->kw) % g->kh, kx = k % g->kw;
    float *dst = col + k * np;
    for (int64_t r = 0; r < nrow; r++) {
      int64_t iy = (oy0 + r) * g->stride - g->pad + ky;
      float *d = dst + r * Wo;
      if (iy < 0 || iy >= g->H) {
        memset(d, 0, sizeof(float) * (size_t)Wo);
        continue;
      }
      const float *src = x + (ci * g->H + iy) * g->W;
      if (g->stride == 1) {
        int64_t lo = g->pad - kx, hi = g->W + g->pad - kx; /* ox with 0 <= ox - pad + kx < W */
        if (lo < 0) lo = 0;
        if (hi > Wo) hi = Wo;
        if (hi < lo) hi = lo;
        memset(d, 0, sizeof(float) * (size_t)lo);
        if (hi > lo) memcpy(d + lo, src + lo - g->pad + kx, sizeof(float) * (size_t)(hi - lo));
        memset(d + hi, 0, sizeof(float) * (size_t)(Wo - hi));
      } else {
        for (int64_t ox = 0; ox < Wo; ox++) {
          int64_t ix = ox * g->stride - g->pad + kx;
          d[ox] = (ix < 0 || ix >= g->W) ? 0.0f : src[ix];
        }
      }
    }
  }
}

static dit_status conv_check(dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                             int stride, int pad, dit_error *err) {
  DIT_TRY(cpu_check_act("conv2d", "x", x, err));
  DIT_TRY(cpu_check_act("conv2d", "y", y, err));
  DIT_TRY(cpu_check_w("conv2d", "w", w, -1, err));
  if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: x, w and y must be 4-D");
  if (stride < 1 || pad < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: bad stride %d or pad %d", stride, pad);
  int64_t B = x->shape[0], Ci = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t Co = w->shape[0], kh = w->shape[2], kw = w->shape[3];
  if (w->shape[1] != Ci)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: w has %lld input channels, x has %lld",
                      (long long)w->shape[1], (long long)Ci);
  if (kh < 1 || kw < 1 || H + 2 * pad < kh || W + 2 * pad < kw)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: kernel %lldx%lld empty or larger than padded input",
                      (long long)kh, (long long)kw);
  int64_t Ho = (H + 2 * pad - kh) / stride + 1, Wo = (W + 2 * pad - kw) / stride + 1;
  int64_t ys[4] = {B, Co, Ho, Wo};
  if (!dit_tensor_has_shape(y, 4, ys)) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: y %s, expected [%lld, %lld, %lld, %lld]",
                      dit_shape_str(y->shape, y->ndim, s, sizeof s), (long long)B, (long long)Co,
                      (long long)Ho, (long long)Wo);
  }
  if (b) DIT_TRY(cpu_check_w("conv2d", "b", b, Co, err));
  return DIT_OK;
}

dit_status cpu_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                      const dit_tensor *b, int stride, int pad, dit_error *err) {
  DIT_TRY(conv_check(y, x, w, b, stride, pad, err));
  int64_t B = x->shape[0], Co = w->shape[0], Ho = y->shape[2];
  conv_geom g = {x->shape[1], x->shape[2], x->shape[3], w->shape[2], w->shape[3], y->shape[3], stride, pad};
  int64_t K = g.Ci * g.kh * g.kw, HWo = Ho * g.Wo;
  if (dit_tensor_numel(y) == 0) return DIT_OK;
  /* tile of whole output rows: col (K x rows*Wo floats) within ~8 MiB, at least one row */
  int64_t R = (int64_t)(2u << 20) / (K * g.Wo > 0 ? K * g.Wo : 1);
  if (R < 1) R = 1;
  if (R > Ho) R = Ho;
  float *wf = malloc(sizeof(float) * (size_t)(Co * K + 1));
  float *col = malloc(sizeof(float) * (size_t)(K * R * g.Wo + 1));
  if (!wf || !col) {
    free(wf);
    free(col);
    return dit_errorf(err, DIT_ERR_NOMEM, "conv2d: out of memory for the im2col tile");
  }
  int nt = be->n_threads < 1 ? 1 : be->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t co = 0; co < Co; co++) cpu_ld_row(wf + co * K, w->data, w->dtype, co * K, K);
  const float *xd = x->data;
  float *yd = y->data;
  dit_status st = DIT_OK;
  for (int64_t bi = 0; bi < B && st == DIT_OK; bi++) {
    for (int64_t oy0 = 0; oy0 < Ho && st == DIT_OK; oy0 += R) {
      int64_t nrow = Ho - oy0 < R ? Ho - oy0 : R, np = nrow * g.Wo;
      im2col_kn(col, xd + bi * g.Ci * g.H * g.W, &g, oy0, nrow, nt);
      st = cpu_gemm_kn(be, Co, np, K, wf, K, col, np, yd + bi * Co * HWo + oy0 * g.Wo, HWo, err);
    }
  }
  if (st == DIT_OK && b) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < B * Co; r++) {
      float bv = cpu_ld(b->data, b->dtype, r % Co), *yr = yd + r * HWo;
      for (int64_t p = 0; p < HWo; p++) yr[p] += bv;
    }
  }
  free(wf);
  free(col);
  if (st != DIT_OK) dit_error_prefix(err, "conv2d");
  return st;
}
