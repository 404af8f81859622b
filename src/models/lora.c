/* LoRA merged into a model's weights at load (see lora.h). Each pair's module name is matched
 * to the model's table, B A is formed in fp32 and added, times its scale, to an fp32 copy of
 * the target; when every LoRA has been matched the copies go back in the tensor's dtype. */
#include "models/lora.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

typedef struct lora_pair {
  char module[DIT_WNAME_MAX];     /* as stored, without the A/B/alpha suffix */
  const dit_st_tensor *a, *b, *alpha;
} lora_pair;

/* The low-rank term growing for one quantized tensor [N, K]: a [R, K] and b^T [R, N] (rows
 * appended per pair; b^T holds the scales and the row placement). */
typedef struct lowrank_acc {
  float *a, *bt;
  int64_t R;
} lowrank_acc;

typedef struct lora_merge {
  const dit_wtable *t;
  float **merged;                 /* per table entry: its fp32 copy once a LoRA touches it */
  dit_backend *be;
  dit_model_weights *w;
  bool *was;                      /* per table entry: an earlier LoRA set changed it (its base is read again) */
  dit_tensor *restore;            /* per table entry changed before and not now: its base tensor (host) */
  dit_weights *base;              /* where base tensors are read: w->files, or the checkpoint opened again */
  bool base_owned;
  lowrank_acc *lr;                /* per table entry: the pairs on a quantized tensor, kept apart */
} lora_merge;

static const char *const prefixes[] = {"base_model.model.", "model.diffusion_model.", "diffusion_model.",
                                       "transformer.", "unet."};
static const char *const kohya_prefixes[] = {"lora_unet_", "lora_transformer_"};

/* The pair kind of a key: 'A', 'B' or 'a' (alpha), with the module before the suffix. */
static char key_kind(const char *key, size_t *mlen) {
  static const struct {
    const char *sfx;
    char kind;
  } sfx[] = {{".lora_A.weight", 'A'},    {".lora_B.weight", 'B'},    {".lora_down.weight", 'A'},
             {".lora_up.weight", 'B'},   {".lora.down.weight", 'A'}, {".lora.up.weight", 'B'},
             {".alpha", 'a'}};
  size_t n = strlen(key);
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
    size_t m = strlen(sfx[i].sfx);
    if (n > m && !strcmp(key + n - m, sfx[i].sfx)) return *mlen = n - m, sfx[i].kind;
  }
  return 0;
}

static long find_entry(const dit_wtable *t, const char *name) {
  for (size_t i = 0; i < t->n; i++)
    if (t->entries[i].dst->data && !strcmp(t->entries[i].name, name)) return (long)i;
  return -1;
}

/* A table name with '.' as '_' and without ".weight" equals the kohya module? */
static long find_kohya(const dit_wtable *t, const char *mod) {
  for (size_t i = 0; i < t->n; i++) {
    const char *n = t->entries[i].name;
    size_t len = strlen(n);
    if (!t->entries[i].dst->data || len < 8 || strcmp(n + len - 7, ".weight") || strlen(mod) != len - 7) continue;
    size_t k = 0;
    while (k < len - 7 && (n[k] == mod[k] || (n[k] == '.' && mod[k] == '_'))) k++;
    if (k == len - 7) return (long)i;
  }
  return -1;
}

/* The original checkpoint's module name of table name n (orig's renames applied backwards,
 * in reverse order; with split k >= 0, n as a part of that split's fused tensor: false when
 * it is not one), without ".weight". */
static bool orig_module(const dit_wremap *orig, const char *n, long k, char *out, size_t len) {
  char a[DIT_WNAME_MAX], b[DIT_WNAME_MAX];
  if (snprintf(a, sizeof a, "%s", n) >= (int)sizeof a) return false;
  const size_t an = strlen(a);
  if (k >= 0) {
    const dit_wsplit *sp = &orig->split[k];
    if (!dit_wname_within(a, sp->within)) return false;
    int p = 0;
    while (p < sp->n && (an < strlen(sp->parts[p]) || strcmp(a + an - strlen(sp->parts[p]), sp->parts[p]))) p++;
    if (p == sp->n) return false;
    snprintf(b, sizeof b, "%.*s%s", (int)(an - strlen(sp->parts[p])), a, sp->suffix);
    memcpy(a, b, sizeof a);
  }
  if (!dit_wname_rename(orig->rename, orig->n_rename, true, a, b, sizeof b)) return false;
  memcpy(a, b, sizeof a);
  const size_t l = strlen(a);
  if (l < 8 || strcmp(a + l - 7, ".weight")) return false;
  return snprintf(out, len, "%.*s", (int)(l - 7), a) < (int)len;
}

/* A kohya module name equal to (underscores for dots) the original name of a table entry, or
 * of a fused tensor it is a part of: that original name into out. */
static bool find_kohya_orig(const dit_wtable *t, const dit_wremap *orig, const char *mod, char *out, size_t len) {
  for (size_t i = 0; orig && i < t->n; i++)
    for (long k = -1; k < (long)orig->n_split; k++) {
      char o[DIT_WNAME_MAX];
      if (!t->entries[i].dst->data || !orig_module(orig, t->entries[i].name, k, o, sizeof o)) continue;
      size_t j = 0, ol = strlen(o);
      if (ol != strlen(mod)) continue;
      while (j < ol && (o[j] == mod[j] || (o[j] == '.' && mod[j] == '_'))) j++;
      if (j == ol) return snprintf(out, len, "%s", o) < (int)len;
    }
  return false;
}

/* The table entries the module updates (B's rows split over them in order, each taking its own
 * row count): 1, or the parts of a split weight of the original names; 0 when none. *by_orig:
 * the module was found by its original checkpoint name. */
static int match(const dit_wtable *t, const dit_wremap *orig, const char *module, long *ent, bool *by_orig) {
  const char *m = module;
  *by_orig = false;
  char dotted[DIT_WNAME_MAX];
  for (size_t i = 0; i < sizeof kohya_prefixes / sizeof *kohya_prefixes; i++) {
    if (strncmp(m, kohya_prefixes[i], strlen(kohya_prefixes[i]))) continue;
    const char *k = m + strlen(kohya_prefixes[i]);
    if ((ent[0] = find_kohya(t, k)) >= 0) return 1;
    /* kohya names of the original checkpoint's modules */
    if (!find_kohya_orig(t, orig, k, dotted, sizeof dotted)) return 0;
    m = dotted;
    break;
  }
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (!strncmp(m, prefixes[i], strlen(prefixes[i]))) m += strlen(prefixes[i]), i = (size_t)-1;
  char name[DIT_WNAME_MAX], b[DIT_WNAME_MAX];
  if (snprintf(name, sizeof name, "%s.weight", m) >= (int)sizeof name) return 0;
  if ((ent[0] = find_entry(t, name)) >= 0) return 1;
  if (!orig) return 0;
  /* the original checkpoint's names */
  *by_orig = true;
  if (!dit_wname_rename(orig->rename, orig->n_rename, false, name, b, sizeof b)) return 0;
  memcpy(name, b, sizeof name);
  size_t n = strlen(name);
  for (size_t k = 0; k < orig->n_split; k++) {
    const dit_wsplit *sp = &orig->split[k];
    size_t sl = strlen(sp->suffix);
    if (n < sl || strcmp(name + n - sl, sp->suffix) || !dit_wname_within(name, sp->within)) continue;
    for (int p = 0; p < sp->n; p++) {
      snprintf(b, sizeof b, "%.*s%s", (int)(n - sl), name, sp->parts[p]);
      if ((ent[p] = find_entry(t, b)) < 0) return 0;
    }
    return sp->n;
  }
  return (ent[0] = find_entry(t, name)) >= 0;
}

static size_t st_numel(const dit_st_tensor *st) {
  size_t n = 1;
  for (int i = 0; i < st->ndim; i++) n *= (size_t)st->shape[i];
  return n;
}

/* A LoRA tensor as fp32 (*out malloc'd), checked finite. */
static dit_status lora_f32(dit_weights *lw, const dit_st_tensor *st, const char *path, float **out, dit_error *err) {
  *out = NULL;
  dit_tensor x;
  DIT_TRY(dit_weights_tensor(lw, st, &x, err));
  if (x.dtype != DIT_F32 && x.dtype != DIT_BF16 && x.dtype != DIT_F16)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "LoRA %s: %s is %s (F32, BF16 or F16 expected)", path, st->name,
                      dit_dtype_name(x.dtype));
  size_t n = st_numel(st);
  float *f = malloc((n ? n : 1) * sizeof *f);
  if (!f) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA %s: out of memory", path);
  dit_convert_to_f32(f, x.data, x.dtype, n);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(f[i])) {
      free(f);
      return dit_errorf(err, DIT_ERR_FORMAT, "LoRA %s: %s holds a non-finite value (at %zu)", path, st->name, i);
    }
  *out = f;
  return DIT_OK;
}

/* Entry e as the checkpoint holds it (a host tensor: the loaded files, or the checkpoint
 * opened again where a device copy replaced them). */
static dit_status base_tensor(lora_merge *M, long e, dit_tensor *out, dit_error *err) {
  const char *name = M->t->entries[e].name;
  if (!M->base && M->w->files) M->base = M->w->files;
  if (!M->base) {
    if (!M->w->source)
      return dit_errorf(err, DIT_ERR_INTERNAL, "LoRA: %s: no checkpoint to read its weights from", name);
    DIT_TRY(dit_weights_open(M->w->source, NULL, &M->base, err));
    M->base_owned = true;
    if (M->w->rename) DIT_TRY(M->w->rename(M->base, err));
  }
  char full[2 * DIT_WNAME_MAX];
  snprintf(full, sizeof full, "%s%s", M->w->prefix ? M->w->prefix : "", name);
  const dit_st_tensor *st = dit_weights_find(M->base, full);
  if (st) DIT_TRY(dit_weights_tensor(M->base, st, out, err));
  const dit_tensor *d = M->t->entries[e].dst;
  if (!st || dit_dtype_is_quant(out->dtype) || dit_tensor_numel(out) != dit_tensor_numel(d))
    return dit_errorf(err, DIT_ERR_FORMAT, "LoRA: %s in %s is not the tensor that was loaded", full, M->w->source);
  return DIT_OK;
}

/* The fp32 copy of entry e (made on first use from the host tensor or the device's, or from
 * the checkpoint when an earlier LoRA set changed it). */
static dit_status merged_of(lora_merge *M, long e, float **out, dit_error *err) {
  if ((*out = M->merged[e])) return DIT_OK;
  const dit_tensor *d = M->t->entries[e].dst;
  dit_tensor src = *d;
  if (M->was[e]) DIT_TRY(base_tensor(M, e, &src, err));
  const bool host = M->was[e] || dit_backend_is_host(M->be);
  size_t n = (size_t)dit_tensor_numel(d), bytes = dit_tensor_nbytes(d);
  float *f = malloc(n * sizeof *f);
  void *copy = host ? NULL : malloc(bytes);
  if (!f || (!host && !copy)) {
    free(f), free(copy);
    return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory for %s", M->t->entries[e].name);
  }
  dit_status s = host ? DIT_OK : M->be->ops->download(M->be, copy, d->data, bytes, err);
  if (s == DIT_OK) dit_convert_to_f32(f, host ? src.data : copy, src.dtype, n);
  free(copy);
  if (s != DIT_OK) return free(f), s;
  *out = M->merged[e] = f;
  return DIT_OK;
}

/* W[rows, cols] += s * B[rows, r] A[r, cols]. */
static void add_ba(float *W, const float *B, const float *A, int64_t rows, int64_t cols, int64_t r, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < rows; o++) {
    float *w = W + o * cols;
    for (int64_t k = 0; k < r; k++) {
      const float b = s * B[o * r + k], *a = A + k * cols;
      for (int64_t i = 0; i < cols; i++) w[i] += b * a[i];
    }
  }
}

/* Whether B's two row halves go into entry e exchanged: the pair's layout (the original
 * checkpoint's when found by its original name and orig lists e as swapped there; else the
 * table name's) differs from the order the tensor holds. */
static bool swap_halves(const dit_wtable *t, const dit_wremap *orig, long e, bool by_orig) {
  bool pair_swapped = false;
  for (size_t i = 0; by_orig && orig && orig->swapped && orig->swapped[i]; i++)
    pair_swapped = pair_swapped || !strcmp(orig->swapped[i], t->entries[e].name);
  return pair_swapped != t->entries[e].halves_swapped;
}

/* A pair's part on quantized entry e, kept as a run-time low-rank term: A's r
 * rows appended to a, and s times B's rows row0 .. row0 + N (halves exchanged with swap),
 * transposed, to b^T. */
static dit_status add_lowrank(lora_merge *M, long e, const float *A, const float *B, int64_t r, int64_t row0,
                              bool swap, float s, dit_error *err) {
  const dit_tensor *d = M->t->entries[e].dst;
  const int64_t N = d->shape[0], K = d->shape[1], half = N / 2;
  lowrank_acc *L = &M->lr[e];
  float *a = realloc(L->a, (size_t)((L->R + r) * K) * sizeof *a);
  if (a) L->a = a;
  float *bt = a ? realloc(L->bt, (size_t)((L->R + r) * N) * sizeof *bt) : NULL;
  if (bt) L->bt = bt;
  if (!a || !bt) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory for %s", M->t->entries[e].name);
  memcpy(a + L->R * K, A, (size_t)(r * K) * sizeof *a);
  for (int64_t q = 0; q < r; q++)
    for (int64_t o = 0; o < N; o++) {
      const int64_t src = swap ? (o < half ? o + half : o - half) : row0 + o;
      bt[(L->R + q) * N + o] = s * B[src * r + q];
    }
  L->R += r;
  return DIT_OK;
}

/* One pair into its targets (swap: B's row halves exchanged, one target only). */
static dit_status merge_pair(lora_merge *M, dit_weights *lw, const lora_pair *p, const long *ent, int parts,
                             bool swap, const dit_lora *l, dit_error *err) {
  const dit_st_tensor *a = p->a, *b = p->b;
  if (a->ndim != 2 || b->ndim != 2 || a->shape[0] != b->shape[1])
    return dit_errorf(err, DIT_ERR_FORMAT, "LoRA %s: %s: A %dD [%lld, ...] and B %dD [..., %lld] do not share a rank",
                      l->path, p->module, a->ndim, (long long)a->shape[0], b->ndim,
                      (long long)(b->ndim > 1 ? b->shape[1] : 0));
  const int64_t r = a->shape[0], in = a->shape[1], out = b->shape[0];
  int64_t rows = 0;
  bool fits = true;
  for (int k = 0; k < parts; k++) {
    const dit_tensor *d = M->t->entries[ent[k]].dst;
    fits = fits && d->ndim == 2 && d->shape[1] == in;
    rows += d->shape[0];
  }
  if (!fits || rows != out || (swap && (parts != 1 || out % 2))) {
    const dit_tensor *d0 = M->t->entries[ent[0]].dst;
    return dit_errorf(err, DIT_ERR_FORMAT, "LoRA %s: %s updates [%lld, %lld] but %s is [%lld, %lld]%s", l->path,
                      p->module, (long long)out, (long long)in, M->t->entries[ent[0]].name, (long long)d0->shape[0],
                      (long long)(d0->ndim > 1 ? d0->shape[1] : 0), parts > 1 ? " (one of its parts)" : "");
  }
  float s = (float)l->scale, *A = NULL, *B = NULL, *al = NULL;
  dit_status st = lora_f32(lw, a, l->path, &A, err);
  if (st == DIT_OK) st = lora_f32(lw, b, l->path, &B, err);
  if (st == DIT_OK && p->alpha) {
    st = lora_f32(lw, p->alpha, l->path, &al, err);
    if (st == DIT_OK && st_numel(p->alpha) != 1)
      st = dit_errorf(err, DIT_ERR_FORMAT, "LoRA %s: %s is not one number", l->path, p->alpha->name);
    if (st == DIT_OK) s *= al[0] / (float)r; /* kohya: alpha / rank */
  }
  int64_t row0 = 0;
  for (int k = 0; st == DIT_OK && k < parts; k++) {
    if (dit_dtype_is_quant(M->t->entries[ent[k]].dst->dtype)) {
      st = add_lowrank(M, ent[k], A, B, r, row0, swap, s, err);
      row0 += M->t->entries[ent[k]].dst->shape[0];
      continue;
    }
    float *W = NULL;
    st = merged_of(M, ent[k], &W, err);
    if (st != DIT_OK) break;
    const int64_t n_rows = M->t->entries[ent[k]].dst->shape[0], half = n_rows / 2;
    if (swap) {
      add_ba(W, B + half * r, A, half, in, r, s);
      add_ba(W + half * in, B, A, half, in, r, s);
    } else {
      add_ba(W, B + row0 * r, A, n_rows, in, r, s);
    }
    row0 += n_rows;
  }
  free(A), free(B), free(al);
  return st;
}

/* The pairs of an opened LoRA file (*out malloc'd); keys of no pair into *unknown (a list for
 * the message). */
static dit_status collect_pairs(const dit_weights *lw, const char *path, lora_pair **out, size_t *n_out,
                                char *unknown, size_t ulen, int *n_unknown, dit_error *err) {
  lora_pair *p = calloc(lw->n_tensors ? lw->n_tensors : 1, sizeof *p);
  if (!p) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA %s: out of memory", path);
  size_t n = 0;
  for (size_t i = 0; i < lw->n_tensors; i++) {
    const dit_st_tensor *st = lw->tensors[i];
    size_t ml = 0;
    char kind = key_kind(st->name, &ml);
    if (!kind || ml >= DIT_WNAME_MAX) {
      size_t u = strlen(unknown);
      if ((*n_unknown)++ < 6) snprintf(unknown + u, ulen - u, "%s%s", u ? ", " : "", st->name);
      continue;
    }
    size_t k = 0;
    while (k < n && (strlen(p[k].module) != ml || strncmp(p[k].module, st->name, ml))) k++;
    if (k == n) snprintf(p[n++].module, DIT_WNAME_MAX, "%.*s", (int)ml, st->name);
    if (kind == 'A') p[k].a = st;
    else if (kind == 'B') p[k].b = st;
    else p[k].alpha = st;
  }
  *out = p, *n_out = n;
  return DIT_OK;
}

/* Every pair of one LoRA merged (after all of its pairs were matched). */
static dit_status apply_one(lora_merge *M, const dit_lora *l, const dit_wremap *orig, dit_error *err) {
  if (!l->path || !*l->path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "LoRA: no file given");
  if (!isfinite(l->scale))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "LoRA %s: the scale %g is not a finite number", l->path, l->scale);
  dit_weights *lw = NULL;
  DIT_TRY(dit_weights_open(l->path, NULL, &lw, err));
  lora_pair *p = NULL;
  size_t n = 0;
  char unknown[512] = "";
  int n_unknown = 0;
  dit_status s = collect_pairs(lw, l->path, &p, &n, unknown, sizeof unknown, &n_unknown, err);
  long (*ent)[4] = s == DIT_OK ? calloc(n ? n : 1, sizeof *ent) : NULL;
  int *parts = s == DIT_OK ? calloc(n ? n : 1, sizeof *parts) : NULL;
  bool *swap = s == DIT_OK ? calloc(n ? n : 1, sizeof *swap) : NULL;
  if (s == DIT_OK && (!ent || !parts || !swap)) s = dit_errorf(err, DIT_ERR_NOMEM, "LoRA %s: out of memory", l->path);
  for (size_t i = 0; s == DIT_OK && i < n; i++) {
    bool by_orig = false;
    parts[i] = p[i].a && p[i].b ? match(M->t, orig, p[i].module, ent[i], &by_orig) : 0;
    swap[i] = parts[i] == 1 && swap_halves(M->t, orig, ent[i][0], by_orig);
    if (parts[i]) continue;
    size_t u = strlen(unknown);
    if (n_unknown++ < 6)
      snprintf(unknown + u, sizeof unknown - u, "%s%s%s", u ? ", " : "", p[i].module,
               p[i].a && p[i].b ? "" : (p[i].a ? " (no B)" : " (no A)"));
  }
  if (s == DIT_OK && n_unknown)
    s = dit_errorf(err, DIT_ERR_FORMAT, "LoRA %s: %d key%s match nothing in this model: %s%s", l->path, n_unknown,
                   n_unknown > 1 ? "s" : "", unknown, n_unknown > 6 ? ", ..." : "");
  if (s == DIT_OK && !n) s = dit_errorf(err, DIT_ERR_FORMAT, "LoRA %s: no LoRA pairs in this file", l->path);
  for (size_t i = 0; s == DIT_OK && i < n; i++) s = merge_pair(M, lw, &p[i], ent[i], parts[i], swap[i], l, err);
  free(p), free(ent), free(parts), free(swap);
  dit_weights_close(lw);
  return s;
}

/* Entry e's fp32 copy (or, to restore it, its base tensor) in dtype dt into a new aligned
 * buffer. */
static dit_status to_dtype(const float *f, const dit_tensor *base, dit_dtype dt, size_t n, void **out,
                           dit_error *err) {
  const size_t bytes = n * dit_dtype_size(dt);
  if (posix_memalign(out, 64, bytes ? bytes : 64)) return *out = NULL, dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  if (f) {
    dit_convert_from_f32(*out, f, dt, n);
    return DIT_OK;
  }
  float *tmp = malloc((n ? n : 1) * sizeof *tmp);
  if (!tmp) return free(*out), *out = NULL, dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  dit_convert_to_f32(tmp, base->data, base->dtype, n);
  dit_convert_from_f32(*out, tmp, dt, n);
  free(tmp);
  return DIT_OK;
}

/* The names of the entries now changed into w (replacing the earlier list). */
static dit_status note_changed(lora_merge *M, char (**names)[DIT_WNAME_MAX], size_t *n, dit_error *err) {
  size_t k = 0;
  for (size_t e = 0; e < M->t->n; e++) k += M->merged[e] != NULL;
  *names = k ? malloc(k * sizeof **names) : NULL, *n = 0;
  if (k && !*names) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  for (size_t e = 0; e < M->t->n; e++)
    if (M->merged[e]) snprintf((*names)[(*n)++], DIT_WNAME_MAX, "%s", M->t->entries[e].name);
  return DIT_OK;
}

/* The low-rank terms of this set (one allocation per quantized entry under LoRAs: the
 * dit_lowrank, then a and b) into *mem (n_mem of them; NULL where an entry has none, in
 * *per, indexed like the table). */
static dit_status build_lowranks(lora_merge *M, void ***mem, size_t *n_mem, dit_lowrank ***per, dit_error *err) {
  size_t k = 0;
  for (size_t e = 0; e < M->t->n; e++) k += M->lr[e].R > 0;
  *mem = calloc(k ? k : 1, sizeof **mem), *per = calloc(M->t->n ? M->t->n : 1, sizeof **per), *n_mem = 0;
  if (!*mem || !*per) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  for (size_t e = 0; e < M->t->n; e++) {
    const lowrank_acc *L = &M->lr[e];
    if (!L->R) continue;
    const int64_t N = M->t->entries[e].dst->shape[0], K = M->t->entries[e].dst->shape[1], R = L->R;
    const size_t head = (sizeof(dit_lowrank) + 63) & ~(size_t)63;
    char *blk = malloc(head + (size_t)(R * K + N * R) * sizeof(float));
    if (!blk) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory for %s", M->t->entries[e].name);
    (*mem)[(*n_mem)++] = blk;
    float *a = (float *)(blk + head), *b = a + R * K;
    memcpy(a, L->a, (size_t)(R * K) * sizeof *a);
    for (int64_t o = 0; o < N; o++)
      for (int64_t q = 0; q < R; q++) b[o * R + q] = L->bt[q * N + o];
    dit_lowrank *lr = (dit_lowrank *)blk;
    *lr = (dit_lowrank){dit_tensor_2d(DIT_F32, a, R, K), dit_tensor_2d(DIT_F32, b, N, R)};
    (*per)[e] = lr;
  }
  return DIT_OK;
}

/* A device copy of the low-rank terms in per (t_n entries, NULL where none), in one backend
 * block *dev, each a and b as BF16 (the GPU's linear adds B A into its bf16 expansion of the
 * quantized weight); the dit_lowrank structs then point there. */
static dit_status lowranks_to_device(dit_backend *be, dit_lowrank **per, size_t t_n, void **dev, dit_error *err) {
  size_t bytes = 0, most = 0;
  for (size_t e = 0; e < t_n; e++)
    for (int h = 0; per[e] && h < 2; h++) {
      const size_t n = (size_t)dit_tensor_numel(h ? &per[e]->b : &per[e]->a);
      bytes += (n * 2 + 255) & ~(size_t)255;
      most = n > most ? n : most;
    }
  *dev = NULL;
  if (!bytes) return DIT_OK;
  uint16_t *tmp = malloc(most * 2);
  if (!tmp) return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  dit_status s = be->ops->alloc(be, bytes, dev, err);
  char *at = *dev;
  for (size_t e = 0; s == DIT_OK && e < t_n; e++)
    for (int h = 0; s == DIT_OK && per[e] && h < 2; h++) {
      dit_tensor *t = h ? &per[e]->b : &per[e]->a;
      const size_t n = (size_t)dit_tensor_numel(t);
      dit_convert_from_f32(tmp, t->data, DIT_BF16, n);
      s = be->ops->upload(be, at, tmp, n * 2, err);
      if (s == DIT_OK) s = be->ops->sync(be, err); /* the upload reads tmp until then */
      *t = dit_tensor_2d(DIT_BF16, at, t->shape[0], t->shape[1]);
      t->device = dit_backend_device(be);
      at += (n * 2 + 255) & ~(size_t)255;
    }
  free(tmp);
  if (s != DIT_OK && *dev) be->ops->free(be, *dev), *dev = NULL;
  return s;
}

/* This set's low-rank terms (host blocks, and on a device backend their device copy) replace
 * the earlier ones: the quantized entries point at the new terms or at none. */
static void swap_lowranks(lora_merge *M, dit_lowrank **per, void **lmem, size_t n_lmem, void *dev) {
  for (size_t e = 0; e < M->t->n; e++) {
    dit_tensor *d = M->t->entries[e].dst;
    if (dit_dtype_is_quant(d->dtype)) d->lowrank = per[e];
  }
  dit_model_weights *w = M->w;
  for (size_t j = 0; j < w->n_lowrank_mem; j++) free(w->lowrank_mem[j]);
  free(w->lowrank_mem);
  if (w->lowrank_dev) M->be->ops->free(M->be, w->lowrank_dev);
  w->lowrank_mem = lmem, w->n_lowrank_mem = n_lmem, w->lowrank_dev = dev;
}

/* Host: every new tensor is made before any pointer changes (a failure leaves the model as it
 * was); then the merged ones point at their copies, the restored ones back into the files,
 * the quantized ones get this set's low-rank terms (or none), and the earlier copies are
 * freed. */
static dit_status write_back_host(lora_merge *M, dit_error *err) {
  size_t k = 0;
  for (size_t e = 0; e < M->t->n; e++) k += M->merged[e] != NULL;
  void **mem = calloc(k ? k : 1, sizeof *mem);
  char(*names)[DIT_WNAME_MAX] = NULL;
  size_t n_names = 0;
  dit_status s = mem ? note_changed(M, &names, &n_names, err) : dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  for (size_t e = 0, j = 0; s == DIT_OK && e < M->t->n; e++) {
    const dit_tensor *d = M->t->entries[e].dst;
    if (M->merged[e]) s = to_dtype(M->merged[e], NULL, d->dtype, (size_t)dit_tensor_numel(d), &mem[j++], err);
  }
  void **lmem = NULL;
  size_t n_lmem = 0;
  dit_lowrank **per = NULL;
  if (s == DIT_OK) s = build_lowranks(M, &lmem, &n_lmem, &per, err);
  if (s != DIT_OK) {
    for (size_t j = 0; mem && j < k; j++) free(mem[j]);
    for (size_t j = 0; j < n_lmem; j++) free(lmem[j]);
    free(mem), free(names), free(lmem), free(per);
    return s;
  }
  for (size_t e = 0, j = 0; e < M->t->n; e++) {
    dit_tensor *d = M->t->entries[e].dst;
    if (M->merged[e]) d->data = mem[j++];
    else if (M->restore[e].data) d->data = M->restore[e].data;
  }
  swap_lowranks(M, per, lmem, n_lmem, NULL);
  free(per);
  dit_model_weights *w = M->w;
  for (size_t j = 0; j < w->n_lora_mem; j++) free(w->lora_mem[j]);
  free(w->lora_mem), free(w->lora_names);
  w->lora_mem = mem, w->n_lora_mem = k;
  w->lora_names = names, w->n_lora_names = n_names;
  return DIT_OK;
}

/* Device: the merged tensors and the restored ones uploaded in place (the addresses a
 * captured graph holds stay); the low-rank terms of quantized tensors get new memory, so a
 * model drops its captured graphs when it had or has such terms. A device error part way
 * leaves the weights mixed, as any device error leaves the context unusable. */
static dit_status write_back_device(lora_merge *M, dit_error *err) {
  char(*names)[DIT_WNAME_MAX] = NULL;
  size_t n_names = 0;
  DIT_TRY(note_changed(M, &names, &n_names, err));
  dit_status s = DIT_OK;
  for (size_t e = 0; s == DIT_OK && e < M->t->n; e++) {
    dit_tensor *d = M->t->entries[e].dst;
    const dit_tensor *b = &M->restore[e];
    if (!M->merged[e] && !b->data) continue;
    void *buf = NULL;
    const size_t n = (size_t)dit_tensor_numel(d);
    const bool as_is = !M->merged[e] && b->dtype == d->dtype;
    if (!as_is) s = to_dtype(M->merged[e], b, d->dtype, n, &buf, err);
    if (s == DIT_OK) s = M->be->ops->upload(M->be, d->data, as_is ? b->data : buf, dit_tensor_nbytes(d), err);
    if (s == DIT_OK) s = M->be->ops->sync(M->be, err); /* the upload reads its source until then */
    free(buf);
  }
  void **lmem = NULL, *dev = NULL;
  size_t n_lmem = 0;
  dit_lowrank **per = NULL;
  if (s == DIT_OK) s = build_lowranks(M, &lmem, &n_lmem, &per, err);
  if (s == DIT_OK) s = lowranks_to_device(M->be, per, M->t->n, &dev, err);
  if (s == DIT_OK) s = M->be->ops->sync(M->be, err); /* nothing queued still reads the earlier terms */
  if (s != DIT_OK) {
    for (size_t j = 0; j < n_lmem; j++) free(lmem[j]);
    if (dev) M->be->ops->free(M->be, dev);
    free(lmem), free(per), free(names);
    return s;
  }
  swap_lowranks(M, per, lmem, n_lmem, dev);
  free(per);
  free(M->w->lora_names);
  M->w->lora_names = names, M->w->n_lora_names = n_names;
  return DIT_OK;
}

/* Marks the entries an earlier set changed (their base is read from the checkpoint). */
static void mark_earlier(lora_merge *M) {
  for (size_t e = 0; e < M->t->n; e++)
    for (size_t j = 0; j < M->w->n_lora_names && !M->was[e]; j++)
      M->was[e] = M->t->entries[e].dst->data && !strcmp(M->w->lora_names[j], M->t->entries[e].name);
}

/* The base tensors of the entries an earlier set changed and this one leaves alone. */
static dit_status read_restores(lora_merge *M, dit_error *err) {
  for (size_t e = 0; e < M->t->n; e++)
    if (M->was[e] && !M->merged[e]) DIT_TRY(base_tensor(M, (long)e, &M->restore[e], err));
  return DIT_OK;
}

dit_status dit_lora_apply(dit_backend *be, const dit_wtable *t, const dit_lora *loras, int n, const dit_wremap *orig,
                          dit_model_weights *w, dit_error *err) {
  if (dit_lora_nothing_to_do(w, n)) return DIT_OK;
  if (n < 0 || n > DIT_MAX_LORAS) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%d LoRAs (at most %d)", n, DIT_MAX_LORAS);
  const size_t ne = t->n ? t->n : 1;
  lora_merge M = {t,    calloc(ne, sizeof(float *)), be, w, calloc(ne, sizeof(bool)), calloc(ne, sizeof(dit_tensor)),
                  NULL, false, calloc(ne, sizeof(lowrank_acc))};
  if (!M.merged || !M.was || !M.restore || !M.lr) {
    free(M.merged), free(M.was), free(M.restore), free(M.lr);
    return dit_errorf(err, DIT_ERR_NOMEM, "LoRA: out of memory");
  }
  mark_earlier(&M);
  dit_status s = DIT_OK;
  for (int i = 0; s == DIT_OK && i < n; i++) s = apply_one(&M, &loras[i], orig, err);
  if (s == DIT_OK) s = read_restores(&M, err);
  if (s == DIT_OK) s = dit_backend_is_host(be) ? write_back_host(&M, err) : write_back_device(&M, err);
  for (size_t e = 0; e < t->n; e++) free(M.merged[e]), free(M.lr[e].a), free(M.lr[e].bt);
  free(M.merged), free(M.was), free(M.restore), free(M.lr);
  if (M.base_owned) dit_weights_close(M.base);
  return s;
}
