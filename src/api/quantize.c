/* `ditrun quantize` (see ditrun.h): plans the output tensors of one component (names by the
 * family's dit_wexport, fused parts, output dtypes), then streams them into a GGUF file,
 * converting each row to float and quantizing it as ggml's reference quantizer does; or, for
 * fp8, into a safetensors file as ComfyUI's scaled fp8 checkpoints hold them: each matrix
 * divided by a per-tensor scale (its absolute maximum over the type's largest value), the
 * scale beside it as "X.scale_weight", and the "scaled_fp8" marker. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/quant.h"
#include "io/gguf.h"
#include "io/model_dir.h"
#include "models/flux1.h"
#include "models/qwen3.h"
#include "models/zimage.h"

/* The families whose file names differ from diffusers': a component class and its export,
 * for GGUF files and for ComfyUI's (scaled fp8) safetensors. */
static const struct {
  const char *cls;
  const dit_wexport *gguf, *st;
} exports[] = {
    {"ZImageTransformer2DModel", &dit_zimage_export, &dit_zimage_export},
    {"FluxTransformer2DModel", &dit_flux1_export, &dit_flux1_export},
    {"Flux2Transformer2DModel", &dit_flux2_export, &dit_flux2_export},
    {"Qwen3ForCausalLM", &dit_qwen3_export, NULL},
    {"Qwen3Model", &dit_qwen3_export, NULL},
};

typedef struct q_item {
  char name[DIT_WNAME_MAX];
  const dit_st_tensor *src[4];
  int n_src;
  size_t scale_of; /* an fp8 scale: its matrix's item + 1 (0: not a scale) */
  float scale;     /* an fp8 matrix: its per-tensor scale, set when it is written */
} q_item;

typedef struct q_plan {
  dit_weights *w;
  q_item *items;
  dit_out_tensor *t;
  size_t n;
  dit_st_tensor *views; /* row ranges of stored tensors (exchanged halves) */
  size_t n_views;
  int threads;
  bool st; /* writing safetensors (fp8): no GGUF name limit */
} q_plan;

static bool is_fp8(dit_dtype t) { return t == DIT_F8_E4M3 || t == DIT_F8_E5M2; }

static bool has_suffix(const char *s, const char *suf, size_t *stem) {
  size_t n = strlen(s), m = strlen(suf);
  *stem = n - m;
  return n >= m && !strcmp(s + n - m, suf);
}

/* dst = src with ex's prefix stripped and its renames applied (dit_wname_rename). */
static dit_status export_name(const dit_wexport *ex, const char *src, char *dst, size_t len, bool st, dit_error *err) {
  size_t pl = ex && ex->strip_prefix ? strlen(ex->strip_prefix) : 0;
  if (pl && !strncmp(src, ex->strip_prefix, pl)) src += pl;
  char r[DIT_WNAME_MAX];
  if (!dit_wname_rename(ex ? ex->rename : NULL, ex ? ex->n_rename : 0, ex && ex->inverse, src, r, sizeof r))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "quantize: tensor name \"%.64s...\" too long once renamed", src);
  if ((!st && strlen(r) >= 64) || snprintf(dst, len, "%s", r) >= (int)len)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "quantize: tensor name \"%s\" is 64 bytes or longer (GGUF's limit)", r);
  return DIT_OK;
}

/* The dtype a tensor is written in: type for weight matrices with rows of whole blocks,
 * except sd.cpp's kept-precision inputs and outputs; other tensors as stored (F32, F16 or
 * BF16; anything else as F32). */
static dit_dtype out_dtype(const char *name, const dit_st_tensor *t, dit_dtype type) {
  static const char *const keep[] = {"x_embedder.", "t_embedder.", "final_layer.", "img_in.", "txt_in.", "time_in.",
                                     "vector_in.", "guidance_in.", "context_embedder.", "pos_embed"};
  bool matrix = dit_wname_quant_matrix(name, t->ndim, t->shape, type);
  for (size_t i = 0; matrix && i < sizeof keep / sizeof *keep; i++)
    if (strstr(name, keep[i])) matrix = false;
  if (matrix) return type;
  return t->dtype == DIT_F32 || t->dtype == DIT_F16 || t->dtype == DIT_BF16 ? t->dtype : DIT_F32;
}

static bool dropped(const dit_wexport *ex, const char *name) {
  for (const char *const *d = ex ? ex->drop : NULL; d && *d; d++)
    if (!strcmp(*d, name)) return true;
  return false;
}

/* Rows [r0, r0 + n) of stored tensor t (of dim-0 size rows), as a tensor of its own. */
static dit_st_tensor st_rows(const dit_st_tensor *t, int64_t r0, int64_t n) {
  dit_st_tensor v = *t;
  const uint64_t rb = (t->end - t->begin) / (uint64_t)t->shape[0];
  v.shape[0] = n;
  v.begin = t->begin + rb * (uint64_t)r0;
  v.end = v.begin + rb * (uint64_t)n;
  v.data = (const char *)t->data + rb * (uint64_t)r0;
  return v;
}

/* The fused group t is part k of (its first split whose `within` and parts match), with
 * *stem: the name before the part's suffix; NULL when none. */
static const dit_wsplit *fuse_of(const dit_weights *w, const dit_wexport *ex, const char *name, int *k, size_t *stem) {
  for (size_t f = 0; ex && f < ex->n_fuse; f++) {
    const dit_wsplit *fu = &ex->fuse[f];
    if (!dit_wname_within(name, fu->within)) continue;
    for (*k = 0; *k < fu->n && !has_suffix(name, fu->parts[*k], stem); ++*k) {}
    int j = 0;
    char pn[DIT_WNAME_MAX * 2];
    while (*k < fu->n && j < fu->n &&
           snprintf(pn, sizeof pn, "%.*s%s", (int)*stem, name, fu->parts[j]) < (int)sizeof pn &&
           dit_weights_find(w, pn))
      j++;
    if (j == fu->n) return fu;
  }
  return NULL;
}

/* Sets it's sources and source name for stored tensor t: itself, its two halves exchanged
 * (ex->swap), or its fused group (false: t is written with its group's first part). */
static dit_status plan_sources(q_plan *P, const dit_wexport *ex, const dit_st_tensor *t, q_item *it, char *src_name,
                               size_t len, bool *swapped, bool *skip, dit_error *err) {
  it->src[0] = t, it->n_src = 1;
  snprintf(src_name, len, "%s", t->name);
  for (size_t i = 0; ex && i < ex->n_swap; i++) {
    if (strcmp(t->name, ex->swap[i].from)) continue;
    if (t->ndim < 1 || t->shape[0] % 2)
      return dit_errorf(err, DIT_ERR_FORMAT, "quantize: %s has no two halves to exchange", t->name);
    P->views[P->n_views] = st_rows(t, t->shape[0] / 2, t->shape[0] / 2);
    P->views[P->n_views + 1] = st_rows(t, 0, t->shape[0] / 2);
    it->src[0] = &P->views[P->n_views], it->src[1] = &P->views[P->n_views + 1], it->n_src = 2;
    P->n_views += 2;
    snprintf(src_name, len, "%s", ex->swap[i].to);
    *swapped = true;
    return DIT_OK;
  }
  int k;
  size_t stem;
  const dit_wsplit *fu = fuse_of(P->w, ex, t->name, &k, &stem);
  if (!fu) return DIT_OK;
  if (k > 0) return *skip = true, DIT_OK; /* written with its group's first part */
  it->n_src = 0;
  for (int j = 0; j < fu->n; j++) {
    char pn[DIT_WNAME_MAX * 2];
    snprintf(pn, sizeof pn, "%.*s%s", (int)stem, t->name, fu->parts[j]);
    const dit_st_tensor *p = dit_weights_find(P->w, pn);
    if (p->ndim != t->ndim || p->dtype != t->dtype || (t->ndim == 2 && p->shape[1] != t->shape[1]))
      return dit_errorf(err, DIT_ERR_FORMAT, "quantize: %s does not match %s to fuse with", pn, t->name);
    it->src[it->n_src++] = p;
  }
  snprintf(src_name, len, "%.*s%s", (int)stem, t->name, fu->suffix);
  return DIT_OK;
}

/* Adds the item for stored tensor t (or, when t is a fused group's first part, the group). */
static dit_status plan_one(q_plan *P, const dit_wexport *ex, const dit_st_tensor *t, dit_dtype type, dit_error *err) {
  q_item *it = &P->items[P->n];
  char src_name[DIT_WNAME_MAX];
  bool swapped = false, skip = false;
  DIT_TRY(plan_sources(P, ex, t, it, src_name, sizeof src_name, &swapped, &skip, err));
  if (skip) return DIT_OK;
  if (swapped) snprintf(it->name, sizeof it->name, "%s", src_name);
  else DIT_TRY(export_name(ex, src_name, it->name, sizeof it->name, P->st, err));
  dit_out_tensor *o = &P->t[P->n];
  o->name = it->name;
  o->ndim = t->ndim;
  if (t->ndim < (P->st ? 0 : 1) || t->ndim > 4)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "quantize: tensor %s has %d dims (at most 4%s)", t->name, t->ndim,
                      P->st ? "" : ", at least 1 in GGUF");
  memcpy(o->shape, t->shape, sizeof o->shape);
  for (int k = 0; t->ndim && k < it->n_src; k++) o->shape[0] = (k ? o->shape[0] : 0) + it->src[k]->shape[0];
  o->dtype = out_dtype(it->name, t, type);
  P->n++;
  if (!is_fp8(o->dtype)) return DIT_OK;
  /* its scale: "X.scale_weight" beside "X.weight" */
  q_item *sc = &P->items[P->n];
  size_t stem = strlen(it->name) - 7; /* a matrix name ends in ".weight" (dit_wname_quant_matrix) */
  if (snprintf(sc->name, sizeof sc->name, "%.*s.scale_weight", (int)stem, it->name) >= (int)sizeof sc->name)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "quantize: tensor name \"%s\" too long for its scale's", it->name);
  sc->scale_of = P->n; /* the matrix's index + 1 */
  P->t[P->n] = (dit_out_tensor){sc->name, DIT_F32, 0, {0}};
  P->n++;
  return DIT_OK;
}

/* An fp8 matrix's per-tensor scale: the absolute maximum of its rows (n_src sources of K
 * columns) over the type's largest finite value; 1 for an all-zero matrix. */
static float fp8_scale(const q_plan *P, const q_item *it, dit_dtype t, int64_t K, float *rows) {
  float amax = 0.0f;
  for (int k = 0; k < it->n_src; k++) {
    const dit_st_tensor *s = it->src[k];
    const uint64_t rb = (uint64_t)K * dit_dtype_size(s->dtype);
    const int64_t nr = K ? (int64_t)((s->end - s->begin) / rb) : 0;
#pragma omp parallel for num_threads(P->threads) schedule(dynamic, 16) reduction(max : amax)
    for (int64_t r = 0; r < nr; r++) {
      float *row = rows + (size_t)omp_get_thread_num() * (size_t)K;
      dit_convert_to_f32(row, (const uint8_t *)s->data + (uint64_t)r * rb, s->dtype, (size_t)K);
      for (int64_t i = 0; i < K; i++) amax = fabsf(row[i]) > amax ? fabsf(row[i]) : amax;
    }
  }
  return dit_fp8_scale(amax, t);
}

/* Writes tensor i: each source row converted to float, then to the output dtype (an fp8
 * matrix divided by its scale first; a scale item is its matrix's scale). */
static dit_status fill(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  const q_plan *P = user;
  q_item *it = &P->items[i];
  const dit_out_tensor *o = &P->t[i];
  if (it->scale_of) {
    if (nbytes != 4) return dit_errorf(err, DIT_ERR_INTERNAL, "quantize: scale %s: size mismatch", o->name);
    memcpy(dst, &P->items[it->scale_of - 1].scale, 4);
    return DIT_OK;
  }
  /* rows of K elements; a vector as rows of one (its halves may come from two sources) */
  const int64_t K = o->ndim >= 2 || dit_dtype_is_quant(o->dtype) ? o->shape[o->ndim - 1] : 1;
  uint64_t rb_out, rb_in = (uint64_t)K * dit_dtype_size(it->src[0]->dtype);
  dit_dtype_row_bytes(o->dtype, (uint64_t)K, &rb_out); /* checked by the writer */
  float *rows = malloc(sizeof(float) * (size_t)(K ? K : 1) * (size_t)P->threads);
  if (!rows) return dit_errorf(err, DIT_ERR_NOMEM, "quantize: out of memory for rows of %lld", (long long)K);
  const bool f8 = is_fp8(o->dtype);
  if (f8) it->scale = fp8_scale(P, it, o->dtype, K, rows);
  uint8_t *out = dst;
  for (int k = 0; k < it->n_src; k++) {
    const dit_st_tensor *s = it->src[k];
    const int64_t nr = K ? (int64_t)((s->end - s->begin) / rb_in) : 0;
#pragma omp parallel for num_threads(P->threads) schedule(dynamic, 16)
    for (int64_t r = 0; r < nr; r++) {
      float *row = rows + (size_t)omp_get_thread_num() * (size_t)K;
      dit_convert_to_f32(row, (const uint8_t *)s->data + (uint64_t)r * rb_in, s->dtype, (size_t)K);
      for (int64_t c = 0; f8 && c < K; c++) row[c] /= it->scale;
      dit_quant_row(o->dtype, row, out + (uint64_t)r * rb_out, K);
    }
    out += (uint64_t)nr * rb_out;
  }
  free(rows);
  if ((size_t)(out - (uint8_t *)dst) != nbytes)
    return dit_errorf(err, DIT_ERR_FORMAT, "quantize: tensor %s: size mismatch", o->name);
  return DIT_OK;
}

typedef struct progress {
  const dit_quantize_params *p;
  q_plan *P;
} progress;

static dit_status fill_progress(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  progress *g = user;
  if (g->p->on_tensor) g->p->on_tensor(g->p->user, i, g->P->n, g->P->t[i].name);
  return fill(g->P, i, dst, nbytes, err);
}

static dit_status plan(q_plan *P, const dit_wexport *ex, dit_dtype type, dit_error *err) {
  P->items = calloc(2 * P->w->n_tensors + 2, sizeof *P->items); /* a scale per matrix, a marker */
  P->t = calloc(2 * P->w->n_tensors + 2, sizeof *P->t);
  P->views = calloc(2 * (ex ? ex->n_swap : 0) + 1, sizeof *P->views);
  if (!P->items || !P->t || !P->views) return dit_errorf(err, DIT_ERR_NOMEM, "quantize: out of memory");
  if (is_fp8(type)) { /* ComfyUI's marker of a scaled fp8 file: an empty fp8 tensor */
    snprintf(P->items[0].name, sizeof P->items[0].name, "scaled_fp8");
    P->t[P->n++] = (dit_out_tensor){P->items[0].name, type, 1, {0}};
  }
  for (size_t i = 0; i < P->w->n_tensors; i++) {
    const dit_st_tensor *t = P->w->tensors[i];
    if (dropped(ex, t->name)) continue;
    if (!dit_dtype_is_float(t->dtype))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "quantize: tensor %s is %s (float weights expected)", t->name,
                        dit_dtype_name(t->dtype));
    DIT_TRY(plan_one(P, ex, t, type, err));
  }
  return DIT_OK;
}

static dit_status quantize(dit_ctx *ctx, const dit_quantize_params *p, dit_error *err) {
  const char *comp = p->component ? p->component : "transformer";
  if (!p->model_dir || !p->output) return dit_errorf(err, DIT_ERR_INVALID_ARG, "quantize: no model folder or output");
  if (!dit_dtype_is_quant(p->type) && p->type != DIT_BF16 && p->type != DIT_F16 && p->type != DIT_F32)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "quantize: type %s (a block type, fp8, bf16, f16 or f32)",
                      dit_dtype_name(p->type));
  const size_t ol = strlen(p->output);
  const bool st = ol >= 12 && !strcmp(p->output + ol - 12, ".safetensors");
  if (st != is_fp8(p->type))
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      st ? "quantize: a .safetensors output holds fp8 (f8_e4m3, f8_e5m2); %s is written as GGUF"
                         : "quantize: %s is written as a .safetensors file (GGUF has no fp8 type)",
                      dit_dtype_name(p->type));
  dit_model_dir *dir = NULL;
  DIT_TRY(dit_model_dir_open(p->model_dir, &dir, err));
  const dit_component *c = dit_model_dir_component(dir, comp);
  char path[4096];
  dit_status s = c ? dit_model_dir_component_path(dir, comp, path, sizeof path, err)
                   : dit_errorf(err, DIT_ERR_INVALID_ARG, "quantize: %s has no component \"%s\"", p->model_dir, comp);
  const dit_wexport *ex = NULL;
  for (size_t i = 0; c && i < sizeof exports / sizeof *exports; i++)
    if (c->cls && !strcmp(c->cls, exports[i].cls)) ex = st ? exports[i].st : exports[i].gguf;
  char cls[128];
  snprintf(cls, sizeof cls, "%s", c && c->cls ? c->cls : "?");
  dit_model_dir_close(dir);
  q_plan P = {0};
  P.st = st;
  P.threads = ctx->params.n_threads > 0 ? ctx->params.n_threads : omp_get_max_threads();
  if (s == DIT_OK) s = dit_weights_open(path, NULL, &P.w, err);
  if (s == DIT_OK) s = plan(&P, ex, p->type, err);
  progress g = {p, &P};
  if (s == DIT_OK && st) {
    const char *meta[] = {"format", "pt", "ditrun.source_class", cls, "ditrun.weight_type", dit_dtype_name(p->type)};
    s = dit_st_write(p->output, p->overwrite != 0, meta, 3, P.t, P.n, fill_progress, &g, err);
  } else if (s == DIT_OK) {
    const char *arch = ex ? ex->arch : cls, *tname = dit_dtype_name(p->type);
    uint32_t qv = 2;
    const dit_gguf_wkv kv[] = {
        {"general.architecture", DIT_GGUF_STRING, 0, 0, arch},
        {"general.quantization_version", DIT_GGUF_U32, 0, 0, &qv},
        {"ditrun.source_class", DIT_GGUF_STRING, 0, 0, cls},
        {"ditrun.weight_type", DIT_GGUF_STRING, 0, 0, tname},
    };
    s = dit_gguf_write(p->output, p->overwrite != 0, kv, sizeof kv / sizeof *kv, P.t, P.n, fill_progress, &g, err);
  }
  free(P.items);
  free(P.t);
  free(P.views);
  dit_weights_close(P.w);
  return s;
}

dit_status dit_quantize(dit_ctx *ctx, const dit_quantize_params *p) {
  dit_error err = {0};
  if (!p) {
    dit_errorf(&err, DIT_ERR_INVALID_ARG, "dit_quantize: no parameters");
    return dit_ctx_fail(ctx, &err);
  }
  dit_status s = quantize(ctx, p, &err);
  return s == DIT_OK ? DIT_OK : dit_ctx_fail(ctx, &err);
}
