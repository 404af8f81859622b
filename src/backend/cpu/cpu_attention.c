/* Attention-related ops of the CPU backend: scaled dot-product attention (GQA, key
 * padding mask, causal), rotary embeddings (interleaved and rotate-half) and softmax.
 * Attention works one query row at a time with a per-thread score row of Sk floats,
 * so the full [Sq, Sk] score matrix is never materialised. */
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backend/cpu/cpu_internal.h"

static dit_status check_qkv(const char *name, const dit_tensor *t, dit_error *err) {
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: %s is NULL", name);
  if (t->dtype != DIT_F32 || t->ndim != 4 || !t->data)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: %s must be a 4-D F32 tensor [B, S, H, D] (got %s, %d dims)",
                      name, dit_dtype_name(t->dtype), t->ndim);
  if (t->stride[3] != 1 && t->shape[3] > 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: %s must have unit stride on its last dim", name);
  return DIT_OK;
}

static float dot_f32(const float *a, const float *b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

dit_status cpu_attention(dit_backend *be, dit_tensor *out, const dit_tensor *q, const dit_tensor *k,
                         const dit_tensor *v, const dit_tensor *key_mask, float scale, bool causal,
                         dit_error *err) {
  DIT_TRY(check_qkv("q", q, err));
  DIT_TRY(check_qkv("k", k, err));
  DIT_TRY(check_qkv("v", v, err));
  DIT_TRY(cpu_check_act("attention", "out", out, err));
  DIT_TRY(cpu_check_same_shape("attention", "out", out, "q", q, err));
  DIT_TRY(cpu_check_same_shape("attention", "v", v, "k", k, err));
  int64_t B = q->shape[0], Sq = q->shape[1], Hq = q->shape[2], D = q->shape[3];
  int64_t Sk = k->shape[1], Hkv = k->shape[2];
  if (k->shape[0] != B || k->shape[3] != D || Hkv <= 0 || Hq % Hkv != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "attention: k [%lld, %lld, %lld, %lld] incompatible with q [%lld, %lld, %lld, %lld] "
                      "(same B and D, Hq %% Hkv == 0)",
                      (long long)k->shape[0], (long long)Sk, (long long)Hkv, (long long)k->shape[3], (long long)B,
                      (long long)Sq, (long long)Hq, (long long)D);
  const uint8_t *mask = NULL;
  if (key_mask) {
    if (key_mask->dtype != DIT_U8 && key_mask->dtype != DIT_BOOL)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: key_mask must be U8 or BOOL, got %s",
                        dit_dtype_name(key_mask->dtype));
    int64_t ms[2] = {B, Sk};
    if (!dit_tensor_has_shape(key_mask, 2, ms) || !dit_tensor_is_contiguous(key_mask))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: key_mask must be contiguous [%lld, %lld]",
                        (long long)B, (long long)Sk);
    mask = key_mask->data;
  }
  int64_t grp = Hq / Hkv, rows = B * Hq * Sq;
  int nt = be->n_threads < 1 ? 1 : be->n_threads;
  float *buf = malloc(sizeof(float) * (size_t)(Sk + D + 16) * (size_t)nt);
  if (!buf) return dit_errorf(err, DIT_ERR_NOMEM, "attention: out of memory for score rows");
  const float *qd = q->data, *kd = k->data, *vd = v->data;
  float *od = out->data;
#pragma omp parallel num_threads(nt)
  {
    float *sc = buf + (size_t)(Sk + D + 16) * (size_t)omp_get_thread_num();
    float *acc = sc + Sk;
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++) {
      int64_t b = r / (Hq * Sq), h = (r / Sq) % Hq, i = r % Sq, hk = h / grp;
      const float *qr = qd + b * q->stride[0] + i * q->stride[1] + h * q->stride[2];
      float *orow = od + ((b * Sq + i) * Hq + h) * D;
      int64_t jend = causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
      float mx = -INFINITY;
      for (int64_t j = 0; j < jend; j++) {
        if (mask && !mask[b * Sk + j]) {
          sc[j] = -INFINITY;
          continue;
        }
        const float *kr = kd + b * k->stride[0] + j * k->stride[1] + hk * k->stride[2];
        sc[j] = dot_f32(qr, kr, D) * scale;
        if (sc[j] > mx) mx = sc[j];
      }
      for (int64_t d = 0; d < D; d++) acc[d] = 0;
      if (mx == -INFINITY) {
        memset(orow, 0, sizeof(float) * (size_t)D);
        continue;
      }
      float sum = 0;
      for (int64_t j = 0; j < jend; j++) {
        if (sc[j] == -INFINITY) continue;
        float p = expf(sc[j] - mx);
        sum += p;
        const float *vr = vd + b * v->stride[0] + j * v->stride[1] + hk * v->stride[2];
        for (int64_t d = 0; d < D; d++) acc[d] += p * vr[d];
      }
      float inv = 1.0f / sum;
      for (int64_t d = 0; d < D; d++) orow[d] = acc[d] * inv;
    }
  }
  free(buf);
  return DIT_OK;
}

dit_status cpu_rope(dit_backend *be, dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin,
                    dit_rope_mode mode, dit_error *err) {
  DIT_TRY(cpu_check_act("rope", "x", x, err));
  DIT_TRY(cpu_check_act("rope", "cos", cos, err));
  DIT_TRY(cpu_check_act("rope", "sin", sin, err));
  DIT_TRY(cpu_check_same_shape("rope", "sin", sin, "cos", cos, err));
  if (x->ndim != 4 || x->shape[3] % 2 != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "rope: x must be [B, S, H, D] with even D");
  if (mode != DIT_ROPE_INTERLEAVED && mode != DIT_ROPE_HALF)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "rope: unknown mode %d", (int)mode);
  int64_t B = x->shape[0], S = x->shape[1], H = x->shape[2], D = x->shape[3], h2 = D / 2;
  /* cos/sin: [B, S, D/2], or [1, S, D/2] / [S, D/2] shared over the batch. */
  bool ok = cos->shape[cos->ndim - 1] == h2 && cos->ndim >= 2 && cos->shape[cos->ndim - 2] == S &&
            (cos->ndim == 2 || (cos->ndim == 3 && (cos->shape[0] == B || cos->shape[0] == 1)));
  if (!ok) {
    char s1[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "rope: cos/sin %s, expected [%lld, %lld, %lld]",
                      dit_shape_str(cos->shape, cos->ndim, s1, sizeof s1), (long long)B, (long long)S,
                      (long long)h2);
  }
  bool shared = cos->ndim == 2 || cos->shape[0] == 1;
  float *xd = x->data;
  const float *cd = cos->data, *sd = sin->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t bs = 0; bs < B * S; bs++) {
    int64_t crow = shared ? bs % S : bs;
    const float *c = cd + crow * h2, *s = sd + crow * h2;
    for (int64_t h = 0; h < H; h++) {
      float *xr = xd + (bs * H + h) * D;
      if (mode == DIT_ROPE_INTERLEAVED) {
        for (int64_t i = 0; i < h2; i++) {
          float a = xr[2 * i], bb = xr[2 * i + 1];
          xr[2 * i] = a * c[i] - bb * s[i];
          xr[2 * i + 1] = a * s[i] + bb * c[i];
        }
      } else {
        for (int64_t i = 0; i < h2; i++) {
          float a = xr[i], bb = xr[i + h2];
          xr[i] = a * c[i] - bb * s[i];
          xr[i + h2] = bb * c[i] + a * s[i];
        }
      }
    }
  }
  return DIT_OK;
}

dit_status cpu_softmax(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  DIT_TRY(cpu_check_act("softmax", "x", x, err));
  DIT_TRY(cpu_check_act("softmax", "y", y, err));
  DIT_TRY(cpu_check_same_shape("softmax", "y", y, "x", x, err));
  if (x->ndim < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "softmax: x must have at least 1 dim");
  int64_t D = x->shape[x->ndim - 1], rows = D ? dit_tensor_numel(x) / D : 0;
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = xd + r * D;
    float *yr = yd + r * D;
    float mx = -INFINITY;
    for (int64_t i = 0; i < D; i++) mx = xr[i] > mx ? xr[i] : mx;
    float sum = 0;
    for (int64_t i = 0; i < D; i++) {
      yr[i] = expf(xr[i] - mx);
      sum += yr[i];
    }
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < D; i++) yr[i] *= inv;
  }
  return DIT_OK;
}
