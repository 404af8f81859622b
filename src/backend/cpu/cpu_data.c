/* Data-movement ops of the CPU backend: embedding lookup, nearest 2x upsample, the
 * sinusoidal timestep embedding (diffusers' get_timestep_embedding, in fp32 like
 * torch) and the strided, dtype-converting copy used for permutes, slices and concats. */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/quant.h"

dit_status cpu_embedding(dit_backend *be, dit_tensor *y, const dit_tensor *table, const dit_tensor *ids,
                         dit_error *err) {
  DIT_TRY(dit_check_matrix("embedding", "table", table, DIT_DEV_CPU, err));
  DIT_TRY(cpu_check_act("embedding", "y", y, err));
  if (!ids || (ids->dtype != DIT_I32 && ids->dtype != DIT_I64) || !dit_tensor_is_contiguous(ids))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "embedding: ids must be a contiguous I32 or I64 tensor");
  if (table->ndim != 2) return dit_errorf(err, DIT_ERR_INVALID_ARG, "embedding: table must be [V, D]");
  int64_t V = table->shape[0], D = table->shape[1], N = dit_tensor_numel(ids);
  if (dit_tensor_numel(y) != N * D || y->ndim < 1 || y->shape[y->ndim - 1] != D) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "embedding: y %s, expected [%lld, %lld]",
                      dit_shape_str(y->shape, y->ndim, s, sizeof s), (long long)N, (long long)D);
  }
  for (int64_t n = 0; n < N; n++) {
    int64_t id = ids->dtype == DIT_I32 ? ((const int32_t *)ids->data)[n] : ((const int64_t *)ids->data)[n];
    if (id < 0 || id >= V)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "embedding: id %lld at position %lld outside [0, %lld)",
                        (long long)id, (long long)n, (long long)V);
  }
  float *yd = y->data;
  uint64_t row = 0; /* quantized tables: bytes per row, whole blocks (checked above) */
  bool blocks = dit_dtype_is_quant(table->dtype) && dit_dtype_row_bytes(table->dtype, (uint64_t)D, &row);
  const float ws = dit_tensor_scale(table);
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t n = 0; n < N; n++) {
    int64_t id = ids->dtype == DIT_I32 ? ((const int32_t *)ids->data)[n] : ((const int64_t *)ids->data)[n];
    if (blocks) {
      dit_dequant_row(table->dtype, (const char *)table->data + (uint64_t)id * row, yd + n * D, D);
      if (ws != 1.0f)
        for (int64_t d = 0; d < D; d++) yd[n * D + d] *= ws;
    } else
      cpu_ld_row(yd + n * D, table->data, table->dtype, id * D, D);
  }
  return DIT_OK;
}

dit_status cpu_upsample2x(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  DIT_TRY(cpu_check_act("upsample2x", "x", x, err));
  DIT_TRY(cpu_check_act("upsample2x", "y", y, err));
  if (x->ndim != 4) return dit_errorf(err, DIT_ERR_INVALID_ARG, "upsample2x: x must be [B, C, H, W]");
  int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t ys[4] = {B, C, 2 * H, 2 * W};
  if (!dit_tensor_has_shape(y, 4, ys)) {
    char s[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "upsample2x: y %s, expected [%lld, %lld, %lld, %lld]",
                      dit_shape_str(y->shape, y->ndim, s, sizeof s), (long long)B, (long long)C,
                      (long long)(2 * H), (long long)(2 * W));
  }
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < B * C * H; r++) {
    const float *xr = xd + r * W;
    float *y0 = yd + r * 4 * W, *y1 = y0 + 2 * W;
    for (int64_t i = 0; i < W; i++) y0[2 * i] = y0[2 * i + 1] = xr[i];
    memcpy(y1, y0, sizeof(float) * (size_t)(2 * W));
  }
  return DIT_OK;
}

dit_status cpu_timestep_embedding(dit_backend *be, dit_tensor *y, const dit_tensor *t, int dim,
                                  float max_period, float shift, float scale, bool flip_sin_to_cos,
                                  dit_error *err) {
  DIT_TRY(cpu_check_act("timestep_embedding", "t", t, err));
  DIT_TRY(cpu_check_act("timestep_embedding", "y", y, err));
  if (t->ndim != 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "timestep_embedding: t must be 1-D [N]");
  int64_t N = t->shape[0], half = dim / 2;
  int64_t ys[2] = {N, dim};
  if (dim <= 0 || !dit_tensor_has_shape(y, 2, ys))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "timestep_embedding: y must be [%lld, %d]", (long long)N, dim);
  if (half > 0 && (float)half - shift == 0.0f)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "timestep_embedding: half dim equals shift (division by zero)");
  const float *td = t->data;
  float *yd = y->data;
  /* Same fp32 operation order as diffusers: exponent = (-ln(max_period) * i) / (half - shift). */
  float nlog = (float)-log((double)max_period), den = (float)half - shift;
  for (int64_t n = 0; n < N; n++) {
    float *yr = yd + n * dim;
    for (int64_t i = 0; i < half; i++) {
      float e = nlog * (float)i;
      e = e / den;
      float f = expf(e);
      float arg = scale * (td[n] * f);
      float sv = sinf(arg), cv = cosf(arg);
      yr[i] = flip_sin_to_cos ? cv : sv;
      yr[half + i] = flip_sin_to_cos ? sv : cv;
    }
    if (dim % 2) yr[dim - 1] = 0.0f;
  }
  return DIT_OK;
}

/* One element at p of dtype t as float (any float or integer dtype). */
static inline float ld_any(const char *p, dit_dtype t) {
  switch (t) {
    case DIT_F32: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    case DIT_BF16:
    case DIT_F16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return t == DIT_BF16 ? dit_bf16_to_f32(h) : dit_f16_to_f32(h);
    }
    default: {
      float f;
      dit_convert_to_f32(&f, p, t, 1);
      return f;
    }
  }
}

static inline void st_any(char *p, dit_dtype t, float f) {
  if (t == DIT_F32) {
    memcpy(p, &f, 4);
  } else if (t == DIT_BF16) {
    uint16_t h = dit_f32_to_bf16(f);
    memcpy(p, &h, 2);
  } else if (t == DIT_F16) {
    uint16_t h = dit_f32_to_f16(f);
    memcpy(p, &h, 2);
  } else {
    dit_convert_from_f32(p, &f, t, 1);
  }
}

dit_status cpu_copy(dit_backend *be, dit_tensor *dst, const dit_tensor *src, dit_error *err) {
  if (!dst || !src) return dit_errorf(err, DIT_ERR_INVALID_ARG, "copy: NULL tensor");
  DIT_TRY(cpu_check_same_shape("copy", "dst", dst, "src", src, err));
  int64_t n = dit_tensor_numel(src);
  if (n == 0) return DIT_OK;
  if (!dst->data || !src->data) return dit_errorf(err, DIT_ERR_INVALID_ARG, "copy: tensor without data");
  bool same = dst->dtype == src->dtype;
  if (!same && (!dit_dtype_is_float(dst->dtype) || !dit_dtype_is_float(src->dtype)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "copy: cannot convert %s to %s (float types only)",
                      dit_dtype_name(src->dtype), dit_dtype_name(dst->dtype));
  int nd = src->ndim;
  int64_t inner = nd ? src->shape[nd - 1] : 1, rows = n / inner;
  int64_t sis = nd ? src->stride[nd - 1] : 1, dis = nd ? dst->stride[nd - 1] : 1;
  size_t ses = dit_dtype_size(src->dtype), des = dit_dtype_size(dst->dtype);
  const char *sd = src->data;
  char *dd = dst->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    int64_t so = 0, doff = 0, rem = r;
    for (int d = nd - 2; d >= 0; d--) {
      int64_t idx = rem % src->shape[d];
      rem /= src->shape[d];
      so += idx * src->stride[d];
      doff += idx * dst->stride[d];
    }
    const char *s = sd + so * (int64_t)ses;
    char *o = dd + doff * (int64_t)des;
    if (same && sis == 1 && dis == 1) {
      memcpy(o, s, (size_t)inner * ses);
    } else if (same) {
      for (int64_t i = 0; i < inner; i++) memcpy(o + i * dis * (int64_t)des, s + i * sis * (int64_t)ses, ses);
    } else {
      for (int64_t i = 0; i < inner; i++)
        st_any(o + i * dis * (int64_t)des, dst->dtype, ld_any(s + i * sis * (int64_t)ses, src->dtype));
    }
  }
  return DIT_OK;
}
