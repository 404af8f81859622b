/* The weight table: a model lists {checkpoint name, destination, expected shape} once,
 * and binding resolves every name at load time, reporting all missing, mis-shaped and
 * unexpected tensors in one message instead of failing on the first. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "io/safetensors.h"

#define LIST_SHOWN 4

void dit_wtable_init(dit_wtable *t) { memset(t, 0, sizeof *t); }

void dit_wtable_free(dit_wtable *t) {
  free(t->entries);
  memset(t, 0, sizeof *t);
}

static void remember(dit_wtable *t, dit_status s, const char *fmt, const char *name) {
  if (t->status != DIT_OK) return;
  t->status = s;
  dit_errorf(&t->err, s, fmt, name);
}

void dit_wtable_add(dit_wtable *t, dit_tensor *dst, bool optional, int ndim, const int64_t *shape, const char *fmt,
                    ...) {
  if (t->status != DIT_OK) return;
  char name[DIT_WNAME_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof name) {
    remember(t, DIT_ERR_INTERNAL, "weight table: name too long: %s", name);
    return;
  }
  if (ndim < 0 || ndim > DIT_MAX_DIMS || !dst) {
    remember(t, DIT_ERR_INTERNAL, "weight table: bad rank or destination for %s", name);
    return;
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    dit_wentry *e = realloc(t->entries, cap * sizeof *e);
    if (!e) {
      remember(t, DIT_ERR_NOMEM, "weight table: out of memory adding %s", name);
      return;
    }
    t->entries = e;
    t->cap = cap;
  }
  dit_wentry *e = &t->entries[t->n++];
  memset(e, 0, sizeof *e);
  memcpy(e->name, name, (size_t)n + 1);
  e->dst = dst;
  e->optional = optional;
  e->ndim = ndim;
  for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
}

/* A bounded, comma-separated list of problems, with a count of those not shown. */
typedef struct problem_list {
  char text[DIT_ERROR_MSG_MAX / 3];
  size_t n;
} problem_list;

static void list_add(problem_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void list_add(problem_list *l, const char *fmt, ...) {
  if (l->n++ >= LIST_SHOWN) return;
  size_t used = strlen(l->text);
  if (used + 3 >= sizeof l->text) return;
  if (used) {
    strcpy(l->text + used, ", ");
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->text + used, sizeof l->text - used, fmt, ap);
  va_end(ap);
}

static int list_print(char *buf, size_t len, const char *what, const problem_list *l) {
  if (!l->n) return 0;
  char more[48] = "";
  if (l->n > LIST_SHOWN) snprintf(more, sizeof more, " and %zu more", l->n - LIST_SHOWN);
  return snprintf(buf, len, "; %zu %s: %s%s", l->n, what, l->text, more);
}

static bool ignored(const char *name, const char *const *ignore) {
  for (; ignore && *ignore; ignore++)
    if (!strncmp(name, *ignore, strlen(*ignore))) return true;
  return false;
}

/* Position of `name` in w->tensors (sorted by name). */
static bool find_index(const dit_weights *w, const char *name, size_t *idx) {
  size_t lo = 0, hi = w->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(w->tensors[mid]->name, name);
    if (c == 0) {
      *idx = mid;
      return true;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

/* True when shapes a and b are equal once their leading size-1 dims are dropped (ggml's
 * writers, stable-diffusion.cpp's among them, store a [1, D] tensor as [D]). */
static bool same_but_leading_ones(const int64_t *a, int na, const int64_t *b, int nb) {
  while (na > 0 && a[0] == 1) a++, na--;
  while (nb > 0 && b[0] == 1) b++, nb--;
  if (na != nb) return false;
  for (int k = 0; k < na; k++)
    if (a[k] != b[k]) return false;
  return true;
}

void dit_wtable_share_scale_with_next(dit_wtable *t) {
  if (t->status == DIT_OK && t->n) t->entries[t->n - 1].scale_with_next = true;
}

bool dit_wname_quant_matrix(const char *name, int ndim, const int64_t *shape, dit_dtype t) {
  size_t len = strlen(name);
  uint64_t rb;
  return ndim == 2 && len >= 7 && !strcmp(name + len - 7, ".weight") && dit_dtype_row_bytes(t, (uint64_t)shape[1], &rb);
}

/* Whether name's second segment is a number ("layers.3.", "transformer_blocks.0.",
 * "double_blocks.7."): a matrix of a numbered block, not of a module list inside an embedder
 * ("t_embedder.mlp.0."). */
static bool in_numbered_block(const char *name) {
  const char *p = strchr(name, '.');
  if (!p) return false;
  const char *q = p + 1;
  while (*q >= '0' && *q <= '9') q++;
  return q > p + 1 && *q == '.';
}

bool dit_wname_fp8_compute(const char *name, int ndim, const int64_t *shape) {
  static const char *const keep[] = {"modulation", "adaLN", "_mod.", "norm", "embed"};
  size_t len = strlen(name);
  if (ndim != 2 || len < 7 || strcmp(name + len - 7, ".weight") || shape[0] % 16 || shape[1] % 16 || shape[0] < 16 ||
      shape[1] < 16 || !in_numbered_block(name))
    return false;
  for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
    if (strstr(name, keep[i])) return false;
  return true;
}

/* A quantized tensor the ops read as plain floats (not a weight matrix) as an F32 copy owned
 * by w, dequantized as ggml does (times its scale, for fp8). */
static dit_status dequant_small(dit_weights *w, dit_tensor *d, const char *name, dit_error *err) {
  if (!dit_dtype_is_quant(d->dtype) || dit_wname_quant_matrix(name, d->ndim, d->shape, d->dtype)) return DIT_OK;
  int64_t numel = dit_tensor_numel(d), row = d->ndim ? d->shape[d->ndim - 1] : 1;
  uint64_t rb;
  if (!dit_dtype_row_bytes(d->dtype, (uint64_t)row, &rb))
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\": rows of %lld are not whole %s blocks", name,
                      (long long)row, dit_dtype_name(d->dtype));
  float *f = dit_weights_alloc(w, (size_t)numel * sizeof(float));
  if (!f) return dit_errorf(err, DIT_ERR_NOMEM, "tensor \"%s\": out of memory for its F32 copy", name);
  for (int64_t r = 0; row && r < numel / row; r++)
    dit_dequant_row(d->dtype, (const char *)d->data + (uint64_t)r * rb, f + r * row, row);
  const float ws = dit_tensor_scale(d);
  for (int64_t i = 0; ws != 1.0f && i < numel; i++) f[i] *= ws;
  *d = dit_tensor_make(DIT_F32, f, d->ndim, d->shape);
  return DIT_OK;
}

/* The per-tensor scale of an fp8 weight "P.weight": a one-element F32/BF16/F16 tensor named
 * "P.scale_weight" (ComfyUI's scaled fp8) or "P.weight_scale", finite and nonzero, into
 * d->scale (the tensor is marked used). None: the plain cast, scale 1. A scale per output
 * channel is refused by name. The fp8 files' input scales ("P.scale_input",
 * "P.input_scale", for fp8 activations) are marked used too: ditrun keeps activations in
 * bf16/fp32, so they are not needed. */
static dit_status bind_fp8_scale(const dit_weights *w, const char *name, dit_tensor *d, bool *used, dit_error *err) {
  if (d->dtype != DIT_F8_E4M3 && d->dtype != DIT_F8_E5M2) return DIT_OK;
  size_t len = strlen(name), idx;
  if (len < 7 || strcmp(name + len - 7, ".weight")) return DIT_OK;
  static const char *const scales[] = {"scale_weight", "weight_scale"}, *const inputs[] = {"scale_input", "input_scale"};
  char sn[2 * DIT_WNAME_MAX];
  for (int k = 0; k < 2; k++) {
    snprintf(sn, sizeof sn, "%.*s.%s", (int)(len - 7), name, inputs[k]);
    if (find_index(w, sn, &idx)) used[idx] = true;
  }
  for (int k = 0; k < 2; k++) {
    snprintf(sn, sizeof sn, "%.*s.%s", (int)(len - 7), name, scales[k]);
    if (!find_index(w, sn, &idx)) continue;
    const dit_st_tensor *st = w->tensors[idx];
    int64_t n = 1;
    for (int i = 0; i < st->ndim; i++) n *= st->shape[i];
    if (st->dtype != DIT_F32 && st->dtype != DIT_BF16 && st->dtype != DIT_F16)
      return dit_errorf(err, DIT_ERR_FORMAT, "fp8 scale \"%s\" is %s (expected F32, BF16 or F16)", sn,
                        dit_dtype_name(st->dtype));
    if (n != 1)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                        "fp8 scale \"%s\" has %lld values: only one scale per tensor is supported", sn, (long long)n);
    float s = 0.0f;
    dit_convert_to_f32(&s, st->data, st->dtype, 1);
    if (!isfinite(s) || s == 0.0f)
      return dit_errorf(err, DIT_ERR_FORMAT, "fp8 scale \"%s\" is %g (must be finite and nonzero)", sn, (double)s);
    d->scale = s;
    used[idx] = true;
    return DIT_OK;
  }
  return DIT_OK;
}

dit_status dit_wtable_bind(dit_wtable *t, dit_weights *w, const char *prefix, const char *const *ignore,
                           dit_error *err) {
  if (t->status != DIT_OK) return dit_errorf(err, t->status, "%s", t->err.msg);
  if (!prefix) prefix = "";
  bool *used = calloc(w->n_tensors ? w->n_tensors : 1, sizeof *used);
  if (!used) return dit_errorf(err, DIT_ERR_NOMEM, "weight table: out of memory");
  problem_list missing = {0}, shaped = {0}, extra = {0};
  for (size_t i = 0; i < t->n; i++) {
    dit_wentry *e = &t->entries[i];
    char full[2 * DIT_WNAME_MAX];
    snprintf(full, sizeof full, "%s%s", prefix, e->name);
    size_t idx;
    if (!find_index(w, full, &idx)) {
      if (!e->optional) list_add(&missing, "%s %s", full, dit_shape_str(e->shape, e->ndim, (char[128]){0}, 128));
      continue;
    }
    const dit_st_tensor *st = w->tensors[idx];
    used[idx] = true;
    if (!same_but_leading_ones(st->shape, st->ndim, e->shape, e->ndim)) {
      list_add(&shaped, "%s expected %s found %s", full, dit_shape_str(e->shape, e->ndim, (char[128]){0}, 128),
               dit_shape_str(st->shape, st->ndim, (char[128]){0}, 128));
      continue;
    }
    dit_status s = dit_weights_tensor(w, st, e->dst, err);
    if (s == DIT_OK) *e->dst = dit_tensor_make(e->dst->dtype, e->dst->data, e->ndim, e->shape); /* the table's rank */
    if (s == DIT_OK) s = bind_fp8_scale(w, full, e->dst, used, err);
    if (s == DIT_OK) s = dequant_small(w, e->dst, full, err);
    if (s != DIT_OK) {
      free(used);
      return s;
    }
  }
  for (size_t i = 0; i < w->n_tensors; i++)
    if (!used[i] && !ignored(w->tensors[i]->name, ignore) && strcmp(w->tensors[i]->name, "scaled_fp8"))
      list_add(&extra, "%s", w->tensors[i]->name); /* "scaled_fp8": ComfyUI's marker of a scaled fp8 file */
  free(used);
  if (!missing.n && !shaped.n && !extra.n) return DIT_OK;
  char msg[DIT_ERROR_MSG_MAX];
  int n = snprintf(msg, sizeof msg, "weights do not match the model");
  n += list_print(msg + n, sizeof msg - (size_t)n, "missing", &missing);
  if ((size_t)n < sizeof msg) n += list_print(msg + n, sizeof msg - (size_t)n, "mis-shaped", &shaped);
  if ((size_t)n < sizeof msg) list_print(msg + n, sizeof msg - (size_t)n, "unexpected", &extra);
  return dit_errorf(err, DIT_ERR_FORMAT, "%s", msg);
}
