/* Normalisation ops of the CPU backend: RMSNorm, LayerNorm (biased variance) and
 * GroupNorm (optionally fused with SiLU). Statistics are accumulated in double, the
 * normalised values computed in fp32; rows/groups are spread over the threads. */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

dit_status cpu_check_rowwise(const char *op, dit_tensor *y, const dit_tensor *x, int64_t *rows, int64_t *D,
                             dit_error *err) {
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  DIT_TRY(cpu_check_same_shape(op, "y", y, "x", x, err));
  if (x->ndim < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must have at least 1 dim", op);
  *D = x->shape[x->ndim - 1];
  *rows = *D > 0 ? dit_tensor_numel(x) / *D : 0;
  return DIT_OK;
}

float cpu_rms_inv(const float *xr, int64_t D, float eps) {
  /* four partial sums in double: independent chains (the loop was add-latency bound) */
  double s4[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= D; i += 4)
    for (int j = 0; j < 4; j++) s4[j] += (double)xr[i + j] * xr[i + j];
  for (; i < D; i++) s4[0] += (double)xr[i] * xr[i];
  double ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  return (float)(1.0 / sqrt(ss / (double)D + (double)eps));
}

float *cpu_weight_f32(const dit_tensor *w, int64_t D, bool *bad) {
  if (!w) return NULL;
  float *f = malloc(sizeof(float) * (size_t)(D ? D : 1));
  if (!f) *bad = true;
  else cpu_ld_row(f, w->data, w->dtype, 0, D);
  return f;
}

dit_status cpu_rms_norm_scaled(dit_backend *be, const char *op, dit_tensor *y, const dit_tensor *x,
                               const dit_tensor *w, const dit_tensor *scale, float eps, dit_error *err) {
  int64_t rows, D;
  DIT_TRY(cpu_check_rowwise(op, y, x, &rows, &D, err));
  if (w) DIT_TRY(cpu_check_w(op, "w", w, D, err));
  DIT_TRY(cpu_check_bd(op, "scale", x, scale, err));
  int64_t S = scale ? x->shape[1] : 1;
  bool bad = false;
  float *wf = cpu_weight_f32(w, D, &bad); /* the weight as fp32 once, not converted per element */
  if (bad) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for the weight", op);
  const float *xd = x->data, *sd = scale ? scale->data : NULL;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++)
    cpu_norm_mod_row(yd + r * D, xd + r * D, wf, sd ? sd + (r / S) * D : NULL, D, eps);
  free(wf);
  return DIT_OK;
}

dit_status cpu_rms_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, float eps,
                        dit_error *err) {
  return cpu_rms_norm_scaled(be, "rms_norm", y, x, w, NULL, eps, err);
}

dit_status cpu_layer_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                          const dit_tensor *b, float eps, dit_error *err) {
  int64_t rows, D;
  DIT_TRY(cpu_check_rowwise("layer_norm", y, x, &rows, &D, err));
  if (w) DIT_TRY(cpu_check_w("layer_norm", "w", w, D, err));
  if (b) DIT_TRY(cpu_check_w("layer_norm", "b", b, D, err));
  const float *xs = x->data;
  float *ys = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = xs + r * D;
    float *yr = ys + r * D;
    double s = 0;
    for (int64_t i = 0; i < D; i++) s += xr[i];
    double mean = s / (double)D, ss = 0;
    for (int64_t i = 0; i < D; i++) ss += ((double)xr[i] - mean) * ((double)xr[i] - mean);
    float inv = (float)(1.0 / sqrt(ss / (double)D + (double)eps));
    float mf = (float)mean;
    for (int64_t i = 0; i < D; i++) {
      float v = (xr[i] - mf) * inv;
      if (w) v *= cpu_ld(w->data, w->dtype, i);
      if (b) v += cpu_ld(b->data, b->dtype, i);
      yr[i] = v;
    }
  }
  return DIT_OK;
}

dit_status cpu_group_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, int groups, const dit_tensor *w,
                          const dit_tensor *b, float eps, bool silu, dit_error *err) {
  DIT_TRY(cpu_check_act("group_norm", "x", x, err));
  DIT_TRY(cpu_check_act("group_norm", "y", y, err));
  DIT_TRY(cpu_check_same_shape("group_norm", "y", y, "x", x, err));
  if (x->ndim < 2) return dit_errorf(err, DIT_ERR_INVALID_ARG, "group_norm: x must be [B, C, ...]");
  int64_t B = x->shape[0], C = x->shape[1];
  if (groups <= 0 || C % groups != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "group_norm: %lld channels not divisible into %d groups",
                      (long long)C, groups);
  if (w) DIT_TRY(cpu_check_w("group_norm", "w", w, C, err));
  if (b) DIT_TRY(cpu_check_w("group_norm", "b", b, C, err));
  int64_t HW = (B * C) > 0 ? dit_tensor_numel(x) / (B * C) : 0, cpg = C / groups;
  int64_t n = cpg * HW;
  const float *xs = x->data;
  float *ys = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(dynamic, 1)
  for (int64_t bg = 0; bg < B * groups; bg++) {
    const float *xr = xs + bg * n;
    float *yr = ys + bg * n;
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += xr[i];
    double mean = n ? s / (double)n : 0;
    for (int64_t i = 0; i < n; i++) ss += ((double)xr[i] - mean) * ((double)xr[i] - mean);
    float inv = (float)(1.0 / sqrt((n ? ss / (double)n : 0) + (double)eps)), mf = (float)mean;
    int64_t c0 = (bg % groups) * cpg;
    for (int64_t c = 0; c < cpg; c++) {
      float ga = w ? cpu_ld(w->data, w->dtype, c0 + c) : 1.0f;
      float be_ = b ? cpu_ld(b->data, b->dtype, c0 + c) : 0.0f;
      const float *xc = xr + c * HW;
      float *yc = yr + c * HW;
      for (int64_t i = 0; i < HW; i++) {
        float v = (xc[i] - mf) * inv * ga + be_;
        yc[i] = silu ? v / (1.0f + expf(-v)) : v;
      }
    }
  }
  return DIT_OK;
}

/* Per position over the C channels of x [B, C, ...], y = x / d * scale * w[c] (+ SiLU), where d
 * is max(||x||, 1e-12) and scale sqrt(C) for channel_rms_norm (eps < 0: F.normalize(x, dim=1) *
 * sqrt(C) * w), and d = sqrt(mean_c(x^2) + eps), scale 1, no w for pixel_norm. The sums of
 * squares of a chunk of positions accumulate channel by channel (unit stride), in double. */
static dit_status position_norm(dit_backend *be, const char *op, dit_tensor *y, const dit_tensor *x,
                                const dit_tensor *w, float eps, bool silu, dit_error *err) {
  enum { CHUNK = 256 };
  DIT_TRY(cpu_check_act(op, "x", x, err));
  DIT_TRY(cpu_check_act(op, "y", y, err));
  DIT_TRY(cpu_check_same_shape(op, "y", y, "x", x, err));
  if (x->ndim < 2) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: x must be [B, C, ...]", op);
  const int64_t B = x->shape[0], C = x->shape[1];
  if (w) DIT_TRY(cpu_check_w(op, "w", w, C, err));
  const int64_t HW = (B * C) > 0 ? dit_tensor_numel(x) / (B * C) : 0, nchunk = (HW + CHUNK - 1) / CHUNK;
  const bool pixel = eps >= 0.0f;
  const float scale = pixel ? 1.0f : sqrtf((float)C);
  const float *xs = x->data;
  float *ys = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t bc = 0; bc < B * nchunk; bc++) {
    const int64_t b = bc / nchunk, p0 = (bc % nchunk) * CHUNK, np = HW - p0 < CHUNK ? HW - p0 : CHUNK;
    const float *xb = xs + b * C * HW + p0;
    float *yb = ys + b * C * HW + p0;
    double ss[CHUNK];
    float d[CHUNK];
    for (int64_t p = 0; p < np; p++) ss[p] = 0;
    for (int64_t c = 0; c < C; c++)
      for (int64_t p = 0; p < np; p++) ss[p] += (double)xb[c * HW + p] * xb[c * HW + p];
    for (int64_t p = 0; p < np; p++) {
      const float n = pixel ? (float)sqrt(ss[p] / (double)C + (double)eps) : (float)sqrt(ss[p]);
      d[p] = pixel || n > 1e-12f ? n : 1e-12f;
    }
    for (int64_t c = 0; c < C; c++) {
      const float g = w ? cpu_ld(w->data, w->dtype, c) : 1.0f;
      for (int64_t p = 0; p < np; p++) {
        const float v = xb[c * HW + p] / d[p] * scale * g;
        yb[c * HW + p] = silu ? v / (1.0f + expf(-v)) : v;
      }
    }
  }
  return DIT_OK;
}

dit_status cpu_channel_rms_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, bool silu,
                                dit_error *err) {
  return position_norm(be, "channel_rms_norm", y, x, w, -1.0f, silu, err);
}

dit_status cpu_pixel_norm(dit_backend *be, dit_tensor *y, const dit_tensor *x, float eps, bool silu, dit_error *err) {
  if (!(eps >= 0.0f)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "pixel_norm: eps %g is not >= 0", (double)eps);
  return position_norm(be, "pixel_norm", y, x, NULL, eps, silu, err);
}
