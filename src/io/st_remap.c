/* Remapping a weight set's names (see safetensors.h, "other programs' names"): every tensor
 * is copied into w->renamed under its new name (split tensors as several row ranges), then
 * w->tensors is rebuilt from those copies, sorted, with collisions reported by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

bool dit_wname_replace(char *dst, size_t len, const char *src, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to), o = 0;
  if (!fl) return snprintf(dst, len, "%s", src) < (int)len;
  for (const char *p = src; *p;) {
    const char *q = strstr(p, from);
    size_t keep = q ? (size_t)(q - p) : strlen(p);
    if (o + keep + (q ? tl : 0) >= len) return false;
    memcpy(dst + o, p, keep);
    o += keep;
    if (!q) break;
    memcpy(dst + o, to, tl);
    o += tl;
    p = q + fl;
  }
  dst[o] = 0;
  return true;
}

bool dit_wname_within(const char *name, const char *within) {
  return !within || !strncmp(name, within, strlen(within));
}

bool dit_wname_rename(const dit_wrename *r, size_t n, bool backward, const char *src, char *dst, size_t len) {
  char a[DIT_WNAME_MAX + 1], b[DIT_WNAME_MAX + 1];
  if (snprintf(a, sizeof a, "^%s", src) >= (int)sizeof a) return false;
  for (size_t j = 0; j < n; j++) {
    const dit_wrename *e = &r[backward ? n - 1 - j : j];
    if (!dit_wname_within(a[0] == '^' ? a + 1 : a, e->within)) continue;
    if (!dit_wname_replace(b, sizeof b, a, backward ? e->to : e->from, backward ? e->from : e->to)) return false;
    memcpy(a, b, sizeof a);
  }
  return snprintf(dst, len, "%s", a[0] == '^' ? a + 1 : a) < (int)len;
}

static bool ends_with(const char *s, const char *suffix, size_t *stem) {
  size_t n = strlen(s), m = strlen(suffix);
  *stem = n - m;
  return n >= m && !strcmp(s + n - m, suffix);
}

static bool dropped(const char *name, const char *const *drop) {
  for (; drop && *drop; drop++)
    if (!strcmp(name, *drop)) return true;
  return false;
}

/* The new name of `name` before splitting. */
static dit_status new_name(const dit_wremap *r, const char *name, char *out, size_t len, dit_error *err) {
  size_t pl = r->strip_prefix ? strlen(r->strip_prefix) : 0;
  const char *src = pl && !strncmp(name, r->strip_prefix, pl) ? name + pl : name;
  if (strlen(src) >= DIT_WNAME_MAX)
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor name \"%.64s...\" is too long (at most %d bytes)", name,
                      DIT_WNAME_MAX - 1);
  if (!dit_wname_rename(r->rename, r->n_rename, false, src, out, len))
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\": renamed, its name is too long", name);
  return DIT_OK;
}

static dit_status push(dit_weights *w, size_t cap, const dit_st_tensor *src, const char *name, dit_error *err) {
  if (w->n_renamed == cap) return dit_errorf(err, DIT_ERR_INVALID_ARG, "remap: table overflow"); /* not reached */
  dit_st_tensor *t = &w->renamed[w->n_renamed];
  *t = *src;
  t->name = strdup(name);
  if (!t->name) return dit_errorf(err, DIT_ERR_NOMEM, "remap: out of memory");
  w->n_renamed++;
  return DIT_OK;
}

/* Appends the n row-range parts of t named stem + parts[i]. */
static dit_status push_split(dit_weights *w, size_t cap, const dit_st_tensor *t, const char *name, size_t stem,
                             const dit_wsplit *sp, dit_error *err) {
  const int64_t unit = (int64_t)sp->n * (sp->group_rows > 0 ? sp->group_rows : 1);
  if (t->ndim < 1 || t->shape[0] % unit) {
    if (sp->group_rows > 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\" (%d dims, %lld rows) is not groups of %d x %lld rows",
                        t->name, t->ndim, t->ndim ? (long long)t->shape[0] : 0LL, sp->n, (long long)sp->group_rows);
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\" (%d dims, %lld rows) cannot be split in %d equal parts",
                      t->name, t->ndim, t->ndim ? (long long)t->shape[0] : 0LL, sp->n);
  }
  const uint64_t part = (t->end - t->begin) / (uint64_t)sp->n;
  const uint64_t run = sp->group_rows > 0 ? (t->end - t->begin) / (uint64_t)t->shape[0] * (uint64_t)sp->group_rows : 0;
  for (int i = 0; i < sp->n; i++) {
    char pn[DIT_WNAME_MAX];
    if (snprintf(pn, sizeof pn, "%.*s%s", (int)stem, name, sp->parts[i]) >= (int)sizeof pn)
      return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\": split, its name is too long", t->name);
    dit_st_tensor v = *t;
    v.shape[0] = t->shape[0] / sp->n;
    v.begin = t->begin + part * (uint64_t)i;
    v.end = v.begin + part;
    v.data = (const char *)t->data + part * (uint64_t)i;
    if (run) { /* part i: run bytes of every group of n runs */
      char *copy = dit_weights_alloc(w, part ? (size_t)part : 1);
      if (!copy) return dit_errorf(err, DIT_ERR_NOMEM, "tensor \"%s\": no memory for its part %d", t->name, i);
      for (uint64_t g = 0; g < part / run; g++)
        memcpy(copy + g * run, (const char *)t->data + (g * (uint64_t)sp->n + (uint64_t)i) * run, (size_t)run);
      v.data = copy;
    }
    DIT_TRY(push(w, cap, &v, pn, err));
  }
  return DIT_OK;
}

/* A split weight stored already split, as stable-diffusion.cpp's converter writes one from
 * diffusers' parts: "X.qkv.weight" (part 0) beside "X.qkv.weight.1", "X.qkv.weight.2".
 * True when name is "<stem><suffix>.k". */
static bool part_of(const char *name, const char *suffix, size_t *stem) {
  size_t n = strlen(name), m = strlen(suffix);
  if (n < m + 2 || name[n - 2] != '.' || name[n - 1] < '1' || name[n - 1] > '9') return false;
  *stem = n - m - 2;
  return !strncmp(name + *stem, suffix, m);
}

/* Which part of sp a tensor (orig: its stored name; name: its new one, *stem before sp's
 * suffix) is when its weight is stored already split: k for "<suffix>.k", 0 for the suffix
 * itself when "<orig>.1" is stored too; -1 when it is one whole tensor to split. */
static int presplit_part(const dit_weights *w, const char *orig, const char *name, const dit_wsplit *sp,
                         size_t *stem) {
  if (*stem + strlen(sp->suffix) + 2 == strlen(name)) return name[strlen(name) - 1] - '0';
  char probe[DIT_WNAME_MAX];
  if (snprintf(probe, sizeof probe, "%s.1", orig) >= (int)sizeof probe) return -1;
  return dit_weights_find(w, probe) ? 0 : -1;
}

/* Appends t as part k of sp (stored already split), named stem + parts[k]. */
static dit_status push_part(dit_weights *w, size_t cap, const dit_st_tensor *t, const char *name, size_t stem,
                            const dit_wsplit *sp, int k, dit_error *err) {
  if (k >= sp->n)
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\": part %d of a weight stored in %d parts", t->name, k, sp->n);
  char pn[DIT_WNAME_MAX];
  if (snprintf(pn, sizeof pn, "%.*s%s", (int)stem, name, sp->parts[k]) >= (int)sizeof pn)
    return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\": split, its name is too long", t->name);
  return push(w, cap, t, pn, err);
}

/* An fp8 weight's per-tensor scale (or input scale), "S.scale_weight" beside "S.weight",
 * follows its weight through a split: the same one-element tensor under each part's name.
 * True (with the split and the suffix) when name is such a scale of a split weight. */
static bool split_scale(const dit_wremap *r, const char *name, const dit_wsplit **sp, const char **sfx) {
  static const char *const scales[] = {".scale_weight", ".weight_scale", ".scale_input", ".input_scale"};
  for (int k = 0; k < 4; k++) {
    size_t stem, wstem;
    char wn[DIT_WNAME_MAX];
    if (!ends_with(name, scales[k], &stem) || snprintf(wn, sizeof wn, "%.*s.weight", (int)stem, name) >= (int)sizeof wn)
      continue;
    for (size_t i = 0; i < r->n_split; i++)
      if (dit_wname_within(wn, r->split[i].within) && ends_with(wn, r->split[i].suffix, &wstem) &&
          ends_with(r->split[i].suffix, ".weight", &stem)) {
        *sp = &r->split[i], *sfx = scales[k];
        return true;
      }
  }
  return false;
}

/* Appends the scale t (named for a split weight, see split_scale) once per part. */
static dit_status push_split_scale(dit_weights *w, size_t cap, const dit_st_tensor *t, const char *name,
                                   const dit_wsplit *sp, const char *sfx, dit_error *err) {
  size_t stem, sstem;
  ends_with(name, sfx, &stem);
  ends_with(sp->suffix, ".weight", &sstem); /* the suffix without ".weight" ends the stem */
  stem -= sstem;
  for (int i = 0; i < sp->n; i++) {
    size_t pstem;
    char pn[DIT_WNAME_MAX];
    if (!ends_with(sp->parts[i], ".weight", &pstem) ||
        snprintf(pn, sizeof pn, "%.*s%.*s%s", (int)stem, name, (int)pstem, sp->parts[i], sfx) >= (int)sizeof pn)
      return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\": cannot name its copy for a split weight", t->name);
    DIT_TRY(push(w, cap, t, pn, err));
  }
  return DIT_OK;
}

static int cmp_ptr_name(const void *a, const void *b) {
  return strcmp((*(const dit_st_tensor *const *)a)->name, (*(const dit_st_tensor *const *)b)->name);
}

dit_status dit_weights_remap(dit_weights *w, const dit_wremap *r, dit_error *err) {
  if (w->renamed) return dit_errorf(err, DIT_ERR_INVALID_ARG, "remap: this weight set is already remapped");
  uint64_t max_n = 1, cap;
  for (size_t k = 0; k < r->n_split; k++)
    if ((uint64_t)r->split[k].n > max_n) max_n = (uint64_t)r->split[k].n;
  if (dit_mul_overflow_u64(w->n_tensors, max_n, &cap) || cap > SIZE_MAX / sizeof *w->renamed)
    return dit_errorf(err, DIT_ERR_NOMEM, "remap: too many tensors");
  w->renamed = calloc(cap ? (size_t)cap : 1, sizeof *w->renamed);
  if (!w->renamed) return dit_errorf(err, DIT_ERR_NOMEM, "remap: cannot allocate %llu entries", (unsigned long long)cap);
  for (size_t i = 0; i < w->n_tensors; i++) {
    const dit_st_tensor *t = w->tensors[i];
    char name[DIT_WNAME_MAX];
    DIT_TRY(new_name(r, t->name, name, sizeof name, err));
    if (dropped(name, r->drop)) continue;
    const dit_wsplit *sp = NULL;
    const char *sfx = NULL;
    size_t stem = 0;
    for (size_t k = 0; k < r->n_split && !sp; k++)
      if (dit_wname_within(name, r->split[k].within) &&
          (ends_with(name, r->split[k].suffix, &stem) || part_of(name, r->split[k].suffix, &stem)))
        sp = &r->split[k];
    int part = sp ? presplit_part(w, t->name, name, sp, &stem) : -1;
    if (part >= 0) DIT_TRY(push_part(w, cap, t, name, stem, sp, part, err));
    else if (sp) DIT_TRY(push_split(w, cap, t, name, stem, sp, err));
    else if (split_scale(r, name, &sp, &sfx)) DIT_TRY(push_split_scale(w, cap, t, name, sp, sfx, err));
    else DIT_TRY(push(w, cap, t, name, err));
  }
  const dit_st_tensor **tv = malloc((w->n_renamed ? w->n_renamed : 1) * sizeof *tv);
  if (!tv) return dit_errorf(err, DIT_ERR_NOMEM, "remap: out of memory");
  for (size_t i = 0; i < w->n_renamed; i++) tv[i] = &w->renamed[i];
  qsort(tv, w->n_renamed, sizeof *tv, cmp_ptr_name);
  free(w->tensors);
  w->tensors = tv;
  w->n_tensors = w->n_renamed;
  for (size_t i = 1; i < w->n_tensors; i++)
    if (!strcmp(tv[i - 1]->name, tv[i]->name))
      return dit_errorf(err, DIT_ERR_FORMAT, "two tensors are both named \"%s\" after renaming", tv[i]->name);
  return DIT_OK;
}
