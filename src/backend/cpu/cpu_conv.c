/* 2-D and 3-D convolution on the CPU backend as im2col tiles fed to the GEMM micro-kernels
 * (conv2d is the 3-D case with one frame and a one-frame kernel). Each thread takes tiles of
 * up to 256 pixels of one output row (of one output frame) and builds their im2col matrix
 * directly in the kernels' packed panel layout (per kernel tap, a zero-bordered copy of an
 * input row segment), in L2; then y[co][pixels] = w[co][:] . col lands directly in NC(T)HW.
 * The weight is upcast to fp32 once per call (one layer, never the model) and shared by the
 * threads. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_internal.h"

/* The frame dims (T, kt, To, pt) are 1, 1, 1, 0 for conv2d; stride applies to rows and columns. */
typedef struct conv_geom {
  int64_t Ci, T, H, W, kt, kh, kw, To, Ho, Wo, Co;
  int stride, pt, ph, pw;
} conv_geom;

/* Fused im2col + pack for output pixels (oz, oy, ox0 .. ox0+tw) of one item x [Ci, T, H, W]:
 * panel p holds wp[p*K*nr + k*nr + j] = input under kernel tap k for pixel ox0 + p*nr + j
 * (zero padding, zero beyond tw), i.e. the GEMM's packed right operand. */
static void im2col_pack(float *wp, const float *x, const conv_geom *g, int64_t oz, int64_t oy, int64_t ox0,
                        int64_t tw, int nr) {
  int64_t kk = g->kh * g->kw, K = g->Ci * g->kt * kk, np = (tw + nr - 1) / nr;
  for (int64_t p = 0; p < np; p++) {
    int64_t pw = tw - p * nr < nr ? tw - p * nr : nr, oxa = ox0 + p * nr;
    float *dst = wp + p * K * nr;
    for (int64_t k = 0; k < K; k++) {
      int64_t ci = k / (g->kt * kk), kz = (k / kk) % g->kt, ky = (k / g->kw) % g->kh, kx = k % g->kw;
      int64_t iz = oz - g->pt + kz, iy = oy * g->stride - g->ph + ky;
      float *d = dst + k * nr;
      if (iz < 0 || iz >= g->T || iy < 0 || iy >= g->H) {
        memset(d, 0, sizeof(float) * (size_t)nr);
        continue;
      }
      const float *src = x + ((ci * g->T + iz) * g->H + iy) * g->W;
      if (g->stride == 1) {
        /* j with 0 <= oxa + j - pad + kx < W, clipped to [0, pw) */
        int64_t lo = g->pw - kx - oxa, hi = g->W + g->pw - kx - oxa;
        if (lo < 0) lo = 0;
        if (hi > pw) hi = pw;
        if (hi < lo) hi = lo;
        memset(d, 0, sizeof(float) * (size_t)lo);
        if (hi > lo) memcpy(d + lo, src + oxa + lo - g->pw + kx, sizeof(float) * (size_t)(hi - lo));
        memset(d + hi, 0, sizeof(float) * (size_t)(nr - hi));
      } else {
        for (int64_t j = 0; j < nr; j++) {
          int64_t ix = (oxa + j) * g->stride - g->pw + kx;
          d[j] = (j >= pw || ix < 0 || ix >= g->W) ? 0.0f : src[ix];
        }
      }
    }
  }
}

/* y[co][oz, oy, ox0 .. ox0+tw) = wf[co] . col for every co, K blocked by 256 (C tiles in y). */
static void conv_tile(const cpu_gemm_path *P, const conv_geom *g, const float *wf, const float *wp, float *y,
                      int64_t tw) {
  int64_t K = g->Ci * g->kt * g->kh * g->kw, HWo = g->To * g->Ho * g->Wo;
  for (int64_t k0 = 0; k0 < K; k0 += 256) {
    int64_t kc = K - k0 < 256 ? K - k0 : 256;
    for (int64_t co = 0; co < g->Co; co += P->mr) {
      int mr = (int)(g->Co - co < P->mr ? g->Co - co : P->mr);
      for (int64_t j = 0; j < tw; j += P->nr) {
        int nr = (int)(tw - j < P->nr ? tw - j : P->nr);
        /* panel j / nr, rows k0 .. k0+kc: panels are K*nr apart, row k at k*nr */
        P->kern(mr, nr, kc, wf + co * K + k0, K, wp + (j / P->nr) * K * P->nr + k0 * P->nr, y + co * HWo + j, HWo,
                k0 > 0);
      }
    }
  }
}

#if defined(DIT_CPU_X86)
/* bf16 precision: the tile's fp32 panels (wp) become bf16 k-pair panels (bp, Kp/2 pairs
 * each), multiplied by the weight rounded to bf16 rows of Kp with vdpbf16ps. */
static void conv_tile_bf16(const cpu_gemm_bf16_path *B, const conv_geom *g, const uint16_t *wb, const float *wp,
                           uint16_t *bp, float *y, int64_t tw) {
  int64_t K = g->Ci * g->kt * g->kh * g->kw, Kp = (K + 1) & ~(int64_t)1, HWo = g->To * g->Ho * g->Wo,
          np = (tw + B->nr - 1) / B->nr;
  for (int64_t p = 0; p < np; p++) B->interleave_panel(bp + p * Kp * B->nr, wp + p * K * B->nr, K);
  for (int64_t k0 = 0; k0 < K; k0 += 512) {
    int64_t kc = K - k0 < 512 ? K - k0 : 512;
    for (int64_t co = 0; co < g->Co; co += B->mr) {
      int mr = (int)(g->Co - co < B->mr ? g->Co - co : B->mr);
      for (int64_t j = 0; j < tw; j += B->nr) {
        int nr = (int)(tw - j < B->nr ? tw - j : B->nr);
        B->kern(mr, nr, (kc + 1) / 2, wb + co * Kp + k0, Kp, bp + (j / B->nr) * Kp * B->nr + k0 * B->nr,
                y + co * HWo + j, HWo, k0 > 0);
      }
    }
  }
}
#endif

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

static dit_status conv3d_check(dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b, int pt,
                               int ph, int pw, dit_error *err) {
  DIT_TRY(cpu_check_act("conv3d", "x", x, err));
  DIT_TRY(cpu_check_act("conv3d", "y", y, err));
  DIT_TRY(cpu_check_w("conv3d", "w", w, -1, err));
  if (x->ndim != 5 || w->ndim != 5 || y->ndim != 5)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv3d: x, w and y must be 5-D");
  if (pt < 0 || ph < 0 || pw < 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv3d: bad padding (%d, %d, %d)", pt, ph, pw);
  const int64_t B = x->shape[0], Ci = x->shape[1], T = x->shape[2], H = x->shape[3], W = x->shape[4];
  const int64_t Co = w->shape[0], kt = w->shape[2], kh = w->shape[3], kw = w->shape[4];
  if (w->shape[1] != Ci)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv3d: w has %lld input channels, x has %lld",
                      (long long)w->shape[1], (long long)Ci);
  if (kt < 1 || kh < 1 || kw < 1 || T + 2 * pt < kt || H + 2 * ph < kh || W + 2 * pw < kw)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv3d: kernel %lldx%lldx%lld empty or larger than padded input",
                      (long long)kt, (long long)kh, (long long)kw);
  const int64_t ys[5] = {B, Co, T + 2 * pt - kt + 1, H + 2 * ph - kh + 1, W + 2 * pw - kw + 1};
  if (!dit_tensor_has_shape(y, 5, ys)) {
    char s[128], e[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv3d: y %s, expected %s",
                      dit_shape_str(y->shape, y->ndim, s, sizeof s), dit_shape_str(ys, 5, e, sizeof e));
  }
  if (y->data == x->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "conv3d: y aliases x");
  if (b) DIT_TRY(cpu_check_w("conv3d", "b", b, Co, err));
  return DIT_OK;
}

/* The convolution of checked operands: B items of x [Ci, T, H, W] into y [Co, To, Ho, Wo]. */
static dit_status conv_run(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                           const dit_tensor *b, int64_t B, const conv_geom *gp, const char *op, dit_error *err) {
  const conv_geom g = *gp;
  const cpu_gemm_path *P = cpu_gemm_path_for(be);
  int64_t K = g.Ci * g.kt * g.kh * g.kw, HWo = g.To * g.Ho * g.Wo;
  /* tile: up to TP pixels of one output row, its packed im2col (K x TP floats) ~1 MiB (L2) */
  int64_t TP = (262144 / (K > 0 ? K : 1)) / P->nr * P->nr;
  if (TP < P->nr) TP = P->nr;
  if (TP > 256) TP = 256;
  int64_t tpr = (g.Wo + TP - 1) / TP, rows = g.To * g.Ho, tiles = B * rows * tpr;
  int nt = be->n_threads < 1 ? 1 : be->n_threads;
  if (tiles < nt) nt = (int)tiles;
  size_t per = ((size_t)(K * (TP + P->nr)) + 15) & ~(size_t)15;
  /* bf16 precision (AVX512-BF16 only): weight rows and per-thread panels in bf16 */
  const cpu_gemm_bf16_path *BP = NULL;
  int64_t Kp = (K + 1) & ~(int64_t)1;
  size_t bper = ((size_t)((TP + P->nr) * Kp) + 31) & ~(size_t)31;
#if defined(DIT_CPU_X86)
  if (cpu_simd_bf16(be) && cpu_precision(be) == DIT_CPU_PRECISION_BF16 && P->nr == cpu_gemm_bf16_avx512.nr)
    BP = &cpu_gemm_bf16_avx512;
#endif
  /* the weights as fp32 rows and the per-thread im2col panels; with BP, both in bf16 too */
  const size_t bytes[4] = {sizeof(float) * (size_t)(g.Co * K + 1), sizeof(float) * per * (size_t)nt,
                           BP ? 2 * (size_t)(g.Co * Kp + 1) : 0, BP ? 2 * bper * (size_t)nt : 0};
  void *part[4];
  DIT_TRY(cpu_scratch_take(be, 4, bytes, part, op, err));
  float *wf = part[0], *buf = part[1];
  uint16_t *wb = part[2], *bbuf = part[3];
  /* portable bf16 precision: operands rounded to bf16 values, then the fp32 kernel */
  bool rnd = !BP && cpu_precision(be) == DIT_CPU_PRECISION_BF16;
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t co = 0; co < g.Co; co++) {
      cpu_ld_row(wf + co * K, w->data, w->dtype, co * K, K);
      if (BP) BP->round_rows(wb + co * Kp, Kp, wf + co * K, K, 1, K);
      else if (rnd)
        for (int64_t k = 0; k < K; k++) wf[co * K + k] = dit_bf16_to_f32(dit_f32_to_bf16(wf[co * K + k]));
    }
    float *wp = buf + per * (size_t)omp_get_thread_num();
    uint16_t *bp = BP ? bbuf + bper * (size_t)omp_get_thread_num() : NULL;
    (void)bp; /* the bf16 tiles are x86-only */
#pragma omp for schedule(dynamic, 4)
    for (int64_t t = 0; t < tiles; t++) {
      int64_t bi = t / (rows * tpr), row = (t / tpr) % rows, ox0 = (t % tpr) * TP;
      int64_t oz = row / g.Ho, oy = row % g.Ho;
      int64_t tw = g.Wo - ox0 < TP ? g.Wo - ox0 : TP;
      float *yt = yd + bi * g.Co * HWo + row * g.Wo + ox0;
      im2col_pack(wp, xd + bi * g.Ci * g.T * g.H * g.W, &g, oz, oy, ox0, tw, P->nr);
      if (rnd)
        for (int64_t e = 0, ne = (tw + P->nr - 1) / P->nr * P->nr * K; e < ne; e++)
          wp[e] = dit_bf16_to_f32(dit_f32_to_bf16(wp[e]));
#if defined(DIT_CPU_X86)
      if (BP) conv_tile_bf16(BP, &g, wb, wp, bp, yt, tw);
      else
#endif
        conv_tile(P, &g, wf, wp, yt, tw);
      if (b)
        for (int64_t co = 0; co < g.Co; co++) {
          float bv = cpu_ld(b->data, b->dtype, co), *yr = yt + co * HWo;
          for (int64_t j = 0; j < tw; j++) yr[j] += bv;
        }
    }
  }
  return DIT_OK;
}

dit_status cpu_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                      const dit_tensor *b, int stride, int pad, dit_error *err) {
  DIT_TRY(conv_check(y, x, w, b, stride, pad, err));
  if (dit_tensor_numel(y) == 0) return DIT_OK;
  const conv_geom g = {x->shape[1], 1, x->shape[2], x->shape[3], 1, w->shape[2], w->shape[3], 1, y->shape[2],
                       y->shape[3], w->shape[0], stride, 0, pad, pad};
  return conv_run(be, y, x, w, b, x->shape[0], &g, "conv2d", err);
}

dit_status cpu_conv3d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                      const dit_tensor *b, int pt, int ph, int pw, dit_error *err) {
  DIT_TRY(conv3d_check(y, x, w, b, pt, ph, pw, err));
  if (dit_tensor_numel(y) == 0) return DIT_OK;
  const conv_geom g = {x->shape[1], x->shape[2], x->shape[3], x->shape[4], w->shape[2], w->shape[3], w->shape[4],
                       y->shape[2], y->shape[3], y->shape[4], w->shape[0], 1, pt, ph, pw};
  return conv_run(be, y, x, w, b, x->shape[0], &g, "conv3d", err);
}
