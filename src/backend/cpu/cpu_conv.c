/* 2-D convolution on the CPU backend as im2col tiles fed to the GEMM core: for a tile
 * of output pixels, col[p][ci*kh*kw + ky*kw + kx] gathers the zero-padded input patch,
 * then tmp[p][co] = col . w^T + b (w read in its stored dtype), transposed into NCHW. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

static void im2col(float *col, const float *x, int64_t Ci, int64_t H, int64_t W, int64_t kh, int64_t kw,
                   int stride, int pad, int64_t Wo, int64_t p0, int64_t np, int nt) {
  int64_t K = Ci * kh * kw;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t p = 0; p < np; p++) {
    int64_t oy = (p0 + p) / Wo, ox = (p0 + p) % Wo;
    float *cr = col + p * K;
    for (int64_t ci = 0; ci < Ci; ci++) {
      const float *xc = x + ci * H * W;
      for (int64_t ky = 0; ky < kh; ky++) {
        int64_t iy = oy * stride - pad + ky;
        float *cc = cr + (ci * kh + ky) * kw;
        if (iy < 0 || iy >= H) {
          for (int64_t kx = 0; kx < kw; kx++) cc[kx] = 0.0f;
          continue;
        }
        for (int64_t kx = 0; kx < kw; kx++) {
          int64_t ix = ox * stride - pad + kx;
          cc[kx] = (ix < 0 || ix >= W) ? 0.0f : xc[iy * W + ix];
        }
      }
    }
  }
}

dit_status cpu_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                      const dit_tensor *b, int stride, int pad, dit_error *err) {
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
  int64_t Ho = (H + 2 * pad - kh) / stride + 1, Wo = (W + 2 * pad - kw) / stride + 1;
  if (H + 2 * pad < kh || W + 2 * pad < kw)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: kernel %lldx%lld larger than padded input",
                      (long long)kh, (long long)kw);
  int64_t ys[4] = {B, Co, Ho, Wo};
  if (!dit_tensor_has_shape(y, 4, ys)) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv2d: y %s, expected [%lld, %lld, %lld, %lld]",
                      dit_shape_str(y->shape, y->ndim, s, sizeof s), (long long)B, (long long)Co,
                      (long long)Ho, (long long)Wo);
  }
  if (b) DIT_TRY(cpu_check_w("conv2d", "b", b, Co, err));
  int64_t K = Ci * kh * kw, HWo = Ho * Wo;
  /* pixel tile: col (P x K) within ~8 MiB, at least 64 pixels */
  int64_t P = (int64_t)(8u << 20) / (4 * (K > 0 ? K : 1));
  if (P < 64) P = 64;
  if (P > HWo) P = HWo;
  float *col = malloc(sizeof(float) * (size_t)(P * K + P * Co));
  if (!col) return dit_errorf(err, DIT_ERR_NOMEM, "conv2d: out of memory for im2col tile");
  float *tmp = col + P * K;
  dit_status st = DIT_OK;
  const float *xd = x->data;
  float *yd = y->data;
  int nt = be->n_threads < 1 ? 1 : be->n_threads;
  for (int64_t bi = 0; bi < B && st == DIT_OK; bi++) {
    for (int64_t p0 = 0; p0 < HWo; p0 += P) {
      int64_t np = HWo - p0 < P ? HWo - p0 : P;
      im2col(col, xd + bi * Ci * H * W, Ci, H, W, kh, kw, stride, pad, Wo, p0, np, nt);
      st = cpu_gemm(be, np, Co, K, col, K, w->data, w->dtype, K, b ? b->data : NULL, b ? b->dtype : DIT_F32,
                    DIT_ACT_NONE, tmp, Co, err);
      if (st != DIT_OK) break;
      float *yb = yd + bi * Co * HWo + p0;
#pragma omp parallel for num_threads(nt) schedule(static)
      for (int64_t co = 0; co < Co; co++)
        for (int64_t p = 0; p < np; p++) yb[co * HWo + p] = tmp[p * Co + co];
    }
  }
  free(col);
  return st;
}
